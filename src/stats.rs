//! Snapshots of what a running broker holds, for operators: [`Broker::stats`].
//!
//! Plain values (serde-serializable, no actor types): [`BrokerStats`] is the system
//! usage ([`UsageStats`]) and one [`DestinationStats`] per running destination. The
//! metrics endpoint (`metrics/`) publishes them in Prometheus' format and
//! `ebb stat` reads them back from there (`ebb::cli::stat`, with the `cli` feature).
//! The process's memory comes from [`crate::process`].
//!
//! What each field means for a topic and for a queue is said field by field; topics do
//! not count acks or in-flight deliveries (their subscriptions do, per subscription),
//! and have no dead-letter queue.
//!
//! **Cost.** No reading asks an actor. Each destination publishes its counters and
//! gauges as it works, lock-free ([`ebb_actors::destination::StatsBoard`]), and the
//! first change after a reading puts it on the board's change list; the store names
//! the containers its writes touched ([`ebb_store::MessageStore::take_written`]). The
//! broker keeps its last reading on the same board entries
//! ([`ebb_actors::destination::LastRead`], about 60 bytes each, with the sums on the
//! board: no map of its own) and a refresh reads again only the destinations on
//! either list, 256 at a time: their committed rows (kept by the store since the last
//! write; the others counted 32 to a statement, a `GROUP BY` over an `IN` list
//! walking the `(container, id)` index of each, at most 32 rows; a sleeping
//! destination's kept count is dropped once read, so that it costs nothing there),
//! their memory and producers. One statement per destination cost a round trip to
//! the store's connection thread each: after a fill of 100,000 queues, a core for a
//! minute. So a refresh costs what changed, and an idle broker's runs
//! no store statement for its destinations, however many it holds. [`Broker::stats`]
//! then copies the whole reading out (its size grows with the destinations), its
//! counters as published now; the metrics refresh reads only the sums, and
//! `/metrics` builds the stats only of the destinations it lists.

use std::collections::BTreeSet;
use std::sync::Arc;

use ebb_actors::DestinationKey;
use serde::{Deserialize, Serialize};

use ebb_actors::destination::{LastRead, Published, ReadTotals, StatsBoard};
use ebb_actors::messages::Stats;

use crate::{Broker, Error};

/// `used` as a percentage of `limit` (0.0 ..= 100.0, more when over the limit).
/// A `limit` of 0 means "no limit" and gives 0.0: nothing is ever full.
pub fn percent(used: u64, limit: u64) -> f64 {
    if limit == 0 {
        0.0
    } else {
        used as f64 * 100.0 / limit as f64
    }
}

/// System usage, as ActiveMQ's `systemUsage`: what the broker holds against its
/// limits. Every size is in bytes; a limit of 0 means no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageStats {
    /// Bytes of message bodies and headers held in memory (each shared body once).
    pub memory_bytes: u64,
    /// Memory limit in bytes (0 = none).
    pub memory_limit_bytes: u64,
    /// Bytes the store's messages take.
    pub store_bytes: u64,
    /// Store limit in bytes (0 = none).
    pub store_limit_bytes: u64,
    /// Bytes of non-persistent messages held (in memory: Ebb has no temporary store;
    /// they count in `memory_bytes` too).
    pub temp_bytes: u64,
    /// Temporary storage limit in bytes (0 = none).
    pub temp_limit_bytes: u64,
    /// Producers whose sends are waiting for space (producer flow control), now.
    pub blocked_producers: u64,
    /// Housekeeping lag, ms: how long the expiry page that has waited longest for a
    /// housekeeping permit has been waiting (0 when housekeeping keeps up).
    #[serde(default)]
    pub housekeeping_lag_ms: u64,
    /// Expiry pages waiting for a housekeeping permit now.
    #[serde(default)]
    pub housekeeping_pages_waiting: u64,
    /// The broker process's resident memory now, bytes (Linux `VmRSS`; 0 elsewhere).
    #[serde(default)]
    pub process_resident_bytes: u64,
    /// The broker process's peak resident memory, bytes (Linux `VmHWM`; 0 elsewhere).
    #[serde(default)]
    pub process_peak_resident_bytes: u64,
}

