//! STOMP over WebSocket at `/stomp` (ActiveMQ's `ws://` transport, RabbitMQ's
//! Web-STOMP): the same STOMP session as over TCP
//! ([`crate::transport::connection::serve_connection`]), on a byte stream adapted
//! from the WebSocket.
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
//! the shared [`crate::transport::connection::Slots`] (a refused one gets an ERROR
//! frame, then a close), CONNECT authenticates, and frame limits, heart-beats and
//! stall timeouts apply unchanged.

use std::net::SocketAddr;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::AppState;
use crate::transport::connection::{next_session_id, serve_connection};
use crate::transport::connections::Transport;

/// Bytes the pipe between a WebSocket and its STOMP session buffers each way.
pub const PIPE_BYTES: usize = 64 << 10;

/// The STOMP subprotocols offered, newest first (as RabbitMQ's Web-STOMP).
pub const SUBPROTOCOLS: [&str; 3] = ["v12.stomp", "v11.stomp", "v10.stomp"];

/// `GET /stomp`: upgrades to a WebSocket carrying a STOMP session.
pub(crate) async fn upgrade(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: axum::http::HeaderMap,
    upgrade: Option<WebSocketUpgrade>,
) -> Response {
    // A client that asks for subprotocols must ask for a STOMP one (one that asks
    // for none is served: some STOMP clients do not name it).
    let offered: Vec<&str> = headers
        .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
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
            let slot = match config.take_slot(peer.ip()) {
                Ok(slot) => slot,
                Err(refusal) => {
                    tracing::warn!(%peer, "refused WebSocket connection: {refusal}");
                    refuse(socket, &refusal).await;
                    return;
                }
            };
            let (session_end, socket_end) = tokio::io::duplex(PIPE_BYTES);
            let id = next_session_id();
            tracing::debug!(%peer, session = %id, "WebSocket connection accepted");
            let session_broker = broker.clone();
            broker.spawn_on_system(move || {
                actix_rt::spawn(async move {
                    serve_connection(session_end, session_broker, config, id, peer, Transport::Ws)
                        .await;
                });
            });
            bridge(socket, socket_end, stall).await;
            drop(slot);
        })
}

/// Tells a refused client why (an ERROR frame), then closes; a client that reads
/// nothing is dropped after [`CLOSE_GRACE`].
async fn refuse(mut socket: WebSocket, refusal: &str) {
    let frame = format!("ERROR\nmessage:{refusal}\n\n\0");
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
async fn bridge(socket: WebSocket, pipe: DuplexStream, stall: std::time::Duration) {
    let (mut to_client, mut from_client) = socket.split();
    let (mut from_session, mut to_session) = tokio::io::split(pipe);
    let inbound = async move {
        let mut session_open = true;
        while let Some(message) = from_client.next().await {
            let bytes = match message {
                Ok(Message::Text(text)) => text.into_bytes(),
                Ok(Message::Binary(bytes)) => bytes,
                Ok(Message::Ping(_) | Message::Pong(_)) => continue,
                Ok(Message::Close(_)) | Err(_) => break,
            };
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
            let n = match from_session.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let chunk = buffer[..n].to_vec();
            let message = match String::from_utf8(chunk) {
                Ok(text) => Message::Text(text),
                Err(e) => Message::Binary(e.into_bytes()),
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
