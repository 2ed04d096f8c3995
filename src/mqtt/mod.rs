//! MQTT 3.1.1 and 5.0, a second protocol over the same [`Broker`] as STOMP: one
//! folder that implements [`Protocol`], served by the shared listener
//! ([`crate::transport::listener`]) and started by one line of the server (`src/server.rs`).
//! The HTTP server serves it over WebSocket too (`/mqtt`, binary messages).
//! Packets are read and written by a maintained codec ([`rmqtt_codec`], in
//! [`wire`]); the session — what each packet does to the broker — is Ebb's
//! ([`session`]).
//!
//! # The model, as ActiveMQ's MQTT transport maps it
//!
//! - **Topics.** An MQTT topic `a/b/c` is Ebb's `topic://a.b.c`, so STOMP and MQTT
//!   clients talk to each other; `+` and `#` are Ebb's `*` and `>` ([`topic`]).
//! - **QoS.** A QoS 0 PUBLISH is a non-persistent send; QoS 1 and 2 are persistent,
//!   answered (PUBACK, PUBREC) only after the store commits, pipelined: up to
//!   [`MqttConfig::receive_maximum`] publishes wait for their commits at once. QoS 2
//!   is exactly once between the client and the broker: a resent PUBLISH whose packet
//!   id was received and not yet released (PUBREL) is answered without storing it
//!   again. A persistent session's QoS 2 message is held in the store from PUBREC to
//!   PUBREL under its client id and packet id ([`Broker::hold_send`]) and delivered
//!   at PUBREL, so a PUBLISH resent after a crash of the broker finds it held and is
//!   not stored twice. A delivery's QoS is the smaller of the subscription's
//!   and the message's (STOMP's persistent messages are QoS 1); QoS 1 and 2
//!   deliveries are acked to the destination at PUBACK and PUBREC, and at most the
//!   client's receive maximum (5.0; [`MqttConfig::receive_maximum`] for 3.1.1) are
//!   unacknowledged at once.
//! - **Sessions.** A clean session's subscriptions are non-durable. A persistent
//!   session (3.1.1's clean session 0, 5.0's session expiry above 0) is a set of
//!   durable subscriptions named by the client id and each filter, kept in the store
//!   with their backlog while the client is offline (its filters too,
//!   [`Broker::session_subscriptions`]), resumed at its next CONNECT (session present)
//!   and ended by a clean start, or by 5.0's DISCONNECT with session expiry 0, or
//!   when it has been offline for its session expiry interval ([`expiry`]: the
//!   deadline is stored, so it holds across restarts).
//! - **Shared subscriptions.** `$share/GROUP/FILTER` is a queue,
//!   `$share.GROUP.FILTER` ([`topic::shared_queue`]), that gets a copy of each message
//!   published to a topic the filter matches ([`Broker::join_shared_subscription`]);
//!   the members are its competing consumers, and each delivery names the topic the
//!   message was published to ([`crate::broker::SHARED_TOPIC_HEADER`]). A persistent
//!   session is a stored member, which keeps the group and its backlog while offline;
//!   the group ends, with its queue, with its last member.
//! - **Client ids.** One connection per client id, shared with STOMP's `client-id`: a
//!   second CONNECT with the id takes it over (the older connection is closed; 5.0
//!   tells it with reason 0x8E). A client without an id gets `ebb-mqtt-SESSION`
//!   (5.0's assigned client identifier); 3.1.1 refuses an empty id with clean
//!   session 0, as the spec says.
//! - **Wills.** Published when the connection ends without DISCONNECT (a lost
//!   socket, a keep-alive timeout, a takeover, a protocol error) or with 5.0's reason
//!   0x04; 5.0's will delay waits, and a reconnect of the client id within it cancels
//!   the will. The will's topic and the write right on it are checked at CONNECT.
//! - **5.0 properties ↔ headers.** User properties are headers (and back); message
//!   expiry is the message's TTL (and the time left, on delivery); content type is
//!   `content-type`; response topic is `reply-to` (as an Ebb destination, so a STOMP
//!   client replies to it); correlation data is `correlation-id` (UTF-8 only: other
//!   bytes are refused with reason 0x99); the payload format indicator is
//!   `mqtt-payload-format: utf-8`. A QoS 2 message carries `mqtt-qos: 2` so that its
//!   deliveries may be QoS 2. Inbound topic aliases are honoured (up to
//!   [`TOPIC_ALIASES`]); the broker sends none.
//! - **Retained messages** are kept by the last-value kind of the kind table: one
//!   queue, `ebb.mqtt.retained`, whose last-value key is the topic name, so it holds
//!   one message per topic (a newer one replaces the older in the store transaction
//!   that commits it), persistent whatever the QoS, with the publish's QoS and
//!   expiry. An empty payload clears the topic (it replaces the last one and is never
//!   sent). A retained PUBLISH is answered once both its delivery and its copy are
//!   stored. A SUBSCRIBE gets the retained messages of the topics its filter matches
//!   and the user may read, after its SUBACK, flagged retained, at the smaller QoS
//!   (at most [`session::MAX_RETAINED_PER_SUBSCRIBE`]; 5.0's retain handling 1 and 2
//!   are honoured), read by browsing the queue in pages, with a selector on the
//!   filter's literal prefix. A delivery to a subscription that exists is not flagged
//!   retained, unless 5.0's retain as published asks for it. A will may be retained.
//! - **Not yet** (refused, never ignored): 5.0's AUTH exchange (CONNACK 0x8C),
//!   subscription identifiers.
//!
//! # Limits and rights
//!
//! The users, rights and caps are STOMP's: a login is `username`/`password` (or a
//! client certificate over TLS); PUBLISH needs `write` on its topic, SUBSCRIBE `read`
//! (a wildcard filter reads only the topics the user may read), and a persistent
//! session's new subscription `admin`, as a STOMP durable subscription. A refused
//! PUBLISH is answered with 5.0's reason code (0x87, 0x90, 0x97), or closes a 3.1.1
//! connection, which has no negative acknowledgement; a refused filter gets its
//! SUBACK failure. A malformed packet, or one over [`MqttConfig::max_packet_size`],
//! closes the connection (5.0 says why with DISCONNECT 0x81 or 0x95); everything
//! accepted before it stays accepted.

