//! What changed over time: the broker's rates and depths as series, in bounded
//! memory, for the console's charts and `GET /api/v1/.../history` ([`History`]).
//!
//! **Where samples come from.** The HTTP server's refresh task takes a
//! [`BrokerStats`] snapshot every second for `/metrics` (see [`crate::metrics`]); it
//! hands each one to [`History::record`], which keeps one every [`History::step`]
//! ([`DEFAULT_STEP`], 5 s). Nothing is written to the store and nothing asks an
//! actor more than the metrics already do. An application that embeds Ebb without
//! the HTTP server can call [`History::record`] with its own snapshots.
//!
//! **Two resolutions**, as RabbitMQ's management plugin keeps them: the last
//! [`FINE_POINTS`] steps (15 min at 5 s) and the last [`COARSE_POINTS`] coarse steps
//! of [`COARSE_STEPS`] steps each (24 h at 5 min). A coarse point averages the rates
//! of its steps and keeps the gauges (depth, memory) of its last one. A query for a
//! window of at most 15 min is answered from the fine points, a longer one (up to
//! 24 h) from the coarse ones.
//!
//! **What is kept, and its bound.**
//! - The broker's series (totals over every destination): always, at most
//!   [`BROKER_SERIES_BYTES`] (37,440 bytes). Every series grows with its points to
//!   its bound (reached after a day), so a young one costs its few points.
//! - A destination's series, only while it is *tracked*: it changed (sent to,
//!   consumed from, expired, its depth or consumers moved) within the last fine
//!   window, or someone asked for its history within [`VIEW_KEEP`]. At most
//!   [`MAX_SERIES`] destinations are tracked. At the bound, a newly active
//!   destination takes the place of the series idle longest (idle for a step at
//!   least, so that active destinations do not push each other out step after
//!   step; one nobody views first, else a viewed one: activity wins over a view);
//!   a view takes only an unviewed idle one's place; with no such place, the
//!   newcomer has no series.
//!   Each series costs at most [`SERIES_BYTES`] plus its name, so all of them together at
//!   most [`MAX_SERIES`] × [`SERIES_BYTES`] (256 × 22,576 bytes = 5.8 MB). An idle
//!   destination has no series: 10,000 idle destinations cost no history.
//! - The last reading of each running destination ([`READING_BYTES`], 120, plus
//!   its name in an `Arc`, 16 bytes more: about 1.5 MB for 10,000 destinations,
//!   linear in their number): the counters the next step's rates are computed from,
//!   which also serve the sorted destination table ([`History::table`]). New
//!   readings are sorted into the list in place, never copied into a second list;
//!   a step's input is taken one destination at a time
//!   ([`History::record_changes`]).
//!
//! [`History::usage`] counts these bytes as they are now.
//!
//! **Rates** are per second over a step: the counter's change divided by the time
//! between the two readings (a step that took longer, because a snapshot was slow,
//! is divided by its real length). `enqueued`: messages accepted; `delivered`:
//! deliveries to consumers, redeliveries included; `dequeued`: acked from a queue,
//! delivered by a topic (as [`crate::stats::DestinationStats::dequeued_total`]);
//! `expired`; `dead_lettered`. Counters restart with the broker, so the first step
//! after a start has no rates.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;

pub use crate::stats::Change;
use crate::stats::{BrokerStats, DestinationKind, DestinationStats};

/// The wall clock, epoch ms: the time [`History::record`] and the queries take.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The default step between two points: 5 s.
pub const DEFAULT_STEP: Duration = Duration::from_secs(5);

/// Points of the fine series: 180 (15 min at the default step).
pub const FINE_POINTS: usize = 180;

/// Steps one coarse point covers: 60 (5 min at the default step).
pub const COARSE_STEPS: u32 = 60;

/// Points of the coarse series: 288 (24 h at the default step).
pub const COARSE_POINTS: usize = 288;

/// Most destinations with a series at once.
pub const MAX_SERIES: usize = 256;

/// How long a destination whose history was asked for keeps its series, idle or not:
/// 15 min.
pub const VIEW_KEEP: Duration = Duration::from_secs(15 * 60);

/// Depth points a sparkline shows (the last 5 min at the default step).
pub const SPARKLINE_POINTS: usize = 60;

/// Bytes of one destination's series, both resolutions, without its name.
pub const SERIES_BYTES: usize = (FINE_POINTS + COARSE_POINTS)
    * std::mem::size_of::<DestinationPoint>()
    + std::mem::size_of::<Tracked>();

/// Bytes of the broker's series, both resolutions.
pub const BROKER_SERIES_BYTES: usize =
    (FINE_POINTS + COARSE_POINTS) * std::mem::size_of::<BrokerPoint>();

/// Bytes of one destination's last reading, without its name.
pub const READING_BYTES: usize = std::mem::size_of::<Reading>();

/// Rates of one step, messages per second.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Rates {
    enqueued: f32,
    delivered: f32,
    dequeued: f32,
    expired: f32,
    dead_lettered: f32,
}

impl Rates {
    /// The rates of counters that moved by `delta` in `seconds`.
    fn of(delta: &Counters, seconds: f64) -> Self {
        let per = |n: u64| (n as f64 / seconds) as f32;
        Self {
            enqueued: per(delta.enqueued),
            delivered: per(delta.delivered),
            dequeued: per(delta.dequeued),
            expired: per(delta.expired),
            dead_lettered: per(delta.dead_lettered),
        }
    }

    fn add_weighted(&mut self, other: &Rates, weight: f32) {
        self.enqueued += other.enqueued * weight;
        self.delivered += other.delivered * weight;
        self.dequeued += other.dequeued * weight;
        self.expired += other.expired * weight;
        self.dead_lettered += other.dead_lettered * weight;
    }

    fn scaled(&self, by: f32) -> Self {
        let mut r = Self::default();
        r.add_weighted(self, by);
        r
    }
}

/// A destination's counters since its actor started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counters {
    enqueued: u64,
    delivered: u64,
    dequeued: u64,
    expired: u64,
    dead_lettered: u64,
}

impl Counters {
    /// How far each counter moved since `before` (0 for one that went back: the
    /// destination restarted).
    fn since(&self, before: &Counters) -> Counters {
        Counters {
            enqueued: self.enqueued.saturating_sub(before.enqueued),
            delivered: self.delivered.saturating_sub(before.delivered),
            dequeued: self.dequeued.saturating_sub(before.dequeued),
            expired: self.expired.saturating_sub(before.expired),
            dead_lettered: self.dead_lettered.saturating_sub(before.dead_lettered),
        }
    }

