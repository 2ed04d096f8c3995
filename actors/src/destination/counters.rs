//! [`DestinationCounters`]: the counters every destination keeps, and how an expiry
//! page is recorded.

/// Counters every destination keeps since its actor started (they restart from 0 with
/// the broker), and whether its expiry is armed now. Counts are messages unless said.
/// `TopicStats` and `QueueStats` (what a destination answers to its stats request)
/// carry them, and read through to them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DestinationCounters {
    /// Messages accepted: published (expired-on-arrival ones included), released by a
    /// committed transaction, or received as dead letters. A publish whose store write
    /// failed, or whose transaction rolled back, is not counted.
    pub enqueued: u64,
    /// Deliveries handed to consumers (redeliveries included).
    pub dispatched: u64,
    /// Expirations (see each kind's stats for what one counts).
    pub expired: u64,
    /// Housekeeping timer ticks (wake-ups). The timer runs only while there is work.
    pub ticks: u64,
    /// Expiry runs started (a run is one or more chained pages).
    pub expiry_runs: u64,
    /// Expiry pages started (each one bounded store statement, or one bounded read
    /// and its writes).
    pub expiry_pages_started: u64,
    /// Expiry pages finished (with or without an error).
    pub expiry_pages: u64,
    /// Most rows one expiry page handled.
    pub max_expiry_page_rows: u64,
    /// The budget's ticket of the last expiry page this destination ran (see
    /// [`crate::housekeeping::HousekeepingBudget`]).
    pub last_page_ticket: u64,
    /// Whether housekeeping looks for expired messages now: the destination has seen a
    /// message with an expiration, or its store holds one.
    pub expiry_armed: bool,
}

impl DestinationCounters {
    /// Records a finished expiry page that handled `rows` rows under
    /// budget ticket `ticket` (`None`: it got no permit, the budget was closed); feeds
    /// the broker-wide `ebb_expiry_page_rows` histogram. A failed page is
    /// [`Self::page_failed`].
    pub fn page_finished(&mut self, rows: u64, ticket: Option<u64>) {
        self.expiry_pages += 1;
        self.max_expiry_page_rows = self.max_expiry_page_rows.max(rows);
        if let Some(ticket) = ticket {
            self.last_page_ticket = ticket;
        }
        // Broker-wide: a series per destination would outlive the destination in the
        // process's recorder (each destination's largest page is a gauge instead).
        metrics::histogram!("ebb_expiry_page_rows").record(rows as f64);
    }

    /// Records an expiry page that failed: counted as finished, not in the histogram.
    pub fn page_failed(&mut self) {
        self.expiry_pages += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_keeps_the_most_rows_and_the_last_ticket() {
        let mut c = DestinationCounters::default();
        c.page_finished(400, Some(3));
        c.page_finished(12, Some(7));
        c.page_finished(0, None);
        c.page_failed();
        assert_eq!(
            (c.expiry_pages, c.max_expiry_page_rows, c.last_page_ticket),
            (4, 400, 7)
        );
    }
}