pub mod expiry;
pub mod session;
pub mod topic;
pub mod wire;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::auth::Security;
use crate::broker::Broker;
use crate::transport::caps::{OverCap, Slot, Slots};
use crate::transport::client_ids::ClientIds;
use crate::transport::connections::Connections;
use crate::transport::{Accepted, Protocol};

/// Default [`MqttConfig::max_packet_size`]: 1 MiB.
pub const MAX_PACKET_SIZE: u32 = 1 << 20;

/// Default [`MqttConfig::receive_maximum`].
pub const RECEIVE_MAXIMUM: u16 = 1_000;

/// Default [`MqttConfig::delivery_window`] for a 3.1.1 client (5.0 clients say theirs).
pub const DELIVERY_WINDOW: u16 = 100;

/// Topic aliases a 5.0 client may set per connection (CONNACK's topic alias maximum).
pub const TOPIC_ALIASES: u16 = 64;

/// Counter (metric) of deliveries dropped because their PUBLISH, as encoded, is
/// larger than the client's maximum packet size (5.0's CONNECT property; the spec's
/// rule: dropped as if delivered).
pub const DELIVERIES_TOO_LARGE_TOTAL: &str = "ebb_mqtt_deliveries_too_large_total";

/// Largest packet before CONNECT is read (64 KiB): a CONNECT is small.
pub const PRE_CONNECT_MAX_PACKET: u32 = 64 << 10;

/// What every MQTT connection of a broker shares. `Default`: open to everyone, with
/// the defaults below; `ebb serve` fills it from `[mqtt]` and STOMP's users, caps and
/// registries.
#[derive(Clone)]
pub struct MqttConfig {
    /// Largest packet a client may send, bytes (remaining length; as ActiveMQ's
    /// `maxFrameSize`). Default [`MAX_PACKET_SIZE`].
    pub max_packet_size: u32,
    /// QoS 1 and 2 publishes a connection may have waiting for their commits (5.0's
    /// receive maximum in CONNACK, enforced: a 5.0 client with this many not answered
    /// by PUBACK or PUBCOMP that sends another gets DISCONNECT 0x93; a 3.1.1 client
    /// past it is not read until earlier ones commit). Default [`RECEIVE_MAXIMUM`].
    pub receive_maximum: u16,
    /// QoS 1 and 2 deliveries unacknowledged at once on a 3.1.1 connection (5.0: the
    /// client's receive maximum). Default [`DELIVERY_WINDOW`] (as ActiveMQ's durable
    /// prefetch).
    pub delivery_window: u16,
    /// A connection that sends no CONNECT for this long (ms) is closed. Default
    /// 30,000.
    pub connect_timeout_ms: u64,
    /// Most subscriptions one connection holds (STOMP's `max_subscriptions`).
    pub max_subscriptions: usize,
    /// Users and rights (STOMP's).
    pub security: Arc<Security>,
    /// Client ids connected now, shared with STOMP.
    pub client_ids: Arc<ClientIds>,
    /// The registry operators list and close connections in (shared with STOMP).
    pub connections: Connections,
    /// Connections served now, counted against the two limits below (shared with
    /// STOMP: one `max_connections` for the broker).
    pub slots: Slots,
    /// Most connections at once (STOMP's `max_connections`).
    pub max_connections: usize,
    /// Most connections from one IP address at once.
    pub max_connections_per_address: usize,
    /// What outlives one connection of a client id (QoS 2 ids, will delays).
    pub state: Arc<MqttState>,
}

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            max_packet_size: MAX_PACKET_SIZE,
            receive_maximum: RECEIVE_MAXIMUM,
            delivery_window: DELIVERY_WINDOW,
            connect_timeout_ms: 30_000,
            max_subscriptions: 1_000,
            security: Default::default(),
            client_ids: Default::default(),
            connections: Default::default(),
            slots: Default::default(),
            max_connections: 10_000,
            max_connections_per_address: 1_000,
            state: Default::default(),
        }
    }
}

