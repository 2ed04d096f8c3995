//! The queue actor: one per queue.
//!
//! State it owns: its [`DestinationCore`] (publish order, prepared messages, the
//! housekeeping schedule and the shared counters: see [`crate::destination`]), its
//! consumers (prefetch credit and the deliveries each holds), its cursor
//! ([`QueueCursor`]: what waits, in order, and what to read from the store next), the
//! failed-delivery count of each message in memory, and the counters only a queue
//! keeps.
//!
//! Messages it accepts: those every destination accepts ([`Publish`],
//! [`PublishPrepared`], [`CommitPrepared`], [`AbortPrepared`], [`RunHousekeeping`],
//! [`StopHousekeeping`], [`Retire`], [`StopDestination`], handled in
//! [`crate::destination`]), and [`Subscribe`]
//! (non-durable only), [`Ack`], [`Nack`], [`Detach`], [`Browse`], [`GetQueueStats`],
//! [`AcceptDeadLetter`]; from itself, the timer tick and
//! [`ExpiryPage`](crate::destination::ExpiryPage). It sends dead messages to a
//! `Recipient` of [`RouteDeadLetter`] (the registry). What it writes itself: its
//! dispatch (one consumer per message), redelivery and dead letters, its expiry page.
//!
//! **Competing consumers.** Each message goes to one consumer: the next one, in
//! round-robin order, that has free prefetch. An ack (individual or cumulative) deletes
//! the message's row through the store actor and is answered after the commit.
//!
//! **Selectors.** A consumer may have a [`Selector`]: it is given only messages the
//! selector matches. While no consumer has one, dispatch hands the first waiting
//! message to the next consumer with credit without looking at it. Otherwise each
//! waiting message, in order, goes to the next consumer (round-robin) with credit that
//! takes it; a message no one takes keeps its place, and a consumer with a selector
//! looks at each waiting message once (it remembers how far it looked). When such a
//! consumer has credit, has looked at everything in memory, and the cursor is in store
//! mode (the store holds messages the cache does not), the queue scans the store for
//! it: pages of at most `max_browse_page_size` rows after the cursor's position and the
//! consumer's own, one page at a time per queue, each page started from the actor's
//! mailbox so other work goes on between them. What the page matches is delivered
//! (taken ahead of the cursor: see [`QueueCursor`]); the consumer's scan position moves
//! past what it looked at, so a backlog is passed once, never again from the start.
//! Memory holds the cursor's cache and one page, whatever the backlog (case SEL-10:
//! ActiveMQ's dispatch stops when its page is full of messages no consumer takes, and
//! Artemis's depaging waits for the messages ahead to be consumed).
//!
//! **Exclusive consumers and message groups** (ActiveMQ's). While an exclusive
//! consumer is attached, the oldest one gets every message (the others, exclusive or
//! not, get none); when it goes, what it held comes back and the next exclusive one
//! takes over, or round-robin resumes. A message with `JMSXGroupID` goes to its
//! group's owner ([`MessageGroups`]): the consumer that got the group's first message,
//! until it goes or a message with `JMSXGroupSeq: -1` closes the group. A message a
//! consumer may not take keeps its place while others are dispatched past it.
//!
//! **Redelivery.** A message whose delivery ends without an ack (NACK, or its consumer
//! detached) goes back in its place with its failed-delivery count up and is delivered
//! again marked `redelivered`; a stored message's count is stored too
//! ([`ebb_store::WriteOp::Redelivered`]), so a restart or a failover goes on counting.
//! With a redelivery delay (ActiveMQ's `redeliveryDelay`, `useExponentialBackOff`) a
//! stored message waits in its own row instead: its due time is written with its
//! count, and the queue reads it back when due ([`crate::queue_held`]). Failed
//! deliveries' writes go in the transaction of the queue's next ack write
//! (`FailureBatch`); a NACK is answered once its write is committed.
//! Past `maximum_redeliveries` failures it goes to the
//! dead-letter queue (`DLQ.<queue>` or the policy's shared one) with the headers
//! `dlqDeliveryFailureCause` and `originalDestination` (ActiveMQ's names): moved in one
//! store transaction, so it is never in both queues and never in neither. A
//! non-persistent dead message is dropped and counted (as ActiveMQ's default
//! `processNonPersistent=false`); a dead-letter queue does not dead-letter its own.
//!
//! **Expiry.** As for topics: every `expire_messages_period` ms, while the queue has seen
//! a message with an expiration, a run of pages starts. A page is one bounded delete of
//! at most `max_expire_page_size` expired rows chosen by expiration time (so a short TTL
//! behind a long one is found, the fault of ActiveMQ's AMQ-6967), through the store
//! actor; with `dead_letter_expired`, one bounded read and a move per message instead.
//! A full page sends the next to the queue's own mailbox at once; every page holds a
//! permit of the shared [`HousekeepingBudget`]. Messages found expired at dispatch are
//! removed the same way and never delivered.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use ebb_store::{Moved, Payload, WriteOp};
use tokio::sync::mpsc;

use crate::destination::sleep::{self, Doze, Drowsiness, ExpireDue, Sleep, Sleeper, Slept};
use crate::destination::{
    self, destination_handlers, now_ms, AckBatch, Completions, DestinationActor, DestinationCore,
    DestinationKey, Gauges, Plan, Published,
};
use crate::error::ActorError;
use crate::housekeeping::HousekeepingBudget;
use crate::message_groups::{MessageGroups, GROUP_HEADER, GROUP_SEQ_HEADER};
use crate::messages::*;
use crate::policy::Policy;
use crate::queue_cursor::{Entry, Place, QueueCursor};
use crate::queue_held::HeldReads;
use crate::selector::Selector;
use crate::store_actor::StoreHandle;

/// The message group `message` belongs to (its first `JMSXGroupID`), if any.
fn group_of(message: &TopicMessage) -> Option<&str> {
    message.header(GROUP_HEADER)
}

/// True when `message` closes its group (`JMSXGroupSeq: -1`).
fn closes_group(message: &TopicMessage) -> bool {
    message
        .header(GROUP_SEQ_HEADER)
        .is_some_and(|value| value.trim() == "-1")
}

/// A selector's scan page that tests header values in SQL covers at most this many
/// pages' worth of ids (`max_browse_page_size` × 25: 10,000 ids by default), so what
/// one page examines stays bounded however few rows match.
const SCAN_WINDOW_PAGES: i64 = 25;

/// Header naming why a message went to the dead-letter queue (ActiveMQ's property).
pub const DLQ_CAUSE_HEADER: &str = "dlqDeliveryFailureCause";

/// Header naming the destination a dead letter came from (ActiveMQ's property).
pub const DLQ_ORIGIN_HEADER: &str = "originalDestination";

/// One consumer of the queue.
struct Consumer {
    prefetch: usize,
    deliver: mpsc::Sender<Delivery>,
    next_delivery_id: u64,
    /// Delivery id → the message's place.
    in_flight: BTreeMap<u64, Place>,
    /// Only messages it matches are delivered to it.
    selector: Option<Arc<Selector>>,
    /// With a selector: every waiting message with a place before this one was looked
    /// at for it and does not match (so a dispatch looks only at what is new).
    examined_before: Place,
    /// With a selector: the store id up to which its scan of the store beyond the
    /// cursor has looked ("Selectors" in the module documentation).
    scanned_upto: i64,
    /// With a selector: the header values it requires ([`Selector::required_headers`]),
    /// which its scan tests in SQL.
    filter: Arc<Vec<(String, Vec<String>)>>,
    /// Subscribed as exclusive (`activemq.exclusive`).
    exclusive: bool,
    /// What it handed to the application ([`Subscribe::handed`]).
    handed: Option<Handed>,
    /// Its receiver is gone, its [`Detach`] not handled yet: it gets nothing more.
    gone: bool,
}

impl Consumer {
    fn has_credit(&self) -> bool {
        !self.gone && self.in_flight.len() < self.prefetch
    }

    /// Whether `message`, at `place`, may go to this consumer (and, with a selector,
    /// marks it looked at).
    fn takes(&mut self, place: Place, message: &TopicMessage) -> bool {
        let Some(selector) = &self.selector else {
            return true;
        };
        if place < self.examined_before {
            return false;
        }
        self.examined_before = (place.0, place.1 + 1);
        selector.matches(message)
    }
}

/// A delivered message, not yet acked.
struct Delivered {
    entry: Entry,
    /// A newer message with its last-value key arrived meanwhile: it is not
    /// redelivered if it comes back.
    replaced: bool,
}

/// Where the writes of a failed delivery (its stored failure count, its back-off hold,
/// its move to the dead-letter queue) report that they have finished, for a NACK that
/// answers only after them (a receipt follows the commit): an error if one failed,
/// nothing (the sender dropped) if each was committed or there was nothing to write.
/// `None` where nobody waits (a consumer that went away).
type Written = Option<tokio::sync::oneshot::Sender<ActorError>>;

/// Reports `result`'s error to whoever waits on `done` if it is the store's (what the
/// NACK changed is not committed). Another failure (a dead-letter queue that cannot be
/// named) changed nothing stored: the message stays in its queue and is delivered
/// again, which is what the NACK asked for.
fn report(done: Written, result: Result<(), &ActorError>) {
    if let (Some(done), Err(e @ (ActorError::Store(_) | ActorError::Closed))) = (done, result) {
        let _ = done.send(e.clone());
    }
}

/// A failed delivery's write, waiting in the queue's batch of them
/// ([`FailureBatch`]): what its commit answers.
enum FailureWrite {
    /// Its count only: answers `done`.
    Count { done: Written },
    /// Its count and its back-off hold until `due` (epoch ms): the message at `place`
    /// waits in `held_back` until the write answers.
    Hold {
        place: Place,
        due: i64,
        done: Written,
    },
}

/// The failed deliveries' writes (counts and back-off holds) gathered while the
/// queue's ack write is in flight, and written with the next one, in its store
/// transaction ([`QueueActor::write_acks`]): so a consumer that NACKs beside its acks
/// adds no transaction of its own, and costs no store write per NACK. Each NACK is
/// still answered only after the write that holds it commits.
#[derive(Default)]
struct FailureBatch {
    /// `(id, count, due)` of each row to write, one per id (a later failure of the
    /// same message replaces its row: the count and hold it ends with).
    rows: Vec<(i64, u32, Option<i64>)>,
    /// What each failure answers, with its row id.
    writes: Vec<(i64, FailureWrite)>,
}

