//! STOMP over WebSocket at `/stomp` (ActiveMQ's `ws://` transport, RabbitMQ's
//! Web-STOMP): the same STOMP [`Protocol`] as over TCP
//! ([`crate::stomp::connection::Stomp`]), on a byte stream adapted from the
//! WebSocket.
//!
//! **The adapter.** The WebSocket and the session are joined by an in-memory pipe
//! ([`tokio::io::duplex`], [`PIPE_BYTES`] each way): each text or binary message's
//! bytes go into the pipe in order (a message may carry part of a frame, one frame
//! or several: the STOMP codec reads a stream), and what the session writes is sent
//! back as one WebSocket message per write: a text message when it is valid UTF-8
//! (what stomp.js expects), else binary (a frame cut inside a character, or a binary
//! body). A close from either side ends both. The pipe's bound is the backpressure:
//! a client that does not read stops the session's writes, as a full TCP window does.
//!
//! **Limits and login** are those of the TCP listener: the connection takes a slot of
//! the shared [`crate::transport::caps::Slots`] (a refused one gets an ERROR
//! frame, then a close), CONNECT authenticates, and frame limits, heart-beats and
//! stall timeouts apply unchanged. Before its session first answers, a WebSocket
//! reads at most [`PRE_CONNECT_BUDGET`] bytes from its socket (then it waits for the
//! answer), as a TCP connection reads at most one 64 KiB frame before CONNECT: a
//! message that does not fit is never buffered whole (the client gets an ERROR
//! naming the limit, and the connection closes), and the session's stall timeout
//! closes a connection that never sends a CONNECT.

use std::net::SocketAddr;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::AppState;
use crate::stomp::connection::Stomp;
use crate::transport::caps::next_session_id;
use crate::transport::connections::Transport;
use crate::transport::{Accepted, Protocol};

/// Bytes the pipe between a WebSocket and its STOMP session buffers each way.
pub const PIPE_BYTES: usize = 64 << 10;

/// The STOMP subprotocols offered, newest first (as RabbitMQ's Web-STOMP).
pub const SUBPROTOCOLS: [&str; 3] = ["v12.stomp", "v11.stomp", "v10.stomp"];

/// The subject of the verified client certificate of a `wss` connection (a request
/// extension): its STOMP session may log in by it ([`crate::auth`]).
#[derive(Debug, Clone)]
pub struct ClientCertificate(pub crate::auth::DistinguishedName);

/// `GET /stomp`: upgrades to a WebSocket carrying a STOMP session.
pub(crate) async fn upgrade(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    meter: Option<axum::Extension<std::sync::Arc<PreConnectMeter>>>,
    certificate: Option<axum::Extension<ClientCertificate>>,
    headers: axum::http::HeaderMap,
    upgrade: Option<WebSocketUpgrade>,
) -> Response {
    // A client that asks for subprotocols must ask for a STOMP one (one that asks
    // for none is served: some STOMP clients do not name it).
    let offered = offered_subprotocols(&headers);
    if !offered.is_empty() && !offered.iter().any(|p| SUBPROTOCOLS.contains(p)) {
        return super::error::ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "/stomp speaks STOMP: ask for one of the subprotocols {}, not {}",
                SUBPROTOCOLS.join(", "),
                offered.join(", ")
            ),
        )
        .into_response();
    }
    let Some(config) = state.options.stomp.clone() else {
        return super::error::ApiError::new(
            StatusCode::NOT_FOUND,
            "STOMP over WebSocket is not enabled on this server",
        )
        .into_response();
    };
    let Some(upgrade) = upgrade else {
        return super::error::ApiError::new(
            StatusCode::BAD_REQUEST,
            "/stomp takes a WebSocket upgrade (subprotocol v12.stomp), not a plain request",
        )
        .into_response();
    };
    let max_message = config.limits.max_frame_bytes + config.limits.max_header_bytes + 1024;
    let stall = std::time::Duration::from_millis(config.stall_timeout_ms.max(1));
    let broker = state.broker.clone();
    upgrade
        .protocols(SUBPROTOCOLS)
        .max_message_size(max_message)
        .on_upgrade(move |socket| async move {
            let meter = meter.map(|axum::Extension(m)| m);
            if let Some(meter) = &meter {
                meter.arm();
            }
            let slot = match config.take_slot(peer.ip()) {
                Ok(slot) => slot,
                Err(refusal) => {
                    tracing::warn!(%peer, "refused WebSocket connection: {refusal}");
                    refuse(socket, &refusal.to_string()).await;
                    return;
                }
            };
            let (session_end, socket_end) = tokio::io::duplex(PIPE_BYTES);
            let id = next_session_id();
            tracing::debug!(%peer, session = %id, "WebSocket connection accepted");
            let session_broker = broker.clone();
            broker.spawn_on_system(move || {
                actix_rt::spawn(async move {
                    let connection = Accepted {
                        session_id: id,
                        peer,
                        transport: Transport::Ws,
                        certificate_subject: certificate.map(|axum::Extension(c)| c.0),
                    };
                    Stomp::new(session_broker, config)
                        .serve(session_end, connection)
                        .await;
                });
            });
            bridge(socket, socket_end, stall, meter, Framing::Stomp).await;
            drop(slot);
        })
}

