//! [`Published`] and [`StatsBoard`]: the counters each destination publishes as it
//! works, so that a stats reading never asks an actor and costs what changed.
//!
//! Each destination has one [`Published`] (about 220 bytes and its name): lock-free
//! counters (enqueued, delivered, acked, expired, dead-lettered, expiry pages and
//! runs) and gauges (consumers, in-flight deliveries, non-persistent messages waiting)
//! that its actor, the only writer while it runs, updates as it works (while it
//! sleeps, the registry counts the sends it stores for it, [`Published::count_enqueued`]). The first change after a
//! reading puts the destination's key on the board's change list (one atomic swap
//! for every later change until the next reading). Its memory usage marks it too
//! (`crate::usage::Usage` holds its destination's entry), as do the producers the
//! broker counts for it ([`StatsBoard::mark`]).
//!
//! The [`StatsBoard`] holds every destination's entry, keyed by destination: the
//! registry ([`crate::broker::BrokerActor`]) starts one with the actor and removes it
//! when the destination is deleted. A reader takes the change list
//! ([`StatsBoard::take_changes`]) and reads only the entries on it: an idle broker's
//! reading reads nothing, however many destinations it holds.
//!
//! Counters start from 0 with the broker. An actor started again for a destination
//! (woken from sleep, or after its actor died) carries on the counters of the entry
//! ([`Published::carry_on`]). Only a deletion removes the entry. A sleeping
//! destination's entry stays, marked asleep ([`StatsBoard::asleep`]): its counters
//! and key are what it costs while asleep.
//!
//! **The reading lives here too.** What a stats reading reads besides the published
//! counters (the stored rows, memory, producers; [`LastRead`]) is kept on the entry
//! itself ([`StatsBoard::put_read`]), and the board keeps their sums
//! ([`StatsBoard::read_totals`]): a reader keeps no map of its own, so a destination
//! costs this one entry (its name shared with the registry's key) however many readers
//! list it. A deletion takes its reading out of the sums at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::{DestinationCounters, DestinationKey};
use crate::messages::Stats;

/// One destination's published counters and gauges (see the module documentation).
/// Shared (`Arc`) by its actor, its memory usage and the [`StatsBoard`].
#[derive(Debug)]
pub struct Published {
    key: DestinationKey,
    enqueued: AtomicU64,
    dispatched: AtomicU64,
    dequeued: AtomicU64,
    expired: AtomicU64,
    dead_lettered: AtomicU64,
    expiry_pages: AtomicU64,
    expiry_runs: AtomicU64,
    max_expiry_page_rows: AtomicU64,
    consumers: AtomicU64,
    in_flight: AtomicU64,
    pending_non_persistent: AtomicU64,
    /// Whether its actor runs, or it sleeps (set by the registry; a reading lists
    /// these).
    running: AtomicBool,
    /// Asleep: its actor stopped while idle, the next request starts one.
    asleep: AtomicBool,
    /// Times it went to sleep.
    sleeps: AtomicU64,
    /// On the change list since the last reading took it.
    dirty: AtomicBool,
    changes: Arc<ChangeList>,
    /// What the last reading read of it (`None`: not read yet, or taken out).
    last_read: parking_lot::Mutex<Option<LastRead>>,
}

/// What a stats reading read of one destination besides its published counters
/// (kept on its [`Published`] entry by [`StatsBoard::put_read`]). Counts are messages
/// unless said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LastRead {
    /// Messages waiting: the committed rows the store holds for it plus the
    /// non-persistent messages waiting in memory.
    pub queue_size: u64,
    /// Deliveries not acked (queues).
    pub in_flight: u64,
    /// Consumers attached.
    pub consumers: u64,
    /// Connections producing to it.
    pub producers: u64,
    /// Bytes of messages it holds in memory.
    pub memory_bytes: u64,
    /// Producers waiting for space (producer flow control).
    pub blocked_producers: u64,
    /// Asleep when read.
    pub asleep: bool,
}

/// The sums of every entry's [`LastRead`] ([`StatsBoard::read_totals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadTotals {
    /// Entries with a reading.
    pub destinations: u64,
    /// Sum of [`LastRead::queue_size`].
    pub queue_size: u64,
    /// Sum of [`LastRead::in_flight`].
    pub in_flight: u64,
    /// Sum of [`LastRead::consumers`].
    pub consumers: u64,
    /// Sum of [`LastRead::producers`].
    pub producers: u64,
    /// Entries read asleep.
    pub asleep: u64,
}

