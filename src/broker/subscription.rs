//! What a consumer holds: [`SubscribeOptions`], the [`Subscription`] stream of [`Received`] messages, its acks ([`Acker`], the ack window) and auto-acks.

use super::Broker;
use crate::error::Error;
use actix::Recipient;
use ebb_actors::broker::DestinationAddr;
use ebb_actors::messages::{Ack, Delivery, Detach, Handed, Nack, TakeAck};
use ebb_actors::selector::Selector;
use ebb_actors::subscription::AutoAcks;
use ebb_actors::DestinationKey;
use futures::Stream;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

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
    /// The connection subscribing (a number from [`crate::next_connection_id`]): a
    /// temporary destination is consumed only by the connection that made it
    /// ([`crate::Broker::temporary`]). `None`: no connection, refused by every
    /// temporary destination.
    pub connection: Option<u64>,
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

    /// Subscribes as connection `connection` (see [`SubscribeOptions::connection`]).
    pub fn connection(mut self, connection: u64) -> Self {
        self.connection = Some(connection);
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
    pub(super) delivery: Delivery,
    /// The [`Subscription`] it came from (its serial; 0 for a browsed message).
    pub(super) serial: u64,
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
    pub(super) destination: Endpoints,
    pub(super) id: u64,
    pub(super) ack: AckMode,
    pub(super) rx: mpsc::Receiver<Delivery>,
    pub(super) auto_ack: AutoAck,
    /// The last delivery id the stream yielded: only those count as delivered when it
    /// detaches ([`Subscribe::handed`]).
    pub(super) handed: Handed,
    /// Acks sent and not yet seen committed ([`Subscription::ack`]).
    pub(super) acks: parking_lot::Mutex<AckWindow>,
    /// Its part in advisory messages (dropped after the detach: see `Drop`).
    pub(super) _advised: super::advisory::Advised,
}

/// Most acks a [`Subscription`] has sent without having seen their commit: past it,
/// [`Subscription::ack`] waits for the oldest. Its bound on what a crash may redeliver
/// (beside what was delivered and not acked).
pub const ACK_WINDOW: usize = 512;

/// A [`Subscription`]'s acks in flight: each answers once its store write commits.
#[derive(Default)]
pub(super) struct AckWindow {
    pub(super) in_flight: std::collections::VecDeque<Pin<Box<actix::dev::RecipientRequest<Ack>>>>,
    /// The first failure among those seen answered, for the next call to report.
    pub(super) failed: Option<Error>,
}

impl AckWindow {
    /// Takes the answers that are in, oldest first, keeping the first failure.
    pub(super) fn collect(&mut self, endpoints: &Endpoints) {
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
pub(super) struct Endpoints {
    pub(super) ack: Recipient<Ack>,
    /// Acks of a transaction, written with its COMMIT ([`Transaction::ack`]).
    pub(super) take: Recipient<TakeAck>,
    pub(super) nack: Recipient<Nack>,
    pub(super) detach: Recipient<Detach>,
    /// The broker's [`Broker::shutdown`] flag: an ack the destination no longer knows
    /// after it is [`Error::ShuttingDown`].
    pub(super) shut_down: Arc<AtomicBool>,
    /// The broker's thread (see [`crate::runtime`]).
    pub(super) arbiter: actix_rt::ArbiterHandle,
    /// This subscription's number, unique in the process: [`Received`] carries it, so
    /// a message acked on another subscription is refused.
    pub(super) serial: u64,
    /// Its ack mode: in [`AckMode::Auto`] an explicit ack does nothing.
    pub(super) mode: AckMode,
}

/// Serials of [`Subscription`]s (0 is no subscription's).
pub(super) static SUBSCRIPTION_SERIALS: AtomicU64 = AtomicU64::new(1);

impl Endpoints {
    /// Whether an ack or NACK (`nack`) of `message` goes to the destination:
    /// `Ok(false)` for an ack in [`AckMode::Auto`] (the stream acks what it yields;
    /// as JMS's `acknowledge()` outside client mode, it does nothing). Errors:
    /// [`Error::NotThisSubscription`] for a message received on another subscription;
    /// [`Error::Actor`] for a NACK in [`AckMode::Auto`] (the message is acked already).
    pub(super) fn accepts(&self, message: &Received, nack: bool) -> Result<bool, Error> {
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
    pub(super) fn answer(
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
    pub(super) async fn settle(
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
    pub(super) async fn ack_in_window(
        &self,
        delivery_id: u64,
        cumulative: bool,
    ) -> Result<(), Error> {
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
    pub(super) destination: Endpoints,
    pub(super) id: u64,
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
    pub(super) fn in_transaction(
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

    pub(super) async fn send(&self, delivery_id: u64, cumulative: bool) -> Result<(), Error> {
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
    pub(super) fn flush_auto_acks(&mut self) {
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
pub(super) fn auto_ack_batch(prefetch: usize) -> u32 {
    (prefetch / 4).clamp(1, 256) as u32
}

/// Messages an [`AckMode::Auto`] subscription yielded and has not acked yet.
#[derive(Debug, Default)]
pub(super) struct AutoAck {
    /// Delivery id of the last one.
    pub(super) up_to: Option<u64>,
    /// How many.
    pub(super) taken: u32,
    /// Ack once this many are taken ([`auto_ack_batch`]).
    pub(super) batch: u32,
    /// A non-durable topic subscription's: acks recorded without a message.
    pub(super) shared: Option<Arc<AutoAcks>>,
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

impl Subscription {
    /// When it is dropped, the messages it handed out and that wait for an ack go back
    /// as if never handed out: in their place, without counting a failed delivery
    /// (no step toward `maximum_redeliveries` and the dead-letter queue, no
    /// `redelivered` flag). For a connection the broker ended by its own fault (a STOMP
    /// ERROR with `error-code:store-failure`): a store outage is not the message's
    /// failure.
    pub fn release_uncounted(&self) {
        self.handed.store(0, std::sync::atomic::Ordering::Release);
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

pub(super) fn endpoints(
    destination: &DestinationAddr,
    broker: &Broker,
    mode: AckMode,
) -> Endpoints {
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

/// An ack kept by a [`super::Transaction`] until its COMMIT: the destination it
/// goes to and the ack an [`Acker`] took.
pub(super) struct TransactedAck {
    pub(super) destination: Endpoints,
    pub(super) ack: TakeAck,
}
