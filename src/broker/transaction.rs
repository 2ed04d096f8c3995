//! Transactions, the one way to send prepared messages: sends held prepared until
//! COMMIT, and acks stored with them ([`Transaction`]). The `Broker` methods by xid
//! that came before it stay as deprecated aliases.

use super::destination::ToDestination;
use super::message::{Message, PendingSend, SendReceipt};
use super::subscription::{Acker, Received, TransactedAck};
use super::Broker;
use crate::error::Error;
use actix::Handler;
use ebb_actors::destination::PublishTicket;
use ebb_actors::messages::{
    AbortPrepared, AcksStored, CommitPrepared, FenceCommit, LiftFence, PublishOutcome,
    PublishPrepared, TakenAck, TopicMessage,
};
use ebb_actors::queue::QueueActor;
use ebb_actors::topic::TopicActor;
use ebb_actors::DestinationKey;
use ebb_store::{NewMessage, WriteOp};
use std::sync::atomic::Ordering;

impl Broker {
    /// Sends `message` inside transaction `xid`.
    #[deprecated(note = "use `Broker::transaction(xid)` and `Transaction::send`")]
    pub async fn send_prepared(
        &self,
        destination: impl ToDestination,
        message: Message,
        xid: &str,
    ) -> Result<SendReceipt, Error> {
        self.start_send_prepared(destination, message, xid)
            .await?
            .await
    }

    /// Sends `message` inside transaction `xid`.
    #[deprecated(note = "use `Broker::transaction(xid)` and `Transaction::send`")]
    pub async fn send_prepared_now(
        &self,
        destination: impl ToDestination,
        message: Message,
        xid: &str,
    ) -> Result<SendReceipt, Error> {
        self.start_send_prepared(destination, message, xid)
            .await?
            .await
    }

    /// Starts a send inside transaction `xid`.
    #[deprecated(note = "use `Broker::transaction(xid)` and `Transaction::start_send`")]
    pub async fn start_send_prepared_now(
        &self,
        destination: impl ToDestination,
        message: Message,
        xid: &str,
    ) -> Result<PendingSend, Error> {
        self.start_send_prepared(destination, message, xid).await
    }

    /// [`Transaction::start_send`]: `message` to `destination` inside transaction
    /// `xid`: a persistent message that must be stored is stored prepared (invisible,
    /// and it stops expiry runs rather than being passed by a mark); nothing is
    /// delivered until the commit. It never waits for space (its own COMMIT may be
    /// what frees it): beyond the transactions' budget it is refused. Returns once the
    /// message has its place; the [`PendingSend`] resolves once it is stored prepared.
    pub(super) async fn start_send_prepared(
        &self,
        destination: impl ToDestination,
        message: Message,
        xid: &str,
    ) -> Result<PendingSend, Error> {
        self.start_send_prepared_as(destination, message, xid, None)
            .await
    }

    /// [`Broker::start_send_prepared`] with the message id `message_id` when given
    /// (the copies of a routed send share one).
    pub(super) async fn start_send_prepared_as(
        &self,
        destination: impl ToDestination,
        message: Message,
        xid: &str,
        message_id: Option<&str>,
    ) -> Result<PendingSend, Error> {
        let key = destination.to_destination()?;
        self.check_transaction_space(&message)?;
        let outgoing = self.outgoing_as(&key, message, true, message_id)?;
        let message_id = outgoing.message_id.clone();
        let prepared = || PublishPrepared {
            message: outgoing.clone(),
            xid: xid.to_string(),
        };
        let ticket = self
            .ask_live(&key, prepared, PublishTicket::is_retired)
            .await?;
        Ok(PendingSend::new(message_id, ticket))
    }

    /// Commits transaction `xid`, whose messages went to `destinations`.
    #[deprecated(note = "use `Transaction::commit`")]
    pub async fn commit_prepared<D: ToDestination>(
        &self,
        xid: &str,
        destinations: &[D],
    ) -> Result<(), Error> {
        self.commit_transaction(xid, destinations, Vec::new(), Vec::new())
            .await
    }

