//! One online subscription's dispatch state, as a plain struct (no actor): prefetch
//! credit, in-flight deliveries, and the cursor that says what to deliver next.
//!
//! A non-durable subscription has an in-memory cursor: a bounded queue of messages.
//!
//! A durable subscription's cursor has two modes:
//! - **store**: its backlog is in the store. It reads it in pages of at most its free
//!   credit (`read_pending` after its position, bounded in SQL; with prioritized
//!   messages one position per priority, read highest priority first). Messages published
//!   while a read is in flight are kept aside (bounded); when a read comes back short
//!   (the backlog is exhausted), they are appended and the cursor turns live. If more
//!   arrived than could be kept, it stays in store mode and reads again, so nothing
//!   falls between the store and the live path, and nothing is delivered twice.
//! - **live**: new messages are queued in memory as they are published, up to a bound
//!   and while the topic's memory is under its limit; past either the queue is dropped
//!   and the cursor goes back to store mode (the store has every persistent message),
//!   so a slow durable consumer costs store, not memory.
//!
//! Deliveries never exceed the prefetch; expired messages are never delivered: they
//! are returned to the caller to ack in the store and count.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ebb_store::SubscriptionKey;
use tokio::sync::mpsc;

use crate::message::{handed_up_to, Delivery, Handed, TopicMessage};

/// The largest prefetch, as ActiveMQ's `MAX_PREFETCH_SIZE` (32,767); larger values
/// are lowered to it. A consumer's channel holds this many deliveries.
pub const MAX_PREFETCH: u32 = 32_767;

/// A message delivered and not yet acked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    pub store_id: Option<i64>,
    pub priority: u8,
}

/// What to read from the store for a durable cursor: `read_pending(after, priority,
/// ..)` for each `(priority, after)` in order, until `limit` rows are read in all.
/// One entry `(None, after)` without prioritized messages; ten, from priority 9 down,
/// with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    pub positions: Vec<(Option<u8>, i64)>,
    pub limit: u32,
}

#[derive(Debug)]
enum Mode {
    Store,
    Live,
}

#[derive(Debug)]
struct ReadInFlight {
    asked: u32,
    during: Vec<Arc<TopicMessage>>,
    overflow: bool,
}

#[derive(Debug)]
struct DurableCursor {
    /// Every persistent message with `id <=` its priority's position (the only one,
    /// index 0, without prioritized messages) was delivered, acked, or is in `ready`.
    queued_upto: Vec<i64>,
    mode: Mode,
    read: Option<ReadInFlight>,
    /// Percent of its memory limit above which a published message is left in the
    /// store instead of cached (the policy's `cursor_memory_high_water_mark`).
    high_water: u8,
}

impl DurableCursor {
    fn slot(&self, priority: u8) -> usize {
        if self.queued_upto.len() == 1 {
            0
        } else {
            usize::from(priority.min(ebb_store::MAX_PRIORITY))
        }
    }

    /// True when the store covers `message` already (at or below the position).
    fn covers(&self, message: &TopicMessage) -> bool {
        message
            .id
            .is_some_and(|id| id <= self.queued_upto[self.slot(message.priority)])
    }

    fn advance(&mut self, message: &TopicMessage) {
        if let Some(id) = message.id {
            let slot = self.slot(message.priority);
            self.queued_upto[slot] = self.queued_upto[slot].max(id);
        }
    }

    /// Moves positions back so that the dropped `messages` are read again.
    fn rewind(&mut self, messages: &VecDeque<Arc<TopicMessage>>) {
        for message in messages {
            if let Some(id) = message.id {
                let slot = self.slot(message.priority);
                self.queued_upto[slot] = self.queued_upto[slot].min(id - 1);
            }
        }
    }
}