impl UsageStats {
    /// Memory used, in percent of its limit (0.0 without a limit); see [`percent`].
    pub fn memory_percent(&self) -> f64 {
        percent(self.memory_bytes, self.memory_limit_bytes)
    }

    /// Store used, in percent of its limit (0.0 without a limit).
    pub fn store_percent(&self) -> f64 {
        percent(self.store_bytes, self.store_limit_bytes)
    }

    /// Temporary storage used, in percent of its limit (0.0 without a limit).
    pub fn temp_percent(&self) -> f64 {
        percent(self.temp_bytes, self.temp_limit_bytes)
    }
}

pub use ebb_actors::DestinationKind;

/// One destination's gauges (now) and counters (since the destination's actor
/// started: they restart from 0 with the broker). Counts are messages unless said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationStats {
    /// The store key, e.g. `topic://orders` or `queue://jobs`.
    pub destination: String,
    /// Topic or queue.
    pub kind: DestinationKind,
    /// Messages waiting: pending plus in flight. For a topic, the message rows the
    /// store holds for it: persistent messages some durable subscription has not acked
    /// (in-flight ones included, they stay stored until acked), acked ones the next
    /// cleanup batch has not deleted yet. Not counted: the messages of open
    /// transactions and scheduled ones (until they are released: the scheduler's
    /// backlog counts them), and non-persistent messages waiting in memory for a
    /// non-durable subscriber.
    pub queue_size: u64,
    /// For a queue: messages delivered and not acked yet (also in `queue_size`). Topics
    /// do not report it: 0 for them.
    pub in_flight: u64,
    /// Consumers attached now (for a topic: its online subscriptions, durable or not).
    pub consumers: u64,
    /// STOMP connections that have sent to it and are still open (as ActiveMQ counts a
    /// producer per connection and destination). Embedding callers are not counted.
    pub producers: u64,
    /// Messages accepted, those that expired on arrival included.
    pub enqueued_total: u64,
    /// For a topic: deliveries handed to consumers (one per subscription a message
    /// reached, redeliveries counted again). Topics do not count acks, so this runs
    /// ahead of ActiveMQ's ack-based dequeue count by the deliveries in flight.
    pub dequeued_total: u64,
    /// Deliveries handed to consumers, redeliveries included (for a topic, the same
    /// as `dequeued_total`).
    #[serde(default)]
    pub delivered_total: u64,
    /// Expirations. For a topic: one per (message, durable subscription) whose expiry
    /// was acked, plus one per message that expired on arrival or before reaching a
    /// non-durable consumer.
    pub expired_total: u64,
    /// Messages moved to a dead-letter queue (queues only).
    pub dead_lettered_total: u64,
    /// Expiry pages finished (each one bounded store read of at most
    /// `max_expire_page_size` rows).
    pub expiry_pages_total: u64,
    /// Expiry runs started since start (a run is one or more chained pages).
    #[serde(default)]
    pub expiry_runs_total: u64,
    /// Most rows one expiry page of this destination loaded (topics) or removed
    /// (queues) since start: never more than its `max_expire_page_size`.
    #[serde(default)]
    pub max_expiry_page_rows: u64,
    /// Bytes of messages this destination holds in memory (charged once per message).
    pub memory_bytes: u64,
    /// Producers of this destination waiting for space now (producer flow control).
    pub blocked_producers: u64,
    /// Asleep: idle, its actor stopped, only its key and counters kept (see the
    /// policy's `inactive_timeout_before_sleep`); a subscription, a browse or a send
    /// that needs its actor wakes it (a persistent send to a sleeping queue is stored
    /// without waking it).
    #[serde(default)]
    pub asleep: bool,
    /// Times it went to sleep since the broker started (many, with messages between
    /// them: its `inactive_timeout_before_sleep` may be shorter than its pauses).
    #[serde(default)]
    pub sleeps_total: u64,
}

