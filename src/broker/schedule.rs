//! Scheduled delivery (ActiveMQ's `AMQ_SCHEDULED_DELAY`): a message sent with a due
//! time ([`Message::deliver_at`]) is stored at once, invisible, and released to its
//! destination when it is due.
//!
//! **In the store, never in memory.** A scheduled message is a prepared message (the
//! store's transactions: invisible, holding no mark back) whose xid names its due time:
//! `sched:<due, epoch ms, 20 digits>:<message id>` ([`ebb_actors::scheduled`], where a
//! repeating job and a redelivery held back by a queue's back-off add their suffixes).
//! Xids sort as their due times do, so the messages due now are one range of the
//! store's xid index
//! ([`ebb_store::MessageStore::read_prepared_range`]), read a page of at most
//! [`SCHEDULER_PAGE`] rows at a time, oldest first, `LIMIT` in SQL. Nothing is held for
//! a message before it is due: the broker keeps no list, the destinations no entry.
//!
//! **Repeats.** A repeating message ([`Message::repeat`](struct@Message)) is one job:
//! each firing but the last is a copy with a message id of its own, added in the store
//! transaction that moves the job to its next due time ([`ebb_store::WriteOp::Repeat`]).
//!
//! **Released exactly once.** A due message is handed to its destination with its
//! body ([`ReleaseScheduled`]), which commits it in the store as any prepared
//! transaction is (one statement makes it visible with a new, highest id), in its own
//! publish order, and dispatches it as if just published. A crash before the commit leaves it scheduled; after it, it is a stored
//! message like any other (a queue's or a durable subscription's backlog). So a
//! message is never delivered twice nor lost, and messages that fell due while the
//! broker was down are released at start, in due order, a page at a time.
//!
//! **The scheduler** is one task on the broker's actix system: it releases the due
//! page, goes on at once after a full page, else sleeps until the next due time (one
//! more bounded read) or until a new scheduled message wakes it. When nothing is
//! scheduled it ends: no timer, no reads. A scheduled send starts it again, and so
//! does the broker's start (to find what is already due). [`Broker::shutdown`] lets a
//! page in flight finish first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::cron::{CronJob, SCHEDULING_HEADERS};
use super::message::{Message, PendingSend};
use super::Broker;
use crate::error::Error;
use ebb_actors::destination::{now_ms, DueMessage, PublishTicket, ReleaseScheduled};
use ebb_actors::messages::{PublishOutcome, TopicMessage};
pub use ebb_actors::scheduled::SCHEDULED_XID_PREFIX;
use ebb_actors::scheduled::{
    cron_xid, due_of, is_cron, job_xid, message_id_of, next_firing, repetition_of, scheduled_xid,
};
use ebb_actors::DestinationKey;
use ebb_store::NewMessage;

/// The store row of `outgoing` for `key`, prepared under `xid` (invisible until a
/// commit of that xid): a scheduled message's, or a held send's
/// ([`Broker::hold_send`]).
pub(super) fn prepared_row(
    key: &DestinationKey,
    outgoing: &TopicMessage,
    xid: String,
) -> NewMessage {
    NewMessage {
        container: key.container(),
        message_id: outgoing.message_id.clone(),
        expiration: outgoing.expiration,
        priority: outgoing.priority,
        xid: Some(xid),
        payload: Arc::clone(&outgoing.payload),
        indexed_headers: key.capabilities().indexed_headers,
        last_value: None,
    }
}

/// Most scheduled messages released in one page (rows read and committed), as
/// ActiveMQ's `maxExpirePageSize` default bounds an expiry page.
pub const SCHEDULER_PAGE: u32 = 400;

/// Most scheduled messages [`Broker::schedule_backlog`] counts (one bounded range of
/// the xid index): a count of this many means "at least".
pub const SCHEDULE_COUNT_LIMIT: u32 = 1_000_000;