/// A message's move to the dead-letter queue: answers what became of it ([`Moved`]).
type DeadLetterMove =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Moved, ActorError>>>>;

/// See the module documentation.
pub struct QueueActor {
    core: DestinationCore,
    /// Store writes in flight, answered on the actor when done.
    completions: Completions<Self>,
    /// Acked rows waiting to be deleted together.
    acks: AckBatch<i64>,
    /// Where dead messages go: the registry, which hands each to its dead-letter queue
    /// (without it, dead messages are dropped and counted).
    dead_letters: Option<Recipient<RouteDeadLetter>>,
    consumers: BTreeMap<u64, Consumer>,
    next_consumer: u64,
    /// Round-robin: the consumer that got the last delivery.
    last_consumer: u64,
    cursor: QueueCursor,
    delivered: HashMap<Place, Delivered>,
    /// Failed deliveries held back for their redelivery delay in memory (a
    /// non-persistent message), or on their way to be held in the store (its write in
    /// flight): marked when a newer last value arrives, so they are dropped instead of
    /// coming back.
    held_back: HashMap<Place, Delivered>,
    stats: QueueStats,
    /// Consumers with a selector (0: every message goes to the next consumer with
    /// credit, without looking at it).
    selective: usize,
    /// A selector's scan of the store is in flight (one at a time per queue).
    scanning: bool,
    /// Which consumer owns each message group.
    groups: MessageGroups,
    /// Shutdown closed its consumers ([`CloseConsumers`]): it takes no new ones.
    closing: bool,
    /// Where the reads of the messages the back-off holds in their rows are
    /// ([`crate::queue_held`]).
    held: HeldReads,
    /// The timer that reads the held messages when the next one is due: its due time
    /// (epoch ms) and handle.
    held_timer: Option<(i64, SpawnHandle)>,
    /// Failed deliveries' writes waiting for the one in flight.
    failures: FailureBatch,
    /// Where it asks to sleep when idle, and when ([`Drowsiness`]).
    drowsiness: Drowsiness,
    /// Where it says its acks of a topic's rows committed, as a consumer group
    /// ([`Self::with_group_acks`]).
    group_acks: Option<Recipient<GroupAcked>>,
    /// Browses and takes begun (activity the counters do not show).
    touched: u64,
    /// Held rows a take (a purge, a move) took before the queue read them back: a read
    /// of held rows must not put them back. Each is forgotten once its take's write
    /// has answered (the number of the last read begun before then) and every read
    /// begun before that has returned (bounded by a take's page and the reads in
    /// flight).
    taken_held: HashMap<i64, Option<u64>>,
    /// The registry's writes for it while it slept, still in flight when it started
    /// ([`crate::broker::PublishAsleep`]): it handles nothing before they are done.
    after_writes: Option<crate::destination::sleep::Written>,
}

impl QueueActor {
    /// Queue `key`, with `policy`, writing through `store`, its expiry pages sharing
    /// `budget`; dead messages go to `dead_letters` (the registry).
    pub fn new(
        key: DestinationKey,
        policy: Policy,
        store: StoreHandle,
        budget: HousekeepingBudget,
        dead_letters: Option<Recipient<RouteDeadLetter>>,
    ) -> Self {
        let cache = (policy.max_page_size.max(1) as usize) * 2;
        let high_water = policy.cursor_memory_high_water_mark;
        let floor = store.store().last_assigned_id();
        let last_values = key.capabilities().last_value_header;
        Self {
            core: DestinationCore::new(key, policy, store, budget),
            completions: Completions::default(),
            acks: AckBatch::default(),
            dead_letters,
            consumers: BTreeMap::new(),
            next_consumer: 1,
            last_consumer: 0,
            cursor: QueueCursor::new(cache, high_water, floor).with_last_values(last_values),
            delivered: HashMap::new(),
            held_back: HashMap::new(),
            stats: QueueStats::default(),
            selective: 0,
            scanning: false,
            groups: MessageGroups::default(),
            closing: false,
            held: HeldReads::default(),
            held_timer: None,
            taken_held: HashMap::new(),
            after_writes: None,
            failures: FailureBatch::default(),
            drowsiness: Drowsiness::default(),
            group_acks: None,
            touched: 0,
        }
    }

    /// Waits for `written` (the registry's writes for it while it slept, if any) before
    /// it handles anything or reads the store, then carries on the counters of its
    /// entry again (see [`crate::broker::PublishAsleep`]).
    pub fn after_writes(mut self, written: Option<crate::destination::sleep::Written>) -> Self {
        self.after_writes = written;
        self
    }

    /// Asks `registry` to let it sleep once it has been idle for its policy's
    /// `inactive_timeout_before_sleep` (see [`crate::destination::sleep`]).
    pub fn with_sleeper(mut self, registry: Recipient<Doze>) -> Self {
        self.drowsiness = Drowsiness::new(Some(registry));
        self
    }

    /// Reports its expiries and dead letters through `events` (advisory topics).
    pub fn with_events(mut self, events: crate::events::Events) -> Self {
        self.core.events = events;
        self
    }

    /// Tells `registry` when acks of a topic's rows commit, when it is a consumer
    /// group reading a topic's rows ([`GroupAcked`]: the topic's cleanup is due).
    pub fn with_group_acks(mut self, registry: Recipient<GroupAcked>) -> Self {
        self.group_acks = Some(registry);
        self
    }

    /// After its acks commit: a consumer group tells its topic's cleanup.
    fn group_acked(&self) {
        let Some(registry) = &self.group_acks else {
            return;
        };
        let Some(topic) = self.core.store.store().group_topic(&self.core.container) else {
            return;
        };
        if let Ok(topic) = DestinationKey::from_container(&topic) {
            registry.do_send(GroupAcked(topic));
        }
    }

    /// Publishes its counters and gauges to `published`, its entry on the broker's
    /// [`crate::destination::StatsBoard`], as it works.
    pub fn with_published(mut self, published: Arc<Published>) -> Self {
        let was = published.read();
        self.stats.dequeued = was.dequeued;
        self.stats.dead_lettered = was.dead_lettered;
        self.core.publish_to(published);
        self.publish_gauges();
        self
    }

    /// Whether it caches what is sent to it while no consumer is attached: only with a
    /// `memory_limit` of its own (see [`Policy::memory_limit`]).
    fn caches_alone(&self) -> bool {
        self.core.policy.memory_limit > 0
    }

    /// Its gauges now, and the counters it keeps outside the core's.
    fn gauges(&self) -> Gauges {
        Gauges {
            dequeued: self.stats.dequeued,
            dead_lettered: self.stats.dead_lettered,
            consumers: self.consumers.len() as u64,
            in_flight: self.delivered.len() as u64,
            pending_non_persistent: self.cursor.transient_len() as u64,
        }
    }

    /// Its [`Stats`] now; in debug builds, checks that what it published says the
    /// same (a change that forgot to publish fails the test that reads it).
    fn stats_now(&self) -> Stats {
        let g = self.gauges();
        let stats = Stats {
            counters: self.core.counters(),
            dequeued: g.dequeued,
            dead_lettered: g.dead_lettered,
            consumers: g.consumers,
            in_flight: g.in_flight,
            pending_non_persistent: g.pending_non_persistent,
        };
        destination::debug_check_published(self.core.published(), &stats);
        stats
    }

    /// Publishes [`Self::gauges`] (marked for the next reading when they changed):
    /// called wherever consumers, deliveries, acks or waiting messages change.
    fn publish_gauges(&self) {
        self.core.published().publish_gauges(self.gauges());
    }

    /// The consumer that gets every message now: the oldest exclusive one, if any
    /// (ActiveMQ's exclusive owner).
    fn exclusive_owner(&self) -> Option<u64> {
        self.consumers
            .iter()
            .find(|(_, c)| c.exclusive)
            .map(|(id, _)| *id)
    }

    /// Whether `message` may go to consumer `consumer_id` by the queue's rules: to the
    /// exclusive owner `owner` alone while there is one (it takes every group too),
    /// else to its group's owner; the consumer's selector is asked apart.
    fn eligible(&self, consumer_id: u64, owner: Option<u64>, message: &TopicMessage) -> bool {
        if let Some(owner) = owner {
            return owner == consumer_id;
        }
        match group_of(message).and_then(|g| self.groups.owner(g)) {
            Some(group_owner) => group_owner == consumer_id,
            None => true,
        }
    }

    /// Fills `place` in publish order and releases what it frees.
    fn fill(&mut self, place: u64, message: Option<TopicMessage>, ctx: &mut Context<Self>) {
        let released = self.core.order.fill(place, message.map(Arc::new));
        self.release(released, ctx);
    }

    /// The next consumer after the last one served, in id order, with free prefetch
    /// (only the exclusive owner, while there is one).
    fn next_consumer(&self) -> Option<u64> {
        if let Some(owner) = self.exclusive_owner() {
            return self.consumers[&owner].has_credit().then_some(owner);
        }
        let free = |(id, c): (&u64, &Consumer)| c.has_credit().then_some(*id);
        self.consumers
            .range(self.last_consumer + 1..)
            .find_map(free)
            .or_else(|| self.consumers.range(..=self.last_consumer).find_map(free))
    }

    /// Hands waiting messages to consumers with free prefetch, round-robin; removes
    /// what expired on the way; starts a store read if the cursor needs one, and a scan
    /// of the store for a consumer with a selector that found nothing in memory.
    fn dispatch(&mut self, ctx: &mut Context<Self>) {
        let now = now_ms();
        let mut expired = Vec::new();
        if self.selective == 0 && self.groups.is_empty() {
            // No consumer looks at messages and no group is owned: the first message
            // goes to the next consumer with credit (a message that starts a group
            // gives it an owner, and the next ones go the other way).
            while self.groups.is_empty() {
                let Some(consumer_id) = self.next_consumer() else {
                    break;
                };
                let Some((place, entry)) = self.cursor.pop() else {
                    break;
                };
                if entry.message.is_expired(now) {
                    expired.push(entry);
                    continue;
                }
                self.hand_out(consumer_id, place, entry, ctx);
            }
        }
        if self.selective > 0 || !self.groups.is_empty() {
            // A consumer that turned out to be gone gives its messages back during the
            // pass, maybe before where it was: look again from there.
            loop {
                self.dispatch_selective(now, &mut expired, ctx);
                if !self.cursor.inserted_since_taken() {
                    break;
                }
            }
        }
        self.remove_expired(expired, ctx);
        self.read_if_needed(ctx);
        self.read_held_if_needed(ctx);
        self.scan_if_needed(ctx);
        self.publish_gauges();
    }

