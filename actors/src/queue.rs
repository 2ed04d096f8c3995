//! The queue actor: one per queue.
//!
//! State it owns: its consumers (prefetch credit and the deliveries each holds), its
//! cursor ([`QueueCursor`]: what waits, in order, and what to read from the store next),
//! the release order of published messages, the failed-delivery count of each message
//! in memory, its housekeeping timer and expiry state, and its counters.
//!
//! Messages it accepts: [`Publish`], [`PublishPrepared`], [`CommitPrepared`],
//! [`AbortPrepared`], [`Subscribe`] (non-durable only), [`Ack`], [`Nack`], [`Detach`],
//! [`GetQueueStats`], [`RunHousekeeping`], [`StopHousekeeping`], [`AcceptDeadLetter`];
//! and from itself, the timer tick and [`QueueExpiryPage`].
//!
//! **Competing consumers.** Each message goes to one consumer: the next one, in
//! round-robin order, that has free prefetch. An ack (individual or cumulative) deletes
//! the message's row through the store actor and is answered after the commit.
//!
//! **Redelivery.** A message whose delivery ends without an ack (NACK, or its consumer
//! detached) goes back in its place with its failed-delivery count up and is delivered
//! again marked `redelivered`. Past `maximum_redeliveries` failures it goes to the
//! dead-letter queue (`DLQ.<queue>` or the policy's shared one) with the headers
//! `dlqDeliveryFailureCause` and `originalDestination` (ActiveMQ's names): moved in one
//! store transaction, so it is never in both queues and never in neither. A
//! non-persistent dead message is dropped and counted (as ActiveMQ's default
//! `processNonPersistent=false`); a dead-letter queue does not dead-letter its own.
//!
//! **Expiry.** As for topics: every `expire_messages_period` ms, while the queue has seen
//! a message with an expiration, a run of pages starts. A page is one bounded delete of
//! at most `max_expire_page_size` expired rows chosen by expiration time (so a short TTL
//! behind a long one is found, the fault of ActiveMQ's AMQ-6967), through the store
//! actor; with `dead_letter_expired`, one bounded read and a move per message instead.
//! A full page sends the next to the queue's own mailbox at once; every page holds a
//! permit of the shared [`HousekeepingBudget`]. Messages found expired at dispatch are
//! removed the same way and never delivered.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use ebb_store::{NewMessage, Payload, WriteOp, WriteOutcome};
use tokio::sync::mpsc;

use crate::broker::{BrokerActor, GetQueue};
use crate::error::ActorError;
use crate::housekeeping::HousekeepingBudget;
use crate::messages::*;
use crate::policy::Policy;
use crate::queue_cursor::{Entry, Place, QueueCursor};
use crate::store_actor::StoreHandle;
use crate::topic::now_ms;

/// Header naming why a message went to the dead-letter queue (ActiveMQ's property).
pub const DLQ_CAUSE_HEADER: &str = "dlqDeliveryFailureCause";

/// Header naming the destination a dead letter came from (ActiveMQ's property).
pub const DLQ_ORIGIN_HEADER: &str = "originalDestination";

/// One consumer of the queue.
struct Consumer {
    prefetch: usize,
    deliver: mpsc::Sender<Delivery>,
    next_delivery_id: u64,
    /// Delivery id → the message's place.
    in_flight: BTreeMap<u64, Place>,
}

/// A delivered message, not yet acked.
struct Delivered {
    entry: Entry,
}

/// A message's move to the dead-letter queue: answers its new id there, or `None` if
/// its row was already gone.
type DeadLetterMove =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Option<i64>, ActorError>>>>;

/// The next expiry page of a run (sent by the queue to itself).
#[derive(Message)]
#[rtype(result = "()")]
pub struct QueueExpiryPage;

