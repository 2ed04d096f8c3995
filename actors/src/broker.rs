//! The broker (registry) actor: destination name → destination actor.
//!
//! State it owns: one map of the running destination actors by [`DestinationKey`],
//! each created on first use with the policy that matches its name; the policy map;
//! the shared housekeeping budget; and the shutdown sequence.
//!
//! Messages it accepts: [`GetDestination`], [`PublishAsleep`], [`RouteDeadLetter`] (a
//! queue's dead message, handed to its dead-letter queue), [`ListDestinations`],
//! [`IsRunning`],
//! [`DeleteDestination`], [`Watch`] and [`ForgetWildcardDurable`] (subscriptions to
//! wildcard destinations), [`ShutdownBroker`].
//! It never dispatches; the only messages it writes are those sent to a sleeping
//! queue ([`PublishAsleep`]). A new kind of destination is a
//! variant of [`DestinationAddr`] and an arm in `BrokerActor::destination`.
//!
//! **Wildcard subscriptions.** Each [`WildcardActor`]
//! watches a pattern: the registry answers [`Watch`] with the running destinations
//! that match and tells the watcher of each matching one it starts later
//! ([`Matched`]). A durable subscription to a wildcard topic must also keep the
//! messages of matching topics created while it is offline: the registry knows every
//! such subscription (loaded from their definitions in the store before it handles
//! any message, [`WILDCARD_CONTAINER_PREFIX`]), and gives a topic it starts the ones
//! that match, which the topic creates in its store before its first message.
//!
//! **Deleting a destination** ([`DeleteDestination`], ActiveMQ's `removeQueue` /
//! `removeTopic`): the destination is retired ([`Retire`]: refused while a consumer is
//! attached or a transaction holds messages for it; else it takes nothing new and its
//! queued writes commit), then its durable subscriptions and its messages are deleted
//! through the store actor in bounded pages, then its actor stops. While that goes on,
//! a request for the destination waits ([`GetDestination`], a dead letter routed to
//! it); once it is done, the next request starts a new, empty destination of the same
//! name, as ActiveMQ creates a destination on first use. A publish or subscription
//! that reached the retired actor is answered [`ActorError::Retired`], and the broker
//! sends it again to the new one: nothing accepted is lost, nothing is half-deleted.
//!
//! **Sleeping destinations** ([`crate::destination::sleep`]): a queue or topic idle for its
//! policy's `inactive_timeout_before_sleep` asks to sleep ([`Doze`]); the registry
//! holds requests for it as during a deletion, asks it to [`Sleep`] (refused if
//! anything arrived), then stops its actor and keeps only the key, marked asleep. The
//! next request starts a new actor, which reads the store as after a restart and
//! carries on the counters of its stats entry. Listings and "is it running" count a
//! sleeping destination as running (it was started, or made asleep by a send, and is
//! not deleted); the advisory of a new destination is not sent again when it wakes. A wildcard subscription
//! that starts watching wakes the sleeping destinations it matches. A sleeping
//! destination whose store holds messages that expire is woken for them ([`ExpireDue`]) at the
//! time its [`Sleep`] answer gave: the registry keeps those times in one ordered set
//! and one timer for the earliest, and wakes the due ones [`EXPIRY_WAKE_PAGE`] at a
//! time, the next page once the one before has ended its expiry runs. A persistent
//! send to a sleeping queue is written by the registry itself, without waking it
//! ([`PublishAsleep`], module `asleep`); the actor started for it later waits for
//! those writes first.
//!
//! Shutdown, in order: refuse new destinations; stop every destination's housekeeping
//! (each answers once its page in flight has finished, and starts none after); end
//! every consumer's stream ([`CloseConsumers`]: wildcard subscriptions stop, each
//! destination answers once the acks it accepted are committed); flush the store actor
//! (every accepted write commits); close the pool last.

use std::collections::{BTreeSet, HashMap};

use actix::prelude::*;
use ebb_store::{Moved, SubscriptionKey};

use crate::destination::sleep::{Doze, ExpireDue, Sleep};
use crate::destination::{DestinationKey, DestinationPattern};
use crate::error::ActorError;
use crate::housekeeping::HousekeepingBudget;
use crate::kinds::KindActor;
use crate::messages::{CloseConsumers, Retire, RouteDeadLetter, StopHousekeeping};
use crate::policy::PolicyMap;
use crate::queue::QueueActor;
use crate::store_actor::StoreHandle;
use crate::topic::TopicActor;
use crate::wildcard::{Accept, Matched, Template, WildcardActor};

pub use crate::addr::DestinationAddr;

mod asleep;
mod groups;
pub use asleep::{AsleepPublish, PublishAsleep};
pub use groups::KnowGroup;

/// The store keeps the definition of a durable subscription to a wildcard topic in a
/// container of its own: this prefix and the pattern (`wildcard:topic://orders.>`).
/// No message is ever stored there; the container only holds the subscription (key,
/// selector) across restarts, and the registry reads these containers, a bounded
/// page at a time, at start.
pub const WILDCARD_CONTAINER_PREFIX: &str = "wildcard:";

