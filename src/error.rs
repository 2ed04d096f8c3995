//! The embedding API's one error type, and the stable codes every refusal carries.

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
    /// A request Ebb does not support as asked (refused rather than done otherwise);
    /// the text says what.
    #[error("{0}")]
    Unsupported(&'static str),
    /// A value of a message or a request that cannot be honoured as given (a
    /// repeating message without a period); the text says which.
    #[error("{0}")]
    InvalidValue(&'static str),
    /// A policy entry the broker cannot honour (an invalid pattern, a setting its kind
    /// of destination does not offer: [`ebb_actors::policy::PolicyMap::check`]); the
    /// text names the entry.
    #[error("{0}")]
    InvalidPolicy(String),
    /// A cron expression that cannot be read (ActiveMQ's `AMQ_SCHEDULED_CRON`: five
    /// fields, minute to day of week), or that never occurs.
    #[error("invalid cron expression `{expression}` (AMQ_SCHEDULED_CRON): {reason}")]
    InvalidCron {
        /// The expression as given.
        expression: String,
        /// What is wrong with it.
        reason: String,
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
    /// A new temporary destination beyond a limit on those alive at once: the
    /// broker's ([`crate::UsageConfig::max_temporary_destinations`]), one user's
    /// ([`crate::UsageConfig::max_temporary_destinations_per_user`]) or one
    /// connection's ([`crate::MAX_TEMPORARIES_PER_CONNECTION`]). Nothing was made;
    /// one ends (its connection ends, or its [`crate::TemporaryQueue`] is dropped)
    /// before another is accepted. Code [`ErrorCode::LimitExceeded`].
    #[error("too many temporary destinations: {limit} has {max} alive, the most {} (one must end first)", limit.setting())]
    TooManyTemporaryDestinations {
        /// Whose limit.
        limit: TemporaryLimit,
        /// The limit (temporary destinations alive at once).
        max: u64,
    },
    /// A durable subscription needs a client id and a subscription name; a client id
    /// starting with `ebb:` is the broker's own (consumer groups' bindings).
    #[error("a durable subscription needs a non-empty client id and subscription name, and a client id that does not start with `ebb:` (the broker's own)")]
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
    /// No reply came within the time given ([`crate::Broker::request`]), ms.
    #[error("no reply within {0} ms")]
    Timeout(u64),
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
    #[error("cannot listen on {addr} ({what}): {cause}")]
    Listen {
        /// Which listener (`STOMP`, `STOMP over TLS`).
        what: &'static str,
        /// The address it was given.
        addr: std::net::SocketAddr,
        /// Why the bind failed (in the text; not a `source()`, so an error chain
        /// names it once).
        cause: std::io::Error,
    },
}

/// Whose limit on temporary destinations alive at once refused a new one
/// ([`Error::TooManyTemporaryDestinations`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemporaryLimit {
    /// The broker's, over every connection
    /// ([`crate::UsageConfig::max_temporary_destinations`]).
    Broker,
    /// One user's (its login), over all its connections
    /// ([`crate::UsageConfig::max_temporary_destinations_per_user`]).
    User(String),
    /// One connection's ([`crate::MAX_TEMPORARIES_PER_CONNECTION`]).
    Connection,
}

impl TemporaryLimit {
    /// Who may have how many, and the setting that says so (the error's text).
    pub fn setting(&self) -> &'static str {
        match self {
            TemporaryLimit::Broker => "the broker may have (max_temporary_destinations)",
            TemporaryLimit::User(_) => "one user may have (max_temporary_destinations_per_user)",
            TemporaryLimit::Connection => "one connection may have",
        }
    }
}

impl std::fmt::Display for TemporaryLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemporaryLimit::Broker => f.write_str("the broker"),
            TemporaryLimit::User(login) => write!(f, "user `{login}`"),
            TemporaryLimit::Connection => f.write_str("this connection"),
        }
    }
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