/// See the module documentation.
pub struct QueueActor {
    container: String,
    name: String,
    policy: Policy,
    store: StoreHandle,
    budget: HousekeepingBudget,
    registry: Option<Addr<BrokerActor>>,
    consumers: BTreeMap<u64, Consumer>,
    next_consumer: u64,
    /// Round-robin: the consumer that got the last delivery.
    last_consumer: u64,
    cursor: QueueCursor,
    delivered: HashMap<Place, Delivered>,
    /// Publish order: messages are released to the cursor by `seq`.
    next_seq: u64,
    release_seq: u64,
    completed: BTreeMap<u64, Option<Arc<TopicMessage>>>,
    prepared: HashMap<String, Vec<TopicMessage>>,
    // Housekeeping.
    timer: Option<SpawnHandle>,
    expiry_armed: bool,
    run_active: bool,
    page_in_flight: bool,
    stopping: bool,
    stop_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    stats: QueueStats,
}

impl QueueActor {
    /// `container` is the queue's store key (`queue://NAME`). `registry` finds the
    /// dead-letter queue (without it, dead messages are dropped and counted).
    pub fn new(
        container: String,
        policy: Policy,
        store: StoreHandle,
        budget: HousekeepingBudget,
        registry: Option<Addr<BrokerActor>>,
    ) -> Self {
        let name = container
            .strip_prefix("queue://")
            .unwrap_or(&container)
            .to_string();
        let cache = (policy.max_page_size.max(1) as usize) * 2;
        Self {
            container,
            name,
            policy,
            store,
            budget,
            registry,
            consumers: BTreeMap::new(),
            next_consumer: 1,
            last_consumer: 0,
            cursor: QueueCursor::new(cache),
            delivered: HashMap::new(),
            next_seq: 0,
            release_seq: 0,
            completed: BTreeMap::new(),
            prepared: HashMap::new(),
            timer: None,
            expiry_armed: false,
            run_active: false,
            page_in_flight: false,
            stopping: false,
            stop_waiters: Vec::new(),
            stats: QueueStats::default(),
        }
    }

    /// Records the outcome of publish `seq` and releases, in order, every message whose
    /// predecessors are all done.
    fn complete(&mut self, seq: u64, message: Option<Arc<TopicMessage>>, ctx: &mut Context<Self>) {
        self.completed.insert(seq, message);
        let last = self.store.store().last_assigned_id();
        while let Some(message) = self.completed.remove(&self.release_seq) {
            self.release_seq += 1;
            if let Some(message) = message {
                self.cursor.offer(message, last);
            }
        }
        self.dispatch(ctx);
    }

    /// Releases `message` as the next published message.
    fn release(&mut self, message: TopicMessage, ctx: &mut Context<Self>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.complete(seq, Some(Arc::new(message)), ctx);
    }

    /// The next consumer after the last one served, in id order, with free prefetch.
    fn next_consumer(&self) -> Option<u64> {
        let free = |(id, c): (&u64, &Consumer)| (c.in_flight.len() < c.prefetch).then_some(*id);
        self.consumers
            .range(self.last_consumer + 1..)
            .find_map(free)
            .or_else(|| self.consumers.range(..=self.last_consumer).find_map(free))
    }

    /// Hands waiting messages to consumers with free prefetch, round-robin; removes
    /// what expired on the way; starts a store read if the cursor needs one.
    fn dispatch(&mut self, ctx: &mut Context<Self>) {
        let now = now_ms();
        let mut expired = Vec::new();
        while let Some(consumer_id) = self.next_consumer() {
            let Some((place, entry)) = self.cursor.pop() else {
                break;
            };
            if entry.message.is_expired(now) {
                expired.push(entry);
                continue;
            }
            let consumer = self.consumers.get_mut(&consumer_id).expect("found above");
            let delivery_id = consumer.next_delivery_id;
            let delivery = Delivery {
                subscription: consumer_id,
                delivery_id,
                message: Arc::clone(&entry.message),
                redelivered: entry.failed_deliveries > 0,
            };
            // The channel holds the prefetch, so it is full only if the consumer is gone.
            if consumer.deliver.try_send(delivery).is_err() {
                self.cursor.put_back(place, entry);
                self.detach(consumer_id, ctx);
                continue;
            }
            consumer.next_delivery_id += 1;
            consumer.in_flight.insert(delivery_id, place);
            self.last_consumer = consumer_id;
            self.stats.dispatched += 1;
            if entry.failed_deliveries > 0 {
                self.stats.redelivered += 1;
            }
            self.delivered.insert(place, Delivered { entry });
        }
        self.remove_expired(expired, ctx);
        self.read_if_needed(ctx);
    }

