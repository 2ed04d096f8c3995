//! The values destinations hold and hand on: a message in memory ([`TopicMessage`]), a
//! delivery to a consumer ([`Delivery`]), and what a publish answers
//! ([`PublishOutcome`]). The messages actors exchange (`messages.rs`) carry them.

use std::sync::Arc;

use ebb_store::{Payload, StoredMessage};

/// A message as a destination (topic or queue) holds it in memory. Shared (`Arc`) by
/// every subscription that holds it, so its body is in memory once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMessage {
    /// Store id when the message is persistent and was stored (send order).
    pub id: Option<i64>,
    /// The broker-assigned message id (STOMP `message-id`).
    pub message_id: String,
    pub persistent: bool,
    /// 0..=9.
    pub priority: u8,
    /// Absolute expiration, epoch ms; 0 = never.
    pub expiration: i64,
    pub payload: Arc<Payload>,
    /// The memory it is charged to while the broker holds it (see [`crate::usage`]);
    /// `None` for messages read from the store.
    pub charge: Option<Arc<crate::usage::MemoryCharge>>,
    /// The connection that sent it, as the sender named it, for `noLocal`
    /// subscriptions; `None` when not named, and for messages read from the store.
    pub origin: Option<u64>,
    /// Failed deliveries the store counted for it (a queue's redelivery count, kept
    /// across restarts: [`ebb_store::StoredMessage::redeliveries`]); 0 for a message
    /// that was never read back from the store.
    pub redeliveries: u32,
}

impl TopicMessage {
    /// The first value of header `name`, if the producer sent one.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.payload
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_str())
    }

    /// Its last-value key on a kind that keeps one message per value of `header`
    /// ([`crate::kinds::Capabilities::last_value_header`]): that header's first value.
    pub fn last_value_key(&self, header: Option<&str>) -> Option<&str> {
        header.and_then(|h| self.header(h))
    }

    /// True when it has an expiration at or before `now_ms`.
    pub fn is_expired(&self, now_ms: i64) -> bool {
        ebb_store::is_expired(self.expiration, now_ms)
    }

    /// True when the memory it is charged to holds `percent` of its limit or more (the
    /// policy's `cursor_memory_high_water_mark`, see [`crate::usage`]): a cursor then
    /// leaves it in the store (if stored) instead of caching it. A message read back
    /// from the store carries no charge and is never refused.
    pub fn memory_above(&self, percent: u8) -> bool {
        self.charge.as_ref().is_some_and(|c| c.is_above(percent))
    }

    /// True when its memory charge is at a limit, its destination's or the broker's.
    pub fn memory_full(&self) -> bool {
        self.charge.as_ref().is_some_and(|c| c.is_full())
    }

    /// A message read from the store (always persistent).
    pub fn from_stored(m: &StoredMessage) -> Self {
        Self {
            id: Some(m.id),
            message_id: m.message_id.clone(),
            persistent: true,
            priority: m.priority,
            expiration: m.expiration,
            payload: Arc::clone(&m.payload),
            charge: None,
            origin: None,
            redeliveries: m.redeliveries,
        }
    }
}

/// A message handed to a consumer.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The subscription it was delivered on.
    pub subscription: u64,
    /// Per subscription, increasing; what the consumer acks.
    pub delivery_id: u64,
    pub message: Arc<TopicMessage>,
    /// True when this subscription was sent the message before and did not ack it.
    pub redelivered: bool,
    /// On a subscription to a wildcard destination ([`crate::wildcard`]): the
    /// destination the message was sent to. `None` on a subscription to one
    /// destination (it is that one).
    pub source: Option<Arc<crate::destination::DestinationKey>>,
}

/// What happened to a published message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishOutcome {
    /// Its store id, when it was stored.
    pub id: Option<i64>,
    /// It had already expired when it arrived: not stored, not dispatched, counted as
    /// expired once.
    pub expired_on_arrival: bool,
}

/// A consumer's `Subscribe::handed` (in [`crate::messages`]): the last delivery id it
/// handed to the application.
pub type Handed = std::sync::Arc<std::sync::atomic::AtomicU64>;

/// The last delivery id `handed` says was handed over (every one with `None`).
pub fn handed_up_to(handed: &Option<Handed>) -> u64 {
    handed
        .as_ref()
        .map_or(u64::MAX, |h| h.load(std::sync::atomic::Ordering::Acquire))
}
