//! The topic actor: one per topic.
//!
//! State it owns: its [`DestinationCore`] (publish order, prepared messages, the
//! housekeeping schedule and the shared counters: see [`crate::destination`]), its
//! online subscriptions ([`SubscriptionState`]: cursors, prefetch credit, in-flight
//! deliveries), the list of its durable subscriptions (online or offline), and the
//! counters only a topic keeps.
//!
//! Messages it accepts: those every destination accepts ([`Publish`],
//! [`PublishPrepared`], [`CommitPrepared`], [`AbortPrepared`], [`RunHousekeeping`],
//! [`StopHousekeeping`], [`Retire`], [`StopDestination`], handled in
//! [`crate::destination`]), and [`Subscribe`], [`Ack`],
//! [`Nack`], [`Detach`], [`RemoveDurable`], [`GetStats`]; from itself, the timer tick,
//! [`ExpiryPage`](crate::destination::ExpiryPage) and [`CleanupBatch`]. What it writes
//! itself: its dispatch (every subscription gets every message), its expiry page and
//! its cleanup batch.
//!
//! **Publishing.** A persistent message is stored (through the store actor) when the
//! topic has a durable subscription, and the producer is answered after the commit. A
//! message that is expired on arrival is counted once and neither stored nor
//! dispatched. Messages are released to subscriptions in publish order (a reorder
//! buffer waits for earlier commits), so every cursor sees ids in increasing order.
//!
//! **Selectors.** A subscription may have a [`Selector`]: it is offered only the
//! messages it matches. A durable one stores its selector (re-subscribing with another
//! creates it anew, as JMS requires); its cursor passes the stored messages it does
//! not match and the topic acks them for it, uncounted, so its mark moves over them
//! and cleanup deletes them once the other subscriptions are done. Expiry acks them
//! too but counts only its own.
//!
//! **Expiry.** Every `expire_messages_period` ms the timer starts an expiry run unless
//! one is running, the topic has never seen a message with an expiration (and its
//! store holds none), or no durable subscription is offline. A page reads at most
//! `max_expire_page_size` expired messages in `(expiration, id)` order, after where the
//! page before stopped (`read_expired_after`, one range of the expiration index; without
//! the bodies, `read_expired_keys_after`, when no subscription has a selector), and
//! acks them for every offline durable subscription, in one commit of the store actor.
//! The store moves a mark over the run of done messages directly after it and keeps
//! the others as individual acks, so a mark never passes a live message (the fix for
//! ActiveMQ's JDBC store, where expiring M2 moved `LAST_ACKED_ID` past a live M1), and
//! an expired message behind a live one is found too (as ActiveMQ's KahaDB does with
//! its per-message acks). Then the page's messages that every durable subscription is
//! done with are deleted (`WriteOp::Reclaim`), with their individual acks: a message
//! without a TTL at the head does not keep the expired ones behind it in the store.
//! Each subscription counts a message once: an ack of one already done counts 0. A
//! run starts again from the first expired message; rows still stored then are those
//! an online subscription has yet to take. A full page sends
//! the next page to the topic's own mailbox at once (`ctx.notify`), behind the
//! publishes, acks and dispatch already waiting; a short page ends the run until the
//! next tick. Every page holds a permit of the shared [`HousekeepingBudget`].
//!
//! **Consumer groups.** A group queue bound to the topic ([`BindGroup`]: a virtual
//! topic's `Consumer.A.VirtualTopic.X`) reads the topic's rows, stored once for every
//! group ([`ebb_store::groups`]); its binding is a durable subscription of the topic
//! under [`ebb_store::GROUP_CLIENT_ID`], so the topic's cleanup and expiry keep what
//! the group still needs, but the topic neither dispatches to it nor expires for it
//! (the group's queue does both). The topic stores a persistent message when it has a
//! group, and hands what it releases to the registry for its groups ([`FeedGroups`]),
//! buffered for at most 1 ms so that a run of releases is one feed. A group's
//! committed acks make the topic's cleanup due ([`GroupAcked`]).
//!
//! The topic never writes to the store itself: every write goes to the store actor.
//! Reads (backlog pages, expiry pages) go to the store's pool, bounded in SQL.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use ebb_store::{ExpiredKey, SubscriptionKey};

use crate::destination::sleep::{self, Doze, Drowsiness, ExpireDue, Sleep, Sleeper, Slept};
use crate::destination::{
    self, destination_handlers, now_ms, AckBatch, Completions, DestinationActor, DestinationCore,
    DestinationKey, Gauges, Plan, Published,
};
use crate::error::ActorError;
use crate::housekeeping::HousekeepingBudget;
use crate::messages::*;
use crate::policy::Policy;
use crate::selector::Selector;
use crate::store_actor::StoreHandle;
use crate::subscription::{Dispatch, InFlight, SubscriptionState};

/// Durable subscriptions the topic loads per store read at start.
const SUBSCRIPTION_PAGE: u32 = 500;

/// A durable subscription the topic knows.
#[derive(Debug, Default)]
struct Durable {
    /// The online subscription id, if a consumer is attached.
    online: Option<u64>,
    /// Store ids delivered on an earlier attachment and not acked.
    unacked: HashSet<i64>,
    /// Its selector (stored with it, ActiveMQ's `SELECTOR` column): expiry counts only
    /// the messages it matches.
    selector: Option<Arc<Selector>>,
}

/// See the module documentation.
pub struct TopicActor {
    core: DestinationCore,
    /// Store writes in flight, answered on the actor when done.
    completions: Completions<Self>,
    /// Acks of each durable subscription waiting to be written together (an entry
    /// only while some wait or are being written).
    acks: HashMap<SubscriptionKey, AckBatch<(i64, u8)>>,
    subscriptions: HashMap<u64, SubscriptionState>,
    durables: BTreeMap<SubscriptionKey, Durable>,
    next_subscription: u64,
    stats: TopicStats,
    /// Durable subscriptions to wildcard destinations that match this topic (from the
    /// registry): created in its store at start, before its first message, if they
    /// are not there yet.
    wildcard_durables: Vec<(SubscriptionKey, Option<String>)>,
    /// Shutdown closed its consumers ([`CloseConsumers`]): it takes no new ones.
    closing: bool,
    /// Where the expiry run under way goes on: `(expiration, id)` of the last message
    /// its last page read.
    expiry_after: (i64, i64),
    /// Cleanup is done up to this id: the next batch starts after it (see
    /// [`WriteOp::Cleanup`](ebb_store::WriteOp::Cleanup)); 0 at start.
    cleaned_up_to: i64,
    /// Where it asks to sleep when idle, and when ([`Drowsiness`]).
    drowsiness: Drowsiness,
    /// The consumer groups bound to it ([`BindGroup`]), with the mark each was bound
    /// at: those it has read from the store, fed or not.
    groups: BTreeMap<DestinationKey, i64>,
    /// Where it hands the messages it releases for its groups (the registry), when
    /// groups are fed: without it (virtual topics off) the bound groups wait, unfed,
    /// and the topic stores nothing for them.
    group_feed: Option<Recipient<FeedGroups>>,
    /// [`Self::groups`] as the feed sends them (rebuilt when a group is bound or
    /// unbound).
    fed_groups: Arc<[DestinationKey]>,
    /// Released messages waiting to be fed to the groups: sent together at most
    /// [`GROUP_FEED_DELAY`] after the first, or at once when [`GROUP_FEED_BATCH`]
    /// wait, so that a run of releases is one feed, not one per message.
    feed_buffer: Vec<Arc<TopicMessage>>,
}