/// The subprotocols an upgrade request offers (`Sec-WebSocket-Protocol`, each header
/// a comma-separated list), in order.
fn offered_subprotocols(headers: &axum::http::HeaderMap) -> Vec<&str> {
    headers
        .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// The MQTT subprotocol (MQTT 3.1.1 and 5.0 over WebSocket name it `mqtt`).
pub const MQTT_SUBPROTOCOL: &str = "mqtt";

/// `GET /mqtt`: upgrades to a WebSocket carrying an MQTT session (binary messages,
/// subprotocol `mqtt`), served by the same [`crate::mqtt::Mqtt`] as TCP, with its
/// users, limits and connection caps.
pub(crate) async fn upgrade_mqtt(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    meter: Option<axum::Extension<std::sync::Arc<PreConnectMeter>>>,
    certificate: Option<axum::Extension<ClientCertificate>>,
    headers: axum::http::HeaderMap,
    upgrade: Option<WebSocketUpgrade>,
) -> Response {
    let offered = offered_subprotocols(&headers).contains(&MQTT_SUBPROTOCOL);
    let Some(config) = state.options.mqtt.clone() else {
        return super::error::ApiError::new(
            StatusCode::NOT_FOUND,
            "MQTT over WebSocket is not enabled on this server ([listeners.mqtt] turns MQTT on)",
        )
        .into_response();
    };
    let (Some(upgrade), true) = (upgrade, offered) else {
        return super::error::ApiError::new(
            StatusCode::BAD_REQUEST,
            "/mqtt takes a WebSocket upgrade with the subprotocol mqtt",
        )
        .into_response();
    };
    let stall = std::time::Duration::from_millis(config.connect_timeout_ms.max(1));
    let max_message = config.max_packet_size as usize + 8;
    let broker = state.broker.clone();
    upgrade
        .protocols([MQTT_SUBPROTOCOL])
        .max_message_size(max_message)
        .on_upgrade(move |socket| async move {
            let meter = meter.map(|axum::Extension(m)| m);
            if let Some(meter) = &meter {
                meter.arm();
            }
            let protocol = crate::mqtt::Mqtt::new(broker.clone(), config);
            let slot = match protocol.take_slot(peer.ip()) {
                Ok(slot) => slot,
                Err(refusal) => {
                    tracing::warn!(%peer, "refused WebSocket connection: {refusal}");
                    let mut socket = socket;
                    let tell = async {
                        socket.send(Message::Binary(protocol.refusal(""))).await?;
                        socket.send(Message::Close(None)).await
                    };
                    let _ = tokio::time::timeout(CLOSE_GRACE, tell).await;
                    return;
                }
            };
            let (session_end, socket_end) = tokio::io::duplex(PIPE_BYTES);
            let id = next_session_id();
            tracing::debug!(%peer, session = %id, "MQTT WebSocket connection accepted");
            broker.spawn_on_system(move || {
                actix_rt::spawn(async move {
                    let connection = Accepted {
                        session_id: id,
                        peer,
                        transport: Transport::Ws,
                        certificate_subject: certificate.map(|axum::Extension(c)| c.0),
                    };
                    protocol.serve(session_end, connection).await;
                });
            });
            bridge(socket, socket_end, stall, meter, Framing::Mqtt).await;
            drop(slot);
        })
}

/// How a session's bytes go out as WebSocket messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// STOMP: a text message when the bytes are UTF-8 (what stomp.js expects), else
    /// binary; a refusal is an ERROR frame.
    Stomp,
    /// MQTT: binary messages only; a refusal closes the socket.
    Mqtt,
}

