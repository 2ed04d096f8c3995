//! The store actor: the only writer to the store.
//!
//! State it owns: the queue of writes not yet committed, and whether a transaction is
//! in flight. Messages it accepts: [`Write`] (one [`WriteOp`], answered after commit),
//! [`Flush`] (answered once every write queued before it is committed) and [`Close`]
//! (flush, close the pool, refuse later writes).
//!
//! **Typed writes.** Callers use [`StoreHandle`]'s methods, one per [`WriteOp`]
//! variant, each answering with the value of its outcome: [`StoreHandle::add`] the new
//! id, [`StoreHandle::commit`] the renumbering, [`StoreHandle::remove`] the rows
//! deleted, and so on. A destination sends its row-creating writes in its publish
//! order, put in this actor's mailbox as its handlers run
//! ([`crate::destination::DestinationCore::write_in_order`], which holds them while a
//! fence is up), so their ids follow publish order.
//!
//! **Group commit.** At most one transaction is in flight. Writes that arrive meanwhile
//! wait in the queue and go together into the next transaction (at most
//! [`StoreActorConfig::max_batch`] ops), so many producers share one commit (one fsync).
//! Because every write passes through here, one at a time and in arrival order, two
//! mark updates can never race: an expiry ack and a consumer ack for the same
//! subscription are applied one after the other, and the SQL only ever raises a mark.
//!
//! **Where a transaction runs.** On SQLite, on the process's store thread
//! (`write_off_thread`): each statement is a round trip to sqlx's worker thread of its
//! connection, and answers awaited on the broker's busy actor thread waited for it.
//! On PostgreSQL, on the actor's thread (its connections' sockets belong to that
//! runtime).
//!
//! **Errors.** A failed transaction answers every write in it with the same error
//! ([`ActorError::Store`]); nothing of it was committed, and the next transaction
//! starts afresh on a new connection, so the actor works again once the database is
//! back. It never panics on a database error.
//!
//! **Live writes first.** Housekeeping writes (expiry acks, [`WriteOp::Reclaim`],
//! [`WriteOp::Cleanup`], [`WriteOp::ExpireQueue`]: [`Lane::Housekeeping`]) wait in a
//! queue of their own and never share a transaction with live ones (publishes, consumer
//! acks, subscriptions). A transaction takes the live writes when any wait. While live
//! writes come (one arrived in the last [`LIVE_WINDOW`]), housekeeping gets at most
//! [`HOUSEKEEPING_SHARE`] of the store's time: after a housekeeping transaction of
//! `d`, the next waits until `d / share` has passed, so a drain of a million expired
//! rows slows live sends by that share at most, whatever the store's latency (it is
//! measured, not assumed). With no live write, housekeeping runs back to back.
//!
//! **Bounded.** Callers go through [`StoreHandle`], which holds a permit of a semaphore
//! ([`StoreActorConfig::max_pending`]) from send to answer, so the queue never holds more
//! than that many writes: a flood of writers waits instead of growing the queue.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use ebb_store::{
    DurableSubscription, MessageStore, Moved, NewMessage, SubscriptionKey, WriteOp, WriteOutcome,
};
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
type RepliesTogether = oneshot::Sender<Result<Vec<WriteOutcome>, ActorError>>;

enum Job {
    Write(WriteOp, Reply),
    /// Writes that must commit in one transaction ([`WriteTogether`]).
    Together(Vec<WriteOp>, RepliesTogether),
    Flush(oneshot::Sender<()>),
}

/// Whom a transaction answers, in op order: one write, or `n` writes together.
enum Answer {
    One(Reply),
    Together(RepliesTogether, usize),
}

impl Answer {
    /// Answers with the next outcomes of `outcomes`.
    fn send(self, outcomes: &mut impl Iterator<Item = WriteOutcome>) {
        match self {
            Self::One(reply) => {
                if let Some(outcome) = outcomes.next() {
                    let _ = reply.send(Ok(outcome));
                }
            }
            Self::Together(reply, n) => {
                let _ = reply.send(Ok(outcomes.take(n).collect()));
            }
        }
    }

