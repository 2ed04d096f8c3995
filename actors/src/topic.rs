//! The topic actor: one per topic.
//!
//! State it owns: its online subscriptions ([`SubscriptionState`]: cursors, prefetch
//! credit, in-flight deliveries), the list of its durable subscriptions (online or
//! offline), the release order of published messages, its housekeeping timer and
//! expiry state, and its counters.
//!
//! Messages it accepts: [`Publish`], [`PublishPrepared`], [`CommitPrepared`],
//! [`AbortPrepared`], [`Subscribe`], [`Ack`], [`Nack`], [`Detach`], [`RemoveDurable`],
//! [`GetStats`], [`RunHousekeeping`], [`StopHousekeeping`]; and from itself, the timer
//! tick, [`ExpiryPage`] and [`CleanupBatch`].
//!
//! **Publishing.** A persistent message is stored (through the store actor) when the
//! topic has a durable subscription, and the producer is answered after the commit. A
//! message that is expired on arrival is counted once and neither stored nor
//! dispatched. Messages are released to subscriptions in publish order (a reorder
//! buffer waits for earlier commits), so every cursor sees ids in increasing order.
//!
//! **Expiry.** Every `expire_messages_period` ms the timer starts an expiry run unless
//! one is running, the topic has never seen a message with an expiration (and its
//! store holds none), or no durable subscription is offline. A page is one bounded
//! `recover_expired` (at most `max_expire_page_size` rows) for the offline durable
//! subscriptions, whose runs are then acked through the store actor. A full page sends
//! the next page to the topic's own mailbox at once (`ctx.notify`), behind the
//! publishes, acks and dispatch already waiting; a short page ends the run until the
//! next tick. Every page holds a permit of the shared [`HousekeepingBudget`].
//!
//! The topic never writes to the store itself: every write goes to the store actor.
//! Reads (backlog pages, expiry pages) go to the store's pool, bounded in SQL.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use ebb_store::{NewMessage, SubscriptionKey, WriteOp, WriteOutcome};

use crate::error::ActorError;
use crate::housekeeping::HousekeepingBudget;
use crate::messages::*;
use crate::policy::Policy;
use crate::store_actor::StoreHandle;
use crate::subscription::{Dispatch, InFlight, SubscriptionState};

/// Durable subscriptions the topic loads per store read at start.
const SUBSCRIPTION_PAGE: u32 = 500;

/// Wall clock, epoch ms: what expirations are compared with.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A durable subscription the topic knows.
#[derive(Debug, Default)]
struct Durable {
    /// The online subscription id, if a consumer is attached.
    online: Option<u64>,
    /// Store ids delivered on an earlier attachment and not acked.
    unacked: HashSet<i64>,
}

/// See the module documentation.
pub struct TopicActor {
    container: String,
    policy: Policy,
    store: StoreHandle,
    budget: HousekeepingBudget,
    subscriptions: HashMap<u64, SubscriptionState>,
    durables: BTreeMap<SubscriptionKey, Durable>,
    next_subscription: u64,
    /// Publish order: messages are released to subscriptions by `seq`.
    next_seq: u64,
    release_seq: u64,
    completed: BTreeMap<u64, Option<Arc<TopicMessage>>>,
    /// Messages of open transactions, by xid, in send order (stored ones carry their
    /// prepared id).
    prepared: HashMap<String, Vec<TopicMessage>>,
    // Housekeeping.
    timer: Option<SpawnHandle>,
    expiry_armed: bool,
    run_active: bool,
    page_in_flight: bool,
    stopping: bool,
    stop_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    /// Some durable ack happened since the last cleanup.
    cleanup_needed: bool,
    cleanup_in_flight: bool,
    stats: TopicStats,
}

/// The next expiry page of a run (sent by the topic to itself).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ExpiryPage;

/// The next cleanup batch (sent by the topic to itself).
#[derive(Message)]
#[rtype(result = "()")]
pub struct CleanupBatch;

/// Messages one cleanup batch deletes at most.
const CLEANUP_BATCH: u32 = 1000;

