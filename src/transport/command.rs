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

use crate::broker::Message;
use crate::stomp::frame::{self, Frame, Version};
use crate::{DestinationKey, DestinationKind};

/// Why a frame is refused: the text of the ERROR frame's `message` header. The
/// connection is closed after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// A refusal with `text`, as an `Err`.
pub fn refuse<T>(text: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(text.into()))
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
    /// Body bytes of the frame (what it holds in memory while it waits behind a SEND).
    pub body_bytes: usize,
}

impl Request {
    /// Parses `frame` for a connection that negotiated `version` (1.0 before CONNECT).
    pub fn parse(frame: &Frame, version: Version) -> Self {
        Self {
            kind: frame.command,
            receipt: frame.get("receipt").map(str::to_string),
            command: Command::parse(frame, version),
            body_bytes: frame.body.len(),
        }
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

/// What an ACK or NACK names: STOMP 1.2's `id` (the MESSAGE's `ack` header), or 1.0
/// and 1.1's `message-id` with an optional `subscription`. The session resolves it
/// against the messages waiting for an ack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckRef {
    pub id: Option<String>,
    pub message_id: Option<String>,
    pub subscription: Option<String>,
}

/// A client frame's meaning.
#[derive(Debug)]
pub enum Command {
    /// CONNECT or STOMP.
    Connect {
        /// The highest version both sides speak (`accept-version`; none: 1.0).
        version: Version,
        login: Option<String>,
        passcode: Option<String>,
        /// `heart-beat`: (client sends every ms, client wants every ms); 0 = none.
        heart_beat: (u64, u64),
        /// `client-id` (not empty): names the client's durable subscriptions.
        client_id: Option<String>,
        /// `request-id`, echoed as CONNECTED's `response-id`.
        request_id: Option<String>,
    },
    Send {
        destination: DestinationKey,
        /// Body, user headers, and `persistent`, `priority`, `expires` as ActiveMQ
        /// reads them.
        message: Message,
        /// The `transaction` header as given (an empty one names no open transaction).
        transaction: Option<String>,
    },
    Subscribe {
        destination: DestinationKey,
        /// `id`; on STOMP 1.0 the destination when there is none.
        id: String,
        ack: StompAck,
        /// `activemq.prefetchSize` (at least 1).
        prefetch: Option<u32>,
        /// `activemq.subscriptionName` (topics only): a durable subscription.
        durable_name: Option<String>,
    },
    Unsubscribe {
        /// `id`, or the destination (STOMP 1.0).
        id: String,
        /// `activemq.subscriptionName`: also delete the durable subscription.
        durable_name: Option<String>,
    },
    Ack {
        ack: AckRef,
        transaction: Option<String>,
    },
    Nack {
        ack: AckRef,
        transaction: Option<String>,
    },
    Begin {
        transaction: String,
    },
    Commit {
        transaction: String,
    },
    Abort {
        transaction: String,
    },
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
                    return refuse("no supported protocol version in accept-version (this server speaks 1.0, 1.1, 1.2)");
                };
                let heart_beat = match frame.get("heart-beat") {
                    None => (0, 0),
                    Some(hb) => parse_heartbeat(hb)
                        .ok_or_else(|| Refusal(format!("invalid heart-beat `{hb}`")))?,
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
            C::Send => Command::Send {
                destination: destination_of(frame.get("destination"))?,
                message: message_of(frame)?,
                transaction: header("transaction"),
            },
            C::Subscribe => subscribe_of(frame, version)?,
            C::Unsubscribe => Command::Unsubscribe {
                id: frame
                    .get("id")
                    .or_else(|| frame.get("destination"))
                    .ok_or_else(|| Refusal("UNSUBSCRIBE needs an id header".into()))?
                    .to_string(),
                durable_name: header("activemq.subscriptionName"),
            },
            C::Ack => Command::Ack {
                ack: ack_ref_of(frame),
                transaction: header("transaction"),
            },
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
                return refuse(format!("{} is a server frame", server.as_str()))
            }
        })
    }
}

