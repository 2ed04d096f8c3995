//! What a producer sends ([`Message`]) and what a send answers ([`SendReceipt`], [`PendingSend`]).

use super::cron::CronSchedule;
use crate::error::Error;
use ebb_actors::destination::PublishTicket;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// When a message expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expiration {
    /// Never (JMS expiration 0).
    #[default]
    Never,
    /// At this absolute time, epoch ms (STOMP's `expires` header).
    At(i64),
    /// This many ms after the broker accepts it (JMS time to live).
    Ttl(u64),
}

/// A message to send.
#[derive(Debug, Clone)]
pub struct Message {
    /// The body, any bytes: a shared buffer, never copied on its way to the store and
    /// to subscribers.
    pub body: bytes::Bytes,
    /// User headers, in order.
    pub headers: Vec<(String, String)>,
    /// Stored so that durable subscriptions get it after a restart (default true, as
    /// JMS). A non-persistent message reaches only subscriptions that are online.
    pub persistent: bool,
    /// 0..=9, default 4.
    pub priority: u8,
    /// When it expires (default [`Expiration::Never`]): an expired message is never
    /// delivered, and housekeeping removes it (or moves it to the dead-letter queue
    /// with `dead_letter_expired`).
    pub expiration: Expiration,
    /// The connection that sends it, as the caller numbers its connections: a
    /// subscription with [`SubscribeOptions::no_local`] of the same number does not
    /// receive it (JMS `noLocal`). `None` by default.
    pub origin: Option<u64>,
    /// When to deliver it, epoch ms (ActiveMQ's scheduled delivery; STOMP's
    /// `AMQ_SCHEDULED_DELAY` sets it to the SEND's time plus the delay). `None`, or a
    /// time not in the future: at once. A scheduled message waits in the store, not
    /// in memory, and survives restarts; it must be persistent
    /// ([`Error::Unsupported`](crate::Error::Unsupported) otherwise). In a
    /// transaction it is scheduled only if the transaction commits.
    pub deliver_at: Option<i64>,
    /// Delivered again and again after its first delivery (ActiveMQ's
    /// `AMQ_SCHEDULED_PERIOD` and `AMQ_SCHEDULED_REPEAT`): one stored job, each
    /// firing a copy with a message id of its own. `None`: once. A repeating message
    /// is scheduled (its first firing at [`Message::deliver_at`], or at once).
    pub repeat: Option<Repeat>,
    /// Fired at every occurrence of a cron expression, until cancelled (ActiveMQ's
    /// `AMQ_SCHEDULED_CRON`; see [`CronSchedule`]): one stored job, each firing a
    /// scheduled copy due after [`CronSchedule::delay`], repeating as
    /// [`Message::repeat`](struct@Message) says. `None`: no cron. With a cron,
    /// [`Message::deliver_at`](struct@Message) must be `None` (the delay is the
    /// schedule's): [`Error::InvalidValue`](crate::Error::InvalidValue) otherwise.
    pub cron: Option<CronSchedule>,
}

/// How a scheduled message repeats ([`Message::repeat`](struct@Message)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeat {
    /// Between two firings, ms (at least [`MIN_SCHEDULED_PERIOD_MS`](crate::MIN_SCHEDULED_PERIOD_MS):
    /// a shorter one is refused).
    pub period_ms: u64,
    /// Firings after the first (ActiveMQ's `AMQ_SCHEDULED_REPEAT`): it is delivered
    /// `count + 1` times in all.
    pub count: u32,
}

impl Message {
    /// The bytes it is charged in memory: its body and its headers' names and values.
    pub(crate) fn charged_bytes(&self) -> usize {
        self.body.len()
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }

    /// A persistent message with priority 4 that never expires.
    pub fn new(body: impl Into<bytes::Bytes>) -> Self {
        Self {
            body: body.into(),
            headers: Vec::new(),
            persistent: true,
            priority: ebb_store::DEFAULT_PRIORITY,
            expiration: Expiration::Never,
            origin: None,
            deliver_at: None,
            repeat: None,
            cron: None,
        }
    }

    /// Names the connection that sends it (see [`Message::origin`]).
    pub fn from_connection(mut self, connection: u64) -> Self {
        self.origin = Some(connection);
        self
    }

    /// Stored (`true`, the default) or kept in memory only (see
    /// [`Message::persistent`](struct@Message)).
    pub fn persistent(mut self, persistent: bool) -> Self {
        self.persistent = persistent;
        self
    }

