//! The MQTT session fuzzed over TCP, as `stomp_fuzz` fuzzes STOMP's: a CONNECT of
//! either version, then generated packets (every kind a client sends, topics and
//! filters from a pool of valid and hostile values, every QoS), some bytes mutated
//! at random, written in random splits to a live broker. Each case must end with the
//! broker closing the connection once the client has half-closed it (never a hang),
//! nothing on the broker's thread may panic, and a new connection must still get its
//! CONNACK after every case.
//!
//! 64 cases per run; `PROPTEST_CASES=N` runs more.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use bytes::BytesMut;
use bytestring::ByteString;
use ebb::test_util::mqtt::{pid, publish, qos, v5_connect};
use proptest::prelude::*;
use rmqtt_codec::{v3, v5, MqttCodec, MqttPacket};
use tokio_util::codec::Encoder;

const SERVER_THREAD: &str = "ebb-mqtt-fuzz-server";

static SERVER_PANICS: AtomicU64 = AtomicU64::new(0);

/// One broker (SQLite in memory) with an MQTT listener for every case, on a thread of
/// its own with an actix system, as `ebb serve` runs them.
fn server() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        ebb::test_util::serve_on_thread(SERVER_THREAD, &SERVER_PANICS, |broker| async move {
            let server = ebb::test_util::mqtt::mqtt_serve(broker, Default::default()).await;
            (server.mqtt, Box::new(server) as Box<dyn std::any::Any>)
        })
    })
}

const TOPICS: &[&str] = &[
    "a/b",
    "a/+/c",
    "#",
    "a/#",
    "",
    "a//b",
    "+",
    "a/b#",
    "$share/g/a/b",
    "$share/",
    "x,y",
    "ActiveMQ.Advisory.Queue",
    "very/long/topic/name/that/goes/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/and/on/end",
    "nul\0here",
    "dots.in/topic",
];

/// A packet a client may send, in `v5` or 3.1.1 form.
fn packet(v5: bool) -> impl Strategy<Value = MqttPacket> {
    (
        0..8u8,
        prop::sample::select(TOPICS),
        0..4u8,
        1..5u16,
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(move |(kind, topic, q, id, payload)| {
            let q = q.min(2);
            if v5 {
                MqttPacket::V5(match kind {
                    0 | 1 => v5::Packet::Publish(Box::new(publish(
                        topic,
                        &payload,
                        q,
                        id,
                        Some(Default::default()),
                    ))),
                    2 => v5::Packet::Subscribe(v5::Subscribe {
                        packet_id: pid(id),
                        id: None,
                        user_properties: Vec::new(),
                        topic_filters: vec![(
                            ByteString::from(topic),
                            v5::SubscriptionOptions {
                                qos: qos(q),
                                ..Default::default()
                            },
                        )],
                    }),
                    3 => v5::Packet::Unsubscribe(v5::Unsubscribe {
                        packet_id: pid(id),
                        user_properties: Vec::new(),
                        topic_filters: vec![ByteString::from(topic)],
                    }),
                    4 => v5::Packet::PublishAck(v5::PublishAck {
                        packet_id: pid(id),
                        reason_code: v5::PublishAckReason::Success,
                        properties: Vec::new(),
                        reason_string: None,
                    }),
                    5 => v5::Packet::PublishRelease(v5::PublishAck2 {
                        packet_id: pid(id),
                        reason_code: v5::PublishAck2Reason::Success,
                        properties: Vec::new(),
                        reason_string: None,
                    }),
                    6 => v5::Packet::PingRequest,
                    _ => v5::Packet::Connect(Box::new(v5_connect("again", 0))),
                })
            } else {
                MqttPacket::V3(match kind {
                    0 | 1 => v3::Packet::Publish(Box::new(publish(topic, &payload, q, id, None))),
                    2 => v3::Packet::Subscribe {
                        packet_id: pid(id),
                        topic_filters: vec![(ByteString::from(topic), qos(q))],
                    },
                    3 => v3::Packet::Unsubscribe {
                        packet_id: pid(id),
                        topic_filters: vec![ByteString::from(topic)],
                    },
                    4 => v3::Packet::PublishAck { packet_id: pid(id) },
                    5 => v3::Packet::PublishRelease { packet_id: pid(id) },
                    6 => v3::Packet::PingRequest,
                    _ => v3::Packet::Disconnect,
                })
            }
        })
}

/// A case: the version, its packets, byte mutations (position, value), a split.
fn case() -> impl Strategy<Value = (bool, Vec<MqttPacket>, Vec<(usize, u8)>, usize)> {
    any::<bool>().prop_flat_map(|v5| {
        (
            Just(v5),
            proptest::collection::vec(packet(v5), 0..12),
            proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
            1..64usize,
        )
    })
}

fn encode(v5: bool, packets: Vec<MqttPacket>) -> Vec<u8> {
    let mut codec = if v5 {
        MqttCodec::V5(v5::Codec::new(0, 0))
    } else {
        MqttCodec::V3(v3::Codec::new(0))
    };
    let mut buf = BytesMut::new();
    let connect = if v5 {
        MqttPacket::V5(v5::Packet::Connect(Box::new(v5_connect("fuzz", 0))))
    } else {
        MqttPacket::V3(v3::Packet::Connect(Box::new(v3::Connect {
            clean_session: true,
            keep_alive: 60,
            client_id: ByteString::from("fuzz"),
            ..Default::default()
        })))
    };
    codec.encode(connect, &mut buf).unwrap();
    for p in packets {
        // A packet the codec will not write (a QoS 1 PUBLISH without an id) is skipped.
        let _ = codec.encode(p, &mut buf);
    }
    buf.to_vec()
}

/// Reads until the broker closes the connection; false if it does not within 30 s.
fn drained(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut sink = [0u8; 4096];
    loop {
        match stream.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// A new client still gets its CONNACK.
fn still_served(addr: SocketAddr) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"\x10\x0f\x00\x04MQTT\x04\x02\x00\x3c\x00\x03chk")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut ack = [0u8; 4];
    s.read_exact(&mut ack).unwrap();
    assert_eq!(ack, [0x20, 0x02, 0x00, 0x00], "CONNACK accepted");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_packets_end_cleanly((v5, packets, mutations, split) in case()) {
        let addr = server();
        let mut bytes = encode(v5, packets);
        let n = bytes.len();
        for (at, value) in mutations {
            bytes[at % n] = value;
        }
        let mut stream = TcpStream::connect(addr).unwrap();
        for chunk in bytes.chunks(split) {
            if stream.write_all(chunk).is_err() {
                break; // the broker closed it already
            }
        }
        let _ = stream.shutdown(Shutdown::Write);
        prop_assert!(drained(&mut stream), "the broker did not close the connection");
        prop_assert_eq!(SERVER_PANICS.load(Ordering::SeqCst), 0);
        still_served(addr);
    }
}
