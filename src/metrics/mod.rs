//! Ebb's metrics: their names ([`names`]), how a
//! [`Broker::stats`](crate::Broker::stats) snapshot becomes their values ([`record`])
//! and the recorder the HTTP server renders at `GET /metrics` in Prometheus' text
//! format (`ebb serve --http ADDR`, or `--metrics ADDR`, or `[http] listen`: see
//! `crate::http`).
//!
//! **How it is built.** Metrics go through the `metrics` facade into the process's
//! one recorder. With the `prometheus` cargo feature (on by default and part of
//! `cli`), `install_recorder` installs the recorder of `metrics-exporter-prometheus`,
//! once per process (a second call hands back the same handle instead of fighting
//! over it), and the HTTP server renders it; the exporter's own HTTP listener is not
//! used, so tests can start any number of servers on ephemeral ports in one process,
//! all rendering the one recorder. An application that brings its own recorder builds
//! without the feature, calls [`describe`] once and [`record`] with a snapshot as
//! often as it likes.
//!
//! **Where values come from.** The HTTP server's refresh task brings the broker's kept
//! reading up to date every `REFRESH_EVERY` (one second): only the destinations that
//! changed since are read again (see [`crate::stats`]), so an idle broker's refresh
//! reads nothing, however many destinations it holds; it then records the broker-wide
//! values and, every history step, gives the history what changed. When a refresh
//! takes longer than a second, the task waits as long as it took before the next one.
//! The per-destination series (label `destination`) are not kept in the recorder: the
//! server renders them at each scrape from the kept reading on the stats board
//! entries ([`DestinationSeries`]: each entry's handle and reading copied, the listed
//! ones' stats built), so a destination that ended (a temporary queue whose
//! connection closed, a deleted queue) has none from the next refresh on, and at most
//! `[http] max_destination_series` destinations ([`MAX_DESTINATION_SERIES`]) are
//! listed, named ones before temporary ones; the broker's totals
//! (`ebb_messages_waiting`, ...) count every destination. The histogram
//! `ebb_expiry_page_rows` is recorded by the destinations themselves when an expiry
//! page finishes, so it holds every page, not a sample; it is broker-wide (each
//! destination's largest page is `ebb_destination_max_expiry_page_rows`).
//!
//! **Names** (Prometheus conventions: base units, `_total` for counters, usage as a
//! ratio from 0 to 1, never a percentage):
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `ebb_memory_usage_bytes`, `ebb_memory_limit_bytes`, `ebb_memory_usage_ratio` | gauge | | memory usage, its limit (0 = none), usage / limit (0 without a limit) |
//! | `ebb_store_usage_bytes`, `ebb_store_limit_bytes`, `ebb_store_usage_ratio` | gauge | | the same for the store |
//! | `ebb_temp_usage_bytes`, `ebb_temp_limit_bytes`, `ebb_temp_usage_ratio` | gauge | | the same for temporary storage |
//! | `ebb_producers_blocked` | gauge | | producers waiting for space |
//! | `ebb_destinations` | gauge | | running destinations |
//! | `ebb_messages_waiting`, `ebb_messages_in_flight`, `ebb_consumers`, `ebb_producers` | gauge | | the sums of the destinations' queue size, in flight, consumers and producers, over every running destination |
//! | `ebb_destination_series_omitted` | gauge | | running destinations without series here (past `[http] max_destination_series`; temporary ones go first) |
//! | `ebb_housekeeping_lag_seconds` | gauge | | how long the expiry page waiting longest for a housekeeping permit has waited |
//! | `ebb_housekeeping_pages_waiting` | gauge | | expiry pages waiting for a housekeeping permit |
//! | `ebb_stats_timestamp_seconds` | gauge | | when the values were last read from the broker, epoch seconds (set by [`record`]) |
//! | `ebb_process_resident_memory_bytes`, `ebb_process_peak_resident_memory_bytes` | gauge | | the broker process's resident memory now and at its peak ([`crate::process`]) |
//! | `ebb_destination_queue_size` | gauge | `destination` | messages pending plus in flight |
//! | `ebb_destination_in_flight` | gauge | `destination` | delivered, not acked |
//! | `ebb_destination_consumers`, `ebb_destination_producers` | gauge | `destination` | attached now |
//! | `ebb_destination_memory_usage_bytes`, `ebb_destination_producers_blocked` | gauge | `destination` | per destination usage |
//! | `ebb_destination_max_expiry_page_rows` | gauge | `destination` | most rows one expiry page handled since start |
//! | `ebb_destination_enqueued_total`, `ebb_destination_dequeued_total`, `ebb_destination_delivered_total` (redeliveries included), `ebb_destination_expired_total`, `ebb_destination_dead_lettered_total` | counter | `destination` | messages since start |
//! | `ebb_expiry_runs_total` | counter | `destination` | expiry runs (chains of pages) started |
//! | `ebb_expiry_pages_total` | counter | `destination` | expiry pages finished |
//! | `ebb_login_failures_total`, `ebb_logins_throttled_total` | counter | `protocol` | refused logins; logins refused without a check, their address having used up its refused logins ([`crate::login_guard`]) |
//! | `ebb_scheduled_messages` | gauge | | messages waiting for their due time (scheduled sends and redeliveries held back), counted up to [`crate::SCHEDULE_COUNT_LIMIT`] |
//! | `ebb_scheduled_next_due_timestamp_seconds` | gauge | | the earliest due time, epoch seconds (0 when nothing waits); behind the clock when the scheduler is late |
//! | `ebb_scheduled_released_total` | counter | | scheduled messages released to their destinations (`AMQ_SCHEDULED_DELAY`, [`crate::Message::deliver_at`]) |
//! | `ebb_scheduled_lateness_seconds` | histogram | | how late each scheduled message was released, due time to release (buckets [`LATENESS_BUCKETS`]): a late scheduler shows here |
//! | `ebb_routed_sends_total`, `ebb_routed_copies_total` | counter | `route` | sends that routing took to several destinations (`composite`: named or configured, one store transaction; `virtual_topic`: a topic and its consumer groups that get copies, not those that read its rows), and their copies, one per destination |
//! | `ebb_advisories_total` | counter | `event` | advisory messages sent (`consumer_added`, `expired`, ...; none while nobody subscribes) |
//! | `ebb_expiry_page_rows` | histogram | | rows one expiry page loaded, any destination's (buckets [`PAGE_ROW_BUCKETS`]); a page that failed is counted in `ebb_expiry_pages_total` only |
//!
//! The `destination` label is the store key (`topic://orders`). What each value means
//! is in [`crate::stats`].
//!
//! A destination's series last as long as it runs (see above). `/metrics` asks for no login (as a Prometheus
//! scrape expects) and shows destination names: keep the HTTP server on loopback or
//! a private network, or configure users, which the admin API then requires.

