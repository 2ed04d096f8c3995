//! The store actor: the only writer to the store.
//!
//! State it owns: the queue of writes not yet committed, and whether a transaction is
//! in flight. Messages it accepts: [`Write`] (one [`WriteOp`], answered after commit),
//! [`Flush`] (answered once every write queued before it is committed) and [`Close`]
//! (flush, close the pool, refuse later writes).
//!
//! **Group commit.** At most one transaction is in flight. Writes that arrive meanwhile
//! wait in the queue and go together into the next transaction (at most
//! [`StoreActorConfig::max_batch`] ops), so many producers share one commit (one fsync).
//! Because every write passes through here, one at a time and in arrival order, two
//! mark updates can never race: an expiry ack and a consumer ack for the same
//! subscription are applied one after the other, and the SQL only ever raises a mark.
//!
//! **Errors.** A failed transaction answers every write in it with the same error
//! ([`ActorError::Store`]); nothing of it was committed, and the next transaction
//! starts afresh on a new connection, so the actor works again once the database is
//! back. It never panics on a database error.
//!
//! **Bounded.** Callers go through [`StoreHandle`], which holds a permit of a semaphore
//! ([`StoreActorConfig::max_pending`]) from send to answer, so the queue never holds more
//! than that many writes: a flood of writers waits instead of growing the queue.

use std::collections::VecDeque;
use std::sync::Arc;

use actix::prelude::*;
use ebb_store::{MessageStore, WriteOp, WriteOutcome};
use tokio::sync::{oneshot, Semaphore};

use crate::error::ActorError;

/// Limits of the store actor.
#[derive(Debug, Clone)]
pub struct StoreActorConfig {
    /// Most writes in one transaction (ops).
    pub max_batch: usize,
    /// Most writes sent and not yet answered, over all callers of one [`StoreHandle`]
    /// (and its clones).
    pub max_pending: usize,
}

impl Default for StoreActorConfig {
    fn default() -> Self {
        Self {
            max_batch: 512,
            max_pending: 4096,
        }
    }
}

type Reply = oneshot::Sender<Result<WriteOutcome, ActorError>>;

enum Job {
    Write(WriteOp, Reply),
    Flush(oneshot::Sender<()>),
}

/// See the module documentation.
pub struct StoreActor {
    store: Arc<dyn MessageStore>,
    queue: VecDeque<Job>,
    in_flight: bool,
    closed: bool,
    max_batch: usize,
}

impl StoreActor {
    pub fn new(store: Arc<dyn MessageStore>, config: &StoreActorConfig) -> Self {
        Self {
            store,
            queue: VecDeque::new(),
            in_flight: false,
            closed: false,
            max_batch: config.max_batch.max(1),
        }
    }

    /// Starts the next transaction if none is in flight and writes are waiting.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.in_flight || self.queue.is_empty() {
            return;
        }
        let mut ops = Vec::new();
        let mut replies = Vec::new();
        let mut flushes = Vec::new();
        while ops.len() < self.max_batch {
            match self.queue.pop_front() {
                Some(Job::Write(op, reply)) => {
                    ops.push(op);
                    replies.push(reply);
                }
                Some(Job::Flush(done)) => flushes.push(done),
                None => break,
            }
        }
        if ops.is_empty() {
            flushes.into_iter().for_each(|f| {
                let _ = f.send(());
            });
            return self.pump(ctx);
        }
        self.in_flight = true;
        let store = Arc::clone(&self.store);
        let batch = async move { store.write(ops).await };
        ctx.spawn(batch.into_actor(self).map(move |result, act, ctx| {
            match result {
                Ok(outcomes) => {
                    for (reply, outcome) in replies.into_iter().zip(outcomes) {
                        let _ = reply.send(Ok(outcome));
                    }
                }
                Err(e) => {
                    let e = ActorError::from(e);
                    tracing::warn!(error = %e, writes = replies.len(), "store transaction failed");
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
            for done in flushes {
                let _ = done.send(());
            }
            act.in_flight = false;
            act.pump(ctx);
        }));
    }
}

impl Actor for StoreActor {
    type Context = Context<Self>;
}