    /// Starts a bounded store read when the cursor wants one (also with no consumer: a
    /// queue caches what it may, so its memory limit holds producers back, as ActiveMQ's).
    fn read_if_needed(&mut self, ctx: &mut Context<Self>) {
        let Some((after, limit)) = self.cursor.read_request() else {
            return;
        };
        let store = Arc::clone(self.store.store());
        let container = self.container.clone();
        let fut = async move { store.browse(&container, after, limit).await };
        ctx.spawn(fut.into_actor(self).map(|result, act, ctx| match result {
            Ok(rows) => {
                let rows = rows
                    .iter()
                    .map(|m| Arc::new(TopicMessage::from_stored(m)))
                    .collect();
                act.cursor.on_read(Some(rows));
                act.dispatch(ctx);
            }
            Err(e) => {
                act.cursor.on_read(None);
                tracing::warn!(queue = %act.container, error = %e, "backlog read failed; retrying in 1 s");
                ctx.run_later(Duration::from_secs(1), |act, ctx| act.dispatch(ctx));
            }
        }));
    }

    /// Expired messages taken off the queue: to the dead-letter queue with
    /// `dead_letter_expired`, otherwise deleted; counted once each (a row another path
    /// already deleted counts 0).
    fn remove_expired(&mut self, expired: Vec<Entry>, ctx: &mut Context<Self>) {
        if expired.is_empty() {
            return;
        }
        if self.policy.dead_letter_expired {
            for entry in expired {
                self.dead_letter(entry, "message expired", true, ctx);
            }
            return;
        }
        let mut ids = Vec::new();
        for entry in expired {
            match entry.message.id {
                Some(id) => ids.push(id),
                None => self.stats.expired += 1,
            }
        }
        if ids.is_empty() {
            return;
        }
        let op = WriteOp::Remove {
            container: self.container.clone(),
            ids,
        };
        let store = self.store.clone();
        ctx.spawn(async move { store.write(op).await }.into_actor(self).map(|result, act, _| {
            match result {
                Ok(WriteOutcome::Deleted(n)) => act.stats.expired += n,
                Ok(_) => {}
                Err(e) => tracing::warn!(queue = %act.container, error = %e, "delete of expired messages failed; housekeeping retries"),
            }
        }));
    }

    /// Sends `entry` to the dead-letter queue with `cause` (or drops it: see the module
    /// documentation). `expired` says which counter it adds to when dropped.
    fn dead_letter(&mut self, entry: Entry, cause: &str, expired: bool, ctx: &mut Context<Self>) {
        if let Some(moved) = self.dead_letter_move(entry, cause, expired, ctx) {
            ctx.spawn(
                moved
                    .into_actor(self)
                    .map(move |result, act, _| act.count_move(result, expired)),
            );
        }
    }

