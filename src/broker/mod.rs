//! The embedding API: a [`Broker`] inside an async Rust service.
//!
//! The broker runs its actors on the caller's actix system, or else on a thread of its
//! own ([`crate::runtime`]): call [`Broker::start`] from any async runtime (tokio's
//! multi-threaded or current-thread runtime, a `LocalSet`, actix). Every call is async and returns an [`Error`] that
//! says what went wrong.
//!
//! The facade by area, one file each: `config` (how a broker is set up), `flow`
//! (limits and usage), `message` (what is sent), `send`, `transaction`,
//! `subscription` (what a consumer holds) and `subscribe`, `browse`, `stats`,
//! `destination` (names); this file holds the [`Broker`] itself: starting, the
//! registry of destinations, shutdown.

mod advisory;
mod browse;
mod composite;
mod config;
mod cron;
mod destination;
mod flow;
mod held;
mod message;
mod routing;
mod schedule;
mod send;
mod sessions;
mod shared;
mod stats;
mod subscribe;
mod subscription;
mod temporary;
mod transaction;

pub use self::advisory::{is_advisory, ADVISORY_PREFIX};
pub use self::browse::*;
pub use self::composite::{COMMIT_BATCH, COMPOSITE_WINDOW};
pub use self::config::*;
pub use self::cron::CronSchedule;
pub use self::destination::*;
pub use self::flow::*;
pub use self::held::{HELD_PAGE, HELD_XID_PREFIX};
pub use self::message::*;
pub use self::routing::{
    CompositeDestination, Forward, RoutingConfig, VirtualTopics, MAX_GROUPS_PER_VIRTUAL_TOPIC,
    ROUTED_XID_PREFIX, VIRTUAL_CONTAINER_PREFIX,
};
pub use self::schedule::{
    ScheduleBacklog, ScheduledMessage, ScheduledPage, MIN_SCHEDULED_PERIOD_MS,
    SCHEDULED_XID_PREFIX, SCHEDULER_PAGE, SCHEDULE_COUNT_LIMIT,
};
pub use self::send::*;
pub use self::sessions::{SessionSubscription, MAX_SESSION_SUBSCRIPTIONS};
pub use self::shared::{
    shared_subscription_queue, MAX_SHARED_GROUPS, SHARED_CONTAINER_PREFIX, SHARED_MEMBER_PREFIX,
    SHARED_TOPIC_HEADER, TOO_MANY_GROUPS,
};

pub(crate) use self::subscribe::*;
pub use self::subscription::*;
pub use self::temporary::{next_connection_id, TemporaryQueue, MAX_TEMPORARIES_PER_CONNECTION};
pub use self::transaction::*;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::{Addr, Handler};
use ebb_actors::broker::{
    BrokerActor, DestinationAddr, GetDestination, GetRunning, ShutdownBroker,
};
use ebb_actors::destination::{now_ms, StatsBoard};
use ebb_actors::housekeeping::HousekeepingBudget;
use ebb_actors::queue::QueueActor;
pub use ebb_actors::selector::{Selector, SelectorError};
use ebb_actors::topic::TopicActor;
use ebb_actors::usage::Usage;
use ebb_actors::{DestinationKey, StoreHandle};
use ebb_store::MessageStore;
use std::collections::HashMap;

use crate::error::Error;
use crate::runtime::BrokerThread;

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
    /// Scheduled delivery ([`schedule`]).
    scheduler: Arc<schedule::Scheduler>,
    /// Who owns which temporary destination ([`temporary`]).
    temporaries: Arc<temporary::Temporaries>,
    /// Composites and virtual topics ([`routing`]).
    routes: Arc<routing::Routes>,
    /// Advisory messages ([`advisory`]).
    advisories: Arc<advisory::Advisories>,
    /// The last stats reading, kept up to date from what changed ([`Broker::stats`]).
    reading: Arc<crate::stats::Reading>,
}

/// A [`Broker`] that does not keep its thread alive (the broker ends when the last
/// [`Broker`] is dropped): what the actors hold to call back into it.
struct WeakBroker {
    runtime: std::sync::Weak<BrokerThread>,
    registry: Addr<BrokerActor>,
    addresses: Arc<parking_lot::RwLock<HashMap<DestinationKey, DestinationAddr>>>,
    budget: HousekeepingBudget,
    store: StoreHandle,
    ids: Arc<MessageIds>,
    usages: Arc<Usages>,
    shut_down: Arc<AtomicBool>,
    scheduler: Arc<schedule::Scheduler>,
    temporaries: Arc<temporary::Temporaries>,
    routes: Arc<routing::Routes>,
    /// Weak: the advisories' event sink holds a [`WeakBroker`], which would otherwise
    /// keep them, and with them the whole broker and its store, alive for ever.
    advisories: std::sync::Weak<advisory::Advisories>,
    reading: Arc<crate::stats::Reading>,
}

