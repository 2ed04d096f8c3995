//! [`DestinationCore`] and [`DestinationActor`]: the state and the handlers every
//! destination actor shares.
//!
//! A destination actor (topic, queue, ...) holds a [`DestinationCore`] and implements
//! [`DestinationActor`]: how it keeps a message it accepts ([`DestinationActor::plan`]),
//! how it hands released messages on ([`DestinationActor::release`]: its dispatch), and
//! its housekeeping tick and expiry page. The functions here do the rest, the same way
//! for every kind: accepting a publish (expired on arrival, store write in publish
//! order, reorder buffer), transactions (prepared messages, release at commit), the
//! housekeeping timer, the end of an expiry page, and stop. The
//! `destination_handlers!` macro (in `destination/mod.rs`) wires them
//! to the actor's [`Publish`], [`PublishPrepared`], [`CommitPrepared`],
//! [`AbortPrepared`], [`RunHousekeeping`], [`StopHousekeeping`] and [`ExpiryPage`]
//! handlers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use actix::prelude::*;
use ebb_store::{NewMessage, WriteOp};
use tokio::sync::oneshot;

use super::policy::Policy;
use super::{
    AfterPage, Completions, DestinationCounters, DestinationKey, HousekeepingSchedule,
    PreparedMessages, PublishOrder, Published,
};
use crate::error::ActorError;
use crate::housekeeping::HousekeepingBudget;
use crate::message::{PublishOutcome, TopicMessage};
use crate::store_actor::StoreHandle;

/// Wall clock, epoch ms: what expirations are compared with.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Publish a message to a destination. Answered at once with a [`PublishTicket`]: the
/// message has its place in the destination's publish order (and its store write is
/// queued, in that order); the ticket resolves once the message is accepted: for a
/// message the destination stores, after the store committed it.
///
/// Two steps so that a producer can pipeline: publishes whose answers it awaits one
/// after the other are stored and delivered in that order, while their commits overlap
/// (and share the store actor's group commit).
#[derive(Message)]
#[rtype(result = "PublishTicket")]
pub struct Publish(pub TopicMessage);

/// Publish a message as part of transaction `xid`: a message the destination stores is
/// stored prepared (invisible, holding no mark back); nothing is dispatched until
/// [`CommitPrepared`]. Answered at once with a [`PublishTicket`], as [`Publish`], that
/// resolves once the message is stored.
#[derive(Message)]
#[rtype(result = "PublishTicket")]
pub struct PublishPrepared {
    pub message: TopicMessage,
    pub xid: String,
}

/// Transaction `xid` committed in the store (its rows renumbered, `(old, new)` ids):
/// release its messages, in the order they were sent.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CommitPrepared {
    pub xid: String,
    pub renumbered: Vec<(i64, i64)>,
}

/// Scheduled messages that are due: `(xid, message)` each, the message as stored
/// (its body came with it: a page at most), in due order. The destination commits each
/// xid in the store itself, in its publish order (a place reserved as a publish's, the
/// commit sent to the store actor in order), so the new ids follow the order in which
/// it releases messages, as its cursors rely on; each is then released as if just
/// published. Answers how many were committed (a failed commit leaves its message
/// scheduled).
///
/// A repeating message's firing ([`DueMessage::next`]) is a copy: added, with its own
/// message id, in the store transaction that moves the job to its next due time
/// ([`ebb_store::WriteOp::Repeat`]); the job itself is delivered at its last firing.
///
/// Errors: [`ActorError::Retired`] from a destination deleted or asleep (nothing was
/// released: its successor takes them).
#[derive(Message)]
#[rtype(result = "Result<usize, ActorError>")]
pub struct ReleaseScheduled {
    pub releases: Vec<DueMessage>,
}

/// One due message of [`ReleaseScheduled`].
#[derive(Debug, Clone)]
pub struct DueMessage {
    /// Its store transaction (a scheduled xid).
    pub xid: String,
    /// As stored.
    pub message: TopicMessage,
    /// For a repeating message that fires again: `(the job's next xid, the message id
    /// of this firing's copy)`.
    pub next: Option<(String, String)>,
}