    fn add(&mut self, other: &Counters) {
        self.enqueued += other.enqueued;
        self.delivered += other.delivered;
        self.dequeued += other.dequeued;
        self.expired += other.expired;
        self.dead_lettered += other.dead_lettered;
    }

    fn any(&self) -> bool {
        *self != Counters::default()
    }
}

/// One point of a destination's series.
#[derive(Debug, Clone, Copy, PartialEq)]
struct DestinationPoint {
    t_ms: i64,
    rates: Rates,
    depth: u64,
    in_flight: u32,
    consumers: u32,
}

/// One point of the broker's series.
#[derive(Debug, Clone, Copy, PartialEq)]
struct BrokerPoint {
    t_ms: i64,
    rates: Rates,
    depth: u64,
    memory_bytes: u64,
    store_bytes: u64,
    resident_bytes: u64,
    housekeeping_lag_ms: u32,
    connections: u32,
    destinations: u32,
    blocked_producers: u32,
}

/// A point of either series: what a coarse point needs to be built.
trait Point: Copy {
    fn t_ms(&self) -> i64;
    fn rates_mut(&mut self) -> &mut Rates;
}

impl Point for DestinationPoint {
    fn t_ms(&self) -> i64 {
        self.t_ms
    }
    fn rates_mut(&mut self) -> &mut Rates {
        &mut self.rates
    }
}

impl Point for BrokerPoint {
    fn t_ms(&self) -> i64 {
        self.t_ms
    }
    fn rates_mut(&mut self) -> &mut Rates {
        &mut self.rates
    }
}

/// The two resolutions of one series, with the coarse point being built.
#[derive(Debug)]
struct Series<P> {
    fine: VecDeque<P>,
    coarse: VecDeque<P>,
    /// Rates × seconds of the steps since the last coarse point, their seconds and
    /// how many.
    acc: (Rates, f32, u32),
}

impl<P: Point> Series<P> {
    /// An empty series: its rings grow with their points, to [`FINE_POINTS`] and
    /// [`COARSE_POINTS`] at most, so a series a fill of many destinations starts
    /// costs its few points, not the 22 KB it holds once a day has passed.
    fn new() -> Self {
        Self {
            fine: VecDeque::new(),
            coarse: VecDeque::new(),
            acc: (Rates::default(), 0.0, 0),
        }
    }

    /// Adds the point of a step of `seconds`.
    fn push(&mut self, point: P, seconds: f32) {
        push_bounded(&mut self.fine, point, FINE_POINTS);
        let mut p = point;
        self.acc.0.add_weighted(p.rates_mut(), seconds);
        self.acc.1 += seconds;
        self.acc.2 += 1;
        if self.acc.2 >= COARSE_STEPS {
            *p.rates_mut() = self.acc.0.scaled(1.0 / self.acc.1.max(f32::EPSILON));
            push_bounded(&mut self.coarse, p, COARSE_POINTS);
            self.acc = (Rates::default(), 0.0, 0);
        }
    }

    /// The points within `window` before `now_ms`: fine ones for a window the fine
    /// series covers, coarse ones otherwise.
    fn window(&self, window: Duration, step: Duration, now_ms: i64) -> (Vec<P>, Duration) {
        let from = now_ms - window.as_millis() as i64;
        if window <= step * FINE_POINTS as u32 {
            let points = self.fine.iter().filter(|p| p.t_ms() > from).copied();
            return (points.collect(), step);
        }
        // The coarse points, then the fine ones since the last of them (the steps
        // a coarse point does not cover yet: a chart of the last hour is not empty
        // for its first 5 min).
        let last = self.coarse.back().map_or(i64::MIN, |p| p.t_ms());
        let points = self
            .coarse
            .iter()
            .filter(|p| p.t_ms() > from)
            .chain(self.fine.iter().filter(|p| p.t_ms() > last.max(from)))
            .copied();
        (points.collect(), step * COARSE_STEPS)
    }

    fn bytes(&self) -> usize {
        (self.fine.capacity() + self.coarse.capacity()) * std::mem::size_of::<P>()
    }
}

/// Appends `point` to `ring`, which holds `max` points at most: the oldest goes when
/// it is full, and it grows by doubling (from 8) but never past `max`.
fn push_bounded<P>(ring: &mut VecDeque<P>, point: P, max: usize) {
    if ring.len() >= max {
        ring.pop_front();
    } else if ring.len() == ring.capacity() {
        let to = (ring.capacity() * 2).clamp(8, max);
        ring.reserve_exact(to - ring.len());
    }
    ring.push_back(point);
}

/// A tracked destination's series and why it is tracked.
#[derive(Debug)]
struct Tracked {
    series: Series<DestinationPoint>,
    /// When it last changed, ms.
    active_ms: i64,
    /// Until when it stays tracked because its history was asked for, ms.
    viewed_until_ms: i64,
}

/// A running destination's last reading.
#[derive(Debug, Clone)]
struct Reading {
    /// Its store key, shared with [`Inner::moving`].
    key: std::sync::Arc<str>,
    kind: DestinationKind,
    counters: Counters,
    depth: u64,
    in_flight: u64,
    consumers: u64,
    /// Rates of the last step (zero before there were two readings).
    rates: Rates,
    /// The point it was last read for, epoch ms.
    read_ms: i64,
}

/// What [`History`] holds now, in bytes (heap included: points, names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HistoryUsage {
    /// Destinations with a series now (at most [`MAX_SERIES`]).
    pub series: usize,
    /// Bytes of those series, names included.
    pub series_bytes: usize,
    /// Bytes of the broker's series.
    pub broker_bytes: usize,
    /// Running destinations with a last reading.
    pub readings: usize,
    /// Bytes of the last readings, names included.
    pub reading_bytes: usize,
}

impl HistoryUsage {
    /// Every byte counted.
    pub fn total_bytes(&self) -> usize {
        self.series_bytes + self.broker_bytes + self.reading_bytes
    }
}

/// A series as the API answers it: one array per value, all as long as `t_ms`
/// (epoch ms, oldest first). Rates are per second over each point's step; `depth`
/// is messages waiting (pending plus in flight) at the point's time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Columns {
    /// Each point's time, epoch ms.
    pub t_ms: Vec<i64>,
    /// Messages accepted per second.
    pub enqueued_per_s: Vec<f32>,
    /// Deliveries to consumers per second (redeliveries included).
    pub delivered_per_s: Vec<f32>,
    /// Acks per second (a topic: deliveries).
    pub dequeued_per_s: Vec<f32>,
    /// Expirations per second.
    pub expired_per_s: Vec<f32>,
    /// Messages moved to a dead-letter queue per second.
    pub dead_lettered_per_s: Vec<f32>,
    /// Messages waiting (pending plus in flight).
    pub depth: Vec<u64>,
}

