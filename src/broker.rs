//! The embedding API: a [`Broker`] inside an async Rust service.
//!
//! The broker runs its actors on the caller's actix system, or else on a thread of its
//! own ([`crate::runtime`]): call [`Broker::start`] from any async runtime (tokio's
//! multi-threaded or current-thread runtime, a `LocalSet`, actix). Every call is async and returns an [`Error`] that
//! says what went wrong.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix::{Addr, Handler, Recipient};
use ebb_actors::broker::{
    wildcard_container, BrokerActor, DestinationAddr, ForgetWildcardDurable, GetDestination,
    ShutdownBroker, Watch, WILDCARD_CONTAINER_PREFIX,
};
use ebb_actors::destination::DestinationPattern;
use ebb_actors::destination::{now_ms, PublishTicket};
use ebb_actors::housekeeping::HousekeepingBudget;
use ebb_actors::messages::{
    AbortPrepared, Ack, AcksStored, Browse, CommitPrepared, Delivery, Detach, GetQueueStats,
    GetStats, GetTopicStats, Handed, Nack, Publish, PublishPrepared, QueueStats, RemoveDurable,
    Stats, Subscribe, TakeAck, TakenAck, TopicMessage, TopicStats,
};
use ebb_actors::policy::PolicyMap;
use ebb_actors::queue::QueueActor;
pub use ebb_actors::selector::{Selector, SelectorError};
use ebb_actors::subscription::AutoAcks;
use ebb_actors::topic::TopicActor;
use ebb_actors::usage::Usage;
use ebb_actors::wildcard::{Attach, Template, WildcardActor, WILDCARD_SUBSCRIPTION};
use ebb_actors::{DestinationKey, DestinationKind, StoreActorConfig, StoreHandle};
use ebb_store::{MessageStore, Payload, StoreOptions, SubscriptionKey};
use futures::{Stream, StreamExt};
use std::collections::HashMap;
use tokio::sync::mpsc;

use crate::error::Error;
use crate::runtime::BrokerThread;

/// How a broker is set up. `Default` gives ActiveMQ's defaults.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Table prefix, PostgreSQL schema, pool size, SQLite durability.
    pub store: StoreOptions,
    /// Per-destination settings by pattern (`expire_messages_period`,
    /// `max_expire_page_size`, prefetch, ...).
    pub policies: PolicyMap,
    /// Expiry pages that may run at once over all destinations (default: one per core).
    pub housekeeping_permits: usize,
    /// Group-commit batch and the bound on outstanding store writes.
    pub store_actor: StoreActorConfig,
    /// Memory, store and temp limits and what a producer meets at them.
    pub usage: UsageConfig,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            store: StoreOptions::default(),
            policies: PolicyMap::default(),
            housekeeping_permits: std::thread::available_parallelism().map_or(1, |n| n.get()),
            store_actor: StoreActorConfig::default(),
            usage: UsageConfig::default(),
        }
    }
}

/// System usage limits, as ActiveMQ's `systemUsage`, and producer flow control. All
/// limits in bytes; 0 = no limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageConfig {
    /// Bytes of messages the broker holds in memory (waiting in cursors, in flight to
    /// consumers, in consumers' channels), each message counted once. Default 64 MiB
    /// (ActiveMQ's example configuration).
    pub memory: u64,
    /// Bytes of message bodies in the store. Default 100 GiB (ActiveMQ's default).
    pub store: u64,
    /// Bytes of non-persistent messages held (they exist only in memory, so they count
    /// in `memory` too). Default 0: only `memory` bounds them.
    pub temp: u64,
    /// Fail a send at once with [`Error::ResourceLimit`] instead of waiting for space
    /// (ActiveMQ's `sendFailIfNoSpace`, default off: producers wait).
    pub send_fail_if_no_space: bool,
    /// Wait at most this long (ms) for space, then fail (ActiveMQ's
    /// `sendFailIfNoSpaceAfterTimeout`). `None`: wait as long as it takes.
    pub send_fail_if_no_space_after_timeout: Option<u64>,
    /// Bytes of messages all open transactions hold until their COMMIT (bodies and
    /// headers), apart from `memory`: an open transaction never makes another
    /// producer wait, nor waits for space its own COMMIT would free (at COMMIT its
    /// messages move to their destinations' memory, whatever it holds). A
    /// transactional send beyond it is refused at once with [`Error::ResourceLimit`]
    /// naming `transactions`, never held. `None`: half of `memory` (32 MiB by
    /// default); `Some(0)`: no limit.
    pub transactions: Option<u64>,
    /// Durable subscriptions one client id may have (over every topic; each keeps a
    /// backlog in the store while offline): creating one more is refused with
    /// [`Error::TooManyDurableSubscriptions`]. Default 1,000; 0 = no limit.
    pub max_durable_subscriptions_per_client: u32,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            memory: 64 << 20,
            store: 100 << 30,
            temp: 0,
            send_fail_if_no_space: false,
            send_fail_if_no_space_after_timeout: None,
            transactions: None,
            max_durable_subscriptions_per_client: 1_000,
        }
    }
}

impl UsageConfig {
    /// The transactions' budget in bytes (0 = none): [`Self::transactions`], or half of
    /// `memory`.
    pub fn transactions_limit(&self) -> u64 {
        self.transactions.unwrap_or(self.memory / 2)
    }
}

/// What a send meets in producer flow control, checked without waiting
/// ([`Broker::check_space`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Space {
    /// There is room: send now.
    Free,
    /// A limit is reached and the producer should wait ([`Broker::wait_for_space`]).
    Wait,
    /// A limit is reached and the broker is set to fail at once.
    Fail(String),
}

/// The broker's usage counters and limits, shared by every clone of a [`Broker`].
struct Usages {
    config: UsageConfig,
    memory: Arc<Usage>,
    temp: Arc<Usage>,
    /// What open transactions hold until their commit ([`UsageConfig::transactions`]).
    transactions: Arc<Usage>,
    policies: PolicyMap,
    /// Per destination, children of `memory` (named by their store keys).
    destinations: parking_lot::Mutex<HashMap<DestinationKey, Arc<Usage>>>,
    /// Producers per destination, as transports report them.
    producers: parking_lot::Mutex<HashMap<DestinationKey, u64>>,
}

impl Usages {
    fn of(&self, key: &DestinationKey) -> Arc<Usage> {
        let mut map = self.destinations.lock();
        Arc::clone(map.entry(key.clone()).or_insert_with(|| {
            let limit = self.policies.policy_for(key).memory_limit;
            self.memory.child(key.container(), limit)
        }))
    }
}

/// When a message expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expiration {
    /// Never (JMS expiration 0).
    #[default]
    Never,
    /// At this absolute time, epoch ms (STOMP's `expires` header).
    At(i64),
    /// This many ms after the broker accepts it (JMS time to live).
    Ttl(u64),
}

/// A message to send.
#[derive(Debug, Clone)]
pub struct Message {
    /// The body, any bytes: a shared buffer, never copied on its way to the store and
    /// to subscribers.
    pub body: bytes::Bytes,
    /// User headers, in order.
    pub headers: Vec<(String, String)>,
    /// Stored so that durable subscriptions get it after a restart (default true, as
    /// JMS). A non-persistent message reaches only subscriptions that are online.
    pub persistent: bool,
    /// 0..=9, default 4.
    pub priority: u8,
    /// When it expires (default [`Expiration::Never`]): an expired message is never
    /// delivered, and housekeeping removes it (or moves it to the dead-letter queue
    /// with `dead_letter_expired`).
    pub expiration: Expiration,
    /// The connection that sends it, as the caller numbers its connections: a
    /// subscription with [`SubscribeOptions::no_local`] of the same number does not
    /// receive it (JMS `noLocal`). `None` by default.
    pub origin: Option<u64>,
}

impl Message {
    /// The bytes it is charged in memory: its body and its headers' names and values.
    pub(crate) fn charged_bytes(&self) -> usize {
        self.body.len()
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }

    /// A persistent message with priority 4 that never expires.
    pub fn new(body: impl Into<bytes::Bytes>) -> Self {
        Self {
            body: body.into(),
            headers: Vec::new(),
            persistent: true,
            priority: ebb_store::DEFAULT_PRIORITY,
            expiration: Expiration::Never,
            origin: None,
        }
    }

    /// Names the connection that sends it (see [`Message::origin`]).
    pub fn from_connection(mut self, connection: u64) -> Self {
        self.origin = Some(connection);
        self
    }

    /// Stored (`true`, the default) or kept in memory only (see
    /// [`Message::persistent`](struct@Message)).
    pub fn persistent(mut self, persistent: bool) -> Self {
        self.persistent = persistent;
        self
    }

    /// 0..=9; [`Broker::send`] refuses others.
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// Expires `ttl` after the broker accepts it (ms precision).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.expiration = Expiration::Ttl(ttl.as_millis() as u64);
        self
    }

    /// Expires at `epoch_ms` (ms since the Unix epoch; one already past is expired on
    /// arrival: counted, never delivered). 0 or less means never, as STOMP's
    /// `expires:0`.
    pub fn expires_at(mut self, epoch_ms: i64) -> Self {
        self.expiration = Expiration::At(epoch_ms);
        self
    }

    /// Adds a user header (delivered in the order added; a selector can test it).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What [`Broker::send`] answers once the message is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendReceipt {
    /// The message id the broker gave it.
    pub message_id: String,
    /// Its store id, when it was stored (persistent, with a durable subscription).
    pub store_id: Option<i64>,
    /// It had expired before it arrived: counted as expired, not delivered.
    pub expired_on_arrival: bool,
}

/// A send that has its place in its destination's order ([`Broker::start_send`]) and
/// waits to be accepted. Await it for the [`SendReceipt`]: after the commit, for a
/// message that is stored. Dropping it does not cancel the send.
///
/// Errors: [`Error::Actor`] when the store write failed (nothing was stored) or the
/// broker shut down first.
#[must_use = "a send is confirmed only when its PendingSend resolves"]
pub struct PendingSend {
    message_id: String,
    ticket: PublishTicket,
}

impl PendingSend {
    /// The message id the broker gave the message.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }
}

impl std::future::Future for PendingSend {
    type Output = Result<SendReceipt, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let outcome = std::task::ready!(Pin::new(&mut self.ticket).poll(cx))?;
        Poll::Ready(Ok(SendReceipt {
            message_id: std::mem::take(&mut self.message_id),
            store_id: outcome.id,
            expired_on_arrival: outcome.expired_on_arrival,
        }))
    }
}

/// How deliveries are acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AckMode {
    /// Each message is acked once the stream has yielded it: at once when it was the
    /// last one ready; in a burst, in one cumulative ack after a quarter of the
    /// prefetch (at most 256) or at the burst's end; and when the subscription is
    /// dropped.
    #[default]
    Auto,
    /// The consumer acks with [`Subscription::ack`] (one message) or
    /// [`Subscription::ack_up_to`] (every message up to one, as STOMP's `client`).
    Client,
}

/// How to subscribe.
#[derive(Debug, Clone, Default)]
pub struct SubscribeOptions {
    /// `(client_id, subscription_name)` for a durable subscription.
    pub durable: Option<(String, String)>,
    /// Messages delivered and not acked at once (default: the policy's
    /// `durable_prefetch` 100 or `topic_prefetch` 32,767).
    pub prefetch: Option<u32>,
    /// How the consumer acks ([`AckMode::Auto`] by default).
    pub ack: AckMode,
    /// A JMS message selector ([`Selector::parse`]): only messages it matches are
    /// delivered. On a queue, matching messages are found in the store beyond what the
    /// queue holds in memory (a bounded scan per page), so a backlog of messages for
    /// other consumers does not hide them. A durable topic subscription stores its
    /// selector (re-subscribing with another one creates it anew, as JMS); the
    /// messages it does not match are not its own: never delivered or counted as
    /// expired for it, and acked for it so that cleanup deletes them.
    pub selector: Option<Selector>,
    /// An exclusive queue consumer (ActiveMQ's exclusive consumers): while the oldest
    /// exclusive consumer of the queue lives it gets every message, and the next one
    /// takes over when it goes. A topic refuses it ([`Error::Actor`] with `Invalid`).
    pub exclusive: bool,
    /// JMS `noLocal` for a non-durable topic subscription: messages sent with this
    /// [`Message::origin`] are not delivered to it. A queue and a durable
    /// subscription refuse it ([`Error::Actor`] with `Invalid`): a stored message
    /// does not keep its origin.
    pub no_local: Option<u64>,
    /// For a subscription to a wildcard destination: only the matching destinations
    /// this accepts are read (a transport's authorization). `None`: every match.
    pub accept: Option<AcceptDestination>,
}

/// A test of the destinations a wildcard subscription may read
/// ([`SubscribeOptions::accept`]).
#[derive(Clone)]
pub struct AcceptDestination(pub ebb_actors::wildcard::Accept);