fn subscribe_of(frame: &Frame, version: Version) -> Result<Command, Refusal> {
    let destination = destination_of(frame.get("destination"))?;
    let id = match (frame.get("id"), version) {
        (Some(id), _) => id.to_string(),
        (None, Version::V1_0) => frame.get("destination").unwrap_or_default().to_string(),
        (None, _) => return refuse("SUBSCRIBE needs an id header"),
    };
    let ack = match frame.get("ack").unwrap_or("auto") {
        "auto" => StompAck::Auto,
        "client" => StompAck::Client,
        "client-individual" => StompAck::ClientIndividual,
        other => {
            return refuse(format!(
                "invalid ack mode `{other}`: auto, client or client-individual"
            ))
        }
    };
    let prefetch = match frame.get("activemq.prefetchSize") {
        None => None,
        Some(p) => Some(
            p.parse::<u32>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| Refusal(format!("invalid activemq.prefetchSize `{p}`")))?,
        ),
    };
    let durable_name = frame.get("activemq.subscriptionName").map(str::to_string);
    if durable_name.is_some() && destination.is_queue() {
        return refuse(
            "activemq.subscriptionName is for topics: a queue keeps its messages for any consumer",
        );
    }
    Ok(Command::Subscribe {
        destination,
        id,
        ack,
        prefetch,
        durable_name,
    })
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
        _ => refuse(format!(
            "{} needs a transaction header",
            frame.command.as_str()
        )),
    }
}

/// `/topic/NAME` or `/queue/NAME` (ActiveMQ's STOMP destinations) as a key.
fn destination_of(destination: Option<&str>) -> Result<DestinationKey, Refusal> {
    let Some(destination) = destination.filter(|d| !d.is_empty()) else {
        return refuse("missing destination header");
    };
    DestinationKey::from_stomp(destination).map_err(|e| {
        // A refused name is worded as it always was: the destination, then the plain
        // name with the reason ("invalid destination `/queue/a.*`: invalid destination
        // `a.*`: wildcards ..."). A destination of neither kind has the key's own text
        // ("invalid destination `jobs`: use /queue/NAME or /topic/NAME").
        let name = [DestinationKind::Topic, DestinationKind::Queue]
            .into_iter()
            .find_map(|kind| destination.strip_prefix(format!("/{kind}/").as_str()));
        match name {
            Some(name) => Refusal(format!(
                "invalid destination `{destination}`: invalid destination `{name}`: {}",
                e.reason
            )),
            None => Refusal(e.to_string()),
        }
    })
}

/// The message a SEND frame carries, with ActiveMQ's header conventions.
fn message_of(frame: &Frame) -> Result<Message, Refusal> {
    let mut message = Message::new(frame.body.clone());
    // STOMP's default, as ActiveMQ: non-persistent unless persistent:true.
    message.persistent = frame.get("persistent") == Some("true");
    if let Some(p) = frame.get("priority") {
        message.priority = p
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= 9)
            .ok_or_else(|| Refusal(format!("invalid priority `{p}`: 0 to 9")))?;
    }
    if let Some(e) = frame.get("expires") {
        let at = e
            .parse::<i64>()
            .ok()
            .filter(|at| *at >= 0)
            .ok_or_else(|| Refusal(format!("invalid expires `{e}`: epoch ms, 0 = never")))?;
        if at > 0 {
            message = message.expires_at(at);
        }
    }
    message.headers = frame
        .headers
        .iter()
        .filter(|(name, _)| !RESERVED.contains(&name.as_str()))
        .cloned()
        .collect();
    Ok(message)
}

/// `x,y` (ms) as STOMP's `heart-beat` header gives them.
fn parse_heartbeat(value: &str) -> Option<(u64, u64)> {
    let (x, y) = value.split_once(',')?;
    Some((x.trim().parse().ok()?, y.trim().parse().ok()?))
}
