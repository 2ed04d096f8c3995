//! MQTT 3.1.1 and 5.0 over the same broker as STOMP (issue 34): QoS 0, 1 and 2 round
//! trips, persistent sessions that keep their backlog across a restart, client-id
//! takeover with the will, STOMP and MQTT talking to each other with headers and
//! properties, rights, and bad packets. Both backends, packet by packet through the
//! test client, and with the real `mosquitto_pub` and `mosquitto_sub`.

use bytes::Bytes;
use bytestring::ByteString;
use ebb::auth::{hash_password, AuthorizationEntry, Security, User};
use ebb::stomp::frame::Command;
use ebb::test_util::mqtt::*;
use ebb::test_util::stomp::{receipt, Client};
use ebb::test_util::*;
use rmqtt_codec::{v3, v5, MqttPacket};

/// The next PUBLISH the client gets (panics on anything else).
async fn next_publish(c: &mut MqttClient) -> rmqtt_codec::types::Publish {
    match c.recv().await {
        Some(MqttPacket::V3(v3::Packet::Publish(p)))
        | Some(MqttPacket::V5(v5::Packet::Publish(p))) => *p,
        other => panic!("no PUBLISH: {other:?}"),
    }
}

/// A 5.0 will of `payload` on `topic` at QoS `q`, without properties.
fn will_of(topic: &str, payload: &'static [u8], q: u8) -> v5::LastWill {
    v5::LastWill {
        qos: qos(q),
        retain: false,
        topic: ByteString::from(topic),
        message: Bytes::from_static(payload),
        will_delay_interval_sec: None,
        correlation_data: None,
        message_expiry_interval: None,
        content_type: None,
        user_properties: Vec::new(),
        is_utf8_payload: None,
        response_topic: None,
    }
}

/// Every QoS, from a 5.0 publisher to a 3.1.1 subscriber of a wildcard filter at
/// QoS 2: each publish is answered as its QoS says (PUBACK; PUBREC, then PUBCOMP for
/// the PUBREL), and each delivery comes at the smaller of the two QoS with its
/// payload's bytes.
async fn every_qos_round_trips(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let (mut sub, ack) = MqttClient::v3(s.mqtt, "sub", true).await;
    assert_eq!(ack.return_code, v3::ConnectAckReason::ConnectionAccepted);
    assert!(!ack.session_present);
    let granted = sub
        .subscribe_v3(1, &[("plant/+/temp", 2), ("other/#", 1)])
        .await;
    assert_eq!(
        granted,
        vec![
            v3::SubscribeReturnCode::Success(qos(2)),
            v3::SubscribeReturnCode::Success(qos(1))
        ]
    );
    let (mut publisher, ack) = MqttClient::v5(s.mqtt, "pub", 0).await;
    assert_eq!(ack.reason_code, v5::ConnectAckReason::Success);
    assert!(ack.retain_available);
    publisher
        .publish_v5("plant/a/temp", b"q0", 0, 0, Default::default())
        .await;
    publisher
        .publish_v5("plant/a/temp", b"q1\0bytes", 1, 7, Default::default())
        .await;
    match publisher.recv().await {
        Some(MqttPacket::V5(v5::Packet::PublishAck(a))) => {
            assert_eq!(a.packet_id, pid(7));
            assert_eq!(a.reason_code, v5::PublishAckReason::Success);
        }
        other => panic!("no PUBACK: {other:?}"),
    }
    publisher
        .publish_v5("plant/a/temp", b"q2", 2, 8, Default::default())
        .await;
    match publisher.recv().await {
        Some(MqttPacket::V5(v5::Packet::PublishReceived(a))) => assert_eq!(a.packet_id, pid(8)),
        other => panic!("no PUBREC: {other:?}"),
    }
    // A resend of the same QoS 2 publish before PUBREL is answered, not stored again.
    let mut again = publish("plant/a/temp", b"q2", 2, 8, Some(Default::default()));
    again.dup = true;
    publisher
        .send_v5(v5::Packet::Publish(Box::new(again)))
        .await;
    assert!(matches!(
        publisher.recv().await,
        Some(MqttPacket::V5(v5::Packet::PublishReceived(_)))
    ));
    publisher
        .send_v5(v5::Packet::PublishRelease(v5::PublishAck2 {
            packet_id: pid(8),
            reason_code: v5::PublishAck2Reason::Success,
            properties: Vec::new(),
            reason_string: None,
        }))
        .await;
    assert!(matches!(
        publisher.recv().await,
        Some(MqttPacket::V5(v5::Packet::PublishComplete(_)))
    ));
    let q0 = next_publish(&mut sub).await;
    assert_eq!(
        (&*q0.topic, q0.qos, &q0.payload[..]),
        ("plant/a/temp", qos(0), &b"q0"[..])
    );
    let q1 = next_publish(&mut sub).await;
    assert_eq!(
        (&*q1.topic, q1.qos, &q1.payload[..]),
        ("plant/a/temp", qos(1), &b"q1\0bytes"[..])
    );
    sub.send_v3(v3::Packet::PublishAck {
        packet_id: q1.packet_id.unwrap(),
    })
    .await;
    let q2 = next_publish(&mut sub).await;
    assert_eq!(
        (&*q2.topic, q2.qos, &q2.payload[..]),
        ("plant/a/temp", qos(2), &b"q2"[..])
    );
    let id = q2.packet_id.unwrap();
    sub.send_v3(v3::Packet::PublishReceived { packet_id: id })
        .await;
    assert!(matches!(
        sub.recv().await,
        Some(MqttPacket::V3(v3::Packet::PublishRelease { packet_id })) if packet_id == id
    ));
    sub.send_v3(v3::Packet::PublishComplete { packet_id: id })
        .await;
    // The resent QoS 2 publish was not delivered twice.
    assert!(sub.pong_is_next(false).await);
    s.stop().await;
}