impl DestinationStats {
    /// The stats of destination `destination` (its store key) of `kind`, from what
    /// its actor reports ([`Stats`], the same for every kind) and the number of
    /// committed message rows the store holds for it. `queue_size` is the stored rows
    /// (in-flight ones included: a row goes at its ack; scheduled ones and those of
    /// open transactions not) plus the non-persistent messages waiting;
    /// `dequeued_total` counts a queue's acks and a topic's deliveries.
    pub(crate) fn from_stats(
        destination: String,
        kind: DestinationKind,
        stats: &Stats,
        stored_rows: u64,
    ) -> Self {
        Self {
            destination,
            kind,
            queue_size: stored_rows + stats.pending_non_persistent,
            in_flight: stats.in_flight,
            consumers: stats.consumers,
            producers: 0,
            enqueued_total: stats.enqueued,
            dequeued_total: stats.dequeued,
            delivered_total: stats.dispatched,
            expired_total: stats.expired,
            dead_lettered_total: stats.dead_lettered,
            expiry_pages_total: stats.expiry_pages,
            max_expiry_page_rows: stats.max_expiry_page_rows,
            expiry_runs_total: stats.expiry_runs,
            memory_bytes: 0,
            blocked_producers: 0,
            asleep: false,
            sleeps_total: 0,
        }
    }

    /// The stats of a destination that is not running: its stored rows, no counters.
    pub fn stored_only(destination: String, kind: DestinationKind, stored_rows: u64) -> Self {
        Self::from_stats(destination, kind, &Stats::default(), stored_rows)
    }
}

/// A snapshot of the whole broker: [`Broker::stats`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BrokerStats {
    /// Memory, store and temp usage and limits.
    pub usage: UsageStats,
    /// One entry per running destination, sorted by store key: every one of them.
    /// (Read back from `/metrics` by `ebb stat`, it holds the destinations that have
    /// series there, which `[http] max_destination_series` may cut.)
    pub destinations: Vec<DestinationStats>,
    /// How many destinations are running in all: `destinations.len()` for a
    /// [`Broker::stats`] snapshot; more when read back from a `/metrics` whose
    /// destination series were cut.
    pub destinations_total: u64,
    /// The sums over every running destination (also those a `/metrics` reading had no
    /// series for).
    #[serde(default)]
    pub totals: DestinationTotals,
    /// The scheduler's backlog (scheduled messages and redeliveries held back).
    #[serde(default)]
    pub scheduler: crate::ScheduleBacklog,
}

/// Gauges summed over every running destination (each as in [`DestinationStats`]):
/// the broker's totals, which `/metrics` publishes whether or not it lists each
/// destination (`ebb_messages_waiting`, `ebb_messages_in_flight`, `ebb_consumers`,
/// `ebb_producers`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationTotals {
    /// Messages waiting: the sum of the destinations' `queue_size`.
    pub queue_size: u64,
    /// Deliveries not acked yet: the sum of `in_flight`.
    pub in_flight: u64,
    /// Consumers attached: the sum of `consumers`.
    pub consumers: u64,
    /// Producers (connection and destination pairs): the sum of `producers`.
    pub producers: u64,
    /// Destinations asleep (`ebb_destinations_asleep`): those whose `asleep` is set.
    #[serde(default)]
    pub asleep: u64,
}

impl DestinationTotals {
    /// The sums over `destinations`.
    pub fn of(destinations: &[DestinationStats]) -> Self {
        destinations.iter().fold(Self::default(), |t, d| Self {
            queue_size: t.queue_size + d.queue_size,
            in_flight: t.in_flight + d.in_flight,
            consumers: t.consumers + d.consumers,
            producers: t.producers + d.producers,
            asleep: t.asleep + u64::from(d.asleep),
        })
    }
}