#[cfg(feature = "prometheus")]
mod recorder;
mod series;

pub use series::{DestinationSeries, MAX_DESTINATION_SERIES};

#[cfg(feature = "prometheus")]
pub use recorder::{install_recorder, REFRESH_EVERY};
#[cfg(feature = "prometheus")]
pub(crate) use recorder::{refresh, refresh_loop};

use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Label};
use serde::Deserialize;

use crate::stats::BrokerStats;

/// Upper bounds of the `ebb_scheduled_lateness_seconds` buckets, in seconds.
pub const LATENESS_BUCKETS: &[f64] = &[0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 300.0];

/// Upper bounds of the `ebb_expiry_page_rows` buckets, in rows (the default page is
/// 400 rows).
pub const PAGE_ROW_BUCKETS: &[f64] = &[0.0, 1.0, 10.0, 50.0, 100.0, 200.0, 400.0, 1000.0, 5000.0];

/// Metric names, shared with `ebb stat`'s reader (`ebb::cli::stat`).
pub mod names {
    /// Bytes of messages held in memory.
    pub const MEMORY_USAGE_BYTES: &str = "ebb_memory_usage_bytes";
    /// Memory limit in bytes (0 = none).
    pub const MEMORY_LIMIT_BYTES: &str = "ebb_memory_limit_bytes";
    /// Memory usage / limit, 0..1 (0 without a limit).
    pub const MEMORY_USAGE_RATIO: &str = "ebb_memory_usage_ratio";
    /// Bytes the store's messages take.
    pub const STORE_USAGE_BYTES: &str = "ebb_store_usage_bytes";
    /// Store limit in bytes (0 = none).
    pub const STORE_LIMIT_BYTES: &str = "ebb_store_limit_bytes";
    /// Store usage / limit, 0..1 (0 without a limit).
    pub const STORE_USAGE_RATIO: &str = "ebb_store_usage_ratio";
    /// Bytes in temporary storage.
    pub const TEMP_USAGE_BYTES: &str = "ebb_temp_usage_bytes";
    /// Temporary storage limit in bytes (0 = none).
    pub const TEMP_LIMIT_BYTES: &str = "ebb_temp_limit_bytes";
    /// Temp usage / limit, 0..1 (0 without a limit).
    pub const TEMP_USAGE_RATIO: &str = "ebb_temp_usage_ratio";
    /// Producers waiting for space (flow control).
    pub const PRODUCERS_BLOCKED: &str = "ebb_producers_blocked";
    /// Running destinations.
    pub const DESTINATIONS: &str = "ebb_destinations";
    /// Destinations asleep (idle, actor stopped; counted in `ebb_destinations` too).
    pub const DESTINATIONS_ASLEEP: &str = "ebb_destinations_asleep";
    /// Messages waiting in every running destination (the sum of their queue sizes).
    pub const MESSAGES_WAITING: &str = "ebb_messages_waiting";
    /// Deliveries not acked yet, over every running destination.
    pub const MESSAGES_IN_FLIGHT: &str = "ebb_messages_in_flight";
    /// Consumers attached, over every running destination.
    pub const CONSUMERS_TOTAL: &str = "ebb_consumers";
    /// Producers (connection and destination pairs), over every running destination.
    pub const PRODUCERS_TOTAL: &str = "ebb_producers";
    /// Running destinations that `/metrics` has no series for (over `[http]
    /// max_destination_series`).
    pub const DESTINATION_SERIES_OMITTED: &str = "ebb_destination_series_omitted";
    /// How long the expiry page waiting longest for a housekeeping permit has waited, seconds.
    pub const HOUSEKEEPING_LAG_SECONDS: &str = "ebb_housekeeping_lag_seconds";
    /// Expiry pages waiting for a housekeeping permit.
    pub const HOUSEKEEPING_PAGES_WAITING: &str = "ebb_housekeeping_pages_waiting";
    /// When the values were last read from the broker, epoch seconds (`ebb stat
    /// --watch` divides by the time between two readings, not between its scrapes).
    pub const STATS_TIMESTAMP_SECONDS: &str = "ebb_stats_timestamp_seconds";
    /// High availability: 1 for the role this broker has now (label `role`: `active`
    /// or `standby`), 0 for the other.
    pub const HA_ROLE: &str = "ebb_ha_role";
    /// Times this process became active after waiting as a standby.
    pub const HA_TAKEOVERS_TOTAL: &str = "ebb_ha_takeovers_total";
    /// The last renewal of the store's lease: its round trip, seconds.
    pub const HA_LEASE_RENEW_SECONDS: &str = "ebb_ha_lease_renew_seconds";
    /// The longest renewal of the store's lease since it was taken, seconds.
    pub const HA_LEASE_RENEW_MAX_SECONDS: &str = "ebb_ha_lease_renew_max_seconds";
    /// Renewals of the store's lease since it was taken.
    pub const HA_LEASE_RENEWALS_TOTAL: &str = "ebb_ha_lease_renewals_total";
    /// The broker process's resident memory.
    pub const PROCESS_RESIDENT_BYTES: &str = "ebb_process_resident_memory_bytes";
    /// The broker process's peak resident memory.
    pub const PROCESS_PEAK_RESIDENT_BYTES: &str = "ebb_process_peak_resident_memory_bytes";
    /// Most rows one expiry page of a destination handled since start.
    pub const MAX_EXPIRY_PAGE_ROWS: &str = "ebb_destination_max_expiry_page_rows";
    /// Refused logins since start (label `protocol`: `stomp`, `http`).
    pub const LOGIN_FAILURES_TOTAL: &str = "ebb_login_failures_total";
    /// Logins refused without a check since start, their address having used up its
    /// refused logins (label `protocol`).
    pub const LOGINS_THROTTLED_TOTAL: &str = "ebb_logins_throttled_total";
    /// Messages pending plus in flight.
    pub const QUEUE_SIZE: &str = "ebb_destination_queue_size";
    /// Deliveries not acked yet.
    pub const IN_FLIGHT: &str = "ebb_destination_in_flight";
    /// Consumers attached.
    pub const CONSUMERS: &str = "ebb_destination_consumers";
    /// Producers sending.
    pub const PRODUCERS: &str = "ebb_destination_producers";
    /// Bytes of messages a destination holds in memory.
    pub const DESTINATION_MEMORY_BYTES: &str = "ebb_destination_memory_usage_bytes";
    /// Producers of a destination waiting for space.
    pub const DESTINATION_PRODUCERS_BLOCKED: &str = "ebb_destination_producers_blocked";
    /// Messages accepted since start.
    pub const ENQUEUED_TOTAL: &str = "ebb_destination_enqueued_total";
    /// Deliveries handed to consumers since start (topics: not acks).
    pub const DEQUEUED_TOTAL: &str = "ebb_destination_dequeued_total";
    /// Deliveries handed to consumers since start, redeliveries included.
    pub const DELIVERED_TOTAL: &str = "ebb_destination_delivered_total";
    /// Message expirations since start.
    pub const EXPIRED_TOTAL: &str = "ebb_destination_expired_total";
    /// Messages sent to a dead-letter queue.
    pub const DEAD_LETTERED_TOTAL: &str = "ebb_destination_dead_lettered_total";
    /// Expiry pages finished since start.
    pub const EXPIRY_PAGES_TOTAL: &str = "ebb_expiry_pages_total";
    /// Expiry runs (chains of pages) started since start.
    pub const EXPIRY_RUNS_TOTAL: &str = "ebb_expiry_runs_total";
    /// Rows one expiry page loaded.
    pub const EXPIRY_PAGE_ROWS: &str = "ebb_expiry_page_rows";
    /// Messages waiting for their due time.
    pub const SCHEDULED_MESSAGES: &str = "ebb_scheduled_messages";
    /// The earliest due time, epoch seconds.
    pub const SCHEDULED_NEXT_DUE_TIMESTAMP_SECONDS: &str =
        "ebb_scheduled_next_due_timestamp_seconds";
    /// Scheduled messages released to their destinations since start.
    pub const SCHEDULED_RELEASED_TOTAL: &str = "ebb_scheduled_released_total";
    /// How late each scheduled message was released: its due time to its release.
    pub const SCHEDULED_LATENESS_SECONDS: &str = "ebb_scheduled_lateness_seconds";
    /// Sends that routing took to several destinations (label `route`: `composite`,
    /// `virtual_topic`).
    pub const ROUTED_SENDS_TOTAL: &str = "ebb_routed_sends_total";
    /// The copies those sends stored or delivered, one per destination (label `route`).
    pub const ROUTED_COPIES_TOTAL: &str = "ebb_routed_copies_total";
    /// Advisory messages sent (label `event`: `consumer_added`, `expired`, ...).
    pub const ADVISORIES_TOTAL: &str = "ebb_advisories_total";
    /// The label every per-destination metric has: the store key.
    pub const DESTINATION_LABEL: &str = "destination";
}

