//! The STOMP connections a broker serves now, over TCP and WebSocket alike, for
//! operators: who is connected (address, transport, login, client id, since when,
//! subscriptions) and a way to close one (the admin API's
//! `DELETE /api/v1/connections/ID`, as ActiveMQ's console "close connection").
//!
//! Each connection registers itself when it is accepted ([`Connections::register`])
//! and is forgotten when its [`Registration`] drops. A close asked for by an operator
//! reaches the connection's loop through a oneshot: the client gets an ERROR frame
//! saying so, and the connection ends as after any ERROR (its open transactions roll
//! back, what it held is delivered again).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::oneshot;

/// Gauge of the connections open now (labels `protocol`: `STOMP`, `MQTT`;
/// `transport`: `tcp`, `ws`), kept by the registry.
pub const CONNECTIONS_GAUGE: &str = "ebb_connections";

/// Counter of the connections opened since start (labels as [`CONNECTIONS_GAUGE`]).
pub const CONNECTIONS_OPENED_TOTAL: &str = "ebb_connections_opened_total";

impl Transport {
    /// Its name in metrics and the admin API (`tcp`, `ws`).
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Ws => "ws",
        }
    }
}

/// Which transport a connection came over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// A TCP connection (with or without TLS).
    Tcp,
    /// A WebSocket of the HTTP server (STOMP's `/stomp`).
    Ws,
}

/// One connection as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectionInfo {
    /// Its session id (CONNECTED's `session` header: `ebb-7`): how to close it.
    pub session: String,
    /// The client's address.
    pub peer: String,
    /// Its protocol (`STOMP`, `MQTT`: the [`super::Protocol::NAME`] of its listener).
    pub protocol: &'static str,
    /// TCP or WebSocket.
    pub transport: Transport,
    /// When it was accepted, epoch ms.
    pub opened_at_ms: i64,
    /// Its CONNECT was accepted.
    pub connected: bool,
    /// The login it connected with, when users are configured.
    pub login: Option<String>,
    /// Its `client-id`, if it gave one.
    pub client_id: Option<String>,
    /// Subscriptions it holds now.
    pub subscriptions: u64,
}

/// One connection's entry, compact (a [`ConnectionInfo`] is made of it when listed):
/// the peer kept as an address, not as text; the session id is the map's key,
/// shared with the connection's [`Registration`] (issue 53: every idle connection
/// holds one).
struct Entry {
    peer: SocketAddr,
    protocol: &'static str,
    transport: Transport,
    connected: bool,
    opened_at_ms: i64,
    login: Option<Box<str>>,
    client_id: Option<Box<str>>,
    subscriptions: u64,
    close: Option<oneshot::Sender<()>>,
}

impl Entry {
    fn info(&self, session: &str) -> ConnectionInfo {
        ConnectionInfo {
            session: session.to_string(),
            peer: self.peer.to_string(),
            protocol: self.protocol,
            transport: self.transport,
            opened_at_ms: self.opened_at_ms,
            connected: self.connected,
            login: self.login.as_deref().map(str::to_string),
            client_id: self.client_id.as_deref().map(str::to_string),
            subscriptions: self.subscriptions,
        }
    }
}

/// The registry; clones share it (every listener of a broker is given the same one
/// through its protocol's configuration, e.g. STOMP's `ConnectionConfig::connections`).
#[derive(Clone, Default)]
pub struct Connections(Arc<Mutex<BTreeMap<Arc<str>, Entry>>>);

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("open", &self.0.lock().len())
            .finish()
    }
}

/// A registered connection: updates its entry, learns of a close, and removes the
/// entry when dropped.
pub struct Registration {
    connections: Connections,
    session: Arc<str>,
    protocol: &'static str,
    transport: Transport,
    /// Resolves when an operator closes the connection.
    pub closed: Option<oneshot::Receiver<()>>,
}

