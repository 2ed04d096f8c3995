//! The values that cross the store API: messages, durable subscriptions, write operations.

use std::collections::BTreeMap;
use std::sync::Arc;

/// Priority a message gets when the producer names none (JMS and STOMP default).
pub const DEFAULT_PRIORITY: u8 = 4;

/// The highest JMS priority; priorities run 0..=9.
pub const MAX_PRIORITY: u8 = 9;

/// What a producer sent, as it is stored in the `msg` column: headers and body.
/// Encoded with a format byte and postcard ([`crate::encoding`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Payload {
    /// When the broker accepted the message, epoch ms.
    pub timestamp_ms: i64,
    /// User headers in the order the producer sent them (names may repeat).
    pub headers: Vec<(String, String)>,
    /// The body, any bytes (NUL included): one shared buffer (cloning it copies no
    /// bytes), from the STOMP codec to the store and to every subscriber.
    pub body: bytes::Bytes,
}

/// A message to add to the store.
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// The destination's key in the store, e.g. `topic://orders`.
    pub container: String,
    /// The broker-assigned message id (STOMP `message-id`).
    pub message_id: String,
    /// Absolute expiration, epoch ms; 0 = never (JMS `JMSExpiration`).
    pub expiration: i64,
    /// 0..=9; higher is delivered first when the destination has prioritized messages.
    pub priority: u8,
    /// Set while the message belongs to a prepared (not yet committed) transaction: the
    /// row is invisible to consumers and stops expiry runs until [`WriteOp::Commit`].
    pub xid: Option<String>,
    /// Headers and body; shared, never copied, by everyone who holds the message.
    pub payload: Arc<Payload>,
    /// Store the headers as a JSON object too (the `hdrs` column), so a selector is
    /// answered in SQL: what the destination's kind asks for (a queue's rows; a
    /// topic's subscriptions test selectors in memory).
    pub indexed_headers: bool,
    /// Its last-value key, on a kind of destination that keeps one message per value
    /// of a header (a last-value queue, as Artemis's keyed by `_AMQ_LVQ_NAME`): the
    /// value of that header. When the message is committed (added, or its prepared
    /// transaction committed), the older messages of its container with the same key
    /// are deleted in the same store transaction, so a crash never leaves two or none:
    /// the committed ones (a redelivery the back-off holds in its row among them), and
    /// the ones held back under [`crate::SCHEDULED_XID_PREFIX`] by an older build. A held-back message arrived before
    /// this one, so it must never come back later and replace it; a transaction's
    /// message arrives at its commit, and is not touched. `None` (every other kind, or no such header):
    /// nothing is replaced.
    pub last_value: Option<String>,
}

/// A queue message held back in its row for a redelivery, with its due time
/// ([`crate::MessageStore::read_held`]).
#[derive(Debug, Clone)]
pub struct HeldMessage {
    /// When it may be delivered again, epoch ms (its `due` column).
    pub due: i64,
    /// The message, with its failure count (`redeliveries`).
    pub message: Arc<StoredMessage>,
}

/// A page of a queue's held messages ([`crate::MessageStore::read_held`]).
#[derive(Debug, Clone, Default)]
pub struct HeldPage {
    /// The held messages due by the time asked, in `(due, id)` order.
    pub messages: Vec<HeldMessage>,
    /// On a short page: the due time of the next held message after the page (epoch
    /// ms; `None`: none is held after it). On a full page: `None` (read on).
    pub next_due: Option<i64>,
}

/// A stored message of a prepared transaction, with its xid
/// ([`crate::MessageStore::read_prepared_range`]).
#[derive(Debug, Clone)]
pub struct PreparedMessage {
    /// The transaction it belongs to.
    pub xid: String,
    /// The message (its `container` says where it goes once committed).
    pub message: Arc<StoredMessage>,
}

/// A message read back from the store. Shared as `Arc<StoredMessage>` by every
/// subscription that needs it, so its body is in memory once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Store sequence id: strictly increasing in send order, store-wide.
    pub id: i64,
    pub container: String,
    pub message_id: String,
    /// Epoch ms; 0 = never.
    pub expiration: i64,
    pub priority: u8,
    pub payload: Arc<Payload>,
    /// A queue message's failed deliveries so far ([`WriteOp::Redelivered`]): its
    /// redelivery count, kept across restarts and failovers. 0 on topics.
    pub redeliveries: u32,
    /// A queue message held back in its row for a redelivery
    /// ([`WriteOp::Redelivered`] with `hold_until`): when it is due, epoch ms (its
    /// `due` column). It keeps it once due, until it is acked, moved or held again.
    /// `None` on every other row.
    pub held_until: Option<i64>,
}