/// Longest a released message waits to be fed to the topic's consumer groups: the
/// latency a group's consumer may see beyond a topic subscriber's.
const GROUP_FEED_DELAY: Duration = Duration::from_millis(1);

/// Messages fed to the groups in one go at most (a full buffer is fed at once).
const GROUP_FEED_BATCH: usize = 1_000;

/// Before every expired message in `(expiration, id)` order (every expiration is above
/// 0): where an expiry run starts.
const FIRST_EXPIRED: (i64, i64) = (0, i64::MAX);

/// What one expiry page did.
#[derive(Debug, Default)]
struct ExpiryPageDone {
    /// Expired messages it read (at most `max_expire_page_size`).
    rows: u64,
    /// Whether the page was full: more may wait.
    more: bool,
    /// `(expiration, id)` of its last message.
    next: (i64, i64),
    /// Messages newly expired, summed over subscriptions (a message expired for 100
    /// subscriptions counts 100).
    newly: u64,
    /// Messages deleted: every subscription was done with them.
    reclaimed: u64,
    ticket: Option<u64>,
}

/// The consumer a durable subscription is attached to: its prefetch, where its
/// deliveries go, and its selector.
struct Attaching {
    prefetch: u32,
    deliver: tokio::sync::mpsc::Sender<Delivery>,
    selector: Option<Arc<Selector>>,
    handed: Option<Handed>,
}

/// The next cleanup batch (sent by the topic to itself).
#[derive(Message)]
#[rtype(result = "()")]
pub struct CleanupBatch;

/// Messages one cleanup batch deletes at most.
const CLEANUP_BATCH: u32 = 1000;

impl TopicActor {
    /// Topic `key`, with `policy`, writing through `store`, its expiry pages sharing
    /// `budget`.
    pub fn new(
        key: DestinationKey,
        policy: Policy,
        store: StoreHandle,
        budget: HousekeepingBudget,
    ) -> Self {
        Self {
            core: DestinationCore::new(key, policy, store, budget),
            completions: Completions::default(),
            acks: HashMap::new(),
            subscriptions: HashMap::new(),
            durables: BTreeMap::new(),
            next_subscription: 1,
            stats: TopicStats::default(),
            wildcard_durables: Vec::new(),
            closing: false,
            expiry_after: FIRST_EXPIRED,
            cleaned_up_to: 0,
            drowsiness: Drowsiness::default(),
            groups: BTreeMap::new(),
            group_feed: None,
            fed_groups: Arc::from(Vec::new()),
            feed_buffer: Vec::new(),
        }
    }

    /// Hands the messages it releases to its consumer groups through `registry`
    /// ([`FeedGroups`]), and stores persistent messages for them: consumer groups
    /// stored once ([`ebb_store::groups`]).
    pub fn with_group_feed(mut self, registry: Recipient<FeedGroups>) -> Self {
        self.group_feed = Some(registry);
        self
    }

    /// Whether it feeds groups now (it has a feed and a bound group).
    fn feeds_groups(&self) -> bool {
        self.group_feed.is_some() && !self.groups.is_empty()
    }

    /// Rebuilds [`Self::fed_groups`] after a change of [`Self::groups`].
    fn groups_changed(&mut self) {
        self.fed_groups = self.groups.keys().cloned().collect();
    }

    /// Buffers `messages` (released, in order) for its consumer groups, fed within
    /// [`GROUP_FEED_DELAY`].
    fn feed_groups(&mut self, messages: Vec<Arc<TopicMessage>>, ctx: &mut Context<Self>) {
        if !self.feeds_groups() || messages.is_empty() {
            return;
        }
        if self.feed_buffer.is_empty() {
            ctx.run_later(GROUP_FEED_DELAY, |act, _| act.flush_group_feed());
        }
        self.feed_buffer.extend(messages);
        if self.feed_buffer.len() >= GROUP_FEED_BATCH {
            // The timer then finds the buffer empty, or a later run to feed with it.
            self.flush_group_feed();
        }
    }

    /// Hands the buffered messages to its consumer groups: a stored one to the groups
    /// bound before it was stored (above their marks), a non-persistent one to every
    /// group.
    fn flush_group_feed(&mut self) {
        let messages = std::mem::take(&mut self.feed_buffer);
        if messages.is_empty() {
            return;
        }
        let Some(feed) = self.group_feed.as_ref().filter(|_| !self.groups.is_empty()) else {
            return;
        };
        let highest = self.groups.values().copied().max().unwrap_or(0);
        if messages.iter().all(|m| m.id.is_none_or(|id| id > highest)) {
            feed.do_send(FeedGroups {
                groups: Arc::clone(&self.fed_groups),
                messages: messages.into(),
            });
            return;
        }
        // Released after a group was bound, stored before (rare: a bind between a
        // store write and its release): each group gets those above its own mark.
        for (group, mark) in &self.groups {
            let theirs: Vec<Arc<TopicMessage>> = messages
                .iter()
                .filter(|m| m.id.is_none_or(|id| id > *mark))
                .cloned()
                .collect();
            if !theirs.is_empty() {
                feed.do_send(FeedGroups {
                    groups: Arc::from(vec![group.clone()]),
                    messages: theirs.into(),
                });
            }
        }
    }

    /// Asks `registry` to let it sleep once it has been idle for its policy's
    /// `inactive_timeout_before_sleep` (see [`crate::destination::sleep`]).
    pub fn with_sleeper(mut self, registry: Recipient<Doze>) -> Self {
        self.drowsiness = Drowsiness::new(Some(registry));
        self
    }

