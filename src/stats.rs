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
//! Cost of one call: one message to the registry per [`STATS_PAGE`] running
//! destinations, then, for each destination in turn, one message to its actor and its
//! committed rows from the store: kept from the last `COUNT` while nothing was written
//! to it since ([`ebb_store::MessageStore::count_committed`]), else one `COUNT` (a
//! single-row answer; the statement walks the `(container, id)` index, so its time
//! grows with the destination's backlog). So an idle broker's reading runs no store
//! statement. Destinations are asked one after the other, so a stats call never holds
//! more than one pool connection. Every running destination is read: none is left out of the
//! totals, however many there are (the answer's size grows with them, about 200 bytes
//! and the name per destination).

use ebb_actors::broker::ListDestinations;
use serde::{Deserialize, Serialize};

use ebb_actors::messages::Stats;

use crate::{Broker, Error};

/// How many running destinations one question to the registry lists while
/// [`Broker::stats`] pages through them (so that no one answer grows with their
/// number).
pub const STATS_PAGE: usize = 1_000;

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
}

impl DestinationTotals {
    /// The sums over `destinations`.
    pub fn of(destinations: &[DestinationStats]) -> Self {
        destinations.iter().fold(Self::default(), |t, d| Self {
            queue_size: t.queue_size + d.queue_size,
            in_flight: t.in_flight + d.in_flight,
            consumers: t.consumers + d.consumers,
            producers: t.producers + d.producers,
        })
    }
}

impl Broker {
    /// A snapshot of the broker's usage and of every running destination, in
    /// store-key order. Destinations are the ones in use since the broker started
    /// (sent to, subscribed to, asked about); a topic that only exists in the store is
    /// not started by this call. The registry is asked for [`STATS_PAGE`] keys at a
    /// time.
    ///
    /// A destination whose actor stops between the listing and its question is left
    /// out. Errors: [`Error::Actor`] when the registry is gone, [`Error::Store`] when a
    /// count fails (the store is closed or unreachable).
    pub async fn stats(&self) -> Result<BrokerStats, Error> {
        self.stats_paged(STATS_PAGE).await
    }

    /// [`Broker::stats`], asking the registry for `page` keys at a time (tests page
    /// by a few).
    #[doc(hidden)]
    pub async fn stats_paged(&self, page: usize) -> Result<BrokerStats, Error> {
        let mut destinations = Vec::new();
        let mut after = None;
        loop {
            let list = self
                .registry()
                .send(ListDestinations {
                    limit: page.max(1),
                    after: after.take(),
                })
                .await?;
            let last_page = list.keys.len() < page.max(1);
            after = list.keys.last().cloned();
            for destination in list.keys {
                match self.destination_stats(&destination).await {
                    Ok(stats) => destinations.push(stats),
                    Err(Error::ShuttingDown) => continue,
                    Err(e) => return Err(e),
                }
            }
            if last_page || after.is_none() {
                break;
            }
        }
        let usage = self.usage();
        let (lag, waiting) = self.housekeeping_lag();
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
            destinations_total: destinations.len() as u64,
            totals: DestinationTotals::of(&destinations),
            destinations,
            scheduler: self.schedule_backlog().await?,
        })
    }

    /// One destination's [`DestinationStats`] (its actor started if it is not
    /// running): one message to its actor and one `COUNT` of its stored rows.
    ///
    /// Errors: [`Error::ShuttingDown`] when it is not running after shutdown,
    /// [`Error::Store`] when the count fails.
    pub(crate) async fn destination_stats(
        &self,
        destination: &crate::DestinationKey,
    ) -> Result<DestinationStats, Error> {
        let key = destination.container();
        let counted = self.stats_of(destination).await?;
        let stored = self.store().count_committed(&key).await?;
        let mut stats =
            DestinationStats::from_stats(key.clone(), destination.kind(), &counted, stored);
        let flow = self.destination_flow(&key)?;
        stats.memory_bytes = flow.memory_bytes;
        stats.blocked_producers = flow.blocked_producers;
        stats.producers = flow.producers;
        Ok(stats)
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