impl ReadTotals {
    /// Adds (`true`) or takes away (`false`) one reading.
    fn apply(&mut self, read: &LastRead, add: bool) {
        let apply = |total: &mut u64, v: u64| {
            *total = if add {
                total.saturating_add(v)
            } else {
                total.saturating_sub(v)
            };
        };
        apply(&mut self.destinations, 1);
        apply(&mut self.queue_size, read.queue_size);
        apply(&mut self.in_flight, read.in_flight);
        apply(&mut self.consumers, read.consumers);
        apply(&mut self.producers, read.producers);
        apply(&mut self.asleep, u64::from(read.asleep));
    }
}

/// Keys changed since the last [`StatsBoard::take_changes`], each once.
#[derive(Debug, Default)]
struct ChangeList(parking_lot::Mutex<Vec<DestinationKey>>);

impl Published {
    fn new(key: DestinationKey, changes: Arc<ChangeList>) -> Self {
        Self {
            key,
            enqueued: AtomicU64::new(0),
            dispatched: AtomicU64::new(0),
            dequeued: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            expiry_pages: AtomicU64::new(0),
            expiry_runs: AtomicU64::new(0),
            max_expiry_page_rows: AtomicU64::new(0),
            consumers: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            pending_non_persistent: AtomicU64::new(0),
            running: AtomicBool::new(false),
            asleep: AtomicBool::new(false),
            sleeps: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
            changes,
            last_read: parking_lot::Mutex::new(None),
        }
    }

    /// What the last reading read of it, if it was read and not taken out since
    /// ([`StatsBoard::put_read`]).
    pub fn last_read(&self) -> Option<LastRead> {
        *self.last_read.lock()
    }

    /// An entry on no board (nobody reads its changes): for an actor started
    /// without a registry, as tests do.
    pub fn detached(key: DestinationKey) -> Arc<Self> {
        Arc::new(Self::new(key, Arc::default()))
    }

    /// Which destination this is.
    pub fn key(&self) -> &DestinationKey {
        &self.key
    }

    /// Whether its actor runs now.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Whether it sleeps now (see [`crate::destination::sleep`]).
    pub fn is_asleep(&self) -> bool {
        self.asleep.load(Ordering::Acquire)
    }

    /// Times it went to sleep since the broker started.
    pub fn sleeps(&self) -> u64 {
        self.sleeps.load(Ordering::Relaxed)
    }

    /// A new actor of this destination starts with `counters` (its own, all 0): they
    /// take the published values (those of the actor before it), and the entry keeps
    /// them. The kind's own published counters (consumed, dead-lettered) are read by
    /// the kind from [`Self::read`].
    pub fn carry_on(&self, counters: &mut DestinationCounters) {
        let was = self.read().counters;
        counters.enqueued = was.enqueued;
        counters.dispatched = was.dispatched;
        counters.expired = was.expired;
        counters.expiry_pages = was.expiry_pages;
        counters.expiry_pages_started = was.expiry_pages;
        counters.expiry_runs = was.expiry_runs;
        counters.max_expiry_page_rows = was.max_expiry_page_rows;
    }

    /// Counts `n` messages enqueued while no actor runs for it: the registry's writes
    /// to a sleeping destination ([`crate::broker::PublishAsleep`]). Its next actor
    /// waits for those writes before it carries on the counters, so the two never
    /// write the entry at once.
    pub fn count_enqueued(&self, n: u64) {
        self.enqueued.fetch_add(n, Ordering::AcqRel);
        self.mark();
    }

    /// Puts it on the change list, unless it is there already: the next reading reads
    /// it again.
    pub fn mark(&self) {
        if !self.dirty.swap(true, Ordering::AcqRel) {
            self.changes.0.lock().push(self.key.clone());
        }
    }

    /// Takes it off the change list's bookkeeping before a reading reads it (a change
    /// after this puts it back on).
    fn clear_mark(&self) {
        self.dirty.store(false, Ordering::Release);
    }