/// `[metrics]` in `ebb serve`'s configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    /// `host:port` to serve `/metrics` on; without it there is no endpoint.
    /// `ebb serve --metrics` overrides it.
    pub listen: Option<String>,
}

/// Gauges in bytes: `(name, help)`.
const BYTE_GAUGES: &[(&str, &str)] = &[
    (
        names::MEMORY_USAGE_BYTES,
        "Bytes of messages held in memory",
    ),
    (
        names::MEMORY_LIMIT_BYTES,
        "Memory limit in bytes (0 = none)",
    ),
    (names::STORE_USAGE_BYTES, "Bytes the store's messages take"),
    (names::STORE_LIMIT_BYTES, "Store limit in bytes (0 = none)"),
    (names::TEMP_USAGE_BYTES, "Bytes in temporary storage"),
    (
        names::TEMP_LIMIT_BYTES,
        "Temporary storage limit in bytes (0 = none)",
    ),
    (
        names::PROCESS_RESIDENT_BYTES,
        "The broker process's resident memory",
    ),
    (
        names::PROCESS_PEAK_RESIDENT_BYTES,
        "The broker process's peak resident memory",
    ),
];

/// Gauges in seconds: `(name, help)`.
const SECONDS_GAUGES: &[(&str, &str)] = &[
    (
        names::HA_LEASE_RENEW_SECONDS,
        "The last renewal of the store's lease, round trip",
    ),
    (
        names::HA_LEASE_RENEW_MAX_SECONDS,
        "The longest renewal of the store's lease since it was taken",
    ),
];

