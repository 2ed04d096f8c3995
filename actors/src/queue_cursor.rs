//! A queue's cursor, as a plain struct (no actor): which messages wait for a consumer,
//! in what order, and what to read from the store next.
//!
//! Messages wait in memory in a map ordered by their place in the queue: a stored
//! message by its store id (send order), a non-persistent one just after the last id
//! the store had assigned when it arrived. A message a consumer gave back (NACK, or its
//! consumer closed) goes back in its place, so it is the next one dispatched.
//!
//! Persistent messages are all in the store; the cursor caches some of them. It has two
//! modes, like a durable subscription's cursor ([`crate::subscription`]):
//! - **live**: every stored message with an id above `paged_upto` is cached as it is
//!   published. When the cache holds `cache_limit` messages, or the memory the message
//!   is charged to (the broker's) holds its high-water mark
//!   (`cursor_memory_high_water_mark`, 70 % by default, as ActiveMQ's store cursor), the
//!   next persistent message is left in the store and the cursor turns to store mode.
//!   What the cache holds counts in memory, but stays below that mark: a backlog
//!   without consumers costs store, not memory, and never makes a producer wait, on
//!   this queue or another (only non-persistent messages and messages in flight use the
//!   memory above the mark).
//! - **store**: when the cache falls below half its limit, the queue reads the next page
//!   (`browse` after `paged_upto`, bounded in SQL). Messages published while a read is in
//!   flight are kept aside (bounded); when a read comes back short (the store has no
//!   more), those above the page are added and the cursor turns live. If more were
//!   published than could be kept aside, it stays in store mode and reads again, so no
//!   message falls between the store and the live path.
//!
//! Non-persistent messages are cached whatever the mode (they exist nowhere else); the
//! broker's memory limit bounds them through producer flow control. In store mode, one
//! above the cursor's position waits for the reads to pass its place before it is
//! handed out, so a producer's mix of persistent and non-persistent messages keeps its
//! order.
//!
//! **Nobody consuming.** The queue reads only while a consumer is attached, and turns
//! the cursor to store mode when its last consumer leaves ([`QueueCursor::stop_caching`]):
//! a backlog nobody consumes costs no memory, however many queues hold one. A queue
//! with a `memory_limit` of its own goes on caching, so that its producers are held
//! once it is full (producer flow control, case FLOW-01).
//!
//! **Out of order.** A consumer with a selector may find nothing it matches in the
//! cache while the cache is full of messages no one takes (case SEL-10: 450 messages
//! for other consumers ahead of 3 for it). The queue then scans the store beyond the
//! cursor for that consumer ([`QueueCursor::scan_floor`]) and delivers what matches from
//! there; the cursor records each such message as taken ahead
//! ([`QueueCursor::take_ahead`]) so that neither a later read nor the message's own
//! (late-released) publish queues it again. It forgets one once nothing can bring it
//! back: the cursor's reads have passed it, or its row is deleted and every read that
//! began before the delete has returned ([`QueueCursor::begin_read`], [`QueueCursor::deleted`]). So
//! what it remembers is bounded by the consumers' prefetch and the acks in flight, not
//! by the backlog.
//!
//! **Last values.** On a kind that keeps one message per value of a header (a
//! last-value queue: [`QueueCursor::with_last_values`]), a message offered with a key
//! replaces the older ones with that key: those waiting in memory are taken out, and a
//! stored one's rows were already deleted by the store transaction that committed it
//! (a message that is not stored has the queue delete them by a write of its own).
//! A read of the store that began before such a delete committed may still return the
//! older rows: while one is in flight, the cursor remembers the replacement (key and
//! place) and drops what comes back of it; it forgets it once every read that began
//! before the delete has returned.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::message::TopicMessage;

/// A message's place in the queue: `(store id, 0)` for a stored message, `(last id the
/// store had assigned, n)` (n from 1) for a non-persistent one.
pub type Place = (i64, u64);

/// A message waiting in (or given back to) the queue.
#[derive(Debug, Clone)]
pub struct Entry {
    pub message: Arc<TopicMessage>,
    /// Deliveries that ended without an ack (NACK, consumer closed): its redelivery
    /// count (JMS `JMSXDeliveryCount` - 1).
    pub failed_deliveries: u32,
}