/// Transaction `xid` was rolled back: forget its messages.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AbortPrepared {
    pub xid: String,
}

/// Run housekeeping now, as a timer tick would (an operator's "expire now"; tests use
/// it with a long period to count pages without waiting for the clock).
#[derive(Message)]
#[rtype(result = "()")]
pub struct RunHousekeeping;

/// Retire the destination, the first step of deleting it (the registry's
/// [`DeleteDestination`](crate::broker::DeleteDestination)): refused with
/// [`ActorError::InUse`] while a consumer is attached or an open transaction holds
/// (or is storing) messages for it; else the destination takes nothing new from now
/// on (publishes and subscriptions are answered [`ActorError::Retired`], so that the
/// broker sends them to its successor), stops housekeeping, and answers once every
/// write it queued before has committed.
#[derive(Message)]
#[rtype(result = "Result<(), ActorError>")]
pub struct Retire;

/// Stop the actor: the last step of deleting its destination, once its store rows are
/// gone. Messages still in its mailbox are answered as by a retired destination.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopDestination;

/// Stop housekeeping: cancel the timer, start no new page, and answer once the page in
/// flight (if any) has finished. A step of shutdown.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopHousekeeping;

/// The next expiry page of a run: sent by a destination to itself (`ctx.notify`), so
/// it waits behind the publishes, acks and dispatch already in the mailbox.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ExpiryPage;

/// The answer to [`Publish`] and [`PublishPrepared`]: a future of the publish's
/// outcome. The message already has its place in publish order when the ticket is
/// handed out; the ticket resolves with [`PublishOutcome`] once the message is accepted
/// (after its commit, for one that is stored), or with the write's error (nothing was
/// stored). Dropping the ticket changes nothing: the publish goes on.
pub struct PublishTicket(Ticket);

enum Ticket {
    /// Answered already (kept in memory, expired on arrival); taken when polled.
    Ready(Option<Result<PublishOutcome, ActorError>>),
    /// Waiting for the store.
    Waiting(oneshot::Receiver<Result<PublishOutcome, ActorError>>),
}

impl PublishTicket {
    /// A ticket that resolves at once with `outcome`.
    pub fn ready(outcome: Result<PublishOutcome, ActorError>) -> Self {
        Self(Ticket::Ready(Some(outcome)))
    }

    /// A ticket and the sender that resolves it (a write in flight answers through
    /// it).
    pub fn waiting() -> (Self, oneshot::Sender<Result<PublishOutcome, ActorError>>) {
        let (tx, rx) = oneshot::channel();
        (Self(Ticket::Waiting(rx)), tx)
    }
}

impl Future for PublishTicket {
    type Output = Result<PublishOutcome, ActorError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            Ticket::Ready(outcome) => {
                Poll::Ready(outcome.take().unwrap_or(Err(ActorError::Closed)))
            }
            // The destination stopped before the store answered.
            Ticket::Waiting(rx) => Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(ActorError::Closed))),
        }
    }
}

impl<A, M> actix::dev::MessageResponse<A, M> for PublishTicket
where
    A: Actor,
    M: Message<Result = PublishTicket>,
{
    fn handle(self, _: &mut A::Context, tx: Option<actix::dev::OneshotSender<M::Result>>) {
        if let Some(tx) = tx {
            let _ = tx.send(self);
        }
    }
}

/// A destination's counters being changed ([`DestinationCore::counters_mut`]):
/// published ([`Published::publish_counters`]) when dropped.
pub struct CountersMut<'a> {
    counters: &'a mut DestinationCounters,
    published: &'a Published,
}

impl std::ops::Deref for CountersMut<'_> {
    type Target = DestinationCounters;

    fn deref(&self) -> &DestinationCounters {
        self.counters
    }
}

impl std::ops::DerefMut for CountersMut<'_> {
    fn deref_mut(&mut self) -> &mut DestinationCounters {
        self.counters
    }
}

impl Drop for CountersMut<'_> {
    fn drop(&mut self) {
        self.published.publish_counters(self.counters);
    }
}

