//! STOMP (1.0, 1.1, 1.2), whole: the wire protocol and the server side of it, one
//! [`crate::transport::Protocol`] ([`connection::Stomp`]) served on TCP, TLS and the
//! HTTP server's WebSocket.
//!
//! - The wire: [`frame`], [`escape`] and [`codec`]. No actix, no store, no broker:
//!   this is where hostile bytes arrive, so it stands alone and is tested alone
//!   (unit tests, property tests).
//! - [`command`]: a client frame parsed into a typed [`command::Command`] (headers
//!   checked, the destination a key); it knows no connection.
//! - [`session`]: applies commands to the [`Broker`](crate::broker::Broker) and owns
//!   what one connection holds there (subscriptions, pending acks, transactions); it
//!   knows no socket.
//! - [`connection`]: the socket loop (read, deliver, heart-beat, write, timeouts,
//!   producer flow control), and [`connection::Stomp`], the protocol a listener serves.
//!
//! STOMP speaks to the broker through the embedding API ([`crate::broker`]) only, and
//! to the listeners, connection caps and registry through [`crate::transport`];
//! `tests/it/layering.rs` checks that no file here names the store or actor crates.

// Only `ebb soak --stomp` drives it, and it answers with anyhow errors: a tool's part.
#[cfg(feature = "cli")]
pub mod client;
pub mod codec;
pub mod command;
pub mod connection;
pub mod escape;
pub mod frame;
pub mod session;
