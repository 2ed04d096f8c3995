//! [`HousekeepingSchedule`]: a destination's housekeeping state, apart from the actor.
//!
//! The state every destination keeps for its timer, expiry runs and shutdown:
//!
//! - **The timer** runs only while there is work: expiry is *armed* (the destination
//!   has seen a message with an expiration, or its store holds one) or a cleanup is
//!   due. An idle destination has no timer and costs no wake-ups.
//! - **A run** is one or more chained expiry pages, started by a tick; at most one run,
//!   and within it at most one page, is in flight.
//! - **A cleanup batch** (topics: rows every durable subscription has acked) is another
//!   bounded piece of work a stop waits for.
//! - **Stop** (a step of shutdown) cancels the timer, starts nothing new and is answered
//!   once no page and no cleanup batch is in flight.
//!
//! `H` is the timer's handle (actix's `SpawnHandle` in an actor; anything in a unit
//! test): the schedule hands it back when the timer must be cancelled.

use tokio::sync::oneshot;

/// See the module documentation.
#[derive(Debug)]
pub struct HousekeepingSchedule<H> {
    timer: Option<H>,
    expiry_armed: bool,
    /// Bumped by every [`Self::arm`]: a disarm check that saw another value is stale.
    arm_epoch: u64,
    /// Store writes of messages with an expiration not yet answered: the store may not
    /// show them to a disarm check yet.
    expiring_writes: u64,
    run_active: bool,
    page_in_flight: bool,
    cleanup_needed: bool,
    cleanup_in_flight: bool,
    stopping: bool,
    stop_waiters: Vec<oneshot::Sender<()>>,
}

impl<H> Default for HousekeepingSchedule<H> {
    fn default() -> Self {
        Self {
            timer: None,
            expiry_armed: false,
            arm_epoch: 0,
            expiring_writes: 0,
            run_active: false,
            page_in_flight: false,
            cleanup_needed: false,
            cleanup_in_flight: false,
            stopping: false,
            stop_waiters: Vec::new(),
        }
    }
}

/// What happens after an expiry page finished ([`HousekeepingSchedule::page_finished`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterPage {
    /// The page was full and no stop is under way: run the next page now (through the
    /// mailbox, behind what is already waiting).
    NextPage,
    /// The run is over; `found_nothing` says the page found no row (the destination
    /// may then check whether anything still expires, and disarm).
    RunOver { found_nothing: bool },
}

impl<H> HousekeepingSchedule<H> {
    /// Whether expiry looks for expired messages at all.
    pub fn expiry_armed(&self) -> bool {
        self.expiry_armed
    }

    /// A message with an expiration arrived (or the store holds one): expiry looks.
    pub fn arm(&mut self) {
        self.expiry_armed = true;
        self.arm_epoch += 1;
    }

    /// A store write of a message with an expiration started.
    pub fn expiring_write_started(&mut self) {
        self.expiring_writes += 1;
    }

    /// A store write of a message with an expiration was answered (committed or not).
    pub fn expiring_write_finished(&mut self) {
        self.expiring_writes = self.expiring_writes.saturating_sub(1);
    }

    /// Before asking the store whether anything still expires: `None` when the answer
    /// could not be trusted (a write of an expiring message is in flight, so the store
    /// may not show it yet); otherwise the token to give [`Self::disarm_if_unchanged`].
    pub fn disarm_check(&self) -> Option<u64> {
        (self.expiring_writes == 0).then_some(self.arm_epoch)
    }

    /// The store holds nothing that expires, as of the check that returned `token`:
    /// expiry stops looking, unless a message with an expiration arrived since (then
    /// the answer is stale and expiry stays armed). True when it disarmed.
    pub fn disarm_if_unchanged(&mut self, token: u64) -> bool {
        if token != self.arm_epoch {
            return false;
        }
        self.expiry_armed = false;
        true
    }

    /// True while an expiry run is under way.
    pub fn run_active(&self) -> bool {
        self.run_active
    }