/// How long the sleeping scheduler waits at most before it looks whether the broker is
/// still in use (ms): it holds a handle to the broker only while scheduled messages
/// wait, and lets the broker go once nobody else holds it.
const CHECK_EVERY_MS: i64 = 1_000;

/// The shortest period a repeating message may have (`AMQ_SCHEDULED_PERIOD`, ms): one
/// job fires at most 10 times a second. A shorter one is refused
/// ([`Error::InvalidValue`]), never stretched. ActiveMQ sets no minimum; with a 1 ms
/// period, 20 jobs of 10 kB stored 271 MiB in 15 s.
pub const MIN_SCHEDULED_PERIOD_MS: u64 = 100;

/// The scheduler's state, shared by the broker's clones.
pub(super) struct Scheduler {
    /// A scheduler task runs (at most one does).
    running: AtomicBool,
    /// Wakes the sleeping task: a message was scheduled, or the broker stops.
    wake: tokio::sync::Notify,
    /// The due time the task sleeps until (epoch ms); `i64::MAX` while it is awake
    /// (then every wake-up counts: it may have read the schedule before the new
    /// message was stored). A message due later than this wakes nothing.
    sleeping_until: AtomicI64,
    /// Held while a page is released; [`Broker::shutdown`] takes it to wait for one.
    page: tokio::sync::Mutex<()>,
    /// Messages released since start.
    released: AtomicU64,
}

impl Default for Scheduler {
    fn default() -> Self {
        Self {
            running: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            sleeping_until: AtomicI64::new(i64::MAX),
            page: tokio::sync::Mutex::new(()),
            released: AtomicU64::new(0),
        }
    }
}

/// One scheduled message ([`Broker::scheduled`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ScheduledMessage {
    /// Names it for [`Broker::cancel_scheduled`] and as a page's cursor (its store
    /// transaction: `sched:<due>:<message id>`).
    pub id: String,
    /// Its destination's key (`queue://jobs`).
    pub destination: String,
    /// When it is due, epoch ms.
    pub due_ms: i64,
    /// The broker-assigned message id it will be delivered with.
    pub message_id: String,
    /// 0..=9.
    pub priority: u8,
    /// When it expires, epoch ms; 0 = never.
    pub expiration: i64,
    /// Its body's size, bytes.
    pub body_bytes: usize,
    /// A repeating message: ms between firings (0: it fires once).
    pub period_ms: u64,
    /// A repeating message: firings after the one due (0: this is its last, or it
    /// fires once). For a cron job: the repeats of each firing.
    pub repeats_left: u32,
    /// A cron job (ActiveMQ's `AMQ_SCHEDULED_CRON`): its expression; it fires at
    /// `due_ms` and at every later occurrence until cancelled. `None` for others.
    pub cron: Option<String>,
}

/// The scheduler's backlog ([`Broker::schedule_backlog`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScheduleBacklog {
    /// Messages waiting in the store for their due time (scheduled sends and
    /// redeliveries held back), counted up to [`SCHEDULE_COUNT_LIMIT`].
    pub scheduled: u64,
    /// `scheduled` reached [`SCHEDULE_COUNT_LIMIT`]: at least that many wait.
    pub scheduled_at_least: bool,
    /// The earliest due time, epoch ms; `None` when nothing is scheduled. In the past
    /// when the scheduler is behind.
    pub next_due_ms: Option<i64>,
    /// Messages released since the broker started.
    pub released_total: u64,
}

/// A page of [`ScheduledMessage`]s, in due order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ScheduledPage {
    /// The page.
    pub messages: Vec<ScheduledMessage>,
    /// The `after` of the next page; `None` at the end.
    pub next: Option<String>,
}

