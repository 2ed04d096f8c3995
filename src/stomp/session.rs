//! One STOMP session: applies a connection's [`Command`]s to the [`Broker`] and keeps
//! what the connection owns there, its subscriptions, the messages waiting for its
//! acks, and its open transactions.
//!
//! The session never sees the socket. It takes parsed [`Request`]s, hands out the
//! deliveries of its subscriptions ([`Session::next_delivery`]), and queues the frames
//! to write (CONNECTED, MESSAGE, RECEIPT, ERROR) for whoever carries them
//! ([`Session::output`]): the TCP loop in [`super::connection`] today, another framing
//! (STOMP over WebSocket) later.
//!
//! A refused command (its [`Refusal`] text in an ERROR frame) applies nothing; what
//! was applied before it stays. At the end ([`Session::close`]) open transactions are
//! rolled back and subscriptions detached: durable ones go offline with their un-acked
//! messages still stored.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::StreamExt;
use tokio_stream::StreamMap;

use super::command::{refuse, AckRef, Command, Refusal, Request, StompAck, SubscribeHeaders};
use crate::auth::{LoginFailure, Principal, Right, Security};
use crate::broker::{
    shared_subscription_queue, AckMode, Acker, Broker, Message, QueueBrowser, Received,
    SendOptions, Space, SubscribeOptions, Subscription, Target, Transaction, SHARED_TOPIC_HEADER,
};
use crate::stomp::frame::{self, Frame, Version};
use crate::transport::client_ids::{Claim, ClientIds};
use crate::ErrorCode;
use crate::{DestinationKey, Error};

/// Most transactions a connection may have open at once (default of
/// [`SessionLimits::max_open_transactions`]).
pub const MAX_OPEN_TRANSACTIONS: usize = 100;

/// Most subscriptions (browses included) a connection may have at once (default of
/// [`SessionLimits::max_subscriptions`]): each holds up to its prefetch of messages, so
/// a client that subscribes without end would hold the broker's memory.
pub const MAX_SUBSCRIPTIONS_PER_CONNECTION: usize = 1_000;

/// Most bytes (headers and bodies) one transaction may send before COMMIT (64 MiB;
/// default of [`SessionLimits::max_transaction_bytes`]): its messages are held until
/// then.
pub const MAX_TRANSACTION_BYTES: usize = 64 << 20;

/// Most frames (SEND, ACK, NACK) one transaction may hold before COMMIT (default of
/// [`SessionLimits::max_transaction_frames`]).
pub const MAX_TRANSACTION_FRAMES: usize = 10_000;

/// Default of [`SessionLimits::max_unacked`].
pub const MAX_UNACKED_PER_CONNECTION: usize = 100_000;

/// What one connection may hold at once. A frame over a limit gets an ERROR naming the
/// limit (and the connection closes, as after any ERROR); other connections go on.
/// `max_unacked` is flow control instead: at it, deliveries wait. `ebb serve` reads
/// them from `[stomp]` (same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Subscriptions and browses at once.
    pub max_subscriptions: usize,
    /// Transactions begun and not yet committed or aborted.
    pub max_open_transactions: usize,
    /// Frames (SEND, ACK, NACK) in one transaction.
    pub max_transaction_frames: usize,
    /// Bytes of headers and bodies sent in one transaction (`max_transaction_size`
    /// in `[stomp]`).
    pub max_transaction_bytes: usize,
    /// Deliveries (in `client` and `client-individual` modes) waiting for an ACK or
    /// NACK over all the connection's subscriptions: at this many, the broker
    /// delivers nothing more to the connection until acks come, as a prefetch over
    /// the whole connection (each subscription keeps its own prefetch too). No ERROR:
    /// a client holding many un-acked messages breaks no rule, it waits.
    pub max_unacked: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max_subscriptions: MAX_SUBSCRIPTIONS_PER_CONNECTION,
            max_open_transactions: MAX_OPEN_TRANSACTIONS,
            max_transaction_frames: MAX_TRANSACTION_FRAMES,
            max_transaction_bytes: MAX_TRANSACTION_BYTES,
            max_unacked: MAX_UNACKED_PER_CONNECTION,
        }
    }
}

/// Prefix of the xids of STOMP transactions; `ebb serve` rolls back any left with it
/// at start (a STOMP transaction does not outlive its connection).
pub const XID_PREFIX: &str = "stomp:";

/// What a session needs from its listener's configuration.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Heart-beat the server offers: it can send every `.0` ms and wants one from the
    /// client every `.1` ms (STOMP `heart-beat` header; 0 = none).
    pub heartbeat_ms: (u64, u64),
    /// Value of CONNECTED's `server` header.
    pub server_name: String,
    /// Users and rights.
    pub security: Arc<Security>,
    /// The broker's connected client ids (a client id is connected once).
    pub client_ids: Arc<ClientIds>,
    /// A CONNECT with a connected client id takes it over from the older connection
    /// (ActiveMQ's `allowLinkStealing`) instead of being refused.
    pub allow_link_stealing: bool,
    /// What one connection may hold at once.
    pub limits: SessionLimits,
}

/// What every session of a listener shares: the broker its frames go to and the
/// settings.
pub struct SessionShared {
    /// The broker.
    pub broker: Broker,
    /// The settings.
    pub config: SessionConfig,
}

/// What a session knows of its connection: the client's address and certificate.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    /// The client's address, for its refused logins ([`crate::login_guard`]) and logs.
    pub address: Option<std::net::SocketAddr>,
    /// The subject of the client certificate the connection presented over TLS (verified
    /// against `[tls] client_ca_file`): a user with that `certificate_subject` logs in
    /// without a passcode ([`Security::authenticate_certificate`]).
    pub certificate_subject: Option<crate::auth::DistinguishedName>,
}

/// Why a connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// Clean end (DISCONNECT, client closed, broker shutting down).
    Done,
    /// After an ERROR frame.
    Error,
}

/// A wait for space in producer flow control ([`Broker::wait_for_space`]).
pub type SpaceWait = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), crate::Error>>>>;

/// What producer flow control says about a request ([`Session::flow`]).
pub enum Flow {
    /// Apply it now.
    Go,
    /// A SEND that must wait for space: apply it once this resolves.
    Wait(SpaceWait),
    /// The broker fails sends at the limit: refuse the SEND ([`Session::refused`])
    /// with this text, which names the limit.
    Refused(Refusal),
}

/// What is left of a frame after [`Session::apply`]: it resolves once the frame's
/// work is done (its store writes committed).
type Later = Pin<Box<dyn Future<Output = Result<(), Refusal>>>>;

/// How far [`Session::apply_command`] got.
enum Applied {
    /// The command is done.
    Done,
    /// The command is under way; done when this resolves.
    Later(Later),
    /// DISCONNECT: done, and the connection ends.
    Disconnect,
}

impl Applied {
    /// Resolves once the command is done.
    async fn finished(self) -> Result<(), Refusal> {
        match self {
            Applied::Later(later) => later.await,
            Applied::Done | Applied::Disconnect => Ok(()),
        }
    }
}

/// A frame applied by [`Session::apply`] (or refused before, [`Session::refused`]),
/// whose outcome is still to come: a future of its [`Outcome`], for
/// [`Session::finish`] in frame order.
pub struct Step {
    /// Resolves with the frame's outcome.
    pub outcome: Pin<Box<dyn Future<Output = Outcome>>>,
    /// Bytes of the frame, headers and body (what it holds in memory until it resolves).
    pub frame_bytes: usize,
    /// No frame after this one may be applied: it is refused, or DISCONNECT.
    pub last: bool,
    /// Frames after this one wait until it resolves (COMMIT, ABORT: a later frame must
    /// not overtake the transaction's messages, nor act on a transaction half done).
    pub fence: bool,
}

