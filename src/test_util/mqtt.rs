//! MQTT in the tests: a server with a STOMP and an MQTT listener on one broker
//! ([`mqtt_server`]), and a small MQTT client over the same codec crate the broker
//! uses ([`MqttClient`]), speaking 3.1.1 or 5.0 packet by packet so that a test can
//! send exactly what it means to, bad packets included.

use std::net::SocketAddr;
use std::num::NonZeroU16;
use std::time::Duration;

use bytes::Bytes;
use bytestring::ByteString;
use futures::{SinkExt, StreamExt};
use rmqtt_codec::types::QoS;
use rmqtt_codec::{v3, v5, MqttCodec, MqttPacket};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use super::TestStore;
use crate::auth::Security;
use crate::mqtt::MqttConfig;
use crate::stomp::connection::ConnectionConfig;

/// A broker serving STOMP and MQTT, as `ebb serve` with `[listeners.mqtt]`.
pub struct MqttServer {
    /// The STOMP listener.
    pub stomp: SocketAddr,
    /// The MQTT listener.
    pub mqtt: SocketAddr,
    /// The broker.
    pub broker: crate::Broker,
    /// The registry of both protocols' connections.
    pub connections: crate::transport::connections::Connections,
    /// The HTTP server (`/mqtt`, `/stomp`), when asked for ([`mqtt_serve_http`]).
    pub http: Option<SocketAddr>,
    server: crate::server::Server,
}

/// A server on `t` with `security` (users and rights shared by both protocols).
pub async fn mqtt_server(t: &TestStore, security: Security) -> MqttServer {
    let broker = super::broker(t, crate::Policy::default(), 2).await;
    mqtt_serve(broker, security).await
}

/// A server for a broker the test built.
pub async fn mqtt_serve(broker: crate::Broker, security: Security) -> MqttServer {
    serve_both(broker, security, false).await
}

/// A server on `t` with the HTTP server too: MQTT over WebSocket at `/mqtt`.
#[cfg(feature = "http")]
pub async fn mqtt_serve_http(t: &TestStore) -> MqttServer {
    let broker = super::broker(t, crate::Policy::default(), 2).await;
    serve_both(broker, Security::default(), true).await
}

async fn serve_both(broker: crate::Broker, security: Security, with_http: bool) -> MqttServer {
    let connection = ConnectionConfig {
        security: std::sync::Arc::new(security),
        ..ConnectionConfig::default()
    };
    let mqtt = MqttConfig {
        security: std::sync::Arc::clone(&connection.security),
        client_ids: std::sync::Arc::clone(&connection.client_ids),
        connections: connection.connections.clone(),
        slots: connection.slots.clone(),
        ..MqttConfig::default()
    };
    let connections = connection.connections.clone();
    #[cfg(feature = "http")]
    let http = with_http.then(|| {
        let mut options = crate::http::HttpOptions::new("127.0.0.1:0".parse().unwrap());
        options.connections = connections.clone();
        options.stomp = Some(connection.clone());
        options.mqtt = Some(mqtt.clone());
        options
    });
    #[cfg(not(feature = "http"))]
    let _ = with_http;
    let options = crate::server::ServerOptions {
        stomp: Some("127.0.0.1:0".parse().unwrap()),
        mqtt: Some(("127.0.0.1:0".parse().unwrap(), mqtt)),
        connection,
        #[cfg(feature = "http")]
        http,
        ..Default::default()
    };
    let server = crate::server::Server::start(broker.clone(), options)
        .await
        .expect("the test server starts");
    MqttServer {
        stomp: server.stomp_addr().expect("STOMP"),
        mqtt: server.mqtt_addr().expect("MQTT"),
        broker,
        connections,
        #[cfg(feature = "http")]
        http: server.http_addr(),
        #[cfg(not(feature = "http"))]
        http: None,
        server,
    }
}

impl MqttServer {
    /// Stops the listeners and shuts the broker down.
    pub async fn stop(self) {
        self.server.stop().await.unwrap();
    }
}

/// A packet id (tests use small non-zero numbers).
pub fn pid(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).expect("packet ids start at 1")
}