impl Broker {
    /// Stores `message` for `key`, due at `due_ms` (epoch ms), and wakes the
    /// scheduler once it is stored. The store write is queued when this returns (in
    /// the caller's order); the [`PendingSend`] answers after its commit.
    ///
    /// Errors: [`Error::Unsupported`] for a non-persistent message (a scheduled
    /// message lives in the store) and for a kind that keeps one message per key
    /// (a last-value queue); as [`Broker::send`] otherwise.
    pub(super) async fn send_scheduled(
        &self,
        key: &DestinationKey,
        message: Message,
        due_ms: i64,
    ) -> Result<PendingSend, Error> {
        let (new, outgoing) = self.scheduled_row(key, message, due_ms, false)?;
        let message_id = outgoing.message_id.clone();
        // Queued now, in the caller's order; the PendingSend answers after the
        // commit, so a producer's scheduled sends share the store's group commit.
        let write = self.store.add_in_order(new);
        let (ticket, answer) = PublishTicket::waiting();
        let broker = self.clone();
        self.runtime.arbiter().spawn(async move {
            let stored = write.await.map(|id| PublishOutcome {
                id: Some(id),
                expired_on_arrival: false,
            });
            if stored.is_ok() {
                broker.wake_scheduler_for(due_ms);
            }
            drop(outgoing);
            let _ = answer.send(stored);
        });
        Ok(PendingSend::new(message_id, ticket))
    }

    /// The store row of `message` for `key`, due at `due_ms` (epoch ms), and the
    /// message it was made from (which holds its memory charge: in a transaction,
    /// until the commit).
    ///
    /// Errors: [`Error::Unsupported`] for a non-persistent message (a scheduled
    /// message lives in the store) and for a kind that keeps one message per key
    /// (a last-value queue); [`Error::InvalidPriority`].
    pub(super) fn scheduled_row(
        &self,
        key: &DestinationKey,
        message: Message,
        due_ms: i64,
        in_transaction: bool,
    ) -> Result<(NewMessage, TopicMessage), Error> {
        if !message.persistent {
            return Err(Error::Unsupported(
                "a scheduled message must be persistent (persistent:true): it waits in the store",
            ));
        }
        if key.capabilities().last_value_header.is_some() {
            return Err(Error::Unsupported(
                "scheduled delivery to a last-value queue is not supported",
            ));
        }
        let mut message = message;
        let repeat = message.repeat.filter(|r| r.count > 0);
        if repeat.is_some_and(|r| r.period_ms < MIN_SCHEDULED_PERIOD_MS) {
            return Err(Error::InvalidValue(
                "a repeating message needs a period of 100 ms or more (AMQ_SCHEDULED_PERIOD)",
            ));
        }
        let cron = message.cron.take();
        if let Some(cron) = &cron {
            if message.deliver_at.is_some() {
                return Err(Error::InvalidValue(
                    "a cron message is delayed per firing (CronSchedule::delay, AMQ_SCHEDULED_DELAY), not by a due time of its own",
                ));
            }
            // The job's row keeps its schedule in its headers, under ActiveMQ's names.
            message
                .headers
                .retain(|(name, _)| !SCHEDULING_HEADERS.contains(&name.as_str()));
            message
                .headers
                .extend(cron.job_headers(repeat.map(|r| (r.period_ms, r.count))));
        }
        let outgoing = self.outgoing(key, message, in_transaction)?;
        let xid = match (cron, repeat) {
            (Some(_), _) => cron_xid(due_ms, &outgoing.message_id),
            (None, Some(r)) => job_xid(due_ms, &outgoing.message_id, r.period_ms, r.count),
            (None, None) => scheduled_xid(due_ms, &outgoing.message_id),
        };
        Ok((prepared_row(key, &outgoing, xid), outgoing))
    }

