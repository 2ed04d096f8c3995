//! STOMP over TCP for the tests: an in-process server on an ephemeral port, and the
//! library's client ([`crate::stomp::client`]) with the tests' manners.

use std::time::Duration;

use super::{broker, TestStore};
use crate::auth::Security;
use crate::stomp::client::{ClientError, StompClient};
use crate::stomp::codec::Limits;
use crate::stomp::frame::{Command, Frame};
use crate::transport::connection::ConnectionConfig;

/// A STOMP listener (the one `ebb serve` runs) in this process, on `127.0.0.1` and an
/// ephemeral port, in front of `broker`.
pub struct Server {
    /// Where clients connect.
    pub addr: std::net::SocketAddr,
    /// The broker behind the listener, for the test to inspect.
    pub broker: crate::Broker,
    stop: tokio::sync::watch::Sender<bool>,
}

/// A server with `policy` for every topic, default limits, no users, a 30 s stall
/// timeout.
pub async fn server(t: &TestStore, policy: crate::Policy) -> Server {
    server_full(t, policy, Limits::default(), Security::default(), 30_000).await
}

/// A server with `policy` for every topic, the codec's `limits`, `security` and a
/// stall timeout of `stall_ms` (how long a client may stay silent, ms).
pub async fn server_full(
    t: &TestStore,
    policy: crate::Policy,
    limits: Limits,
    security: Security,
    stall_ms: u64,
) -> Server {
    let broker = broker(t, policy, 2).await;
    serve(broker, limits, security, stall_ms).await
}

/// A STOMP server on an ephemeral port for a broker built by the test.
pub async fn serve(
    broker: crate::Broker,
    limits: Limits,
    security: Security,
    stall_ms: u64,
) -> Server {
    let config = ConnectionConfig {
        limits,
        security: std::sync::Arc::new(security),
        stall_timeout_ms: stall_ms,
        ..ConnectionConfig::default()
    };
    serve_with(broker, config).await
}

/// A STOMP server on an ephemeral port for a broker built by the test, with every
/// connection setting the test's (heart-beats, the pipeline's window, ...).
pub async fn serve_with(broker: crate::Broker, config: ConnectionConfig) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    actix_rt::spawn(crate::transport::listener::run(
        listener,
        broker.clone(),
        config,
        stop_rx,
    ));
    Server { addr, broker, stop }
}

impl Server {
    /// Stops the listener and shuts the broker down (panics if shutdown fails).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.broker.shutdown().await.unwrap();
    }
}

/// The library's STOMP client as the tests use it: a write that fails or bad bytes
/// from the server are a panic, and a frame that does not come (in time, or before
/// the server closes) is `None`. The rest of [`StompClient`] is there through `Deref`.
pub struct Client(pub StompClient);

impl Client {
    /// A TCP connection, nothing sent (the test writes its own CONNECT).
    pub async fn open(addr: std::net::SocketAddr) -> Self {
        Self(StompClient::open(addr).await.unwrap())
    }

    /// Connected and logged in: CONNECT 1.2, with `client-id` if given, answered by
    /// CONNECTED.
    pub async fn connected(addr: std::net::SocketAddr, client_id: Option<&str>) -> Self {
        match StompClient::connect(addr, client_id, None).await {
            Ok(client) => Self(client),
            Err(e) => panic!("CONNECT to {addr}: {e}"),
        }
    }

    /// Writes `bytes` as they are.
    pub async fn write(&mut self, bytes: &[u8]) {
        self.0.send_raw(bytes).await.unwrap();
    }

    /// The next frame (heart-beats skipped), or `None` if the server closed or
    /// nothing came within 3 s.
    pub async fn frame(&mut self) -> Option<Frame> {
        self.frame_within(3_000).await
    }

    /// The next frame, or `None` if the server closed or nothing came within `ms`.
    pub async fn frame_within(&mut self, ms: u64) -> Option<Frame> {
        match self.0.next_within(Duration::from_millis(ms)).await {
            Ok(frame) => frame,
            Err(ClientError::Closed | ClientError::Io(_)) => None,
            Err(e) => panic!("server sent bad bytes: {e}"),
        }
    }

    /// True when the server closed the connection (reads end) within 3 s.
    pub async fn closed(&mut self) -> bool {
        match self.0.closes_within(Duration::from_secs(3)).await {
            Ok(closed) => closed,
            Err(e) => panic!("server sent bad bytes: {e}"),
        }
    }
}

impl std::ops::Deref for Client {
    type Target = StompClient;
    fn deref(&self) -> &StompClient {
        &self.0
    }
}

impl std::ops::DerefMut for Client {
    fn deref_mut(&mut self) -> &mut StompClient {
        &mut self.0
    }
}

/// Asserts that the next frame is the RECEIPT for `id`.
pub async fn receipt(c: &mut Client, id: &str) {
    let f = c
        .frame()
        .await
        .unwrap_or_else(|| panic!("no RECEIPT {id} within 3 s"));
    assert_eq!(f.command, Command::Receipt, "{f:?}");
    assert_eq!(f.get("receipt-id"), Some(id));
}

/// Reads up to the RECEIPT for `id` and returns the MESSAGE frames that came before it,
/// in order. A pipelined connection answers an ACK's receipt after its commit, while
/// the message whose prefetch slot that ACK freed may be delivered at once, before the
/// receipt. Panics on any other frame, or when no RECEIPT comes within 3 s of the last
/// frame.
pub async fn messages_until_receipt(c: &mut Client, id: &str) -> Vec<Frame> {
    let mut messages = Vec::new();
    loop {
        let f = c
            .frame()
            .await
            .unwrap_or_else(|| panic!("no RECEIPT {id} within 3 s"));
        match f.command {
            Command::Message => messages.push(f),
            Command::Receipt if f.get("receipt-id") == Some(id) => return messages,
            _ => panic!("expected MESSAGE frames, then RECEIPT {id}: {f:?}"),
        }
    }
}
