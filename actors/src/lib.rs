//! # ebb-actors: Ebb's actors
//!
//! Each piece of broker state has one owner, an actix actor, and changes only through
//! messages to it. In this crate today:
//!
//! | actor | owns | file |
//! |---|---|---|
//! | [`StoreActor`](store_actor::StoreActor) | the queue of store writes; the only writer | `store_actor.rs` |
//!
//! The broker registry, topics, queues and housekeeping join it here (DESIGN.md).
//!
//! ## Await ordering
//! Which actor may `send().await` which, so that request cycles cannot deadlock:
//! - anyone → store actor (through [`StoreHandle`](store_actor::StoreHandle)); the store
//!   actor sends to no actor, it only awaits the database.
//! - Handlers never await a reply from an actor that may be awaiting them.

pub mod error;
pub mod store_actor;

pub use error::ActorError;
pub use store_actor::{StoreActor, StoreActorConfig, StoreHandle};
