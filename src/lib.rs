//! # Ebb: a message-broker core
//!
//! Topics with durable subscriptions and persistent messages in a SQL store (SQLite
//! embedded, PostgreSQL for production), built from actix actors, in the line of
//! ActiveMQ Classic, without its two expiry faults: expiry reads bounded pages, and it
//! never acks a live message.
//!
//! Map of Ebb (DESIGN.md has the whole picture):
//! - [`ebb_store`] (`store/`): the schema, every SQL statement, the async store API.
//! - [`ebb_actors`] (`actors/`): the store actor (the only writer); topics, queues and
//!   the broker registry come next.
//! - this crate (`src/`): the embedding API and the `ebb` binary ([`cli`]).

pub mod cli;

pub use ebb_actors as actors;
pub use ebb_store as store;
