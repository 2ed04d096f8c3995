//! # ebb-actors: Ebb's actors
//!
//! Each piece of broker state has one owner, an actix actor, and changes only through
//! messages to it. Logic that can live outside an actor does, in plain structs with
//! their own unit tests (subscription cursors, policies, the housekeeping budget).
//!
//! | actor | owns | file |
//! |---|---|---|
//! | [`BrokerActor`](broker::BrokerActor) | destination name → actor, policies, shutdown | `broker.rs` |
//! | [`TopicActor`](topic::TopicActor) | subscriptions, cursors, expiry timer and state | `topic.rs` |
//! | [`QueueActor`](queue::QueueActor) | consumers, its cursor, redelivery counts, expiry timer | `queue.rs` |
//! | [`StoreActor`] | the queue of store writes; the only writer | `store_actor.rs` |
//!
//! Plain parts: [`subscription`] (one subscription's cursor and credit), [`queue_cursor`]
//! (a queue's cursor), [`usage`] (memory limits and producer flow control), [`policy`]
//! (ActiveMQ-style policy map), [`housekeeping`] (the fair budget of expiry pages),
//! [`messages`] (what actors exchange).
//!
//! ## Await ordering
//! Which actor may `send().await` which, so that request cycles cannot deadlock:
//! - embedding API → broker → topic or queue → store actor.
//! - A queue asks the broker for its dead-letter queue and sends it the dead message,
//!   both from a spawned future (its mailbox stays free); a dead-letter queue never
//!   dead-letters, so no cycle of queues can form.
//! - The store actor sends to no actor; it only awaits the database.
//! - A topic awaits the store only inside spawned actor futures, never while holding
//!   its mailbox (`ctx.wait` is used once, at start, for a store read).

pub mod broker;
pub mod destination;
pub mod error;
pub mod housekeeping;
pub mod messages;
pub mod policy;
pub mod queue;
pub mod queue_cursor;
pub mod store_actor;
pub mod subscription;
pub mod topic;
pub mod usage;

pub use destination::{DestinationKey, DestinationKind};
pub use error::ActorError;
pub use store_actor::{StoreActor, StoreActorConfig, StoreHandle};