    /// Reports its expiries through `events` (advisory topics).
    pub fn with_events(mut self, events: crate::events::Events) -> Self {
        self.core.events = events;
        self
    }

    /// Publishes its counters and gauges to `published`, its entry on the broker's
    /// [`crate::destination::StatsBoard`], as it works.
    pub fn with_published(mut self, published: Arc<Published>) -> Self {
        self.core.publish_to(published);
        self.publish_gauges();
        self
    }

    /// Its gauges now: a topic counts a delivery as consumed, and counts no ack in
    /// flight (its subscriptions do, each).
    fn gauges(&self) -> Gauges {
        Gauges {
            dequeued: self.core.counters().dispatched,
            consumers: self.subscriptions.len() as u64,
            ..Gauges::default()
        }
    }

    /// Publishes [`Self::gauges`]: called wherever deliveries or subscriptions change.
    fn publish_gauges(&self) {
        self.core.published().publish_gauges(self.gauges());
    }

    /// Its [`Stats`] now; in debug builds, checks that what it published says the
    /// same.
    fn stats_now(&self) -> Stats {
        let g = self.gauges();
        let stats = Stats {
            counters: self.core.counters(),
            dequeued: g.dequeued,
            consumers: g.consumers,
            ..Stats::default()
        };
        destination::debug_check_published(self.core.published(), &stats);
        stats
    }

    /// The topic also holds these durable subscriptions (key, selector text) of
    /// wildcard destinations that match it: [`BrokerActor`](crate::broker::BrokerActor)
    /// gives them, so that the topic stores what they need from its first message on,
    /// also while they are offline.
    pub fn with_wildcard_durables(
        mut self,
        durables: Vec<(SubscriptionKey, Option<String>)>,
    ) -> Self {
        self.wildcard_durables = durables;
        self
    }

    /// A non-durable subscription, as [`Subscribe`] asks, before the topic is started
    /// (so it gets every message the topic ever takes): what the registry does for a
    /// wildcard subscription that matches a new topic. Errors:
    /// [`ActorError::Invalid`] for a durable or exclusive one.
    pub fn subscribe_before_start(&mut self, msg: Subscribe) -> Result<u64, ActorError> {
        if msg.durable.is_some() || msg.exclusive {
            return Err(ActorError::Invalid(
                "only a non-durable, non-exclusive subscription attaches before a topic starts"
                    .into(),
            ));
        }
        Ok(self.add_non_durable(msg))
    }

    /// Adds the non-durable subscription `msg` asks for; its id.
    fn add_non_durable(&mut self, msg: Subscribe) -> u64 {
        let id = self.next_subscription_id();
        let prefetch = msg.prefetch.unwrap_or(self.core.policy.topic_prefetch);
        let limit = self.core.policy.max_pending_non_durable as usize;
        let mut state = SubscriptionState::non_durable(id, prefetch, limit, msg.deliver);
        if let Some(acks) = msg.auto_acks {
            state = state.with_auto_acks(acks);
        }
        if let Some(selector) = msg.selector {
            state = state.with_selector(selector);
        }
        if let Some(origin) = msg.no_local {
            state = state.no_local(origin);
        }
        self.subscriptions.insert(id, state.with_handed(msg.handed));
        self.publish_gauges();
        id
    }

    /// Delivers what subscription `id` can take now, acks what expired on the way,
    /// and starts a store read if its cursor needs one.
    fn dispatch(&mut self, id: u64, ctx: &mut Context<Self>) {
        self.dispatch_at(id, now_ms(), ctx);
    }