/// The container of the definition of a durable subscription to `pattern`.
pub fn wildcard_container(pattern: &DestinationPattern) -> String {
    format!("{WILDCARD_CONTAINER_PREFIX}{pattern}")
}

/// Definitions the registry reads per store page at start.
const DEFINITION_PAGE: u32 = 500;

/// Rows a deletion reads or deletes per store page ([`DeleteDestination`]): durable
/// subscriptions listed, or messages deleted, in one write.
pub const DELETE_PAGE: u32 = 1000;

/// Sleeping destinations woken for expiry at a time ([`ExpireDue`]): the next page is woken
/// once each of these has ended its expiry run.
pub const EXPIRY_WAKE_PAGE: usize = 64;

/// Resolves once a destination's deletion has ended (done or failed).
type Deleted = futures::future::Shared<futures::channel::oneshot::Receiver<()>>;

/// A durable subscription to a wildcard topic: each matching topic holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WildcardDurable {
    /// The topics it is held on.
    pub pattern: DestinationPattern,
    /// Its `(client id, name)`.
    pub key: SubscriptionKey,
    /// Its selector's text.
    pub selector: Option<String>,
}

/// A wildcard subscription the registry tells of matching destinations.
struct Watcher {
    pattern: DestinationPattern,
    recipient: Addr<WildcardActor>,
    durable: Option<SubscriptionKey>,
    /// Its attachments' options, for a new topic it attaches to at once.
    template: Template,
    accept: Option<Accept>,
}

/// A destination the registry knows: its running actor, or asleep (no actor; the next
/// request starts one) with the time to wake it for expiry (epoch ms), if any.
enum Slot {
    Running(DestinationAddr),
    Asleep(Option<u64>),
}

impl Slot {
    /// Its actor, if it runs.
    fn running(&self) -> Option<&DestinationAddr> {
        match self {
            Slot::Running(addr) if addr.connected() => Some(addr),
            _ => None,
        }
    }

    /// Whether it runs or sleeps (an actor that stopped of itself is neither).
    fn exists(&self) -> bool {
        match self {
            Slot::Running(addr) => addr.connected(),
            Slot::Asleep(_) => true,
        }
    }
}

/// See the module documentation.
pub struct BrokerActor {
    store: StoreHandle,
    policies: PolicyMap,
    budget: HousekeepingBudget,
    destinations: HashMap<DestinationKey, Slot>,
    watchers: Vec<Watcher>,
    wildcard_durables: Vec<WildcardDurable>,
    /// Destinations being deleted: requests for them wait for the end.
    deleting: HashMap<DestinationKey, Deleted>,
    /// Destinations going to sleep: requests for them wait for the end.
    dozing: HashMap<DestinationKey, Deleted>,
    /// Sleeping destinations to wake for expiry: (when, epoch ms; which), as their
    /// slots say.
    expiry_wakes: BTreeSet<(u64, DestinationKey)>,
    /// The timer for the earliest of [`Self::expiry_wakes`]: its time and handle.
    wake_timer: Option<(u64, SpawnHandle)>,
    /// A page of expiry wakes is under way (the timer waits for its end).
    waking: bool,
    shutting_down: bool,
    /// Where destinations report what happens to them (advisory topics).
    events: crate::events::Events,
    /// Where each destination publishes its counters for stats readings.
    board: std::sync::Arc<crate::destination::StatsBoard>,
    /// Sleeping destinations' writes made by the registry ([`PublishAsleep`]): the
    /// last one's number and completion, per destination while one is in flight.
    asleep_writes: HashMap<DestinationKey, (u64, crate::destination::sleep::Written)>,
    /// The number of the last of those writes.
    asleep_write_seq: u64,
    /// Topics feed their consumer groups ([`crate::messages::FeedGroups`]).
    feeds_groups: bool,
}

impl BrokerActor {
    /// The registry over `store`, giving each destination the policy of `policies`
    /// that matches its name and a share of `budget`.
    pub fn new(store: StoreHandle, policies: PolicyMap, budget: HousekeepingBudget) -> Self {
        Self {
            store,
            policies,
            budget,
            destinations: HashMap::new(),
            watchers: Vec::new(),
            wildcard_durables: Vec::new(),
            deleting: HashMap::new(),
            dozing: HashMap::new(),
            expiry_wakes: BTreeSet::new(),
            wake_timer: None,
            waking: false,
            shutting_down: false,
            events: crate::events::Events::default(),
            board: std::sync::Arc::default(),
            asleep_writes: HashMap::new(),
            asleep_write_seq: 0,
            feeds_groups: false,
        }
    }

    /// Topics store what their bound consumer groups need and hand it to them
    /// ([`crate::messages::BindGroup`], [`crate::messages::FeedGroups`]); off (the
    /// default, for a registry whose user binds no group), a bound group gets nothing
    /// new from its topic.
    pub fn with_group_feed(mut self, on: bool) -> Self {
        self.feeds_groups = on;
        self
    }