    /// [`Transaction::commit`]: takes each ack from its destination (in memory, in
    /// order), then writes the commit of `xid` and the acks' writes in one store
    /// transaction, reports that to the destinations that took acks, and releases the
    /// messages at `destinations`. `scheduled` (messages with a due time, held by the
    /// transaction until now) are stored scheduled in the same store transaction.
    /// Each destination is fenced around the store write
    /// ([`ebb_actors::destination::FenceCommit`]). A failed store write rolls the
    /// transaction back.
    pub(super) async fn commit_transaction<D: ToDestination>(
        &self,
        xid: &str,
        destinations: &[D],
        acks: Vec<TransactedAck>,
        scheduled: Vec<NewMessage>,
    ) -> Result<(), Error> {
        // A temporary destination it sent to has ended (its connection is gone): the
        // whole transaction is refused and rolled back, as a send to it now would be.
        let mut keys: Vec<DestinationKey> = Vec::with_capacity(destinations.len());
        for key in destinations.iter().filter_map(|d| d.to_destination().ok()) {
            // One fence per destination (a key named twice would reserve its places twice).
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        if let Some(ended) = keys.iter().find(|k| self.is_ended_temporary(k)) {
            let refused = Error::InvalidDestination {
                name: ended.stomp(),
                reason: "no such temporary destination: the connection that made it has ended; the transaction is rolled back",
            };
            let _ = self.rollback_transaction(xid, destinations).await;
            return Err(refused);
        }
        // After the composite sends to its destinations prepared before it.
        for key in &keys {
            self.routes.committer.before_send_to(key).await;
        }
        let mut taken: Vec<TakenAck> = Vec::new();
        for TransactedAck { destination, ack } in acks {
            let answer = destination.take.send(ack).await;
            let refused = match answer {
                Ok(Ok(writes)) => {
                    taken.extend(writes);
                    continue;
                }
                _ if destination.shut_down.load(Ordering::Acquire) => Error::ShuttingDown,
                Ok(Err(e)) => e.into(),
                Err(e) => e.into(),
            };
            report_acks_stored(taken, false);
            let _ = self.rollback_transaction(xid, destinations).await;
            return Err(refused);
        }
        let schedules = !scheduled.is_empty();
        let writes = taken
            .iter()
            .map(|t| t.write.clone())
            .chain(scheduled.into_iter().map(WriteOp::Add))
            .collect();
        // Each destination reserves its messages' places and holds its own row writes
        // until the commit is in the store actor's queue: the new ids follow its
        // publish order ([`ebb_actors::destination::FenceCommit`]).
        // One broker write fenced at a time: its fences raised, then its write queued
        // ([`super::composite::Committer::gate`]).
        let gate = self.routes.committer.gate.lock().await;
        let mut fences = Vec::with_capacity(keys.len());
        for key in &keys {
            let fence = || FenceCommit {
                xid: xid.to_string(),
            };
            match self.ask_live(key, fence, |_| false).await {
                Ok(number) => fences.push((key, number)),
                Err(e) => {
                    drop(gate);
                    self.lift_fences(&fences).await;
                    report_acks_stored(taken, false);
                    let _ = self.rollback_transaction(xid, destinations).await;
                    return Err(e);
                }
            }
        }
        let committed = self.store.commit_with(xid.to_string(), writes);
        drop(gate);
        self.lift_fences(&fences).await;
        let committed = committed.await;
        report_acks_stored(taken, committed.is_ok());
        let renumbered = match committed {
            Ok(renumbered) => renumbered,
            Err(e) => {
                // Nothing was committed, and the transaction ends here (a STOMP COMMIT
                // ends it, committed or not): its messages go, and the places its
                // fences reserved are freed.
                let _ = self.rollback_transaction(xid, destinations).await;
                return Err(e.into());
            }
        };
        if schedules {
            self.wake_scheduler();
        }
        let told = self
            .tell_each(&keys, || CommitPrepared {
                xid: xid.to_string(),
                renumbered: renumbered.clone(),
            })
            .await;
        // One whose connection ended meanwhile waited for this transaction to go.
        self.delete_ended_temporaries(&keys).await;
        told
    }

    /// Lifts each `(destination, fence)` ([`LiftFence`]), also during shutdown.
    pub(super) async fn lift_fences(&self, fences: &[(&DestinationKey, u64)]) {
        for &(key, fence) in fences {
            let _ = self
                .tell_each(std::slice::from_ref(key), || LiftFence { fence })
                .await;
        }
    }

    /// Sends `make()` to each of `keys`' running actor and waits for each to handle
    /// it: every one is told, also after an error and during shutdown (what it tells
    /// frees what a fence holds: held writes, reserved places). Answers the first
    /// error. An actor that stopped meanwhile is not retried: what it held went with
    /// it.
    pub(super) async fn tell_each<M>(
        &self,
        keys: &[DestinationKey],
        make: impl Fn() -> M,
    ) -> Result<(), Error>
    where
        M: actix::Message<Result = ()> + Send + 'static,
        TopicActor: Handler<M>,
        QueueActor: Handler<M>,
    {
        let mut first = Ok(());
        for key in keys {
            let told = match self.lookup(key).await {
                Ok(addr) => addr.ask(make()).await.map_err(Error::from),
                Err(e) => Err(e),
            };
            if let (Err(e), Ok(())) = (told, &first) {
                first = Err(e);
            }
        }
        first
    }

    /// Sends `make()` to each of `destinations` and waits for each to handle it.
    pub(super) async fn tell<M, D: ToDestination>(
        &self,
        destinations: &[D],
        make: impl Fn() -> M,
    ) -> Result<(), Error>
    where
        M: actix::Message<Result = ()> + Send + 'static,
        TopicActor: Handler<M>,
        QueueActor: Handler<M>,
    {
        for destination in destinations {
            let key = destination.to_destination()?;
            self.ask_live(&key, &make, |_| false).await?;
        }
        Ok(())
    }

    /// Rolls back transaction `xid`, whose messages went to `destinations`.
    #[deprecated(note = "use `Transaction::rollback`")]
    pub async fn rollback_prepared<D: ToDestination>(
        &self,
        xid: &str,
        destinations: &[D],
    ) -> Result<(), Error> {
        self.rollback_transaction(xid, destinations).await
    }

    /// [`Transaction::rollback`]: the stored messages of `xid` are deleted, none is
    /// delivered; `destinations` forget what they held for it (also when the store's
    /// delete fails: then the rows stay prepared, invisible, until the next start's
    /// [`Broker::rollback_abandoned`], and the store's error is answered).
    pub(super) async fn rollback_transaction<D: ToDestination>(
        &self,
        xid: &str,
        destinations: &[D],
    ) -> Result<(), Error> {
        // The destinations forget the transaction whatever the store answers (the places
        // a fence reserved for its messages must not stay open): rows the store could
        // not delete now stay prepared, invisible, until the next start's
        // `rollback_abandoned` (or a later rollback) deletes them.
        let stored = self.store.rollback(xid.to_string()).await;
        // A temporary destination whose connection ended may be gone already: telling
        // it is best effort, and it is deleted once the transaction no longer holds it.
        let (ended, live): (Vec<DestinationKey>, Vec<DestinationKey>) = destinations
            .iter()
            .filter_map(|d| d.to_destination().ok())
            .partition(|k| self.is_ended_temporary(k));
        let abort = || AbortPrepared {
            xid: xid.to_string(),
        };
        let told = self.tell_each(&live, abort).await;
        for key in &ended {
            let _ = self.tell(std::slice::from_ref(key), abort).await;
        }
        self.delete_ended_temporaries(&ended).await;
        stored?;
        told
    }

    /// Deletes the prepared messages of every transaction whose xid starts with
    /// `xid_prefix`: transactions a previous run left open when it stopped. Call it at
    /// start. Returns how many messages it deleted.
    pub async fn rollback_abandoned(&self, xid_prefix: &str) -> Result<u64, Error> {
        self.refuse_if_shut_down()?;
        Ok(self
            .store
            .rollback_abandoned(xid_prefix.to_string())
            .await?)
    }

    /// A transaction of sends under `xid` (see [`Transaction`]): nothing is stored or
    /// sent until its first send. The xid names it in the store; give each open
    /// transaction its own, with a prefix [`Broker::rollback_abandoned`] can clear at
    /// start.
    pub fn transaction(&self, xid: impl Into<String>) -> Transaction {
        Transaction {
            broker: self.clone(),
            xid: xid.into(),
            destinations: Vec::new(),
            acks: Vec::new(),
            scheduled: Vec::new(),
        }
    }
}

/// An open transaction of sends ([`Broker::transaction`]): its messages are held
/// prepared (a persistent one that must be stored is stored invisible) until
/// [`Transaction::commit`] delivers them all or [`Transaction::rollback`] deletes them.
/// It remembers the destinations it sent to, so that both reach each of them.
///
/// Dropping it without either leaves its prepared messages held until
/// [`Broker::rollback_abandoned`] at the next start: end every transaction.
pub struct Transaction {
    pub(super) broker: Broker,
    pub(super) xid: String,
    /// Destinations sent to, in first-send order.
    pub(super) destinations: Vec<DestinationKey>,
    /// Acks to apply at COMMIT, in the order given.
    pub(super) acks: Vec<TransactedAck>,
    /// Scheduled sends ([`Message::deliver_at`]): held here, each charged to the
    /// transactions' budget, and stored scheduled by the COMMIT's store transaction
    /// (a rollback, or a crash before the commit, leaves nothing of them).
    pub(super) scheduled: Vec<(NewMessage, TopicMessage)>,
}

impl Transaction {
    /// The store xid it was opened with.
    pub fn xid(&self) -> &str {
        &self.xid
    }

