//! [`CommitFence`]: how rows the broker writes itself (a batch of composite sends'
//! copies, a transaction's COMMIT) take their places in each destination's publish
//! order.
//!
//! A destination releases its messages in publish order ([`super::PublishOrder`]), and
//! a cursor relies on store ids growing in that order: a durable subscription's live
//! cursor takes a message with an id at or below its position as one the store
//! already gave it, and passes it (it would be lost to that subscriber, and once the
//! mark passed it, for good). Rows a destination writes itself get their ids in its
//! order ([`crate::store_actor::StoreHandle`]'s `..._in_order` writes). Rows the
//! broker writes for several destinations in one store transaction are written by
//! none of them: without more, a send that reached a destination after that write
//! could be released before its messages (a lower id after a higher one), or one
//! written before it after them.
//!
//! A fence closes that gap. Before the broker writes, it raises a fence at each
//! destination concerned:
//! - [`FenceSends`] (the broker's committer of composite sends, `broker/composite.rs`
//!   in the `ebb` crate): the destination takes a place in publish order for each
//!   copy it is handed (a copy expired on arrival is counted and takes none) and
//!   answers the store row of each it keeps stored (none for one it keeps in memory
//!   only, as its [`super::DestinationActor::plan`] says). [`FencedStored`] with the write's ids
//!   fills the places (or, if the write failed, empties them).
//! - [`FenceCommit`] (a transaction's COMMIT): the destination takes a place for each
//!   message it holds prepared for the transaction; [`super::CommitPrepared`] fills
//!   them with the renumbered messages, [`super::AbortPrepared`] empties them.
//!
//! From the fence on, the destination holds back every row-creating write of its own
//! (new publishes and scheduled releases still take their places, after the fenced
//! ones). Once the broker's write is in the store actor's queue, [`LiftFence`] sends
//! the writes held behind that fence: they come after the broker's write, so their ids
//! are higher. Several fences may be up at once; a held write waits for every fence
//! raised before it. The broker raises the fences of one write at a time and queues
//! that write before it raises the next one's (its gate), so two writes fenced at one
//! destination get their ids in the order of their places.

use std::collections::HashMap;
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

/// A destination's fences (see the module documentation). Several may be up at
/// once (the committer's batch and a transaction's COMMIT), each lifted on its own: a
/// held write goes once every fence raised before it is lifted, so its id follows
/// every commit whose places come before its own.
#[derive(Default)]
pub struct CommitFence {
    /// The fences up or waiting for an earlier one, by number, in the order raised:
    /// `true` once lifted.
    raised: std::collections::VecDeque<(u64, bool)>,
    /// The number the next fence gets.
    next: u64,
    /// Held writes, in order, each with the number of the last fence raised before it.
    held: std::collections::VecDeque<(u64, Held)>,
    /// The committer's batches' copies in their places, by fence number.
    copies: HashMap<u64, Vec<Fenced>>,
    /// Places reserved for transactions whose commit the broker writes, by xid.
    places: HashMap<String, Vec<u64>>,
}

impl std::fmt::Debug for CommitFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitFence")
            .field("raised", &self.raised)
            .field("held", &self.held.len())
            .field("copies", &self.copies.len())
            .field("places", &self.places)
            .finish()
    }
}

impl CommitFence {
    /// Raises a fence: row-creating writes are held from now on until it (and every
    /// fence before it) is lifted. Answers its number.
    fn raise(&mut self) -> u64 {
        self.next += 1;
        self.raised.push_back((self.next, false));
        self.next
    }

    /// Lifts fence `fence` and answers the held writes free to go, in order.
    fn lift(&mut self, fence: u64) -> Vec<Held> {
        if let Some(entry) = self.raised.iter_mut().find(|(n, _)| *n == fence) {
            entry.1 = true;
        }
        while self.raised.front().is_some_and(|(_, lifted)| *lifted) {
            self.raised.pop_front();
        }
        // A write waits for every fence raised before it.
        let up = self.raised.front().map(|(n, _)| *n);
        let mut free = Vec::new();
        while let Some((last, _)) = self.held.front() {
            if up.is_some_and(|up| up <= *last) {
                break;
            }
            free.extend(self.held.pop_front().map(|(_, held)| held));
        }
        free
    }

    /// The places reserved for transaction `xid`, taken (none when it was not
    /// fenced).
    pub fn take_places(&mut self, xid: &str) -> Vec<u64> {
        self.places.remove(xid).unwrap_or_default()
    }

    /// Nothing is fenced, held or waiting in a place.
    pub fn is_idle(&self) -> bool {
        self.raised.is_empty()
            && self.held.is_empty()
            && self.copies.is_empty()
            && self.places.is_empty()
    }
}