/// A persistent session (3.1.1 clean session 0) keeps its subscriptions and their
/// backlog while the client is away, across a restart of the broker; the client
/// resumes without subscribing again (session present), and a clean session ends it:
/// nothing of it stays stored.
async fn a_persistent_session_keeps_its_backlog_across_a_restart(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let (mut device, ack) = MqttClient::v3(s.mqtt, "device-1", false).await;
    assert!(!ack.session_present);
    device.subscribe_v3(1, &[("cmd/device-1/#", 1)]).await;
    device.send_v3(v3::Packet::Disconnect).await;
    drop(device);
    let (mut sender, _) = MqttClient::v3(s.mqtt, "sender", true).await;
    for i in 1..=5u16 {
        sender
            .publish_v3("cmd/device-1/set", format!("m{i}").as_bytes(), 1, i)
            .await;
        assert!(matches!(
            sender.recv().await,
            Some(MqttPacket::V3(v3::Packet::PublishAck { .. }))
        ));
    }
    s.stop().await;
    let s = mqtt_server(&t, Security::default()).await;
    let stored = s
        .broker
        .session_subscriptions("mqtt", "device-1")
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(
        (stored[0].filter.as_str(), stored[0].qos),
        ("cmd/device-1/#", 1)
    );
    let (mut device, ack) = MqttClient::v3(s.mqtt, "device-1", false).await;
    assert!(ack.session_present);
    for i in 1..=5 {
        let p = next_publish(&mut device).await;
        assert_eq!(&p.payload[..], format!("m{i}").as_bytes());
        assert_eq!(p.qos, qos(1));
        device
            .send_v3(v3::Packet::PublishAck {
                packet_id: p.packet_id.unwrap(),
            })
            .await;
    }
    device.send_v3(v3::Packet::Disconnect).await;
    drop(device);
    let (mut device, ack) = MqttClient::v3(s.mqtt, "device-1", true).await;
    assert!(!ack.session_present, "a clean session starts afresh");
    device.send_v3(v3::Packet::Disconnect).await;
    poll_until("the session's rows deleted", || async {
        s.broker
            .session_subscriptions("mqtt", "device-1")
            .await
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
    let durable = s
        .broker
        .durable_subscription_exists("topic://cmd.device-1.>", "device-1", "cmd/device-1/#")
        .await
        .unwrap();
    assert!(!durable, "the durable subscription went with the session");
    s.stop().await;
}

/// A second CONNECT with the same client id takes the session over: the first
/// connection is told (5.0: DISCONNECT 0x8E) and closed, and its will is published.
async fn a_second_connect_takes_over_and_the_will_goes(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let (mut watcher, _) = MqttClient::v5(s.mqtt, "watcher", 0).await;
    watcher.subscribe_v5(1, &[("status/#", 1)]).await;
    let mut connect = v5_connect("dev", 0);
    connect.last_will = Some(will_of("status/dev", b"offline", 1));
    let (mut first, _) = MqttClient::v5_with(s.mqtt, connect).await;
    let (mut second, ack) = MqttClient::v5(s.mqtt, "dev", 0).await;
    assert_eq!(ack.reason_code, v5::ConnectAckReason::Success);
    let told = first.closed().await;
    assert!(
        told.iter().any(|p| matches!(p, MqttPacket::V5(v5::Packet::Disconnect(d)) if d.reason_code == v5::DisconnectReasonCode::SessionTakenOver)),
        "{told:?}"
    );
    let will = next_publish(&mut watcher).await;
    assert_eq!(
        (&*will.topic, &will.payload[..]),
        ("status/dev", &b"offline"[..])
    );
    // The newer connection is served.
    assert!(second.pong_is_next(true).await);
    // Operators see it as MQTT in the registry, and may close it (5.0: 0x98).
    let listed = s.connections.list(None, 100);
    let entry = listed
        .iter()
        .find(|c| c.client_id.as_deref() == Some("dev"))
        .expect("listed");
    assert_eq!((entry.protocol, entry.connected), ("MQTT", true));
    assert!(s.connections.close(&entry.session));
    let told = second.closed().await;
    assert!(
        told.iter().any(|p| matches!(p, MqttPacket::V5(v5::Packet::Disconnect(d)) if d.reason_code == v5::DisconnectReasonCode::AdministrativeAction)),
        "{told:?}"
    );
    // A normal DISCONNECT sends no will.
    let mut connect = v5_connect("quiet", 0);
    connect.last_will = Some(will_of("status/quiet", b"gone", 0));
    let (mut quiet, _) = MqttClient::v5_with(s.mqtt, connect).await;
    quiet
        .send_v5(v5::Packet::Disconnect(v5::Disconnect {
            reason_code: v5::DisconnectReasonCode::NormalDisconnection,
            session_expiry_interval_secs: None,
            server_reference: None,
            reason_string: None,
            user_properties: Vec::new(),
        }))
        .await;
    quiet.closed().await;
    assert!(
        watcher.pong_is_next(true).await,
        "no will after a normal DISCONNECT"
    );
    s.stop().await;
}

/// MQTT and STOMP clients talk to each other: `a/b` is `/topic/a.b`; 5.0's user
/// properties, content type, response topic and correlation data are STOMP headers,
/// and back; the body's bytes are kept both ways.
async fn stomp_and_mqtt_talk_to_each_other(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let mut stomp = Client::connected(s.stomp, None).await;
    stomp
        .write(b"SUBSCRIBE\nid:1\ndestination:/topic/sensors.>\nreceipt:r\n\n\0")
        .await;
    receipt(&mut stomp, "r").await;
    let (mut device, _) = MqttClient::v5(s.mqtt, "device", 0).await;
    let properties = v5::PublishProperties {
        content_type: Some(ByteString::from("application/json")),
        response_topic: Some(ByteString::from("replies/device")),
        correlation_data: Some(Bytes::from_static(b"req-42")),
        user_properties: vec![(ByteString::from("unit"), ByteString::from("celsius"))],
        ..Default::default()
    };
    device
        .publish_v5("sensors/room1/temp", b"{\"t\":21.5}", 1, 1, properties)
        .await;
    assert!(matches!(
        device.recv().await,
        Some(MqttPacket::V5(v5::Packet::PublishAck(_)))
    ));
    let m = stomp.frame().await.expect("MESSAGE");
    assert_eq!(m.command, Command::Message);
    assert_eq!(m.get("destination"), Some("/topic/sensors.room1.temp"));
    assert_eq!(m.get("unit"), Some("celsius"));
    assert_eq!(m.get("content-type"), Some("application/json"));
    assert_eq!(m.get("reply-to"), Some("/topic/replies.device"));
    assert_eq!(m.get("correlation-id"), Some("req-42"));
    assert_eq!(m.get("persistent"), Some("true"));
    assert_eq!(&m.body[..], b"{\"t\":21.5}");

    device.subscribe_v5(2, &[("replies/device", 1)]).await;
    stomp
        .write(b"SEND\ndestination:/topic/replies.device\ncorrelation-id:req-42\nzone:eu\npersistent:true\ncontent-length:5\nreceipt:s\n\nok\0\x01\x02\0")
        .await;
    receipt(&mut stomp, "s").await;
    let reply = next_publish(&mut device).await;
    assert_eq!(&*reply.topic, "replies/device");
    assert_eq!(reply.qos, qos(1));
    assert_eq!(&reply.payload[..], b"ok\0\x01\x02");
    let props = reply.properties.expect("5.0 properties");
    assert_eq!(props.correlation_data.as_deref(), Some(&b"req-42"[..]));
    assert!(props
        .user_properties
        .iter()
        .any(|(k, v)| &**k == "zone" && &**v == "eu"));
    s.stop().await;
}

/// The users and rights are STOMP's: a wrong password gets CONNACK's refusal; a
/// PUBLISH without `write` gets 5.0's 0x87 (and nothing is sent), a SUBSCRIBE
/// without `read` gets SUBACK 0x87 (a wildcard filter is granted and reads only the
/// topics the user may read, as a STOMP wildcard subscription), while what the
/// user may do goes through.
async fn rights_apply_as_over_stomp(t: TestStore) {
    let security = Security {
        login_guard: Default::default(),
        temp_destination_authorization_entry: None,
        users: vec![User {
            login: "alice".into(),
            password_hash: hash_password("secret").unwrap(),
            certificate_subject: None,
            groups: vec!["plant".into()],
        }],
        authorization: vec![AuthorizationEntry {
            destination: "topic://plant.>".into(),
            read: vec!["plant".into()],
            write: vec!["plant".into()],
            admin: vec![],
        }],
    };
    let s = mqtt_server(&t, security).await;
    let mut wrong = v5_connect("a", 0);
    wrong.username = Some(ByteString::from("alice"));
    wrong.password = Some(Bytes::from_static(b"nope"));
    let (mut refused, ack) = MqttClient::v5_with(s.mqtt, wrong).await;
    assert_eq!(ack.reason_code, v5::ConnectAckReason::BadUserNameOrPassword);
    assert_eq!(
        ack.max_packet_size, None,
        "5.0 forbids a maximum packet size of 0"
    );
    refused.closed().await;
    let mut v3 = MqttClient::open_v3(s.mqtt).await;
    v3.send_v3(v3::Packet::Connect(Box::new(v3::Connect {
        clean_session: true,
        client_id: ByteString::from("anonymous"),
        ..Default::default()
    })))
    .await;
    match v3.recv().await {
        Some(MqttPacket::V3(v3::Packet::ConnectAck(a))) => {
            assert_eq!(a.return_code, v3::ConnectAckReason::BadUserNameOrPassword)
        }
        other => panic!("{other:?}"),
    }
    let mut right = v5_connect("alice-1", 0);
    right.username = Some(ByteString::from("alice"));
    right.password = Some(Bytes::from_static(b"secret"));
    let (mut alice, ack) = MqttClient::v5_with(s.mqtt, right).await;
    assert_eq!(ack.reason_code, v5::ConnectAckReason::Success);
    let codes = alice
        .subscribe_v5(1, &[("plant/#", 1), ("office/door", 1)])
        .await;
    assert_eq!(
        codes,
        vec![
            v5::SubscribeAckReason::GrantedQos1,
            v5::SubscribeAckReason::NotAuthorized
        ]
    );
    alice
        .publish_v5("office/door", b"x", 1, 5, Default::default())
        .await;
    match alice.recv().await {
        Some(MqttPacket::V5(v5::Packet::PublishAck(a))) => {
            assert_eq!(a.reason_code, v5::PublishAckReason::NotAuthorized)
        }
        other => panic!("{other:?}"),
    }
    alice
        .publish_v5("plant/pump", b"on", 1, 6, Default::default())
        .await;
    // Its PUBACK (after the commit) and its delivery (plant/# at QoS 1) come in
    // either order.
    let (mut acked, mut delivered) = (false, false);
    for _ in 0..2 {
        match alice.recv().await {
            Some(MqttPacket::V5(v5::Packet::PublishAck(a))) => {
                assert_eq!(a.reason_code, v5::PublishAckReason::Success);
                acked = true;
            }
            Some(MqttPacket::V5(v5::Packet::Publish(p))) => {
                assert_eq!(&*p.topic, "plant/pump");
                delivered = true;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(acked && delivered);
    s.stop().await;
}

/// Bad input closes only its own connection, and what was accepted before it stays:
/// bytes that are no packet (5.0: DISCONNECT 0x81), a packet before CONNECT, a
/// packet over the size limit (0x95), an invalid topic name (PUBACK 0x90 in 5.0; a
/// 3.1.1 connection, which has no negative acknowledgement, is closed).
async fn bad_packets_close_their_connection_and_lose_nothing(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let (mut keeper, _) = MqttClient::v3(s.mqtt, "keeper", false).await;
    keeper.subscribe_v3(1, &[("log/#", 1)]).await;
    keeper.send_v3(v3::Packet::Disconnect).await;
    drop(keeper);

    let (mut bad, _) = MqttClient::v5(s.mqtt, "bad", 0).await;
    bad.publish_v5("log/a", b"kept", 1, 1, Default::default())
        .await;
    assert!(matches!(
        bad.recv().await,
        Some(MqttPacket::V5(v5::Packet::PublishAck(_)))
    ));
    bad.publish_v5("log/+", b"x", 1, 2, Default::default())
        .await;
    match bad.recv().await {
        Some(MqttPacket::V5(v5::Packet::PublishAck(a))) => {
            assert_eq!(a.reason_code, v5::PublishAckReason::TopicNameInvalid)
        }
        other => panic!("{other:?}"),
    }
    // A reserved packet type (0): not a packet.
    bad.send_bytes(&[0x00, 0x00]).await;
    let told = bad.closed().await;
    assert!(
        told.iter().any(|p| matches!(p, MqttPacket::V5(v5::Packet::Disconnect(d)) if d.reason_code == v5::DisconnectReasonCode::MalformedPacket)),
        "{told:?}"
    );

    let mut early = MqttClient::open_v3(s.mqtt).await;
    early.send_v3(v3::Packet::PingRequest).await;
    early.closed().await;

    let (mut big, _) = MqttClient::v5(s.mqtt, "big", 0).await;
    let payload = vec![b'x'; ebb::mqtt::MAX_PACKET_SIZE as usize + 1];
    big.publish_v5("log/big", &payload, 1, 3, Default::default())
        .await;
    let told = big.closed().await;
    assert!(
        told.iter().any(|p| matches!(p, MqttPacket::V5(v5::Packet::Disconnect(d)) if d.reason_code == v5::DisconnectReasonCode::PacketTooLarge)),
        "{told:?}"
    );

    let (mut old, _) = MqttClient::v3(s.mqtt, "old", true).await;
    old.publish_v3("log/#", b"x", 1, 4).await;
    old.closed().await;

    // Everyone else is still served, and the accepted message is there.
    let (mut keeper, ack) = MqttClient::v3(s.mqtt, "keeper", false).await;
    assert!(ack.session_present);
    let p = next_publish(&mut keeper).await;
    assert_eq!(&p.payload[..], b"kept");
    keeper
        .send_v3(v3::Packet::PublishAck {
            packet_id: p.packet_id.unwrap(),
        })
        .await;
    assert!(keeper.pong_is_next(false).await, "nothing else was stored");
    s.stop().await;
}

/// The real clients: `mosquitto_sub` reads what `mosquitto_pub` publishes at QoS 0,
/// 1 and 2, over 3.1.1 and 5.0, through a wildcard.
async fn mosquitto_clients_round_trip(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let port = s.mqtt.port().to_string();
    let folder = std::env::var("EBB_TEST_MOSQUITTO").unwrap_or_else(|_| {
        panic!("EBB_TEST_MOSQUITTO is not set: the folder of mosquitto_pub and mosquitto_sub (Debian's mosquitto-clients)")
    });
    let tool = |name: &str| {
        let path = std::path::Path::new(&folder).join(name);
        assert!(
            path.is_file(),
            "{} is not there (EBB_TEST_MOSQUITTO)",
            path.display()
        );
        path
    };
    let sub = tokio::process::Command::new(tool("mosquitto_sub"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "m/#",
            "-q",
            "2",
            "-v",
            "-C",
            "6",
            "-W",
            "60",
            "-i",
            "mosq-sub",
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("mosquitto_sub starts");
    poll_until("mosquitto_sub subscribed", || async {
        let open = s.connections.list(None, 10);
        open.iter()
            .any(|c| c.client_id.as_deref() == Some("mosq-sub") && c.subscriptions == 1)
            .then_some(())
    })
    .await;
    for (q, version) in [
        (0, "mqttv311"),
        (1, "mqttv311"),
        (2, "mqttv311"),
        (0, "mqttv5"),
        (1, "mqttv5"),
        (2, "mqttv5"),
    ] {
        let status = tokio::process::Command::new(tool("mosquitto_pub"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-t",
                &format!("m/{version}/q{q}"),
                "-m",
                &format!("{version} qos {q}"),
                "-q",
                &q.to_string(),
                "-V",
                version,
            ])
            .status()
            .await
            .expect("mosquitto_pub runs");
        assert!(
            status.success(),
            "mosquitto_pub -q {q} -V {version}: {status}"
        );
    }
    let out = sub.wait_with_output().await.expect("mosquitto_sub ends");
    assert!(out.status.success(), "mosquitto_sub: {:?}", out.status);
    // Each mosquitto_pub is a connection of its own: MQTT orders messages per
    // publisher only, so the lines are compared as a set.
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "m/mqttv311/q0 mqttv311 qos 0",
            "m/mqttv311/q1 mqttv311 qos 1",
            "m/mqttv311/q2 mqttv311 qos 2",
            "m/mqttv5/q0 mqttv5 qos 0",
            "m/mqttv5/q1 mqttv5 qos 1",
            "m/mqttv5/q2 mqttv5 qos 2",
        ]
    );
    s.stop().await;
}

/// The retained PUBLISHes a SUBSCRIBE brings, after its SUBACK, until a PINGRESP:
/// (topic, payload, QoS, retain flag), sorted.
async fn retained_after(c: &mut MqttClient) -> Vec<(String, Vec<u8>, u8, bool)> {
    c.send_v5(v5::Packet::PingRequest).await;
    let mut got = Vec::new();
    loop {
        match c.recv().await {
            Some(MqttPacket::V5(v5::Packet::Publish(p))) => {
                if let Some(id) = p.packet_id {
                    c.send_v5(v5::Packet::PublishAck(v5::PublishAck {
                        packet_id: id,
                        reason_code: v5::PublishAckReason::Success,
                        properties: Vec::new(),
                        reason_string: None,
                    }))
                    .await;
                }
                let q = match p.qos {
                    rmqtt_codec::types::QoS::AtMostOnce => 0,
                    rmqtt_codec::types::QoS::AtLeastOnce => 1,
                    rmqtt_codec::types::QoS::ExactlyOnce => 2,
                };
                got.push((p.topic.to_string(), p.payload.to_vec(), q, p.retain));
            }
            Some(MqttPacket::V5(v5::Packet::PingResponse)) => break,
            other => panic!("{other:?}"),
        }
    }
    got.sort();
    got
}

/// Retained messages (through the last-value kind, one per topic): a SUBSCRIBE gets
/// those of the topics its filter matches, flagged retained, at the smaller QoS; a
/// newer one replaces the older; an empty payload clears the topic; they survive a
/// restart; 5.0's retain handling 2 asks for none; a live delivery to an existing
/// subscription is not flagged retained.
async fn retained_messages_are_kept_one_per_topic(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let (mut publisher, _) = MqttClient::v3(s.mqtt, "thermostat", true).await;
    let retained = |topic: &str, payload: &[u8], q: u8, id: u16| {
        let mut p = publish(topic, payload, q, id, None);
        p.retain = true;
        v3::Packet::Publish(Box::new(p))
    };
    for (packet, acked) in [
        (retained("home/t1", b"22", 1, 1), true),
        (retained("home/l1", b"on", 0, 0), false),
        (retained("home/t1", b"23", 1, 2), true),
        (retained("office/t9", b"19", 1, 3), true),
    ] {
        publisher.send_v3(packet).await;
        if acked {
            assert!(matches!(
                publisher.recv().await,
                Some(MqttPacket::V3(v3::Packet::PublishAck { .. }))
            ));
        }
    }
    let (mut reader, ack) = MqttClient::v5(s.mqtt, "reader", 0).await;
    assert!(ack.retain_available);
    assert_eq!(
        reader.subscribe_v5(1, &[("home/#", 1)]).await,
        vec![v5::SubscribeAckReason::GrantedQos1]
    );
    assert_eq!(
        retained_after(&mut reader).await,
        vec![
            ("home/l1".into(), b"on".to_vec(), 0, true),
            ("home/t1".into(), b"23".to_vec(), 1, true),
        ]
    );
    // A live retained publish reaches the existing subscription unflagged.
    publisher.send_v3(retained("home/l1", b"", 1, 4)).await;
    assert!(matches!(
        publisher.recv().await,
        Some(MqttPacket::V3(v3::Packet::PublishAck { .. }))
    ));
    let live = next_publish(&mut reader).await;
    assert_eq!(
        (&*live.topic, &live.payload[..], live.retain),
        ("home/l1", &b""[..], false)
    );
    s.stop().await;

    let s = mqtt_server(&t, Security::default()).await;
    let (mut again, _) = MqttClient::v5(s.mqtt, "again", 0).await;
    again
        .subscribe_v5(1, &[("home/+", 2), ("office/t9", 0)])
        .await;
    assert_eq!(
        retained_after(&mut again).await,
        vec![
            ("home/t1".into(), b"23".to_vec(), 1, true),
            ("office/t9".into(), b"19".to_vec(), 0, true),
        ],
        "the cleared topic is gone, the others survived the restart"
    );
    again
        .send_v5(v5::Packet::Subscribe(v5::Subscribe {
            packet_id: pid(9),
            id: None,
            user_properties: Vec::new(),
            topic_filters: vec![(
                ByteString::from("office/#"),
                v5::SubscriptionOptions {
                    qos: qos(1),
                    retain_handling: v5::RetainHandling::NoAtSubscribe,
                    ..Default::default()
                },
            )],
        }))
        .await;
    assert!(matches!(
        again.recv().await,
        Some(MqttPacket::V5(v5::Packet::SubscribeAck(_)))
    ));
    assert_eq!(
        retained_after(&mut again).await,
        vec![],
        "retain handling 2: none"
    );
    s.stop().await;
}

/// MQTT over WebSocket (`/mqtt`, subprotocol `mqtt`): binary messages both ways, the
/// same session as over TCP (a TCP publisher reaches a WebSocket subscriber); an
/// upgrade without the subprotocol is refused with 400.
#[cfg(feature = "http")]
async fn mqtt_over_websocket(t: TestStore) {
    use bytes::BytesMut;
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message as Ws;
    use tokio_util::codec::{Decoder, Encoder};
    let s = mqtt_serve_http(&t).await;
    let http = s.http.expect("HTTP");
    let plain = format!("ws://{http}/mqtt").into_client_request().unwrap();
    match tokio_tungstenite::connect_async(plain).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 400),
        other => panic!(
            "an upgrade without the subprotocol: {:?}",
            other.map(|_| ())
        ),
    }
    let mut request = format!("ws://{http}/mqtt").into_client_request().unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "mqtt".parse().unwrap());
    let (mut ws, response) = tokio_tungstenite::connect_async(request)
        .await
        .expect("upgrade");
    assert_eq!(response.headers()["sec-websocket-protocol"], "mqtt");
    let mut codec = rmqtt_codec::MqttCodec::V3(v3::Codec::new(0));
    let mut send = |packet: v3::Packet| {
        let mut buf = BytesMut::new();
        codec.encode(MqttPacket::V3(packet), &mut buf).unwrap();
        Ws::Binary(buf.to_vec())
    };
    ws.send(send(v3::Packet::Connect(Box::new(v3::Connect {
        clean_session: true,
        keep_alive: 60,
        client_id: ByteString::from("ws-client"),
        ..Default::default()
    }))))
    .await
    .unwrap();
    ws.send(send(v3::Packet::Subscribe {
        packet_id: pid(1),
        topic_filters: vec![(ByteString::from("ws/#"), qos(1))],
    }))
    .await
    .unwrap();
    let mut read = rmqtt_codec::MqttCodec::V3(v3::Codec::new(0));
    let mut buffer = BytesMut::new();
    type Socket = tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >;
    async fn next_packet(
        ws: &mut Socket,
        read: &mut rmqtt_codec::MqttCodec,
        buffer: &mut BytesMut,
    ) -> v3::Packet {
        loop {
            if let Some((MqttPacket::V3(p), _)) = read.decode(buffer).unwrap() {
                return p;
            }
            match tokio::time::timeout(WAIT, ws.next()).await {
                Ok(Some(Ok(Ws::Binary(bytes)))) => buffer.extend_from_slice(&bytes),
                other => panic!("not a binary message: {other:?}"),
            }
        }
    }
    macro_rules! next {
        () => {
            next_packet(&mut ws, &mut read, &mut buffer)
        };
    }
    assert!(
        matches!(next!().await, v3::Packet::ConnectAck(a) if a.return_code == v3::ConnectAckReason::ConnectionAccepted)
    );
    assert!(matches!(next!().await, v3::Packet::SubscribeAck { .. }));
    let (mut tcp, _) = MqttClient::v3(s.mqtt, "tcp-pub", true).await;
    tcp.publish_v3("ws/a", b"over the web", 1, 1).await;
    assert!(matches!(
        tcp.recv().await,
        Some(MqttPacket::V3(v3::Packet::PublishAck { .. }))
    ));
    match next!().await {
        v3::Packet::Publish(p) => {
            assert_eq!((&*p.topic, &p.payload[..]), ("ws/a", &b"over the web"[..]))
        }
        other => panic!("{other:?}"),
    }
    let listed = s.connections.list(None, 10);
    let entry = listed
        .iter()
        .find(|c| c.client_id.as_deref() == Some("ws-client"))
        .expect("listed");
    assert_eq!(entry.transport, ebb::transport::connections::Transport::Ws);
    s.stop().await;
}

#[cfg(feature = "http")]
on_every_backend!(
    #[actix_rt::test]
    mqtt_over_websocket
);

/// QoS 0 fan-out: every message of a publisher that ends with DISCONNECT reaches
/// every subscriber (nothing read before the DISCONNECT is dropped).
async fn fan_out_loses_nothing_read(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let mut subs = Vec::new();
    for i in 0..5 {
        let (mut c, _) = MqttClient::v3(s.mqtt, &format!("fan-{i}"), true).await;
        c.subscribe_v3(1, &[("fan/x", 0)]).await;
        subs.push(c);
    }
    let (mut publisher, _) = MqttClient::v3(s.mqtt, "fan-pub", true).await;
    let n = 2_000u32;
    for i in 0..n {
        publisher
            .publish_v3("fan/x", format!("{i}").as_bytes(), 0, 0)
            .await;
    }
    publisher.send_v3(v3::Packet::Disconnect).await;
    publisher.closed().await;
    for (k, c) in subs.iter_mut().enumerate() {
        let mut got = Vec::new();
        while got.len() < n as usize {
            match c.recv_within(std::time::Duration::from_secs(5)).await {
                Some(MqttPacket::V3(v3::Packet::Publish(p))) => {
                    got.push(String::from_utf8_lossy(&p.payload).parse::<u32>().unwrap())
                }
                Some(other) => panic!("{other:?}"),
                None => break,
            }
        }
        let missing: Vec<u32> = (0..n).filter(|i| !got.contains(i)).collect();
        assert!(
            missing.is_empty(),
            "subscriber {k}: {} missing: {:?}",
            missing.len(),
            &missing[..missing.len().min(20)]
        );
    }
    s.stop().await;
}

/// Reads 5.0 PUBLISHes from `members` in turn, acknowledging each (and passing over
/// a SUBACK granting QoS 1), until `n` came or none comes for 2 s: each as (member,
/// topic, payload).
async fn drain_members(members: &mut [&mut MqttClient], n: usize) -> Vec<(usize, String, String)> {
    let mut got = Vec::new();
    let mut quiet = 0;
    while got.len() < n && quiet < 10 {
        quiet += 1;
        for (k, c) in members.iter_mut().enumerate() {
            while let Some(packet) = c.recv_within(std::time::Duration::from_millis(100)).await {
                let p = match packet {
                    MqttPacket::V5(v5::Packet::Publish(p)) => p,
                    MqttPacket::V5(v5::Packet::SubscribeAck(ack)) => {
                        assert_eq!(ack.status, vec![v5::SubscribeAckReason::GrantedQos1]);
                        continue;
                    }
                    other => panic!("member {k}: {other:?}"),
                };
                if let Some(id) = p.packet_id {
                    c.send_v5(v5::Packet::PublishAck(v5::PublishAck {
                        packet_id: id,
                        reason_code: v5::PublishAckReason::Success,
                        properties: Default::default(),
                        reason_string: None,
                    }))
                    .await;
                }
                got.push((
                    k,
                    p.topic.to_string(),
                    String::from_utf8_lossy(&p.payload).to_string(),
                ));
                quiet = 0;
            }
        }
    }
    got
}

/// 5.0's shared subscriptions (`$share/GROUP/FILTER`): the members of a group get
/// each message published to a topic the filter matches once between them, with the
/// topic it was published to, while a plain subscriber gets every one; a persistent
/// member holds the group and its backlog while offline and across a restart; the
/// group ends (no topic sends to it, its queue deleted) with its last member.
async fn shared_subscriptions_split_the_messages(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let (mut a, ack) = MqttClient::v5(s.mqtt, "member-a", 0).await;
    assert!(ack.shared_subscription_available);
    let (mut b, _) = MqttClient::v5(s.mqtt, "member-b", 0).await;
    let (mut watcher, _) = MqttClient::v3(s.mqtt, "watcher", true).await;
    for c in [&mut a, &mut b] {
        assert_eq!(
            c.subscribe_v5(1, &[("$share/g/sensors/+", 1)]).await,
            vec![v5::SubscribeAckReason::GrantedQos1]
        );
    }
    watcher.subscribe_v3(1, &[("sensors/+", 0)]).await;
    assert_eq!(
        s.broker.shared_subscriptions().len(),
        1,
        "one group, however many members"
    );
    let (mut sender, _) = MqttClient::v3(s.mqtt, "sender", true).await;
    for i in 0..100u16 {
        sender
            .publish_v3(
                &format!("sensors/{}", i % 5),
                format!("m{i}").as_bytes(),
                1,
                i + 1,
            )
            .await;
        assert!(matches!(
            sender.recv().await,
            Some(MqttPacket::V3(v3::Packet::PublishAck { .. }))
        ));
    }
    let got = drain_members(&mut [&mut a, &mut b], 100).await;
    let mut payloads: Vec<&str> = got.iter().map(|(_, _, p)| p.as_str()).collect();
    payloads.sort_by_key(|p| p[1..].parse::<u32>().unwrap());
    let expected: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
    assert_eq!(payloads, expected, "each message once between the members");
    for (_, topic, payload) in &got {
        let i: u32 = payload[1..].parse().unwrap();
        assert_eq!(
            topic,
            &format!("sensors/{}", i % 5),
            "the topic it was published to"
        );
    }
    assert!(
        got.iter().any(|(k, _, _)| *k == 0) && got.iter().any(|(k, _, _)| *k == 1),
        "both members got some"
    );
    let mut seen = 0;
    while let Some(MqttPacket::V3(v3::Packet::Publish(_))) =
        watcher.recv_within(std::time::Duration::from_secs(2)).await
    {
        seen += 1;
    }
    assert_eq!(seen, 100, "a plain subscriber gets every message");

    // A member subscribing to its filter again stays a member: nothing is lost.
    for i in 0..5u16 {
        sender
            .publish_v3("sensors/9", format!("r{i}").as_bytes(), 1, 500 + i)
            .await;
        sender.recv().await;
    }
    b.send_v5(v5::Packet::Disconnect(Default::default())).await;
    // (Its SUBACK comes among the deliveries: drain_members passes over it.)
    a.send_v5(v5::Packet::Subscribe(v5::Subscribe {
        packet_id: pid(2),
        id: None,
        user_properties: Vec::new(),
        topic_filters: vec![(
            ByteString::from("$share/g/sensors/+"),
            v5::SubscriptionOptions {
                qos: qos(1),
                ..Default::default()
            },
        )],
    }))
    .await;
    let mut again: Vec<String> = drain_members(&mut [&mut a], 5)
        .await
        .into_iter()
        .map(|(_, _, p)| p)
        .filter(|p| p.starts_with('r'))
        .collect();
    again.sort();
    again.dedup();
    assert_eq!(
        again,
        ["r0", "r1", "r2", "r3", "r4"],
        "the group kept its messages"
    );
    let (mut b, _) = MqttClient::v5(s.mqtt, "member-b", 0).await;
    b.subscribe_v5(1, &[("$share/g/sensors/+", 1)]).await;

    // The last member leaves: the group ends, and later messages go nowhere for it.
    a.send_v5(v5::Packet::Disconnect(Default::default())).await;
    assert_eq!(
        s.broker.shared_subscriptions().len(),
        1,
        "b is still a member"
    );
    b.send_v5(v5::Packet::Disconnect(Default::default())).await;
    poll_until("the group ended", || async {
        s.broker.shared_subscriptions().is_empty().then_some(())
    })
    .await;
    sender.publish_v3("sensors/1", b"late", 1, 200).await;
    sender.recv().await;
    // The group ends (no topic sends to it) before its queue is deleted.
    poll_until("the group's queue was deleted", || async {
        let listed = s.broker.list_destinations(None, 1_000).await.unwrap();
        let kept = listed
            .destinations
            .iter()
            .any(|d| d.stats.destination.contains("$share"));
        (!kept).then_some(())
    })
    .await;

    // A persistent member keeps the group, and what arrives, while it is away.
    let (mut c, _) = MqttClient::v5(s.mqtt, "member-c", 3_600).await;
    assert_eq!(
        c.subscribe_v5(1, &[("$share/p/jobs/#", 1)]).await,
        vec![v5::SubscribeAckReason::GrantedQos1]
    );
    c.send_v5(v5::Packet::Disconnect(Default::default())).await;
    drop(c);
    for i in 0..3u16 {
        sender
            .publish_v3("jobs/x", format!("j{i}").as_bytes(), 1, 300 + i)
            .await;
        sender.recv().await;
    }
    s.stop().await;
    let s = mqtt_server(&t, Security::default()).await;
    assert_eq!(
        s.broker.shared_subscriptions().len(),
        1,
        "kept across the restart"
    );
    let mut connect = v5_connect("member-c", 3_600);
    connect.clean_start = false;
    let (mut c, ack) = MqttClient::v5_with(s.mqtt, connect).await;
    assert!(ack.session_present);
    let got = drain_members(&mut [&mut c], 3).await;
    let got: Vec<(String, String)> = got.into_iter().map(|(_, t, p)| (t, p)).collect();
    assert_eq!(
        got,
        (0..3)
            .map(|i| ("jobs/x".to_string(), format!("j{i}")))
            .collect::<Vec<_>>()
    );
    c.send_v5(v5::Packet::Disconnect(Default::default())).await;
    drop(c);
    let (mut c, _) = MqttClient::v5(s.mqtt, "member-c", 0).await;
    poll_until("a clean start ended the group", || async {
        s.broker.shared_subscriptions().is_empty().then_some(())
    })
    .await;
    c.send_v5(v5::Packet::Disconnect(Default::default())).await;
    s.stop().await;
}

/// A shared subscription of one topic (no wildcard) is stored once: each message is
/// the topic's one row, which every group reads through its own acks (as a virtual
/// topic's groups); its members split the messages and get the topic's name; a
/// persistent member's group keeps what arrives while it is away, across a restart;
/// once every group has acked, the topic's cleanup deletes the rows; an ended group
/// holds none of them.
async fn a_shared_subscription_of_one_topic_is_stored_once(t: TestStore) {
    // The topic ticks every 50 ms (its cleanup).
    let serve =
        || async { mqtt_serve(broker(&t, policy(50, 400), 2).await, Security::default()).await };
    let s = serve().await;
    let (mut a, _) = MqttClient::v5(s.mqtt, "one-a", 0).await;
    let (mut b, _) = MqttClient::v5(s.mqtt, "one-b", 0).await;
    for c in [&mut a, &mut b] {
        assert_eq!(
            c.subscribe_v5(1, &[("$share/g/orders/eu", 1)]).await,
            vec![v5::SubscribeAckReason::GrantedQos1]
        );
    }
    // A second group, whose only member is a persistent session, away.
    let (mut away, _) = MqttClient::v5(s.mqtt, "one-away", 3_600).await;
    away.subscribe_v5(1, &[("$share/h/orders/eu", 1)]).await;
    away.send_v5(v5::Packet::Disconnect(Default::default()))
        .await;
    drop(away);
    let (mut sender, _) = MqttClient::v3(s.mqtt, "one-sender", true).await;
    for i in 0..20u16 {
        sender
            .publish_v3("orders/eu", format!("m{i}").as_bytes(), 1, i + 1)
            .await;
        assert!(matches!(
            sender.recv().await,
            Some(MqttPacket::V3(v3::Packet::PublishAck { .. }))
        ));
    }
    let got = drain_members(&mut [&mut a, &mut b], 20).await;
    let mut payloads: Vec<String> = got.iter().map(|(_, _, p)| p.clone()).collect();
    payloads.sort_by_key(|p| p[1..].parse::<u32>().unwrap());
    assert_eq!(
        payloads,
        (0..20).map(|i| format!("m{i}")).collect::<Vec<_>>(),
        "each message once between the members"
    );
    assert!(got.iter().all(|(_, topic, _)| topic == "orders/eu"));
    let store = s.broker.store();
    let topic = "topic://orders.eu";
    assert_eq!(store.count_messages(topic).await.unwrap(), 20);
    let holding = store.list_containers("", "\u{7f}", 100).await.unwrap();
    assert_eq!(
        holding,
        [topic],
        "the groups' queues hold no row of their own"
    );
    let h = "queue://$share.h.orders.eu";
    assert_eq!(
        store.count_messages(h).await.unwrap(),
        20,
        "the group away reads the topic's rows"
    );

    // Across a restart, the persistent member gets its group's messages.
    for c in [&mut a, &mut b] {
        c.send_v5(v5::Packet::Disconnect(Default::default())).await;
    }
    s.stop().await;
    let s = serve().await;
    let mut connect = v5_connect("one-away", 3_600);
    connect.clean_start = false;
    let (mut away, ack) = MqttClient::v5_with(s.mqtt, connect).await;
    assert!(ack.session_present);
    let got = drain_members(&mut [&mut away], 20).await;
    assert_eq!(
        got.iter()
            .map(|(_, t, p)| (t.as_str(), p.clone()))
            .collect::<Vec<_>>(),
        (0..20)
            .map(|i| ("orders/eu", format!("m{i}")))
            .collect::<Vec<_>>(),
        "in order, with the topic's name"
    );
    // Every group has acked (drain_members acks at QoS 1): the rows go.
    let store = s.broker.store();
    poll_until("the topic's cleanup deleted the rows", || async {
        (store.count_messages(topic).await.unwrap() == 0).then_some(())
    })
    .await;

    // The group ends with its member's session: it holds none of what comes later.
    away.send_v5(v5::Packet::Disconnect(Default::default()))
        .await;
    drop(away);
    let (mut away, _) = MqttClient::v5(s.mqtt, "one-away", 0).await;
    poll_until("a clean start ended the group", || async {
        s.broker.shared_subscriptions().is_empty().then_some(())
    })
    .await;
    let (mut sender, _) = MqttClient::v3(s.mqtt, "one-sender", true).await;
    sender.publish_v3("orders/eu", b"late", 1, 99).await;
    sender.recv().await;
    assert_eq!(
        store.count_messages(topic).await.unwrap(),
        0,
        "no group holds the topic's message: it is not stored"
    );
    assert_eq!(store.group_topic(h), None, "unbound");
    away.send_v5(v5::Packet::Disconnect(Default::default()))
        .await;
    s.stop().await;
}

/// A STOMP client logged in as `login` (passcode `secret`).
async fn stomp_as(addr: std::net::SocketAddr, login: &str) -> Client {
    let mut c = Client::open(addr).await;
    c.write(
        format!("CONNECT\naccept-version:1.2\nlogin:{login}\npasscode:secret\n\n\0").as_bytes(),
    )
    .await;
    assert_eq!(c.frame().await.unwrap().command, Command::Connected);
    c
}

/// Sends `frame`, which asks for a receipt, and returns `None` when the RECEIPT comes,
/// or the `error-code` of the ERROR that comes instead.
async fn stomp_outcome(c: &mut Client, frame: &str) -> Option<String> {
    c.write(frame.as_bytes()).await;
    let f = c.frame().await.unwrap();
    match f.command {
        Command::Receipt => None,
        Command::Error => Some(f.get("error-code").unwrap_or_default().to_string()),
        other => panic!("{other:?}: {f:?}"),
    }
}

/// A shared subscription is one group over both protocols (STOMP's
/// `shared-subscription-name` and MQTT's `$share` of the same name and topic), and
/// each way in asks the same rights: read to consume, admin to make it durable (a
/// persistent session's, or any STOMP share) and to end a STOMP share; a header a
/// sender sets under the broker's topic header name does not reach a member.
async fn a_shared_subscription_is_one_group_with_one_set_of_rights(t: TestStore) {
    let user = |login: &str, group: &str| User {
        login: login.into(),
        password_hash: hash_password("secret").unwrap(),
        certificate_subject: None,
        groups: vec![group.into()],
    };
    let security = Security {
        login_guard: Default::default(),
        temp_destination_authorization_entry: None,
        users: vec![user("alice", "plant"), user("boss", "admins")],
        authorization: vec![AuthorizationEntry {
            destination: "topic://plant.>".into(),
            read: vec!["plant".into(), "admins".into()],
            write: vec!["plant".into(), "admins".into()],
            admin: vec!["admins".into()],
        }],
    };
    let s = mqtt_server(&t, security).await;
    let subscribe = |id: &str| {
        format!("SUBSCRIBE\nid:{id}\ndestination:/topic/plant.a\nshared-subscription-name:g\nack:client-individual\nreceipt:r\n\n\0")
    };
    // An MQTT clean session makes the group with read alone.
    let mut connect = v5_connect("alice-m", 0);
    connect.username = Some(ByteString::from("alice"));
    connect.password = Some(Bytes::from_static(b"secret"));
    let (mut member, _) = MqttClient::v5_with(s.mqtt, connect).await;
    assert_eq!(
        member.subscribe_v5(1, &[("$share/g/plant/a", 1)]).await,
        vec![v5::SubscribeAckReason::GrantedQos1]
    );
    // A STOMP share is durable: joining it makes it so, which needs admin.
    let mut alice = stomp_as(s.stomp, "alice").await;
    assert_eq!(
        stomp_outcome(&mut alice, &subscribe("1")).await.as_deref(),
        Some("not-authorized")
    );
    let mut boss = stomp_as(s.stomp, "boss").await;
    assert_eq!(stomp_outcome(&mut boss, &subscribe("b")).await, None);
    // Durable now: read is enough to consume; ending it needs admin.
    let mut alice = stomp_as(s.stomp, "alice").await;
    assert_eq!(stomp_outcome(&mut alice, &subscribe("1")).await, None);
    assert_eq!(
        stomp_outcome(
            &mut alice,
            "UNSUBSCRIBE\nid:1\nshared-subscription-name:g\nreceipt:r\n\n\0"
        )
        .await
        .as_deref(),
        Some("not-authorized")
    );
    assert_eq!(s.broker.shared_subscriptions().len(), 1, "one group");
    // The MQTT member and the STOMP one share the messages; a sender's `ebb-topic`
    // header names nothing.
    let mut sender = stomp_as(s.stomp, "alice").await;
    for n in 0..10 {
        let frame = format!(
            "SEND\ndestination:/topic/plant.a\npersistent:true\nebb-topic:topic://plant.b\nreceipt:r\n\nm{n}\0"
        );
        assert_eq!(stomp_outcome(&mut sender, &frame).await, None);
    }
    let mut bodies = Vec::new();
    let mut quiet = 0;
    while bodies.len() < 10 && quiet < 20 {
        quiet += 1;
        while let Some(f) = boss.frame_within(100).await {
            assert_eq!(f.get("destination"), Some("/topic/plant.a"), "{f:?}");
            assert_eq!(f.get("ebb-topic"), None);
            let ack = f.get("ack").unwrap().to_string();
            boss.write(format!("ACK\nid:{ack}\n\n\0").as_bytes()).await;
            bodies.push(String::from_utf8_lossy(&f.body).to_string());
            quiet = 0;
        }
        for (_, topic, body) in drain_members(&mut [&mut member], 1).await {
            assert_eq!(topic, "plant/a");
            bodies.push(body);
            quiet = 0;
        }
    }
    bodies.sort_by_key(|b| b[1..].parse::<u32>().unwrap());
    assert_eq!(bodies, (0..10).map(|n| format!("m{n}")).collect::<Vec<_>>());
    // A wrong name is refused; the right one, with admin, ends the STOMP share's
    // durable membership: the group lives on while its MQTT member is connected.
    assert_eq!(
        stomp_outcome(
            &mut boss,
            "UNSUBSCRIBE\nid:b\nshared-subscription-name:other\nreceipt:r\n\n\0"
        )
        .await
        .as_deref(),
        Some("invalid-request")
    );
    let mut boss = stomp_as(s.stomp, "boss").await;
    assert_eq!(stomp_outcome(&mut boss, &subscribe("b")).await, None);
    assert_eq!(
        stomp_outcome(
            &mut boss,
            "UNSUBSCRIBE\nid:b\nshared-subscription-name:g\nreceipt:r\n\n\0"
        )
        .await,
        None
    );
    assert_eq!(
        s.broker.shared_subscriptions().len(),
        1,
        "the MQTT member holds it"
    );
    member
        .send_v5(v5::Packet::Disconnect(Default::default()))
        .await;
    poll_until("the group ended with its last member", || async {
        s.broker.shared_subscriptions().is_empty().then_some(())
    })
    .await;
    s.stop().await;
}

/// True when `client`'s persistent session is stored (its filters).
async fn has_session(s: &MqttServer, client: &str) -> bool {
    !s.broker
        .session_subscriptions("mqtt", client)
        .await
        .unwrap()
        .is_empty()
}

/// 5.0's session expiry interval: a persistent session offline for longer is deleted
/// with its durable subscription and backlog, also when the interval passes while
/// the broker is down; one that reconnects in time is kept (a connected session has
/// no deadline), and one with a longer interval stays.
async fn session_expiry_ends_an_offline_session(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let subscribe = |client: &'static str, expiry: u32| {
        let addr = s.mqtt;
        async move {
            let (mut c, _) = MqttClient::v5(addr, client, expiry).await;
            c.subscribe_v5(1, &[(&format!("exp/{client}/#"), 1)]).await;
            c
        }
    };
    let short = subscribe("short", 1).await;
    let long = subscribe("long", 3_600).await;
    let back = subscribe("back", 1).await;
    for mut c in [short, long, back] {
        c.send_v5(v5::Packet::Disconnect(Default::default())).await;
    }
    let (mut sender, _) = MqttClient::v3(s.mqtt, "sender", true).await;
    sender.publish_v3("exp/short/x", b"m", 1, 1).await;
    sender.recv().await;
    let broker = s.broker.clone();
    let stored = |client: &'static str| {
        let broker = broker.clone();
        async move { broker.session_expires_at("mqtt", client).await.unwrap() }
    };
    poll_until("an offline session has a deadline", || async {
        stored("short")
            .await
            .filter(|d| *d < ebb::mqtt::session::connected(0))
    })
    .await;
    // `back` resumes before its deadline: connected, it has none, and stays.
    let mut connect = v5_connect("back", 1);
    connect.clean_start = false;
    let (mut back, ack) = MqttClient::v5_with(s.mqtt, connect).await;
    assert!(ack.session_present);
    assert_eq!(
        stored("back").await,
        Some(ebb::mqtt::session::connected(1)),
        "a connected session's deadline is not due: it says its interval"
    );
    poll_until("the short session expired", || async {
        (!has_session(&s, "short").await).then_some(())
    })
    .await;
    assert!(
        !s.broker
            .durable_subscription_exists("topic://exp.short.>", "short", "exp/short/#")
            .await
            .unwrap(),
        "its durable subscription and backlog went with it"
    );
    assert!(
        has_session(&s, "long").await,
        "a longer interval is not over"
    );
    assert!(has_session(&s, "back").await, "a connected session stays");
    back.send_v5(v5::Packet::Disconnect(Default::default()))
        .await;
    poll_until("back's deadline stored", || async {
        stored("back")
            .await
            .filter(|d| *d < ebb::mqtt::session::connected(0))
    })
    .await;
    // `held` is connected when the broker stops: its interval counts from the start.
    let _held = subscribe("held", 1).await;
    // `back`'s new deadline passes while the broker is down.
    s.stop().await;
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let s = mqtt_server(&t, Security::default()).await;
    poll_until(
        "the session that expired while the broker was down ended",
        || async { (!has_session(&s, "back").await).then_some(()) },
    )
    .await;
    poll_until(
        "the session connected at the stop expired after the start",
        || async { (!has_session(&s, "held").await).then_some(()) },
    )
    .await;
    assert!(has_session(&s, "long").await);
    // The ended sessions' deadline rows go last.
    let left = poll_until("only the long session's deadline left", || async {
        let left = s.broker.session_expiries("mqtt", None, 10).await.unwrap();
        (left.len() == 1).then_some(left)
    })
    .await;
    assert_eq!(left[0].0, "long");
    s.stop().await;
}