impl Columns {
    fn push(&mut self, t_ms: i64, rates: &Rates, depth: u64) {
        self.t_ms.push(t_ms);
        self.enqueued_per_s.push(rates.enqueued);
        self.delivered_per_s.push(rates.delivered);
        self.dequeued_per_s.push(rates.dequeued);
        self.expired_per_s.push(rates.expired);
        self.dead_lettered_per_s.push(rates.dead_lettered);
        self.depth.push(depth);
    }
}

/// The broker's history over a window: [`History::broker`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BrokerHistory {
    /// The window asked for, seconds.
    pub window_s: u64,
    /// Milliseconds between two points (the fine step, or a coarse point's span).
    pub step_ms: u64,
    /// Rates and depth summed over every running destination.
    #[serde(flatten)]
    pub columns: Columns,
    /// Bytes of messages held in memory.
    pub memory_bytes: Vec<u64>,
    /// Bytes the store's messages take.
    pub store_bytes: Vec<u64>,
    /// The process's resident memory, bytes.
    pub resident_bytes: Vec<u64>,
    /// Housekeeping lag, ms.
    pub housekeeping_lag_ms: Vec<u32>,
    /// Connections open (every protocol and transport).
    pub connections: Vec<u32>,
    /// Destinations running.
    pub destinations: Vec<u32>,
    /// Producers waiting for space.
    pub blocked_producers: Vec<u32>,
    /// What the history holds now.
    pub memory: HistoryUsage,
}

/// One destination's history over a window: [`History::destination`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DestinationHistory {
    /// The store key, `queue://jobs`.
    pub destination: String,
    /// The window asked for, seconds.
    pub window_s: u64,
    /// Milliseconds between two points (the fine step, or a coarse point's span).
    pub step_ms: u64,
    /// Whether it has a series now. A destination starts one when it changes or when
    /// its history is asked for (this call), so an idle one's first answer is empty.
    pub tracked: bool,
    /// Its rates and depth.
    #[serde(flatten)]
    pub columns: Columns,
    /// Messages delivered and not acked.
    pub in_flight: Vec<u32>,
    /// Consumers attached.
    pub consumers: Vec<u32>,
}

/// How [`History::table`] sorts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SortBy {
    /// By store key.
    Name,
    /// By messages waiting.
    Depth,
    /// By messages accepted per second over the last step.
    EnqueuedRate,
    /// By acks (a topic: deliveries) per second over the last step.
    DequeuedRate,
    /// By consumers attached.
    Consumers,
}

/// One row of [`History::table`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableRow {
    /// The store key.
    pub destination: String,
    /// Its kind.
    pub kind: DestinationKind,
    /// Messages waiting (pending plus in flight).
    pub depth: u64,
    /// Delivered, not acked.
    pub in_flight: u64,
    /// Consumers attached.
    pub consumers: u64,
    /// Messages accepted per second over the last step.
    pub enqueued_per_s: f32,
    /// Acks (a topic: deliveries) per second over the last step.
    pub dequeued_per_s: f32,
    /// Its depth over the last [`SPARKLINE_POINTS`] steps, oldest first; empty when
    /// it has no series (idle).
    pub sparkline: Vec<u64>,
}

/// A page of [`History::table`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TablePage {
    /// When the reading was taken, epoch ms (0 before the first).
    pub taken_at_ms: i64,
    /// Running destinations the caller may see that match the filter.
    pub matched: usize,
    /// The first row's place among them (from 0).
    pub offset: usize,
    /// The rows.
    pub rows: Vec<TableRow>,
}

/// The broker's history: see the module documentation. Shared by clones of an
/// `Arc`; every call takes one short lock.
#[derive(Debug)]
pub struct History {
    step: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// When the last kept reading was taken, ms (`None` before the first).
    last_ms: Option<i64>,
    broker: Series<BrokerPoint>,
    /// Sorted by key.
    readings: Vec<Reading>,
    tracked: HashMap<String, Tracked>,
    /// Destinations whose last rates were not 0 (the next point without a change of
    /// theirs sets them to 0).
    moving: std::collections::HashSet<std::sync::Arc<str>>,
}

impl Default for History {
    fn default() -> Self {
        Self::new(DEFAULT_STEP)
    }
}

impl History {
    /// An empty history keeping a point every `step` (at least 100 ms).
    pub fn new(step: Duration) -> Self {
        Self {
            step: step.max(Duration::from_millis(100)),
            inner: Mutex::new(Inner {
                last_ms: None,
                broker: Series::new(),
                readings: Vec::new(),
                tracked: HashMap::new(),
                moving: Default::default(),
            }),
        }
    }

    /// The time between two points.
    pub fn step(&self) -> Duration {
        self.step
    }

    /// The longest window the fine points cover ([`FINE_POINTS`] steps).
    pub fn fine_window(&self) -> Duration {
        self.step * FINE_POINTS as u32
    }

    /// The longest window there is ([`COARSE_POINTS`] coarse points).
    pub fn longest_window(&self) -> Duration {
        self.step * COARSE_STEPS * COARSE_POINTS as u32
    }

    /// Whether a reading taken at `now_ms` would be kept by [`History::record`]: a
    /// step (less 5 %) has passed since the last one. A caller whose reading is costly
    /// reads only then.
    pub fn wants(&self, now_ms: i64) -> bool {
        match self.inner.lock().last_ms {
            Some(last) => ((now_ms - last) as f64) >= self.step.as_millis() as f64 * 0.95,
            None => true,
        }
    }

    /// Takes `stats`, read at `now_ms` (epoch ms) with `connections` open, as the
    /// next point when a step has passed since the last one (less than 95 % of a
    /// step: ignored, and `false`): every destination it lists is read again, those
    /// it does not list have ended. [`History::record_changes`] takes only what
    /// changed.
    pub fn record(&self, stats: &BrokerStats, connections: usize, now_ms: i64) -> bool {
        let ended: Vec<String> = {
            let inner = self.inner.lock();
            let listed: std::collections::HashSet<&str> = stats
                .destinations
                .iter()
                .map(|d| d.destination.as_str())
                .collect();
            inner
                .readings
                .iter()
                .filter(|r| !listed.contains(&*r.key))
                .map(|r| r.key.to_string())
                .collect()
        };
        // The totals of what it lists (a snapshot read back from elsewhere may not
        // carry them).
        let summary = BrokerStats {
            usage: stats.usage,
            destinations: Vec::new(),
            destinations_total: stats.destinations_total,
            totals: crate::stats::DestinationTotals::of(&stats.destinations),
            scheduler: stats.scheduler.clone(),
        };
        let changes = (stats.destinations.iter().map(Change::Read))
            .chain(ended.into_iter().map(Change::Ended));
        self.record_changes(changes, &summary, connections, now_ms)
    }

