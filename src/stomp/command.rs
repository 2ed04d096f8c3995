//! A client frame as a typed [`Command`]: the STOMP headers read, checked and turned
//! into values (a [`DestinationKey`], a [`Message`], an ack mode) once, at the edge.
//!
//! Parsing looks at the frame alone (and the protocol version the connection
//! negotiated, which decides SUBSCRIBE's default id): it never sees a connection's
//! subscriptions, transactions or user. What depends on those (is the transaction
//! begun, is the id in use, may this user write here) is the session's to refuse
//! ([`super::session`]). A frame that cannot be a command is a [`Refusal`] whose text
//! is the ERROR frame's `message`; clients and tests match on these texts, so they are
//! stable.

use crate::broker::{CronSchedule, Message, Repeat, Selector, Target};
use crate::stomp::frame::{self, Frame, Version};
use crate::DestinationPattern;
use crate::ErrorCode;
use crate::{DestinationKey, DestinationKind};

/// Why a frame is refused: its stable code (the ERROR frame's `error-code` header)
/// and its text (the `message` header and the body). The connection is closed after
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What kind of refusal it is, for a client to match on.
    pub code: ErrorCode,
    /// What was wrong, for a person.
    pub text: String,
}

impl Refusal {
    /// A refusal with `code` and `text`.
    pub fn new(code: ErrorCode, text: impl Into<String>) -> Self {
        Self {
            code,
            text: text.into(),
        }
    }

    /// A broker error as a refusal: its code, and its text after `context` (e.g.
    /// `"cannot subscribe: "`).
    pub fn of(context: &str, e: &crate::Error) -> Self {
        Self::new(e.code(), format!("{context}{e}"))
    }
}

impl From<crate::Error> for Refusal {
    fn from(e: crate::Error) -> Self {
        Self::of("", &e)
    }
}

/// The refusal of a CONNECT whose `accept-version` names no version this server
/// speaks; its ERROR carries `version` with the versions it does (STOMP 1.2 spec).
pub const NO_COMMON_VERSION: &str =
    "no supported protocol version in accept-version (this server speaks 1.0, 1.1, 1.2)";

/// The versions this server speaks, as the `version` header of the ERROR for
/// [`NO_COMMON_VERSION`].
pub const SUPPORTED_VERSIONS: &str = "1.0,1.1,1.2";

/// A refusal with `code` and `text`, as an `Err`.
pub fn refuse<T>(code: ErrorCode, text: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal::new(code, text))
}

/// Headers the broker sets or reads itself; every other SEND header is kept and
/// delivered as a user header.
pub const RESERVED: &[&str] = &[
    "destination",
    "persistent",
    "expires",
    "priority",
    "receipt",
    "transaction",
    "content-length",
    "message-id",
    "subscription",
    "ack",
    "redelivered",
    "timestamp",
];

/// One frame from the client, parsed: what the session applies, and what the
/// connection loop looks at for producer flow control.
#[derive(Debug)]
pub struct Request {
    /// The frame's command as read. The session checks it against the connection's
    /// state (CONNECT first, and only once) before it looks at [`Request::command`].
    pub kind: frame::Command,
    /// The `receipt` header: a RECEIPT once the command is applied, the `receipt-id`
    /// of the ERROR if it is refused.
    pub receipt: Option<String>,
    /// The typed command, or why the frame cannot be one.
    pub command: Result<Command, Refusal>,
    /// Bytes of the frame, headers and body: what it holds in memory while it is held
    /// or in flight (both bounded by bytes as well as frames, so large headers count).
    pub frame_bytes: usize,
}

impl Request {
    /// Parses `frame` for a connection that negotiated `version` (1.0 before CONNECT).
    pub fn parse(frame: &Frame, version: Version) -> Self {
        Self {
            kind: frame.command,
            receipt: frame.get("receipt").map(str::to_string),
            command: Command::parse(frame, version),
            frame_bytes: frame.body.len()
                + frame
                    .headers
                    .iter()
                    .map(|(n, v)| n.len() + v.len() + 2)
                    .sum::<usize>(),
        }
    }

    /// True for a command whose meaning needs every frame before it to be done first
    /// (their store writes committed, their acks applied): SUBSCRIBE and UNSUBSCRIBE
    /// (a subscription's acks reach it before it goes; what was sent before a
    /// SUBSCRIBE is not delivered to it as new), COMMIT and ABORT (the transaction's
    /// sends are stored), DISCONNECT (its receipt means everything before it is done).
    /// A pipelined connection applies it only once every earlier frame resolved; SEND,
    /// ACK, NACK and BEGIN go on without waiting (their receipts still go out in
    /// frame order).
    pub fn waits_for_earlier(&self) -> bool {
        matches!(
            self.command,
            Ok(Command::Subscribe { .. }
                | Command::Unsubscribe { .. }
                | Command::Commit { .. }
                | Command::Abort { .. }
                | Command::Disconnect)
        )
    }

    /// True for an ACK or NACK outside a transaction: applied at once, ahead of frames
    /// held behind a SEND that waits for space, since it is what frees space.
    pub fn frees_space(&self) -> bool {
        matches!(
            self.command,
            Ok(Command::Ack {
                transaction: None,
                ..
            } | Command::Nack {
                transaction: None,
                ..
            })
        )
    }
}

/// A SUBSCRIBE's `ack` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StompAck {
    /// `auto` (the default): a message counts as acked once it is sent.
    Auto,
    /// `client`: an ACK acks its message and every earlier one of the subscription.
    Client,
    /// `client-individual`: an ACK acks its message alone.
    ClientIndividual,
}

/// What a SUBSCRIBE asks for besides its destination, id and ack mode.
#[derive(Debug, Default)]
pub struct SubscribeHeaders {
    /// `activemq.prefetchSize` (at least 1).
    pub prefetch: Option<u32>,
    /// `activemq.subscriptionName` (topics only): a durable subscription.
    pub durable_name: Option<String>,
    /// `selector`: only messages it matches are delivered.
    pub selector: Option<Selector>,
    /// `browser:true` (queues, STOMP 1.1+, auto ack): list the messages present
    /// without consuming them, then a MESSAGE with `browser:end`.
    pub browser: bool,
    /// `activemq.exclusive:true` (queues): an exclusive consumer.
    pub exclusive: bool,
    /// `activemq.noLocal:true` (non-durable topic subscriptions): not the messages
    /// this connection sends.
    pub no_local: bool,
    /// `shared-subscription-name` (topics and wildcard topics): the shared durable
    /// subscription of that name, whose consumers compete for its messages (JMS 2.0's
    /// `createSharedDurableConsumer`; [`SHARED_SUBSCRIPTION_HEADER`]).
    pub shared_name: Option<String>,
}

/// The SUBSCRIBE header naming a shared durable subscription of a topic, or of every
/// topic a wildcard destination matches (JMS 2.0's shared durable subscription): every
/// SUBSCRIBE naming it, on any connection, is one of its competing consumers, and
/// what arrives while none is connected waits. On UNSUBSCRIBE it ends the shared
/// subscription it names once no consumer is left.
pub const SHARED_SUBSCRIPTION_HEADER: &str = "shared-subscription-name";