/// `c`'s next packet is a 5.0 PUBREC of `id` (panics on anything else).
async fn pubrec_of(c: &mut MqttClient, id: u16) {
    match c.recv().await {
        Some(MqttPacket::V5(v5::Packet::PublishReceived(a))) => assert_eq!(a.packet_id, pid(id)),
        other => panic!("no PUBREC {id}: {other:?}"),
    }
}

/// A 5.0 PUBREL of `id`.
fn pubrel(id: u16) -> v5::Packet {
    v5::Packet::PublishRelease(v5::PublishAck2 {
        packet_id: pid(id),
        reason_code: v5::PublishAck2Reason::Success,
        properties: Vec::new(),
        reason_string: None,
    })
}

/// QoS 2 exactly once across a restart of the broker: a persistent session's QoS 2
/// PUBLISH is held in the store under its packet id from PUBREC to PUBREL, so the
/// same PUBLISH resent after the restart (its PUBREC lost) is answered without being
/// stored again, and the PUBREL delivers it once; a clean start drops what is held.
async fn qos2_is_exactly_once_across_a_restart(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let (mut publisher, _) = MqttClient::v5(s.mqtt, "q2-pub", 3_600).await;
    publisher
        .publish_v5("q2/a", b"once", 2, 7, Default::default())
        .await;
    pubrec_of(&mut publisher, 7).await;
    let name = "mqtt:6:q2-pub:00007";
    assert!(s.broker.is_held(name).await.unwrap(), "held until PUBREL");
    drop(publisher);
    s.stop().await;

    let s = mqtt_server(&t, Security::default()).await;
    assert!(
        s.broker.is_held(name).await.unwrap(),
        "held across the restart"
    );
    let (mut sub, _) = MqttClient::v3(s.mqtt, "q2-sub", true).await;
    sub.subscribe_v3(1, &[("q2/#", 2)]).await;
    let mut connect = v5_connect("q2-pub", 3_600);
    connect.clean_start = false;
    let (mut publisher, ack) = MqttClient::v5_with(s.mqtt, connect).await;
    assert!(ack.session_present);
    // Resent without DUP, as some clients do: found held all the same.
    let again = publish("q2/a", b"once", 2, 7, Some(Default::default()));
    publisher
        .send_v5(v5::Packet::Publish(Box::new(again)))
        .await;
    pubrec_of(&mut publisher, 7).await;
    assert!(
        sub.pong_is_next(false).await,
        "nothing delivered before PUBREL"
    );
    publisher.send_v5(pubrel(7)).await;
    assert!(matches!(
        publisher.recv().await,
        Some(MqttPacket::V5(v5::Packet::PublishComplete(_)))
    ));
    let got = next_publish(&mut sub).await;
    assert_eq!((&*got.topic, &got.payload[..]), ("q2/a", &b"once"[..]));
    let id = got.packet_id.unwrap();
    sub.send_v3(v3::Packet::PublishReceived { packet_id: id })
        .await;
    sub.recv().await;
    sub.send_v3(v3::Packet::PublishComplete { packet_id: id })
        .await;
    assert!(sub.pong_is_next(false).await, "delivered once");
    assert!(!s.broker.is_held(name).await.unwrap());
    // A PUBREL resent after its PUBCOMP finds nothing held: answered, nothing sent.
    publisher.send_v5(pubrel(7)).await;
    assert!(matches!(
        publisher.recv().await,
        Some(MqttPacket::V5(v5::Packet::PublishComplete(_)))
    ));
    assert!(sub.pong_is_next(false).await);

    // A retained QoS 2 message is retained at PUBREL, not before.
    let mut retained = publish("q3/r", b"kept", 2, 9, Some(Default::default()));
    retained.retain = true;
    publisher
        .send_v5(v5::Packet::Publish(Box::new(retained)))
        .await;
    pubrec_of(&mut publisher, 9).await;
    let (mut early, _) = MqttClient::v3(s.mqtt, "q2-early", true).await;
    early.subscribe_v3(1, &[("q3/r", 2)]).await;
    assert!(
        early.pong_is_next(false).await,
        "not retained before PUBREL"
    );
    publisher.send_v5(pubrel(9)).await;
    assert!(matches!(
        publisher.recv().await,
        Some(MqttPacket::V5(v5::Packet::PublishComplete(_)))
    ));
    let live = next_publish(&mut early).await;
    assert_eq!(&live.payload[..], b"kept");
    assert!(!live.retain, "a live delivery to an existing subscription");
    let (mut late, _) = MqttClient::v3(s.mqtt, "q2-late", true).await;
    late.subscribe_v3(1, &[("q3/r", 2)]).await;
    let kept = next_publish(&mut late).await;
    assert_eq!((&kept.payload[..], kept.retain), (&b"kept"[..], true));

    // A held copy for a shared subscription whose group ended meanwhile is dropped
    // at PUBREL: the group's queue is not made again.
    let (mut member, _) = MqttClient::v5(s.mqtt, "q2-member", 0).await;
    member.subscribe_v5(1, &[("$share/h/q3/e", 1)]).await;
    publisher
        .publish_v5("q3/e", b"late", 2, 10, Default::default())
        .await;
    pubrec_of(&mut publisher, 10).await;
    member
        .send_v5(v5::Packet::Disconnect(Default::default()))
        .await;
    poll_until("the group ended", || async {
        s.broker.shared_subscriptions().is_empty().then_some(())
    })
    .await;
    publisher.send_v5(pubrel(10)).await;
    assert!(matches!(
        publisher.recv().await,
        Some(MqttPacket::V5(v5::Packet::PublishComplete(_)))
    ));
    let listed = s.broker.list_destinations(None, 1_000).await.unwrap();
    assert!(
        !listed
            .destinations
            .iter()
            .any(|d| d.stats.destination.contains("$share")),
        "the ended group's queue is not made again"
    );

    // Held, then the session ends with a clean start: dropped, never delivered.
    publisher
        .publish_v5("q2/a", b"dropped", 2, 8, Default::default())
        .await;
    pubrec_of(&mut publisher, 8).await;
    publisher
        .send_v5(v5::Packet::Disconnect(Default::default()))
        .await;
    drop(publisher);
    let (mut publisher, _) = MqttClient::v5(s.mqtt, "q2-pub", 0).await;
    assert!(!s.broker.is_held("mqtt:6:q2-pub:00008").await.unwrap());
    publisher
        .send_v5(v5::Packet::Disconnect(Default::default()))
        .await;
    assert!(
        sub.pong_is_next(false).await,
        "a dropped message is never delivered"
    );
    s.stop().await;
}