impl TopicActor {
    /// `container` is the topic's store key (`topic://NAME`).
    pub fn new(
        container: String,
        policy: Policy,
        store: StoreHandle,
        budget: HousekeepingBudget,
    ) -> Self {
        Self {
            container,
            policy,
            store,
            budget,
            subscriptions: HashMap::new(),
            durables: BTreeMap::new(),
            next_subscription: 1,
            next_seq: 0,
            release_seq: 0,
            completed: BTreeMap::new(),
            prepared: HashMap::new(),
            timer: None,
            expiry_armed: false,
            run_active: false,
            page_in_flight: false,
            stopping: false,
            stop_waiters: Vec::new(),
            cleanup_needed: false,
            cleanup_in_flight: false,
            stats: TopicStats::default(),
        }
    }

    /// Records the outcome of publish `seq` and releases, in order, every message
    /// whose predecessors are all done.
    fn complete(&mut self, seq: u64, message: Option<Arc<TopicMessage>>, ctx: &mut Context<Self>) {
        self.completed.insert(seq, message);
        while let Some(message) = self.completed.remove(&self.release_seq) {
            self.release_seq += 1;
            let Some(message) = message else { continue };
            let ids: Vec<u64> = self.subscriptions.keys().copied().collect();
            for id in ids {
                if let Some(sub) = self.subscriptions.get_mut(&id) {
                    self.stats.discarded += sub.offer(&message);
                }
                self.dispatch(id, ctx);
            }
        }
    }

    /// Delivers what subscription `id` can take now, acks what expired on the way,
    /// and starts a store read if its cursor needs one.
    fn dispatch(&mut self, id: u64, ctx: &mut Context<Self>) {
        let Some(sub) = self.subscriptions.get_mut(&id) else {
            return;
        };
        let Dispatch {
            deliveries,
            expired,
        } = sub.take_ready(now_ms());
        self.stats.dispatched += deliveries.len() as u64;
        let alive = sub.send(deliveries);
        let key = sub.durable.clone();
        let read = sub.read_request();
        if !alive {
            self.detach(id);
            return;
        }
        self.expired_at_dispatch(key.as_ref(), expired, ctx);
        let (Some(read), Some(key)) = (read, key) else {
            return;
        };
        let store = Arc::clone(self.store.store());
        let container = self.container.clone();
        let fut = async move {
            // Highest priority first with prioritized messages: one bounded read per
            // priority until the credit is filled.
            let mut rows = Vec::new();
            for (priority, after) in read.positions {
                let left = read.limit - rows.len() as u32;
                if left == 0 {
                    break;
                }
                rows.extend(
                    store
                        .read_pending(&container, &key, after, priority, left)
                        .await?,
                );
            }
            Ok::<_, ebb_store::StoreError>(rows)
        };
        ctx.spawn(fut.into_actor(self).map(move |result, act, ctx| {
            let rows = match result {
                Ok(rows) => Some(rows.iter().map(|m| Arc::new(TopicMessage::from_stored(m))).collect()),
                Err(e) => {
                    tracing::warn!(topic = %act.container, error = %e, "backlog read failed; retrying in 1 s");
                    ctx.run_later(Duration::from_secs(1), move |act, ctx| act.dispatch(id, ctx));
                    None
                }
            };
            let retry = rows.is_some();
            if let Some(sub) = act.subscriptions.get_mut(&id) {
                sub.on_read(rows);
            }
            if retry {
                act.dispatch(id, ctx);
            }
        }));
    }