impl StoredMessage {
    /// True when the message has an expiration and it is at or before `now_ms`.
    pub fn is_expired(&self, now_ms: i64) -> bool {
        is_expired(self.expiration, now_ms)
    }
}

/// An expired message's place and priority, without its body: what a topic's expiry
/// page needs of a message when no subscription has a selector
/// ([`crate::MessageStore::read_expired_keys_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiredKey {
    /// Store sequence id.
    pub id: i64,
    /// Epoch ms (above 0: the message expires).
    pub expiration: i64,
    /// 0–9.
    pub priority: u8,
}

impl ExpiredKey {
    /// The key of a whole message.
    pub fn of(message: &StoredMessage) -> Self {
        Self {
            id: message.id,
            expiration: message.expiration,
            priority: message.priority,
        }
    }
}

/// The expiry rule used everywhere: an expiration of 0 never expires.
pub fn is_expired(expiration: i64, now_ms: i64) -> bool {
    expiration > 0 && expiration <= now_ms
}

/// A durable subscription's identity on a topic: `(client_id, subscription_name)`,
/// ActiveMQ's `(CLIENT_ID, SUB_NAME)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubscriptionKey {
    pub client_id: String,
    pub subscription_name: String,
}

impl SubscriptionKey {
    pub fn new(client_id: impl Into<String>, subscription_name: impl Into<String>) -> Self {
        Self {
            client_id: client_id.into(),
            subscription_name: subscription_name.into(),
        }
    }
}

/// A durable subscription as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableSubscription {
    pub container: String,
    pub key: SubscriptionKey,
    /// Selector text as given at creation, if any.
    pub selector: Option<String>,
    /// The high-water marks. Without prioritized messages: one entry `(None, mark)`
    /// covering every priority. With them: ten entries `(Some(p), mark)`, p = 0..=9,
    /// one mark per priority (as ActiveMQ's JDBC store since AMQ-2985).
    pub marks: Vec<(Option<u8>, i64)>,
}

impl DurableSubscription {
    /// True when the subscription keeps one mark per priority.
    pub fn prioritized(&self) -> bool {
        self.marks.iter().any(|(p, _)| p.is_some())
    }

    /// The mark that covers messages of `priority`: every such message with
    /// `id <= mark` is done for this subscription.
    pub fn mark_for(&self, priority: u8) -> i64 {
        self.marks
            .iter()
            .find(|(p, _)| p.is_none() || *p == Some(priority))
            .map(|(_, m)| *m)
            .unwrap_or(i64::MAX)
    }
}