impl Step {
    fn new(
        kind: &'static str,
        receipt: Option<String>,
        frame_bytes: usize,
        work: Pin<Box<dyn Future<Output = Result<bool, Refusal>>>>,
        last: bool,
    ) -> Self {
        let outcome = Box::pin(async move {
            Outcome {
                kind,
                receipt,
                frame_bytes,
                result: work.await,
            }
        });
        Self {
            outcome,
            frame_bytes,
            last,
            fence: false,
        }
    }

    /// The same step, its work started now as a task of its own, whether or not its
    /// outcome is awaited yet: an ACK applied ahead of a SEND that waits for space
    /// frees space at once, while its RECEIPT still waits its turn behind the SEND.
    pub fn started(self) -> Step {
        let outcome = actix_rt::spawn(self.outcome);
        Step {
            outcome: Box::pin(async move {
                outcome
                    .await
                    .expect("a connection's frame task is never cancelled")
            }),
            ..self
        }
    }
}

/// How a frame ended, for [`Session::finish`].
pub struct Outcome {
    /// The frame's command, for the log.
    kind: &'static str,
    receipt: Option<String>,
    /// Bytes of the frame, as in its [`Step`].
    pub frame_bytes: usize,
    /// `Ok(true)` done, `Ok(false)` done and the connection ends (DISCONNECT), `Err`
    /// refused or failed.
    result: Result<bool, Refusal>,
}

/// What a STOMP subscription reads: a consumer's deliveries, or a queue browse.
enum Feed {
    Consumer(Box<Subscription>),
    /// `browser:true`: the queue's messages, then one [`Fed::BrowseEnd`].
    Browse {
        browser: QueueBrowser,
        ended: bool,
    },
}

/// One item for [`Session::deliver`], from [`Session::next_delivery`].
pub enum Fed {
    /// A message for the subscription.
    Message(Received),
    /// A browse reached the end of its queue: the MESSAGE with `browser:end`.
    BrowseEnd,
    /// A browse page failed (the text says why): an ERROR, and the connection ends.
    BrowseFailed(String),
}

impl futures::Stream for Feed {
    type Item = Fed;

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Fed>> {
        use std::task::Poll;
        match self.get_mut() {
            Feed::Consumer(sub) => sub.poll_next_unpin(cx).map(|m| m.map(Fed::Message)),
            Feed::Browse { ended: true, .. } => Poll::Ready(None),
            Feed::Browse { browser, ended } => match browser.poll_next_unpin(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Some(Ok(message))) => Poll::Ready(Some(Fed::Message(message))),
                Poll::Ready(Some(Err(e))) => {
                    *ended = true;
                    Poll::Ready(Some(Fed::BrowseFailed(e.to_string())))
                }
                Poll::Ready(None) => {
                    *ended = true;
                    Poll::Ready(Some(Fed::BrowseEnd))
                }
            },
        }
    }
}

/// STOMP's names of a connection's own temporary destinations (ActiveMQ's and
/// RabbitMQ's), with their kinds ([`Session::localize`]).
const TEMPORARY_PREFIXES: [(&str, crate::DestinationKind); 2] = [
    ("/temp-queue/", crate::DestinationKind::TEMP_QUEUE),
    ("/temp-topic/", crate::DestinationKind::TEMP_TOPIC),
];

/// A client subscription on this connection.
struct Sub {
    /// `None` for a browse (it acks nothing).
    acker: Option<Acker>,
    mode: StompAck,
    /// As subscribed: one destination or a wildcard destination.
    destination: Target,
    durable_name: Option<String>,
    /// A shared subscription's: its name and its group's queue, which it consumes
    /// from.
    shared: Option<Shared>,
}

/// What a STOMP subscription to a shared subscription consumes from.
struct Shared {
    /// Its `shared-subscription-name`.
    name: String,
    /// Its group's queue ([`shared_subscription_queue`]).
    queue: DestinationKey,
}

/// The durable member a shared subscription made over STOMP keeps in its group
/// ([`Broker::join_shared_subscription`]): the subscription itself, which outlives
/// its consumers until an UNSUBSCRIBE naming it.
const SHARED_MEMBER: &str = "stomp:shared-subscription";

/// A delivered message waiting for ACK/NACK, by its `ack` id.
struct PendingAck {
    subscription: String,
    message: Received,
}

/// An open STOMP transaction: its sends are already stored prepared (in `sends`,
/// under the connection's xid for it); its acks wait here until COMMIT.
struct Tx {
    sends: Transaction,
    acks: Vec<String>,
    /// NACKs waiting for COMMIT.
    nacks: Vec<String>,
    /// Bytes of headers and bodies sent in it (bounded by
    /// [`SessionLimits::max_transaction_bytes`]).
    bytes: usize,
    /// SEND, ACK and NACK frames in it (bounded by
    /// [`SessionLimits::max_transaction_frames`]).
    frames: usize,
}

/// The broker-facing state of one connection.
pub struct Session {
    /// The broker and the settings, shared by every session of the listener (one
    /// pointer each, not a copy: issue 53).
    stomp: Arc<SessionShared>,
    peer: Peer,
    session_id: String,
    connected: bool,
    version: Version,
    client_id: Option<String>,
    /// The hold on `client_id` while the session lives.
    claim: Option<Claim>,
    /// This connection's number: its messages' origin, for `noLocal` subscriptions.
    connection: u64,
    principal: Option<Principal>,
    subscriptions: HashMap<String, Sub>,
    /// The subscriptions' message streams, by subscription id.
    streams: StreamMap<String, Feed>,
    pending: HashMap<String, PendingAck>,
    next_ack: u64,
    transactions: HashMap<String, Tx>,
    /// Destinations this connection has sent to (it counts as one producer of each).
    producing: HashSet<DestinationKey>,
    out: Vec<Frame>,
    /// (send every ms, expect every ms), negotiated; 0 = off.
    heartbeat: (u64, u64),
    /// An ERROR said the store failed: the connection ends by the broker's fault, so
    /// what its consumers hold goes back uncounted ([`Subscription::release_uncounted`]).
    store_failed: bool,
}

impl Session {
    /// A session before CONNECT. `session_id` names it in CONNECTED, ack ids, xids and
    /// logs.
    pub fn new(stomp: Arc<SessionShared>, peer: Peer, session_id: String) -> Self {
        Self {
            stomp,
            peer,
            session_id,
            connected: false,
            version: Version::V1_0,
            client_id: None,
            claim: None,
            connection: crate::broker::next_connection_id(),
            principal: None,
            subscriptions: HashMap::new(),
            store_failed: false,
            streams: StreamMap::new(),
            pending: HashMap::new(),
            next_ack: 1,
            transactions: HashMap::new(),
            producing: HashSet::new(),
            out: Vec::new(),
            heartbeat: (0, 0),
        }
    }

    /// Its id, as given to [`Session::new`].
    pub fn id(&self) -> &str {
        &self.session_id
    }

    /// True once CONNECT was accepted.
    pub fn connected(&self) -> bool {
        self.connected
    }

    /// The login it connected with (when users are configured).
    pub fn login(&self) -> Option<&str> {
        self.principal.as_ref().map(|p| p.login.as_str())
    }