    /// [`Self::dispatch`] with the clock read once by the caller (`now_ms`, epoch ms),
    /// for a caller that dispatches to every subscription.
    fn dispatch_at(&mut self, id: u64, now_ms: i64, ctx: &mut Context<Self>) {
        let consumers = self.subscriptions.len() as u64;
        let Some(sub) = self.subscriptions.get_mut(&id) else {
            return;
        };
        let Dispatch {
            deliveries,
            expired,
        } = sub.take_ready(now_ms);
        if !deliveries.is_empty() {
            self.core.counters_mut().dispatched += deliveries.len() as u64;
            // The topic's `dequeued` is its deliveries.
            let gauges = Gauges {
                dequeued: self.core.counters().dispatched,
                consumers,
                ..Gauges::default()
            };
            self.core.published().publish_gauges(gauges);
        }
        let skipped = sub.take_skipped();
        let alive = sub.send(deliveries);
        if !skipped.is_empty() {
            if let Some(key) = sub.durable.clone() {
                self.ack_skipped(key, skipped, ctx);
            }
        }
        let Some(sub) = self.subscriptions.get_mut(&id) else {
            return;
        };
        if !alive {
            self.detach(id);
            return;
        }
        let read = sub.read_request();
        if expired.is_empty() && read.is_none() {
            return;
        }
        let key = sub.durable.clone();
        self.expired_at_dispatch(key.as_ref(), expired, ctx);
        let (Some(read), Some(key)) = (read, key) else {
            return;
        };
        let store = Arc::clone(self.core.store.store());
        let container = self.core.container.clone();
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
                    tracing::warn!(topic = %act.core.container, error = %e, "backlog read failed; retrying in 1 s");
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

    /// Acks, for durable subscription `key`, the stored messages its selector does not
    /// match that its cursor passed: they are not its messages, so they are acked
    /// without being counted (neither delivered nor expired for it), together with its
    /// other acks, and its mark moves over them.
    fn ack_skipped(
        &mut self,
        key: SubscriptionKey,
        skipped: Vec<(i64, u8)>,
        ctx: &mut Context<Self>,
    ) {
        // Nobody waits for this answer: a failed write leaves them un-acked, and the
        // cursor passes them again on the next attachment.
        drop(self.acks.entry(key.clone()).or_default().add(skipped));
        self.write_acks(key, ctx);
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
                _ => self.core.count_expired(1),
            }
        }
        let (Some(key), false) = (key, acks.is_empty()) else {
            return;
        };
        let (store, container, key) = (
            self.core.store.clone(),
            self.core.container.clone(),
            key.clone(),
        );
        ctx.spawn(async move { store.ack(container, key, acks).await }.into_actor(self).map(|result, act, ctx| {
            match result {
                Ok(newly_acked) => {
                    act.core.count_expired(newly_acked);
                    act.core.schedule.need_cleanup();
                    destination::schedule(act, ctx);
                }
                Err(e) => tracing::warn!(topic = %act.core.container, error = %e, "ack of expired messages failed"),
            }
        }));
    }

    fn detach(&mut self, id: u64) {
        let Some(sub) = self.subscriptions.remove(&id) else {
            return;
        };
        self.publish_gauges();
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
        let all = self.core.policy.expire_online_durable_subscriptions;
        self.durables
            .iter()
            .filter(|(_, d)| all || d.online.is_none())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Runs one expiry page (see the module documentation).
    fn page(&mut self, ctx: &mut Context<Self>) {
        let subscriptions = self.expiry_subscriptions();
        let selectors: HashMap<SubscriptionKey, Arc<Selector>> = subscriptions
            .iter()
            .filter_map(|k| {
                let selector = self.durables.get(k)?.selector.clone()?;
                Some((k.clone(), selector))
            })
            .collect();
        if subscriptions.is_empty() {
            self.expiry_after = FIRST_EXPIRED;
            destination::end_run(self, ctx);
            return;
        }
        if !destination::begin_page(self, ctx) {
            return;
        }
        let (store, budget) = (self.core.store.clone(), self.core.budget.clone());
        let container = self.core.container.clone();
        let limit = self.core.policy.max_expire_page_size.max(1);
        let after = self.expiry_after;
        let fut = async move {
            let Some(permit) = budget.acquire().await else {
                return Ok(ExpiryPageDone::default());
            };
            // Bodies are read only when a selector needs the headers.
            let (page, messages) =
                read_expired_page(&store, &container, after, limit, !selectors.is_empty()).await?;
            let mut done = ExpiryPageDone {
                rows: page.len() as u64,
                more: page.len() >= limit as usize,
                next: page.last().map_or(after, |m| (m.expiration, m.id)),
                ticket: Some(permit.ticket),
                ..Default::default()
            };
            if page.is_empty() {
                return Ok(done);
            }
            // Every expired message is done for every subscription expiry works for.
            // The store moves a mark over the run directly after it and keeps the rest
            // as individual acks: a mark never passes a live message.
            let mut acks = Vec::new();
            for key in subscriptions {
                // A selector's subscription: messages it does not match are not its
                // own, so they are acked (its mark moves) but not counted as expired.
                let (mine, others) = split_by_selector(selectors.get(&key), &page, &messages);
                if !others.is_empty() {
                    let ack = store.ack_expired(container.clone(), key.clone(), others);
                    acks.push((false, ack));
                }
                acks.push((true, store.ack_expired(container.clone(), key, mine)));
            }
            // Then the messages nobody needs any more go, wherever they sit. Sent
            // together with the acks (after them: the futures are first polled in
            // order), so the store actor commits the page in one transaction; were the
            // reclaim applied first, it would delete less, and the next run would
            // take the rest.
            let ids = page.iter().map(|m| m.id).collect();
            let reclaim = store.reclaim(container.clone(), ids);
            let (counted, futures): (Vec<bool>, Vec<_>) = acks.into_iter().unzip();
            let (newly, reclaimed) =
                futures::future::try_join(futures::future::try_join_all(futures), reclaim).await?;
            done.newly = counted
                .iter()
                .zip(newly)
                .filter(|(counted, _)| **counted)
                .map(|(_, n)| n)
                .sum();
            done.reclaimed = reclaimed.len() as u64;
            Ok::<_, ActorError>(done)
        };
        ctx.spawn(fut.into_actor(self).map(|result, act, ctx| match result {
            Ok(done) => {
                act.core.count_expired(done.newly);
                act.stats.cleaned_up += done.reclaimed;
                // The next page goes on from this one; a run that ended starts again
                // from the first expired message next time.
                act.expiry_after = if done.more { done.next } else { FIRST_EXPIRED };
                if done.newly > done.reclaimed {
                    act.core.schedule.need_cleanup();
                }
                destination::page_finished(act, ctx, done.rows, done.ticket, done.more);
            }
            Err(e) => {
                act.expiry_after = FIRST_EXPIRED;
                destination::page_failed(act, ctx, &e)
            }
        }));
    }

    /// Deletes one bounded batch of messages every durable subscription has acked; a
    /// full batch sends the next one through the mailbox.
    fn cleanup(&mut self, ctx: &mut Context<Self>) {
        if !self.core.schedule.start_cleanup() {
            return;
        }
        // With no durable subscription left, what is stored is needed by nobody.
        let orphans_up_to = (self.durables.is_empty() && self.groups.is_empty())
            .then(|| self.core.store.store().last_assigned_id());
        let (store, container) = (self.core.store.clone(), self.core.container.clone());
        let after = self.cleaned_up_to;
        let batch = async move {
            store
                .cleanup(container, CLEANUP_BATCH, after, orphans_up_to)
                .await
        };
        ctx.spawn(batch.into_actor(self).map(|result, act, ctx| {
            act.stats.cleanup_batches += 1;
            // A full batch chains the next through the mailbox; a failed one waits
            // for the next tick.
            let (full, retry) = match result {
                Ok((n, reached)) => {
                    act.cleaned_up_to = reached;
                    act.stats.cleaned_up += n;
                    (n >= u64::from(CLEANUP_BATCH), false)
                }
                Err(e) => {
                    tracing::warn!(topic = %act.core.container, error = %e, "cleanup failed; the next tick tries again");
                    (false, true)
                }
            };
            act.core.schedule.cleanup_finished(full || retry);
            if full {
                ctx.notify(CleanupBatch);
            }
            act.core.schedule.wake_stop_waiters();
            destination::idle_if_done(act, ctx);
        }));
    }

    /// Loads durable subscriptions and whether any message expires (before any other
    /// message is handled).
    fn load(&mut self, ctx: &mut Context<Self>) {
        let store = Arc::clone(self.core.store.store());
        let writer = self.core.store.clone();
        let container = self.core.container.clone();
        let wildcard_durables = std::mem::take(&mut self.wildcard_durables);
        let prioritized = self.core.policy.prioritized_messages;
        let fut = async move {
            let mut keys = Vec::new();
            let mut after: Option<SubscriptionKey> = None;
            loop {
                let page = store
                    .list_subscriptions(&container, after.as_ref(), SUBSCRIPTION_PAGE)
                    .await?;
                let full = page.len() == SUBSCRIPTION_PAGE as usize;
                after = page.last().map(|s| s.key.clone());
                keys.extend(page.into_iter().map(|s| {
                    let mark = s.marks.iter().map(|(_, m)| *m).min().unwrap_or(0);
                    (s.key, s.selector, mark)
                }));
                if !full {
                    break;
                }
            }
            // Those of wildcard subscriptions it does not hold yet: created now,
            // through the store actor, before any message is handled.
            for (key, selector) in wildcard_durables {
                if keys.iter().any(|(k, ..)| *k == key) {
                    continue;
                }
                let sub = writer
                    .subscribe(
                        container.clone(),
                        key.clone(),
                        selector.clone(),
                        prioritized,
                    )
                    .await?;
                tracing::info!(topic = %container, client_id = %key.client_id,
                    subscription = %key.subscription_name, "durable wildcard subscription joined a new topic");
                let mark = sub.marks.iter().map(|(_, m)| *m).min().unwrap_or(0);
                keys.push((sub.key, selector, mark));
            }
            let armed = store.has_expiring(&container).await?;
            Ok::<_, ActorError>((keys, armed))
        };
        ctx.wait(fut.into_actor(self).map(|result, act, ctx| {
            match result {
                Ok((keys, armed)) => {
                    if !keys.is_empty() {
                        act.core.schedule.need_cleanup();
                    }
                    let (groups, keys): (Vec<_>, Vec<_>) =
                        keys.into_iter().partition(|(key, ..)| key.is_group());
                    act.groups = groups
                        .into_iter()
                        .filter_map(|(key, _, mark)| {
                            let group = DestinationKey::from_container(&key.subscription_name).ok();
                            if group.is_none() {
                                tracing::warn!(topic = %act.core.container, group = %key.subscription_name,
                                    "a bound consumer group's name does not parse; it is not fed");
                            }
                            group.map(|g| (g, mark))
                        })
                        .collect();
                    act.groups_changed();
                    act.durables = keys
                        .into_iter()
                        .map(|(key, text, _)| {
                            let selector = text.and_then(|text| match Selector::parse(&text) {
                                Ok(s) => Some(Arc::new(s)),
                                Err(e) => {
                                    tracing::warn!(topic = %act.core.container, client_id = %key.client_id,
                                        subscription = %key.subscription_name, error = %e,
                                        "stored selector does not parse; expiry counts every message for it");
                                    None
                                }
                            });
                            let durable = Durable {
                                selector,
                                ..Durable::default()
                            };
                            (key, durable)
                        })
                        .collect();
                    if armed {
                        act.core.schedule.arm();
                    }
                }
                Err(e) => {
                    // Without its durable subscriptions the topic would not store
                    // what they need: it refuses to run; the next use starts it again.
                    tracing::error!(topic = %act.core.container, error = %e, "cannot load durable subscriptions; topic stopped");
                    ctx.stop();
                    return;
                }
            }
            destination::schedule(act, ctx);
        }));
    }

    /// Puts durable subscription `key` online as subscription `id` for `consumer`,
    /// its backlog starting after `mark` (the lowest of its marks), and dispatches.
    fn attach(
        &mut self,
        key: SubscriptionKey,
        mark: i64,
        id: u64,
        consumer: Attaching,
        ctx: &mut Context<Self>,
    ) {
        let Attaching {
            prefetch,
            deliver,
            selector,
            handed,
        } = consumer;
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
            self.core.policy.prioritized_messages,
            deliver,
        )
        .with_redeliveries(unacked)
        .with_handed(handed)
        .with_cache_high_water(self.core.policy.cursor_memory_high_water_mark);
        let state = match selector {
            Some(selector) => state.with_selector(selector),
            None => state,
        };
        self.subscriptions.insert(id, state);
        self.publish_gauges();
        self.dispatch(id, ctx);
    }
}

