//! Scheduled messages in the store: how their xids name their due times, and how a
//! destination that holds a message back for later (a redelivery that waits, ActiveMQ's
//! `redeliveryDelay`) wakes the broker's scheduler.
//!
//! A scheduled message is a prepared message (invisible, holding no mark back) whose
//! xid is `sched:<due, epoch ms, 20 digits>:<message id>`, followed by `:<row id>`
//! for a redelivery held back, by `:every<period ms>x<firings left>` for a
//! repeating message (one stored job, ActiveMQ's `AMQ_SCHEDULED_PERIOD` and
//! `AMQ_SCHEDULED_REPEAT`: each firing adds a copy and moves the job to its next due
//! time; the last firing delivers the job itself), or by `:cron` for a cron job
//! (`AMQ_SCHEDULED_CRON`: each occurrence adds a scheduled copy and moves the job to
//! the next one). Xids sort as their due times do, so the messages due now are one
//! range of the store's xid index.

use std::sync::{Arc, OnceLock};

/// The xid prefix of scheduled messages in the store (the store's own: a newer last
/// value deletes a message held back under it, [`ebb_store::SCHEDULED_XID_PREFIX`]).
pub const SCHEDULED_XID_PREFIX: &str = ebb_store::SCHEDULED_XID_PREFIX;

/// The xid of a message due at `due_ms` (epoch ms), with message id `message_id`
/// (`PREFIX:N`): messages due at the same ms sort by `N`, zero-padded, so in the order
/// the broker sent them.
pub fn scheduled_xid(due_ms: i64, message_id: &str) -> String {
    let id = match message_id.rsplit_once(':') {
        Some((prefix, n)) if n.bytes().all(|b| b.is_ascii_digit()) => {
            format!("{prefix}:{n:0>20}")
        }
        _ => message_id.to_string(),
    };
    format!("{SCHEDULED_XID_PREFIX}{:020}:{id}", due_ms.max(0))
}

/// The xid that holds row `id` (message `message_id`) back until `due_ms` for its
/// redelivery: [`scheduled_xid`] with the row id after it, so two rows of one message
/// id (a message and its dead-letter copy) never share one.
pub fn redelivery_xid(due_ms: i64, message_id: &str, id: i64) -> String {
    format!("{}:{id}", scheduled_xid(due_ms, message_id))
}

/// The xid of a repeating job (message `message_id`) due at `due_ms`: it fires
/// `left` more times after this one, every `period_ms`.
pub fn job_xid(due_ms: i64, message_id: &str, period_ms: u64, left: u32) -> String {
    format!(
        "{}:every{period_ms}x{left}",
        scheduled_xid(due_ms, message_id)
    )
}

/// The suffix of a cron job's xid.
const CRON_SUFFIX: &str = ":cron";

/// The xid of a cron job (message `message_id`, ActiveMQ's `AMQ_SCHEDULED_CRON`) whose
/// next occurrence is `due_ms`: [`scheduled_xid`] and `:cron`. The expression is kept
/// in the row's headers; each occurrence stores a scheduled copy and moves the job on.
pub fn cron_xid(due_ms: i64, message_id: &str) -> String {
    format!("{}{CRON_SUFFIX}", scheduled_xid(due_ms, message_id))
}

/// Whether `xid` is a cron job's ([`cron_xid`]).
pub fn is_cron(xid: &str) -> bool {
    xid.starts_with(SCHEDULED_XID_PREFIX) && xid.ends_with(CRON_SUFFIX)
}

/// The repetition in a job's xid: `(period ms, firings left after the one due)`;
/// `None` for a message that fires once.
pub fn repetition_of(xid: &str) -> Option<(u64, u32)> {
    let (_, spec) = xid.rsplit_once(":every")?;
    let (period, left) = spec.split_once('x')?;
    Some((period.parse().ok()?, left.parse().ok()?))
}

/// The xid a repeating job moves to after the firing due in `xid` (`message_id` as
/// it was scheduled with): due one period later, one firing fewer. `None` when that
/// firing is its last (or `xid` is no job's): the job itself is then delivered.
pub fn next_firing(xid: &str) -> Option<String> {
    let (period, left) = repetition_of(xid)?;
    if left == 0 {
        return None;
    }
    let due = due_of(xid)?.saturating_add(period.min(i64::MAX as u64) as i64);
    let message_id = message_id_of(xid)?;
    Some(job_xid(due, &message_id, period, left - 1))
}

/// The message id in a job's xid (a repeating or a cron job's), as it was given to [`scheduled_xid`] (the padding
/// of its number removed).
pub fn message_id_of(xid: &str) -> Option<String> {
    let rest = xid.strip_prefix(SCHEDULED_XID_PREFIX)?.get(21..)?;
    let rest = rest.rsplit_once(":every").map_or(rest, |(id, _)| id);
    let rest = rest.strip_suffix(CRON_SUFFIX).unwrap_or(rest);
    Some(match rest.rsplit_once(':') {
        Some((prefix, n)) if n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty() => {
            let trimmed = n.trim_start_matches('0');
            format!(
                "{prefix}:{}",
                if trimmed.is_empty() { "0" } else { trimmed }
            )
        }
        _ => rest.to_string(),
    })
}