    /// The move of `entry` to the dead-letter queue, to be run; `None` when it has
    /// nowhere to go (non-persistent, or this is a dead-letter queue): then it is dropped
    /// and counted here.
    fn dead_letter_move(
        &mut self,
        entry: Entry,
        cause: &str,
        expired: bool,
        ctx: &mut Context<Self>,
    ) -> Option<DeadLetterMove> {
        let dlq = format!("queue://{}", self.policy.dead_letter_queue_for(&self.name));
        let (Some(id), Some(registry), false) = (
            entry.message.id,
            self.registry.clone(),
            dlq == self.container || self.name.starts_with("DLQ."),
        ) else {
            if expired {
                self.stats.expired += 1;
            } else {
                self.stats.discarded += 1;
                tracing::warn!(queue = %self.container, message_id = %entry.message.message_id, %cause,
                    "dead message discarded: it is non-persistent, or this queue is a dead-letter queue");
            }
            if let Some(id) = entry.message.id {
                self.delete_rows(vec![id], ctx);
            }
            return None;
        };
        let original = &entry.message;
        let mut headers = original.payload.headers.clone();
        headers.push((DLQ_CAUSE_HEADER.into(), cause.into()));
        headers.push((DLQ_ORIGIN_HEADER.into(), format!("/queue/{}", self.name)));
        let message = TopicMessage {
            id: None,
            message_id: original.message_id.clone(),
            persistent: true,
            priority: original.priority,
            // A dead letter does not expire (ActiveMQ clears the expiration).
            expiration: 0,
            payload: Arc::new(Payload {
                timestamp_ms: original.payload.timestamp_ms,
                headers,
                body: original.payload.body.clone(),
            }),
            charge: None,
        };
        let from = self.container.clone();
        Some(Box::pin(async move {
            let target = registry.send(GetQueue(dlq)).await??;
            let moved = AcceptDeadLetter {
                from,
                from_id: id,
                message,
            };
            target.send(moved).await?
        }))
    }

    /// Counts a finished move to the dead-letter queue.
    fn count_move(&mut self, result: Result<Option<i64>, ActorError>, expired: bool) {
        match result {
            Ok(Some(_)) => {
                self.stats.dead_lettered += 1;
                self.stats.expired += u64::from(expired);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(queue = %self.container, error = %e, "move to the dead-letter queue failed; the message stays in the store and comes back after a restart")
            }
        }
    }

    /// Deletes rows without counting them (a dead message with nowhere to go).
    fn delete_rows(&mut self, ids: Vec<i64>, ctx: &mut Context<Self>) {
        let op = WriteOp::Remove {
            container: self.container.clone(),
            ids,
        };
        let store = self.store.clone();
        ctx.spawn(async move { store.write(op).await }.into_actor(self).map(|result, act, _| {
            if let Err(e) = result {
                tracing::warn!(queue = %act.container, error = %e, "delete of a dead message failed");
            }
        }));
    }

    /// A delivery ended without an ack: the message goes back in its place, or to the
    /// dead-letter queue past `maximum_redeliveries`.
    fn give_back(&mut self, place: Place, why: &str, ctx: &mut Context<Self>) {
        let Some(Delivered { mut entry, .. }) = self.delivered.remove(&place) else {
            return;
        };
        entry.failed_deliveries += 1;
        if entry.failed_deliveries > self.policy.maximum_redeliveries {
            let cause = format!(
                "{why}: delivery failed {} times (maximum_redeliveries {})",
                entry.failed_deliveries, self.policy.maximum_redeliveries
            );
            self.dead_letter(entry, &cause, false, ctx);
        } else {
            self.cursor.put_back(place, entry);
        }
    }

    /// Consumer `id` went away: what it held goes back (each a failed delivery).
    fn detach(&mut self, id: u64, ctx: &mut Context<Self>) {
        let Some(consumer) = self.consumers.remove(&id) else {
            return;
        };
        for place in consumer.in_flight.into_values() {
            self.give_back(place, "consumer closed without ack", ctx);
        }
    }