/// The broker's reading of every running destination, kept and brought up to date
/// from what changed since ([`Broker::stats`]; see the module documentation). Each
/// destination's part lives on its stats board entry
/// ([`ebb_actors::destination::LastRead`]), with the sums on the board; this keeps
/// what a refresh has not read yet and what the history has not taken. Shared by
/// every clone of a [`Broker`]; the HTTP server's `/metrics` renders the readings on
/// the board ([`Broker::listed_stats`]).
#[derive(Debug, Default)]
pub(crate) struct Reading {
    /// One refresh at a time (the change lists are taken once).
    refresh: tokio::sync::Mutex<()>,
    state: parking_lot::Mutex<ReadingState>,
}

/// What a [`Reading`] holds.
#[derive(Debug, Default)]
struct ReadingState {
    /// Destinations a refresh that failed part way did not read (read by the next).
    pending: BTreeSet<DestinationKey>,
    /// Destinations read again or dropped since the history last took them
    /// ([`Reading::take_since_point`]); at most one entry per destination. `None`
    /// until a history first takes them: a broker without one (embedded, no HTTP
    /// server) keeps no such set.
    since_point: Option<BTreeSet<DestinationKey>>,
}

impl DestinationTotals {
    /// The sums the stats board keeps of its entries' readings.
    fn of_read(t: &ReadTotals) -> Self {
        Self {
            queue_size: t.queue_size,
            in_flight: t.in_flight,
            consumers: t.consumers,
            producers: t.producers,
            asleep: t.asleep,
        }
    }
}

impl DestinationStats {
    /// Destination `key`'s stats from what it publishes now (`entry`) and what the
    /// last reading read of it (`read`).
    fn of_entry(key: &DestinationKey, entry: &Published, read: &LastRead) -> Self {
        let counted = entry.read();
        let mut stats = Self::from_stats(key.container(), key.kind(), &counted, 0);
        stats.queue_size = read.queue_size;
        stats.in_flight = read.in_flight;
        stats.consumers = read.consumers;
        stats.producers = read.producers;
        stats.memory_bytes = read.memory_bytes;
        stats.blocked_producers = read.blocked_producers;
        stats.asleep = read.asleep;
        stats.sleeps_total = entry.sleeps();
        stats
    }
}

impl Reading {
    /// What changed since the last call, for the history's next point: the
    /// destinations read again (their stats as read now, made one at a time as the
    /// iterator is taken, so a step over 100,000 changed destinations never holds
    /// their copies at once) and the store keys of those that ended. The first call
    /// answers every destination read so far, in key order. (The metrics recorder's,
    /// behind the `prometheus` feature.)
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn take_since_point<'b>(
        &self,
        board: &'b StatsBoard,
    ) -> impl Iterator<Item = Change<DestinationStats>> + 'b {
        let keys = self.state.lock().since_point.replace(BTreeSet::new());
        let (all, keys) = match keys {
            Some(keys) => (Vec::new(), keys),
            None => {
                let mut entries = board.read_entries();
                entries.sort_unstable_by(|a, b| a.0.key().cmp(b.0.key()));
                (entries, BTreeSet::new())
            }
        };
        let all = all.into_iter().map(|(entry, read)| {
            Change::Read(DestinationStats::of_entry(entry.key(), &entry, &read))
        });
        let changed = keys.into_iter().map(move |key| {
            let entry = board.get(&key);
            match entry.as_ref().and_then(|e| e.last_read().map(|r| (e, r))) {
                Some((entry, read)) => Change::Read(DestinationStats::of_entry(&key, entry, &read)),
                None => Change::Ended(key.container()),
            }
        });
        all.chain(changed)
    }
}

/// One destination's part of a history point
/// ([`crate::history::History::record_changes`]): defined here, beside what it
/// carries, so that the history depends on the stats and not the other way round.
#[derive(Debug, Clone)]
pub enum Change<D> {
    /// Read again: its stats now.
    Read(D),
    /// Its store key: it no longer runs (deleted, or ended as temporary).
    Ended(String),
}