    /// Some acks happened: a cleanup batch is due at the next tick.
    pub fn need_cleanup(&mut self) {
        self.cleanup_needed = true;
    }

    /// Whether a cleanup batch is due (the next tick starts it).
    pub fn cleanup_due(&self) -> bool {
        self.cleanup_needed
    }

    /// Whether a cleanup batch is in flight.
    pub fn cleanup_in_flight(&self) -> bool {
        self.cleanup_in_flight
    }

    /// Whether the timer should be started now, with period `period_ms` (0 = off): it
    /// is not running, there is work for it, and no stop is under way.
    pub fn timer_wanted(&self, period_ms: u64) -> bool {
        let work = self.expiry_armed || self.cleanup_needed;
        period_ms > 0 && !self.stopping && self.timer.is_none() && work
    }

    /// The timer was started.
    pub fn timer_started(&mut self, handle: H) {
        self.timer = Some(handle);
    }

    /// The timer to cancel when nothing is left for it: nothing armed or due, and
    /// nothing in flight.
    pub fn idle_timer(&mut self) -> Option<H> {
        let busy =
            self.expiry_armed || self.cleanup_needed || self.run_active || self.cleanup_in_flight;
        if busy {
            None
        } else {
            self.timer.take()
        }
    }

    /// A tick: starts an expiry run if expiry is armed, no run is active and no stop is
    /// under way, and `has_work` (asked only then) says there is something to expire
    /// for. True when a run started (its first page is the caller's to start).
    pub fn start_run(&mut self, has_work: impl FnOnce() -> bool) -> bool {
        if self.run_active || self.stopping || !self.expiry_armed || !has_work() {
            return false;
        }
        self.run_active = true;
        true
    }

    /// A page of the active run is about to start. False (and the run is over) when a
    /// stop is under way: the caller then starts no page.
    pub fn start_page(&mut self) -> bool {
        if self.stopping {
            self.run_active = false;
            return false;
        }
        self.page_in_flight = true;
        true
    }

    /// The page in flight finished: `full` says it filled its limit (more may wait).
    pub fn page_finished(&mut self, full: bool, rows: u64) -> AfterPage {
        self.page_in_flight = false;
        if full && !self.stopping {
            AfterPage::NextPage
        } else {
            AfterPage::RunOver {
                found_nothing: rows == 0,
            }
        }
    }

    /// The run is over (its last page finished, failed, or a stop cut it).
    pub fn end_run(&mut self) {
        self.run_active = false;
    }

    /// Starts a cleanup batch if one is due, none is in flight and no stop is under
    /// way. True when it started.
    pub fn start_cleanup(&mut self) -> bool {
        if self.stopping || !self.cleanup_needed || self.cleanup_in_flight {
            return false;
        }
        self.cleanup_needed = false;
        self.cleanup_in_flight = true;
        true
    }

    /// The cleanup batch finished; `more` says another is due (a full batch, or a
    /// failed one to retry).
    pub fn cleanup_finished(&mut self, more: bool) {
        self.cleanup_in_flight = false;
        self.cleanup_needed |= more;
    }

    /// Begins a stop: returns the timer to cancel (if any) and a receiver answered once
    /// no page and no cleanup batch is in flight (at once if none is).
    pub fn stop(&mut self) -> (Option<H>, oneshot::Receiver<()>) {
        self.stopping = true;
        let (tx, rx) = oneshot::channel();
        self.stop_waiters.push(tx);
        self.wake_stop_waiters();
        (self.timer.take(), rx)
    }