    /// The `client-id` it connected with, if any.
    pub fn client_id(&self) -> Option<&str> {
        self.client_id.as_deref()
    }

    /// Subscriptions it holds now (browses included).
    pub fn subscription_count(&self) -> usize {
        self.subscriptions.len()
    }

    /// Whether the connection may take another delivery: connected, and fewer than
    /// [`SessionLimits::max_unacked`] deliveries waiting for an ACK or NACK. At the
    /// limit every subscription of the connection waits (what the destinations hold
    /// stays there) until acks come.
    pub fn may_deliver(&self) -> bool {
        self.connected && self.pending.len() < self.stomp.config.limits.max_unacked
    }

    /// The negotiated protocol version (1.0 before CONNECT).
    pub fn version(&self) -> Version {
        self.version
    }

    /// Negotiated heart-beat: (send every ms, expect every ms); 0 = off.
    pub fn heartbeat(&self) -> (u64, u64) {
        self.heartbeat
    }

    /// Once, after a CONNECT with a client id: what resolves (`Ok`) when a newer
    /// connection takes the id over (link stealing); the connection then closes.
    pub fn take_over_signal(&mut self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        self.claim.as_mut()?.take_over_signal()
    }

    /// Frames queued for the client, in order; the caller writes them.
    pub fn output(&mut self) -> &mut Vec<Frame> {
        &mut self.out
    }

    /// The next message from any of its subscriptions (`(subscription id, message)`);
    /// `None` at once when it has none. Pass it to [`Session::deliver`].
    pub async fn next_delivery(&mut self) -> Option<(String, Fed)> {
        self.streams.next().await
    }

    /// Queues an ERROR frame for `refusal` (written before the connection closes):
    /// its text in the `message` header and the body, its code in `error-code`.
    pub fn error(&mut self, refusal: &Refusal, receipt: Option<&str>) {
        let message = refusal.text.as_str();
        tracing::info!(session = %self.session_id, code = %refusal.code, %message, "ERROR frame sent");
        self.store_failed |= refusal.code == ErrorCode::StoreFailure;
        let mut frame = Frame::new(frame::Command::Error)
            .header("message", message)
            .header("error-code", refusal.code.as_str());
        if refusal.code == ErrorCode::NoCommonVersion {
            frame = frame.header("version", super::command::SUPPORTED_VERSIONS);
        }
        if let Some(r) = receipt {
            frame = frame.header("receipt-id", r);
        }
        self.out.push(
            frame
                .header("content-type", "text/plain")
                .body(message.as_bytes().to_vec()),
        );
    }

    fn receipt(&mut self, receipt: Option<String>) {
        if let Some(r) = receipt {
            let receipt = Frame::new(frame::Command::Receipt).header("receipt-id", r);
            self.out.push(receipt);
        }
    }

    /// Producer flow control for `request`, about to be applied: a SEND to a
    /// destination at a usage limit waits, or is refused when the broker is set to fail
    /// instead (the refusal names the limit). Other requests, and SENDs the broker will
    /// refuse for another reason, go on.
    pub fn flow(&mut self, request: &Request) -> Flow {
        if !self.connected {
            return Flow::Go;
        }
        let Ok(Command::Send {
            destination,
            message,
            transaction,
            ..
        }) = &request.command
        else {
            return Flow::Go;
        };
        if transaction.is_some() {
            // A transaction never waits for space (its own COMMIT may be what would
            // free it): the transactions' budget refuses the SEND when it applies.
            return Flow::Go;
        }
        let destination = destination.clone();
        let persistent = message.persistent;
        match self.stomp.broker.check_space(&destination, persistent) {
            Ok(Space::Free) | Err(_) => Flow::Go,
            Ok(Space::Fail(text)) => {
                tracing::info!(session = %self.session_id, %destination, %text, "send refused by producer flow control");
                Flow::Refused(Refusal::new(ErrorCode::ResourceLimit, text))
            }
            Ok(Space::Wait) => {
                let broker = self.stomp.broker.clone();
                Flow::Wait(Box::pin(async move {
                    broker.wait_for_space(&destination, persistent).await
                }))
            }
        }
    }

    /// Applies one request as far as it can without waiting for the store, and returns
    /// the rest as a [`Step`]: a SEND has its place in its destination's order, an ACK
    /// or NACK has changed what this connection waits for, any other command is done.
    /// The caller resolves steps in frame order and hands each outcome to
    /// [`Session::finish`], which queues the RECEIPT or the ERROR; a refused request is
    /// a step that resolves at once with its refusal, and nothing of it is applied.
    ///
    /// A request whose meaning needs the frames before it to be done
    /// ([`Request::waits_for_earlier`]: SUBSCRIBE, UNSUBSCRIBE, COMMIT, ABORT,
    /// DISCONNECT) must be applied only once every earlier step resolved.
    pub async fn apply(&mut self, request: Request) -> Step {
        let Request {
            kind,
            receipt,
            command,
            frame_bytes,
        } = request;
        type Work = Pin<Box<dyn Future<Output = Result<bool, Refusal>>>>;
        let (work, last): (Work, bool) = match self.apply_command(kind, command).await {
            Ok(Applied::Done) => (Box::pin(std::future::ready(Ok(true))), false),
            Ok(Applied::Later(later)) => {
                (Box::pin(async move { later.await.map(|()| true) }), false)
            }
            Ok(Applied::Disconnect) => (Box::pin(std::future::ready(Ok(false))), true),
            Err(refusal) => (Box::pin(std::future::ready(Err(refusal))), true),
        };
        let mut step = Step::new(kind.as_str(), receipt, frame_bytes, work, last);
        step.fence = matches!(kind, frame::Command::Commit | frame::Command::Abort);
        step
    }

    /// The step of a request refused before it was applied (by producer flow control):
    /// it resolves at once with `refusal`, in its place among the frames.
    pub fn refused(&self, request: Request, refusal: Refusal) -> Step {
        let work = Box::pin(std::future::ready(Err(refusal)));
        Step::new(
            request.kind.as_str(),
            request.receipt,
            request.frame_bytes,
            work,
            true,
        )
    }

    /// The step of bytes that are no frame (the codec's error `refusal`; `receipt` if
    /// the frame's headers could be read): it resolves at once with the refusal, after
    /// the frames before it.
    pub fn malformed(&self, refusal: Refusal, receipt: Option<String>) -> Step {
        let work = Box::pin(std::future::ready(Err(refusal)));
        Step::new("malformed frame", receipt, 0, work, true)
    }

    /// Queues the answer to a resolved step: its RECEIPT (if it asked for one), or an
    /// ERROR naming what was wrong (with its `receipt-id`). `Err` ends the connection:
    /// after DISCONNECT ([`Close::Done`]) or a refusal ([`Close::Error`]).
    pub fn finish(&mut self, outcome: Outcome) -> Result<(), Close> {
        match outcome.result {
            Ok(true) => {
                self.receipt(outcome.receipt);
                Ok(())
            }
            Ok(false) => {
                // DISCONNECT: the receipt, then close.
                self.receipt(outcome.receipt);
                Err(Close::Done)
            }
            Err(refusal) => {
                tracing::info!(session = %self.session_id, command = outcome.kind, code = %refusal.code, message = %refusal.text, "frame refused");
                self.error(&refusal, outcome.receipt.as_deref());
                Err(Close::Error)
            }
        }
    }