impl Entry {
    /// A message waiting, with the failed deliveries the store counted for it.
    pub fn new(message: Arc<TopicMessage>) -> Self {
        Self {
            failed_deliveries: message.redeliveries,
            message,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Mode {
    Store,
    Live,
}

/// A stored message a scan took ahead of the cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ahead {
    /// Its own publish reached the cursor (or it was stored before the queue started):
    /// no late [`QueueCursor::offer`] of it can come any more.
    released: bool,
    /// Its row is deleted (acked); the number of the last read started before the
    /// delete committed (a read started later cannot return it).
    deleted_after: Option<u64>,
}

/// A message with a last-value key replaced the older ones with that key: while a
/// read that began before the replacement was committed is in flight, its rows of
/// that key below `below` are dropped when they come back (see "Last values" in the
/// module documentation).
#[derive(Debug)]
struct Superseded {
    key: String,
    below: Place,
    /// The number of the last read started before the older rows' delete committed;
    /// `None` while that delete is not yet committed (a message that is not stored
    /// replaces stored ones by a write of its own: [`QueueCursor::replacement_stored`]).
    after_read: Option<u64>,
}

/// What [`QueueCursor::offer`] did besides queueing the message.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Offered {
    /// Waiting messages it replaced (they were taken out of memory).
    pub replaced: u64,
    /// Its last-value key and place, when it has a key: every older message with that
    /// key is replaced (the queue also marks those in flight).
    pub supersedes: Option<(String, Place)>,
}

#[derive(Debug)]
struct ReadInFlight {
    asked: u32,
    during: Vec<Arc<TopicMessage>>,
    overflow: bool,
}

/// See the module documentation.
#[derive(Debug)]
pub struct QueueCursor {
    pending: BTreeMap<Place, Entry>,
    /// How many of `pending` are non-persistent (kept with every insert and removal).
    transients: usize,
    cache_limit: usize,
    /// Percent of its memory limit above which a published stored message is left in
    /// the store (see the module documentation).
    high_water: u8,
    mode: Mode,
    /// Every stored message with `id <=` this is cached, in flight, or gone.
    paged_upto: i64,
    read: Option<ReadInFlight>,
    next_transient: u64,
    /// The highest id of a persistent message offered (published) so far, or the
    /// store's highest id when the queue started: a non-persistent message's place.
    published_upto: i64,
    /// Ids the latest reads returned (the most recent `4 * cache_limit`): a message's
    /// own publish may be released after a read already found it in the store, and must
    /// not be queued twice.
    read_ids: BTreeSet<i64>,
    /// Stored messages above `paged_upto` that a selector's scan took ahead of the
    /// cursor ([`Self::take_ahead`]): never queued from a read or a publish while
    /// here. See "Out of order" in the module documentation.
    ahead: BTreeMap<i64, Ahead>,
    /// Reads of the store in flight (the cursor's and scans), by start number.
    reads_in_flight: BTreeSet<u64>,
    next_read: u64,
    /// The start number of the cursor's own read in flight.
    cursor_read: Option<u64>,
    /// The lowest place a message was put at since [`Self::take_lowest_inserted`]
    /// last looked (by a publish, a read, a give-back).
    lowest_inserted: Option<Place>,
    /// The header whose value keeps one message per value (a last-value queue), if any.
    last_value_header: Option<&'static str>,
    /// Replacements that reads in flight may not have seen (bounded by what is
    /// published while a read is in flight).
    superseded: Vec<Superseded>,
}

impl QueueCursor {
    /// A cursor that first reads the store (a queue may have a backlog from an earlier
    /// run); at most `cache_limit` messages cached (at least 2), and published ones only
    /// while their memory is below `high_water` percent of its limit. `floor` is the
    /// store's highest id when the queue starts (every message published from then on
    /// gets a higher one; the backlog's are at most it).
    pub fn new(cache_limit: usize, high_water: u8, floor: i64) -> Self {
        Self {
            pending: BTreeMap::new(),
            transients: 0,
            cache_limit: cache_limit.max(2),
            high_water,
            mode: Mode::Store,
            paged_upto: 0,
            read: None,
            next_transient: 1,
            published_upto: floor,
            read_ids: BTreeSet::new(),
            ahead: BTreeMap::new(),
            reads_in_flight: BTreeSet::new(),
            next_read: 1,
            cursor_read: None,
            lowest_inserted: None,
            last_value_header: None,
            superseded: Vec::new(),
        }
    }

    /// The cursor of a kind that keeps one waiting message per value of `header`
    /// ([`crate::kinds::Capabilities::last_value_header`]).
    pub fn with_last_values(mut self, header: Option<&'static str>) -> Self {
        self.last_value_header = header;
        self
    }