    /// Expired messages met at dispatch: non-persistent ones are counted; persistent
    /// ones of a durable subscription are acked individually in the store (so the mark
    /// never passes an earlier message still in flight) and counted when the ack is new.
    fn expired_at_dispatch(
        &mut self,
        key: Option<&SubscriptionKey>,
        expired: Vec<Arc<TopicMessage>>,
        ctx: &mut Context<Self>,
    ) {
        let mut acks = Vec::new();
        for message in expired {
            match (key, message.id) {
                (Some(_), Some(id)) => acks.push((id, message.priority)),
                _ => self.stats.expired += 1,
            }
        }
        let (Some(key), false) = (key, acks.is_empty()) else {
            return;
        };
        let op = WriteOp::Ack {
            container: self.container.clone(),
            key: key.clone(),
            messages: acks,
        };
        let store = self.store.clone();
        ctx.spawn(async move { store.write(op).await }.into_actor(self).map(|result, act, ctx| {
            match result {
                Ok(WriteOutcome::Acked { newly_acked }) => {
                    act.stats.expired += newly_acked;
                    act.cleanup_needed = true;
                    act.schedule(ctx);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(topic = %act.container, error = %e, "ack of expired messages failed"),
            }
        }));
    }

    fn detach(&mut self, id: u64) {
        let Some(sub) = self.subscriptions.remove(&id) else {
            return;
        };
        if let Some(key) = &sub.durable {
            if let Some(durable) = self.durables.get_mut(key) {
                durable.online = None;
                durable.unacked.extend(sub.unacked_store_ids());
            }
        }
    }

    fn next_subscription_id(&mut self) -> u64 {
        let id = self.next_subscription;
        self.next_subscription += 1;
        id
    }

    /// Durable subscriptions expiry works for: offline ones (and online ones when the
    /// policy says so).
    fn expiry_subscriptions(&self) -> Vec<SubscriptionKey> {
        let all = self.policy.expire_online_durable_subscriptions;
        self.durables
            .iter()
            .filter(|(_, d)| all || d.online.is_none())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Starts the housekeeping timer if there is work for it (an expiration to watch or
    /// acked messages to clean up) and it is not running. An idle topic has no timer,
    /// so it costs no wake-ups at all.
    fn schedule(&mut self, ctx: &mut Context<Self>) {
        let period = self.policy.expire_messages_period;
        let work = self.expiry_armed || self.cleanup_needed;
        if period == 0 || self.stopping || self.timer.is_some() || !work {
            return;
        }
        let every = Duration::from_millis(period);
        self.timer = Some(ctx.run_interval(every, |act, ctx| act.tick(ctx)));
    }

    /// Stops the timer when nothing is left for it to do.
    fn idle_if_done(&mut self, ctx: &mut Context<Self>) {
        let busy =
            self.expiry_armed || self.cleanup_needed || self.run_active || self.cleanup_in_flight;
        if !busy {
            if let Some(timer) = self.timer.take() {
                ctx.cancel_future(timer);
            }
        }
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        self.stats.ticks += 1;
        if !self.stopping && self.cleanup_needed && !self.cleanup_in_flight {
            self.cleanup(ctx);
        }
        if self.run_active || self.stopping || !self.expiry_armed {
            return;
        }
        if self.expiry_subscriptions().is_empty() {
            return;
        }
        self.run_active = true;
        self.stats.expiry_runs += 1;
        self.page(ctx);
    }

    /// Runs one expiry page (see the module documentation).
    fn page(&mut self, ctx: &mut Context<Self>) {
        let subscriptions = self.expiry_subscriptions();
        if self.stopping || subscriptions.is_empty() {
            self.end_run(ctx);
            return;
        }
        self.page_in_flight = true;
        self.stats.expiry_pages_started += 1;
        let (store, budget) = (self.store.clone(), self.budget.clone());
        let container = self.container.clone();
        let limit = self.policy.max_expire_page_size.max(1);
        let fut = async move {
            let Some(permit) = budget.acquire().await else {
                return Ok((0, 0, false, 0));
            };
            let page = store
                .store()
                .recover_expired(&container, &subscriptions, now_ms(), limit)
                .await?;
            let mut newly = 0;
            for (key, messages) in page.by_subscription {
                let op = WriteOp::Ack {
                    container: container.clone(),
                    key,
                    messages: messages.iter().map(|m| (m.id, m.priority)).collect(),
                };
                if let WriteOutcome::Acked { newly_acked } = store.write(op).await? {
                    newly += newly_acked;
                }
            }
            Ok::<_, ActorError>((page.rows as u64, newly, page.more, permit.ticket))
        };
        ctx.spawn(fut.into_actor(self).map(|result, act, ctx| {
            act.page_in_flight = false;
            act.stats.expiry_pages += 1;
            match result {
                Ok((rows, newly, more, ticket)) => {
                    act.stats.expired += newly;
                    act.cleanup_needed |= newly > 0;
                    act.stats.max_expiry_page_rows = act.stats.max_expiry_page_rows.max(rows);
                    metrics::histogram!("ebb_expiry_page_rows", "destination" => act.container.clone())
                        .record(rows as f64);
                    act.stats.last_page_ticket = ticket;
                    if more && !act.stopping {
                        ctx.notify(ExpiryPage);
                    } else {
                        if rows == 0 {
                            act.disarm_if_nothing_expires(ctx);
                        }
                        act.end_run(ctx);
                    }
                }
                Err(e) => {
                    tracing::warn!(topic = %act.container, error = %e, "expiry page failed; the next tick tries again");
                    act.end_run(ctx);
                }
            }
        }));
    }

    /// Deletes one bounded batch of messages every durable subscription has acked; a
    /// full batch sends the next one through the mailbox.
    fn cleanup(&mut self, ctx: &mut Context<Self>) {
        self.cleanup_needed = false;
        self.cleanup_in_flight = true;
        // With no durable subscription left, what is stored is needed by nobody.
        let orphans_up_to = self
            .durables
            .is_empty()
            .then(|| self.store.store().last_assigned_id());
        let op = WriteOp::Cleanup {
            container: self.container.clone(),
            limit: CLEANUP_BATCH,
            orphans_up_to,
        };
        let store = self.store.clone();
        ctx.spawn(async move { store.write(op).await }.into_actor(self).map(|result, act, ctx| {
            act.cleanup_in_flight = false;
            act.stats.cleanup_batches += 1;
            match result {
                Ok(WriteOutcome::Deleted(n)) => {
                    act.stats.cleaned_up += n;
                    if n >= u64::from(CLEANUP_BATCH) {
                        act.cleanup_needed = true;
                        ctx.notify(CleanupBatch);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    act.cleanup_needed = true;
                    tracing::warn!(topic = %act.container, error = %e, "cleanup failed; the next tick tries again");
                }
            }
            act.wake_stop_waiters();
            act.idle_if_done(ctx);
        }));
    }

    fn end_run(&mut self, ctx: &mut Context<Self>) {
        self.run_active = false;
        self.wake_stop_waiters();
        self.schedule(ctx);
        self.idle_if_done(ctx);
    }

    /// Answers [`StopHousekeeping`] once no page or cleanup batch is in flight.
    fn wake_stop_waiters(&mut self) {
        if !self.page_in_flight && !self.cleanup_in_flight {
            for waiter in self.stop_waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
    }

    /// After a run that found nothing: stop looking until a message with an
    /// expiration arrives, if the store holds none (one indexed row at most).
    fn disarm_if_nothing_expires(&mut self, ctx: &mut Context<Self>) {
        let store = Arc::clone(self.store.store());
        let container = self.container.clone();
        let fut = async move { store.has_expiring(&container).await };
        ctx.spawn(fut.into_actor(self).map(|result, act, ctx| {
            if let Ok(false) = result {
                act.expiry_armed = false;
                act.idle_if_done(ctx);
            }
        }));
    }

    /// Loads durable subscriptions and whether any message expires (before any other
    /// message is handled).
    fn load(&mut self, ctx: &mut Context<Self>) {
        let store = Arc::clone(self.store.store());
        let container = self.container.clone();
        let fut = async move {
            let mut keys = Vec::new();
            let mut after: Option<SubscriptionKey> = None;
            loop {
                let page = store
                    .list_subscriptions(&container, after.as_ref(), SUBSCRIPTION_PAGE)
                    .await?;
                let full = page.len() == SUBSCRIPTION_PAGE as usize;
                after = page.last().map(|s| s.key.clone());
                keys.extend(page.into_iter().map(|s| s.key));
                if !full {
                    break;
                }
            }
            let armed = store.has_expiring(&container).await?;
            Ok::<_, ebb_store::StoreError>((keys, armed))
        };
        ctx.wait(fut.into_actor(self).map(|result, act, ctx| {
            match result {
                Ok((keys, armed)) => {
                    act.cleanup_needed = !keys.is_empty();
                    act.durables = keys.into_iter().map(|k| (k, Durable::default())).collect();
                    act.expiry_armed = armed;
                }
                Err(e) => {
                    // Without its durable subscriptions the topic would not store
                    // what they need: it refuses to run; the next use starts it again.
                    tracing::error!(topic = %act.container, error = %e, "cannot load durable subscriptions; topic stopped");
                    ctx.stop();
                    return;
                }
            }
            act.schedule(ctx);
        }));
    }

    /// Puts durable subscription `key` online as subscription `id`, its backlog
    /// starting after `mark` (the lowest of its marks), and dispatches.
    fn attach(
        &mut self,
        key: SubscriptionKey,
        mark: i64,
        prefetch: u32,
        deliver: tokio::sync::mpsc::Sender<Delivery>,
        id: u64,
        ctx: &mut Context<Self>,
    ) {
        let unacked = self
            .durables
            .get_mut(&key)
            .map(|d| std::mem::take(&mut d.unacked))
            .unwrap_or_default();
        let state = SubscriptionState::durable(
            id,
            key,
            mark,
            prefetch,
            self.policy.prioritized_messages,
            deliver,
        )
        .with_redeliveries(unacked);
        self.subscriptions.insert(id, state);
        self.dispatch(id, ctx);
    }
}

impl Actor for TopicActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // The timer starts once the load shows work for it (see `schedule`).
        self.load(ctx);
    }
}

impl TopicActor {
    /// The common start of a publish: a message expired on arrival is counted and
    /// answered; otherwise whether it must be stored (persistent, and some durable
    /// subscription needs it), arming expiry if it has an expiration.
    fn accept(
        &mut self,
        message: &TopicMessage,
        ctx: &mut Context<Self>,
    ) -> Result<bool, PublishOutcome> {
        if message.is_expired(now_ms()) {
            self.stats.enqueued += 1;
            self.stats.expired += 1;
            return Err(PublishOutcome {
                id: None,
                expired_on_arrival: true,
            });
        }
        let store = message.persistent && !self.durables.is_empty();
        if store && message.expiration > 0 {
            self.expiry_armed = true;
            self.schedule(ctx);
        }
        Ok(store)
    }

    /// Writes `message` (prepared with `xid`) through the store actor.
    fn store_write(
        &self,
        message: &TopicMessage,
        xid: Option<String>,
    ) -> impl std::future::Future<Output = Result<i64, ActorError>> {
        let op = WriteOp::Add(NewMessage {
            container: self.container.clone(),
            message_id: message.message_id.clone(),
            expiration: message.expiration,
            priority: message.priority,
            xid,
            payload: Arc::clone(&message.payload),
        });
        // In publish order: cursors see ids in the order the topic releases messages.
        let write = self.store.write_in_order(op);
        async move {
            match write.await? {
                WriteOutcome::Added(id) => Ok(id),
                other => unreachable!("an add answers Added, not {other:?}"),
            }
        }
    }

    /// Releases `message` as the next published message (publish order).
    fn release(&mut self, message: TopicMessage, ctx: &mut Context<Self>) {
        self.stats.enqueued += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.complete(seq, Some(Arc::new(message)), ctx);
    }
}

impl Handler<Publish> for TopicActor {
    type Result = ResponseActFuture<Self, Result<PublishOutcome, ActorError>>;

    fn handle(&mut self, msg: Publish, ctx: &mut Context<Self>) -> Self::Result {
        let message = msg.0;
        let store = match self.accept(&message, ctx) {
            Err(outcome) => return Box::pin(fut::ready(Ok(outcome))),
            Ok(store) => store,
        };
        if !store {
            self.release(message, ctx);
            let outcome = PublishOutcome {
                id: None,
                expired_on_arrival: false,
            };
            return Box::pin(fut::ready(Ok(outcome)));
        }
        // Reserve the place in publish order now; fill it when the store answers.
        self.stats.enqueued += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        let write = self.store_write(&message, None);
        Box::pin(
            write
                .into_actor(self)
                .map(move |result, act, ctx| match result {
                    Ok(id) => {
                        let stored = TopicMessage {
                            id: Some(id),
                            ..message
                        };
                        act.complete(seq, Some(Arc::new(stored)), ctx);
                        Ok(PublishOutcome {
                            id: Some(id),
                            expired_on_arrival: false,
                        })
                    }
                    Err(e) => {
                        act.complete(seq, None, ctx);
                        Err(e)
                    }
                }),
        )
    }
}

impl Handler<PublishPrepared> for TopicActor {
    type Result = ResponseActFuture<Self, Result<PublishOutcome, ActorError>>;

    fn handle(&mut self, msg: PublishPrepared, ctx: &mut Context<Self>) -> Self::Result {
        let PublishPrepared { message, xid } = msg;
        let store = match self.accept(&message, ctx) {
            Err(outcome) => return Box::pin(fut::ready(Ok(outcome))),
            Ok(store) => store,
        };
        if !store {
            self.prepared.entry(xid).or_default().push(message);
            let outcome = PublishOutcome {
                id: None,
                expired_on_arrival: false,
            };
            return Box::pin(fut::ready(Ok(outcome)));
        }
        let write = self.store_write(&message, Some(xid.clone()));
        Box::pin(write.into_actor(self).map(move |result, act, _| {
            let id = result?;
            let prepared = TopicMessage {
                id: Some(id),
                ..message
            };
            act.prepared.entry(xid).or_default().push(prepared);
            Ok(PublishOutcome {
                id: Some(id),
                expired_on_arrival: false,
            })
        }))
    }
}

impl Handler<CommitPrepared> for TopicActor {
    type Result = ();

    fn handle(&mut self, msg: CommitPrepared, ctx: &mut Context<Self>) {
        let renumbered: HashMap<i64, i64> = msg.renumbered.into_iter().collect();
        for message in self.prepared.remove(&msg.xid).unwrap_or_default() {
            let id = match message.id {
                // A stored message is visible under its new, highest id.
                Some(old) => match renumbered.get(&old) {
                    Some(new) => Some(*new),
                    None => continue,
                },
                None => None,
            };
            self.release(TopicMessage { id, ..message }, ctx);
        }
    }
}

impl Handler<AbortPrepared> for TopicActor {
    type Result = ();

    fn handle(&mut self, msg: AbortPrepared, _: &mut Context<Self>) {
        self.prepared.remove(&msg.xid);
    }
}

impl Handler<Subscribe> for TopicActor {
    type Result = ResponseActFuture<Self, Result<u64, ActorError>>;

    fn handle(&mut self, msg: Subscribe, _: &mut Context<Self>) -> Self::Result {
        let id = self.next_subscription_id();
        let Some(key) = msg.durable else {
            let prefetch = msg.prefetch.unwrap_or(self.policy.topic_prefetch);
            let limit = self.policy.max_pending_non_durable as usize;
            let state = SubscriptionState::non_durable(id, prefetch, limit, msg.deliver);
            self.subscriptions.insert(id, state);
            return Box::pin(fut::ready(Ok(id)));
        };
        let prefetch = msg.prefetch.unwrap_or(self.policy.durable_prefetch);
        let existed = self.durables.contains_key(&key);
        let durable = self.durables.entry(key.clone()).or_default();
        if durable.online.is_some() {
            return Box::pin(fut::ready(Err(ActorError::DurableInUse(format!(
                "{}/{}",
                key.client_id, key.subscription_name
            )))));
        }
        durable.online = Some(id);
        let op = WriteOp::Subscribe {
            container: self.container.clone(),
            key: key.clone(),
            selector: None,
            prioritized: self.policy.prioritized_messages,
        };
        let store = self.store.clone();
        let deliver = msg.deliver;
        Box::pin(async move { store.write(op).await }.into_actor(self).map(
            move |result, act, ctx| match result {
                Ok(WriteOutcome::Subscribed(sub)) => {
                    let mark = sub.marks.iter().map(|(_, m)| *m).min().unwrap_or(0);
                    act.attach(key, mark, prefetch, deliver, id, ctx);
                    Ok(id)
                }
                Ok(other) => unreachable!("a subscribe answers Subscribed, not {other:?}"),
                Err(e) => {
                    if !existed {
                        act.durables.remove(&key);
                    } else if let Some(d) = act.durables.get_mut(&key) {
                        d.online = None;
                    }
                    Err(e)
                }
            },
        ))
    }
}

impl Handler<Ack> for TopicActor {
    type Result = ResponseActFuture<Self, Result<(), ActorError>>;

    fn handle(&mut self, msg: Ack, ctx: &mut Context<Self>) -> Self::Result {
        let Some(sub) = self.subscriptions.get_mut(&msg.subscription) else {
            return Box::pin(fut::ready(Err(ActorError::UnknownSubscription(
                msg.subscription,
            ))));
        };
        let acked: Vec<InFlight> = sub.ack(msg.delivery_id, msg.cumulative);
        let key = sub.durable.clone();
        self.dispatch(msg.subscription, ctx);
        let messages: Vec<(i64, u8)> = acked
            .iter()
            .filter_map(|f| f.store_id.map(|id| (id, f.priority)))
            .collect();
        let (Some(key), false) = (key, messages.is_empty()) else {
            return Box::pin(fut::ready(Ok(())));
        };
        self.cleanup_needed = true;
        self.schedule(ctx);
        let op = WriteOp::Ack {
            container: self.container.clone(),
            key,
            messages,
        };
        let store = self.store.clone();
        Box::pin(async move { store.write(op).await.map(|_| ()) }.into_actor(self))
    }
}

impl Handler<Nack> for TopicActor {
    type Result = Result<(), ActorError>;

    fn handle(&mut self, msg: Nack, ctx: &mut Context<Self>) -> Self::Result {
        let Some(sub) = self.subscriptions.get_mut(&msg.subscription) else {
            return Err(ActorError::UnknownSubscription(msg.subscription));
        };
        sub.release(msg.delivery_id);
        self.dispatch(msg.subscription, ctx);
        Ok(())
    }
}

impl Handler<Detach> for TopicActor {
    type Result = ();

    fn handle(&mut self, msg: Detach, _: &mut Context<Self>) {
        self.detach(msg.subscription);
    }
}

impl Handler<RemoveDurable> for TopicActor {
    type Result = ResponseActFuture<Self, Result<bool, ActorError>>;

    fn handle(&mut self, msg: RemoveDurable, _: &mut Context<Self>) -> Self::Result {
        let key = msg.0;
        if self.durables.get(&key).is_some_and(|d| d.online.is_some()) {
            return Box::pin(fut::ready(Err(ActorError::DurableInUse(format!(
                "{}/{}",
                key.client_id, key.subscription_name
            )))));
        }
        let op = WriteOp::Unsubscribe {
            container: self.container.clone(),
            key: key.clone(),
        };
        let store = self.store.clone();
        Box::pin(async move { store.write(op).await }.into_actor(self).map(
            move |result, act, ctx| {
                let removed = matches!(result?, WriteOutcome::Unsubscribed(true));
                if act.durables.get(&key).is_some_and(|d| d.online.is_none()) {
                    act.durables.remove(&key);
                }
                // Rows only this subscription held are now acked by all (or by none).
                act.cleanup_needed = true;
                act.schedule(ctx);
                Ok(removed)
            },
        ))
    }
}

impl Handler<GetStats> for TopicActor {
    type Result = TopicStats;

    fn handle(&mut self, _: GetStats, _: &mut Context<Self>) -> TopicStats {
        TopicStats {
            expiry_armed: self.expiry_armed,
            online_subscriptions: self.subscriptions.len() as u64,
            durable_subscriptions: self.durables.len() as u64,
            ..self.stats.clone()
        }
    }
}

impl Handler<ExpiryPage> for TopicActor {
    type Result = ();

    fn handle(&mut self, _: ExpiryPage, ctx: &mut Context<Self>) {
        self.page(ctx);
    }
}

impl Handler<CleanupBatch> for TopicActor {
    type Result = ();

    fn handle(&mut self, _: CleanupBatch, ctx: &mut Context<Self>) {
        if !self.stopping && !self.cleanup_in_flight {
            self.cleanup(ctx);
        }
    }
}

impl Handler<RunHousekeeping> for TopicActor {
    type Result = ();

    fn handle(&mut self, _: RunHousekeeping, ctx: &mut Context<Self>) {
        self.tick(ctx);
    }
}

impl Handler<StopHousekeeping> for TopicActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: StopHousekeeping, ctx: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.stop_waiters.push(tx);
        self.wake_stop_waiters();
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}