/// The acks of a non-durable topic subscription in automatic ack mode, shared by its
/// consumer and its topic without a message per ack. For such a subscription an ack
/// only gives credit back (nothing is stored), and a consumer that keeps up would
/// otherwise send one ack message per delivery: at a hundred subscriptions that was
/// most of a fan-out's cost. The consumer records the last delivery it took
/// ([`AutoAcks::taken`]); the topic settles those acks whenever it dispatches, and only
/// when it finds no credit with messages waiting does it ask to be woken (the next
/// [`AutoAcks::taken`] says so, and the consumer sends a cumulative [`Ack`] then).
///
/// [`Ack`]: ../messages/struct.Ack.html
#[derive(Debug, Default)]
pub struct AutoAcks {
    /// Every delivery id up to this one was taken by the consumer (acked).
    taken_up_to: AtomicU64,
    /// The topic ran out of credit with messages waiting and waits to be woken.
    starved: AtomicBool,
}

impl AutoAcks {
    /// The consumer took every delivery up to `delivery_id`. True when the topic is
    /// waiting for credit: the caller then sends it a cumulative ack to wake it.
    pub fn taken(&self, delivery_id: u64) -> bool {
        self.taken_up_to.fetch_max(delivery_id, Ordering::SeqCst);
        self.starved.swap(false, Ordering::SeqCst)
    }

    fn up_to(&self) -> u64 {
        self.taken_up_to.load(Ordering::SeqCst)
    }