    fn fail(self, e: &ActorError) {
        match self {
            Self::One(reply) => {
                let _ = reply.send(Err(e.clone()));
            }
            Self::Together(reply, _) => {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// Which queue of the store actor a write waits in (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Publishes, consumer acks, subscriptions, transactions: what a client waits for.
    Live,
    /// Expiry and cleanup: deferred while live writes come.
    Housekeeping,
}

/// Most of the store's time housekeeping transactions take while live writes come:
/// 1/50 (2 %).
pub const HOUSEKEEPING_SHARE: u32 = 50;

/// Live writes count as coming while the last arrived less than this long ago.
pub const LIVE_WINDOW: Duration = Duration::from_millis(100);

/// See the module documentation.
pub struct StoreActor {
    store: Arc<dyn MessageStore>,
    queue: VecDeque<Job>,
    /// Housekeeping writes, and flushes that must wait for them.
    housekeeping: VecDeque<Job>,
    in_flight: bool,
    closed: bool,
    max_batch: usize,
    /// When the last live write arrived.
    last_live: Option<Instant>,
    /// No housekeeping transaction starts before this.
    housekeeping_after: Instant,
    /// A wake-up is scheduled for `housekeeping_after`.
    wake_scheduled: bool,
}

impl StoreActor {
    pub fn new(store: Arc<dyn MessageStore>, config: &StoreActorConfig) -> Self {
        Self {
            store,
            queue: VecDeque::new(),
            housekeeping: VecDeque::new(),
            in_flight: false,
            closed: false,
            max_batch: config.max_batch.max(1),
            last_live: None,
            housekeeping_after: Instant::now(),
            wake_scheduled: false,
        }
    }

    /// Whether live writes are coming (one arrived within [`LIVE_WINDOW`]).
    fn live_recently(&self, now: Instant) -> bool {
        self.last_live
            .is_some_and(|at| now.duration_since(at) < LIVE_WINDOW)
    }

    /// Starts the next transaction if none is in flight and writes are waiting: the
    /// live ones first; housekeeping when none waits and its share allows.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.in_flight {
            return;
        }
        let now = Instant::now();
        let lane = if !self.queue.is_empty() {
            Lane::Live
        } else if self.housekeeping.is_empty() {
            return;
        } else if now < self.housekeeping_after && self.live_recently(now) {
            if !self.wake_scheduled {
                self.wake_scheduled = true;
                ctx.run_later(self.housekeeping_after - now, |act, ctx| {
                    act.wake_scheduled = false;
                    act.pump(ctx);
                });
            }
            return;
        } else {
            Lane::Housekeeping
        };
        let mut ops = Vec::new();
        let mut replies = Vec::new();
        let mut flushes = Vec::new();
        while ops.len() < self.max_batch {
            let job = match lane {
                Lane::Live => self.queue.pop_front(),
                Lane::Housekeeping => self.housekeeping.pop_front(),
            };
            match job {
                Some(Job::Write(op, reply)) => {
                    ops.push(op);
                    replies.push(Answer::One(reply));
                }
                // Never split: it goes whole into this transaction, or first into the
                // next (alone, whatever its size).
                Some(Job::Together(group, reply)) => {
                    if !ops.is_empty() && ops.len() + group.len() > self.max_batch {
                        self.queue.push_front(Job::Together(group, reply));
                        break;
                    }
                    replies.push(Answer::Together(reply, group.len()));
                    ops.extend(group);
                }
                // A flush also waits for the housekeeping writes queued before it.
                Some(Job::Flush(done)) if lane == Lane::Live && !self.housekeeping.is_empty() => {
                    self.housekeeping.push_back(Job::Flush(done))
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
        let started = Instant::now();
        let batch = write_off_thread(store, ops);
        ctx.spawn(batch.into_actor(self).map(move |result, act, ctx| {
            if lane == Lane::Housekeeping {
                // Its share: the next housekeeping transaction waits (while live
                // writes come) until this one is `1 / HOUSEKEEPING_SHARE` of the time.
                let took = started.elapsed();
                act.housekeeping_after =
                    Instant::now() + took * (HOUSEKEEPING_SHARE.saturating_sub(1));
            }
            match result {
                Ok(outcomes) => {
                    let mut outcomes = outcomes.into_iter();
                    for reply in replies {
                        reply.send(&mut outcomes);
                    }
                }
                Err(e) => {
                    let e = ActorError::from(e);
                    tracing::warn!(error = %e, writes = replies.len(), "store transaction failed");
                    for reply in replies {
                        reply.fail(&e);
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

/// Runs `store.write(ops)`. On SQLite it runs on the process's store thread
/// ([`store_runtime`]), not on the actor's: each statement is executed by sqlx's
/// worker thread of its connection and answered over a channel, and a transaction is
/// a chain of such answers. Awaited on the broker's actor thread, each answer waited
/// until that thread was free of the other actors' work (a queue dispatching, a
/// session encoding frames), so a transaction of many statements took several times
/// its database time; on a thread of its own each answer is taken at once. PostgreSQL's
/// connections stay on the runtime that opened them (their sockets belong to its I/O
/// driver).
fn write_off_thread(
    store: Arc<dyn MessageStore>,
    ops: Vec<WriteOp>,
) -> impl Future<Output = ebb_store::Result<Vec<WriteOutcome>>> {
    let offload = store.backend() == ebb_store::Backend::Sqlite;
    async move {
        if !offload {
            return store.write(ops).await;
        }
        match store_runtime()
            .spawn(async move { store.write(ops).await })
            .await
        {
            Ok(written) => written,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(ebb_store::StoreError::Closed),
        }
    }
}

/// The process's store thread: one tokio runtime with one worker, shared by every
/// broker of the process, on which SQLite write transactions run
/// ([`write_off_thread`]). Started at the first write.
fn store_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ebb-store")
            .enable_all()
            .build()
            .expect("the store thread starts")
    })
}

impl Actor for StoreActor {
    type Context = Context<Self>;
}

/// Apply one write, in its lane; answered after the transaction that holds it commits.
#[derive(Message)]
#[rtype(result = "Result<WriteOutcome, ActorError>")]
pub struct Write(pub WriteOp, pub Lane);

/// Apply several writes in one store transaction (live lane): all commit or none does.
/// Answered after that transaction, with one outcome per op, in op order. The store
/// actor never splits them: they share a transaction with other writes only when all
/// fit in [`StoreActorConfig::max_batch`], else they go first into the next one.
#[derive(Message)]
#[rtype(result = "Result<Vec<WriteOutcome>, ActorError>")]
pub struct WriteTogether(pub Vec<WriteOp>);

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
        match msg.1 {
            Lane::Live => {
                self.last_live = Some(Instant::now());
                self.queue.push_back(Job::Write(msg.0, tx));
            }
            Lane::Housekeeping => self.housekeeping.push_back(Job::Write(msg.0, tx)),
        }
        self.pump(ctx);
        Box::pin(async move { rx.await.unwrap_or(Err(ActorError::Closed)) })
    }
}

impl Handler<WriteTogether> for StoreActor {
    type Result = ResponseFuture<Result<Vec<WriteOutcome>, ActorError>>;

    fn handle(&mut self, msg: WriteTogether, ctx: &mut Context<Self>) -> Self::Result {
        if self.closed {
            return Box::pin(async { Err(ActorError::Closed) });
        }
        if msg.0.is_empty() {
            return Box::pin(async { Ok(Vec::new()) });
        }
        let (tx, rx) = oneshot::channel();
        self.last_live = Some(Instant::now());
        self.queue.push_back(Job::Together(msg.0, tx));
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
    ///
    /// The untyped form of the methods below, which answer with the value of the op's
    /// outcome: callers use those.
    async fn write(&self, op: WriteOp) -> Result<WriteOutcome, ActorError> {
        self.write_in(op, Lane::Live).await
    }

    /// [`Self::write`] in `lane`.
    async fn write_in(&self, op: WriteOp, lane: Lane) -> Result<WriteOutcome, ActorError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| ActorError::Closed)?;
        self.addr.send(Write(op, lane)).await?
    }

    /// Applies one write like [`Self::write`], but puts it in the store actor's mailbox
    /// now, before returning the future: writes sent this way from one actor's handlers
    /// are applied, and get their ids, in the order the handlers ran (a destination's
    /// publish order), whatever order their futures are polled in. A destination's
    /// cursor relies on it. The bound on outstanding writes is taken if free and not
    /// waited for (the caller is an actor; producer flow control bounds what it sends).
    ///
    /// The untyped form of [`Self::add_in_order`] and [`Self::dead_letter_in_order`].
    pub(crate) fn write_in_order(
        &self,
        op: WriteOp,
    ) -> impl Future<Output = Result<WriteOutcome, ActorError>> {
        let permit = Arc::clone(&self.permits).try_acquire_owned().ok();
        let request = self.addr.send(Write(op, Lane::Live));
        async move {
            let _permit = permit;
            request.await?
        }
    }

    // Typed writes: one per `WriteOp` variant (documented there), each answered after
    // its transaction commits, with the errors of `write`, and with the value of the
    // op's outcome. An outcome of the wrong kind (a store that broke its contract) is
    // `ActorError::Store` with `StoreError::WrongOutcome`.

    /// [`WriteOp::Add`]: stores `message`; returns its new id.
    pub async fn add(&self, message: NewMessage) -> Result<i64, ActorError> {
        Ok(self.write(WriteOp::Add(message)).await?.added()?)
    }

    /// [`Self::add`] in the caller's order: the write is put in the store actor's
    /// mailbox now, before the future is returned, so writes sent this way from one
    /// actor's handlers get their ids in the order the handlers ran, whatever order
    /// their futures are polled in. A destination stores its publishes so (its
    /// cursor relies on ids following publish order). The bound on outstanding writes is
    /// taken if free and not waited for (producer flow control bounds what an actor
    /// sends).
    pub fn add_in_order(
        &self,
        message: NewMessage,
    ) -> impl Future<Output = Result<i64, ActorError>> {
        let write = self.write_in_order(WriteOp::Add(message));
        async move { Ok(write.await?.added()?) }
    }

    /// [`WriteOp::Subscribe`]: creates durable subscription `key` on `container` unless
    /// it exists; returns it as stored (created, or as it already was).
    pub async fn subscribe(
        &self,
        container: String,
        key: SubscriptionKey,
        selector: Option<String>,
        prioritized: bool,
    ) -> Result<DurableSubscription, ActorError> {
        let op = WriteOp::Subscribe {
            container,
            key,
            selector,
            prioritized,
        };
        Ok(self.write(op).await?.subscribed()?)
    }

    /// [`WriteOp::Unsubscribe`]: removes durable subscription `key` of `container`;
    /// returns whether it existed.
    pub async fn unsubscribe(
        &self,
        container: String,
        key: SubscriptionKey,
    ) -> Result<bool, ActorError> {
        let op = WriteOp::Unsubscribe { container, key };
        Ok(self.write(op).await?.unsubscribed()?)
    }

    /// [`WriteOp::Ack`]: individual acks of `(id, priority)` for subscription `key`;
    /// returns how many of them were not yet done for it.
    pub async fn ack(
        &self,
        container: String,
        key: SubscriptionKey,
        messages: Vec<(i64, u8)>,
    ) -> Result<u64, ActorError> {
        self.ack_in(container, key, messages, Lane::Live).await
    }

    /// [`Self::ack`] for expiry: in the housekeeping lane, behind live writes.
    pub async fn ack_expired(
        &self,
        container: String,
        key: SubscriptionKey,
        messages: Vec<(i64, u8)>,
    ) -> Result<u64, ActorError> {
        self.ack_in(container, key, messages, Lane::Housekeeping)
            .await
    }

    async fn ack_in(
        &self,
        container: String,
        key: SubscriptionKey,
        messages: Vec<(i64, u8)>,
        lane: Lane,
    ) -> Result<u64, ActorError> {
        let op = WriteOp::Ack {
            container,
            key,
            messages,
        };
        Ok(self.write_in(op, lane).await?.acked()?)
    }

    /// [`WriteOp::AckUpTo`]: cumulative ack up to id `up_to` (of `priority`, or of
    /// every priority with `None`); returns whether any mark moved.
    pub async fn ack_up_to(
        &self,
        container: String,
        key: SubscriptionKey,
        priority: Option<u8>,
        up_to: i64,
    ) -> Result<bool, ActorError> {
        let op = WriteOp::AckUpTo {
            container,
            key,
            priority,
            up_to,
        };
        Ok(self.write(op).await?.acked_up_to()?)
    }

    /// [`WriteOp::Commit`]: makes prepared transaction `xid` visible; returns
    /// `(old id, new id)` of each of its messages, in old-id order.
    pub async fn commit(&self, xid: String) -> Result<Vec<(i64, i64)>, ActorError> {
        Ok(self.write(WriteOp::Commit { xid }).await?.committed()?)
    }

    /// [`Self::commit`] in the caller's order, as [`Self::add_in_order`]: the write is
    /// in the store actor's mailbox when this returns, so commits sent this way get
    /// their new ids in the order they were sent (the scheduler releases a page of
    /// due messages so, and a queue's cursor sees the ids in the order it is handed
    /// the messages).
    pub fn commit_in_order(
        &self,
        xid: String,
    ) -> impl Future<Output = Result<Vec<(i64, i64)>, ActorError>> {
        let write = self.write_in_order(WriteOp::Commit { xid });
        async move { Ok(write.await?.committed()?) }
    }

    /// [`WriteOp::Repeat`] in the caller's order (as [`Self::commit_in_order`]): one
    /// firing of repeating job `xid`, whose row moves to `next_xid` while `copy` is
    /// added; answers the copy's id, `None` when the job was gone (cancelled).
    pub fn repeat_in_order(
        &self,
        xid: String,
        next_xid: String,
        copy: NewMessage,
    ) -> impl Future<Output = Result<Option<i64>, ActorError>> {
        let write = self.write_in_order(WriteOp::Repeat {
            xid,
            next_xid,
            copy,
        });
        async move { Ok(write.await?.repeated()?) }
    }

    /// [`WriteOp::Commit`] of `xid` and the writes `with` (the acks of the same
    /// transaction: [`WriteOp::Remove`], [`WriteOp::Ack`], [`WriteOp::AckUpTo`]) in one
    /// store transaction ([`WriteTogether`]): its sends become visible and its acks
    /// are stored, or neither. Returns the renumbering as [`Self::commit`].
    ///
    /// The write is in the store actor's mailbox when this returns, as
    /// [`Self::commit_in_order`]'s: the broker fences the transaction's destinations
    /// (`crate::destination::FenceCommit`), calls this, and lifts the fences, so that
    /// each destination sees the new ids in its publish order. The bound on
    /// outstanding writes is taken if free and not waited for.
    pub fn commit_with(
        &self,
        xid: String,
        with: Vec<WriteOp>,
    ) -> impl Future<Output = Result<Vec<(i64, i64)>, ActorError>> {
        let mut ops = Vec::with_capacity(with.len() + 1);
        ops.push(WriteOp::Commit { xid });
        ops.extend(with);
        let write = self.write_together_in_order(ops);
        async move {
            let committed = write.await?.into_iter().next().ok_or(ActorError::Closed)?;
            Ok(committed.committed()?)
        }
    }

    /// `ops` in one store transaction ([`WriteTogether`]): all commit or none does;
    /// answers one outcome per op, in op order. The write is in the store actor's
    /// mailbox when this returns, as [`Self::add_in_order`]'s. The broker's committer
    /// of composite sends writes a batch's rows with this, between fencing their
    /// destinations and lifting the fences (`crate::destination::FenceSends`), so that
    /// each destination sees the new ids in its publish order. The bound on
    /// outstanding writes is taken if free and not waited for.
    ///
    /// Errors: [`ActorError::Store`] when the transaction failed (nothing of it was
    /// committed), [`ActorError::Closed`] after [`Close`].
    pub fn write_together_in_order(
        &self,
        ops: Vec<WriteOp>,
    ) -> impl Future<Output = Result<Vec<WriteOutcome>, ActorError>> {
        let permit = Arc::clone(&self.permits).try_acquire_owned().ok();
        let request = (!ops.is_empty()).then(|| self.addr.send(WriteTogether(ops)));
        async move {
            let _permit = permit;
            match request {
                Some(request) => request.await?,
                None => Ok(Vec::new()),
            }
        }
    }

    /// [`WriteOp::Rollback`]: deletes the messages of prepared transaction `xid`;
    /// returns how many.
    pub async fn rollback(&self, xid: String) -> Result<u64, ActorError> {
        Ok(self.write(WriteOp::Rollback { xid }).await?.deleted()?)
    }

    /// [`WriteOp::RollbackAbandoned`]: deletes the messages of every prepared
    /// transaction whose xid starts with `xid_prefix` (taken literally, `%` and `_`
    /// included); returns how many.
    pub async fn rollback_abandoned(&self, xid_prefix: String) -> Result<u64, ActorError> {
        let op = WriteOp::RollbackAbandoned { xid_prefix };
        Ok(self.write(op).await?.deleted()?)
    }

    /// [`WriteOp::Cleanup`]: deletes up to `limit` messages of topic `container` above
    /// id `after` that every durable subscription has acked (or, with no
    /// subscription, those with `id <= orphans_up_to`); returns how many, and the
    /// `after` of the next batch. In the housekeeping lane.
    pub async fn cleanup(
        &self,
        container: String,
        limit: u32,
        after: i64,
        orphans_up_to: Option<i64>,
    ) -> Result<(u64, i64), ActorError> {
        let op = WriteOp::Cleanup {
            container,
            limit,
            after,
            orphans_up_to,
        };
        Ok(self.write_in(op, Lane::Housekeeping).await?.cleaned_up()?)
    }

    /// [`WriteOp::Redelivered`]: row `id` of queue `container` now has `count` failed
    /// deliveries, and with `hold_until` (epoch ms) it waits in its row until then
    /// (the queue reads it back by due time); returns whether the row was there.
    pub async fn redelivered(
        &self,
        container: String,
        id: i64,
        count: u32,
        hold_until: Option<i64>,
    ) -> Result<bool, ActorError> {
        let op = WriteOp::Redelivered {
            container,
            id,
            count,
            hold_until,
        };
        Ok(self.write(op).await?.deleted()? > 0)
    }

    /// A queue's acks and failed deliveries in one store transaction: a
    /// [`WriteOp::Remove`] of `ids` (none when empty), then the run of
    /// [`WriteOp::Redelivered`] of `rows` (`(id, count, hold_until)` each, as
    /// [`Self::redelivered`]; one statement per 512 rows). Returns the rows deleted
    /// and, in order, whether each failed delivery's row was there. The queue gathers
    /// its failed deliveries beside its acks, so they add no transaction of their own.
    pub async fn remove_and_redeliver(
        &self,
        container: String,
        ids: Vec<i64>,
        rows: Vec<(i64, u32, Option<i64>)>,
    ) -> Result<(u64, Vec<bool>), ActorError> {
        let mut ops = Vec::with_capacity(rows.len() + 1);
        let removes = !ids.is_empty();
        if removes {
            ops.push(WriteOp::Remove {
                container: container.clone(),
                ids,
            });
        }
        ops.extend(
            rows.into_iter()
                .map(|(id, count, hold_until)| WriteOp::Redelivered {
                    container: container.clone(),
                    id,
                    count,
                    hold_until,
                }),
        );
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| ActorError::Closed)?;
        let mut outcomes = self.addr.send(WriteTogether(ops)).await??.into_iter();
        let removed = match removes {
            true => outcomes.next().ok_or(ActorError::Closed)?.deleted()?,
            false => 0,
        };
        let changed = outcomes
            .map(|o| Ok(o.deleted()? > 0))
            .collect::<Result<_, ActorError>>()?;
        Ok((removed, changed))
    }

    /// [`WriteOp::ReplaceLastValue`]: deletes the committed rows of `container` with
    /// last-value key `key` and an id below `below`; returns how many it deleted.
    pub async fn replace_last_value(
        &self,
        container: String,
        key: String,
        below: i64,
    ) -> Result<u64, ActorError> {
        let op = WriteOp::ReplaceLastValue {
            container,
            key,
            below,
        };
        Ok(self.write(op).await?.deleted()?)
    }

    /// [`WriteOp::Remove`]: deletes rows `ids` of queue `container` (prepared ones
    /// excepted); returns how many it deleted.
    pub async fn remove(&self, container: String, ids: Vec<i64>) -> Result<u64, ActorError> {
        Ok(self
            .write(WriteOp::Remove { container, ids })
            .await?
            .deleted()?)
    }

    /// [`WriteOp::ExpireQueue`]: one expiry page of queue `container`, at most `limit`
    /// rows expired at `now_ms` (epoch ms); returns the deleted ids, ascending. In the
    /// housekeeping lane.
    pub async fn expire_queue(
        &self,
        container: String,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<i64>, ActorError> {
        let op = WriteOp::ExpireQueue {
            container,
            now_ms,
            limit,
        };
        Ok(self.write_in(op, Lane::Housekeeping).await?.removed()?)
    }

    /// [`WriteOp::Reclaim`]: deletes those of the topic rows `ids` that every durable
    /// subscription is done with; returns the deleted ids, ascending. In the
    /// housekeeping lane.
    pub async fn reclaim(&self, container: String, ids: Vec<i64>) -> Result<Vec<i64>, ActorError> {
        let op = WriteOp::Reclaim { container, ids };
        Ok(self.write_in(op, Lane::Housekeeping).await?.removed()?)
    }

    /// [`WriteOp::DeadLetter`]: moves row `id` of `container` to `message` (normally
    /// on a dead-letter queue); returns the copy's new id ([`Moved::Added`]), or why
    /// there is none: the row was already gone and nothing changed ([`Moved::Gone`]),
    /// or a message with its last-value key that arrived after it waits where it goes
    /// and the row was deleted ([`Moved::Superseded`]).
    pub async fn dead_letter(
        &self,
        container: String,
        id: i64,
        message: NewMessage,
    ) -> Result<Moved, ActorError> {
        let op = WriteOp::DeadLetter {
            container,
            id,
            message,
        };
        Ok(self.write(op).await?.dead_lettered()?)
    }

    /// [`Self::dead_letter`] in the caller's order, as [`Self::add_in_order`]: a
    /// dead-letter queue stores what it accepts with this, in its publish order.
    pub fn dead_letter_in_order(
        &self,
        container: String,
        id: i64,
        message: NewMessage,
    ) -> impl Future<Output = Result<Moved, ActorError>> {
        let write = self.write_in_order(WriteOp::DeadLetter {
            container,
            id,
            message,
        });
        async move { Ok(write.await?.dead_lettered()?) }
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

    /// The store, for reads: reads that do not race writes (a cursor's next page, an
    /// expiry page) go to the pool directly; every write goes through this actor.
    pub fn store(&self) -> &Arc<dyn MessageStore> {
        &self.store
    }
}