impl std::fmt::Debug for AcceptDestination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AcceptDestination(..)")
    }
}

impl SubscribeOptions {
    /// A non-durable subscription: it receives what is published while it is open.
    pub fn non_durable() -> Self {
        Self::default()
    }

    /// A durable subscription: created if new, re-attached if it exists; it keeps
    /// receiving (in the store) while no consumer is attached.
    pub fn durable(client_id: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            durable: Some((client_id.into(), name.into())),
            ..Self::default()
        }
    }

    /// At most `prefetch` messages delivered and not acked at once (as ActiveMQ's
    /// `prefetchSize`; 0 is [`Error::InvalidPrefetch`] at subscribe, more than 32,767
    /// is taken as 32,767, as STOMP's `activemq.prefetchSize`); default: the policy's
    /// `queue_prefetch` (1,000), `durable_prefetch` (100) or `topic_prefetch` (32,767).
    pub fn prefetch(mut self, prefetch: u32) -> Self {
        self.prefetch = Some(prefetch);
        self
    }

    /// How the consumer acks: [`AckMode::Auto`] (default) or [`AckMode::Client`].
    pub fn ack(mut self, ack: AckMode) -> Self {
        self.ack = ack;
        self
    }

    /// Only messages `selector` matches are delivered (see [`SubscribeOptions::selector`]).
    pub fn selector(mut self, selector: Selector) -> Self {
        self.selector = Some(selector);
        self
    }

    /// An exclusive queue consumer (see [`SubscribeOptions::exclusive`]).
    pub fn exclusive(mut self) -> Self {
        self.exclusive = true;
        self
    }

    /// Not the messages of connection `connection` (see [`SubscribeOptions::no_local`]).
    pub fn no_local(mut self, connection: u64) -> Self {
        self.no_local = Some(connection);
        self
    }

    /// Reads only the matching destinations `accept` accepts (see
    /// [`SubscribeOptions::accept`]).
    pub fn accept(
        mut self,
        accept: impl Fn(&DestinationKey) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.accept = Some(AcceptDestination(Arc::new(accept)));
        self
    }
}

/// A message received on a [`Subscription`].
#[derive(Debug, Clone)]
pub struct Received {
    delivery: Delivery,
    /// The [`Subscription`] it came from (its serial; 0 for a browsed message).
    serial: u64,
}

impl Received {
    /// The body, bytes.
    pub fn body(&self) -> &[u8] {
        &self.delivery.message.payload.body
    }

    /// The body as the shared buffer the broker holds (no bytes copied).
    pub fn shared_body(&self) -> bytes::Bytes {
        self.delivery.message.payload.body.clone()
    }

    /// The user headers, in the order sent.
    pub fn headers(&self) -> &[(String, String)] {
        &self.delivery.message.payload.headers
    }

    /// The value of the first user header called `name`, if any.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The message id the broker gave it (`ID:ebb-…`), as STOMP's `message-id`.
    pub fn message_id(&self) -> &str {
        &self.delivery.message.message_id
    }

    /// Store id (send order), for a persistent message that was stored.
    pub fn store_id(&self) -> Option<i64> {
        self.delivery.message.id
    }

    /// Its priority, 0..=9.
    pub fn priority(&self) -> u8 {
        self.delivery.message.priority
    }

    /// Epoch ms; 0 = never.
    pub fn expiration(&self) -> i64 {
        self.delivery.message.expiration
    }

    /// When the broker accepted it, epoch ms.
    pub fn timestamp_ms(&self) -> i64 {
        self.delivery.message.payload.timestamp_ms
    }

    /// True when this subscription was sent it before and did not ack it.
    pub fn redelivered(&self) -> bool {
        self.delivery.redelivered
    }

    /// Whether it is persistent.
    pub fn persistent(&self) -> bool {
        self.delivery.message.persistent
    }

    /// Per subscription, increasing: its order of delivery.
    pub fn delivery_id(&self) -> u64 {
        self.delivery.delivery_id
    }

    /// On a subscription to a wildcard destination, the destination the message was
    /// sent to; `None` on a subscription to one destination (it is that one).
    pub fn destination(&self) -> Option<&DestinationKey> {
        self.delivery.source.as_deref()
    }
}

/// An open subscription: a [`Stream`] of [`Received`] messages. Dropping it detaches
/// the consumer (a durable subscription goes offline and keeps its messages).
pub struct Subscription {
    destination: Endpoints,
    id: u64,
    ack: AckMode,
    rx: mpsc::Receiver<Delivery>,
    auto_ack: AutoAck,
    /// The last delivery id the stream yielded: only those count as delivered when it
    /// detaches ([`Subscribe::handed`]).
    handed: Handed,
    /// Acks sent and not yet seen committed ([`Subscription::ack`]).
    acks: parking_lot::Mutex<AckWindow>,
}

/// Most sends of one [`Broker::send_all`] waiting for their commit at a time.
pub const SEND_WINDOW: usize = 256;

/// Most acks a [`Subscription`] has sent without having seen their commit: past it,
/// [`Subscription::ack`] waits for the oldest. Its bound on what a crash may redeliver
/// (beside what was delivered and not acked).
pub const ACK_WINDOW: usize = 512;

/// A [`Subscription`]'s acks in flight: each answers once its store write commits.
#[derive(Default)]
struct AckWindow {
    in_flight: std::collections::VecDeque<Pin<Box<actix::dev::RecipientRequest<Ack>>>>,
    /// The first failure among those seen answered, for the next call to report.
    failed: Option<Error>,
}

impl AckWindow {
    /// Takes the answers that are in, oldest first, keeping the first failure.
    fn collect(&mut self, endpoints: &Endpoints) {
        while let Some(front) = self.in_flight.front_mut() {
            let Some(answer) = futures::FutureExt::now_or_never(front.as_mut()) else {
                return;
            };
            self.in_flight.pop_front();
            if let Err(e) = endpoints.answer(answer) {
                self.failed.get_or_insert(e);
            }
        }
    }
}

/// Where a subscription's acks, NACKs and detach go (its topic or queue actor).
#[derive(Clone)]
struct Endpoints {
    ack: Recipient<Ack>,
    /// Acks of a transaction, written with its COMMIT ([`Transaction::ack`]).
    take: Recipient<TakeAck>,
    nack: Recipient<Nack>,
    detach: Recipient<Detach>,
    /// The broker's [`Broker::shutdown`] flag: an ack the destination no longer knows
    /// after it is [`Error::ShuttingDown`].
    shut_down: Arc<AtomicBool>,
    /// The broker's thread (see [`crate::runtime`]).
    arbiter: actix_rt::ArbiterHandle,
    /// This subscription's number, unique in the process: [`Received`] carries it, so
    /// a message acked on another subscription is refused.
    serial: u64,
    /// Its ack mode: in [`AckMode::Auto`] an explicit ack does nothing.
    mode: AckMode,
}

/// Serials of [`Subscription`]s (0 is no subscription's).
static SUBSCRIPTION_SERIALS: AtomicU64 = AtomicU64::new(1);

impl Endpoints {
    /// Whether an ack or NACK (`nack`) of `message` goes to the destination:
    /// `Ok(false)` for an ack in [`AckMode::Auto`] (the stream acks what it yields;
    /// as JMS's `acknowledge()` outside client mode, it does nothing). Errors:
    /// [`Error::NotThisSubscription`] for a message received on another subscription;
    /// [`Error::Actor`] for a NACK in [`AckMode::Auto`] (the message is acked already).
    fn accepts(&self, message: &Received, nack: bool) -> Result<bool, Error> {
        if message.serial != self.serial {
            return Err(Error::NotThisSubscription);
        }
        if self.shut_down.load(Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        match (self.mode, nack) {
            (AckMode::Client, _) => Ok(true),
            (AckMode::Auto, false) => Ok(false),
            (AckMode::Auto, true) => Err(Error::Actor(ebb_actors::ActorError::Invalid(
                "a NACK needs AckMode::Client: an auto-ack subscription acks each message as it yields it".into(),
            ))),
        }
    }

    /// `result` of an ack or NACK, as [`Error::ShuttingDown`] once the broker is shut
    /// down (its destinations then know no subscription).
    fn answer(
        &self,
        result: Result<Result<(), ebb_actors::ActorError>, actix::MailboxError>,
    ) -> Result<(), Error> {
        match result {
            Ok(Ok(())) => Ok(()),
            _ if self.shut_down.load(Ordering::Acquire) => Err(Error::ShuttingDown),
            Ok(Err(e)) => Err(e.into()),
            Err(e) => Err(e.into()),
        }
    }
}

impl Subscription {
    /// Acks one message (client-individual), without waiting for the store: returns
    /// once the ack is on its way to the destination, which frees the prefetch slot and
    /// never delivers the message again while the broker runs. The destination commits
    /// acks in batches (one store write for the acks that arrive while the last one
    /// commits), so a loop of `next().await` then `ack(..).await` goes at the store's
    /// batched pace instead of one commit per message.
    ///
    /// Durability: up to [`ACK_WINDOW`] acks of this subscription may be uncommitted
    /// at a time (past that, `ack` waits for the oldest); a crash before their commit
    /// delivers those messages again (at least once, never lost). A graceful
    /// [`Broker::shutdown`] commits them; [`Subscription::commit_acks`] waits for them;
    /// [`Acker::ack`] answers only after its own commit. As Artemis's consumers, which
    /// send acks without blocking by default (`blockOnAcknowledge=false`).
    ///
    /// Errors: [`Error::ShuttingDown`] after shutdown; an earlier ack's failure,
    /// reported once, by the next `ack`, `ack_up_to` or `commit_acks`: a failed commit
    /// ([`Error::Actor`] with the store's error; its message stays stored and is
    /// delivered again), or an ack of a message already acked or refused
    /// ([`Error::Actor`], "not waiting for an ack").
    pub async fn ack(&self, message: &Received) -> Result<(), Error> {
        if !self.destination.accepts(message, false)? {
            return Ok(());
        }
        self.ack_in_window(message.delivery.delivery_id, false)
            .await
    }

    /// Acks `message` and every earlier un-acked one of this subscription (STOMP
    /// `client` mode), without waiting for the store, as [`Subscription::ack`].
    pub async fn ack_up_to(&self, message: &Received) -> Result<(), Error> {
        if !self.destination.accepts(message, false)? {
            return Ok(());
        }
        self.ack_in_window(message.delivery.delivery_id, true).await
    }

