//! Composite sends, pipelined: the broker's committer.
//!
//! A send that ends at several destinations, all or none (a composite, named as
//! `/queue/a,/queue/b` or configured, or a virtual topic's with `transacted_send`:
//! [`super::routing`]), is checked and charged at once (flow control, priority,
//! temporary destinations) and handed to the committer with its copies, one per
//! destination. Its sender goes on at once (a STOMP connection reads its next frame);
//! the send's [`PendingSend`] resolves once it is stored and released, or refused.
//!
//! **The committer** is one task per broker, running while sends wait for it. It takes
//! the waiting sends in the order they were handed over, at most [`COMMIT_BATCH`] at a
//! time, and writes them in **one** store transaction: every copy's row is added, or
//! none is, so each send stays all-or-none and many share one commit (as plain sends
//! share the store actor's group commit). Around that write each destination is
//! fenced (`ebb_actors::destination::FenceSends`): it takes a place in its publish
//! order for each of its copies and holds its own row-creating writes until the batch
//! is in the store actor's queue, so that store ids grow in the order it releases
//! messages, which its cursors rely on. When the write answers, each destination
//! fills the places and releases the copies in order (a copy it keeps in memory only,
//! as a non-persistent one, is released then too); if it failed, none is, and every
//! send of the batch gets the error.
//!
//! **Order.** Two composite sends keep their order at every destination they share. A
//! later send of another kind to one of its destinations (a plain send, or a
//! transaction's COMMIT) waits until the composite sends before it to that destination
//! are released ([`Committer::before_send_to`]): a producer that sends a composite and
//! then a plain message to the same queue has them delivered in that order, as it
//! would without the pipeline.
//!
//! **Bounded.** At most [`COMPOSITE_WINDOW`] composite sends wait for the committer at
//! a time; the next one waits for room (its sender is held, as by producer flow
//! control). What the waiting copies hold in memory is charged to their destinations.
//!
//! **Shutdown.** [`super::Broker::shutdown`] first refuses new composite sends and
//! waits for those under way to be stored (or refused), then stops the destinations.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ebb_actors::messages::{FenceSends, FencedStored, LiftFence, TopicMessage};
use ebb_actors::ActorError;
use ebb_actors::DestinationKey;
use ebb_store::WriteOp;
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};

use super::message::PendingSend;
use super::Broker;
use crate::error::Error;

/// Most composite sends waiting for their commit at a time
/// ([`crate::Broker::start_send_to_each_with`]; the next waits for room before it is
/// handed over).
pub const COMPOSITE_WINDOW: usize = 256;

/// Most composite sends committed in one store transaction.
pub const COMMIT_BATCH: usize = 128;

/// A composite send handed to the committer.
pub(super) struct CompositeSend {
    /// Its copies, one per destination, in send order.
    pub(super) copies: Vec<(DestinationKey, TopicMessage)>,
    /// Its room in the window, held until it is stored or refused.
    pub(super) _room: OwnedSemaphorePermit,
}

/// A send in the committer's queue.
struct Job {
    /// Its number, in the order sends were handed over (from 1).
    seq: u64,
    send: CompositeSend,
    answer: oneshot::Sender<Result<bool, Error>>,
}

/// See the module documentation.
pub(super) struct Committer {
    state: parking_lot::Mutex<State>,
    /// Destinations in `State::open` (read without the lock by every plain send).
    open_count: AtomicUsize,
    /// The highest number whose send is released (or refused), and every one before.
    done: watch::Sender<u64>,
    room: Arc<Semaphore>,
    /// Held by whoever fences destinations for a write of the broker's own (the
    /// committer's batch, a transaction's COMMIT) from its first fence until the
    /// write is in the store actor's queue: two such writes fenced at one destination
    /// get their ids in the order their places were reserved.
    pub(super) gate: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// The committer task runs.
    running: bool,
    /// The number the last send handed over got.
    last: u64,
    /// By destination: the number of the last composite send to it that is not
    /// released yet.
    open: HashMap<DestinationKey, u64>,
}

impl Default for Committer {
    fn default() -> Self {
        Self {
            state: parking_lot::Mutex::default(),
            open_count: AtomicUsize::new(0),
            done: watch::channel(0).0,
            room: Arc::new(Semaphore::new(COMPOSITE_WINDOW)),
            gate: tokio::sync::Mutex::new(()),
        }
    }
}

impl Committer {
    /// Waits for room in the window; hold it until the send is handed over
    /// ([`Broker::commit_later`]) or refused. Errors: [`Error::ShuttingDown`] once
    /// [`Committer::close`] began.
    pub(super) async fn room(&self) -> Result<OwnedSemaphorePermit, Error> {
        Arc::clone(&self.room)
            .acquire_owned()
            .await
            .map_err(|_| Error::ShuttingDown)
    }