impl TopicActor {
    /// Writes the acks of durable subscription `key` gathered while its last ack write
    /// was in flight, in one write, unless one is in flight ([`AckBatch`]); once they
    /// are committed a cleanup batch is due.
    fn write_acks(&mut self, key: SubscriptionKey, ctx: &mut Context<Self>) {
        let Some(batch) = self.acks.get_mut(&key) else {
            return;
        };
        let Some(mut write) = batch.take() else {
            return;
        };
        let messages = std::mem::take(&mut write.items);
        if messages.is_empty() {
            // Only waiters for what came before (`CloseConsumers`): that is committed.
            write.answer(&Ok(()));
            batch.finished();
            if batch.is_idle() {
                self.acks.remove(&key);
            }
            return self.write_acks(key, ctx);
        }
        let (store, container) = (self.core.store.clone(), self.core.container.clone());
        let written = key.clone();
        let ack = async move { store.ack(container, written, messages).await.map(drop) };
        self.completions
            .when_done(ctx, ack, move |result, act, ctx| {
                write.answer(&result);
                // Cleanup is due once the acks are committed: a batch that ran
                // before would not see them.
                if result.is_ok() {
                    act.core.schedule.need_cleanup();
                    destination::schedule(act, ctx);
                }
                if let Some(batch) = act.acks.get_mut(&key) {
                    batch.finished();
                    if batch.is_idle() {
                        act.acks.remove(&key);
                    } else {
                        act.write_acks(key, ctx);
                    }
                }
            });
    }
}

impl Actor for TopicActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // The timer starts once the load shows work for it (see `schedule`).
        self.load(ctx);
        Drowsiness::start(self, ctx);
    }

    /// What is buffered for the groups goes to them even as it stops (its flush may
    /// not be handled any more): a running group's cursor may be waiting for it.
    fn stopped(&mut self, _: &mut Context<Self>) {
        self.flush_group_feed();
    }
}

/// Sleeping when idle (see [`crate::destination::sleep`]): a topic whose durable
/// subscriptions are all offline sleeps with their backlogs in the store; the next
/// actor reads them at start as after a restart.
impl Sleeper for TopicActor {
    fn drowsiness(&mut self) -> &mut Drowsiness {
        &mut self.drowsiness
    }

    /// No subscription online, no durable one holding deliveries of an earlier
    /// attachment not acked (their redelivered flag lives only here), no ack, write or
    /// open transaction in flight, no expiry run or cleanup batch under way, and no
    /// cleanup due while the timer would run it (rows every durable subscription has
    /// acked are deleted before it sleeps).
    fn may_sleep(&self) -> bool {
        let core = &self.core;
        let cleanup_due = core.schedule.cleanup_due() && core.policy.expire_messages_period > 0;
        !core.retired
            && !self.closing
            && self.subscriptions.is_empty()
            && self
                .durables
                .values()
                .all(|d| d.online.is_none() && d.unacked.is_empty())
            && self.acks.is_empty()
            && self.feed_buffer.is_empty()
            && self.completions.in_flight() == 0
            && core.prepared.transactions() == 0
            && core.prepared_writes == 0
            && core.order.waiting() == 0
            && core.fence.is_idle()
            && !core.schedule.run_active()
            && !core.schedule.cleanup_in_flight()
            && !cleanup_due
    }

