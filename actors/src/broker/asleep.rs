//! Sends to a sleeping queue, written without waking it ([`PublishAsleep`]).
//!
//! A sleeping destination has no consumer and nothing in memory, so a persistent
//! message sent to it becomes a store row and nothing else. For a kind whose
//! capabilities say so ([`crate::kinds::Capabilities::stored_while_asleep`]: a queue),
//! the registry writes that row itself, through the store actor, and counts it on the
//! destination's stats entry; the destination stays asleep. A send that finds no such
//! destination makes it, asleep: a backlog built up while nobody consumes costs its
//! rows, its key and its counters, never a running actor.
//!
//! **Order.** The registry queues these writes in the store actor's mailbox in the
//! order the sends reach it, so their ids follow that order. An actor started for the
//! destination later (a consumer, a browse, an expiry wake, a deletion) first waits
//! until the registry's writes for it have committed, before it handles anything or
//! reads the store, and then carries on the counters: what it reads holds them all,
//! and its own writes get higher ids. A send that reaches the registry while the
//! destination goes to sleep, or is being deleted, waits for that to end, as any
//! request does.
//!
//! **What still wakes it**: a non-persistent message (it lives in memory), a send to a
//! queue whose policy gives it a memory limit of its own (it caches what is sent to it
//! while alone, and producer flow control counts that), a message
//! in a transaction or a composite send (the destination fences those), a scheduled
//! release, a dead letter, a message expired on arrival (the destination counts it),
//! and a send to a missing destination that a wildcard subscription watches (it
//! attaches to the new actor). A message with an expiration moves the sleeping
//! destination's expiry wake earlier when it expires first
//! ([`crate::destination::sleep::Slept::after`]); a queue made asleep reads its
//! earliest stored expiration once (rows kept from before a restart), as going to
//! sleep does.

use actix::prelude::*;
use futures::FutureExt;

use super::{BrokerActor, DestinationAddr, Slot};
use crate::destination::sleep::{Slept, Written};
use crate::destination::{now_ms, stored_row, DestinationKey, PublishTicket};
use crate::error::ActorError;
use crate::message::{PublishOutcome, TopicMessage};

/// Publishes `message` to destination `key` as [`crate::destination::Publish`] would,
/// without waking it when it sleeps (see the module documentation). Answers
/// [`AsleepPublish::Stored`] when the registry wrote it, or [`AsleepPublish::Awake`]
/// with the destination's actor (started now if it had to be): the caller publishes
/// to it as usual. Errors: those of [`super::GetDestination`].
#[derive(Message)]
#[rtype(result = "Result<AsleepPublish, ActorError>")]
pub struct PublishAsleep {
    /// Which destination.
    pub key: DestinationKey,
    /// The message, checked and charged as for any publish.
    pub message: TopicMessage,
}

/// The answer to [`PublishAsleep`].
pub enum AsleepPublish {
    /// Written without waking the destination: resolves after the commit, with the
    /// message's store id.
    Stored(PublishTicket),
    /// The destination's actor runs (or had to be started): publish to it.
    Awake(DestinationAddr),
}

impl Handler<PublishAsleep> for BrokerActor {
    type Result = ResponseActFuture<Self, Result<AsleepPublish, ActorError>>;

    fn handle(&mut self, msg: PublishAsleep, ctx: &mut Context<Self>) -> Self::Result {
        self.publish_asleep(msg.key, msg.message, ctx)
    }
}