    /// Stores `value` in `field` (written by one actor only); true when it changed.
    fn put(field: &AtomicU64, value: u64) -> bool {
        if field.load(Ordering::Relaxed) == value {
            return false;
        }
        field.store(value, Ordering::Release);
        true
    }

    /// Publishes what `counters` (the actor's own) hold now, marking the entry when
    /// something changed.
    pub fn publish_counters(&self, counters: &DestinationCounters) {
        let changed = Self::put(&self.enqueued, counters.enqueued)
            | Self::put(&self.dispatched, counters.dispatched)
            | Self::put(&self.expired, counters.expired)
            | Self::put(&self.expiry_pages, counters.expiry_pages)
            | Self::put(&self.expiry_runs, counters.expiry_runs)
            | Self::put(&self.max_expiry_page_rows, counters.max_expiry_page_rows);
        if changed {
            self.mark();
        }
    }

    /// Publishes the gauges and the two counters a kind keeps outside
    /// [`DestinationCounters`]: messages consumed (a queue's acks, a topic's
    /// deliveries), dead-lettered, consumers attached, deliveries not acked, and
    /// non-persistent messages waiting in memory.
    pub fn publish_gauges(&self, gauges: Gauges) {
        let changed = Self::put(&self.dequeued, gauges.dequeued)
            | Self::put(&self.dead_lettered, gauges.dead_lettered)
            | Self::put(&self.consumers, gauges.consumers)
            | Self::put(&self.in_flight, gauges.in_flight)
            | Self::put(&self.pending_non_persistent, gauges.pending_non_persistent);
        if changed {
            self.mark();
        }
    }

    /// What it publishes now, as a [`Stats`] (the counters it does not publish, such
    /// as `ticks`, are 0).
    pub fn read(&self) -> Stats {
        let get = |field: &AtomicU64| field.load(Ordering::Acquire);
        Stats {
            counters: DestinationCounters {
                enqueued: get(&self.enqueued),
                dispatched: get(&self.dispatched),
                expired: get(&self.expired),
                expiry_pages: get(&self.expiry_pages),
                expiry_runs: get(&self.expiry_runs),
                max_expiry_page_rows: get(&self.max_expiry_page_rows),
                ..DestinationCounters::default()
            },
            dequeued: get(&self.dequeued),
            dead_lettered: get(&self.dead_lettered),
            consumers: get(&self.consumers),
            in_flight: get(&self.in_flight),
            pending_non_persistent: get(&self.pending_non_persistent),
        }
    }
}

/// In debug builds, panics when `published` does not say what the actor's own
/// `stats` say (the fields it publishes): a change that was not published. Release
/// builds check nothing.
pub fn debug_check_published(published: &Published, stats: &Stats) {
    if cfg!(debug_assertions) {
        assert_eq!(
            published_fields(stats),
            published_fields(&published.read()),
            "{}: what its actor holds (left) is not what it published (right)",
            published.key()
        );
    }
}

/// The fields of `stats` a destination publishes (those [`Published::read`] fills).
fn published_fields(stats: &Stats) -> [u64; 11] {
    let c = &stats.counters;
    [
        c.enqueued,
        c.dispatched,
        c.expired,
        c.expiry_pages,
        c.expiry_runs,
        c.max_expiry_page_rows,
        stats.dequeued,
        stats.dead_lettered,
        stats.consumers,
        stats.in_flight,
        stats.pending_non_persistent,
    ]
}

/// The gauges a destination publishes with [`Published::publish_gauges`] (each as in
/// [`Stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Messages consumed: a queue's acks, a topic's deliveries.
    pub dequeued: u64,
    /// Messages moved to a dead-letter queue.
    pub dead_lettered: u64,
    /// Consumers (online subscriptions) attached now.
    pub consumers: u64,
    /// Deliveries not acked yet, now.
    pub in_flight: u64,
    /// Non-persistent messages waiting in memory, now.
    pub pending_non_persistent: u64,
}

/// Every destination's [`Published`] entry, and the list of those changed since the
/// last reading (see the module documentation). Shared (`Arc`) by the registry, the
/// broker's memory usages and the stats reader.
#[derive(Debug, Default)]
pub struct StatsBoard {
    entries: parking_lot::Mutex<HashMap<DestinationKey, Arc<Published>>>,
    changes: Arc<ChangeList>,
    /// Entries marked asleep now.
    asleep: AtomicU64,
    /// The sums of the entries' readings.
    read_totals: parking_lot::Mutex<ReadTotals>,
}