    /// Messages in and out, expiries, cleanup.
    fn activity(&self) -> u64 {
        let c = self.core.counters();
        c.enqueued
            .wrapping_add(c.dispatched)
            .wrapping_add(c.expired)
            .wrapping_add(self.stats.cleaned_up)
    }
}

impl Handler<Sleep> for TopicActor {
    type Result = ResponseFuture<Result<Slept, ActorError>>;

    fn handle(&mut self, _: Sleep, ctx: &mut Context<Self>) -> Self::Result {
        sleep::sleep(self, ctx)
    }
}

impl Handler<ExpireDue> for TopicActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: ExpireDue, ctx: &mut Context<Self>) -> Self::Result {
        sleep::expire_due(self, ctx)
    }
}

impl DestinationActor for TopicActor {
    fn core(&mut self) -> &mut DestinationCore {
        &mut self.core
    }

    fn completions(&mut self) -> &mut Completions<Self> {
        &mut self.completions
    }

    /// A persistent message is stored when some durable subscription needs it; a
    /// stored message with an expiration arms expiry.
    fn plan(&self, message: &TopicMessage) -> Plan {
        let store = message.persistent && (!self.durables.is_empty() || self.feeds_groups());
        Plan {
            store,
            arm_expiry: store && message.expiration > 0,
        }
    }

    /// Offers each message to every subscription, in order, and dispatches.
    fn release(&mut self, messages: Vec<Arc<TopicMessage>>, ctx: &mut Context<Self>) {
        if messages.is_empty() {
            return;
        }
        // Each message is offered to every subscription and dispatched at once (so a
        // subscription with credit never holds more than one of them waiting), with
        // the clock read once for them all.
        let now = now_ms();
        let ids: Vec<u64> = self.subscriptions.keys().copied().collect();
        for message in &messages {
            for &id in &ids {
                if let Some(sub) = self.subscriptions.get_mut(&id) {
                    self.stats.discarded += sub.offer(message);
                }
                self.dispatch_at(id, now, ctx);
            }
        }
        self.feed_groups(messages, ctx);
    }

    /// Starts a cleanup batch if one is due, and an expiry run if expiry is armed and
    /// some durable subscription is one expiry works for.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        self.core.counters_mut().ticks += 1;
        self.cleanup(ctx);
        let all = self.core.policy.expire_online_durable_subscriptions;
        let durables = &self.durables;
        let has_work = || durables.values().any(|d| all || d.online.is_none());
        if self.core.schedule.start_run(has_work) {
            self.core.counters_mut().expiry_runs += 1;
            self.page(ctx);
        }
    }

    fn expiry_page(&mut self, ctx: &mut Context<Self>) {
        self.page(ctx);
    }

    fn in_use(&self) -> Option<String> {
        let n = self.subscriptions.len();
        (n > 0).then(|| format!("{n} subscriptions are online"))
    }

    /// Answers the [`ExpireDue`]s waiting for the run (see [`sleep::run_ended`]).
    fn run_ended(&mut self, _: &mut Context<Self>) {
        sleep::run_ended(self);
    }
}

destination_handlers!(TopicActor);

/// One expiry page of `container` after `after`, at most `limit` rows: the keys, and
/// with `bodies` (a selector needs the headers) the messages too.
async fn read_expired_page(
    store: &StoreHandle,
    container: &str,
    after: (i64, i64),
    limit: u32,
    bodies: bool,
) -> Result<(Vec<ExpiredKey>, Vec<Arc<ebb_store::StoredMessage>>), ActorError> {
    if !bodies {
        let keys = store
            .store()
            .read_expired_keys_after(container, now_ms(), after, limit)
            .await?;
        return Ok((keys, Vec::new()));
    }
    let messages = store
        .store()
        .read_expired_after(container, now_ms(), after, limit)
        .await?;
    Ok((
        messages.iter().map(|m| ExpiredKey::of(m)).collect(),
        messages,
    ))
}

/// The `(id, priority)` of an expired page a subscription's `selector` matches, and
/// of those it does not (every one of `page` matches without a selector; with one,
/// `messages` holds the page's messages).
#[allow(clippy::type_complexity)]
fn split_by_selector(
    selector: Option<&Arc<Selector>>,
    page: &[ExpiredKey],
    messages: &[Arc<ebb_store::StoredMessage>],
) -> (Vec<(i64, u8)>, Vec<(i64, u8)>) {
    let Some(selector) = selector else {
        return (
            page.iter().map(|m| (m.id, m.priority)).collect(),
            Vec::new(),
        );
    };
    let (mut mine, mut others) = (Vec::new(), Vec::new());
    for m in messages {
        let matched = selector.matches(&TopicMessage::from_stored(m));
        let to = if matched { &mut mine } else { &mut others };
        to.push((m.id, m.priority));
    }
    (mine, others)
}

/// Writes durable subscription `key` of `container` with selector `text`, once the
/// acks of its last consumer (`flushed`) are committed, so the mark read back is past
/// them. Returns it as stored, and whether it was re-created: re-subscribed with
/// another selector, JMS deletes the subscription and creates it anew (its backlog
/// goes; case DUR-11, ActiveMQ's `hasDurableSubChanged`).
async fn store_durable(
    store: StoreHandle,
    container: String,
    stored_key: SubscriptionKey,
    text: Option<String>,
    prioritized: bool,
    flushed: Option<crate::destination::AckAnswer>,
) -> Result<(ebb_store::DurableSubscription, bool), ActorError> {
    if let Some(flushed) = flushed {
        // Its failure is the failed acks' (answered to them): their messages
        // are delivered again.
        let _ = flushed.await;
    }
    let sub = store
        .subscribe(
            container.clone(),
            stored_key.clone(),
            text.clone(),
            prioritized,
        )
        .await?;
    if sub.selector == text {
        return Ok((sub, false));
    }
    // Re-subscribed with another selector: JMS deletes the subscription and
    // creates it anew (its backlog goes; case DUR-11, ActiveMQ's
    // `hasDurableSubChanged`).
    tracing::info!(topic = %container, client_id = %stored_key.client_id,
        subscription = %stored_key.subscription_name, old = ?sub.selector, new = ?text,
        "durable subscription re-created: its selector changed");
    store
        .unsubscribe(container.clone(), stored_key.clone())
        .await?;
    let sub = store
        .subscribe(container, stored_key, text, prioritized)
        .await?;
    Ok((sub, true))
}

