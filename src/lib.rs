//! # Ebb: a message-broker core
//!
//! Topics with durable subscriptions and persistent messages in a SQL store (SQLite
//! embedded, PostgreSQL for production), built from actix actors, in the line of
//! ActiveMQ Classic, without its two expiry faults: expiry reads bounded pages, and it
//! never acks a live message.
//!
//! Map of Ebb (DESIGN.md has the whole picture):
//! - [`ebb_store`] (`store/`): the schema, every SQL statement, the async store API.
//! - [`ebb_actors`] (`actors/`): the actors: broker registry, topics, the store actor.
//! - this crate (`src/`): the embedding API ([`Broker`]), the `ebb` binary ([`cli`],
//!   [`config`]), and STOMP: the wire codec ([`stomp`], no broker types) and the TCP
//!   transport ([`transport`]).
//! - operators' views: snapshots ([`stats`], [`Broker::stats`]), the Prometheus
//!   endpoint ([`metrics`]) and `ebb stat`, which reads it ([`stat`]).

pub mod auth;
pub mod broker;
pub mod cli;
pub mod config;
pub mod error;
pub mod metrics;
pub mod soak;
pub mod stat;
pub mod stats;
pub mod stomp;
#[cfg(feature = "test-util")]
pub mod test_util;
pub mod transport;

pub use broker::{
    AckMode, Broker, BrokerConfig, BrowsedMessage, Destination, DestinationFlow, Expiration,
    Message, Received, SendReceipt, Space, SubscribeOptions, Subscription, UsageConfig,
    UsageSnapshot,
};
pub use ebb_actors::messages::{QueueStats, TopicStats};
pub use ebb_actors::policy::{Policy, PolicyEntry, PolicyMap};
pub use error::Error;

pub use ebb_actors as actors;
pub use ebb_store as store;

/// The README's code blocks, run as doc tests so its example stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