/// 5.0's DISCONNECT with session expiry 0 ends a persistent session at once: its
/// subscriptions, their durable subscriptions and its mark go, and the next CONNECT
/// finds no session; a DISCONNECT that gives an interval to a session whose CONNECT
/// had none is a protocol error (DISCONNECT 0x82); and a SUBSCRIBE with a
/// subscription identifier, which CONNACK says is not offered, is refused (0xA1).
async fn a_disconnect_with_expiry_0_ends_the_session(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let (mut c, _) = MqttClient::v5(s.mqtt, "d0", 600).await;
    c.subscribe_v5(1, &[("d0/#", 1)]).await;
    c.send_v5(v5::Packet::Disconnect(v5::Disconnect {
        session_expiry_interval_secs: Some(0),
        ..Default::default()
    }))
    .await;
    drop(c);
    poll_until("the session ended", || async {
        let subs = s.broker.session_subscriptions("mqtt", "d0").await.unwrap();
        let mark = s.broker.session_expires_at("mqtt", "d0").await.unwrap();
        (subs.is_empty() && mark.is_none()).then_some(())
    })
    .await;
    assert!(!s
        .broker
        .durable_subscription_exists("topic://d0.>", "d0", "d0/#")
        .await
        .unwrap());
    let mut connect = v5_connect("d0", 600);
    connect.clean_start = false;
    let (mut c, ack) = MqttClient::v5_with(s.mqtt, connect).await;
    assert!(!ack.session_present);
    c.send_v5(v5::Packet::Disconnect(Default::default())).await;
    drop(c);
    let (mut c, _) = MqttClient::v5(s.mqtt, "d1", 0).await;
    c.send_v5(v5::Packet::Disconnect(v5::Disconnect {
        session_expiry_interval_secs: Some(60),
        ..Default::default()
    }))
    .await;
    match c.recv().await {
        Some(MqttPacket::V5(v5::Packet::Disconnect(d))) => {
            assert_eq!(u8::from(d.reason_code), 0x82)
        }
        other => panic!("no DISCONNECT 0x82: {other:?}"),
    }
    // A subscription identifier, which CONNACK says is not offered: refused (0xA1).
    let (mut c, ack) = MqttClient::v5(s.mqtt, "d2", 0).await;
    assert!(!ack.subscription_identifiers_available);
    c.send_v5(v5::Packet::Subscribe(v5::Subscribe {
        packet_id: pid(1),
        id: Some(std::num::NonZeroU32::new(7).unwrap()),
        user_properties: Vec::new(),
        topic_filters: vec![(ByteString::from("d2/x"), Default::default())],
    }))
    .await;
    match c.recv().await {
        Some(MqttPacket::V5(v5::Packet::Disconnect(d))) => {
            assert_eq!(u8::from(d.reason_code), 0xA1)
        }
        other => panic!("no DISCONNECT 0xA1: {other:?}"),
    }
    s.stop().await;
}