    /// Applies one command as far as it goes without waiting for the store.
    async fn apply_command(
        &mut self,
        kind: frame::Command,
        command: Result<Command, Refusal>,
    ) -> Result<Applied, Refusal> {
        use frame::Command as C;
        // The connection's state first: a frame before CONNECT, or a second CONNECT,
        // is refused for that whatever its headers.
        match (self.connected, kind) {
            (false, C::Connect | C::Stomp) => {}
            (false, other) => {
                return refuse(
                    ErrorCode::ProtocolViolation,
                    format!("{} before CONNECT: connect first", other.as_str()),
                )
            }
            (true, C::Connect | C::Stomp) => {
                return refuse(
                    ErrorCode::ProtocolViolation,
                    "already connected: a second CONNECT is not allowed",
                )
            }
            (true, _) => {}
        }
        match command? {
            Command::Connect {
                version,
                login,
                passcode,
                heart_beat,
                client_id,
                request_id,
            } => {
                self.connect(version, login, passcode, heart_beat, client_id, request_id)
                    .await?
            }
            Command::Send {
                destination,
                also,
                message,
                transaction,
            } => return self.send(destination, also, message, transaction).await,
            Command::Subscribe {
                destination,
                id,
                ack,
                options,
            } => self.subscribe(destination, id, ack, *options).await?,
            Command::Unsubscribe {
                id,
                durable_name,
                shared_name,
            } => self.unsubscribe(id, durable_name, shared_name).await?,
            Command::Ack { ack, transaction } => return self.ack(ack, transaction),
            Command::Nack { ack, transaction } => return self.nack(ack, transaction),
            Command::Begin { transaction } => self.begin(transaction)?,
            Command::Commit { transaction } => return self.commit(transaction),
            Command::Abort { transaction } => return self.abort(transaction),
            Command::Disconnect => return Ok(Applied::Disconnect),
        }
        Ok(Applied::Done)
    }

    async fn connect(
        &mut self,
        version: Version,
        login: Option<String>,
        passcode: Option<String>,
        (cx, cy): (u64, u64),
        client_id: Option<String>,
        request_id: Option<String>,
    ) -> Result<(), Refusal> {
        // A broker whose lease ran out (paused past it) answers no CONNECT.
        self.stomp
            .broker
            .refuse_if_shut_down()
            .map_err(Refusal::from)?;
        // The version is agreed: a refusal of this CONNECT is framed in it too (its
        // header escapes keep a `\` or `:` of the message as it is).
        self.version = version;
        if !self.log_in_by_certificate(login.as_deref())? {
            self.log_in_by_passcode(login, passcode).await?;
        }
        if let Some(id) = &client_id {
            let claim = self
                .stomp
                .config
                .client_ids
                .claim(id, self.stomp.config.allow_link_stealing)
                .await
                .map_err(|e| Refusal::new(ErrorCode::ClientIdInUse, e.to_string()))?;
            self.claim = Some(claim);
        }
        let (sx, sy) = self.stomp.config.heartbeat_ms;
        // We send every max(sx, cy) if both want it; we expect every max(cx, sy).
        let send_every = if cy == 0 || sx == 0 { 0 } else { sx.max(cy) };
        let expect_every = if cx == 0 || sy == 0 { 0 } else { cx.max(sy) };
        self.heartbeat = (send_every, expect_every);
        self.version = version;
        self.client_id = client_id;
        self.connected = true;
        let mut connected = Frame::new(frame::Command::Connected)
            .header("version", version.as_str())
            .header("heart-beat", format!("{send_every},{expect_every}"))
            .header("server", self.stomp.config.server_name.clone())
            .header("session", self.session_id.clone());
        if let Some(id) = request_id {
            connected = connected.header("response-id", id);
        }
        self.out.push(connected);
        Ok(())
    }

    /// Logs in by the connection's client certificate, if a user has its subject:
    /// `Ok(true)` when logged in so, `Ok(false)` when the passcode decides (no
    /// certificate, no login required, or no user has its subject and a `login` was
    /// given). Refused: the certificate's user is not `login`, or no user has its
    /// subject and no `login` was given (the ERROR names the subject presented).
    fn log_in_by_certificate(&mut self, login: Option<&str>) -> Result<bool, Refusal> {
        let security = Arc::clone(&self.stomp.config.security);
        let (Some(subject), true) = (&self.peer.certificate_subject, security.requires_login())
        else {
            return Ok(false);
        };
        let peer = self.peer.address;
        match security.authenticate_certificate(subject, login) {
            None => {
                tracing::info!(session = %self.session_id, peer = ?peer, %subject, "no user has this client certificate's subject");
                if login.is_none() {
                    let why = if subject.is_empty() {
                        "the client certificate's subject is empty, so it names no user".to_string()
                    } else if subject.has_binary_value() {
                        format!("no user has the client certificate's subject ({subject}; a #hex value is not text and matches no certificate_subject)")
                    } else {
                        format!("no user has the client certificate's subject ({subject})")
                    };
                    return refuse(
                        ErrorCode::AuthenticationFailed,
                        format!("authentication required: {why}; give login and passcode"),
                    );
                }
                Ok(false)
            }
            Some(Ok(principal)) => {
                tracing::info!(session = %self.session_id, peer = ?peer, login = %principal.login, "logged in by client certificate");
                self.principal = Some(principal);
                Ok(true)
            }
            Some(Err(reason)) => {
                tracing::info!(session = %self.session_id, peer = ?peer, login = ?login, %reason, "refused connection");
                refuse(ErrorCode::AuthenticationFailed, reason.to_string())
            }
        }
    }

    /// Logs in by `login` and `passcode` when users are configured (argon2, off the
    /// event loop; refused logins throttled per address and answered after
    /// [`crate::auth::FAILED_LOGIN_DELAY`]).
    async fn log_in_by_passcode(
        &mut self,
        login: Option<String>,
        passcode: Option<String>,
    ) -> Result<(), Refusal> {
        let security = Arc::clone(&self.stomp.config.security);
        let shown = login.clone();
        let peer = self.peer.address;
        match security
            .log_in(peer.map(|p| p.ip()), "stomp", login, passcode)
            .await
        {
            Ok(principal) => {
                self.principal = principal;
                Ok(())
            }
            Err(failure) => {
                tracing::info!(session = %self.session_id, peer = ?peer, login = ?shown, "refused connection: {failure}");
                let code = match failure {
                    LoginFailure::Throttled(_) => ErrorCode::LoginThrottled,
                    LoginFailure::Refused(_) => ErrorCode::AuthenticationFailed,
                    LoginFailure::Internal => ErrorCode::Internal,
                };
                refuse(code, failure.to_string())
            }
        }
    }

    /// Refuses unless this connection's user has `right` on `destination`. A
    /// temporary destination this connection made needs no right; another
    /// connection's is decided by `[temp_destination_authorization_entry]`
    /// ([`crate::auth::Security::authorize_temporary`]).
    fn authorize(&self, right: Right, destination: &DestinationKey) -> Result<(), Refusal> {
        if destination.capabilities().temporary
            && self.stomp.broker.temporary_owner(destination) == Some(self.connection)
        {
            return Ok(());
        }
        self.stomp
            .config
            .security
            .authorize(self.principal.as_ref(), right, destination)
            .map_err(|e| Refusal::new(ErrorCode::NotAuthorized, e.to_string()))
    }

