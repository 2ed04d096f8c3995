//! A queue's redelivery back-off in the store, as a plain struct (no actor): which
//! held messages the queue has read back, and when to read the next ones.
//!
//! A stored message whose delivery failed and that must wait (ActiveMQ's
//! `redeliveryDelay`, `initialRedeliveryDelay`, `useExponentialBackOff`) stays in its
//! row: one `UPDATE` writes its failure count and its due time (epoch ms, the `due`
//! column; [`ebb_store::WriteOp::Redelivered`] with `hold_until`), and the queue forgets
//! it. The queue's cursor reads skip such a row ([`ebb_store::MessageStore::read_queue`]);
//! the queue reads the held rows back by due time ([`ebb_store::MessageStore::read_held`],
//! one range of the partial index `(container, due, id)`, a page at a time), and puts
//! each back in its place (its id), marked redelivered with its count. Nothing else is
//! written: the release is a read.
//!
//! The reads page on from a position `(due, id)`: a held row keeps its due time after it
//! was read back (until it is acked, moved or held again), so the position only moves
//! forward while the queue runs, and a queue that starts (after a restart, a crash, or
//! a sleep) reads from the beginning: every held row is then its to put back, at once
//! or when due.
//!
//! **No hold is passed unread.** A hold's write may still be in flight when a read
//! begins; were that read to return rows due after it, the position would pass the
//! hold before it is committed. So a read covers due times only below the earliest
//! hold in flight ([`HeldReads::hold_started`]); a hold made later is due later than
//! the read's bound (its wait is at least 1 ms). Should the position have passed a
//! committed hold anyway (the wall clock set back), [`HeldReads::hold_finished`] says
//! so, and the queue keeps that message in memory until due instead.
//!
//! Memory: a position, the due time of the next held row, and one entry per hold
//! whose write is in flight; never one per held message.

use std::collections::BTreeSet;

/// How long a failed read waits before the next, ms.
pub const RETRY_MS: i64 = 1_000;

/// The least time between two reads of a queue's held rows, ms: a read takes every
/// row due by then, so holds that fall due within this window come back together, in
/// one read, instead of one read per ms of due times. A held message comes back at
/// most this much after its due time (never before it), with the reads' own latency.
pub const READ_SPACING_MS: i64 = 10;

/// See the module documentation.
#[derive(Debug)]
pub struct HeldReads {
    /// `(due, id)` of the last held row read back; the next read starts after it.
    after: (i64, i64),
    /// A read is in flight.
    reading: bool,
    /// The first read (from the beginning) has come back.
    started: bool,
    /// When the first held row not read back yet is due (epoch ms), if one is known.
    next_due: Option<i64>,
    /// Holds committed while a read was in flight (the read may not have seen them):
    /// the earliest of their due times.
    noted: Option<i64>,
    /// Holds whose write is in flight: `(due, id)`.
    writing: BTreeSet<(i64, i64)>,
    /// No read before this time (epoch ms): the last read's start plus
    /// [`READ_SPACING_MS`], or a failed read's plus [`RETRY_MS`].
    not_before: i64,
}

impl Default for HeldReads {
    fn default() -> Self {
        Self {
            after: (i64::MIN, i64::MIN),
            reading: false,
            started: false,
            next_due: None,
            noted: None,
            writing: BTreeSet::new(),
            not_before: i64::MIN,
        }
    }
}

fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl HeldReads {
    /// The hold of row `id` until `due` (epoch ms) is being written.
    pub fn hold_started(&mut self, due: i64, id: i64) {
        self.writing.insert((due, id));
    }

    /// The hold's write came back, committed or not. Returns true when the reads have
    /// already passed it (only if the wall clock went back): the queue then brings
    /// the message back itself. A committed one is read back when due.
    pub fn hold_finished(&mut self, due: i64, id: i64, committed: bool) -> bool {
        self.writing.remove(&(due, id));
        if !committed {
            return false;
        }
        if (due, id) <= self.after {
            return true;
        }
        if self.reading {
            self.noted = earliest(self.noted, Some(due));
        } else {
            self.next_due = earliest(self.next_due, Some(due));
        }
        false
    }

    /// The highest due time a read begun at `now_ms` may cover: below every hold in
    /// flight.
    fn bound(&self, now_ms: i64) -> i64 {
        match self.writing.first() {
            Some(&(due, _)) => now_ms.min(due.saturating_sub(1)),
            None => now_ms,
        }
    }

    /// What to read now, if anything: `(after (due, id), due up to)` for
    /// [`ebb_store::MessageStore::read_held`]. The first read of a queue reads from the
    /// beginning; later ones when a held row is due.
    pub fn read_request(&mut self, now_ms: i64) -> Option<((i64, i64), i64)> {
        if self.reading || now_ms < self.not_before {
            return None;
        }
        let upto = self.bound(now_ms);
        if self.started && self.next_due.is_none_or(|due| due > upto) {
            return None;
        }
        self.reading = true;
        self.not_before = now_ms.saturating_add(READ_SPACING_MS);
        Some((self.after, upto))
    }

    /// The read came back: the `(due, id)` of its rows in order, whether it was full
    /// (more may be due: the next read follows at once) and, on a short page, when the
    /// next held row is due.
    pub fn on_read(&mut self, rows: &[(i64, i64)], full: bool, next_due: Option<i64>) {
        self.reading = false;
        self.started = true;
        if let Some(&last) = rows.last() {
            self.after = self.after.max(last);
        }
        let next = if full {
            // More may be due: the next page at once.
            self.not_before = i64::MIN;
            Some(self.after.0)
        } else {
            next_due
        };
        self.next_due = earliest(next, self.noted.take());
    }

    /// The read failed: the next waits [`RETRY_MS`].
    pub fn on_failed(&mut self, now_ms: i64) {
        self.reading = false;
        self.not_before = now_ms.saturating_add(RETRY_MS);
        self.next_due = earliest(self.next_due, self.noted.take());
    }

    /// When to look again without being asked (epoch ms): the next held row's due
    /// time, or the end of a failed read's wait; `None` while a read is in flight, or
    /// when only holds in flight keep a due row back (their commit asks).
    pub fn wake_at(&self, now_ms: i64) -> Option<i64> {
        if self.reading {
            return None;
        }
        if !self.started {
            return Some(self.not_before);
        }
        let due = self.next_due?;
        (due > now_ms || due <= self.bound(now_ms)).then_some(due.max(self.not_before))
    }

    /// True when the held row `id`, due at `due`, is after the reads' position: the
    /// queue has not read it back (a take may take it from the store).
    pub fn not_read_back(&self, due: i64, id: i64) -> bool {
        (due, id) > self.after
    }

    /// True when no read and no hold's write is in flight: what is held is all in the
    /// store (a queue may sleep only then; woken, it reads its held rows from the
    /// beginning, as after a restart).
    pub fn is_idle(&self) -> bool {
        !self.reading && self.writing.is_empty()
    }

    /// Holds whose write is in flight.
    pub fn writing_len(&self) -> usize {
        self.writing.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_read_is_from_the_beginning_then_only_when_due() {
        let mut h = HeldReads::default();
        assert_eq!(h.read_request(100), Some(((i64::MIN, i64::MIN), 100)));
        assert_eq!(h.read_request(100), None, "one read at a time");
        h.on_read(&[(50, 7), (90, 3)], false, Some(400));
        assert_eq!(h.read_request(399), None, "nothing due yet");
        assert_eq!(h.wake_at(399), Some(400));
        assert_eq!(h.read_request(400), Some(((90, 3), 400)));
        h.on_read(&[(400, 9)], false, Some(401));
        assert_eq!(
            h.wake_at(401),
            Some(400 + READ_SPACING_MS),
            "not read again so soon"
        );
        assert_eq!(h.read_request(401), None);
        assert!(h.read_request(400 + READ_SPACING_MS).is_some());
        h.on_read(&[(401, 1)], false, None);
        assert_eq!(h.read_request(10_000), None, "nothing held any more");
        assert_eq!(h.wake_at(10_000), None);
    }

    #[test]
    fn a_full_page_reads_on_at_once() {
        let mut h = HeldReads::default();
        h.read_request(100).unwrap();
        h.on_read(&[(10, 1), (20, 2)], true, None);
        assert_eq!(h.read_request(100), Some(((20, 2), 100)));
    }

    #[test]
    fn a_committed_hold_is_read_when_due() {
        let mut h = HeldReads::default();
        h.read_request(100).unwrap();
        h.on_read(&[], false, None);
        h.hold_started(300, 5);
        assert!(!h.hold_finished(300, 5, true));
        assert_eq!(h.wake_at(200), Some(300));
        assert_eq!(h.read_request(300), Some(((i64::MIN, i64::MIN), 300)));
    }

    #[test]
    fn a_read_never_covers_a_hold_in_flight() {
        let mut h = HeldReads::default();
        h.read_request(100).unwrap();
        h.on_read(&[], false, Some(150));
        // Held until 140, not yet committed; another row is due at 150.
        h.hold_started(140, 8);
        assert_eq!(h.read_request(200), None, "150 is after the hold in flight");
        assert_eq!(h.wake_at(200), None, "its commit asks");
        assert!(!h.hold_finished(140, 8, true));
        assert_eq!(h.read_request(200), Some(((i64::MIN, i64::MIN), 200)));
        h.on_read(&[(140, 8), (150, 2)], false, None);
        // A hold in flight due later than now leaves the read up to now.
        h.hold_started(900, 9);
        h.hold_finished(900, 9, true);
        h.hold_started(1_000, 10);
        assert_eq!(h.read_request(950), Some(((150, 2), 950)));
    }

    #[test]
    fn a_hold_committed_during_a_read_is_not_forgotten() {
        let mut h = HeldReads::default();
        h.read_request(100).unwrap();
        h.hold_started(500, 4);
        assert!(!h.hold_finished(500, 4, true));
        // The read's snapshot did not have it: it answers "nothing more".
        h.on_read(&[], false, None);
        assert_eq!(h.wake_at(100), Some(500));
    }

    #[test]
    fn a_hold_the_reads_passed_is_reported() {
        let mut h = HeldReads::default();
        h.read_request(1_000).unwrap();
        h.on_read(&[(900, 3)], false, None);
        h.hold_started(800, 4); // the clock went back
        assert!(h.hold_finished(800, 4, true));
        assert!(
            !h.hold_finished(800, 4, false),
            "a failed hold is not read back"
        );
    }

    #[test]
    fn a_failed_read_waits_before_the_next() {
        let mut h = HeldReads::default();
        h.read_request(100).unwrap();
        h.on_failed(100);
        assert_eq!(h.read_request(500), None);
        assert_eq!(h.wake_at(500), Some(100 + RETRY_MS));
        assert!(h.read_request(100 + RETRY_MS).is_some());
    }
}