    /// Waits until every composite send to `key` handed over before now is released
    /// (or refused): the one wait a send of another kind to `key` makes, so that it
    /// follows them. At once when none is waiting.
    pub(super) async fn before_send_to(&self, key: &DestinationKey) {
        if self.open_count.load(Ordering::Acquire) == 0 {
            return;
        }
        let Some(seq) = self.state.lock().open.get(key).copied() else {
            return;
        };
        self.until_done(seq).await;
    }

    /// Refuses every later composite send ([`Error::ShuttingDown`]) and waits until
    /// every one that has room in the window is released or refused (one being
    /// checked included): the first step of [`Broker::shutdown`].
    pub(super) async fn close(&self) {
        if let Ok(all) = self.room.acquire_many(COMPOSITE_WINDOW as u32).await {
            all.forget();
        }
        self.room.close();
    }

    async fn until_done(&self, seq: u64) {
        let mut done = self.done.subscribe();
        let _ = done.wait_for(|d| *d >= seq).await;
    }

    /// Queues `send`; answers its outcome's receiver and whether the committer must be
    /// started.
    fn enqueue(&self, send: CompositeSend) -> (oneshot::Receiver<Result<bool, Error>>, bool) {
        let (answer, answered) = oneshot::channel();
        let mut state = self.state.lock();
        state.last += 1;
        let seq = state.last;
        for (key, _) in &send.copies {
            state.open.insert(key.clone(), seq);
        }
        self.open_count.store(state.open.len(), Ordering::Release);
        state.queue.push_back(Job { seq, send, answer });
        let start = !std::mem::replace(&mut state.running, true);
        (answered, start)
    }

    /// The next sends to commit, at most `most`; none when the queue is empty (the
    /// committer then stops, and the next send starts it again).
    fn next_batch(&self, most: usize) -> Vec<Job> {
        let mut state = self.state.lock();
        let n = state.queue.len().min(most);
        if n == 0 {
            state.running = false;
        }
        state.queue.drain(..n).collect()
    }

    /// Sends up to `seq` are released or refused: later sends to their destinations
    /// need not wait for them any more.
    fn finished(&self, jobs: &[(u64, Vec<DestinationKey>)]) {
        let Some(last) = jobs.iter().map(|(seq, _)| *seq).max() else {
            return;
        };
        {
            let mut state = self.state.lock();
            for (seq, keys) in jobs {
                for key in keys {
                    if state.open.get(key) == Some(seq) {
                        state.open.remove(key);
                    }
                }
            }
            self.open_count.store(state.open.len(), Ordering::Release);
        }
        self.done.send_replace(last);
    }
}

impl Broker {
    /// Hands `send` to the committer; the [`PendingSend`] resolves once it is stored
    /// and released, or refused.
    pub(super) fn commit_later(&self, message_id: String, send: CompositeSend) -> PendingSend {
        let committer = &self.routes.committer;
        let (answered, start) = committer.enqueue(send);
        if start {
            // On the broker's own thread: the task outlives the caller's runtime.
            let broker = self.clone();
            self.runtime
                .arbiter()
                .spawn(async move { broker.run_committer().await });
        }
        PendingSend::committed_later(message_id, answered)
    }

    /// The committer's task: batches until the queue is empty.
    async fn run_committer(&self) {
        let committer = &self.routes.committer;
        loop {
            let batch = committer.next_batch(COMMIT_BATCH);
            if batch.is_empty() {
                return;
            }
            let finished: Vec<(u64, Vec<DestinationKey>)> = batch
                .iter()
                .map(|job| {
                    let keys = job.send.copies.iter().map(|(k, _)| k.clone()).collect();
                    (job.seq, keys)
                })
                .collect();
            self.commit_batch(batch).await;
            committer.finished(&finished);
        }
    }