    /// The scheduled messages, in due order, at most `limit` (1 to
    /// [`SCHEDULER_PAGE`]) from the one after `after` (a [`ScheduledMessage::id`];
    /// `None`: from the first): one range of the store's xid index. `next` is the id
    /// to pass for the following page, `None` at the end.
    ///
    /// Errors: [`Error::ShuttingDown`], or the store's.
    pub async fn scheduled(&self, after: Option<&str>, limit: u32) -> Result<ScheduledPage, Error> {
        self.refuse_if_shut_down()?;
        let limit = limit.clamp(1, SCHEDULER_PAGE);
        let from = after.unwrap_or(SCHEDULED_XID_PREFIX);
        // `after` itself is read again (from is inclusive) and skipped; one more row
        // than the page says whether another page follows.
        let extra = if after.is_some() { 2 } else { 1 };
        let rows = self
            .store()
            .read_prepared_range(from, "sched;", limit + extra)
            .await?;
        let mut messages: Vec<ScheduledMessage> = rows
            .into_iter()
            .filter(|row| Some(row.xid.as_str()) != after)
            .filter_map(|row| {
                let job = is_cron(&row.xid)
                    .then(|| CronJob::from_headers(&row.message.payload.headers))
                    .flatten();
                let (period_ms, repeats_left) = match &job {
                    Some(job) => job.repeat.unwrap_or((0, 0)),
                    None => repetition_of(&row.xid).unwrap_or((0, 0)),
                };
                Some(ScheduledMessage {
                    cron: job.map(|job| job.schedule.expression().to_string()),
                    due_ms: due_of(&row.xid)?,
                    destination: row.message.container.clone(),
                    message_id: row.message.message_id.clone(),
                    priority: row.message.priority,
                    expiration: row.message.expiration,
                    body_bytes: row.message.payload.body.len(),
                    period_ms,
                    repeats_left,
                    id: row.xid,
                })
            })
            .collect();
        let next = if messages.len() > limit as usize {
            messages.truncate(limit as usize);
            messages.last().map(|m| m.id.clone())
        } else {
            None
        };
        Ok(ScheduledPage { messages, next })
    }

    /// Cancels scheduled message `id` (a [`ScheduledMessage::id`]): it is deleted and
    /// never delivered. `false` when no such message waits (a wrong id, or one
    /// released or cancelled already).
    ///
    /// Errors: [`Error::ShuttingDown`], or the store's.
    pub async fn cancel_scheduled(&self, id: &str) -> Result<bool, Error> {
        self.refuse_if_shut_down()?;
        if !id.starts_with(SCHEDULED_XID_PREFIX) || due_of(id).is_none() {
            return Ok(false);
        }
        Ok(self.store.rollback(id.to_string()).await? > 0)
    }

    /// Cancels every scheduled message of `destination` (and every redelivery held
    /// back for it): walks the schedule in pages of [`SCHEDULER_PAGE`] rows, in due
    /// order, deleting that destination's. Returns how many it cancelled. Messages
    /// scheduled while it runs, behind its position, are left.
    ///
    /// Errors: [`Error::InvalidDestination`], [`Error::ShuttingDown`], or the store's
    /// (what it deleted before stays deleted).
    pub async fn cancel_scheduled_to(
        &self,
        destination: impl super::ToDestination,
    ) -> Result<u64, Error> {
        self.cancel_scheduled_upto(destination, i64::MAX).await
    }

    /// [`Broker::cancel_scheduled_to`] of the messages with a store id up to `upto`
    /// only: those scheduled before a deletion began, not those sent to the new
    /// destination of the same name while it ran.
    pub(crate) async fn cancel_scheduled_upto(
        &self,
        destination: impl super::ToDestination,
        upto: i64,
    ) -> Result<u64, Error> {
        self.refuse_if_shut_down()?;
        let container = destination.to_destination()?.container();
        let mut cancelled = 0;
        let mut after: Option<String> = None;
        loop {
            let from = after.as_deref().unwrap_or(SCHEDULED_XID_PREFIX);
            let extra = u32::from(after.is_some());
            let rows = self
                .store()
                .read_prepared_range(from, "sched;", SCHEDULER_PAGE + extra)
                .await?;
            let full = rows.len() == (SCHEDULER_PAGE + extra) as usize;
            let last = rows.last().map(|row| row.xid.clone());
            for row in rows {
                if row.message.container == container
                    && row.message.id <= upto
                    && Some(&row.xid) != after.as_ref()
                {
                    cancelled += self.store.rollback(row.xid).await?;
                }
            }
            match last {
                Some(last) if full => after = Some(last),
                _ => return Ok(cancelled),
            }
        }
    }