impl WeakBroker {
    /// The broker, while some [`Broker`] still holds it.
    fn upgrade(&self) -> Option<Broker> {
        Some(Broker {
            runtime: self.runtime.upgrade()?,
            registry: self.registry.clone(),
            addresses: Arc::clone(&self.addresses),
            budget: self.budget.clone(),
            store: self.store.clone(),
            ids: Arc::clone(&self.ids),
            usages: Arc::clone(&self.usages),
            shut_down: Arc::clone(&self.shut_down),
            scheduler: Arc::clone(&self.scheduler),
            temporaries: Arc::clone(&self.temporaries),
            routes: Arc::clone(&self.routes),
            advisories: self.advisories.upgrade()?,
            reading: Arc::clone(&self.reading),
        })
    }
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
        let broker = Self::start_on(runtime, store, config)?;
        broker.recover_routing().await?;
        broker.sweep_temporaries().await?;
        broker.resume_schedule().await?;
        Ok(broker)
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
        let broker = Self::start_on(runtime, store, config)?;
        broker.recover_routing().await?;
        broker.sweep_temporaries().await?;
        broker.resume_schedule().await?;
        Ok(broker)
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
    /// Scheduled messages already in the store are released as with
    /// [`Broker::start`] (the scheduler starts at once and looks).
    ///
    /// Errors: [`Error::Runtime`] when its thread cannot start.
    pub fn start_with_store(
        store: Arc<dyn MessageStore>,
        config: BrokerConfig,
    ) -> Result<Self, Error> {
        let broker = Self::start_on(Arc::new(BrokerThread::new()?), store, config)?;
        broker.wake_scheduler();
        // What a previous active broker left of its connections' temporary
        // destinations goes, in the background (a takeover ends every connection).
        let sweeping = broker.downgrade();
        broker.spawn_task(async move {
            if let Some(broker) = sweeping.upgrade() {
                if let Err(e) = broker.recover_routing().await {
                    tracing::warn!(error = %e, "cannot read the virtual topics' groups or roll back the routed sends a previous run left");
                }
                if let Err(e) = broker.sweep_temporaries().await {
                    tracing::warn!(error = %e, "cannot delete the temporary destinations a previous run left");
                }
            }
        });
        Ok(broker)
    }