    /// Each destination publishes its counters and gauges on `board` (an entry made
    /// when its actor starts, removed when it is deleted), where stats readings find
    /// them without asking any actor.
    pub fn with_stats_board(
        mut self,
        board: std::sync::Arc<crate::destination::StatsBoard>,
    ) -> Self {
        self.board = board;
        self
    }

    /// Its destinations, and it, report events through `events` (the broker's
    /// advisory topics): destinations started and deleted, expiries, dead letters.
    pub fn with_events(mut self, events: crate::events::Events) -> Self {
        self.events = events;
        self
    }

    /// Reads every durable subscription to a wildcard topic from the store, a page at
    /// a time, before the registry handles any message (`ctx.wait`); a failed read is
    /// retried every second, since a topic started without them would not keep their
    /// messages.
    fn load_wildcard_durables(&mut self, ctx: &mut Context<Self>) {
        let store = std::sync::Arc::clone(self.store.store());
        let load = async move {
            loop {
                match read_definitions(&*store).await {
                    Ok(found) => return found,
                    // Closed by a shutdown before it started: nothing will be started.
                    Err(ebb_store::StoreError::Closed) => return Vec::new(),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot read the durable subscriptions to wildcard topics; retrying in 1 s");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                }
            }
        };
        ctx.wait(load.into_actor(self).map(|found, act, _| {
            if !found.is_empty() {
                tracing::info!(
                    count = found.len(),
                    "durable subscriptions to wildcard topics loaded"
                );
            }
            act.wildcard_durables = found;
        }));
    }

    /// The running actor of `key`, or a new one started with its policy. During and
    /// after shutdown, existing destinations are still returned (their counters stay
    /// readable; their writes fail with `Closed`), new ones are refused.
    fn destination(
        &mut self,
        key: DestinationKey,
        ctx: &mut Context<Self>,
    ) -> Result<DestinationAddr, ActorError> {
        let woken = match self.destinations.get(&key) {
            Some(slot) => match slot.running() {
                Some(addr) => return Ok(addr.clone()),
                None => matches!(slot, Slot::Asleep(_)),
            },
            None => false,
        };
        if self.shutting_down {
            return Err(ActorError::ShuttingDown);
        }
        if woken {
            self.forget_wake(&key);
            tracing::debug!(destination = %key, "a sleeping destination wakes");
        }
        let policy = self.policies.policy_for(&key);
        let (store, budget) = (self.store.clone(), self.budget.clone());
        // The kind table says which actor runs it.
        let addr = match key.kind().spec().actor {
            KindActor::Topic => {
                let durables = self
                    .wildcard_durables
                    .iter()
                    .filter(|d| d.pattern.matches(&key))
                    .map(|d| (d.key.clone(), d.selector.clone()))
                    .collect();
                let mut topic = TopicActor::new(key.clone(), policy, store, budget)
                    .with_published(self.board.started(&key))
                    .with_wildcard_durables(durables)
                    .with_events(self.events.clone())
                    .with_sleeper(ctx.address().recipient());
                if self.feeds_groups {
                    topic = topic.with_group_feed(ctx.address().recipient());
                }
                // Non-durable wildcard subscriptions are attached before the topic
                // takes its first message (a message to a new topic would be missed
                // by an attachment made later).
                self.watchers.retain(|w| w.recipient.connected());
                let mut attached = Vec::new();
                for (i, w) in self.watchers.iter().enumerate() {
                    let readable = w.accept.as_ref().is_none_or(|accept| accept(&key));
                    if w.durable.is_none() && w.pattern.matches(&key) && readable {
                        let (subscribe, rx) = w.template.attachment();
                        match topic.subscribe_before_start(subscribe) {
                            Ok(id) => attached.push((i, id, rx)),
                            Err(e) => {
                                tracing::warn!(topic = %key, pattern = %w.pattern, error = %e,
                                "wildcard subscription cannot attach to a new topic")
                            }
                        }
                    }
                }
                let addr = DestinationAddr::Topic(topic.start());
                for (i, id, rx) in attached {
                    let w = &self.watchers[i];
                    w.recipient
                        .do_send(Matched(key.clone(), addr.clone(), Some((id, rx))));
                }
                self.notify_watchers(&key, &addr, |w| w.durable.is_some());
                if !woken {
                    self.events
                        .emit(|| crate::events::Event::DestinationAdded(key.clone()));
                }
                self.destinations.insert(key, Slot::Running(addr.clone()));
                return Ok(addr);
            }
            KindActor::Queue => {
                let dead_letters = ctx.address().recipient();
                let queue = QueueActor::new(key.clone(), policy, store, budget, Some(dead_letters))
                    .with_events(self.events.clone())
                    .with_published(self.board.started(&key))
                    .with_sleeper(ctx.address().recipient())
                    .after_writes(self.asleep_writes_of(&key));
                let queue = if self.feeds_groups {
                    queue.with_group_acks(ctx.address().recipient())
                } else {
                    queue
                };
                DestinationAddr::Queue(queue.start())
            }
        };
        self.watchers.retain(|w| w.recipient.connected());
        self.notify_watchers(&key, &addr, |_| true);
        if !woken {
            self.events
                .emit(|| crate::events::Event::DestinationAdded(key.clone()));
        }
        self.destinations.insert(key, Slot::Running(addr.clone()));
        Ok(addr)
    }

    /// [`Self::destination`], once a deletion of `key`, or its going to sleep, under
    /// way has ended.
    fn destination_when_deleted(
        &mut self,
        key: DestinationKey,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<DestinationAddr, ActorError>> {
        match self.settled(&key) {
            None => Box::pin(fut::ready(self.destination(key, ctx))),
            Some(settled) => Box::pin(
                settled
                    .into_actor(self)
                    .then(move |(), act, ctx| act.destination_when_deleted(key, ctx)),
            ),
        }
    }

    /// What resolves once a deletion of `key`, or its going to sleep, has ended
    /// (`None`: neither is under way).
    fn settled(&self, key: &DestinationKey) -> Option<impl std::future::Future<Output = ()>> {
        let pending = self.deleting.get(key).or_else(|| self.dozing.get(key))?;
        let pending = pending.clone();
        Some(async move {
            let _ = pending.await;
        })
    }

    /// Hands `letter` to queue `to`, again to its successor when the queue went to
    /// sleep (or was deleted) on the way, a few times at most.
    fn route_letter(
        &mut self,
        to: DestinationKey,
        letter: crate::messages::AcceptDeadLetter,
        attempts: u32,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<Moved, ActorError>> {
        let again = (to.clone(), letter.clone());
        Box::pin(
            self.destination_when_deleted(to, ctx)
                .then(move |target, act, _| {
                    async move {
                        match target? {
                            DestinationAddr::Queue(queue) => queue.send(letter).await?,
                            DestinationAddr::Topic(_) => {
                                unreachable!("a queue key names a queue")
                            }
                        }
                    }
                    .into_actor(act)
                })
                .then(move |result, act, ctx| {
                    let stopped =
                        matches!(result, Err(ActorError::Retired(_) | ActorError::Mailbox(_)));
                    if stopped && attempts > 1 {
                        let (to, letter) = again;
                        act.route_letter(to, letter, attempts - 1, ctx)
                    } else {
                        Box::pin(fut::ready(result))
                    }
                }),
        )
    }

    /// Tells each watcher `which` selects whose pattern matches `key` that it started
    /// (the watcher attaches itself).
    fn notify_watchers(
        &self,
        key: &DestinationKey,
        addr: &DestinationAddr,
        which: impl Fn(&Watcher) -> bool,
    ) {
        for w in self
            .watchers
            .iter()
            .filter(|w| which(w) && w.pattern.matches(key))
        {
            w.recipient
                .do_send(Matched(key.clone(), addr.clone(), None));
        }
    }
}

impl BrokerActor {
    /// `DurableInUse` while a live wildcard subscription holds durable subscription
    /// `key` (watchers whose actor stopped are forgotten first).
    fn not_watched(&mut self, key: &SubscriptionKey) -> Result<(), ActorError> {
        self.watchers.retain(|w| w.recipient.connected());
        if self
            .watchers
            .iter()
            .any(|w| w.durable.as_ref() == Some(key))
        {
            return Err(ActorError::DurableInUse(format!(
                "{}/{}",
                key.client_id, key.subscription_name
            )));
        }
        Ok(())
    }
}

/// Every durable subscription of `store` whose container starts with `prefix` (a
/// definition container's, `wildcard:` or `virtual:`, ending with `:`), read a page of
/// [`DEFINITION_PAGE`] at a time: the definitions the broker keeps beside the
/// destinations, read at start.
pub async fn read_definitions_under(
    store: &dyn ebb_store::MessageStore,
    prefix: &str,
) -> Result<Vec<ebb_store::DurableSubscription>, ebb_store::StoreError> {
    // `;` is the byte after the prefix's `:`: every definition sorts below it.
    let below = format!("{};", prefix.trim_end_matches(':'));
    let mut found = Vec::new();
    let mut after: Option<(String, SubscriptionKey)> = None;
    loop {
        let page = store
            .list_subscriptions_between(
                prefix,
                &below,
                after.as_ref().map(|(c, k)| (c.as_str(), k)),
                DEFINITION_PAGE,
            )
            .await?;
        let full = page.len() == DEFINITION_PAGE as usize;
        after = page.last().map(|s| (s.container.clone(), s.key.clone()));
        found.extend(page);
        if !full {
            return Ok(found);
        }
    }
}

/// Every definition of a durable subscription to a wildcard topic in `store`.
async fn read_definitions(
    store: &dyn ebb_store::MessageStore,
) -> Result<Vec<WildcardDurable>, ebb_store::StoreError> {
    let mut found = Vec::new();
    for sub in read_definitions_under(store, WILDCARD_CONTAINER_PREFIX).await? {
        let text = &sub.container[WILDCARD_CONTAINER_PREFIX.len()..];
        match DestinationPattern::parse(text) {
            Ok(pattern) => found.push(WildcardDurable {
                pattern,
                key: sub.key,
                selector: sub.selector,
            }),
            Err(e) => tracing::warn!(container = %sub.container, error = %e,
                "a stored wildcard subscription's pattern does not parse; it is left alone"),
        }
    }
    Ok(found)
}

impl Actor for BrokerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.load_wildcard_durables(ctx);
    }
}

/// Watch `pattern` for a wildcard subscription: the answer is the running
/// destinations that match; each matching destination started later is sent to
/// `watcher` as [`Matched`], until the watcher stops. With `durable` (a durable
/// subscription to a wildcard topic, and its selector's text), the registry also
/// gives each matching topic it starts the subscription, so that the topic keeps its
/// messages while the subscription is offline. Errors:
/// [`ActorError::DurableInUse`] when that durable subscription is watched already;
/// [`ActorError::ShuttingDown`].
#[derive(Message)]
#[rtype(result = "Result<Vec<(DestinationKey, DestinationAddr)>, ActorError>")]
pub struct Watch {
    /// The destinations to tell of.
    pub pattern: DestinationPattern,
    /// Where to tell of them.
    pub watcher: Addr<WildcardActor>,
    /// A durable subscription to a wildcard topic: its key and selector text.
    pub durable: Option<(SubscriptionKey, Option<String>)>,
    /// Its attachments' options and the destinations it may read: the registry
    /// attaches a non-durable one to each matching topic it starts before the topic
    /// takes a message.
    pub template: Template,
    /// The destinations it may read (`None`: all it matches).
    pub accept: Option<Accept>,
}

impl Handler<Watch> for BrokerActor {
    type Result = Result<Vec<(DestinationKey, DestinationAddr)>, ActorError>;