    /// The scheduler's backlog: how many messages wait (one bounded count of the xid
    /// index's range), the next due time (one row) and how many were released.
    ///
    /// Errors: the store's.
    pub async fn schedule_backlog(&self) -> Result<ScheduleBacklog, Error> {
        let scheduled = self
            .store()
            .count_prepared_range(SCHEDULED_XID_PREFIX, "sched;", SCHEDULE_COUNT_LIMIT)
            .await?;
        Ok(ScheduleBacklog {
            scheduled,
            scheduled_at_least: scheduled >= u64::from(SCHEDULE_COUNT_LIMIT),
            next_due_ms: self.next_due().await?,
            released_total: self.scheduled_released(),
        })
    }

    /// Scheduled messages released to their destinations since the broker started.
    pub fn scheduled_released(&self) -> u64 {
        self.scheduler.released.load(Ordering::Relaxed)
    }

    /// At start: starts the scheduler when messages are scheduled (some may have
    /// fallen due while no broker ran). One read of one row; nothing when none is.
    pub(super) async fn resume_schedule(&self) -> Result<(), Error> {
        if self.next_due().await?.is_some() {
            self.wake_scheduler();
        }
        Ok(())
    }

    /// Wakes the scheduler, starting it when none runs.
    pub(super) fn wake_scheduler(&self) {
        self.wake_scheduler_for(i64::MIN);
    }

    /// A message due at `due_ms` (epoch ms) was stored: wakes the scheduler if it
    /// sleeps until later (one due later than that changes nothing), starting it when
    /// none runs.
    pub(super) fn wake_scheduler_for(&self, due_ms: i64) {
        if self.scheduler.running.swap(true, Ordering::AcqRel) {
            if due_ms < self.scheduler.sleeping_until.load(Ordering::Acquire) {
                self.scheduler.wake.notify_one();
            }
            return;
        }
        let broker = self.clone();
        self.runtime
            .arbiter()
            .spawn(async move { broker.run_scheduler().await });
    }

    /// Waits for a page of due messages being released to finish and holds off the
    /// next until the guard is dropped: a destination's deletion holds it while it
    /// deletes the destination and cancels its scheduled messages, so that no release
    /// in between makes the destination again.
    pub(crate) async fn hold_releases(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.scheduler.page.lock().await
    }

    /// Waits for a page being released to finish, and stops the scheduler: a step of
    /// [`Broker::shutdown`] (called after the shut-down flag is set).
    pub(super) async fn stop_scheduler(&self) {
        self.scheduler.wake.notify_one();
        drop(self.scheduler.page.lock().await);
    }

    /// The scheduler's loop (see the module documentation).
    async fn run_scheduler(self) {
        let scheduler = Arc::clone(&self.scheduler);
        loop {
            let page = scheduler.page.lock().await;
            if self.is_shut_down() {
                break;
            }
            let released = self.release_due().await;
            drop(page);
            let next = match released {
                Ok((read, done)) if done < read => {
                    // Some stayed scheduled (a destination or the store failed): again
                    // in a while, not at once.
                    Ok(Some(now_ms() + CHECK_EVERY_MS))
                }
                Ok((read, _)) if read == SCHEDULER_PAGE as usize => {
                    // A full page: the next at once (after others had their turn).
                    tokio::task::yield_now().await;
                    continue;
                }
                Ok(_) => self.next_due().await,
                Err(e) => Err(e),
            };
            let due = match next {
                Ok(Some(due)) => due,
                Ok(None) => {
                    // Nothing scheduled: stop. A message scheduled since the read
                    // found the flag still set and only notified: look once more.
                    scheduler.running.store(false, Ordering::Release);
                    match self.next_due().await {
                        Ok(Some(_)) if !scheduler.running.swap(true, Ordering::AcqRel) => continue,
                        _ => return,
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "scheduler: reading the schedule failed; trying again in 1 s");
                    now_ms() + CHECK_EVERY_MS
                }
            };
            if !self.sleep_until(due).await {
                break;
            }
        }
        scheduler.running.store(false, Ordering::Release);
    }

