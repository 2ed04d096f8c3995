//! The messages actors exchange, and the values they carry.

use std::sync::Arc;

use actix::prelude::*;
use ebb_store::{Moved, SubscriptionKey};
use tokio::sync::mpsc;

pub use crate::destination::{
    AbortPrepared, CommitPrepared, FenceCommit, FenceSends, FencedCopy, FencedStored, LiftFence,
    Publish, PublishPrepared, Retire, RunHousekeeping, StopDestination, StopHousekeeping,
};
use crate::destination::{DestinationCounters, DestinationKey};
use crate::error::ActorError;
pub use crate::message::{handed_up_to, Delivery, Handed, PublishOutcome, TopicMessage};

/// Open a subscription. Deliveries go to `deliver`; no more than the prefetch are
/// un-acked at once.
#[derive(Message, Clone)]
#[rtype(result = "Result<u64, ActorError>")]
pub struct Subscribe {
    /// `Some` for a durable subscription: created if new, re-attached if offline.
    pub durable: Option<SubscriptionKey>,
    /// Overrides the policy's `durable_prefetch` / `topic_prefetch`.
    pub prefetch: Option<u32>,
    pub deliver: mpsc::Sender<Delivery>,
    /// Only messages it matches are delivered (the STOMP `selector` header). A queue
    /// finds them in its store beyond what it holds in memory; a non-durable topic
    /// subscription is offered only those; a durable one stores it, and its cursor
    /// passes (and acks, uncounted) the stored messages it does not match.
    pub selector: Option<std::sync::Arc<crate::selector::Selector>>,
    /// An exclusive queue consumer (ActiveMQ's `activemq.exclusive`): while the first
    /// exclusive consumer lives it gets every message; a topic refuses it.
    pub exclusive: bool,
    /// JMS `noLocal` (non-durable topic subscriptions): messages whose
    /// [`TopicMessage::origin`] is this are not delivered; a queue and a durable
    /// subscription refuse it.
    pub no_local: Option<u64>,
    /// The last delivery id the consumer has handed to the application (it hands
    /// them in id order; 0 for none yet), which it keeps up to date. When it detaches
    /// (or goes away), only those deliveries count as failed and come back marked
    /// redelivered; what it only held (prefetched, never seen) goes back as it was, as
    /// ActiveMQ's consumer reports its `lastDeliveredSequenceId` on close. `None`: it
    /// cannot tell, and every un-acked delivery counts.
    ///
    /// A consumer that keeps it sends [`Detach`] after its last acks when it goes: a
    /// queue that finds its receiver gone waits for that detach (the acks before it
    /// must not be given back as failed deliveries).
    pub handed: Option<Handed>,
    /// For a non-durable topic subscription whose consumer acks automatically: the
    /// acks it records without a message ([`AutoAcks`]); a queue or a durable
    /// subscription ignores it (their acks are written to the store).
    ///
    /// [`AutoAcks`]: crate::subscription::AutoAcks
    pub auto_acks: Option<std::sync::Arc<crate::subscription::AutoAcks>>,
}

/// Ack deliveries of a subscription: one (`cumulative == false`, client-individual)
/// or every un-acked one up to it (client ack). Answered after the store committed
/// the acks of a durable subscription. An individual ack of a delivery that is not
/// waiting for one (acked or refused already) is [`ActorError::not_awaiting_ack`].
#[derive(Message)]
#[rtype(result = "Result<(), ActorError>")]
pub struct Ack {
    pub subscription: u64,
    pub delivery_id: u64,
    pub cumulative: bool,
}