    /// Sends `message` to `destination` inside the transaction and waits until it is
    /// stored prepared (a persistent message that must be stored: invisible until
    /// COMMIT). A scheduled message ([`Message::deliver_at`] in the future) is held
    /// by the transaction, charged to its budget, and stored scheduled by the COMMIT
    /// (a rollback drops it). It never waits for space (its own COMMIT may be what would free it):
    /// beyond the transactions' budget ([`UsageConfig::transactions`]) it is refused
    /// with [`Error::ResourceLimit`]. Other errors as [`Broker::send`].
    pub async fn send(
        &mut self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<SendReceipt, Error> {
        self.start_send(destination, message).await?.await
    }

    /// [`Transaction::send`] in two steps, as [`Broker::start_send`]: returns once the
    /// message has its place; the [`PendingSend`] resolves once it is stored prepared.
    /// Commit only after every pending send of the transaction resolved. The
    /// destination joins the transaction before the send, so a commit or rollback
    /// reaches it even when this send fails.
    ///
    /// A send that routing takes to several destinations (a virtual topic with
    /// consumer groups, a configured composite: [`Broker::routes_of`]) is sent to
    /// each inside the transaction, with one message id, and resolves once every copy
    /// is stored prepared.
    pub async fn start_send(
        &mut self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<PendingSend, Error> {
        let key = destination.to_destination()?;
        self.start_send_to_each(std::slice::from_ref(&key), message)
            .await
    }

    /// [`Transaction::start_send`] to each of `destinations` (a composite send, as
    /// [`Broker::send_to_each`]) inside the transaction: the COMMIT delivers it to all.
    pub async fn start_send_to_each(
        &mut self,
        destinations: &[DestinationKey],
        message: Message,
    ) -> Result<PendingSend, Error> {
        self.broker.refuse_advisory_send(destinations)?;
        let routes = self.broker.plan(destinations, &message).0;
        let keys = super::routing::keys_of(&routes);
        // Nor through a configured composite's forward.
        self.broker.refuse_advisory_send(&keys)?;
        match routes.as_slice() {
            [] => Ok(PendingSend::accepted(self.broker.next_message_id(), false)),
            [one] => {
                self.start_send_as(&one.key, one.copy_of(&message), None)
                    .await
            }
            _ => {
                super::routing::count_routed(destinations, &keys);
                let message_id = self.broker.next_message_id();
                let mut pending = Vec::with_capacity(routes.len());
                for route in &routes {
                    pending.push(
                        self.start_send_as(&route.key, route.copy_of(&message), Some(&message_id))
                            .await?,
                    );
                }
                Ok(PendingSend::all(pending))
            }
        }
    }

    /// A send to exactly `key` (routing done) inside the transaction, with the
    /// message id `message_id` when given.
    pub(super) async fn start_send_as(
        &mut self,
        key: &DestinationKey,
        message: Message,
        message_id: Option<&str>,
    ) -> Result<PendingSend, Error> {
        let key = key.clone();
        if let Some(due) = super::send::scheduled_due(&message) {
            // Held until the COMMIT, which stores it scheduled.
            self.broker.check_transaction_space(&message)?;
            let (new, held) = self.broker.scheduled_row(&key, message, due, true)?;
            let message_id = held.message_id.clone();
            self.scheduled.push((new, held));
            let outcome = PublishOutcome {
                id: None,
                expired_on_arrival: false,
            };
            return Ok(PendingSend::new(
                message_id,
                PublishTicket::ready(Ok(outcome)),
            ));
        }
        if !self.destinations.contains(&key) {
            self.destinations.push(key.clone());
        }
        self.broker
            .start_send_prepared_as(&key, message, &self.xid, message_id)
            .await
    }

    /// As [`Transaction::send`] (a transaction never waits for space).
    #[deprecated(note = "use `Transaction::send`")]
    pub async fn send_now(
        &mut self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<SendReceipt, Error> {
        self.send(destination, message).await
    }

    /// As [`Transaction::start_send`].
    #[deprecated(note = "use `Transaction::start_send`")]
    pub async fn start_send_now(
        &mut self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<PendingSend, Error> {
        self.start_send(destination, message).await
    }

    /// Acks `message`, received on the subscription `acker` acks for, when the
    /// transaction commits: in the same store transaction as its sends, so after a
    /// crash either the sends are stored and the message is acked, or neither (a
    /// consume-transform-produce step happens once). Until then the message waits for
    /// its ack as before; a [`Transaction::rollback`] forgets the ack. Nothing is
    /// checked beyond the message's subscription until COMMIT.
    ///
    /// Errors: [`Error::NotThisSubscription`] for a message of another subscription,
    /// [`Error::ShuttingDown`]. In [`AckMode::Auto`] it does nothing (the stream acks).
    pub fn ack(&mut self, acker: &Acker, message: &Received) -> Result<(), Error> {
        self.acks.extend(acker.in_transaction(message, false)?);
        Ok(())
    }

    /// As [`Transaction::ack`], for `message` and every earlier un-acked message of its
    /// subscription (as [`Acker::ack_up_to`]).
    pub fn ack_up_to(&mut self, acker: &Acker, message: &Received) -> Result<(), Error> {
        self.acks.extend(acker.in_transaction(message, true)?);
        Ok(())
    }

    /// Commits: in one store transaction its messages become visible, its scheduled
    /// messages ([`Message::deliver_at`]) are stored scheduled and its acks
    /// ([`Transaction::ack`]) are stored; then the messages are delivered (the
    /// scheduled ones when they are due).
    ///
    /// Errors: an ack whose message no longer waits for one ([`Error::Actor`]: acked
    /// or refused since, or its subscription ended): nothing is committed, the
    /// transaction's messages are rolled back, and the acks taken before it stay
    /// un-committed (their messages stay stored and are delivered again after a
    /// restart, as after a failed ack). A store error: nothing is committed, and the
    /// transaction is rolled back (acked messages as before; prepared rows the store
    /// cannot delete now are removed at the next start by
    /// [`Broker::rollback_abandoned`]).
    pub async fn commit(self) -> Result<(), Error> {
        // The held messages' charges are released once the commit is done.
        let (rows, _held): (Vec<NewMessage>, Vec<TopicMessage>) =
            self.scheduled.into_iter().unzip();
        self.broker
            .commit_transaction(&self.xid, &self.destinations, self.acks, rows)
            .await
    }

    /// Rolls back: its prepared messages are deleted, none is delivered
    /// (the stored ones deleted in one store transaction).
    pub async fn rollback(self) -> Result<(), Error> {
        self.broker
            .rollback_transaction(&self.xid, &self.destinations)
            .await
    }
}

/// The recipients a [`Subscription`] talks to, at its destination's actor.
/// Tells each destination that took an ack of a transaction whether its write was
/// committed ([`AcksStored`]).
pub(super) fn report_acks_stored(taken: Vec<TakenAck>, committed: bool) {
    for TakenAck { write, stored } in taken {
        let ids = match write {
            ebb_store::WriteOp::Remove { ids, .. } => ids,
            ebb_store::WriteOp::Ack { messages, .. } => {
                messages.into_iter().map(|(id, _)| id).collect()
            }
            _ => Vec::new(),
        };
        stored.do_send(AcksStored { ids, committed });
    }
}