    /// Takes the next point, as [`History::record`] does, from what changed since
    /// the last one: `changes`, the destinations read again (in any order, at most
    /// once each) and the store keys of those that no longer run, and `summary`'s
    /// usage and totals (its `destinations` are not looked at). Every other
    /// destination keeps its last reading, with no activity over the step. Costs
    /// what changed plus the series kept (at most [`MAX_SERIES`]), not the number of
    /// destinations, except a step that adds or ends destinations: it sorts the new
    /// readings in among all the others (O(n log n) moves in place) or takes the
    /// ended out (one pass). `changes` is consumed one at a time, under the
    /// history's lock (a caller that makes each [`DestinationStats`] as it goes holds
    /// one at a time; a query waits for the step meanwhile), and not at all when no
    /// step is due (`false`).
    pub fn record_changes<D: std::borrow::Borrow<DestinationStats>>(
        &self,
        changes: impl IntoIterator<Item = Change<D>>,
        summary: &BrokerStats,
        connections: usize,
        now_ms: i64,
    ) -> bool {
        let mut inner = self.inner.lock();
        let seconds = match inner.last_ms {
            Some(last) if ((now_ms - last) as f64) < self.step.as_millis() as f64 * 0.95 => {
                return false
            }
            Some(last) => Some(((now_ms - last).max(1) as f64) / 1000.0),
            None => None,
        };
        // A series that changed at the last reading, or at this one, keeps its place.
        let idle_before = inner.last_ms.unwrap_or(now_ms);
        inner.last_ms = Some(now_ms);
        let Inner {
            broker,
            readings,
            tracked,
            moving,
            ..
        } = &mut *inner;
        let mut total = Counters::default();
        // New readings are pushed after the sorted ones (sorted in with them after
        // the loop); only those before `sorted` are searched.
        let sorted = readings.len();
        let mut ended = std::collections::HashSet::new();
        for change in changes {
            let d = match change {
                Change::Read(d) => d,
                Change::Ended(key) => {
                    ended.insert(key);
                    continue;
                }
            };
            let d: &DestinationStats = d.borrow();
            let at = readings[..sorted].binary_search_by(|r| (*r.key).cmp(&d.destination));
            let old = at.ok().map(|i| &readings[i]);
            let counters = Counters {
                enqueued: d.enqueued_total,
                delivered: d.delivered_total,
                dequeued: d.dequeued_total,
                expired: d.expired_total,
                dead_lettered: d.dead_lettered_total,
            };
            // A destination new since the last reading started its counters from 0
            // within the step.
            let delta = counters.since(&old.map_or(Counters::default(), |r| r.counters));
            let rates = seconds.map_or(Rates::default(), |s| Rates::of(&delta, s));
            total.add(&delta);
            let active = delta.any()
                || old.is_some_and(|r| r.depth != d.queue_size || r.consumers != d.consumers);
            if let Some(seconds) = seconds {
                let point = DestinationPoint {
                    t_ms: now_ms,
                    rates,
                    depth: d.queue_size,
                    in_flight: d.in_flight.min(u32::MAX as u64) as u32,
                    consumers: d.consumers.min(u32::MAX as u64) as u32,
                };
                if active && !tracked.contains_key(&d.destination) {
                    track(tracked, &d.destination, now_ms, idle_before, true);
                }
                if let Some(t) = tracked.get_mut(&d.destination) {
                    if active {
                        t.active_ms = now_ms;
                    }
                    t.series.push(point, seconds as f32);
                }
            }
            let key = match old {
                Some(r) => r.key.clone(),
                None => std::sync::Arc::from(d.destination.as_str()),
            };
            if rates != Rates::default() {
                moving.insert(key.clone());
            } else {
                moving.remove(&key);
            }
            let reading = Reading {
                key,
                kind: d.kind,
                counters,
                depth: d.queue_size,
                in_flight: d.in_flight,
                consumers: d.consumers,
                rates,
                read_ms: now_ms,
            };
            match at {
                Ok(i) => readings[i] = reading,
                Err(_) => readings.push(reading),
            }
        }
        // New and ended destinations, in place (a step with neither moves nothing):
        // the readings are never copied into a second list. The list grows by
        // doubling (a large one is moved by the allocator's `mremap`, not copied) and
        // gives back what it does not use.
        if readings.len() > sorted {
            readings.sort_unstable_by(|a, b| a.key.cmp(&b.key));
            readings.dedup_by(|a, b| a.key == b.key);
        }
        if !ended.is_empty() {
            readings.retain(|r| !ended.contains(&*r.key));
            moving.retain(|k| !ended.contains(&**k));
        }
        if readings.capacity() > readings.len() + readings.len() / 4 + 64 {
            readings.shrink_to_fit();
        }
        // Destinations that moved over the last step and not over this one: their
        // rates are 0 now.
        let stopped: Vec<std::sync::Arc<str>> = moving
            .iter()
            .filter(|k| {
                readings
                    .binary_search_by(|r| r.key.cmp(k))
                    .map_or(true, |i| readings[i].read_ms != now_ms)
            })
            .cloned()
            .collect();
        for key in stopped {
            moving.remove(&key);
            if let Ok(i) = readings.binary_search_by(|r| r.key.cmp(&key)) {
                readings[i].rates = Rates::default();
            }
        }
        // After a burst over many destinations, the set gives its room back.
        if moving.capacity() > 4 * moving.len() + 1024 {
            moving.shrink_to_fit();
        }
        // Series end when their destination stops running, or when it stayed idle
        // for a whole fine window and nobody asked for it; those kept that did not
        // change get a point of their unchanged reading.
        let idle_for = self.fine_window().as_millis() as i64;
        tracked.retain(|key, t| {
            let Ok(i) = readings.binary_search_by(|r| (*r.key).cmp(key.as_str())) else {
                return false;
            };
            let r = &readings[i];
            if let (Some(seconds), false) = (seconds, r.read_ms == now_ms) {
                let point = DestinationPoint {
                    t_ms: now_ms,
                    rates: Rates::default(),
                    depth: r.depth,
                    in_flight: r.in_flight.min(u32::MAX as u64) as u32,
                    consumers: r.consumers.min(u32::MAX as u64) as u32,
                };
                t.series.push(point, seconds as f32);
            }
            t.active_ms > now_ms - idle_for || now_ms < t.viewed_until_ms
        });
        if let Some(seconds) = seconds {
            let usage = &summary.usage;
            let point = BrokerPoint {
                t_ms: now_ms,
                rates: Rates::of(&total, seconds),
                depth: summary.totals.queue_size,
                memory_bytes: usage.memory_bytes,
                store_bytes: usage.store_bytes,
                resident_bytes: usage.process_resident_bytes,
                housekeeping_lag_ms: usage.housekeeping_lag_ms.min(u32::MAX as u64) as u32,
                connections: connections.min(u32::MAX as usize) as u32,
                destinations: summary.destinations_total.min(u32::MAX as u64) as u32,
                blocked_producers: usage.blocked_producers.min(u32::MAX as u64) as u32,
            };
            broker.push(point, seconds as f32);
        }
        true
    }

