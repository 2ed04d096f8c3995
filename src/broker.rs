//! The embedding API: a [`Broker`] inside an async Rust service.
//!
//! The broker runs on actix: call [`Broker::start`] from inside an actix system
//! (`#[actix_rt::main]`, `actix_rt::System::new().block_on(..)`, or an actix-web
//! server). Every call is async and returns an [`Error`] that says what went wrong.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix::Addr;
use ebb_actors::broker::{BrokerActor, GetTopic, ShutdownBroker};
use ebb_actors::housekeeping::HousekeepingBudget;
use ebb_actors::messages::{
    AbortPrepared, Ack, CommitPrepared, Delivery, Detach, GetStats, Nack, Publish, PublishPrepared,
    RemoveDurable, Subscribe, TopicMessage, TopicStats,
};
use ebb_actors::policy::PolicyMap;
use ebb_actors::topic::{now_ms, TopicActor};
use ebb_actors::{StoreActorConfig, StoreHandle};
use ebb_store::{MessageStore, Payload, StoreOptions, SubscriptionKey, WriteOp, WriteOutcome};
use futures::Stream;
use tokio::sync::mpsc;

use crate::error::Error;

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
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            store: StoreOptions::default(),
            policies: PolicyMap::default(),
            housekeeping_permits: std::thread::available_parallelism().map_or(1, |n| n.get()),
            store_actor: StoreActorConfig::default(),
        }
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
    pub body: Vec<u8>,
    /// User headers, in order.
    pub headers: Vec<(String, String)>,
    /// Stored so that durable subscriptions get it after a restart (default true, as
    /// JMS). A non-persistent message reaches only subscriptions that are online.
    pub persistent: bool,
    /// 0..=9, default 4.
    pub priority: u8,
    pub expiration: Expiration,
}

impl Message {
    /// A persistent message with priority 4 that never expires.
    pub fn new(body: impl Into<Vec<u8>>) -> Self {
        Self {
            body: body.into(),
            headers: Vec::new(),
            persistent: true,
            priority: ebb_store::DEFAULT_PRIORITY,
            expiration: Expiration::Never,
        }
    }

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

    /// Expires at `epoch_ms`.
    pub fn expires_at(mut self, epoch_ms: i64) -> Self {
        self.expiration = Expiration::At(epoch_ms);
        self
    }

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

/// How deliveries are acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AckMode {
    /// Each message is acked as the stream yields it.
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
    pub ack: AckMode,
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

    pub fn prefetch(mut self, prefetch: u32) -> Self {
        self.prefetch = Some(prefetch);
        self
    }

    pub fn ack(mut self, ack: AckMode) -> Self {
        self.ack = ack;
        self
    }
}

/// A message received on a [`Subscription`].
#[derive(Debug, Clone)]
pub struct Received {
    delivery: Delivery,
}

impl Received {
    pub fn body(&self) -> &[u8] {
        &self.delivery.message.payload.body
    }

    pub fn headers(&self) -> &[(String, String)] {
        &self.delivery.message.payload.headers
    }

    pub fn message_id(&self) -> &str {
        &self.delivery.message.message_id
    }

    /// Store id (send order), for a persistent message that was stored.
    pub fn store_id(&self) -> Option<i64> {
        self.delivery.message.id
    }

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
}

/// An open subscription: a [`Stream`] of [`Received`] messages. Dropping it detaches
/// the consumer (a durable subscription goes offline and keeps its messages).
pub struct Subscription {
    topic: Addr<TopicActor>,
    id: u64,
    ack: AckMode,
    rx: mpsc::Receiver<Delivery>,
}

impl Subscription {
    /// Acks one message (client-individual). For a durable subscription it returns
    /// once the ack is committed; the mark moves only when no earlier message is
    /// still un-acked.
    pub async fn ack(&self, message: &Received) -> Result<(), Error> {
        self.acker().ack(message).await
    }

    /// Acks `message` and every earlier un-acked one of this subscription.
    pub async fn ack_up_to(&self, message: &Received) -> Result<(), Error> {
        self.acker().ack_up_to(message).await
    }

    /// A handle that acks for this subscription without holding the stream (for a
    /// transport that polls many subscriptions together).
    pub fn acker(&self) -> Acker {
        Acker {
            topic: self.topic.clone(),
            id: self.id,
        }
    }
}

/// Acks deliveries of one subscription; see [`Subscription::acker`].
#[derive(Clone)]
pub struct Acker {
    topic: Addr<TopicActor>,
    id: u64,
}

impl Acker {
    /// As [`Subscription::ack`].
    pub async fn ack(&self, message: &Received) -> Result<(), Error> {
        self.send(message.delivery.delivery_id, false).await
    }