/// Tells a refused client why (an ERROR frame, `error-code:limit-exceeded`: only the
/// connection caps refuse here), then closes; a client that reads
/// nothing is dropped after [`CLOSE_GRACE`].
async fn refuse(mut socket: WebSocket, refusal: &str) {
    let code = crate::ErrorCode::LimitExceeded;
    let frame = format!("ERROR\nmessage:{refusal}\nerror-code:{code}\n\n\0");
    let tell = async {
        socket.send(Message::Text(frame)).await?;
        socket.send(Message::Close(None)).await
    };
    let _ = tokio::time::timeout(CLOSE_GRACE, tell).await;
}

/// How long, after the session ended and its last frames and the Close went out, the
/// client's input is still read (and dropped) while waiting for its Close: closing a
/// socket with unread input makes TCP reset it, and a reset can destroy the last
/// frames (an ERROR) before the client reads them.
pub const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Copies between the WebSocket and the session's pipe until either side ends, then
/// closes the WebSocket in order (see [`CLOSE_GRACE`]). A message the client takes
/// no part of for `stall` (it reads nothing) ends the connection, as the session's
/// own stall timeout does over TCP: its socket and its connection slot are freed.
async fn bridge(
    socket: WebSocket,
    pipe: DuplexStream,
    stall: std::time::Duration,
    meter: Option<std::sync::Arc<PreConnectMeter>>,
    framing: Framing,
) {
    let (mut to_client, mut from_client) = socket.split();
    let (mut from_session, mut to_session) = tokio::io::split(pipe);
    // A first message over the pre-CONNECT budget: the ERROR that tells the client.
    let (refuse_tx, refused) = tokio::sync::oneshot::channel::<String>();
    // Fused: once answered (or dropped) it stays pending.
    let mut refused = futures::FutureExt::fuse(refused);
    let inbound_meter = meter.clone();
    let inbound = async move {
        let mut session_open = true;
        let mut refuse_tx = Some(refuse_tx);
        while let Some(message) = from_client.next().await {
            let bytes = match message {
                Ok(Message::Text(text)) => text.into_bytes(),
                Ok(Message::Binary(bytes)) => bytes,
                Ok(Message::Ping(_) | Message::Pong(_)) => continue,
                Ok(Message::Close(_)) => break,
                Err(_) => {
                    if inbound_meter.as_ref().is_some_and(|m| m.exceeded()) {
                        if let Some(tx) = refuse_tx.take() {
                            let _ = tx.send(format!(
                                "a WebSocket message before CONNECT does not fit in the pre-CONNECT limit of {PRE_CONNECT_BUDGET} bytes"
                            ));
                        }
                    }
                    break;
                }
            };
            if let Some(meter) = &inbound_meter {
                meter.delivered(bytes.len());
            }
            // Once the session is gone, what the client still sends is read and
            // dropped until its Close.
            if session_open && to_session.write_all(&bytes).await.is_err() {
                session_open = false;
            }
        }
        let _ = to_session.shutdown().await;
    };
    let outbound = async move {
        let mut buffer = vec![0u8; PIPE_BYTES];
        loop {
            let read = tokio::select! {
                read = from_session.read(&mut buffer) => read,
                                Ok(why) = &mut refused => {
                    tracing::info!("refused WebSocket connection: {why}");
                    if framing == Framing::Stomp {
                        let error = format!("ERROR\nmessage:{why}\n\n\0");
                        let _ = tokio::time::timeout(stall, to_client.send(Message::Text(error))).await;
                    }
                    break;
                }
            };
            let n = match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // The session's first words answer its CONNECT: the client may send
            // freely from now on.
            if let Some(meter) = &meter {
                meter.answered();
            }
            let chunk = buffer[..n].to_vec();
            let message = match framing {
                Framing::Mqtt => Message::Binary(chunk),
                Framing::Stomp => match String::from_utf8(chunk) {
                    Ok(text) => Message::Text(text),
                    Err(e) => Message::Binary(e.into_bytes()),
                },
            };
            match tokio::time::timeout(stall, to_client.send(message)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return,
                Err(_) => {
                    tracing::info!("closing a WebSocket: the client reads nothing");
                    return;
                }
            }
        }
        let _ = tokio::time::timeout(CLOSE_GRACE, to_client.send(Message::Close(None))).await;
    };
    // The session ends the exchange: when the client goes, the session sees the end
    // of its input and closes; its output then ends the outbound copy.
    let mut inbound = tokio::spawn(inbound);
    outbound.await;
    if tokio::time::timeout(CLOSE_GRACE, &mut inbound)
        .await
        .is_err()
    {
        inbound.abort();
    }
}