impl Error {
    /// The stable code of this error ([`ErrorCode`]): what a STOMP ERROR frame's
    /// `error-code` header and the JSON API's `code` field carry for it.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Store(_) => ErrorCode::StoreFailure,
            Error::Actor(ActorError::Store(_)) => ErrorCode::StoreFailure,
            Error::Actor(ActorError::UnknownSubscription(_)) => ErrorCode::UnknownSubscription,
            Error::Actor(ActorError::Invalid(_)) => ErrorCode::InvalidRequest,
            Error::Actor(ActorError::Retired(_)) => ErrorCode::NotFound,
            Error::Actor(_) => ErrorCode::Internal,
            Error::DurableInUse(_) => ErrorCode::DurableInUse,
            Error::InUse(_) => ErrorCode::InUse,
            Error::InvalidDestination { .. } => ErrorCode::InvalidDestination,
            Error::InvalidPriority(_)
            | Error::InvalidValue(_)
            | Error::InvalidPolicy(_)
            | Error::InvalidCron { .. }
            | Error::InvalidSubscription
            | Error::InvalidPrefetch => ErrorCode::InvalidValue,
            Error::ResourceLimit { .. } => ErrorCode::ResourceLimit,
            Error::Unsupported(_) => ErrorCode::Unsupported,
            Error::TooManyDurableSubscriptions { .. } => ErrorCode::LimitExceeded,
            Error::TooManyTemporaryDestinations { .. } => ErrorCode::LimitExceeded,
            Error::NotThisSubscription => ErrorCode::UnknownAck,
            Error::ShuttingDown => ErrorCode::ShuttingDown,
            Error::LeaseRunOut => ErrorCode::LeaseRunOut,
            Error::Timeout(_) => ErrorCode::Timeout,
            Error::Runtime(_) | Error::Metrics(_) | Error::Http(_) | Error::Listen { .. } => {
                ErrorCode::Internal
            }
        }
    }
}

/// Why a request was refused, as a stable code a client can match on instead of the
/// text (which says more and may grow). Every way in carries it: a STOMP ERROR frame
/// in its `error-code` header, the JSON API in its `code` field, the embedding API
/// through [`Error::code`]. The codes are lower-case words joined by `-`; a code once
/// published keeps its meaning, and new ones may be added (hence `non_exhaustive`).
/// [`ErrorCode::ALL`] lists them, [`ErrorCode::meaning`] says what each means (the
/// table in the docs is made from them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// `malformed-frame`: the bytes are not a frame of the protocol (no command, a
    /// header line without a colon, a bad escape, a body not ended as its
    /// content-length says).
    MalformedFrame,
    /// `protocol-violation`: a well-formed frame in the wrong place (a command before
    /// CONNECT, a second CONNECT, a server's frame sent by a client).
    ProtocolViolation,
    /// `no-common-version`: the client's `accept-version` names no version this
    /// server speaks.
    NoCommonVersion,
    /// `missing-header`: a header the command needs is absent (`destination`, `id`).
    MissingHeader,
    /// `invalid-value`: a header, field or parameter has a value that cannot be used
    /// (a priority outside 0–9, an `expires` that is no number, a prefetch of 0).
    InvalidValue,
    /// `unsupported`: a header or option Ebb does not honour, refused rather than
    /// ignored (`browser-end:false`, `activemq.noLocal` on a durable subscription).
    Unsupported,
    /// `invalid-destination`: a destination name that cannot be used (no kind, an
    /// empty name, a wildcard where one destination is needed).
    InvalidDestination,
    /// `invalid-selector`: a selector that does not parse.
    InvalidSelector,
    /// `invalid-request`: the request cannot be done as asked (browsing a topic,
    /// an operation the destination's kind does not offer).
    InvalidRequest,
    /// `duplicate-id`: a subscription id or transaction id already in use on this
    /// connection.
    DuplicateId,
    /// `unknown-subscription`: no subscription with that id (on this connection, or
    /// at the destination).
    UnknownSubscription,
    /// `unknown-transaction`: no transaction with that id has begun on this
    /// connection.
    UnknownTransaction,
    /// `unknown-ack`: an ACK or NACK of a message that waits for none here (acked
    /// already, never delivered, or received on another subscription).
    UnknownAck,
    /// `authentication-failed`: the login, passcode or client certificate was not
    /// accepted, or none was given where one is required.
    AuthenticationFailed,
    /// `login-throttled`: too many refused logins from this address lately; it must
    /// wait before it tries again.
    LoginThrottled,
    /// `not-authorized`: the user lacks the right (`read`, `write`, `admin`) the
    /// request needs.
    NotAuthorized,
    /// `client-id-in-use`: another connection holds this client id and link stealing
    /// is off; or this connection's id was taken over by a newer one.
    ClientIdInUse,
    /// `limit-exceeded`: a per-connection, per-client, per-user or broker-wide limit is
    /// reached (frame size, headers, subscriptions, open transactions, a transaction's
    /// size, connections, durable subscriptions per client id; temporary destinations
    /// per connection, per user and in the whole broker); the text names the setting.
    LimitExceeded,
    /// `resource-limit`: producer flow control refused a send (a memory, temp, store
    /// or destination limit is reached); nothing was stored. As ActiveMQ's
    /// `ResourceAllocationException`.
    ResourceLimit,
    /// `durable-in-use`: the durable subscription has its one consumer already.
    DurableInUse,
    /// `in-use`: the destination cannot be deleted now (consumers attached, an open
    /// transaction holds messages for it).
    InUse,
    /// `not-found`: no such destination, subscription, connection or route (the
    /// admin API).
    NotFound,
    /// `timeout`: the client stalled (no CONNECT in time, a frame left half-sent).
    Timeout,
    /// `closed-by-operator`: an operator closed the connection (admin API).
    ClosedByOperator,
    /// `store-failure`: the store failed (a lost database connection, a full disk);
    /// nothing of the request was committed. Retrying later may succeed.
    StoreFailure,
    /// `shutting-down`: the broker is stopping and takes no more requests.
    ShuttingDown,
    /// `lease-run-out`: the broker's store lease ran out (a standby may be active);
    /// it serves nothing and is stopping.
    LeaseRunOut,
    /// `internal`: something failed inside the broker; the text and the log say what.
    Internal,
}