impl DestinationCore {
    /// Sends a row-creating write (a publish's row, a scheduled release's commit) to
    /// the store actor in this destination's order: now, or, while a fence is up,
    /// once it is lifted ([`LiftFence`]).
    pub fn write_in_order(&mut self, op: WriteOp) -> WriteAnswer {
        match self.fence.raised.back() {
            Some(&(last, _)) => {
                let (answer, answered) = oneshot::channel();
                self.fence.held.push_back((last, (op, answer)));
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
/// the fence's number (for [`LiftFence`] and [`FencedStored`]) and one [`FencedCopy`]
/// per message, in order. Errors: [`ActorError::Retired`] (the destination is deleted
/// or asleep: send it to its successor).
#[derive(Message)]
#[rtype(result = "Result<(u64, Vec<FencedCopy>), ActorError>")]
pub struct FenceSends {
    pub messages: Vec<TopicMessage>,
}

/// The broker is about to write the COMMIT of transaction `xid`, which holds messages
/// here prepared: each takes its place in publish order now ([`super::CommitPrepared`]
/// fills them, [`super::AbortPrepared`] empties them), and row-creating writes are
/// held until [`LiftFence`]. Answers the fence's number.
#[derive(Message)]
#[rtype(result = "u64")]
pub struct FenceCommit {
    pub xid: String,
}

/// The write fence `fence` announced is in the store actor's queue (or will not be
/// written): the writes held behind it (and no other fence) go, in order.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LiftFence {
    pub fence: u64,
}

/// The answer to batch `fence`'s write: the ids of this destination's rows, in the
/// order of the [`FencedCopy::row`]s it answered, or the write's error (nothing of the
/// batch was stored). Its copies fill their places and are released in order.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FencedStored {
    pub fence: u64,
    pub ids: Result<Vec<i64>, ActorError>,
}

/// Handles [`FenceSends`].
pub fn fence_sends<A: DestinationActor>(
    act: &mut A,
    messages: Vec<TopicMessage>,
    ctx: &mut Context<A>,
) -> Result<(u64, Vec<FencedCopy>), ActorError> {
    if act.core().retired {
        return Err(act.core().retired_error());
    }
    let now = now_ms();
    let mut answer = Vec::with_capacity(messages.len());
    let mut copies = Vec::with_capacity(messages.len());
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
        copies.push(Fenced {
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
    let fence = act.core().fence.raise();
    act.core().fence.copies.insert(fence, copies);
    Ok((fence, answer))
}

/// Handles [`FenceCommit`].
pub fn fence_commit<A: DestinationActor>(act: &mut A, xid: String) -> u64 {
    let core = act.core();
    let places = (0..core.prepared.count(&xid))
        .map(|_| core.order.reserve())
        .collect();
    core.fence.places.insert(xid, places);
    core.fence.raise()
}

/// Handles [`LiftFence`].
pub fn lift_fence<A: DestinationActor>(act: &mut A, fence: u64) {
    let core = act.core();
    for (op, answer) in core.fence.lift(fence) {
        let write = core.store.write_in_order(op);
        actix::spawn(async move {
            let _ = answer.send(write.await);
        });
    }
}

/// Handles [`FencedStored`].
pub fn fenced_stored<A: DestinationActor>(
    act: &mut A,
    fence: u64,
    ids: Result<Vec<i64>, ActorError>,
    ctx: &mut Context<A>,
) {
    let core = act.core();
    let copies = core.fence.copies.remove(&fence).unwrap_or_default();
    let mut ids = ids.ok().map(Vec::into_iter);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn held(fence: &mut CommitFence, n: usize) {
        let last = fence.raised.back().expect("a fence is up").0;
        for _ in 0..n {
            let (answer, _) = oneshot::channel();
            fence
                .held
                .push_back((last, (WriteOp::Rollback { xid: String::new() }, answer)));
        }
    }

    #[test]
    fn a_held_write_waits_for_every_fence_raised_before_it() {
        let mut fence = CommitFence::default();
        let a = fence.raise();
        held(&mut fence, 1); // behind a
        let b = fence.raise();
        held(&mut fence, 2); // behind a and b
                             // b lifted first: nothing goes (a is still up, and before all three).
        assert_eq!(fence.lift(b).len(), 0);
        // a lifted: all three go, in order.
        assert_eq!(fence.lift(a).len(), 3);
        assert!(fence.is_idle());
    }

    #[test]
    fn writes_behind_an_earlier_fence_go_when_it_is_lifted() {
        let mut fence = CommitFence::default();
        let a = fence.raise();
        held(&mut fence, 2); // behind a only
        let b = fence.raise();
        held(&mut fence, 1); // behind a and b
        assert_eq!(fence.lift(a).len(), 2);
        assert_eq!(fence.lift(b).len(), 1);
        assert!(fence.is_idle());
        // No fence up: nothing held.
        let c = fence.raise();
        assert_eq!(fence.lift(c).len(), 0);
        assert!(fence.is_idle());
    }
}