    /// As [`Subscription::ack_up_to`].
    pub async fn ack_up_to(&self, message: &Received) -> Result<(), Error> {
        self.send(message.delivery.delivery_id, true).await
    }

    /// Refuses `message` (NACK): its prefetch slot is freed without an ack; a durable
    /// subscription gets it again, marked redelivered, when it next re-attaches.
    pub async fn nack(&self, message: &Received) -> Result<(), Error> {
        let nack = Nack {
            subscription: self.id,
            delivery_id: message.delivery.delivery_id,
        };
        Ok(self.topic.send(nack).await??)
    }

    async fn send(&self, delivery_id: u64, cumulative: bool) -> Result<(), Error> {
        let ack = Ack {
            subscription: self.id,
            delivery_id,
            cumulative,
        };
        Ok(self.topic.send(ack).await??)
    }
}

impl Stream for Subscription {
    type Item = Received;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Received>> {
        let polled = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(delivery)) = &polled {
            if self.ack == AckMode::Auto {
                let ack = self.topic.send(Ack {
                    subscription: self.id,
                    delivery_id: delivery.delivery_id,
                    cumulative: false,
                });
                actix_rt::spawn(async move {
                    if let Ok(Err(e)) = ack.await {
                        tracing::warn!(error = %e, "auto ack failed");
                    }
                });
            }
        }
        polled.map(|d| d.map(|delivery| Received { delivery }))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // Drop cannot await; Detach is small and the topic handles it in order.
        self.topic.do_send(Detach {
            subscription: self.id,
        });
    }
}

/// A message as browsing shows it (never acked, never expired by browsing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowsedMessage {
    pub store_id: i64,
    pub message_id: String,
    pub priority: u8,
    /// Epoch ms; 0 = never.
    pub expiration: i64,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Most rows one browse call returns.
pub const MAX_BROWSE_PAGE: u32 = 1000;

/// A running broker. Cheap to clone (handles to actors).
#[derive(Clone)]
pub struct Broker {
    registry: Addr<BrokerActor>,
    store: StoreHandle,
    ids: Arc<MessageIds>,
}

struct MessageIds {
    prefix: String,
    next: AtomicU64,
}

impl Broker {
    /// Opens the store at `store_url` (`sqlite://PATH`, `sqlite::memory:`,
    /// `postgres://...`; created and migrated if needed) and starts the broker's actors
    /// on the current actix system.
    ///
    /// Errors: [`Error::Store`] when the store cannot be opened (the message names the
    /// URL, without its password, and the reason), or another broker runs on it
    /// ([`ebb_store::StoreError::Locked`]: one broker per store, as ActiveMQ's JDBC
    /// exclusive locker; the lock goes with the broker, also when its process dies).
    pub async fn start(store_url: &str, config: BrokerConfig) -> Result<Self, Error> {
        let store = ebb_store::open(store_url, &config.store).await?;
        // One broker per store (ids would collide): refuse if another holds it.
        if let Err(e) = store.lock_exclusive().await {
            store.close().await;
            return Err(e.into());
        }
        Ok(Self::start_with_store(store, config))
    }

    /// Starts the broker on a store that is already open (`config.store` is not used).
    /// The caller takes care that no other broker uses it
    /// ([`MessageStore::lock_exclusive`]).
    pub fn start_with_store(store: Arc<dyn MessageStore>, config: BrokerConfig) -> Self {
        let handle = StoreHandle::start(store, config.store_actor.clone());
        let budget = HousekeepingBudget::new(config.housekeeping_permits);
        let registry = actix::Actor::start(BrokerActor::new(
            handle.clone(),
            config.policies.clone(),
            budget,
        ));
        Self {
            registry,
            store: handle,
            ids: Arc::new(MessageIds {
                prefix: format!("ID:ebb-{}-{}", std::process::id(), now_ms()),
                next: AtomicU64::new(1),
            }),
        }
    }

    /// The registry actor, for the crate's own reports ([`crate::stats`]).
    pub(crate) fn registry(&self) -> &Addr<BrokerActor> {
        &self.registry
    }

    async fn topic(&self, name: &str) -> Result<Addr<TopicActor>, Error> {
        let container = topic_container(name)?;
        let addr = self.registry.send(GetTopic(container)).await??;
        Ok(addr)
    }