/// Gauges without a unit: `(name, help)`.
const GAUGES: &[(&str, &str)] = &[
    (
        names::STATS_TIMESTAMP_SECONDS,
        "When these values were read from the broker, epoch seconds",
    ),
    (
        crate::transport::connections::CONNECTIONS_GAUGE,
        "Client connections open now (labels protocol: STOMP, MQTT; transport: tcp, ws)",
    ),
    (
        names::SCHEDULED_MESSAGES,
        "Messages waiting for their due time (scheduled sends, redeliveries held back)",
    ),
    (
        names::SCHEDULED_NEXT_DUE_TIMESTAMP_SECONDS,
        "The earliest due time of a scheduled message, epoch seconds; 0 when none waits",
    ),
    (
        names::MEMORY_USAGE_RATIO,
        "Memory usage / limit, 0..1 (0 without a limit)",
    ),
    (
        names::STORE_USAGE_RATIO,
        "Store usage / limit, 0..1 (0 without a limit)",
    ),
    (
        names::TEMP_USAGE_RATIO,
        "Temp usage / limit, 0..1 (0 without a limit)",
    ),
    (
        names::PRODUCERS_BLOCKED,
        "Producers waiting for space (flow control)",
    ),
    (names::DESTINATIONS, "Running destinations"),
    (
        names::DESTINATIONS_ASLEEP,
        "Destinations asleep: idle, their actors stopped (counted in ebb_destinations too)",
    ),
    (
        names::MESSAGES_WAITING,
        "Messages waiting (pending plus in flight) in every running destination",
    ),
    (
        names::MESSAGES_IN_FLIGHT,
        "Deliveries not acked yet, over every running destination",
    ),
    (
        names::CONSUMERS_TOTAL,
        "Consumers attached, over every running destination",
    ),
    (
        names::PRODUCERS_TOTAL,
        "Producers (connection and destination pairs), over every running destination",
    ),
    (
        names::HOUSEKEEPING_LAG_SECONDS,
        "How long the expiry page waiting longest for a housekeeping permit has waited, seconds",
    ),
    (
        names::HOUSEKEEPING_PAGES_WAITING,
        "Expiry pages waiting for a housekeeping permit",
    ),
    (
        names::HA_ROLE,
        "1 for this broker's role now (label role: active or standby)",
    ),
];