/// One write. [`crate::MessageStore::write`] applies a batch of them in one transaction,
/// in order; the store actor batches writes that arrive while one is in flight.
#[derive(Debug, Clone)]
pub enum WriteOp {
    /// Store a message; the outcome is [`WriteOutcome::Added`] with its new id.
    Add(NewMessage),
    /// Create a durable subscription unless it exists (then it is returned unchanged).
    /// A new one starts at the highest id the store has assigned: it receives what is
    /// sent after it (ActiveMQ's default, not retroactive).
    Subscribe {
        container: String,
        key: SubscriptionKey,
        selector: Option<String>,
        /// One mark per priority (see [`DurableSubscription::marks`]).
        prioritized: bool,
    },
    /// Remove a durable subscription with its marks and individual acks.
    Unsubscribe {
        container: String,
        key: SubscriptionKey,
    },
    /// Individual acks: each `(id, priority)` is done for the subscription. Acks above
    /// the mark are kept (persisted) and the mark advances over them only when the gap
    /// before them closes, so the mark never passes an un-acked message.
    Ack {
        container: String,
        key: SubscriptionKey,
        messages: Vec<(i64, u8)>,
    },
    /// Cumulative ack: every message of `priority` (all priorities with `None`, or for a
    /// subscription without per-priority marks) with `id <= up_to` is done. The mark
    /// never moves backwards: a lower value than the current mark changes nothing.
    AckUpTo {
        container: String,
        key: SubscriptionKey,
        priority: Option<u8>,
        up_to: i64,
    },
    /// Commit a prepared transaction: its messages get new, highest ids (so no
    /// subscription's mark can already be past them) and become visible.
    Commit { xid: String },
    /// Roll back a prepared transaction: its messages are deleted.
    Rollback { xid: String },
    /// Roll back every prepared transaction whose xid starts with `xid_prefix`: those a
    /// broker abandoned when it stopped (a STOMP transaction does not survive its
    /// connection). Run at start, before anything else.
    RollbackAbandoned { xid_prefix: String },
    /// Delete up to `limit` messages of a topic that every durable subscription has
    /// acked by its mark. A topic with no durable subscription is left alone, unless
    /// `orphans_up_to` is given: then its messages with `id <=` that are deleted (after
    /// its last durable subscription was removed, nobody can need them: a new
    /// subscription starts after the highest id). Prepared messages are never touched.
    ///
    /// Only ids above `after` are looked at: pass the [`WriteOutcome::CleanedUp`]
    /// `reached` of the batch before (0 at first). Each batch is then a range that
    /// starts where the last one stopped, not at the container's first id, where
    /// PostgreSQL's index still holds the entries of every row the batches before
    /// deleted until a vacuum removes them: without the bound each batch walked all of
    /// them, and cleaning up 10,000,000 rows slowed to a crawl.
    Cleanup {
        container: String,
        limit: u32,
        after: i64,
        orphans_up_to: Option<i64>,
    },
    /// A queue message's delivery failed (NACK, consumer gone without an ack): row
    /// `id` of `container` now has `count` failed deliveries (its redelivery count),
    /// so a restart or a failover goes on counting towards `maximum_redeliveries`
    /// (ActiveMQ keeps it in memory only, unless `persistJMSRedelivered`). A row that
    /// is gone or prepared is left alone; the outcome is [`WriteOutcome::Deleted`]
    /// with the rows changed (0 or 1).
    ///
    /// With `hold_until` (epoch ms), the message is also held back until then in its
    /// row (a redelivery that waits, ActiveMQ's `redeliveryDelay` with
    /// `useExponentialBackOff`): the row's `due` column is set with the count, by the
    /// same one-row `UPDATE` of two integer columns, and nothing else of the row
    /// changes (its id, its arrival, its body, its other indexes). A queue's cursor
    /// skips a held row ([`crate::MessageStore::read_queue`]); the queue reads it back
    /// by due time ([`crate::MessageStore::read_held`]), also after a restart. Without
    /// it, `due` is cleared: the row is the cursor's again.
    Redelivered {
        container: String,
        id: i64,
        count: u32,
        hold_until: Option<i64>,
    },
    /// Queue ack: delete the rows `ids` of `container` (`queue://NAME`), except those in
    /// a prepared transaction (`xid` set). Acking a queue message deletes it, as in
    /// ActiveMQ's JDBC store (`JDBCMessageStore.removeMessage`). The outcome is
    /// [`WriteOutcome::Deleted`] with the number of rows really deleted: an id that is
    /// already gone, of another container, or prepared counts 0 (so does a repeated
    /// id). Bound: callers pass at most a few thousand ids; the store cuts the list into
    /// statements of at most 512 ([`crate::statements::ID_LIST_MAX`]).
    Remove { container: String, ids: Vec<i64> },
    /// One bounded queue expiry page: delete at most `limit` messages of `container`
    /// that are expired at `now_ms` (epoch ms; `0 < expiration <= now_ms`) and not
    /// prepared, chosen by expiration time, then id, not by id: an expired message is
    /// found even when it sits behind messages with a long TTL or none (ActiveMQ
    /// AMQ-6967, case EXP-02). One statement over the `(container, expiration, id)`
    /// index, whatever the backlog. The outcome is [`WriteOutcome::Removed`] with the
    /// deleted ids; fewer than `limit` means the container has no more expired rows at
    /// `now_ms` outside prepared transactions. For expired messages that must go to a dead-letter queue, use
    /// [`crate::MessageStore::read_expired`] and [`WriteOp::DeadLetter`] instead.
    ExpireQueue {
        container: String,
        now_ms: i64,
        limit: u32,
    },
    /// Topic expiry: delete those of the rows `ids` of `container` that every durable
    /// subscription of the container is done with: at or below the mark of the row's
    /// priority, or acked individually (a message acked by expiry behind a live one,
    /// whose mark cannot pass it: ActiveMQ's KahaDB reclaims such messages through its
    /// per-message acks too). Prepared rows, and rows some subscription still needs, are
    /// left alone; the individual acks of the deleted rows go with them. A container
    /// without durable subscriptions loses every row of `ids`. The outcome is
    /// [`WriteOutcome::Removed`] with the deleted ids. Bound: as [`WriteOp::Remove`],
    /// statements of at most 512 ids, each row one probe of the subscriptions' marks
    /// and individual acks.
    Reclaim { container: String, ids: Vec<i64> },
    /// Move one message to a dead-letter queue in one transaction: delete row `id` of
    /// `container` (unless it is prepared) and, only if it was deleted, add `message`
    /// under a new id, higher than every id assigned before, as [`WriteOp::Add`] does.
    /// `message` is stored as given: normally on another container (`queue://DLQ.NAME`),
    /// and built by the caller as the copy ActiveMQ's
    /// `RegionBroker.sendToDeadLetterQueue` sends (expiration 0, `originalExpiration`,
    /// `dlqDeliveryFailureCause`). The outcome is [`WriteOutcome::DeadLettered`]:
    /// [`Moved::Added`] with the new id, or [`Moved::Gone`] when the source row was
    /// already gone (acked, expired or dead-lettered before) and nothing was added, so
    /// a message is never dead-lettered twice (ActiveMQ keeps an audit for the same
    /// purpose). A run of them is answered as one by one would be.
    ///
    /// The copy keeps the message's arrival at the broker: the source row's (its
    /// `arrived` column, or its id when that is NULL; migration 0011), not the new id.
    /// Store ids are one store-wide sequence given in arrival order, so an arrival is
    /// an id, and a message keeps its first one through every move (to a dead-letter
    /// queue, back, between queues). When `message` has a last-value key
    /// ([`NewMessage::last_value`]) and its container already holds a committed or
    /// held-back message with that key that arrived after it (a newer value came while
    /// this one was away), the source row is deleted and the copy is not added:
    /// [`Moved::Superseded`]. Otherwise the copy replaces the older messages of its key
    /// as an add does. Both in this op's transaction.
    DeadLetter {
        container: String,
        id: i64,
        message: NewMessage,
    },
    /// Delete the committed and held-back messages (see [`NewMessage::last_value`]) of
    /// `container` whose last-value key is `key` and whose id is below `below`: what a
    /// newer message with that key that is not stored (a non-persistent one)
    /// replaces. Adds and commits of messages with a key
    /// do this themselves ([`NewMessage::last_value`]). The outcome is
    /// [`WriteOutcome::Deleted`] with the rows deleted; bounded as a commit
    /// ([`crate::statements::WRITE_BATCH`] rows), and by the rule itself there is at
    /// most one such row.
    ReplaceLastValue {
        container: String,
        key: String,
        below: i64,
    },
    /// One firing of a repeating scheduled message (ActiveMQ's `AMQ_SCHEDULED_PERIOD`
    /// with `AMQ_SCHEDULED_REPEAT`): the prepared rows of `xid` (the one stored job)
    /// move to `next_xid` (its next due time) and, only if there was such a row,
    /// `copy` is added as [`WriteOp::Add`] does: the delivery of this firing. One
    /// transaction, so a crash never loses nor doubles a firing, and a job cancelled
    /// (rolled back) meanwhile fires no more. The outcome is
    /// [`WriteOutcome::Repeated`]: `Some(the copy's id)`, or `None` when the job was
    /// gone and nothing was added.
    Repeat {
        xid: String,
        next_xid: String,
        copy: NewMessage,
    },
}