impl StatsBoard {
    /// The entry of `key`, made (and marked) if there is none; not running until
    /// [`Self::started`].
    pub fn entry(&self, key: &DestinationKey) -> Arc<Published> {
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.get(key) {
            return Arc::clone(entry);
        }
        let entry = Arc::new(Published::new(key.clone(), Arc::clone(&self.changes)));
        entries.insert(key.clone(), Arc::clone(&entry));
        drop(entries);
        entry.mark();
        entry
    }

    /// The entry of `key`, if it has one.
    pub fn get(&self, key: &DestinationKey) -> Option<Arc<Published>> {
        self.entries.lock().get(key).cloned()
    }

    /// `key`'s actor started: its entry (made if there is none), running, awake and
    /// marked.
    pub fn started(&self, key: &DestinationKey) -> Arc<Published> {
        let entry = self.entry(key);
        entry.running.store(true, Ordering::Release);
        self.asleep(key, false);
        entry.mark();
        entry
    }

    /// `key` was made asleep, without an actor (a send to a missing destination that
    /// the registry writes itself, [`crate::broker::PublishAsleep`]): its entry (made
    /// if there is none) is running and asleep, and counts no sleep.
    pub fn started_asleep(&self, key: &DestinationKey) -> Arc<Published> {
        let entry = self.entry(key);
        entry.running.store(true, Ordering::Release);
        if !entry.asleep.swap(true, Ordering::AcqRel) {
            self.asleep.fetch_add(1, Ordering::Relaxed);
        }
        entry.mark();
        entry
    }

    /// `key` went to sleep (`true`) or woke (`false`): its entry says so, and the
    /// board counts it ([`Self::asleep_count`]).
    pub fn asleep(&self, key: &DestinationKey, asleep: bool) {
        if let Some(entry) = self.get(key) {
            if entry.asleep.swap(asleep, Ordering::AcqRel) != asleep {
                if asleep {
                    self.asleep.fetch_add(1, Ordering::Relaxed);
                    entry.sleeps.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.asleep.fetch_sub(1, Ordering::Relaxed);
                }
                entry.mark();
            }
        }
    }

    /// Destinations asleep now.
    pub fn asleep_count(&self) -> u64 {
        self.asleep.load(Ordering::Relaxed)
    }

    /// `key` was deleted: its entry goes (marked, so that the next reading drops it),
    /// and its reading leaves the sums.
    pub fn remove(&self, key: &DestinationKey) {
        self.asleep(key, false);
        let removed = self.entries.lock().remove(key);
        if let Some(entry) = removed {
            // Before its reading is taken: a reading put after this is not kept
            // (`put_read` checks it under the same lock).
            entry.running.store(false, Ordering::SeqCst);
            self.put_read(&entry, None);
            entry.mark();
        }
    }

    /// Keeps `read` as `entry`'s reading (`None`: takes it out) and brings the sums
    /// up to date. An entry that no longer runs (deleted meanwhile) keeps none.
    pub fn put_read(&self, entry: &Published, read: Option<LastRead>) {
        let mut kept = entry.last_read.lock();
        let read = read.filter(|_| entry.running.load(Ordering::SeqCst));
        let old = std::mem::replace(&mut *kept, read);
        if old == read {
            return;
        }
        let mut totals = self.read_totals.lock();
        if let Some(old) = &old {
            totals.apply(old, false);
        }
        if let Some(read) = &read {
            totals.apply(read, true);
        }
    }

    /// The sums of every entry's reading.
    pub fn read_totals(&self) -> ReadTotals {
        *self.read_totals.lock()
    }

    /// Every entry with a reading, with it, in no order (sort by
    /// [`Published::key`] for the store key's order). Its size grows with the
    /// destinations: for a listing.
    pub fn read_entries(&self) -> Vec<(Arc<Published>, LastRead)> {
        // The board's lock only while the entries are cloned: registering and
        // looking up destinations go on meanwhile.
        let entries: Vec<Arc<Published>> = self.entries.lock().values().cloned().collect();
        entries
            .into_iter()
            .filter_map(|e| e.last_read().map(|r| (e, r)))
            .collect()
    }