    /// Sleeps until `due` (epoch ms) or a wake-up; `false` when the broker is shut
    /// down or nobody else holds it any more (the scheduler then lets it go).
    async fn sleep_until(&self, due: i64) -> bool {
        let sleeping_until = &self.scheduler.sleeping_until;
        sleeping_until.store(due, Ordering::Release);
        let awake = self.sleep_until_woken(due).await;
        sleeping_until.store(i64::MAX, Ordering::Release);
        awake
    }

    /// [`Self::sleep_until`]'s wait.
    async fn sleep_until_woken(&self, due: i64) -> bool {
        loop {
            let left = due - now_ms();
            if left <= 0 {
                return true;
            }
            let nap = Duration::from_millis(left.min(CHECK_EVERY_MS) as u64);
            let woken = tokio::select! {
                _ = tokio::time::sleep(nap) => false,
                _ = self.scheduler.wake.notified() => true,
            };
            // Nobody else holds the broker: let it go (its thread ends with it).
            if self.is_shut_down() || Arc::strong_count(&self.runtime) <= 1 {
                return false;
            }
            if woken {
                return true;
            }
        }
    }

    /// One page: the due messages (at most [`SCHEDULER_PAGE`], oldest first) are handed
    /// to their destinations, which commit and release them. Returns how many were
    /// read and how many released.
    async fn release_due(&self) -> Result<(usize, usize), Error> {
        let upto = format!("{SCHEDULED_XID_PREFIX}{:020}", now_ms().saturating_add(1));
        let rows = self
            .store()
            .read_prepared_range(SCHEDULED_XID_PREFIX, &upto, SCHEDULER_PAGE)
            .await?;
        // Each destination commits its own, in its publish order (so the new ids follow
        // the order its cursors see), and answers how many it released.
        let mut by_destination: Vec<(DestinationKey, Vec<DueMessage>)> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let now = now_ms();
        let mut fired = 0;
        for row in &rows {
            let container = &row.message.container;
            let Ok(key) = DestinationKey::from_container(container) else {
                tracing::warn!(%container, "scheduler: a due message names no destination");
                continue;
            };
            // A firing of a repeating or cron job stores a new message: it waits while
            // the store (or the destination's memory) is at its limit, as a producer's
            // send does; the job stays due and fires once there is room.
            let fires = is_cron(&row.xid) || next_firing(&row.xid).is_some();
            if fires && self.full_usage(&key, true).is_some() {
                tracing::debug!(xid = %row.xid, "scheduler: a job's firing waits for space");
                continue;
            }
            if is_cron(&row.xid) {
                if let Some(job) = CronJob::from_headers(&row.message.payload.headers) {
                    fired += usize::from(self.fire_cron(&key, row, job).await);
                    continue;
                }
                // Not a job this broker wrote: delivered once as it is, never lost.
                tracing::warn!(xid = %row.xid, "scheduler: a cron job without a readable schedule is delivered once");
            }
            if let Some(due) = due_of(&row.xid) {
                let late_ms = (now - due).max(0);
                metrics::histogram!(crate::metrics::names::SCHEDULED_LATENESS_SECONDS)
                    .record(late_ms as f64 / 1000.0);
            }
            let at = *index.entry(container.clone()).or_insert_with(|| {
                by_destination.push((key, Vec::new()));
                by_destination.len() - 1
            });
            let message = TopicMessage::from_stored(&row.message);
            let next = next_firing(&row.xid).map(|next| (next, self.next_message_id()));
            by_destination[at].1.push(DueMessage {
                xid: row.xid.clone(),
                message,
                next,
            });
        }
        let mut released_all = 0;
        for (key, releases) in by_destination {
            let asked = releases.len();
            let released = self
                .ask_live(
                    &key,
                    || ReleaseScheduled {
                        releases: releases.clone(),
                    },
                    super::is_retired,
                )
                .await
                .and_then(|r| r.map_err(Error::from));
            let n = match released {
                Ok(n) => n,
                Err(e) => {
                    // Not committed: they stay scheduled and come again in a later page.
                    tracing::warn!(destination = %key, error = %e, "scheduler: due messages not released");
                    0
                }
            };
            if n < asked {
                tracing::warn!(destination = %key, released = n, due = asked, "scheduler: some due messages stay scheduled");
            }
            released_all += n;
            self.scheduler
                .released
                .fetch_add(n as u64, Ordering::Relaxed);
            metrics::counter!(crate::metrics::names::SCHEDULED_RELEASED_TOTAL).increment(n as u64);
        }
        Ok((rows.len(), released_all + fired))
    }

