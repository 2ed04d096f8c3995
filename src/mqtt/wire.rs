//! MQTT's packets as the session sees them, in one form for 3.1.1 and 5.0, over
//! [`rmqtt_codec`] (the packet codec of the rmqtt broker: both versions, version
//! detection from CONNECT, a maximum packet size). [`Wire`] decodes what a client
//! sends into [`In`] and encodes [`Out`] in the version the client connected with,
//! so the session's logic is written once; what only 5.0 carries (properties,
//! reason codes) is dropped on a 3.1.1 connection, where the spec has no place for it.

use std::num::NonZeroU16;

use bytes::{Bytes, BytesMut};
use bytestring::ByteString;
use rmqtt_codec::types::QoS;
use rmqtt_codec::{v3, v5, MqttCodec, MqttPacket};
use tokio_util::codec::{Decoder, Encoder};

/// The protocol level a client connected with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// MQTT 3.1 or 3.1.1 (protocol levels 3 and 4).
    V3,
    /// MQTT 5.0 (protocol level 5).
    V5,
}

/// A last will: published by the broker when the connection ends without a
/// DISCONNECT (or with 5.0's reason 0x04).
#[derive(Debug, Clone)]
pub struct Will {
    /// Its topic name, as the client gave it.
    pub topic: String,
    /// Its payload.
    pub payload: Bytes,
    /// Its QoS (0, 1 or 2).
    pub qos: u8,
    /// The retain flag.
    pub retain: bool,
    /// 5.0's will delay, seconds (0: at once).
    pub delay_secs: u32,
    /// 5.0's properties of the will message.
    pub properties: Properties,
}

/// What CONNECT asks for, in both versions' terms.
#[derive(Debug, Clone)]
pub struct Connect {
    /// The client's protocol level.
    pub version: Version,
    /// 3.1.1's clean session, 5.0's clean start: any stored session is discarded.
    pub clean_start: bool,
    /// Seconds of silence the client promises not to exceed (0: none).
    pub keep_alive: u16,
    /// 5.0's session expiry interval, seconds; for 3.1.1, 0 with clean session and
    /// `u32::MAX` (never) without it.
    pub session_expiry: u32,
    /// The client id (may be empty: the broker assigns one).
    pub client_id: String,
    /// User name and password.
    pub username: Option<String>,
    /// The password's bytes.
    pub password: Option<Bytes>,
    /// The will, if any.
    pub will: Option<Will>,
    /// 5.0's receive maximum: QoS 1 and 2 deliveries the client takes unacknowledged.
    pub receive_max: Option<u16>,
    /// 5.0's maximum packet size the client accepts, bytes.
    pub max_packet_size: Option<u32>,
    /// 5.0's topic alias maximum the client accepts (the broker sends no aliases).
    pub auth_method: Option<String>,
}

/// 5.0's PUBLISH properties that Ebb keeps (each maps to a header: see the module
/// docs of [`super`]).
#[derive(Debug, Clone, Default)]
pub struct Properties {
    /// Message expiry interval, seconds.
    pub message_expiry_secs: Option<u32>,
    /// Content type.
    pub content_type: Option<String>,
    /// Response topic.
    pub response_topic: Option<String>,
    /// Correlation data.
    pub correlation_data: Option<Bytes>,
    /// User properties, in order.
    pub user_properties: Vec<(String, String)>,
    /// Payload format indicator: true when the payload is UTF-8.
    pub utf8_payload: bool,
    /// Topic alias.
    pub topic_alias: Option<u16>,
}

/// A PUBLISH.
#[derive(Debug, Clone)]
pub struct Publish {
    /// Its topic name (empty in 5.0 when a topic alias stands for it).
    pub topic: String,
    /// QoS 0, 1 or 2.
    pub qos: u8,
    /// The retain flag.
    pub retain: bool,
    /// The DUP flag: a resend.
    pub dup: bool,
    /// Its packet id (QoS 1 and 2).
    pub packet_id: Option<u16>,
    /// Its payload.
    pub payload: Bytes,
    /// 5.0's properties.
    pub properties: Properties,
}