/// What an ACK or NACK names: STOMP 1.2's `id` (the MESSAGE's `ack` header), or 1.0
/// and 1.1's `message-id` with an optional `subscription`. The session resolves it
/// against the messages waiting for an ack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckRef {
    /// STOMP 1.2's `id` (the MESSAGE's `ack` header).
    pub id: Option<String>,
    /// STOMP 1.0/1.1's `message-id`.
    pub message_id: Option<String>,
    /// STOMP 1.1's `subscription`.
    pub subscription: Option<String>,
}

/// A client frame's meaning.
#[derive(Debug)]
pub enum Command {
    /// CONNECT or STOMP.
    Connect {
        /// The highest version both sides speak (`accept-version`; none: 1.0).
        version: Version,
        /// `login`, checked against the configured users.
        login: Option<String>,
        /// `passcode`, checked against the login's password hash.
        passcode: Option<String>,
        /// `heart-beat`: (client sends every ms, client wants every ms); 0 = none.
        heart_beat: (u64, u64),
        /// `client-id` (not empty): names the client's durable subscriptions.
        client_id: Option<String>,
        /// `request-id`, echoed as CONNECTED's `response-id`.
        request_id: Option<String>,
    },
    /// SEND: a message for a destination.
    Send {
        /// Where it goes (`/queue/NAME`, `/topic/NAME`, `queue://NAME`, `topic://NAME`).
        destination: DestinationKey,
        /// The other destinations of a composite send (ActiveMQ's comma convention,
        /// `/queue/a,/topic/b`: [`DestinationKey::parse_composite`]); empty for one.
        also: Vec<DestinationKey>,
        /// Body, user headers, and `persistent`, `priority`, `expires` as ActiveMQ
        /// reads them.
        message: Message,
        /// The `transaction` header as given (an empty one names no open transaction).
        transaction: Option<String>,
    },
    /// SUBSCRIBE.
    Subscribe {
        /// One destination, or a wildcard destination (`/topic/orders.>`).
        destination: Target,
        /// `id`; on STOMP 1.0 the destination when there is none.
        id: String,
        /// `ack`: `auto`, `client` or `client-individual`.
        ack: StompAck,
        /// What else the SUBSCRIBE asks for (boxed: a selector is large, and every
        /// frame held in the pipeline is a `Command`).
        options: Box<SubscribeHeaders>,
    },
    /// UNSUBSCRIBE.
    Unsubscribe {
        /// `id`, or the destination (STOMP 1.0).
        id: String,
        /// `activemq.subscriptionName`: also delete the durable subscription.
        durable_name: Option<String>,
        /// [`SHARED_SUBSCRIPTION_HEADER`]: also end the shared subscription it names
        /// (the one `id` consumes from), once no consumer is left.
        shared_name: Option<String>,
    },
    /// ACK.
    Ack {
        /// Which delivery.
        ack: AckRef,
        /// The `transaction` it belongs to (applied at COMMIT).
        transaction: Option<String>,
    },
    /// NACK.
    Nack {
        /// Which delivery.
        ack: AckRef,
        /// The `transaction` it belongs to (applied at COMMIT).
        transaction: Option<String>,
    },
    /// BEGIN.
    Begin {
        /// Its `transaction` name.
        transaction: String,
    },
    /// COMMIT.
    Commit {
        /// The `transaction` to commit.
        transaction: String,
    },
    /// ABORT.
    Abort {
        /// The `transaction` to roll back.
        transaction: String,
    },
    /// DISCONNECT (its receipt comes after every frame before it).
    Disconnect,
}

impl Command {
    /// The command `frame` carries, or the first thing wrong with its headers.
    /// `version` is the connection's negotiated one (1.0 before CONNECT).
    pub fn parse(frame: &Frame, version: Version) -> Result<Self, Refusal> {
        use frame::Command as C;
        let header = |name| frame.get(name).map(str::to_string);
        Ok(match frame.command {
            C::Connect | C::Stomp => {
                let Some(version) = Version::negotiate(frame.get("accept-version")) else {
                    return refuse(ErrorCode::NoCommonVersion, NO_COMMON_VERSION);
                };
                let heart_beat = match frame.get("heart-beat") {
                    None => (0, 0),
                    Some(hb) => parse_heartbeat(hb)
                        .ok_or_else(|| Refusal::new(ErrorCode::InvalidValue, format!("invalid heart-beat `{hb}`")))?,
                };
                Command::Connect {
                    version,
                    login: header("login"),
                    passcode: header("passcode"),
                    heart_beat,
                    client_id: frame
                        .get("client-id")
                        .filter(|c| !c.is_empty())
                        .map(str::to_string),
                    request_id: header("request-id"),
                }
            }
            C::Send => {
                let (destination, also) = composite_of(frame.get("destination"))?;
                Command::Send {
                    destination,
                    also,
                    message: message_of(frame)?,
                    transaction: header("transaction"),
                }
            }
            C::Subscribe => subscribe_of(frame, version)?,
            C::Unsubscribe => Command::Unsubscribe {
                id: frame
                    .get("id")
                    .or_else(|| frame.get("destination"))
                    .ok_or_else(|| Refusal::new(ErrorCode::MissingHeader, "UNSUBSCRIBE needs an id header"))?
                    .to_string(),
                durable_name: header("activemq.subscriptionName"),
                shared_name: header(SHARED_SUBSCRIPTION_HEADER),
            },
            // STOMP 1.2 names the message to ack by the MESSAGE's `ack` header, sent
            // back as `id`; a 1.2 ACK or NACK without one is refused, as ActiveMQ and
            // RabbitMQ do (1.0 and 1.1 name it by `message-id`).
            C::Ack | C::Nack if version == Version::V1_2 && frame.get("id").is_none() => {
                return refuse(ErrorCode::MissingHeader, format!(
                    "{} needs an id header in STOMP 1.2: the ack header of the MESSAGE",
                    frame.command.as_str()
                ))
            }
            C::Ack => Command::Ack {
                ack: ack_ref_of(frame),
                transaction: header("transaction"),
            },
            // As ActiveMQ: "NACK received but connection is in v1.0 mode" (STOMP-11).
            C::Nack if version == Version::V1_0 => {
                return refuse(ErrorCode::Unsupported, "NACK does not exist in STOMP 1.0: connect with accept-version:1.1 or 1.2 to use it")
            }
            C::Nack => Command::Nack {
                ack: ack_ref_of(frame),
                transaction: header("transaction"),
            },
            C::Begin => Command::Begin {
                transaction: transaction_of(frame)?,
            },
            C::Commit => Command::Commit {
                transaction: transaction_of(frame)?,
            },
            C::Abort => Command::Abort {
                transaction: transaction_of(frame)?,
            },
            C::Disconnect => Command::Disconnect,
            server @ (C::Connected | C::Message | C::Receipt | C::Error) => {
                return refuse(ErrorCode::ProtocolViolation, format!("{} is a server frame", server.as_str()))
            }
        })
    }
}

