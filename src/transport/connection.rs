//! One STOMP connection: reads frames, applies them to the broker, writes receipts,
//! messages and errors.
//!
//! The connection is a task that waits on three things at once: the next frame from
//! the client, the next delivery from any of its subscriptions, and its heart-beat
//! timer. Frames written in one turn are flushed together (with TCP_NODELAY set by the
//! listener), so a receipt is never held back.
//!
//! Any protocol error (a malformed frame, a frame over the limits, a frame before
//! CONNECT, a second CONNECT, a bad header value, an unknown destination) is answered
//! with an ERROR frame whose `message` header says what was wrong (and `receipt-id` if
//! the frame asked for a receipt), then the connection is closed. Nothing from the bad
//! frame is applied; everything accepted before it stays accepted; other connections
//! are not affected.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_stream::StreamMap;
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::auth::{Principal, Right, Security};
use crate::broker::{AckMode, Acker, Broker, Message, Received, SubscribeOptions, Subscription};
use crate::stomp::codec::{Incoming, Limits, Outgoing, ProtocolError, StompCodec};
use crate::stomp::frame::{Command, Frame, Version};

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

/// Headers the broker sets or reads itself; every other SEND header is kept and
/// delivered as a user header.
const RESERVED: &[&str] = &[
    "destination",
    "persistent",
    "expires",
    "priority",
    "receipt",
    "transaction",
    "content-length",
    "message-id",
    "subscription",
    "ack",
    "redelivered",
    "timestamp",
];

/// A client subscription on this connection.
struct Sub {
    acker: Acker,
    mode: StompAck,
    destination: String,
    durable_name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StompAck {
    Auto,
    Client,
    ClientIndividual,
}

/// A delivered message waiting for ACK/NACK, by its `ack` id.
struct PendingAck {
    subscription: String,
    message: Received,
}

/// An open STOMP transaction: its sends are already stored prepared (under the
/// connection's xid for it); its acks wait here until COMMIT.
#[derive(Default)]
struct Tx {
    /// Destinations it sent to (`topic://NAME`, `queue://NAME`).
    destinations: Vec<String>,
    acks: Vec<String>,
    /// NACKs waiting for COMMIT.
    nacks: Vec<String>,
    /// Body bytes sent in it (bounded by [`MAX_TRANSACTION_BYTES`]).
    bytes: usize,
}

/// Most transactions a connection may have open at once.
pub const MAX_OPEN_TRANSACTIONS: usize = 100;

/// Most body bytes one transaction may send before COMMIT (64 MiB): its messages
/// are held until then.
pub const MAX_TRANSACTION_BYTES: usize = 64 << 20;

/// Largest frame before CONNECT (64 KiB): a CONNECT frame is small.
pub const PRE_CONNECT_MAX_FRAME: usize = 64 << 10;

/// Prefix of the xids of STOMP transactions; `ebb serve` rolls back any left with it
/// at start (a STOMP transaction does not outlive its connection).
pub const XID_PREFIX: &str = "stomp:";

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

type SpaceWait = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), crate::Error>>>>;

/// Frames held behind a SEND that waits for space, in arrival order (the SEND first),
/// and the wait itself.
#[derive(Default)]
struct Held {
    frames: std::collections::VecDeque<Frame>,
    bytes: usize,
    wait: Option<SpaceWait>,
}

impl Held {
    fn push_back(&mut self, frame: Frame) {
        self.bytes += frame.body.len();
        self.frames.push_back(frame);
    }

    fn pop_front(&mut self) -> Option<Frame> {
        let frame = self.frames.pop_front()?;
        self.bytes -= frame.body.len();
        Some(frame)
    }

    fn push_front(&mut self, frame: Frame) {
        self.bytes += frame.body.len();
        self.frames.push_front(frame);
    }

    /// Whether the connection may read more frames now.
    fn reading(&self) -> bool {
        self.frames.len() < MAX_HELD_FRAMES && self.bytes < MAX_HELD_BYTES
    }
}

