//! The per-destination series of `/metrics`, rendered at each scrape from the last
//! [`BrokerStats`] reading ([`DestinationSeries`]) instead of being kept in the
//! process's recorder: a recorder cannot forget a series, so a destination that ended
//! (a temporary queue whose connection closed, a deleted queue) stayed in `/metrics`
//! with its last values for the life of the process. Here a destination has series
//! exactly while the last reading lists it.
//!
//! **Which destinations, and the cap.** At most `max` destinations get series
//! (`[http] max_destination_series`, default [`MAX_DESTINATION_SERIES`]): named ones
//! first, then temporary ones, each group in store-key order, so that a user's
//! temporary queues (`temp-queue://` sorts before `topic://`) can never push a named
//! destination out. `ebb_destination_series_omitted` says how many were left out; the
//! broker's totals (`ebb_messages_waiting`, ...) always count every destination.

use std::fmt::Write as _;
use std::sync::Arc;

use parking_lot::RwLock;

use super::names::*;
use crate::stats::{BrokerStats, DestinationStats};

/// The default most destinations with series in `/metrics`: 10,000 (at 14 series of
/// about 70 bytes each, a scrape of about 10 MB).
pub const MAX_DESTINATION_SERIES: usize = 10_000;

/// Gauges per destination: `(name, help, value)`.
type Field = (&'static str, &'static str, fn(&DestinationStats) -> u64);

const DESTINATION_GAUGES: &[Field] = &[
    (QUEUE_SIZE, "Messages pending plus in flight", |d| {
        d.queue_size
    }),
    (IN_FLIGHT, "Deliveries not acked yet", |d| d.in_flight),
    (CONSUMERS, "Consumers attached", |d| d.consumers),
    (PRODUCERS, "Producers sending", |d| d.producers),
    (
        DESTINATION_MEMORY_BYTES,
        "Bytes of messages a destination holds in memory",
        |d| d.memory_bytes,
    ),
    (
        DESTINATION_PRODUCERS_BLOCKED,
        "Producers of a destination waiting for space",
        |d| d.blocked_producers,
    ),
    (
        MAX_EXPIRY_PAGE_ROWS,
        "Most rows one expiry page of a destination handled since start",
        |d| d.max_expiry_page_rows,
    ),
];

const DESTINATION_COUNTERS: &[Field] = &[
    (ENQUEUED_TOTAL, "Messages accepted since start", |d| {
        d.enqueued_total
    }),
    (
        DEQUEUED_TOTAL,
        "Deliveries handed to consumers since start (topics: not acks)",
        |d| d.dequeued_total,
    ),
    (
        DELIVERED_TOTAL,
        "Deliveries handed to consumers since start, redeliveries included",
        |d| d.delivered_total,
    ),
    (EXPIRED_TOTAL, "Message expirations since start", |d| {
        d.expired_total
    }),
    (
        DEAD_LETTERED_TOTAL,
        "Messages sent to a dead-letter queue",
        |d| d.dead_lettered_total,
    ),
    (
        EXPIRY_PAGES_TOTAL,
        "Expiry pages finished since start",
        |d| d.expiry_pages_total,
    ),
    (
        EXPIRY_RUNS_TOTAL,
        "Expiry runs (chains of pages) started since start",
        |d| d.expiry_runs_total,
    ),
];

/// Every per-destination metric: `(name, help, type)`, for [`super::describe`].
pub(super) fn described() -> impl Iterator<Item = (&'static str, &'static str, bool)> {
    DESTINATION_GAUGES
        .iter()
        .map(|&(name, help, _)| (name, help, false))
        .chain(
            DESTINATION_COUNTERS
                .iter()
                .map(|&(name, help, _)| (name, help, true)),
        )
}

/// The destinations of the last reading that `/metrics` lists, shared between the
/// refresh task and the `/metrics` handler ([`DestinationSeries::render`]). Cloning
/// shares it. It renders either a snapshot handed to [`DestinationSeries::update`]
/// (an `Arc`, no copy) or, once it [follows](DestinationSeries::follow) a broker, the
/// broker's kept reading at each scrape (what the HTTP server does: nothing copied per
/// refresh; per scrape, each destination's entry handle and reading, about 70 bytes,
/// and the stats of the listed ones).
#[derive(Clone)]
pub struct DestinationSeries {
    latest: Arc<RwLock<Source>>,
    max: usize,
}

/// What [`DestinationSeries`] renders.
#[derive(Default)]
enum Source {
    #[default]
    Nothing,
    Snapshot(Arc<BrokerStats>),
    // Followed by the HTTP server's refresh (the `prometheus` feature).
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    Live(crate::Broker),
}

impl DestinationSeries {
    /// No reading yet; at most `max` destinations will get series.
    pub fn new(max: usize) -> Self {
        Self {
            latest: Arc::default(),
            max,
        }
    }

    /// The reading the next scrapes render (the previous one is dropped: a destination
    /// it listed and this one does not has no series from now on).
    pub fn update(&self, stats: Arc<BrokerStats>) {
        *self.latest.write() = Source::Snapshot(stats);
    }

    /// Renders `broker`'s kept reading from now on (as its last refresh left it:
    /// [`crate::Broker::stats`] and the metrics refresh bring it up to date).
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn follow(&self, broker: crate::Broker) {
        *self.latest.write() = Source::Live(broker);
    }