    /// The broker's series over the last `window` (clamped to
    /// [`History::longest_window`]) before `now_ms`.
    pub fn broker(&self, window: Duration, now_ms: i64) -> BrokerHistory {
        let window = window.min(self.longest_window());
        let inner = self.inner.lock();
        let (points, step) = inner.broker.window(window, self.step, now_ms);
        let mut h = BrokerHistory {
            window_s: window.as_secs(),
            step_ms: step.as_millis() as u64,
            memory: usage_of(&inner),
            ..BrokerHistory::default()
        };
        for p in points {
            h.columns.push(p.t_ms, &p.rates, p.depth);
            h.memory_bytes.push(p.memory_bytes);
            h.store_bytes.push(p.store_bytes);
            h.resident_bytes.push(p.resident_bytes);
            h.housekeeping_lag_ms.push(p.housekeeping_lag_ms);
            h.connections.push(p.connections);
            h.destinations.push(p.destinations);
            h.blocked_producers.push(p.blocked_producers);
        }
        h
    }

    /// When the last reading [`History::record`] kept was taken, epoch ms.
    pub fn last_reading_ms(&self) -> Option<i64> {
        self.inner.lock().last_ms
    }

    /// Whether destination `key` (its store key) was running at the last reading.
    pub fn was_running(&self, key: &str) -> bool {
        self.inner
            .lock()
            .readings
            .binary_search_by(|r| (*r.key).cmp(key))
            .is_ok()
    }

    /// Destination `key`'s series over the last `window` before `now_ms`, and keeps
    /// (or starts) its series for [`VIEW_KEEP`] from now: a destination someone
    /// watches is charted even while idle. Ask only for a destination that exists:
    /// a series is kept only while its destination runs (the next reading ends one
    /// it does not hold). `tracked` is false when no place is left for it at
    /// [`MAX_SERIES`] (every series is active or viewed).
    pub fn destination(&self, key: &str, window: Duration, now_ms: i64) -> DestinationHistory {
        let window = window.min(self.longest_window());
        let mut inner = self.inner.lock();
        let keep_until = now_ms + VIEW_KEEP.as_millis() as i64;
        if !inner.tracked.contains_key(key) {
            let idle_before = inner.last_ms.unwrap_or(now_ms);
            track(&mut inner.tracked, key, now_ms, idle_before, false);
        }
        let entry = inner.tracked.get_mut(key);
        let mut h = DestinationHistory {
            destination: key.to_string(),
            window_s: window.as_secs(),
            step_ms: self.step.as_millis() as u64,
            ..DestinationHistory::default()
        };
        if let Some(t) = entry {
            t.viewed_until_ms = t.viewed_until_ms.max(keep_until);
            let (points, step) = t.series.window(window, self.step, now_ms);
            h.tracked = true;
            h.step_ms = step.as_millis() as u64;
            for p in points {
                h.columns.push(p.t_ms, &p.rates, p.depth);
                h.in_flight.push(p.in_flight);
                h.consumers.push(p.consumers);
            }
        }
        h
    }

    /// A page of the running destinations as last read: those `visible` lets
    /// through whose name (the key without its `kind://`) holds `filter`
    /// (case-insensitive; empty: all), sorted by
    /// `sort` (`descending` or not; ties by depth the same way, then by key A to Z),
    /// `limit` rows from `offset`, each with its depth sparkline when it has a
    /// series.
    pub fn table(
        &self,
        filter: &str,
        sort: SortBy,
        descending: bool,
        offset: usize,
        limit: usize,
        visible: impl Fn(&str) -> bool,
    ) -> TablePage {
        let inner = self.inner.lock();
        let filter = filter.to_lowercase();
        let mut rows: Vec<&Reading> = inner
            .readings
            .iter()
            .filter(|r| {
                let name = r.key.split_once("://").map_or(&*r.key, |(_, n)| n);
                filter.is_empty() || name.to_lowercase().contains(&filter)
            })
            .filter(|r| visible(&r.key))
            .collect();
        let by = |r: &Reading| -> f64 {
            match sort {
                SortBy::Name => 0.0,
                SortBy::Depth => r.depth as f64,
                SortBy::EnqueuedRate => r.rates.enqueued as f64,
                SortBy::DequeuedRate => r.rates.dequeued as f64,
                SortBy::Consumers => r.consumers as f64,
            }
        };
        // Ties: by depth the same way (the deepest first when descending), then by
        // name, always A to Z.
        rows.sort_by(|a, b| {
            let order = match sort {
                SortBy::Name => a.key.cmp(&b.key),
                _ => by(a).total_cmp(&by(b)).then_with(|| a.depth.cmp(&b.depth)),
            };
            let order = if descending { order.reverse() } else { order };
            order.then_with(|| a.key.cmp(&b.key))
        });
        let matched = rows.len();
        let rows = rows
            .into_iter()
            .skip(offset)
            .take(limit)
            .map(|r| TableRow {
                destination: r.key.to_string(),
                kind: r.kind,
                depth: r.depth,
                in_flight: r.in_flight,
                consumers: r.consumers,
                enqueued_per_s: r.rates.enqueued,
                dequeued_per_s: r.rates.dequeued,
                sparkline: inner.tracked.get(&*r.key).map_or(Vec::new(), |t| {
                    let fine = &t.series.fine;
                    fine.iter()
                        .skip(fine.len().saturating_sub(SPARKLINE_POINTS))
                        .map(|p| p.depth)
                        .collect()
                }),
            })
            .collect();
        TablePage {
            taken_at_ms: inner.last_ms.unwrap_or(0),
            matched,
            offset,
            rows,
        }
    }

    /// The bytes held now.
    pub fn usage(&self) -> HistoryUsage {
        usage_of(&self.inner.lock())
    }
}