/// MQTT-4.7.2-1: a filter that starts with a wildcard (`#`, `+/+`) does not match a
/// topic name that starts with `$`, and Ebb's advisory topics
/// (`ActiveMQ/Advisory/...`) reach only a filter that names that prefix literally;
/// whether the subscription is non-durable, durable (a persistent session) or shared,
/// and for retained messages too. Filters that name `$SYS` or the advisory prefix
/// get what they name.
async fn wildcards_skip_dollar_topics_and_advisories(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let (mut all, _) = MqttClient::v5(s.mqtt, "all", 0).await;
    all.subscribe_v5(1, &[("#", 0)]).await;
    let (mut two, _) = MqttClient::v5(s.mqtt, "two", 0).await;
    two.subscribe_v5(1, &[("+/+", 0)]).await;
    let (mut kept, _) = MqttClient::v3(s.mqtt, "kept", false).await;
    kept.subscribe_v3(1, &[("#", 1)]).await;
    let (mut shared, _) = MqttClient::v5(s.mqtt, "shared", 0).await;
    shared.subscribe_v5(1, &[("$share/g/#", 0)]).await;
    let (mut sys, _) = MqttClient::v5(s.mqtt, "sys", 0).await;
    sys.subscribe_v5(1, &[("$SYS/#", 0)]).await;
    let (mut adv, _) = MqttClient::v5(s.mqtt, "adv", 0).await;
    adv.subscribe_v5(1, &[("ActiveMQ/Advisory/#", 0)]).await;
    // A subscription to one topic: an advisory says so.
    let (mut one, _) = MqttClient::v5(s.mqtt, "one", 0).await;
    one.subscribe_v5(1, &[("adv/one", 0)]).await;
    let advisory = next_publish(&mut adv).await;
    assert!(
        advisory.topic.starts_with("ActiveMQ/Advisory/"),
        "{advisory:?}"
    );
    let (mut publisher, _) = MqttClient::v5(s.mqtt, "publisher", 0).await;
    for (topic, id) in [("$SYS/x", 1), ("a/b", 2)] {
        publisher
            .publish_v5(topic, topic.as_bytes(), 1, id, Default::default())
            .await;
        assert!(matches!(
            publisher.recv().await,
            Some(MqttPacket::V5(v5::Packet::PublishAck(a))) if a.reason_code == v5::PublishAckReason::Success
        ));
    }
    let got = next_publish(&mut sys).await;
    assert_eq!(&*got.topic, "$SYS/x", "a filter naming `$SYS` reads it");
    for (name, c, v5) in [
        ("#", &mut all, true),
        ("+/+", &mut two, true),
        ("# (durable)", &mut kept, false),
        ("$share/g/#", &mut shared, true),
    ] {
        let got = next_publish(c).await;
        assert_eq!(&*got.topic, "a/b", "{name} got {got:?}");
        if let Some(id) = got.packet_id {
            assert!(!v5, "{name}: QoS 0");
            c.send_v3(v3::Packet::PublishAck { packet_id: id }).await;
        }
        assert!(c.pong_is_next(v5).await, "{name} got more");
    }
    // Retained: `#` gets none of `$SYS/ret`'s; `$SYS/#` does.
    let mut retained = publish("$SYS/ret", b"r", 1, 3, Some(Default::default()));
    retained.retain = true;
    publisher
        .send_v5(v5::Packet::Publish(Box::new(retained)))
        .await;
    assert!(matches!(
        publisher.recv().await,
        Some(MqttPacket::V5(v5::Packet::PublishAck(_)))
    ));
    let (mut late, _) = MqttClient::v5(s.mqtt, "late", 0).await;
    late.subscribe_v5(1, &[("#", 1)]).await;
    assert_eq!(retained_after(&mut late).await, vec![]);
    let (mut late_sys, _) = MqttClient::v5(s.mqtt, "late-sys", 0).await;
    late_sys.subscribe_v5(1, &[("$SYS/+", 1)]).await;
    assert_eq!(
        retained_after(&mut late_sys).await,
        vec![("$SYS/ret".into(), b"r".to_vec(), 1, true)]
    );
    s.stop().await;
}

