//! Idle destinations sleep: [`Doze`], [`Sleep`] and [`IdleWatch`].
//!
//! A destination that has been idle for its policy's `inactive_timeout_before_sleep`
//! (see [`crate::policy::Policy::inactive_timeout_before_sleep`]) stops its actor and
//! keeps only its key (in the registry) and its counters (its [`super::Published`]
//! entry): a few hundred bytes instead of the actor's kilobytes. The steps:
//!
//! 1. While it may sleep, the actor runs one interval timer of the timeout; an
//!    [`IdleWatch`] says when it has been idle at two ticks in a row with nothing
//!    counted between them (so it sleeps between one and two timeouts after the last
//!    thing that happened to it). It then sends [`Doze`] to the registry.
//! 2. The registry, unless the destination is being deleted or the broker shuts down,
//!    holds every request for it (as during a deletion) and asks the actor to
//!    [`Sleep`].
//! 3. The actor looks again: if anything arrived meanwhile (a consumer, a message, a
//!    write in flight) it refuses and stays awake. Otherwise it retires as a deleted
//!    destination does (publishes, subscriptions, dead letters, takes and scheduled
//!    releases that reach it from now on are answered
//!    [`crate::error::ActorError::Retired`], and the broker sends each again to its
//!    successor), stops its housekeeping, and answers once every write it queued
//!    has committed: the store then holds all it had.
//! 4. The registry marks it asleep, stops the actor and releases the held requests;
//!    the first of them starts a new actor, which reads the store as after a restart
//!    and carries on the counters from the entry. A persistent send to a sleeping
//!    queue does not start one: the registry writes it ([`crate::broker::PublishAsleep`]),
//!    and the next actor waits for those writes before anything else.
//!
//! Queues and topics sleep (a topic when its durable subscriptions are all offline);
//! each says when it is idle ([`Sleeper`]) and shares the rest ([`Drowsiness`],
//! [`sleep`], [`expire_due`], [`run_ended`]).
//!
//! **Expiry goes on while it sleeps.** A destination whose store holds messages that expire
//! may sleep too: its answer to [`Sleep`] says when to wake it ([`Slept::wake_at`]:
//! its earliest expiration, one indexed row, but no sooner than one
//! `expire_messages_period` from now, so it is woken for expiry at most once a
//! period, and a message expires at most a period late, as while awake). The registry
//! keeps one entry per such destination, ordered by that time, and wakes the due ones a
//! page at a time ([`ExpireDue`]): each runs its expiry run at once and, when still
//! idle, goes back to sleep as soon as the run ends; the next page is woken once the
//! page before has ended. So no number of sleeping destinations wakes at once, and a sleeping
//! destination costs no timer of its own.
//!
//! Nothing is lost or reordered: the old actor took nothing after it retired, every
//! write it took had committed before the new one started, and a producer's next send
//! waits for its place in the new actor's order as any send does.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;

use super::core::{now_ms, retire, DestinationActor};
use super::DestinationKey;
use crate::error::ActorError;

/// To the registry: destination `key` has been idle for its timeout and may sleep
/// (see the module documentation). The registry asks the destination's actor of the
/// moment, which refuses unless it is idle; ignored while it is being deleted or
/// goes to sleep already, and once the broker shuts down.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Doze {
    /// Which destination.
    pub key: DestinationKey,
}

/// From the registry: sleep now if still idle. Refused with [`ActorError::InUse`]
/// when something arrived since [`Doze`] (or the kind does not sleep); otherwise the
/// destination is retired and the answer comes once every write it queued has
/// committed.
#[derive(Message)]
#[rtype(result = "Result<Slept, ActorError>")]
pub struct Sleep;

/// The answer to [`Sleep`]: the destination is retired, its writes committed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Slept {
    /// When to wake it for expiry (epoch ms): its store's earliest expiration, no
    /// sooner than one `expire_messages_period` from now; `None` when nothing of it
    /// expires or its policy turns expiry off (`expire_messages_period = 0`).
    pub wake_at: Option<u64>,
}

impl Slept {
    /// The wake time for a destination whose earliest stored expiration is `next`
    /// (epoch ms; `None`: nothing expires), asleep at `now` (epoch ms) with expiry every
    /// `period` ms (0: off). See [`Slept::wake_at`].
    pub fn after(next: Option<i64>, now: u64, period: u64) -> Self {
        let wake_at = match next {
            Some(at) if period > 0 => Some(u64::try_from(at).unwrap_or(0).max(now + period)),
            _ => None,
        };
        Self { wake_at }
    }
}

