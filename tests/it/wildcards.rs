//! Wildcard subscriptions (ActiveMQ's wildcards: `.` separates, `*` matches one
//! element, `>` the rest): a subscription to `orders.>` or `queue://jobs.*` receives
//! from every matching destination, those running, those the store holds and those
//! created later; each message says where it was sent; acks go back to each
//! destination; a durable one keeps its backlog on every matching topic across
//! restarts, also on topics created while it is offline; sending to a wildcard is
//! refused; a durable name moves between a wildcard and a destination as JMS says.

use std::collections::BTreeMap;

use ebb::auth::{hash_password, AuthorizationEntry, Security, User};
use ebb::stomp::codec::Limits;
use ebb::stomp::frame::Command;
use ebb::test_util::stomp::*;
use ebb::test_util::*;
use ebb::{AckMode, Broker, Error, Message, Policy, SubscribeOptions, Subscription, UsageConfig};

fn fast() -> Policy {
    Policy {
        expire_messages_period: 50,
        ..Policy::default()
    }
}

async fn start(t: &TestStore) -> Broker {
    broker_with(
        t,
        vec![("topic://>", fast()), ("queue://>", fast())],
        UsageConfig::default(),
    )
    .await
}

fn durable() -> SubscribeOptions {
    SubscribeOptions::durable("client", "all-orders")
}

/// `(destination, body)` of the next `n` messages, and of any that comes within
/// [`QUIET`] after them (none should: a wildcard subscription's messages come from
/// several destination actors, so no single marker message can stand behind them all;
/// a busy machine can only make the extra one come later and the check pass, never
/// fail a correct broker).
async fn received(sub: &mut Subscription, n: usize) -> Vec<(String, String)> {
    let mut got = take(sub, n).await;
    while let Some(m) = quiet(sub).await {
        got.push(m);
    }
    got.iter()
        .map(|m| {
            let from = m.destination().map(|d| d.container()).unwrap_or_default();
            (from, body(m))
        })
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(d, b)| (d.to_string(), b.to_string()))
        .collect()
}