/// Ack deliveries in a transaction: in memory exactly as [`Ack`] (the deliveries stop
/// waiting for an ack, their prefetch slots are freed, they are never delivered again
/// while the broker runs), but the store write is left to the caller, who commits it
/// in its own store transaction together with the transaction's sends
/// ([`crate::store_actor::StoreHandle::commit_with`]), so a crash keeps both or
/// neither (ActiveMQ's JDBC and KahaDB stores commit a local transaction's sends and
/// acks together). The answer holds the writes to commit, none when nothing is stored
/// (a non-persistent or non-durable delivery); the caller reports each one's commit
/// with [`AcksStored`] to its `stored` recipient.
///
/// If the caller's commit fails, the acked messages stay stored and are delivered
/// again after a restart, as after any failed ack write. Errors: as [`Ack`].
#[derive(Message)]
#[rtype(result = "Result<Vec<TakenAck>, ActorError>")]
pub struct TakeAck {
    pub subscription: u64,
    pub delivery_id: u64,
    pub cumulative: bool,
}

/// One write of a [`TakeAck`] answer: [`ebb_store::WriteOp::Remove`] of queue rows, or
/// [`ebb_store::WriteOp::Ack`] of a durable subscription's messages.
pub struct TakenAck {
    pub write: ebb_store::WriteOp,
    /// Where to report its commit ([`AcksStored`]).
    pub stored: Recipient<AcksStored>,
}

/// The write of a [`TakenAck`] was committed (`committed`) or failed: a queue forgets
/// the messages a scan took ahead of its cursor, a topic runs the cleanup the acks
/// make due.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AcksStored {
    /// The store ids the write acked.
    pub ids: Vec<i64>,
    pub committed: bool,
}

/// The consumer refuses one delivery (STOMP NACK): its prefetch slot is freed and it
/// is not acked. A durable subscription keeps it un-acked in the store and gets it
/// again, marked redelivered, when it re-attaches; a non-durable one drops it.
#[derive(Message)]
#[rtype(result = "Result<(), ActorError>")]
pub struct Nack {
    pub subscription: u64,
    pub delivery_id: u64,
}

/// The consumer of a subscription went away: a durable one goes offline (its
/// un-acked messages stay in the store and are delivered again), a non-durable one ends.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Detach {
    pub subscription: u64,
}

/// Shutdown, before the store closes: the destination ends every consumer's
/// deliveries (each stream ends after what was already handed to it), refuses new
/// subscriptions with [`ActorError::ShuttingDown`] (and acks of the ended ones with
/// [`ActorError::UnknownSubscription`]), and answers once every ack it accepted
/// before is committed, so an ack answered before shutdown is not redelivered. A
/// wildcard subscription stops.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CloseConsumers;

/// Delete an offline durable subscription and its marks. `Ok(false)` if unknown;
/// [`ActorError::DurableInUse`] if it is online.
#[derive(Message)]
#[rtype(result = "Result<bool, ActorError>")]
pub struct RemoveDurable(pub SubscriptionKey);

/// Bind consumer group `group` (a queue's key, e.g. `queue://Consumer.A.VirtualTopic.X`)
/// to this topic: the group reads every message the topic stores from now on, stored
/// once ([`ebb_store::groups`]), and the topic hands it the messages it releases
/// ([`FeedGroups`]). Its binding is a durable subscription of the topic, written
/// through the store actor in the topic's write order, so a message released after
/// the answer reaches the group and none released before does. Binding a bound group
/// changes nothing. Errors: the store's.
#[derive(Message)]
#[rtype(result = "Result<(), ActorError>")]
pub struct BindGroup(pub DestinationKey);

/// Unbind consumer group `group` from this topic (its subscription, acks and delivery
/// rows go): it reads only the rows sent to it directly from now on. `Ok(false)` when
/// it was not bound. Errors: the store's.
#[derive(Message)]
#[rtype(result = "Result<bool, ActorError>")]
pub struct UnbindGroup(pub DestinationKey);

/// A topic's released messages (in release order) for its consumer groups `groups`,
/// sent to the registry, which hands them to each group's queue actor
/// ([`GroupMessages`]) or, for a sleeping group, counts the stored ones and leaves
/// them in the store. A stored message is already committed: no group writes it again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FeedGroups {
    /// The groups, each a queue bound to the topic.
    pub groups: Arc<[DestinationKey]>,
    /// The messages, each with its store id when stored.
    pub messages: Arc<[Arc<TopicMessage>]>,
}