    fn handle(&mut self, msg: Watch, ctx: &mut Context<Self>) -> Self::Result {
        if self.shutting_down {
            return Err(ActorError::ShuttingDown);
        }
        self.watchers.retain(|w| w.recipient.connected());
        let durable_key = msg.durable.as_ref().map(|(k, _)| k.clone());
        if let Some((key, selector)) = msg.durable {
            self.not_watched(&key)?;
            self.wildcard_durables.retain(|d| d.key != key);
            self.wildcard_durables.push(WildcardDurable {
                pattern: msg.pattern.clone(),
                key,
                selector,
            });
        }
        // Sleeping destinations it matches wake: it consumes from them too.
        let asleep: Vec<DestinationKey> = self
            .destinations
            .iter()
            .filter(|(k, slot)| matches!(slot, Slot::Asleep(_)) && msg.pattern.matches(k))
            .map(|(k, _)| k.clone())
            .collect();
        for key in asleep {
            self.destination(key, ctx)?;
        }
        let running = self
            .destinations
            .iter()
            .filter_map(|(k, slot)| Some((k, slot.running()?)))
            .filter(|(k, _)| msg.pattern.matches(k) && !self.deleting.contains_key(*k))
            .map(|(k, a)| (k.clone(), a.clone()))
            .collect();
        self.watchers.push(Watcher {
            pattern: msg.pattern,
            recipient: msg.watcher,
            durable: durable_key,
            template: msg.template,
            accept: msg.accept,
        });
        Ok(running)
    }
}

/// The durable subscription to a wildcard topic `0` is removed (or replaced by one to
/// another destination): topics started from now on no longer create it. Errors:
/// [`ActorError::DurableInUse`] while a consumer holds it.
#[derive(Message)]
#[rtype(result = "Result<(), ActorError>")]
pub struct ForgetWildcardDurable(pub SubscriptionKey);

impl Handler<ForgetWildcardDurable> for BrokerActor {
    type Result = Result<(), ActorError>;

