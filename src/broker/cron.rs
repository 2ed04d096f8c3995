//! Cron schedules of scheduled messages (ActiveMQ's `AMQ_SCHEDULED_CRON`).
//!
//! A message sent with a [`CronSchedule`] ([`Message::cron`](struct@super::Message))
//! is one stored job that fires at every occurrence of its expression, for ever (until
//! it is cancelled, as ActiveMQ's cron jobs). Each firing stores a scheduled copy with
//! a message id of its own: due after the schedule's delay, and repeating as
//! [`Message::repeat`](struct@super::Message) says, so delay, period and repeat apply
//! per firing as in ActiveMQ. The job then moves to its next occurrence in the same
//! store transaction ([`ebb_store::WriteOp::Repeat`]), so a crash never loses or
//! doubles a firing.
//!
//! **Time.** Expressions have ActiveMQ's five fields (minute, hour, day of month,
//! month, day of week; names as `MON` and `JAN`, ranges, lists and steps), read in UTC;
//! a sixth field in front, seconds (`*/10 * * * * *`), is accepted as Quartz and
//! croner take it (ActiveMQ refuses it), and so are croner's aliases (`@daily`) and
//! its `L`, `W` and `#` (last day, nearest weekday, nth weekday).
//! Occurrences missed while no broker ran fire once, at start (as a cron daemon
//! catching up would flood the destination).
//!
//! **Stored.** The job's row keeps what a firing needs in its own headers, under
//! ActiveMQ's names (`AMQ_SCHEDULED_CRON`, `AMQ_SCHEDULED_DELAY`,
//! `AMQ_SCHEDULED_PERIOD`, `AMQ_SCHEDULED_REPEAT`); its xid ends in `:cron`. The
//! copies carry none of these headers, so a consumer that forwards one does not
//! schedule it again.

use std::time::Duration;

use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds, Year};

use crate::error::Error;

/// The header of a cron job's row that holds its expression (ActiveMQ's name).
pub const CRON_HEADER: &str = "AMQ_SCHEDULED_CRON";
/// The header of a cron job's row that holds each firing's delay, ms.
pub const DELAY_HEADER: &str = "AMQ_SCHEDULED_DELAY";
/// The header of a cron job's row that holds each firing's period, ms.
pub const PERIOD_HEADER: &str = "AMQ_SCHEDULED_PERIOD";
/// The header of a cron job's row that holds each firing's repeat count.
pub const REPEAT_HEADER: &str = "AMQ_SCHEDULED_REPEAT";

/// The scheduling headers: kept on a cron job's row, never on what it delivers.
pub const SCHEDULING_HEADERS: [&str; 4] = [CRON_HEADER, DELAY_HEADER, PERIOD_HEADER, REPEAT_HEADER];

/// A parsed cron expression and the delay each firing waits (see the module
/// documentation). Cheap to clone.
#[derive(Clone)]
pub struct CronSchedule {
    expression: String,
    /// Shared: a parsed pattern is some 500 bytes, and a message carries this.
    cron: std::sync::Arc<croner::Cron>,
    delay_ms: u64,
}

impl CronSchedule {
    /// Parses a cron expression of five fields (`*/5 * * * *`: every five minutes), or
    /// six with seconds first, read in UTC.
    ///
    /// Errors: [`Error::InvalidCron`] with the expression and what is wrong with it.
    pub fn parse(expression: &str) -> Result<Self, Error> {
        let parser = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build();
        let cron = parser
            .parse(expression.trim())
            .map_err(|e| Error::InvalidCron {
                expression: shown(expression),
                reason: e.to_string(),
            })?;
        let schedule = Self {
            expression: expression.trim().to_string(),
            cron: std::sync::Arc::new(cron),
            delay_ms: 0,
        };
        // An expression that never matches (31 February) is refused now, not found
        // out at the first firing.
        if schedule.next_after(0).is_none() {
            return Err(Error::InvalidCron {
                expression: shown(expression),
                reason: "it never occurs".into(),
            });
        }
        Ok(schedule)
    }

    /// Each firing's copy is due `delay` after the occurrence (ActiveMQ's
    /// `AMQ_SCHEDULED_DELAY` beside `AMQ_SCHEDULED_CRON`); ms precision.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay_ms = delay.as_millis().min(u64::MAX as u128) as u64;
        self
    }

    /// The expression, as given (trimmed).
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Each firing's delay, ms.
    pub fn delay_ms(&self) -> u64 {
        self.delay_ms
    }

    /// The first occurrence after `epoch_ms` (strictly later), epoch ms; `None` when
    /// there is none (beyond what chrono represents).
    pub fn next_after(&self, epoch_ms: i64) -> Option<i64> {
        let from: DateTime<Utc> = DateTime::from_timestamp_millis(epoch_ms)?;
        let next = self.cron.find_next_occurrence(&from, false).ok()?;
        Some(next.timestamp_millis())
    }

    /// The headers a job's row keeps for this schedule and `repeat` (applied per
    /// firing: `(period ms, count)`), as [`CronJob::from_headers`] reads them back.
    pub(super) fn job_headers(&self, repeat: Option<(u64, u32)>) -> Vec<(String, String)> {
        let mut headers = vec![(CRON_HEADER.to_string(), self.expression.clone())];
        if self.delay_ms > 0 {
            headers.push((DELAY_HEADER.to_string(), self.delay_ms.to_string()));
        }
        if let Some((period_ms, count)) = repeat.filter(|(_, count)| *count > 0) {
            headers.push((PERIOD_HEADER.to_string(), period_ms.to_string()));
            headers.push((REPEAT_HEADER.to_string(), count.to_string()));
        }
        headers
    }
}

