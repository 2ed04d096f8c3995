//! The actors crate's one error type.

use std::sync::Arc;

use ebb_store::StoreError;
use thiserror::Error;

/// Why a request to an actor failed. Cloneable: one store failure is handed to every
/// caller whose write was in the failed transaction.
#[derive(Debug, Clone, Error)]
pub enum ActorError {
    /// The store failed; nothing of the transaction that held this write was committed.
    #[error(transparent)]
    Store(Arc<StoreError>),
    /// The store actor was closed by shutdown and takes no more writes.
    #[error("store actor is closed: the broker is shutting down")]
    Closed,
    /// A durable subscription can have one consumer at a time (ActiveMQ: "durable
    /// consumer is in use"). Holds `client_id/subscription_name`.
    #[error("durable subscription {0} is already in use by another consumer")]
    DurableInUse(String),
    /// An ack or detach named a subscription id the destination does not have.
    #[error("unknown subscription {0}")]
    UnknownSubscription(u64),
    /// A request the destination cannot take; the text says why.
    #[error("{0}")]
    Invalid(String),
    /// The broker is shutting down and takes no new destinations or subscriptions.
    #[error("the broker is shutting down")]
    ShuttingDown,
    /// A destination cannot be deleted now; the text says why (consumers attached,
    /// an open transaction holds messages for it, a deletion is under way). As
    /// ActiveMQ's "Destination still has an active subscription".
    #[error("{0}")]
    InUse(String),
    /// The destination's actor (its store key) stopped while the request was on its
    /// way, because the destination was deleted or went to sleep
    /// ([`crate::destination::sleep`]): nothing was done. The broker's own calls ask
    /// the destination's successor instead, so a caller sees it only when that
    /// happens again and again.
    #[error("destination {0} was deleted or went to sleep while the request was on its way")]
    Retired(String),
    /// The actor stopped before it answered.
    #[error("actor is gone: {0}")]
    Mailbox(#[from] actix::MailboxError),
}

impl ActorError {
    /// An individual ack or a NACK of delivery `delivery_id`, which does not wait for
    /// one: it was acked or refused (NACK) already, or never delivered on this
    /// subscription.
    pub fn not_awaiting_ack(delivery_id: u64) -> Self {
        ActorError::Invalid(format!(
            "delivery {delivery_id} is not waiting for an ack: it was acked or refused (NACK) already, or never delivered"
        ))
    }
}

impl From<StoreError> for ActorError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Closed => ActorError::Closed,
            e => ActorError::Store(Arc::new(e)),
        }
    }
}