/// Bytes of a variable byte integer of value `n` (MQTT's remaining length and
/// property length).
fn varint_size(n: usize) -> usize {
    match n {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// Bytes of a UTF-8 string or binary data of `n` bytes: its two-byte length first.
fn prefixed(n: usize) -> usize {
    2 + n
}

impl Properties {
    /// Their size in a 5.0 PUBLISH as [`Wire`] encodes them, bytes: the property
    /// length, then each property's identifier byte and value (no topic alias: the
    /// broker sends none).
    pub fn encoded_size(&self) -> usize {
        let mut n = 0;
        if let Some(data) = &self.correlation_data {
            n += 1 + prefixed(data.len());
        }
        if self.message_expiry_secs.is_some_and(|s| s != 0) {
            n += 1 + 4;
        }
        if let Some(text) = &self.content_type {
            n += 1 + prefixed(text.len());
        }
        if self.utf8_payload {
            n += 1 + 1;
        }
        if let Some(text) = &self.response_topic {
            n += 1 + prefixed(text.len());
        }
        for (name, value) in &self.user_properties {
            n += 1 + prefixed(name.len()) + prefixed(value.len());
        }
        varint_size(n) + n
    }
}

impl Publish {
    /// Its size on the wire as [`Wire`] encodes it for a client of `version`, bytes:
    /// the fixed header (its first byte and the remaining length, 1 to 4 bytes), the
    /// topic, the packet id at QoS 1 and 2 (given or not yet), 5.0's properties, the
    /// payload. What 5.0's maximum packet size of the client is compared with.
    pub fn encoded_size(&self, version: Version) -> usize {
        let mut remaining = prefixed(self.topic.len()) + self.payload.len();
        if self.qos > 0 {
            remaining += 2;
        }
        if version == Version::V5 {
            remaining += self.properties.encoded_size();
        }
        1 + varint_size(remaining) + remaining
    }
}

/// One filter of a SUBSCRIBE.
#[derive(Debug, Clone)]
pub struct Filter {
    /// The topic filter, as the client gave it.
    pub filter: String,
    /// The QoS asked for.
    pub qos: u8,
    /// 5.0's no local: not the messages this connection publishes.
    pub no_local: bool,
    /// 5.0's retain as published: deliveries keep the retain flag they were
    /// published with (3.1.1: false, the flag is cleared).
    pub retain_as_published: bool,
    /// 5.0's retain handling: 0 sends the retained messages at SUBSCRIBE, 1 only for
    /// a new subscription, 2 never (3.1.1: 0).
    pub retain_handling: u8,
}

/// A packet from the client.
#[derive(Debug)]
pub enum In {
    /// CONNECT.
    Connect(Box<Connect>),
    /// PUBLISH.
    Publish(Box<Publish>),
    /// PUBACK (QoS 1 delivery acknowledged).
    PubAck(u16),
    /// PUBREC (QoS 2 delivery received).
    PubRec(u16),
    /// PUBREL (QoS 2 publish released).
    PubRel(u16),
    /// PUBCOMP (QoS 2 delivery complete).
    PubComp(u16),
    /// SUBSCRIBE.
    Subscribe {
        /// Its packet id.
        packet_id: u16,
        /// Its filters.
        filters: Vec<Filter>,
    },
    /// UNSUBSCRIBE.
    Unsubscribe {
        /// Its packet id.
        packet_id: u16,
        /// Its filters.
        filters: Vec<String>,
    },
    /// PINGREQ.
    Ping,
    /// DISCONNECT: 5.0's reason code (0 for 3.1.1) and new session expiry.
    Disconnect {
        /// 0: normal; 4: publish the will.
        reason: u8,
        /// 5.0: the session expiry interval from now on.
        session_expiry: Option<u32>,
    },
    /// A packet the broker does not take (5.0's AUTH; a packet only a server sends).
    Unexpected(&'static str),
    /// A 5.0 SUBSCRIBE with a subscription identifier, which CONNACK says the broker
    /// does not offer (refused with DISCONNECT 0xA1, never ignored).
    SubscriptionIdentifier,
}

/// A packet to the client. Reason codes are 5.0's; a 3.1.1 connection gets what its
/// version can say (CONNACK's return codes, SUBACK's 0x80).
#[derive(Debug)]
pub enum Out {
    /// CONNACK.
    ConnAck(Box<ConnAck>),
    /// PUBLISH (a delivery).
    Publish(Box<Publish>),
    /// PUBACK with a reason code.
    PubAck(u16, u8),
    /// PUBREC with a reason code.
    PubRec(u16, u8),
    /// PUBREL.
    PubRel(u16),
    /// PUBCOMP.
    PubComp(u16),
    /// SUBACK: a granted QoS or a failure reason per filter.
    SubAck(u16, Vec<u8>),
    /// UNSUBACK: a reason per filter.
    UnsubAck(u16, Vec<u8>),
    /// PINGRESP.
    Pong,
    /// 5.0's DISCONNECT from the server, with a reason code and text (3.1.1 has none:
    /// the connection is closed).
    Disconnect(u8, String),
}

/// CONNACK's fields.
#[derive(Debug, Default)]
pub struct ConnAck {
    /// A stored session goes on.
    pub session_present: bool,
    /// 5.0's reason code (0: success); mapped to 3.1.1's return codes.
    pub reason: u8,
    /// Why, when refused (5.0's reason string).
    pub reason_string: Option<String>,
    /// The client id the broker gave a client that sent none (5.0).
    pub assigned_client_id: Option<String>,
    /// Receive maximum of the broker: QoS 1 and 2 publishes it takes unacknowledged.
    pub receive_max: u16,
    /// Largest packet the broker takes, bytes; 0 sends none (a refusal's CONNACK:
    /// 5.0 forbids a maximum packet size of 0).
    pub max_packet_size: u32,
    /// Topic aliases the client may use.
    pub topic_alias_max: u16,
    /// Whether retained messages are available.
    pub retain_available: bool,
    /// Whether `$share/` subscriptions are available.
    pub shared_available: bool,
}

/// 5.0 reason codes Ebb sends, by their spec names.
pub mod reason {
    /// Success; granted QoS 0; normal disconnection.
    pub const SUCCESS: u8 = 0x00;
    /// Granted QoS 1.
    pub const GRANTED_QOS_1: u8 = 0x01;
    /// Granted QoS 2.
    pub const GRANTED_QOS_2: u8 = 0x02;
    /// No subscription existed (UNSUBACK).
    pub const NO_SUBSCRIPTION_EXISTED: u8 = 0x11;
    /// Unspecified error.
    pub const UNSPECIFIED_ERROR: u8 = 0x80;
    /// Malformed packet.
    pub const MALFORMED_PACKET: u8 = 0x81;
    /// Protocol error.
    pub const PROTOCOL_ERROR: u8 = 0x82;
    /// Implementation specific error.
    pub const IMPLEMENTATION_SPECIFIC: u8 = 0x83;
    /// Unsupported protocol version.
    pub const UNSUPPORTED_PROTOCOL_VERSION: u8 = 0x84;
    /// Client identifier not valid.
    pub const CLIENT_ID_NOT_VALID: u8 = 0x85;
    /// Bad user name or password.
    pub const BAD_USER_NAME_OR_PASSWORD: u8 = 0x86;
    /// Not authorized.
    pub const NOT_AUTHORIZED: u8 = 0x87;
    /// Server unavailable.
    pub const SERVER_UNAVAILABLE: u8 = 0x88;
    /// Server shutting down.
    pub const SERVER_SHUTTING_DOWN: u8 = 0x8B;
    /// Bad authentication method.
    pub const BAD_AUTHENTICATION_METHOD: u8 = 0x8C;
    /// Keep alive timeout.
    pub const KEEP_ALIVE_TIMEOUT: u8 = 0x8D;
    /// Session taken over.
    pub const SESSION_TAKEN_OVER: u8 = 0x8E;
    /// Topic filter invalid.
    pub const TOPIC_FILTER_INVALID: u8 = 0x8F;
    /// Topic name invalid.
    pub const TOPIC_NAME_INVALID: u8 = 0x90;
    /// Packet identifier in use.
    pub const PACKET_ID_IN_USE: u8 = 0x91;
    /// Packet identifier not found.
    pub const PACKET_ID_NOT_FOUND: u8 = 0x92;
    /// Receive maximum exceeded.
    pub const RECEIVE_MAXIMUM_EXCEEDED: u8 = 0x93;
    /// Topic alias invalid.
    pub const TOPIC_ALIAS_INVALID: u8 = 0x94;
    /// Packet too large.
    pub const PACKET_TOO_LARGE: u8 = 0x95;
    /// Quota exceeded.
    pub const QUOTA_EXCEEDED: u8 = 0x97;
    /// Administrative action.
    pub const ADMINISTRATIVE_ACTION: u8 = 0x98;
    /// Payload format invalid.
    pub const PAYLOAD_FORMAT_INVALID: u8 = 0x99;
    /// Retain not supported.
    pub const RETAIN_NOT_SUPPORTED: u8 = 0x9A;
    /// Shared subscriptions not supported.
    pub const SHARED_SUBSCRIPTIONS_NOT_SUPPORTED: u8 = 0x9E;
    /// A SUBSCRIBE named a subscription identifier, which the broker does not offer.
    pub const SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED: u8 = 0xA1;
}

/// Why bytes from the client are no packet.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The bytes are not an MQTT packet (or not one a client sends first).
    #[error("malformed packet: {0}")]
    Malformed(String),
    /// The packet is larger than the broker takes.
    #[error("packet of {size} bytes is larger than max_packet_size ({max} bytes)")]
    TooLarge {
        /// Its remaining length, bytes.
        size: u32,
        /// The limit, bytes.
        max: u32,
    },
    /// CONNECT names a protocol level the broker does not speak.
    #[error("unsupported protocol version")]
    UnsupportedVersion,
    /// A 5.0 PUBLISH with topic alias 0, which 5.0 does not allow (3.3.2.3.4; the
    /// session answers DISCONNECT 0x94, topic alias invalid, as for an alias over the
    /// maximum).
    #[error("topic alias 0 is not valid: aliases are numbered from 1")]
    TopicAliasZero,
    /// The socket failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The codec of one connection: version detection on the first packet (CONNECT),
/// then that version's packets, each at most `max_packet_size` bytes.
#[derive(Debug)]
pub struct Wire {
    codec: MqttCodec,
    max_packet_size: u32,
    version: Option<Version>,
    /// The encoder of the client's version (3.1.1's until CONNECT is read).
    out: MqttCodec,
    /// The CONNECT has an empty client id without clean start: the codec refuses
    /// that, so [`Wire::look`] set the flag for it, and the CONNECT read says it was
    /// not set (the session answers as the version says).
    unclean_empty_id: bool,
}

impl Wire {
    /// A codec that reads a CONNECT of at most `max_packet_size` bytes first.
    pub fn new(max_packet_size: u32) -> Self {
        Wire {
            codec: MqttCodec::Version(rmqtt_codec::version::VersionCodec),
            max_packet_size,
            version: None,
            out: MqttCodec::V3(v3::Codec::new(0)),
            unclean_empty_id: false,
        }
    }

    /// The version the client connected with, once its CONNECT is read.
    pub fn version(&self) -> Option<Version> {
        self.version
    }

    /// Packets larger than `max` bytes are refused from now on.
    pub fn set_max_packet_size(&mut self, max: u32) {
        self.max_packet_size = max;
        match &mut self.codec {
            MqttCodec::V3(c) => c.set_max_size(max),
            MqttCodec::V5(c) => c.set_max_inbound_size(max),
            MqttCodec::Version(_) => {}
        }
    }
}

fn malformed(e: rmqtt_codec::error::DecodeError) -> WireError {
    use rmqtt_codec::error::DecodeError as D;
    match e {
        D::MaxSizeExceeded { size, max } => WireError::TooLarge { size, max },
        D::InvalidProtocol | D::UnsupportedProtocolLevel => WireError::UnsupportedVersion,
        D::Io(e) => WireError::Io(std::io::Error::other(e.to_string())),
        other => WireError::Malformed(other.to_string()),
    }
}

fn qos_u8(q: QoS) -> u8 {
    match q {
        QoS::AtMostOnce => 0,
        QoS::AtLeastOnce => 1,
        QoS::ExactlyOnce => 2,
    }
}

fn qos_of(q: u8) -> QoS {
    match q {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    }
}

fn text(b: &ByteString) -> String {
    b.to_string()
}

/// 5.0's user properties as (name, value) text pairs, in order.
fn pairs(properties: &v5::UserProperties) -> Vec<(String, String)> {
    properties.iter().map(|(k, v)| (text(k), text(v))).collect()
}

fn pid(p: NonZeroU16) -> u16 {
    p.get()
}

/// A packet id to write: 0 never is one (the session allocates from 1).
fn nz(p: u16) -> NonZeroU16 {
    NonZeroU16::new(p).unwrap_or(NonZeroU16::MIN)
}

fn properties_in(p: Option<v5::PublishProperties>) -> Properties {
    let Some(p) = p else {
        return Properties::default();
    };
    Properties {
        message_expiry_secs: p.message_expiry_interval.map(|n| n.get()),
        content_type: p.content_type.as_ref().map(text),
        response_topic: p.response_topic.as_ref().map(text),
        correlation_data: p.correlation_data,
        user_properties: pairs(&p.user_properties),
        utf8_payload: p.is_utf8_payload,
        topic_alias: p.topic_alias.map(|n| n.get()),
    }
}

fn properties_out(p: &Properties) -> v5::PublishProperties {
    v5::PublishProperties {
        topic_alias: None,
        correlation_data: p.correlation_data.clone(),
        message_expiry_interval: p.message_expiry_secs.and_then(std::num::NonZeroU32::new),
        content_type: p.content_type.as_deref().map(ByteString::from),
        user_properties: p
            .user_properties
            .iter()
            .map(|(k, v)| (ByteString::from(k.as_str()), ByteString::from(v.as_str())))
            .collect(),
        is_utf8_payload: p.utf8_payload,
        response_topic: p.response_topic.as_deref().map(ByteString::from),
        subscription_ids: Vec::new(),
    }
}

fn publish_in(p: rmqtt_codec::types::Publish) -> Publish {
    Publish {
        topic: text(&p.topic),
        qos: qos_u8(p.qos),
        retain: p.retain,
        dup: p.dup,
        packet_id: p.packet_id.map(pid),
        payload: p.payload,
        properties: properties_in(p.properties),
    }
}

fn publish_out(p: &Publish, version: Version) -> rmqtt_codec::types::Publish {
    rmqtt_codec::types::Publish {
        dup: p.dup,
        retain: p.retain,
        qos: qos_of(p.qos),
        topic: ByteString::from(p.topic.as_str()),
        packet_id: p.packet_id.map(nz),
        payload: p.payload.clone(),
        properties: (version == Version::V5).then(|| properties_out(&p.properties)),
    }
}

fn v3_in(packet: v3::Packet) -> In {
    match packet {
        v3::Packet::Connect(c) => {
            let c = *c;
            In::Connect(Box::new(Connect {
                version: Version::V3,
                clean_start: c.clean_session,
                keep_alive: c.keep_alive,
                session_expiry: if c.clean_session { 0 } else { u32::MAX },
                client_id: text(&c.client_id),
                username: c.username.as_ref().map(text),
                password: c.password,
                will: c.last_will.map(|w| Will {
                    topic: text(&w.topic),
                    payload: w.message,
                    qos: qos_u8(w.qos),
                    retain: w.retain,
                    delay_secs: 0,
                    properties: Properties::default(),
                }),
                receive_max: None,
                max_packet_size: None,
                auth_method: None,
            }))
        }
        v3::Packet::Publish(p) => In::Publish(Box::new(publish_in(*p))),
        v3::Packet::PublishAck { packet_id } => In::PubAck(pid(packet_id)),
        v3::Packet::PublishReceived { packet_id } => In::PubRec(pid(packet_id)),
        v3::Packet::PublishRelease { packet_id } => In::PubRel(pid(packet_id)),
        v3::Packet::PublishComplete { packet_id } => In::PubComp(pid(packet_id)),
        v3::Packet::Subscribe {
            packet_id,
            topic_filters,
        } => In::Subscribe {
            packet_id: pid(packet_id),
            filters: topic_filters
                .iter()
                .map(|(f, q)| Filter {
                    filter: text(f),
                    qos: qos_u8(*q),
                    no_local: false,
                    retain_as_published: false,
                    retain_handling: 0,
                })
                .collect(),
        },
        v3::Packet::Unsubscribe {
            packet_id,
            topic_filters,
        } => In::Unsubscribe {
            packet_id: pid(packet_id),
            filters: topic_filters.iter().map(text).collect(),
        },
        v3::Packet::PingRequest => In::Ping,
        v3::Packet::Disconnect => In::Disconnect {
            reason: 0,
            session_expiry: None,
        },
        v3::Packet::ConnectAck(_) => In::Unexpected("CONNACK"),
        v3::Packet::SubscribeAck { .. } => In::Unexpected("SUBACK"),
        v3::Packet::UnsubscribeAck { .. } => In::Unexpected("UNSUBACK"),
        v3::Packet::PingResponse => In::Unexpected("PINGRESP"),
    }
}

fn v5_in(packet: v5::Packet) -> In {
    match packet {
        v5::Packet::Connect(c) => {
            let c = *c;
            In::Connect(Box::new(Connect {
                version: Version::V5,
                clean_start: c.clean_start,
                keep_alive: c.keep_alive,
                session_expiry: c.session_expiry_interval_secs,
                client_id: text(&c.client_id),
                username: c.username.as_ref().map(text),
                password: c.password,
                will: c.last_will.map(|w| Will {
                    topic: text(&w.topic),
                    payload: w.message,
                    qos: qos_u8(w.qos),
                    retain: w.retain,
                    delay_secs: w.will_delay_interval_sec.unwrap_or(0),
                    properties: Properties {
                        message_expiry_secs: w.message_expiry_interval.map(|n| n.get()),
                        content_type: w.content_type.as_ref().map(text),
                        response_topic: w.response_topic.as_ref().map(text),
                        correlation_data: w.correlation_data,
                        user_properties: pairs(&w.user_properties),
                        utf8_payload: w.is_utf8_payload.unwrap_or(false),
                        topic_alias: None,
                    },
                }),
                receive_max: c.receive_max.map(|n| n.get()),
                max_packet_size: c.max_packet_size.map(|n| n.get()),
                auth_method: c.auth_method.as_ref().map(text),
            }))
        }
        v5::Packet::Publish(p) => In::Publish(Box::new(publish_in(*p))),
        v5::Packet::PublishAck(a) => In::PubAck(pid(a.packet_id)),
        v5::Packet::PublishReceived(a) => In::PubRec(pid(a.packet_id)),
        v5::Packet::PublishRelease(a) => In::PubRel(pid(a.packet_id)),
        v5::Packet::PublishComplete(a) => In::PubComp(pid(a.packet_id)),
        v5::Packet::Subscribe(s) if s.id.is_some() => In::SubscriptionIdentifier,
        v5::Packet::Subscribe(s) => In::Subscribe {
            packet_id: pid(s.packet_id),
            filters: s
                .topic_filters
                .iter()
                .map(|(f, o)| Filter {
                    filter: text(f),
                    qos: qos_u8(o.qos),
                    no_local: o.no_local,
                    retain_as_published: o.retain_as_published,
                    retain_handling: u8::from(o.retain_handling),
                })
                .collect(),
        },
        v5::Packet::Unsubscribe(u) => In::Unsubscribe {
            packet_id: pid(u.packet_id),
            filters: u.topic_filters.iter().map(text).collect(),
        },
        v5::Packet::PingRequest => In::Ping,
        v5::Packet::Disconnect(d) => In::Disconnect {
            reason: u8::from(d.reason_code),
            session_expiry: d.session_expiry_interval_secs,
        },
        v5::Packet::Auth(_) => In::Unexpected("AUTH"),
        v5::Packet::ConnectAck(_) => In::Unexpected("CONNACK"),
        v5::Packet::SubscribeAck(_) => In::Unexpected("SUBACK"),
        v5::Packet::UnsubscribeAck(_) => In::Unexpected("UNSUBACK"),
        v5::Packet::PingResponse => In::Unexpected("PINGRESP"),
    }
}

fn v3_connack_code(reason: u8) -> v3::ConnectAckReason {
    use v3::ConnectAckReason as R;
    match reason {
        reason::SUCCESS => R::ConnectionAccepted,
        reason::UNSUPPORTED_PROTOCOL_VERSION => R::UnacceptableProtocolVersion,
        reason::CLIENT_ID_NOT_VALID => R::IdentifierRejected,
        reason::BAD_USER_NAME_OR_PASSWORD | reason::BAD_AUTHENTICATION_METHOD => {
            R::BadUserNameOrPassword
        }
        reason::NOT_AUTHORIZED => R::NotAuthorized,
        _ => R::ServiceUnavailable,
    }
}

fn v5_connack_code(reason: u8) -> v5::ConnectAckReason {
    v5::ConnectAckReason::try_from(reason).unwrap_or(v5::ConnectAckReason::UnspecifiedError)
}

fn v3_out(packet: Out) -> Option<v3::Packet> {
    Some(match packet {
        Out::ConnAck(a) => v3::Packet::ConnectAck(v3::ConnectAck {
            return_code: v3_connack_code(a.reason),
            session_present: a.session_present,
        }),
        Out::Publish(p) => v3::Packet::Publish(Box::new(publish_out(&p, Version::V3))),
        Out::PubAck(p, _) => v3::Packet::PublishAck { packet_id: nz(p) },
        Out::PubRec(p, _) => v3::Packet::PublishReceived { packet_id: nz(p) },
        Out::PubRel(p) => v3::Packet::PublishRelease { packet_id: nz(p) },
        Out::PubComp(p) => v3::Packet::PublishComplete { packet_id: nz(p) },
        Out::SubAck(p, codes) => v3::Packet::SubscribeAck {
            packet_id: nz(p),
            status: codes
                .into_iter()
                .map(|c| match c {
                    0..=2 => v3::SubscribeReturnCode::Success(qos_of(c)),
                    _ => v3::SubscribeReturnCode::Failure,
                })
                .collect(),
        },
        Out::UnsubAck(p, _) => v3::Packet::UnsubscribeAck { packet_id: nz(p) },
        Out::Pong => v3::Packet::PingResponse,
        // 3.1.1 has no DISCONNECT from the server: the connection is closed.
        Out::Disconnect(..) => return None,
    })
}

fn reason_string(text: &str) -> Option<ByteString> {
    (!text.is_empty()).then(|| ByteString::from(text))
}

/// 5.0 reason codes of `codes`, `unknown` for a code the type does not have.
fn reasons<R: TryFrom<u8> + Copy>(codes: Vec<u8>, unknown: R) -> Vec<R> {
    codes
        .into_iter()
        .map(|c| R::try_from(c).unwrap_or(unknown))
        .collect()
}

/// A 5.0 PUBACK or PUBREC of packet `p` with reason `r`.
fn ack(p: u16, r: u8) -> v5::PublishAck {
    v5::PublishAck {
        packet_id: nz(p),
        reason_code: v5::PublishAckReason::try_from(r)
            .unwrap_or(v5::PublishAckReason::UnspecifiedError),
        properties: Vec::new(),
        reason_string: None,
    }
}

/// A 5.0 PUBREL or PUBCOMP of packet `p`.
fn ack2(p: u16) -> v5::PublishAck2 {
    v5::PublishAck2 {
        packet_id: nz(p),
        reason_code: v5::PublishAck2Reason::Success,
        properties: Vec::new(),
        reason_string: None,
    }
}

fn v5_out(packet: Out) -> v5::Packet {
    match packet {
        Out::ConnAck(a) => {
            let a = *a;
            v5::Packet::ConnectAck(Box::new(v5::ConnectAck {
                session_present: a.session_present,
                reason_code: v5_connack_code(a.reason),
                receive_max: NonZeroU16::new(a.receive_max).unwrap_or(NonZeroU16::MAX),
                max_qos: QoS::ExactlyOnce,
                // 0 (a refusal's default) is no size: 5.0 forbids sending it.
                max_packet_size: (a.max_packet_size > 0).then_some(a.max_packet_size),
                assigned_client_id: a.assigned_client_id.as_deref().map(ByteString::from),
                topic_alias_max: a.topic_alias_max,
                retain_available: a.retain_available,
                wildcard_subscription_available: true,
                subscription_identifiers_available: false,
                shared_subscription_available: a.shared_available,
                reason_string: a.reason_string.as_deref().and_then(reason_string),
                ..v5::ConnectAck::default()
            }))
        }
        Out::Publish(p) => v5::Packet::Publish(Box::new(publish_out(&p, Version::V5))),
        Out::PubAck(p, r) => v5::Packet::PublishAck(ack(p, r)),
        Out::PubRec(p, r) => v5::Packet::PublishReceived(ack(p, r)),
        Out::PubRel(p) => v5::Packet::PublishRelease(ack2(p)),
        Out::PubComp(p) => v5::Packet::PublishComplete(ack2(p)),
        Out::SubAck(p, codes) => v5::Packet::SubscribeAck(v5::SubscribeAck {
            packet_id: nz(p),
            properties: Vec::new(),
            reason_string: None,
            status: reasons(codes, v5::SubscribeAckReason::UnspecifiedError),
        }),
        Out::UnsubAck(p, codes) => v5::Packet::UnsubscribeAck(v5::UnsubscribeAck {
            packet_id: nz(p),
            properties: Vec::new(),
            reason_string: None,
            status: reasons(codes, v5::UnsubscribeAckReason::UnspecifiedError),
        }),
        Out::Pong => v5::Packet::PingResponse,
        Out::Disconnect(code, text) => v5::Packet::Disconnect(v5::Disconnect {
            reason_code: v5::DisconnectReasonCode::try_from(code)
                .unwrap_or(v5::DisconnectReasonCode::UnspecifiedError),
            session_expiry_interval_secs: None,
            server_reference: None,
            reason_string: reason_string(&text),
            user_properties: Vec::new(),
        }),
    }
}

/// What [`Wire::look`] found of the packet at the start of the input.
enum Look {
    /// The packet is not all there yet: read more.
    Wait,
    /// The codec reads it (or refuses it).
    Decode,
}

/// The fixed header at the start of `src`: its length and the remaining length it
/// gives, bytes. `None` while its bytes are not all there; `Some(None)` when they are
/// no remaining length (the codec refuses them).
fn fixed_header(src: &[u8]) -> Option<Option<(usize, usize)>> {
    let mut remaining = 0;
    for i in 0..4 {
        let byte = *src.get(1 + i)?;
        remaining |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(Some((2 + i, remaining)));
        }
    }
    Some(None)
}

/// A variable byte integer at the start of `bytes`: its value and its length, bytes
/// (`None` when it is cut short or longer than 4 bytes).
fn varint(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut value = 0;
    for (i, byte) in bytes.iter().take(4).enumerate() {
        value |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// The big-endian two-byte integer at the start of `bytes` (a string's length, a
/// packet id).
fn two_bytes(bytes: &[u8]) -> Option<usize> {
    Some(usize::from(u16::from_be_bytes(
        bytes.get(..2)?.try_into().ok()?,
    )))
}

/// Where the flags byte of a CONNECT whose variable header and payload are `body` is
/// in `body`, and whether its client id is empty (`None` when the bytes are not a
/// CONNECT: the codec says why).
fn connect_flags(body: &[u8], version: Version) -> Option<(usize, bool)> {
    // Protocol name, level, then the flags.
    let flags = 2 + two_bytes(body)? + 1;
    body.get(flags)?;
    // Keep alive.
    let mut at = flags + 1 + 2;
    if version == Version::V5 {
        let (length, used) = varint(body.get(at..)?)?;
        at += used + length;
    }
    Some((flags, two_bytes(body.get(at..)?)? == 0))
}

/// The topic alias of a 5.0 PUBLISH whose first byte is `first` and whose variable
/// header and payload are `body`; `None` without one, or when the bytes are not a
/// PUBLISH (the codec says why).
fn publish_alias(first: u8, body: &[u8]) -> Option<usize> {
    let mut at = 2 + two_bytes(body)?;
    if (first >> 1) & 0b11 != 0 {
        at += 2; // the packet id
    }
    let rest = body.get(at..)?;
    let (length, used) = varint(rest)?;
    let mut properties = rest.get(used..used.checked_add(length)?)?;
    while let Some((&id, value)) = properties.split_first() {
        let size = match id {
            // Payload format indicator; message expiry interval.
            0x01 => 1,
            0x02 => 4,
            0x23 => return two_bytes(value),
            // Content type, response topic, correlation data.
            0x03 | 0x08 | 0x09 => 2 + two_bytes(value)?,
            // User property: two strings.
            0x26 => {
                let name = 2 + two_bytes(value)?;
                name + 2 + two_bytes(value.get(name..)?)?
            }
            // Subscription identifier.
            0x0B => varint(value)?.1,
            _ => return None,
        };
        properties = value.get(size..)?;
    }
    None
}

impl Wire {
    /// Looks at the packet at the start of `src` before the codec does: waits until
    /// all of it is there (the codec then reads it in one call), and refuses what the
    /// codec refuses with a reason MQTT does not give: a 5.0 PUBLISH with topic alias
    /// 0 ([`WireError::TopicAliasZero`]; the codec's is a malformed packet), and a
    /// CONNECT with an empty client id without clean start, which the codec refuses
    /// as a malformed packet in both versions (3.1.1 answers it CONNACK 0x02,
    /// MQTT-3.1.3-8; 5.0 assigns an id): its clean start flag is set for the codec
    /// and cleared again in the CONNECT read. A packet over the size limit is left to
    /// the codec, which refuses it from its header.
    fn look(&mut self, src: &mut BytesMut) -> Result<Look, WireError> {
        let Some(header) = fixed_header(src) else {
            return Ok(Look::Wait);
        };
        let Some((head, remaining)) = header else {
            return Ok(Look::Decode);
        };
        if self.max_packet_size != 0 && remaining > self.max_packet_size as usize {
            return Ok(Look::Decode);
        }
        if src.len() < head + remaining {
            src.reserve(head + remaining - src.len());
            return Ok(Look::Wait);
        }
        let (first, body) = (src[0], &src[head..head + remaining]);
        match (first >> 4, self.version) {
            (3, Some(Version::V5)) if publish_alias(first, body) == Some(0) => {
                return Err(WireError::TopicAliasZero)
            }
            (1, Some(version)) => {
                const CLEAN_START: u8 = 0x02;
                if let Some((flags, true)) = connect_flags(body, version) {
                    if src[head + flags] & CLEAN_START == 0 {
                        src[head + flags] |= CLEAN_START;
                        self.unclean_empty_id = true;
                    }
                }
            }
            _ => {}
        }
        Ok(Look::Decode)
    }

    /// `packet` as the client sent it: a CONNECT whose clean start [`Wire::look`] set
    /// has it cleared (3.1.1: a session that does not end, as without clean session).
    fn as_sent(&mut self, mut packet: In) -> In {
        if let In::Connect(c) = &mut packet {
            if std::mem::take(&mut self.unclean_empty_id) {
                c.clean_start = false;
                if c.version == Version::V3 {
                    c.session_expiry = u32::MAX;
                }
            }
        }
        packet
    }
}

impl Decoder for Wire {
    type Item = In;
    type Error = WireError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<In>, WireError> {
        loop {
            if self.version.is_some() {
                if let Look::Wait = self.look(src)? {
                    return Ok(None);
                }
            }
            let decoded = self.codec.decode(src).map_err(malformed)?;
            let Some((packet, _)) = decoded else {
                return Ok(None);
            };
            match packet {
                MqttPacket::Version(v) => {
                    // The CONNECT is still in `src`: read it with its version's codec.
                    let (codec, version) = match v {
                        rmqtt_codec::version::ProtocolVersion::MQTT3 => (
                            MqttCodec::V3(v3::Codec::new(self.max_packet_size)),
                            Version::V3,
                        ),
                        rmqtt_codec::version::ProtocolVersion::MQTT5 => (
                            MqttCodec::V5(v5::Codec::new(self.max_packet_size, u32::MAX)),
                            Version::V5,
                        ),
                    };
                    self.codec = codec;
                    self.version = Some(version);
                    if version == Version::V5 {
                        self.out = MqttCodec::V5(v5::Codec::new(0, 0));
                    }
                }
                MqttPacket::V3(p) => return Ok(Some(self.as_sent(v3_in(p)))),
                MqttPacket::V5(p) => return Ok(Some(self.as_sent(v5_in(p)))),
            }
        }
    }

    /// The input ended: the packets still buffered, then an error if bytes of one
    /// more are left.
    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<In>, WireError> {
        match self.decode(src)? {
            Some(packet) => Ok(Some(packet)),
            None if src.is_empty() => Ok(None),
            None => Err(WireError::Malformed(
                "the connection ended in the middle of a packet".into(),
            )),
        }
    }
}

impl Encoder<Out> for Wire {
    type Error = std::io::Error;

    fn encode(&mut self, item: Out, dst: &mut BytesMut) -> Result<(), std::io::Error> {
        let packet = match self.version {
            Some(Version::V5) => MqttPacket::V5(v5_out(item)),
            // Before a version is known only a refusal goes out: in 3.1.1's form.
            _ => match v3_out(item) {
                Some(p) => MqttPacket::V3(p),
                None => return Ok(()),
            },
        };
        self.out
            .encode(packet, dst)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A 3.1.1 CONNECT of client id `c`.
    const CONNECT_V3: &[u8] = b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x3c\x00\x01c";
    /// A 5.0 CONNECT of client id `c` (no properties).
    const CONNECT_V5: &[u8] = b"\x10\x0e\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x01c";

    fn decode_all(wire: &mut Wire, bytes: &[u8]) -> Result<Vec<In>, WireError> {
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(p) = wire.decode(&mut buf)? {
            out.push(p);
        }
        Ok(out)
    }

    #[test]
    fn the_version_comes_from_connect() {
        for (bytes, version) in [(CONNECT_V3, Version::V3), (CONNECT_V5, Version::V5)] {
            let mut wire = Wire::new(1024);
            let packets = decode_all(&mut wire, bytes).unwrap();
            assert_eq!(wire.version(), Some(version));
            match &packets[..] {
                [In::Connect(c)] => assert_eq!((c.client_id.as_str(), c.version), ("c", version)),
                other => panic!("{other:?}"),
            }
        }
        let mut wire = Wire::new(1024);
        let bad = decode_all(&mut wire, b"\x10\x0d\x00\x04MQTT\x07\x02\x00\x3c\x00\x01c");
        assert!(matches!(bad, Err(WireError::UnsupportedVersion)), "{bad:?}");
    }

    #[test]
    fn a_packet_over_the_limit_is_refused_before_it_is_read() {
        let mut wire = Wire::new(1024);
        decode_all(&mut wire, CONNECT_V3).unwrap();
        wire.set_max_packet_size(16);
        // A PUBLISH announcing 200 bytes: refused from its header alone.
        let e = decode_all(&mut wire, b"\x30\xc8\x01").unwrap_err();
        assert!(
            matches!(e, WireError::TooLarge { size: 200, max: 16 }),
            "{e:?}"
        );
    }

    /// Any string of up to `max` characters, some of them multi-byte.
    fn text(max: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(prop_oneof![Just('a'), Just('é'), Just('/')], 0..max)
            .prop_map(|c| c.into_iter().collect())
    }

    fn any_publish() -> impl Strategy<Value = Publish> {
        let properties = (
            proptest::option::of(any::<u32>()),
            proptest::option::of(text(40)),
            proptest::option::of(text(40)),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            proptest::collection::vec((text(20), text(300)), 0..4),
            any::<bool>(),
        )
            .prop_map(|(expiry, content, response, data, user, utf8)| Properties {
                message_expiry_secs: expiry,
                content_type: content,
                response_topic: response,
                correlation_data: data.map(Bytes::from),
                user_properties: user,
                utf8_payload: utf8,
                topic_alias: None,
            });
        (
            text(300),
            0..3u8,
            // Around the lengths where the remaining length takes another byte.
            prop_oneof![0..200usize, 16_250..16_500usize],
            properties,
        )
            .prop_map(|(topic, qos, payload, properties)| Publish {
                topic: if topic.is_empty() { "t".into() } else { topic },
                qos,
                retain: false,
                dup: false,
                packet_id: (qos > 0).then_some(7),
                payload: Bytes::from(vec![b'x'; payload]),
                properties,
            })
    }

    proptest! {
        /// What `encoded_size` says is what the codec writes, in both versions.
        #[test]
        fn encoded_size_is_what_is_written(p in any_publish(), v5 in any::<bool>()) {
            let mut wire = Wire::new(1 << 20);
            let version = if v5 { Version::V5 } else { Version::V3 };
            decode_all(&mut wire, if v5 { CONNECT_V5 } else { CONNECT_V3 }).unwrap();
            let mut written = BytesMut::new();
            wire.encode(Out::Publish(Box::new(p.clone())), &mut written).unwrap();
            prop_assert_eq!(p.encoded_size(version), written.len());
        }
    }

    #[test]
    fn an_empty_client_id_without_clean_start_is_read() {
        // 3.1.1 and 5.0 CONNECTs of client id `` without clean start, keep alive 60.
        let v3 = b"\x10\x0c\x00\x04MQTT\x04\x00\x00\x3c\x00\x00";
        let v5 = b"\x10\x0d\x00\x04MQTT\x05\x00\x00\x3c\x00\x00\x00";
        for (bytes, version) in [(&v3[..], Version::V3), (&v5[..], Version::V5)] {
            let mut wire = Wire::new(1024);
            match &decode_all(&mut wire, bytes).unwrap()[..] {
                [In::Connect(c)] => {
                    assert_eq!((c.version, c.client_id.as_str()), (version, ""));
                    assert!(!c.clean_start, "{version:?}");
                    if version == Version::V3 {
                        assert_eq!(c.session_expiry, u32::MAX);
                    }
                }
                other => panic!("{other:?}"),
            }
        }
        // With clean start it stays as it was.
        let mut wire = Wire::new(1024);
        let clean = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00";
        match &decode_all(&mut wire, clean).unwrap()[..] {
            [In::Connect(c)] => assert!(c.clean_start && c.session_expiry == 0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn topic_alias_0_is_refused_as_such() {
        let mut wire = Wire::new(1024);
        decode_all(&mut wire, CONNECT_V5).unwrap();
        // QoS 1 PUBLISH to `a/b`, packet id 1, a user property, then topic alias 0.
        let bad = b"\x32\x13\x00\x03a/b\x00\x01\x0a\x26\x00\x01k\x00\x01v\x23\x00\x00x";
        let e = decode_all(&mut wire, bad).unwrap_err();
        assert!(matches!(e, WireError::TopicAliasZero), "{e:?}");
        // Alias 1 is read, also when its bytes come one at a time.
        let mut wire = Wire::new(1024);
        decode_all(&mut wire, CONNECT_V5).unwrap();
        let good = b"\x32\x13\x00\x03a/b\x00\x01\x0a\x26\x00\x01k\x00\x01v\x23\x00\x01x";
        let mut buf = BytesMut::new();
        let mut packets = Vec::new();
        for byte in good {
            buf.extend_from_slice(&[*byte]);
            packets.extend(wire.decode(&mut buf).unwrap());
        }
        match &packets[..] {
            [In::Publish(p)] => assert_eq!(
                (p.properties.topic_alias, &p.payload[..]),
                (Some(1), &b"x"[..])
            ),
            other => panic!("{other:?}"),
        }
    }

    proptest! {
        /// Any bytes after a CONNECT of either version decode to packets or an error,
        /// never a panic, and never more packets than bytes.
        #[test]
        fn any_bytes_decode_or_are_refused(v5 in any::<bool>(), bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut wire = Wire::new(1 << 16);
            let mut all = if v5 { CONNECT_V5.to_vec() } else { CONNECT_V3.to_vec() };
            all.extend_from_slice(&bytes);
            if let Ok(packets) = decode_all(&mut wire, &all) {
                prop_assert!(packets.len() <= all.len());
            }
        }

        /// Any bytes as the first packet: a CONNECT, or refused; never a panic.
        #[test]
        fn any_first_bytes_are_a_connect_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let mut wire = Wire::new(1 << 16);
            if let Ok(packets) = decode_all(&mut wire, &bytes) {
                prop_assert!(packets.iter().all(|p| matches!(p, In::Connect(_))) || wire.version().is_some());
            }
        }
    }
}