impl BrokerActor {
    /// [`PublishAsleep`], once a sleep or deletion of `key` under way has ended.
    fn publish_asleep(
        &mut self,
        key: DestinationKey,
        message: TopicMessage,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<AsleepPublish, ActorError>> {
        match self.settled(&key) {
            None => Box::pin(fut::ready(self.publish_now(key, message, ctx))),
            Some(settled) => Box::pin(
                settled
                    .into_actor(self)
                    .then(move |(), act, ctx| act.publish_asleep(key, message, ctx)),
            ),
        }
    }

    /// Whether a send of `message` to `key` is written without waking it: a persistent
    /// message, not expired, for a kind stored while asleep that sleeps (or is missing,
    /// and no wildcard subscription watches it), has no memory limit of its own and
    /// may sleep (`inactive_timeout_before_sleep` above 0), while the broker runs.
    fn stays_asleep(&mut self, key: &DestinationKey, message: &TopicMessage) -> bool {
        if self.shutting_down
            || !key.capabilities().stored_while_asleep
            || !message.persistent
            || message.is_expired(now_ms())
        {
            return false;
        }
        let found = match self.destinations.get(key) {
            Some(Slot::Asleep(_)) => true,
            Some(Slot::Running(_)) => false,
            None => {
                self.watchers.retain(|w| w.recipient.connected());
                !self.watchers.iter().any(|w| w.pattern.matches(key))
            }
        };
        // A queue with a memory limit of its own caches what is sent to it while alone,
        // against that limit (producer flow control): its actor takes the message. One
        // whose policy turns sleeping off is never made asleep.
        let policy = self.policies.policy_for(key);
        found && policy.memory_limit == 0 && policy.inactive_timeout_before_sleep > 0
    }

    fn publish_now(
        &mut self,
        key: DestinationKey,
        message: TopicMessage,
        ctx: &mut Context<Self>,
    ) -> Result<AsleepPublish, ActorError> {
        if !self.stays_asleep(&key, &message) {
            return self.destination(key, ctx).map(AsleepPublish::Awake);
        }
        if !self.destinations.contains_key(&key) {
            self.make_asleep(&key, ctx);
        }
        if message.expiration > 0 {
            self.wake_for_expiry(&key, message.expiration, ctx);
        }
        let write = self.store.add_in_order(stored_row(&key, &message, None));
        let published = self.board.entry(&key);
        let (ticket, answer) = PublishTicket::waiting();
        let (done, written) = futures::channel::oneshot::channel();
        self.asleep_write_seq += 1;
        let seq = self.asleep_write_seq;
        self.asleep_writes
            .insert(key.clone(), (seq, written.shared()));
        // A task of its own, not a future in the registry's context (which actix polls
        // on every wake-up of the registry, as `crate::destination::Completions`
        // explains); it tells the registry when it is done.
        let registry = ctx.address();
        actix::spawn(async move {
            let outcome = write.await.map(|id| {
                published.count_enqueued(1);
                PublishOutcome {
                    id: Some(id),
                    expired_on_arrival: false,
                }
            });
            // Charged to memory until stored, as on the destination's own path.
            drop(message);
            let _ = answer.send(outcome);
            let _ = done.send(());
            registry.do_send(AsleepWritten { key, seq });
        });
        Ok(AsleepPublish::Stored(ticket))
    }

    /// Makes destination `key`, unknown until now, asleep: listed and counted as any
    /// destination, with no actor; its expiry wake is read from the store.
    pub(super) fn make_asleep(&mut self, key: &DestinationKey, ctx: &mut Context<Self>) {
        self.board.started_asleep(key);
        self.events
            .emit(|| crate::events::Event::DestinationAdded(key.clone()));
        self.destinations.insert(key.clone(), Slot::Asleep(None));
        self.read_expiry_wake(key, ctx);
        tracing::debug!(destination = %key, "destination made asleep");
    }

    /// Moves sleeping `key`'s expiry wake to when a message expiring at `expiration`
    /// (epoch ms) is due, if that is earlier than the wake it has.
    pub(super) fn wake_for_expiry(
        &mut self,
        key: &DestinationKey,
        expiration: i64,
        ctx: &mut Context<Self>,
    ) {
        let period = self.policies.policy_for(key).expire_messages_period;
        let now = now_ms().max(0) as u64;
        let Some(at) = Slept::after(Some(expiration), now, period).wake_at else {
            return;
        };
        let Some(Slot::Asleep(wake)) = self.destinations.get_mut(key) else {
            return;
        };
        match *wake {
            Some(old) if old <= at => return,
            Some(old) => {
                self.expiry_wakes.remove(&(old, key.clone()));
            }
            None => {}
        }
        *wake = Some(at);
        self.expiry_wakes.insert((at, key.clone()));
        self.arm_wake_timer(ctx);
    }

    /// Reads when a destination made asleep must be woken for the expiring rows its
    /// store may hold already (from before a restart: one indexed row, as a
    /// [`crate::destination::sleep::Sleep`] answer does), unless its policy turns
    /// expiry off. A task of its own; the answer comes back as [`WakeForExpiry`].
    fn read_expiry_wake(&mut self, key: &DestinationKey, ctx: &mut Context<Self>) {
        if self.policies.policy_for(key).expire_messages_period == 0 {
            return;
        }
        let store = std::sync::Arc::clone(self.store.store());
        let (registry, key) = (ctx.address(), key.clone());
        actix::spawn(async move {
            match store.next_expiration(&key.container()).await {
                Ok(Some(at)) => registry.do_send(WakeForExpiry { key, at }),
                Ok(None) => {}
                Err(e) => tracing::warn!(destination = %key, error = %e,
                    "cannot read whether a sleeping queue's messages expire; they expire once it wakes"),
            }
        });
    }

    /// What an actor started for `key` now must wait for: the registry's writes for it
    /// still in flight.
    pub(super) fn asleep_writes_of(&self, key: &DestinationKey) -> Option<Written> {
        self.asleep_writes
            .get(key)
            .map(|(_, written)| written.clone())
    }
}

/// A registry write for sleeping `key` ([`PublishAsleep`]) is done: its entry goes
/// unless a later write replaced it.
#[derive(Message)]
#[rtype(result = "()")]
struct AsleepWritten {
    key: DestinationKey,
    seq: u64,
}

impl Handler<AsleepWritten> for BrokerActor {
    type Result = ();

    fn handle(&mut self, msg: AsleepWritten, _: &mut Context<Self>) {
        if self
            .asleep_writes
            .get(&msg.key)
            .is_some_and(|(seq, _)| *seq == msg.seq)
        {
            self.asleep_writes.remove(&msg.key);
        }
    }
}

/// Sleeping `key`'s store holds a message that expires at `at` (epoch ms): wake it
/// for it, if it still sleeps and is not woken sooner.
#[derive(Message)]
#[rtype(result = "()")]
struct WakeForExpiry {
    key: DestinationKey,
    at: i64,
}

impl Handler<WakeForExpiry> for BrokerActor {
    type Result = ();

    fn handle(&mut self, msg: WakeForExpiry, ctx: &mut Context<Self>) {
        self.wake_for_expiry(&msg.key, msg.at, ctx);
    }
}
