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
//!   published. When the cache holds `cache_limit` messages, the next persistent message
//!   is left in the store and the cursor turns to store mode. What the cache holds
//!   counts in the queue's memory, so a queue whose memory limit is smaller than its
//!   cache holds producers back when it is full (producer flow control, as ActiveMQ's
//!   queue `memoryLimit`); with a larger one a queue without consumers costs store.
//! - **store**: when the cache falls below half its limit, the queue reads the next page
//!   (`browse` after `paged_upto`, bounded in SQL). Messages published while a read is in
//!   flight are kept aside (bounded); when a read comes back short (the store has no
//!   more), those above the page are added and the cursor turns live. If more were
//!   published than could be kept aside, it stays in store mode and reads again, so no
//!   message falls between the store and the live path.
//!
//! Non-persistent messages are cached whatever the mode (they exist nowhere else); the
//! broker's memory limit bounds them through producer flow control.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::messages::TopicMessage;

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
    pub fn new(message: Arc<TopicMessage>) -> Self {
        Self {
            message,
            failed_deliveries: 0,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
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

/// See the module documentation.
#[derive(Debug)]
pub struct QueueCursor {
    pending: BTreeMap<Place, Entry>,
    cache_limit: usize,
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
}

impl QueueCursor {
    /// A cursor that first reads the store (a queue may have a backlog from an earlier
    /// run); at most `cache_limit` messages cached (at least 2). `floor` is the store's
    /// highest id when the queue starts (every message published from then on gets a
    /// higher one; the backlog's are at most it).
    pub fn new(cache_limit: usize, floor: i64) -> Self {
        Self {
            pending: BTreeMap::new(),
            cache_limit: cache_limit.max(2),
            mode: Mode::Store,
            paged_upto: 0,
            read: None,
            next_transient: 1,
            published_upto: floor,
            read_ids: BTreeSet::new(),
        }
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
    pub fn offer(&mut self, message: Arc<TopicMessage>) {
        let Some(id) = message.id else {
            let place = (self.published_upto, self.next_transient);
            self.next_transient += 1;
            self.pending.insert(place, Entry::new(message));
            return;
        };
        self.published_upto = self.published_upto.max(id);
        if self.read_ids.contains(&id) {
            return; // a read found it in the store already
        }
        match self.mode {
            Mode::Live if self.pending.len() < self.cache_limit => {
                self.paged_upto = self.paged_upto.max(id);
                self.pending.insert((id, 0), Entry::new(message));
            }
            Mode::Live => self.mode = Mode::Store,
            Mode::Store => {
                if let Some(read) = &mut self.read {
                    if read.during.len() < self.cache_limit {
                        read.during.push(message);
                    } else {
                        read.overflow = true;
                    }
                }
            }
        }
    }

    /// What to read from the store now, if anything: `(after id, limit)` for `browse`.
    /// Only in store mode, with no read in flight and the cache below half its limit.
    pub fn read_request(&mut self) -> Option<(i64, u32)> {
        if self.mode != Mode::Store || self.read.is_some() {
            return None;
        }
        if self.pending.len() >= self.cache_limit / 2 {
            return None;
        }
        let asked = (self.cache_limit - self.pending.len()) as u32;
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
        let Some(rows) = rows else {
            return;
        };
        let short = rows.len() < read.asked as usize;
        for message in rows {
            let Some(id) = message.id else { continue };
            if id > self.paged_upto {
                self.read_ids.insert(id);
                self.pending.insert((id, 0), Entry::new(message));
            }
        }
        if let Some(last) = self.read_ids.last() {
            self.paged_upto = self.paged_upto.max(*last);
        }
        while self.read_ids.len() > self.cache_limit * 4 {
            self.read_ids.pop_first();
        }
        if short && !read.overflow {
            // Published while the read ran: queued unless the read found them.
            for message in read.during {
                let Some(id) = message.id else { continue };
                if !self.read_ids.contains(&id) && !self.pending.contains_key(&(id, 0)) {
                    self.paged_upto = self.paged_upto.max(id);
                    self.pending.insert((id, 0), Entry::new(message));
                }
            }
            self.mode = Mode::Live;
        }
    }

    /// Takes the first waiting message.
    pub fn pop(&mut self) -> Option<(Place, Entry)> {
        self.pending.pop_first()
    }

    /// Puts a message a consumer gave back in its place (it is dispatched next).
    pub fn put_back(&mut self, place: Place, entry: Entry) {
        self.pending.insert(place, entry);
    }

    /// Forgets stored message `id` (deleted by expiry); true if it was cached.
    pub fn remove(&mut self, id: i64) -> bool {
        self.pending.remove(&(id, 0)).is_some()
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
            .filter_map(|p| self.pending.remove(&p).map(|e| (p, e)))
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
        self.pending.keys().filter(|(_, n)| *n > 0).count()
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
        })
    }

    fn ids(c: &mut QueueCursor) -> Vec<Option<i64>> {
        let mut out = Vec::new();
        while let Some((_, e)) = c.pop() {
            out.push(e.message.id);
        }
        out
    }

    #[test]
    fn reads_the_backlog_then_follows_live_without_gap_or_duplicate() {
        let mut c = QueueCursor::new(10, 0);
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
        let mut c = QueueCursor::new(4, 0);
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

    #[test]
    fn overflow_during_a_read_reads_again() {
        let mut c = QueueCursor::new(2, 0);
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
        let mut c = QueueCursor::new(10, 0);
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
        let mut c = QueueCursor::new(10, 2);
        c.read_request();
        c.on_read(Some(vec![]));
        // Published: 3, a transient, 4, another transient; 3 and 4 committed together.
        c.offer(msg(Some(3)));
        c.offer(msg(None));
        c.offer(msg(Some(4)));
        c.offer(msg(None));
        assert_eq!(ids(&mut c), vec![Some(3), None, Some(4), None]);
        // Before any persistent message, a transient goes after the backlog (floor 2).
        let mut c = QueueCursor::new(10, 2);
        c.read_request();
        c.offer(msg(None));
        c.on_read(Some(vec![msg(Some(1)), msg(Some(2))]));
        assert_eq!(ids(&mut c), vec![Some(1), Some(2), None]);
    }

    #[test]
    fn out_of_order_ids_during_a_read_are_all_queued() {
        let mut c = QueueCursor::new(10, 0);
        assert_eq!(c.read_request(), Some((0, 10)));
        c.offer(msg(Some(2)));
        c.offer(msg(Some(1)));
        c.on_read(Some(vec![]));
        assert_eq!(ids(&mut c), vec![Some(1), Some(2)]);
    }

    #[test]
    fn given_back_messages_come_first_and_transients_keep_their_place() {
        let mut c = QueueCursor::new(10, 2);
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
}
