//! One STOMP connection over a byte stream: the socket loop. It reads frames, parses
//! each into a [`Request`] and hands it to the connection's [`Session`], which applies
//! it to the broker; it writes what the session queues (receipts, messages, errors),
//! keeps the heart-beats and timeouts, and holds frames back for producer flow control.
//!
//! The loop waits on five things at once: the next frame from the client, the next
//! outcome of the frames in flight (in frame order), the next delivery from any of the
//! session's subscriptions, the wait of a SEND held for space, and a timer for
//! heart-beats and timeouts, set to whatever is due next. Frames written in one turn
//! are flushed together (with TCP_NODELAY set by the listener), so a receipt is never
//! held back.
//!
//! Any protocol error (a malformed frame, a frame over the limits, a frame before
//! CONNECT, a second CONNECT, a bad header value, an unknown destination) is answered
//! with an ERROR frame whose `message` header says what was wrong (and `receipt-id` if
//! the frame asked for a receipt), then the connection is closed. Nothing from the bad
//! frame is applied; everything accepted before it stays accepted; other connections
//! are not affected.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::future::Future;
use std::pin::Pin;

use futures::stream::FuturesOrdered;
use futures::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::command::{Refusal, Request};
use super::session::{
    Close, Fed, Flow, Outcome, Peer, Session, SessionConfig, SessionShared, SpaceWait, Step,
};
use crate::auth::Security;
use crate::broker::Broker;
use crate::stomp::codec::{Incoming, Limits, Outgoing, ProtocolError, StompCodec};
use crate::transport::client_ids::ClientIds;
use crate::transport::futures_set::Lazy;
use crate::transport::link::Link;
use crate::transport::{Accepted, Protocol};
use crate::ErrorCode;
use tokio::sync::oneshot;

/// What reading a connection can fail with: bytes that are no frame (answered with an
/// ERROR), or the socket itself (nobody to answer).
#[derive(Debug)]
enum ReadError {
    Frame(ProtocolError),
    Io(std::io::Error),
}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// A connection's two codecs: the reader's (its limits are the pre-CONNECT ones
/// until CONNECT) with the socket's errors kept apart from the frames', and the
/// writer's.
struct Codecs {
    read: StompCodec,
    write: StompCodec,
}

impl tokio_util::codec::Decoder for Codecs {
    type Item = Incoming;
    type Error = ReadError;

    fn decode(&mut self, buf: &mut bytes::BytesMut) -> Result<Option<Incoming>, ReadError> {
        self.read.decode(buf).map_err(ReadError::Frame)
    }

    fn decode_eof(&mut self, buf: &mut bytes::BytesMut) -> Result<Option<Incoming>, ReadError> {
        self.read.decode_eof(buf).map_err(ReadError::Frame)
    }
}

impl tokio_util::codec::Encoder<Outgoing> for Codecs {
    type Error = ProtocolError;

    fn encode(&mut self, item: Outgoing, dst: &mut bytes::BytesMut) -> Result<(), ProtocolError> {
        self.write.encode(item, dst)
    }
}

/// What every connection of a listener shares.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Frame size and header limits of each connection's codec.
    pub limits: Limits,
    /// The broker's heart-beat floor: it sends no more often than every `.0` ms and
    /// wants one from the client no more often than every `.1` ms (STOMP's
    /// `heart-beat`, negotiated with the client's: the larger of the two applies; 0 =
    /// none, from either side). Default `(1000, 1000)`: a client's own interval of a
    /// second or more is honoured, as ActiveMQ honours the client's value.
    pub heartbeat_ms: (u64, u64),
    /// Value of CONNECTED's `server` header.
    pub server_name: String,
    /// Users and rights; the default lets everyone in.
    pub security: std::sync::Arc<Security>,
    /// A connection that sends no CONNECT, or stops in the middle of a frame, for this
    /// long (ms) gets an ERROR and is closed, so a stalled peer holds nothing for long.
    pub stall_timeout_ms: u64,
    /// The pipeline's window: most frames a connection may have applied and not yet
    /// committed (SENDs in the store, ACKs being written). At the window the broker
    /// stops reading the connection until earlier frames commit. Default
    /// [`PIPELINE_FRAMES`]; 1 applies one frame at a time.
    pub pipeline_frames: usize,
    /// The same window in bytes of frames, headers and body (default
    /// [`PIPELINE_BYTES`]).
    pub pipeline_bytes: usize,
    /// The client ids connected now, shared by every connection (and listener) of a
    /// broker: a client id may be connected once (CONN-10).
    pub client_ids: std::sync::Arc<ClientIds>,
    /// A CONNECT with a client id that is connected closes the older connection
    /// instead of being refused (ActiveMQ's `allowLinkStealing`; default false).
    pub allow_link_stealing: bool,
    /// What one connection may hold at once (subscriptions, transactions).
    pub session_limits: SessionLimits,
    /// Most connections the listener serves at once (ActiveMQ's
    /// `maximumConnections`; default [`MAX_CONNECTIONS`]). One more is answered with an
    /// ERROR naming the limit and closed.
    pub max_connections: usize,
    /// Most connections from one source IP address at once (default
    /// [`MAX_CONNECTIONS_PER_ADDRESS`]), so one client cannot take every slot.
    pub max_connections_per_address: usize,
    /// The connections served now, counted against the two limits above: shared by
    /// every listener given clones of this config (STOMP over TCP and over
    /// WebSocket count together).
    pub slots: Slots,
    /// The connections open now, for operators to list and close (shared like
    /// `slots`).
    pub connections: crate::transport::connections::Connections,
}