    /// Starts the store actor and the registry on `runtime` over `store`.
    fn start_on(
        runtime: Arc<BrokerThread>,
        store: Arc<dyn MessageStore>,
        config: BrokerConfig,
    ) -> Result<Self, Error> {
        config.policies.check().map_err(Error::InvalidPolicy)?;
        let budget = HousekeepingBudget::new(config.housekeeping_permits);
        let (actor_config, policies, shared) = (
            config.store_actor.clone(),
            config.policies.clone(),
            budget.clone(),
        );
        runtime.hold_store(&store);
        let advisories = Arc::new(advisory::Advisories::default());
        let events = advisories.events.clone();
        let board = Arc::new(StatsBoard::default());
        let registry_board = Arc::clone(&board);
        // Consumer groups that read their topic's rows (virtual topics' and shared
        // subscriptions' on one topic) are fed by the topic.
        let feeds_groups = true;
        let (handle, registry) = runtime.run_blocking(move || {
            let handle = StoreHandle::start(store, actor_config);
            let registry = BrokerActor::new(handle.clone(), policies, shared)
                .with_events(events)
                .with_stats_board(registry_board)
                .with_group_feed(feeds_groups);
            (handle, actix::Actor::start(registry))
        })?;
        let broker = Self {
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
                board,
            }),
            shut_down: Arc::default(),
            scheduler: Arc::default(),
            temporaries: Arc::default(),
            routes: Arc::new(routing::Routes::new(config.routing.clone())),
            advisories,
            reading: Arc::default(),
        };
        broker.start_advisories();
        Ok(broker)
    }

    /// Runs `task` in the background: on the caller's tokio runtime when there is one,
    /// else on the broker's thread.
    pub(crate) fn spawn_task(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(task);
            }
            Err(_) => {
                self.runtime.arbiter().spawn(task);
            }
        }
    }

    /// A handle that does not keep the broker's thread alive ([`WeakBroker`]).
    fn downgrade(&self) -> WeakBroker {
        WeakBroker {
            runtime: Arc::downgrade(&self.runtime),
            registry: self.registry.clone(),
            addresses: Arc::clone(&self.addresses),
            budget: self.budget.clone(),
            store: self.store.clone(),
            ids: Arc::clone(&self.ids),
            usages: Arc::clone(&self.usages),
            shut_down: Arc::clone(&self.shut_down),
            scheduler: Arc::clone(&self.scheduler),
            temporaries: Arc::clone(&self.temporaries),
            routes: Arc::clone(&self.routes),
            advisories: Arc::downgrade(&self.advisories),
            reading: Arc::clone(&self.reading),
        }
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

    /// The registry actor, for the crate's own reports (`Broker::stats`, in `stats.rs`).
    pub(crate) fn registry(&self) -> &Addr<BrokerActor> {
        &self.registry
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
    /// destination was deleted or went to sleep meanwhile (the answer is one `retired`
    /// says was refused by a retired actor, or the actor stopped before handling it:
    /// nothing was done), sends it again to the destination's successor, a few times
    /// at most.
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
        let send = |addr: DestinationAddr| {
            let message = make();
            Ok(async move { addr.ask(message).await })
        };
        self.ask_live_via(key, send, retired).await
    }

    /// [`Broker::ask_live`] for a message only a queue takes: a topic `key` is
    /// refused ([`Error::InvalidDestination`]).
    pub(crate) async fn ask_queue_live<M>(
        &self,
        key: &DestinationKey,
        make: impl Fn() -> M,
        retired: impl Fn(&M::Result) -> bool,
    ) -> Result<M::Result, Error>
    where
        M: actix::Message + Send + 'static,
        M::Result: Send,
        QueueActor: Handler<M>,
    {
        let queue = |addr| match addr {
            DestinationAddr::Queue(queue) => Some(queue),
            DestinationAddr::Topic(_) => None,
        };
        self.ask_kind_live(key, queue, "this works on queues only", make, retired)
            .await
    }

    /// [`Broker::ask_live`] for a message only a topic takes: a queue `key` is
    /// refused ([`Error::InvalidDestination`]).
    pub(crate) async fn ask_topic_live<M>(
        &self,
        key: &DestinationKey,
        make: impl Fn() -> M,
        retired: impl Fn(&M::Result) -> bool,
    ) -> Result<M::Result, Error>
    where
        M: actix::Message + Send + 'static,
        M::Result: Send,
        TopicActor: Handler<M>,
    {
        let topic = |addr| match addr {
            DestinationAddr::Topic(topic) => Some(topic),
            DestinationAddr::Queue(_) => None,
        };
        self.ask_kind_live(key, topic, "this works on topics only", make, retired)
            .await
    }

    /// [`Broker::ask_live`] for a message only one kind of actor `A` takes: `pick`
    /// finds it in a destination's address; another kind is refused with `reason`.
    async fn ask_kind_live<M, A>(
        &self,
        key: &DestinationKey,
        pick: impl Fn(DestinationAddr) -> Option<Addr<A>>,
        reason: &'static str,
        make: impl Fn() -> M,
        retired: impl Fn(&M::Result) -> bool,
    ) -> Result<M::Result, Error>
    where
        M: actix::Message + Send + 'static,
        M::Result: Send,
        A: actix::Actor<Context = actix::Context<A>> + Handler<M>,
    {
        let send = |addr: DestinationAddr| match pick(addr) {
            Some(actor) => {
                let message = make();
                Ok(async move { actor.send(message).await })
            }
            None => Err(Error::InvalidDestination {
                name: key.container(),
                reason,
            }),
        };
        Ok(self.ask_live_via(key, send, retired).await?.1)
    }

    /// The retries of [`Broker::ask_live`], with `send` asking the actor.
    async fn ask_live_via<R, F>(
        &self,
        key: &DestinationKey,
        send: impl Fn(DestinationAddr) -> Result<F, Error>,
        retired: impl Fn(&R) -> bool,
    ) -> Result<(DestinationAddr, R), Error>
    where
        F: std::future::Future<Output = Result<R, actix::MailboxError>>,
    {
        // Each retry follows a deletion or sleep that ended after the previous attempt.
        const ATTEMPTS: usize = 8;
        let mut attempt = 1;
        loop {
            let addr = self.destination(key).await?;
            match send(addr.clone())?.await {
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
        let mut addresses = self.addresses.write();
        addresses.remove(key);
        // Sleeping destinations leave the cache: its table shrinks with them (a hash
        // map keeps its capacity otherwise, about 100 bytes per destination it held).
        let len = addresses.len();
        if addresses.capacity() > 64 && len * 4 < addresses.capacity() {
            addresses.shrink_to(len * 2);
        }
    }

    /// Drops `addr` from the address cache if it is still there for `key`.
    pub(super) fn forget(&self, key: &DestinationKey, addr: &DestinationAddr) {
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
        if self.is_ended_temporary(key) {
            // Never started again once its connection ended: only a running one is
            // reached (by the acks and aborts still on their way to it).
            return self
                .registry
                .send(GetRunning(key.clone()))
                .await?
                .ok_or_else(|| Error::InvalidDestination {
                    name: key.stomp(),
                    reason: "no such temporary destination: the connection that made it has ended",
                });
        }
        let addr = self.registry.send(GetDestination(key.clone())).await??;
        self.addresses.write().insert(key.clone(), addr.clone());
        Ok(addr)
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

    /// Shuts down: refuses new composite sends and commits those under way (or
    /// refuses them), refuses new destinations, stops every timer, lets expiry pages in
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
        // Composite sends under way are committed (or refused) first; none starts.
        self.routes.committer.close().await;
        self.shut_down.store(true, Ordering::Release);
        // A page of scheduled messages in flight finishes first; none starts.
        self.stop_scheduler().await;
        match self.registry.send(ShutdownBroker).await {
            Ok(done) => Ok(done?),
            // The registry is gone with the broker's system: nothing left to stop.
            Err(actix::MailboxError::Closed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// True for an answer refused by a destination that was deleted or went to sleep
/// while the request was on its way ([`ebb_actors::ActorError::Retired`]): the request
/// may go to its successor ([`Broker::ask_live`]).
pub(crate) fn is_retired<T>(answer: &Result<T, ebb_actors::ActorError>) -> bool {
    matches!(answer, Err(ebb_actors::ActorError::Retired(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_actors::broker::DeleteDestination;
    use ebb_actors::messages::AbortPrepared;

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

    /// The race that kept an ended temporary queue for ever: a transaction's abort
    /// looked for the running actor while a deletion of the queue (refused: that
    /// transaction held it) was in progress, was told "not running", and was lost;
    /// the queue then held the aborted transaction in memory and refused every later
    /// deletion. The lookup queued behind the deletion in the registry's mailbox now
    /// waits for it and finds the queue, which the abort then frees for deletion.
    #[actix_rt::test]
    async fn a_lookup_behind_a_refused_deletion_finds_the_destination() {
        let b = Broker::start("sqlite::memory:", BrokerConfig::default())
            .await
            .unwrap();
        let key = DestinationKey::queue("held").unwrap();
        let mut tx = b.transaction("x1");
        tx.send(&key, Message::new("m").persistent(true))
            .await
            .unwrap();
        // Both are in the registry's mailbox before either is handled.
        let deleting = b.registry.send(DeleteDestination(key.clone()));
        let running = b.registry.send(GetRunning(key.clone()));
        let refused = deleting.await.unwrap().unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("1 open transactions hold messages"),
            "{refused}"
        );
        let addr = running
            .await
            .unwrap()
            .expect("the deletion was refused: the queue runs");
        b.store.rollback("x1".into()).await.unwrap();
        addr.ask(AbortPrepared { xid: "x1".into() }).await.unwrap();
        // Behind a deletion that goes through, there is nothing to find.
        let deleting = b.registry.send(DeleteDestination(key.clone()));
        let running = b.registry.send(GetRunning(key.clone()));
        assert_eq!(deleting.await.unwrap().unwrap().messages, 0);
        assert!(running.await.unwrap().is_none(), "the queue was deleted");
        b.shutdown().await.unwrap();
    }

    /// What the broker keeps per destination goes with it: 50 queues sent to by a
    /// producer and deleted leave no memory usage, no producer count and no stats
    /// entry behind (temporary queues, made and deleted all day, used to leave theirs).
    #[actix_rt::test]
    async fn a_deleted_destination_leaves_nothing_behind() {
        let b = Broker::start("sqlite::memory:", BrokerConfig::default())
            .await
            .unwrap();
        for i in 0..50 {
            let key = DestinationKey::queue(&format!("gone.{i}")).unwrap();
            b.producer_joined(&key);
            b.send(&key, Message::new("m").persistent(true))
                .await
                .unwrap();
            b.producer_left(&key);
            b.delete_destination(&key).await.unwrap();
        }
        assert_eq!(b.usages.destinations.lock().len(), 0);
        assert_eq!(b.usages.producers.lock().len(), 0);
        assert_eq!(b.stats_board().len(), 0);
        assert_eq!(b.stats().await.unwrap().destinations_total, 0);
        b.shutdown().await.unwrap();
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