/// A consumer group of topic `.0` committed acks of the topic's rows: the topic's
/// cleanup is due (what every subscription and group is done with is deleted). Sent
/// by the group's queue to the registry, which passes it to the topic if it runs (a
/// sleeping topic cleans up when it wakes).
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct GroupAcked(pub DestinationKey);

/// Messages of the topic a consumer group reads ([`FeedGroups`]), for the group's
/// queue actor: it counts them as enqueued and queues them in id order, as its own
/// committed sends (a stored one its cursor has read already is not queued twice).
#[derive(Message)]
#[rtype(result = "()")]
pub struct GroupMessages(pub Arc<[Arc<TopicMessage>]>);

/// For each of `keys` (durable subscriptions of this topic), whether a consumer is
/// attached now and how many of its deliveries wait for an ack: one entry per key, in
/// the same order; a key the topic does not know is reported offline with 0. For an
/// operator's view (the admin API); it changes nothing.
#[derive(Message)]
#[rtype(result = "Vec<DurableState>")]
pub struct DurableStates(pub Vec<SubscriptionKey>);

/// One answer of [`DurableStates`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurableState {
    /// A consumer is attached.
    pub online: bool,
    /// Deliveries to it not yet acked (0 offline).
    pub in_flight: u64,
}

/// What every kind of destination reports ([`Stats`]): one message every destination
/// actor answers, whatever its kind, so stats, metrics and the admin API never ask
/// which kind a destination is. Its kind's own details come from [`GetTopicStats`] or
/// [`GetQueueStats`].
#[derive(Message)]
#[rtype(result = "Stats")]
pub struct GetStats;

/// The answer to [`GetStats`]: the counters every destination keeps and its state
/// now, in the terms of a queue (a topic's deliveries count as `dequeued`, its online
/// subscriptions as `consumers`).
#[derive(Debug, Clone, Default, PartialEq, Eq, MessageResponse)]
pub struct Stats {
    /// What every destination counts.
    pub counters: DestinationCounters,
    /// Messages consumed: acked from a queue, delivered by a topic.
    pub dequeued: u64,
    /// Messages moved to a dead-letter queue.
    pub dead_lettered: u64,
    /// Consumers (online subscriptions) attached now.
    pub consumers: u64,
    /// Messages delivered and not yet acked, now (0 where acks change nothing
    /// stored for others).
    pub in_flight: u64,
    /// Non-persistent messages waiting now, in memory only (not in the store's rows).
    pub pending_non_persistent: u64,
}

impl std::ops::Deref for Stats {
    type Target = DestinationCounters;

    fn deref(&self) -> &DestinationCounters {
        &self.counters
    }
}

/// A topic's counters.
#[derive(Message)]
#[rtype(result = "TopicStats")]
pub struct GetTopicStats;

/// Counters of one topic since it started, and its state now. The counters every
/// destination keeps are in [`counters`](Self::counters), read through (`stats.expired`).
/// For a topic, `dispatched` counts deliveries, and `expired` counts one per (message,
/// subscription) whose expiry was acked, plus one per message that expired on arrival
/// or before reaching a non-durable consumer.
#[derive(Debug, Clone, Default, PartialEq, Eq, MessageResponse)]
pub struct TopicStats {
    /// What every destination counts.
    pub counters: DestinationCounters,
    /// Messages discarded for a non-durable subscription over its pending limit.
    pub discarded: u64,
    /// Messages deleted by cleanup (acked by every durable subscription).
    pub cleaned_up: u64,
    /// Cleanup batches finished (each one bounded delete).
    pub cleanup_batches: u64,
    pub online_subscriptions: u64,
    pub durable_subscriptions: u64,
}

impl std::ops::Deref for TopicStats {
    type Target = DestinationCounters;