    /// The topic found no credit: the consumer's next [`AutoAcks::taken`] wakes it.
    /// (Set before the topic looks at the acks once more, so that either it sees the
    /// consumer's latest ack or the consumer sees the flag: no wake-up is lost.)
    fn starve(&self) {
        self.starved.store(true, Ordering::SeqCst);
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct SubscriptionState {
    pub id: u64,
    pub durable: Option<SubscriptionKey>,
    prefetch: u32,
    prioritized: bool,
    deliver: mpsc::Sender<Delivery>,
    next_delivery_id: u64,
    in_flight: BTreeMap<u64, InFlight>,
    /// Store ids delivered before and not acked (their next delivery is a redelivery).
    redeliveries: HashSet<i64>,
    /// Messages ready to deliver when credit allows.
    ready: VecDeque<Arc<TopicMessage>>,
    /// Most messages `ready` holds (the live queue's bound).
    ready_limit: usize,
    cursor: Option<DurableCursor>,
    /// Acks the consumer records without a message ([`AutoAcks`]).
    auto_acks: Option<Arc<AutoAcks>>,
    /// What the consumer handed to the application ([`Subscribe::handed`]).
    ///
    /// [`Subscribe::handed`]: ../messages/struct.Subscribe.html#structfield.handed
    handed: Option<Handed>,
    /// Only messages it matches are delivered.
    selector: Option<Arc<crate::selector::Selector>>,
    /// Stored messages a durable subscription's selector does not match, met by its
    /// cursor and not yet handed to the topic to ack ([`Self::take_skipped`]).
    skipped: Vec<(i64, u8)>,
    /// JMS `noLocal` (non-durable): messages from this origin are not offered.
    no_local: Option<u64>,
}

/// What [`SubscriptionState::take_ready`] produced.
#[derive(Debug, Default)]
pub struct Dispatch {
    pub deliveries: Vec<Delivery>,
    /// Messages that expired before delivery (not delivered, not counted as credit).
    pub expired: Vec<Arc<TopicMessage>>,
}

impl SubscriptionState {
    /// A non-durable subscription; at most `ready_limit` messages wait beyond its
    /// prefetch.
    pub fn non_durable(
        id: u64,
        prefetch: u32,
        ready_limit: usize,
        deliver: mpsc::Sender<Delivery>,
    ) -> Self {
        Self::new(id, None, prefetch, false, ready_limit, deliver, None)
    }

    /// A durable subscription whose backlog starts after `mark` (the lowest of its
    /// marks), in store mode.
    pub fn durable(
        id: u64,
        key: SubscriptionKey,
        mark: i64,
        prefetch: u32,
        prioritized: bool,
        deliver: mpsc::Sender<Delivery>,
    ) -> Self {
        let slots = if prioritized {
            usize::from(ebb_store::MAX_PRIORITY) + 1
        } else {
            1
        };
        let cursor = DurableCursor {
            queued_upto: vec![mark; slots],
            mode: Mode::Store,
            read: None,
            high_water: crate::policy::Policy::default().cursor_memory_high_water_mark,
        };
        let limit = prefetch.max(1) as usize;
        Self::new(
            id,
            Some(key),
            prefetch,
            prioritized,
            limit,
            deliver,
            Some(cursor),
        )
    }

    fn new(
        id: u64,
        durable: Option<SubscriptionKey>,
        prefetch: u32,
        prioritized: bool,
        ready_limit: usize,
        deliver: mpsc::Sender<Delivery>,
        cursor: Option<DurableCursor>,
    ) -> Self {
        Self {
            id,
            durable,
            prefetch: prefetch.clamp(1, MAX_PREFETCH),
            prioritized,
            deliver,
            next_delivery_id: 1,
            in_flight: BTreeMap::new(),
            redeliveries: HashSet::new(),
            ready: VecDeque::new(),
            ready_limit: ready_limit.max(1),
            cursor,
            auto_acks: None,
            handed: None,
            selector: None,
            skipped: Vec::new(),
            no_local: None,
        }
    }

    /// A non-durable subscription that is not offered the messages sent by
    /// connection `origin` ([`TopicMessage::origin`], JMS `noLocal`).
    pub fn no_local(mut self, origin: u64) -> Self {
        self.no_local = Some(origin);
        self
    }

    /// A subscription that is delivered only the messages `selector` matches. The
    /// others are not its messages: never delivered, never counted as delivered or
    /// expired for it; a durable one's cursor passes them and hands them to the topic
    /// ([`Self::take_skipped`]) to ack in the store, so its mark moves over them and
    /// cleanup can delete them once the other subscriptions are done.
    pub fn with_selector(mut self, selector: Arc<crate::selector::Selector>) -> Self {
        self.selector = Some(selector);
        self
    }

    /// Whether `message` is this subscription's (no selector, or the selector
    /// matches it).
    fn wants(&self, message: &TopicMessage) -> bool {
        self.selector.as_ref().is_none_or(|s| s.matches(message))
    }

    /// Stored messages the selector does not match that its cursor passed since the
    /// last call, `(id, priority)`: the topic acks them (uncounted) so the mark moves.
    pub fn take_skipped(&mut self) -> Vec<(i64, u8)> {
        std::mem::take(&mut self.skipped)
    }

    /// A non-durable subscription whose consumer acks automatically through `acks`
    /// ([`AutoAcks`]) instead of an ack message per delivery.
    pub fn with_auto_acks(mut self, acks: Arc<AutoAcks>) -> Self {
        self.auto_acks = Some(acks);
        self
    }

    /// Its consumer keeps `handed` ([`Subscribe::handed`]); without it every un-acked
    /// delivery counts as seen.
    ///
    /// [`Subscribe::handed`]: ../messages/struct.Subscribe.html#structfield.handed
    pub fn with_handed(mut self, handed: Option<Handed>) -> Self {
        self.handed = handed;
        self
    }

    /// A durable subscription's cursor stops caching published messages once their
    /// memory holds `percent` of its limit (the policy's
    /// `cursor_memory_high_water_mark`; 70 unless set). No effect on a non-durable one.
    pub fn with_cache_high_water(mut self, percent: u8) -> Self {
        if let Some(cursor) = &mut self.cursor {
            cursor.high_water = percent;
        }
        self
    }

    /// Frees the credit of the deliveries the consumer took ([`AutoAcks`]).
    fn settle_auto_acks(&mut self) {
        let Some(acks) = &self.auto_acks else {
            return;
        };
        let up_to = acks.up_to();
        while let Some(first) = self.in_flight.first_entry() {
            if *first.key() > up_to {
                break;
            }
            first.remove();
        }
    }

    /// Marks store ids that were delivered before, on an earlier attachment, and not
    /// acked: their next delivery carries `redelivered`.
    pub fn with_redeliveries(mut self, ids: impl IntoIterator<Item = i64>) -> Self {
        self.redeliveries.extend(ids);
        self
    }

    /// Store ids delivered to the application and not acked (kept by the topic when
    /// the consumer leaves, to mark them redelivered): those the consumer only held
    /// (prefetched, never handed over) are left out.
    pub fn unacked_store_ids(&self) -> impl Iterator<Item = i64> + '_ {
        let handed = handed_up_to(&self.handed);
        self.in_flight
            .range(..=handed)
            .filter_map(|(_, f)| f.store_id)
            .chain(self.redeliveries.iter().copied())
    }

    /// Deliveries the consumer may still receive before it must ack.
    pub fn credit(&self) -> usize {
        (self.prefetch as usize).saturating_sub(self.in_flight.len())
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// True when the consumer's channel is closed (it went away).
    pub fn is_closed(&self) -> bool {
        self.deliver.is_closed()
    }

    /// A message published to the topic. Returns how many waiting messages were
    /// discarded to stay within the bound (non-durable only).
    pub fn offer(&mut self, message: &Arc<TopicMessage>) -> u64 {
        let wanted =
            self.wants(message) && (self.no_local.is_none() || message.origin != self.no_local);
        let Some(cursor) = &mut self.cursor else {
            if !wanted {
                return 0;
            }
            self.ready.push_back(Arc::clone(message));
            let mut discarded = 0;
            while self.ready.len() > self.ready_limit {
                self.ready.pop_front();
                discarded += 1;
            }
            return discarded;
        };
        if cursor.covers(message) {
            return 0; // already covered by the store (sent before the subscription).
        }
        if !wanted {
            // Not its message: live, the cursor passes it (and it is acked); in store
            // mode the read that reaches it does the same.
            if matches!(cursor.mode, Mode::Live) {
                cursor.advance(message);
                if let Some(id) = message.id {
                    self.skipped.push((id, message.priority));
                }
            }
            return 0;
        }
        match cursor.mode {
            // Memory at its high-water mark: a stalled durable subscriber costs store,
            // not memory, and never makes a producer wait.
            Mode::Live
                if self.ready.len() < self.ready_limit
                    && !message.memory_above(cursor.high_water)
                    && !message.memory_full() =>
            {
                cursor.advance(message);
                self.ready.push_back(Arc::clone(message));
            }
            Mode::Live => {
                // Too far behind: the store has every persistent message; read it
                // from there. Non-persistent ones are not kept for a slow consumer.
                cursor.rewind(&self.ready);
                self.ready.clear();
                cursor.mode = Mode::Store;
            }
            Mode::Store => {
                if let Some(read) = &mut cursor.read {
                    if read.during.len() < self.ready_limit {
                        read.during.push(Arc::clone(message));
                    } else {
                        read.overflow = true;
                    }
                }
            }
        }
        0
    }

    /// The store read this cursor needs now, if any (durable, store mode, no read in
    /// flight, credit left). Marks the read as in flight.
    pub fn read_request(&mut self) -> Option<ReadRequest> {
        let free = self.credit().saturating_sub(self.ready.len());
        let cursor = self.cursor.as_mut()?;
        if !matches!(cursor.mode, Mode::Store) || cursor.read.is_some() || free == 0 {
            return None;
        }
        let limit = free.min(self.ready_limit) as u32;
        cursor.read = Some(ReadInFlight {
            asked: limit,
            during: Vec::new(),
            overflow: false,
        });
        let positions = if cursor.queued_upto.len() == 1 {
            vec![(None, cursor.queued_upto[0])]
        } else {
            (0..=ebb_store::MAX_PRIORITY)
                .rev()
                .map(|p| (Some(p), cursor.queued_upto[usize::from(p)]))
                .collect()
        };
        Some(ReadRequest { positions, limit })
    }

    /// The answer to the read from [`Self::read_request`] (`None` when it failed: the
    /// next read asks again).
    pub fn on_read(&mut self, rows: Option<Vec<Arc<TopicMessage>>>) {
        let Some(cursor) = self.cursor.as_mut() else {
            return;
        };
        let Some(read) = cursor.read.take() else {
            return;
        };
        let Some(rows) = rows else { return };
        let in_flight: HashSet<i64> = self.in_flight.values().filter_map(|f| f.store_id).collect();
        let short = (rows.len() as u32) < read.asked;
        let selector = self.selector.as_deref();
        let wants = |m: &TopicMessage| selector.is_none_or(|s| s.matches(m));
        for row in rows {
            let Some(id) = row.id else { continue };
            cursor.advance(&row);
            if !wants(&row) {
                self.skipped.push((id, row.priority));
            } else if !in_flight.contains(&id) {
                self.ready.push_back(row);
            }
        }
        if short && !read.overflow {
            for message in read.during {
                if cursor.covers(&message) {
                    continue;
                }
                cursor.advance(&message);
                if !wants(&message) {
                    if let Some(id) = message.id {
                        self.skipped.push((id, message.priority));
                    }
                    continue;
                }
                self.ready.push_back(message);
            }
            cursor.mode = Mode::Live;
        }
    }

    /// Takes what can be delivered now (within credit), in order (highest priority
    /// first with prioritized messages), and the expired messages met on the way.
    pub fn take_ready(&mut self, now_ms: i64) -> Dispatch {
        let mut out = Dispatch::default();
        loop {
            self.settle_auto_acks();
            self.take_within_credit(now_ms, &mut out);
            let Some(acks) = &self.auto_acks else { break };
            if self.credit() > 0 || self.ready.is_empty() {
                break;
            }
            // Out of credit with messages waiting: ask to be woken, then look at the
            // acks once more (the consumer may have taken more meanwhile).
            acks.starve();
            let before = self.in_flight.len();
            self.settle_auto_acks();
            if self.in_flight.len() == before {
                break;
            }
        }
        out
    }

    fn take_within_credit(&mut self, now_ms: i64, out: &mut Dispatch) {
        while self.credit() > 0 {
            let next = if self.prioritized {
                let best = self
                    .ready
                    .iter()
                    .enumerate()
                    .max_by_key(|(i, m)| (m.priority, std::cmp::Reverse(*i)))
                    .map(|(i, _)| i);
                best.and_then(|i| self.ready.remove(i))
            } else {
                self.ready.pop_front()
            };
            let Some(message) = next else { break };
            if message.is_expired(now_ms) {
                out.expired.push(message);
                continue;
            }
            let delivery_id = self.next_delivery_id;
            self.next_delivery_id += 1;
            let redelivered = message.id.is_some_and(|id| self.redeliveries.remove(&id));
            self.in_flight.insert(
                delivery_id,
                InFlight {
                    store_id: message.id,
                    priority: message.priority,
                },
            );
            out.deliveries.push(Delivery {
                subscription: self.id,
                delivery_id,
                message,
                redelivered,
                source: None,
            });
        }
    }

    /// Sends deliveries to the consumer. Returns false when the consumer is gone.
    pub fn send(&mut self, deliveries: Vec<Delivery>) -> bool {
        for delivery in deliveries {
            if self.deliver.try_send(delivery).is_err() {
                return false;
            }
        }
        true
    }

    /// Releases one delivery without acking it (NACK): its slot is free again; a
    /// stored message is remembered as a redelivery for the next attachment. Returns
    /// whether the delivery was in flight.
    pub fn release(&mut self, delivery_id: u64) -> Option<InFlight> {
        let released = self.in_flight.remove(&delivery_id)?;
        if let Some(id) = released.store_id {
            self.redeliveries.insert(id);
        }
        Some(released)
    }

    /// Acks one delivery, or (cumulative) every in-flight delivery up to it. Returns
    /// the acked messages; unknown delivery ids ack nothing.
    pub fn ack(&mut self, delivery_id: u64, cumulative: bool) -> Vec<InFlight> {
        if cumulative {
            let rest = self.in_flight.split_off(&(delivery_id + 1));
            let acked = std::mem::replace(&mut self.in_flight, rest);
            acked.into_values().collect()
        } else {
            self.in_flight.remove(&delivery_id).into_iter().collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_store::Payload;

    fn msg(id: Option<i64>, priority: u8, expiration: i64) -> Arc<TopicMessage> {
        Arc::new(TopicMessage {
            id,
            message_id: format!("m{id:?}"),
            persistent: id.is_some(),
            priority,
            expiration,
            payload: Arc::new(Payload::default()),
            charge: None,
            origin: None,
            redeliveries: 0,
        })
    }

    fn durable(prefetch: u32, prioritized: bool) -> (SubscriptionState, mpsc::Receiver<Delivery>) {
        let (tx, rx) = mpsc::channel(1000);
        let key = SubscriptionKey::new("c", "s");
        (
            SubscriptionState::durable(1, key, 10, prefetch, prioritized, tx),
            rx,
        )
    }

    fn req(after: i64, limit: u32) -> ReadRequest {
        ReadRequest {
            positions: vec![(None, after)],
            limit,
        }
    }

    fn ids(d: &Dispatch) -> Vec<i64> {
        d.deliveries.iter().map(|d| d.message.id.unwrap()).collect()
    }

    #[test]
    fn durable_reads_backlog_then_follows_live_without_gap_or_duplicate() {
        let (mut s, _rx) = durable(5, false);
        assert_eq!(s.read_request(), Some(req(10, 5)));
        // Published while the read is in flight: 15 is also in the read's snapshot.
        s.offer(&msg(Some(15), 4, 0));
        s.offer(&msg(Some(16), 4, 0));
        s.on_read(Some(vec![msg(Some(11), 4, 0), msg(Some(15), 4, 0)]));
        let d = s.take_ready(0);
        assert_eq!(ids(&d), vec![11, 15, 16]);
        // Live now: new messages are queued from memory, no read needed.
        s.offer(&msg(Some(17), 4, 0));
        assert_eq!(s.read_request(), None);
        assert_eq!(ids(&s.take_ready(0)), vec![17]);
        assert_eq!(s.credit(), 1);
    }

    #[test]
    fn full_read_stays_in_store_mode_and_reads_on() {
        let (mut s, _rx) = durable(2, false);
        let r = s.read_request().unwrap();
        s.on_read(Some(vec![msg(Some(11), 4, 0), msg(Some(12), 4, 0)]));
        assert_eq!(r.limit, 2);
        assert_eq!(ids(&s.take_ready(0)), vec![11, 12]);
        assert_eq!(s.read_request(), None, "no credit");
        s.ack(2, true);
        assert_eq!(s.read_request(), Some(req(12, 2)));
    }

    #[test]
    fn overflow_during_read_reads_again_instead_of_going_live() {
        let (mut s, _rx) = durable(1, false);
        s.read_request().unwrap();
        s.offer(&msg(Some(20), 4, 0));
        s.offer(&msg(Some(21), 4, 0)); // over the bound of 1: overflow
        s.on_read(Some(vec![]));
        assert_eq!(s.read_request(), Some(req(10, 1)));
    }

    #[test]
    fn auto_acks_give_credit_back_without_a_message_and_wake_a_starved_topic() {
        let (tx, _rx) = mpsc::channel(10);
        let acks = Arc::new(AutoAcks::default());
        let mut s = SubscriptionState::non_durable(1, 2, 100, tx).with_auto_acks(acks.clone());
        for id in 1..=5 {
            s.offer(&msg(Some(id), 4, 0));
        }
        let first = s.take_ready(0);
        assert_eq!(ids(&first), vec![1, 2], "prefetch 2");
        // Out of credit with 3..5 waiting: the topic asked to be woken.
        assert!(
            acks.taken(1),
            "the first take after starving wakes the topic"
        );
        assert!(!acks.taken(1), "once");
        // The topic dispatches (woken, or for a publish): the taken one is settled.
        assert_eq!(ids(&s.take_ready(0)), vec![3]);
        assert_eq!(s.in_flight(), 2);
        // Out of credit again with 4 and 5 waiting: the next take wakes it again.
        assert!(acks.taken(3));
        assert_eq!(ids(&s.take_ready(0)), vec![4, 5]);
        assert_eq!(s.in_flight(), 2);
        // Nothing waits: no wake-up is asked for; the acks are settled at the next
        // dispatch.
        assert!(!acks.taken(5));
        assert_eq!(ids(&s.take_ready(0)), Vec::<i64>::new());
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn slow_live_consumer_falls_back_to_the_store() {
        let (mut s, _rx) = durable(2, false);
        s.read_request().unwrap();
        s.on_read(Some(vec![]));
        for id in 11..=14 {
            s.offer(&msg(Some(id), 4, 0));
        }
        // The queue held 11 and 12; 13 overflowed: back to the store after 10.
        assert_eq!(s.read_request(), Some(req(10, 2)));
    }

    #[test]
    fn reread_skips_messages_in_flight() {
        let (mut s, _rx) = durable(2, true);
        s.read_request().unwrap();
        s.on_read(Some(vec![]));
        s.offer(&msg(Some(11), 4, 0));
        let first = s.take_ready(0);
        assert_eq!(ids(&first), vec![11]);
        s.offer(&msg(Some(12), 1, 0));
        s.offer(&msg(Some(13), 9, 0));
        assert_eq!(ids(&s.take_ready(0)), vec![13], "higher priority first");
        // 12 waits (no credit); 14 fits, 15 overflows: back to the store, each
        // priority's position just below what was dropped.
        s.offer(&msg(Some(14), 4, 0));
        s.offer(&msg(Some(15), 4, 0));
        s.ack(first.deliveries[0].delivery_id, false);
        let r = s.read_request().unwrap();
        assert_eq!(r.limit, 1);
        assert_eq!(r.positions.len(), 10, "one position per priority, 9 first");
        assert_eq!(r.positions[0], (Some(9), 13));
        assert_eq!(r.positions[5], (Some(4), 13), "14 is read again");
        assert_eq!(r.positions[8], (Some(1), 11), "12 is read again");
        // The store returns 13 too (delivered, not acked): it is not delivered again.
        s.on_read(Some(vec![
            msg(Some(12), 1, 0),
            msg(Some(13), 9, 0),
            msg(Some(14), 4, 0),
        ]));
        let d = s.take_ready(0);
        assert_eq!(ids(&d), vec![14]);
        s.ack(d.deliveries[0].delivery_id, false);
        assert_eq!(ids(&s.take_ready(0)), vec![12]);
    }

    #[test]
    fn expired_messages_are_not_delivered_and_use_no_credit() {
        let (mut s, _rx) = durable(1, false);
        s.read_request().unwrap();
        s.on_read(Some(vec![msg(Some(11), 4, 5), msg(Some(12), 4, 0)]));
        let d = s.take_ready(100);
        assert_eq!(d.expired.len(), 1);
        assert_eq!(ids(&d), vec![12]);
    }

    #[test]
    fn non_durable_discards_oldest_over_its_bound() {
        let (tx, _rx) = mpsc::channel(10);
        let mut s = SubscriptionState::non_durable(1, 1, 2, tx);
        let mut discarded = 0;
        for i in 0..4 {
            discarded += s.offer(&msg(None, 4, 0).clone());
            let _ = i;
        }
        assert_eq!(discarded, 2);
        assert_eq!(s.take_ready(0).deliveries.len(), 1);
    }

    #[test]
    fn release_frees_the_slot_and_marks_a_redelivery() {
        let (mut s, _rx) = durable(1, false);
        s.read_request().unwrap();
        s.on_read(Some(vec![msg(Some(11), 4, 0)]));
        let d = s.take_ready(0);
        assert_eq!(s.credit(), 0);
        assert!(s.release(d.deliveries[0].delivery_id).is_some());
        assert_eq!(s.credit(), 1);
        assert!(
            s.release(d.deliveries[0].delivery_id).is_none(),
            "only once"
        );
        assert_eq!(s.unacked_store_ids().collect::<Vec<_>>(), vec![11]);
    }

    #[test]
    fn cumulative_ack_acks_everything_up_to_the_delivery() {
        let (mut s, _rx) = durable(5, false);
        s.read_request().unwrap();
        s.on_read(Some((11..=13).map(|id| msg(Some(id), 4, 0)).collect()));
        let d = s.take_ready(0);
        assert_eq!(d.deliveries.len(), 3);
        assert_eq!(s.ack(2, true).len(), 2);
        assert_eq!(s.in_flight(), 1);
        assert_eq!(s.ack(2, false).len(), 0, "already acked");
        assert_eq!(s.ack(3, false)[0].store_id, Some(13));
    }
}