/// The size of `p` as a 5.0 PUBLISH on the wire, bytes, as the codec writes it.
fn v5_size(p: &rmqtt_codec::types::Publish) -> usize {
    use tokio_util::codec::Encoder;
    let mut buf = bytes::BytesMut::new();
    v5::Codec::new(0, 0)
        .encode(v5::Packet::Publish(Box::new(p.clone())), &mut buf)
        .unwrap();
    buf.len()
}

/// 5.0's maximum packet size of the client: a delivery whose PUBLISH, as encoded
/// (fixed header, topic, packet id, properties, payload), is exactly the limit goes
/// out; one byte more is dropped (acked as if delivered, and counted in
/// `ebb_mqtt_deliveries_too_large_total`), and the next that fits goes. Two limits:
/// 64 bytes at QoS 0 without properties, 100 bytes at QoS 1 with a user property.
async fn a_delivery_is_dropped_only_when_it_does_not_fit(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    #[cfg(feature = "cli")]
    let metrics = ebb::http::HttpServer::start(
        ebb::http::HttpOptions::new("127.0.0.1:0".parse().unwrap()),
        s.broker.clone(),
    )
    .await
    .expect("the metrics endpoint starts");
    #[cfg(feature = "cli")]
    let dropped = || async {
        let text = ebb::cli::stat::fetch(&metrics.local_addr().to_string())
            .await
            .unwrap();
        ebb::cli::stat::parse(&text)
            .unwrap()
            .iter()
            .filter(|s| s.name == "ebb_mqtt_deliveries_too_large_total")
            .map(|s| s.value)
            .sum::<f64>()
    };
    #[cfg(feature = "cli")]
    let before = dropped().await;
    let user = vec![(ByteString::from("unit"), ByteString::from("celsius"))];
    for (limit, q, props) in [(64u32, 0u8, Vec::new()), (100, 1, user.clone())] {
        let topic = format!("fit/{limit}");
        let mut connect = v5_connect(&format!("small-{limit}"), 0);
        connect.max_packet_size = std::num::NonZeroU32::new(limit);
        let (mut small, _) = MqttClient::v5_with(s.mqtt, connect).await;
        small.subscribe_v5(1, &[(&topic, q)]).await;
        // The payload whose delivery is `limit` bytes.
        let properties = v5::PublishProperties {
            user_properties: props.clone(),
            ..Default::default()
        };
        let fits = (0..limit as usize)
            .find(|n| {
                v5_size(&publish(
                    &topic,
                    &vec![b'x'; *n],
                    q,
                    1,
                    Some(properties.clone()),
                )) == limit as usize
            })
            .expect("a payload fits exactly");
        let (mut publisher, _) = MqttClient::v5(s.mqtt, &format!("big-{limit}"), 0).await;
        for (id, n) in [(1, fits), (2, fits + 1), (3, 1)] {
            publisher
                .publish_v5(&topic, &vec![b'x'; n], 1, id, properties.clone())
                .await;
            assert!(matches!(
                publisher.recv().await,
                Some(MqttPacket::V5(v5::Packet::PublishAck(_)))
            ));
        }
        for n in [fits, 1] {
            let got = next_publish(&mut small).await;
            assert_eq!(got.payload.len(), n, "limit {limit}: {got:?}");
            if n == fits {
                assert_eq!(v5_size(&got), limit as usize, "exactly the limit");
            }
            if let Some(id) = got.packet_id {
                small
                    .send_v5(v5::Packet::PublishAck(v5::PublishAck {
                        packet_id: id,
                        reason_code: v5::PublishAckReason::Success,
                        properties: Vec::new(),
                        reason_string: None,
                    }))
                    .await;
            }
        }
        assert!(small.pong_is_next(true).await);
    }
    #[cfg(feature = "cli")]
    {
        let after = poll_until("the drops are counted", || async {
            let now = dropped().await;
            (now >= before + 2.0).then_some(now)
        })
        .await;
        assert!(after >= before + 2.0);
        metrics.stop().await;
    }
    s.stop().await;
}