    /// The topic message for `message`: checks the priority, turns a TTL into an
    /// absolute expiration, gives it a message id.
    fn outgoing(&self, message: Message) -> Result<TopicMessage, Error> {
        if message.priority > ebb_store::MAX_PRIORITY {
            return Err(Error::InvalidPriority(message.priority));
        }
        let now = now_ms();
        let expiration = match message.expiration {
            Expiration::Never => 0,
            Expiration::At(at) => at,
            Expiration::Ttl(ttl) => now.saturating_add(ttl.min(i64::MAX as u64) as i64),
        };
        let message_id = format!(
            "{}:{}",
            self.ids.prefix,
            self.ids.next.fetch_add(1, Ordering::Relaxed)
        );
        Ok(TopicMessage {
            id: None,
            message_id,
            persistent: message.persistent,
            priority: message.priority,
            expiration,
            payload: Arc::new(Payload {
                timestamp_ms: now,
                headers: message.headers,
                body: message.body,
            }),
        })
    }

    /// Publishes `message` to topic `name`. Returns once it is accepted: a persistent
    /// message that a durable subscription needs is committed to the store first.
    ///
    /// Errors: [`Error::InvalidDestination`], [`Error::InvalidPriority`],
    /// [`Error::Actor`] when the store write failed (nothing was stored; the send may
    /// be retried) or the broker is shutting down.
    pub async fn send(&self, name: &str, message: Message) -> Result<SendReceipt, Error> {
        let outgoing = self.outgoing(message)?;
        let topic = self.topic(name).await?;
        let message_id = outgoing.message_id.clone();
        let outcome = topic.send(Publish(outgoing)).await??;
        Ok(SendReceipt {
            message_id,
            store_id: outcome.id,
            expired_on_arrival: outcome.expired_on_arrival,
        })
    }

    /// Sends `message` to topic `name` inside transaction `xid`: a persistent message
    /// that a durable subscription needs is stored prepared (invisible, and it stops
    /// expiry runs rather than being passed by a mark); nothing is delivered until
    /// [`Broker::commit_prepared`]. Errors as [`Broker::send`].
    pub async fn send_prepared(
        &self,
        name: &str,
        message: Message,
        xid: &str,
    ) -> Result<SendReceipt, Error> {
        let outgoing = self.outgoing(message)?;
        let topic = self.topic(name).await?;
        let message_id = outgoing.message_id.clone();
        let prepared = PublishPrepared {
            message: outgoing,
            xid: xid.to_string(),
        };
        let outcome = topic.send(prepared).await??;
        Ok(SendReceipt {
            message_id,
            store_id: outcome.id,
            expired_on_arrival: outcome.expired_on_arrival,
        })
    }

    /// Commits transaction `xid`, whose messages went to `topics`: in one store
    /// transaction its stored messages become visible under new, highest ids (so no
    /// subscription's mark can already be past them); then each topic delivers them.
    pub async fn commit_prepared(&self, xid: &str, topics: &[String]) -> Result<(), Error> {
        let committed = self
            .store
            .write(WriteOp::Commit {
                xid: xid.to_string(),
            })
            .await?;
        let WriteOutcome::Committed(renumbered) = committed else {
            unreachable!("a commit answers Committed");
        };
        self.tell_topics(topics, || CommitPrepared {
            xid: xid.to_string(),
            renumbered: renumbered.clone(),
        })
        .await
    }

    /// Sends `make()` to each of `topics` and waits for each to handle it.
    async fn tell_topics<M>(&self, topics: &[String], make: impl Fn() -> M) -> Result<(), Error>
    where
        M: actix::Message<Result = ()> + Send + 'static,
        TopicActor: actix::Handler<M>,
    {
        for name in topics {
            self.topic(name).await?.send(make()).await?;
        }
        Ok(())
    }

    /// Rolls back transaction `xid`: its stored messages are deleted, none is delivered.
    pub async fn rollback_prepared(&self, xid: &str, topics: &[String]) -> Result<(), Error> {
        self.store
            .write(WriteOp::Rollback {
                xid: xid.to_string(),
            })
            .await?;
        self.tell_topics(topics, || AbortPrepared {
            xid: xid.to_string(),
        })
        .await
    }

    /// Deletes the prepared messages of every transaction whose xid starts with
    /// `xid_prefix`: transactions a previous run left open when it stopped. Call it at
    /// start. Returns how many messages it deleted.
    pub async fn rollback_abandoned(&self, xid_prefix: &str) -> Result<u64, Error> {
        let op = WriteOp::RollbackAbandoned {
            xid_prefix: xid_prefix.to_string(),
        };
        match self.store.write(op).await? {
            WriteOutcome::Deleted(n) => Ok(n),
            other => unreachable!("a rollback answers Deleted, not {other:?}"),
        }
    }