/// The due time (epoch ms) in a scheduled message's xid; `None` for another xid.
pub fn due_of(xid: &str) -> Option<i64> {
    xid.strip_prefix(SCHEDULED_XID_PREFIX)?
        .get(..20)?
        .parse()
        .ok()
}

/// Wakes the broker's scheduler after a destination stored a message to be released
/// later. Shared by the registry and its destinations; the broker sets what it does
/// once, at start ([`ScheduleWaker::set`]). Until then (and in an actor test without
/// a broker) waking does nothing.
#[derive(Clone, Default)]
pub struct ScheduleWaker(Arc<OnceLock<WakeFn>>);

/// What [`ScheduleWaker::wake`] calls: given the new message's due time, epoch ms.
type WakeFn = Box<dyn Fn(i64) + Send + Sync>;

impl ScheduleWaker {
    /// What [`ScheduleWaker::wake`] does from now on; a second call is ignored.
    pub fn set(&self, wake: impl Fn(i64) + Send + Sync + 'static) {
        let _ = self.0.set(Box::new(wake));
    }

    /// A message due at `due_ms` (epoch ms) was stored: wakes the scheduler if it
    /// sleeps until later (starts it when none runs).
    pub fn wake(&self, due_ms: i64) {
        if let Some(wake) = self.0.get() {
            wake(due_ms);
        }
    }
}

impl std::fmt::Debug for ScheduleWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ScheduleWaker")
            .field(&self.0.get().is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xids_sort_as_due_times_and_read_back() {
        let early = scheduled_xid(999, "ID:b");
        let late = scheduled_xid(1_000, "ID:a");
        assert!(early < late);
        assert_eq!(due_of(&early), Some(999));
        assert_eq!(due_of(&late), Some(1_000));
        // Due by 1,000 ms: below the bound for 1,001, not below the one for 1,000.
        assert!(late.as_str() < format!("{SCHEDULED_XID_PREFIX}{:020}", 1_001).as_str());
        assert!(late.as_str() >= format!("{SCHEDULED_XID_PREFIX}{:020}", 1_000).as_str());
        assert_eq!(due_of("stomp:1:tx"), None);
        // Same due time: in send order, not in the text order of the message ids.
        assert!(scheduled_xid(5, "ID:x:9") < scheduled_xid(5, "ID:x:10"));
        let held = redelivery_xid(1_000, "ID:a", 42);
        assert_eq!(due_of(&held), Some(1_000));
        assert!(held.ends_with(":42") && held < scheduled_xid(1_001, "ID:a"));
    }

    #[test]
    fn a_job_moves_one_period_on_and_fires_its_count() {
        let first = job_xid(1_000, "ID:ebb-1-2:7", 500, 2);
        assert_eq!(repetition_of(&first), Some((500, 2)));
        assert_eq!(repetition_of(&scheduled_xid(1_000, "ID:a:1")), None);
        let second = next_firing(&first).unwrap();
        assert_eq!(due_of(&second), Some(1_500));
        assert_eq!(second, job_xid(1_500, "ID:ebb-1-2:7", 500, 1));
        let third = next_firing(&second).unwrap();
        assert_eq!(
            (due_of(&third), repetition_of(&third)),
            (Some(2_000), Some((500, 0)))
        );
        assert_eq!(
            next_firing(&third),
            None,
            "the last firing delivers the job"
        );
        assert_eq!(next_firing(&scheduled_xid(1, "ID:a:1")), None);
        assert_eq!(message_id_of(&first).as_deref(), Some("ID:ebb-1-2:7"));
    }

    #[test]
    fn a_cron_job_names_its_due_time_and_message() {
        let xid = cron_xid(2_000, "ID:ebb-1-2:7");
        assert!(is_cron(&xid));
        assert!(!is_cron(&scheduled_xid(2_000, "ID:ebb-1-2:7")));
        assert_eq!(due_of(&xid), Some(2_000));
        assert_eq!(repetition_of(&xid), None);
        assert_eq!(
            next_firing(&xid),
            None,
            "a cron job moves by its expression"
        );
        assert_eq!(message_id_of(&xid).as_deref(), Some("ID:ebb-1-2:7"));
        assert!(xid < scheduled_xid(2_001, "ID:a"));
    }

    #[test]
    fn a_waker_does_what_it_was_set_to_once_set() {
        let waker = ScheduleWaker::default();
        waker.wake(0); // nothing set: nothing happens
        let woken = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let w = Arc::clone(&woken);
        waker.clone().set(move |due| {
            w.fetch_add(due as u32, std::sync::atomic::Ordering::Relaxed);
        });
        waker.wake(1);
        assert_eq!(woken.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}