impl Handler<Subscribe> for TopicActor {
    type Result = ResponseActFuture<Self, Result<u64, ActorError>>;

    fn handle(&mut self, msg: Subscribe, ctx: &mut Context<Self>) -> Self::Result {
        if self.closing {
            return Box::pin(fut::ready(Err(ActorError::ShuttingDown)));
        }
        if self.core.retired {
            return Box::pin(fut::ready(Err(self.core.retired_error())));
        }
        if msg.exclusive {
            return Box::pin(fut::ready(Err(ActorError::Invalid(
                "an exclusive consumer is for queues: every topic subscription gets every message"
                    .into(),
            ))));
        }
        let Some(key) = msg.durable.clone() else {
            return Box::pin(fut::ready(Ok(self.add_non_durable(msg))));
        };
        let id = self.next_subscription_id();
        if msg.no_local.is_some() {
            return Box::pin(fut::ready(Err(ActorError::Invalid(
                "noLocal on a durable subscription is not supported: a stored message does not keep the connection that sent it".into(),
            ))));
        }
        let selector = msg.selector;
        let prefetch = msg.prefetch.unwrap_or(self.core.policy.durable_prefetch);
        let existed = self.durables.contains_key(&key);
        let durable = self.durables.entry(key.clone()).or_default();
        if durable.online.is_some() {
            return Box::pin(fut::ready(Err(ActorError::DurableInUse(format!(
                "{}/{}",
                key.client_id, key.subscription_name
            )))));
        }
        durable.online = Some(id);
        // Acks of its last consumer may still wait to be written: the mark is read
        // (by `store.subscribe`, through the store actor) after they commit, so what
        // was acked is not delivered again.
        let flushed = self.acks.get_mut(&key).map(|batch| batch.add([]));
        if flushed.is_some() {
            self.write_acks(key.clone(), ctx);
        }
        let text = selector.as_ref().map(|s| s.text().to_string());
        let write = store_durable(
            self.core.store.clone(),
            self.core.container.clone(),
            key.clone(),
            text,
            self.core.policy.prioritized_messages,
            flushed,
        );
        let (deliver, handed) = (msg.deliver, msg.handed);
        Box::pin(
            write
                .into_actor(self)
                .map(move |result, act, ctx| match result {
                    Ok((sub, replaced)) => {
                        if let Some(d) = act.durables.get_mut(&key) {
                            d.selector = selector.clone();
                            if replaced {
                                d.unacked.clear();
                            }
                        }
                        if replaced {
                            act.core.schedule.need_cleanup();
                            destination::schedule(act, ctx);
                        }
                        let mark = sub.marks.iter().map(|(_, m)| *m).min().unwrap_or(0);
                        let consumer = Attaching {
                            prefetch,
                            deliver,
                            selector,
                            handed,
                        };
                        act.attach(key, mark, id, consumer, ctx);
                        Ok(id)
                    }
                    Err(e) => {
                        if !existed {
                            act.durables.remove(&key);
                        } else if let Some(d) = act.durables.get_mut(&key) {
                            d.online = None;
                        }
                        Err(e)
                    }
                }),
        )
    }
}

impl TopicActor {
    /// The in-memory part of an ack ([`Ack`], [`TakeAck`]): the deliveries leave the
    /// subscription's in-flight set; returns, for a durable subscription, its key and
    /// the `(store id, priority)` of the stored ones, which the ack writes.
    #[allow(clippy::type_complexity)]
    fn ack_in_memory(
        &mut self,
        subscription: u64,
        delivery_id: u64,
        cumulative: bool,
        ctx: &mut Context<Self>,
    ) -> Result<Option<(SubscriptionKey, Vec<(i64, u8)>)>, ActorError> {
        let Some(sub) = self.subscriptions.get_mut(&subscription) else {
            return Err(ActorError::UnknownSubscription(subscription));
        };
        let acked: Vec<InFlight> = sub.ack(delivery_id, cumulative);
        if acked.is_empty() && !cumulative {
            return Err(ActorError::not_awaiting_ack(delivery_id));
        }
        let key = sub.durable.clone();
        self.dispatch(subscription, ctx);
        let messages: Vec<(i64, u8)> = acked
            .iter()
            .filter_map(|f| f.store_id.map(|id| (id, f.priority)))
            .collect();
        Ok(key
            .filter(|_| !messages.is_empty())
            .map(|key| (key, messages)))
    }
}

impl Handler<TakeAck> for TopicActor {
    type Result = Result<Vec<TakenAck>, ActorError>;

    fn handle(&mut self, msg: TakeAck, ctx: &mut Context<Self>) -> Self::Result {
        let taken = self.ack_in_memory(msg.subscription, msg.delivery_id, msg.cumulative, ctx)?;
        Ok(taken
            .map(|(key, messages)| TakenAck {
                write: ebb_store::WriteOp::Ack {
                    container: self.core.container.clone(),
                    key,
                    messages,
                },
                stored: ctx.address().recipient(),
            })
            .into_iter()
            .collect())
    }
}

impl Handler<AcksStored> for TopicActor {
    type Result = ();

    /// As after its own ack write: cleanup is due once acks are committed.
    fn handle(&mut self, msg: AcksStored, ctx: &mut Context<Self>) {
        if msg.committed {
            self.core.schedule.need_cleanup();
            destination::schedule(self, ctx);
        }
    }
}

impl Handler<Ack> for TopicActor {
    // Answered at once when nothing is to be written (a non-durable subscription);
    // else after the commit of the write that holds the ack (`AckBatch`: acks of one
    // durable subscription go together), from a task of its own (not a future in the
    // actor's context: see `Completions`).
    type Result = Response<Result<(), ActorError>>;

    fn handle(&mut self, msg: Ack, ctx: &mut Context<Self>) -> Self::Result {
        let taken = self.ack_in_memory(msg.subscription, msg.delivery_id, msg.cumulative, ctx);
        let (key, messages) = match taken {
            Ok(Some(taken)) => taken,
            Ok(None) => return Response::reply(Ok(())),
            Err(e) => return Response::reply(Err(e)),
        };
        let answer = self.acks.entry(key.clone()).or_default().add(messages);
        self.write_acks(key, ctx);
        Response::fut(async move { answer.await.unwrap_or(Err(ActorError::Closed)) })
    }
}

impl Handler<Nack> for TopicActor {
    type Result = Result<(), ActorError>;