/// STOMP as a [`Protocol`] of a [`crate::transport::listener`]: the broker its
/// connections use and their settings, behind one [`Arc`] that every connection of
/// the listener shares (a connection holds a pointer to them, not a copy: issue 53).
/// Clones share both; `stomp.broker` and `stomp.config` read them.
#[derive(Clone)]
pub struct Stomp {
    shared: Arc<StompShared>,
}

/// What [`Stomp`] shares with its connections.
pub struct StompShared {
    /// The broker each connection's session applies its frames to.
    pub broker: Broker,
    /// What every connection shares (limits, users, caps, registry).
    pub config: ConnectionConfig,
    /// The part of `config` a session reads, with the broker.
    session: Arc<SessionShared>,
}

impl Stomp {
    /// STOMP over `broker` with `config`.
    pub fn new(broker: Broker, config: ConnectionConfig) -> Self {
        let session = Arc::new(SessionShared {
            broker: broker.clone(),
            config: SessionConfig {
                heartbeat_ms: config.heartbeat_ms,
                server_name: config.server_name.clone(),
                security: Arc::clone(&config.security),
                client_ids: Arc::clone(&config.client_ids),
                allow_link_stealing: config.allow_link_stealing,
                limits: config.session_limits,
            },
        });
        Stomp {
            shared: Arc::new(StompShared {
                broker,
                config,
                session,
            }),
        }
    }
}

impl std::ops::Deref for Stomp {
    type Target = StompShared;

    fn deref(&self) -> &StompShared {
        &self.shared
    }
}

impl Protocol for Stomp {
    const NAME: &'static str = "STOMP";

    fn take_slot(&self, address: std::net::IpAddr) -> Result<Slot, OverCap> {
        self.config.take_slot(address)
    }

    fn refusal(&self, reason: &str) -> Vec<u8> {
        let mut frame = crate::stomp::frame::Frame::new(crate::stomp::frame::Command::Error);
        frame = frame
            .header("message", reason)
            .header("error-code", ErrorCode::LimitExceeded.as_str());
        let mut out = bytes::BytesMut::new();
        let _ = tokio_util::codec::Encoder::encode(
            &mut StompCodec::new(self.config.limits),
            Outgoing::Frame(frame),
            &mut out,
        );
        out.to_vec()
    }

    fn serve<S>(&self, io: S, connection: Accepted) -> impl Future<Output = ()> + 'static
    where
        S: AsyncRead + AsyncWrite + Unpin + 'static,
    {
        serve_connection(io, Arc::clone(&self.shared), connection)
    }
}

/// Default of [`ConnectionConfig::max_connections`].
pub const MAX_CONNECTIONS: usize = 10_000;

/// Default of [`ConnectionConfig::max_connections_per_address`].
pub const MAX_CONNECTIONS_PER_ADDRESS: usize = 1_000;

impl ConnectionConfig {
    /// A place for a connection from `address` under this listener's limits
    /// (`max_connections`, `max_connections_per_address`), or why there is none (the
    /// ERROR's message, naming the limit by its configuration key).
    pub fn take_slot(&self, address: std::net::IpAddr) -> Result<Slot, OverCap> {
        self.slots.take_within(
            address,
            self.max_connections,
            self.max_connections_per_address,
        )
    }
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            heartbeat_ms: (1_000, 1_000),
            server_name: format!("ebb/{}", env!("CARGO_PKG_VERSION")),
            security: Default::default(),
            stall_timeout_ms: 30_000,
            pipeline_frames: PIPELINE_FRAMES,
            pipeline_bytes: PIPELINE_BYTES,
            client_ids: Default::default(),
            allow_link_stealing: false,
            session_limits: SessionLimits::default(),
            max_connections: MAX_CONNECTIONS,
            max_connections_per_address: MAX_CONNECTIONS_PER_ADDRESS,
            slots: Slots::default(),
            connections: Default::default(),
        }
    }
}

