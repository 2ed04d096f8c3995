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
//! - this crate (`src/`): the embedding API ([`Broker`]), the configuration file
//!   ([`config`]), and STOMP: the wire codec ([`stomp`], no broker types) and the TCP
//!   transport ([`transport`]).
//! - operators' views: snapshots ([`stats`], [`Broker::stats`]), the process's memory
//!   ([`process`]) and the Prometheus endpoint ([`metrics`]).
//! - the `ebb` binary's commands (`cli`: `serve`, `stat`, `soak`, `passwd`, `check`),
//!   behind the `cli` cargo feature, on by default. With `default-features = false` an
//!   embedder compiles neither them nor what only they need (clap, plotters,
//!   indicatif, ureq, anyhow; the Prometheus endpoint is its own feature,
//!   `prometheus`). Nothing outside `cli` imports from it.

pub mod auth;
pub mod broker;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod error;
pub mod metrics;
pub mod process;
pub mod stats;
pub mod stomp;
pub mod transport;

pub use broker::{
    AckMode, Broker, BrokerConfig, BrowsedMessage, DestinationFlow, Expiration, Message, Received,
    SendReceipt, Space, SubscribeOptions, Subscription, ToDestination, Transaction, UsageConfig,
    UsageSnapshot,
};
pub use ebb_actors::destination::{DestinationKey, DestinationKind};
pub use ebb_actors::messages::{QueueStats, TopicStats};
pub use ebb_actors::policy::{Policy, PolicyEntry, PolicyMap};
pub use error::Error;

pub use ebb_actors as actors;
pub use ebb_store as store;

/// The README's code blocks, run as doc tests so its example stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