    fn deref(&self) -> &DestinationCounters {
        &self.counters
    }
}

/// Browse a queue: up to `limit` of the messages waiting in it (not expired), in
/// queue order, after place `after` (`(0, 0)` for the first page; then the last place
/// returned). Stored messages come from one bounded store read (`browse`, id order,
/// prepared ones left out), including those delivered and not yet acked (they are
/// still in the queue); non-persistent ones from the queue's memory, in their places.
/// Nothing is acked, expired or counted as delivered: a browser never consumes.
#[derive(Message)]
#[rtype(result = "Result<BrowsePage, ActorError>")]
pub struct Browse {
    pub after: crate::queue_cursor::Place,
    pub limit: u32,
}

/// One page of a [`Browse`].
#[derive(Debug, Clone, Default)]
pub struct BrowsePage {
    /// The messages, in queue order, with their places (at most the limit; fewer
    /// when some had expired).
    pub messages: Vec<(crate::queue_cursor::Place, std::sync::Arc<TopicMessage>)>,
    /// Where the next page starts (the last place this one looked at).
    pub next: crate::queue_cursor::Place,
    /// Nothing waits after `next` (now): the browse is over.
    pub end: bool,
}

/// A queue's counters.
#[derive(Message)]
#[rtype(result = "QueueStats")]
pub struct GetQueueStats;

/// Counters of one queue since it started, and its state now. The counters every
/// destination keeps are in [`counters`](Self::counters), read through
/// (`stats.enqueued`); for a queue, `expired` counts messages that expired on arrival,
/// at dispatch, or were found by housekeeping.
#[derive(Debug, Clone, Default, PartialEq, Eq, MessageResponse, serde::Serialize)]
pub struct QueueStats {
    /// What every destination counts.
    #[serde(flatten)]
    pub counters: DestinationCounters,
    /// Messages acked by a consumer (and so removed from the queue).
    pub dequeued: u64,
    /// Messages moved to the dead-letter queue (too many failed deliveries, or expired
    /// with `dead_letter_expired`).
    pub dead_lettered: u64,
    /// Dead messages dropped instead: non-persistent ones (ActiveMQ's dead-letter
    /// strategy skips them by default) and those of a dead-letter queue itself.
    pub discarded: u64,
    /// Deliveries that were redeliveries.
    pub redelivered: u64,
    /// Failed deliveries whose redelivery waited (the policy's
    /// `initial_redelivery_delay` and back-off): held in their rows in the store
    /// (their due time written with their count) or, non-persistent, in memory.
    pub redeliveries_delayed: u64,
    /// Held messages this queue read back from the store once due (at start too: those
    /// a restart found held), each put back in its place marked redelivered.
    pub redeliveries_released: u64,
    /// Messages a newer one with the same last-value key replaced (a last-value queue)
    /// while the queue held them in memory: taken out while waiting, or dropped when
    /// they came back from a consumer; and messages moved in (from a dead-letter queue
    /// or another queue) that were dropped because a message with their key that
    /// arrived after them waits here (superseded). One replaced while only in the
    /// store is deleted there, in the newer one's transaction, without being counted
    /// here.
    pub replaced: u64,
    /// Consumers attached now.
    pub consumers: u64,
    /// Messages delivered and not yet acked, now.
    pub in_flight: u64,
    /// Messages waiting in the queue's memory now (a cache of the stored ones, plus
    /// the non-persistent ones).
    pub pending_in_memory: u64,
    /// Non-persistent messages waiting now (in memory only).
    pub pending_non_persistent: u64,
    /// Whether the cursor follows publishes live (true) or pages the store (false).
    pub cursor_live: bool,
    /// Pages of selector scans: reads of the store beyond the cursor for a consumer
    /// with a selector that found nothing it matches in memory.
    pub scan_pages: u64,
    /// Rows those pages read (each at most `max_browse_page_size`).
    pub scan_rows: u64,
    /// Messages delivered from those pages.
    pub scan_matches: u64,
    /// Stored messages taken ahead of the cursor by scans and still remembered now
    /// (bounded by prefetch and acks in flight, never by the backlog).
    pub taken_ahead: u64,
    /// Message groups (`JMSXGroupID`) with an owning consumer now.
    pub message_groups: u64,
    /// The consumer that gets every message now, if an exclusive one is attached.
    pub exclusive_owner: Option<u64>,
}