pub use crate::transport::caps::{next_session_id, OverCap, Slot, Slots};

pub use super::session::{
    SessionLimits, MAX_OPEN_TRANSACTIONS, MAX_SUBSCRIPTIONS_PER_CONNECTION, MAX_TRANSACTION_BYTES,
    MAX_TRANSACTION_FRAMES, MAX_UNACKED_PER_CONNECTION, XID_PREFIX,
};

/// Largest frame before CONNECT (64 KiB): a CONNECT frame is small.
pub const PRE_CONNECT_MAX_FRAME: usize = 64 << 10;

/// Most frames a connection may have read and not yet applied: frames behind a SEND
/// that waits for space (producer flow control), or behind a frame that waits for
/// the ones before it; past it, or past [`MAX_HELD_BYTES`], the broker stops reading
/// the connection until they go through. ACK and NACK frames outside a transaction are
/// never held behind a SEND that waits for space: they are applied at once, since they
/// are what frees space (ActiveMQ's AMQ-2523 deadlock, where a blocked connection could
/// no longer ack). The bounds are large so that a client pipelining SENDs without
/// receipts, and acking in between, gets its ACKs read.
pub const MAX_HELD_FRAMES: usize = 10_000;

/// Most bytes of frames held, headers and body (16 MiB), as [`MAX_HELD_FRAMES`].
pub const MAX_HELD_BYTES: usize = 16 << 20;

/// Default [`ConnectionConfig::pipeline_frames`]: frames applied and not yet committed.
pub const PIPELINE_FRAMES: usize = 1_000;

/// Default [`ConnectionConfig::pipeline_bytes`] (8 MiB).
pub const PIPELINE_BYTES: usize = 8 << 20;

/// Most frames written before one flush of the socket (MESSAGE frames of deliveries
/// that are ready, RECEIPTs of frames committed together).
const WRITE_BATCH: usize = 256;

/// Bytes buffered before a write to the socket within one turn (256 KiB).
const WRITE_BUFFER: usize = 256 << 10;

/// A frame held behind the ones before it: read and not yet applied, or applied
/// ahead of them (an ACK that frees space while a SEND waits; the codec's refusal of
/// bytes that are no frame), its outcome to take its place among theirs. Held by
/// value: frames are held only behind a waiting SEND, and a box would cost every
/// pipelined frame an allocation.
#[allow(clippy::large_enum_variant)]
enum Held {
    Request(Request),
    Applied(Step),
}

impl Held {
    fn frame_bytes(&self) -> usize {
        match self {
            Held::Request(r) => r.frame_bytes,
            Held::Applied(s) => s.frame_bytes,
        }
    }
}

/// A connection's frames between the socket and the session: those read and not yet
/// applied (`held`), the wait of a SEND for space, and the frames applied whose
/// outcome is still to come (`in_flight`, resolved in frame order).
struct Pipeline {
    held: VecDeque<Held>,
    held_bytes: usize,
    wait: Option<SpaceWait>,
    in_flight: Lazy<FuturesOrdered<Pin<Box<dyn Future<Output = Outcome>>>>>,
    in_flight_bytes: usize,
    /// A frame that ends the connection (refused, or DISCONNECT) was applied: nothing
    /// after it is read or applied.
    ended: bool,
    /// Nothing more is read: the client closed its side, or sent bytes that are no
    /// frame. What was read before still goes through.
    input_over: bool,
    /// A COMMIT or ABORT is in flight: later frames wait for it ([`Step::fence`]).
    fenced: bool,
    /// Window of `in_flight`: frames and body bytes.
    max_frames: usize,
    max_bytes: usize,
}

impl Pipeline {
    /// Nothing more is read (the client closed its side, or the socket failed);
    /// frames held behind a SEND waiting for space are not applied.
    fn end_input(&mut self) {
        self.input_over = true;
        if self.wait.take().is_some() {
            self.drop_unapplied();
        }
    }

