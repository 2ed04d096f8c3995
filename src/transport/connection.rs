//! One STOMP connection over a byte stream: the socket loop. It reads frames, parses
//! each into a [`Request`] and hands it to the connection's [`Session`], which applies
//! it to the broker; it writes what the session queues (receipts, messages, errors),
//! keeps the heart-beats and timeouts, and holds frames back for producer flow control.
//!
//! The loop waits on four things at once: the next frame from the client, the next
//! delivery from any of the session's subscriptions, the wait of a SEND held for space,
//! and a 250 ms tick for heart-beats and timeouts. Frames written in one turn are
//! flushed together (with TCP_NODELAY set by the listener), so a receipt is never held
//! back.
//!
//! Any protocol error (a malformed frame, a frame over the limits, a frame before
//! CONNECT, a second CONNECT, a bad header value, an unknown destination) is answered
//! with an ERROR frame whose `message` header says what was wrong (and `receipt-id` if
//! the frame asked for a receipt), then the connection is closed. Nothing from the bad
//! frame is applied; everything accepted before it stays accepted; other connections
//! are not affected.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{FramedRead, FramedWrite};

use super::command::Request;
use super::session::{Close, Flow, Session, SessionConfig, SpaceWait};
use crate::auth::Security;
use crate::broker::Broker;
use crate::stomp::codec::{Incoming, Limits, Outgoing, StompCodec};

/// What every connection of a listener shares.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    pub limits: Limits,
    /// Heart-beat the server offers: it can send every `.0` ms and wants one from the
    /// client every `.1` ms (STOMP `heart-beat` header; 0 = none).
    pub heartbeat_ms: (u64, u64),
    /// Value of CONNECTED's `server` header.
    pub server_name: String,
    /// Users and rights; the default lets everyone in.
    pub security: std::sync::Arc<Security>,
    /// A connection that sends no CONNECT, or stops in the middle of a frame, for this
    /// long (ms) gets an ERROR and is closed, so a stalled peer holds nothing for long.
    pub stall_timeout_ms: u64,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            heartbeat_ms: (10_000, 10_000),
            server_name: format!("ebb/{}", env!("CARGO_PKG_VERSION")),
            security: Default::default(),
            stall_timeout_ms: 30_000,
        }
    }
}

pub use super::session::{MAX_OPEN_TRANSACTIONS, MAX_TRANSACTION_BYTES, XID_PREFIX};

/// Largest frame before CONNECT (64 KiB): a CONNECT frame is small.
pub const PRE_CONNECT_MAX_FRAME: usize = 64 << 10;

/// Most frames a connection may send while one of its SENDs waits for space (producer
/// flow control); past it, or past [`MAX_HELD_BYTES`], the broker stops reading it
/// until the SEND goes through. ACK and NACK frames outside a transaction are never
/// held: they are applied at once, since they are what frees space (ActiveMQ's
/// AMQ-2523 deadlock, where a blocked connection could no longer ack). The bounds are
/// large so that a client pipelining SENDs without receipts, and acking in between,
/// gets its ACKs read.
pub const MAX_HELD_FRAMES: usize = 10_000;

/// Most body bytes of frames held behind a waiting SEND (16 MiB).
pub const MAX_HELD_BYTES: usize = 16 << 20;

/// Requests held behind a SEND that waits for space, in arrival order (the SEND
/// first), and the wait itself.
#[derive(Default)]
struct Held {
    requests: VecDeque<Request>,
    bytes: usize,
    wait: Option<SpaceWait>,
}

impl Held {
    fn push_back(&mut self, request: Request) {
        self.bytes += request.body_bytes;
        self.requests.push_back(request);
    }

    fn pop_front(&mut self) -> Option<Request> {
        let request = self.requests.pop_front()?;
        self.bytes -= request.body_bytes;
        Some(request)
    }

    fn push_front(&mut self, request: Request) {
        self.bytes += request.body_bytes;
        self.requests.push_front(request);
    }

    /// Whether the connection may read more frames now.
    fn reading(&self) -> bool {
        self.requests.len() < MAX_HELD_FRAMES && self.bytes < MAX_HELD_BYTES
    }
}