/// Counters: `(name, help)`.
const COUNTERS: &[(&str, &str)] = &[
    (
        names::LOGIN_FAILURES_TOTAL,
        "Refused logins since start (label protocol)",
    ),
    (
        names::LOGINS_THROTTLED_TOTAL,
        "Logins refused without a check since start: their address used up its refused logins (label protocol)",
    ),
    (
        names::HA_TAKEOVERS_TOTAL,
        "Times this process became active after waiting as a standby",
    ),
    (
        names::SCHEDULED_RELEASED_TOTAL,
        "Scheduled messages released to their destinations since start",
    ),
    (
        names::HA_LEASE_RENEWALS_TOTAL,
        "Renewals of the store's lease since it was taken",
    ),
    (
        names::ROUTED_SENDS_TOTAL,
        "Sends that routing took to several destinations since start (label route: composite, virtual_topic)",
    ),
    (
        names::ROUTED_COPIES_TOTAL,
        "Copies of routed sends, one per destination, since start (label route)",
    ),
        (
        names::ADVISORIES_TOTAL,
        "Advisory messages sent since start (label event)",
    ),
    (
        crate::transport::connections::CONNECTIONS_OPENED_TOTAL,
        "Client connections opened since start (labels protocol: STOMP, MQTT; transport: tcp, ws)",
    ),
];