impl Connections {
    /// Registers connection `session` from `peer` speaking `protocol` over
    /// `transport`.
    pub fn register(
        &self,
        session: &str,
        peer: SocketAddr,
        protocol: &'static str,
        transport: Transport,
    ) -> Registration {
        let (close, closed) = oneshot::channel();
        let opened_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let session: Arc<str> = Arc::from(session);
        self.0.lock().insert(
            Arc::clone(&session),
            Entry {
                peer,
                protocol,
                transport,
                connected: false,
                opened_at_ms,
                login: None,
                client_id: None,
                subscriptions: 0,
                close: Some(close),
            },
        );
        let labels = [("protocol", protocol), ("transport", transport.as_str())];
        metrics::gauge!(CONNECTIONS_GAUGE, &labels).increment(1.0);
        metrics::counter!(CONNECTIONS_OPENED_TOTAL, &labels).increment(1);
        Registration {
            connections: self.clone(),
            session,
            protocol,
            transport,
            closed: Some(closed),
        }
    }

    /// Up to `limit` connections whose session id sorts after `after` (`None`: from
    /// the first), in session-id order (text order: `ebb-10` before `ebb-2`).
    pub fn list(&self, after: Option<&str>, limit: usize) -> Vec<ConnectionInfo> {
        use std::ops::Bound::{Excluded, Unbounded};
        let map = self.0.lock();
        let from = after.map_or(Unbounded, Excluded);
        map.range::<str, _>((from, Unbounded))
            .take(limit)
            .map(|(session, e)| e.info(session))
            .collect()
    }

    /// How many connections are open.
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }

    /// Asks connection `session` to close: `false` when it is not open (or a close
    /// was asked for already).
    pub fn close(&self, session: &str) -> bool {
        let sender = self.0.lock().get_mut(session).and_then(|e| e.close.take());
        sender.is_some_and(|s| s.send(()).is_ok())
    }
}

impl Registration {
    /// Records what the connection's CONNECT and subscriptions say of it now.
    pub fn update(
        &self,
        connected: bool,
        login: Option<&str>,
        client_id: Option<&str>,
        subscriptions: usize,
    ) {
        if let Some(entry) = self.connections.0.lock().get_mut(&*self.session) {
            entry.connected = connected;
            if entry.login.as_deref() != login {
                entry.login = login.map(Box::from);
            }
            if entry.client_id.as_deref() != client_id {
                entry.client_id = client_id.map(Box::from);
            }
            entry.subscriptions = subscriptions as u64;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.connections.0.lock().remove(&*self.session);
        let labels = [
            ("protocol", self.protocol),
            ("transport", self.transport.as_str()),
        ];
        metrics::gauge!(CONNECTIONS_GAUGE, &labels).decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_listed_in_pages_and_closed_once() {
        let all = Connections::default();
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let a = all.register("ebb-1", peer, "STOMP", Transport::Tcp);
        let mut b = all.register("ebb-2", peer, "STOMP", Transport::Ws);
        let c = all.register("ebb-3", peer, "STOMP", Transport::Tcp);
        b.update(true, Some("ops"), Some("billing"), 2);
        let first = all.list(None, 2);
        assert_eq!(
            first.iter().map(|i| i.session.as_str()).collect::<Vec<_>>(),
            ["ebb-1", "ebb-2"]
        );
        assert_eq!(first[1].login.as_deref(), Some("ops"));
        assert_eq!(first[1].subscriptions, 2);
        assert_eq!(all.list(Some("ebb-2"), 2).len(), 1);
        assert!(all.close("ebb-2"));
        assert!(!all.close("ebb-2"), "a second close of the same connection");
        assert!(b.closed.as_mut().unwrap().try_recv().is_ok());
        drop(b);
        assert!(!all.close("ebb-2"), "gone");
        assert_eq!(all.len(), 2);
        drop((a, c));
        assert!(all.is_empty());
    }
}