    /// Marks `key`'s entry as changed, if it has one (a change the broker counts for
    /// it, such as its producers).
    pub fn mark(&self, key: &DestinationKey) {
        if let Some(entry) = self.get(key) {
            entry.mark();
        }
    }

    /// The keys changed since the last call, each once, with their entries now
    /// (`None`: deleted, or not running), their marks cleared before the entries are
    /// read (a change after that marks them again).
    pub fn take_changes(&self) -> Vec<(DestinationKey, Option<Arc<Published>>)> {
        let keys = std::mem::take(&mut *self.changes.0.lock());
        let entries = self.entries.lock();
        keys.into_iter()
            .map(|key| {
                let entry = entries.get(&key).cloned();
                if let Some(entry) = &entry {
                    entry.clear_mark();
                }
                let running = entry.filter(|e| e.is_running());
                (key, running)
            })
            .collect()
    }

    /// Entries on the board (running or not).
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether the board has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> DestinationKey {
        DestinationKey::queue(name).unwrap()
    }

    #[test]
    fn only_what_changed_is_read_again() {
        let board = StatsBoard::default();
        let a = board.started(&key("a"));
        let _b = board.started(&key("b"));
        let first: Vec<_> = board.take_changes().into_iter().map(|(k, _)| k).collect();
        assert_eq!(first, vec![key("a"), key("b")]);
        assert!(board.take_changes().is_empty(), "nothing changed");
        let counters = DestinationCounters {
            enqueued: 3,
            ..Default::default()
        };
        a.publish_counters(&counters);
        a.publish_counters(&counters);
        a.publish_gauges(Gauges {
            consumers: 1,
            ..Gauges::default()
        });
        let changed = board.take_changes();
        assert_eq!(changed.len(), 1, "marked once however often it changed");
        let read = changed[0].1.as_ref().unwrap().read();
        assert_eq!((read.enqueued, read.consumers), (3, 1));
        a.publish_counters(&counters);
        assert!(
            board.take_changes().is_empty(),
            "the same values change nothing"
        );
    }

    /// The board sums what readings put on its entries; a deletion takes its
    /// entry's reading out at once, and a reading put on a deleted entry (read while
    /// the deletion went on) is not kept.
    #[test]
    fn readings_live_on_the_entries_and_leave_with_them() {
        let board = StatsBoard::default();
        let b = board.started(&key("b"));
        let a = board.started(&key("a"));
        let read = |queue_size, asleep| LastRead {
            queue_size,
            consumers: 1,
            asleep,
            ..LastRead::default()
        };
        board.put_read(&b, Some(read(5, true)));
        board.put_read(&a, Some(read(3, false)));
        board.put_read(&a, Some(read(4, false)));
        let totals = board.read_totals();
        assert_eq!(
            (
                totals.destinations,
                totals.queue_size,
                totals.consumers,
                totals.asleep
            ),
            (2, 9, 2, 1)
        );
        let mut listed: Vec<_> = board
            .read_entries()
            .iter()
            .map(|(e, r)| (e.key().clone(), r.queue_size))
            .collect();
        listed.sort();
        assert_eq!(listed, vec![(key("a"), 4), (key("b"), 5)]);

        board.remove(&key("b"));
        let totals = board.read_totals();
        assert_eq!(
            (totals.destinations, totals.queue_size, totals.asleep),
            (1, 4, 0)
        );
        board.put_read(&b, Some(read(7, false)));
        assert_eq!(b.last_read(), None, "a deleted entry keeps no reading");
        assert_eq!(board.read_totals().queue_size, 4);

        board.put_read(&a, None);
        assert_eq!(board.read_totals(), ReadTotals::default());
        assert!(board.read_entries().is_empty());
    }

    #[test]
    fn a_deleted_destination_is_read_as_gone() {
        let board = StatsBoard::default();
        board.started(&key("a"));
        board.take_changes();
        board.remove(&key("a"));
        let changed = board.take_changes();
        assert_eq!(changed.len(), 1);
        assert!(changed[0].1.is_none());
        assert!(board.is_empty());
        // An entry made before its actor starts is not read as running.
        board.entry(&key("b"));
        assert!(board.take_changes()[0].1.is_none());
    }
}