    /// Waits until every ack this subscription sent before is committed (a service
    /// that must know its acks are durable, e.g. before it reports work as done).
    ///
    /// Errors: the first failed commit among them (or an earlier one not yet
    /// reported); [`Error::ShuttingDown`] for acks that reached their destination
    /// after shutdown (those accepted before it were committed by it). With nothing
    /// pending it is `Ok` at once.
    pub async fn commit_acks(&self) -> Result<(), Error> {
        let (waiting, failed) = {
            let mut window = self.acks.lock();
            (
                Vec::from(std::mem::take(&mut window.in_flight)),
                window.failed.take(),
            )
        };
        match failed.or(self.settle(waiting).await) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits for `answers`; the first failure among them.
    async fn settle(
        &self,
        answers: Vec<Pin<Box<actix::dev::RecipientRequest<Ack>>>>,
    ) -> Option<Error> {
        let mut first = None;
        for answer in futures::future::join_all(answers).await {
            if let Err(e) = self.destination.answer(answer) {
                first.get_or_insert(e);
            }
        }
        first
    }

    /// Sends one ack now (in order with this subscription's other messages to its
    /// destination) and keeps its answer in the window, waiting for the oldest
    /// answers while the window is full.
    async fn ack_in_window(&self, delivery_id: u64, cumulative: bool) -> Result<(), Error> {
        let ack = Ack {
            subscription: self.id,
            delivery_id,
            cumulative,
        };
        // A fresh sender is never parked: the ack is in the mailbox now, before a
        // later NACK or detach. Its answer is kept (here, or by `Drop`) until it
        // comes: actix skips a message whose answer is dropped.
        let answer = Box::pin(self.destination.ack.clone().send(ack));
        let oldest = {
            let mut window = self.acks.lock();
            window.in_flight.push_back(answer);
            window.collect(&self.destination);
            let over = window.in_flight.len().saturating_sub(ACK_WINDOW);
            window.in_flight.drain(..over).collect::<Vec<_>>()
        };
        let first = self.settle(oldest).await;
        let failed = self.acks.lock().failed.take();
        match first.or(failed) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Refuses `message` (NACK), as [`Acker::nack`]: on a queue it is delivered again,
    /// marked redelivered, until `maximum_redeliveries` failures send it to the
    /// dead-letter queue.
    pub async fn nack(&self, message: &Received) -> Result<(), Error> {
        self.acker().nack(message).await
    }

    /// A handle that acks for this subscription without holding the stream (for a
    /// transport that polls many subscriptions together, or a task that acks apart
    /// from the one that reads). Its acks answer after their commit.
    pub fn acker(&self) -> Acker {
        Acker {
            destination: self.destination.clone(),
            id: self.id,
        }
    }
}

/// Acks deliveries of one subscription; see [`Subscription::acker`].
#[derive(Clone)]
pub struct Acker {
    destination: Endpoints,
    id: u64,
}

impl Acker {
    /// Acks one message, as [`Subscription::ack`], and answers once the ack is
    /// committed (for a durable subscription, the mark moves only when no earlier
    /// message is still un-acked). Await many at once (`FuturesUnordered`) to have them
    /// committed together.
    ///
    /// Errors: [`Error::ShuttingDown`] after shutdown; [`Error::Actor`] when the store
    /// write failed (the message stays stored and is delivered again), or when the
    /// message was acked or refused (NACK) already ("not waiting for an ack").
    pub async fn ack(&self, message: &Received) -> Result<(), Error> {
        if !self.destination.accepts(message, false)? {
            return Ok(());
        }
        self.send(message.delivery.delivery_id, false).await
    }

    /// Acks `message` and every earlier un-acked one, as [`Subscription::ack_up_to`];
    /// answers once committed, as [`Acker::ack`].
    pub async fn ack_up_to(&self, message: &Received) -> Result<(), Error> {
        if !self.destination.accepts(message, false)? {
            return Ok(());
        }
        self.send(message.delivery.delivery_id, true).await
    }

    /// Refuses `message` (NACK): its prefetch slot is freed without an ack. On a queue it
    /// goes back in its place and is delivered again (to any consumer), marked
    /// redelivered, until `maximum_redeliveries` failures send it to the dead-letter
    /// queue; a durable subscription gets it again when it next re-attaches.
    pub async fn nack(&self, message: &Received) -> Result<(), Error> {
        self.destination.accepts(message, true)?;
        let nack = Nack {
            subscription: self.id,
            delivery_id: message.delivery.delivery_id,
        };
        let answer = self.destination.nack.send(nack).await;
        self.destination.answer(answer)
    }

    /// The ack of `message` (`cumulative`: and of every earlier un-acked one) that
    /// [`Transaction::ack`] keeps until COMMIT; `None` in [`AckMode::Auto`].
    fn in_transaction(
        &self,
        message: &Received,
        cumulative: bool,
    ) -> Result<Option<TransactedAck>, Error> {
        if !self.destination.accepts(message, false)? {
            return Ok(None);
        }
        Ok(Some(TransactedAck {
            destination: self.destination.clone(),
            ack: TakeAck {
                subscription: self.id,
                delivery_id: message.delivery.delivery_id,
                cumulative,
            },
        }))
    }

    async fn send(&self, delivery_id: u64, cumulative: bool) -> Result<(), Error> {
        let ack = Ack {
            subscription: self.id,
            delivery_id,
            cumulative,
        };
        let answer = self.destination.ack.send(ack).await;
        self.destination.answer(answer)
    }
}

impl Subscription {
    /// In [`AckMode::Auto`]: acks (cumulatively) every message the stream has yielded
    /// and not acked yet. Pushed into the destination's mailbox now, so it is handled
    /// before a later detach; its commit is awaited by [`Subscription::commit_acks`].
    fn flush_auto_acks(&mut self) {
        if let Some(delivery_id) = self.auto_ack.up_to.take() {
            self.auto_ack.taken = 0;
            let ack = Ack {
                subscription: self.id,
                delivery_id,
                cumulative: true,
            };
            // In the window as `ack`'s (a fresh sender: in the mailbox now), so
            // `commit_acks` waits for it and a failed commit is reported.
            let answer = Box::pin(self.destination.ack.clone().send(ack));
            let window = self.acks.get_mut();
            window.in_flight.push_back(answer);
            window.collect(&self.destination);
        }
    }
}

/// Most messages an [`AckMode::Auto`] subscription yields before it acks them: a
/// quarter of its prefetch, at least 1 and at most 256.
fn auto_ack_batch(prefetch: usize) -> u32 {
    (prefetch / 4).clamp(1, 256) as u32
}

/// Messages an [`AckMode::Auto`] subscription yielded and has not acked yet.
#[derive(Debug, Default)]
struct AutoAck {
    /// Delivery id of the last one.
    up_to: Option<u64>,
    /// How many.
    taken: u32,
    /// Ack once this many are taken ([`auto_ack_batch`]).
    batch: u32,
    /// A non-durable topic subscription's: acks recorded without a message.
    shared: Option<Arc<AutoAcks>>,
}

impl Stream for Subscription {
    type Item = Received;

    /// The next message. In [`AckMode::Auto`] the messages yielded are acked in one
    /// cumulative ack when the one yielded is the last one ready, every quarter of the
    /// prefetch (at most 256), and when the subscription is dropped: one ack message
    /// per burst instead of one per message, never more than that many yielded
    /// messages un-acked at the broker, and a consumer that keeps up acks each message
    /// as it takes it (as ActiveMQ's `optimizeAcknowledge`, bounded by count instead of
    /// a timeout). A non-durable topic subscription's acks only give credit back: each
    /// message is acked as it is taken, through counters shared with the topic, and a
    /// message goes to the topic only when it waits for that credit.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Received>> {
        let polled = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(delivery)) = &polled {
            self.handed.store(delivery.delivery_id, Ordering::Release);
        }
        if self.ack == AckMode::Auto {
            match &polled {
                Poll::Ready(Some(delivery)) if self.auto_ack.shared.is_some() => {
                    let shared = self.auto_ack.shared.as_ref().expect("matched");
                    if shared.taken(delivery.delivery_id) {
                        // The topic ran out of credit: wake it.
                        self.destination.ack.do_send(Ack {
                            subscription: self.id,
                            delivery_id: delivery.delivery_id,
                            cumulative: true,
                        });
                    }
                }
                Poll::Ready(Some(delivery)) => {
                    self.auto_ack.up_to = Some(delivery.delivery_id);
                    self.auto_ack.taken += 1;
                    // The last one ready (a consumer that keeps up acks each at once),
                    // or the batch is full.
                    if self.rx.is_empty() || self.auto_ack.taken >= self.auto_ack.batch {
                        self.flush_auto_acks();
                    }
                }
                // Nothing more is ready: ack what was taken.
                _ => self.flush_auto_acks(),
            }
        }
        let serial = self.destination.serial;
        polled.map(|d| d.map(|delivery| Received { delivery, serial }))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.flush_auto_acks();
        // actix skips a message whose answer nobody waits for: the acks whose commit
        // is not awaited yet stay awaited, by a task on the broker's thread, so they
        // are handled (before the detach below) and committed.
        let pending = std::mem::take(&mut self.acks.get_mut().in_flight);
        if !pending.is_empty() {
            self.destination.arbiter.spawn(async move {
                futures::future::join_all(pending).await;
            });
        }
        // Drop cannot await; Detach is small and the destination handles it in order,
        // after the acks sent before it.
        self.destination.detach.do_send(Detach {
            subscription: self.id,
        });
    }
}

/// A message as browsing shows it (never acked, never expired by browsing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowsedMessage {
    /// Its store id (send order).
    pub store_id: i64,
    /// The message id the broker gave it.
    pub message_id: String,
    /// 0..=9.
    pub priority: u8,
    /// Epoch ms; 0 = never.
    pub expiration: i64,
    /// User headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: bytes::Bytes,
    /// Its failed deliveries so far, as stored (a queue message's redelivery count;
    /// 0 on topics and for a non-persistent message).
    pub redeliveries: u32,
}

/// Most rows one browse call returns.
pub const MAX_BROWSE_PAGE: u32 = 1000;

/// Messages a [`QueueBrowser`] reads from its queue at a time (one bounded store read
/// plus the queue's non-persistent messages in that range).
pub const BROWSE_PAGE: u32 = 100;

/// A browse of a queue ([`Broker::browse_queue`]): a [`Stream`] of the messages
/// waiting in it, in queue order, that ends at the end of the queue. Each item is a
/// [`Received`] that cannot be acked (browsing consumes nothing): its
/// `delivery_id` is 0 and `redelivered` false.
pub struct QueueBrowser {
    inner: Pin<Box<dyn Stream<Item = Result<Received, Error>> + Send>>,
}

impl Stream for QueueBrowser {
    type Item = Result<Received, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// A running broker. Cheap to clone (handles to actors).
#[derive(Clone)]
pub struct Broker {
    /// The thread its actors run on (see [`crate::runtime`]).
    runtime: Arc<BrokerThread>,
    registry: Addr<BrokerActor>,
    /// The registry's answers, by destination (see `Broker::destination`).
    addresses: Arc<parking_lot::RwLock<HashMap<DestinationKey, DestinationAddr>>>,
    budget: HousekeepingBudget,
    store: StoreHandle,
    ids: Arc<MessageIds>,
    usages: Arc<Usages>,
    /// Set by [`Broker::shutdown`]: calls then fail with [`Error::ShuttingDown`].
    shut_down: Arc<AtomicBool>,
}

struct MessageIds {
    prefix: String,
    next: AtomicU64,
}

impl Broker {
    /// Opens the store at `store_url` (`sqlite://PATH`, `sqlite::memory:`,
    /// `postgres://...`; created and migrated if needed) and starts the broker's actors
    /// so the broker works from any async runtime: tokio's multi-threaded or
    /// current-thread runtime or a `LocalSet` (on a thread of its own, an actix system
    /// the broker owns, that ends when the last clone of the broker is dropped), or
    /// actix (on the caller's actix system, sharing its thread).
    ///
    /// Errors: [`Error::Store`] when the store cannot be opened (the message names the
    /// URL, without its password, and the reason), or another broker runs on it
    /// ([`ebb_store::StoreError::Locked`]: one broker per store, as ActiveMQ's JDBC
    /// exclusive locker; the lock goes with the broker, also when its process dies);
    /// [`Error::Runtime`] when its thread cannot start.
    pub async fn start(store_url: &str, config: BrokerConfig) -> Result<Self, Error> {
        let runtime = Arc::new(BrokerThread::new()?);
        let (url, options) = (store_url.to_string(), config.store.clone());
        // The store's pool is made on the broker's thread, whose runtime then drives
        // its connections whatever the caller's is.
        let store = runtime
            .run(move || async move {
                let store = ebb_store::open(&url, &options).await?;
                // One broker per store (ids would collide): refuse if another holds it.
                if let Err(e) = store.lock_exclusive().await {
                    store.close().await;
                    return Err(Error::from(e));
                }
                Ok(store)
            })
            .await??;
        Self::start_on(runtime, store, config)
    }

    /// [`Broker::start`] for a standby (high availability, `ebb serve --standby`):
    /// when another broker holds the store, waits instead of failing, asking again
    /// every `poll` (the lease's `renew_ms`), and starts once the lock is free: on
    /// PostgreSQL with [`ebb_store::StoreOptions::lease`], once the active broker's
    /// lease has expired by the database's clock or was released (a release is
    /// announced: it starts at once, not at its next attempt). While it waits,
    /// `waiting` holds who holds the store (`None` once it is taken, or before the
    /// first attempt). Everything is read from the store when it starts, as after a
    /// restart: marks, cursors, messages. Watch [`Broker::lease_state`] after it
    /// starts: a lost lease means the broker must stop serving.
    ///
    /// Errors: as [`Broker::start`], but never [`ebb_store::StoreError::Locked`].
    pub async fn start_when_free(
        store_url: &str,
        config: BrokerConfig,
        poll: Duration,
        waiting: tokio::sync::watch::Sender<Option<String>>,
    ) -> Result<Self, Error> {
        let runtime = Arc::new(BrokerThread::new()?);
        let (url, options) = (store_url.to_string(), config.store.clone());
        let store = runtime
            .run(move || async move {
                let store = ebb_store::open(&url, &options).await?;
                loop {
                    let attempt = match store.try_lock().await {
                        Ok(attempt) => attempt,
                        Err(e) => {
                            store.close().await;
                            return Err(Error::from(e));
                        }
                    };
                    match attempt {
                        ebb_store::LockAttempt::Acquired => {
                            let _ = waiting.send(None);
                            return Ok(store);
                        }
                        ebb_store::LockAttempt::Held(by) => {
                            if waiting.is_closed() {
                                // Nobody waits for this broker any more.
                                store.close().await;
                                return Err(Error::ShuttingDown);
                            }
                            let _ = waiting.send(Some(by));
                            store.wait_for_release(poll).await;
                        }
                    }
                }
            })
            .await??;
        Self::start_on(runtime, store, config)
    }