    /// Dispatch when some consumers have selectors: each waiting message, in order,
    /// goes to the next consumer (round-robin) with credit that takes it; one no
    /// consumer takes stays in its place for later consumers. A consumer with a
    /// selector looks at each waiting message once ([`Consumer::takes`]).
    fn dispatch_selective(&mut self, now: i64, expired: &mut Vec<Entry>, ctx: &mut Context<Self>) {
        if let Some(lowest) = self.cursor.take_lowest_inserted() {
            for consumer in self.consumers.values_mut() {
                consumer.examined_before = consumer.examined_before.min(lowest);
            }
        }
        // Start at the first message a consumer with credit has not looked at yet.
        let start = self
            .consumers
            .values()
            .filter(|c| c.has_credit())
            .map(|c| match c.selector {
                Some(_) => c.examined_before,
                None => (i64::MIN, 0),
            })
            .min();
        let Some(start) = start else {
            return;
        };
        let mut at = self.cursor.first_from(start);
        while let Some(place) = at {
            let next = self.cursor.first_from((place.0, place.1 + 1));
            let entry = self.cursor.get(place).expect("a waiting place");
            let message = Arc::clone(&entry.message);
            if message.is_expired(now) {
                expired.extend(self.cursor.take(place));
                at = next;
                continue;
            }
            let ids: Vec<u64> = self
                .consumers
                .range(self.last_consumer + 1..)
                .chain(self.consumers.range(..=self.last_consumer))
                .map(|(id, _)| *id)
                .collect();
            let owner = self.exclusive_owner();
            let mut any_credit = false;
            let mut taker = None;
            for id in ids {
                // The queue's rules first: a message another consumer must take is not
                // looked at (and not marked looked at) by this one's selector.
                let eligible = self.eligible(id, owner, &message);
                let consumer = self.consumers.get_mut(&id).expect("listed above");
                if !consumer.has_credit() {
                    continue;
                }
                any_credit = true;
                if eligible && consumer.takes(place, &message) {
                    taker = Some(id);
                    break;
                }
            }
            if !any_credit {
                break;
            }
            if let Some(consumer_id) = taker {
                let entry = self.cursor.take(place).expect("a waiting place");
                self.hand_out(consumer_id, place, entry, ctx);
            }
            at = next;
        }
    }

    /// Delivers `entry` (at `place`) to consumer `consumer_id`, which has credit; a
    /// consumer that is gone gives it back.
    fn hand_out(&mut self, consumer_id: u64, place: Place, entry: Entry, ctx: &mut Context<Self>) {
        let consumer = self.consumers.get_mut(&consumer_id).expect("a consumer");
        let delivery_id = consumer.next_delivery_id;
        let delivery = Delivery {
            subscription: consumer_id,
            delivery_id,
            message: Arc::clone(&entry.message),
            redelivered: entry.failed_deliveries > 0,
            source: None,
        };
        // The channel holds the prefetch, so it is full only if the consumer is gone.
        if consumer.deliver.try_send(delivery).is_err() {
            self.cursor.put_back(place, entry);
            if consumer.handed.is_some() {
                // Its acks, then its detach, are on their way (a consumer that keeps
                // `handed` sends them in that order): what it acked must not go back
                // before they are handled.
                consumer.gone = true;
            } else {
                self.detach(consumer_id, ctx);
            }
            return;
        }
        consumer.next_delivery_id += 1;
        consumer.in_flight.insert(delivery_id, place);
        self.last_consumer = consumer_id;
        if let Some(group) = group_of(&entry.message) {
            if closes_group(&entry.message) {
                self.groups.close(group);
            } else if self.groups.owner(group).is_none() {
                self.groups.assign(group, consumer_id);
            }
        }
        self.core.counters_mut().dispatched += 1;
        if entry.failed_deliveries > 0 {
            self.stats.redelivered += 1;
        }
        self.delivered.insert(
            place,
            Delivered {
                entry,
                replaced: false,
            },
        );
    }

    /// Starts one page of a scan of the store for a consumer with a selector that has
    /// credit, has looked at every waiting message, and has not scanned up to the last
    /// message published: a bounded read after the cursor's position and the
    /// consumer's own, one at a time per queue. With header values its selector
    /// requires, `scan_matching` over a window of ids tests them in SQL; without,
    /// `browse` reads `max_browse_page_size` rows back for the selector to test.
    fn scan_if_needed(&mut self, ctx: &mut Context<Self>) {
        if self.selective == 0 || self.scanning {
            return;
        }
        let Some(floor) = self.cursor.scan_floor() else {
            return;
        };
        let published = self.cursor.published_upto();
        let last_waiting = self.cursor.last_place();
        let owner = self.exclusive_owner();
        let wants = |id: u64, c: &Consumer| {
            owner.is_none_or(|owner| owner == id)
                && c.selector.is_some()
                && c.has_credit()
                && last_waiting.is_none_or(|last| c.examined_before > last)
                && c.scanned_upto.max(floor) < published
        };
        let Some(consumer_id) = self
            .consumers
            .range(self.last_consumer + 1..)
            .chain(self.consumers.range(..=self.last_consumer))
            .find(|(id, c)| wants(**id, c))
            .map(|(id, _)| *id)
        else {
            return;
        };
        let consumer = &self.consumers[&consumer_id];
        let after = consumer.scanned_upto.max(floor);
        let filter = Arc::clone(&consumer.filter);
        let limit = self.core.policy.max_browse_page_size.max(1);
        // With header values to test in SQL, a page covers a window of ids (what it
        // examines is bounded by the window, not by what it returns), never past the
        // last id published (later ids are scanned once they are).
        let upto = if filter.is_empty() {
            published
        } else {
            published.min(after.saturating_add(i64::from(limit) * SCAN_WINDOW_PAGES))
        };
        let seq = self.cursor.begin_read();
        self.scanning = true;
        self.stats.scan_pages += 1;
        let store = Arc::clone(self.core.store.store());
        let container = self.core.container.clone();
        let read = async move {
            if filter.is_empty() {
                store.read_queue(&container, after, limit).await
            } else {
                store
                    .scan_matching(&container, after, upto, &filter, limit)
                    .await
            }
        };
        ctx.spawn(read.into_actor(self).map(move |rows, act, ctx| {
            act.scanning = false;
            match rows {
                Ok(rows) => act.scanned(consumer_id, after, upto, limit, &rows, ctx),
                Err(e) => {
                    tracing::warn!(queue = %act.core.container, error = %e, "selector scan failed; retrying in 1 s");
                    act.cursor.end_read(seq);
                    ctx.run_later(Duration::from_secs(1), |act, ctx| act.dispatch(ctx));
                    return;
                }
            }
            act.cursor.end_read(seq);
            act.dispatch(ctx);
        }));
    }