/// 5.0: a will is published when its delay passes or when its session ends,
/// whichever comes first: a session of 1 s, or a clean one (which ends with its
/// connection), does not wait for a will delay of an hour.
async fn a_will_goes_when_its_session_ends_before_its_delay(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let (mut watcher, _) = MqttClient::v5(s.mqtt, "will-watcher", 0).await;
    watcher.subscribe_v5(1, &[("gone/#", 0)]).await;
    for (client, expiry) in [("short", 1), ("clean", 0)] {
        let mut connect = v5_connect(client, expiry);
        let mut will = will_of(&format!("gone/{client}"), b"ended", 0);
        will.will_delay_interval_sec = Some(3_600);
        connect.last_will = Some(will);
        let (c, _) = MqttClient::v5_with(s.mqtt, connect).await;
        drop(c);
        let will = next_publish(&mut watcher).await;
        assert_eq!(
            (&*will.topic, &will.payload[..]),
            (format!("gone/{client}").as_str(), &b"ended"[..])
        );
    }
    s.stop().await;
}

/// An empty client id: 3.1.1 with clean session 0 is answered CONNACK 0x02
/// (identifier rejected, MQTT-3.1.3-8) before the connection closes; 5.0 without
/// clean start is given one (CONNACK's assigned client identifier).
async fn an_empty_client_id_is_answered_by_connack(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let mut old = MqttClient::open_v3(s.mqtt).await;
    old.send_v3(v3::Packet::Connect(Box::new(v3::Connect {
        clean_session: false,
        keep_alive: 60,
        client_id: ByteString::from(""),
        ..Default::default()
    })))
    .await;
    match old.recv().await {
        Some(MqttPacket::V3(v3::Packet::ConnectAck(a))) => {
            assert_eq!(a.return_code, v3::ConnectAckReason::IdentifierRejected)
        }
        other => panic!("no CONNACK 0x02: {other:?}"),
    }
    old.closed().await;
    let mut connect = v5_connect("", 60);
    connect.clean_start = false;
    let (mut new, ack) = MqttClient::v5_with(s.mqtt, connect).await;
    assert_eq!(ack.reason_code, v5::ConnectAckReason::Success);
    assert!(
        ack.assigned_client_id
            .as_deref()
            .is_some_and(|id| id.starts_with("ebb-mqtt-")),
        "{ack:?}"
    );
    assert!(new.pong_is_next(true).await);
    s.stop().await;
}