    /// The state of the store's lease while this broker holds one (PostgreSQL with
    /// [`ebb_store::StoreOptions::lease`]): it turns
    /// [`ebb_store::LeaseState::Lost`] when a renewal failed for too long or another
    /// broker holds the lease; every write is refused from then on and the broker
    /// must stop serving (`ebb serve` fences itself and exits). `None` without a lease.
    pub fn lease_state(&self) -> Option<tokio::sync::watch::Receiver<ebb_store::LeaseState>> {
        self.store.store().lease_state()
    }

    /// The renewals of the store's lease while this broker holds one (`None`
    /// without): for the `ebb_ha_lease_renew_seconds` metrics.
    pub fn lease_renewals(&self) -> Option<ebb_store::LeaseRenewals> {
        self.store.store().lease_renewals()
    }

    /// Starts the broker on a store that is already open (`config.store` is not used),
    /// on an actix system as [`Broker::start`]. The caller takes care that no other
    /// broker uses it ([`MessageStore::lock_exclusive`]).
    ///
    /// Errors: [`Error::Runtime`] when its thread cannot start.
    pub fn start_with_store(
        store: Arc<dyn MessageStore>,
        config: BrokerConfig,
    ) -> Result<Self, Error> {
        Self::start_on(Arc::new(BrokerThread::new()?), store, config)
    }

    /// Starts the store actor and the registry on `runtime` over `store`.
    fn start_on(
        runtime: Arc<BrokerThread>,
        store: Arc<dyn MessageStore>,
        config: BrokerConfig,
    ) -> Result<Self, Error> {
        let budget = HousekeepingBudget::new(config.housekeeping_permits);
        let (actor_config, policies, shared) = (
            config.store_actor.clone(),
            config.policies.clone(),
            budget.clone(),
        );
        runtime.hold_store(&store);
        let (handle, registry) = runtime.run_blocking(move || {
            let handle = StoreHandle::start(store, actor_config);
            let registry = actix::Actor::start(BrokerActor::new(handle.clone(), policies, shared));
            (handle, registry)
        })?;
        Ok(Self {
            runtime,
            registry,
            addresses: Default::default(),
            budget,
            store: handle,
            ids: Arc::new(MessageIds {
                prefix: format!("ID:ebb-{}-{}", std::process::id(), now_ms()),
                next: AtomicU64::new(1),
            }),
            usages: Arc::new(Usages {
                memory: Usage::root("memory", config.usage.memory),
                temp: Usage::root("temp", config.usage.temp),
                transactions: Usage::root("transactions", config.usage.transactions_limit()),
                config: config.usage.clone(),
                policies: config.policies.clone(),
                destinations: Default::default(),
                producers: Default::default(),
            }),
            shut_down: Arc::default(),
        })
    }

    /// [`Error::ShuttingDown`] once [`Broker::shutdown`] was called.
    /// Runs `start` on the broker's actix system (its arbiter), where it may spawn
    /// tasks that are not `Send` (a STOMP connection's): a transport that accepts on
    /// another executor (the HTTP server's WebSocket upgrades) hands its connections
    /// over this way.
    #[cfg(feature = "http")]
    pub(crate) fn spawn_on_system(&self, start: impl FnOnce() + Send + 'static) {
        self.runtime.arbiter().spawn_fn(start);
    }

    /// [`Error::ShuttingDown`] once [`Broker::shutdown`] was called;
    /// [`Error::LeaseRunOut`] once the store's lease ran out on this broker's clock
    /// (checked on every request: after a pause the broker serves nothing before its
    /// renewal task has noticed).
    pub(crate) fn refuse_if_shut_down(&self) -> Result<(), Error> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        if !self.store.store().lease_current() {
            return Err(Error::LeaseRunOut);
        }
        Ok(())
    }

    /// The limit a send of a `persistent` message to `container` would meet now:
    /// `(name, used, limit)` of the first full usage (store, then the destination's
    /// memory, then the broker's memory, then temp for a non-persistent message).
    fn full_usage(&self, key: &DestinationKey, persistent: bool) -> Option<(String, u64, u64)> {
        let config = &self.usages.config;
        if persistent && config.store > 0 {
            let used = self.store.store().stored_bytes();
            if used >= config.store {
                return Some(("store".into(), used, config.store));
            }
        }
        let usage = self.usages.of(key);
        if let Some(full) = usage.full() {
            return Some((full.name().to_string(), full.used(), full.limit()));
        }
        if !persistent {
            if let Some(full) = self.usages.temp.full() {
                return Some((full.name().to_string(), full.used(), full.limit()));
            }
        }
        None
    }

    /// Producer flow control without waiting: whether a send of a `persistent` (or
    /// not) message to destination `name` can go now, must wait, or fails at once
    /// (with `send_fail_if_no_space`; the text names the limit). A transport that must
    /// not block (STOMP) holds the send while this says [`Space::Wait`].
    pub fn check_space(
        &self,
        destination: impl ToDestination,
        persistent: bool,
    ) -> Result<Space, Error> {
        let key = destination.to_destination()?;
        Ok(match self.full_usage(&key, persistent) {
            None => Space::Free,
            Some((usage, used, limit))
                if self.usages.config.send_fail_if_no_space
                    && self
                        .usages
                        .config
                        .send_fail_if_no_space_after_timeout
                        .is_none() =>
            {
                Space::Fail(
                    Error::ResourceLimit {
                        usage,
                        used,
                        limit,
                        waited_ms: None,
                    }
                    .to_string(),
                )
            }
            Some(_) => Space::Wait,
        })
    }

    /// Whether `message` fits in the transactions' budget
    /// ([`UsageConfig::transactions`]) now, and, when persistent, in the store's
    /// limit. A transactional send never waits for space: errors with
    /// [`Error::ResourceLimit`] naming `store` or `transactions` when it does not fit.
    pub fn check_transaction_space(&self, message: &Message) -> Result<(), Error> {
        let config = &self.usages.config;
        if message.persistent && config.store > 0 {
            let used = self.store.store().stored_bytes();
            if used >= config.store {
                return Err(Error::ResourceLimit {
                    usage: "store".into(),
                    used,
                    limit: config.store,
                    waited_ms: None,
                });
            }
        }
        let bytes = message.charged_bytes();
        let budget = &self.usages.transactions;
        if budget.has_room_for(bytes as u64) {
            return Ok(());
        }
        Err(Error::ResourceLimit {
            usage: budget.name().to_string(),
            used: budget.used() + bytes as u64,
            limit: budget.limit(),
            waited_ms: None,
        })
    }

    /// Waits until a send of a `persistent` (or not) message to destination `name`
    /// finds space (producer flow control), or fails: at once with
    /// `send_fail_if_no_space`, after `send_fail_if_no_space_after_timeout` ms with it
    /// set, never otherwise. Errors: [`Error::ResourceLimit`] naming the limit.
    pub async fn wait_for_space(
        &self,
        destination: impl ToDestination,
        persistent: bool,
    ) -> Result<(), Error> {
        let key = destination.to_destination()?;
        let config = &self.usages.config;
        let started = std::time::Instant::now();
        let deadline = config
            .send_fail_if_no_space_after_timeout
            .map(|ms| started + Duration::from_millis(ms));
        let usage = self.usages.of(&key);
        loop {
            let Some((full, used, limit)) = self.full_usage(&key, persistent) else {
                return Ok(());
            };
            let refuse = |waited: bool| Error::ResourceLimit {
                usage: full.clone(),
                used,
                limit,
                waited_ms: waited.then(|| started.elapsed().as_millis() as u64),
            };
            if config.send_fail_if_no_space && deadline.is_none() {
                return Err(refuse(false));
            }
            // Memory wakes waiters on every release; the store is polled (rows go by
            // acks, expiry and cleanup, which do not notify).
            let space = async {
                if full == "store" {
                    let _counted = usage.blocked();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                } else if full == "temp" {
                    self.usages.temp.wait_for_space().await;
                } else {
                    usage.wait_for_space().await;
                }
            };
            match deadline {
                Some(at) => {
                    if tokio::time::timeout_at(at.into(), space).await.is_err() {
                        return Err(refuse(true));
                    }
                }
                None => space.await,
            }
        }
    }

    /// Housekeeping lag: how long the expiry page that has waited longest for a
    /// housekeeping permit has been waiting, and how many pages wait (zero and 0 when
    /// housekeeping keeps up).
    pub fn housekeeping_lag(&self) -> (Duration, usize) {
        (self.budget.lag(), self.budget.pages_waiting())
    }

    /// The broker's memory, store and temp usage now, and producers blocked.
    pub fn usage(&self) -> UsageSnapshot {
        let u = &self.usages;
        let blocked = u
            .destinations
            .lock()
            .values()
            .map(|d| d.blocked_producers())
            .sum::<u64>()
            + u.temp.blocked_producers();
        UsageSnapshot {
            memory_bytes: u.memory.used(),
            memory_limit: u.memory.limit(),
            store_bytes: self.store.store().stored_bytes(),
            store_limit: u.config.store,
            temp_bytes: u.temp.used(),
            temp_limit: u.temp.limit(),
            transactions_bytes: u.transactions.used(),
            transactions_limit: u.transactions.limit(),
            blocked_producers: blocked,
        }
    }

    /// Destination `name`'s memory and producers now.
    pub fn destination_flow(
        &self,
        destination: impl ToDestination,
    ) -> Result<DestinationFlow, Error> {
        let key = destination.to_destination()?;
        let usage = self.usages.of(&key);
        let producers = self.usages.producers.lock().get(&key).copied().unwrap_or(0);
        Ok(DestinationFlow {
            memory_bytes: usage.used(),
            memory_limit: usage.limit(),
            blocked_producers: usage.blocked_producers(),
            producers,
        })
    }

    /// A producer (a transport's connection) started sending to destination `name`;
    /// counted in [`DestinationFlow::producers`] until [`Broker::producer_left`].
    pub fn producer_joined(&self, destination: impl ToDestination) {
        if let Ok(key) = destination.to_destination() {
            *self.usages.producers.lock().entry(key).or_default() += 1;
        }
    }

