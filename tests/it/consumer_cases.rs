//! The second set of STOMP cases, about what a consumer receives: STOMP-13 (a queue
//! browse lists without consuming), STOMP-11 (acks follow the negotiated version),
//! NACK-10 (NACK redelivers per the policy, then dead-letters), STOMP-10 (ids are
//! unique per connection, nothing after an UNSUBSCRIBE receipt), CONN-11 (vanished
//! connections leave no consumers), STOMP-12 (headers and bodies byte for byte), CONN-10 (a client id
//! is connected once), DUR-11 (a durable name moves between topics), exclusive
//! consumers, message groups, noLocal, and every SUBSCRIBE header that changes
//! delivery honoured or refused.

use ebb::stomp::frame::{Command, Frame};
use ebb::test_util::stomp::*;
use ebb::test_util::*;

async fn send(c: &mut Client, destination: &str, body: &str, receipt_id: &str) {
    c.write(
        format!(
            "SEND\ndestination:{destination}\npersistent:true\nreceipt:{receipt_id}\n\n{body}\0"
        )
        .as_bytes(),
    )
    .await;
    receipt(c, receipt_id).await;
}

/// Frames until the first one `stop` accepts (included), or a panic after 3 s of
/// silence.
async fn frames_until(c: &mut Client, stop: impl Fn(&Frame) -> bool) -> Vec<Frame> {
    let mut frames = Vec::new();
    loop {
        let f = c.frame().await.expect("a frame within 3 s");
        let done = stop(&f);
        frames.push(f);
        if done {
            return frames;
        }
    }
}

fn bodies(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f.command == Command::Message && f.get("browser").is_none())
        .map(|f| String::from_utf8_lossy(&f.body).into_owned())
        .collect()
}

/// STOMP-13: `browser:true` lists b0..b9 and ends with a MESSAGE `browser:end`; the
/// queue still holds all ten afterwards. Non-persistent messages are listed in their
/// places; more than a page (100) is listed in order.
async fn stomp_13_browsing_does_not_consume(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut p = Client::connected(s.addr, None).await;
    for i in 0..10 {
        send(&mut p, "/queue/BR", &format!("b{i}"), &format!("r{i}")).await;
    }
    let mut b = Client::connected(s.addr, None).await;
    b.write(b"SUBSCRIBE\ndestination:/queue/BR\nid:12345\nbrowser:true\nreceipt:s\n\n\0")
        .await;
    receipt(&mut b, "s").await;
    let frames = frames_until(&mut b, |f| f.get("browser") == Some("end")).await;
    let expected: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
    assert_eq!(bodies(&frames), expected);
    let end = frames.last().unwrap();
    assert_eq!(end.command, Command::Message);
    assert_eq!(end.get("subscription"), Some("12345"));
    assert_eq!(end.get("destination"), Some("/queue/BR"));
    assert!(end.body.is_empty());
    for f in &frames {
        assert_eq!(f.get("ack"), None, "a browse acks nothing: {f:?}");
    }
    assert!(b.quiet().await.is_none(), "nothing after the end");
    b.write(b"UNSUBSCRIBE\nid:12345\nreceipt:u\n\n\0").await;
    receipt(&mut b, "u").await;
    assert_eq!(s.broker.queue_stats("BR").await.unwrap().dispatched, 0);

    // A consumer still receives all ten.
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\ndestination:/queue/BR\nid:1\nack:client-individual\nactivemq.prefetchSize:20\n\n\0")
        .await;
    let mut got = Vec::new();
    for _ in 0..10 {
        got.push(c.frame().await.expect("a MESSAGE"));
    }
    assert_eq!(bodies(&got), expected);

    // 150 messages, a non-persistent one among them: two pages, in order.
    for i in 0..150 {
        let persistent = if i == 70 { "false" } else { "true" };
        p.write(
            format!("SEND\ndestination:/queue/BIG\npersistent:{persistent}\n\nm{i}\0").as_bytes(),
        )
        .await;
    }
    p.write(b"SEND\ndestination:/queue/BIG\nreceipt:last\npersistent:true\n\nm150\0")
        .await;
    receipt(&mut p, "last").await;
    let mut b = Client::connected(s.addr, None).await;
    b.write(b"SUBSCRIBE\ndestination:/queue/BIG\nid:b\nbrowser:true\n\n\0")
        .await;
    let frames = frames_until(&mut b, |f| f.get("browser") == Some("end")).await;
    let expected: Vec<String> = (0..=150).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies(&frames), expected);
    let stats = s.broker.queue_stats("BIG").await.unwrap();
    assert_eq!(stats.dispatched, 0);
    assert_eq!(stats.pending_non_persistent, 1, "the browse took nothing");

    // With a selector, only what it matches is listed.
    b.write(b"SUBSCRIBE\ndestination:/queue/BIG\nid:sel\nbrowser:true\nselector:JMSDeliveryMode = 'NON_PERSISTENT'\n\n\0")
        .await;
    let frames = frames_until(&mut b, |f| f.get("browser") == Some("end")).await;
    assert_eq!(bodies(&frames), ["m70"]);
    s.stop().await;
}