    /// A page of consumer `consumer_id`'s scan (the rows after `after`, up to `upto`):
    /// what it matches is delivered to it, while it has credit; the scan's position
    /// moves past what it looked at (to `upto` when the page came back short).
    fn scanned(
        &mut self,
        consumer_id: u64,
        after: i64,
        upto_id: i64,
        limit: u32,
        rows: &[Arc<ebb_store::StoredMessage>],
        ctx: &mut Context<Self>,
    ) {
        self.stats.scan_rows += rows.len() as u64;
        let now = now_ms();
        let mut upto = after;
        for row in rows {
            let Some(consumer) = self.consumers.get_mut(&consumer_id) else {
                return;
            };
            if !consumer.has_credit() {
                break;
            }
            upto = row.id;
            // The cursor may have read past the scan's start meanwhile: what it covers
            // now is its own (a message it delivered and that was acked may still be
            // in this page, its delete not yet committed when the page was read).
            if row.id <= self.cursor.covered_upto()
                || self.cursor.holds(row.id)
                || self.delivered.contains_key(&(row.id, 0))
                || ebb_store::is_expired(row.expiration, now)
            {
                continue;
            }
            let message = Arc::new(TopicMessage::from_stored(row));
            if self.cursor.is_superseded((row.id, 0), &message) {
                continue;
            }
            if !consumer
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&*message))
            {
                continue;
            }
            self.cursor.take_ahead(row.id);
            self.stats.scan_matches += 1;
            self.hand_out(consumer_id, (row.id, 0), Entry::new(message), ctx);
        }
        // A short page it looked at to the end: the store holds nothing more for it
        // up to the page's end.
        let looked_at_all = rows.last().is_none_or(|last| last.id == upto);
        if looked_at_all && rows.len() < limit as usize {
            upto = upto.max(upto_id);
        }
        if let Some(consumer) = self.consumers.get_mut(&consumer_id) {
            consumer.scanned_upto = consumer.scanned_upto.max(upto);
        }
    }

    /// Deletes the acked rows gathered while the last delete was in flight, and writes
    /// the failed deliveries gathered with them ([`FailureBatch`]), in one write (one
    /// store transaction), unless one is in flight ([`AckBatch`]).
    fn write_acks(&mut self, ctx: &mut Context<Self>) {
        let Some(mut write) = self.acks.take() else {
            return;
        };
        let ids = std::mem::take(&mut write.items);
        let rows = std::mem::take(&mut self.failures.rows);
        let failures = std::mem::take(&mut self.failures.writes);
        if ids.is_empty() && rows.is_empty() {
            // Only waiters for what came before (`CloseConsumers`): that is committed.
            write.answer(&Ok(()));
            self.acks.finished();
            return self.write_acks(ctx);
        }
        // Messages a selector's scan took ahead of the cursor are forgotten once their
        // delete is committed (see `QueueCursor::deleted`).
        let ahead: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| self.cursor.is_ahead(*id))
            .collect();
        let (store, container) = (self.core.store.clone(), self.core.container.clone());
        let delete = async move {
            store
                .remove_and_redeliver(container, ids, rows)
                .await
                .map(drop)
        };
        self.completions
            .when_done(ctx, delete, move |result, act, ctx| {
                if result.is_ok() {
                    act.cursor.deleted(&ahead);
                    act.group_acked();
                }
                write.answer(&result);
                let failed = !failures.is_empty();
                for (id, failure) in failures {
                    act.failure_written(id, failure, result.as_ref().map(|_| ()), ctx);
                }
                act.acks.finished();
                act.write_acks(ctx);
                if failed {
                    act.dispatch(ctx);
                }
            });
    }

    /// Starts a bounded store read when the cursor wants one and someone will take
    /// what it reads: a consumer is attached, or the queue has a `memory_limit` of its
    /// own, which its cache fills to hold its producers back (as ActiveMQ's queue
    /// `memoryLimit`). Otherwise the backlog stays in the store (it costs no memory)
    /// and the first consumer's dispatch reads it.
    fn read_if_needed(&mut self, ctx: &mut Context<Self>) {
        if self.consumers.is_empty() && !self.caches_alone() {
            return;
        }
        let Some((after, limit)) = self.cursor.read_request() else {
            return;
        };
        let store = Arc::clone(self.core.store.store());
        let container = self.core.container.clone();
        let fut = async move { store.read_queue(&container, after, limit).await };
        ctx.spawn(fut.into_actor(self).map(|result, act, ctx| match result {
            Ok(rows) => {
                let rows = rows
                    .iter()
                    .map(|m| Arc::new(TopicMessage::from_stored(m)))
                    .collect();
                act.cursor.on_read(Some(rows));
                if act.consumers.is_empty() && !act.caches_alone() {
                    // The consumer it read for left during the read: a read that
                    // caught up would cache from now on.
                    act.cursor.stop_caching();
                }
                act.dispatch(ctx);
            }
            Err(e) => {
                act.cursor.on_read(None);
                tracing::warn!(queue = %act.core.container, error = %e, "backlog read failed; retrying in 1 s");
                ctx.run_later(Duration::from_secs(1), |act, ctx| act.dispatch(ctx));
            }
        }));
    }

    /// Expired messages taken off the queue: to the dead-letter queue with
    /// `dead_letter_expired`, otherwise deleted; counted once each (a row another path
    /// already deleted counts 0).
    fn remove_expired(&mut self, expired: Vec<Entry>, ctx: &mut Context<Self>) {
        if expired.is_empty() {
            return;
        }
        if self.core.policy.dead_letter_expired {
            for entry in expired {
                self.dead_letter(entry, "message expired", true, None, ctx);
            }
            return;
        }
        let mut ids = Vec::new();
        for entry in expired {
            match entry.message.id {
                Some(id) => ids.push(id),
                None => self.core.count_expired(1),
            }
        }
        if ids.is_empty() {
            return;
        }
        let (store, container) = (self.core.store.clone(), self.core.container.clone());
        ctx.spawn(async move { store.remove(container, ids).await }.into_actor(self).map(|result, act, _| {
            match result {
                Ok(n) => act.core.count_expired(n),
                Err(e) => tracing::warn!(queue = %act.core.container, error = %e, "delete of expired messages failed; housekeeping retries"),
            }
        }));
    }

    /// Sends `entry` to the dead-letter queue with `cause` (or drops it: see the module
    /// documentation). `expired` says which counter it adds to when dropped.
    ///
    /// A move that fails (the dead-letter queue cannot be reached or named, the store
    /// refused) puts a message that was not expired back in its place, still counted
    /// as failed that often: it stays in the queue, visible to browsing, purge and
    /// move, instead of waiting unseen in the store for a restart. (An expired one is
    /// found again by the next expiry page.)
    /// `done` hears when the move (or the drop's delete) has finished.
    fn dead_letter(
        &mut self,
        entry: Entry,
        cause: &str,
        expired: bool,
        done: Written,
        ctx: &mut Context<Self>,
    ) {
        let back = match (expired, entry.message.id) {
            (false, Some(id)) => Some(((id, 0), entry.clone())),
            _ => None,
        };
        if let Some(moved) = self.dead_letter_move(entry, cause, expired, done, ctx) {
            let (moved, done) = moved;
            ctx.spawn(moved.into_actor(self).map(move |result, act, ctx| {
                let failed = result.is_err();
                report(done, result.as_ref().map(|_| ()));
                act.count_move(result, expired);
                if let (true, Some((place, entry))) = (failed, back) {
                    act.cursor.put_back(place, entry);
                    act.dispatch(ctx);
                }
            }));
        }
    }

    /// The move of `entry` to the dead-letter queue, to be run (with `done`, to hear
    /// when it has); `None` when it has nowhere to go (non-persistent, or this is a
    /// dead-letter queue): then it is dropped and counted here, and its row deleted.
    fn dead_letter_move(
        &mut self,
        entry: Entry,
        cause: &str,
        expired: bool,
        done: Written,
        ctx: &mut Context<Self>,
    ) -> Option<(DeadLetterMove, Written)> {
        let name = self.core.key.name();
        let dlq = self.core.policy.dead_letter_queue_for(name);
        let (Some(id), Some(dead_letters), false) = (
            entry.message.id,
            self.dead_letters.clone(),
            dlq == name || name.starts_with("DLQ."),
        ) else {
            if expired {
                self.core.count_expired(1);
            } else {
                self.stats.discarded += 1;
                tracing::warn!(queue = %self.core.container, message_id = %entry.message.message_id, %cause,
                    "dead message discarded: it is non-persistent, or this queue is a dead-letter queue");
            }
            if let Some(id) = entry.message.id {
                self.delete_rows(vec![id], done, ctx);
            }
            return None;
        };
        let original = &entry.message;
        let mut headers = original.payload.headers.clone();
        headers.push((DLQ_CAUSE_HEADER.into(), cause.into()));
        headers.push((DLQ_ORIGIN_HEADER.into(), self.core.key.stomp()));
        let message = TopicMessage {
            id: None,
            message_id: original.message_id.clone(),
            persistent: true,
            priority: original.priority,
            // A dead letter does not expire (ActiveMQ clears the expiration).
            expiration: 0,
            payload: Arc::new(Payload {
                timestamp_ms: original.payload.timestamp_ms,
                headers,
                body: original.payload.body.clone(),
            }),
            charge: None,
            origin: None,
            redeliveries: 0,
        };
        let letter = AcceptDeadLetter {
            from: self.core.key.clone(),
            from_id: id,
            message,
        };
        let (events, from) = (self.core.events.clone(), self.core.key.clone());
        let (message_id, cause) = (original.message_id.clone(), cause.to_string());
        let moved: DeadLetterMove = Box::pin(async move {
            let to = DestinationKey::queue(&dlq).map_err(|e| ActorError::Invalid(e.to_string()))?;
            let moved = dead_letters
                .send(RouteDeadLetter {
                    to: to.clone(),
                    letter,
                })
                .await??;
            if let Moved::Added(_) = moved {
                events.emit(|| crate::events::Event::DeadLettered {
                    destination: from,
                    dead_letter_queue: to,
                    message_id,
                    cause,
                });
            }
            Ok(moved)
        });
        Some((moved, done))
    }

    /// Counts a finished move to the dead-letter queue.
    fn count_move(&mut self, result: Result<Moved, ActorError>, expired: bool) {
        match result {
            Ok(Moved::Added(_)) => {
                self.stats.dead_lettered += 1;
                self.core.count_expired(u64::from(expired));
            }
            // A dead-letter queue keeps no last values, so none supersedes a dead
            // letter; were one to, the message is gone from here: counted as dropped.
            Ok(Moved::Superseded) => {
                self.stats.discarded += 1;
                self.core.count_expired(u64::from(expired));
            }
            Ok(Moved::Gone) => {}
            Err(e) => {
                tracing::warn!(queue = %self.core.container, error = %e, "move to the dead-letter queue failed; the message stays in the queue")
            }
        }
        self.publish_gauges();
    }

    /// Stores that row `id` has `count` failed deliveries, so that a restart or a
    /// failover goes on counting (a failed write is logged and reported to `done`: the
    /// count in memory still holds while this broker runs).
    fn store_redeliveries(&mut self, id: i64, count: u32, done: Written, ctx: &mut Context<Self>) {
        self.write_failure(id, count, None, FailureWrite::Count { done }, ctx);
    }

    /// Queues a failed delivery's write (row `id` gets `count`, and `due` if held) in
    /// the batch, written with the next ack write.
    fn write_failure(
        &mut self,
        id: i64,
        count: u32,
        due: Option<i64>,
        write: FailureWrite,
        ctx: &mut Context<Self>,
    ) {
        let batch = &mut self.failures;
        match batch.rows.iter_mut().find(|row| row.0 == id) {
            Some(row) => *row = (id, count, due),
            None => batch.rows.push((id, count, due)),
        }
        batch.writes.push((id, write));
        // Goes with the next ack write (one is started now if none is in flight).
        drop(self.acks.add([]));
        self.write_acks(ctx);
    }

    /// A failed delivery's write of row `id` answered: its NACK hears it, and a held
    /// message waits in its row (or, its write failed, comes back at once).
    fn failure_written(
        &mut self,
        id: i64,
        write: FailureWrite,
        result: Result<(), &ActorError>,
        ctx: &mut Context<Self>,
    ) {
        match write {
            FailureWrite::Count { done } => {
                report(done, result);
                if let Err(e) = result {
                    tracing::warn!(queue = %self.core.container, id, error = %e,
                        "cannot store a message's redelivery count; a restart would count from 0");
                }
            }
            FailureWrite::Hold { place, due, done } => {
                report(done, result);
                let passed = self.held.hold_finished(due, id, result.is_ok());
                match result {
                    // Held in its row (a row already gone, acked, purged or replaced,
                    // stays gone): read back when due.
                    Ok(()) if !passed => {
                        self.held_back.remove(&place);
                    }
                    Ok(()) => {
                        // The reads passed its due time already (the clock went back):
                        // it waits in memory instead.
                        let wait = (due - now_ms()).clamp(0, i64::from(u32::MAX)) as u64;
                        ctx.run_later(Duration::from_millis(wait), move |act, ctx| {
                            act.come_back(place);
                            act.dispatch(ctx);
                        });
                    }
                    Err(e) => {
                        tracing::warn!(queue = %self.core.container, id, error = %e,
                            "cannot hold a redelivery back in the store; it is redelivered at once");
                        self.come_back(place);
                    }
                }
            }
        }
    }

    /// Deletes rows without counting them (a dead message with nowhere to go); `done`
    /// hears when the delete has finished.
    fn delete_rows(&mut self, ids: Vec<i64>, done: Written, ctx: &mut Context<Self>) {
        let (store, container) = (self.core.store.clone(), self.core.container.clone());
        ctx.spawn(async move { store.remove(container, ids).await }.into_actor(self).map(|result, act, _| {
            report(done, result.as_ref().map(|_| ()));
            if let Err(e) = result {
                tracing::warn!(queue = %act.core.container, error = %e, "delete of a dead message failed");
            }
        }));
    }

    /// A delivery ended without an ack: the message goes back in its place, or to the
    /// dead-letter queue past `maximum_redeliveries`. `done` hears when what this
    /// changed in the store (the failure count, a back-off hold, the move) is
    /// committed.
    fn give_back(&mut self, place: Place, why: &str, done: Written, ctx: &mut Context<Self>) {
        let Some(Delivered {
            mut entry,
            replaced,
        }) = self.delivered.remove(&place)
        else {
            return;
        };
        self.publish_gauges();
        if replaced {
            self.drop_replaced(place);
            return;
        }
        entry.failed_deliveries += 1;
        if entry.failed_deliveries > self.core.policy.maximum_redeliveries {
            let cause = format!(
                "{why}: delivery failed {} times (maximum_redeliveries {})",
                entry.failed_deliveries, self.core.policy.maximum_redeliveries
            );
            self.dead_letter(entry, &cause, false, done, ctx);
        } else {
            let wait = self
                .core
                .policy
                .redelivery_delay_after(entry.failed_deliveries);
            if wait > 0 {
                self.redeliver_later(place, entry, wait, done, ctx);
                return;
            }
            if let Some(id) = entry.message.id {
                self.store_redeliveries(id, entry.failed_deliveries, done, ctx);
            }
            self.cursor.put_back(place, entry);
        }
    }

    /// The redelivery back-off (ActiveMQ's `redeliveryDelay`, with
    /// `useExponentialBackOff`): the message comes back after `wait` ms while the
    /// messages behind it flow. A stored one waits in its row: one write stores its
    /// count and its due time with it, and the queue forgets it until it reads it back
    /// by due time ([`crate::queue_held`]) and puts it back in its place, marked
    /// redelivered; a failed write puts it back at once. A non-persistent one waits in
    /// memory (still charged to the queue's usage) and takes its place again. Either
    /// way it is dropped instead if a newer message with its last-value key arrives
    /// meanwhile (in the store, that message's commit deletes the held row). `done`
    /// hears when the hold is committed.
    fn redeliver_later(
        &mut self,
        place: Place,
        entry: Entry,
        wait: u64,
        done: Written,
        ctx: &mut Context<Self>,
    ) {
        self.stats.redeliveries_delayed += 1;
        // At least 1 ms: a hold is due after every read that may begin before it is
        // committed (see `queue_held`).
        let wait = wait.max(1);
        let due = now_ms().saturating_add(wait.min(i64::MAX as u64) as i64);
        let id = entry.message.id.filter(|_| place.1 == 0);
        let count = entry.failed_deliveries;
        self.held_back.insert(
            place,
            Delivered {
                entry,
                replaced: false,
            },
        );
        let Some(id) = id else {
            let wait = Duration::from_millis(wait.min(u64::from(u32::MAX)));
            ctx.run_later(wait, move |act, ctx| {
                act.come_back(place);
                act.dispatch(ctx);
            });
            return;
        };
        self.held.hold_started(due, id);
        let write = FailureWrite::Hold { place, due, done };
        self.write_failure(id, count, Some(due), write, ctx);
    }

    /// Reads back the held messages that are due (see [`crate::queue_held`]), a page
    /// at a time, while the cursor has room for them; otherwise sets the timer for
    /// the next one's due time.
    fn read_held_if_needed(&mut self, ctx: &mut Context<Self>) {
        let now = now_ms();
        let page = self.core.policy.max_page_size.max(1) as usize;
        let limit = page.min(self.cursor.room());
        if limit == 0 {
            return; // read once the consumers have taken some of what waits
        }
        let Some((after, upto)) = self.held.read_request(now) else {
            self.arm_held_timer(now, ctx);
            return;
        };
        let seq = self.cursor.begin_read();
        let store = Arc::clone(self.core.store.store());
        let container = self.core.container.clone();
        let limit = limit as u32;
        let read = async move { store.read_held(&container, after, upto, limit).await };
        ctx.spawn(read.into_actor(self).map(move |result, act, ctx| {
            match result {
                Ok(page) => act.held_read(page, limit),
                Err(e) => {
                    tracing::warn!(queue = %act.core.container, error = %e,
                        "reading the redeliveries held back failed; retrying in 1 s");
                    act.held.on_failed(now_ms());
                }
            }
            act.cursor.end_read(seq);
            act.prune_taken_held();
            act.dispatch(ctx);
        }));
    }

    /// A page of held messages read back: each goes back in its place, marked
    /// redelivered with its stored count, unless the queue holds it already or a newer
    /// last value replaced it while the read was in flight.
    fn held_read(&mut self, page: ebb_store::HeldPage, limit: u32) {
        let positions: Vec<(i64, i64)> = page
            .messages
            .iter()
            .map(|h| (h.due, h.message.id))
            .collect();
        let full = positions.len() >= limit as usize;
        for held in page.messages {
            let place = (held.message.id, 0);
            if self.delivered.contains_key(&place)
                || self.held_back.contains_key(&place)
                || self.taken_held.contains_key(&held.message.id)
                || self.cursor.get(place).is_some()
            {
                continue;
            }
            let message = Arc::new(TopicMessage::from_stored(&held.message));
            if self.cursor.is_superseded(place, &message) {
                continue;
            }
            self.stats.redeliveries_released += 1;
            self.cursor.put_back(place, Entry::new(message));
        }
        self.held.on_read(&positions, full, page.next_due);
    }

    /// Forgets the held rows taken whose take no read in flight can have missed.
    fn prune_taken_held(&mut self) {
        let oldest = self.cursor.oldest_read_in_flight().unwrap_or(u64::MAX);
        self.taken_held
            .retain(|_, answered| answered.is_none_or(|last| last >= oldest));
    }

    /// Sets the timer for the next held message's due time, unless one is set for
    /// that time or earlier.
    fn arm_held_timer(&mut self, now: i64, ctx: &mut Context<Self>) {
        let Some(at) = self.held.wake_at(now) else {
            return;
        };
        if at <= now
            || self
                .held_timer
                .as_ref()
                .is_some_and(|(armed, _)| *armed <= at)
        {
            return;
        }
        if let Some((_, handle)) = self.held_timer.take() {
            ctx.cancel_future(handle);
        }
        let wait = Duration::from_millis((at - now).min(i64::from(u32::MAX)) as u64);
        let handle = ctx.run_later(wait, |act, ctx| {
            act.held_timer = None;
            act.dispatch(ctx);
        });
        self.held_timer = Some((at, handle));
    }

    /// A failed delivery held back in memory comes back to its place, unless a newer
    /// message with its last-value key arrived meanwhile.
    fn come_back(&mut self, place: Place) {
        match self.held_back.remove(&place) {
            Some(Delivered { replaced: true, .. }) => self.drop_replaced(place),
            Some(Delivered { entry, .. }) => self.cursor.put_back(place, entry),
            None => {}
        }
    }

    /// A message that came back after a newer one with its last-value key replaced
    /// it is dropped, not redelivered (its row, if it had one, was deleted then).
    fn drop_replaced(&mut self, place: Place) {
        self.stats.replaced += 1;
        if place.1 == 0 {
            self.cursor.deleted(&[place.0]);
        }
    }

    /// A message with last-value key `key` at `below` was released: the older ones
    /// with that key in flight are marked (they are not redelivered), and for one that
    /// is not stored, the stored ones are deleted by a write of its own.
    fn supersede(&mut self, key: String, below: Place, ctx: &mut Context<Self>) {
        let header = self.core.key.capabilities().last_value_header;
        for (_, delivered) in self
            .delivered
            .iter_mut()
            .chain(self.held_back.iter_mut())
            .filter(|(place, _)| **place < below)
        {
            if delivered.entry.message.last_value_key(header) == Some(key.as_str()) {
                delivered.replaced = true;
            }
        }
        if below.1 == 0 {
            return; // stored: its commit deleted the older rows
        }
        let (store, container) = (self.core.store.clone(), self.core.container.clone());
        let (k, upto) = (key.clone(), below.0);
        let write = async move { store.replace_last_value(container, k, upto + 1).await };
        ctx.spawn(write.into_actor(self).map(move |result, act, _| {
            // What it deletes was counted when it was taken out of memory.
            if let Err(e) = result {
                tracing::warn!(queue = %act.core.container, key = %key, error = %e,
                    "cannot delete the stored messages a non-persistent last value replaces; they are delivered after a restart");
            }
            act.cursor.replacement_stored(&key, below);
        }));
    }

    /// Consumer `id` went away: what it held goes back. What it had handed to the
    /// application (its [`Subscribe::handed`]) counts as a failed delivery; what it
    /// only held goes back uncounted, in its place.
    fn detach(&mut self, id: u64, ctx: &mut Context<Self>) {
        let Some(consumer) = self.consumers.remove(&id) else {
            return;
        };
        let handed_up_to = handed_up_to(&consumer.handed);
        self.selective -= usize::from(consumer.selector.is_some());
        self.groups.release(id);
        if self.consumers.is_empty() && !self.caches_alone() {
            self.cursor.stop_caching();
        }
        for (delivery_id, place) in consumer.in_flight {
            if delivery_id <= handed_up_to {
                self.give_back(place, "consumer closed without ack", None, ctx);
            } else if let Some(Delivered { entry, replaced }) = self.delivered.remove(&place) {
                if replaced {
                    self.drop_replaced(place);
                } else {
                    self.cursor.put_back(place, entry);
                }
            }
        }
        self.publish_gauges();
    }

    /// Runs one expiry page (see the module documentation).
    fn page(&mut self, ctx: &mut Context<Self>) {
        if !destination::begin_page(self, ctx) {
            return;
        }
        let (store, budget) = (self.core.store.clone(), self.core.budget.clone());
        let container = self.core.container.clone();
        let limit = self.core.policy.max_expire_page_size.max(1);
        let to_dlq = self.core.policy.dead_letter_expired;
        let fut = async move {
            let Some(permit) = budget.acquire().await else {
                return Ok::<_, ActorError>((Vec::new(), Vec::new(), None));
            };
            if to_dlq {
                let rows = store
                    .store()
                    .read_expired(&container, now_ms(), limit)
                    .await?;
                return Ok((Vec::new(), rows, Some(permit)));
            }
            let ids = store.expire_queue(container, now_ms(), limit).await?;
            Ok((ids, Vec::new(), Some(permit)))
        };
        ctx.spawn(fut.into_actor(self).map(move |result, act, ctx| {
            let (removed, to_move, permit) = match result {
                Ok(page) => page,
                Err(e) => {
                    destination::page_failed(act, ctx, &e);
                    return;
                }
            };
            let rows = (removed.len() + to_move.len()) as u64;
            act.core.count_expired(removed.len() as u64);
            for id in &removed {
                act.cursor.remove(*id);
            }
            // A message in flight stays with its consumer; the others are taken off the
            // cursor now, before anything can dispatch them, and moved. The page (and its
            // permit) lasts until every move is committed, so a run never has more than
            // one page of moves in flight.
            let mut moves = Vec::new();
            for stored in to_move {
                if act.delivered.contains_key(&(stored.id, 0)) {
                    continue;
                }
                act.cursor.remove(stored.id);
                let entry = Entry::new(Arc::new(TopicMessage::from_stored(&stored)));
                if let Some((moved, _)) =
                    act.dead_letter_move(entry, "message expired", true, None, ctx)
                {
                    moves.push(moved);
                }
            }
            let progressed = !removed.is_empty() || !moves.is_empty();
            if !removed.is_empty() {
                act.group_acked();
            }
            let full = rows >= u64::from(limit) && progressed;
            let done = futures::future::join_all(moves);
            ctx.spawn(done.into_actor(act).map(move |results, act, ctx| {
                for result in results {
                    act.count_move(result, true);
                }
                let ticket = permit.map(|p| p.ticket);
                destination::page_finished(act, ctx, rows, ticket, full);
            }));
        }));
    }

    /// Reads whether the store holds expiring messages before anything else is handled.
    fn load(&mut self, ctx: &mut Context<Self>) {
        let store = Arc::clone(self.core.store.store());
        let container = self.core.container.clone();
        let fut = async move { store.has_expiring(&container).await };
        ctx.wait(fut.into_actor(self).map(|result, act, ctx| {
            match result {
                Ok(false) => {}
                Ok(true) => act.core.schedule.arm(),
                Err(e) => {
                    // Arm anyway: a page that finds nothing disarms it again.
                    tracing::warn!(queue = %act.core.container, error = %e, "cannot read whether messages expire; expiry armed");
                    act.core.schedule.arm();
                }
            }
            destination::schedule(act, ctx);
        }));
    }
}