/// What every destination actor holds (see the module documentation).
pub struct DestinationCore {
    /// Which destination this is.
    pub key: DestinationKey,
    /// Its store key (`queue://jobs`), kept as text for the store and log lines.
    pub container: String,
    /// The policy that matched its name when it started.
    pub policy: Policy,
    /// The store actor (the only writer) and, through it, the pool for reads.
    pub store: StoreHandle,
    /// The housekeeping budget every destination's expiry pages share.
    pub budget: HousekeepingBudget,
    /// Published messages waiting for earlier ones before release.
    pub order: PublishOrder<Arc<TopicMessage>>,
    /// Messages of open transactions.
    pub prepared: PreparedMessages,
    /// Fences up for writes the broker makes itself ([`super::CommitFence`]).
    pub fence: super::CommitFence,
    /// Timer, expiry runs and pages, cleanup batches, stop.
    pub schedule: HousekeepingSchedule<SpawnHandle>,
    /// What every destination counts: read with [`Self::counters`], changed through
    /// [`Self::counters_mut`] (which publishes them).
    counters: DestinationCounters,
    /// Where its counters and gauges are published for stats readings
    /// ([`Published`]).
    published: Arc<Published>,
    /// Transactional publishes whose prepared store write is in flight.
    pub prepared_writes: u64,
    /// Retired for deletion ([`Retire`]): it takes no new message or consumer.
    pub retired: bool,
    /// Where its expiries and dead letters are reported (advisory topics).
    pub events: crate::events::Events,
}

impl DestinationCore {
    /// The core of destination `key`.
    pub fn new(
        key: DestinationKey,
        policy: Policy,
        store: StoreHandle,
        budget: HousekeepingBudget,
    ) -> Self {
        let container_key = key.clone();
        Self {
            container: key.container(),
            key,
            policy,
            store,
            budget,
            order: PublishOrder::default(),
            prepared: PreparedMessages::default(),
            fence: super::CommitFence::default(),
            schedule: HousekeepingSchedule::default(),
            counters: DestinationCounters::default(),
            published: Published::detached(container_key),
            prepared_writes: 0,
            retired: false,
            events: crate::events::Events::default(),
        }
    }

    /// Publishes its counters and gauges to `published` (its entry on the broker's
    /// [`crate::destination::StatsBoard`]) from now on, carrying on the counters the
    /// entry holds (those of the actor before it, when the destination slept or its
    /// actor stopped: see [`Published::carry_on`]).
    pub fn publish_to(&mut self, published: Arc<Published>) {
        published.carry_on(&mut self.counters);
        self.published = published;
    }

    /// Where it publishes its counters and gauges.
    pub fn published(&self) -> &Published {
        &self.published
    }

    /// Its counters, to change: they are published when the guard is dropped.
    pub fn counters_mut(&mut self) -> CountersMut<'_> {
        CountersMut {
            counters: &mut self.counters,
            published: &self.published,
        }
    }

    /// Counts `n` expired messages and reports them ([`crate::events::Event::Expired`]).
    pub fn count_expired(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        self.counters_mut().expired += n;
        let destination = &self.key;
        self.events.emit(|| crate::events::Event::Expired {
            destination: destination.clone(),
            count: n,
        });
    }

    /// The refusal a retired destination answers.
    pub fn retired_error(&self) -> ActorError {
        ActorError::Retired(self.container.clone())
    }

    /// The counters, with `expiry_armed` as it is now.
    pub fn counters(&self) -> DestinationCounters {
        DestinationCounters {
            expiry_armed: self.schedule.expiry_armed(),
            ..self.counters.clone()
        }
    }

    /// The store row for `message` on this destination (prepared when `xid` is set).
    pub fn new_message(&self, message: &TopicMessage, xid: Option<String>) -> NewMessage {
        stored_row(&self.key, message, xid)
    }

    /// Takes the counters of its entry again: writes the registry made for it while no
    /// actor ran ([`crate::broker::PublishAsleep`]) counted there after this actor was
    /// made. Called before it handles its first message, once those writes are done.
    pub fn carry_on_again(&mut self) {
        let published = Arc::clone(&self.published);
        published.carry_on(&mut self.counters);
    }

    /// Writes `message` through the store actor, queued now in publish order (cursors
    /// see ids in the order the destination releases messages); answers its store id.
    /// `expiring`: the message has an expiration housekeeping watches; the write is
    /// counted in flight (the caller counts it finished when it is answered).
    fn store_add(
        &mut self,
        message: &TopicMessage,
        xid: Option<String>,
        expiring: bool,
    ) -> impl Future<Output = Result<i64, ActorError>> {
        if expiring {
            self.schedule.expiring_write_started();
        }
        let write = self.write_in_order(WriteOp::Add(self.new_message(message, xid)));
        async move { Ok(write.await?.added()?) }
    }
}

