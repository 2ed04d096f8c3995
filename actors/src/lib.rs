//! # ebb-actors: Ebb's actors
//!
//! Each piece of broker state has one owner, an actix actor, and changes only through
//! messages to it. Logic that can live outside an actor does, in plain structs with
//! their own unit tests (the parts every destination shares, subscription cursors,
//! policies, the housekeeping budget); an actor is a thin shell that wires them to its
//! mailbox.
//!
//! ## Map of the crate
//!
//! | actor | owns | file |
//! |---|---|---|
//! | [`BrokerActor`](broker::BrokerActor) (registry) | one map of running destinations by [`DestinationKey`], policies, shutdown | `broker.rs` |
//! | [`TopicActor`](topic::TopicActor) | subscriptions, durable cursors, cleanup of acked rows | `topic.rs` |
//! | [`QueueActor`](queue::QueueActor) | consumers, its cursor, redelivery counts, dead letters | `queue.rs` |
//! | [`StoreActor`] | the queue of store writes; the only writer (group commit) | `store_actor.rs` |
//! | [`WildcardActor`](wildcard::WildcardActor) | one subscription to a wildcard destination: an attachment per matching destination, one delivery order, acks routed back | `wildcard.rs` |
//!
//! Plain parts:
//! - [`destination`]: what every destination shares — [`DestinationKey`] (the one name
//!   of a destination), the publish-order buffer, prepared messages, the housekeeping
//!   schedule, the shared counters — and the handlers built on them. A destination
//!   actor writes only its dispatch and its expiry page.
//! - [`kinds`]: the kind table. Each kind of destination is declared once, in a file of
//!   `kinds/` (name, STOMP prefix, admin API segment, [`Capabilities`](kinds::Capabilities),
//!   the actor that runs it), and listed in [`kinds::KINDS`]; the rest of Ebb asks a
//!   kind what it can do, never which kind it is. A kind that an existing actor runs is
//!   its file plus its line in the table: the last-value queue (`lvq://`, keyed by
//!   `_AMQ_LVQ_NAME`) is a queue whose capabilities name a last-value header, and the
//!   queue actor, its cursor and the store replace by that header wherever a kind
//!   names one. A kind with a dispatch of its own adds its actor and a variant of
//!   [`kinds::KindActor`] and of the registry's
//!   [`DestinationAddr`](broker::DestinationAddr).
//! - [`subscription`] (one topic subscription's cursor and credit), [`queue_cursor`] (a
//!   queue's cursor), [`queue_held`] (where a queue reads back the messages its
//!   redelivery back-off holds in their rows), [`message_groups`] (which consumer owns each message group),
//!   [`selector`] (JMS message selectors: parser and three-valued evaluation), [`usage`] (memory limits and producer flow control), [`policy`]
//!   (ActiveMQ-style policy map, in `destination/policy.rs`), [`housekeeping`] (the fair budget of expiry pages),
//!   [`messages`] (what actors exchange).
//! - [`selector`]: JMS message selectors (`color = 'red' AND weight > 2`), parsed once
//!   and evaluated per message with three-valued logic; no actor, no allocation per
//!   evaluation.
//!
//! ## Await ordering
//! Which actor may `send().await` which, so that request cycles cannot deadlock:
//! - embedding API → broker (registry) → topic or queue → store actor.
//! - A queue hands a dead message to the registry ([`RouteDeadLetter`], through a
//!   `Recipient`: the queue does not know the registry's type), from a spawned future
//!   (its mailbox stays free); the registry answers with a future that sends it on to
//!   the dead-letter queue, so the registry's mailbox stays free too. A dead-letter
//!   queue never dead-letters, so no cycle of queues can form.
//! - A wildcard subscription: the embedding API → its [`WildcardActor`](wildcard::WildcardActor)
//!   → the matching destinations (a `Subscribe` per attachment, awaited in spawned
//!   futures; acks and NACKs passed on). The registry tells it of new matching
//!   destinations with `do_send` only, and never awaits it.
//! - A topic feeds its consumer groups through the registry
//!   ([`FeedGroups`](messages::FeedGroups), then
//!   [`GroupMessages`](messages::GroupMessages) to each running group's queue), and a
//!   group's queue tells its topic's cleanup through the registry
//!   ([`GroupAcked`](messages::GroupAcked)): `do_send` only, never awaited.
//! - The store actor sends to no actor; it only awaits the database.
//! - A destination awaits the store only outside its mailbox: a publish's or an ack's
//!   store write runs as a task of its own whose result comes back through the
//!   destination's [`Completions`](destination::Completions) channel (a
//!   [`PublishTicket`](destination::PublishTicket) or an ack's answer resolves after
//!   it), other reads in spawned actor futures; never while holding its mailbox
//!   (`ctx.wait` is used only at start: a topic's load, with the subscriptions of
//!   wildcards it creates through the store actor, and the registry's read of the
//!   wildcard definitions; and for a topic's binding or unbinding of a consumer group,
//!   one store actor write, so that no publish comes between it and the group's mark). Publishes are answered at once with their ticket, so a producer that awaits the answers one by one keeps
//!   its order without waiting for each commit.
//!
//! [`RouteDeadLetter`]: messages::RouteDeadLetter

pub mod addr;
pub mod broker;
pub mod destination;
pub mod error;
pub mod events;
pub mod housekeeping;
pub mod kinds;
pub mod message;
pub mod message_groups;
pub mod messages;
pub mod queue;
pub mod queue_cursor;
pub mod queue_held;
pub mod scheduled;
pub mod selector;
pub mod store_actor;
pub mod subscription;
pub mod topic;
pub mod usage;
pub mod wildcard;

pub use destination::policy;
pub use destination::{DestinationKey, DestinationKind};
pub use error::ActorError;
pub use store_actor::{StoreActor, StoreActorConfig, StoreHandle};