/// SUBSCRIBE headers that would change what the consumer receives and that Ebb does
/// not honour: `(name, value that means the default, why)`. Refused with an ERROR,
/// never ignored (an ignored `browser:true` once consumed a whole queue); the value
/// that asks for the default behaviour (`activemq.exclusive:false`) is accepted. Other
/// brokers' subscription headers are refused so that a client written for them does
/// not silently get other semantics (RabbitMQ's `durable`/`persistent`, `auto-delete`
/// and `x-*` queue arguments, Artemis's `subscription-type`, `durable-subscription-name`
/// and `consumer-window-size`, Apollo's `credit` and `from-seq`, ActiveMQ's
/// `transformation`).
const UNSUPPORTED_SUBSCRIBE: &[(&str, &str, &str)] = &[
    ("activemq.retroactive", "false", "retroactive subscriptions are not supported"),
    ("activemq.priority", "", "consumer priorities are not supported"),
    (
        "activemq.maximumPendingMessageLimit",
        "",
        "a per-consumer pending limit is not supported: set the destination policy's pending_message_limit",
    ),
    (
        "durable",
        "false",
        "RabbitMQ's durable subscriptions are not supported: use activemq.subscriptionName with client-id",
    ),
    ("auto-delete", "true", "RabbitMQ's auto-delete setting is not supported"),
    ("exclusive", "false", "exclusive consumers are not supported yet"),
    ("prefetch-count", "", "use activemq.prefetchSize"),
    (
        "subscription-type",
        "",
        "Artemis routing types are not supported: use /queue/NAME or /topic/NAME",
    ),
    ("durable-subscription-name", "", "use activemq.subscriptionName"),
    ("durable-subscriber-name", "", "use activemq.subscriptionName"),
    ("no-local", "false", "use activemq.noLocal"),
    (
        "persistent",
        "false",
        "RabbitMQ's durable subscriptions (persistent is its alias of durable) are not supported: use activemq.subscriptionName with client-id",
    ),
    (
        "transformation",
        "",
        "ActiveMQ's message transformations are not supported: bodies are delivered as sent",
    ),
    ("consumer-window-size", "", "Artemis's flow control is not supported: use activemq.prefetchSize"),
    ("credit", "", "Apollo's credit is not supported: use activemq.prefetchSize"),
    ("from-seq", "", "Apollo's queue sequences are not supported"),
    ("include-seq", "", "Apollo's queue sequences are not supported"),
];

/// SUBSCRIBE headers Ebb reads or that change nothing a client receives
/// (`activemq.dispatchAsync` is a delivery detail ActiveMQ's clients set).
const KNOWN_SUBSCRIBE: &[&str] = &[
    "destination",
    "id",
    "ack",
    "receipt",
    "selector",
    "browser",
    "activemq.prefetchSize",
    "activemq.exclusive",
    "activemq.noLocal",
    "activemq.subscriptionName",
    "activemq.subcriptionName",
    "activemq.dispatchAsync",
    SHARED_SUBSCRIPTION_HEADER,
];

/// The first SUBSCRIBE header that changes what the consumer receives and is not
/// honoured: an unknown `activemq.*` or `x-*` option, or one of
/// [`UNSUPPORTED_SUBSCRIBE`] (unless it asks for the default).
fn unsupported_subscribe_header(frame: &Frame) -> Option<Refusal> {
    frame.headers.iter().find_map(|(name, value)| {
        if KNOWN_SUBSCRIBE.contains(&name.as_str()) {
            return None;
        }
        let listed = UNSUPPORTED_SUBSCRIBE.iter().find(|(n, _, _)| n == name);
        let reason = match listed {
            Some((_, default, _)) if !default.is_empty() && value.eq_ignore_ascii_case(default) => {
                return None
            }
            Some((_, _, why)) => *why,
            None if name.starts_with("activemq.") || name.starts_with("x-") => {
                "this broker does not know it, and it may change what the consumer receives"
            }
            None => return None,
        };
        Some(Refusal::new(
            ErrorCode::Unsupported,
            format!("SUBSCRIBE header `{name}:{value}` refused: {reason}"),
        ))
    })
}

/// SUBSCRIBE's `browser` header (ActiveMQ's queue browser over STOMP): whether the
/// subscription browses; `can_browse` is the destination kind's capability.
fn browser_of(
    frame: &Frame,
    version: Version,
    can_browse: bool,
    ack: StompAck,
) -> Result<bool, Refusal> {
    match frame.get("browser") {
        None | Some("false") => Ok(false),
        Some("true") if version == Version::V1_0 => refuse(
            ErrorCode::Unsupported,
            "browser:true needs STOMP 1.1 or 1.2 (as ActiveMQ)",
        ),
        Some("true") if !can_browse => refuse(
            ErrorCode::InvalidRequest,
            "browser:true is for queues: a topic keeps no messages to browse",
        ),
        Some("true") if ack != StompAck::Auto => refuse(
            ErrorCode::InvalidValue,
            "browser:true takes no ack mode: browsing acks nothing",
        ),
        Some("true") if frame.get("browser-end") == Some("false") => refuse(
            ErrorCode::Unsupported,
            "browser-end:false is not supported: a browse ends with browser:end",
        ),
        Some("true") => Ok(true),
        Some(other) => refuse(
            ErrorCode::InvalidValue,
            format!("invalid browser `{other}`: true or false"),
        ),
    }
}

/// SUBSCRIBE's `activemq.exclusive` (ActiveMQ's exclusive consumer): for
/// point-to-point kinds only.
fn exclusive_of(frame: &Frame, point_to_point: bool) -> Result<bool, Refusal> {
    match frame.get("activemq.exclusive") {
        None | Some("false") => Ok(false),
        Some("true") if point_to_point => Ok(true),
        Some("true") => refuse(
            ErrorCode::InvalidRequest,
            "activemq.exclusive is for queues: every topic subscription gets every message",
        ),
        Some(other) => refuse(
            ErrorCode::InvalidValue,
            format!("invalid activemq.exclusive `{other}`: true or false"),
        ),
    }
}

/// SUBSCRIBE's `activemq.noLocal` (no messages this connection sent): for topics'
/// subscriptions that are not durable.
fn no_local_of(frame: &Frame, point_to_point: bool, durable: bool) -> Result<bool, Refusal> {
    match frame.get("activemq.noLocal") {
        None | Some("false") => Ok(false),
        Some("true") if point_to_point => refuse(
            ErrorCode::InvalidRequest,
            "activemq.noLocal is for topics: a queue's message goes to one consumer, whoever sent it",
        ),
        Some("true") if durable => refuse(
            ErrorCode::Unsupported,
            "activemq.noLocal on a durable subscription is not supported: a stored message does not keep the connection that sent it",
        ),
        Some("true") => Ok(true),
        Some(other) => refuse(
            ErrorCode::InvalidValue,
            format!("invalid activemq.noLocal `{other}`: true or false"),
        ),
    }
}