/// Starts a series for `key` at `now_ms`, active then when `active` (a series
/// someone asked for is not, until its destination changes). At [`MAX_SERIES`] it
/// makes room by ending the series idle longest among those not active since
/// `idle_before_ms` (the last reading: active destinations do not push each other
/// out step after step), one nobody views first; a viewed one only when `over_views` (an
/// active destination's series matters more than an idle one someone looks at).
/// `false` when there is no room.
fn track(
    tracked: &mut HashMap<String, Tracked>,
    key: &str,
    now_ms: i64,
    idle_before_ms: i64,
    active: bool,
) -> bool {
    // Only an active destination's series takes a viewed one's place.
    let over_views = active;
    if tracked.len() >= MAX_SERIES {
        let idlest = tracked
            .iter()
            .filter(|(_, t)| t.active_ms < idle_before_ms)
            .filter(|(_, t)| over_views || t.viewed_until_ms <= now_ms)
            .min_by_key(|(k, t)| (t.viewed_until_ms > now_ms, t.active_ms, (*k).clone()))
            .map(|(k, _)| k.clone());
        match idlest {
            Some(key) => tracked.remove(&key),
            None => return false,
        };
    }
    tracked.insert(
        key.to_string(),
        Tracked {
            series: Series::new(),
            active_ms: if active { now_ms } else { i64::MIN },
            viewed_until_ms: 0,
        },
    );
    true
}

