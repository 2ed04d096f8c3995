//! STOMP over TCP (and TLS): the listener and one task per connection. STOMP over
//! WebSocket (the HTTP server's `/stomp`) runs the same [`connection::serve_connection`]
//! on a byte stream adapted from the WebSocket, with the same limits ([`connection::Slots`])
//! and the same registry of open connections ([`connections`]).
//!
//! A connection is three layers, each usable without the one above it:
//! - [`command`]: a client frame parsed into a typed [`command::Command`] (headers
//!   checked, the destination a key); it knows no connection.
//! - [`session`]: applies commands to the [`Broker`](crate::broker::Broker) and owns what one
//!   connection holds there (subscriptions, pending acks, transactions); it knows no
//!   socket.
//! - [`connection`]: the socket loop (read, deliver, heart-beat, write, timeouts,
//!   producer flow control).
//!
//! The transport speaks to the broker through the embedding API ([`crate::broker`])
//! only; `tests/layering.rs` checks that no file here names the store or actor crates.

pub mod caps;
pub mod client_ids;
pub mod command;
pub mod connection;
pub mod connections;
pub mod listener;
pub mod session;