fn subscribe_of(frame: &Frame, version: Version) -> Result<Command, Refusal> {
    if let Some(refusal) = unsupported_subscribe_header(frame) {
        return Err(refusal);
    }
    let destination = target_of(frame.get("destination"))?;
    let caps = destination.kind().capabilities();
    let id = match (frame.get("id"), version) {
        (Some(id), _) => id.to_string(),
        (None, Version::V1_0) => frame.get("destination").unwrap_or_default().to_string(),
        (None, _) => return refuse(ErrorCode::MissingHeader, "SUBSCRIBE needs an id header"),
    };
    let ack = match frame.get("ack").unwrap_or("auto") {
        "auto" => StompAck::Auto,
        "client" => StompAck::Client,
        "client-individual" => StompAck::ClientIndividual,
        other => {
            return refuse(
                ErrorCode::InvalidValue,
                format!("invalid ack mode `{other}`: auto, client or client-individual"),
            )
        }
    };
    let prefetch = match frame.get("activemq.prefetchSize") {
        None => None,
        Some(p) => Some(p.parse::<u32>().ok().filter(|p| *p > 0).ok_or_else(|| {
            Refusal::new(
                ErrorCode::InvalidValue,
                format!("invalid activemq.prefetchSize `{p}`"),
            )
        })?),
    };
    // ActiveMQ also reads its old misspelling, `activemq.subcriptionName`.
    let durable_name = frame
        .get("activemq.subscriptionName")
        .or_else(|| frame.get("activemq.subcriptionName"))
        .map(str::to_string);
    if durable_name.is_some() && !caps.durable_subscriptions {
        return refuse(
            ErrorCode::InvalidRequest,
            if caps.temporary {
                "activemq.subscriptionName is refused on a temporary destination: it lives only as long as its connection"
            } else {
                "activemq.subscriptionName is for topics: a queue keeps its messages for any consumer"
            },
        );
    }
    let browser = browser_of(frame, version, caps.browse, ack)?;
    if browser && matches!(destination, Target::Pattern(_)) {
        return refuse(
            ErrorCode::InvalidRequest,
            "browser:true browses one queue, not a wildcard destination",
        );
    }
    if browser && durable_name.is_some() {
        return refuse(
            ErrorCode::InvalidRequest,
            "browser:true is for queues: a topic keeps no messages to browse",
        );
    }
    let exclusive = exclusive_of(frame, caps.point_to_point)?;
    let shared_name = shared_name_of(frame, &destination, durable_name.is_some(), browser)?;
    let no_local = no_local_of(
        frame,
        caps.point_to_point,
        durable_name.is_some() || shared_name.is_some(),
    )?;
    if shared_name.is_some() && frame.get("selector").is_some_and(|s| !s.trim().is_empty()) {
        return refuse(
            ErrorCode::Unsupported,
            "a selector on a shared subscription is not supported: its consumers share one stream of the topic's messages",
        );
    }
    if exclusive && browser {
        return refuse(
            ErrorCode::InvalidValue,
            "browser:true takes no activemq.exclusive: browsing consumes nothing",
        );
    }
    // A bad selector is refused with its position; nothing is subscribed.
    // An empty one is none (as ActiveMQ).
    let selector = match frame.get("selector").filter(|s| !s.trim().is_empty()) {
        None => None,
        Some(text) => Some(
            Selector::parse(text)
                .map_err(|e| Refusal::new(ErrorCode::InvalidSelector, e.to_string()))?,
        ),
    };
    Ok(Command::Subscribe {
        destination,
        id,
        ack,
        options: Box::new(SubscribeHeaders {
            prefetch,
            durable_name,
            selector,
            browser,
            exclusive,
            no_local,
            shared_name,
        }),
    })
}

/// SUBSCRIBE's [`SHARED_SUBSCRIPTION_HEADER`]: for a topic or wildcard topic (not a
/// temporary one), not with `activemq.subscriptionName` or `browser:true`; the name is
/// not empty and has no `/`, `,` or wildcard (`*`, `>`, `+`, `#`): it names a queue.
fn shared_name_of(
    frame: &Frame,
    destination: &Target,
    durable: bool,
    browser: bool,
) -> Result<Option<String>, Refusal> {
    let Some(name) = frame.get(SHARED_SUBSCRIPTION_HEADER) else {
        return Ok(None);
    };
    let caps = destination.kind().capabilities();
    if caps.point_to_point || caps.temporary || !caps.durable_subscriptions {
        return refuse(
            ErrorCode::InvalidRequest,
            "shared-subscription-name is for topics (not temporary ones): a queue's consumers compete already",
        );
    }
    if durable || browser {
        return refuse(
            ErrorCode::InvalidRequest,
            "shared-subscription-name takes no activemq.subscriptionName or browser: a shared subscription is durable already, and a topic keeps nothing to browse",
        );
    }
    if name.is_empty() || name.contains(['/', ',', '*', '>', '+', '#']) {
        return refuse(
            ErrorCode::InvalidValue,
            format!("invalid shared-subscription-name `{name}`: not empty, without / , * > + #"),
        );
    }
    Ok(Some(name.to_string()))
}

fn ack_ref_of(frame: &Frame) -> AckRef {
    let header = |name| frame.get(name).map(str::to_string);
    AckRef {
        id: header("id"),
        message_id: header("message-id"),
        subscription: header("subscription"),
    }
}

/// BEGIN, COMMIT and ABORT's `transaction` header (not empty).
fn transaction_of(frame: &Frame) -> Result<String, Refusal> {
    match frame.get("transaction") {
        Some(tx) if !tx.is_empty() => Ok(tx.to_string()),
        _ => refuse(
            ErrorCode::MissingHeader,
            format!("{} needs a transaction header", frame.command.as_str()),
        ),
    }
}

/// A SUBSCRIBE's destination: a wildcard destination (`/topic/orders.>`,
/// `/queue/jobs.*`: ActiveMQ's wildcards) or one destination ([`destination_of`]).
fn target_of(destination: Option<&str>) -> Result<Target, Refusal> {
    let Some(text) = destination.filter(|d| !d.is_empty()) else {
        return refuse(ErrorCode::MissingHeader, "missing destination header");
    };
    match DestinationPattern::subscription_from_stomp(text) {
        Ok(Some(pattern)) => Ok(Target::Pattern(pattern)),
        Ok(None) => destination_of(destination).map(Target::One),
        Err(e) => Err(Refusal::new(ErrorCode::InvalidDestination, e.to_string())),
    }
}

/// `/topic/NAME` or `/queue/NAME` (ActiveMQ's STOMP destinations) as a key.
/// A SEND's `destination`: one destination, or a composite's first and the others
/// (`/queue/a,/topic/b`), each refused as [`destination_of`] refuses one.
fn composite_of(
    destination: Option<&str>,
) -> Result<(DestinationKey, Vec<DestinationKey>), Refusal> {
    match destination {
        Some(text) if text.contains(',') => {
            let mut keys = DestinationKey::parse_composite(text)
                .map_err(|e| Refusal::new(ErrorCode::InvalidDestination, e.to_string()))?;
            let first = keys.remove(0);
            Ok((first, keys))
        }
        _ => Ok((destination_of(destination)?, Vec::new())),
    }
}

