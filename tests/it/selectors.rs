//! Selectors (the STOMP `selector` header, JMS message selectors): case SEL-10 (a
//! selector is honoured and is not starved by messages ahead that it does not match),
//! the bound on what finding them costs (rows read, messages held), queues and
//! non-durable topics, and the refusals.

use std::sync::Arc;

use ebb::stomp::frame::{Command, Frame};
use ebb::test_util::stomp::*;
use ebb::test_util::*;
use ebb::{AckMode, Message, Policy, Selector, SubscribeOptions, UsageConfig};
use ebb_store::{MessageStoreExt, NewMessage, Payload};

fn queue_policy() -> Policy {
    Policy {
        expire_messages_period: 0,
        ..Policy::default()
    }
}

async fn send(c: &mut Client, destination: &str, headers: &str, body: &str, receipt_id: &str) {
    c.write(
        format!("SEND\ndestination:{destination}\npersistent:true\n{headers}receipt:{receipt_id}\n\n{body}\0")
            .as_bytes(),
    )
    .await;
    receipt(c, receipt_id).await;
}

fn body_of(f: &Frame) -> String {
    String::from_utf8_lossy(&f.body).into_owned()
}

/// SEL-10: 450 `kind:video` messages, then three `kind:image`; a consumer with
/// `kind = 'image'` (prefetch 5) gets exactly the three images, although the queue's
/// memory holds only 400 messages, all videos; the 450 videos are still there after.
/// The variant with a colon in the quoted value (a bug of RabbitMQ's STOMP plugin).
async fn sel_10_a_selector_finds_its_messages_behind_others(t: TestStore) {
    let b = broker_with(
        &t,
        vec![("queue://>", queue_policy())],
        UsageConfig::default(),
    )
    .await;
    let s = serve(b, Default::default(), Default::default(), 30_000).await;
    let mut p = Client::connected(s.addr, None).await;
    for i in 0..450 {
        p.write(
            format!("SEND\ndestination:/queue/SEL\npersistent:true\nkind:video\n\nvideo-{i}\0")
                .as_bytes(),
        )
        .await;
    }
    for i in 1..=3 {
        send(
            &mut p,
            "/queue/SEL",
            "kind:image\n",
            &format!("img{i}"),
            &format!("r{i}"),
        )
        .await;
    }
    send(
        &mut p,
        "/queue/SEL",
        "correlation-id:instance:1\n",
        "corr",
        "rc",
    )
    .await;
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\ndestination:/queue/SEL\nid:1\nack:client-individual\nactivemq.prefetchSize:5\nselector:kind = 'image'\nreceipt:s1\n\n\0")
        .await;
    receipt(&mut c, "s1").await;
    let mut got = Vec::new();
    for _ in 0..3 {
        let f = c.frame().await.expect("an image within 3 s");
        assert_eq!(f.command, Command::Message, "{f:?}");
        assert_eq!(f.get("kind"), Some("image"), "{f:?}");
        got.push(f);
    }
    assert_eq!(
        got.iter().map(body_of).collect::<Vec<_>>(),
        ["img1", "img2", "img3"]
    );
    assert!(c.quiet().await.is_none(), "nothing else matches");
    for (i, f) in got.iter().enumerate() {
        c.write(format!("ACK\nid:{}\nreceipt:a{i}\n\n\0", f.get("ack").unwrap()).as_bytes())
            .await;
        receipt(&mut c, &format!("a{i}")).await;
    }
    let mut k = Client::connected(s.addr, None).await;
    k.write(b"SUBSCRIBE\ndestination:/queue/SEL\nid:1\nack:client-individual\nselector:JMSCorrelationID = 'instance:1'\n\n\0")
        .await;
    let f = k.frame().await.expect("the correlated message");
    assert_eq!(body_of(&f), "corr");
    assert_eq!(
        s.broker
            .store()
            .count_messages("queue://SEL")
            .await
            .unwrap(),
        451,
        "450 videos and the correlated message (not acked) are left"
    );
    s.stop().await;
}

/// Fills queue `container` in the store with `count` messages carrying header
/// `kind: value`, before a broker runs on it.
async fn preload_kind(t: &TestStore, container: &str, count: usize, kind: &str) {
    preload_with(t, container, count, |_| ("kind", kind.to_string()), kind).await;
}