/// A non-durable `orders.>` gets what is sent to running and new matching topics,
/// `orders` itself included, and nothing of others; `orders.*` only one element deep.
async fn topic_wildcard_reads_running_and_new_topics(t: TestStore) {
    let b = start(&t).await;
    b.send("topic://orders.eu", Message::new("before"))
        .await
        .unwrap();
    let mut all = b
        .subscribe("topic://orders.>", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let mut one_deep = b
        .subscribe("topic://orders.*", SubscribeOptions::non_durable())
        .await
        .unwrap();
    for (topic, text) in [
        ("topic://orders.eu", "m1"),
        ("topic://orders.us.west", "m2"),
        ("topic://other.eu", "no"),
        ("topic://orders", "m3"),
        ("topic://ordersx", "no"),
        ("topic://orders.eu", "m4"),
    ] {
        b.send(topic, Message::new(text)).await.unwrap();
    }
    let mut got = received(&mut all, 4).await;
    got.sort();
    assert_eq!(
        got,
        pairs(&[
            ("topic://orders", "m3"),
            ("topic://orders.eu", "m1"),
            ("topic://orders.eu", "m4"),
            ("topic://orders.us.west", "m2"),
        ])
    );
    assert_eq!(
        received(&mut one_deep, 2).await,
        pairs(&[("topic://orders.eu", "m1"), ("topic://orders.eu", "m4")])
    );
    b.shutdown().await.unwrap();
}

/// `queue://jobs.*` consumes the backlogs of queues the store holds (no actor runs
/// for them after a restart) and of queues created later; a cumulative ack acks, at
/// each queue, what was received from it up to that message, and what was not acked
/// goes to the next consumer.
async fn queue_wildcard_consumes_stored_and_new_queues(t: TestStore) {
    let b = start(&t).await;
    for (queue, text) in [
        ("queue://jobs.a", "a1"),
        ("queue://jobs.b", "b1"),
        ("queue://jobs.a", "a2"),
        ("queue://jobs.b", "b2"),
        ("queue://jobs.a.deep", "no"),
        ("queue://jobs", "no"),
    ] {
        b.send(queue, Message::new(text)).await.unwrap();
    }
    b.shutdown().await.unwrap();

    let b = start(&t).await;
    let options = SubscribeOptions::non_durable().ack(AckMode::Client);
    let mut sub = b
        .subscribe("queue://jobs.*", options.clone())
        .await
        .unwrap();
    b.send("queue://jobs.c", Message::new("c1")).await.unwrap();
    let mut got = take(&mut sub, 5).await;
    // Nothing more: see `received` for why a quiet window is the check here.
    while let Some(m) = quiet(&mut sub).await {
        got.push(m);
    }
    let mut shown: Vec<(String, String)> = got
        .iter()
        .map(|m| (m.destination().unwrap().container(), body(m)))
        .collect();
    shown.sort();
    assert_eq!(
        shown,
        pairs(&[
            ("queue://jobs.a", "a1"),
            ("queue://jobs.a", "a2"),
            ("queue://jobs.b", "b1"),
            ("queue://jobs.b", "b2"),
            ("queue://jobs.c", "c1"),
        ])
    );
    // Delivery ids are the consumer's own order across the queues.
    let ids: Vec<u64> = got.iter().map(|m| m.delivery_id()).collect();
    assert_eq!(ids, (1..=5).collect::<Vec<u64>>());
    // Ack up to the third: at each queue, what came from it up to there.
    sub.ack_up_to(&got[2]).await.unwrap();
    let acked: Vec<(String, String)> = got[..3]
        .iter()
        .map(|m| (m.destination().unwrap().container(), body(m)))
        .collect();
    let mut left_per_queue: BTreeMap<String, u64> = BTreeMap::new();
    for m in &got[3..] {
        *left_per_queue
            .entry(m.destination().unwrap().container())
            .or_default() += 1;
    }
    for queue in ["queue://jobs.a", "queue://jobs.b", "queue://jobs.c"] {
        let left = left_per_queue.get(queue).copied().unwrap_or(0);
        wait_rows(&b, queue, left).await;
    }
    drop(sub);
    let mut next = b.subscribe("queue://jobs.*", options).await.unwrap();
    let again = received(&mut next, 2).await;
    assert_eq!(again.len(), 2, "{again:?}");
    for m in &again {
        assert!(!acked.contains(m), "{m:?} was acked");
    }
    // Queues it does not match keep theirs.
    assert_eq!(
        b.store()
            .count_messages("queue://jobs.a.deep")
            .await
            .unwrap(),
        1
    );
    assert_eq!(b.store().count_messages("queue://jobs").await.unwrap(), 1);
    b.shutdown().await.unwrap();
}

/// A wildcard consumer's prefetch counts every destination together: with prefetch 2
/// over three queues of 3 messages, 2 arrive until it acks.
async fn prefetch_counts_every_destination_together(t: TestStore) {
    let b = start(&t).await;
    for q in ["queue://p.a", "queue://p.b", "queue://p.c"] {
        for i in 0..3 {
            b.send(q, Message::new(format!("{q}{i}"))).await.unwrap();
        }
    }
    let options = SubscribeOptions::non_durable()
        .ack(AckMode::Client)
        .prefetch(2);
    let mut sub = b.subscribe("queue://p.*", options).await.unwrap();
    // Prefetch 2: two come, and no third until an ack (see `received` on the window).
    let mut first = take(&mut sub, 2).await;
    while let Some(m) = quiet(&mut sub).await {
        first.push(m);
    }
    assert_eq!(first.len(), 2);
    sub.ack(&first[0]).await.unwrap();
    let more = next(&mut sub).await;
    assert!(quiet(&mut sub).await.is_none());
    sub.ack_up_to(&more).await.unwrap();
    let mut total = 3;
    while total < 9 {
        let m = next(&mut sub).await;
        total += 1;
        sub.ack(&m).await.unwrap();
    }
    assert!(quiet(&mut sub).await.is_none(), "only 9 were sent");
    b.shutdown().await.unwrap();
}

/// A durable `orders.>` keeps its messages on every matching topic while offline:
/// on topics that existed, on one created while it was offline, and on one created
/// after a restart; they arrive when it re-attaches, once.
async fn durable_wildcard_keeps_its_backlog_across_restarts(t: TestStore) {
    let b = start(&t).await;
    let mut sub = b.subscribe("topic://orders.>", durable()).await.unwrap();
    b.send("topic://orders.a", Message::new("a1"))
        .await
        .unwrap();
    assert_eq!(
        received(&mut sub, 1).await,
        pairs(&[("topic://orders.a", "a1")])
    );
    drop(sub);
    b.send("topic://orders.a", Message::new("a2"))
        .await
        .unwrap();
    b.send("topic://orders.b", Message::new("b1"))
        .await
        .unwrap();
    b.send("topic://other", Message::new("no")).await.unwrap();
    b.shutdown().await.unwrap();

    let b = start(&t).await;
    b.send("topic://orders.c.x", Message::new("c1"))
        .await
        .unwrap();
    b.send("topic://orders.b", Message::new("b2"))
        .await
        .unwrap();
    let mut sub = b.subscribe("topic://orders.>", durable()).await.unwrap();
    let mut got = received(&mut sub, 4).await;
    got.sort();
    assert_eq!(
        got,
        pairs(&[
            ("topic://orders.a", "a2"),
            ("topic://orders.b", "b1"),
            ("topic://orders.b", "b2"),
            ("topic://orders.c.x", "c1"),
        ])
    );
    // A second consumer of the same durable subscription is refused.
    let e = b
        .subscribe("topic://orders.>", durable())
        .await
        .err()
        .expect("in use");
    assert!(e.to_string().contains("in use"), "{e}");
    drop(sub);
    // Auto acks are sent when the stream is dropped; then cleanup empties the topics.
    for topic in ["orders.a", "orders.b", "orders.c.x"] {
        wait_rows(&b, &format!("topic://{topic}"), 0).await;
    }
    b.shutdown().await.unwrap();

    let b = start(&t).await;
    let mut sub = b.subscribe("topic://orders.>", durable()).await.unwrap();
    assert_eq!(received(&mut sub, 0).await, Vec::new());
    b.send("topic://orders.d", Message::new("d1"))
        .await
        .unwrap();
    assert_eq!(
        received(&mut sub, 1).await,
        pairs(&[("topic://orders.d", "d1")])
    );
    b.shutdown().await.unwrap();
}

/// A second consumer of a durable wildcard subscription is refused, and changes
/// nothing: not even the selector stored with it (found by an adversarial run: the
/// refused SUBSCRIBE rewrote it, and after a restart a topic created while the
/// subscriber was away kept only what the refused selector matched).
async fn a_refused_consumer_changes_nothing_stored(t: TestStore) {
    let b = start(&t).await;
    let with = |text: &str| durable().selector(ebb::Selector::parse(text).unwrap());
    let first = b
        .subscribe("topic://fx.>", with("kind = 'a'"))
        .await
        .unwrap();
    let e = b
        .subscribe("topic://fx.>", with("kind = 'b'"))
        .await
        .err()
        .expect("in use");
    assert!(e.to_string().contains("in use"), "{e}");
    drop(first);
    b.shutdown().await.unwrap();

    let b = start(&t).await;
    for kind in ["a", "b"] {
        let m = Message::new(format!("new-{kind}")).header("kind", kind);
        b.send("topic://fx.new", m).await.unwrap();
    }
    let mut sub = b
        .subscribe("topic://fx.>", with("kind = 'a'"))
        .await
        .unwrap();
    assert_eq!(
        received(&mut sub, 1).await,
        pairs(&[("topic://fx.new", "new-a")])
    );
    b.shutdown().await.unwrap();
}

/// Removing a durable wildcard subscription removes it from every topic and its
/// definition: nothing is kept for it any more, also on topics created later. A
/// durable name moved from a wildcard to one topic (or back) is a new subscription
/// (JMS, case DUR-11): the old one goes with its backlog.
async fn durable_wildcard_is_removed_and_moved_whole(t: TestStore) {
    let b = start(&t).await;
    drop(b.subscribe("topic://orders.>", durable()).await.unwrap());
    b.send("topic://orders.a", Message::new("a1"))
        .await
        .unwrap();
    b.send("topic://orders.b", Message::new("b1"))
        .await
        .unwrap();
    assert!(b
        .remove_durable("topic://orders.>", "client", "all-orders")
        .await
        .unwrap());
    assert!(!b
        .remove_durable("topic://orders.>", "client", "all-orders")
        .await
        .unwrap());
    for topic in ["topic://orders.a", "topic://orders.b"] {
        assert_eq!(b.store().count_subscriptions(topic).await.unwrap(), 0);
        wait_rows(&b, topic, 0).await;
    }
    b.send("topic://orders.new", Message::new("n1"))
        .await
        .unwrap();
    assert_eq!(
        b.store()
            .count_messages("topic://orders.new")
            .await
            .unwrap(),
        0
    );

    // Wildcard → one topic: the wildcard's subscriptions and backlog go.
    drop(b.subscribe("topic://orders.>", durable()).await.unwrap());
    b.send("topic://orders.a", Message::new("a2"))
        .await
        .unwrap();
    b.send("topic://orders.b", Message::new("b2"))
        .await
        .unwrap();
    let mut one = b.subscribe("topic://orders.a", durable()).await.unwrap();
    assert_eq!(
        received(&mut one, 0).await,
        Vec::new(),
        "a new subscription"
    );
    assert!(!b
        .durable_subscription_exists("topic://orders.>", "client", "all-orders")
        .await
        .unwrap());
    assert_eq!(
        b.store()
            .count_subscriptions("topic://orders.b")
            .await
            .unwrap(),
        0
    );
    b.send("topic://orders.a", Message::new("a3"))
        .await
        .unwrap();
    assert_eq!(received(&mut one, 1).await, pairs(&[("", "a3")]));
    drop(one);
    // …and back: the topic's subscription goes.
    b.send("topic://orders.a", Message::new("a4"))
        .await
        .unwrap();
    let mut all = b.subscribe("topic://orders.>", durable()).await.unwrap();
    assert_eq!(
        received(&mut all, 0).await,
        Vec::new(),
        "a new subscription"
    );
    b.send("topic://orders.b", Message::new("b3"))
        .await
        .unwrap();
    assert_eq!(
        received(&mut all, 1).await,
        pairs(&[("topic://orders.b", "b3")])
    );
    b.shutdown().await.unwrap();
}

/// Sending to a wildcard is refused, in the API and over STOMP (an ERROR); a
/// subscription to a wildcard works over STOMP, each MESSAGE naming the destination
/// it was sent to, and `browser:true` on a wildcard is refused.
async fn sending_to_a_wildcard_is_refused(t: TestStore) {
    let s = server(&t, Policy::default()).await;
    let e = s
        .broker
        .send("topic://orders.>", Message::new("x"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidDestination { .. }), "{e}");
    let e = s
        .broker
        .send("queue://jobs.*", Message::new("x"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidDestination { .. }), "{e}");

    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\ndestination:/topic/orders.>\nid:w\nreceipt:s\n\n\0")
        .await;
    receipt(&mut c, "s").await;
    let mut p = Client::connected(s.addr, None).await;
    p.write(b"SEND\ndestination:/topic/orders.eu\nreceipt:r\n\nhello\0")
        .await;
    receipt(&mut p, "r").await;
    let m = c.frame().await.expect("a MESSAGE");
    assert_eq!(m.command, Command::Message);
    assert_eq!(m.get("destination"), Some("/topic/orders.eu"));
    assert_eq!(m.get("subscription"), Some("w"));
    assert_eq!(&m.body[..], b"hello");

    p.write(b"SEND\ndestination:/topic/orders.>\nreceipt:r2\n\nx\0")
        .await;
    let e = p.frame().await.expect("an ERROR");
    assert_eq!(e.command, Command::Error);
    assert!(
        e.get("message").unwrap().contains("wildcards"),
        "{:?}",
        e.get("message")
    );
    let mut q = Client::connected(s.addr, None).await;
    q.write(b"SUBSCRIBE\ndestination:/queue/jobs.*\nid:b\nbrowser:true\n\n\0")
        .await;
    let e = q.frame().await.expect("an ERROR");
    assert_eq!(e.command, Command::Error);
    assert_eq!(
        e.get("message"),
        Some("browser:true browses one queue, not a wildcard destination")
    );
    assert!(c.quiet().await.is_none(), "nothing was sent to a wildcard");
    s.stop().await;
}

/// Over STOMP, a durable `/topic/orders.>` keeps what is sent while its client is
/// away (to a topic created meanwhile too), and UNSUBSCRIBE with its name, right
/// after the consumer detached, removes it from every topic.
async fn stomp_durable_wildcard_survives_its_client_and_unsubscribes(t: TestStore) {
    let s = server(&t, Policy::default()).await;
    let subscribe = b"SUBSCRIBE\ndestination:/topic/orders.>\nid:w\nack:client\nactivemq.subscriptionName:all\nreceipt:s\n\n\0";
    let mut c = Client::connected(s.addr, Some("shop")).await;
    c.write(subscribe).await;
    receipt(&mut c, "s").await;
    c.write(b"DISCONNECT\nreceipt:bye\n\n\0").await;
    receipt(&mut c, "bye").await;
    let mut p = Client::connected(s.addr, None).await;
    p.write(b"SEND\ndestination:/topic/orders.new\npersistent:true\nreceipt:r\n\nwhile away\0")
        .await;
    receipt(&mut p, "r").await;
    let mut c = Client::connected(s.addr, Some("shop")).await;
    c.write(subscribe).await;
    let frames = messages_until_receipt(&mut c, "s").await;
    let mut got = frames;
    if got.iter().all(|f| f.command != Command::Message) {
        got.push(c.frame().await.expect("the message kept while away"));
    }
    let m = got.iter().find(|f| f.command == Command::Message).unwrap();
    assert_eq!(m.get("destination"), Some("/topic/orders.new"));
    assert_eq!(&m.body[..], b"while away");
    c.write(format!("ACK\nid:{}\n\n\0", m.get("ack").unwrap()).as_bytes())
        .await;
    c.write(b"UNSUBSCRIBE\nid:w\nactivemq.subscriptionName:all\nreceipt:u\n\n\0")
        .await;
    receipt(&mut c, "u").await;
    assert_eq!(
        s.broker
            .store()
            .count_subscriptions("topic://orders.new")
            .await
            .unwrap(),
        0
    );
    assert!(!s
        .broker
        .durable_subscription_exists("topic://orders.>", "shop", "all")
        .await
        .unwrap());
    s.stop().await;
}

/// With authorization, a wildcard subscription reads only the matching destinations
/// the connection may read: nothing from the others.
async fn a_wildcard_reads_only_what_the_connection_may_read(t: TestStore) {
    let entry = |destination: &str, read: &[&str]| AuthorizationEntry {
        destination: destination.into(),
        read: read.iter().map(|s| s.to_string()).collect(),
        write: vec!["billing".into()],
        admin: read.iter().map(|s| s.to_string()).collect(),
    };
    let security = Security {
        login_guard: Default::default(),
        temp_destination_authorization_entry: None,
        users: vec![User {
            login: "alice".into(),
            password_hash: hash_password("pw").unwrap(),
            certificate_subject: None,
            groups: vec!["billing".into()],
        }],
        authorization: vec![
            entry("topic://orders.secret", &[]),
            entry("topic://>", &["billing"]),
        ],
    };
    let s = server_full(&t, Policy::default(), Limits::default(), security, 30_000).await;
    let mut c = Client::open(s.addr).await;
    c.write(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:pw\nclient-id:al\n\n\0")
        .await;
    // (argon2 is slow in a debug build on a busy machine: 30 s for the answer.)
    assert_eq!(c.frame().await.unwrap().command, Command::Connected);
    c.write(b"SUBSCRIBE\ndestination:/topic/orders.*\nid:w\nreceipt:s\n\n\0")
        .await;
    receipt(&mut c, "s").await;
    for (topic, text) in [
        ("topic://orders.secret", "hidden"),
        ("topic://orders.eu", "shown"),
    ] {
        s.broker.send(topic, Message::new(text)).await.unwrap();
    }
    let m = c.frame().await.expect("a MESSAGE");
    assert_eq!(m.get("destination"), Some("/topic/orders.eu"));
    assert_eq!(&m.body[..], b"shown");
    assert!(c.quiet().await.is_none(), "nothing of orders.secret");
    // A durable one is held on every matching topic, also while offline: refused
    // unless one entry grants it on all of them.
    c.write(b"SUBSCRIBE\ndestination:/topic/orders.eu.*\nid:d\nactivemq.subscriptionName:eu\nreceipt:d\n\n\0")
        .await;
    receipt(&mut c, "d").await;
    c.write(b"SUBSCRIBE\ndestination:/topic/orders.*\nid:d2\nactivemq.subscriptionName:all\nreceipt:d2\n\n\0")
        .await;
    let e = c.frame().await.expect("an ERROR");
    assert_eq!(e.command, Command::Error);
    assert_eq!(e.get("receipt-id"), Some("d2"));
    assert_eq!(
        e.get("message"),
        Some("not authorized: the entry for topic://orders.secret does not cover all of topic://orders.*; rights differ across the destinations it matches (subscribe to a narrower pattern)")
    );
    s.stop().await;
}

on_every_backend!(
    #[actix_rt::test]
    topic_wildcard_reads_running_and_new_topics,
    queue_wildcard_consumes_stored_and_new_queues,
    prefetch_counts_every_destination_together,
    durable_wildcard_keeps_its_backlog_across_restarts,
    durable_wildcard_is_removed_and_moved_whole,
    a_refused_consumer_changes_nothing_stored,
    sending_to_a_wildcard_is_refused,
    stomp_durable_wildcard_survives_its_client_and_unsubscribes,
    a_wildcard_reads_only_what_the_connection_may_read,
);