    /// Stores one batch in one store transaction, its destinations fenced meanwhile,
    /// and answers each send.
    async fn commit_batch(&self, batch: Vec<Job>) {
        let mut ready = Vec::with_capacity(batch.len());
        for job in batch {
            // A temporary destination it goes to has ended (its connection is gone):
            // refused, as a send to it now would be.
            let ended = job
                .send
                .copies
                .iter()
                .find(|(k, _)| self.is_ended_temporary(k));
            match ended {
                Some((ended, _)) => {
                    let refused = Error::InvalidDestination {
                        name: ended.stomp(),
                        reason:
                            "no such temporary destination: the connection that made it has ended",
                    };
                    let _ = job.answer.send(Err(refused));
                }
                None => ready.push(job),
            }
        }
        // By destination, in first-send order: its copies and the sends they are of.
        let mut fences: Vec<Fence> = Vec::new();
        for (at, job) in ready.iter_mut().enumerate() {
            for (key, message) in std::mem::take(&mut job.send.copies) {
                let fence = match fences.iter_mut().position(|f| f.key == key) {
                    Some(i) => &mut fences[i],
                    None => {
                        fences.push(Fence::new(key));
                        fences.last_mut().expect("just pushed")
                    }
                };
                fence.sends.push(at);
                fence.messages.push(message);
            }
        }
        let mut expired = vec![false; ready.len()];
        let mut ops = Vec::new();
        let mut fenced = 0;
        let mut refusal = None;
        let gate = self.routes.committer.gate.lock().await;
        for fence in &mut fences {
            let messages = std::mem::take(&mut fence.messages);
            let make = || FenceSends {
                messages: messages.clone(),
            };
            let copies = match self.ask_live(&fence.key, make, super::is_retired).await {
                Ok(Ok((number, copies))) => {
                    fence.number = number;
                    copies
                }
                Ok(Err(e)) => {
                    refusal = Some(Error::from(e));
                    break;
                }
                Err(e) => {
                    refusal = Some(e);
                    break;
                }
            };
            fenced += 1;
            for (copy, &at) in copies.into_iter().zip(&fence.sends) {
                expired[at] |= copy.expired_on_arrival;
                if let Some(row) = copy.row {
                    ops.push(WriteOp::Add(row));
                    fence.rows += 1;
                }
            }
        }
        let fences = &fences[..fenced];
        // In the store actor's queue when it returns: the fences can go.
        let write = refusal
            .is_none()
            .then(|| self.store.write_together_in_order(ops));
        drop(gate);
        for fence in fences {
            let lift = || LiftFence {
                fence: fence.number,
            };
            let _ = self.tell_each(std::slice::from_ref(&fence.key), lift).await;
        }
        let outcomes = match (write, refusal) {
            (Some(write), _) => write.await.and_then(|outcomes| {
                outcomes
                    .into_iter()
                    .map(|o| Ok(o.added()?))
                    .collect::<Result<Vec<i64>, ActorError>>()
            }),
            (None, refusal) => Err(match refusal {
                Some(Error::ShuttingDown) | None => ActorError::ShuttingDown,
                Some(Error::Actor(e)) => e,
                Some(e) => ActorError::Invalid(e.to_string()),
            }),
        };
        // Each destination fills its places (with nothing if the write failed).
        let mut ids = outcomes.as_ref().ok().map(|ids| ids.iter().copied());
        let mut told = Vec::with_capacity(fences.len());
        for fence in fences {
            let stored = match (&mut ids, &outcomes) {
                (Some(ids), _) => Ok(ids.by_ref().take(fence.rows).collect::<Vec<i64>>()),
                (None, Err(e)) => Err(e.clone()),
                (None, Ok(_)) => unreachable!("ids are read from the outcomes"),
            };
            told.push(async move {
                let stored = || FencedStored {
                    fence: fence.number,
                    ids: stored.clone(),
                };
                self.tell_each(std::slice::from_ref(&fence.key), stored)
                    .await
            });
        }
        let told = futures::future::join_all(told).await;
        for (at, job) in ready.into_iter().enumerate() {
            let mut outcome = match &outcomes {
                Ok(_) => Ok(expired[at]),
                Err(e) => Err(Error::from(e.clone())),
            };
            for (fence, told) in fences.iter().zip(&told) {
                if let (Err(e), true) = (told, fence.sends.contains(&at)) {
                    outcome = Err(Error::Runtime(format!("{}: {e}", fence.key.stomp())));
                }
            }
            let _ = job.answer.send(outcome);
        }
        let keys: Vec<DestinationKey> = fences.iter().map(|f| f.key.clone()).collect();
        self.delete_ended_temporaries(&keys).await;
    }
}

/// One destination's part of a batch.
struct Fence {
    key: DestinationKey,
    /// Its copies, in send order (handed to it by [`FenceSends`]).
    messages: Vec<TopicMessage>,
    /// The send (its index in the batch) of each copy.
    sends: Vec<usize>,
    /// Rows it answered for its copies.
    rows: usize,
    /// The fence's number at the destination.
    number: u64,
}

impl Fence {
    fn new(key: DestinationKey) -> Self {
        Self {
            key,
            messages: Vec::new(),
            sends: Vec::new(),
            rows: 0,
            number: 0,
        }
    }
}