/// Fills queue `container` with `count` messages named `<prefix>-<i>`, each with the
/// header `header(i)`, before a broker runs on it.
async fn preload_with(
    t: &TestStore,
    container: &str,
    count: usize,
    header: impl Fn(usize) -> (&'static str, String),
    prefix: &str,
) {
    let store = t.open().await;
    let mut done = 0;
    while done < count {
        let n = (count - done).min(5_000);
        let batch = (done..done + n)
            .map(|i| NewMessage {
                container: container.into(),
                indexed_headers: container.starts_with("queue://"),
                last_value: None,
                message_id: format!("{prefix}-{i}"),
                expiration: 0,
                priority: 4,
                xid: None,
                payload: Arc::new(Payload {
                    timestamp_ms: 0,
                    headers: {
                        let (name, value) = header(i);
                        vec![(name.to_string(), value)]
                    },
                    body: format!("{prefix}-{i}").into_bytes().into(),
                }),
            })
            .collect();
        store.add_messages(batch).await.unwrap();
        done += n;
    }
    store.close().await;
}

/// The bound: 20,000 non-matching messages stored ahead of 3 matching ones. The
/// selector's consumer gets the 3 after one pass over the backlog in bounded pages,
/// with at most the cursor's cache in memory; the pass is not repeated: a matching
/// message sent later costs one more short page, not a second pass. A plain consumer
/// then drains the backlog in order and never sees the three (they were acked).
///
/// With `kind = 'image'` the store tests the header in SQL: each page covers a window
/// of ids (25 pages' worth) and reads back only the rows that match. With
/// `kind LIKE 'im%'` it cannot: each page reads `max_browse_page_size` rows back and
/// the selector tests them, so the rows read are the backlog plus a page.
async fn a_selector_scan_is_one_bounded_pass(t: TestStore, selector: &str, in_sql: bool) {
    const AHEAD: usize = 20_000;
    preload_kind(&t, "queue://big", AHEAD, "video").await;
    preload_kind(&t, "queue://big", 3, "image").await;
    let b = broker_with(
        &t,
        vec![("queue://>", queue_policy())],
        UsageConfig::default(),
    )
    .await;
    let mut sub = b
        .subscribe(
            "queue://big",
            SubscribeOptions::non_durable()
                .ack(AckMode::Client)
                .prefetch(10)
                .selector(Selector::parse(selector).unwrap()),
        )
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let m = next(&mut sub).await;
        sub.ack(&m).await.unwrap();
        got.push(body(&m));
    }
    assert_eq!(got, ["image-0", "image-1", "image-2"]);
    let page = u64::from(queue_policy().max_browse_page_size);
    let stats = b.queue_stats("big").await.unwrap();
    if in_sql {
        assert!(stats.scan_rows <= 3, "only matches read back: {stats:?}");
        assert!(
            stats.scan_pages <= AHEAD as u64 / (25 * page) + 2,
            "windows of 25 pages: {stats:?}"
        );
    } else {
        assert!(
            stats.scan_rows <= AHEAD as u64 + 3 + page,
            "one pass: {} rows read for {AHEAD} ahead",
            stats.scan_rows
        );
        assert!(stats.scan_pages <= stats.scan_rows / page + 2, "{stats:?}");
    }
    assert_eq!(stats.scan_matches, 3);
    assert!(
        stats.pending_in_memory <= 2 * u64::from(queue_policy().max_page_size),
        "memory holds the cursor's cache, not the backlog: {stats:?}"
    );
    assert!(stats.taken_ahead <= 3, "{stats:?}");
    assert!(quiet(&mut sub).await.is_none());

    // One more image: found with a short page after the last position.
    let before = b.queue_stats("big").await.unwrap();
    b.send(
        "queue://big",
        Message::new("image-late")
            .persistent(true)
            .header("kind", "image"),
    )
    .await
    .unwrap();
    let m = next(&mut sub).await;
    assert_eq!(body(&m), "image-late");
    sub.ack(&m).await.unwrap();
    let after = b.queue_stats("big").await.unwrap();
    assert!(
        after.scan_rows - before.scan_rows <= page,
        "no second pass: {} more rows",
        after.scan_rows - before.scan_rows
    );
    assert!(
        after.scan_pages - before.scan_pages <= 2,
        "no second pass: {after:?}"
    );
    drop(sub);

    // A plain consumer drains the videos, in order, and nothing else.
    let mut plain = b
        .subscribe("queue://big", SubscribeOptions::non_durable().prefetch(500))
        .await
        .unwrap();
    for i in 0..AHEAD {
        let m = next(&mut plain).await;
        assert_eq!(body(&m), format!("video-{i}"));
    }
    assert!(quiet(&mut plain).await.is_none(), "the images were acked");
    wait_rows(&b, "queue://big", 0).await;
    b.shutdown().await.unwrap();
}