    fn new(config: &ConnectionConfig) -> Self {
        Self {
            held: VecDeque::new(),
            held_bytes: 0,
            wait: None,
            in_flight: Lazy::default(),
            in_flight_bytes: 0,
            ended: false,
            input_over: false,
            fenced: false,
            max_frames: config.pipeline_frames.max(1),
            max_bytes: config.pipeline_bytes.max(1),
        }
    }

    fn hold_back(&mut self, held: Held) {
        self.held_bytes += held.frame_bytes();
        self.held.push_back(held);
    }

    fn unhold(&mut self) -> Option<Held> {
        let held = self.held.pop_front()?;
        self.held_bytes -= held.frame_bytes();
        if self.held.is_empty() {
            // Given back: an idle connection keeps no room for frames (a held frame
            // is hundreds of bytes).
            self.held = VecDeque::new();
        }
        Some(held)
    }

    fn hold_front(&mut self, held: Held) {
        self.held_bytes += held.frame_bytes();
        self.held.push_front(held);
    }

    /// Forgets the held frames not applied yet (those applied ahead keep their place).
    fn drop_unapplied(&mut self) {
        self.held.retain(|h| matches!(h, Held::Applied(_)));
        self.held_bytes = self.held.iter().map(Held::frame_bytes).sum();
    }

    /// True once the input is over and every frame read has finished: the connection
    /// ends.
    fn drained(&self) -> bool {
        self.input_over && self.held.is_empty() && self.in_flight.is_empty()
    }

    /// Room in the window for one more frame in flight.
    fn has_room(&self) -> bool {
        self.in_flight.len() < self.max_frames && self.in_flight_bytes < self.max_bytes
    }

    /// Whether the connection may read more frames now.
    fn reading(&self) -> bool {
        !self.ended
            && !self.input_over
            && self.has_room()
            && self.held.len() < MAX_HELD_FRAMES
            && self.held_bytes < MAX_HELD_BYTES
    }

    /// Puts an applied frame in flight, or, when nothing is in flight before it and
    /// its outcome is there already (a frame done at once: SUBSCRIBE, BEGIN, a refusal,
    /// a non-persistent SEND), finishes it now, so its RECEIPT goes out before anything
    /// its effect causes (the MESSAGEs of a new subscription). `Err` ends the connection.
    fn start(&mut self, session: &mut Session, mut step: Step) -> Result<(), Close> {
        self.ended |= step.last;
        self.fenced |= step.fence;
        if self.in_flight.is_empty() {
            if let Some(outcome) = (&mut step.outcome).now_or_never() {
                return session.finish(outcome);
            }
        }
        self.in_flight_bytes += step.frame_bytes;
        self.in_flight.push(step.outcome);
        Ok(())
    }

    /// The next outcome, in frame order, if one is ready now.
    fn ready(&mut self) -> Option<Outcome> {
        let outcome = self.in_flight.next().now_or_never()??;
        self.in_flight_bytes -= outcome.frame_bytes;
        Some(outcome)
    }
}

/// Serves one connection from `peer` over `transport` until it ends. `session_id`
/// names it in CONNECTED, logs and [`ConnectionConfig::connections`], where it is
/// listed while it lasts and where an operator may close it. The connection is made
/// (and registered) now, and the future holds it alone: an `async fn` would hold its
/// arguments beside it for as long as the connection lives.
pub fn serve_connection<S>(
    io: S,
    stomp: Arc<StompShared>,
    connection: Accepted,
) -> impl Future<Output = ()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut c = Connection::open(io, stomp, connection);
    // The connection is used in place (a binding of its own would be a second copy
    // of it in the future, as an `async fn` taking it by value makes).
    async move {
        let close = c.run().await;
        // Boxed, as a frame's application below: the close's store calls would
        // otherwise size every idle connection's task (issue 53).
        Box::pin(c.close(close)).await;
    }
}

impl<S> Connection<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    /// The socket loop, until the connection ends: why it ends.
    async fn run(&mut self) -> Close {
        let c = self;
        loop {
            c.arm_timer();
            let turn = tokio::select! {
                incoming = c.link.next(), if c.pipe.reading() => c.on_read(incoming).await,
                waited = async { c.pipe.wait.as_mut().expect("guarded").await }, if c.pipe.wait.is_some() => {
                    c.on_space(waited).await
                }
                Some(outcome) = c.pipe.in_flight.next(), if !c.pipe.in_flight.is_empty() => {
                    c.on_outcome(outcome).await
                }
                closed = async { c.registration.closed.as_mut().expect("guarded").await }, if c.registration.closed.is_some() => {
                    c.registration.closed = None;
                    c.on_operator_close(closed)
                }
                told = async { c.take_over.as_mut().expect("guarded").await }, if c.take_over.is_some() => {
                    c.take_over = None;
                    c.on_take_over(told)
                }
                Some((sub, fed)) = c.session.next_delivery(), if c.session.may_deliver() => {
                    c.on_delivery(sub, fed)
                }
                _ = &mut c.timer => match c.on_timer().await {
                    Some(turn) => turn,
                    None => break Close::Done,
                },
            };
            if let Some(close) = c.end_turn(turn).await {
                break close;
            }
        }
    }
}