    /// The last-value key of `message`, if this cursor keeps last values.
    fn key_of<'m>(&self, message: &'m TopicMessage) -> Option<&'m str> {
        message.last_value_key(self.last_value_header)
    }

    /// `message` (at `place`) was replaced by a newer message with its key.
    pub fn is_superseded(&self, place: Place, message: &TopicMessage) -> bool {
        let Some(key) = self.key_of(message) else {
            return false;
        };
        self.superseded
            .iter()
            .any(|s| s.key == key && place < s.below)
    }

    /// A newer message with key `key` at `below` replaces the older ones: those
    /// waiting are taken out (returned: how many), those kept aside by a read in
    /// flight are dropped, and what reads in flight (or, with `stored: false`, reads
    /// before [`Self::replacement_stored`]) bring back of them is dropped too.
    fn supersede(&mut self, key: &str, below: Place, stored: bool) -> u64 {
        let header = self.last_value_header;
        let older: Vec<Place> = self
            .pending
            .range(..below)
            .filter(|(_, e)| e.message.last_value_key(header) == Some(key))
            .map(|(p, _)| *p)
            .collect();
        for place in &older {
            self.unput(*place);
        }
        if let Some(read) = &mut self.read {
            read.during.retain(|m| {
                m.last_value_key(header) != Some(key) || m.id.is_none_or(|id| (id, 0) >= below)
            });
        }
        if !stored || !self.reads_in_flight.is_empty() {
            self.superseded.push(Superseded {
                key: key.to_string(),
                below,
                after_read: stored.then(|| self.next_read - 1),
            });
        }
        older.len() as u64
    }

    /// The write that deleted the stored messages a message that is not stored
    /// replaced (key `key`, at `below`) was answered (committed or failed): reads
    /// that begin from now on cannot see them.
    pub fn replacement_stored(&mut self, key: &str, below: Place) {
        let last_started = self.next_read - 1;
        for s in &mut self.superseded {
            if s.key == key && s.below == below && s.after_read.is_none() {
                s.after_read = Some(last_started);
            }
        }
        self.prune_superseded();
    }

    /// Forgets replacements no read in flight can have missed.
    fn prune_superseded(&mut self) {
        let oldest_read = self.reads_in_flight.first().copied().unwrap_or(u64::MAX);
        self.superseded
            .retain(|s| s.after_read.is_none_or(|after| after >= oldest_read));
    }

    /// Replacements remembered now (bounded by what is published while reads are
    /// in flight).
    pub fn superseded_len(&self) -> usize {
        self.superseded.len()
    }

    fn insert(&mut self, place: Place, entry: Entry) {
        self.lowest_inserted = Some(self.lowest_inserted.map_or(place, |l| l.min(place)));
        if self.pending.insert(place, entry).is_none() && place.1 > 0 {
            self.transients += 1;
        }
    }

    /// Takes the message waiting at `place` out (every removal goes through here, so
    /// that the count of non-persistent ones stays exact).
    fn unput(&mut self, place: Place) -> Option<Entry> {
        let entry = self.pending.remove(&place);
        if entry.is_some() && place.1 > 0 {
            self.transients -= 1;
        }
        entry
    }

    /// The lowest place a message was put at since the last call (a consumer with a
    /// selector looks at the waiting messages from there again).
    pub fn take_lowest_inserted(&mut self) -> Option<Place> {
        self.lowest_inserted.take()
    }

    /// True when a message was put in since [`Self::take_lowest_inserted`] last looked.
    pub fn inserted_since_taken(&self) -> bool {
        self.lowest_inserted.is_some()
    }

    /// The place of the first waiting message at or after `from` that may be handed
    /// out now ([`Self::pop`] says which).
    pub fn first_from(&self, from: Place) -> Option<Place> {
        self.pending
            .range(from..)
            .next()
            .map(|(p, _)| *p)
            .filter(|p| self.may_hand_out(*p))
    }

    /// Whether the message waiting at `place` may be handed out now: a stored one
    /// always; a non-persistent one in live mode, or in store mode once the reads have
    /// passed its place (stored messages before it may not be read yet: it waits for
    /// them, so a producer's mix keeps its order).
    fn may_hand_out(&self, place: Place) -> bool {
        place.1 == 0 || self.mode == Mode::Live || place.0 <= self.paged_upto
    }

    /// The waiting message at `place`.
    pub fn get(&self, place: Place) -> Option<&Entry> {
        self.pending.get(&place)
    }

    /// Takes the waiting message at `place`.
    pub fn take(&mut self, place: Place) -> Option<Entry> {
        self.unput(place)
    }

    /// The place of the last waiting message.
    pub fn last_place(&self) -> Option<Place> {
        self.pending.last_key_value().map(|(p, _)| *p)
    }

    /// True when stored message `id` was taken ahead by a scan and not yet forgotten.
    pub fn is_ahead(&self, id: i64) -> bool {
        self.ahead.contains_key(&id)
    }

    /// How many more messages the cache takes before it is at its limit (what a
    /// read of held redeliveries may put back).
    pub fn room(&self) -> usize {
        self.cache_limit.saturating_sub(self.pending.len())
    }

    /// Messages waiting in memory.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// True when every stored message of the queue is cached, in flight or gone.
    pub fn is_live(&self) -> bool {
        self.mode == Mode::Live
    }

    /// A message that was published (and, if persistent, committed with its id), in
    /// publish order. A non-persistent one takes its place right after the persistent
    /// message published before it (not after the store's highest id: with producers
    /// pipelining, later messages may have their ids already), so a producer's mix of
    /// persistent and non-persistent messages keeps its order.
    ///
    /// A message with a last-value key replaces the older ones with that key first
    /// (see "Last values" in the module documentation).
    pub fn offer(&mut self, message: Arc<TopicMessage>) -> Offered {
        let place = match message.id {
            Some(id) => (id, 0),
            None => (self.published_upto, self.next_transient),
        };
        let mut offered = Offered::default();
        if let Some(key) = self.key_of(&message).map(str::to_string) {
            offered.replaced = self.supersede(&key, place, message.id.is_some());
            offered.supersedes = Some((key, place));
        }
        let Some(id) = message.id else {
            self.next_transient += 1;
            self.insert(place, Entry::new(message));
            return offered;
        };
        self.published_upto = self.published_upto.max(id);
        if let Some(ahead) = self.ahead.get_mut(&id) {
            ahead.released = true; // a scan took it already
            self.prune_ahead();
            return offered;
        }
        if self.read_ids.contains(&id) {
            return offered; // a read found it in the store already
        }
        if id <= self.paged_upto {
            // Released after messages with higher ids (a transaction's commit or a
            // scheduled release that raced a publish: ids are given at commit, the
            // order at release). A read goes on after `paged_upto`, so it would never
            // find this one: it is cached whatever the mode or the cache's limit (as
            // many as commits can overtake each other, not a backlog).
            self.insert((id, 0), Entry::new(message));
            return offered;
        }
        match self.mode {
            Mode::Live
                if self.pending.len() < self.cache_limit
                    && !message.memory_above(self.high_water) =>
            {
                self.paged_upto = self.paged_upto.max(id);
                self.insert((id, 0), Entry::new(message));
            }
            Mode::Live => self.mode = Mode::Store,
            Mode::Store => {
                if let Some(read) = &mut self.read {
                    if read.during.len() < self.cache_limit
                        && !message.memory_above(self.high_water)
                    {
                        read.during.push(message);
                    } else {
                        read.overflow = true;
                    }
                }
            }
        }
        offered
    }

    /// The queue has no consumer left: from now on, published persistent messages are
    /// left in the store (a live cursor turns to store mode, as when its cache is
    /// full), so that a backlog nobody consumes costs no memory. What the cache holds
    /// stays (at most its limit); the queue reads again once a consumer comes.
    pub fn stop_caching(&mut self) {
        if self.mode == Mode::Live {
            self.mode = Mode::Store;
        }
    }

    /// What to read from the store now, if anything: `(after id, limit)` for `browse`.
    /// Only in store mode, with no read in flight and the cache below half its limit.
    pub fn read_request(&mut self) -> Option<(i64, u32)> {
        if self.mode != Mode::Store || self.read.is_some() {
            return None;
        }
        // Stored messages count against the cache; non-persistent ones (bounded by the
        // memory limits) do not, so that they never keep the reads that pass them
        // from starting.
        let cached = self.pending.len() - self.transients;
        if cached >= self.cache_limit / 2 {
            return None;
        }
        let asked = (self.cache_limit - cached) as u32;
        self.cursor_read = Some(self.begin_read());
        self.read = Some(ReadInFlight {
            asked,
            during: Vec::new(),
            overflow: false,
        });
        Some((self.paged_upto, asked))
    }

    /// The answer to the read [`Self::read_request`] asked for (`None`: it failed; the
    /// next request asks again). Rows come in id order.
    pub fn on_read(&mut self, rows: Option<Vec<Arc<TopicMessage>>>) {
        let Some(read) = self.read.take() else {
            return;
        };
        let seq = self.cursor_read.take();
        self.take_read(read, rows);
        // Only now, with its rows checked against the messages taken ahead: ending the
        // read first could forget one it still returned (deleted after it began), which
        // would then be queued again and delivered twice.
        if let Some(seq) = seq {
            self.end_read(seq);
        }
    }

    /// The rows of the cursor's read `read` (see [`Self::on_read`]).
    fn take_read(&mut self, read: ReadInFlight, rows: Option<Vec<Arc<TopicMessage>>>) {
        let Some(rows) = rows else {
            return;
        };
        let short = rows.len() < read.asked as usize;
        let start = self.paged_upto;
        for message in rows {
            let Some(id) = message.id else { continue };
            if id <= start {
                continue;
            }
            self.read_ids.insert(id);
            self.paged_upto = self.paged_upto.max(id);
            if !self.ahead.contains_key(&id) && !self.is_superseded((id, 0), &message) {
                self.insert((id, 0), Entry::new(message));
            }
        }
        while self.read_ids.len() > self.cache_limit * 4 {
            self.read_ids.pop_first();
        }
        if short && !read.overflow {
            // Published while the read ran: queued unless the read found them.
            for message in read.during {
                let Some(id) = message.id else { continue };
                if !self.read_ids.contains(&id)
                    && !self.ahead.contains_key(&id)
                    && !self.pending.contains_key(&(id, 0))
                {
                    self.paged_upto = self.paged_upto.max(id);
                    self.insert((id, 0), Entry::new(message));
                }
            }
            self.mode = Mode::Live;
        }
        self.prune_ahead();
    }

    /// A read of the store begins (the cursor's, or a selector's scan): its number,
    /// for [`Self::end_read`].
    pub fn begin_read(&mut self) -> u64 {
        let seq = self.next_read;
        self.next_read += 1;
        self.reads_in_flight.insert(seq);
        seq
    }

    /// The number of the last read begun (0: none yet).
    pub fn last_read_started(&self) -> u64 {
        self.next_read - 1
    }

    /// The number of the oldest read in flight, if any.
    pub fn oldest_read_in_flight(&self) -> Option<u64> {
        self.reads_in_flight.first().copied()
    }

    /// Read `seq` came back (its rows were handled).
    pub fn end_read(&mut self, seq: u64) {
        self.reads_in_flight.remove(&seq);
        self.prune_ahead();
        self.prune_superseded();
    }

    /// Where a scan of the store for a consumer may start: after every message the
    /// cursor has cached, delivered or passed (store ids `> paged_upto`), or `None`
    /// when the cursor is live (then every message is in memory: no scan is needed).
    pub fn scan_floor(&self) -> Option<i64> {
        (self.mode == Mode::Store).then_some(self.paged_upto)
    }

    /// Every stored message with an id up to this one is the cursor's: cached, in
    /// flight, acked (its delete maybe not yet committed) or passed. A scan must not
    /// take any of them, whatever the cursor's position was when the scan's read began.
    pub fn covered_upto(&self) -> i64 {
        self.paged_upto
    }

    /// Raises the floor given to [`Self::new`] to `floor` (the store's highest id now),
    /// before anything was offered: the queue's actor waited for writes made for it
    /// while it slept, which got ids above the floor it was made with.
    pub fn raise_floor(&mut self, floor: i64) {
        self.published_upto = self.published_upto.max(floor);
    }

    /// The highest store id published so far (or stored when the queue started): a
    /// scan that has passed it has seen every stored message.
    pub fn published_upto(&self) -> i64 {
        self.published_upto
    }

    /// True when stored message `id` is waiting, or was taken ahead by a scan: a scan
    /// must not hand it out (again).
    pub fn holds(&self, id: i64) -> bool {
        self.ahead.contains_key(&id) || self.pending.contains_key(&(id, 0))
    }

    /// A scan delivered stored message `id` ahead of the cursor (it is above
    /// [`Self::scan_floor`]): no read or publish queues it while it is in flight or
    /// given back.
    pub fn take_ahead(&mut self, id: i64) {
        let released = id <= self.published_upto;
        self.ahead.insert(
            id,
            Ahead {
                released,
                deleted_after: None,
            },
        );
    }

    /// Stored messages whose rows were deleted (acked, dead-lettered): those taken
    /// ahead are forgotten once no read that began before now is in flight.
    pub fn deleted(&mut self, ids: &[i64]) {
        let last_started = self.next_read - 1;
        for id in ids {
            if let Some(ahead) = self.ahead.get_mut(id) {
                ahead.deleted_after = Some(last_started);
            }
        }
        self.prune_ahead();
    }

    /// Messages taken ahead that no read and no publish can bring back any more: below
    /// the cursor's position, or deleted with every read that might have seen them
    /// done; and their own publish already seen.
    fn prune_ahead(&mut self) {
        let oldest_read = self.reads_in_flight.first().copied().unwrap_or(u64::MAX);
        let paged_upto = self.paged_upto;
        self.ahead.retain(|id, ahead| {
            let passed = *id <= paged_upto;
            let gone = ahead.deleted_after.is_some_and(|after| after < oldest_read);
            !(ahead.released && (passed || gone))
        });
    }

    /// True when it holds nothing a successor would not find in the store: only
    /// stored messages wait in memory (a cache of committed rows, each failed
    /// delivery's count written to its row: the queue checks those writes), none is
    /// taken ahead, no read is in flight and no replacement is remembered (a queue may
    /// sleep only then). Looks at each waiting message: at most the cache's limit.
    pub fn is_at_rest(&self) -> bool {
        self.pending.values().all(|e| e.message.id.is_some())
            && self.ahead.is_empty()
            && self.reads_in_flight.is_empty()
            && self.read.is_none()
            && self.superseded.is_empty()
    }

    /// Messages taken ahead and not yet forgotten (bounded by the consumers'
    /// prefetch and the acks in flight).
    pub fn ahead_len(&self) -> usize {
        self.ahead.len()
    }

    /// Takes the first waiting message, if it may be handed out now: in store mode, a
    /// non-persistent message above the cursor's position waits for the reads to pass
    /// its place.
    pub fn pop(&mut self) -> Option<(Place, Entry)> {
        let place = *self.pending.first_key_value()?.0;
        if !self.may_hand_out(place) {
            return None;
        }
        self.unput(place).map(|entry| (place, entry))
    }

    /// Puts a message a consumer gave back in its place (it is dispatched next).
    pub fn put_back(&mut self, place: Place, entry: Entry) {
        self.insert(place, entry);
    }

    /// Forgets stored message `id` (deleted by expiry); true if it was cached.
    pub fn remove(&mut self, id: i64) -> bool {
        self.unput((id, 0)).is_some()
    }

    /// Removes and returns every cached message that has expired at `now_ms`.
    pub fn take_expired(&mut self, now_ms: i64) -> Vec<(Place, Entry)> {
        let places: Vec<Place> = self
            .pending
            .iter()
            .filter(|(_, e)| e.message.is_expired(now_ms))
            .map(|(p, _)| *p)
            .collect();
        places
            .into_iter()
            .filter_map(|p| self.unput(p).map(|e| (p, e)))
            .collect()
    }

    /// Non-persistent messages waiting with a place in `after..before` (exclusive at
    /// both ends; `before` `None`: no upper bound), in order, at most `limit`: what a
    /// browse shows of them.
    pub fn transients_between(
        &self,
        after: Place,
        before: Option<Place>,
        limit: usize,
    ) -> Vec<(Place, Arc<TopicMessage>)> {
        use std::ops::Bound::{Excluded, Unbounded};
        let upper = before.map_or(Unbounded, Excluded);
        self.pending
            .range((Excluded(after), upper))
            .filter(|((_, n), _)| *n > 0)
            .take(limit)
            .map(|(p, e)| (*p, Arc::clone(&e.message)))
            .collect()
    }

    /// Non-persistent messages waiting (they are nowhere else).
    pub fn transient_len(&self) -> usize {
        self.transients
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_store::Payload;

    fn msg(id: Option<i64>) -> Arc<TopicMessage> {
        Arc::new(TopicMessage {
            id,
            message_id: format!("m{id:?}"),
            persistent: id.is_some(),
            priority: 4,
            expiration: 0,
            payload: Arc::new(Payload::default()),
            charge: None,
            origin: None,
            redeliveries: 0,
        })
    }

    /// A message with last-value key `key` (header `K`).
    fn keyed(id: Option<i64>, key: &str) -> Arc<TopicMessage> {
        let mut m = (*msg(id)).clone();
        m.payload = Arc::new(Payload {
            headers: vec![("K".into(), key.into())],
            ..Payload::default()
        });
        Arc::new(m)
    }

    fn last_values() -> QueueCursor {
        let mut c = QueueCursor::new(10, 70, 0).with_last_values(Some("K"));
        assert_eq!(c.read_request(), Some((0, 10)));
        c.on_read(Some(vec![]));
        assert!(c.is_live());
        c
    }

    #[test]
    fn a_last_value_replaces_the_waiting_older_ones_with_its_key() {
        let mut c = last_values();
        assert_eq!(c.offer(keyed(Some(1), "x")).replaced, 0);
        c.offer(keyed(Some(2), "y"));
        c.offer(msg(Some(3)));
        c.offer(keyed(None, "y"));
        let offered = c.offer(keyed(Some(5), "x"));
        assert_eq!(offered.replaced, 1);
        assert_eq!(offered.supersedes, Some(("x".to_string(), (5, 0))));
        // The non-persistent y (at (3, 1)) replaced the stored y; x 5 replaced x 1.
        assert_eq!(ids(&mut c), [Some(3), None, Some(5)]);
        // No read in flight: nothing to remember for a stored one.
        assert_eq!(
            c.superseded_len(),
            1,
            "the non-persistent y's delete is not stored yet"
        );
        c.replacement_stored("y", (3, 1));
        assert_eq!(c.superseded_len(), 0);
    }

    #[test]
    fn a_read_in_flight_does_not_bring_a_replaced_row_back() {
        let mut c = QueueCursor::new(10, 70, 0).with_last_values(Some("K"));
        assert_eq!(c.read_request(), Some((0, 10)));
        // Published while the read is in flight: x 5, whose commit deleted x 2, which
        // the read may have found before that.
        let offered = c.offer(keyed(Some(5), "x"));
        assert_eq!(offered.replaced, 0);
        assert_eq!(c.superseded_len(), 1);
        c.on_read(Some(vec![keyed(Some(2), "x"), keyed(Some(3), "y")]));
        assert_eq!(c.superseded_len(), 0, "forgotten once the read is back");
        assert_eq!(ids(&mut c), [Some(3), Some(5)]);
    }

    #[test]
    fn a_non_persistent_last_value_is_remembered_until_its_delete_is_stored() {
        // The store holds ids up to 7 when the queue starts.
        let mut c = QueueCursor::new(4, 70, 7).with_last_values(Some("K"));
        assert_eq!(c.read_request(), Some((0, 4)));
        c.on_read(Some(vec![
            keyed(Some(1), "x"),
            msg(Some(2)),
            msg(Some(3)),
            msg(Some(4)),
        ]));
        assert_eq!(ids(&mut c), [Some(1), Some(2), Some(3), Some(4)]);
        // Replaces the stored x rows (6) by a write of its own; a read that starts
        // before that write is answered must not bring them back.
        let offered = c.offer(keyed(None, "x"));
        assert_eq!(offered.supersedes, Some(("x".to_string(), (7, 1))));
        // The non-persistent message does not count against the cache.
        assert_eq!(c.read_request(), Some((4, 4)));
        c.on_read(Some(vec![keyed(Some(6), "x"), msg(Some(7))]));
        assert_eq!(c.superseded_len(), 1);
        c.replacement_stored("x", (7, 1));
        assert_eq!(c.superseded_len(), 0);
        assert_eq!(ids(&mut c), [Some(7), None]);
    }

    #[test]
    fn without_a_header_nothing_is_replaced() {
        let mut c = QueueCursor::new(10, 70, 0);
        assert_eq!(c.read_request(), Some((0, 10)));
        c.on_read(Some(vec![]));
        c.offer(keyed(Some(1), "x"));
        assert_eq!(c.offer(keyed(Some(2), "x")), Offered::default());
        assert_eq!(ids(&mut c), [Some(1), Some(2)]);
    }

    /// A non-persistent message published while stored ones wait unread (store mode,
    /// nothing cached) is not handed out before them: it waits for the reads to pass
    /// its place, and a queue full of such messages still reads.
    #[test]
    fn a_non_persistent_message_waits_for_the_stored_ones_before_it() {
        let mut c = QueueCursor::new(4, 70, 0);
        // Stored 1..=3 while nothing reads (no consumer), then a non-persistent one.
        for id in 1..=3 {
            c.offer(msg(Some(id)));
        }
        for _ in 0..3 {
            c.offer(msg(None));
        }
        assert_eq!(c.transient_len(), 3);
        assert!(c.pop().is_none(), "the stored ones come first");
        assert_eq!(c.first_from((0, 0)), None);
        assert_eq!(
            c.read_request(),
            Some((0, 4)),
            "transients do not fill the cache"
        );
        c.on_read(Some(vec![msg(Some(1)), msg(Some(2)), msg(Some(3))]));
        assert_eq!(ids(&mut c), [Some(1), Some(2), Some(3), None, None, None]);
        assert_eq!(c.transient_len(), 0);
    }

    fn ids(c: &mut QueueCursor) -> Vec<Option<i64>> {
        let mut out = Vec::new();
        while let Some((_, e)) = c.pop() {
            out.push(e.message.id);
        }
        out
    }

    #[test]
    fn a_message_released_behind_the_cursor_is_cached_over_the_limit() {
        // Live and full: 1..=4 cached, 5 turns it to store mode (left in the store).
        let mut c = QueueCursor::new(4, 70, 0);
        assert_eq!(c.read_request(), Some((0, 4)));
        c.on_read(Some(Vec::new()));
        for id in 1..=5 {
            c.offer(msg(Some(id)));
        }
        assert!(!c.is_live());
        // An id below `paged_upto` (4) released only now (a commit that overtook a
        // publish: ids are given at commit, order at release): a read after 4 would
        // never return it.
        c.offer(msg(Some(0)));
        let got = ids(&mut c);
        assert!(got.contains(&Some(0)), "{got:?}");
    }

    #[test]
    fn reads_the_backlog_then_follows_live_without_gap_or_duplicate() {
        let mut c = QueueCursor::new(10, 70, 0);
        assert_eq!(c.read_request(), Some((0, 10)));
        // Published while the read is in flight: 3 (also in the page) and 4 (not).
        c.offer(msg(Some(3)));
        c.offer(msg(Some(4)));
        c.on_read(Some(vec![msg(Some(1)), msg(Some(2)), msg(Some(3))]));
        assert!(c.is_live());
        c.offer(msg(Some(5)));
        assert_eq!(
            ids(&mut c),
            vec![Some(1), Some(2), Some(3), Some(4), Some(5)]
        );
    }

    #[test]
    fn a_full_cache_leaves_new_messages_in_the_store_and_reads_them_later() {
        let mut c = QueueCursor::new(4, 70, 0);
        assert_eq!(c.read_request(), Some((0, 4)));
        c.on_read(Some(vec![]));
        for id in 1..=6 {
            c.offer(msg(Some(id)));
        }
        assert_eq!(c.len(), 4);
        assert!(!c.is_live());
        // The cache is still full: no read.
        assert_eq!(c.read_request(), None);
        for _ in 0..3 {
            c.pop();
        }
        assert_eq!(c.read_request(), Some((4, 3)));
        c.on_read(Some(vec![msg(Some(5)), msg(Some(6))]));
        assert!(c.is_live());
        assert_eq!(ids(&mut c), vec![Some(4), Some(5), Some(6)]);
    }

    /// Point 0 of the hardening issue: a queue without consumers cached every published
    /// message up to its count limit, whatever memory they held, so its backlog made
    /// every producer of the broker wait. Above the high-water mark a published message
    /// is left in the store (its charge goes with it) and read back later.
    #[test]
    fn a_message_over_the_memory_high_water_mark_stays_in_the_store() {
        let memory = crate::usage::Usage::root("memory", 1_000);
        let charged = |id: i64, bytes: u64| {
            Arc::new(TopicMessage {
                charge: Some(Arc::new(memory.charge(bytes))),
                ..(*msg(Some(id))).clone()
            })
        };
        let mut c = QueueCursor::new(100, 70, 0);
        assert_eq!(c.read_request(), Some((0, 100)));
        c.on_read(Some(vec![]));
        c.offer(charged(1, 600));
        c.offer(charged(2, 99));
        assert_eq!((c.len(), memory.used()), (2, 699), "below 70 %: cached");
        c.offer(charged(3, 1));
        c.offer(charged(4, 500));
        // At 70 % the third is left in the store, and so is every later one: they
        // charge nothing once the publish is done, and no producer waits for them.
        assert_eq!((c.len(), memory.used()), (2, 699));
        assert!(!c.is_live());
        assert!(memory.full().is_none());
        // Read back from the store (uncharged) once the cache has room.
        c.pop();
        c.pop();
        assert_eq!(memory.used(), 0);
        assert_eq!(c.read_request(), Some((2, 100)));
        c.on_read(Some(vec![msg(Some(3)), msg(Some(4))]));
        assert_eq!(ids(&mut c), vec![Some(3), Some(4)]);
    }

    #[test]
    fn overflow_during_a_read_reads_again() {
        let mut c = QueueCursor::new(2, 70, 0);
        assert_eq!(c.read_request(), Some((0, 2)));
        for id in 1..=3 {
            c.offer(msg(Some(id)));
        }
        c.on_read(Some(vec![msg(Some(1))]));
        assert!(
            !c.is_live(),
            "more arrived than kept aside: stay in store mode"
        );
        c.pop();
        assert_eq!(c.read_request(), Some((1, 2)));
    }

    #[test]
    fn a_publish_released_after_a_read_found_it_is_not_queued_twice() {
        let mut c = QueueCursor::new(10, 70, 0);
        assert_eq!(c.read_request(), Some((0, 10)));
        c.on_read(Some(vec![msg(Some(5))]));
        assert_eq!(ids(&mut c), vec![Some(5)]);
        // Id 5's own publish is released late (live mode now): not queued again.
        c.offer(msg(Some(5)));
        c.offer(msg(Some(6)));
        assert_eq!(ids(&mut c), vec![Some(6)]);
    }

    /// A producer's mix of persistent and non-persistent messages keeps its order, even
    /// when later persistent messages have their ids before an earlier non-persistent
    /// one is released (pipelined producers, one group commit).
    #[test]
    fn a_non_persistent_message_keeps_its_place_among_persistent_ones() {
        let mut c = QueueCursor::new(10, 70, 2);
        c.read_request();
        c.on_read(Some(vec![]));
        // Published: 3, a transient, 4, another transient; 3 and 4 committed together.
        c.offer(msg(Some(3)));
        c.offer(msg(None));
        c.offer(msg(Some(4)));
        c.offer(msg(None));
        assert_eq!(ids(&mut c), vec![Some(3), None, Some(4), None]);
        // Before any persistent message, a transient goes after the backlog (floor 2).
        let mut c = QueueCursor::new(10, 70, 2);
        c.read_request();
        c.offer(msg(None));
        c.on_read(Some(vec![msg(Some(1)), msg(Some(2))]));
        assert_eq!(ids(&mut c), vec![Some(1), Some(2), None]);
    }

    #[test]
    fn out_of_order_ids_during_a_read_are_all_queued() {
        let mut c = QueueCursor::new(10, 70, 0);
        assert_eq!(c.read_request(), Some((0, 10)));
        c.offer(msg(Some(2)));
        c.offer(msg(Some(1)));
        c.on_read(Some(vec![]));
        assert_eq!(ids(&mut c), vec![Some(1), Some(2)]);
    }

    #[test]
    fn given_back_messages_come_first_and_transients_keep_their_place() {
        let mut c = QueueCursor::new(10, 70, 2);
        c.read_request();
        c.on_read(Some(vec![msg(Some(1)), msg(Some(2))]));
        c.offer(msg(None));
        c.offer(msg(Some(3)));
        let (place, first) = c.pop().unwrap();
        assert_eq!(first.message.id, Some(1));
        c.put_back(
            place,
            Entry {
                failed_deliveries: 1,
                ..first
            },
        );
        assert_eq!(c.transient_len(), 1);
        assert_eq!(ids(&mut c), vec![Some(1), Some(2), None, Some(3)]);
    }

    /// A message a scan took ahead of the cursor is queued neither by a read that
    /// returns its row nor by its own late publish; it is forgotten once the cursor has
    /// passed it and its publish was seen.
    #[test]
    fn a_message_taken_ahead_is_never_queued_again() {
        let mut c = QueueCursor::new(4, 70, 0);
        assert_eq!(c.read_request(), Some((0, 4)));
        c.on_read(Some((1..=4).map(|id| msg(Some(id))).collect()));
        assert_eq!(
            c.scan_floor(),
            Some(4),
            "a full read leaves the cursor in store mode"
        );
        // A scan took 7 (stored, its publish not seen yet: published_upto is 0).
        c.take_ahead(7);
        assert!(c.holds(7) && c.is_ahead(7));
        for _ in 0..4 {
            c.pop();
        }
        assert_eq!(c.read_request(), Some((4, 4)));
        c.on_read(Some((5..=8).map(|id| msg(Some(id))).collect()));
        assert_eq!(
            ids(&mut c),
            vec![Some(5), Some(6), Some(8)],
            "the read skips 7"
        );
        assert!(c.is_ahead(7), "its publish may still come");
        c.offer(msg(Some(7)));
        assert!(c.is_empty(), "its late publish is not queued");
        assert!(!c.is_ahead(7), "passed and released: forgotten");
        assert_eq!(c.ahead_len(), 0);
    }

    /// An acked message taken ahead is forgotten only when every read that began
    /// before its delete committed has come back (such a read may still return its row).
    #[test]
    fn a_deleted_message_taken_ahead_waits_for_the_reads_in_flight() {
        let mut c = QueueCursor::new(4, 70, 10);
        c.read_request();
        c.on_read(Some((1..=4).map(|id| msg(Some(id))).collect()));
        c.take_ahead(9); // stored before the queue started: no publish will come
        let scan = c.begin_read();
        c.deleted(&[9]);
        assert!(c.is_ahead(9), "the scan in flight may still return row 9");
        c.end_read(scan);
        assert!(!c.is_ahead(9));
        // A read that begins after the delete does not hold it back.
        c.take_ahead(10);
        c.deleted(&[10]);
        let later = c.begin_read();
        assert!(!c.is_ahead(10));
        c.end_read(later);
    }

    /// The cursor's own read that began before the delete of a message taken ahead
    /// may return its row: the message is not queued again (it was, when the read
    /// ended before its rows were checked: delivered twice).
    #[test]
    fn the_cursors_read_does_not_bring_back_a_deleted_message_taken_ahead() {
        let mut c = QueueCursor::new(4, 70, 10);
        c.read_request();
        c.on_read(Some((1..=4).map(|id| msg(Some(id))).collect()));
        while c.pop().is_some() {}
        c.take_ahead(6);
        assert!(c.read_request().is_some());
        c.deleted(&[6]);
        c.on_read(Some([5, 6, 7].map(|id| msg(Some(id))).to_vec()));
        let mut queued = Vec::new();
        while let Some(((id, _), _)) = c.pop() {
            queued.push(id);
        }
        assert_eq!(queued, [5, 7]);
        assert!(!c.is_ahead(6), "forgotten once that read ended");
    }

    /// What was put in since the last look, lowest place first: a consumer with a
    /// selector looks again from there.
    #[test]
    fn the_lowest_place_put_in_is_reported_once() {
        let mut c = QueueCursor::new(10, 70, 0);
        c.read_request();
        c.on_read(Some(vec![msg(Some(5)), msg(Some(6))]));
        assert_eq!(c.take_lowest_inserted(), Some((5, 0)));
        assert_eq!(c.take_lowest_inserted(), None);
        let (place, entry) = c.pop().unwrap();
        c.offer(msg(Some(7)));
        c.put_back(place, entry);
        assert!(c.inserted_since_taken());
        assert_eq!(c.take_lowest_inserted(), Some((5, 0)));
        assert_eq!(c.first_from((5, 1)), Some((6, 0)));
        assert_eq!(c.get((7, 0)).and_then(|e| e.message.id), Some(7));
    }
}