/// QoS `n`.
pub fn qos(n: u8) -> QoS {
    match n {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    }
}

/// How long [`MqttClient::recv`] waits for a packet.
pub const WAIT: Duration = Duration::from_secs(20);

/// One MQTT connection of a test, 3.1.1 or 5.0.
pub struct MqttClient {
    framed: Framed<TcpStream, MqttCodec>,
}

impl MqttClient {
    /// A 3.1.1 connection to `addr`, nothing sent.
    pub async fn open_v3(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.expect("connects");
        Self {
            framed: Framed::new(stream, MqttCodec::V3(v3::Codec::new(0))),
        }
    }

    /// A 5.0 connection to `addr`, nothing sent.
    pub async fn open_v5(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.expect("connects");
        Self {
            framed: Framed::new(stream, MqttCodec::V5(v5::Codec::new(0, 0))),
        }
    }

    /// Connected with 3.1.1 as `client_id` (`clean` session or not), answered by
    /// CONNACK; returns it.
    pub async fn v3(addr: SocketAddr, client_id: &str, clean: bool) -> (Self, v3::ConnectAck) {
        let mut c = Self::open_v3(addr).await;
        let connect = v3::Connect {
            clean_session: clean,
            keep_alive: 60,
            client_id: ByteString::from(client_id),
            ..Default::default()
        };
        c.send_v3(v3::Packet::Connect(Box::new(connect))).await;
        match c.recv().await {
            Some(MqttPacket::V3(v3::Packet::ConnectAck(ack))) => (c, ack),
            other => panic!("no CONNACK: {other:?}"),
        }
    }

    /// Connected with 5.0 by `connect`, answered by CONNACK; returns it.
    pub async fn v5_with(addr: SocketAddr, connect: v5::Connect) -> (Self, v5::ConnectAck) {
        let mut c = Self::open_v5(addr).await;
        c.send_v5(v5::Packet::Connect(Box::new(connect))).await;
        match c.recv().await {
            Some(MqttPacket::V5(v5::Packet::ConnectAck(ack))) => (c, *ack),
            other => panic!("no CONNACK: {other:?}"),
        }
    }

    /// Connected with 5.0 as `client_id`, session expiry `expiry` s (0: clean).
    pub async fn v5(addr: SocketAddr, client_id: &str, expiry: u32) -> (Self, v5::ConnectAck) {
        Self::v5_with(addr, v5_connect(client_id, expiry)).await
    }

    /// Sends a 3.1.1 packet.
    pub async fn send_v3(&mut self, packet: v3::Packet) {
        self.framed
            .send(MqttPacket::V3(packet))
            .await
            .expect("the packet is written");
    }

    /// Sends a 5.0 packet.
    pub async fn send_v5(&mut self, packet: v5::Packet) {
        self.framed
            .send(MqttPacket::V5(packet))
            .await
            .expect("the packet is written");
    }

    /// Whether the server's next packet answers a PINGREQ sent now (in the version of
    /// `v5`): nothing else came first, a check that nothing more was delivered.
    pub async fn pong_is_next(&mut self, v5: bool) -> bool {
        if v5 {
            self.send_v5(v5::Packet::PingRequest).await;
        } else {
            self.send_v3(v3::Packet::PingRequest).await;
        }
        matches!(
            self.recv().await,
            Some(MqttPacket::V5(v5::Packet::PingResponse))
                | Some(MqttPacket::V3(v3::Packet::PingResponse))
        )
    }