impl Actor for QueueActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Waits are polled last first: the writes' wait chains the load after it.
        match self.after_writes.take() {
            Some(written) => {
                let wait = async move {
                    let _ = written.await;
                };
                ctx.wait(wait.into_actor(self).map(|(), act, ctx| {
                    act.core.carry_on_again();
                    let floor = act.core.store.store().last_assigned_id();
                    act.cursor.raise_floor(floor);
                    act.load(ctx);
                }));
            }
            None => self.load(ctx),
        }
        Drowsiness::start(self, ctx);
    }
}

/// Sleeping when idle (see [`crate::destination::sleep`]).
impl Sleeper for QueueActor {
    fn drowsiness(&mut self) -> &mut Drowsiness {
        &mut self.drowsiness
    }

    /// No consumer, no delivery, nothing in memory, no write or read in flight, no
    /// open transaction, no expiry run under way. (Redeliveries held in their rows may
    /// wait: the successor reads them back as after a restart; stored messages that
    /// expire later too: the registry wakes it for them, [`Slept::wake_at`].)
    fn may_sleep(&self) -> bool {
        let core = &self.core;
        !core.retired
            && !self.closing
            && self.consumers.is_empty()
            && self.delivered.is_empty()
            && self.held_back.is_empty()
            && self.cursor.is_at_rest()
            && self.completions.in_flight() == 0
            && self.acks.is_idle()
            && self.failures.rows.is_empty()
            && self.failures.writes.is_empty()
            && self.taken_held.is_empty()
            && core.prepared.transactions() == 0
            && core.prepared_writes == 0
            && core.order.waiting() == 0
            && core.fence.is_idle()
            && self.held.is_idle()
            && !self.scanning
            && !core.schedule.run_active()
    }