/// One STOMP connection's state between turns of [`serve_connection`]'s loop: the
/// socket with its codecs and buffers, the session, the pipeline of frames in
/// flight, its entry in the registry, and the clocks of its timeouts.
struct Connection<S> {
    link: Link<S, Codecs>,
    /// The broker and the settings, shared by every connection of the listener.
    stomp: Arc<StompShared>,
    session: Session,
    pipe: Pipeline,
    registration: crate::transport::connections::Registration,
    /// What the registry last heard of the session: (connected, subscriptions).
    registered: (bool, usize),
    /// Fires when a newer connection takes this one's client id over.
    take_over: Option<tokio::sync::oneshot::Receiver<()>>,
    last_read: Instant,
    last_write: Instant,
    opened: Instant,
    /// (bytes of an unfinished frame, since when that count has not changed)
    partial: (usize, Instant),
    stall: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl<S> Connection<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    /// The connection over `io`, registered, its session not yet connected.
    fn open(io: S, stomp: Arc<StompShared>, connection: Accepted) -> Self {
        let config = &stomp.config;
        let Accepted {
            session_id,
            peer,
            transport,
            certificate_subject,
        } = connection;
        // Until CONNECT, frames are small: no one buffers megabytes before logging in.
        let mut pre_connect = config.limits;
        pre_connect.max_frame_bytes = pre_connect.max_frame_bytes.min(PRE_CONNECT_MAX_FRAME);
        pre_connect.max_header_bytes = pre_connect.max_header_bytes.min(PRE_CONNECT_MAX_FRAME);
        let codecs = Codecs {
            read: StompCodec::new(pre_connect),
            write: StompCodec::new(config.limits),
        };
        let peer_of_session = Peer {
            address: Some(peer),
            certificate_subject,
        };
        let registration = config
            .connections
            .register(&session_id, peer, Stomp::NAME, transport);
        let now = Instant::now();
        Connection {
            link: Link::new(io, codecs),
            session: Session::new(Arc::clone(&stomp.session), peer_of_session, session_id),
            pipe: Pipeline::new(config),
            registration,
            registered: (false, 0),
            take_over: None,
            last_read: now,
            last_write: now,
            opened: now,
            partial: (0, now),
            stall: Duration::from_millis(config.stall_timeout_ms),
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            stomp,
        }
    }
}