/// From the registry to a destination it woke because its [`Slept::wake_at`] came: run an
/// expiry run now (as a housekeeping tick would), answer when the run is over, and
/// ask to sleep again at once ([`Doze`]) if still idle then.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ExpireDue;

/// Resolves once the registry's last write for a sleeping destination is done
/// (committed or failed; [`crate::broker::PublishAsleep`]): every earlier one is then
/// done too (the store actor applies its mailbox in order). An actor started for it
/// waits for this ([`crate::queue::QueueActor::after_writes`]).
pub type Written = futures::future::Shared<futures::channel::oneshot::Receiver<()>>;

/// When an idle destination asks to sleep: two ticks in a row that found it idle, with
/// the same activity count (anything it counts: messages in and out, browses, takes).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IdleWatch {
    /// The activity count at the last tick that found it idle.
    idle_at: Option<u64>,
}

impl IdleWatch {
    /// A tick: `idle` says whether the destination may sleep now, `activity` is its
    /// activity count. True when it should ask to sleep ([`Doze`]).
    pub fn tick(&mut self, idle: bool, activity: u64) -> bool {
        if !idle {
            self.idle_at = None;
            return false;
        }
        if self.idle_at == Some(activity) {
            return true;
        }
        self.idle_at = Some(activity);
        false
    }

    /// Whether the activity count is still the one the last idle tick saw (nothing
    /// happened since the tick that asked to sleep).
    pub fn still(&self, activity: u64) -> bool {
        self.idle_at == Some(activity)
    }

    /// Idle now with `activity`, without waiting for ticks: the destination asks to
    /// sleep at once ([`ExpireDue`]'s run ended), and [`Self::still`] holds until
    /// something else happens.
    pub fn settle(&mut self, activity: u64) {
        self.idle_at = Some(activity);
    }
}

/// What a destination that may sleep keeps for it: where it asks ([`Doze`]), its
/// [`IdleWatch`], and the [`ExpireDue`]s waiting for its expiry run.
#[derive(Default)]
pub struct Drowsiness {
    registry: Option<Recipient<Doze>>,
    idle: IdleWatch,
    /// Woken for expiry: asks to sleep again when the run ends.
    doze_after_run: bool,
    after_run: Vec<oneshot::Sender<()>>,
}

/// A destination that sleeps when idle: what the shared handlers below ask of it.
pub trait Sleeper: DestinationActor {
    /// Its [`Drowsiness`].
    fn drowsiness(&mut self) -> &mut Drowsiness;

    /// Whether it holds nothing a successor reading the store would not find, and
    /// waits for nothing (no consumer, nothing in memory, no write in flight, no
    /// expiry run under way).
    fn may_sleep(&self) -> bool;

    /// What it counts as activity (messages in and out, expiries, browses...): two
    /// idle ticks with the same count in a row let it ask to sleep.
    fn activity(&self) -> u64;
}

impl Drowsiness {
    /// Asks `registry` to let it sleep when idle; without one it never sleeps.
    pub fn new(registry: Option<Recipient<Doze>>) -> Self {
        Self {
            registry,
            ..Self::default()
        }
    }

    /// Starts the idle timer (one tick per `inactive_timeout_before_sleep`), unless the
    /// policy turns sleeping off (0) or there is no registry to ask.
    pub fn start<A: Sleeper>(act: &mut A, ctx: &mut Context<A>) {
        let timeout = act.core().policy.inactive_timeout_before_sleep;
        if timeout > 0 && act.drowsiness().registry.is_some() {
            ctx.run_interval(Duration::from_millis(timeout), idle_tick);
        }
    }

    fn doze(&self, key: &DestinationKey) {
        if let Some(registry) = &self.registry {
            registry.do_send(Doze { key: key.clone() });
        }
    }
}

/// The idle timer's tick: asks the registry to let it sleep after a whole period idle.
fn idle_tick<A: Sleeper>(act: &mut A, _: &mut Context<A>) {
    let (idle, activity) = (act.may_sleep(), act.activity());
    if act.drowsiness().idle.tick(idle, activity) {
        let key = act.core().key.clone();
        act.drowsiness().doze(&key);
    }
}