/// Most characters of a refused expression an error repeats.
const SHOWN_CHARS: usize = 64;

/// `expression` as an error repeats it: at most [`SHOWN_CHARS`] characters, then `…`
/// (a client's header can be as long as the frame allows).
fn shown(expression: &str) -> String {
    match expression.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &expression[..cut]),
        None => expression.to_string(),
    }
}

impl std::fmt::Debug for CronSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronSchedule")
            .field("expression", &self.expression)
            .field("delay_ms", &self.delay_ms)
            .finish()
    }
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression && self.delay_ms == other.delay_ms
    }
}

impl std::str::FromStr for CronSchedule {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Self::parse(s)
    }
}

/// A cron job as its row's headers describe it ([`CronSchedule::job_headers`]).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct CronJob {
    pub schedule: CronSchedule,
    /// Each firing's repetition: `(period ms, firings after the first)`.
    pub repeat: Option<(u64, u32)>,
}

impl CronJob {
    /// Reads the job from its row's headers; `None` when they do not hold a valid one
    /// (a row written otherwise).
    pub fn from_headers(headers: &[(String, String)]) -> Option<Self> {
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        let mut schedule = CronSchedule::parse(get(CRON_HEADER)?).ok()?;
        schedule.delay_ms = get(DELAY_HEADER).map_or(Some(0), |v| v.parse().ok())?;
        let repeat = match (get(PERIOD_HEADER), get(REPEAT_HEADER)) {
            (Some(period), Some(count)) => Some((period.parse().ok()?, count.parse().ok()?)),
            _ => None,
        };
        Some(Self { schedule, repeat })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-05T10:07:30Z, epoch ms.
    const AT: i64 = 1_796_465_250_000;

    #[test]
    fn occurrences_follow_the_expression_in_utc() {
        let every5 = CronSchedule::parse("*/5 * * * *").unwrap();
        // 10:07:30 → 10:10:00, then 10:15:00.
        let first = every5.next_after(AT).unwrap();
        assert_eq!(first, AT + 150_000);
        assert_eq!(every5.next_after(first).unwrap(), first + 300_000);
        let daily = CronSchedule::parse("30 2 * * MON").unwrap();
        let next = daily.next_after(AT).unwrap();
        let at = DateTime::from_timestamp_millis(next).unwrap();
        assert_eq!(at.format("%a %H:%M:%S").to_string(), "Mon 02:30:00");
        assert!(next > AT && next - AT <= 7 * 86_400_000);
        let seconds = CronSchedule::parse("*/10 * * * * *").unwrap();
        assert_eq!(seconds.next_after(AT).unwrap(), AT + 10_000);
    }

    #[test]
    fn bad_expressions_are_refused_with_the_reason() {
        let long = "9".repeat(5_000);
        match CronSchedule::parse(&long) {
            Err(Error::InvalidCron { expression, .. }) => {
                assert_eq!(expression, format!("{}…", &long[..SHOWN_CHARS]));
            }
            other => panic!("a 5,000-digit expression was taken: {other:?}"),
        }
        for bad in [
            "",
            "* * * *",
            "61 * * * *",
            "0 0 31 2 *",
            "* * * * * * *",
            "hello",
        ] {
            match CronSchedule::parse(bad) {
                Err(Error::InvalidCron { expression, reason }) => {
                    assert_eq!(expression, bad);
                    assert!(!reason.is_empty());
                }
                other => panic!("{bad:?} was taken: {other:?}"),
            }
        }
    }

    proptest::proptest! {
        /// Whatever a client sends as `AMQ_SCHEDULED_CRON`, parsing answers (an error
        /// or a schedule), never panics, and a schedule it accepts has a next
        /// occurrence later than the time asked.
        #[test]
        fn any_expression_parses_or_is_refused(
            text in "[0-9*/,\\-A-Z?LW# @]{0,40}",
            at in 0i64..4_000_000_000_000,
        ) {
            if let Ok(schedule) = CronSchedule::parse(&text) {
                if let Some(next) = schedule.next_after(at) {
                    proptest::prop_assert!(next > at);
                }
            }
        }
    }

    #[test]
    fn odd_expressions_get_an_answer() {
        // croner's extensions are taken (aliases, last day, nth weekday, nearest
        // weekday); what cannot occur or does not parse is refused.
        for (text, taken) in [
            ("@yearly", true),
            ("0 0 L * *", true),
            ("0 0 * * 5L", true),
            ("0 0 ? * MON#2", true),
            ("0 0 31W * *", true),
            ("* * * * * * ", true),
            ("@reboot", false),
            ("L * * * *", false),
            ("*/0 * * * *", false),
            ("1-0 * * * *", false),
            ("9999999999999999999 * * * *", false),
            ("\u{0}", false),
            ("é * * * *", false),
        ] {
            assert_eq!(CronSchedule::parse(text).is_ok(), taken, "{text:?}");
        }
    }

    #[test]
    fn a_job_reads_back_from_its_headers() {
        let schedule = CronSchedule::parse("0 * * * *")
            .unwrap()
            .delay(Duration::from_millis(1_500));
        let repeat = Some((100, 3));
        let mut headers = vec![("user".to_string(), "x".to_string())];
        headers.extend(schedule.job_headers(repeat));
        let job = CronJob::from_headers(&headers).unwrap();
        assert_eq!(job.schedule, schedule);
        assert_eq!(job.repeat, repeat);
        assert_eq!(CronJob::from_headers(&headers[..1]), None);
    }
}