    /// The producer counted by [`Broker::producer_joined`] is gone.
    pub fn producer_left(&self, destination: impl ToDestination) {
        if let Ok(key) = destination.to_destination() {
            if let Some(n) = self.usages.producers.lock().get_mut(&key) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// The registry actor, for the crate's own reports (`Broker::stats`, in `stats.rs`).
    pub(crate) fn registry(&self) -> &Addr<BrokerActor> {
        &self.registry
    }

    pub(crate) async fn topic(&self, key: &DestinationKey) -> Result<Addr<TopicActor>, Error> {
        match self.destination(key).await? {
            DestinationAddr::Topic(addr) => Ok(addr),
            DestinationAddr::Queue(_) => Err(Error::InvalidDestination {
                name: key.container(),
                reason: "this works on topics only",
            }),
        }
    }

    /// The running actor of `key` (started on first use by the registry). Addresses
    /// are cached, so a send to a destination in use costs no round trip to the
    /// registry; an actor that stopped is looked up again.
    /// Errors: [`Error::ShuttingDown`] after [`Broker::shutdown`].
    async fn destination(&self, key: &DestinationKey) -> Result<DestinationAddr, Error> {
        self.refuse_if_shut_down()?;
        self.lookup(key).await
    }

    /// [`Broker::destination`] for the admin calls (`crate::admin`).
    pub(crate) async fn destination_for_admin(
        &self,
        key: &DestinationKey,
    ) -> Result<DestinationAddr, Error> {
        self.destination(key).await
    }

    /// Sends `make()` to destination `key` and answers its answer; when the
    /// destination was deleted meanwhile (the answer is one `retired` says was refused
    /// by a retired actor, or the actor stopped before handling it: nothing was done),
    /// sends it again to the destination's successor, a few times at most.
    async fn ask_live<M>(
        &self,
        key: &DestinationKey,
        make: impl Fn() -> M,
        retired: impl Fn(&M::Result) -> bool,
    ) -> Result<M::Result, Error>
    where
        M: actix::Message + Send + 'static,
        M::Result: Send,
        TopicActor: Handler<M>,
        QueueActor: Handler<M>,
    {
        Ok(self.ask_live_at(key, make, retired).await?.1)
    }

    /// [`Broker::ask_live`], also answering the address that answered.
    async fn ask_live_at<M>(
        &self,
        key: &DestinationKey,
        make: impl Fn() -> M,
        retired: impl Fn(&M::Result) -> bool,
    ) -> Result<(DestinationAddr, M::Result), Error>
    where
        M: actix::Message + Send + 'static,
        M::Result: Send,
        TopicActor: Handler<M>,
        QueueActor: Handler<M>,
    {
        // Each retry follows a deletion that ended after the previous attempt.
        const ATTEMPTS: usize = 8;
        let mut attempt = 1;
        loop {
            let addr = self.destination(key).await?;
            match addr.ask(make()).await {
                Ok(answer) if !retired(&answer) => return Ok((addr, answer)),
                Err(e @ actix::MailboxError::Timeout) => return Err(e.into()),
                Ok(answer) if attempt == ATTEMPTS => return Ok((addr, answer)),
                Err(e) if attempt == ATTEMPTS => return Err(e.into()),
                _ => {
                    self.forget(key, &addr);
                    attempt += 1;
                }
            }
        }
    }

    /// Drops the cached address of `key` (the next call asks the registry).
    pub(crate) fn forget_address(&self, key: &DestinationKey) {
        self.addresses.write().remove(key);
    }

    /// Drops `addr` from the address cache if it is still there for `key`.
    fn forget(&self, key: &DestinationKey, addr: &DestinationAddr) {
        let mut addresses = self.addresses.write();
        if addresses.get(key).is_some_and(|a| a.same(addr)) {
            addresses.remove(key);
        }
    }

    /// [`Broker::destination`], also after shutdown (to read counters): the registry
    /// then refuses only destinations that are not running.
    async fn lookup(&self, key: &DestinationKey) -> Result<DestinationAddr, Error> {
        if let Some(addr) = self.addresses.read().get(key) {
            if addr.connected() {
                return Ok(addr.clone());
            }
        }
        let addr = self.registry.send(GetDestination(key.clone())).await??;
        self.addresses.write().insert(key.clone(), addr.clone());
        Ok(addr)
    }

    /// The topic message for `message`: checks the priority, turns a TTL into an
    /// absolute expiration, gives it a message id.
    fn outgoing(
        &self,
        key: &DestinationKey,
        message: Message,
        in_transaction: bool,
    ) -> Result<TopicMessage, Error> {
        if message.priority > ebb_store::MAX_PRIORITY {
            return Err(Error::InvalidPriority(message.priority));
        }
        let now = now_ms();
        let expiration = match message.expiration {
            Expiration::Never => 0,
            Expiration::At(at) => at.max(0),
            Expiration::Ttl(ttl) => now.saturating_add(ttl.min(i64::MAX as u64) as i64),
        };
        let message_id = format!(
            "{}:{}",
            self.ids.prefix,
            self.ids.next.fetch_add(1, Ordering::Relaxed)
        );
        let bytes = message.charged_bytes();
        let payload = Payload {
            timestamp_ms: now,
            headers: message.headers,
            body: message.body,
        };
        let charge = if in_transaction {
            // Held by the transaction until its COMMIT moves it to the destination.
            let mut at_commit = vec![self.usages.of(key)];
            if !message.persistent {
                at_commit.push(Arc::clone(&self.usages.temp));
            }
            self.usages
                .transactions
                .charge_until_commit(bytes as u64, at_commit)
        } else {
            let charge = self.usages.of(key).charge(bytes as u64);
            if message.persistent {
                charge
            } else {
                charge.and(&self.usages.temp)
            }
        };
        Ok(TopicMessage {
            id: None,
            message_id,
            persistent: message.persistent,
            priority: message.priority,
            expiration,
            payload: Arc::new(payload),
            charge: Some(Arc::new(charge)),
            origin: message.origin,
            redeliveries: 0,
        })
    }

    /// Sends `message` to `destination` (`queue://NAME`, `/queue/NAME`, `topic://NAME`,
    /// `/topic/NAME`: [`ToDestination`]). Returns once it is accepted: a persistent message sent to a
    /// queue, or to a topic that a durable subscription needs it for, is committed to
    /// the store first. When a usage limit is reached it first waits for space
    /// (producer flow control, [`Broker::wait_for_space`]).
    ///
    /// Errors: [`Error::InvalidDestination`], [`Error::InvalidPriority`],
    /// [`Error::ResourceLimit`] (flow control set to fail), [`Error::Actor`] when the
    /// store write failed (nothing was stored; the send may be retried),
    /// [`Error::ShuttingDown`] after [`Broker::shutdown`].
    pub async fn send(
        &self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<SendReceipt, Error> {
        let key = destination.to_destination()?;
        self.wait_for_space(&key, message.persistent).await?;
        self.send_now(&key, message).await
    }

    /// Sends every message of `messages` to `destination`, in that order, pipelined:
    /// each send starts when the one before has its place (as [`Broker::start_send`],
    /// flow control included), at most [`SEND_WINDOW`] await their commit at a time,
    /// and their commits share the store's group commit. A producer with a batch in
    /// hand gets the store's batched pace instead of one commit per message.
    ///
    /// Returns one outcome per message, in order, once every one is known: a
    /// [`SendReceipt`] (accepted, as by [`Broker::send`]: committed when stored) or the
    /// error of that message alone (as [`Broker::send`]'s; nothing of it was stored).
    /// Messages after a failed one are still sent.
    pub async fn send_all(
        &self,
        destination: impl ToDestination,
        messages: impl IntoIterator<Item = Message>,
    ) -> Vec<Result<SendReceipt, Error>> {
        let key = match destination.to_destination() {
            Ok(key) => key,
            // The same refusal for each message.
            Err(e) => {
                let text = e.to_string();
                return messages
                    .into_iter()
                    .map(|_| match &e {
                        Error::InvalidDestination { name, reason } => {
                            Err(Error::InvalidDestination {
                                name: name.clone(),
                                reason,
                            })
                        }
                        _ => Err(Error::Runtime(text.clone())),
                    })
                    .collect();
            }
        };
        let mut outcomes: Vec<Option<Result<SendReceipt, Error>>> = Vec::new();
        let mut waiting = futures::stream::FuturesOrdered::new();
        for message in messages {
            let index = outcomes.len();
            outcomes.push(None);
            match self.start_send(&key, message).await {
                Ok(pending) => waiting.push_back(async move { (index, pending.await) }),
                Err(e) => outcomes[index] = Some(Err(e)),
            }
            while waiting.len() >= SEND_WINDOW {
                if let Some((i, outcome)) = waiting.next().await {
                    outcomes[i] = Some(outcome);
                }
            }
        }
        while let Some((i, outcome)) = waiting.next().await {
            outcomes[i] = Some(outcome);
        }
        outcomes
            .into_iter()
            .map(|o| o.expect("every send has its outcome"))
            .collect()
    }

    /// Sends as [`Broker::send`] without waiting for space: the caller checked with
    /// [`Broker::check_space`] or [`Broker::wait_for_space`] (a send that races others
    /// for the last space may go over a limit by its own size).
    pub async fn send_now(
        &self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<SendReceipt, Error> {
        self.start_send_now(destination, message).await?.await
    }

    /// Starts a send and returns once the message has its place in its destination's
    /// order, without waiting for its commit: await the [`PendingSend`] for the
    /// [`SendReceipt`] (after the commit, for a message that is stored). Waits for
    /// space first, as [`Broker::send`].
    ///
    /// This is how a producer pipelines: sends started one after another (each
    /// `start_send` awaited before the next) are stored and delivered in that order,
    /// while their commits overlap and share the store's group commit. A transport uses
    /// it to keep reading while earlier frames are in the store.
    ///
    /// Errors: as [`Broker::send`]; those of the store write come from the
    /// [`PendingSend`] (nothing was stored).
    pub async fn start_send(
        &self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<PendingSend, Error> {
        let key = destination.to_destination()?;
        self.wait_for_space(&key, message.persistent).await?;
        self.start_send_now(&key, message).await
    }

    /// [`Broker::start_send`] without waiting for space (as [`Broker::send_now`]).
    pub async fn start_send_now(
        &self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<PendingSend, Error> {
        let key = destination.to_destination()?;
        let outgoing = self.outgoing(&key, message, false)?;
        let message_id = outgoing.message_id.clone();
        let ticket = self
            .ask_live(
                &key,
                || Publish(outgoing.clone()),
                PublishTicket::is_retired,
            )
            .await?;
        Ok(PendingSend { message_id, ticket })
    }

    /// Sends `message` to destination `name` (as [`Broker::send`]) inside transaction
    /// `xid`: a persistent message that must be stored is stored prepared (invisible,
    /// and it stops expiry runs rather than being passed by a mark); nothing is
    /// delivered until [`Broker::commit_prepared`]. Errors as [`Broker::send`].
    pub async fn send_prepared(
        &self,
        destination: impl ToDestination,
        message: Message,
        xid: &str,
    ) -> Result<SendReceipt, Error> {
        // A transaction never waits for space (its own COMMIT may be what frees it):
        // the transactions' budget refuses it instead.
        self.send_prepared_now(destination, message, xid).await
    }

    /// [`Broker::send_prepared`] without waiting for space (as [`Broker::send_now`]).
    pub async fn send_prepared_now(
        &self,
        destination: impl ToDestination,
        message: Message,
        xid: &str,
    ) -> Result<SendReceipt, Error> {
        self.start_send_prepared_now(destination, message, xid)
            .await?
            .await
    }

    /// [`Broker::send_prepared_now`] in two steps, as [`Broker::start_send`]: returns
    /// once the message has its place; the [`PendingSend`] resolves once it is stored
    /// prepared.
    pub async fn start_send_prepared_now(
        &self,
        destination: impl ToDestination,
        message: Message,
        xid: &str,
    ) -> Result<PendingSend, Error> {
        let key = destination.to_destination()?;
        self.check_transaction_space(&message)?;
        let outgoing = self.outgoing(&key, message, true)?;
        let message_id = outgoing.message_id.clone();
        let prepared = || PublishPrepared {
            message: outgoing.clone(),
            xid: xid.to_string(),
        };
        let ticket = self
            .ask_live(&key, prepared, PublishTicket::is_retired)
            .await?;
        Ok(PendingSend { message_id, ticket })
    }

    /// Commits transaction `xid`, whose messages went to `destinations` (names as for
    /// [`Broker::send`]): in one store transaction its stored messages become visible
    /// under new, highest ids (so no subscription's mark can already be past them);
    /// then each destination delivers them.
    pub async fn commit_prepared<D: ToDestination>(
        &self,
        xid: &str,
        destinations: &[D],
    ) -> Result<(), Error> {
        self.commit_transaction(xid, destinations, Vec::new()).await
    }

    /// [`Transaction::commit`]: takes each ack from its destination (in memory, in
    /// order), then writes the commit of `xid` and the acks' writes in one store
    /// transaction, reports that to the destinations that took acks, and releases the
    /// messages at `destinations`.
    async fn commit_transaction<D: ToDestination>(
        &self,
        xid: &str,
        destinations: &[D],
        acks: Vec<TransactedAck>,
    ) -> Result<(), Error> {
        let mut taken: Vec<TakenAck> = Vec::new();
        for TransactedAck { destination, ack } in acks {
            let answer = destination.take.send(ack).await;
            let refused = match answer {
                Ok(Ok(writes)) => {
                    taken.extend(writes);
                    continue;
                }
                _ if destination.shut_down.load(Ordering::Acquire) => Error::ShuttingDown,
                Ok(Err(e)) => e.into(),
                Err(e) => e.into(),
            };
            report_acks_stored(taken, false);
            let _ = self.rollback_prepared(xid, destinations).await;
            return Err(refused);
        }
        let writes = taken.iter().map(|t| t.write.clone()).collect();
        let committed = self.store.commit_with(xid.to_string(), writes).await;
        report_acks_stored(taken, committed.is_ok());
        let renumbered = committed?;
        self.tell(destinations, || CommitPrepared {
            xid: xid.to_string(),
            renumbered: renumbered.clone(),
        })
        .await
    }

    /// Sends `make()` to each of `destinations` and waits for each to handle it.
    async fn tell<M, D: ToDestination>(
        &self,
        destinations: &[D],
        make: impl Fn() -> M,
    ) -> Result<(), Error>
    where
        M: actix::Message<Result = ()> + Send + 'static,
        TopicActor: Handler<M>,
        QueueActor: Handler<M>,
    {
        for destination in destinations {
            let key = destination.to_destination()?;
            self.ask_live(&key, &make, |_| false).await?;
        }
        Ok(())
    }

    /// Rolls back transaction `xid`: its stored messages are deleted, none is delivered.
    pub async fn rollback_prepared<D: ToDestination>(
        &self,
        xid: &str,
        destinations: &[D],
    ) -> Result<(), Error> {
        self.store.rollback(xid.to_string()).await?;
        self.tell(destinations, || AbortPrepared {
            xid: xid.to_string(),
        })
        .await
    }

    /// Deletes the prepared messages of every transaction whose xid starts with
    /// `xid_prefix`: transactions a previous run left open when it stopped. Call it at
    /// start. Returns how many messages it deleted.
    pub async fn rollback_abandoned(&self, xid_prefix: &str) -> Result<u64, Error> {
        self.refuse_if_shut_down()?;
        Ok(self
            .store
            .rollback_abandoned(xid_prefix.to_string())
            .await?)
    }

    /// Subscribes to destination `name` (as for [`Broker::send`]). On a queue the
    /// subscription is one of its competing consumers: each message goes to one of
    /// them (prefetch default: the policy's `queue_prefetch`, 1,000).
    ///
    /// A name with a wildcard element (`orders.>`, `queue://jobs.*`; ActiveMQ's
    /// wildcards, [`Target::Pattern`]) subscribes to every destination it matches:
    /// those running, the queues with stored messages (for a queue pattern) and the
    /// topics holding the durable subscription (for a durable one), and those started
    /// later. [`Received::destination`] names each message's destination; the prefetch
    /// bounds the un-acked deliveries in all and at each destination;
    /// [`Subscription::ack_up_to`] acks, at each destination, what came from it up to
    /// that message. A durable subscription to a topic pattern is kept on every
    /// matching topic, also on one created while it is offline, across restarts.
    ///
    /// Errors: [`Error::InvalidDestination`] (also for a durable subscription on a
    /// queue or a queue pattern), [`Error::InvalidSubscription`], [`Error::DurableInUse`] when
    /// the durable subscription already has a consumer, or a store error.
    pub async fn subscribe(
        &self,
        destination: impl ToDestination,
        options: SubscribeOptions,
    ) -> Result<Subscription, Error> {
        self.refuse_if_shut_down()?;
        if options.prefetch == Some(0) {
            return Err(Error::InvalidPrefetch);
        }
        let durable = match &options.durable {
            Some((client, sub)) if client.is_empty() || sub.is_empty() => {
                return Err(Error::InvalidSubscription)
            }
            Some((client, sub)) => Some(SubscriptionKey::new(client, sub)),
            None => None,
        };
        let key = match destination.to_target()? {
            Target::One(key) => key,
            Target::Pattern(pattern) => {
                return self.subscribe_pattern(pattern, durable, options).await
            }
        };
        if durable.is_some() && !key.capabilities().durable_subscriptions {
            return Err(no_durable_subscriptions(key.container(), key.kind()));
        }
        if let Some(durable) = &durable {
            self.replace_durable_elsewhere(&Target::One(key.clone()), durable)
                .await?;
            self.check_durable_room(&key.container(), durable).await?;
        }
        // Credit never lets more than the prefetch be queued; the channel holds that.
        let max = ebb_actors::subscription::MAX_PREFETCH;
        let capacity = options.prefetch.unwrap_or(max).clamp(1, max) as usize;
        let (tx, rx) = mpsc::channel(capacity);
        // A non-durable topic subscription's automatic acks only give credit back: they
        // go through shared counters instead of a message each (`AutoAcks`).
        let shared = (options.ack == AckMode::Auto
            && durable.is_none()
            && key.capabilities().shared_auto_acks)
            .then(|| Arc::new(AutoAcks::default()));
        let handed = Handed::default();
        let subscribe = Subscribe {
            handed: Some(Arc::clone(&handed)),
            durable,
            prefetch: options.prefetch,
            deliver: tx,
            selector: options.selector.map(Arc::new),
            exclusive: options.exclusive,
            no_local: options.no_local,
            auto_acks: shared.clone(),
        };
        use ebb_actors::ActorError;
        let retired = |r: &Result<u64, ActorError>| matches!(r, Err(ActorError::Retired(_)));
        let (destination, id) = self
            .ask_live_at(&key, || subscribe.clone(), retired)
            .await?;
        let id = id?;
        Ok(Subscription {
            destination: endpoints(&destination, self, options.ack),
            id,
            ack: options.ack,
            rx,
            auto_ack: AutoAck {
                batch: auto_ack_batch(capacity),
                shared,
                ..AutoAck::default()
            },
            handed,
            acks: Default::default(),
        })
    }

    /// Subscribes to every destination `pattern` matches (a wildcard destination,
    /// see [`Broker::subscribe`]) through a [`WildcardActor`]: those running now, the
    /// queues (for a queue pattern) and topics (for a durable subscription) the store
    /// holds, and those started later.
    async fn subscribe_pattern(
        &self,
        pattern: DestinationPattern,
        durable: Option<SubscriptionKey>,
        options: SubscribeOptions,
    ) -> Result<Subscription, Error> {
        if durable.is_some() && !pattern.kind().capabilities().durable_subscriptions {
            return Err(no_durable_subscriptions(
                pattern.to_string(),
                pattern.kind(),
            ));
        }
        let selector = options.selector.map(Arc::new);
        let selector_text = selector.as_ref().map(|s| s.text().to_string());
        if let Some(key) = &durable {
            self.replace_durable_elsewhere(&Target::Pattern(pattern.clone()), key)
                .await?;
            self.check_durable_room(&wildcard_container(&pattern), key)
                .await?;
        }
        let max = ebb_actors::subscription::MAX_PREFETCH;
        let capacity = options.prefetch.unwrap_or(max).clamp(1, max) as usize;
        let (tx, rx) = mpsc::channel(capacity);
        let template = Template {
            durable: durable.clone(),
            prefetch: options.prefetch,
            selector,
            exclusive: options.exclusive,
            no_local: options.no_local,
        };
        let accept = options.accept.map(|a| a.0);
        let handed = Handed::default();
        let wildcard = WildcardActor::new(
            pattern.clone(),
            template.clone(),
            accept.clone(),
            tx,
            Arc::clone(&handed),
        );
        let actor = actix::Actor::start_in_arbiter(self.runtime.arbiter(), move |_| wildcard);
        let attached = async {
            // A durable one's previous consumer, just dropped, may still be stopping
            // (see `forget_wildcard_durable`): asked again for at most 1 s.
            let mut targets = while_stopping(|| {
                self.registry.send(Watch {
                    pattern: pattern.clone(),
                    watcher: actor.clone(),
                    durable: durable.clone().map(|k| (k, selector_text.clone())),
                    template: template.clone(),
                    accept: accept.clone(),
                })
            })
            .await?;
            // Only once the registry holds it for this consumer (a second consumer
            // is refused above), so a refused SUBSCRIBE changes nothing stored.
            if let Some(key) = &durable {
                self.define_wildcard_durable(&pattern, key, selector_text.clone())
                    .await?;
            }
            for key in self.stored_matches(&pattern, durable.as_ref()).await? {
                if !targets.iter().any(|(k, _)| *k == key) {
                    let addr = self.destination(&key).await?;
                    targets.push((key, addr));
                }
            }
            actor.send(Attach(targets)).await??;
            Ok::<_, Error>(())
        };
        if let Err(e) = attached.await {
            actor.do_send(Detach {
                subscription: WILDCARD_SUBSCRIPTION,
            });
            return Err(e);
        }
        Ok(Subscription {
            destination: Endpoints {
                ack: actor.clone().recipient(),
                take: actor.clone().recipient(),
                nack: actor.clone().recipient(),
                detach: actor.recipient(),
                shut_down: Arc::clone(&self.shut_down),
                arbiter: self.runtime.arbiter().clone(),
                serial: SUBSCRIPTION_SERIALS.fetch_add(1, Ordering::Relaxed),
                mode: options.ack,
            },
            id: WILDCARD_SUBSCRIPTION,
            ack: options.ack,
            rx,
            auto_ack: AutoAck {
                batch: auto_ack_batch(capacity),
                ..AutoAck::default()
            },
            handed,
            acks: Default::default(),
        })
    }

    /// The destinations `pattern` matches that the store knows and that may not be
    /// running: for a queue pattern, the queues holding messages; for a durable
    /// subscription, the topics holding it. Read a bounded page at a time
    /// ([`MessageStore::list_containers`], [`MessageStore::find_subscription_containers`]).
    async fn stored_matches(
        &self,
        pattern: &DestinationPattern,
        durable: Option<&SubscriptionKey>,
    ) -> Result<Vec<DestinationKey>, Error> {
        let store = self.store.store();
        let mut found = Vec::new();
        let mut after = String::new();
        let (from, below) = pattern.container_range();
        loop {
            // Where messages wait for any consumer, every stored destination in the
            // range; where they wait for a durable subscription, those it has.
            let caps = pattern.kind().capabilities();
            let page = match durable {
                _ if caps.point_to_point => {
                    // Strictly after: the range's start is a key itself.
                    let start = if after.is_empty() {
                        below_key(&from)
                    } else {
                        after.clone()
                    };
                    store
                        .list_containers(&start, &below, CONTAINER_PAGE)
                        .await?
                }
                Some(key) if caps.durable_subscriptions => {
                    store
                        .find_subscription_containers(key, &after, CONTAINER_PAGE)
                        .await?
                }
                _ => Vec::new(),
            };
            let full = page.len() == CONTAINER_PAGE as usize;
            if let Some(last) = page.last() {
                after = last.clone();
            }
            found.extend(page.iter().filter_map(|c| {
                let key = DestinationKey::from_container(c).ok()?;
                pattern.matches(&key).then_some(key)
            }));
            if !full {
                return Ok(found);
            }
        }
    }

    /// Writes the definition of the durable subscription `key` to wildcard topic
    /// `pattern` (its own container, [`wildcard_container`]), so that it outlives a
    /// restart even before any topic matches; a definition with another selector is
    /// replaced (the subscription is created anew at each topic when it attaches).
    async fn define_wildcard_durable(
        &self,
        pattern: &DestinationPattern,
        key: &SubscriptionKey,
        selector: Option<String>,
    ) -> Result<(), Error> {
        let container = wildcard_container(pattern);
        let sub = self
            .store
            .subscribe(container.clone(), key.clone(), selector.clone(), false)
            .await?;
        if sub.selector != selector {
            self.store
                .unsubscribe(container.clone(), key.clone())
                .await?;
            self.store
                .subscribe(container, key.clone(), selector, false)
                .await?;
        }
        Ok(())
    }

    /// Tells the registry that durable subscription `key` to a wildcard topic goes
    /// ([`ForgetWildcardDurable`]); a consumer just dropped (a STOMP UNSUBSCRIBE
    /// removes the subscription right after detaching it) is waited for
    /// ([`while_stopping`]).
    async fn forget_wildcard_durable(&self, key: &SubscriptionKey) -> Result<(), Error> {
        while_stopping(|| self.registry.send(ForgetWildcardDurable(key.clone()))).await
    }

    /// Refuses a new durable subscription `key` on `container` when its client id has
    /// [`UsageConfig::max_durable_subscriptions_per_client`] already (one that exists
    /// is always taken up again).
    async fn check_durable_room(
        &self,
        container: &str,
        key: &SubscriptionKey,
    ) -> Result<(), Error> {
        let max = self.usages.config.max_durable_subscriptions_per_client;
        if max == 0 {
            return Ok(());
        }
        let store = self.store.store();
        if store.find_subscription(container, key).await?.is_some() {
            return Ok(());
        }
        let has = store
            .count_client_subscriptions(&key.client_id, max)
            .await?;
        if has >= u64::from(max) {
            return Err(Error::TooManyDurableSubscriptions {
                client_id: key.client_id.clone(),
                max,
            });
        }
        Ok(())
    }

    /// A durable subscription is `(client id, name)` across the broker (JMS): before
    /// `key` subscribes to `target`, whatever it was subscribed to before, if that was
    /// another destination or wildcard destination, is deleted, as if unsubscribed
    /// (JMS 2.0 §8.3, ActiveMQ's `hasDurableSubChanged`; case DUR-11). Its backlog goes
    /// with it (its rows are cleaned up on each topic). A subscription to a wildcard
    /// topic is its definition ([`wildcard_container`]) and one subscription per
    /// matching topic it has met; those stay when `target` is the same pattern.
    /// Errors: [`Error::DurableInUse`] when what would be deleted has a consumer.
    async fn replace_durable_elsewhere(
        &self,
        target: &Target,
        key: &SubscriptionKey,
    ) -> Result<(), Error> {
        let store = self.store.store();
        let mut containers: Vec<String> = Vec::new();
        loop {
            let after = containers.last().map(String::as_str).unwrap_or("");
            let page = store
                .find_subscription_containers(key, after, CONTAINER_PAGE)
                .await?;
            let full = page.len() == CONTAINER_PAGE as usize;
            containers.extend(page);
            if !full {
                break;
            }
        }
        let definition = match target {
            Target::Pattern(p) => Some(wildcard_container(p)),
            Target::One(_) => None,
        };
        let defined = definition.as_ref().is_some_and(|d| containers.contains(d));
        let was_wildcard = containers
            .iter()
            .any(|c| c.starts_with(WILDCARD_CONTAINER_PREFIX));
        // Definitions first: while one's consumer is online nothing is deleted, and
        // once it is forgotten no topic started meanwhile creates the old one again.
        containers.sort_by_key(|c| !c.starts_with(WILDCARD_CONTAINER_PREFIX));
        for container in &containers {
            if Some(container) == definition.as_ref() {
                continue;
            }
            if container.starts_with(WILDCARD_CONTAINER_PREFIX) {
                // Another pattern's definition: that subscription goes.
                self.forget_wildcard_durable(key).await?;
                tracing::info!(client_id = %key.client_id, subscription = %key.subscription_name,
                    from = %container, "durable subscription moved: the wildcard subscription is deleted");
                self.store
                    .unsubscribe(container.clone(), key.clone())
                    .await?;
                continue;
            }
            let old = DestinationKey::from_container(container)?;
            let keep = match target {
                // A topic of this pattern's subscription.
                Target::Pattern(p) => defined && p.matches(&old),
                // This topic's own subscription (not one a wildcard one made there).
                Target::One(k) => *k == old && !was_wildcard,
            };
            if keep {
                continue;
            }
            tracing::info!(client_id = %key.client_id, subscription = %key.subscription_name,
                from = %container, to = %target,
                "durable subscription moved to another destination: the old one is deleted with its backlog");
            self.topic(&old)
                .await?
                .send(RemoveDurable(key.clone()))
                .await??;
        }
        Ok(())
    }

    /// Deletes an offline durable subscription (its marks and pending acks); its
    /// messages are then deleted by cleanup. `Ok(false)` if it did not exist.
    ///
    /// On a wildcard topic (`orders.>`), it removes the subscription from every topic
    /// it holds and its definition; `Ok(false)` if it had no definition.
    pub async fn remove_durable(
        &self,
        destination: impl ToDestination,
        client_id: &str,
        subscription: &str,
    ) -> Result<bool, Error> {
        self.refuse_if_shut_down()?;
        let key = SubscriptionKey::new(client_id, subscription);
        let pattern = match destination.to_target()? {
            Target::One(one) => {
                let topic = self.topic(&one).await?;
                return Ok(topic.send(RemoveDurable(key)).await??);
            }
            Target::Pattern(pattern) => pattern,
        };
        self.forget_wildcard_durable(&key).await?;
        for topic in self.stored_matches(&pattern, Some(&key)).await? {
            self.topic(&topic)
                .await?
                .send(RemoveDurable(key.clone()))
                .await??;
        }
        Ok(self
            .store
            .unsubscribe(wildcard_container(&pattern), key)
            .await?)
    }

    /// Whether the durable subscription `subscription` of client `client_id` exists on
    /// topic `name` (as for [`Broker::send`]), attached or not: a transport asks before
    /// [`Broker::subscribe`] creates one, since creating needs a right that
    /// re-attaching does not (ActiveMQ's admin right). Reads the store; starts nothing.
    ///
    /// Errors: [`Error::InvalidDestination`], or a store error.
    pub async fn durable_subscription_exists(
        &self,
        destination: impl ToDestination,
        client_id: &str,
        subscription: &str,
    ) -> Result<bool, Error> {
        self.refuse_if_shut_down()?;
        let container = match destination.to_target()? {
            Target::One(key) => key.container(),
            Target::Pattern(pattern) => wildcard_container(&pattern),
        };
        let key = SubscriptionKey::new(client_id, subscription);
        let found = self
            .store
            .store()
            .find_subscription(&container, &key)
            .await?;
        Ok(found.is_some())
    }

    /// A transaction of sends under `xid` (see [`Transaction`]): nothing is stored or
    /// sent until its first send. The xid names it in the store; give each open
    /// transaction its own, with a prefix [`Broker::rollback_abandoned`] can clear at
    /// start.
    pub fn transaction(&self, xid: impl Into<String>) -> Transaction {
        Transaction {
            broker: self.clone(),
            xid: xid.into(),
            destinations: Vec::new(),
            acks: Vec::new(),
        }
    }

    /// Up to `limit` (at most [`MAX_BROWSE_PAGE`]) stored messages of destination `name`
    /// (as for [`Broker::send`]) with store id `> after_id`, in id order. Browsing never
    /// acks or expires.
    pub async fn browse(
        &self,
        destination: impl ToDestination,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<BrowsedMessage>, Error> {
        self.refuse_if_shut_down()?;
        let container = destination.to_destination()?.container();
        let rows = self
            .store
            .store()
            .browse(&container, after_id, limit.min(MAX_BROWSE_PAGE))
            .await?;
        Ok(rows.iter().map(|m| browsed(m)).collect())
    }

    /// Browses queue `destination` (as for [`Broker::send`]; a topic is refused): a
    /// [`QueueBrowser`] stream of the messages waiting in it, in queue order, stored
    /// and non-persistent ones alike, without consuming, acking or expiring any (as
    /// ActiveMQ's queue browser and STOMP `browser:true`). Expired messages are left
    /// out. It reads the queue in pages of [`BROWSE_PAGE`] messages, one at a time as
    /// the stream is polled, and ends (`None`) when it reaches the end of the queue;
    /// messages sent meanwhile are shown if the browse gets to them before the end.
    ///
    /// Errors: [`Error::InvalidDestination`] for a topic or a bad name; a page that
    /// fails (a store error) is an `Err` item, after which the stream ends.
    pub async fn browse_queue(
        &self,
        destination: impl ToDestination,
    ) -> Result<QueueBrowser, Error> {
        self.browse_queue_matching(destination, None).await
    }

    /// [`Broker::browse_queue`], showing only the messages `selector` matches (all
    /// with `None`); pages are read as for a browse of everything.
    pub async fn browse_queue_matching(
        &self,
        destination: impl ToDestination,
        selector: Option<Selector>,
    ) -> Result<QueueBrowser, Error> {
        let key = destination.to_destination()?;
        let DestinationAddr::Queue(queue) = self.destination(&key).await? else {
            return Err(Error::InvalidDestination {
                name: key.container(),
                reason: "only a queue can be browsed: a topic keeps no messages for later",
            });
        };
        let pages = futures::stream::unfold(Some((0i64, 0u64)), move |after| {
            let queue = queue.clone();
            async move {
                let after = after?;
                let page = queue
                    .send(Browse {
                        after,
                        limit: BROWSE_PAGE,
                    })
                    .await;
                let page = match page
                    .map_err(Error::from)
                    .and_then(|p| p.map_err(Error::from))
                {
                    Ok(page) => page,
                    Err(e) => return Some((vec![Err(e)], None)),
                };
                let next = (!page.end).then_some(page.next);
                let messages = page
                    .messages
                    .into_iter()
                    .map(|(_, message)| {
                        Ok(Received {
                            delivery: Delivery {
                                subscription: 0,
                                delivery_id: 0,
                                message,
                                redelivered: false,
                                source: None,
                            },
                            serial: 0,
                        })
                    })
                    .collect();
                Some((messages, next))
            }
        });
        let shown = move |item: &Result<Received, Error>| {
            let shown = match (item, &selector) {
                (Ok(m), Some(selector)) => selector.matches(&*m.delivery.message),
                _ => true,
            };
            std::future::ready(shown)
        };
        Ok(QueueBrowser {
            inner: Box::pin(pages.map(futures::stream::iter).flatten().filter(shown)),
        })
    }

    /// Up to `limit` (at most [`MAX_BROWSE_PAGE`]) messages a durable subscription has
    /// not acked, with store id `> after_id`. Never acks or expires.
    pub async fn browse_subscription(
        &self,
        destination: impl ToDestination,
        client_id: &str,
        subscription: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<BrowsedMessage>, Error> {
        self.refuse_if_shut_down()?;
        let container = destination.to_destination()?.container();
        let key = SubscriptionKey::new(client_id, subscription);
        let rows = self
            .store
            .store()
            .read_pending(&container, &key, after_id, None, limit.min(MAX_BROWSE_PAGE))
            .await?;
        Ok(rows.iter().map(|m| browsed(m)).collect())
    }

    /// What destination `key` reports, whatever its kind ([`GetStats`], starting it
    /// if it is not running); readable after shutdown for one that was running.
    pub(crate) async fn stats_of(&self, key: &DestinationKey) -> Result<Stats, Error> {
        Ok(self.lookup(key).await?.ask(GetStats).await?)
    }

    /// The counters of topic `name` (starting it if it is not running).
    ///
    /// Readable after [`Broker::shutdown`] too, for a destination that was running.
    pub async fn topic_stats(&self, destination: impl ToDestination) -> Result<TopicStats, Error> {
        let key = destination.to_destination()?;
        match self.lookup(&key).await? {
            DestinationAddr::Topic(topic) => Ok(topic.send(GetTopicStats).await?),
            DestinationAddr::Queue(_) => Err(Error::InvalidDestination {
                name: key.container(),
                reason: "this works on topics only",
            }),
        }
    }

    /// The counters of queue `name`: its plain name (`jobs`: the call names the kind),
    /// or any destination form (`queue://jobs`, `/queue/jobs`); a topic is refused.
    /// Readable after shutdown for a queue that was running.
    pub async fn queue_stats(&self, name: &str) -> Result<QueueStats, Error> {
        // Any of the destination forms, or the queue's plain name (the kind is the
        // call's).
        let key = match DestinationKey::parse(name) {
            Err(e) if e.reason == ebb_actors::destination::key::NO_KIND.as_str() => {
                DestinationKey::queue(name)?
            }
            parsed => parsed?,
        };
        match self.lookup(&key).await? {
            DestinationAddr::Queue(queue) => Ok(queue.send(GetQueueStats).await?),
            DestinationAddr::Topic(_) => Err(Error::InvalidDestination {
                name: name.to_string(),
                reason: "this works on queues only",
            }),
        }
    }

    /// Runs destination `name`'s housekeeping now, as its timer would: starts an expiry
    /// run (unless one is running) and, on a topic, a cleanup batch. Returns once the
    /// request is queued; watch [`Broker::topic_stats`] or [`Broker::queue_stats`] for
    /// the pages.
    pub async fn run_housekeeping(&self, destination: impl ToDestination) -> Result<(), Error> {
        let key = destination.to_destination()?;
        self.destination(&key)
            .await?
            .ask(ebb_actors::messages::RunHousekeeping)
            .await?;
        Ok(())
    }

    /// The store, for the crate's own reads (counts in [`Broker::stats`], the soak
    /// report). Crate-private: an embedder or a transport goes through the methods
    /// above. Tests and benches that check what was stored get it public with the
    /// `test-util` feature (the workspace's dev-dependencies turn it on).
    #[cfg(not(feature = "test-util"))]
    pub(crate) fn store(&self) -> &Arc<dyn MessageStore> {
        self.store.store()
    }

    /// The store, for reads (counts, browsing) and its fetch counters. Public only with
    /// the `test-util` feature, for tests and benches that check what was stored.
    #[cfg(feature = "test-util")]
    pub fn store(&self) -> &Arc<dyn MessageStore> {
        self.store.store()
    }

    /// Shuts down: refuses new destinations, stops every timer, lets expiry pages in
    /// flight finish and starts none, flushes the store actor (every accepted message
    /// is committed), and closes the store last. Returns when all of that is done.
    ///
    /// Every [`Subscription`] stream then ends (`None` once the messages already
    /// handed to it are taken), and every ack accepted before (also one that
    /// [`Subscription::ack`] answered without waiting for its commit) is committed.
    /// Later calls fail with [`Error::ShuttingDown`]: sends, subscribes, acks,
    /// browsing, transactions; the counters ([`Broker::topic_stats`],
    /// [`Broker::queue_stats`], [`Broker::usage`]) stay readable. Calling it again is
    /// harmless.
    pub async fn shutdown(&self) -> Result<(), Error> {
        self.shut_down.store(true, Ordering::Release);
        match self.registry.send(ShutdownBroker).await {
            Ok(done) => Ok(done?),
            // The registry is gone with the broker's system: nothing left to stop.
            Err(actix::MailboxError::Closed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// An open transaction of sends ([`Broker::transaction`]): its messages are held
/// prepared (a persistent one that must be stored is stored invisible) until
/// [`Transaction::commit`] delivers them all or [`Transaction::rollback`] deletes them.
/// It remembers the destinations it sent to, so that both reach each of them.
///
/// Dropping it without either leaves its prepared messages held until
/// [`Broker::rollback_abandoned`] at the next start: end every transaction.
pub struct Transaction {
    broker: Broker,
    xid: String,
    /// Destinations sent to, in first-send order.
    destinations: Vec<DestinationKey>,
    /// Acks to apply at COMMIT, in the order given.
    acks: Vec<TransactedAck>,
}

/// An ack kept by a [`Transaction`] until its COMMIT.
struct TransactedAck {
    destination: Endpoints,
    ack: TakeAck,
}

impl Transaction {
    /// The store xid it was opened with.
    pub fn xid(&self) -> &str {
        &self.xid
    }

    /// Sends `message` to destination `name` inside the transaction, as
    /// [`Broker::send_prepared`]: never waits for space; refused with
    /// [`Error::ResourceLimit`] beyond the transactions' budget.
    pub async fn send(
        &mut self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<SendReceipt, Error> {
        self.send_now(destination, message).await
    }

    /// As [`Transaction::send`] without waiting for space (as [`Broker::send_now`]).
    /// The destination joins the transaction before the send, so a commit or rollback
    /// reaches it even when this send fails.
    pub async fn send_now(
        &mut self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<SendReceipt, Error> {
        self.start_send_now(destination, message).await?.await
    }

    /// As [`Transaction::send_now`] in two steps ([`Broker::start_send`]): returns once
    /// the message has its place; the [`PendingSend`] resolves once it is stored
    /// prepared. Commit only after every pending send of the transaction resolved.
    pub async fn start_send_now(
        &mut self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<PendingSend, Error> {
        let key = destination.to_destination()?;
        if !self.destinations.contains(&key) {
            self.destinations.push(key.clone());
        }
        self.broker
            .start_send_prepared_now(&key, message, &self.xid)
            .await
    }

    /// Acks `message`, received on the subscription `acker` acks for, when the
    /// transaction commits: in the same store transaction as its sends, so after a
    /// crash either the sends are stored and the message is acked, or neither (a
    /// consume-transform-produce step happens once). Until then the message waits for
    /// its ack as before; a [`Transaction::rollback`] forgets the ack. Nothing is
    /// checked beyond the message's subscription until COMMIT.
    ///
    /// Errors: [`Error::NotThisSubscription`] for a message of another subscription,
    /// [`Error::ShuttingDown`]. In [`AckMode::Auto`] it does nothing (the stream acks).
    pub fn ack(&mut self, acker: &Acker, message: &Received) -> Result<(), Error> {
        self.acks.extend(acker.in_transaction(message, false)?);
        Ok(())
    }

    /// As [`Transaction::ack`], for `message` and every earlier un-acked message of its
    /// subscription (as [`Acker::ack_up_to`]).
    pub fn ack_up_to(&mut self, acker: &Acker, message: &Received) -> Result<(), Error> {
        self.acks.extend(acker.in_transaction(message, true)?);
        Ok(())
    }

    /// Commits: in one store transaction its messages become visible and its acks
    /// ([`Transaction::ack`]) are stored; then the messages are delivered.
    ///
    /// Errors: an ack whose message no longer waits for one ([`Error::Actor`]: acked
    /// or refused since, or its subscription ended): nothing is committed, the
    /// transaction's messages are rolled back, and the acks taken before it stay
    /// un-committed (their messages stay stored and are delivered again after a
    /// restart, as after a failed ack). A store error: nothing is committed (acked
    /// messages as before; the prepared messages are removed at the next start by
    /// [`Broker::rollback_abandoned`]).
    pub async fn commit(self) -> Result<(), Error> {
        self.broker
            .commit_transaction(&self.xid, &self.destinations, self.acks)
            .await
    }

    /// Rolls back: its prepared messages are deleted, none is delivered
    /// ([`Broker::rollback_prepared`]).
    pub async fn rollback(self) -> Result<(), Error> {
        self.broker
            .rollback_prepared(&self.xid, &self.destinations)
            .await
    }
}

fn browsed(m: &ebb_store::StoredMessage) -> BrowsedMessage {
    BrowsedMessage {
        store_id: m.id,
        message_id: m.message_id.clone(),
        priority: m.priority,
        expiration: m.expiration,
        headers: m.payload.headers.clone(),
        body: m.payload.body.clone(),
        redeliveries: m.redeliveries,
    }
}

/// Memory, store and temp usage at one moment ([`Broker::usage`]); bytes, limits 0 =
/// none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct UsageSnapshot {
    /// Bytes of messages held in memory now.
    pub memory_bytes: u64,
    /// [`UsageConfig::memory`].
    pub memory_limit: u64,
    /// Bytes of messages in the store now.
    pub store_bytes: u64,
    /// [`UsageConfig::store`].
    pub store_limit: u64,
    /// Bytes of non-persistent messages held now.
    pub temp_bytes: u64,
    /// [`UsageConfig::temp`].
    pub temp_limit: u64,
    /// Bytes open transactions hold until their COMMIT now.
    pub transactions_bytes: u64,
    /// [`UsageConfig::transactions_limit`] (0 = none).
    pub transactions_limit: u64,
    /// Producers waiting in [`Broker::wait_for_space`] now.
    pub blocked_producers: u64,
}

/// One destination's memory and producers ([`Broker::destination_flow`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DestinationFlow {
    /// Bytes of messages it holds in memory now.
    pub memory_bytes: u64,
    /// Its own memory limit, bytes (0 = only the broker's applies).
    pub memory_limit: u64,
    /// Producers waiting for space in it now.
    pub blocked_producers: u64,
    /// Producers reported by transports ([`Broker::producer_joined`]).
    pub producers: u64,
}

/// What names a destination in the embedding API: a [`DestinationKey`] (parsed once,
/// e.g. by a transport), or text parsed by [`DestinationKey::parse`], the same forms
/// STOMP takes: `queue://NAME` or `/queue/NAME` → a queue, `topic://NAME` or
/// `/topic/NAME` → a topic. A name without its kind (`orders`) is
/// [`Error::InvalidDestination`]: the broker does not guess which of two different
/// destinations is meant.
pub trait ToDestination {
    /// The key; [`Error::InvalidDestination`] for text that cannot name one (empty,
    /// over 200 bytes, control characters, another scheme, wildcards).
    fn to_destination(&self) -> Result<DestinationKey, Error>;

    /// What a subscription reads: one destination, or for a text with a wildcard
    /// element (`orders.>`, `queue://jobs.*`) the destinations it matches.
    fn to_target(&self) -> Result<Target, Error> {
        self.to_destination().map(Target::One)
    }
}

/// What a subscription reads: one destination, or every destination a pattern
/// matches (ActiveMQ's wildcards: `.` separates elements, `*` matches one, `>` the
/// rest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One destination (`queue://jobs`, `/queue/jobs`).
    One(DestinationKey),
    /// Every destination the pattern matches (`topic://orders.>`, `/queue/jobs.*`).
    Pattern(DestinationPattern),
}

impl Target {
    /// STOMP's form (`/topic/orders.>`).
    pub fn stomp(&self) -> String {
        match self {
            Target::One(k) => k.stomp(),
            Target::Pattern(p) => p.stomp(),
        }
    }

    /// Topic or queue.
    pub fn kind(&self) -> DestinationKind {
        match self {
            Target::One(k) => k.kind(),
            Target::Pattern(p) => p.kind(),
        }
    }
}

/// The store key form (`topic://orders.>`).
impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::One(k) => k.fmt(f),
            Target::Pattern(p) => p.fmt(f),
        }
    }
}

impl ToDestination for Target {
    fn to_destination(&self) -> Result<DestinationKey, Error> {
        match self {
            Target::One(k) => Ok(k.clone()),
            Target::Pattern(p) => Err(Error::InvalidDestination {
                name: p.to_string(),
                reason: "wildcards `*` and `>` name patterns, not a destination: subscribe to it, or send to one destination",
            }),
        }
    }

    fn to_target(&self) -> Result<Target, Error> {
        Ok(self.clone())
    }
}

impl ToDestination for DestinationPattern {
    fn to_destination(&self) -> Result<DestinationKey, Error> {
        Target::Pattern(self.clone()).to_destination()
    }

    fn to_target(&self) -> Result<Target, Error> {
        Ok(Target::Pattern(self.clone()))
    }
}

impl ToDestination for DestinationKey {
    fn to_destination(&self) -> Result<DestinationKey, Error> {
        Ok(self.clone())
    }
}

impl ToDestination for str {
    fn to_destination(&self) -> Result<DestinationKey, Error> {
        Ok(DestinationKey::parse(self)?)
    }

    fn to_target(&self) -> Result<Target, Error> {
        match DestinationPattern::subscription(self)? {
            Some(pattern) => Ok(Target::Pattern(pattern)),
            None => self.to_destination().map(Target::One),
        }
    }
}

impl ToDestination for String {
    fn to_destination(&self) -> Result<DestinationKey, Error> {
        self.as_str().to_destination()
    }

    fn to_target(&self) -> Result<Target, Error> {
        self.as_str().to_target()
    }
}

impl<T: ToDestination + ?Sized> ToDestination for &T {
    fn to_destination(&self) -> Result<DestinationKey, Error> {
        (**self).to_destination()
    }

    fn to_target(&self) -> Result<Target, Error> {
        (**self).to_target()
    }
}

/// Asks `ask` again while it answers `DurableInUse`, every 10 ms for at most 1 s:
/// a wildcard consumer just dropped detaches through its actor's mailbox, and the
/// registry sees it in use until that actor has stopped. After 1 s the error is the
/// answer (a consumer really holds the subscription).
async fn while_stopping<T, F, Fut>(mut ask: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<
        Output = Result<Result<T, ebb_actors::ActorError>, actix::MailboxError>,
    >,
{
    for _ in 0..100 {
        match ask().await? {
            Err(ebb_actors::ActorError::DurableInUse(_)) => {
                actix_rt::time::sleep(Duration::from_millis(10)).await;
            }
            answer => return Ok(answer?),
        }
    }
    Ok(ask().await??)
}

/// Containers the wildcard reads list per store page.
const CONTAINER_PAGE: u32 = 500;

/// A text just below `key`, so that a listing strictly after it starts with `key`
/// itself: its last character one lower, then DEL (a control character, which no
/// destination name holds): `queue://jobs` gives `queue://jobr\x7f`, below which no
/// name starting `queue://jobr` in ASCII sorts. Only names with a non-ASCII character
/// right there lie between, and the caller filters what it lists.
pub(crate) fn below_key(key: &str) -> String {
    let mut below = key.to_string();
    match below.pop() {
        Some(c) if c.is_ascii_graphic() => {
            below.push((c as u8 - 1) as char);
            below.push('\u{7f}');
        }
        _ => {}
    }
    below
}

/// The recipients a [`Subscription`] talks to, at its destination's actor.
/// Tells each destination that took an ack of a transaction whether its write was
/// committed ([`AcksStored`]).
fn report_acks_stored(taken: Vec<TakenAck>, committed: bool) {
    for TakenAck { write, stored } in taken {
        let ids = match write {
            ebb_store::WriteOp::Remove { ids, .. } => ids,
            ebb_store::WriteOp::Ack { messages, .. } => {
                messages.into_iter().map(|(id, _)| id).collect()
            }
            _ => Vec::new(),
        };
        stored.do_send(AcksStored { ids, committed });
    }
}

fn endpoints(destination: &DestinationAddr, broker: &Broker, mode: AckMode) -> Endpoints {
    Endpoints {
        ack: destination.recipient(),
        take: destination.recipient(),
        nack: destination.recipient(),
        detach: destination.recipient(),
        shut_down: Arc::clone(&broker.shut_down),
        arbiter: broker.runtime.arbiter().clone(),
        serial: SUBSCRIPTION_SERIALS.fetch_add(1, Ordering::Relaxed),
        mode,
    }
}

/// The refusal of a durable subscription to `name`, whose kind keeps none.
fn no_durable_subscriptions(name: String, kind: DestinationKind) -> Error {
    let reason = match kind.capabilities().point_to_point {
        true => "a queue has no durable subscriptions: subscribe without one",
        false => "this kind of destination has no durable subscriptions: subscribe without one",
    };
    Error::InvalidDestination { name, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_a_key_sorts_just_below_it() {
        for key in ["queue://jobs", "topic://", "queue://a.b"] {
            let below = below_key(key);
            assert!(below.as_str() < key, "{below:?} {key}");
            for name in [
                "queue://jobr",
                "queue://jobrunner",
                "queue://jobr.x",
                "topic:/z",
                "queue://a.a.z",
            ] {
                assert!(
                    !(below.as_str() < name && name < key),
                    "{name} between {below:?} and {key}"
                );
            }
        }
    }

    #[test]
    fn text_and_keys_name_the_same_destination() {
        let key = "topic://orders.eu".to_destination().unwrap();
        assert_eq!(key, DestinationKey::topic("orders.eu").unwrap());
        assert_eq!("/topic/orders.eu".to_destination().unwrap(), key);
        assert_eq!(
            "/queue/jobs".to_destination().unwrap(),
            DestinationKey::queue("jobs").unwrap()
        );
        assert_eq!(key.to_destination().unwrap(), key);
        assert_eq!(
            String::from("queue://jobs").to_destination().unwrap(),
            DestinationKey::queue("jobs").unwrap()
        );
        for bad in ["", "orders", "a.*", "bad\nname", "queue://", "queue://a.*"] {
            let e = bad.to_destination().unwrap_err();
            assert!(
                matches!(e, Error::InvalidDestination { .. }),
                "{bad:?}: {e}"
            );
        }
        assert_eq!(
            "queue://a.*".to_destination().unwrap_err().to_string(),
            "invalid destination `queue://a.*`: wildcards `*` and `>` name patterns, not a destination"
        );
    }
}