    /// 0..=9; [`Broker::send`] refuses others.
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// Expires `ttl` after the broker accepts it (ms precision).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.expiration = Expiration::Ttl(ttl.as_millis() as u64);
        self
    }

    /// Expires at `epoch_ms` (ms since the Unix epoch; one already past is expired on
    /// arrival: counted, never delivered). 0 or less means never, as STOMP's
    /// `expires:0`.
    pub fn expires_at(mut self, epoch_ms: i64) -> Self {
        self.expiration = Expiration::At(epoch_ms);
        self
    }

    /// Delivers it at `epoch_ms` (scheduled delivery, [`Message::deliver_at`]).
    pub fn deliver_at(mut self, epoch_ms: i64) -> Self {
        self.deliver_at = Some(epoch_ms);
        self
    }

    /// Delivers it `delay` from now (ActiveMQ's `AMQ_SCHEDULED_DELAY`).
    pub fn delay(self, delay: Duration) -> Self {
        let now = ebb_actors::destination::now_ms();
        self.deliver_at(now.saturating_add(delay.as_millis().min(i64::MAX as u128) as i64))
    }

    /// Delivers it `count` more times after its first delivery, every `period`
    /// (ActiveMQ's `AMQ_SCHEDULED_PERIOD` and `AMQ_SCHEDULED_REPEAT`; see
    /// [`Message::repeat`](struct@Message)). [`Broker::send`] refuses a period under
    /// 1 ms with a count above 0.
    pub fn repeat(mut self, period: Duration, count: u32) -> Self {
        self.repeat = Some(Repeat {
            period_ms: period.as_millis().min(u64::MAX as u128) as u64,
            count,
        });
        self
    }

    /// Fires it at every occurrence of `schedule` (see [`Message::cron`](struct@Message)).
    pub fn cron(mut self, schedule: CronSchedule) -> Self {
        self.cron = Some(schedule);
        self
    }

    /// Adds a user header (delivered in the order added; a selector can test it).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What [`Broker::send`] answers once the message is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendReceipt {
    /// The message id the broker gave it.
    pub message_id: String,
    /// Its store id, when it was stored (persistent, with a durable subscription).
    pub store_id: Option<i64>,
    /// It had expired before it arrived: counted as expired, not delivered.
    pub expired_on_arrival: bool,
}

/// A send that has its place in its destination's order ([`Broker::start_send`]) and
/// waits to be accepted. Await it for the [`SendReceipt`]: after the commit, for a
/// message that is stored. Dropping it does not cancel the send.
///
/// Errors: [`Error::Actor`] when the store write failed (nothing was stored) or the
/// broker shut down first.
#[must_use = "a send is confirmed only when its PendingSend resolves"]
pub struct PendingSend {
    pub(super) message_id: String,
    pub(super) ticket: PublishTicket,
    /// The other copies of a send routed to several destinations one by one (a
    /// virtual topic's groups): it resolves once every copy is accepted.
    pub(super) others: Vec<PublishTicket>,
    /// A send committed to several destinations at once (a composite): its commit's
    /// answer, from the broker's committer ([`super::composite`]); `Ok(expired on
    /// arrival)`. Awaited instead of `ticket` when set.
    pub(super) committed: Option<tokio::sync::oneshot::Receiver<Result<bool, Error>>>,
}

impl PendingSend {
    /// A send waiting for `ticket`.
    pub(super) fn new(message_id: String, ticket: PublishTicket) -> Self {
        Self {
            message_id,
            ticket,
            others: Vec::new(),
            committed: None,
        }
    }

    /// A send to several destinations in one store transaction whose commit answers
    /// through `committed` (`Ok(expired on arrival)`; a dropped sender answers
    /// [`Error::ShuttingDown`]).
    pub(super) fn committed_later(
        message_id: String,
        committed: tokio::sync::oneshot::Receiver<Result<bool, Error>>,
    ) -> Self {
        Self {
            committed: Some(committed),
            ..Self::accepted(message_id, false)
        }
    }

    /// One send of several copies (`copies`, at least one, sharing the first's message
    /// id): it resolves once every copy has, with the first's store id.
    pub(super) fn all(copies: Vec<PendingSend>) -> Self {
        let mut copies = copies.into_iter();
        let mut first = copies.next().expect("at least one copy");
        for copy in copies {
            first.others.push(copy.ticket);
            first.others.extend(copy.others);
        }
        first
    }

    /// A send already accepted: not stored (`id` none), `expired_on_arrival` as given.
    pub(super) fn accepted(message_id: String, expired_on_arrival: bool) -> Self {
        Self::new(
            message_id,
            PublishTicket::ready(Ok(ebb_actors::messages::PublishOutcome {
                id: None,
                expired_on_arrival,
            })),
        )
    }

    /// The message id the broker gave the message.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }
}

impl std::future::Future for PendingSend {
    type Output = Result<SendReceipt, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Every other copy first (each resolves once; taken out as it does), so the
        // receipt comes when all are accepted.
        while let Some(last) = self.others.last_mut() {
            let outcome = std::task::ready!(Pin::new(last).poll(cx));
            self.others.pop();
            outcome?;
        }
        if let Some(committed) = &mut self.committed {
            let expired = std::task::ready!(Pin::new(committed).poll(cx))
                .unwrap_or(Err(Error::ShuttingDown))?;
            self.committed = None;
            return Poll::Ready(Ok(SendReceipt {
                message_id: std::mem::take(&mut self.message_id),
                store_id: None,
                expired_on_arrival: expired,
            }));
        }
        let outcome = std::task::ready!(Pin::new(&mut self.ticket).poll(cx))?;
        Poll::Ready(Ok(SendReceipt {
            message_id: std::mem::take(&mut self.message_id),
            store_id: outcome.id,
            expired_on_arrival: outcome.expired_on_arrival,
        }))
    }
}