/// STOMP-13's refusals: browsing a topic, with an ack mode, or on STOMP 1.0, is an
/// ERROR with the receipt id, and nothing is subscribed.
async fn browsing_is_refused_where_it_means_nothing(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    for frame in [
        "SUBSCRIBE\ndestination:/topic/T\nid:1\nbrowser:true\nreceipt:x\n\n\0",
        "SUBSCRIBE\ndestination:/queue/Q\nid:1\nbrowser:true\nack:client\nreceipt:x\n\n\0",
    ] {
        let mut c = Client::connected(s.addr, None).await;
        c.write(frame.as_bytes()).await;
        let f = c.frame().await.expect("an ERROR");
        assert_eq!(f.command, Command::Error, "{f:?}");
        assert_eq!(f.get("receipt-id"), Some("x"));
        assert!(c.closed().await);
    }
    let mut c = Client::open(s.addr).await;
    c.write(b"CONNECT\n\n\0").await;
    assert_eq!(c.frame().await.unwrap().command, Command::Connected);
    c.write(b"SUBSCRIBE\ndestination:/queue/Q\nbrowser:true\nreceipt:x\n\n\0")
        .await;
    let f = c.frame().await.expect("an ERROR");
    assert_eq!(f.command, Command::Error, "{f:?}");
    assert_eq!(
        f.get("message"),
        Some("browser:true needs STOMP 1.1 or 1.2 (as ActiveMQ)")
    );
    s.stop().await;
}

/// STOMP-11 step 1: on STOMP 1.0, ACK by `message-id` acks; NACK is an ERROR (1.0
/// has no NACK) and the message stays un-acked, so it comes back to the next consumer.
async fn stomp_11_nack_is_refused_on_stomp_1_0(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut p = Client::connected(s.addr, None).await;
    send(&mut p, "/queue/V10", "one", "r1").await;
    send(&mut p, "/queue/V10", "two", "r2").await;
    let connect_1_0 = |c: Client| async move {
        let mut c = c;
        c.write(b"CONNECT\n\n\0").await;
        let f = c.frame().await.unwrap();
        assert_eq!(f.command, Command::Connected);
        assert_eq!(f.get("version"), Some("1.0"));
        c
    };
    let mut a = connect_1_0(Client::open(s.addr).await).await;
    a.write(b"SUBSCRIBE\ndestination:/queue/V10\nack:client\nactivemq.prefetchSize:1\n\n\0")
        .await;
    let one = a.frame().await.expect("one");
    assert_eq!(one.body, &b"one"[..]);
    let id = one.get("message-id").unwrap().to_string();
    a.write(format!("ACK\nmessage-id:{id}\nreceipt:a10\n\n\0").as_bytes())
        .await;
    let frames = frames_until(&mut a, |f| f.command == Command::Receipt).await;
    assert_eq!(frames.last().unwrap().get("receipt-id"), Some("a10"));
    let two = match frames.iter().find(|f| f.command == Command::Message) {
        Some(two) => two.clone(),
        None => a.frame().await.expect("two"),
    };
    assert_eq!(two.body, &b"two"[..]);
    let id = two.get("message-id").unwrap().to_string();
    a.write(format!("NACK\nmessage-id:{id}\nreceipt:n10\n\n\0").as_bytes())
        .await;
    let f = a.frame().await.expect("an ERROR");
    assert_eq!(f.command, Command::Error, "{f:?}");
    assert_eq!(f.get("receipt-id"), Some("n10"));
    assert!(a.closed().await);
    // The connection closed without acking `two`: it goes back to the queue.
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\ndestination:/queue/V10\nid:1\nack:client-individual\n\n\0")
        .await;
    let again = c.frame().await.expect("two again");
    assert_eq!(again.body, &b"two"[..]);
    assert_eq!(again.get("redelivered"), Some("true"));
    assert!(c.quiet().await.is_none(), "`one` was acked");
    s.stop().await;
}

/// A SUBSCRIBE header that would change what the consumer receives and is not
/// supported gets an ERROR naming it, and nothing is consumed: the queue's message is
/// still there for an ordinary consumer.
async fn unsupported_subscribe_headers_are_refused(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut p = Client::connected(s.addr, None).await;
    send(&mut p, "/queue/H", "kept", "r").await;
    for header in [
        "activemq.retroactive:true",
        "activemq.priority:5",
        "x-stream-offset:first",
    ] {
        let mut c = Client::connected(s.addr, None).await;
        c.write(
            format!("SUBSCRIBE\ndestination:/queue/H\nid:1\n{header}\nreceipt:x\n\n\0").as_bytes(),
        )
        .await;
        let f = c.frame().await.expect("an ERROR");
        assert_eq!(f.command, Command::Error, "{header}: {f:?}");
        assert_eq!(f.get("receipt-id"), Some("x"));
        assert!(
            f.get("message")
                .unwrap()
                .contains(&format!("`{header}` refused")),
            "{f:?}"
        );
    }
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\ndestination:/queue/H\nid:1\nactivemq.exclusive:false\n\n\0")
        .await;
    assert_eq!(c.frame().await.expect("kept").body, &b"kept"[..]);
    s.stop().await;
}

