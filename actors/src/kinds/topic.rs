//! The topic kind.

use super::{Capabilities, KindActor, KindSpec};

/// A topic: every subscription gets every message; durable subscriptions keep a
/// backlog while offline (JMS publish/subscribe).
pub static TOPIC: KindSpec = KindSpec {
    name: "topic",
    plural: "topics",
    stomp_prefix: "/topic/",
    advisory: "Topic",
    capabilities: Capabilities {
        durable_subscriptions: true,
        point_to_point: false,
        browse: false,
        move_target: false,
        shared_auto_acks: true,
        indexed_headers: false,
        last_value_header: None,
        temporary: false,
        stored_while_asleep: false,
        group_reads_topic: false,
    },
    actor: KindActor::Topic,
};