/// The store row for `message` on destination `key` (prepared when `xid` is set): its
/// container, and the columns its kind asks for (indexed headers, a last value).
pub fn stored_row(key: &DestinationKey, message: &TopicMessage, xid: Option<String>) -> NewMessage {
    let capabilities = key.capabilities();
    NewMessage {
        container: key.container(),
        message_id: message.message_id.clone(),
        expiration: message.expiration,
        priority: message.priority,
        xid,
        payload: Arc::clone(&message.payload),
        indexed_headers: capabilities.indexed_headers,
        last_value: message
            .last_value_key(capabilities.last_value_header)
            .map(str::to_string),
    }
}

/// How a destination keeps a message it accepts ([`DestinationActor::plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Write it to the store (and answer the producer after the commit).
    pub store: bool,
    /// It has an expiration housekeeping must watch: arm expiry.
    pub arm_expiry: bool,
}

/// A destination actor: what each kind writes itself (see the module documentation).
pub trait DestinationActor: Actor<Context = Context<Self>> + Handler<ExpiryPage> {
    /// The shared state.
    fn core(&mut self) -> &mut DestinationCore;

    /// Its store writes in flight ([`Completions`]): publishes and acks whose result
    /// comes back to the actor.
    fn completions(&mut self) -> &mut Completions<Self>;

    /// How a message accepted now (not expired) is kept.
    fn plan(&self, message: &TopicMessage) -> Plan;

    /// Hands on messages released in publish order (none after a failed write) and
    /// dispatches.
    fn release(&mut self, messages: Vec<Arc<TopicMessage>>, ctx: &mut Context<Self>);

    /// A housekeeping tick (the timer, or [`RunHousekeeping`]): count it, start what
    /// is due.
    ///
    /// [`RunHousekeeping`]: crate::destination::RunHousekeeping
    fn tick(&mut self, ctx: &mut Context<Self>);

    /// The next expiry page of the run under way.
    fn expiry_page(&mut self, ctx: &mut Context<Self>);

    /// Whether expiry may stop looking once the store holds nothing that expires
    /// (a queue also holds expiring messages in memory only).
    fn may_disarm(&self) -> bool {
        true
    }

    /// An expiry run ended (its last page finished or failed, or a stop cut it). A
    /// destination woken for expiry ([`crate::destination::sleep::ExpireDue`]) answers
    /// and goes back to sleep here.
    fn run_ended(&mut self, _ctx: &mut Context<Self>) {}

    /// Why the destination cannot be deleted now, for consumers of its own kind
    /// (`None`: nothing stops it). See [`Retire`].
    fn in_use(&self) -> Option<String>;
}

/// Starts the housekeeping timer if there is work for it and it is not running.
pub fn schedule<A: DestinationActor>(act: &mut A, ctx: &mut Context<A>) {
    let period = act.core().policy.expire_messages_period;
    if act.core().schedule.timer_wanted(period) {
        let every = Duration::from_millis(period);
        let timer = ctx.run_interval(every, |act, ctx| act.tick(ctx));
        act.core().schedule.timer_started(timer);
    }
}

/// Cancels the timer when nothing is left for it to do.
pub fn idle_if_done<A: DestinationActor>(act: &mut A, ctx: &mut Context<A>) {
    if let Some(timer) = act.core().schedule.idle_timer() {
        ctx.cancel_future(timer);
    }
}