/// Describes Ebb's metrics to the installed recorder: the `# HELP` lines, with units.
/// `install_recorder` calls it; an application with a recorder of its own calls it
/// once after installing that recorder.
pub fn describe() {
    use ::metrics::Unit;
    for &(name, what) in BYTE_GAUGES {
        describe_gauge!(name, Unit::Bytes, what);
    }
    for &(name, what) in SECONDS_GAUGES {
        describe_gauge!(name, Unit::Seconds, what);
    }
    for &(name, what) in GAUGES {
        describe_gauge!(name, what);
    }
    for &(name, what) in COUNTERS {
        describe_counter!(name, what);
    }
    // The per-destination ones, for a recorder fed by [`record_destinations`] (the
    // HTTP server renders them itself, with their help).
    for (name, what, counter) in series::described() {
        if name == names::DESTINATION_MEMORY_BYTES {
            describe_gauge!(name, Unit::Bytes, what);
        } else if counter {
            describe_counter!(name, what);
        } else {
            describe_gauge!(name, what);
        }
    }
    describe_histogram!(names::EXPIRY_PAGE_ROWS, "Rows one expiry page loaded");
    describe_histogram!(
        names::SCHEDULED_LATENESS_SECONDS,
        Unit::Seconds,
        "How late each scheduled message was released (its due time to its release)"
    );
}

/// Records this broker's high-availability role (`active` true, or standby).
pub fn record_ha_role(active: bool) {
    use names::HA_ROLE;
    gauge!(HA_ROLE, "role" => "active").set(if active { 1.0 } else { 0.0 });
    gauge!(HA_ROLE, "role" => "standby").set(if active { 0.0 } else { 1.0 });
}

/// Counts a takeover: this process became active after waiting as a standby.
pub fn record_takeover() {
    counter!(names::HA_TAKEOVERS_TOTAL).increment(1);
}

/// Records the renewals of the store's lease (nothing without a lease).
pub fn record_lease(renewals: Option<crate::LeaseRenewals>) {
    use names::*;
    let Some(r) = renewals else { return };
    gauge!(HA_LEASE_RENEW_SECONDS).set(r.last_us as f64 / 1e6);
    gauge!(HA_LEASE_RENEW_MAX_SECONDS).set(r.max_us as f64 / 1e6);
    counter!(HA_LEASE_RENEWALS_TOTAL).absolute(r.count);
}

/// usage / limit, 0..1; 0 without a limit.
fn ratio(used: u64, limit: u64) -> f64 {
    crate::stats::percent(used, limit) / 100.0
}