fn destination_of(destination: Option<&str>) -> Result<DestinationKey, Refusal> {
    let Some(destination) = destination.filter(|d| !d.is_empty()) else {
        return refuse(ErrorCode::MissingHeader, "missing destination header");
    };
    DestinationKey::from_stomp(destination).map_err(|e| {
        // A refused name is worded as it always was: the destination, then the plain
        // name with the reason ("invalid destination `/queue/a.*`: invalid destination
        // `a.*`: wildcards ..."). A destination of neither kind has the key's own text
        // ("invalid destination `jobs`: use /queue/NAME or /topic/NAME").
        let name = DestinationKind::all()
            .find_map(|kind| destination.strip_prefix(kind.spec().stomp_prefix));
        match name {
            Some(name) => Refusal::new(
                ErrorCode::InvalidDestination,
                format!(
                    "invalid destination `{destination}`: invalid destination `{name}`: {}",
                    e.reason
                ),
            ),
            None => Refusal::new(ErrorCode::InvalidDestination, e.to_string()),
        }
    })
}

/// The message a SEND frame carries, with ActiveMQ's header conventions.
fn message_of(frame: &Frame) -> Result<Message, Refusal> {
    let mut message = Message::new(frame.body.clone());
    // STOMP's default, as ActiveMQ: non-persistent unless persistent:true.
    message.persistent = frame.get("persistent") == Some("true");
    if let Some(p) = frame.get("priority") {
        message.priority = p.parse::<u8>().ok().filter(|p| *p <= 9).ok_or_else(|| {
            Refusal::new(
                ErrorCode::InvalidValue,
                format!("invalid priority `{p}`: 0 to 9"),
            )
        })?;
    }
    if let Some(e) = frame.get("expires") {
        let at = e.parse::<i64>().ok().filter(|at| *at >= 0).ok_or_else(|| {
            Refusal::new(
                ErrorCode::InvalidValue,
                format!("invalid expires `{e}`: epoch ms, 0 = never"),
            )
        })?;
        if at > 0 {
            message = message.expires_at(at);
        }
    }
    (message.deliver_at, message.repeat, message.cron) = scheduled_of(frame)?;
    message.headers = frame
        .headers
        .iter()
        .filter(|(name, _)| !RESERVED.contains(&name.as_str()))
        .cloned()
        .collect();
    Ok(message)
}

/// ActiveMQ's scheduling headers on a SEND: `AMQ_SCHEDULED_DELAY` (ms, 0 or more; 0 is
/// at once) gives the due time, epoch ms, from now; `AMQ_SCHEDULED_REPEAT` (0 or
/// more) more deliveries every `AMQ_SCHEDULED_PERIOD` ms (1 or more when it repeats)
/// after the first. With `AMQ_SCHEDULED_CRON` (five fields, UTC) the message fires at
/// every occurrence, and delay, period and repeat apply to each firing, as in
/// ActiveMQ. A value that cannot be honoured is refused, naming the header.
fn scheduled_of(frame: &Frame) -> Result<Scheduling, Refusal> {
    let number = |name: &str, what: &str| -> Result<Option<i64>, Refusal> {
        let Some(text) = frame.get(name) else {
            return Ok(None);
        };
        let n = text.trim().parse::<i64>().ok().filter(|n| *n >= 0);
        n.map(Some).ok_or_else(|| {
            Refusal::new(
                ErrorCode::InvalidValue,
                format!("invalid {name} `{text}`: {what}"),
            )
        })
    };
    let delay = number("AMQ_SCHEDULED_DELAY", "ms, 0 or more")?.unwrap_or(0);
    let period = number("AMQ_SCHEDULED_PERIOD", "ms, 0 or more")?.unwrap_or(0);
    let count = number("AMQ_SCHEDULED_REPEAT", "a count, 0 or more")?.unwrap_or(0);
    let count = u32::try_from(count).map_err(|_| {
        Refusal::new(
            ErrorCode::InvalidValue,
            format!(
                "invalid AMQ_SCHEDULED_REPEAT `{count}`: at most {}",
                u32::MAX
            ),
        )
    })?;
    if count > 0 && period == 0 {
        return refuse(
            ErrorCode::InvalidValue,
            format!("AMQ_SCHEDULED_REPEAT {count} needs AMQ_SCHEDULED_PERIOD: ms between deliveries, 100 or more"),
        );
    }
    let repeat = (count > 0).then_some(Repeat {
        period_ms: period as u64,
        count,
    });
    if let Some(text) = frame
        .get("AMQ_SCHEDULED_CRON")
        .filter(|v| !v.trim().is_empty())
    {
        let cron = CronSchedule::parse(text)
            .map_err(|e| Refusal::new(ErrorCode::InvalidValue, e.to_string()))?
            .delay(std::time::Duration::from_millis(delay as u64));
        return Ok((None, repeat, Some(cron)));
    }
    let due = (delay > 0).then(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        now.saturating_add(delay)
    });
    Ok((due, repeat, None))
}

/// What [`scheduled_of`] reads: the due time (epoch ms), the repetition and the cron
/// schedule.
type Scheduling = (Option<i64>, Option<Repeat>, Option<CronSchedule>);

