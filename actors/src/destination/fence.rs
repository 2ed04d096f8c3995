//! [`CommitFence`]: how rows the broker writes for several destinations at once (a
//! composite send's copies, in one store transaction) take their places in each
//! destination's publish order.
//!
//! A destination releases its messages in publish order ([`super::PublishOrder`]), and
//! a cursor relies on store ids growing in that order: a durable subscription's live
//! cursor takes a message with an id at or below its position as one the store
//! already gave it, and passes it. Rows a destination writes itself get their ids in
//! its order ([`crate::store_actor::StoreHandle`]'s `..._in_order` writes). Rows the
//! broker's committer writes for several destinations in one store transaction are
//! not written by any of them; without more, a send that reached a destination after
//! that write could be released before its messages (a lower id after a higher one),
//! or one written before it after them.
//!
//! The fence closes that gap. Before the committer writes a batch, it hands each
//! destination its copies ([`FenceSends`]): the destination takes a place in publish
//! order for each (a copy expired on arrival is counted and takes none), answers the
//! store row of each it keeps stored (none for one it keeps in memory only, as its
//! [`super::DestinationActor::plan`] says), and holds back every row-creating write
//! from then on (new publishes and scheduled releases still take their places, after
//! the fenced ones). Once the batch's write is in the store actor's queue, [`LiftFence`]
//! sends the held writes in order: they come after the batch, so their ids are higher.
//! When the batch's answer comes ([`FencedStored`]), the copies fill their places
//! with their ids (or, if the write failed, nothing does) and are released in order.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use actix::prelude::*;
use ebb_store::{NewMessage, WriteOp, WriteOutcome};
use tokio::sync::oneshot;

use super::{now_ms, schedule, DestinationActor, DestinationCore};
use crate::error::ActorError;
use crate::message::TopicMessage;

/// A row-creating write's answer.
pub type WriteAnswer = Pin<Box<dyn Future<Output = Result<WriteOutcome, ActorError>>>>;

/// A held write and where its answer goes.
type Held = (WriteOp, oneshot::Sender<Result<WriteOutcome, ActorError>>);

/// A copy waiting in its place for the batch's answer.
#[derive(Debug)]
struct Fenced {
    place: u64,
    message: TopicMessage,
    /// Its row is in the batch (else it is kept in memory only).
    stored: bool,
    /// Counted as an expiring write in flight.
    expiring: bool,
}

/// A destination's fence (see the module documentation): at most one batch at a
/// time, as the committer writes one batch at a time.
#[derive(Default)]
pub struct CommitFence {
    /// Fenced: the row-creating writes since, in order.
    held: Option<Vec<Held>>,
    /// The batch's copies in their places, in order.
    copies: Vec<Fenced>,
}

impl std::fmt::Debug for CommitFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitFence")
            .field("held", &self.held.as_ref().map(Vec::len))
            .field("copies", &self.copies.len())
            .finish()
    }
}

impl DestinationCore {
    /// Sends a row-creating write (a publish's row, a scheduled release's commit) to
    /// the store actor in this destination's order: now, or, while a fence is up,
    /// when it is lifted ([`LiftFence`]).
    pub fn write_in_order(&mut self, op: WriteOp) -> WriteAnswer {
        match &mut self.fence.held {
            Some(held) => {
                let (answer, answered) = oneshot::channel();
                held.push((op, answer));
                Box::pin(async move { answered.await.unwrap_or(Err(ActorError::Closed)) })
            }
            None => Box::pin(self.store.write_in_order(op)),
        }
    }
}

/// What a destination answers for one copy of [`FenceSends`].
#[derive(Debug)]
pub struct FencedCopy {
    /// The row to write for it, in the batch; `None`: kept in memory only (or expired).
    pub row: Option<NewMessage>,
    /// It had expired before it arrived: counted as expired, takes no place.
    pub expired_on_arrival: bool,
}

/// The broker's committer is about to write a batch of composite sends in one store
/// transaction: these are this destination's copies, in send order. Each takes its
/// place in publish order; row-creating writes are held until [`LiftFence`]. Answers
/// one [`FencedCopy`] per message, in order. Errors: [`ActorError::Retired`] (the
/// destination is deleted or asleep: send it to its successor).
#[derive(Message)]
#[rtype(result = "Result<Vec<FencedCopy>, ActorError>")]
pub struct FenceSends {
    pub messages: Vec<TopicMessage>,
}

/// The batch [`FenceSends`] announced is in the store actor's queue (or will not be
/// written): send the held writes, in order.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LiftFence;

/// The batch's answer: the ids of this destination's rows, in the order of the
/// [`FencedCopy::row`]s it answered, or the write's error (nothing of the batch was
/// stored). Its copies fill their places and are released in order.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FencedStored {
    pub ids: Result<Vec<i64>, ActorError>,
}

/// Handles [`FenceSends`].
pub fn fence_sends<A: DestinationActor>(
    act: &mut A,
    messages: Vec<TopicMessage>,
    ctx: &mut Context<A>,
) -> Result<Vec<FencedCopy>, ActorError> {
    if act.core().retired {
        return Err(act.core().retired_error());
    }
    let now = now_ms();
    let mut answer = Vec::with_capacity(messages.len());
    for message in messages {
        if message.is_expired(now) {
            act.core().counters_mut().enqueued += 1;
            act.core().count_expired(1);
            answer.push(FencedCopy {
                row: None,
                expired_on_arrival: true,
            });
            continue;
        }
        let plan = act.plan(&message);
        if plan.arm_expiry {
            act.core().schedule.arm();
            schedule(act, ctx);
        }
        let core = act.core();
        let place = core.order.reserve();
        let expiring = plan.store && plan.arm_expiry;
        if expiring {
            core.schedule.expiring_write_started();
        }
        let row = plan.store.then(|| core.new_message(&message, None));
        core.fence.copies.push(Fenced {
            place,
            message,
            stored: plan.store,
            expiring,
        });
        answer.push(FencedCopy {
            row,
            expired_on_arrival: false,
        });
    }
    act.core().fence.held.get_or_insert_with(Vec::new);
    Ok(answer)
}

/// Handles [`LiftFence`].
pub fn lift_fence<A: DestinationActor>(act: &mut A) {
    let core = act.core();
    for (op, answer) in core.fence.held.take().unwrap_or_default() {
        let write = core.store.write_in_order(op);
        actix::spawn(async move {
            let _ = answer.send(write.await);
        });
    }
}

/// Handles [`FencedStored`].
pub fn fenced_stored<A: DestinationActor>(
    act: &mut A,
    ids: Result<Vec<i64>, ActorError>,
    ctx: &mut Context<A>,
) {
    let core = act.core();
    let copies = std::mem::take(&mut core.fence.copies);
    let mut ids = match ids {
        Ok(ids) => Some(ids.into_iter()),
        Err(_) => None,
    };
    let mut released = Vec::new();
    for Fenced {
        place,
        message,
        stored,
        expiring,
    } in copies
    {
        if expiring {
            core.schedule.expiring_write_finished();
        }
        let kept = match (&mut ids, stored) {
            (None, _) => None,
            (Some(_), false) => Some(message),
            (Some(ids), true) => ids.next().map(|id| TopicMessage {
                id: Some(id),
                ..message
            }),
        };
        if kept.is_some() {
            core.counters_mut().enqueued += 1;
        }
        released.extend(core.order.fill(place, kept.map(Arc::new)));
    }
    act.release(released, ctx);
}
