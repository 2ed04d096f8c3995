//! The last-value queue kind: a queue that keeps, per value of the `_AMQ_LVQ_NAME`
//! header, only the newest message (Artemis's last-value queue, whose key header it
//! takes; RabbitMQ's `x-last-value`). STOMP destination `/lvq/NAME`, store key
//! `lvq://NAME`, admin API segment `lvqs`.
//!
//! Everything else is a queue's: competing consumers, prefetch, acks, redelivery and
//! the dead-letter queue (`queue://DLQ.NAME`), selectors, browsing, expiry, message
//! groups. A newer message with a key replaces the older one in the store, in the
//! transaction that commits the newer one (so a restart finds the newest value only);
//! one that waits in memory is taken out; one a consumer holds stays with it but is
//! not redelivered if it comes back; one held back by the redelivery back-off (in the
//! store under a scheduled xid, or in memory) is deleted by the newer one's arrival, so
//! it never comes back later as the newest. "Newer" is arrival order at the broker (a
//! transaction's message arrives at its commit). Messages without the header are kept as on a
//! queue. A message moved in by an operator (or retried from a dead-letter queue)
//! keeps its arrival at the broker through every move, and the move's store
//! transaction compares it with the stored value of its key (committed, or held back):
//! if that one arrived after it, the moved one is dropped (superseded, counted
//! `replaced`, and reported by the move); otherwise it replaces by its key as a sent
//! one does ([`ebb_store::WriteOp::DeadLetter`]).

use super::{Capabilities, KindActor, KindSpec};

/// The header whose value keys a last-value queue (Artemis's `_AMQ_LVQ_NAME`).
pub const LAST_VALUE_HEADER: &str = "_AMQ_LVQ_NAME";

/// A last-value queue: a queue that keeps one waiting message per value of
/// [`LAST_VALUE_HEADER`].
pub static LAST_VALUE_QUEUE: KindSpec = KindSpec {
    name: "lvq",
    plural: "lvqs",
    stomp_prefix: "/lvq/",
    advisory: "LastValueQueue",
    capabilities: Capabilities {
        durable_subscriptions: false,
        point_to_point: true,
        browse: true,
        move_target: true,
        shared_auto_acks: false,
        indexed_headers: true,
        last_value_header: Some(LAST_VALUE_HEADER),
        temporary: false,
        stored_while_asleep: false,
        group_reads_topic: false,
    },
    actor: KindActor::Queue,
};