    /// One occurrence of cron job `row` (see [`super::cron`]): in one store transaction
    /// the job moves to its next occurrence after now (occurrences missed while no
    /// broker ran fire once) and a copy is stored scheduled, due after the schedule's
    /// delay and repeating as the job says; the scheduler releases the copy as any
    /// scheduled message. Returns whether it fired (`false`: the store failed and the
    /// job stays due, or it was cancelled meanwhile).
    async fn fire_cron(
        &self,
        key: &DestinationKey,
        row: &ebb_store::PreparedMessage,
        job: CronJob,
    ) -> bool {
        let Some(due) = due_of(&row.xid) else {
            return false;
        };
        let job_id = message_id_of(&row.xid).unwrap_or_else(|| row.message.message_id.clone());
        let next = job
            .schedule
            .next_after(due.max(now_ms()))
            .unwrap_or(i64::MAX);
        let copy_id = self.next_message_id();
        let fire_at = due.saturating_add(job.schedule.delay_ms().min(i64::MAX as u64) as i64);
        let copy_xid = match job.repeat.filter(|(_, count)| *count > 0) {
            Some((period_ms, count)) => job_xid(fire_at, &copy_id, period_ms, count),
            None => scheduled_xid(fire_at, &copy_id),
        };
        let stored = &row.message;
        let headers = stored
            .payload
            .headers
            .iter()
            .filter(|(name, _)| !SCHEDULING_HEADERS.contains(&name.as_str()))
            .cloned()
            .collect();
        let copy = NewMessage {
            container: stored.container.clone(),
            message_id: copy_id,
            expiration: stored.expiration,
            priority: stored.priority,
            xid: Some(copy_xid),
            payload: Arc::new(ebb_store::Payload {
                timestamp_ms: now_ms(),
                headers,
                body: stored.payload.body.clone(),
            }),
            indexed_headers: key.capabilities().indexed_headers,
            last_value: None,
        };
        let moved = self
            .store
            .repeat_in_order(row.xid.clone(), cron_xid(next, &job_id), copy)
            .await;
        match moved {
            Ok(copy) => copy.is_some(),
            Err(e) => {
                tracing::warn!(xid = %row.xid, error = %e, "scheduler: a cron job did not fire; it stays due");
                false
            }
        }
    }

    /// The due time of the next scheduled message (one row of the xid index).
    async fn next_due(&self) -> Result<Option<i64>, Error> {
        // Every scheduled xid is below `sched;` (`;` follows `:`).
        let first = self
            .store()
            .read_prepared_range(SCHEDULED_XID_PREFIX, "sched;", 1)
            .await?;
        Ok(first.first().and_then(|row| due_of(&row.xid)))
    }
}