/// Destinations a reading reads at a time: the store counts those it keeps no count
/// of 32 to a statement ([`ebb_store::MessageStore::count_committed_many`]).
const READ_BATCH: usize = 256;

impl Broker {
    /// A snapshot of the broker's usage and of every running destination, in
    /// store-key order. Destinations are the ones in use since the broker started
    /// (sent to, subscribed to, asked about); a topic that only exists in the store is
    /// not started by this call.
    ///
    /// Cost: no actor is asked. Each destination publishes its counters as it works
    /// ([`ebb_actors::destination::StatsBoard`]); the broker keeps its last reading on
    /// the same entries and reads again only the destinations that changed since
    /// (their committed rows from the store when a write touched them), then copies
    /// the reading out (about 200 bytes and the name per destination). An idle
    /// broker's call runs no store statement for its destinations.
    ///
    /// Errors: [`Error::Store`] when a count fails (the store is closed or
    /// unreachable; what was not read is read by the next call).
    pub async fn stats(&self) -> Result<BrokerStats, Error> {
        self.refresh_reading().await?;
        let mut entries = self.stats_board().read_entries();
        entries.sort_unstable_by(|a, b| a.0.key().cmp(b.0.key()));
        let destinations: Vec<DestinationStats> = entries
            .iter()
            .map(|(entry, read)| DestinationStats::of_entry(entry.key(), entry, read))
            .collect();
        let mut stats = self.stats_summary().await?;
        stats.destinations_total = destinations.len() as u64;
        stats.totals = DestinationTotals::of(&destinations);
        stats.destinations = destinations;
        Ok(stats)
    }

    /// The last reading of at most `max` destinations, named ones first, then
    /// temporary ones, each group in store-key order (what `/metrics` lists: see
    /// `metrics::series`), and how many were left out. Each destination's entry handle
    /// and reading are copied (about 70 bytes), the stats only of those listed.
    pub(crate) fn listed_stats(&self, max: usize) -> (Vec<DestinationStats>, usize) {
        let mut entries = self.stats_board().read_entries();
        let total = entries.len();
        // Named ones before temporary ones, each in key order: the first `max` of
        // that order are picked without sorting the others.
        let temporary = |e: &(Arc<Published>, LastRead)| e.0.key().kind().capabilities().temporary;
        let order = |a: &(Arc<Published>, LastRead), b: &(Arc<Published>, LastRead)| {
            temporary(a)
                .cmp(&temporary(b))
                .then_with(|| a.0.key().cmp(b.0.key()))
        };
        if total > max && max > 0 {
            entries.select_nth_unstable_by(max - 1, order);
        }
        entries.truncate(max);
        entries.sort_unstable_by(|a, b| a.0.key().cmp(b.0.key()));
        let listed: Vec<DestinationStats> = entries
            .iter()
            .map(|(entry, read)| DestinationStats::of_entry(entry.key(), entry, read))
            .collect();
        (listed, total - entries.len())
    }

    /// The broker's usage, totals and scheduler backlog without the per-destination
    /// entries (`destinations` empty, `destinations_total` the count): what the
    /// metrics refresh records each second, at a cost that does not grow with the
    /// destinations. Call [`Self::refresh_reading`] first for fresh totals.
    pub(crate) async fn stats_summary(&self) -> Result<BrokerStats, Error> {
        let usage = self.usage();
        let (lag, waiting) = self.housekeeping_lag();
        let totals = self.stats_board().read_totals();
        Ok(BrokerStats {
            usage: UsageStats {
                memory_bytes: usage.memory_bytes,
                memory_limit_bytes: usage.memory_limit,
                store_bytes: usage.store_bytes,
                store_limit_bytes: usage.store_limit,
                temp_bytes: usage.temp_bytes,
                temp_limit_bytes: usage.temp_limit,
                blocked_producers: usage.blocked_producers,
                housekeeping_lag_ms: lag.as_millis() as u64,
                housekeeping_pages_waiting: waiting as u64,
                process_resident_bytes: crate::process::resident_bytes(),
                process_peak_resident_bytes: crate::process::peak_resident_bytes(),
            },
            destinations_total: totals.destinations,
            totals: DestinationTotals::of_read(&totals),
            destinations: Vec::new(),
            scheduler: self.schedule_backlog().await?,
        })
    }