/// Bytes a WebSocket may bring in before its STOMP session first answers (CONNECTED,
/// or the ERROR of a refused CONNECT): twice TCP's pre-CONNECT frame limit plus room
/// for the WebSocket framing, so that a client that sends a frame over that limit in
/// pieces gets it refused by the session as over TCP. Reading then waits for the
/// answer; a first message that does not fit gets an ERROR naming the limit, and the
/// connection closes. So nobody makes the server buffer a multi-megabyte message
/// before logging in (hardening issue, point 7: a whole message of up to ~10 MiB was
/// buffered for 30 s).
pub const PRE_CONNECT_BUDGET: u64 =
    2 * crate::stomp::connection::PRE_CONNECT_MAX_FRAME as u64 + (4 << 10);

/// What one HTTP connection has read since it became a STOMP WebSocket and before its
/// session answered ([`PRE_CONNECT_BUDGET`]). Every connection of the HTTP server
/// reads through one ([`Metered`]); it counts nothing until the upgrade arms it.
#[derive(Debug, Default)]
pub(crate) struct PreConnectMeter {
    armed: std::sync::atomic::AtomicBool,
    answered: std::sync::atomic::AtomicBool,
    /// Bytes of whole messages handed to the session since the upgrade.
    delivered: std::sync::atomic::AtomicU64,
    /// The budget ran out inside the first message: the read failed.
    exceeded: std::sync::atomic::AtomicBool,
    read: std::sync::atomic::AtomicU64,
    /// The read that waits for the answer.
    waker: futures::task::AtomicWaker,
}

impl PreConnectMeter {
    /// The connection is a STOMP WebSocket now: count what it reads.
    fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The session answered: read freely from now on.
    fn answered(&self) {
        self.answered
            .store(true, std::sync::atomic::Ordering::Release);
        self.waker.wake();
    }

    /// A whole message of `bytes` reached the session.
    fn delivered(&self, bytes: usize) {
        self.delivered
            .fetch_add(bytes as u64, std::sync::atomic::Ordering::AcqRel);
    }

    /// Whether reading failed because the first message did not fit in the budget.
    fn exceeded(&self) -> bool {
        self.exceeded.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Bytes it may read now: `None` while not counting (not a WebSocket, or
    /// answered).
    fn left(&self) -> Option<u64> {
        use std::sync::atomic::Ordering::Acquire;
        if !self.armed.load(Acquire) || self.answered.load(Acquire) {
            return None;
        }
        Some(PRE_CONNECT_BUDGET.saturating_sub(self.read.load(Acquire)))
    }
}

/// An HTTP connection's socket, read through its [`PreConnectMeter`].
pub(crate) struct Metered<S> {
    pub(crate) inner: S,
    pub(crate) meter: std::sync::Arc<PreConnectMeter>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Metered<S> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let Some(mut left) = this.meter.left() else {
            return std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        };
        let delivered = this
            .meter
            .delivered
            .load(std::sync::atomic::Ordering::Acquire);
        if left == 0 && delivered == 0 {
            // The first message does not fit: the session gets nothing to answer.
            this.meter
                .exceeded
                .store(true, std::sync::atomic::Ordering::Release);
            return std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a WebSocket message before CONNECT over the pre-CONNECT limit",
            )));
        }
        if left == 0 {
            // Frames behind the CONNECT: they wait for its answer.
            this.meter.waker.register(cx.waker());
            match this.meter.left() {
                Some(0) => return std::task::Poll::Pending,
                Some(now) => left = now,
                None => return std::pin::Pin::new(&mut this.inner).poll_read(cx, buf),
            }
        }
        let mut limited = buf.take(left.min(usize::MAX as u64) as usize);
        std::task::ready!(std::pin::Pin::new(&mut this.inner).poll_read(cx, &mut limited))?;
        let n = limited.filled().len();
        // SAFETY: the inner read initialized and filled these `n` bytes of `buf`'s
        // unfilled part (the part `take` lent it).
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        this.meter
            .read
            .fetch_add(n as u64, std::sync::atomic::Ordering::AcqRel);
        std::task::Poll::Ready(Ok(()))
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Metered<S> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