    /// SEND: the message takes its place in its destination's order (in its
    /// transaction, if it names one); what is left is its commit. A composite SEND
    /// (`also` not empty) needs `write` on each destination, and is committed to all
    /// of them at once (in its transaction, at its COMMIT).
    async fn send(
        &mut self,
        destination: DestinationKey,
        also: Vec<DestinationKey>,
        message: Message,
        transaction: Option<String>,
    ) -> Result<Applied, Refusal> {
        let message = message.from_connection(self.connection);
        self.authorize(Right::Write, &destination)?;
        for other in &also {
            self.authorize(Right::Write, other)?;
        }
        for key in std::iter::once(&destination).chain(&also) {
            if self.producing.insert(key.clone()) {
                self.stomp.broker.producer_joined(key);
            }
        }
        let mut destinations = also;
        destinations.insert(0, destination);
        let started = match transaction {
            Some(tx) => {
                let max = self.stomp.config.limits.max_transaction_bytes;
                let open = self.open_transaction(&tx)?;
                open.bytes += message.charged_bytes();
                if open.bytes > max {
                    return refuse(ErrorCode::LimitExceeded, format!(
                        "transaction `{tx}` sends more than {max} bytes before COMMIT (max_transaction_size)"
                    ));
                }
                open.sends.start_send_to_each(&destinations, message).await
            }
            // Flow control was checked before ([`Session::flow`]) for the first; a
            // composite's others wait for space here.
            None if destinations.len() > 1 => {
                self.stomp
                    .broker
                    .start_send_to_each_with(&destinations, message, SendOptions::default())
                    .await
            }
            None => {
                self.stomp
                    .broker
                    .start_send_to_each_with(&destinations, message, SendOptions::checked())
                    .await
            }
        };
        let not_accepted = |e: crate::Error| Refusal::of("message not accepted: ", &e);
        let pending = started.map_err(not_accepted)?;
        Ok(Applied::Later(Box::pin(async move {
            pending.await.map(drop).map_err(not_accepted)
        })))
    }

    /// The store xid of this connection's transaction `tx`.
    fn xid(&self, tx: &str) -> String {
        format!("{XID_PREFIX}{}:{tx}", self.session_id)
    }

    async fn subscribe(
        &mut self,
        destination: Target,
        id: String,
        mode: StompAck,
        options: SubscribeHeaders,
    ) -> Result<(), Refusal> {
        let SubscribeHeaders {
            prefetch,
            durable_name,
            selector,
            browser,
            exclusive,
            no_local,
            shared_name,
        } = options;
        // Who consumes or browses a temporary destination is the broker's rule (its
        // own connection; a browse also with the read right on others'), below.
        if let Target::One(key) = &destination {
            if !key.capabilities().temporary {
                self.authorize(Right::Read, key)?;
            }
        }
        if self.subscriptions.contains_key(&id) {
            return refuse(
                ErrorCode::DuplicateId,
                format!("subscription id `{id}` is already in use on this connection"),
            );
        }
        let max = self.stomp.config.limits.max_subscriptions;
        if self.subscriptions.len() >= max {
            return refuse(
                ErrorCode::LimitExceeded,
                format!("more than {max} subscriptions on one connection (max_subscriptions)"),
            );
        }
        if browser {
            // Browsing needs only the read right (as ActiveMQ's browse permission); a
            // temporary queue is browsed by its own connection, or with the read
            // right of [temp_destination_authorization_entry].
            if let Target::One(key) = &destination {
                let others = key.capabilities().temporary
                    && self
                        .stomp
                        .config
                        .security
                        .authorize_temporary(self.principal.as_ref(), Right::Read)
                        .is_ok();
                self.stomp
                    .broker
                    .may_browse(key, Some(self.connection), others)
                    .map_err(|e| Refusal::of("cannot browse: ", &e))?;
            }
            let browser = self
                .stomp
                .broker
                .browse_queue_matching(&destination, selector)
                .await
                .map_err(|e| Refusal::of("cannot browse: ", &e))?;
            let sub = Sub {
                acker: None,
                mode,
                destination,
                durable_name: None,
                shared: None,
            };
            let feed = Feed::Browse {
                browser,
                ended: false,
            };
            self.add_subscription(id, sub, feed);
            return Ok(());
        }
        let mut options = match &durable_name {
            Some(name) => self.durable_options(&destination, name).await?,
            None => SubscribeOptions::non_durable(),
        };
        options.prefetch = prefetch;
        options.ack = if mode == StompAck::Auto {
            AckMode::Auto
        } else {
            AckMode::Client
        };
        if let Some(share) = shared_name {
            return self
                .subscribe_shared(id, destination, &share, mode, options)
                .await;
        }
        if matches!(destination, Target::Pattern(_))
            && durable_name.is_none()
            && self.stomp.config.security.has_authorization()
        {
            // A non-durable wildcard subscription reads the matching destinations
            // this connection may read.
            let (security, principal) = (
                Arc::clone(&self.stomp.config.security),
                self.principal.clone(),
            );
            options = options.accept(move |key| {
                security
                    .authorize(principal.as_ref(), Right::Read, key)
                    .is_ok()
            });
        }
        options.selector = selector;
        options.exclusive = exclusive;
        options.no_local = no_local.then_some(self.connection);
        options.connection = Some(self.connection);
        let subscription = self
            .stomp
            .broker
            .subscribe(&destination, options)
            .await
            .map_err(|e| Refusal::of("cannot subscribe: ", &e))?;
        let sub = Sub {
            acker: Some(subscription.acker()),
            mode,
            destination,
            durable_name,
            shared: None,
        };
        self.add_subscription(id, sub, Feed::Consumer(Box::new(subscription)));
        Ok(())
    }

    /// SUBSCRIBE with `shared-subscription-name: SHARE` to `destination` (a topic or
    /// a wildcard topic): a consumer of the shared durable subscription, whose group
    /// queue ([`shared_subscription_queue`]) it consumes from, competing with every
    /// other consumer of the share (MQTT's `$share/SHARE/…` of the same filter
    /// included). Needs read on every topic `destination` covers, and admin when it
    /// makes the subscription durable (the share is new, or only MQTT clean sessions
    /// hold its group), as for a durable subscription. The subscription outlives its
    /// consumers, across restarts, until an UNSUBSCRIBE names it.
    async fn subscribe_shared(
        &mut self,
        id: String,
        destination: Target,
        share: &str,
        mode: StompAck,
        mut options: SubscribeOptions,
    ) -> Result<(), Refusal> {
        let cannot = |e: Error| Refusal::of("cannot subscribe: ", &e);
        let queue = shared_subscription_queue(share, &destination).map_err(cannot)?;
        let durable = self
            .stomp
            .broker
            .is_shared_member(&queue, SHARED_MEMBER)
            .await
            .map_err(cannot)?;
        self.authorize_target(Right::Read, &destination)?;
        if !durable {
            self.authorize_target(Right::Admin, &destination)?;
        }
        self.stomp
            .broker
            .join_shared_subscription(&destination, &queue, self.connection, Some(SHARED_MEMBER))
            .await
            .map_err(cannot)?;
        options.connection = Some(self.connection);
        let subscription = match self
            .stomp
            .broker
            .subscribe(&Target::One(queue.clone()), options)
            .await
        {
            Ok(subscription) => subscription,
            Err(e) => {
                // Nothing consumes: the durable membership this SUBSCRIBE made goes too.
                if let Err(left) = self.leave_shared(&queue, !durable).await {
                    tracing::warn!(session = %self.session_id, queue = %queue.stomp(), error = %left, "cannot leave the shared subscription");
                }
                return Err(cannot(e));
            }
        };
        let sub = Sub {
            acker: Some(subscription.acker()),
            mode,
            destination,
            durable_name: None,
            shared: Some(Shared {
                name: share.to_string(),
                queue,
            }),
        };
        self.add_subscription(id, sub, Feed::Consumer(Box::new(subscription)));
        Ok(())
    }