    /// Writes raw bytes.
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        let _ = self.framed.get_mut().write_all(bytes).await;
    }

    /// The next packet, or `None` when the server closed the connection or sent
    /// nothing for [`WAIT`] (bad bytes from the server are a panic).
    pub async fn recv(&mut self) -> Option<MqttPacket> {
        self.recv_within(WAIT).await
    }

    /// The next packet within `wait`.
    pub async fn recv_within(&mut self, wait: Duration) -> Option<MqttPacket> {
        match tokio::time::timeout(wait, self.framed.next()).await {
            Ok(Some(Ok((packet, _)))) => Some(packet),
            Ok(Some(Err(e))) => panic!("bad bytes from the server: {e}"),
            Ok(None) | Err(_) => None,
        }
    }

    /// Whether the server closes the connection within [`WAIT`], skipping what it
    /// sends before (returned).
    pub async fn closed(&mut self) -> Vec<MqttPacket> {
        let mut before = Vec::new();
        loop {
            match tokio::time::timeout(WAIT, self.framed.next()).await {
                Ok(Some(Ok((packet, _)))) => before.push(packet),
                Ok(Some(Err(_))) | Ok(None) => return before,
                Err(_) => panic!("the server did not close the connection; it sent {before:?}"),
            }
        }
    }

    /// A 3.1.1 PUBLISH of `payload` to `topic` at QoS `q` (packet id `id` for 1, 2).
    pub async fn publish_v3(&mut self, topic: &str, payload: &[u8], q: u8, id: u16) {
        self.send_v3(v3::Packet::Publish(Box::new(publish(
            topic, payload, q, id, None,
        ))))
        .await;
    }

    /// A 5.0 PUBLISH with `properties`.
    pub async fn publish_v5(
        &mut self,
        topic: &str,
        payload: &[u8],
        q: u8,
        id: u16,
        properties: v5::PublishProperties,
    ) {
        self.send_v5(v5::Packet::Publish(Box::new(publish(
            topic,
            payload,
            q,
            id,
            Some(properties),
        ))))
        .await;
    }

    /// 3.1.1 SUBSCRIBE of `filters` (filter, QoS), answered by SUBACK: its codes.
    pub async fn subscribe_v3(
        &mut self,
        id: u16,
        filters: &[(&str, u8)],
    ) -> Vec<v3::SubscribeReturnCode> {
        self.send_v3(v3::Packet::Subscribe {
            packet_id: pid(id),
            topic_filters: filters
                .iter()
                .map(|(f, q)| (ByteString::from(*f), qos(*q)))
                .collect(),
        })
        .await;
        match self.recv().await {
            Some(MqttPacket::V3(v3::Packet::SubscribeAck { status, .. })) => status,
            other => panic!("no SUBACK: {other:?}"),
        }
    }

    /// 5.0 SUBSCRIBE of `filters`, answered by SUBACK: its reason codes.
    pub async fn subscribe_v5(
        &mut self,
        id: u16,
        filters: &[(&str, u8)],
    ) -> Vec<v5::SubscribeAckReason> {
        self.send_v5(v5::Packet::Subscribe(v5::Subscribe {
            packet_id: pid(id),
            id: None,
            user_properties: Vec::new(),
            topic_filters: filters
                .iter()
                .map(|(f, q)| {
                    (
                        ByteString::from(*f),
                        v5::SubscriptionOptions {
                            qos: qos(*q),
                            ..Default::default()
                        },
                    )
                })
                .collect(),
        }))
        .await;
        match self.recv().await {
            Some(MqttPacket::V5(v5::Packet::SubscribeAck(ack))) => ack.status,
            other => panic!("no SUBACK: {other:?}"),
        }
    }
}

/// A 5.0 CONNECT of `client_id` with session expiry `expiry` s (clean start when 0).
pub fn v5_connect(client_id: &str, expiry: u32) -> v5::Connect {
    v5::Connect {
        clean_start: expiry == 0,
        keep_alive: 60,
        session_expiry_interval_secs: expiry,
        auth_method: None,
        auth_data: None,
        request_problem_info: true,
        request_response_info: false,
        receive_max: None,
        topic_alias_max: 0,
        user_properties: Vec::new(),
        max_packet_size: None,
        last_will: None,
        client_id: ByteString::from(client_id),
        username: None,
        password: None,
        cert: None,
    }
}

/// A PUBLISH packet (`properties` only for 5.0).
pub fn publish(
    topic: &str,
    payload: &[u8],
    q: u8,
    id: u16,
    properties: Option<v5::PublishProperties>,
) -> rmqtt_codec::types::Publish {
    rmqtt_codec::types::Publish {
        dup: false,
        retain: false,
        qos: qos(q),
        topic: ByteString::from(topic),
        packet_id: (q > 0).then(|| pid(id)),
        payload: Bytes::copy_from_slice(payload),
        properties,
    }
}