impl WriteOp {
    /// The containers whose committed rows this op may change, as far as the op says:
    /// a commit's ([`WriteOp::Commit`]) are those of its transaction's rows, which only
    /// the store knows. A rollback changes only prepared rows: none. Drives the store's
    /// kept counts (`count_committed`); also ops that change no row name their
    /// container, which costs a count at most.
    pub fn containers(&self) -> impl Iterator<Item = &str> {
        let (first, second): (Option<&str>, Option<&str>) = match self {
            WriteOp::Add(m) => (Some(&m.container), None),
            WriteOp::Subscribe { container, .. }
            | WriteOp::Unsubscribe { container, .. }
            | WriteOp::Ack { container, .. }
            | WriteOp::AckUpTo { container, .. }
            | WriteOp::Cleanup { container, .. }
            | WriteOp::Redelivered { container, .. }
            | WriteOp::Remove { container, .. }
            | WriteOp::ExpireQueue { container, .. }
            | WriteOp::Reclaim { container, .. }
            | WriteOp::ReplaceLastValue { container, .. } => (Some(container), None),
            WriteOp::DeadLetter {
                container, message, ..
            } => (Some(container), Some(&message.container)),
            WriteOp::Repeat { copy, .. } => (Some(&copy.container), None),
            WriteOp::Commit { .. }
            | WriteOp::Rollback { .. }
            | WriteOp::RollbackAbandoned { .. } => (None, None),
        };
        first.into_iter().chain(second)
    }
}