/// Starts an expiry page of the run under way: false (and the run is over) when a stop
/// is under way.
pub fn begin_page<A: DestinationActor>(act: &mut A, ctx: &mut Context<A>) -> bool {
    let core = act.core();
    if !core.schedule.start_page() {
        end_run(act, ctx);
        return false;
    }
    core.counters_mut().expiry_pages_started += 1;
    true
}

/// Ends the expiry run under way: answers a waiting stop, keeps the timer only while
/// there is work.
pub fn end_run<A: DestinationActor>(act: &mut A, ctx: &mut Context<A>) {
    let core = act.core();
    core.schedule.end_run();
    core.schedule.wake_stop_waiters();
    schedule(act, ctx);
    idle_if_done(act, ctx);
    act.run_ended(ctx);
}

/// An expiry page finished after handling `rows` rows under budget ticket `ticket`;
/// `full` says more may wait: the next page goes through the mailbox at once, or the
/// run ends (and a run that found nothing checks whether anything still expires).
pub fn page_finished<A: DestinationActor>(
    act: &mut A,
    ctx: &mut Context<A>,
    rows: u64,
    ticket: Option<u64>,
    full: bool,
) {
    let core = act.core();
    core.counters_mut().page_finished(rows, ticket);
    match core.schedule.page_finished(full, rows) {
        AfterPage::NextPage => ctx.notify(ExpiryPage),
        AfterPage::RunOver { found_nothing } => {
            if found_nothing {
                disarm_if_nothing_expires(act, ctx);
            }
            end_run(act, ctx);
        }
    }
}

/// An expiry page failed: counted, the run ends, the next tick tries again.
pub fn page_failed<A: DestinationActor>(act: &mut A, ctx: &mut Context<A>, error: &ActorError) {
    let core = act.core();
    core.schedule.page_finished(false, 0);
    core.counters_mut().page_failed();
    tracing::warn!(destination = %core.container, %error, "expiry page failed; the next tick tries again");
    end_run(act, ctx);
}

/// After a run that found nothing: stop looking until a message with an expiration
/// arrives, if the store holds none (one indexed row at most) and the actor agrees. No
/// check while an expiring message's write is in flight, and a check that an arriving
/// expiring message overtook is dropped: a message being stored is never missed.
fn disarm_if_nothing_expires<A: DestinationActor>(act: &mut A, ctx: &mut Context<A>) {
    let Some(token) = act.core().schedule.disarm_check() else {
        return;
    };
    let store = Arc::clone(act.core().store.store());
    let container = act.core().container.clone();
    let fut = async move { store.has_expiring(&container).await };
    ctx.spawn(fut.into_actor(act).map(move |result, act, ctx| {
        if let Ok(false) = result {
            if act.may_disarm() && act.core().schedule.disarm_if_unchanged(token) {
                idle_if_done(act, ctx);
            }
        }
    }));
}

/// The answer to a publish that was accepted (not expired on arrival).
fn accepted(id: Option<i64>) -> PublishOutcome {
    PublishOutcome {
        id,
        expired_on_arrival: false,
    }
}