    /// Messages in and out, expiries, browses, takes.
    fn activity(&self) -> u64 {
        let c = self.core.counters();
        c.enqueued
            .wrapping_add(c.dispatched)
            .wrapping_add(c.expired)
            .wrapping_add(self.stats.dequeued)
            .wrapping_add(self.stats.dead_lettered)
            .wrapping_add(self.touched)
    }
}

impl Handler<Sleep> for QueueActor {
    type Result = ResponseFuture<Result<Slept, ActorError>>;

    fn handle(&mut self, _: Sleep, ctx: &mut Context<Self>) -> Self::Result {
        sleep::sleep(self, ctx)
    }
}

impl Handler<ExpireDue> for QueueActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: ExpireDue, ctx: &mut Context<Self>) -> Self::Result {
        sleep::expire_due(self, ctx)
    }
}

impl DestinationActor for QueueActor {
    fn core(&mut self) -> &mut DestinationCore {
        &mut self.core
    }

    fn completions(&mut self) -> &mut Completions<Self> {
        &mut self.completions
    }

    /// A persistent message is stored; any message with an expiration arms expiry (a
    /// non-persistent one expires in memory).
    fn plan(&self, message: &TopicMessage) -> Plan {
        Plan {
            store: message.persistent,
            arm_expiry: message.expiration > 0,
        }
    }

    /// Appends the messages to the cursor, in order, and dispatches.
    fn release(&mut self, messages: Vec<Arc<TopicMessage>>, ctx: &mut Context<Self>) {
        for message in messages {
            let offered = self.cursor.offer(message);
            self.stats.replaced += offered.replaced;
            if let Some((key, place)) = offered.supersedes {
                self.supersede(key, place, ctx);
            }
        }
        self.dispatch(ctx);
    }

    /// Drops expired non-persistent messages (they exist only here) and starts an
    /// expiry run if expiry is armed.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        self.core.counters_mut().ticks += 1;
        if !self.core.schedule.start_run(|| true) {
            return;
        }
        self.core.counters_mut().expiry_runs += 1;
        // Non-persistent messages exist only here: drop the expired ones (bounded by
        // what the queue holds in memory).
        let now = now_ms();
        for (_, entry) in self.cursor.take_expired(now) {
            if entry.message.id.is_none() {
                self.core.count_expired(1);
            } else if self.core.policy.dead_letter_expired {
                self.dead_letter(entry, "message expired", true, None, ctx);
            } else {
                // Stored: the page below deletes it and counts it.
            }
        }
        self.page(ctx);
    }

    fn expiry_page(&mut self, ctx: &mut Context<Self>) {
        self.page(ctx);
    }

    /// Only when no message in memory has an expiration either.
    fn may_disarm(&self) -> bool {
        self.cursor.transient_len() == 0
    }

    /// Answers the [`ExpireDue`]s waiting for the run (see [`sleep::run_ended`]).
    fn run_ended(&mut self, _: &mut Context<Self>) {
        sleep::run_ended(self);
    }

    fn in_use(&self) -> Option<String> {
        let n = self.consumers.len();
        (n > 0).then(|| format!("{n} consumers are attached"))
    }
}

destination_handlers!(QueueActor);

/// A message [`TakeMessages`] took off the queue: its row, and its entry when it was
/// waiting in memory (put back if the delete or move fails).
struct Taken {
    row: Arc<ebb_store::StoredMessage>,
    cached: Option<Entry>,
}

impl QueueActor {
    /// Takes what waits of `rows` off the cursor (see [`TakeMessages`]): cached ones
    /// out of memory, ones the cursor has not read yet marked taken ahead, so no read
    /// brings them back while their delete or move is in flight.
    fn take_rows(
        &mut self,
        rows: Vec<Arc<ebb_store::StoredMessage>>,
        page: &mut TakenPage,
    ) -> Vec<Taken> {
        let mut taken = Vec::with_capacity(rows.len());
        for row in rows {
            let place = (row.id, 0);
            if self.delivered.contains_key(&place) {
                page.in_flight += 1;
            } else if let Some(entry) = self.cursor.take(place) {
                taken.push(Taken {
                    row,
                    cached: Some(entry),
                });
            } else if row
                .held_until
                .is_some_and(|due| self.held.not_read_back(due, row.id))
                && !self.taken_held.contains_key(&row.id)
            {
                // Held back in its row, not read back yet: taken from the store, and
                // kept from the reads of held rows while its take is in flight.
                self.taken_held.insert(row.id, None);
                taken.push(Taken { row, cached: None });
            } else if self.cursor.is_ahead(row.id) || row.id <= self.cursor.covered_upto() {
                // Acked, or taken by a scan and being acked: its delete is on its way.
                page.gone += 1;
            } else {
                self.cursor.take_ahead(row.id);
                taken.push(Taken { row, cached: None });
            }
        }
        taken
    }

    /// A taken message whose delete or move failed: back in its place if it was
    /// cached; one the cursor had not read stays hidden until the queue restarts (its
    /// row is still stored, so nothing is lost).
    fn untake(&mut self, taken: Taken) {
        if let Some(entry) = taken.cached {
            self.cursor.put_back((taken.row.id, 0), entry);
        }
    }

    /// The dead letter's copy for its retry: without the headers the dead-letter
    /// queue added.
    fn retry_copy(row: &ebb_store::StoredMessage) -> TopicMessage {
        let mut payload = (*row.payload).clone();
        payload
            .headers
            .retain(|(name, _)| name != DLQ_CAUSE_HEADER && name != DLQ_ORIGIN_HEADER);
        TopicMessage {
            id: None,
            payload: Arc::new(payload),
            ..TopicMessage::from_stored(row)
        }
    }
}

impl Handler<TakeMessages> for QueueActor {
    type Result = ResponseActFuture<Self, Result<TakenPage, ActorError>>;

