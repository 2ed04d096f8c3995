//! STOMP for the tests: an in-process server on an ephemeral port, and the library's
//! client ([`crate::stomp::client`]) with the tests' manners.
//!
//! **Over WebSocket too.** With `EBB_TEST_TRANSPORT=ws` (and the `http` feature),
//! every server [`serve_with`] starts also serves STOMP over WebSocket (an HTTP server
//! with `/stomp`, sharing the TCP listener's connection settings), and every
//! [`Client`] opened to it talks over a WebSocket instead of TCP (binary messages,
//! [`StompClient::over`] an in-memory pipe bridged to the socket). The same STOMP
//! tests then run over both transports; `.ci/run` runs them a second time so.

use std::time::Duration;

use super::{broker, TestStore, PATIENCE, QUIET};
use crate::auth::Security;
use crate::stomp::client::{ClientError, StompClient};
use crate::stomp::codec::Limits;
use crate::stomp::connection::ConnectionConfig;
use crate::stomp::frame::{Command, Frame};

/// A STOMP listener (the one `ebb serve` runs) in this process, on `127.0.0.1` and an
/// ephemeral port, in front of `broker`.
pub struct Server {
    /// Where clients connect.
    pub addr: std::net::SocketAddr,
    /// The broker behind the listener, for the test to inspect.
    pub broker: crate::Broker,
    /// The listeners, started as `ebb serve` starts them.
    server: crate::server::Server,
}

/// Whether the tests' STOMP clients talk over WebSocket (`EBB_TEST_TRANSPORT=ws`).
pub fn over_websocket() -> bool {
    cfg!(feature = "http") && std::env::var("EBB_TEST_TRANSPORT").is_ok_and(|t| t == "ws")
}

/// TCP address of a test server → the address of its HTTP server (`/stomp`).
#[cfg(feature = "http")]
fn websockets() -> &'static parking_lot::Mutex<
    std::collections::HashMap<std::net::SocketAddr, std::net::SocketAddr>,
> {
    static MAP: std::sync::OnceLock<
        parking_lot::Mutex<std::collections::HashMap<std::net::SocketAddr, std::net::SocketAddr>>,
    > = std::sync::OnceLock::new();
    MAP.get_or_init(Default::default)
}