/// CONN-10: a client id may be connected once. A second CONNECT with it gets an
/// ERROR and is closed, the first connection is unaffected; once the first is gone
/// (reset, no DISCONNECT) the id connects again at once and its durable subscription
/// gets its un-acked messages back, in order.
async fn conn_10_a_client_id_is_connected_once(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut a = Client::connected(s.addr, Some("dup")).await;
    a.write(b"SUBSCRIBE\ndestination:/topic/CD\nid:1\nack:client-individual\nactivemq.prefetchSize:10\nactivemq.subscriptionName:sd\nreceipt:s\n\n\0")
        .await;
    receipt(&mut a, "s").await;
    let mut b = Client::open(s.addr).await;
    b.write(b"CONNECT\naccept-version:1.2\nclient-id:dup\nreceipt:c\n\n\0")
        .await;
    let f = b.frame().await.expect("an ERROR");
    assert_eq!(f.command, Command::Error, "{f:?}");
    assert!(
        f.get("message")
            .unwrap()
            .starts_with("client id `dup` is already connected"),
        "{f:?}"
    );
    assert!(b.closed().await);
    // The first connection still works: it receives what is sent to its durable.
    let mut p = Client::connected(s.addr, None).await;
    for i in 1..=3 {
        send(&mut p, "/topic/CD", &format!("k{i}"), &format!("r{i}")).await;
    }
    let mut got = Vec::new();
    while got.len() < 3 {
        let f = a.frame().await.expect("k1..k3");
        assert_eq!(f.command, Command::Message, "{f:?}");
        got.push(f);
    }
    assert_eq!(bodies(&got), ["k1", "k2", "k3"]);
    // An abortive close, without ACK: the id is free again at once.
    drop(a);
    let mut again = None;
    for _ in 0..30 {
        match ebb::stomp::client::StompClient::connect(s.addr, Some("dup"), None).await {
            Ok(c) => {
                again = Some(Client(c));
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
    let mut a = again.expect("client id `dup` connects again within 3 s");
    a.write(b"SUBSCRIBE\ndestination:/topic/CD\nid:1\nack:client-individual\nactivemq.subscriptionName:sd\n\n\0")
        .await;
    let mut back = Vec::new();
    while back.len() < 3 {
        back.push(a.frame().await.expect("k1..k3 again"));
    }
    assert_eq!(bodies(&back), ["k1", "k2", "k3"]);
    assert!(back.iter().all(|f| f.get("redelivered") == Some("true")));
    s.stop().await;
}

/// CONN-10 with `allow_link_stealing`: the newer CONNECT closes the older connection
/// (an ERROR says why) and takes over its durable subscription at once.
async fn conn_10_link_stealing_closes_the_older_connection(t: TestStore) {
    let broker = broker(&t, policy(0, 400), 2).await;
    let config = ebb::stomp::connection::ConnectionConfig {
        allow_link_stealing: true,
        ..Default::default()
    };
    let s = serve_with(broker, config).await;
    let mut a = Client::connected(s.addr, Some("dup")).await;
    a.write(b"SUBSCRIBE\ndestination:/topic/LS\nid:1\nack:client-individual\nactivemq.subscriptionName:sd\nreceipt:s\n\n\0")
        .await;
    receipt(&mut a, "s").await;
    let mut p = Client::connected(s.addr, None).await;
    send(&mut p, "/topic/LS", "held", "r").await;
    let held = a.frame().await.expect("held");
    assert_eq!(held.body, &b"held"[..]);
    let mut b = Client::connected(s.addr, Some("dup")).await;
    let f = a.frame().await.expect("an ERROR for the older connection");
    assert_eq!(f.command, Command::Error, "{f:?}");
    assert_eq!(
        f.get("message"),
        Some("client id taken over by a newer connection (allow_link_stealing)")
    );
    assert!(a.closed().await);
    b.write(b"SUBSCRIBE\ndestination:/topic/LS\nid:1\nack:client-individual\nactivemq.subscriptionName:sd\n\n\0")
        .await;
    let again = b.frame().await.expect("held, again");
    assert_eq!(again.body, &b"held"[..]);
    assert_eq!(again.get("redelivered"), Some("true"));
    s.stop().await;
}

/// DUR-11: a durable subscription is `(client id, name)`; subscribing the name to
/// another topic deletes the old one with its backlog (JMS), so the old topic's rows
/// are cleaned up, and subscribing the old topic again starts afresh.
async fn dur_11_resubscribing_to_another_topic_replaces_the_subscription(t: TestStore) {
    let s = server(&t, policy(100, 400)).await;
    let durable = |topic: &str, receipt_id: &str| {
        format!("SUBSCRIBE\ndestination:/topic/{topic}\nid:1\nack:client-individual\nactivemq.subscriptionName:sx\nreceipt:{receipt_id}\n\n\0")
    };
    let mut c = Client::connected(s.addr, Some("cx")).await;
    c.write(durable("DA", "s1").as_bytes()).await;
    receipt(&mut c, "s1").await;
    c.write(b"DISCONNECT\nreceipt:d\n\n\0").await;
    receipt(&mut c, "d").await;
    let mut p = Client::connected(s.addr, None).await;
    send(&mut p, "/topic/DA", "a1", "ra1").await;
    send(&mut p, "/topic/DA", "a2", "ra2").await;
    assert_eq!(
        s.broker.store().count_messages("topic://DA").await.unwrap(),
        2
    );

    let mut c = Client::connected(s.addr, Some("cx")).await;
    c.write(durable("DB", "s2").as_bytes()).await;
    receipt(&mut c, "s2").await;
    send(&mut p, "/topic/DB", "b1", "rb1").await;
    send(&mut p, "/topic/DA", "a3", "ra3").await;
    let b1 = c.frame().await.expect("b1");
    assert_eq!(b1.body, &b"b1"[..], "no a1/a2 on the new subscription");
    assert!(c.quiet().await.is_none());
    c.write(b"DISCONNECT\nreceipt:d\n\n\0").await;
    receipt(&mut c, "d").await;
    assert_eq!(
        s.broker
            .store()
            .count_subscriptions("topic://DA")
            .await
            .unwrap(),
        0,
        "the old subscription is gone"
    );
    // With no subscription left on DA, its rows are cleaned up.
    wait_rows(&s.broker, "topic://DA", 0).await;

    let mut c = Client::connected(s.addr, Some("cx")).await;
    c.write(durable("DA", "s3").as_bytes()).await;
    receipt(&mut c, "s3").await;
    assert!(
        c.quiet().await.is_none(),
        "a fresh subscription: nothing from before"
    );
    assert_eq!(
        s.broker
            .store()
            .count_subscriptions("topic://DB")
            .await
            .unwrap(),
        0,
        "and the one on DB went in turn"
    );
    s.stop().await;
}

/// Exclusive consumers (`activemq.exclusive:true`): the oldest exclusive consumer of
/// a queue gets every message while it lives, a plain one beside it nothing; when it
/// goes, what it held comes back and the next exclusive consumer takes over; when
/// none is left, round-robin resumes. On a topic it is refused.
async fn exclusive_consumers_take_over_in_turn(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let sub = |id: &str, extra: &str| {
        format!("SUBSCRIBE\ndestination:/queue/EX\nid:{id}\nack:client-individual\n{extra}receipt:s{id}\n\n\0")
    };
    let mut first = Client::connected(s.addr, None).await;
    first
        .write(sub("1", "activemq.exclusive:true\n").as_bytes())
        .await;
    receipt(&mut first, "s1").await;
    let mut plain = Client::connected(s.addr, None).await;
    plain.write(sub("2", "").as_bytes()).await;
    receipt(&mut plain, "s2").await;
    let mut second = Client::connected(s.addr, None).await;
    second
        .write(sub("3", "activemq.exclusive:true\n").as_bytes())
        .await;
    receipt(&mut second, "s3").await;
    let mut p = Client::connected(s.addr, None).await;
    for i in 0..6 {
        send(&mut p, "/queue/EX", &format!("x{i}"), &format!("r{i}")).await;
    }
    let mut got = Vec::new();
    for _ in 0..6 {
        got.push(
            first
                .frame()
                .await
                .expect("the exclusive consumer gets all"),
        );
    }
    assert_eq!(bodies(&got), ["x0", "x1", "x2", "x3", "x4", "x5"]);
    assert!(plain.quiet().await.is_none());
    assert!(second.frame_within(10).await.is_none());
    // Ack two, then the owner goes: the other four go to the next exclusive consumer.
    for (i, f) in got.iter().take(2).enumerate() {
        first
            .write(format!("ACK\nid:{}\nreceipt:a{i}\n\n\0", f.get("ack").unwrap()).as_bytes())
            .await;
        receipt(&mut first, &format!("a{i}")).await;
    }
    drop(first);
    let mut again = Vec::new();
    for _ in 0..4 {
        again.push(
            second
                .frame()
                .await
                .expect("the next exclusive consumer takes over"),
        );
    }
    assert_eq!(bodies(&again), ["x2", "x3", "x4", "x5"]);
    assert!(again.iter().all(|f| f.get("redelivered") == Some("true")));
    assert!(plain.quiet().await.is_none());
    drop(second);
    // No exclusive consumer left: the plain one gets them.
    let mut last = Vec::new();
    for _ in 0..4 {
        last.push(plain.frame().await.expect("round-robin again"));
    }
    assert_eq!(bodies(&last), ["x2", "x3", "x4", "x5"]);
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\ndestination:/topic/T\nid:1\nactivemq.exclusive:true\nreceipt:x\n\n\0")
        .await;
    let f = c.frame().await.expect("an ERROR");
    assert_eq!(f.command, Command::Error, "{f:?}");
    assert_eq!(f.get("receipt-id"), Some("x"));
    s.stop().await;
}

/// Message groups (`JMSXGroupID`): every message of a group goes to one consumer, in
/// order; groups spread over the consumers; `JMSXGroupSeq: -1` closes a group; when a
/// group's owner goes, the group's messages it held come back, in order, to one other
/// consumer.
async fn message_groups_stay_with_one_consumer(t: TestStore) {
    let b = broker(&t, policy(0, 400), 2).await;
    let options = || {
        ebb::SubscribeOptions::non_durable()
            .ack(ebb::AckMode::Client)
            .prefetch(100)
    };
    let mut consumers = Vec::new();
    for _ in 0..3 {
        consumers.push(b.subscribe("queue://G", options()).await.unwrap());
    }
    let groups = ["a", "b", "c", "d", "e", "f"];
    for i in 0..60 {
        let m = ebb::Message::new(format!("{}{i}", groups[i % 6]))
            .persistent(true)
            .header("JMSXGroupID", groups[i % 6]);
        b.send("queue://G", m).await.unwrap();
    }
    let mut received = take_spread(&mut consumers, 60).await;
    let group = |m: &ebb::Received| body(m)[..1].to_string();
    let mut owner = std::collections::HashMap::new();
    for (i, got) in received.iter().enumerate() {
        for m in got {
            assert_eq!(
                *owner.entry(group(m)).or_insert(i),
                i,
                "group {} split",
                group(m)
            );
        }
        // In order within each group.
        for g in groups {
            let seq: Vec<u32> = got
                .iter()
                .filter(|m| group(m) == g)
                .map(|m| body(m)[1..].parse().unwrap())
                .collect();
            assert!(seq.windows(2).all(|w| w[0] < w[1]), "{g}: {seq:?}");
        }
    }
    let used = received.iter().filter(|g| !g.is_empty()).count();
    assert!(used >= 2, "groups spread over the consumers: {used} used");
    assert_eq!(b.queue_stats("G").await.unwrap().message_groups, 6);

    // The owner of group `a` goes without acking: its messages come back in order to
    // one consumer, which now owns the group.
    let a_owner = owner["a"];
    let held: Vec<String> = received[a_owner].iter().map(body).collect();
    drop(consumers.remove(a_owner));
    received.remove(a_owner);
    // Every message it held comes back (the others hold theirs, unacked).
    let back: Vec<Vec<String>> = take_spread(&mut consumers, held.len())
        .await
        .iter()
        .map(|got| got.iter().map(body).collect())
        .collect();
    let takers: Vec<&Vec<String>> = back
        .iter()
        .filter(|g| g.iter().any(|m| m.starts_with('a')))
        .collect();
    assert_eq!(
        takers.len(),
        1,
        "group a came back to one consumer: {back:?}"
    );
    let a_again: Vec<&String> = takers[0].iter().filter(|m| m.starts_with('a')).collect();
    let a_held: Vec<&String> = held.iter().filter(|m| m.starts_with('a')).collect();
    assert_eq!(a_again, a_held, "in order");

    // JMSXGroupSeq -1 closes a group: it has no owner after that message.
    let before = b.queue_stats("G").await.unwrap().message_groups;
    let close = ebb::Message::new("a-last")
        .persistent(true)
        .header("JMSXGroupID", "a")
        .header("JMSXGroupSeq", "-1");
    b.send("queue://G", close).await.unwrap();
    let last = take_spread(&mut consumers, 1).await.concat();
    assert_eq!(body(&last[0]), "a-last", "the closing message is delivered");
    assert_eq!(b.queue_stats("G").await.unwrap().message_groups, before - 1);
    b.shutdown().await.unwrap();
}

/// `activemq.noLocal:true` on a topic: a connection does not receive what it sends
/// itself, and still receives what others send; another subscription on the same
/// topic gets both. On a queue, or with a durable subscription, it is refused.
async fn no_local_skips_a_connections_own_messages(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut me = Client::connected(s.addr, None).await;
    me.write(b"SUBSCRIBE\ndestination:/topic/NL\nid:1\nactivemq.noLocal:true\nreceipt:s\n\n\0")
        .await;
    receipt(&mut me, "s").await;
    let mut all = Client::connected(s.addr, None).await;
    all.write(b"SUBSCRIBE\ndestination:/topic/NL\nid:1\nreceipt:s\n\n\0")
        .await;
    receipt(&mut all, "s").await;
    let mut other = Client::connected(s.addr, None).await;
    me.write(b"SEND\ndestination:/topic/NL\n\nmine\0").await;
    send(&mut other, "/topic/NL", "theirs", "r").await;
    let f = me.frame().await.expect("the other connection's message");
    assert_eq!(f.body, &b"theirs"[..]);
    assert!(me.quiet().await.is_none(), "not its own");
    let got = [all.frame().await.unwrap(), all.frame().await.unwrap()];
    assert_eq!(bodies(&got), ["mine", "theirs"]);
    for frame in [
        "SUBSCRIBE\ndestination:/queue/Q\nid:1\nactivemq.noLocal:true\nreceipt:x\n\n\0",
        "SUBSCRIBE\ndestination:/topic/NL\nid:1\nactivemq.noLocal:true\nactivemq.subscriptionName:d\nreceipt:x\n\n\0",
    ] {
        let mut c = Client::connected(s.addr, Some("nl")).await;
        c.write(frame.as_bytes()).await;
        let f = c.frame().await.expect("an ERROR");
        assert_eq!(f.command, Command::Error, "{f:?}");
        assert_eq!(f.get("receipt-id"), Some("x"));
        assert!(f.get("message").unwrap().contains("noLocal"), "{f:?}");
        assert!(c.closed().await);
    }
    s.stop().await;
}

/// NACK-10: a poison message NACKed on every delivery is delivered 7 times (1 +
/// `maximum_redeliveries` 6), each NACK receipted, the first `redelivered:false`, then
/// it is in `DLQ.N` with `originalDestination` and `dlqDeliveryFailureCause`, and N is
/// empty. A NACK of an id never issued is an ERROR with its receipt id.
async fn nack_10_nack_redelivers_then_dead_letters(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut p = Client::connected(s.addr, None).await;
    send(&mut p, "/queue/N", "poison", "r").await;
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\ndestination:/queue/N\nid:1\nack:client-individual\nactivemq.prefetchSize:1\n\n\0")
        .await;
    // NACK each delivery as it comes; a receipt may come after the next delivery.
    let (mut deliveries, mut receipts) = (Vec::new(), Vec::new());
    while deliveries.len() < 7 || receipts.len() < deliveries.len() {
        let f = c.frame().await.expect("a MESSAGE or a RECEIPT");
        match f.command {
            Command::Message => {
                let id = f.get("ack").unwrap().to_string();
                let k = deliveries.len();
                deliveries.push(f);
                c.write(format!("NACK\nid:{id}\nreceipt:n{k}\n\n\0").as_bytes())
                    .await;
            }
            Command::Receipt => receipts.push(f.get("receipt-id").unwrap().to_string()),
            _ => panic!("{f:?}"),
        }
    }
    assert!(c.quiet().await.is_none(), "no 8th delivery");
    let expected: Vec<String> = (0..7).map(|k| format!("n{k}")).collect();
    assert_eq!(receipts, expected, "each NACK receipted, in order");
    assert_eq!(deliveries.len(), 7, "1 + maximum_redeliveries");
    assert_eq!(deliveries[0].get("redelivered"), Some("false"));
    assert!(deliveries[1..]
        .iter()
        .all(|f| f.get("redelivered") == Some("true")));
    assert!(deliveries.iter().all(|f| f.body == b"poison"[..]));
    c.write(b"NACK\nid:no-such-ack-id\nreceipt:nx\n\n\0").await;
    let f = c.frame().await.expect("an ERROR");
    assert_eq!(f.command, Command::Error, "{f:?}");
    assert_eq!(f.get("receipt-id"), Some("nx"));
    let mut d = Client::connected(s.addr, None).await;
    d.write(b"SUBSCRIBE\ndestination:/queue/DLQ.N\nid:1\n\n\0")
        .await;
    let dead = d.frame().await.expect("poison in the DLQ");
    assert_eq!(dead.body, &b"poison"[..]);
    assert_eq!(dead.get("originalDestination"), Some("/queue/N"));
    assert!(dead.get("dlqDeliveryFailureCause").is_some(), "{dead:?}");
    assert_eq!(
        s.broker.store().count_messages("queue://N").await.unwrap(),
        0
    );
    s.stop().await;
}

/// STOMP-10: a second SUBSCRIBE with an id in use is an ERROR with its receipt id,
/// the connection closes and nothing was consumed for it; after an UNSUBSCRIBE's
/// RECEIPT no MESSAGE of that subscription follows, and the id may be used again.
async fn stomp_10_subscription_ids_are_unique_and_end_with_their_receipt(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\ndestination:/queue/S1\nid:1\nreceipt:r1\n\n\0")
        .await;
    receipt(&mut c, "r1").await;
    c.write(b"SUBSCRIBE\ndestination:/queue/S2\nid:1\nreceipt:r2\n\n\0")
        .await;
    let f = c.frame().await.expect("an ERROR");
    assert_eq!(f.command, Command::Error, "{f:?}");
    assert_eq!(f.get("receipt-id"), Some("r2"));
    assert!(c.closed().await);
    let mut p = Client::connected(s.addr, None).await;
    send(&mut p, "/queue/S1", "x", "rx").await;
    let mut fresh = Client::connected(s.addr, None).await;
    fresh
        .write(b"SUBSCRIBE\ndestination:/queue/S1\nid:9\n\n\0")
        .await;
    assert_eq!(fresh.frame().await.expect("x").body, &b"x"[..]);

    let mut t7 = Client::connected(s.addr, None).await;
    t7.write(b"SUBSCRIBE\ndestination:/topic/ST\nid:7\nack:auto\nreceipt:s7\n\n\0")
        .await;
    receipt(&mut t7, "s7").await;
    let producer = {
        let addr = s.addr;
        actix_rt::spawn(async move {
            let mut p = Client::connected(addr, None).await;
            for i in 0..100 {
                p.write(format!("SEND\ndestination:/topic/ST\n\nt{i}\0").as_bytes())
                    .await;
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
    };
    // Messages flow before the UNSUBSCRIBE: the first one has come.
    let first = t7
        .frame()
        .await
        .expect("a first MESSAGE before the UNSUBSCRIBE");
    t7.write(b"UNSUBSCRIBE\nid:7\nreceipt:u7\n\n\0").await;
    let mut before = vec![first];
    before.extend(frames_until(&mut t7, |f| f.command == Command::Receipt).await);
    assert_eq!(before.pop().unwrap().get("receipt-id"), Some("u7"));
    assert!(!before.is_empty(), "messages flowed before the UNSUBSCRIBE");
    assert!(before
        .iter()
        .all(|f| f.command == Command::Message && f.get("subscription") == Some("7")));
    // The id is free again: a queue under it, and nothing of the topic after u7.
    t7.write(b"SUBSCRIBE\ndestination:/queue/S3\nid:7\nack:client-individual\n\n\0")
        .await;
    send(&mut p, "/queue/S3", "y", "ry").await;
    let mut after = vec![t7.frame().await.expect("y")];
    // Once the producer is done, nothing more comes (no later event marks it: QUIET).
    producer.await.unwrap();
    after.extend(t7.quiet().await);
    assert_eq!(
        after.len(),
        1,
        "only y after the UNSUBSCRIBE receipt: {after:?}"
    );
    assert_eq!(after[0].body, &b"y"[..]);
    assert_eq!(after[0].get("destination"), Some("/queue/S3"));
    s.stop().await;
}

on_every_backend!(
    #[actix_rt::test]
    stomp_13_browsing_does_not_consume,
    browsing_is_refused_where_it_means_nothing,
    stomp_11_nack_is_refused_on_stomp_1_0,
    unsupported_subscribe_headers_are_refused,
    conn_10_a_client_id_is_connected_once,
    conn_10_link_stealing_closes_the_older_connection,
    dur_11_resubscribing_to_another_topic_replaces_the_subscription,
    exclusive_consumers_take_over_in_turn,
    message_groups_stay_with_one_consumer,
    no_local_skips_a_connections_own_messages,
    nack_10_nack_redelivers_then_dead_letters,
    stomp_10_subscription_ids_are_unique_and_end_with_their_receipt,
    conn_11_vanished_connections_leave_no_consumers,
    stomp_12_headers_and_bodies_survive_storage_and_redelivery,
);

/// A raw STOMP connection that CONNECTs and SUBSCRIBEs to `destination` with
/// `headers`, waits for the SUBSCRIBE's RECEIPT, and hands back the socket.
async fn raw_subscriber(
    addr: std::net::SocketAddr,
    destination: &str,
    headers: &str,
) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let frames = format!(
        "CONNECT\naccept-version:1.2\nhost:ebb\n\n\0SUBSCRIBE\ndestination:{destination}\nid:1\n{headers}receipt:ready\n\n\0"
    );
    socket.write_all(frames.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("receipt-id:ready") {
        let n = tokio::time::timeout(PATIENCE, socket.read(&mut buf))
            .await
            .expect("a RECEIPT within PATIENCE")
            .unwrap();
        assert!(n > 0, "closed before the RECEIPT");
        seen.extend_from_slice(&buf[..n]);
    }
    socket
}

/// CONN-11: connections that vanish leave no consumer behind. 100 consumers of
/// `/queue/G`, half reset, half closed with a FIN, none DISCONNECTed: the queue has 0
/// consumers soon after, and a live consumer then gets all 50 messages, in order;
/// then 300 connections at once all get CONNECTED, and a receipted SEND still works.
async fn conn_11_vanished_connections_leave_no_consumers(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut sockets = Vec::new();
    for _ in 0..100 {
        sockets.push(
            raw_subscriber(
                s.addr,
                "/queue/G",
                "ack:client-individual\nactivemq.prefetchSize:10\n",
            )
            .await,
        );
    }
    assert_eq!(s.broker.queue_stats("G").await.unwrap().consumers, 100);
    for (i, socket) in sockets.into_iter().enumerate() {
        if i % 2 == 0 {
            socket.set_zero_linger().unwrap(); // a reset
        }
        drop(socket);
    }
    let stats = wait_for_queue(&s.broker, "G", |st| st.consumers == 0).await;
    assert_eq!(stats.consumers, 0);
    let mut live = Client::connected(s.addr, None).await;
    live.write(b"SUBSCRIBE\ndestination:/queue/G\nid:1\nack:client-individual\nactivemq.prefetchSize:10\nreceipt:l\n\n\0")
        .await;
    receipt(&mut live, "l").await;
    let mut p = Client::connected(s.addr, None).await;
    for i in 0..50 {
        p.write(format!("SEND\ndestination:/queue/G\npersistent:true\n\ng{i}\0").as_bytes())
            .await;
    }
    let mut got = Vec::new();
    while got.len() < 50 {
        let f = live.frame().await.expect("g0..g49");
        if f.command != Command::Message {
            continue;
        }
        live.write(format!("ACK\nid:{}\n\n\0", f.get("ack").unwrap()).as_bytes())
            .await;
        got.push(f);
    }
    let expected: Vec<String> = (0..50).map(|i| format!("g{i}")).collect();
    assert_eq!(bodies(&got), expected);
    let connects = (0..300).map(|_| ebb::stomp::client::StompClient::connect(s.addr, None, None));
    let clients = futures::future::join_all(connects).await;
    assert!(clients.iter().all(|c| c.is_ok()), "all 300 CONNECTED");
    drop(clients);
    send(&mut p, "/queue/G", "after", "r-after").await;
    s.stop().await;
}

/// STOMP-12: bodies and headers come back byte for byte from a live delivery, a
/// redelivery and a durable subscription's copy read back from the store: a multi-byte
/// body with its `content-length`, one without, and a 4 MiB binary body with NULs;
/// every header sent appears once, with its value.
async fn stomp_12_headers_and_bodies_survive_storage_and_redelivery(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut d = Client::connected(s.addr, Some("ct")).await;
    d.write(b"SUBSCRIBE\ndestination:/topic/CT\nid:1\nack:client-individual\nactivemq.subscriptionName:ct\nreceipt:s\n\n\0")
        .await;
    receipt(&mut d, "s").await;
    d.write(b"DISCONNECT\nreceipt:d\n\n\0").await;
    receipt(&mut d, "d").await;
    let mut big = vec![0u8; 4 << 20];
    for (i, b) in big.iter_mut().enumerate() {
        *b = (i.wrapping_mul(2_654_435_761) >> 13) as u8;
    }
    big[100] = 0;
    let utf8 = "£€123".as_bytes().to_vec();
    assert_eq!(utf8.len(), 8);
    let headers = [
        ("content-type", "application/vnd.bbf.usp.msg"),
        ("reply-to-dest", "custom"),
        ("correlation-id", "c-1"),
    ];
    let mut p = Client::connected(s.addr, None).await;
    let frame = |destination: &str, body: &[u8], length: bool, extra: &[(&str, &str)]| {
        let mut f = Frame::new(Command::Send)
            .header("destination", destination)
            .header("persistent", "true")
            .header("priority", "5");
        if length {
            f = f.header("content-length", body.len().to_string());
        }
        for (n, v) in extra {
            f = f.header(*n, *v);
        }
        f.body(body.to_vec())
    };
    let plain = "héllo wörld".as_bytes().to_vec();
    let bigh = [
        ("content-type", "application/octet-stream"),
        ("x-big", "yes"),
    ];
    for destination in ["/queue/CT", "/topic/CT"] {
        p.send(frame(destination, &utf8, true, &headers))
            .await
            .unwrap();
        p.send(frame(destination, &big, true, &bigh)).await.unwrap();
    }
    p.send(frame(
        "/queue/CT",
        &plain,
        false,
        &[("content-type", "text/plain;charset=utf-8")],
    ))
    .await
    .unwrap();
    p.write(b"SEND\ndestination:/queue/CT\nreceipt:sent\n\nend\0")
        .await;
    receipt(&mut p, "sent").await;
    let check = |f: &Frame, body: &[u8], extra: &[(&str, &str)]| {
        assert_eq!(f.body, body, "body bytes");
        for (n, v) in extra {
            let values: Vec<&str> = f
                .headers
                .iter()
                .filter(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
                .collect();
            assert_eq!(values, [*v], "header {n} once, as sent");
        }
        if let Some(length) = f.get("content-length") {
            assert_eq!(length, body.len().to_string());
        }
        assert_eq!(f.get("priority"), Some("5"));
    };
    // The queue: NACK the first, receive it again, then the rest.
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\ndestination:/queue/CT\nid:1\nack:client-individual\nactivemq.prefetchSize:1\n\n\0")
        .await;
    let first = c.frame().await.expect("the first message");
    check(&first, &utf8, &headers);
    c.write(format!("NACK\nid:{}\n\n\0", first.get("ack").unwrap()).as_bytes())
        .await;
    let again = c.frame().await.expect("it again");
    assert_eq!(again.get("redelivered"), Some("true"));
    check(&again, &utf8, &headers);
    let mut rest = Vec::new();
    let mut ack = again.get("ack").unwrap().to_string();
    for _ in 0..2 {
        c.write(format!("ACK\nid:{ack}\n\n\0").as_bytes()).await;
        let f = c.frame().await.expect("the next message");
        ack = f.get("ack").unwrap().to_string();
        rest.push(f);
    }
    check(&rest[0], &big, &bigh);
    check(
        &rest[1],
        &plain,
        &[("content-type", "text/plain;charset=utf-8")],
    );
    // The durable's copies, read back from the store.
    let mut d = Client::connected(s.addr, Some("ct")).await;
    d.write(b"SUBSCRIBE\ndestination:/topic/CT\nid:1\nack:client-individual\nactivemq.subscriptionName:ct\n\n\0")
        .await;
    let f = d.frame().await.expect("the durable's first");
    check(&f, &utf8, &headers);
    let f = d.frame().await.expect("the durable's big one");
    check(&f, &big, &bigh);
    s.stop().await;
}