    fn schedule(&mut self, ctx: &mut Context<Self>) {
        let period = self.policy.expire_messages_period;
        if period == 0 || self.stopping || self.timer.is_some() || !self.expiry_armed {
            return;
        }
        let every = Duration::from_millis(period);
        self.timer = Some(ctx.run_interval(every, |act, ctx| act.tick(ctx)));
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        self.stats.ticks += 1;
        if self.run_active || self.stopping || !self.expiry_armed {
            return;
        }
        self.run_active = true;
        self.stats.expiry_runs += 1;
        // Non-persistent messages exist only here: drop the expired ones (bounded by
        // what the queue holds in memory).
        let now = now_ms();
        for (_, entry) in self.cursor.take_expired(now) {
            if entry.message.id.is_none() {
                self.stats.expired += 1;
            } else if self.policy.dead_letter_expired {
                self.dead_letter(entry, "message expired", true, ctx);
            } else {
                // Stored: the page below deletes it and counts it.
            }
        }
        self.page(ctx);
    }

    /// Runs one expiry page (see the module documentation).
    fn page(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            self.end_run(ctx);
            return;
        }
        self.page_in_flight = true;
        self.stats.expiry_pages_started += 1;
        let (store, budget) = (self.store.clone(), self.budget.clone());
        let container = self.container.clone();
        let limit = self.policy.max_expire_page_size.max(1);
        let to_dlq = self.policy.dead_letter_expired;
        let fut = async move {
            let Some(permit) = budget.acquire().await else {
                return Ok::<_, ActorError>((Vec::new(), Vec::new(), None));
            };
            if to_dlq {
                let rows = store
                    .store()
                    .read_expired(&container, now_ms(), limit)
                    .await?;
                return Ok((Vec::new(), rows, Some(permit)));
            }
            let op = WriteOp::ExpireQueue {
                container,
                now_ms: now_ms(),
                limit,
            };
            match store.write(op).await? {
                WriteOutcome::Removed(ids) => Ok((ids, Vec::new(), Some(permit))),
                other => unreachable!("an expiry page answers Removed, not {other:?}"),
            }
        };
        ctx.spawn(fut.into_actor(self).map(move |result, act, ctx| {
            let (removed, to_move, permit) = match result {
                Ok(page) => page,
                Err(e) => {
                    act.page_in_flight = false;
                    act.stats.expiry_pages += 1;
                    tracing::warn!(queue = %act.container, error = %e, "expiry page failed; the next tick tries again");
                    act.end_run(ctx);
                    return;
                }
            };
            let rows = (removed.len() + to_move.len()) as u64;
            act.stats.expired += removed.len() as u64;
            for id in &removed {
                act.cursor.remove(*id);
            }
            // A message in flight stays with its consumer; the others are taken off the
            // cursor now, before anything can dispatch them, and moved. The page (and its
            // permit) lasts until every move is committed, so a run never has more than
            // one page of moves in flight.
            let mut moves = Vec::new();
            for stored in to_move {
                if act.delivered.contains_key(&(stored.id, 0)) {
                    continue;
                }
                act.cursor.remove(stored.id);
                let entry = Entry::new(Arc::new(TopicMessage::from_stored(&stored)));
                if let Some(moved) = act.dead_letter_move(entry, "message expired", true, ctx) {
                    moves.push(moved);
                }
            }
            let progressed = !removed.is_empty() || !moves.is_empty();
            let full = rows >= u64::from(limit) && progressed;
            let done = futures::future::join_all(moves);
            ctx.spawn(done.into_actor(act).map(move |results, act, ctx| {
                for result in results {
                    act.count_move(result, true);
                }
                act.page_in_flight = false;
                act.stats.expiry_pages += 1;
                if let Some(permit) = &permit {
                    act.stats.last_page_ticket = permit.ticket;
                }
                drop(permit);
                act.stats.max_expiry_page_rows = act.stats.max_expiry_page_rows.max(rows);
                if full && !act.stopping {
                    ctx.notify(QueueExpiryPage);
                } else {
                    if rows == 0 {
                        act.disarm_if_nothing_expires(ctx);
                    }
                    act.end_run(ctx);
                }
            }));
        }));
    }

    fn end_run(&mut self, ctx: &mut Context<Self>) {
        self.run_active = false;
        self.wake_stop_waiters();
        if !self.expiry_armed && !self.run_active {
            if let Some(timer) = self.timer.take() {
                ctx.cancel_future(timer);
            }
        }
    }

    fn wake_stop_waiters(&mut self) {
        if !self.page_in_flight {
            for waiter in self.stop_waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
    }

    /// After a run that found nothing: stop looking until a message with an expiration
    /// arrives, if the store holds none and no message in memory has one.
    fn disarm_if_nothing_expires(&mut self, ctx: &mut Context<Self>) {
        let store = Arc::clone(self.store.store());
        let container = self.container.clone();
        let fut = async move { store.has_expiring(&container).await };
        ctx.spawn(fut.into_actor(self).map(|result, act, ctx| {
            if let Ok(false) = result {
                if act.cursor.transient_len() == 0 {
                    act.expiry_armed = false;
                    if let Some(timer) = act.timer.take() {
                        ctx.cancel_future(timer);
                    }
                }
            }
        }));
    }

    /// The common start of a publish: a message expired on arrival is counted and
    /// answered; otherwise expiry is armed if it has an expiration.
    fn accept(
        &mut self,
        message: &TopicMessage,
        ctx: &mut Context<Self>,
    ) -> Result<(), PublishOutcome> {
        self.stats.enqueued += 1;
        if message.is_expired(now_ms()) {
            self.stats.expired += 1;
            return Err(PublishOutcome {
                id: None,
                expired_on_arrival: true,
            });
        }
        if message.expiration > 0 {
            self.expiry_armed = true;
            self.schedule(ctx);
        }
        Ok(())
    }

    fn store_write(
        &self,
        message: &TopicMessage,
        xid: Option<String>,
    ) -> impl std::future::Future<Output = Result<i64, ActorError>> {
        let op = WriteOp::Add(new_message(&self.container, message, xid));
        // In publish order: the cursor sees ids in the order it releases messages.
        let write = self.store.write_in_order(op);
        async move {
            match write.await? {
                WriteOutcome::Added(id) => Ok(id),
                other => unreachable!("an add answers Added, not {other:?}"),
            }
        }
    }

    /// Reads whether the store holds expiring messages before anything else is handled.
    fn load(&mut self, ctx: &mut Context<Self>) {
        let store = Arc::clone(self.store.store());
        let container = self.container.clone();
        let fut = async move { store.has_expiring(&container).await };
        ctx.wait(fut.into_actor(self).map(|result, act, ctx| match result {
            Ok(armed) => {
                act.expiry_armed = armed;
                act.schedule(ctx);
            }
            Err(e) => {
                // Arm anyway: a page that finds nothing disarms it again.
                tracing::warn!(queue = %act.container, error = %e, "cannot read whether messages expire; expiry armed");
                act.expiry_armed = true;
                act.schedule(ctx);
            }
        }));
    }
}