/// Accepts a publish, in transaction `xid` or not (see the module documentation), and
/// answers with its [`PublishTicket`]: the message has its place in publish order now.
///
/// A message expired on arrival is counted (enqueued and expired) and answered at
/// once. Otherwise, as [`DestinationActor::plan`] says, it arms expiry, and it is
/// stored through the store actor and answered after the commit, or kept in memory
/// and answered at once. Outside a transaction it is released in publish order and
/// counted as enqueued once accepted; a failed store write answers the error and is
/// not counted. In a transaction it is kept (stored prepared) until
/// [`commit_prepared`].
pub fn publish<A: DestinationActor>(
    act: &mut A,
    message: TopicMessage,
    xid: Option<String>,
    ctx: &mut Context<A>,
) -> PublishTicket {
    if act.core().retired {
        return PublishTicket::ready(Err(act.core().retired_error()));
    }
    if message.is_expired(now_ms()) {
        act.core().counters_mut().enqueued += 1;
        act.core().count_expired(1);
        let outcome = PublishOutcome {
            id: None,
            expired_on_arrival: true,
        };
        return PublishTicket::ready(Ok(outcome));
    }
    let plan = act.plan(&message);
    if plan.arm_expiry {
        act.core().schedule.arm();
        schedule(act, ctx);
    }
    let core = act.core();
    match (xid, plan.store) {
        (None, false) => {
            core.counters_mut().enqueued += 1;
            let released = core.order.push(Arc::new(message));
            act.release(released, ctx);
            PublishTicket::ready(Ok(accepted(None)))
        }
        (None, true) => {
            // The place in publish order is taken now and filled when the store answers.
            let place = core.order.reserve();
            let write = core.store_add(&message, None, plan.arm_expiry);
            let (ticket, answer) = PublishTicket::waiting();
            act.completions()
                .when_done(ctx, write, move |result, act, ctx| {
                    let core = act.core();
                    if plan.arm_expiry {
                        core.schedule.expiring_write_finished();
                    }
                    let (stored, outcome) = match result {
                        Ok(id) => {
                            core.counters_mut().enqueued += 1;
                            let stored = TopicMessage {
                                id: Some(id),
                                ..message
                            };
                            (Some(Arc::new(stored)), Ok(accepted(Some(id))))
                        }
                        Err(e) => (None, Err(e)),
                    };
                    let released = core.order.fill(place, stored);
                    act.release(released, ctx);
                    let _ = answer.send(outcome);
                });
            ticket
        }
        (Some(xid), false) => {
            core.prepared.add(xid, message);
            PublishTicket::ready(Ok(accepted(None)))
        }
        (Some(xid), true) => {
            let write = core.store_add(&message, Some(xid.clone()), plan.arm_expiry);
            core.prepared_writes += 1;
            let (ticket, answer) = PublishTicket::waiting();
            act.completions()
                .when_done(ctx, write, move |result, act, _| {
                    act.core().prepared_writes -= 1;
                    if plan.arm_expiry {
                        act.core().schedule.expiring_write_finished();
                    }
                    let outcome = result.map(|id| {
                        let prepared = TopicMessage {
                            id: Some(id),
                            ..message
                        };
                        act.core().prepared.add(xid, prepared);
                        accepted(Some(id))
                    });
                    let _ = answer.send(outcome);
                });
            ticket
        }
    }
}

/// Transaction `xid` committed in the store (`renumbered`: its rows' `(old, new)` ids):
/// its messages are released in the order they were sent, and counted as enqueued.
pub fn commit_prepared<A: DestinationActor>(
    act: &mut A,
    xid: &str,
    renumbered: &[(i64, i64)],
    ctx: &mut Context<A>,
) {
    let core = act.core();
    let messages = core.prepared.commit(xid, renumbered);
    core.counters_mut().enqueued += messages.len() as u64;
    let mut released = Vec::new();
    let mut messages = messages.into_iter();
    // The places its fence reserved ([`super::FenceCommit`]), in send order (a
    // message whose row was gone leaves its place empty); without a fence, in order
    // from now.
    for place in core.fence.take_places(xid) {
        released.extend(core.order.fill(place, messages.next().map(Arc::new)));
    }
    for message in messages {
        released.extend(core.order.push(Arc::new(message)));
    }
    act.release(released, ctx);
}

/// Handles [`AbortPrepared`]: forgets the messages of `xid`; the places its fence
/// reserved ([`super::FenceCommit`]) are filled with nothing.
pub fn abort_prepared<A: DestinationActor>(act: &mut A, xid: &str, ctx: &mut Context<A>) {
    let core = act.core();
    core.prepared.abort(xid);
    let mut released = Vec::new();
    for place in core.fence.take_places(xid) {
        released.extend(core.order.fill(place, None));
    }
    act.release(released, ctx);
}