    /// Subscribes to topic `name`.
    ///
    /// Errors: [`Error::InvalidDestination`], [`Error::InvalidSubscription`],
    /// [`Error::Actor`] with `DurableInUse` when the durable subscription already has a
    /// consumer, or a store error.
    pub async fn subscribe(
        &self,
        name: &str,
        options: SubscribeOptions,
    ) -> Result<Subscription, Error> {
        let durable = match options.durable {
            Some((client, sub)) if client.is_empty() || sub.is_empty() => {
                return Err(Error::InvalidSubscription)
            }
            Some((client, sub)) => Some(SubscriptionKey::new(client, sub)),
            None => None,
        };
        let topic = self.topic(name).await?;
        // Credit never lets more than the prefetch be queued; the channel holds that.
        let max = ebb_actors::subscription::MAX_PREFETCH;
        let capacity = options.prefetch.unwrap_or(max).clamp(1, max) as usize;
        let (tx, rx) = mpsc::channel(capacity);
        let id = topic
            .send(Subscribe {
                durable,
                prefetch: options.prefetch,
                deliver: tx,
            })
            .await??;
        Ok(Subscription {
            topic,
            id,
            ack: options.ack,
            rx,
        })
    }

    /// Deletes an offline durable subscription (its marks and pending acks); its
    /// messages are then deleted by cleanup. `Ok(false)` if it did not exist.
    pub async fn remove_durable(
        &self,
        name: &str,
        client_id: &str,
        subscription: &str,
    ) -> Result<bool, Error> {
        let topic = self.topic(name).await?;
        let key = SubscriptionKey::new(client_id, subscription);
        Ok(topic.send(RemoveDurable(key)).await??)
    }

    /// Up to `limit` (at most [`MAX_BROWSE_PAGE`]) stored messages of topic `name`
    /// with store id `> after_id`, in id order. Browsing never acks or expires.
    pub async fn browse(
        &self,
        name: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<BrowsedMessage>, Error> {
        let container = topic_container(name)?;
        let rows = self
            .store
            .store()
            .browse(&container, after_id, limit.min(MAX_BROWSE_PAGE))
            .await?;
        Ok(rows.iter().map(|m| browsed(m)).collect())
    }

    /// Up to `limit` (at most [`MAX_BROWSE_PAGE`]) messages a durable subscription has
    /// not acked, with store id `> after_id`. Never acks or expires.
    pub async fn browse_subscription(
        &self,
        name: &str,
        client_id: &str,
        subscription: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<BrowsedMessage>, Error> {
        let container = topic_container(name)?;
        let key = SubscriptionKey::new(client_id, subscription);
        let rows = self
            .store
            .store()
            .read_pending(&container, &key, after_id, None, limit.min(MAX_BROWSE_PAGE))
            .await?;
        Ok(rows.iter().map(|m| browsed(m)).collect())
    }

    /// The counters of topic `name` (starting it if it is not running).
    pub async fn topic_stats(&self, name: &str) -> Result<TopicStats, Error> {
        let topic = self.topic(name).await?;
        Ok(topic.send(GetStats).await?)
    }

    /// Runs topic `name`'s housekeeping now, as its timer would: starts an expiry run
    /// (unless one is running) and a cleanup batch. Returns once the request is queued;
    /// watch [`Broker::topic_stats`] for the pages.
    pub async fn run_housekeeping(&self, name: &str) -> Result<(), Error> {
        let topic = self.topic(name).await?;
        topic.send(ebb_actors::messages::RunHousekeeping).await?;
        Ok(())
    }

    /// The store, for reads (counts, browsing) and its fetch counters.
    pub fn store(&self) -> &Arc<dyn MessageStore> {
        self.store.store()
    }

    /// Shuts down: refuses new destinations, stops every timer, lets expiry pages in
    /// flight finish and starts none, flushes the store actor (every accepted message
    /// is committed), and closes the store last. Returns when all of that is done.
    pub async fn shutdown(&self) -> Result<(), Error> {
        self.registry.send(ShutdownBroker).await??;
        Ok(())
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
    }
}

/// `orders` → `topic://orders`; refuses names that cannot be a topic.
fn topic_container(name: &str) -> Result<String, Error> {
    let invalid = |reason| Error::InvalidDestination {
        name: name.to_string(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("empty"));
    }
    if name.len() > 200 {
        return Err(invalid("longer than 200 bytes"));
    }
    if name.contains("://") || name.chars().any(|c| c.is_control()) {
        return Err(invalid(
            "give the plain topic name, without a scheme or control characters",
        ));
    }
    if name.split('.').any(|s| s == "*" || s == ">") {
        return Err(invalid("wildcards `*` and `>` name patterns, not a topic"));
    }
    Ok(format!("topic://{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_are_checked() {
        assert_eq!(topic_container("orders.eu").unwrap(), "topic://orders.eu");
        for bad in ["", "topic://x", "a.*", "a.>", "bad\nname"] {
            assert!(topic_container(bad).is_err(), "{bad:?}");
        }
    }
}