/// Handles [`Sleep`]: refused unless it is still idle with nothing counted since the
/// tick that asked; else it retires ([`retire`]) and answers, once its writes have
/// committed, when to wake it for expiry ([`Slept::wake_at`]: its store's earliest
/// expiration, read then, when expiry is armed and on).
pub fn sleep<A: Sleeper>(
    act: &mut A,
    ctx: &mut Context<A>,
) -> ResponseFuture<Result<Slept, ActorError>> {
    let activity = act.activity();
    if !act.may_sleep() || !act.drowsiness().idle.still(activity) {
        let container = act.core().container.clone();
        return Box::pin(async move { Err(ActorError::InUse(format!("{container} is not idle"))) });
    }
    let retired = retire(act, ctx);
    let core = act.core();
    let period = core.policy.expire_messages_period;
    let lookup = (period > 0 && core.schedule.expiry_armed())
        .then(|| (Arc::clone(core.store.store()), core.container.clone()));
    Box::pin(async move {
        retired.await?;
        let Some((store, container)) = lookup else {
            return Ok(Slept::default());
        };
        let next = store.next_expiration(&container).await.unwrap_or_else(|e| {
            // Woken a period from now to look again.
            tracing::warn!(destination = %container, error = %e, "cannot read the next expiration of a destination going to sleep");
            Some(0)
        });
        Ok(Slept::after(next, now_ms() as u64, period))
    })
}

/// Handles [`ExpireDue`]: an expiry run now (a housekeeping tick), answered when it
/// ends ([`run_ended`]).
pub fn expire_due<A: Sleeper>(act: &mut A, ctx: &mut Context<A>) -> ResponseFuture<()> {
    let (answer, answered) = oneshot::channel();
    let drowsy = act.drowsiness();
    drowsy.doze_after_run = true;
    drowsy.after_run.push(answer);
    act.tick(ctx);
    if !act.core().schedule.run_active() {
        // Nothing to expire after all (or a stop under way): over at once.
        run_ended(act);
    }
    Box::pin(async move {
        let _ = answered.await;
    })
}

/// An expiry run ended ([`DestinationActor::run_ended`]): answers the [`ExpireDue`]s
/// waiting for it; woken for it and idle, asks to sleep again at once.
pub fn run_ended<A: Sleeper>(act: &mut A) {
    let (idle, activity) = (act.may_sleep(), act.activity());
    let key = act.core().key.clone();
    let drowsy = act.drowsiness();
    for answer in drowsy.after_run.drain(..) {
        let _ = answer.send(());
    }
    if std::mem::take(&mut drowsy.doze_after_run) && idle {
        drowsy.idle.settle(activity);
        drowsy.doze(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_asks_after_two_idle_ticks_with_nothing_between() {
        let mut w = IdleWatch::default();
        assert!(!w.tick(true, 5), "the first idle tick only notes the count");
        assert!(w.tick(true, 5), "idle for a whole period");
        let mut w = IdleWatch::default();
        assert!(!w.tick(true, 5));
        assert!(!w.tick(true, 6), "something happened between the ticks");
        assert!(w.tick(true, 6));
        let mut w = IdleWatch::default();
        assert!(!w.tick(true, 5));
        assert!(!w.tick(false, 5), "busy at the tick");
        assert!(!w.tick(true, 5), "idle again: a whole period from now");
        assert!(w.tick(true, 5));
        let mut w = IdleWatch::default();
        w.settle(7);
        assert!(w.still(7));
        assert!(!w.still(8), "something happened since");
    }

    #[test]
    fn a_sleeper_is_woken_for_its_earliest_expiration_at_most_once_a_period() {
        let now = 1_000_000;
        assert_eq!(Slept::after(None, now, 30_000).wake_at, None);
        assert_eq!(
            Slept::after(Some(5_000_000), now, 30_000).wake_at,
            Some(5_000_000)
        );
        assert_eq!(
            Slept::after(Some(1_000_010), now, 30_000).wake_at,
            Some(1_030_000),
            "no sooner than a period from now"
        );
        assert_eq!(
            Slept::after(Some(10), now, 30_000).wake_at,
            Some(1_030_000),
            "already expired: a period from now"
        );
        assert_eq!(
            Slept::after(Some(5_000_000), now, 0).wake_at,
            None,
            "expiry off"
        );
    }
}