impl<S> Connection<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    /// Sets the timer to what is due next. The timers wake the connection only when
    /// something is due: the next heart-beat to send (exactly one interval after the
    /// last write, HB-10), the latest the client's may come, the stall checks. An
    /// idle connection costs a few wake-ups per heart-beat interval, not one per
    /// 250 ms.
    fn arm_timer(&mut self) {
        let (send_every, expect_every) = self.session.heartbeat();
        let slack = Duration::from_millis(1);
        let mut due = Instant::now() + Duration::from_secs(3_600);
        if !self.session.connected() {
            due = due.min(self.opened + self.stall + slack);
        }
        // Bytes of a frame arrive without a turn of this loop: the buffer is looked at
        // every quarter of the stall timeout (a frame that stalls is found between 1
        // and 1.5 timeouts after its last byte).
        due = due.min(Instant::now() + self.stall / 4);
        if expect_every > 0 {
            let expected = Duration::from_millis(expect_every.saturating_mul(2));
            due = due.min(self.last_read + expected + slack);
        }
        if send_every > 0 {
            due = due.min(self.last_write + Duration::from_millis(send_every));
        }
        self.timer.as_mut().reset(due.into());
    }

    /// What the client sent: a frame, a heart-beat, the end of its input, or bytes
    /// that are no frame.
    async fn on_read(
        &mut self,
        incoming: Option<Result<Incoming, ReadError>>,
    ) -> Result<(), Close> {
        let (session, pipe) = (&mut self.session, &mut self.pipe);
        let turn = match incoming {
            None => {
                // The client closed its side (it may still read): what it sent goes
                // through and is answered, then the connection ends. Frames held
                // behind a SEND waiting for space are not applied.
                pipe.end_input();
                pump(session, pipe).await
            }
            Some(Ok(Incoming::Heartbeat)) => Ok(()),
            Some(Ok(Incoming::Frame(mut frame))) => {
                let localized = session.localize(&mut frame);
                let mut request = Request::parse(&frame, session.version());
                if let Err(refusal) = localized {
                    request.command = Err(refusal);
                }
                drop(frame);
                // The request is moved on before anything is awaited: held across an
                // await, its bytes would be in every connection's task.
                if applied_ahead(pipe, &request) {
                    // Applied now (it frees space), answered in its place behind the
                    // SEND that waits.
                    let step = Box::pin(session.apply(request)).await.started();
                    pipe.hold_back(Held::Applied(step));
                    Ok(())
                } else {
                    pipe.hold_back(Held::Request(request));
                    pump(session, pipe).await
                }
            }
            Some(Err(ReadError::Io(e))) => {
                // The socket failed or was cut (a reset; a TLS client that closes
                // without close_notify): not a bad frame, and nobody reads an ERROR any
                // more. What was read before it is applied as after a close; the
                // connection then ends.
                tracing::debug!(session = %session.id(), error = %e, "connection lost");
                pipe.end_input();
                pump(session, pipe).await
            }
            Some(Err(ReadError::Frame(e))) => {
                // Bytes that are no frame: its ERROR comes after the frames read before
                // it, and nothing after it is read.
                pipe.input_over = true;
                pipe.hold_back(Held::Applied(
                    session.malformed(Refusal::new(e.code, e.text), e.receipt),
                ));
                pump(session, pipe).await
            }
        };
        // Time the broker spent on the frame is not the client's stall.
        self.read_now();
        turn
    }

    /// The client was read just now (or the broker did not read it meanwhile).
    fn read_now(&mut self) {
        self.partial = (self.link.buffered(), Instant::now());
        self.last_read = Instant::now();
    }

    /// The wait of a SEND held for space ended: it goes on, or is refused in its place.
    async fn on_space(&mut self, waited: Result<(), crate::Error>) -> Result<(), Close> {
        self.pipe.wait = None;
        let turn = match waited {
            Ok(()) => Ok(()),
            Err(e) => {
                let Some(Held::Request(request)) = self.pipe.unhold() else {
                    unreachable!("a SEND waits at the front of the held frames")
                };
                let step = self.session.refused(request, Refusal::from(e));
                self.pipe.start(&mut self.session, step)
            }
        };
        // While frames were held the broker did not read: no stall of the client's.
        self.read_now();
        turn?;
        pump(&mut self.session, &mut self.pipe).await
    }

    /// Frames in flight finished: every outcome that is ready goes out in this
    /// turn's write.
    async fn on_outcome(&mut self, outcome: Outcome) -> Result<(), Close> {
        self.pipe.in_flight_bytes -= outcome.frame_bytes;
        self.session.finish(outcome)?;
        while self.session.output().len() < WRITE_BATCH {
            let Some(outcome) = self.pipe.ready() else {
                break;
            };
            self.session.finish(outcome)?;
        }
        pump(&mut self.session, &mut self.pipe).await
    }

    /// An operator closed the connection (admin API), or the registry went.
    fn on_operator_close(
        &mut self,
        closed: Result<(), oneshot::error::RecvError>,
    ) -> Result<(), Close> {
        if closed.is_err() {
            return Ok(());
        }
        tracing::info!(session = %self.session.id(), "closing: asked for by an operator");
        let refusal = Refusal::new(
            ErrorCode::ClosedByOperator,
            "connection closed by an operator (admin API)",
        );
        self.session.error(&refusal, None);
        Err(Close::Error)
    }

    /// A newer connection took this one's client id over (`allow_link_stealing`).
    fn on_take_over(&mut self, told: Result<(), oneshot::error::RecvError>) -> Result<(), Close> {
        if told.is_err() {
            return Ok(());
        }
        let text = "client id taken over by a newer connection (allow_link_stealing)";
        self.session
            .error(&Refusal::new(ErrorCode::ClientIdInUse, text), None);
        Err(Close::Error)
    }

    /// A subscription has a message: it, and the deliveries ready too, go out in the
    /// same write.
    fn on_delivery(&mut self, sub: String, fed: Fed) -> Result<(), Close> {
        self.session.deliver(sub, fed)?;
        while self.session.output().len() < WRITE_BATCH && self.session.may_deliver() {
            let Some(Some((sub, fed))) = self.session.next_delivery().now_or_never() else {
                break;
            };
            self.session.deliver(sub, fed)?;
        }
        Ok(())
    }

    /// The timer fired: a timeout closes the connection, a heart-beat is sent when
    /// due. `None` when the heart-beat could not be written (the connection ends
    /// without writing more).
    async fn on_timer(&mut self) -> Option<Result<(), Close>> {
        let (send_every, expect_every) = self.session.heartbeat();
        if !self.pipe.reading() {
            // The broker stopped reading (flow control, the pipeline's window): the
            // client is neither silent nor stalled.
            self.last_read = Instant::now();
            self.partial.1 = Instant::now();
        }
        let buffered = self.link.buffered();
        if buffered != self.partial.0 {
            // Bytes of a frame still arriving count as activity (STOMP: any data).
            self.partial = (buffered, Instant::now());
            self.last_read = self.last_read.max(self.partial.1);
        }
        let stall = self.stall;
        let silent = Duration::from_millis(expect_every.saturating_mul(2));
        if !self.session.connected() && self.opened.elapsed() > stall {
            let text = format!("no CONNECT within {} ms", stall.as_millis());
            self.session
                .error(&Refusal::new(ErrorCode::Timeout, text), None);
            return Some(Err(Close::Error));
        }
        if buffered > 0 && self.partial.1.elapsed() > stall {
            let text = format!(
                "incomplete frame: no more bytes for {} ms",
                stall.as_millis()
            );
            self.session
                .error(&Refusal::new(ErrorCode::Timeout, text), None);
            return Some(Err(Close::Error));
        }
        if expect_every > 0 && self.last_read.elapsed() > silent {
            tracing::info!(session = %self.session.id(), "closing: no heart-beat from the client");
            return Some(Err(Close::Done));
        }
        if send_every > 0 && self.last_write.elapsed() >= Duration::from_millis(send_every) {
            if self.link.feed(Outgoing::Heartbeat).is_err() {
                return None;
            }
            let beat = tokio::time::timeout(stall, self.link.write_out());
            if !matches!(beat.await, Ok(Ok(()))) {
                return None;
            }
            self.last_write = Instant::now();
        }
        Some(Ok(()))
    }

    /// After each turn: the registry and the codec follow the session, what the
    /// session queued is written; `Some` when the connection ends.
    async fn end_turn(&mut self, turn: Result<(), Close>) -> Option<Close> {
        if self.take_over.is_none() {
            self.take_over = self.session.take_over_signal();
        }
        let now = (self.session.connected(), self.session.subscription_count());
        if now != self.registered {
            let (login, client_id) = (self.session.login(), self.session.client_id());
            self.registration.update(now.0, login, client_id, now.1);
            self.registered = now;
        }
        // The version may have changed (CONNECT): both halves of the codec follow it.
        let version = self.session.version();
        let codecs = self.link.codec_mut();
        codecs.read.version = version;
        codecs.write.version = version;
        if self.session.connected() {
            codecs.read.limits = self.stomp.config.limits;
        }
        if !self.session.output().is_empty() {
            // A peer that reads nothing for the stall timeout is dead or hopelessly
            // slow: close it, so it holds no durable subscription and no buffers.
            let (link, session) = (&mut self.link, &mut self.session);
            // Taken, so an idle connection keeps no room for frames.
            let output = std::mem::take(session.output());
            let write = async {
                for frame in output {
                    link.feed(Outgoing::Frame(frame))?;
                    // Frames of one turn go out in one write, up to this many bytes.
                    if link.queued() >= WRITE_BUFFER {
                        link.write_out().await?;
                    }
                }
                link.write_out().await.map_err(ProtocolError::from)
            };
            match tokio::time::timeout(self.stall, write).await {
                Ok(Ok(())) => self.last_write = Instant::now(),
                Ok(Err(_)) => return Some(Close::Done),
                Err(_) => {
                    tracing::info!(session = %self.session.id(), "closing: the client reads nothing");
                    return Some(Close::Done);
                }
            }
        }
        if let Err(close) = turn {
            return Some(close);
        }
        self.pipe.drained().then_some(Close::Done)
    }

    /// Ends the connection: frames applied before the end still finish (nothing
    /// more is written), then the session closes, then the socket (lingering).
    async fn close(mut self, close: Close) {
        if let Close::Error = close {
            tracing::info!(session = %self.session.id(), "connection closed after an ERROR frame");
        }
        // An ACK the client sent just before it closed the socket is applied, as a
        // SEND is stored, and both before the subscriptions detach and open
        // transactions roll back.
        while self.pipe.in_flight.next().await.is_some() {}
        // Open transactions end with the connection; subscriptions detach.
        self.session.close().await;
        // A lingering close: our side ends first (the client reads its last frames,
        // then the end), and what the client still sends is read and dropped for a
        // moment. Closing a socket with unread input makes TCP reset it, and a reset
        // can destroy the last frames (an ERROR) before the client has read them.
        let _ = tokio::time::timeout(CLOSE_GRACE, self.link.io_mut().shutdown()).await;
        let drain = async {
            let mut sink = [0u8; 8 << 10];
            while matches!(self.link.io_mut().read(&mut sink).await, Ok(n) if n > 0) {}
        };
        let _ = tokio::time::timeout(CLOSE_GRACE, drain).await;
    }
}