/// The store row for `message` on `container`.
fn new_message(container: &str, message: &TopicMessage, xid: Option<String>) -> NewMessage {
    NewMessage {
        container: container.to_string(),
        message_id: message.message_id.clone(),
        expiration: message.expiration,
        priority: message.priority,
        xid,
        payload: Arc::clone(&message.payload),
    }
}

impl Actor for QueueActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.load(ctx);
    }
}

impl Handler<Publish> for QueueActor {
    type Result = ResponseActFuture<Self, Result<PublishOutcome, ActorError>>;

    fn handle(&mut self, msg: Publish, ctx: &mut Context<Self>) -> Self::Result {
        let message = msg.0;
        if let Err(outcome) = self.accept(&message, ctx) {
            return Box::pin(fut::ready(Ok(outcome)));
        }
        let accepted = PublishOutcome {
            id: None,
            expired_on_arrival: false,
        };
        if !message.persistent {
            self.release(message, ctx);
            return Box::pin(fut::ready(Ok(accepted)));
        }
        // Reserve the place in publish order now; fill it when the store answers.
        let seq = self.next_seq;
        self.next_seq += 1;
        let write = self.store_write(&message, None);
        Box::pin(
            write
                .into_actor(self)
                .map(move |result, act, ctx| match result {
                    Ok(id) => {
                        let stored = TopicMessage {
                            id: Some(id),
                            ..message
                        };
                        act.complete(seq, Some(Arc::new(stored)), ctx);
                        Ok(PublishOutcome {
                            id: Some(id),
                            ..accepted
                        })
                    }
                    Err(e) => {
                        act.stats.enqueued -= 1;
                        act.complete(seq, None, ctx);
                        Err(e)
                    }
                }),
        )
    }
}