    /// Brings the kept reading up to date: reads again the destinations whose
    /// counters changed or whose committed rows a store write touched since the last
    /// refresh, and drops those deleted. Answers the store keys it read or dropped
    /// (for the history). One refresh at a time.
    pub(crate) async fn refresh_reading(&self) -> Result<Vec<String>, Error> {
        let _one = self.reading().refresh.lock().await;
        let board = self.stats_board();
        let mut todo: BTreeSet<DestinationKey> =
            std::mem::take(&mut self.reading().state.lock().pending);
        todo.extend(board.take_changes().into_iter().map(|(key, _)| key));
        match self.store().take_written() {
            Some(containers) => todo.extend(
                containers
                    .iter()
                    .filter_map(|c| DestinationKey::from_container(c).ok()),
            ),
            // The store's record starts now: count everything read so far again.
            None => todo.extend(
                board
                    .read_entries()
                    .into_iter()
                    .map(|(entry, _)| entry.key().clone()),
            ),
        }
        let mut done = Vec::with_capacity(todo.len());
        while !todo.is_empty() {
            // A batch at a time: the store counts the rows of those it keeps no
            // count of 32 to a statement.
            let mut batch = Vec::with_capacity(READ_BATCH.min(todo.len()));
            while batch.len() < READ_BATCH {
                let Some(key) = todo.pop_first() else { break };
                let entry = board.get(&key);
                let running = entry.filter(|e| e.is_running());
                if running.as_ref().is_some_and(|e| e.is_asleep()) {
                    // Its actor stopped: the cached address would only hold its
                    // mailbox, and its memory usage counts nothing.
                    self.forget_address(&key);
                    self.forget_idle_usage(&key);
                }
                batch.push((key, running));
            }
            let containers: Vec<String> = batch
                .iter()
                .filter(|(_, running)| running.is_some())
                .map(|(key, _)| key.container())
                .collect();
            let stored = match self.store().count_committed_many(&containers).await {
                Ok(stored) => stored,
                Err(e) => {
                    let mut state = self.reading().state.lock();
                    state.pending.extend(batch.into_iter().map(|(key, _)| key));
                    state.pending.append(&mut todo);
                    return Err(e.into());
                }
            };
            let mut stored = stored.into_iter().zip(containers);
            let mut batch = batch.into_iter();
            while let Some((key, running)) = batch.next() {
                match running {
                    Some(entry) => {
                        let (rows, container) = stored.next().expect("a count per running one");
                        match self.read_destination_with(&key, &container, &entry, rows) {
                            Ok(read) => board.put_read(&entry, Some(read)),
                            Err(e) => {
                                let mut state = self.reading().state.lock();
                                state.pending.insert(key);
                                state.pending.extend(batch.map(|(key, _)| key));
                                state.pending.append(&mut todo);
                                return Err(e);
                            }
                        }
                    }
                    None => {
                        if let Some(entry) = board.get(&key) {
                            board.put_read(&entry, None);
                        }
                    }
                }
                if let Some(since_point) = &mut self.reading().state.lock().since_point {
                    since_point.insert(key.clone());
                }
                done.push(key.container());
            }
        }
        Ok(done)
    }

    /// What a reading reads of one destination beside its published counters
    /// (`entry`): its committed rows (kept by the store since its last write, else
    /// one `COUNT`; not kept for a sleeping one), its memory and producers. A refresh
    /// reads many at once instead ([`Self::refresh_reading`]).
    async fn read_destination(
        &self,
        key: &DestinationKey,
        entry: &Published,
    ) -> Result<LastRead, Error> {
        let container = key.container();
        let stored = self.store().count_committed(&container).await?;
        self.read_destination_with(key, &container, entry, stored)
    }

