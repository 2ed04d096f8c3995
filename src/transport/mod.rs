//! What every protocol's connections share, knowing no protocol: the listener that
//! accepts TCP (and TLS) connections and hands each to a [`Protocol`]
//! ([`listener`]), the connection caps ([`caps`]), the registry of open connections
//! operators list and close ([`connections`]), the client ids connected now
//! ([`client_ids`]), a connection's socket with its codec and buffers
//! ([`link`]), and its sets of futures in flight ([`futures_set`]).
//!
//! A protocol is one folder that implements [`Protocol`]: STOMP is `src/stomp/`
//! (its wire codec, a typed command per frame, a session over the embedding API and
//! the connection loop). Another protocol (MQTT) is another folder and one line
//! where the server starts its listeners; nothing here changes.
//!
//! `tests/it/layering.rs` checks that no file here names a protocol, the store or
//! the actor crates.

pub mod caps;
pub mod client_ids;
pub mod connections;
pub mod futures_set;
pub mod link;
pub mod listener;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};

use tokio::io::{AsyncRead, AsyncWrite};

/// A connection a listener accepted (and, over TLS, whose handshake ended), as its
/// protocol gets it.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// Its session id ([`caps::next_session_id`]): how logs, the registry and
    /// operators name it.
    pub session_id: String,
    /// The client's address.
    pub peer: SocketAddr,
    /// TCP or WebSocket.
    pub transport: connections::Transport,
    /// The subject of the client certificate it presented over TLS, verified against
    /// `[tls] client_ca_file` (`None` without one).
    pub certificate_subject: Option<crate::auth::DistinguishedName>,
}

/// A protocol served on the connections of a [`listener`]: what the listener needs
/// to know of it. Clones share its state (the broker, the caps' counts).
pub trait Protocol: Clone + 'static {
    /// The protocol's name in logs (`STOMP`).
    const NAME: &'static str;

    /// A place for a connection from `address` under the protocol's caps
    /// ([`caps::Slots`]), or why there is none (naming the limit by its
    /// configuration key). Taken before a byte is read; the connection holds it
    /// until it ends.
    fn take_slot(&self, address: IpAddr) -> Result<caps::Slot, caps::OverCap>;

    /// The bytes that tell a client refused for `reason` why (STOMP: an ERROR frame),
    /// written before its connection is closed.
    fn refusal(&self, reason: &str) -> Vec<u8>;

    /// Serves `connection` over `io` until it ends.
    fn serve<S>(&self, io: S, connection: Accepted) -> impl Future<Output = ()> + 'static
    where
        S: AsyncRead + AsyncWrite + Unpin + 'static;
}