    fn handle(&mut self, msg: ForgetWildcardDurable, _: &mut Context<Self>) -> Self::Result {
        let key = msg.0;
        self.not_watched(&key)?;
        self.wildcard_durables.retain(|d| d.key != key);
        Ok(())
    }
}

/// The actor of destination `key`, started on first use (see [`BrokerActor`]).
#[derive(Message)]
#[rtype(result = "Result<DestinationAddr, ActorError>")]
pub struct GetDestination(pub DestinationKey);

impl Handler<GetDestination> for BrokerActor {
    type Result = ResponseActFuture<Self, Result<DestinationAddr, ActorError>>;

    fn handle(&mut self, msg: GetDestination, ctx: &mut Context<Self>) -> Self::Result {
        self.destination_when_deleted(msg.0, ctx)
    }
}

impl Handler<RouteDeadLetter> for BrokerActor {
    type Result = ResponseActFuture<Self, Result<Moved, ActorError>>;

    fn handle(&mut self, msg: RouteDeadLetter, ctx: &mut Context<Self>) -> Self::Result {
        // Each attempt follows a sleep or deletion that ended after the one before.
        self.route_letter(msg.to, msg.letter, 8, ctx)
    }
}

/// Deletes destination `0` with its durable subscriptions and messages (see the
/// module documentation); a destination only the store holds is started to be
/// deleted. Answers what it deleted. Errors: [`ActorError::InUse`] while a consumer
/// is attached, a transaction holds messages for it, or it is being deleted already
/// (nothing was deleted); [`ActorError::ShuttingDown`]; a store error, after which
/// the destination goes on with what is left (each page is one store transaction:
/// deleting it again finishes the job).
#[derive(Message)]
#[rtype(result = "Result<DeletedDestination, ActorError>")]
pub struct DeleteDestination(pub DestinationKey);

/// What [`DeleteDestination`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeletedDestination {
    /// Stored messages deleted (messages held in memory only are dropped uncounted).
    pub messages: u64,
    /// Durable subscriptions removed (a topic's; 0 for a queue).
    pub subscriptions: u64,
    /// Scheduled messages of it cancelled (and redeliveries held back for it): the
    /// embedding API's `Broker::delete_destination` cancels them after the rest.
    pub scheduled: u64,
}