    /// Appends the per-destination series of the last reading to `out`, in Prometheus'
    /// text format (with `# HELP` and `# TYPE` lines), and
    /// `ebb_destination_series_omitted`. Nothing before the first reading.
    pub fn render(&self, out: &mut String) {
        match &*self.latest.read() {
            Source::Nothing => {}
            Source::Snapshot(stats) => render(&stats.destinations, self.max, out),
            Source::Live(broker) => {
                let (listed, omitted) = broker.listed_stats(self.max);
                write(&listed.iter().collect::<Vec<_>>(), omitted, out)
            }
        }
    }
}

/// Appends the series of `destinations` (in key order) to `out`: see
/// [`DestinationSeries::render`].
fn render<D: std::borrow::Borrow<DestinationStats>>(
    destinations: &[D],
    max: usize,
    out: &mut String,
) {
    let (listed, omitted) = select(destinations, max);
    write(&listed, omitted, out)
}

/// Appends the series of `listed` (in key order) and `omitted` to `out`.
fn write(listed: &[&DestinationStats], omitted: usize, out: &mut String) {
    let _ = writeln!(
        out,
        "# HELP {DESTINATION_SERIES_OMITTED} Running destinations without series here (over [http] max_destination_series; the ebb_messages_* totals count them)\n# TYPE {DESTINATION_SERIES_OMITTED} gauge\n{DESTINATION_SERIES_OMITTED} {omitted}"
    );
    if listed.is_empty() {
        return;
    }
    for (fields, kind) in [
        (DESTINATION_GAUGES, "gauge"),
        (DESTINATION_COUNTERS, "counter"),
    ] {
        for &(name, help, value) in fields {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for d in listed {
                out.push_str(name);
                out.push_str("{destination=\"");
                escape_label(out, &d.destination);
                let _ = writeln!(out, "\"}} {}", value(d));
            }
        }
    }
}

/// The destinations that get series, named ones first (then temporary ones), each
/// group in key order, at most `max`; and how many were left out.
fn select<D: std::borrow::Borrow<DestinationStats>>(
    destinations: &[D],
    max: usize,
) -> (Vec<&DestinationStats>, usize) {
    let temporary = |d: &&DestinationStats| d.kind.capabilities().temporary;
    let all = || destinations.iter().map(|d| d.borrow());
    let listed: Vec<&DestinationStats> = all()
        .filter(|d| !temporary(d))
        .chain(all().filter(temporary))
        .take(max)
        .collect();
    let omitted = destinations.len() - listed.len();
    (sorted(listed), omitted)
}

/// `listed` in store-key order.
fn sorted(mut listed: Vec<&DestinationStats>) -> Vec<&DestinationStats> {
    listed.sort_by(|a, b| a.destination.cmp(&b.destination));
    listed
}

/// A label value in Prometheus' text format: `\`, `"` and line feeds escaped.
fn escape_label(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::DestinationKind;

    fn destination(key: &str, enqueued: u64) -> DestinationStats {
        let kind = DestinationKind::of_container(key).unwrap();
        let mut d = DestinationStats::stored_only(key.to_string(), kind, enqueued);
        d.enqueued_total = enqueued;
        d
    }

    fn stats(keys: &[&str]) -> Arc<BrokerStats> {
        let destinations: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| destination(k, i as u64 + 1))
            .collect();
        Arc::new(BrokerStats {
            destinations_total: destinations.len() as u64,
            destinations,
            ..Default::default()
        })
    }

    fn rendered(series: &DestinationSeries) -> String {
        let mut text = String::new();
        series.render(&mut text);
        text
    }

    /// The destinations of the `ebb_destination_enqueued_total` lines, with values.
    fn listed(text: &str) -> Vec<(String, u64)> {
        text.lines()
            .filter_map(|l| l.strip_prefix("ebb_destination_enqueued_total{destination=\""))
            .map(|l| {
                let (key, value) = l.split_once("\"} ").unwrap();
                (key.to_string(), value.parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn temporary_destinations_never_push_a_named_one_out() {
        let series = DestinationSeries::new(3);
        assert_eq!(rendered(&series), "", "no reading, no series");
        series.update(stats(&[
            "queue://a",
            "temp-queue://ebb-1.r1",
            "temp-queue://ebb-1.r2",
            "temp-queue://ebb-1.r3",
            "topic://hot",
        ]));
        let text = rendered(&series);
        assert_eq!(
            listed(&text),
            [
                ("queue://a".to_string(), 1),
                ("temp-queue://ebb-1.r1".to_string(), 2),
                ("topic://hot".to_string(), 5)
            ]
        );
        assert!(
            text.lines()
                .any(|l| l == "ebb_destination_series_omitted 2"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE ebb_destination_enqueued_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE ebb_destination_queue_size gauge\n"),
            "{text}"
        );
    }

    #[test]
    fn a_destination_that_ended_has_no_series() {
        let series = DestinationSeries::new(MAX_DESTINATION_SERIES);
        series.update(stats(&["queue://gone", "queue://stays"]));
        assert_eq!(listed(&rendered(&series)).len(), 2);
        series.update(stats(&["queue://stays"]));
        let text = rendered(&series);
        assert!(!text.contains("queue://gone"), "{text}");
        assert_eq!(listed(&text), [("queue://stays".to_string(), 1)]);
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        escape_label(&mut out, "queue://a\"b\\c\nd");
        assert_eq!(out, "queue://a\\\"b\\\\c\\nd");
    }
}