/// A byte stream to the STOMP-over-WebSocket endpoint at `http`: an in-memory pipe
/// whose other end a task bridges to the WebSocket (what is written goes as binary
/// messages; what arrives is read back as bytes; either side's end closes both).
#[cfg(feature = "http")]
async fn websocket_stream(http: std::net::SocketAddr) -> tokio::io::DuplexStream {
    use futures::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message as Ws;
    let mut request = format!("ws://{http}/stomp").into_client_request().unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "v12.stomp".parse().unwrap());
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .unwrap_or_else(|e| panic!("WebSocket to ws://{http}/stomp: {e}"));
    let (mine, theirs) = tokio::io::duplex(64 << 10);
    let (mut to_server, mut from_server) = ws.split();
    let (mut from_test, mut to_test) = tokio::io::split(theirs);
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 64 << 10];
        loop {
            match from_test.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to_server
                        .send(Ws::Binary(buffer[..n].to_vec()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = to_server.send(Ws::Close(None)).await;
    });
    tokio::spawn(async move {
        while let Some(Ok(message)) = from_server.next().await {
            let bytes = match message {
                Ws::Text(text) => text.into_bytes(),
                Ws::Binary(bytes) => bytes,
                Ws::Close(_) => break,
                _ => continue,
            };
            if to_test.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to_test.shutdown().await;
    });
    mine
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
    #[cfg(feature = "http")]
    let http = over_websocket().then(|| {
        let mut options = crate::http::HttpOptions::new("127.0.0.1:0".parse().unwrap());
        options.security = std::sync::Arc::clone(&config.security);
        options.connections = config.connections.clone();
        options.stomp = Some(config.clone());
        options
    });
    let options = crate::server::ServerOptions {
        stomp: Some("127.0.0.1:0".parse().unwrap()),
        connection: config,
        #[cfg(feature = "http")]
        http,
        ..Default::default()
    };
    let server = crate::server::Server::start(broker.clone(), options)
        .await
        .expect("the test server starts");
    let addr = server.stomp_addr().expect("a STOMP listener");
    #[cfg(feature = "http")]
    if let Some(http) = server.http_addr() {
        websockets().lock().insert(addr, http);
    }
    Server {
        addr,
        broker,
        server,
    }
}

impl Server {
    /// Stops the listener and shuts the broker down (panics if shutdown fails).
    pub async fn stop(self) {
        #[cfg(feature = "http")]
        websockets().lock().remove(&self.addr);
        self.server.stop().await.unwrap();
    }
}

/// The library's STOMP client as the tests use it: a write that fails or bad bytes
/// from the server are a panic, and a frame that does not come (in time, or before
/// the server closes) is `None`. The rest of [`StompClient`] is there through `Deref`.
pub struct Client(pub StompClient);

impl Client {
    /// A connection to the server at `addr`, nothing sent (the test writes its own
    /// CONNECT): TCP, or a WebSocket to the same server with `EBB_TEST_TRANSPORT=ws`.
    pub async fn open(addr: std::net::SocketAddr) -> Self {
        #[cfg(feature = "http")]
        {
            let http = websockets().lock().get(&addr).copied();
            if let Some(http) = http {
                let stream = websocket_stream(http).await;
                return Self(StompClient::over(format!("ws://{http}/stomp"), stream));
            }
        }
        Self(StompClient::open(addr).await.unwrap())
    }

    /// Connected and logged in: CONNECT 1.2, with `client-id` if given, answered by
    /// CONNECTED.
    pub async fn connected(addr: std::net::SocketAddr, client_id: Option<&str>) -> Self {
        let mut client = Self::open(addr).await;
        let mut connect = Frame::new(Command::Connect)
            .header("accept-version", "1.2")
            .header("host", "ebb");
        if let Some(id) = client_id {
            connect = connect.header("client-id", id);
        }
        if let Err(e) = client.0.handshake(connect).await {
            panic!("CONNECT to {addr}: {e}");
        }
        client
    }

    /// Writes `bytes` as they are.
    pub async fn write(&mut self, bytes: &[u8]) {
        self.0.send_raw(bytes).await.unwrap();
    }

    /// The next frame (heart-beats skipped), or `None` if the server closed or
    /// nothing came within [`PATIENCE`] (a hang: a test that expects a frame
    /// `.expect`s it).
    pub async fn frame(&mut self) -> Option<Frame> {
        self.frame_for(PATIENCE).await
    }

    /// A frame that comes within [`QUIET`], or `None`: for a check that nothing comes
    /// when no later event marks the moment (see [`QUIET`]; prefer [`Self::next_is`]).
    pub async fn quiet(&mut self) -> Option<Frame> {
        self.frame_for(QUIET).await
    }

    /// The next frame, or `None` if the server closed or nothing came within `ms`. For
    /// the tests that measure a window themselves (heart-beats); wait with
    /// [`Self::frame`] or [`Self::quiet`] otherwise.
    pub async fn frame_within(&mut self, ms: u64) -> Option<Frame> {
        self.frame_for(Duration::from_millis(ms)).await
    }

    async fn frame_for(&mut self, limit: Duration) -> Option<Frame> {
        match self.0.next_within(limit).await {
            Ok(frame) => frame,
            Err(ClientError::Closed | ClientError::Io(_)) => None,
            Err(e) => panic!("server sent bad bytes: {e}"),
        }
    }

    /// Asserts that the next frame is a MESSAGE whose body is `body`, and returns it:
    /// the event-driven way to check that nothing came before a marker message the
    /// test sent behind what must not be delivered (a destination dispatches to a
    /// subscription in order, so anything unwanted would come first).
    pub async fn next_is(&mut self, body: &str) -> Frame {
        let f = self
            .frame()
            .await
            .unwrap_or_else(|| panic!("no MESSAGE {body:?} within {PATIENCE:?}"));
        assert_eq!(
            f.command,
            Command::Message,
            "expected MESSAGE {body:?}: {f:?}"
        );
        assert_eq!(
            String::from_utf8_lossy(&f.body),
            body,
            "something came before the marker: {f:?}"
        );
        f
    }

    /// True when the server closed the connection (reads end) within [`PATIENCE`].
    pub async fn closed(&mut self) -> bool {
        match self.0.closes_within(PATIENCE).await {
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
        .unwrap_or_else(|| panic!("no RECEIPT {id} within {PATIENCE:?}"));
    assert_eq!(f.command, Command::Receipt, "{f:?}");
    assert_eq!(f.get("receipt-id"), Some(id));
}

/// Reads up to the RECEIPT for `id` and returns the MESSAGE frames that came before it,
/// in order. A pipelined connection answers an ACK's receipt after its commit, while
/// the message whose prefetch slot that ACK freed may be delivered at once, before the
/// receipt. Panics on any other frame, or when no RECEIPT comes within [`PATIENCE`] of
/// the last frame.
pub async fn messages_until_receipt(c: &mut Client, id: &str) -> Vec<Frame> {
    let mut messages = Vec::new();
    loop {
        let f = c
            .frame()
            .await
            .unwrap_or_else(|| panic!("no RECEIPT {id} within {PATIENCE:?}"));
        match f.command {
            Command::Message => messages.push(f),
            Command::Receipt if f.get("receipt-id") == Some(id) => return messages,
            _ => panic!("expected MESSAGE frames, then RECEIPT {id}: {f:?}"),
        }
    }
}