    /// `right` on `target`: on one destination, or on every topic a pattern covers
    /// (one authorization entry decides the whole pattern).
    fn authorize_target(&self, right: Right, target: &Target) -> Result<(), Refusal> {
        match target {
            Target::One(key) => self.authorize(right, key),
            Target::Pattern(p) => self
                .stomp
                .config
                .security
                .authorize_pattern(self.principal.as_ref(), right, p)
                .map_err(|e| Refusal::new(ErrorCode::NotAuthorized, e.to_string())),
        }
    }

    /// This connection's consumer of shared subscription `queue` is gone (dropped
    /// before): the connection leaves the group unless another of its subscriptions
    /// consumes from it; `forget` ends the subscription's durable membership too, so
    /// the group ends once no consumer is left.
    ///
    /// Errors: a store error (the group stays; see
    /// [`Broker::leave_shared_subscription`]).
    async fn leave_shared(&self, queue: &DestinationKey, forget: bool) -> Result<(), Error> {
        let still = self
            .subscriptions
            .values()
            .any(|s| s.shared.as_ref().is_some_and(|s| s.queue == *queue));
        let connection = (!still).then_some(self.connection);
        let member = forget.then_some(SHARED_MEMBER);
        if connection.is_none() && member.is_none() {
            return Ok(());
        }
        self.stomp
            .broker
            .leave_shared_subscription(queue, connection, member)
            .await?;
        Ok(())
    }

    /// The options of durable subscription `name` to `destination`: it needs the
    /// connection's client id; creating it needs the admin right (ActiveMQ), and on a
    /// wildcard pattern, held on every matching topic also while offline, the read
    /// (and to create it the admin) right on all of them.
    async fn durable_options(
        &self,
        destination: &Target,
        name: &str,
    ) -> Result<SubscribeOptions, Refusal> {
        let Some(client) = &self.client_id else {
            return refuse(
                ErrorCode::MissingHeader,
                "a durable subscription (activemq.subscriptionName) needs client-id on CONNECT",
            );
        };
        // Creating a durable subscription needs the admin right (ActiveMQ).
        let exists = self
            .stomp
            .broker
            .durable_subscription_exists(destination, client, name)
            .await
            .map_err(|e| Refusal::of("cannot subscribe: ", &e))?;
        match destination {
            Target::One(key) if !exists => self.authorize(Right::Admin, key)?,
            Target::One(_) => {}
            // Held on every matching topic, also while offline: the rights
            // must hold on all of them (one entry decides the whole pattern).
            Target::Pattern(pattern) => {
                let security = &self.stomp.config.security;
                let principal = self.principal.as_ref();
                let mut rights = vec![Right::Read];
                rights.extend((!exists).then_some(Right::Admin));
                for right in rights {
                    security
                        .authorize_pattern(principal, right, pattern)
                        .map_err(|e| Refusal::new(ErrorCode::NotAuthorized, e.to_string()))?;
                }
            }
        }
        Ok(SubscribeOptions::durable(client.clone(), name))
    }

    /// Registers subscription `id`: what it is, and the stream it reads.
    fn add_subscription(&mut self, id: String, sub: Sub, feed: Feed) {
        self.subscriptions.insert(id.clone(), sub);
        self.streams.insert(id, feed);
    }

    async fn unsubscribe(
        &mut self,
        id: String,
        durable_name: Option<String>,
        shared_name: Option<String>,
    ) -> Result<(), Refusal> {
        let Some(sub) = self.subscriptions.get(&id) else {
            return refuse(
                ErrorCode::UnknownSubscription,
                format!("no subscription with id `{id}` on this connection"),
            );
        };
        // Ending a shared subscription names it, on one of its consumers, with the
        // admin right that making it needs.
        match (&sub.shared, &shared_name) {
            (_, None) => {}
            (Some(shared), Some(name)) if *name == shared.name => {
                self.authorize_target(Right::Admin, &sub.destination)?;
            }
            (Some(shared), Some(name)) => {
                return refuse(
                    ErrorCode::InvalidRequest,
                    format!(
                        "subscription `{id}` consumes from shared subscription `{}`, not `{name}`",
                        shared.name
                    ),
                )
            }
            (None, Some(_)) => {
                return refuse(
                    ErrorCode::InvalidRequest,
                    format!("subscription `{id}` is not a shared subscription"),
                )
            }
        }
        let Some(sub) = self.subscriptions.remove(&id) else {
            return Ok(());
        };
        self.streams.remove(&id);
        self.pending.retain(|_, p| p.subscription != id);
        if let Some(shared) = &sub.shared {
            return self
                .leave_shared(&shared.queue, shared_name.is_some())
                .await
                .map_err(|e| Refusal::of("cannot leave the shared subscription: ", &e));
        }
        // UNSUBSCRIBE with activemq.subscriptionName deletes the durable subscription.
        if let (Some(name), Some(client), true) = (
            durable_name,
            &self.client_id,
            sub.destination.kind().capabilities().durable_subscriptions,
        ) {
            let name = sub.durable_name.unwrap_or(name);
            self.stomp
                .broker
                .remove_durable(&sub.destination, client, &name)
                .await
                .map_err(|e| Refusal::of("cannot remove durable subscription: ", &e))?;
        }
        Ok(())
    }

    /// Queues the MESSAGE frame for a delivery on subscription `subscription` (from
    /// [`Session::next_delivery`]); unless the subscription acks automatically, the
    /// message waits for an ACK or NACK under the frame's `ack` id. The end of a browse
    /// is a MESSAGE with `browser:end` and no body (as ActiveMQ's); a browse that
    /// failed is an ERROR, and `Err` ends the connection.
    pub fn deliver(&mut self, subscription: String, fed: Fed) -> Result<(), Close> {
        let Some(sub) = self.subscriptions.get(&subscription) else {
            return Ok(());
        };
        let message = match fed {
            Fed::Message(message) => message,
            Fed::BrowseEnd => {
                let end = Frame::new(frame::Command::Message)
                    .header("subscription", subscription)
                    .header("message-id", format!("{}-browser-end", self.session_id))
                    .header("destination", sub.destination.stomp())
                    .header("browser", "end");
                self.out.push(end);
                return Ok(());
            }
            Fed::BrowseFailed(text) => {
                let text = format!("browse of {} failed: {text}", sub.destination.stomp());
                self.error(&Refusal::new(ErrorCode::StoreFailure, text), None);
                return Err(Close::Error);
            }
        };
        let ack_id = format!("{}-{}", self.session_id, self.next_ack);
        self.next_ack += 1;
        // A shared subscription's copy (a wildcard one's) names its topic.
        let published_to = sub.shared.as_ref().and_then(|_| {
            message
                .header(SHARED_TOPIC_HEADER)
                .and_then(|t| DestinationKey::from_container(t).ok())
        });
        let mut frame = Frame::new(frame::Command::Message)
            .header("subscription", subscription.clone())
            .header("message-id", message.message_id())
            .header(
                "destination",
                match published_to.as_ref().or(message.destination()) {
                    Some(from) => from.stomp(),
                    None => sub.destination.stomp(),
                },
            )
            .header("expires", message.expiration().to_string())
            .header("priority", message.priority().to_string())
            .header("persistent", message.persistent().to_string())
            .header("timestamp", message.timestamp_ms().to_string())
            .header("redelivered", message.redelivered().to_string());
        if sub.mode != StompAck::Auto {
            frame = frame.header("ack", ack_id.clone());
        }
        for (name, value) in message.headers() {
            if sub.shared.is_some() && name == SHARED_TOPIC_HEADER {
                continue;
            }
            frame = frame.header(name.clone(), value.clone());
        }
        frame = frame.body(message.shared_body());
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
        Ok(())
    }