/// What the broker keeps of a client id between its connections, in memory.
#[derive(Default)]
pub struct MqttState {
    /// QoS 2 packet ids received (stored, PUBREC sent) and not yet released, per
    /// client id of a persistent session.
    pub(crate) received: Mutex<HashMap<String, HashSet<u16>>>,
    /// The number of each client id's latest CONNECT: a delayed will is published
    /// only if no newer connection of its client id came since.
    pub(crate) generations: Mutex<HashMap<String, u64>>,
    /// Wakes the session expiry sweeper ([`expiry::run`]): a session got a deadline.
    pub(crate) expiries: tokio::sync::Notify,
}

/// MQTT as a [`Protocol`] of a listener: the broker its connections use and their
/// settings, behind one [`Arc`] that every connection of the listener shares (a
/// connection holds a pointer to them, not a copy: issue 53). Clones share both;
/// `mqtt.broker` and `mqtt.config` read them.
#[derive(Clone)]
pub struct Mqtt {
    shared: Arc<MqttShared>,
}

/// What [`Mqtt`] shares with its connections.
pub struct MqttShared {
    /// The broker each connection's session applies its packets to.
    pub broker: Broker,
    /// What every connection shares.
    pub config: MqttConfig,
}

impl Mqtt {
    /// MQTT over `broker` with `config`.
    pub fn new(broker: Broker, config: MqttConfig) -> Self {
        Mqtt {
            shared: Arc::new(MqttShared { broker, config }),
        }
    }
}

impl std::ops::Deref for Mqtt {
    type Target = MqttShared;

    fn deref(&self) -> &MqttShared {
        &self.shared
    }
}

impl Protocol for Mqtt {
    const NAME: &'static str = "MQTT";

    fn take_slot(&self, address: std::net::IpAddr) -> Result<Slot, OverCap> {
        self.shared.config.slots.take_within(
            address,
            self.shared.config.max_connections,
            self.shared.config.max_connections_per_address,
        )
    }

    /// A CONNACK "server unavailable" (3.1.1's return code 3, understood by both
    /// versions' clients before they know the broker's).
    fn refusal(&self, _reason: &str) -> Vec<u8> {
        vec![0x20, 0x02, 0x00, 0x03]
    }

    fn serve<S>(&self, io: S, connection: Accepted) -> impl Future<Output = ()> + 'static
    where
        S: AsyncRead + AsyncWrite + Unpin + 'static,
    {
        session::serve(io, Arc::clone(&self.shared), connection)
    }
}

#[cfg(test)]
mod tests {
    /// Every error of the MQTT folder is typed: a `thiserror` enum of the crate, or a
    /// reason code with the text the wire carries. No function returns a bare
    /// `String` as its error.
    #[test]
    fn no_function_has_a_bare_string_error() {
        let files = [
            ("mod.rs", include_str!("mod.rs")),
            ("expiry.rs", include_str!("expiry.rs")),
            ("session.rs", include_str!("session.rs")),
            ("topic.rs", include_str!("topic.rs")),
            ("wire.rs", include_str!("wire.rs")),
        ];
        // Built from pieces, so this file does not match itself.
        let (returns, string_error) = (concat!("-> ", "Result<"), concat!(",", "String>"));
        for (file, text) in files {
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default().replace(' ', "");
                assert!(
                    !(code.contains(&returns.replace(' ', "")) && code.contains(string_error)),
                    "src/mqtt/{file}:{}: an error that is a bare String: {}",
                    n + 1,
                    line.trim()
                );
            }
        }
    }
}