/// Serves one connection until it ends. `session_id` names it in CONNECTED and logs.
pub async fn serve_connection<S>(
    io: S,
    broker: Broker,
    config: ConnectionConfig,
    session_id: String,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (read, write) = tokio::io::split(io);
    // Until CONNECT, frames are small: no one buffers megabytes before logging in.
    let mut pre_connect = config.limits;
    pre_connect.max_frame_bytes = pre_connect.max_frame_bytes.min(PRE_CONNECT_MAX_FRAME);
    pre_connect.max_header_bytes = pre_connect.max_header_bytes.min(PRE_CONNECT_MAX_FRAME);
    let mut reader = FramedRead::new(read, StompCodec::new(pre_connect));
    let mut writer = FramedWrite::new(write, StompCodec::new(config.limits));
    let session_config = SessionConfig {
        heartbeat_ms: config.heartbeat_ms,
        server_name: config.server_name.clone(),
        security: std::sync::Arc::clone(&config.security),
    };
    let mut session = Session::new(broker, session_config, session_id);
    let mut last_read = Instant::now();
    let mut last_write = Instant::now();
    let opened = Instant::now();
    // (bytes of an unfinished frame, since when that count has not changed)
    let mut partial = (0usize, Instant::now());
    let stall = Duration::from_millis(config.stall_timeout_ms);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut held = Held::default();
    let close = loop {
        let turn = tokio::select! {
            incoming = reader.next(), if held.reading() => {
                let turn = match incoming {
                    None => Err(Close::Done),
                    Some(Ok(Incoming::Heartbeat)) => Ok(()),
                    Some(Ok(Incoming::Frame(frame))) => {
                        let request = Request::parse(&frame, session.version());
                        take(&mut session, request, &mut held).await
                    }
                    Some(Err(e)) => {
                        session.error(&e.0, e.1.as_deref());
                        Err(Close::Error)
                    }
                };
                // Time the broker spent on the frame is not the client's stall.
                partial = (reader.read_buffer().len(), Instant::now());
                last_read = Instant::now();
                turn
            }
            waited = async { held.wait.as_mut().expect("guarded").await }, if held.wait.is_some() => {
                held.wait = None;
                let turn = match waited {
                    Ok(()) => release(&mut session, &mut held).await,
                    Err(e) => {
                        let receipt = held.requests.front().and_then(|r| r.receipt.clone());
                        session.error(&e.to_string(), receipt.as_deref());
                        Err(Close::Error)
                    }
                };
                // While frames were held the broker did not read: no stall of the client's.
                partial = (reader.read_buffer().len(), Instant::now());
                last_read = Instant::now();
                turn
            }
            Some((sub, message)) = session.next_delivery(), if session.connected() => {
                session.deliver(sub, message);
                Ok(())
            }
            _ = tick.tick() => {
                let (send_every, expect_every) = session.heartbeat();
                if !held.reading() {
                    // The broker stopped reading (flow control): the client is neither
                    // silent nor stalled.
                    last_read = Instant::now();
                    partial.1 = Instant::now();
                }
                let buffered = reader.read_buffer().len();
                if buffered != partial.0 {
                    // Bytes of a frame still arriving count as activity (STOMP: any data).
                    partial = (buffered, Instant::now());
                    last_read = last_read.max(partial.1);
                }
                if !session.connected() && opened.elapsed() > stall {
                    session.error(&format!("no CONNECT within {} ms", stall.as_millis()), None);
                    Err(Close::Error)
                } else if buffered > 0 && partial.1.elapsed() > stall {
                    let text = format!("incomplete frame: no more bytes for {} ms", stall.as_millis());
                    session.error(&text, None);
                    Err(Close::Error)
                } else if expect_every > 0 && last_read.elapsed() > Duration::from_millis(expect_every.saturating_mul(2)) {
                    tracing::info!(session = %session.id(), "closing: no heart-beat from the client");
                    Err(Close::Done)
                } else {
                    if send_every > 0 && last_write.elapsed() >= Duration::from_millis(send_every) {
                        let beat = tokio::time::timeout(stall, writer.send(Outgoing::Heartbeat));
                        if !matches!(beat.await, Ok(Ok(()))) {
                            break Close::Done;
                        }
                        last_write = Instant::now();
                    }
                    Ok(())
                }
            }
        };
        // The version may have changed (CONNECT): both halves of the codec follow it.
        reader.decoder_mut().version = session.version();
        if session.connected() {
            reader.decoder_mut().limits = config.limits;
        }
        writer.encoder_mut().version = session.version();
        if !session.output().is_empty() {
            // A peer that reads nothing for the stall timeout is dead or hopelessly
            // slow: close it, so it holds no durable subscription and no buffers.
            let write = async {
                for frame in session.output().drain(..) {
                    writer.feed(Outgoing::Frame(frame)).await?;
                }
                writer.flush().await
            };
            match tokio::time::timeout(stall, write).await {
                Ok(Ok(())) => last_write = Instant::now(),
                Ok(Err(_)) => break Close::Done,
                Err(_) => {
                    tracing::info!(session = %session.id(), "closing: the client reads nothing");
                    break Close::Done;
                }
            }
        }
        if let Err(close) = turn {
            break close;
        }
    };
    if let Close::Error = close {
        tracing::info!(session = %session.id(), "connection closed after an ERROR frame");
    }
    // Open transactions end with the connection; subscriptions detach.
    session.close().await;
}

/// A request from the client: applied now, or held behind a SEND that waits for
/// space (ACK and NACK outside a transaction are never held).
async fn take(session: &mut Session, request: Request, held: &mut Held) -> Result<(), Close> {
    // Plain ACK and NACK go ahead of held frames (they free space); one inside a
    // transaction keeps its place behind the transaction's BEGIN.
    if !held.requests.is_empty() && !request.frees_space() {
        held.push_back(request);
        return Ok(());
    }
    if must_wait(session, &request, held)? {
        held.push_front(request);
        return Ok(());
    }
    session.apply(request).await
}

/// Space came back: applies held requests in order until a SEND must wait again.
async fn release(session: &mut Session, held: &mut Held) -> Result<(), Close> {
    while let Some(request) = held.pop_front() {
        if must_wait(session, &request, held)? {
            held.push_front(request);
            return Ok(());
        }
        session.apply(request).await?;
    }
    Ok(())
}

/// Producer flow control for a request about to be applied: true (and the wait set
/// up in `held`) when it is a SEND that must wait for space; [`Close::Error`] (the
/// session queued the ERROR) when the broker fails it instead.
fn must_wait(session: &mut Session, request: &Request, held: &mut Held) -> Result<bool, Close> {
    match session.flow(request) {
        Flow::Go => Ok(false),
        Flow::Wait(wait) => {
            held.wait = Some(wait);
            Ok(true)
        }
        Flow::Refused => Err(Close::Error),
    }
}