async fn a_selector_scan_in_sql_is_one_bounded_pass(t: TestStore) {
    a_selector_scan_is_one_bounded_pass(t, "kind = 'image'", true).await;
}

async fn a_selector_scan_in_memory_is_one_bounded_pass(t: TestStore) {
    a_selector_scan_is_one_bounded_pass(t, "kind LIKE 'im%'", false).await;
}

/// A message a selector's scan delivered and that comes back (NACK, consumer gone)
/// waits in its place, marked redelivered; it goes to a consumer it matches once,
/// never twice, while the cursor catches up behind it.
async fn a_scanned_message_given_back_is_delivered_once_again(t: TestStore) {
    preload_kind(&t, "queue://back", 1_000, "video").await;
    preload_kind(&t, "queue://back", 2, "image").await;
    let b = broker_with(
        &t,
        vec![("queue://>", queue_policy())],
        UsageConfig::default(),
    )
    .await;
    let images = || {
        SubscribeOptions::non_durable()
            .ack(AckMode::Client)
            .prefetch(5)
            .selector(Selector::parse("kind = 'image'").unwrap())
    };
    let mut first = b.subscribe("queue://back", images()).await.unwrap();
    let a = next(&mut first).await;
    let c = next(&mut first).await;
    assert_eq!((body(&a), body(&c)), ("image-0".into(), "image-1".into()));
    first.acker().nack(&a).await.unwrap();
    drop(first);
    // Both come back, image-0 first, to the next consumer they match.
    let mut second = b.subscribe("queue://back", images()).await.unwrap();
    let again: Vec<_> = [next(&mut second).await, next(&mut second).await]
        .into_iter()
        .collect();
    assert_eq!(
        again.iter().map(body).collect::<Vec<_>>(),
        ["image-0", "image-1"]
    );
    assert!(again.iter().all(|m| m.redelivered()));
    for m in &again {
        second.ack(m).await.unwrap();
    }
    drop(second);
    // A plain consumer drains the rest: the videos only.
    let mut plain = b
        .subscribe(
            "queue://back",
            SubscribeOptions::non_durable().prefetch(100),
        )
        .await
        .unwrap();
    for m in take(&mut plain, 1_000).await {
        assert!(body(&m).starts_with("video-"), "{}", body(&m));
    }
    assert!(quiet(&mut plain).await.is_none(), "1,000 videos were sent");
    b.shutdown().await.unwrap();
}

/// Two consumers with different selectors and a plain one share a live queue: each
/// message goes to one consumer that matches it, in order per consumer; the plain one
/// takes what no selector wants.
async fn selectors_share_a_live_queue(t: TestStore) {
    let b = broker_with(
        &t,
        vec![("queue://>", queue_policy())],
        UsageConfig::default(),
    )
    .await;
    let sub = |selector: Option<&str>| {
        let mut options = SubscribeOptions::non_durable().prefetch(1_000);
        if let Some(s) = selector {
            options = options.selector(Selector::parse(s).unwrap());
        }
        b.subscribe("queue://mix", options)
    };
    let red = sub(Some("color = 'red'")).await.unwrap();
    let big = sub(Some("size > 10 AND color <> 'red'")).await.unwrap();
    let rest = sub(None).await.unwrap();
    let colors = ["red", "blue", "green"];
    for i in 0..300 {
        let m = Message::new(format!("m{i}"))
            .header("color", colors[i % 3])
            .header("size", (i % 20).to_string());
        b.send("queue://mix", m).await.unwrap();
    }
    // Which of them takes a message that two match is the queue's choice.
    let mut subs = [red, big, rest];
    let [red, big, rest]: [Vec<ebb::Received>; 3] =
        take_spread(&mut subs, 300).await.try_into().unwrap();
    let header = |m: &ebb::Received, name: &str| {
        m.headers()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert!(red.iter().all(|m| header(m, "color") == "red"));
    // Round-robin: a red message goes to the red consumer or, in its turn, to the
    // plain one; never to `big`.
    let red_elsewhere = rest.iter().filter(|m| header(m, "color") == "red").count();
    assert_eq!(red.len() + red_elsewhere, 100);
    assert!(
        red.len() >= 50,
        "the red consumer gets its turns: {}",
        red.len()
    );
    assert!(big
        .iter()
        .all(|m| header(m, "color") != "red" && header(m, "size").parse::<u32>().unwrap() > 10));
    for got in [&red, &big, &rest] {
        let order: Vec<u32> = got.iter().map(|m| body(m)[1..].parse().unwrap()).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "in order: {order:?}");
    }
    b.shutdown().await.unwrap();
}