/// What one [`WriteOp`] did, in the same position of the result as its op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The new message's id.
    Added(i64),
    /// The subscription, created or as it already was.
    Subscribed(DurableSubscription),
    /// Whether a subscription was removed.
    Unsubscribed(bool),
    /// How many of the acked messages were not yet done for the subscription (an ack
    /// of a message already at or below the mark, or already acked, counts 0).
    Acked { newly_acked: u64 },
    /// Whether any mark moved.
    AckedUpTo { moved: bool },
    /// `(old id, new id)` of each committed message.
    Committed(Vec<(i64, i64)>),
    /// How many messages a rollback, a queue remove or a
    /// [`WriteOp::ReplaceLastValue`] deleted.
    Deleted(u64),
    /// What a [`WriteOp::Cleanup`] did: `deleted` rows; and every row at or below
    /// `reached` that cleanup may delete is gone (prepared rows excepted: commit gives
    /// them new ids, rollback deletes them), so the next batch starts after it.
    CleanedUp { deleted: u64, reached: i64 },
    /// The ids a queue expiry page ([`WriteOp::ExpireQueue`]) deleted, ascending; at
    /// most its `limit`. Also the ids [`WriteOp::Reclaim`] deleted, ascending.
    Removed(Vec<i64>),
    /// What [`WriteOp::DeadLetter`] did: see [`Moved`].
    DeadLettered(Moved),
    /// The new id of a [`WriteOp::Repeat`]'s copy, or `None` when its job was gone.
    Repeated(Option<i64>),
}

/// What a [`WriteOp::DeadLetter`] (a move of one message to another queue) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// Moved: the source row is deleted and the copy added with this new id.
    Added(i64),
    /// The source row is deleted and the copy was not added: its target (a
    /// last-value queue) holds a message with its last-value key that arrived at the
    /// broker after it, which it must not replace (see [`WriteOp::DeadLetter`]).
    Superseded,
    /// Nothing changed: the source row was gone (acked, expired, moved before) or is
    /// prepared.
    Gone,
}

impl Moved {
    /// The copy's new id, when it was added.
    pub fn id(self) -> Option<i64> {
        match self {
            Self::Added(id) => Some(id),
            Self::Superseded | Self::Gone => None,
        }
    }
}