impl Handler<PublishPrepared> for QueueActor {
    type Result = ResponseActFuture<Self, Result<PublishOutcome, ActorError>>;

    fn handle(&mut self, msg: PublishPrepared, ctx: &mut Context<Self>) -> Self::Result {
        let PublishPrepared { message, xid } = msg;
        if let Err(outcome) = self.accept(&message, ctx) {
            return Box::pin(fut::ready(Ok(outcome)));
        }
        let accepted = PublishOutcome {
            id: None,
            expired_on_arrival: false,
        };
        if !message.persistent {
            self.prepared.entry(xid).or_default().push(message);
            return Box::pin(fut::ready(Ok(accepted)));
        }
        let write = self.store_write(&message, Some(xid.clone()));
        Box::pin(write.into_actor(self).map(move |result, act, _| {
            let id = result?;
            act.prepared.entry(xid).or_default().push(TopicMessage {
                id: Some(id),
                ..message
            });
            Ok(PublishOutcome {
                id: Some(id),
                ..accepted
            })
        }))
    }
}

impl Handler<CommitPrepared> for QueueActor {
    type Result = ();

    fn handle(&mut self, msg: CommitPrepared, ctx: &mut Context<Self>) {
        let renumbered: HashMap<i64, i64> = msg.renumbered.into_iter().collect();
        for message in self.prepared.remove(&msg.xid).unwrap_or_default() {
            let id = match message.id {
                Some(old) => match renumbered.get(&old) {
                    Some(new) => Some(*new),
                    None => continue,
                },
                None => None,
            };
            self.release(TopicMessage { id, ..message }, ctx);
        }
    }
}

impl Handler<AbortPrepared> for QueueActor {
    type Result = ();

    fn handle(&mut self, msg: AbortPrepared, _: &mut Context<Self>) {
        if let Some(messages) = self.prepared.remove(&msg.xid) {
            self.stats.enqueued = self.stats.enqueued.saturating_sub(messages.len() as u64);
        }
    }
}

impl Handler<AcceptDeadLetter> for QueueActor {
    type Result = ResponseActFuture<Self, Result<Option<i64>, ActorError>>;

    fn handle(&mut self, msg: AcceptDeadLetter, _: &mut Context<Self>) -> Self::Result {
        let op = WriteOp::DeadLetter {
            container: msg.from,
            id: msg.from_id,
            message: new_message(&self.container, &msg.message, None),
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let write = self.store.write_in_order(op);
        let message = msg.message;
        Box::pin(
            write
                .into_actor(self)
                .map(move |result, act, ctx| match result {
                    Ok(WriteOutcome::DeadLettered(Some(id))) => {
                        act.stats.enqueued += 1;
                        let stored = TopicMessage {
                            id: Some(id),
                            ..message
                        };
                        act.complete(seq, Some(Arc::new(stored)), ctx);
                        Ok(Some(id))
                    }
                    Ok(_) => {
                        act.complete(seq, None, ctx);
                        Ok(None)
                    }
                    Err(e) => {
                        act.complete(seq, None, ctx);
                        Err(e)
                    }
                }),
        )
    }
}

impl Handler<Subscribe> for QueueActor {
    type Result = Result<u64, ActorError>;

