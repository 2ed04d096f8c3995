//! The embedding API's one error type.

use ebb_actors::ActorError;
use ebb_store::StoreError;

/// Why a broker call failed. The `Display` text is stable.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Opening or reading the store failed (URL, connection, migration, statement).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A destination or the store actor refused or failed the request (store write
    /// failed, unknown subscription); the text says why.
    #[error(transparent)]
    Actor(ActorError),
    /// A durable subscription can have one consumer at a time, and this one has one
    /// (ActiveMQ: "durable consumer is in use"): subscribing to it again, or removing
    /// or replacing it, waits until that consumer is gone. Holds
    /// `client_id/subscription_name`.
    #[error("durable subscription {0} is already in use by another consumer")]
    DurableInUse(String),
    /// A destination cannot be deleted now; the text says why (consumers attached, an
    /// open transaction holds messages for it, a deletion is under way). As ActiveMQ's
    /// "Destination still has an active subscription".
    #[error("{0}")]
    InUse(String),
    /// A destination name that cannot be used; the text says why.
    #[error("invalid destination `{name}`: {reason}")]
    InvalidDestination {
        /// The name as given.
        name: String,
        /// Why it cannot be used.
        reason: &'static str,
    },
    /// A priority outside 0..=9.
    #[error("invalid priority {0}: priorities run from 0 to 9")]
    InvalidPriority(u8),
    /// Producer flow control refused a send: a usage limit is reached and the broker is
    /// set to fail rather than wait (`send_fail_if_no_space`), or waited
    /// `send_fail_if_no_space_after_timeout` ms in vain. Nothing was stored. As
    /// ActiveMQ's `ResourceAllocationException`.
    #[error("resource allocation: {usage} usage limit reached ({used} of {limit} bytes); the message was not accepted{}", match waited_ms { Some(ms) => format!(" after waiting {ms} ms for space"), None => String::new() })]
    ResourceLimit {
        /// Which limit: `memory`, `temp`, `store`, `transactions` (what open
        /// transactions hold), or a destination (`queue://jobs`).
        usage: String,
        /// Bytes in use when the send was refused.
        used: u64,
        /// The limit, bytes.
        limit: u64,
        /// How long the send waited for space first, ms (`None`: it did not wait).
        waited_ms: Option<u64>,
    },
    /// A new durable subscription of a client id that has `max` already
    /// ([`crate::UsageConfig::max_durable_subscriptions_per_client`]).
    #[error("client id `{client_id}` has {max} durable subscriptions, the most one client id may have (max_durable_subscriptions_per_client): remove one first")]
    TooManyDurableSubscriptions {
        /// The client id.
        client_id: String,
        /// The limit.
        max: u32,
    },
    /// A durable subscription needs a client id and a subscription name.
    #[error("a durable subscription needs a non-empty client id and subscription name")]
    InvalidSubscription,
    /// An ack or NACK of a message received on another [`crate::Subscription`] (or
    /// browsed): ack it on the one it came from.
    #[error("this message was received on another subscription: ack or NACK it on that one")]
    NotThisSubscription,
    /// A prefetch of 0 ([`crate::SubscribeOptions::prefetch`]): a consumer would never
    /// receive anything.
    #[error("invalid prefetch 0: a consumer takes at least 1 message at a time")]
    InvalidPrefetch,
    /// The broker is shut down ([`crate::Broker::shutdown`]; or its thread has
    /// stopped, or its store is closed): it takes no more sends, subscribes, acks or
    /// browsing.
    #[error("the broker is shut down")]
    ShuttingDown,
    /// The broker's store lease has run out on its own clock (it was paused, or cut
    /// off from its database, past its fence): it serves nothing, as a standby may
    /// have taken over, and it is stopping (hardening issue, point 8b).
    #[error("this broker's store lease has run out (it was paused or cut off from its database): it serves nothing and is stopping")]
    LeaseRunOut,
    /// The broker's own thread could not be started; the text says why.
    #[error("broker runtime: {0}")]
    Runtime(String),
    /// The Prometheus recorder could not be installed (another metrics recorder is
    /// installed in this process); the text says so.
    #[error("metrics endpoint: {0}")]
    Metrics(String),
    /// The HTTP server could not start (its address cannot be bound); the text says
    /// which address and why.
    #[error("HTTP server: {0}")]
    Http(String),
    /// A listener of [`crate::server::Server`] could not bind its address (in use,
    /// not local, no permission).
    #[error("cannot listen on {addr} ({what}): {source}")]
    Listen {
        /// Which listener (`STOMP`, `STOMP over TLS`).
        what: &'static str,
        /// The address it was given.
        addr: std::net::SocketAddr,
        /// Why the bind failed.
        source: std::io::Error,
    },
}

impl From<ActorError> for Error {
    /// A refusal because of shutdown (the registry's, a closed store actor's, a stopped
    /// actor's) is [`Error::ShuttingDown`]; a durable subscription or a destination in
    /// use is [`Error::DurableInUse`] or [`Error::InUse`]; the rest is [`Error::Actor`].
    fn from(e: ActorError) -> Self {
        match e {
            ActorError::ShuttingDown
            | ActorError::Closed
            | ActorError::Mailbox(actix::MailboxError::Closed) => Error::ShuttingDown,
            ActorError::DurableInUse(which) => Error::DurableInUse(which),
            ActorError::InUse(why) => Error::InUse(why),
            e => Error::Actor(e),
        }
    }
}

impl From<actix::MailboxError> for Error {
    fn from(e: actix::MailboxError) -> Self {
        Error::from(ActorError::Mailbox(e))
    }
}

impl From<ebb_actors::destination::InvalidDestination> for Error {
    fn from(e: ebb_actors::destination::InvalidDestination) -> Self {
        Error::InvalidDestination {
            name: e.name,
            reason: e.reason,
        }
    }
}