    /// [`Self::read_destination`] with its committed rows counted (`stored`).
    fn read_destination_with(
        &self,
        key: &DestinationKey,
        container: &str,
        entry: &Published,
        stored: u64,
    ) -> Result<LastRead, Error> {
        if entry.is_asleep() {
            // Counted again when it wakes or is written: a sleeping destination keeps
            // no count in the store's memory beside its reading.
            self.store().forget_committed_count(container);
        }
        let counted = entry.read();
        let flow = self.destination_flow(key)?;
        Ok(LastRead {
            queue_size: stored + counted.pending_non_persistent,
            in_flight: counted.in_flight,
            consumers: counted.consumers,
            producers: flow.producers,
            memory_bytes: flow.memory_bytes,
            blocked_producers: flow.blocked_producers,
            asleep: entry.is_asleep(),
        })
    }

    /// One destination's [`DestinationStats`] (its actor started if it is neither
    /// running nor asleep: a sleeping one is not woken): what it published, and its
    /// committed rows.
    ///
    /// Errors: [`Error::ShuttingDown`] when it is not running after shutdown,
    /// [`Error::Store`] when the count fails.
    pub(crate) async fn destination_stats(
        &self,
        destination: &crate::DestinationKey,
    ) -> Result<DestinationStats, Error> {
        let known = |b: &Self| b.stats_board().get(destination).filter(|e| e.is_running());
        let entry = match known(self) {
            Some(entry) => entry,
            None => {
                self.ensure_running(destination).await?;
                known(self).unwrap_or_else(|| Published::detached(destination.clone()))
            }
        };
        let read = self.read_destination(destination, &entry).await?;
        Ok(DestinationStats::of_entry(destination, &entry, &read))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_of_no_limit_is_zero() {
        assert_eq!(percent(10, 0), 0.0);
        assert_eq!(percent(0, 100), 0.0);
        assert_eq!(percent(25, 100), 25.0);
        assert_eq!(percent(150, 100), 150.0);
        let usage = UsageStats {
            store_bytes: 1 << 20,
            store_limit_bytes: 4 << 20,
            ..UsageStats::default()
        };
        assert_eq!(usage.store_percent(), 25.0);
        assert_eq!(usage.memory_percent(), 0.0);
    }

    #[test]
    fn counters_map_to_destination_fields() {
        let topic = Stats {
            counters: ebb_actors::destination::DestinationCounters {
                enqueued: 8,
                dispatched: 5,
                expired: 3,
                expiry_pages: 2,
                ..Default::default()
            },
            dequeued: 5,
            consumers: 1,
            pending_non_persistent: 2,
            ..Stats::default()
        };
        let d = DestinationStats::from_stats(
            "topic://orders".into(),
            DestinationKind::TOPIC,
            &topic,
            6,
        );
        assert_eq!(d.kind, DestinationKind::TOPIC);
        assert_eq!(
            (d.queue_size, d.enqueued_total, d.dequeued_total),
            (8, 8, 5)
        );
        assert_eq!(
            (d.expired_total, d.expiry_pages_total, d.consumers),
            (3, 2, 1)
        );
        let json = serde_json::to_string(&d).unwrap();
        assert!(json.contains("\"kind\":\"topic\""), "{json}");
    }

    /// A refresh reads again only what changed since the last one: the destination
    /// sent to, its store write, the one whose consumer came, the one deleted; an
    /// idle broker's refresh reads nothing.
    #[actix_rt::test]
    async fn a_refresh_reads_only_what_changed() {
        use crate::{AckMode, BrokerConfig, Message, SubscribeOptions};
        let b = Broker::start("sqlite::memory:", BrokerConfig::default())
            .await
            .unwrap();
        for name in ["queue://a", "queue://b", "queue://c"] {
            b.send(name, Message::new("m").persistent(true))
                .await
                .unwrap();
        }
        let first = b.stats().await.unwrap();
        assert_eq!(first.destinations_total, 3);
        assert_eq!(first.totals.queue_size, 3);
        assert_eq!(b.refresh_reading().await.unwrap(), Vec::<String>::new());

        b.send("queue://b", Message::new("m2").persistent(true))
            .await
            .unwrap();
        assert_eq!(b.refresh_reading().await.unwrap(), ["queue://b"]);
        assert_eq!(b.refresh_reading().await.unwrap(), Vec::<String>::new());
        let stats = b.stats().await.unwrap();
        assert_eq!(stats.totals.queue_size, 4);
        assert_eq!(stats.destinations[1].queue_size, 2);
        assert_eq!(stats.destinations[1].enqueued_total, 2);

        let mut sub = b
            .subscribe(
                "queue://c",
                SubscribeOptions::default().ack(AckMode::Client),
            )
            .await
            .unwrap();
        let got = futures::StreamExt::next(&mut sub).await.unwrap();
        assert_eq!(b.refresh_reading().await.unwrap(), ["queue://c"]);
        sub.acker().ack(&got).await.unwrap();
        let changed = b.refresh_reading().await.unwrap();
        assert_eq!(changed, ["queue://c"]);
        let c = b.stats().await.unwrap().destinations[2].clone();
        assert_eq!((c.queue_size, c.consumers, c.dequeued_total), (0, 1, 1));
        drop(sub);

        b.delete_destination("queue://a").await.unwrap();
        b.refresh_reading().await.unwrap();
        let stats = b.stats().await.unwrap();
        let keys: Vec<&str> = stats
            .destinations
            .iter()
            .map(|d| d.destination.as_str())
            .collect();
        assert_eq!(keys, ["queue://b", "queue://c"]);
        assert_eq!(stats.totals.queue_size, 2);
        b.shutdown().await.unwrap();
    }

    /// What `/metrics` lists: at most `max`, named destinations before temporary
    /// ones, in key order, picked from the board without a map of their own; the
    /// rest counted as left out.
    #[actix_rt::test]
    async fn the_listing_takes_named_destinations_first_in_key_order() {
        use crate::{BrokerConfig, Message};
        let b = Broker::start("sqlite::memory:", BrokerConfig::default())
            .await
            .unwrap();
        let temporary = b.temporary_queue().unwrap();
        b.send(temporary.key(), Message::new("t")).await.unwrap();
        for name in ["queue://d", "queue://b", "topic://a", "queue://c"] {
            b.send(name, Message::new("m").persistent(true))
                .await
                .unwrap();
        }
        b.stats().await.unwrap();
        let names = |listed: &[DestinationStats]| {
            listed
                .iter()
                .map(|d| d.destination.clone())
                .collect::<Vec<_>>()
        };
        let (listed, omitted) = b.listed_stats(3);
        assert_eq!(names(&listed), ["queue://b", "queue://c", "queue://d"]);
        assert_eq!(omitted, 2);
        let (listed, omitted) = b.listed_stats(5);
        assert_eq!(
            names(&listed),
            [
                "queue://b",
                "queue://c",
                "queue://d",
                &temporary.key().container(),
                "topic://a"
            ]
        );
        assert_eq!((omitted, listed[0].queue_size), (0, 1));
        assert_eq!(b.listed_stats(0), (Vec::new(), 5));
        b.shutdown().await.unwrap();
    }

    #[test]
    fn kinds_come_from_store_keys() {
        assert_eq!(
            DestinationKind::of_container("queue://jobs"),
            Some(DestinationKind::QUEUE)
        );
        assert_eq!(
            DestinationKind::of_container("topic://a"),
            Some(DestinationKind::TOPIC)
        );
        assert_eq!(DestinationKind::of_container("jobs"), None);
    }
}
