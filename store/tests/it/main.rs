//! The store's conformance tests, one binary: one module per promise, each run on
//! SQLite and on PostgreSQL (`on_every_backend!`). One binary links once.

mod bounded_reads;
mod cancellation;
mod committed_counts;
mod conformance;
mod expiry_never_acks_live;
mod groups;
mod in_doubt;
mod last_values;
mod lease;
mod listing;
mod pending_reads;
mod plans;
mod queues;
mod reclaim;
mod runs;
mod stored_bytes;