/// Typed answers: each takes the value out of the outcome kind its op answers with
/// (see [`WriteOp`]). Errors: [`crate::StoreError::WrongOutcome`] for another kind,
/// which only a [`crate::MessageStore`] that broke its contract can return.
impl WriteOutcome {
    /// The variant's name, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Added(_) => "Added",
            Self::Subscribed(_) => "Subscribed",
            Self::Unsubscribed(_) => "Unsubscribed",
            Self::Acked { .. } => "Acked",
            Self::AckedUpTo { .. } => "AckedUpTo",
            Self::Committed(_) => "Committed",
            Self::Deleted(_) => "Deleted",
            Self::CleanedUp { .. } => "CleanedUp",
            Self::Removed(_) => "Removed",
            Self::DeadLettered(_) => "DeadLettered",
            Self::Repeated(_) => "Repeated",
        }
    }

    fn wrong(self, expected: &'static str) -> crate::StoreError {
        crate::StoreError::WrongOutcome {
            expected,
            got: self.kind(),
        }
    }

    /// The new id of [`WriteOp::Add`].
    pub fn added(self) -> crate::Result<i64> {
        match self {
            Self::Added(id) => Ok(id),
            other => Err(other.wrong("Added")),
        }
    }

    /// The subscription of [`WriteOp::Subscribe`].
    pub fn subscribed(self) -> crate::Result<DurableSubscription> {
        match self {
            Self::Subscribed(sub) => Ok(sub),
            other => Err(other.wrong("Subscribed")),
        }
    }

    /// Whether [`WriteOp::Unsubscribe`] removed a subscription.
    pub fn unsubscribed(self) -> crate::Result<bool> {
        match self {
            Self::Unsubscribed(removed) => Ok(removed),
            other => Err(other.wrong("Unsubscribed")),
        }
    }

    /// How many messages [`WriteOp::Ack`] newly acked.
    pub fn acked(self) -> crate::Result<u64> {
        match self {
            Self::Acked { newly_acked } => Ok(newly_acked),
            other => Err(other.wrong("Acked")),
        }
    }

    /// Whether [`WriteOp::AckUpTo`] moved a mark.
    pub fn acked_up_to(self) -> crate::Result<bool> {
        match self {
            Self::AckedUpTo { moved } => Ok(moved),
            other => Err(other.wrong("AckedUpTo")),
        }
    }

    /// `(old id, new id)` of each message [`WriteOp::Commit`] made visible.
    pub fn committed(self) -> crate::Result<Vec<(i64, i64)>> {
        match self {
            Self::Committed(renumbered) => Ok(renumbered),
            other => Err(other.wrong("Committed")),
        }
    }

    /// How many rows [`WriteOp::Rollback`], [`WriteOp::RollbackAbandoned`] or
    /// [`WriteOp::Remove`] deleted.
    pub fn deleted(self) -> crate::Result<u64> {
        match self {
            Self::Deleted(n) => Ok(n),
            other => Err(other.wrong("Deleted")),
        }
    }

    /// `(deleted, reached)` of a [`WriteOp::Cleanup`]: how many rows it deleted, and
    /// the `after` of the next batch.
    pub fn cleaned_up(self) -> crate::Result<(u64, i64)> {
        match self {
            Self::CleanedUp { deleted, reached } => Ok((deleted, reached)),
            other => Err(other.wrong("CleanedUp")),
        }
    }

    /// The ids [`WriteOp::ExpireQueue`] deleted, ascending.
    pub fn removed(self) -> crate::Result<Vec<i64>> {
        match self {
            Self::Removed(ids) => Ok(ids),
            other => Err(other.wrong("Removed")),
        }
    }

    /// What [`WriteOp::DeadLetter`] did: its copy's new id, or why there is none.
    pub fn dead_lettered(self) -> crate::Result<Moved> {
        match self {
            Self::DeadLettered(id) => Ok(id),
            other => Err(other.wrong("DeadLettered")),
        }
    }

    /// The copy's id of [`WriteOp::Repeat`] (`None`: the job was gone).
    pub fn repeated(self) -> crate::Result<Option<i64>> {
        match self {
            Self::Repeated(id) => Ok(id),
            other => Err(other.wrong("Repeated")),
        }
    }
}

/// The answer of [`crate::MessageStore::recover_expired`].
#[derive(Debug, Clone, Default)]
pub struct ExpiredPage {
    /// Per subscription, the run of expired messages directly after its mark, in id
    /// order. Subscriptions with nothing to expire are absent.
    pub by_subscription: BTreeMap<SubscriptionKey, Vec<Arc<StoredMessage>>>,
    /// Distinct message rows loaded (each is shared between the subscriptions above).
    pub rows: usize,
    /// True when the page may not have found everything: the row limit was reached or
    /// some subscription's run reached the end of its bounded window. The caller
    /// should ask again at once (after acking this page).
    pub more: bool,
}

#[cfg(test)]
mod tests {
    use super::{Moved, WriteOutcome};
    use crate::StoreError;

    #[test]
    fn a_typed_answer_of_another_kind_is_an_error() {
        assert_eq!(WriteOutcome::Added(7).added().unwrap(), 7);
        assert_eq!(WriteOutcome::Deleted(2).deleted().unwrap(), 2);
        assert_eq!(
            WriteOutcome::DeadLettered(Moved::Gone)
                .dead_lettered()
                .unwrap(),
            Moved::Gone
        );
        let err = WriteOutcome::Deleted(2).added().unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::WrongOutcome {
                    expected: "Added",
                    got: "Deleted"
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "store answered with a Deleted outcome where Added was due"
        );
    }
}