impl Handler<DeleteDestination> for BrokerActor {
    type Result = ResponseActFuture<Self, Result<DeletedDestination, ActorError>>;

    fn handle(&mut self, msg: DeleteDestination, ctx: &mut Context<Self>) -> Self::Result {
        self.delete(msg.0, ctx)
    }
}

impl BrokerActor {
    /// Handles [`DeleteDestination`], once a sleep of `key` under way has ended.
    fn delete(
        &mut self,
        key: DestinationKey,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<DeletedDestination, ActorError>> {
        if let Some(dozing) = self.dozing.get(&key) {
            let dozing = dozing.clone();
            return Box::pin(
                async move {
                    let _ = dozing.await;
                }
                .into_actor(self)
                .then(move |(), act, ctx| act.delete(key, ctx)),
            );
        }
        if self.deleting.contains_key(&key) {
            let why = format!("destination {key} is being deleted already");
            return Box::pin(fut::ready(Err(ActorError::InUse(why))));
        }
        let addr = match self.destination(key.clone(), ctx) {
            Ok(addr) => addr,
            Err(e) => return Box::pin(fut::ready(Err(e))),
        };
        let (done, deleted) = futures::channel::oneshot::channel();
        self.deleting
            .insert(key.clone(), futures::FutureExt::shared(deleted));
        let store = self.store.clone();
        let container = key.container();
        let target = addr.clone();
        let work = async move {
            let retired = match target.ask(Retire).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(e.into()),
            };
            match retired {
                Ok(()) => (true, delete_rows(&store, &container).await),
                // Refused (in use): nothing changed, the actor goes on.
                Err(e) => (false, Err(e)),
            }
        };
        Box::pin(work.into_actor(self).map(move |(retired, result), act, _| {
            if retired {
                // What is left (after a failed page) is the successor's.
                match &result {
                    Ok(d) => {
                        tracing::info!(destination = %key, messages = d.messages,
                            subscriptions = d.subscriptions, "destination deleted");
                        act.events
                            .emit(|| crate::events::Event::DestinationRemoved(key.clone()));
                    }
                    Err(e) => tracing::warn!(destination = %key, error = %e,
                        "deleting the destination failed; what is left stays"),
                }
                act.forget_wake(&key);
                act.destinations.remove(&key);
                act.board.remove(&key);
                addr.stop();
            }
            act.deleting.remove(&key);
            let _ = done.send(());
            result
        }))
    }
}

/// Deletes the durable subscriptions (with their marks and individual acks) and then
/// the messages of `container`, a page ([`DELETE_PAGE`]) per store write; a consumer
/// group's binding to its topic first ([`ebb_store::groups`]), so that it no longer
/// reads (nor holds) the topic's rows. A topic's groups' bindings are kept: the rows
/// they have not read stay (cleanup keeps every row a binding's mark has not passed).
async fn delete_rows(
    store: &StoreHandle,
    container: &str,
) -> Result<DeletedDestination, ActorError> {
    let mut deleted = DeletedDestination::default();
    // A consumer group's binding to its topic goes first: from now on nothing feeds
    // it (a feed for it finds it unbound) and the topic's rows are not its any more.
    if let Some(topic) = store.store().group_topic(container) {
        store
            .unsubscribe(topic, SubscriptionKey::group(container))
            .await?;
    }
    let mut after: Option<SubscriptionKey> = None;
    loop {
        let page = store
            .store()
            .list_subscriptions(container, after.as_ref(), DELETE_PAGE)
            .await?;
        let full = page.len() == DELETE_PAGE as usize;
        for sub in page {
            after = Some(sub.key.clone());
            // A consumer group's binding stays: the group outlives its topic, and the
            // rows it has not read stay with it (the cleanup below keeps them).
            if sub.key.is_group() {
                continue;
            }
            if store.unsubscribe(container.to_string(), sub.key).await? {
                deleted.subscriptions += 1;
            }
        }
        if !full {
            break;
        }
    }
    let mut after = 0;
    loop {
        // With no subscription left, every message up to the highest id goes; prepared
        // ones stay (the actor refused while it had any).
        let (n, reached) = store
            .cleanup(container.to_string(), DELETE_PAGE, after, Some(i64::MAX))
            .await?;
        after = reached;
        deleted.messages += n;
        if n < u64::from(DELETE_PAGE) {
            return Ok(deleted);
        }
    }
}