/// How long a closing connection still reads (and drops) what the client sends, and
/// may take to send its end; see the end of [`serve_connection`].
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Whether a request from the client is applied now, ahead of the frames held behind
/// a SEND that waits for space: a plain ACK or NACK, since it frees space (one inside
/// a transaction keeps its place). Otherwise it is held until the frames ahead of it
/// go ([`pump`]).
fn applied_ahead(pipe: &Pipeline, request: &Request) -> bool {
    pipe.wait.is_some() && request.frees_space()
}

/// Applies held requests in order while it may: not after a frame that ended the
/// connection, not while a SEND waits for space, not past the window of frames in
/// flight, and a request that waits for the frames before it
/// ([`Request::waits_for_earlier`]) only once none is in flight. `Err` ends the
/// connection (a frame finished at once was refused, or was DISCONNECT).
async fn pump(session: &mut Session, pipe: &mut Pipeline) -> Result<(), Close> {
    while !pipe.ended && pipe.wait.is_none() && pipe.has_room() {
        if pipe.fenced {
            if !pipe.in_flight.is_empty() {
                break;
            }
            pipe.fenced = false;
        }
        let request = match pipe.unhold() {
            None => break,
            Some(Held::Applied(step)) => {
                pipe.start(session, step)?;
                continue;
            }
            Some(Held::Request(request)) => request,
        };
        if request.waits_for_earlier() && !pipe.in_flight.is_empty() {
            pipe.hold_front(Held::Request(request));
            break;
        }
        let step = match session.flow(&request) {
            // Boxed: a frame's application (a SEND's store call above all) is kilobytes
            // of state, which every connection's task would otherwise hold while idle.
            Flow::Go => Box::pin(session.apply(request)).await,
            // The client is gone (or half-closed): a SEND that would wait for space,
            // and what follows it, is not applied (never receipted either).
            Flow::Wait(_) if pipe.input_over => {
                pipe.drop_unapplied();
                break;
            }
            Flow::Wait(wait) => {
                pipe.wait = Some(wait);
                pipe.hold_front(Held::Request(request));
                break;
            }
            Flow::Refused(refusal) => session.refused(request, refusal),
        };
        pipe.start(session, step)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `bytes`, then fails as rustls does when a TLS peer closes its socket
    /// without `close_notify`.
    struct CutAfter(Option<&'static [u8]>);

    impl tokio::io::AsyncRead for CutAfter {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(match self.0.take() {
                Some(bytes) => {
                    buf.put_slice(bytes);
                    Ok(())
                }
                None => Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "peer closed connection without sending TLS close_notify",
                )),
            })
        }
    }

    /// Issue 35, point 11: a socket that fails (a TLS client gone without
    /// `close_notify`, a reset) is not a malformed frame: the frames read before it
    /// come through, then the failure, as the socket's; bytes that are no frame stay a
    /// frame error.
    #[tokio::test]
    async fn a_failed_socket_is_not_a_bad_frame() {
        let codecs = || Codecs {
            read: StompCodec::new(Limits::default()),
            write: StompCodec::new(Limits::default()),
        };
        let mut link = Link::new(
            CutAfter(Some(b"SEND\ndestination:/queue/a\n\nx\0")),
            codecs(),
        );
        assert!(matches!(link.next().await, Some(Ok(Incoming::Frame(_)))));
        match link.next().await {
            Some(Err(ReadError::Io(e))) => assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof),
            other => panic!("{other:?}"),
        }
        let mut link = Link::new(CutAfter(Some(b"NOT A FRAME\n\n\0")), codecs());
        assert!(matches!(link.next().await, Some(Err(ReadError::Frame(_)))));
    }
}