fn usage_of(inner: &Inner) -> HistoryUsage {
    let series_bytes = inner
        .tracked
        .iter()
        .map(|(k, t)| k.capacity() + std::mem::size_of::<Tracked>() + t.series.bytes())
        .sum();
    // Each name once, in its `Arc` (two counts before it); the set of moving
    // destinations holds a pointer to it and a control byte.
    let reading_bytes = inner.readings.capacity() * READING_BYTES
        + inner
            .readings
            .iter()
            .map(|r| r.key.len() + 2 * std::mem::size_of::<usize>())
            .sum::<usize>()
        + inner.moving.capacity() * (std::mem::size_of::<std::sync::Arc<str>>() + 1);
    HistoryUsage {
        series: inner.tracked.len(),
        series_bytes,
        broker_bytes: inner.broker.bytes(),
        readings: inner.readings.len(),
        reading_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The bound the README states: every destination series at once, at most 6 MB.
    const _: () = assert!(MAX_SERIES * SERIES_BYTES <= 6_000_000);
    use crate::stats::DestinationStats;

    fn queue(name: &str, enqueued: u64, dequeued: u64, depth: u64) -> DestinationStats {
        let mut d =
            DestinationStats::stored_only(format!("queue://{name}"), DestinationKind::QUEUE, depth);
        d.enqueued_total = enqueued;
        d.dequeued_total = dequeued;
        d.delivered_total = dequeued;
        d
    }

    fn snapshot(mut destinations: Vec<DestinationStats>) -> BrokerStats {
        destinations.sort_by(|a, b| a.destination.cmp(&b.destination));
        BrokerStats {
            destinations_total: destinations.len() as u64,
            destinations,
            ..BrokerStats::default()
        }
    }

    const STEP_MS: i64 = 5_000;

    /// A point from what changed reads only that: the others keep their readings,
    /// one that moved over the last step stops moving, one that ended goes.
    #[test]
    fn a_point_from_changes_keeps_the_rest_as_they_were() {
        let h = History::new(Duration::from_millis(STEP_MS as u64));
        let first = snapshot(vec![
            queue("a", 10, 0, 10),
            queue("b", 5, 0, 5),
            queue("c", 1, 0, 1),
        ]);
        assert!(h.record(&first, 0, 0));
        let summary = BrokerStats {
            destinations_total: 3,
            totals: crate::stats::DestinationTotals {
                queue_size: 26,
                ..Default::default()
            },
            ..BrokerStats::default()
        };
        // Only `a` changed: 10 more messages over the 5 s step.
        let a = queue("a", 20, 0, 20);
        assert!(h.record_changes([Change::Read(&a)], &summary, 0, STEP_MS));
        let rates = |h: &History| -> Vec<(String, f32, u64)> {
            h.table("", SortBy::Name, false, 0, 10, |_| true)
                .rows
                .into_iter()
                .map(|r| (r.destination, r.enqueued_per_s, r.depth))
                .collect()
        };
        assert_eq!(
            rates(&h),
            [
                ("queue://a".to_string(), 2.0, 20),
                ("queue://b".to_string(), 0.0, 5),
                ("queue://c".to_string(), 0.0, 1)
            ]
        );
        let b = h.broker(Duration::from_secs(60), STEP_MS);
        assert_eq!(b.columns.enqueued_per_s.last(), Some(&2.0));
        assert_eq!(b.columns.depth.last(), Some(&26), "the summary's totals");
        // Nothing changed but `c`, which ended: `a` stops moving.
        let summary = BrokerStats {
            destinations_total: 2,
            ..summary
        };
        assert!(h.record_changes(
            [Change::<&DestinationStats>::Ended("queue://c".to_string())],
            &summary,
            0,
            2 * STEP_MS
        ));
        assert_eq!(
            rates(&h),
            [
                ("queue://a".to_string(), 0.0, 20),
                ("queue://b".to_string(), 0.0, 5)
            ]
        );
        assert!(!h.was_running("queue://c"));
        // A new destination joins in its place in key order.
        let aa = queue("aa", 3, 0, 3);
        assert!(h.record_changes([Change::Read(&aa)], &summary, 0, 3 * STEP_MS));
        let keys: Vec<String> = rates(&h).into_iter().map(|r| r.0).collect();
        assert_eq!(keys, ["queue://a", "queue://aa", "queue://b"]);
    }

    #[test]
    fn rates_are_per_second_over_each_step() {
        let h = History::default();
        assert!(h.record(&snapshot(vec![queue("a", 0, 0, 0)]), 1, 0));
        // Too soon: not a step yet.
        assert!(!h.record(&snapshot(vec![queue("a", 5, 0, 5)]), 1, 1_000));
        assert!(h.record(&snapshot(vec![queue("a", 50, 10, 40)]), 3, STEP_MS));
        assert!(h.record(&snapshot(vec![queue("a", 100, 60, 40)]), 3, 2 * STEP_MS));
        let b = h.broker(Duration::from_secs(900), 2 * STEP_MS);
        assert_eq!(b.columns.t_ms, vec![STEP_MS, 2 * STEP_MS]);
        assert_eq!(b.columns.enqueued_per_s, vec![10.0, 10.0]);
        assert_eq!(b.columns.dequeued_per_s, vec![2.0, 10.0]);
        assert_eq!(b.columns.depth, vec![40, 40]);
        assert_eq!(b.connections, vec![3, 3]);
        assert_eq!(b.step_ms, 5_000);
        let d = h.destination("queue://a", Duration::from_secs(60), 2 * STEP_MS);
        assert!(d.tracked);
        assert_eq!(d.columns.enqueued_per_s, vec![10.0, 10.0]);
        assert_eq!(d.columns.depth, vec![40, 40]);
        // A window shorter than the history: only its points.
        let last = h.broker(Duration::from_secs(5), 2 * STEP_MS);
        assert_eq!(last.columns.t_ms, vec![2 * STEP_MS]);
        assert!(h.was_running("queue://a") && !h.was_running("queue://none"));
    }

    #[test]
    fn long_windows_read_coarse_points_that_average_their_steps() {
        let h = History::default();
        let mut enqueued = 0;
        for step in 0..=(2 * COARSE_STEPS as i64) {
            // 1 msg/s in the first coarse span, 3 msg/s in the second.
            enqueued += if step <= COARSE_STEPS as i64 { 5 } else { 15 };
            h.record(
                &snapshot(vec![queue("a", enqueued, 0, step as u64)]),
                0,
                step * STEP_MS,
            );
        }
        let now = 2 * COARSE_STEPS as i64 * STEP_MS;
        let day = h.broker(Duration::from_secs(24 * 3600), now);
        assert_eq!(day.step_ms, 300_000);
        assert_eq!(day.columns.enqueued_per_s, vec![1.0, 3.0]);
        // A coarse point keeps the gauges of its last step.
        assert_eq!(day.columns.depth, vec![60, 120]);
        let fine = h.broker(Duration::from_secs(900), now);
        assert_eq!(
            fine.columns.t_ms.len(),
            FINE_POINTS.min(2 * COARSE_STEPS as usize)
        );
    }

    /// A series grows with its points and stops at its bound: after more than a day
    /// of steps, each ring holds exactly its most points, in room for no more.
    #[test]
    fn a_series_grows_to_its_bound_and_no_further() {
        let mut series: Series<DestinationPoint> = Series::new();
        assert_eq!(series.bytes(), 0);
        let point = |t_ms| DestinationPoint {
            t_ms,
            rates: Rates::default(),
            depth: 0,
            in_flight: 0,
            consumers: 0,
        };
        series.push(point(0), 5.0);
        assert_eq!(series.fine.capacity(), 8);
        let steps = COARSE_STEPS as i64 * (COARSE_POINTS as i64 + 3);
        for t in 1..steps {
            series.push(point(t), 5.0);
        }
        assert_eq!(series.fine.len(), FINE_POINTS);
        assert_eq!(series.coarse.len(), COARSE_POINTS);
        assert_eq!(series.fine.capacity(), FINE_POINTS);
        assert_eq!(series.coarse.capacity(), COARSE_POINTS);
        assert_eq!(
            series.bytes() + std::mem::size_of::<Tracked>(),
            SERIES_BYTES
        );
        assert_eq!(series.fine.back().map(|p| p.t_ms), Some(steps - 1));
    }

    #[test]
    fn idle_destinations_have_no_series_and_the_bytes_are_bounded() {
        // 10,000 running destinations, 100 of them active, for longer than the fine
        // window: only the 100 have series.
        let h = History::default();
        let names: Vec<String> = (0..10_000).map(|i| format!("q{i:05}")).collect();
        for step in 0..(FINE_POINTS as i64 + 20) {
            let destinations = names
                .iter()
                .enumerate()
                .map(|(i, n)| match i % 100 {
                    0 => queue(n, step as u64 * 10, step as u64 * 9, step as u64),
                    _ => queue(n, 0, 0, 3),
                })
                .collect();
            h.record(&snapshot(destinations), 0, step * STEP_MS);
        }
        let usage = h.usage();
        assert_eq!(usage.series, 100);
        assert_eq!(usage.readings, 10_000);
        // Each active destination: its fine and coarse rings, its name. After 200
        // steps the fine ring is full (180 points) and the coarse one holds 3 points
        // in room for 8: the rings grow with their points.
        let point = std::mem::size_of::<DestinationPoint>();
        let per_series =
            (FINE_POINTS + 8) * point + std::mem::size_of::<Tracked>() + "queue://q00000".len();
        assert!(per_series < SERIES_BYTES);
        assert_eq!(usage.series_bytes, 100 * per_series);
        let broker = (FINE_POINTS + 8) * std::mem::size_of::<BrokerPoint>();
        assert_eq!(usage.broker_bytes, broker);
        // The idle 9,900 cost only their last reading: its bytes and its name (in an
        // `Arc`, two counts before it); the 100 moving ones a place in that set too.
        let per_reading = READING_BYTES + "queue://q00000".len() + 16;
        assert!(
            usage.reading_bytes <= 10_000 * per_reading + 256 * 17,
            "{usage:?}"
        );
        assert!(
            usage.total_bytes() < 4_000_000,
            "{usage:?} ({} bytes)",
            usage.total_bytes()
        );
        let page = h.table("", SortBy::EnqueuedRate, true, 0, 5, |_| true);
        assert_eq!(page.matched, 10_000);
        assert_eq!(page.rows[0].enqueued_per_s, 2.0);
        assert_eq!(page.rows[0].sparkline.len(), SPARKLINE_POINTS);
        assert!(page.rows.iter().all(|r| r.enqueued_per_s == 2.0));
        let idle = h.table("q00001", SortBy::Name, false, 0, 5, |_| true);
        assert_eq!(idle.matched, 1);
        assert!(idle.rows[0].sparkline.is_empty());
    }

    #[test]
    fn series_end_after_a_window_idle_unless_viewed_and_stay_within_the_cap() {
        let h = History::default();
        h.record(
            &snapshot(vec![queue("a", 0, 0, 0), queue("b", 0, 0, 0)]),
            0,
            0,
        );
        h.record(
            &snapshot(vec![queue("a", 1, 0, 1), queue("b", 1, 0, 1)]),
            0,
            STEP_MS,
        );
        assert_eq!(h.usage().series, 2);
        let idle = vec![queue("a", 1, 0, 1), queue("b", 1, 0, 1)];
        let mut t = STEP_MS;
        while t < STEP_MS + FINE_POINTS as i64 * STEP_MS {
            t += STEP_MS;
            h.record(&snapshot(idle.clone()), 0, t);
            if t == 10 * STEP_MS {
                // Someone watches b.
                assert!(
                    h.destination("queue://b", Duration::from_secs(60), t)
                        .tracked
                );
            }
        }
        // a went idle for a whole window; b is still viewed...
        assert_eq!(h.usage().series, 1);
        assert!(!h
            .destination("queue://b", Duration::from_secs(60), 0)
            .columns
            .t_ms
            .is_empty());
        t += 10 * STEP_MS;
        h.record(&snapshot(idle.clone()), 0, t);
        // ...until its view runs out.
        assert_eq!(h.usage().series, 0);
        // A stopped destination's series ends with it.
        h.record(&snapshot(vec![queue("c", 1, 0, 1)]), 0, t + STEP_MS);
        h.record(&snapshot(vec![queue("c", 2, 0, 1)]), 0, t + 2 * STEP_MS);
        assert_eq!(h.usage().series, 1);
        h.record(&snapshot(vec![]), 0, t + 3 * STEP_MS);
        assert_eq!(h.usage().series, 0);

        // More active destinations than the cap: never more series than it, and
        // those that have one keep it and its points, step after step (readings a
        // little more than a step apart, as when a reading is slow).
        let h = History::default();
        let many = |n: u64| {
            (0..MAX_SERIES as u64 + 50)
                .map(|i| queue(&format!("m{i:04}"), n, 0, 0))
                .collect::<Vec<_>>()
        };
        for step in 0..6 {
            h.record(&snapshot(many(step)), 0, step as i64 * (STEP_MS + 200));
        }
        assert_eq!(h.usage().series, MAX_SERIES);
        let page = h.table("", SortBy::Name, false, 0, MAX_SERIES + 50, |_| true);
        let points: Vec<usize> = page.rows.iter().map(|r| r.sparkline.len()).collect();
        assert_eq!(
            points.iter().filter(|n| **n == 5).count(),
            MAX_SERIES,
            "{points:?}"
        );
        assert_eq!(points.iter().filter(|n| **n == 0).count(), 50, "{points:?}");
    }

    #[test]
    fn activity_wins_over_views_at_the_cap() {
        let h = History::default();
        let idle: Vec<DestinationStats> = (0..MAX_SERIES)
            .map(|i| queue(&format!("idle{i:04}"), 0, 0, 0))
            .chain([queue("busy", 0, 0, 0)])
            .collect();
        h.record(&snapshot(idle.clone()), 0, 0);
        h.record(&snapshot(idle.clone()), 0, STEP_MS);
        // Someone opens every idle one's page: all the series are taken by views.
        for i in 0..MAX_SERIES {
            let key = format!("queue://idle{i:04}");
            assert!(
                h.destination(&key, Duration::from_secs(60), STEP_MS + 1)
                    .tracked
            );
        }
        assert_eq!(h.usage().series, MAX_SERIES);
        // busy gets sent to: it takes the place of a viewed idle one.
        let mut now = idle.clone();
        now.last_mut().unwrap().enqueued_total = 10;
        h.record(&snapshot(now.clone()), 0, 2 * STEP_MS);
        assert_eq!(h.usage().series, MAX_SERIES);
        let busy = h.destination("queue://busy", Duration::from_secs(60), 2 * STEP_MS);
        assert!(busy.tracked);
        assert_eq!(busy.columns.enqueued_per_s, vec![2.0]);

        // The other way: 256 destinations active, a view of an idle one gets no
        // series and pushes none out.
        let h = History::default();
        let all = |n: u64| {
            (0..MAX_SERIES)
                .map(|i| queue(&format!("a{i:04}"), n, 0, 0))
                .chain([queue("quiet", 0, 0, 0)])
                .collect::<Vec<_>>()
        };
        h.record(&snapshot(all(0)), 0, 0);
        h.record(&snapshot(all(1)), 0, STEP_MS);
        assert_eq!(h.usage().series, MAX_SERIES);
        assert!(
            !h.destination("queue://quiet", Duration::from_secs(60), STEP_MS)
                .tracked
        );
        h.record(&snapshot(all(2)), 0, 2 * STEP_MS);
        assert!(
            h.destination("queue://a0000", Duration::from_secs(60), 2 * STEP_MS)
                .columns
                .t_ms
                .len()
                == 2
        );
    }

    #[test]
    fn long_windows_begin_with_the_fine_points_a_coarse_one_does_not_cover_yet() {
        let h = History::default();
        for step in 0..=10 {
            h.record(
                &snapshot(vec![queue("a", step * 5, 0, step)]),
                0,
                step as i64 * STEP_MS,
            );
        }
        let hour = h.broker(Duration::from_secs(3600), 10 * STEP_MS);
        assert_eq!(hour.step_ms, 300_000);
        assert_eq!(hour.columns.t_ms.len(), 10, "the 10 fine points so far");
        assert_eq!(hour.columns.enqueued_per_s[9], 1.0);
    }

    #[test]
    fn tables_sort_filter_and_page() {
        let h = History::default();
        let at = |n: u64| {
            vec![
                queue("jobs.eu", 10 * n, 0, 7),
                queue("jobs.us", 30 * n, 0, 2),
                queue("mail", 20 * n, 0, 9),
            ]
        };
        h.record(&snapshot(at(0)), 0, 0);
        h.record(&snapshot(at(1)), 0, STEP_MS);
        let names = |p: TablePage| {
            p.rows
                .into_iter()
                .map(|r| r.destination)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(h.table("", SortBy::Depth, true, 0, 10, |_| true)),
            ["queue://mail", "queue://jobs.eu", "queue://jobs.us"]
        );
        assert_eq!(
            names(h.table("JOBS", SortBy::EnqueuedRate, true, 0, 10, |_| true)),
            ["queue://jobs.us", "queue://jobs.eu"]
        );
        let second = h.table("", SortBy::Name, false, 1, 1, |_| true);
        assert_eq!((second.matched, second.offset), (3, 1));
        assert_eq!(names(second), ["queue://jobs.us"]);
        let hidden = h.table("", SortBy::Name, false, 0, 10, |k| !k.contains("mail"));
        assert_eq!(hidden.matched, 2);
        // Idle now: equal rates, so the deepest first, then names A to Z.
        h.record(&snapshot(at(1)), 0, 2 * STEP_MS);
        assert_eq!(
            names(h.table("", SortBy::EnqueuedRate, true, 0, 10, |_| true)),
            ["queue://mail", "queue://jobs.eu", "queue://jobs.us"]
        );
        h.record(
            &snapshot(vec![queue("b", 0, 0, 1), queue("a", 0, 0, 1)]),
            0,
            3 * STEP_MS,
        );
        assert_eq!(
            names(h.table("", SortBy::Depth, true, 0, 10, |_| true)),
            ["queue://a", "queue://b"]
        );
    }
}