/// The receive maximum CONNACK advertises is enforced: a 5.0 client with that many
/// QoS 2 publishes unanswered by PUBCOMP (no PUBREL sent) may send no more; one
/// released frees a place; the next over it gets DISCONNECT 0x93.
async fn the_receive_maximum_is_enforced(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let (mut c, ack) = MqttClient::v5(s.mqtt, "eager", 0).await;
    let max = ack.receive_max.get();
    assert_eq!(max, ebb::mqtt::RECEIVE_MAXIMUM);
    for id in 1..=max {
        c.publish_v5("rm/x", b"q2", 2, id, Default::default()).await;
    }
    for id in 1..=max {
        pubrec_of(&mut c, id).await;
    }
    c.send_v5(pubrel(1)).await;
    assert!(matches!(
        c.recv().await,
        Some(MqttPacket::V5(v5::Packet::PublishComplete(a))) if a.packet_id == pid(1)
    ));
    c.publish_v5("rm/x", b"q2", 2, max + 1, Default::default())
        .await;
    pubrec_of(&mut c, max + 1).await;
    c.publish_v5("rm/x", b"over", 2, max + 2, Default::default())
        .await;
    let told = c.closed().await;
    assert!(
        told.iter().any(|p| matches!(p, MqttPacket::V5(v5::Packet::Disconnect(d)) if u8::from(d.reason_code) == 0x93)),
        "{told:?}"
    );
    s.stop().await;
}

/// A 5.0 PUBLISH with topic alias 0 gets DISCONNECT 0x94 (topic alias invalid), as
/// one over the topic alias maximum does.
async fn topic_alias_0_is_invalid(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let (mut c, _) = MqttClient::v5(s.mqtt, "alias-0", 0).await;
    // PUBLISH QoS 0 to `a/b`, properties: topic alias 0; payload `x`.
    c.send_bytes(b"\x30\x0a\x00\x03a/b\x03\x23\x00\x00x").await;
    let told = c.closed().await;
    assert!(
        told.iter().any(|p| matches!(p, MqttPacket::V5(v5::Packet::Disconnect(d)) if d.reason_code == v5::DisconnectReasonCode::TopicAliasInvalid)),
        "{told:?}"
    );
    let (mut c, _) = MqttClient::v5(s.mqtt, "alias-65", 0).await;
    let properties = v5::PublishProperties {
        topic_alias: std::num::NonZeroU16::new(ebb::mqtt::TOPIC_ALIASES + 1),
        ..Default::default()
    };
    c.publish_v5("a/b", b"x", 0, 0, properties).await;
    let told = c.closed().await;
    assert!(
        told.iter().any(|p| matches!(p, MqttPacket::V5(v5::Packet::Disconnect(d)) if d.reason_code == v5::DisconnectReasonCode::TopicAliasInvalid)),
        "{told:?}"
    );
    s.stop().await;
}

/// A topic level `>` or `*` (plain characters to MQTT, wildcards to Ebb) is mapped:
/// `lit/>` is `/topic/lit.+>` and `lit/*` is `/topic/lit.+*` (`+` cannot be in an
/// MQTT topic name, so no other name maps there), both ways, and MQTT's filters
/// match them as MQTT says.
async fn levels_that_are_ebb_wildcards_are_mapped(t: TestStore) {
    let s = mqtt_server(&t, Security::default()).await;
    let mut stomp = Client::connected(s.stomp, None).await;
    stomp
        .write(b"SUBSCRIBE\nid:1\ndestination:/topic/lit.+>\nreceipt:r\n\n\0")
        .await;
    receipt(&mut stomp, "r").await;
    let (mut exact, _) = MqttClient::v5(s.mqtt, "exact", 0).await;
    assert_eq!(
        exact.subscribe_v5(1, &[("lit/>", 1)]).await,
        vec![v5::SubscribeAckReason::GrantedQos1]
    );
    let (mut any, _) = MqttClient::v5(s.mqtt, "any", 0).await;
    any.subscribe_v5(1, &[("lit/+", 0)]).await;
    let (mut publisher, _) = MqttClient::v5(s.mqtt, "gt", 0).await;
    publisher
        .publish_v5("lit/>", b"gt", 1, 1, Default::default())
        .await;
    match publisher.recv().await {
        Some(MqttPacket::V5(v5::Packet::PublishAck(a))) => {
            assert_eq!(a.reason_code, v5::PublishAckReason::Success)
        }
        other => panic!("{other:?}"),
    }
    let m = stomp.frame().await.expect("MESSAGE");
    assert_eq!(m.get("destination"), Some("/topic/lit.+>"));
    assert_eq!(&m.body[..], b"gt");
    for c in [&mut exact, &mut any] {
        let got = next_publish(c).await;
        assert_eq!((&*got.topic, &got.payload[..]), ("lit/>", &b"gt"[..]));
    }
    stomp
        .write(b"SEND\ndestination:/topic/lit.+*\nreceipt:s\n\nstar\0")
        .await;
    receipt(&mut stomp, "s").await;
    let got = next_publish(&mut any).await;
    assert_eq!((&*got.topic, &got.payload[..]), ("lit/*", &b"star"[..]));
    s.stop().await;
}

on_every_backend!(
    #[actix_rt::test]
    every_qos_round_trips,
    wildcards_skip_dollar_topics_and_advisories,
    a_delivery_is_dropped_only_when_it_does_not_fit,
    a_will_goes_when_its_session_ends_before_its_delay,
    an_empty_client_id_is_answered_by_connack,
    the_receive_maximum_is_enforced,
    topic_alias_0_is_invalid,
    levels_that_are_ebb_wildcards_are_mapped,
    a_disconnect_with_expiry_0_ends_the_session,
    qos2_is_exactly_once_across_a_restart,
    session_expiry_ends_an_offline_session,
    shared_subscriptions_split_the_messages,
    a_shared_subscription_of_one_topic_is_stored_once,
    a_shared_subscription_is_one_group_with_one_set_of_rights,
    a_persistent_session_keeps_its_backlog_across_a_restart,
    a_second_connect_takes_over_and_the_will_goes,
    stomp_and_mqtt_talk_to_each_other,
    rights_apply_as_over_stomp,
    retained_messages_are_kept_one_per_topic,
    fan_out_loses_nothing_read,
    bad_packets_close_their_connection_and_lose_nothing,
);

/// `mosquitto_clients_round_trip` on both backends, ignored (with the reason) without
/// `EBB_TEST_MOSQUITTO`, except under CI.
mod mosquitto_clients_round_trip {
    #[actix_rt::test]
    #[cfg_attr(
        not(ebb_test_mosquitto),
        ignore = "set EBB_TEST_MOSQUITTO=/usr/bin (the folder of mosquitto_pub and mosquitto_sub) to run the mosquitto clients' test"
    )]
    async fn sqlite() {
        super::mosquitto_clients_round_trip(ebb::test_util::TestStore::sqlite()).await;
    }

    #[actix_rt::test]
    #[cfg_attr(
        not(ebb_test_mosquitto),
        ignore = "set EBB_TEST_MOSQUITTO=/usr/bin (the folder of mosquitto_pub and mosquitto_sub) to run the mosquitto clients' test"
    )]
    #[cfg_attr(
        all(ebb_test_mosquitto, not(ebb_test_postgres)),
        ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
    )]
    async fn postgres() {
        super::mosquitto_clients_round_trip(ebb::test_util::TestStore::postgres()).await;
    }
}

/// What every MQTT connection's task holds whatever it does: its future, whose size
/// is that of its largest state. The long paths (CONNECT, PUBLISH, SUBSCRIBE, PUBREL,
/// the close) are boxed, so a store call added to one of them does not grow every
/// idle connection (it did: 7,256 bytes, 10,958 per idle connection in `cargo bench
/// --bench mqtt`, against 2,536 and 6,209 with them boxed). Bytes, not time.
#[actix_rt::test]
async fn an_mqtt_connections_task_stays_small() {
    use ebb::transport::Protocol;
    let t = TestStore::sqlite();
    let broker = ebb::test_util::broker(&t, ebb::Policy::default(), 2).await;
    let mqtt = ebb::mqtt::Mqtt::new(broker.clone(), ebb::mqtt::MqttConfig::default());
    let (io, _peer) = tokio::io::duplex(64);
    let accepted = ebb::transport::Accepted {
        session_id: "size".into(),
        peer: "127.0.0.1:1".parse().unwrap(),
        transport: ebb::transport::connections::Transport::Tcp,
        certificate_subject: None,
    };
    let task = mqtt.serve(io, accepted);
    let size = std::mem::size_of_val(&task);
    drop(task);
    assert!(
        size <= 4_096,
        "an MQTT connection's task is {size} bytes: box the path that grew it"
    );
    broker.shutdown().await.unwrap();
}