/// Why the loop ends.
enum Close {
    /// Clean end (DISCONNECT, client closed, broker shutting down).
    Done,
    /// After an ERROR frame.
    Error,
}

struct Session {
    broker: Broker,
    config: ConnectionConfig,
    session_id: String,
    connected: bool,
    version: Version,
    client_id: Option<String>,
    principal: Option<Principal>,
    subscriptions: HashMap<String, Sub>,
    pending: HashMap<String, PendingAck>,
    next_ack: u64,
    transactions: HashMap<String, Tx>,
    /// Destinations this connection has sent to (it counts as one producer of each).
    producing: std::collections::HashSet<String>,
    out: Vec<Frame>,
    /// (send every ms, expect every ms), negotiated; 0 = off.
    heartbeat: (u64, u64),
}

type Streams = StreamMap<String, Subscription>;

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
    let mut streams: Streams = StreamMap::new();
    let mut session = Session {
        broker,
        config,
        session_id,
        connected: false,
        version: Version::V1_0,
        client_id: None,
        principal: None,
        subscriptions: HashMap::new(),
        pending: HashMap::new(),
        next_ack: 1,
        transactions: HashMap::new(),
        producing: Default::default(),
        out: Vec::new(),
        heartbeat: (0, 0),
    };
    let mut last_read = Instant::now();
    let mut last_write = Instant::now();
    let opened = Instant::now();
    // (bytes of an unfinished frame, since when that count has not changed)
    let mut partial = (0usize, Instant::now());
    let stall = Duration::from_millis(session.config.stall_timeout_ms);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut held = Held::default();
    let close = loop {
        let turn = tokio::select! {
            incoming = reader.next(), if held.reading() => {
                let turn = match incoming {
                    None => Err(Close::Done),
                    Some(Ok(Incoming::Heartbeat)) => Ok(()),
                    Some(Ok(Incoming::Frame(frame))) => {
                        session.take(frame, &mut streams, &mut held).await
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
                    Ok(()) => session.release(&mut streams, &mut held).await,
                    Err(e) => {
                        let receipt = held.frames.front().and_then(|f| f.get("receipt")).map(str::to_string);
                        session.error(&e.to_string(), receipt.as_deref());
                        Err(Close::Error)
                    }
                };
                // While frames were held the broker did not read: no stall of the client's.
                partial = (reader.read_buffer().len(), Instant::now());
                last_read = Instant::now();
                turn
            }
            Some((sub, message)) = streams.next(), if session.connected => {
                session.deliver(sub, message);
                Ok(())
            }
            _ = tick.tick() => {
                let (send_every, expect_every) = session.heartbeat;
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
                if !session.connected && opened.elapsed() > stall {
                    session.error(&format!("no CONNECT within {} ms", stall.as_millis()), None);
                    Err(Close::Error)
                } else if buffered > 0 && partial.1.elapsed() > stall {
                    let text = format!("incomplete frame: no more bytes for {} ms", stall.as_millis());
                    session.error(&text, None);
                    Err(Close::Error)
                } else if expect_every > 0 && last_read.elapsed() > Duration::from_millis(expect_every.saturating_mul(2)) {
                    tracing::info!(session = %session.session_id, "closing: no heart-beat from the client");
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
        reader.decoder_mut().version = session.version;
        if session.connected {
            reader.decoder_mut().limits = session.config.limits;
        }
        writer.encoder_mut().version = session.version;
        if !session.out.is_empty() {
            // A peer that reads nothing for the stall timeout is dead or hopelessly
            // slow: close it, so it holds no durable subscription and no buffers.
            let write = async {
                for frame in session.out.drain(..) {
                    writer.feed(Outgoing::Frame(frame)).await?;
                }
                writer.flush().await
            };
            match tokio::time::timeout(stall, write).await {
                Ok(Ok(())) => last_write = Instant::now(),
                Ok(Err(_)) => break Close::Done,
                Err(_) => {
                    tracing::info!(session = %session.session_id, "closing: the client reads nothing");
                    break Close::Done;
                }
            }
        }
        if let Err(close) = turn {
            break close;
        }
    };
    if let Close::Error = close {
        tracing::info!(session = %session.session_id, "connection closed after an ERROR frame");
    }
    // Open transactions end with the connection: their prepared messages go.
    session.abort_all().await;
    for destination in session.producing.drain() {
        session.broker.producer_left(&destination);
    }
    // Dropping the subscriptions detaches them: durable ones go offline with their
    // un-acked messages still in the store.
    drop(streams);
}

/// A protocol problem in one frame: the ERROR message, and whether to close.
struct Refusal(String);

fn refuse<T>(text: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(text.into()))
}

impl Session {
    /// Queues an ERROR frame (written before the connection closes).
    fn error(&mut self, message: &str, receipt: Option<&str>) {
        tracing::info!(session = %self.session_id, %message, "ERROR frame sent");
        let mut frame = Frame::new(Command::Error).header("message", message);
        if let Some(r) = receipt {
            frame = frame.header("receipt-id", r);
        }
        self.out.push(
            frame
                .header("content-type", "text/plain")
                .body(message.as_bytes().to_vec()),
        );
    }

    fn receipt(&mut self, frame: &Frame) {
        if let Some(r) = frame.get("receipt") {
            let receipt = Frame::new(Command::Receipt).header("receipt-id", r);
            self.out.push(receipt);
        }
    }

    /// A frame from the client: applied now, or held behind a SEND that waits for
    /// space (ACK and NACK are never held).
    async fn take(
        &mut self,
        frame: Frame,
        streams: &mut Streams,
        held: &mut Held,
    ) -> Result<(), Close> {
        // Plain ACK and NACK go ahead of held frames (they free space); one inside a
        // transaction keeps its place behind the transaction's BEGIN.
        let frees_space = matches!(frame.command, Command::Ack | Command::Nack)
            && frame.get("transaction").is_none();
        if !held.frames.is_empty() && !frees_space {
            held.push_back(frame);
            return Ok(());
        }
        if self.must_wait(&frame, held)? {
            held.push_front(frame);
            return Ok(());
        }
        self.handle(frame, streams).await
    }

    /// Space came back: applies held frames in order until a SEND must wait again.
    async fn release(&mut self, streams: &mut Streams, held: &mut Held) -> Result<(), Close> {
        while let Some(frame) = held.pop_front() {
            if self.must_wait(&frame, held)? {
                held.push_front(frame);
                return Ok(());
            }
            self.handle(frame, streams).await?;
        }
        Ok(())
    }

    /// Producer flow control for a SEND: true (and the wait set up in `held`) when a
    /// usage limit is reached and the producer must wait; an ERROR naming the limit
    /// when the broker is set to fail instead. Other frames, and SENDs the broker will
    /// refuse for another reason, go on.
    fn must_wait(&mut self, frame: &Frame, held: &mut Held) -> Result<bool, Close> {
        if !self.connected || frame.command != Command::Send {
            return Ok(false);
        }
        let Ok(destination) = destination_of(frame.get("destination")) else {
            return Ok(false);
        };
        let persistent = frame.get("persistent") == Some("true");
        match self.broker.check_space(&destination, persistent) {
            Ok(crate::broker::Space::Free) | Err(_) => Ok(false),
            Ok(crate::broker::Space::Fail(text)) => {
                tracing::info!(session = %self.session_id, %destination, %text, "send refused by producer flow control");
                self.error(&text, frame.get("receipt"));
                Err(Close::Error)
            }
            Ok(crate::broker::Space::Wait) => {
                let broker = self.broker.clone();
                held.wait = Some(Box::pin(async move {
                    broker.wait_for_space(&destination, persistent).await
                }));
                Ok(true)
            }
        }
    }

    async fn handle(&mut self, frame: Frame, streams: &mut Streams) -> Result<(), Close> {
        let receipt = frame.get("receipt").map(str::to_string);
        match self.apply(&frame, streams).await {
            Ok(true) => {
                self.receipt(&frame);
                Ok(())
            }
            Ok(false) => {
                // DISCONNECT: the receipt, then close.
                self.receipt(&frame);
                Err(Close::Done)
            }
            Err(Refusal(message)) => {
                tracing::info!(session = %self.session_id, command = frame.command.as_str(), %message, "frame refused");
                self.error(&message, receipt.as_deref());
                Err(Close::Error)
            }
        }
    }

    /// Applies one frame. `Ok(false)` ends the connection (DISCONNECT).
    async fn apply(&mut self, frame: &Frame, streams: &mut Streams) -> Result<bool, Refusal> {
        match (self.connected, frame.command) {
            (false, Command::Connect | Command::Stomp) => self.connect(frame).await.map(|_| true),
            (false, other) => refuse(format!("{} before CONNECT: connect first", other.as_str())),
            (true, Command::Connect | Command::Stomp) => {
                refuse("already connected: a second CONNECT is not allowed")
            }
            (true, Command::Send) => self.send(frame).await.map(|_| true),
            (true, Command::Subscribe) => self.subscribe(frame, streams).await.map(|_| true),
            (true, Command::Unsubscribe) => self.unsubscribe(frame, streams).await.map(|_| true),
            (true, Command::Ack) => self.ack(frame).await.map(|_| true),
            (true, Command::Nack) => self.nack(frame).await.map(|_| true),
            (true, Command::Begin) => self.begin(frame).map(|_| true),
            (true, Command::Commit) => self.commit(frame).await.map(|_| true),
            (true, Command::Abort) => self.abort(frame).await.map(|_| true),
            (true, Command::Disconnect) => Ok(false),
            (true, server) => refuse(format!("{} is a server frame", server.as_str())),
        }
    }

    async fn connect(&mut self, frame: &Frame) -> Result<(), Refusal> {
        let Some(version) = Version::negotiate(frame.get("accept-version")) else {
            return refuse("no supported protocol version in accept-version (this server speaks 1.0, 1.1, 1.2)");
        };
        let security = std::sync::Arc::clone(&self.config.security);
        if security.requires_login() {
            let login = frame.get("login").map(str::to_string);
            let passcode = frame.get("passcode").map(str::to_string);
            // argon2 is slow on purpose: off the event loop.
            let checked = actix_rt::task::spawn_blocking(move || {
                security.authenticate(login.as_deref(), passcode.as_deref())
            })
            .await
            .map_err(|_| Refusal("authentication failed: internal error".into()))?;
            match checked {
                Ok(principal) => self.principal = principal,
                Err(reason) => {
                    tracing::info!(session = %self.session_id, login = ?frame.get("login"), %reason, "refused connection");
                    return refuse(reason);
                }
            }
        }
        let (cx, cy) = match frame.get("heart-beat") {
            None => (0, 0),
            Some(hb) => {
                parse_heartbeat(hb).ok_or_else(|| Refusal(format!("invalid heart-beat `{hb}`")))?
            }
        };
        let (sx, sy) = self.config.heartbeat_ms;
        // We send every max(sx, cy) if both want it; we expect every max(cx, sy).
        let send_every = if cy == 0 || sx == 0 { 0 } else { sx.max(cy) };
        let expect_every = if cx == 0 || sy == 0 { 0 } else { cx.max(sy) };
        self.heartbeat = (send_every, expect_every);
        self.version = version;
        self.client_id = frame
            .get("client-id")
            .filter(|c| !c.is_empty())
            .map(str::to_string);
        self.connected = true;
        let mut connected = Frame::new(Command::Connected)
            .header("version", version.as_str())
            .header("heart-beat", format!("{send_every},{expect_every}"))
            .header("server", self.config.server_name.clone())
            .header("session", self.session_id.clone());
        if let Some(id) = frame.get("request-id") {
            connected = connected.header("response-id", id);
        }
        self.out.push(connected);
        Ok(())
    }

    /// Refuses unless this connection's user has `right` on `destination`
    /// (`topic://NAME` or `queue://NAME`).
    fn authorize(&self, right: Right, destination: &str) -> Result<(), Refusal> {
        self.config
            .security
            .authorize(self.principal.as_ref(), right, destination)
            .map_err(Refusal)
    }

    async fn send(&mut self, frame: &Frame) -> Result<(), Refusal> {
        let destination = destination_of(frame.get("destination"))?;
        self.authorize(Right::Write, &destination)?;
        let message = message_of(frame)?;
        if self.producing.insert(destination.clone()) {
            self.broker.producer_joined(&destination);
        }
        let sent = match frame.get("transaction") {
            Some(tx) => {
                let xid = self.xid(tx);
                let open = self.open_transaction(tx)?;
                open.bytes += message.body.len();
                if open.bytes > MAX_TRANSACTION_BYTES {
                    return refuse(format!(
                        "transaction `{tx}` sends more than {MAX_TRANSACTION_BYTES} bytes before COMMIT"
                    ));
                }
                if !open.destinations.contains(&destination) {
                    open.destinations.push(destination.clone());
                }
                self.broker
                    .send_prepared_now(&destination, message, &xid)
                    .await
            }
            // Flow control was checked before (`must_wait`).
            None => self.broker.send_now(&destination, message).await,
        };
        sent.map(|_| ())
            .map_err(|e| Refusal(format!("message not accepted: {e}")))
    }

    /// The store xid of this connection's transaction `tx`.
    fn xid(&self, tx: &str) -> String {
        format!("{XID_PREFIX}{}:{tx}", self.session_id)
    }

    /// Rolls back every open transaction (the connection is ending).
    async fn abort_all(&mut self) {
        for (tx, open) in std::mem::take(&mut self.transactions) {
            let xid = self.xid(&tx);
            if let Err(e) = self
                .broker
                .rollback_prepared(&xid, &open.destinations)
                .await
            {
                tracing::warn!(session = %self.session_id, %tx, error = %e, "rollback at disconnect failed");
            }
        }
    }

    async fn subscribe(&mut self, frame: &Frame, streams: &mut Streams) -> Result<(), Refusal> {
        let destination = destination_of(frame.get("destination"))?;
        self.authorize(Right::Read, &destination)?;
        let id = match (frame.get("id"), self.version) {
            (Some(id), _) => id.to_string(),
            (None, Version::V1_0) => frame.get("destination").unwrap_or_default().to_string(),
            (None, _) => return refuse("SUBSCRIBE needs an id header"),
        };
        if self.subscriptions.contains_key(&id) {
            return refuse(format!(
                "subscription id `{id}` is already in use on this connection"
            ));
        }
        let mode = match frame.get("ack").unwrap_or("auto") {
            "auto" => StompAck::Auto,
            "client" => StompAck::Client,
            "client-individual" => StompAck::ClientIndividual,
            other => {
                return refuse(format!(
                    "invalid ack mode `{other}`: auto, client or client-individual"
                ))
            }
        };
        let prefetch = match frame.get("activemq.prefetchSize") {
            None => None,
            Some(p) => Some(
                p.parse::<u32>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| Refusal(format!("invalid activemq.prefetchSize `{p}`")))?,
            ),
        };
        let durable_name = frame.get("activemq.subscriptionName").map(str::to_string);
        let mut options = match &durable_name {
            Some(_) if destination.starts_with("queue://") => {
                return refuse("activemq.subscriptionName is for topics: a queue keeps its messages for any consumer");
            }
            Some(name) => {
                let Some(client) = &self.client_id else {
                    return refuse("a durable subscription (activemq.subscriptionName) needs client-id on CONNECT");
                };
                // Creating a durable subscription needs the admin right (ActiveMQ).
                let key = ebb_store::SubscriptionKey::new(client.clone(), name.clone());
                let exists = self
                    .broker
                    .store()
                    .find_subscription(&destination, &key)
                    .await
                    .map_err(|e| Refusal(format!("cannot subscribe: {e}")))?
                    .is_some();
                if !exists {
                    self.authorize(Right::Admin, &destination)?;
                }
                SubscribeOptions::durable(client.clone(), name.clone())
            }
            None => SubscribeOptions::non_durable(),
        };
        options.prefetch = prefetch;
        options.ack = if mode == StompAck::Auto {
            AckMode::Auto
        } else {
            AckMode::Client
        };
        let subscription = self
            .broker
            .subscribe(&destination, options)
            .await
            .map_err(|e| Refusal(format!("cannot subscribe: {e}")))?;
        self.subscriptions.insert(
            id.clone(),
            Sub {
                acker: subscription.acker(),
                mode,
                destination: frame.get("destination").unwrap_or_default().to_string(),
                durable_name,
            },
        );
        streams.insert(id, subscription);
        Ok(())
    }

    async fn unsubscribe(&mut self, frame: &Frame, streams: &mut Streams) -> Result<(), Refusal> {
        let id = frame
            .get("id")
            .or_else(|| frame.get("destination"))
            .ok_or_else(|| Refusal("UNSUBSCRIBE needs an id header".into()))?
            .to_string();
        let Some(sub) = self.subscriptions.remove(&id) else {
            return refuse(format!("no subscription with id `{id}` on this connection"));
        };
        streams.remove(&id);
        self.pending.retain(|_, p| p.subscription != id);
        // UNSUBSCRIBE with activemq.subscriptionName deletes the durable subscription.
        if let (Some(name), Some(client), true) = (
            frame.get("activemq.subscriptionName"),
            &self.client_id,
            sub.destination.starts_with("/topic/"),
        ) {
            let topic = destination_of(Some(&sub.destination))?;
            let name = sub.durable_name.as_deref().unwrap_or(name).to_string();
            self.broker
                .remove_durable(&topic, client, &name)
                .await
                .map_err(|e| Refusal(format!("cannot remove durable subscription: {e}")))?;
        }
        Ok(())
    }

    fn deliver(&mut self, subscription: String, message: Received) {
        let Some(sub) = self.subscriptions.get(&subscription) else {
            return;
        };
        let ack_id = format!("{}-{}", self.session_id, self.next_ack);
        self.next_ack += 1;
        let mut frame = Frame::new(Command::Message)
            .header("subscription", subscription.clone())
            .header("message-id", message.message_id())
            .header("destination", sub.destination.clone())
            .header("expires", message.expiration().to_string())
            .header("priority", message.priority().to_string())
            .header("persistent", message.persistent().to_string())
            .header("timestamp", message.timestamp_ms().to_string())
            .header("redelivered", message.redelivered().to_string());
        if sub.mode != StompAck::Auto {
            frame = frame.header("ack", ack_id.clone());
        }
        for (name, value) in message.headers() {
            frame = frame.header(name.clone(), value.clone());
        }
        frame = frame.body(message.body().to_vec());
        if sub.mode != StompAck::Auto {
            self.pending.insert(
                ack_id,
                PendingAck {
                    subscription,
                    message,
                },
            );
        }
        self.out.push(frame);
    }

    /// The pending ack an ACK or NACK frame names (1.2 `id`; 1.0/1.1 `message-id`).
    fn ack_id(&self, frame: &Frame) -> Result<String, Refusal> {
        if let Some(id) = frame.get("id") {
            if self.pending.contains_key(id) {
                return Ok(id.to_string());
            }
        }
        if let Some(message_id) = frame.get("message-id") {
            let subscription = frame.get("subscription");
            let found = self.pending.iter().find(|(_, p)| {
                p.message.message_id() == message_id
                    && subscription.is_none_or(|s| s == p.subscription)
            });
            if let Some((id, _)) = found {
                return Ok(id.clone());
            }
        }
        refuse("ACK or NACK names no message waiting for an ack on this connection")
    }

    /// True for an ack id this connection handed out that is no longer waiting (acked
    /// already, or covered by a cumulative ack): acking it again changes nothing.
    fn acked_before(&self, frame: &Frame) -> bool {
        let prefix = format!("{}-", self.session_id);
        frame
            .get("id")
            .and_then(|id| id.strip_prefix(&prefix))
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n < self.next_ack)
    }

    async fn ack(&mut self, frame: &Frame) -> Result<(), Refusal> {
        if frame.get("transaction").is_none() && self.acked_before(frame) {
            if let Some(id) = frame.get("id") {
                if !self.pending.contains_key(id) {
                    return Ok(());
                }
            }
        }
        let id = self.ack_id(frame)?;
        if let Some(tx) = frame.get("transaction") {
            let open = self.open_transaction(tx)?;
            if open.acks.contains(&id) {
                return refuse(format!(
                    "ack id `{id}` is already acked in transaction `{tx}`"
                ));
            }
            open.acks.push(id);
            return Ok(());
        }
        self.apply_ack(&id).await
    }

    async fn apply_ack(&mut self, id: &str) -> Result<(), Refusal> {
        let Some(pending) = self.pending.remove(id) else {
            return refuse(format!("ack id `{id}` was already acked"));
        };
        let Some(sub) = self.subscriptions.get(&pending.subscription) else {
            return Ok(()); // unsubscribed meanwhile: nothing to ack any more
        };
        let acker = sub.acker.clone();
        let result = if sub.mode == StompAck::Client {
            // Cumulative: everything delivered on this subscription up to this one.
            let up_to = pending.message.clone();
            let subscription = pending.subscription.clone();
            self.pending.retain(|_, p| {
                p.subscription != subscription || p.message.delivery_id() > up_to.delivery_id()
            });
            acker.ack_up_to(&up_to).await
        } else {
            acker.ack(&pending.message).await
        };
        result.map_err(|e| Refusal(format!("ack failed: {e}")))
    }

    /// NACK: the message is not acked and its prefetch slot is freed; a durable
    /// subscription gets it again (redelivered) when it re-attaches, a non-durable one
    /// does not.
    async fn nack(&mut self, frame: &Frame) -> Result<(), Refusal> {
        let id = self.ack_id(frame)?;
        if let Some(tx) = frame.get("transaction") {
            // Applied at COMMIT, forgotten at ABORT, as a transactional ACK.
            let open = self.open_transaction(tx)?;
            if !open.nacks.contains(&id) {
                open.nacks.push(id);
            }
            return Ok(());
        }
        self.apply_nack(&id).await
    }

    async fn apply_nack(&mut self, id: &str) -> Result<(), Refusal> {
        let Some(pending) = self.pending.remove(id) else {
            return Ok(());
        };
        let Some(sub) = self.subscriptions.get(&pending.subscription) else {
            return Ok(());
        };
        sub.acker
            .clone()
            .nack(&pending.message)
            .await
            .map_err(|e| Refusal(format!("nack failed: {e}")))
    }

    fn begin(&mut self, frame: &Frame) -> Result<(), Refusal> {
        let tx = transaction_of(frame)?;
        if self.transactions.contains_key(&tx) {
            return refuse(format!("transaction `{tx}` is already begun"));
        }
        if self.transactions.len() >= MAX_OPEN_TRANSACTIONS {
            return refuse(format!(
                "more than {MAX_OPEN_TRANSACTIONS} open transactions on one connection"
            ));
        }
        self.transactions.insert(tx, Tx::default());
        Ok(())
    }

    /// The open transaction `tx` (a SEND or ACK joins it).
    fn open_transaction(&mut self, tx: &str) -> Result<&mut Tx, Refusal> {
        self.transactions
            .get_mut(tx)
            .ok_or_else(|| Refusal(format!("invalid transaction id `{tx}`: not begun")))
    }

    /// Ends the transaction a COMMIT or ABORT names: `(name, its state, its xid)`.
    fn end_transaction(&mut self, frame: &Frame) -> Result<(String, Tx, String), Refusal> {
        let tx = transaction_of(frame)?;
        let Some(open) = self.transactions.remove(&tx) else {
            return refuse(format!("invalid transaction id `{tx}`: not begun"));
        };
        let xid = self.xid(&tx);
        Ok((tx, open, xid))
    }

    /// COMMIT: the prepared sends become visible (one store transaction), then the
    /// acks are applied.
    async fn commit(&mut self, frame: &Frame) -> Result<(), Refusal> {
        let (tx, open, xid) = self.end_transaction(frame)?;
        // All or nothing: if an ack of the transaction no longer applies (its message
        // was acked outside it, or its subscription is gone), nothing is committed.
        if let Some(stale) = open.acks.iter().find(|id| !self.pending.contains_key(*id)) {
            let stale = stale.clone();
            let _ = self
                .broker
                .rollback_prepared(&xid, &open.destinations)
                .await;
            return refuse(format!(
                "transaction `{tx}` rolled back: ack id `{stale}` no longer waits for an ack"
            ));
        }
        self.broker
            .commit_prepared(&xid, &open.destinations)
            .await
            .map_err(|e| Refusal(format!("commit failed: {e}")))?;
        for id in open.acks {
            // A cumulative (`client`) ack earlier in this commit may have covered it.
            if self.pending.contains_key(&id) {
                self.apply_ack(&id).await?;
            }
        }
        for id in open.nacks {
            self.apply_nack(&id).await?;
        }
        Ok(())
    }

    /// ABORT: the prepared sends are deleted; the acks are forgotten, so those messages
    /// can be acked again.
    async fn abort(&mut self, frame: &Frame) -> Result<(), Refusal> {
        let (_, open, xid) = self.end_transaction(frame)?;
        self.broker
            .rollback_prepared(&xid, &open.destinations)
            .await
            .map_err(|e| Refusal(format!("abort failed: {e}")))
    }
}