/// Apply one write; answered after the transaction that holds it commits.
#[derive(Message)]
#[rtype(result = "Result<WriteOutcome, ActorError>")]
pub struct Write(pub WriteOp);

/// Answered once every write queued before it is committed (or failed).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Flush;

/// Flush, then close the store's pool; later writes fail with [`ActorError::Closed`].
/// The last step of shutdown.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Close;

impl Handler<Write> for StoreActor {
    type Result = ResponseFuture<Result<WriteOutcome, ActorError>>;

    fn handle(&mut self, msg: Write, ctx: &mut Context<Self>) -> Self::Result {
        if self.closed {
            return Box::pin(async { Err(ActorError::Closed) });
        }
        let (tx, rx) = oneshot::channel();
        self.queue.push_back(Job::Write(msg.0, tx));
        self.pump(ctx);
        Box::pin(async move { rx.await.unwrap_or(Err(ActorError::Closed)) })
    }
}

impl Handler<Flush> for StoreActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Flush, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.queue.push_back(Job::Flush(tx));
        self.pump(ctx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

impl Handler<Close> for StoreActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Close, ctx: &mut Context<Self>) -> Self::Result {
        self.closed = true;
        let (tx, rx) = oneshot::channel();
        self.queue.push_back(Job::Flush(tx));
        self.pump(ctx);
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            let _ = rx.await;
            store.close().await;
        })
    }
}

/// How every other actor talks to the store actor: `send` with a bounded number of
/// writes outstanding (never `do_send`, which would bypass the mailbox bound).
#[derive(Clone)]
pub struct StoreHandle {
    addr: Addr<StoreActor>,
    permits: Arc<Semaphore>,
    store: Arc<dyn MessageStore>,
}

impl StoreHandle {
    /// Starts a store actor on the current arbiter.
    pub fn start(store: Arc<dyn MessageStore>, config: StoreActorConfig) -> Self {
        let actor = StoreActor::new(Arc::clone(&store), &config);
        // Writes are bounded by `permits` and flow control, not by the mailbox (room for
        // a million): a full mailbox would defer a `send` until it is polled, and
        // writes could then get their ids out of the order they were sent in (see
        // `write_in_order`).
        let addr = StoreActor::create(|ctx| {
            ctx.set_mailbox_capacity(1 << 20);
            actor
        });
        Self {
            addr,
            permits: Arc::new(Semaphore::new(config.max_pending.max(1))),
            store,
        }
    }

    /// Applies one write; returns after it is committed.
    ///
    /// Errors: [`ActorError::Store`] when its transaction failed (nothing of it was
    /// committed; the write may be retried), [`ActorError::Closed`] after [`Close`].
    pub async fn write(&self, op: WriteOp) -> Result<WriteOutcome, ActorError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| ActorError::Closed)?;
        self.addr.send(Write(op)).await?
    }

    /// Applies one write like [`Self::write`], but puts it in the store actor's mailbox
    /// now, before returning the future: writes sent this way from one actor's handlers
    /// are applied, and get their ids, in the order the handlers ran (a destination's
    /// publish order), whatever order their futures are polled in. A destination's
    /// cursor relies on it. The bound on outstanding writes is taken if free and not
    /// waited for (the caller is an actor; producer flow control bounds what it sends).
    pub fn write_in_order(
        &self,
        op: WriteOp,
    ) -> impl std::future::Future<Output = Result<WriteOutcome, ActorError>> {
        let permit = Arc::clone(&self.permits).try_acquire_owned().ok();
        let request = self.addr.send(Write(op));
        async move {
            let _permit = permit;
            request.await?
        }
    }

    /// Waits until every write sent before this call is committed or failed.
    pub async fn flush(&self) -> Result<(), ActorError> {
        Ok(self.addr.send(Flush).await?)
    }

    /// Flushes and closes the store. Later writes fail with [`ActorError::Closed`].
    pub async fn close(&self) -> Result<(), ActorError> {
        self.addr.send(Close).await?;
        Ok(())
    }

    /// The store, for reads (which may go to the pool directly, see DESIGN.md).
    pub fn store(&self) -> &Arc<dyn MessageStore> {
        &self.store
    }
}