/// A non-durable topic subscription with a selector receives only what it matches; a
/// bad selector is an ERROR naming the column, and nothing is subscribed.
async fn topic_selectors_and_refusals(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut c = Client::connected(s.addr, Some("cs")).await;
    c.write(b"SUBSCRIBE\ndestination:/topic/T\nid:1\nselector:n >= 2 AND n < 4\nreceipt:s\n\n\0")
        .await;
    receipt(&mut c, "s").await;
    let mut p = Client::connected(s.addr, None).await;
    for n in 0..6 {
        send(
            &mut p,
            "/topic/T",
            &format!("n:{n}\n"),
            &format!("t{n}"),
            &format!("r{n}"),
        )
        .await;
    }
    let got = [c.frame().await.unwrap(), c.frame().await.unwrap()];
    assert_eq!(got.iter().map(body_of).collect::<Vec<_>>(), ["t2", "t3"]);
    assert!(c.quiet().await.is_none());

    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\ndestination:/queue/Q\nid:1\nselector:kind = \nreceipt:x\n\n\0")
        .await;
    let f = c.frame().await.unwrap();
    assert_eq!(f.command, Command::Error, "{f:?}");
    assert_eq!(f.get("receipt-id"), Some("x"));
    assert!(
        f.get("message")
            .unwrap()
            .starts_with("invalid selector at column "),
        "{f:?}"
    );
    s.stop().await;
}

/// A durable subscription with a selector: offline, its backlog holds every message
/// of the topic, and when it comes back it gets only those it matches; the others are
/// not its messages, so its mark moves over them and cleanup deletes them (the store
/// ends empty). Online, the same for live messages. Its selector is stored with it and
/// survives a restart; re-subscribing with another selector creates it anew (JMS, case
/// DUR-11), with the same one keeps its backlog.
async fn a_durable_subscription_keeps_its_selector(t: TestStore) {
    let b = broker(&t, policy(100, 400), 2).await;
    let durable = |selector: &str| {
        SubscribeOptions::durable("c", "d")
            .ack(AckMode::Client)
            .selector(Selector::parse(selector).unwrap())
    };
    let send = |n: u32| {
        let b = b.clone();
        async move {
            b.send(
                "topic://sel",
                Message::new(format!("n{n}"))
                    .persistent(true)
                    .header("n", n.to_string()),
            )
            .await
            .unwrap();
        }
    };
    drop(b.subscribe("topic://sel", durable("n > 2")).await.unwrap());
    for n in 0..6 {
        send(n).await;
    }
    let mut sub = b.subscribe("topic://sel", durable("n > 2")).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let m = next(&mut sub).await;
        got.push(body(&m));
        sub.ack(&m).await.unwrap();
    }
    assert_eq!(got, ["n3", "n4", "n5"]);
    // Live: only matches are delivered; the rest is acked for it all the same.
    for n in [0, 1, 2, 0] {
        send(n).await;
    }
    send(7).await;
    let m = next(&mut sub).await;
    assert_eq!(body(&m), "n7");
    sub.ack(&m).await.unwrap();
    assert!(quiet(&mut sub).await.is_none());
    wait_rows(&b, "topic://sel", 0).await;
    drop(sub);
    let stats = b.topic_stats("topic://sel").await.unwrap();
    assert_eq!(stats.dispatched, 4, "only its messages were delivered");

    // Stored with it: after a restart, the same selector keeps the backlog, filtered.
    for n in [1, 8] {
        send(n).await;
    }
    b.shutdown().await.unwrap();
    let b = broker(&t, policy(100, 400), 2).await;
    let mut sub = b.subscribe("topic://sel", durable("n > 2")).await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!(body(&m), "n8");
    sub.ack(&m).await.unwrap();
    assert!(quiet(&mut sub).await.is_none());
    drop(sub);
    wait_rows(&b, "topic://sel", 0).await;

    // Another selector: a new subscription, without the backlog.
    b.send(
        "topic://sel",
        Message::new("kept").persistent(true).header("n", "9"),
    )
    .await
    .unwrap();
    let mut sub = b.subscribe("topic://sel", durable("n > 0")).await.unwrap();
    assert!(quiet(&mut sub).await.is_none(), "created anew: no backlog");
    b.send(
        "topic://sel",
        Message::new("new").persistent(true).header("n", "1"),
    )
    .await
    .unwrap();
    assert_eq!(body(&next(&mut sub).await), "new");
    b.shutdown().await.unwrap();
}

