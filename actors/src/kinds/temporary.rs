//! The temporary kinds: a queue or a topic that belongs to the connection that made it
//! (JMS `TemporaryQueue` / `TemporaryTopic`; the reply address of request/reply).
//!
//! A client names one in its own namespace (STOMP `/temp-queue/NAME`,
//! `/temp-topic/NAME`, as ActiveMQ and RabbitMQ); the broker gives it a name no other
//! connection has and no one can guess (`temp-queue://<broker>-<connection>-<128
//! random bits>.NAME`), and others reach it by that name, in ActiveMQ's STOMP form
//! `/remote-temp-queue/...` (the `reply-to` header of a request carries it). Only the
//! owning connection may consume from it; a client given its name may send to it while
//! it exists (rights: `[temp_destination_authorization_entry]`, as ActiveMQ's
//! `tempDestinationAuthorizationEntry`); it is deleted with its messages when its
//! connection ends, and none survives a restart of the broker. The rules are the
//! broker's (`ebb::Broker::temporary`); the table only says which kinds they apply to
//! ([`Capabilities::temporary`]). Everything else is a queue's or a topic's.

use super::{Capabilities, KindActor, KindSpec};

/// A temporary queue: a queue owned by one connection (JMS `TemporaryQueue`).
pub static TEMP_QUEUE: KindSpec = KindSpec {
    name: "temp-queue",
    plural: "temp-queues",
    stomp_prefix: "/remote-temp-queue/",
    advisory: "TempQueue",
    capabilities: Capabilities {
        durable_subscriptions: false,
        point_to_point: true,
        browse: true,
        move_target: false,
        shared_auto_acks: false,
        indexed_headers: true,
        last_value_header: None,
        temporary: true,
        stored_while_asleep: false,
        group_reads_topic: false,
    },
    actor: KindActor::Queue,
};

/// A temporary topic: a topic owned by one connection (JMS `TemporaryTopic`), without
/// durable subscriptions.
pub static TEMP_TOPIC: KindSpec = KindSpec {
    name: "temp-topic",
    plural: "temp-topics",
    stomp_prefix: "/remote-temp-topic/",
    advisory: "TempTopic",
    capabilities: Capabilities {
        durable_subscriptions: false,
        point_to_point: false,
        browse: false,
        move_target: false,
        shared_auto_acks: true,
        indexed_headers: false,
        last_value_header: None,
        temporary: true,
        stored_while_asleep: false,
        group_reads_topic: false,
    },
    actor: KindActor::Topic,
};