impl ErrorCode {
    /// Every code, in the order of the docs' table.
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::MalformedFrame,
        ErrorCode::ProtocolViolation,
        ErrorCode::NoCommonVersion,
        ErrorCode::MissingHeader,
        ErrorCode::InvalidValue,
        ErrorCode::Unsupported,
        ErrorCode::InvalidDestination,
        ErrorCode::InvalidSelector,
        ErrorCode::InvalidRequest,
        ErrorCode::DuplicateId,
        ErrorCode::UnknownSubscription,
        ErrorCode::UnknownTransaction,
        ErrorCode::UnknownAck,
        ErrorCode::AuthenticationFailed,
        ErrorCode::LoginThrottled,
        ErrorCode::NotAuthorized,
        ErrorCode::ClientIdInUse,
        ErrorCode::LimitExceeded,
        ErrorCode::ResourceLimit,
        ErrorCode::DurableInUse,
        ErrorCode::InUse,
        ErrorCode::NotFound,
        ErrorCode::Timeout,
        ErrorCode::ClosedByOperator,
        ErrorCode::StoreFailure,
        ErrorCode::ShuttingDown,
        ErrorCode::LeaseRunOut,
        ErrorCode::Internal,
    ];

    /// The code as it goes on the wire (`invalid-destination`).
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::MalformedFrame => "malformed-frame",
            ErrorCode::ProtocolViolation => "protocol-violation",
            ErrorCode::NoCommonVersion => "no-common-version",
            ErrorCode::MissingHeader => "missing-header",
            ErrorCode::InvalidValue => "invalid-value",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::InvalidDestination => "invalid-destination",
            ErrorCode::InvalidSelector => "invalid-selector",
            ErrorCode::InvalidRequest => "invalid-request",
            ErrorCode::DuplicateId => "duplicate-id",
            ErrorCode::UnknownSubscription => "unknown-subscription",
            ErrorCode::UnknownTransaction => "unknown-transaction",
            ErrorCode::UnknownAck => "unknown-ack",
            ErrorCode::AuthenticationFailed => "authentication-failed",
            ErrorCode::LoginThrottled => "login-throttled",
            ErrorCode::NotAuthorized => "not-authorized",
            ErrorCode::ClientIdInUse => "client-id-in-use",
            ErrorCode::LimitExceeded => "limit-exceeded",
            ErrorCode::ResourceLimit => "resource-limit",
            ErrorCode::DurableInUse => "durable-in-use",
            ErrorCode::InUse => "in-use",
            ErrorCode::NotFound => "not-found",
            ErrorCode::Timeout => "timeout",
            ErrorCode::ClosedByOperator => "closed-by-operator",
            ErrorCode::StoreFailure => "store-failure",
            ErrorCode::ShuttingDown => "shutting-down",
            ErrorCode::LeaseRunOut => "lease-run-out",
            ErrorCode::Internal => "internal",
        }
    }

    /// What the code means, in a sentence (the docs' table).
    pub const fn meaning(self) -> &'static str {
        match self {
            ErrorCode::MalformedFrame => "the bytes are not a frame of the protocol",
            ErrorCode::ProtocolViolation => {
                "a frame in the wrong place (before CONNECT, a second CONNECT, a server's frame)"
            }
            ErrorCode::NoCommonVersion => "accept-version names no version this server speaks",
            ErrorCode::MissingHeader => "a header the command needs is absent",
            ErrorCode::InvalidValue => {
                "a header, field or parameter has a value that cannot be used"
            }
            ErrorCode::Unsupported => {
                "a header or option Ebb does not honour (refused, never ignored)"
            }
            ErrorCode::InvalidDestination => "a destination name that cannot be used",
            ErrorCode::InvalidSelector => "a selector that does not parse",
            ErrorCode::InvalidRequest => "the request cannot be done as asked on this destination",
            ErrorCode::DuplicateId => {
                "a subscription or transaction id already in use on this connection"
            }
            ErrorCode::UnknownSubscription => "no subscription with that id",
            ErrorCode::UnknownTransaction => "no transaction with that id has begun",
            ErrorCode::UnknownAck => "an ACK or NACK of a message that waits for none here",
            ErrorCode::AuthenticationFailed => "login, passcode or client certificate not accepted",
            ErrorCode::LoginThrottled => "too many refused logins from this address lately",
            ErrorCode::NotAuthorized => "the user lacks the right the request needs",
            ErrorCode::ClientIdInUse => "another connection holds the client id (or took it over)",
            ErrorCode::LimitExceeded => {
                "a per-connection, per-client, per-user or broker-wide limit is reached (e.g. `max_temporary_destinations`); the text names the setting"
            }
            ErrorCode::ResourceLimit => "producer flow control refused a send; nothing was stored",
            ErrorCode::DurableInUse => "the durable subscription has its one consumer already",
            ErrorCode::InUse => "the destination cannot be deleted now",
            ErrorCode::NotFound => "no such destination, subscription, connection or route",
            ErrorCode::Timeout => "the client stalled (no CONNECT in time, a frame left half-sent)",
            ErrorCode::ClosedByOperator => "an operator closed the connection",
            ErrorCode::StoreFailure => "the store failed; nothing of the request was committed",
            ErrorCode::ShuttingDown => "the broker is stopping",
            ErrorCode::LeaseRunOut => "the broker's store lease ran out; it is stopping",
            ErrorCode::Internal => "something failed inside the broker; the log says what",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    #[test]
    fn codes_are_distinct_lower_case_words() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "{text} twice");
            assert!(
                text.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                "{text}"
            );
            assert!(!code.meaning().is_empty());
        }
        assert_eq!(seen.len(), 28);
    }

    /// The docs' table (docs/errors.md) lists every code with its meaning, and no
    /// code the enum does not have.
    #[test]
    fn the_docs_table_lists_every_code() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/errors.md");
        let docs = std::fs::read_to_string(path).expect("docs/errors.md");
        let rows: Vec<(&str, &str)> = docs
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split_once("` | "))
            .map(|(code, rest)| (code, rest.trim_end_matches(" |")))
            .collect();
        let listed: Vec<&str> = rows.iter().map(|(code, _)| *code).collect();
        let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            listed, codes,
            "docs/errors.md's table, in ErrorCode::ALL's order"
        );
        for (code, (_, meaning)) in ErrorCode::ALL.iter().zip(&rows) {
            assert_eq!(
                *meaning,
                code.meaning(),
                "{code}'s meaning in docs/errors.md"
            );
        }
    }
}