    fn handle(&mut self, msg: Nack, ctx: &mut Context<Self>) -> Self::Result {
        let Some(sub) = self.subscriptions.get_mut(&msg.subscription) else {
            return Err(ActorError::UnknownSubscription(msg.subscription));
        };
        if sub.release(msg.delivery_id).is_none() {
            return Err(ActorError::not_awaiting_ack(msg.delivery_id));
        }
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

impl Handler<CloseConsumers> for TopicActor {
    // Answered once the acks of every durable subscription accepted before it are
    // committed: an empty ack joins each one's batch after them.
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: CloseConsumers, ctx: &mut Context<Self>) -> Self::Result {
        self.closing = true;
        let ids: Vec<u64> = self.subscriptions.keys().copied().collect();
        for id in ids {
            // Its sender goes: the stream ends after what it holds; a durable one goes
            // offline, its messages stay stored.
            self.detach(id);
        }
        let keys: Vec<SubscriptionKey> = self.acks.keys().cloned().collect();
        let mut committed = Vec::new();
        for key in keys {
            committed.push(self.acks.get_mut(&key).expect("listed").add([]));
            self.write_acks(key, ctx);
        }
        Box::pin(async move {
            futures::future::join_all(committed).await;
        })
    }
}

impl Handler<RemoveDurable> for TopicActor {
    type Result = ResponseActFuture<Self, Result<bool, ActorError>>;

    fn handle(&mut self, msg: RemoveDurable, _: &mut Context<Self>) -> Self::Result {
        let key = msg.0;
        if self.core.retired {
            // Deleted or asleep: the successor reads the store after this answer.
            return Box::pin(fut::ready(Err(self.core.retired_error())));
        }
        if self.durables.get(&key).is_some_and(|d| d.online.is_some()) {
            return Box::pin(fut::ready(Err(ActorError::DurableInUse(format!(
                "{}/{}",
                key.client_id, key.subscription_name
            )))));
        }
        let (store, container, removed_key) = (
            self.core.store.clone(),
            self.core.container.clone(),
            key.clone(),
        );
        Box::pin(
            async move { store.unsubscribe(container, removed_key).await }
                .into_actor(self)
                .map(move |result, act, ctx| {
                    let removed = result?;
                    if act.durables.get(&key).is_some_and(|d| d.online.is_none()) {
                        act.durables.remove(&key);
                    }
                    // Rows only this subscription held are now acked by all (or by none).
                    act.core.schedule.need_cleanup();
                    destination::schedule(act, ctx);
                    Ok(removed)
                }),
        )
    }
}

impl Handler<BindGroup> for TopicActor {
    type Result = AtomicResponse<Self, Result<(), ActorError>>;

    /// Writes the binding through the store actor and handles nothing else meanwhile
    /// (an atomic response): a message published after this waits, so it is stored
    /// above the group's mark and fed to it; one stored before it is below the mark
    /// and is not.
    fn handle(&mut self, msg: BindGroup, _: &mut Context<Self>) -> Self::Result {
        let group = msg.0;
        if self.core.retired {
            return AtomicResponse::new(Box::pin(fut::ready(Err(self.core.retired_error()))));
        }
        if self.groups.contains_key(&group) {
            return AtomicResponse::new(Box::pin(fut::ready(Ok(()))));
        }
        let (store, container) = (self.core.store.clone(), self.core.container.clone());
        let key = SubscriptionKey::group(&group.container());
        let write = async move { store.subscribe(container, key, None, false).await };
        AtomicResponse::new(Box::pin(write.into_actor(self).map(
            move |result, act, ctx| {
                let sub = result?;
                let mark = sub.marks.iter().map(|(_, m)| *m).min().unwrap_or(0);
                act.groups.insert(group, mark);
                act.groups_changed();
                destination::schedule(act, ctx);
                Ok(())
            },
        )))
    }
}

impl Handler<GroupAcked> for TopicActor {
    type Result = ();

    /// A group's acks are committed: cleanup is due, as after a durable
    /// subscription's.
    fn handle(&mut self, _: GroupAcked, ctx: &mut Context<Self>) {
        if self.core.retired {
            return;
        }
        self.core.schedule.need_cleanup();
        destination::schedule(self, ctx);
    }
}

impl Handler<UnbindGroup> for TopicActor {
    type Result = AtomicResponse<Self, Result<bool, ActorError>>;

    fn handle(&mut self, msg: UnbindGroup, _: &mut Context<Self>) -> Self::Result {
        let group = msg.0;
        if self.core.retired {
            return AtomicResponse::new(Box::pin(fut::ready(Err(self.core.retired_error()))));
        }
        let (store, container) = (self.core.store.clone(), self.core.container.clone());
        let key = SubscriptionKey::group(&group.container());
        let write = async move { store.unsubscribe(container, key).await };
        AtomicResponse::new(Box::pin(write.into_actor(self).map(
            move |result, act, ctx| {
                // Forgotten only once the store has unbound it: until then it is
                // stored for and fed as the store shows it.
                let removed = result?;
                if act.groups.remove(&group).is_some() {
                    act.groups_changed();
                }
                // Rows only this group held are done now.
                act.core.schedule.need_cleanup();
                destination::schedule(act, ctx);
                Ok(removed)
            },
        )))
    }
}

impl Handler<GetStats> for TopicActor {
    type Result = Stats;

    fn handle(&mut self, _: GetStats, _: &mut Context<Self>) -> Stats {
        self.stats_now()
    }
}

impl Handler<GetTopicStats> for TopicActor {
    type Result = TopicStats;

    fn handle(&mut self, _: GetTopicStats, _: &mut Context<Self>) -> TopicStats {
        self.stats_now();
        TopicStats {
            counters: self.core.counters(),
            online_subscriptions: self.subscriptions.len() as u64,
            durable_subscriptions: self.durables.len() as u64,
            ..self.stats.clone()
        }
    }
}

impl Handler<DurableStates> for TopicActor {
    type Result = Vec<DurableState>;

    fn handle(&mut self, msg: DurableStates, _: &mut Context<Self>) -> Vec<DurableState> {
        msg.0
            .iter()
            .map(|key| {
                let online = self.durables.get(key).and_then(|d| d.online);
                let in_flight = online
                    .and_then(|id| self.subscriptions.get(&id))
                    .map_or(0, |s| s.in_flight() as u64);
                DurableState {
                    online: online.is_some(),
                    in_flight,
                }
            })
            .collect()
    }
}

impl Handler<CleanupBatch> for TopicActor {
    type Result = ();

    fn handle(&mut self, _: CleanupBatch, ctx: &mut Context<Self>) {
        self.cleanup(ctx);
    }
}