    fn handle(&mut self, msg: TakeMessages, _: &mut Context<Self>) -> Self::Result {
        if self.core.retired {
            return Box::pin(fut::ready(Err(self.core.retired_error())));
        }
        self.touched += 1;
        let TakeMessages {
            after,
            only,
            limit,
            action,
        } = msg;
        let limit = limit.max(1);
        let mut page = TakenPage::default();
        if action == TakeAction::Delete && after == 0 && only.is_none() {
            let transients: Vec<Place> = self
                .cursor
                .transients_between((0, 0), None, usize::MAX)
                .into_iter()
                .map(|(place, _)| place)
                .collect();
            for place in transients {
                self.cursor.take(place);
                page.taken += 1;
            }
        }
        let store = Arc::clone(self.core.store.store());
        let container = self.core.container.clone();
        let read = async move {
            match only {
                Some(ids) => {
                    let mut rows = Vec::new();
                    let mut missing = 0u64;
                    for id in ids.into_iter().take(limit as usize) {
                        let row = store.browse(&container, id.saturating_sub(1), 1).await?;
                        match row.into_iter().next() {
                            Some(row) if row.id == id => rows.push(row),
                            _ => missing += 1,
                        }
                    }
                    Ok::<_, ebb_store::StoreError>((rows, None, missing))
                }
                None => {
                    let rows = store.browse(&container, after, limit).await?;
                    let next = (rows.len() == limit as usize)
                        .then(|| rows.last().map(|r| r.id))
                        .flatten();
                    Ok((rows, next, 0))
                }
            }
        };
        Box::pin(read.into_actor(self).then(move |result, act, _| {
            let (rows, next, missing) = match result {
                Ok(read) => read,
                Err(e) => {
                    return futures::future::Either::Left(fut::ready(Err(ActorError::from(e))))
                }
            };
            page.next = next;
            page.gone += missing;
            let taken = act.take_rows(rows, &mut page);
            let (store, container) = (act.core.store.clone(), act.core.container.clone());
            let (here, route) = (act.core.key.clone(), act.dead_letters.clone());
            let work = async move {
                match action {
                    TakeAction::Delete => delete_taken(&store, container, taken).await,
                    TakeAction::Move(to) => (move_taken(taken, to, here, route).await, Ok(None)),
                }
            };
            futures::future::Either::Right(work.into_actor(act).map(
                move |(outcomes, deleted), act, ctx| act.finish_take(page, outcomes, deleted, ctx),
            ))
        }))
    }
}

/// What became of one taken message: moved or deleted (`Ok(Moved::Added(_))`; a purge
/// answers `Added(0)` for each, and counts the page's one delete), dropped by its
/// last-value target (`Ok(Moved::Superseded)`), already gone (`Ok(Moved::Gone)`), or
/// left in place with the reason (`Err`).
type TakeOutcome = (Taken, Result<Moved, LeftInPlace>);

/// Why a message a move, retry or purge took was left in place (the admin API's
/// `first_failure`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeftInPlace {
    /// A dead letter without the header naming its queue.
    #[error("message {id} has no {DLQ_ORIGIN_HEADER} header")]
    NoOrigin {
        /// Its store id.
        id: i64,
    },
    /// A dead letter whose origin header names no destination.
    #[error("{DLQ_ORIGIN_HEADER} `{origin}`: {reason}")]
    BadOrigin {
        /// The header's value.
        origin: String,
        /// Why it names none.
        reason: &'static str,
    },
    /// The target's kind takes no moved messages.
    #[error("{0} is not a queue")]
    NotATarget(DestinationKey),
    /// The target is the queue the message is in.
    #[error("{0} is the queue it is in")]
    SameQueue(DestinationKey),
    /// This queue was started without a way to reach others.
    #[error("this queue cannot reach other queues")]
    NoRoute,
    /// The store or the target refused it (their words).
    #[error("{0}")]
    Failed(String),
}

impl QueueActor {
    /// Counts a [`TakeMessages`] page's outcomes, puts back what failed and tells the
    /// cursor which rows are gone. `deleted` is a purge page's one delete: the rows
    /// it deleted, or its error (the call's error: nothing of the page was deleted).
    fn finish_take(
        &mut self,
        mut page: TakenPage,
        outcomes: Vec<TakeOutcome>,
        deleted: Result<Option<u64>, ActorError>,
        ctx: &mut Context<Self>,
    ) -> Result<TakenPage, ActorError> {
        let mut gone_ids = Vec::new();
        // The takes' writes have answered: reads begun from now on see what they did.
        let last_started = self.cursor.last_read_started();
        for answered in self.taken_held.values_mut() {
            answered.get_or_insert(last_started);
        }
        self.prune_taken_held();
        for (taken, outcome) in outcomes {
            match outcome {
                Ok(Moved::Added(_)) => {
                    page.taken += 1;
                    gone_ids.push(taken.row.id);
                }
                Ok(Moved::Superseded) => {
                    page.superseded += 1;
                    gone_ids.push(taken.row.id);
                }
                Ok(Moved::Gone) => {
                    page.gone += 1;
                    gone_ids.push(taken.row.id);
                }
                Err(why) => {
                    page.failed += 1;
                    tracing::warn!(queue = %self.core.container, id = taken.row.id, %why, "message left in place");
                    page.first_failure.get_or_insert_with(|| why.to_string());
                    self.untake(taken);
                }
            }
        }
        // A purge counts the rows the store deleted (a row acked meanwhile counts 0).
        if let Ok(Some(n)) = deleted {
            let asked = gone_ids.len() as u64;
            page.taken = page.taken - asked + n;
            page.gone += asked - n;
        }
        self.cursor.deleted(&gone_ids);
        self.dispatch(ctx);
        deleted.map(|_| page)
    }
}

/// A purge page's delete: one write of every taken row.
async fn delete_taken(
    store: &StoreHandle,
    container: String,
    taken: Vec<Taken>,
) -> (Vec<TakeOutcome>, Result<Option<u64>, ActorError>) {
    let ids: Vec<i64> = taken.iter().map(|t| t.row.id).collect();
    if ids.is_empty() {
        return (Vec::new(), Ok(Some(0)));
    }
    match store.remove(container, ids).await {
        Ok(n) => (
            taken
                .into_iter()
                .map(|t| (t, Ok(Moved::Added(0))))
                .collect(),
            Ok(Some(n)),
        ),
        Err(e) => {
            let why = LeftInPlace::Failed(e.to_string());
            let outcomes = taken.into_iter().map(|t| (t, Err(why.clone()))).collect();
            (outcomes, Err(e))
        }
    }
}

/// A move page: each taken message to `to`, or to the queue its
/// `originalDestination` names, through the registry (`route`), one store
/// transaction each ([`AcceptDeadLetter`]; a last-value queue may answer that it is
/// superseded there).
async fn move_taken(
    taken: Vec<Taken>,
    to: Option<DestinationKey>,
    here: DestinationKey,
    route: Option<Recipient<RouteDeadLetter>>,
) -> Vec<TakeOutcome> {
    let mut outcomes = Vec::with_capacity(taken.len());
    for t in taken {
        let target = match &to {
            Some(key) => Ok(key.clone()),
            None => original_destination(&t.row),
        };
        let target = target.and_then(|key| {
            if !key.capabilities().move_target {
                Err(LeftInPlace::NotATarget(key))
            } else if key == here {
                Err(LeftInPlace::SameQueue(key))
            } else {
                Ok(key)
            }
        });
        let outcome = match (target, &route) {
            (Err(why), _) => Err(why),
            (Ok(_), None) => Err(LeftInPlace::NoRoute),
            (Ok(to), Some(route)) => {
                let letter = AcceptDeadLetter {
                    from: here.clone(),
                    from_id: t.row.id,
                    message: QueueActor::retry_copy(&t.row),
                };
                match route.send(RouteDeadLetter { to, letter }).await {
                    Ok(Ok(moved)) => Ok(moved),
                    Ok(Err(e)) => Err(LeftInPlace::Failed(e.to_string())),
                    Err(e) => Err(LeftInPlace::Failed(e.to_string())),
                }
            }
        };
        outcomes.push((t, outcome));
    }
    outcomes
}

/// The queue a dead letter's `originalDestination` header names.
fn original_destination(row: &ebb_store::StoredMessage) -> Result<DestinationKey, LeftInPlace> {
    let (_, origin) = row
        .payload
        .headers
        .iter()
        .find(|(name, _)| name == DLQ_ORIGIN_HEADER)
        .ok_or(LeftInPlace::NoOrigin { id: row.id })?;
    DestinationKey::parse(origin).map_err(|e| LeftInPlace::BadOrigin {
        origin: origin.clone(),
        reason: e.reason,
    })
}

impl Handler<GroupMessages> for QueueActor {
    type Result = ();

    /// Its topic's messages, as a consumer group ([`GroupMessages`]): counted as
    /// enqueued and queued in id order as its own committed sends. A retired queue
    /// (deleted, or gone to sleep) drops them: its successor reads the stored ones.
    fn handle(&mut self, msg: GroupMessages, ctx: &mut Context<Self>) {
        if self.core.retired {
            return;
        }
        self.core.counters_mut().enqueued += msg.0.len() as u64;
        if msg.0.iter().any(|m| m.expiration > 0) {
            // As its own send with an expiration would: housekeeping watches it.
            self.core.schedule.arm();
            destination::schedule(self, ctx);
        }
        self.release(msg.0.to_vec(), ctx);
        self.publish_gauges();
    }
}

/// Stores the message (see [`AcceptDeadLetter`]) in its place in publish order. On a
/// last-value queue the store compares it with the value of its key by arrival
/// ([`ebb_store::WriteOp::DeadLetter`]): superseded, it takes no place and is counted
/// `replaced`; added, it replaces the older ones as a publish does.
impl Handler<AcceptDeadLetter> for QueueActor {
    type Result = ResponseActFuture<Self, Result<Moved, ActorError>>;

    fn handle(&mut self, msg: AcceptDeadLetter, _: &mut Context<Self>) -> Self::Result {
        if self.core.retired {
            return Box::pin(fut::ready(Err(self.core.retired_error())));
        }
        let row = self.core.new_message(&msg.message, None);
        let place = self.core.order.reserve();
        // In publish order, held while a fence is up (`destination::CommitFence`).
        let write = self.core.write_in_order(WriteOp::DeadLetter {
            container: msg.from.container(),
            id: msg.from_id,
            message: row,
        });
        let write = async move { Ok::<_, ActorError>(write.await?.dead_lettered()?) };
        let message = msg.message;
        Box::pin(
            write
                .into_actor(self)
                .map(move |result, act, ctx| match result {
                    Ok(Moved::Added(id)) => {
                        act.core.counters_mut().enqueued += 1;
                        let stored = TopicMessage {
                            id: Some(id),
                            ..message
                        };
                        act.fill(place, Some(stored), ctx);
                        Ok(Moved::Added(id))
                    }
                    Ok(other) => {
                        act.stats.replaced += u64::from(other == Moved::Superseded);
                        act.fill(place, None, ctx);
                        Ok(other)
                    }
                    Err(e) => {
                        act.fill(place, None, ctx);
                        Err(e)
                    }
                }),
        )
    }
}

impl Handler<Subscribe> for QueueActor {
    type Result = Result<u64, ActorError>;