    fn handle(&mut self, msg: Subscribe, ctx: &mut Context<Self>) -> Self::Result {
        if msg.durable.is_some() {
            return Err(ActorError::Invalid(
                "a queue has no durable subscriptions: its messages wait for any consumer".into(),
            ));
        }
        let id = self.next_consumer;
        self.next_consumer += 1;
        let prefetch = msg.prefetch.unwrap_or(self.policy.queue_prefetch);
        let prefetch = prefetch.clamp(1, crate::subscription::MAX_PREFETCH) as usize;
        self.consumers.insert(
            id,
            Consumer {
                prefetch,
                deliver: msg.deliver,
                next_delivery_id: 1,
                in_flight: BTreeMap::new(),
            },
        );
        self.dispatch(ctx);
        Ok(id)
    }
}

impl Handler<Ack> for QueueActor {
    type Result = ResponseActFuture<Self, Result<(), ActorError>>;

    fn handle(&mut self, msg: Ack, ctx: &mut Context<Self>) -> Self::Result {
        let Some(consumer) = self.consumers.get_mut(&msg.subscription) else {
            return Box::pin(fut::ready(Err(ActorError::UnknownSubscription(
                msg.subscription,
            ))));
        };
        let places: Vec<Place> = if msg.cumulative {
            let rest = consumer.in_flight.split_off(&(msg.delivery_id + 1));
            std::mem::replace(&mut consumer.in_flight, rest)
                .into_values()
                .collect()
        } else {
            consumer
                .in_flight
                .remove(&msg.delivery_id)
                .into_iter()
                .collect()
        };
        let mut ids = Vec::new();
        for place in places {
            if let Some(done) = self.delivered.remove(&place) {
                self.stats.dequeued += 1;
                ids.extend(done.entry.message.id);
            }
        }
        self.dispatch(ctx);
        if ids.is_empty() {
            return Box::pin(fut::ready(Ok(())));
        }
        let op = WriteOp::Remove {
            container: self.container.clone(),
            ids,
        };
        let store = self.store.clone();
        Box::pin(async move { store.write(op).await.map(|_| ()) }.into_actor(self))
    }
}

impl Handler<Nack> for QueueActor {
    type Result = Result<(), ActorError>;

    fn handle(&mut self, msg: Nack, ctx: &mut Context<Self>) -> Self::Result {
        let Some(consumer) = self.consumers.get_mut(&msg.subscription) else {
            return Err(ActorError::UnknownSubscription(msg.subscription));
        };
        if let Some(place) = consumer.in_flight.remove(&msg.delivery_id) {
            self.give_back(place, "NACK", ctx);
        }
        self.dispatch(ctx);
        Ok(())
    }
}

impl Handler<Detach> for QueueActor {
    type Result = ();

    fn handle(&mut self, msg: Detach, ctx: &mut Context<Self>) {
        self.detach(msg.subscription, ctx);
        self.dispatch(ctx);
    }
}

impl Handler<GetQueueStats> for QueueActor {
    type Result = QueueStats;

    fn handle(&mut self, _: GetQueueStats, _: &mut Context<Self>) -> QueueStats {
        QueueStats {
            expiry_armed: self.expiry_armed,
            consumers: self.consumers.len() as u64,
            in_flight: self.delivered.len() as u64,
            pending_in_memory: self.cursor.len() as u64,
            pending_non_persistent: self.cursor.transient_len() as u64,
            cursor_live: self.cursor.is_live(),
            ..self.stats.clone()
        }
    }
}

impl Handler<QueueExpiryPage> for QueueActor {
    type Result = ();

    fn handle(&mut self, _: QueueExpiryPage, ctx: &mut Context<Self>) {
        self.page(ctx);
    }
}

impl Handler<RunHousekeeping> for QueueActor {
    type Result = ();

    fn handle(&mut self, _: RunHousekeeping, ctx: &mut Context<Self>) {
        self.tick(ctx);
    }
}

impl Handler<StopHousekeeping> for QueueActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: StopHousekeeping, ctx: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.stop_waiters.push(tx);
        self.wake_stop_waiters();
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}