/// The keys of the running destination actors, sorted (as their store keys sort), at
/// most `limit` of them (the first ones in sort order after `after`), so that an
/// answer never grows with the number of destinations. Read-only: it starts nothing.
#[derive(Message)]
#[rtype(result = "DestinationList")]
pub struct ListDestinations {
    /// Most keys in the answer.
    pub limit: usize,
    /// Only keys after this one (`None`: from the first).
    pub after: Option<DestinationKey>,
}

/// Whether destination `key`'s actor is running now. Read-only: it starts nothing.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct IsRunning(pub DestinationKey);

impl Handler<IsRunning> for BrokerActor {
    type Result = bool;

    fn handle(&mut self, msg: IsRunning, _: &mut Context<Self>) -> bool {
        !self.deleting.contains_key(&msg.0)
            && self.destinations.get(&msg.0).is_some_and(Slot::exists)
    }
}

/// The actor of a destination that runs, or `None`: nothing is started. For what must
/// reach only an existing destination (the acks and aborts still on their way to a
/// temporary one whose connection ended). A deletion in progress is waited for, and
/// the answer is what it left: `None` when it deleted the destination, its actor when
/// it was refused. (Answering `None` at once lost a transaction's abort to a
/// temporary queue whose deletion it was racing: the queue then held the aborted
/// transaction in memory, and refused every later deletion, until a restart.)
#[derive(Message)]
#[rtype(result = "Option<DestinationAddr>")]
pub struct GetRunning(pub DestinationKey);

impl Handler<GetRunning> for BrokerActor {
    type Result = ResponseActFuture<Self, Option<DestinationAddr>>;

    fn handle(&mut self, msg: GetRunning, _: &mut Context<Self>) -> Self::Result {
        let key = msg.0;
        let deleted = self.deleting.get(&key).cloned();
        Box::pin(
            async move {
                if let Some(deleted) = deleted {
                    let _ = deleted.await;
                }
            }
            .into_actor(self)
            .map(move |(), act, _| act.destinations.get(&key).and_then(Slot::running).cloned()),
        )
    }
}

/// The answer to [`ListDestinations`].
#[derive(Debug, Clone, Default, PartialEq, Eq, MessageResponse)]
pub struct DestinationList {
    /// Running destinations, sorted, at most the limit asked for.
    pub keys: Vec<DestinationKey>,
    /// How many destinations are running in all (more than `keys.len()` when the limit
    /// cut the list).
    pub total: usize,
}

impl Handler<ListDestinations> for BrokerActor {
    type Result = DestinationList;

    fn handle(&mut self, msg: ListDestinations, _: &mut Context<Self>) -> DestinationList {
        let mut total = 0;
        let mut keys: Vec<&DestinationKey> = self
            .destinations
            .iter()
            .filter(|(k, slot)| slot.exists() && !self.deleting.contains_key(*k))
            .inspect(|_| total += 1)
            .map(|(k, _)| k)
            .filter(|k| msg.after.as_ref().is_none_or(|after| *k > after))
            .collect();
        // The page's keys without sorting (or cloning) every key after it: linear in
        // the running destinations, so paging through all of them stays cheap.
        if keys.len() > msg.limit {
            if msg.limit == 0 {
                keys.clear();
            } else {
                keys.select_nth_unstable(msg.limit - 1);
                keys.truncate(msg.limit);
            }
        }
        keys.sort_unstable();
        DestinationList {
            keys: keys.into_iter().cloned().collect(),
            total,
        }
    }
}

/// Runs the shutdown sequence (module documentation); answered when the pool is closed.
#[derive(Message)]
#[rtype(result = "Result<(), ActorError>")]
pub struct ShutdownBroker;

impl Handler<ShutdownBroker> for BrokerActor {
    type Result = ResponseFuture<Result<(), ActorError>>;

    fn handle(&mut self, _: ShutdownBroker, _: &mut Context<Self>) -> Self::Result {
        self.shutting_down = true;
        let destinations: Vec<DestinationAddr> = self
            .destinations
            .values()
            .filter_map(Slot::running)
            .cloned()
            .collect();
        let watchers: Vec<Addr<WildcardActor>> =
            self.watchers.drain(..).map(|w| w.recipient).collect();
        let store = self.store.clone();
        Box::pin(async move {
            // A destination that is already gone has nothing in flight.
            let stops = destinations.iter().map(|d| d.ask(StopHousekeeping));
            let _ = futures::future::join_all(stops).await;
            // Every stream ends, and the acks accepted so far commit.
            let closes = watchers.iter().map(|w| w.send(CloseConsumers));
            let _ = futures::future::join_all(closes).await;
            let closes = destinations.iter().map(|d| d.ask(CloseConsumers));
            let _ = futures::future::join_all(closes).await;
            store.close().await?;
            tracing::info!(
                destinations = destinations.len(),
                "broker shut down; store closed"
            );
            Ok(())
        })
    }
}