    fn handle(&mut self, msg: Subscribe, ctx: &mut Context<Self>) -> Self::Result {
        if self.closing {
            return Err(ActorError::ShuttingDown);
        }
        if self.core.retired {
            return Err(self.core.retired_error());
        }
        if msg.durable.is_some() {
            return Err(ActorError::Invalid(
                "a queue has no durable subscriptions: its messages wait for any consumer".into(),
            ));
        }
        if msg.no_local.is_some() {
            return Err(ActorError::Invalid(
                "noLocal is for topics: a queue's message goes to one consumer, whoever sent it"
                    .into(),
            ));
        }
        let id = self.next_consumer;
        self.next_consumer += 1;
        let prefetch = msg.prefetch.unwrap_or(self.core.policy.queue_prefetch);
        let prefetch = prefetch.clamp(1, crate::subscription::MAX_PREFETCH) as usize;
        self.selective += usize::from(msg.selector.is_some());
        self.consumers.insert(
            id,
            Consumer {
                prefetch,
                deliver: msg.deliver,
                next_delivery_id: 1,
                in_flight: BTreeMap::new(),
                filter: Arc::new(
                    msg.selector
                        .as_ref()
                        .map(|s| s.required_headers())
                        .unwrap_or_default(),
                ),
                selector: msg.selector,
                examined_before: (i64::MIN, 0),
                scanned_upto: 0,
                exclusive: msg.exclusive,
                handed: msg.handed,
                gone: false,
            },
        );
        self.dispatch(ctx);
        Ok(id)
    }
}

impl QueueActor {
    /// The in-memory part of an ack ([`Ack`], [`TakeAck`]): the deliveries leave the
    /// consumer's in-flight set and are counted dequeued; returns the store ids of the
    /// stored ones, whose rows the ack deletes.
    fn ack_in_memory(
        &mut self,
        subscription: u64,
        delivery_id: u64,
        cumulative: bool,
        ctx: &mut Context<Self>,
    ) -> Result<Vec<i64>, ActorError> {
        let Some(consumer) = self.consumers.get_mut(&subscription) else {
            return Err(ActorError::UnknownSubscription(subscription));
        };
        let places: Vec<Place> = if cumulative {
            let rest = consumer.in_flight.split_off(&(delivery_id + 1));
            std::mem::replace(&mut consumer.in_flight, rest)
                .into_values()
                .collect()
        } else {
            let Some(place) = consumer.in_flight.remove(&delivery_id) else {
                return Err(ActorError::not_awaiting_ack(delivery_id));
            };
            vec![place]
        };
        let mut ids = Vec::new();
        for place in places {
            if let Some(done) = self.delivered.remove(&place) {
                self.stats.dequeued += 1;
                ids.extend(done.entry.message.id);
            }
        }
        self.dispatch(ctx);
        Ok(ids)
    }
}

impl Handler<Ack> for QueueActor {
    // Answered at once when nothing is to be written; else after the commit of the
    // delete that holds the ack (`AckBatch`), from a task of its own (not a future in
    // the actor's context: see `Completions`).
    type Result = Response<Result<(), ActorError>>;

    fn handle(&mut self, msg: Ack, ctx: &mut Context<Self>) -> Self::Result {
        let ids = match self.ack_in_memory(msg.subscription, msg.delivery_id, msg.cumulative, ctx) {
            Ok(ids) => ids,
            Err(e) => return Response::reply(Err(e)),
        };
        if ids.is_empty() {
            return Response::reply(Ok(()));
        }
        let answer = self.acks.add(ids);
        self.write_acks(ctx);
        Response::fut(async move { answer.await.unwrap_or(Err(ActorError::Closed)) })
    }
}

impl Handler<TakeAck> for QueueActor {
    type Result = Result<Vec<TakenAck>, ActorError>;

    fn handle(&mut self, msg: TakeAck, ctx: &mut Context<Self>) -> Self::Result {
        let ids = self.ack_in_memory(msg.subscription, msg.delivery_id, msg.cumulative, ctx)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(vec![TakenAck {
            write: ebb_store::WriteOp::Remove {
                container: self.core.container.clone(),
                ids,
            },
            stored: ctx.address().recipient(),
        }])
    }
}

impl Handler<AcksStored> for QueueActor {
    type Result = ();

    /// As after its own ack write: messages a scan took ahead of the cursor are
    /// forgotten once their delete is committed (see `QueueCursor::deleted`).
    fn handle(&mut self, msg: AcksStored, _: &mut Context<Self>) {
        if msg.committed {
            let ahead: Vec<i64> = msg
                .ids
                .into_iter()
                .filter(|id| self.cursor.is_ahead(*id))
                .collect();
            self.cursor.deleted(&ahead);
            self.group_acked();
        }
    }
}

impl Handler<Nack> for QueueActor {
    // Answered once what the NACK changed in the store (the failure count, the
    // back-off hold, the move to the dead-letter queue) is committed, so a receipt
    // survives a crash.
    type Result = ResponseFuture<Result<(), ActorError>>;

    fn handle(&mut self, msg: Nack, ctx: &mut Context<Self>) -> Self::Result {
        let Some(consumer) = self.consumers.get_mut(&msg.subscription) else {
            return Box::pin(std::future::ready(Err(ActorError::UnknownSubscription(
                msg.subscription,
            ))));
        };
        let Some(place) = consumer.in_flight.remove(&msg.delivery_id) else {
            let refused = ActorError::not_awaiting_ack(msg.delivery_id);
            return Box::pin(std::future::ready(Err(refused)));
        };
        let (done, written) = tokio::sync::oneshot::channel();
        self.give_back(place, "NACK", Some(done), ctx);
        self.dispatch(ctx);
        // A sender dropped without a report: every write was committed.
        Box::pin(async move { written.await.map_or(Ok(()), Err) })
    }
}

impl Handler<Detach> for QueueActor {
    type Result = ();

    fn handle(&mut self, msg: Detach, ctx: &mut Context<Self>) {
        self.detach(msg.subscription, ctx);
        self.dispatch(ctx);
    }
}

impl Handler<CloseConsumers> for QueueActor {
    // Answered once the acks accepted before it are committed: an empty ack joins the
    // batch after them.
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: CloseConsumers, ctx: &mut Context<Self>) -> Self::Result {
        self.closing = true;
        // Their senders go: each stream ends after what it holds. What they had in
        // flight stays stored (a non-persistent message ends with the broker). A
        // delivery the shutdown ends after the application had it failed, as one a
        // disconnect ends ([`QueueActor::detach`]): its count is stored now, before
        // the store closes, so the next start delivers it marked redelivered (it may
        // have been processed). What was only prefetched is not counted. The
        // consumers go: one that ends after this gives nothing back to write.
        let mut in_flight: Vec<(i64, u32)> = Vec::new();
        for (id, consumer) in std::mem::take(&mut self.consumers) {
            self.selective -= usize::from(consumer.selector.is_some());
            self.groups.release(id);
            let handed_up_to = handed_up_to(&consumer.handed);
            for (delivery_id, place) in consumer.in_flight {
                let Some(delivered) = self.delivered.remove(&place) else {
                    continue;
                };
                if let (true, false, Some(row)) = (
                    delivery_id <= handed_up_to,
                    delivered.replaced,
                    delivered.entry.message.id,
                ) {
                    in_flight.push((row, delivered.entry.failed_deliveries + 1));
                }
            }
        }
        self.publish_gauges();
        let committed = self.acks.add([]);
        self.write_acks(ctx);
        let (store, container) = (self.core.store.clone(), self.core.container.clone());
        Box::pin(async move {
            let _ = committed.await;
            if in_flight.is_empty() {
                return;
            }
            let writes = in_flight
                .iter()
                .map(|&(id, count)| store.redelivered(container.clone(), id, count, None));
            let results = futures::future::join_all(writes).await;
            let failed = results.iter().filter(|r| r.is_err()).count();
            if failed > 0 {
                tracing::warn!(queue = %container, failed, of = in_flight.len(),
                    "cannot store the redelivery counts of messages in flight at shutdown; the next start counts them from their stored counts");
            } else {
                tracing::info!(queue = %container, messages = in_flight.len(),
                    "messages in flight at shutdown are stored as redelivered");
            }
        })
    }
}

impl Handler<Browse> for QueueActor {
    type Result = ResponseActFuture<Self, Result<BrowsePage, ActorError>>;

    fn handle(&mut self, msg: Browse, _: &mut Context<Self>) -> Self::Result {
        self.touched += 1;
        let store = Arc::clone(self.core.store.store());
        let container = self.core.container.clone();
        let limit = msg.limit.max(1) as usize;
        let after = msg.after;
        let read = async move { store.browse(&container, after.0, limit as u32).await };
        Box::pin(read.into_actor(self).map(move |rows, act, _| {
            let rows = rows?;
            let store_done = rows.len() < limit;
            // A full page of rows ends at its last one: transients after it come next.
            let before = rows.last().filter(|_| !store_done).map(|m| (m.id, 0));
            let mut page: Vec<(Place, Arc<TopicMessage>)> = rows
                .iter()
                .filter(|m| (m.id, 0) > after)
                .map(|m| ((m.id, 0), Arc::new(TopicMessage::from_stored(m))))
                .collect();
            // In-flight non-persistent messages are with their consumer, not here.
            page.extend(act.cursor.transients_between(after, before, limit));
            page.sort_by_key(|(place, _)| *place);
            let end = store_done && page.len() <= limit;
            page.truncate(limit);
            let next = page.last().map_or(after, |(place, _)| *place);
            let now = now_ms();
            page.retain(|(_, m)| !m.is_expired(now));
            Ok(BrowsePage {
                messages: page,
                next,
                end,
            })
        }))
    }
}

impl Handler<GetStats> for QueueActor {
    type Result = Stats;

    fn handle(&mut self, _: GetStats, _: &mut Context<Self>) -> Stats {
        self.stats_now()
    }
}

impl Handler<GetQueueStats> for QueueActor {
    type Result = QueueStats;

    fn handle(&mut self, _: GetQueueStats, _: &mut Context<Self>) -> QueueStats {
        self.stats_now();
        QueueStats {
            counters: self.core.counters(),
            consumers: self.consumers.len() as u64,
            in_flight: self.delivered.len() as u64,
            pending_in_memory: self.cursor.len() as u64,
            pending_non_persistent: self.cursor.transient_len() as u64,
            cursor_live: self.cursor.is_live(),
            taken_ahead: self.cursor.ahead_len() as u64,
            message_groups: self.groups.len() as u64,
            exclusive_owner: self.exclusive_owner(),
            ..self.stats.clone()
        }
    }
}