    /// Answers the stop waiters if nothing is in flight. Called after each page and
    /// cleanup batch.
    pub fn wake_stop_waiters(&mut self) {
        if !self.page_in_flight && !self.cleanup_in_flight {
            for waiter in self.stop_waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Schedule = HousekeepingSchedule<&'static str>;

    #[test]
    fn an_idle_destination_wants_no_timer() {
        let mut s = Schedule::default();
        assert!(!s.timer_wanted(1000));
        s.arm();
        assert!(s.timer_wanted(1000));
        assert!(!s.timer_wanted(0), "period 0 turns housekeeping off");
        s.timer_started("timer");
        assert!(!s.timer_wanted(1000), "one timer at a time");
        assert_eq!(s.idle_timer(), None, "armed: the timer stays");
        let token = s.disarm_check().unwrap();
        assert!(s.disarm_if_unchanged(token));
        assert_eq!(s.idle_timer(), Some("timer"));
        s.need_cleanup();
        assert!(s.timer_wanted(1000), "a cleanup due is work too");
    }

    #[test]
    fn a_run_chains_full_pages_and_ends_on_a_short_one() {
        let mut s = Schedule::default();
        assert!(!s.start_run(|| true), "not armed");
        s.arm();
        assert!(!s.start_run(|| false), "nothing to expire for");
        assert!(s.start_run(|| true));
        assert!(!s.start_run(|| true), "one run at a time");
        assert!(s.start_page());
        assert_eq!(s.page_finished(true, 400), AfterPage::NextPage);
        assert!(s.start_page());
        assert_eq!(
            s.page_finished(false, 0),
            AfterPage::RunOver {
                found_nothing: true
            }
        );
        s.end_run();
        assert!(!s.run_active());
        assert!(s.start_run(|| true), "the next tick starts a new run");
    }

    #[test]
    fn stop_waits_for_the_page_in_flight_and_starts_no_other() {
        let mut s = Schedule::default();
        s.arm();
        s.timer_started("timer");
        assert!(s.start_run(|| true));
        assert!(s.start_page());
        let (timer, mut stopped) = s.stop();
        assert_eq!(timer, Some("timer"));
        assert!(
            stopped.try_recv().is_err(),
            "answered with a page in flight"
        );
        assert_eq!(
            s.page_finished(true, 400),
            AfterPage::RunOver {
                found_nothing: false
            },
            "a full page chains no other once stopping"
        );
        s.end_run();
        s.wake_stop_waiters();
        assert!(stopped.try_recv().is_ok());
        assert!(!s.start_run(|| true));
        assert!(!s.timer_wanted(1000));
    }

    #[test]
    fn stop_cuts_a_run_between_pages_and_waits_for_cleanup() {
        let mut s = Schedule::default();
        s.arm();
        assert!(s.start_run(|| true));
        s.need_cleanup();
        assert!(s.start_cleanup());
        assert!(!s.start_cleanup(), "one batch at a time");
        let (_, mut stopped) = s.stop();
        assert!(!s.start_page(), "no page after stop");
        assert!(!s.run_active());
        s.wake_stop_waiters();
        assert!(stopped.try_recv().is_err(), "a cleanup batch is in flight");
        s.cleanup_finished(true);
        assert!(!s.start_cleanup(), "no batch after stop");
        s.wake_stop_waiters();
        assert!(stopped.try_recv().is_ok());
    }

    #[test]
    fn a_disarm_check_never_races_an_expiring_message() {
        let mut s = Schedule::default();
        s.arm();
        s.expiring_write_started();
        assert_eq!(
            s.disarm_check(),
            None,
            "the store may not show the write yet"
        );
        s.expiring_write_finished();
        let token = s.disarm_check().expect("nothing in flight");
        s.arm();
        assert!(!s.disarm_if_unchanged(token), "armed again since the check");
        assert!(s.expiry_armed());
        let token = s.disarm_check().unwrap();
        assert!(s.disarm_if_unchanged(token));
        assert!(!s.expiry_armed());
    }

    #[test]
    fn stop_with_nothing_in_flight_answers_at_once() {
        let mut s = Schedule::default();
        let (timer, mut stopped) = s.stop();
        assert_eq!(timer, None);
        assert!(stopped.try_recv().is_ok());
    }
}