/// Expiry of an offline durable subscription with a selector counts only its own
/// messages: 4 expired messages, one of which a selector matches, are 4 expirations for
/// a subscription without a selector and 1 for the one with it; the store ends empty.
async fn expiry_counts_only_a_selectors_messages(t: TestStore) {
    let b = broker(&t, policy(50, 400), 2).await;
    drop(
        b.subscribe("topic://exp", SubscribeOptions::durable("c", "all"))
            .await
            .unwrap(),
    );
    let picky = SubscribeOptions::durable("c", "picky").selector(Selector::parse("n = 2").unwrap());
    drop(b.subscribe("topic://exp", picky).await.unwrap());
    for n in 0..4 {
        b.send(
            "topic://exp",
            Message::new(format!("e{n}"))
                .persistent(true)
                .header("n", n.to_string())
                .ttl(std::time::Duration::from_millis(100)),
        )
        .await
        .unwrap();
    }
    let stats = wait_for(&b, "exp", |s| s.expired >= 5 && s.cleaned_up == 4).await;
    assert_eq!(stats.expired, 5);
    // One more housekeeping run, to its end, counts nothing again.
    b.run_housekeeping("topic://exp").await.unwrap();
    let again = wait_for(&b, "exp", |s| {
        s.ticks > stats.ticks && s.expiry_pages == s.expiry_pages_started
    })
    .await;
    assert_eq!(again.expired, 5, "never counted twice");
    wait_rows(&b, "topic://exp", 0).await;
    b.shutdown().await.unwrap();
}

/// A selector consumer that acks automatically, on a backlog larger than the
/// cursor's cache, while the cursor reads on behind its scan: each message is
/// delivered once. (The scan once took messages the cursor had meanwhile read,
/// delivered and seen acked, their rows not yet deleted: they came twice.)
async fn a_scan_never_takes_what_the_cursor_read_meanwhile(t: TestStore) {
    const N: usize = 2_000;
    preload_with(&t, "queue://auto", N, |i| ("n", i.to_string()), "m").await;
    let b = broker_with(
        &t,
        vec![("queue://>", queue_policy())],
        UsageConfig::default(),
    )
    .await;
    for selector in ["n NOT LIKE '%0'", "n IS NOT NULL"] {
        let options = SubscribeOptions::non_durable()
            .ack(AckMode::Auto)
            .selector(Selector::parse(selector).unwrap());
        let mut sub = b.subscribe("queue://auto", options).await.unwrap();
        let mut seen = std::collections::HashSet::new();
        let expected = if selector.contains("LIKE") {
            N - N / 10
        } else {
            N / 10
        };
        for m in take(&mut sub, expected).await {
            assert!(
                seen.insert(body(&m)),
                "{selector}: {} delivered twice",
                body(&m)
            );
        }
        assert_eq!(seen.len(), expected, "{selector}");
        assert!(
            quiet(&mut sub).await.is_none(),
            "{selector}: no more than {expected}"
        );
        drop(sub);
    }
    wait_rows(&b, "queue://auto", 0).await;
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    sel_10_a_selector_finds_its_messages_behind_others,
    a_selector_scan_in_sql_is_one_bounded_pass,
    a_selector_scan_in_memory_is_one_bounded_pass,
    a_scanned_message_given_back_is_delivered_once_again,
    selectors_share_a_live_queue,
    topic_selectors_and_refusals,
    a_scan_never_takes_what_the_cursor_read_meanwhile,
    a_durable_subscription_keeps_its_selector,
    expiry_counts_only_a_selectors_messages,
);