impl Handler<Doze> for BrokerActor {
    type Result = ResponseActFuture<Self, ()>;

    /// Puts the destination to sleep (module documentation), unless it does not run,
    /// is being deleted or goes to sleep already, or the broker shuts down.
    fn handle(&mut self, msg: Doze, _: &mut Context<Self>) -> Self::Result {
        let key = msg.key;
        let busy = self.deleting.contains_key(&key) || self.dozing.contains_key(&key);
        let addr = match self.destinations.get(&key).and_then(Slot::running) {
            Some(addr) if !busy && !self.shutting_down => addr.clone(),
            _ => return Box::pin(fut::ready(())),
        };
        let (done, dozed) = futures::channel::oneshot::channel();
        self.dozing
            .insert(key.clone(), futures::FutureExt::shared(dozed));
        let target = addr.clone();
        let asked = async move {
            match target.ask(Sleep).await {
                Ok(Ok(slept)) => Some(slept),
                _ => None,
            }
        };
        Box::pin(asked.into_actor(self).map(move |slept, act, ctx| {
            if let Some(slept) = slept {
                act.destinations
                    .insert(key.clone(), Slot::Asleep(slept.wake_at));
                if let Some(at) = slept.wake_at {
                    act.expiry_wakes.insert((at, key.clone()));
                    act.arm_wake_timer(ctx);
                }
                act.board.asleep(&key, true);
                addr.stop();
                tracing::debug!(destination = %key, wake_at = ?slept.wake_at, "destination asleep");
            }
            act.dozing.remove(&key);
            let _ = done.send(());
        }))
    }
}

/// Expiry of sleeping destinations (module documentation).
impl BrokerActor {
    /// Drops `key`'s expiry wake (it woke, or is deleted).
    fn forget_wake(&mut self, key: &DestinationKey) {
        if let Some(Slot::Asleep(Some(at))) = self.destinations.get(key) {
            self.expiry_wakes.remove(&(*at, key.clone()));
        }
    }

    /// Sets the timer for the earliest expiry wake, unless a page of wakes is under way
    /// (its end sets it) or the timer is set for that time or sooner.
    fn arm_wake_timer(&mut self, ctx: &mut Context<Self>) {
        if self.waking || self.shutting_down {
            return;
        }
        let Some(&(first, _)) = self.expiry_wakes.first() else {
            if let Some((_, timer)) = self.wake_timer.take() {
                ctx.cancel_future(timer);
            }
            return;
        };
        if let Some((at, timer)) = self.wake_timer {
            if at <= first {
                return;
            }
            ctx.cancel_future(timer);
        }
        let wait = first.saturating_sub(crate::destination::now_ms().max(0) as u64);
        let timer = ctx.run_later(std::time::Duration::from_millis(wait), |act, ctx| {
            act.wake_timer = None;
            act.wake_expiring(ctx);
        });
        self.wake_timer = Some((first, timer));
    }

    /// Wakes the sleeping destinations whose expiry wake is due, at most
    /// [`EXPIRY_WAKE_PAGE`], each with [`ExpireDue`]; once each has ended its run, the
    /// timer is set for what is left.
    fn wake_expiring(&mut self, ctx: &mut Context<Self>) {
        if self.waking || self.shutting_down {
            return;
        }
        let now = crate::destination::now_ms().max(0) as u64;
        let mut page = Vec::new();
        while page.len() < EXPIRY_WAKE_PAGE {
            match self.expiry_wakes.first() {
                Some((at, _)) if *at <= now => {}
                _ => break,
            }
            let Some((_, key)) = self.expiry_wakes.pop_first() else {
                break;
            };
            if let Some(slot) = self.destinations.get_mut(&key) {
                // Woken now: the slot no longer names a wake time.
                *slot = Slot::Asleep(None);
            }
            match self.destination(key.clone(), ctx) {
                Ok(addr) => page.push(addr),
                Err(e) => tracing::warn!(destination = %key, error = %e,
                    "a sleeping destination could not be woken for expiry"),
            }
        }
        if page.is_empty() {
            self.arm_wake_timer(ctx);
            return;
        }
        tracing::debug!(
            destinations = page.len(),
            "sleeping destinations woken for expiry"
        );
        self.waking = true;
        let runs = page
            .into_iter()
            .map(|addr| async move { addr.ask(ExpireDue).await });
        let runs = futures::future::join_all(runs);
        ctx.spawn(runs.into_actor(self).map(|_, act, ctx| {
            act.waking = false;
            act.arm_wake_timer(ctx);
        }));
    }
}