/// Copies a snapshot's broker-wide values into the installed recorder: usage, the
/// totals over every destination, the scheduler. Gauges are set, counters raised to
/// the snapshot's totals (a counter never goes down). Does nothing without an
/// installed recorder. The per-destination series are not the recorder's: the HTTP
/// server renders them from the last snapshot ([`DestinationSeries`]), and an
/// application with a recorder of its own copies them with [`record_destinations`].
pub fn record(stats: &BrokerStats) {
    use names::*;
    gauge!(STATS_TIMESTAMP_SECONDS).set(crate::history::now_ms() as f64 / 1000.0);
    let u = &stats.usage;
    let t = &stats.totals;
    for (name, value) in [
        (MEMORY_USAGE_BYTES, u.memory_bytes as f64),
        (MEMORY_LIMIT_BYTES, u.memory_limit_bytes as f64),
        (
            MEMORY_USAGE_RATIO,
            ratio(u.memory_bytes, u.memory_limit_bytes),
        ),
        (STORE_USAGE_BYTES, u.store_bytes as f64),
        (STORE_LIMIT_BYTES, u.store_limit_bytes as f64),
        (STORE_USAGE_RATIO, ratio(u.store_bytes, u.store_limit_bytes)),
        (TEMP_USAGE_BYTES, u.temp_bytes as f64),
        (TEMP_LIMIT_BYTES, u.temp_limit_bytes as f64),
        (TEMP_USAGE_RATIO, ratio(u.temp_bytes, u.temp_limit_bytes)),
        (PRODUCERS_BLOCKED, u.blocked_producers as f64),
        (DESTINATIONS, stats.destinations_total as f64),
        (DESTINATIONS_ASLEEP, t.asleep as f64),
        (MESSAGES_WAITING, t.queue_size as f64),
        (MESSAGES_IN_FLIGHT, t.in_flight as f64),
        (CONSUMERS_TOTAL, t.consumers as f64),
        (PRODUCERS_TOTAL, t.producers as f64),
        (PROCESS_RESIDENT_BYTES, u.process_resident_bytes as f64),
        (
            HOUSEKEEPING_LAG_SECONDS,
            u.housekeeping_lag_ms as f64 / 1000.0,
        ),
        (
            HOUSEKEEPING_PAGES_WAITING,
            u.housekeeping_pages_waiting as f64,
        ),
        (
            PROCESS_PEAK_RESIDENT_BYTES,
            u.process_peak_resident_bytes as f64,
        ),
        (SCHEDULED_MESSAGES, stats.scheduler.scheduled as f64),
        (
            SCHEDULED_NEXT_DUE_TIMESTAMP_SECONDS,
            stats
                .scheduler
                .next_due_ms
                .map_or(0.0, |ms| ms as f64 / 1000.0),
        ),
    ] {
        gauge!(name).set(value);
    }
}

/// Copies each destination of a snapshot into the installed recorder, labelled
/// `destination`, for an application that brings its own recorder (the HTTP server
/// does not use it). A recorder keeps a series once it has one: the series of a
/// destination that ended stay with their last values unless that recorder expires
/// idle series (`metrics-exporter-prometheus`'s `idle_timeout`, for one).
pub fn record_destinations(stats: &BrokerStats) {
    use names::*;
    for d in &stats.destinations {
        let labels = [Label::new(DESTINATION_LABEL, d.destination.clone())];
        for (name, value) in [
            (QUEUE_SIZE, d.queue_size),
            (IN_FLIGHT, d.in_flight),
            (CONSUMERS, d.consumers),
            (PRODUCERS, d.producers),
            (DESTINATION_MEMORY_BYTES, d.memory_bytes),
            (DESTINATION_PRODUCERS_BLOCKED, d.blocked_producers),
            (MAX_EXPIRY_PAGE_ROWS, d.max_expiry_page_rows),
        ] {
            gauge!(name, labels.iter()).set(value as f64);
        }
        for (name, value) in [
            (ENQUEUED_TOTAL, d.enqueued_total),
            (DEQUEUED_TOTAL, d.dequeued_total),
            (DELIVERED_TOTAL, d.delivered_total),
            (EXPIRED_TOTAL, d.expired_total),
            (DEAD_LETTERED_TOTAL, d.dead_lettered_total),
            (EXPIRY_PAGES_TOTAL, d.expiry_pages_total),
            (EXPIRY_RUNS_TOTAL, d.expiry_runs_total),
        ] {
            counter!(name, labels.iter()).absolute(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_zero_without_a_limit() {
        assert_eq!(ratio(5, 0), 0.0);
        assert_eq!(ratio(1, 4), 0.25);
    }
}