impl std::ops::Deref for QueueStats {
    type Target = DestinationCounters;

    fn deref(&self) -> &DestinationCounters {
        &self.counters
    }
}

/// What [`TakeMessages`] does with the messages it takes off a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeAction {
    /// Delete them (a purge).
    Delete,
    /// Move each to a queue, in one store transaction per message (deleted here, added
    /// there: never in both, never in neither): to the queue given, or with `None` to
    /// the queue its `originalDestination` header names (a dead letter's retry). The
    /// copy drops the headers the dead-letter queue added (`dlqDeliveryFailureCause`,
    /// `originalDestination`).
    Move(Option<DestinationKey>),
}

/// An operator's page of work on a queue's waiting messages: up to `limit` stored
/// messages read in one bounded statement, those with id `> after` (or, with `only`,
/// the messages with these ids, at most `limit` of them, one single-row read each),
/// and `action` applied to each that waits (not delivered to a consumer: those are
/// counted `in_flight` and left alone). With [`TakeAction::Delete`] and `after == 0`
/// and no `only`, the non-persistent messages waiting in memory go too.
#[derive(Message)]
#[rtype(result = "Result<TakenPage, ActorError>")]
pub struct TakeMessages {
    pub after: i64,
    pub only: Option<Vec<i64>>,
    pub limit: u32,
    pub action: TakeAction,
}

/// The answer to [`TakeMessages`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TakenPage {
    /// Messages deleted or moved.
    pub taken: u64,
    /// Messages left alone because a consumer holds them.
    pub in_flight: u64,
    /// Messages already gone (acked, expired or moved meanwhile) or, with `only`, not
    /// in this queue.
    pub gone: u64,
    /// Moves into a last-value queue dropped there instead: a message with the same
    /// last-value key had arrived at it after the moved one (a newer value came while
    /// it was away), so it did not replace that one. Deleted here, in the store
    /// transaction that compared them ([`ebb_store::WriteOp::DeadLetter`]).
    pub superseded: u64,
    /// Moves that could not be made (no `originalDestination`, or its move failed):
    /// those messages stay where they are.
    pub failed: u64,
    /// Why the first of them could not move.
    pub first_failure: Option<String>,
    /// The `after` of the next page (the last id this page read), `None` when the
    /// page was the last.
    pub next: Option<i64>,
}

/// A dead message for this queue (its dead-letter queue): from queue `from`, store row
/// `from_id` (moved in one store transaction: deleted there, added here), with the
/// reason and origin already in its headers. Also a message an operator moves here
/// (a retry back to its `originalDestination`, or a move between queues). Answered
/// once the move is committed: [`Moved::Added`] with its id here, [`Moved::Gone`] if
/// the source row was already gone (it is never dead-lettered twice), or, on a
/// last-value queue, [`Moved::Superseded`] when a message with its key that arrived
/// after it waits here (its source row is deleted and it is not added).
#[derive(Message, Clone)]
#[rtype(result = "Result<Moved, ActorError>")]
pub struct AcceptDeadLetter {
    pub from: DestinationKey,
    pub from_id: i64,
    pub message: TopicMessage,
}

/// To the registry: hand `letter` to the dead-letter queue `to` (started if it is not
/// running), and answer as [`AcceptDeadLetter`] does. A queue reaches its dead-letter
/// queue this way, through a `Recipient`, without knowing the registry.
#[derive(Message)]
#[rtype(result = "Result<Moved, ActorError>")]
pub struct RouteDeadLetter {
    pub to: DestinationKey,
    pub letter: AcceptDeadLetter,
}