/// Handles [`ReleaseScheduled`] (see there): expiry is armed for messages that
/// expire; each committed message is counted as enqueued and released in its place.
pub fn release_scheduled<A: DestinationActor>(
    act: &mut A,
    releases: Vec<DueMessage>,
    ctx: &mut Context<A>,
) -> ResponseFuture<Result<usize, ActorError>> {
    if act.core().retired {
        // A commit now would land after its successor read the store.
        let refused = act.core().retired_error();
        return Box::pin(async move { Err(refused) });
    }
    if releases.iter().any(|due| due.message.expiration > 0) {
        act.core().schedule.arm();
        schedule(act, ctx);
    }
    let mut answers = Vec::with_capacity(releases.len());
    for DueMessage { xid, message, next } in releases {
        let core = act.core();
        let place = core.order.reserve();
        type Stored = Pin<Box<dyn Future<Output = Result<Option<i64>, ActorError>>>>;
        let (message, commit): (TopicMessage, Stored) = match next {
            None => {
                let commit = core.write_in_order(WriteOp::Commit { xid: xid.clone() });
                let first = async move {
                    let renumbered = commit.await?.committed()?;
                    Ok(renumbered.first().map(|(_, new)| *new))
                };
                (message, Box::pin(first))
            }
            Some((next_xid, message_id)) => {
                let copy = TopicMessage {
                    id: None,
                    message_id,
                    ..message
                };
                let row = core.new_message(&copy, None);
                let fired = core.write_in_order(WriteOp::Repeat {
                    xid: xid.clone(),
                    next_xid,
                    copy: row,
                });
                (copy, Box::pin(async move { Ok(fired.await?.repeated()?) }))
            }
        };
        let (answer, answered) = oneshot::channel();
        act.completions()
            .when_done(ctx, commit, move |result, act, ctx| {
                let core = act.core();
                let stored = match result {
                    Ok(id) => id.map(|new| {
                        core.counters_mut().enqueued += 1;
                        Arc::new(TopicMessage {
                            id: Some(new),
                            ..message
                        })
                    }),
                    Err(e) => {
                        tracing::warn!(destination = %core.container, %xid, error = %e, "a due scheduled message could not be released; it stays scheduled");
                        None
                    }
                };
                let committed = stored.is_some();
                let released = core.order.fill(place, stored);
                act.release(released, ctx);
                let _ = answer.send(committed);
            });
        answers.push(answered);
    }
    Box::pin(async move {
        Ok(futures::future::join_all(answers)
            .await
            .into_iter()
            .filter(|a| matches!(a, Ok(true)))
            .count())
    })
}

/// Handles [`Retire`] (see there).
pub fn retire<A: DestinationActor>(
    act: &mut A,
    ctx: &mut Context<A>,
) -> ResponseFuture<Result<(), ActorError>> {
    let refusal = act.in_use().or_else(|| {
        let core = act.core();
        let open = core.prepared.transactions() as u64 + core.prepared_writes;
        if open > 0 {
            return Some(format!("{open} open transactions hold messages for it"));
        }
        // Places reserved for a write the broker makes (a COMMIT, composite sends):
        // they are filled within that write's round trip.
        (!core.fence.is_idle())
            .then(|| "a commit in progress holds places in it; try again".to_string())
    });
    if let Some(why) = refusal {
        let container = act.core().container.clone();
        return Box::pin(async move {
            Err(ActorError::InUse(format!(
                "destination {container} cannot be deleted now: {why}"
            )))
        });
    }
    act.core().retired = true;
    let stopped = stop_housekeeping(act, ctx);
    let store = act.core().store.clone();
    Box::pin(async move {
        stopped.await;
        // Every write queued before this one commits first.
        store.flush().await
    })
}

impl PublishTicket {
    /// True when the publish was refused because its destination was retired
    /// ([`Retire`]): nothing was done, and the message may go to the successor.
    pub fn is_retired(&self) -> bool {
        matches!(self.0, Ticket::Ready(Some(Err(ActorError::Retired(_)))))
    }
}

/// Begins a stop (a step of shutdown): cancels the timer, starts nothing new, and
/// answers once no page and no cleanup batch is in flight.
pub fn stop_housekeeping<A: DestinationActor>(
    act: &mut A,
    ctx: &mut Context<A>,
) -> ResponseFuture<()> {
    let (timer, stopped) = act.core().schedule.stop();
    if let Some(timer) = timer {
        ctx.cancel_future(timer);
    }
    Box::pin(async move {
        let _ = stopped.await;
    })
}