    /// The pending ack an ACK or NACK names (1.2 `id`; 1.0/1.1 `message-id`).
    fn ack_id(&self, ack: &AckRef) -> Result<String, Refusal> {
        if let Some(id) = &ack.id {
            if self.pending.contains_key(id) {
                return Ok(id.clone());
            }
        }
        if let Some(message_id) = &ack.message_id {
            let found = self.pending.iter().find(|(_, p)| {
                p.message.message_id() == message_id
                    && ack
                        .subscription
                        .as_ref()
                        .is_none_or(|s| *s == p.subscription)
            });
            if let Some((id, _)) = found {
                return Ok(id.clone());
            }
        }
        refuse(
            ErrorCode::UnknownAck,
            "ACK or NACK names no message waiting for an ack on this connection \
             (STOMP 1.2 acks the MESSAGE's `ack` header; 1.0 and 1.1 its `message-id`)",
        )
    }

    /// True for an ack id this connection handed out that is no longer waiting (acked
    /// already, or covered by a cumulative ack): acking it again changes nothing.
    fn acked_before(&self, ack: &AckRef) -> bool {
        let prefix = format!("{}-", self.session_id);
        ack.id
            .as_deref()
            .and_then(|id| id.strip_prefix(&prefix))
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n < self.next_ack)
    }

    /// ACK: the message no longer waits for an ack on this connection (in a
    /// transaction: at COMMIT); what is left is the destination's ack and its commit.
    fn ack(&mut self, ack: AckRef, transaction: Option<String>) -> Result<Applied, Refusal> {
        if transaction.is_none() && self.acked_before(&ack) {
            if let Some(id) = &ack.id {
                if !self.pending.contains_key(id) {
                    return Ok(Applied::Done);
                }
            }
        }
        let id = self.ack_id(&ack)?;
        if let Some(tx) = transaction {
            let open = self.open_transaction(&tx)?;
            if open.acks.contains(&id) {
                return refuse(
                    ErrorCode::UnknownAck,
                    format!("ack id `{id}` is already acked in transaction `{tx}`"),
                );
            }
            open.acks.push(id);
            return Ok(Applied::Done);
        }
        self.apply_ack(&id)
    }

    /// Takes ack id `id` off the messages waiting for an ack (in `client` mode, every
    /// earlier one of its subscription too) and returns the ack at the destination,
    /// which resolves once it is committed.
    fn apply_ack(&mut self, id: &str) -> Result<Applied, Refusal> {
        if !self.pending.contains_key(id) {
            return refuse(
                ErrorCode::UnknownAck,
                format!("ack id `{id}` was already acked"),
            );
        }
        let Some((acker, message, cumulative)) = self.take_pending(id) else {
            return Ok(Applied::Done); // unsubscribed meanwhile: nothing to ack any more
        };
        Ok(Applied::Later(Box::pin(async move {
            let acked = if cumulative {
                acker.ack_up_to(&message).await
            } else {
                acker.ack(&message).await
            };
            acked.map_err(|e| Refusal::of("ack failed: ", &e))
        })))
    }

    /// Takes ack id `id` off the messages waiting for an ack (in `client` mode with
    /// every earlier one of its subscription): the acker of its subscription, the
    /// message, and whether the ack is cumulative. `None` when the id waits for no
    /// ack, or its subscription ended meanwhile (nothing to ack any more).
    fn take_pending(&mut self, id: &str) -> Option<(Acker, Received, bool)> {
        let pending = self.pending.remove(id)?;
        let sub = self.subscriptions.get(&pending.subscription)?;
        let acker = sub.acker.clone()?;
        let cumulative = sub.mode == StompAck::Client;
        let message = pending.message;
        if cumulative {
            // Everything delivered on this subscription up to this one.
            let subscription = pending.subscription;
            self.pending.retain(|_, p| {
                p.subscription != subscription || p.message.delivery_id() > message.delivery_id()
            });
        }
        Some((acker, message, cumulative))
    }

    /// NACK: the message is not acked and its prefetch slot is freed; a durable
    /// subscription gets it again (redelivered) when it re-attaches, a non-durable one
    /// does not.
    fn nack(&mut self, ack: AckRef, transaction: Option<String>) -> Result<Applied, Refusal> {
        let id = self.ack_id(&ack)?;
        if let Some(tx) = transaction {
            // Applied at COMMIT, forgotten at ABORT, as a transactional ACK.
            let open = self.open_transaction(&tx)?;
            if !open.nacks.contains(&id) {
                open.nacks.push(id);
            }
            return Ok(Applied::Done);
        }
        Ok(self.apply_nack(&id))
    }

    /// Takes ack id `id` off the messages waiting for an ack and returns the NACK at
    /// the destination.
    fn apply_nack(&mut self, id: &str) -> Applied {
        let Some(pending) = self.pending.remove(id) else {
            return Applied::Done;
        };
        let Some(acker) = self
            .subscriptions
            .get(&pending.subscription)
            .and_then(|sub| sub.acker.clone())
        else {
            return Applied::Done;
        };
        Applied::Later(Box::pin(async move {
            acker
                .nack(&pending.message)
                .await
                .map_err(|e| Refusal::of("nack failed: ", &e))
        }))
    }

    fn begin(&mut self, tx: String) -> Result<(), Refusal> {
        if self.transactions.contains_key(&tx) {
            return refuse(
                ErrorCode::DuplicateId,
                format!("transaction `{tx}` is already begun"),
            );
        }
        let max = self.stomp.config.limits.max_open_transactions;
        if self.transactions.len() >= max {
            return refuse(
                ErrorCode::LimitExceeded,
                format!(
                    "more than {max} open transactions on one connection (max_open_transactions)"
                ),
            );
        }
        let sends = self.stomp.broker.transaction(self.xid(&tx));
        self.transactions.insert(
            tx,
            Tx {
                sends,
                acks: Vec::new(),
                nacks: Vec::new(),
                bytes: 0,
                frames: 0,
            },
        );
        Ok(())
    }

    /// The open transaction `tx` (a SEND or ACK joins it).
    /// The open transaction `tx` a SEND, ACK or NACK joins, counted against
    /// [`SessionLimits::max_transaction_frames`].
    fn open_transaction(&mut self, tx: &str) -> Result<&mut Tx, Refusal> {
        let max = self.stomp.config.limits.max_transaction_frames;
        let open = self.transactions.get_mut(tx).ok_or_else(|| {
            Refusal::new(
                ErrorCode::UnknownTransaction,
                format!("invalid transaction id `{tx}`: not begun"),
            )
        })?;
        open.frames += 1;
        if open.frames > max {
            return refuse(ErrorCode::LimitExceeded, format!(
                "transaction `{tx}` holds more than {max} frames before COMMIT (max_transaction_frames)"
            ));
        }
        Ok(open)
    }

    /// Ends the transaction a COMMIT or ABORT names.
    fn end_transaction(&mut self, tx: &str) -> Result<Tx, Refusal> {
        self.transactions.remove(tx).ok_or_else(|| {
            Refusal::new(
                ErrorCode::UnknownTransaction,
                format!("invalid transaction id `{tx}`: not begun"),
            )
        })
    }

    /// COMMIT: the prepared sends become visible and the acks are stored in one store
    /// transaction ([`Transaction::commit`]), so a crash keeps both or neither; then
    /// the NACKs are applied. The acks leave the list of messages waiting for an ack
    /// now; what is left, the store's commit and the NACKs at their destinations, is
    /// the step's work, so the connection keeps beating while a large transaction
    /// commits (frames after it wait for it: [`Step::fence`]).
    fn commit(&mut self, tx: String) -> Result<Applied, Refusal> {
        let Tx {
            mut sends,
            acks,
            nacks,
            ..
        } = self.end_transaction(&tx)?;
        // All or nothing: if an ack of the transaction no longer applies (its message
        // was acked outside it, or its subscription is gone), nothing is committed.
        if let Some(stale) = acks.iter().find(|id| !self.pending.contains_key(*id)) {
            let refusal = Refusal::new(
                ErrorCode::UnknownAck,
                format!(
                    "transaction `{tx}` rolled back: ack id `{stale}` no longer waits for an ack"
                ),
            );
            return Ok(Applied::Later(Box::pin(async move {
                let _ = sends.rollback().await;
                Err(refusal)
            })));
        }
        // The acks join the transaction: stored in one store transaction with its
        // sends (all or nothing across a crash). NACKs write no ack: applied after.
        for id in &acks {
            // A cumulative (`client`) ack earlier in this commit may have covered it.
            if let Some((acker, message, cumulative)) = self.take_pending(id) {
                let joined = if cumulative {
                    sends.ack_up_to(&acker, &message)
                } else {
                    sends.ack(&acker, &message)
                };
                if let Err(e) = joined {
                    // Nothing is committed: the prepared sends go too.
                    let refusal =
                        Refusal::of(&format!("transaction `{tx}` rolled back: ack failed: "), &e);
                    return Ok(Applied::Later(Box::pin(async move {
                        let _ = sends.rollback().await;
                        Err(refusal)
                    })));
                }
            }
        }
        let mut settled = Vec::new();
        for id in &nacks {
            settled.push(self.apply_nack(id));
        }
        Ok(Applied::Later(Box::pin(async move {
            sends
                .commit()
                .await
                .map_err(|e| Refusal::of("commit failed: ", &e))?;
            futures::future::try_join_all(settled.into_iter().map(Applied::finished)).await?;
            Ok(())
        })))
    }

    /// ABORT: the prepared sends are deleted (the step's work); the acks are
    /// forgotten, so those messages can be acked again.
    fn abort(&mut self, tx: String) -> Result<Applied, Refusal> {
        let open = self.end_transaction(&tx)?;
        Ok(Applied::Later(Box::pin(async move {
            open.sends
                .rollback()
                .await
                .map_err(|e| Refusal::of("abort failed: ", &e))
        })))
    }

    /// This connection's temporary destinations in `frame` (STOMP `/temp-queue/NAME`
    /// and `/temp-topic/NAME`, as ActiveMQ and RabbitMQ): in the `destination` of a
    /// SEND or SUBSCRIBE and the `reply-to` of a SEND, each is made on first use
    /// ([`crate::broker::Broker::temporary`]) and rewritten to its broker-wide STOMP name
    /// (`/remote-temp-queue/...`) before the frame is read: a consumer of the request
    /// can SEND to exactly its `reply-to` (as RabbitMQ's reply queues). Errors: why a
    /// name cannot be one, or the user lacks the `admin` right of
    /// `[temp_destination_authorization_entry]`, or a new one would pass a limit on
    /// temporary destinations alive at once (the connection's, the user's, the
    /// broker's: `limit-exceeded`); the frame is refused with it.
    pub fn localize(&mut self, frame: &mut Frame) -> Result<(), Refusal> {
        let names: &[&str] = match frame.command {
            frame::Command::Send => &["destination", "reply-to"],
            frame::Command::Subscribe => &["destination"],
            _ => return Ok(()),
        };
        if !self.connected {
            return Ok(());
        }
        // STOMP reads the first of a repeated header: only it is looked at.
        let mut seen: Vec<&str> = Vec::new();
        for (name, value) in frame.headers.iter_mut() {
            let Some(name) = names.iter().find(|n| **n == name.as_str()) else {
                continue;
            };
            if seen.contains(name) {
                continue;
            }
            seen.push(name);
            // A composite SEND (`/queue/a,/temp-queue/x`): each part on its own.
            if *name == "destination" && value.contains(',') {
                let mut parts = Vec::new();
                for part in value.split(',') {
                    let trimmed = part.trim();
                    parts.push(match self.localized(trimmed)? {
                        Some(global) => global,
                        None => part.to_string(),
                    });
                }
                *value = parts.join(",");
            } else if let Some(global) = self.localized(value)? {
                *value = global;
            }
        }
        Ok(())
    }

    /// The broker-wide name of `text` when it names one of this connection's
    /// temporary destinations (`/temp-queue/x`), made on first use; `None` otherwise.
    fn localized(&self, text: &str) -> Result<Option<String>, Refusal> {
        let Some((local, kind)) = TEMPORARY_PREFIXES
            .iter()
            .find_map(|(prefix, kind)| Some((text.strip_prefix(prefix)?, *kind)))
        else {
            return Ok(None);
        };
        self.stomp
            .config
            .security
            .authorize_temporary(self.principal.as_ref(), Right::Admin)
            .map_err(|e| Refusal::new(ErrorCode::NotAuthorized, e.to_string()))?;
        let login = self.principal.as_ref().map(|p| p.login.as_str());
        let key = self
            .stomp
            .broker
            .temporary_for(self.connection, login, kind, local)
            .map_err(|e| Refusal::of("", &e))?;
        Ok(Some(key.stomp()))
    }

    /// Ends the session with its connection: open transactions are rolled back (their
    /// prepared messages go), its producers leave, and its subscriptions detach
    /// (durable ones go offline with their un-acked messages still in the store). When
    /// an ERROR said the store failed, what the subscriptions hold goes back without
    /// counting a failed delivery.
    pub async fn close(mut self) {
        for (tx, open) in std::mem::take(&mut self.transactions) {
            if let Err(e) = open.sends.rollback().await {
                tracing::warn!(session = %self.session_id, %tx, error = %e, "rollback at disconnect failed");
            }
        }
        for destination in self.producing.drain() {
            self.stomp.broker.producer_left(&destination);
        }
        // Dropping the subscriptions detaches them. After a store failure the broker
        // ended the connection, not the client: a store outage must not count as
        // failed deliveries and move healthy messages to the dead-letter queue.
        let streams = std::mem::take(&mut self.streams);
        if self.store_failed {
            for feed in streams.values() {
                if let Feed::Consumer(sub) = feed {
                    sub.release_uncounted();
                }
            }
        }
        drop(streams);
        // It leaves the groups of its shared subscriptions (which stay: they are
        // durable).
        let shared: HashSet<DestinationKey> = std::mem::take(&mut self.subscriptions)
            .into_values()
            .filter_map(|s| s.shared.map(|s| s.queue))
            .collect();
        for queue in &shared {
            if let Err(e) = self.leave_shared(queue, false).await {
                tracing::warn!(session = %self.session_id, queue = %queue.stomp(), error = %e, "cannot leave the shared subscription");
            }
        }
        // Its temporary destinations go with it (after its subscriptions, so that
        // none of them holds one).
        self.stomp.broker.end_temporaries(self.connection).await;
    }
}