/// `x,y` (ms) as STOMP's `heart-beat` header gives them.
fn parse_heartbeat(value: &str) -> Option<(u64, u64)> {
    let (x, y) = value.split_once(',')?;
    Some((x.trim().parse().ok()?, y.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::Expiration;

    fn frame(command: frame::Command, headers: &[(&str, &str)]) -> Frame {
        headers
            .iter()
            .fold(Frame::new(command), |f, (n, v)| f.header(*n, *v))
    }

    fn parse(command: frame::Command, headers: &[(&str, &str)]) -> Result<Command, Refusal> {
        Command::parse(&frame(command, headers), Version::V1_2)
    }

    /// A SUBSCRIBE's ack mode and headers (panics on anything else).
    fn subscribe_parts(c: Result<Command, Refusal>) -> (StompAck, SubscribeHeaders) {
        match c {
            Ok(Command::Subscribe { ack, options, .. }) => (ack, *options),
            other => panic!("not a SUBSCRIBE: {other:?}"),
        }
    }

    /// The ERROR text for a frame with these headers (it must be refused).
    fn refusal(command: frame::Command, headers: &[(&str, &str)], version: Version) -> String {
        match Command::parse(&frame(command, headers), version) {
            Err(Refusal { text, .. }) => text,
            Ok(c) => panic!("{command:?} {headers:?} parsed: {c:?}"),
        }
    }

    #[test]
    fn connect_negotiates_the_version_and_reads_its_headers() {
        let c = parse(
            frame::Command::Connect,
            &[
                ("accept-version", "1.0,1.1"),
                ("login", "alice"),
                ("passcode", "pa:ss"),
                ("heart-beat", "100, 200"),
                ("client-id", "c1"),
                ("request-id", "r"),
            ],
        )
        .unwrap();
        let Command::Connect {
            version,
            login,
            passcode,
            heart_beat,
            client_id,
            request_id,
        } = c
        else {
            panic!("{c:?}")
        };
        assert_eq!(version, Version::V1_1);
        assert_eq!(login.as_deref(), Some("alice"));
        assert_eq!(passcode.as_deref(), Some("pa:ss"));
        assert_eq!(heart_beat, (100, 200));
        assert_eq!(client_id.as_deref(), Some("c1"));
        assert_eq!(request_id.as_deref(), Some("r"));
        // STOMP is CONNECT; no accept-version is 1.0; an empty client-id is none.
        let c = parse(frame::Command::Stomp, &[("client-id", "")]).unwrap();
        let Command::Connect {
            version,
            heart_beat,
            client_id,
            ..
        } = c
        else {
            panic!("{c:?}")
        };
        assert_eq!(
            (version, heart_beat, client_id),
            (Version::V1_0, (0, 0), None)
        );
    }

    #[test]
    fn send_carries_a_key_and_the_message_as_activemq_reads_it() {
        let mut f = frame(
            frame::Command::Send,
            &[
                ("destination", "/queue/jobs"),
                ("persistent", "true"),
                ("priority", "7"),
                ("expires", "1700000000000"),
                ("transaction", "t1"),
                ("receipt", "r1"),
                ("content-length", "3"),
                ("color", "red"),
                ("message-id", "forged"),
                ("shape", "round"),
            ],
        );
        f.body = b"abc".to_vec().into();
        let request = Request::parse(&f, Version::V1_2);
        assert_eq!(request.kind, frame::Command::Send);
        assert_eq!(request.receipt.as_deref(), Some("r1"));
        let headers: usize = f.headers.iter().map(|(n, v)| n.len() + v.len() + 2).sum();
        assert_eq!(request.frame_bytes, 3 + headers, "headers count too");
        assert!(!request.frees_space());
        let Ok(Command::Send {
            destination,
            also,
            message,
            transaction,
        }) = request.command
        else {
            panic!("{:?}", request.command)
        };
        assert_eq!(destination, DestinationKey::queue("jobs").unwrap());
        assert!(also.is_empty());
        assert_eq!(transaction.as_deref(), Some("t1"));
        assert_eq!(message.body, &b"abc"[..]);
        assert!(message.persistent);
        assert_eq!(message.priority, 7);
        assert_eq!(message.expiration, Expiration::At(1_700_000_000_000));
        // Reserved headers are the broker's; the others are delivered, in order.
        let user: Vec<(&str, &str)> = message
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(user, [("color", "red"), ("shape", "round")]);

        // Defaults: non-persistent (STOMP, as ActiveMQ), priority 4, expires 0 = never.
        let c = parse(
            frame::Command::Send,
            &[("destination", "/topic/a.b"), ("expires", "0")],
        )
        .unwrap();
        let Command::Send {
            destination,
            message,
            transaction,
            ..
        } = c
        else {
            panic!("{c:?}")
        };
        assert_eq!(destination, DestinationKey::topic("a.b").unwrap());
        // A composite: the first destination and the others, each once.
        let c = parse(
            frame::Command::Send,
            &[("destination", "/queue/a,/topic/b,c,/queue/a")],
        )
        .unwrap();
        let Command::Send {
            destination: first,
            also,
            ..
        } = c
        else {
            panic!("{c:?}")
        };
        assert_eq!(first, DestinationKey::queue("a").unwrap());
        assert_eq!(
            also,
            [
                DestinationKey::topic("b").unwrap(),
                DestinationKey::topic("c").unwrap()
            ]
        );
        assert!(!message.persistent);
        assert_eq!(message.priority, 4);
        assert_eq!(message.expiration, Expiration::Never);
        assert_eq!(transaction, None);
    }

    #[test]
    fn send_refusals_keep_their_texts() {
        let send = |headers: &[(&str, &str)]| refusal(frame::Command::Send, headers, Version::V1_2);
        assert_eq!(send(&[]), "missing destination header");
        assert_eq!(send(&[("destination", "")]), "missing destination header");
        // Every kind of the table, each with its two forms.
        let no_kind = send(&[("destination", "jobs")]);
        assert!(
            no_kind.starts_with("invalid destination `jobs`: a destination names its kind: "),
            "{no_kind}"
        );
        for kind in DestinationKind::all() {
            let (name, prefix) = (kind.spec().name, kind.spec().stomp_prefix);
            let forms = format!("{name}://NAME or {prefix}NAME for a {name}");
            assert!(no_kind.contains(&forms), "{no_kind}");
        }
        assert!(no_kind.contains("queue://NAME or /queue/NAME for a queue"));
        assert!(no_kind.contains("topic://NAME or /topic/NAME for a topic"));
        // The API's form means the same on STOMP.
        for (text, key) in [
            ("queue://jobs", DestinationKey::queue("jobs").unwrap()),
            ("topic://orders", DestinationKey::topic("orders").unwrap()),
        ] {
            match parse(frame::Command::Send, &[("destination", text)]) {
                Ok(Command::Send { destination, .. }) => assert_eq!(destination, key),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert_eq!(
            send(&[("destination", "/queue/X.*")]),
            "invalid destination `/queue/X.*`: invalid destination `X.*`: wildcards `*` and `>` name patterns, not a destination"
        );
        assert_eq!(
            send(&[("destination", "/topic/")]),
            "invalid destination `/topic/`: invalid destination ``: empty"
        );
        let schemes: Vec<String> = DestinationKind::all()
            .map(|k| format!("{}://", k.spec().name))
            .collect();
        assert_eq!(
            send(&[("destination", "/topic/queue://x")]),
            format!(
                "invalid destination `/topic/queue://x`: invalid destination `queue://x`: give the plain name after {}, without another scheme or control characters",
                schemes.join(" or ")
            )
        );
        let long = format!("/queue/{}", "x".repeat(201));
        assert_eq!(
            send(&[("destination", &long)]),
            format!(
                "invalid destination `{long}`: invalid destination `{}`: longer than 200 bytes",
                "x".repeat(201)
            )
        );
        assert_eq!(
            send(&[("destination", "/topic/X"), ("priority", "12")]),
            "invalid priority `12`: 0 to 9"
        );
        assert_eq!(
            send(&[("destination", "/topic/X"), ("priority", "high")]),
            "invalid priority `high`: 0 to 9"
        );
        assert_eq!(
            send(&[("destination", "/topic/X"), ("expires", "soon")]),
            "invalid expires `soon`: epoch ms, 0 = never"
        );
        assert_eq!(
            send(&[("destination", "/topic/X"), ("expires", "-1")]),
            "invalid expires `-1`: epoch ms, 0 = never"
        );
    }

    #[test]
    fn subscribe_reads_id_ack_prefetch_and_durable_name() {
        let c = parse(
            frame::Command::Subscribe,
            &[
                ("destination", "/topic/t"),
                ("id", "s1"),
                ("ack", "client-individual"),
                ("activemq.prefetchSize", "10"),
                ("activemq.subscriptionName", "d"),
            ],
        )
        .unwrap();
        let Command::Subscribe {
            destination,
            id,
            ack,
            options,
        } = c
        else {
            panic!("{c:?}")
        };
        let SubscribeHeaders {
            prefetch,
            durable_name,
            ..
        } = *options;
        assert_eq!(
            destination,
            Target::One(DestinationKey::topic("t").unwrap())
        );
        assert_eq!(id, "s1");
        assert_eq!(ack, StompAck::ClientIndividual);
        assert_eq!(prefetch, Some(10));
        assert_eq!(durable_name.as_deref(), Some("d"));
        for (header, mode) in [
            (None, StompAck::Auto),
            (Some("auto"), StompAck::Auto),
            (Some("client"), StompAck::Client),
        ] {
            let mut headers = vec![("destination", "/queue/q"), ("id", "1")];
            headers.extend(header.map(|h| ("ack", h)));
            let (ack, options) = subscribe_parts(parse(frame::Command::Subscribe, &headers));
            assert_eq!((ack, options.prefetch), (mode, None));
        }
        // STOMP 1.0 lets the destination be the id.
        let c = Command::parse(
            &frame(frame::Command::Subscribe, &[("destination", "/queue/q")]),
            Version::V1_0,
        )
        .unwrap();
        let Command::Subscribe { id, .. } = c else {
            panic!("{c:?}")
        };
        assert_eq!(id, "/queue/q");
    }

    #[test]
    fn subscribe_refusals_keep_their_texts() {
        let sub =
            |headers: &[(&str, &str)]| refusal(frame::Command::Subscribe, headers, Version::V1_2);
        assert_eq!(sub(&[("id", "1")]), "missing destination header");
        assert_eq!(
            sub(&[("destination", "/topic/t")]),
            "SUBSCRIBE needs an id header"
        );
        assert_eq!(
            refusal(
                frame::Command::Subscribe,
                &[("destination", "/topic/t")],
                Version::V1_1
            ),
            "SUBSCRIBE needs an id header"
        );
        assert_eq!(
            sub(&[
                ("destination", "/topic/t"),
                ("id", "1"),
                ("ack", "sometimes")
            ]),
            "invalid ack mode `sometimes`: auto, client or client-individual"
        );
        for bad in ["0", "-1", "lots"] {
            assert_eq!(
                sub(&[
                    ("destination", "/topic/t"),
                    ("id", "1"),
                    ("activemq.prefetchSize", bad)
                ]),
                format!("invalid activemq.prefetchSize `{bad}`")
            );
        }
        assert_eq!(
            sub(&[
                ("destination", "/queue/q"),
                ("id", "1"),
                ("activemq.subscriptionName", "d")
            ]),
            "activemq.subscriptionName is for topics: a queue keeps its messages for any consumer"
        );
    }

    /// Every SUBSCRIBE header that changes what the consumer receives is honoured or
    /// refused, never ignored (cases SEL-10, STOMP-13): an unknown `activemq.*` option
    /// and other brokers' subscription headers get an ERROR naming the header.
    #[test]
    fn subscribe_headers_that_change_delivery_are_honoured_or_refused() {
        let sub = |extra: &[(&str, &str)]| {
            let mut headers = vec![("destination", "/queue/q"), ("id", "1")];
            headers.extend_from_slice(extra);
            Command::parse(&frame(frame::Command::Subscribe, &headers), Version::V1_2)
        };
        for (name, value) in [
            ("activemq.retroactive", "true"),
            ("activemq.priority", "9"),
            ("activemq.maximumPendingMessageLimit", "10"),
            ("activemq.somethingNew", "1"),
            ("durable", "true"),
            ("auto-delete", "false"),
            ("x-queue-name", "q"),
            ("prefetch-count", "10"),
            ("subscription-type", "ANYCAST"),
            ("persistent", "true"),
            ("transformation", "jms-map-json"),
            ("consumer-window-size", "0"),
            ("credit", "10"),
            ("from-seq", "0"),
        ] {
            let Err(Refusal { text, .. }) = sub(&[(name, value)]) else {
                panic!("{name}:{value} was not refused");
            };
            assert!(
                text.starts_with(&format!("SUBSCRIBE header `{name}:{value}` refused: ")),
                "{text}"
            );
        }
        // A boolean option at its default, and headers that change nothing delivered.
        for (name, value) in [
            ("activemq.exclusive", "false"),
            ("activemq.noLocal", "false"),
            ("activemq.dispatchAsync", "true"),
            ("content-type", "text/plain"),
            ("my-tag", "x"),
        ] {
            assert!(sub(&[(name, value)]).is_ok(), "{name}:{value} refused");
        }
        // ActiveMQ's old misspelling of the durable name is read too.
        let (_, options) = subscribe_parts(Command::parse(
            &frame(
                frame::Command::Subscribe,
                &[
                    ("destination", "/topic/t"),
                    ("id", "1"),
                    ("activemq.subcriptionName", "d"),
                ],
            ),
            Version::V1_2,
        ));
        assert_eq!(options.durable_name.as_deref(), Some("d"));
    }

    /// `browser:true` is for queues on STOMP 1.1+, without an ack mode (as ActiveMQ).
    #[test]
    fn browser_is_read_for_queues_and_refused_elsewhere() {
        let sub = |headers: &[(&str, &str)], version| {
            Command::parse(&frame(frame::Command::Subscribe, headers), version)
        };
        for (value, read) in [("true", true), ("false", false)] {
            let headers = [("destination", "/queue/q"), ("id", "1"), ("browser", value)];
            let (_, options) = subscribe_parts(sub(&headers, Version::V1_2));
            assert_eq!(options.browser, read, "browser:{value}");
        }
        let refused = |headers: &[(&str, &str)], version| match sub(headers, version) {
            Err(Refusal { text, .. }) => text,
            Ok(c) => panic!("{headers:?} parsed: {c:?}"),
        };
        assert_eq!(
            refused(
                &[
                    ("destination", "/topic/t"),
                    ("id", "1"),
                    ("browser", "true")
                ],
                Version::V1_2
            ),
            "browser:true is for queues: a topic keeps no messages to browse"
        );
        assert_eq!(
            refused(
                &[("destination", "/queue/q"), ("browser", "true")],
                Version::V1_0
            ),
            "browser:true needs STOMP 1.1 or 1.2 (as ActiveMQ)"
        );
        assert_eq!(
            refused(
                &[
                    ("destination", "/queue/q"),
                    ("id", "1"),
                    ("browser", "true"),
                    ("ack", "client")
                ],
                Version::V1_2
            ),
            "browser:true takes no ack mode: browsing acks nothing"
        );
        assert_eq!(
            refused(
                &[("destination", "/queue/q"), ("id", "1"), ("browser", "yes")],
                Version::V1_2
            ),
            "invalid browser `yes`: true or false"
        );
    }

    /// A STOMP 1.2 ACK or NACK names its message by `id`; `message-id` alone is
    /// refused there (ActiveMQ and RabbitMQ refuse it too) and taken on 1.0 and 1.1.
    #[test]
    fn a_1_2_ack_needs_its_id() {
        for command in [frame::Command::Ack, frame::Command::Nack] {
            let by_message_id = frame(command, &[("message-id", "m1"), ("subscription", "s")]);
            let Err(Refusal { text, .. }) = Command::parse(&by_message_id, Version::V1_2) else {
                panic!("{command:?} without id parsed on 1.2");
            };
            assert!(text.contains("needs an id header in STOMP 1.2"), "{text}");
            assert!(Command::parse(&by_message_id, Version::V1_1).is_ok());
            let by_id = frame(command, &[("id", "ebb-1-1")]);
            assert!(Command::parse(&by_id, Version::V1_2).is_ok());
        }
    }

    /// STOMP 1.0 has no NACK (case STOMP-11; ActiveMQ: "NACK received but connection
    /// is in v1.0 mode").
    #[test]
    fn nack_is_refused_on_stomp_1_0() {
        let nack = frame(frame::Command::Nack, &[("message-id", "m1")]);
        let Err(Refusal { text, .. }) = Command::parse(&nack, Version::V1_0) else {
            panic!("NACK on 1.0 parsed");
        };
        assert_eq!(
            text,
            "NACK does not exist in STOMP 1.0: connect with accept-version:1.1 or 1.2 to use it"
        );
        assert!(Command::parse(&nack, Version::V1_1).is_ok());
    }

    #[test]
    fn unsubscribe_ack_and_nack_name_what_they_end() {
        let c = parse(
            frame::Command::Unsubscribe,
            &[("id", "s1"), ("activemq.subscriptionName", "d")],
        )
        .unwrap();
        let Command::Unsubscribe {
            id, durable_name, ..
        } = c
        else {
            panic!("{c:?}")
        };
        assert_eq!((id.as_str(), durable_name.as_deref()), ("s1", Some("d")));
        // STOMP 1.0: the destination names the subscription.
        let Ok(Command::Unsubscribe {
            id, durable_name, ..
        }) = parse(frame::Command::Unsubscribe, &[("destination", "/topic/t")])
        else {
            panic!("no id from the destination")
        };
        assert_eq!((id.as_str(), durable_name), ("/topic/t", None));
        assert_eq!(
            refusal(frame::Command::Unsubscribe, &[], Version::V1_2),
            "UNSUBSCRIBE needs an id header"
        );

        let ack = Request::parse(
            &frame(frame::Command::Ack, &[("id", "ebb-1-4"), ("receipt", "a")]),
            Version::V1_2,
        );
        assert!(ack.frees_space());
        let Ok(Command::Ack { ack, transaction }) = ack.command else {
            panic!("{:?}", ack.command)
        };
        assert_eq!(
            ack,
            AckRef {
                id: Some("ebb-1-4".into()),
                ..AckRef::default()
            }
        );
        assert_eq!(transaction, None);
        let nack = Request::parse(
            &frame(
                frame::Command::Nack,
                &[
                    ("message-id", "m"),
                    ("subscription", "s"),
                    ("transaction", "t"),
                ],
            ),
            Version::V1_1,
        );
        // Inside a transaction it keeps its place behind held frames.
        assert!(!nack.frees_space());
        let Ok(Command::Nack { ack, transaction }) = nack.command else {
            panic!("{:?}", nack.command)
        };
        assert_eq!(
            ack,
            AckRef {
                id: None,
                message_id: Some("m".into()),
                subscription: Some("s".into()),
            }
        );
        assert_eq!(transaction.as_deref(), Some("t"));
        // An empty transaction header is kept: the session says it names no transaction.
        let Ok(Command::Ack { transaction, .. }) =
            parse(frame::Command::Ack, &[("id", "x"), ("transaction", "")])
        else {
            panic!("ACK refused")
        };
        assert_eq!(transaction.as_deref(), Some(""));
    }

    #[test]
    fn transactions_need_a_name() {
        for (command, text) in [
            (frame::Command::Begin, "BEGIN needs a transaction header"),
            (frame::Command::Commit, "COMMIT needs a transaction header"),
            (frame::Command::Abort, "ABORT needs a transaction header"),
        ] {
            assert_eq!(refusal(command, &[], Version::V1_2), text);
            assert_eq!(
                refusal(command, &[("transaction", "")], Version::V1_2),
                text
            );
        }
        let Ok(Command::Begin { transaction }) =
            parse(frame::Command::Begin, &[("transaction", "t1")])
        else {
            panic!("BEGIN refused")
        };
        assert_eq!(transaction, "t1");
        assert!(matches!(
            parse(frame::Command::Commit, &[("transaction", "t1")]),
            Ok(Command::Commit { transaction }) if transaction == "t1"
        ));
        assert!(matches!(
            parse(frame::Command::Abort, &[("transaction", "t1")]),
            Ok(Command::Abort { transaction }) if transaction == "t1"
        ));
        assert!(matches!(
            parse(frame::Command::Disconnect, &[("receipt", "bye")]),
            Ok(Command::Disconnect)
        ));
    }

    #[test]
    fn a_wildcard_subscribe_names_a_pattern() {
        let c = parse(
            frame::Command::Subscribe,
            &[
                ("destination", "/queue/jobs.*"),
                ("id", "1"),
                ("activemq.exclusive", "true"),
            ],
        )
        .unwrap();
        let Command::Subscribe {
            destination,
            options,
            ..
        } = c
        else {
            panic!("{c:?}")
        };
        let pattern = DestinationPattern::subscription("queue://jobs.*")
            .unwrap()
            .unwrap();
        assert_eq!(destination, Target::Pattern(pattern));
        assert!(options.exclusive, "a queue pattern takes queue options");
        let v12 = Version::V1_2;
        let sub = frame::Command::Subscribe;
        let cases: [(&[(&str, &str)], &str); 4] = [
            (
                &[("destination", "/queue/jobs.*"), ("id", "1"), ("browser", "true")],
                "browser:true browses one queue, not a wildcard destination",
            ),
            (
                &[("destination", "/queue/jobs.>"), ("id", "1"), ("activemq.subscriptionName", "d")],
                "activemq.subscriptionName is for topics: a queue keeps its messages for any consumer",
            ),
            (
                &[("destination", "/topic/a.>.b"), ("id", "1")],
                "invalid destination `/topic/a.>.b`: `>` may only be the last segment of a pattern",
            ),
            (
                &[("destination", "/topic/a.*"), ("id", "1"), ("activemq.exclusive", "true")],
                "activemq.exclusive is for queues: every topic subscription gets every message",
            ),
        ];
        for (headers, text) in cases {
            assert_eq!(refusal(sub, headers, v12), text);
        }
    }

    #[test]
    fn connect_and_server_frame_refusals_keep_their_texts() {
        assert_eq!(
            refusal(
                frame::Command::Connect,
                &[("accept-version", "2.0")],
                Version::V1_0
            ),
            "no supported protocol version in accept-version (this server speaks 1.0, 1.1, 1.2)"
        );
        for bad in ["10", "a,b", "1,", "-1,0"] {
            assert_eq!(
                refusal(
                    frame::Command::Connect,
                    &[("accept-version", "1.2"), ("heart-beat", bad)],
                    Version::V1_0
                ),
                format!("invalid heart-beat `{bad}`")
            );
        }
        for server in [
            frame::Command::Connected,
            frame::Command::Message,
            frame::Command::Receipt,
            frame::Command::Error,
        ] {
            assert_eq!(
                refusal(server, &[], Version::V1_2),
                format!("{} is a server frame", server.as_str())
            );
        }
    }
}
