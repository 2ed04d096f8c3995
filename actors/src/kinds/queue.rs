//! The queue kind.

use super::{Capabilities, KindActor, KindSpec};

/// A queue: each message to one consumer, kept until acked (JMS point to point).
pub static QUEUE: KindSpec = KindSpec {
    name: "queue",
    plural: "queues",
    stomp_prefix: "/queue/",
    advisory: "Queue",
    capabilities: Capabilities {
        durable_subscriptions: false,
        point_to_point: true,
        browse: true,
        move_target: true,
        shared_auto_acks: false,
        indexed_headers: true,
        last_value_header: None,
        temporary: false,
        stored_while_asleep: true,
        group_reads_topic: true,
    },
    actor: KindActor::Queue,
};