fn transaction_of(frame: &Frame) -> Result<String, Refusal> {
    match frame.get("transaction") {
        Some(tx) if !tx.is_empty() => Ok(tx.to_string()),
        _ => refuse(format!(
            "{} needs a transaction header",
            frame.command.as_str()
        )),
    }
}

/// `/topic/NAME` → `topic://NAME`, `/queue/NAME` → `queue://NAME` (ActiveMQ's STOMP
/// destinations); the broker checks the name itself.
fn destination_of(destination: Option<&str>) -> Result<String, Refusal> {
    let Some(destination) = destination.filter(|d| !d.is_empty()) else {
        return refuse("missing destination header");
    };
    for (prefix, kind) in [("/topic/", "topic"), ("/queue/", "queue")] {
        if let Some(name) = destination.strip_prefix(prefix) {
            let parsed = crate::broker::Destination::parse(&format!("{kind}://{name}"))
                .map_err(|e| Refusal(format!("invalid destination `{destination}`: {e}")))?;
            return Ok(parsed.container().to_string());
        }
    }
    refuse(format!(
        "invalid destination `{destination}`: use /queue/NAME or /topic/NAME"
    ))
}

/// The message a SEND frame carries, with ActiveMQ's header conventions.
fn message_of(frame: &Frame) -> Result<Message, Refusal> {
    let mut message = Message::new(frame.body.clone());
    // STOMP's default, as ActiveMQ: non-persistent unless persistent:true.
    message.persistent = frame.get("persistent") == Some("true");
    if let Some(p) = frame.get("priority") {
        message.priority = p
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= 9)
            .ok_or_else(|| Refusal(format!("invalid priority `{p}`: 0 to 9")))?;
    }
    if let Some(e) = frame.get("expires") {
        let at = e
            .parse::<i64>()
            .ok()
            .filter(|at| *at >= 0)
            .ok_or_else(|| Refusal(format!("invalid expires `{e}`: epoch ms, 0 = never")))?;
        if at > 0 {
            message = message.expires_at(at);
        }
    }
    message.headers = frame
        .headers
        .iter()
        .filter(|(name, _)| !RESERVED.contains(&name.as_str()))
        .cloned()
        .collect();
    Ok(message)
}

fn parse_heartbeat(value: &str) -> Option<(u64, u64)> {
    let (x, y) = value.split_once(',')?;
    Some((x.trim().parse().ok()?, y.trim().parse().ok()?))
}

impl From<ProtocolError> for Refusal {
    fn from(e: ProtocolError) -> Self {
        Refusal(e.0)
    }
}
