//! The topic cases over STOMP with raw frames: EXP-01 (expiry for every durable
//! subscription), DUR-01 (out-of-order and priority acks never skip a message) and
//! DUR-03 (an offline subscription survives a restart with an empty topic).

use ebb::stomp::frame::Command;
use ebb::test_util::stomp::*;
use ebb::test_util::*;

fn durable_sub(topic: &str, id: &str, name: &str, extra: &str) -> Vec<u8> {
    format!(
        "SUBSCRIBE\ndestination:/topic/{topic}\nid:{id}\nack:client-individual\nactivemq.subscriptionName:{name}\n{extra}receipt:sub-{id}\n\n\0"
    )
    .into_bytes()
}

async fn ack(c: &mut Client, frame: &ebb::stomp::frame::Frame, receipt_id: &str) {
    let id = frame.get("ack").expect("an ack id").to_string();
    c.write(format!("ACK\nid:{id}\nreceipt:{receipt_id}\n\n\0").as_bytes())
        .await;
    receipt(c, receipt_id).await;
}

/// EXP-01: two offline durables, three messages that expire: 6 expirations, store
/// empty, nothing delivered on re-subscribing.
async fn exp_01_expiry_for_every_durable_subscription(t: TestStore) {
    let s = server(&t, policy(100, 400)).await;
    let mut a = Client::connected(s.addr, Some("c1")).await;
    a.write(&durable_sub("T", "1", "s1", "")).await;
    receipt(&mut a, "sub-1").await;
    a.write(&durable_sub("T", "2", "s2", "")).await;
    receipt(&mut a, "sub-2").await;
    a.write(b"DISCONNECT\nreceipt:d\n\n\0").await;
    receipt(&mut a, "d").await;
    let mut b = Client::connected(s.addr, None).await;
    let soon = ebb_actors::destination::now_ms() + 500;
    for i in 1..=3 {
        b.write(format!("SEND\ndestination:/topic/T\npersistent:true\nexpires:{soon}\nreceipt:r{i}\n\nm{i}\0").as_bytes())
            .await;
        receipt(&mut b, &format!("r{i}")).await;
    }
    let stats = wait_for(&s.broker, "T", |st| st.expired >= 6 && st.cleaned_up == 3).await;
    assert_eq!(stats.expired, 6);
    assert_eq!(
        s.broker.store().count_messages("topic://T").await.unwrap(),
        0
    );
    let mut a = Client::connected(s.addr, Some("c1")).await;
    a.write(&durable_sub("T", "1", "s1", "")).await;
    receipt(&mut a, "sub-1").await;
    a.write(&durable_sub("T", "2", "s2", "")).await;
    receipt(&mut a, "sub-2").await;
    assert!(
        a.quiet().await.is_none(),
        "no MESSAGE on either subscription"
    );
    assert_eq!(s.broker.topic_stats("topic://T").await.unwrap().expired, 6);
    s.stop().await;
}

/// DUR-01 with priorities: H1 and H2 (priority 9, larger ids) acked, then a restart:
/// exactly L1 and L2 come back.
async fn dur_01_priority_acks_keep_low_priority_messages(t: TestStore) {
    let prioritized = ebb::Policy {
        prioritized_messages: true,
        ..policy(100, 400)
    };
    let s = server(&t, prioritized.clone()).await;
    let mut c = Client::connected(s.addr, Some("c1")).await;
    c.write(&durable_sub("P", "1", "s1", "activemq.prefetchSize:1\n"))
        .await;
    receipt(&mut c, "sub-1").await;
    c.write(b"DISCONNECT\nreceipt:d\n\n\0").await;
    receipt(&mut c, "d").await;
    let mut p = Client::connected(s.addr, None).await;
    for (body, priority) in [("L1", 1), ("L2", 1), ("H1", 9), ("H2", 9)] {
        p.write(format!("SEND\ndestination:/topic/P\npersistent:true\npriority:{priority}\nreceipt:{body}\n\n{body}\0").as_bytes())
            .await;
        receipt(&mut p, body).await;
    }
    let mut c = Client::connected(s.addr, Some("c1")).await;
    c.write(&durable_sub("P", "1", "s1", "activemq.prefetchSize:1\n"))
        .await;
    receipt(&mut c, "sub-1").await;
    let h1 = c.frame().await.unwrap();
    assert_eq!(h1.body, &b"H1"[..]);
    let id = h1.get("ack").expect("an ack id").to_string();
    c.write(format!("ACK\nid:{id}\nreceipt:a1\n\n\0").as_bytes())
        .await;
    // H2 takes the slot the ACK frees, maybe before the ACK's receipt.
    let mut early = messages_until_receipt(&mut c, "a1").await;
    assert!(early.len() <= 1, "prefetch 1: {early:?}");
    let h2 = match early.pop() {
        Some(h2) => h2,
        None => c.frame().await.unwrap(),
    };
    assert_eq!(h2.body, &b"H2"[..]);
    let id = h2.get("ack").expect("an ack id").to_string();
    c.write(format!("ACK\nid:{id}\nreceipt:a2\n\n\0").as_bytes())
        .await;
    // L1 may take the slot before the receipt (it is not acked: it comes back below).
    messages_until_receipt(&mut c, "a2").await;
    c.write(b"DISCONNECT\nreceipt:d2\n\n\0").await;
    // L1 may already be on its way; the receipt still comes.
    loop {
        let f = c.frame().await.expect("the DISCONNECT receipt");
        if f.command == Command::Receipt {
            break;
        }
    }
    wait_for(&s.broker, "P", |st| st.cleaned_up == 2).await;
    assert_eq!(
        s.broker.store().count_messages("topic://P").await.unwrap(),
        2
    );
    s.stop().await;

    let s = server(&t, prioritized).await;
    let mut c = Client::connected(s.addr, Some("c1")).await;
    c.write(&durable_sub("P", "1", "s1", "")).await;
    receipt(&mut c, "sub-1").await;
    let l1 = c.frame().await.unwrap();
    let l2 = c.frame().await.unwrap();
    assert_eq!((&l1.body[..], &l2.body[..]), (&b"L1"[..], &b"L2"[..]));
    assert!(c.quiet().await.is_none(), "no H1 or H2 again");
    ack(&mut c, &l1, "a3").await;
    ack(&mut c, &l2, "a4").await;
    wait_for(&s.broker, "P", |st| st.cleaned_up == 2).await;
    assert_eq!(
        s.broker.store().count_messages("topic://P").await.unwrap(),
        0
    );
    s.stop().await;
}

/// DUR-03: everything consumed, restart with no stored rows, ten new messages: all
/// ten delivered in order after re-subscribing, none of the old.
async fn dur_03_offline_subscription_survives_restart(t: TestStore) {
    let s = server(&t, policy(100, 400)).await;
    let mut c = Client::connected(s.addr, Some("c3")).await;
    c.write(&durable_sub("R", "1", "r", "")).await;
    receipt(&mut c, "sub-1").await;
    for i in 0..10 {
        c.write(format!("SEND\ndestination:/topic/R\npersistent:true\n\nold{i}\0").as_bytes())
            .await;
    }
    let mut received = Vec::new();
    for _ in 0..10 {
        let m = c.frame().await.unwrap();
        assert_eq!(m.command, Command::Message);
        received.push(m);
    }
    for (i, m) in received.iter().enumerate() {
        ack(&mut c, m, &format!("a{i}")).await;
    }
    c.write(b"DISCONNECT\nreceipt:d\n\n\0").await;
    receipt(&mut c, "d").await;
    wait_for(&s.broker, "R", |st| st.cleaned_up == 10).await;
    s.stop().await;

    let s = server(&t, policy(100, 400)).await;
    let mut p = Client::connected(s.addr, None).await;
    for i in 1..=10 {
        p.write(
            format!("SEND\ndestination:/topic/R\npersistent:true\nreceipt:n{i}\n\nn{i}\0")
                .as_bytes(),
        )
        .await;
        receipt(&mut p, &format!("n{i}")).await;
    }
    // Only acks make cleanup due, and none came since the restart: once the start-up
    // cleanup batch is done (before or after the SENDs), no other deletes a row.
    wait_for(&s.broker, "R", |st| st.cleanup_batches >= 1).await;
    assert_eq!(
        s.broker.store().count_messages("topic://R").await.unwrap(),
        10
    );
    let mut c = Client::connected(s.addr, Some("c3")).await;
    c.write(&durable_sub("R", "1", "r", "")).await;
    receipt(&mut c, "sub-1").await;
    for i in 1..=10 {
        let m = c.frame().await.unwrap();
        assert_eq!(m.body, format!("n{i}").into_bytes());
    }
    assert!(c.quiet().await.is_none());
    s.stop().await;
}

/// NACK frees the prefetch slot without acking: the next message flows, and the
/// refused one comes back, marked redelivered, when the subscription re-attaches.
async fn nack_releases_the_slot_and_redelivers_on_reattach(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut c = Client::connected(s.addr, Some("n1")).await;
    c.write(&durable_sub("N", "1", "s", "activemq.prefetchSize:1\n"))
        .await;
    receipt(&mut c, "sub-1").await;
    for i in 1..=2 {
        c.write(
            format!("SEND\ndestination:/topic/N\npersistent:true\nreceipt:r{i}\n\nm{i}\0")
                .as_bytes(),
        )
        .await;
    }
    // The first MESSAGE and both RECEIPTs, in whatever order they interleave (a
    // pipelined connection answers r2 after its commit, maybe after m1 is delivered).
    let mut frames = Vec::new();
    let count = |frames: &[ebb::stomp::frame::Frame], command| {
        frames.iter().filter(|f| f.command == command).count()
    };
    while count(&frames, Command::Message) < 1 || count(&frames, Command::Receipt) < 2 {
        frames.push(c.frame().await.unwrap());
    }
    let m1 = frames
        .into_iter()
        .find(|f| f.command == Command::Message)
        .unwrap();
    assert_eq!(m1.body, &b"m1"[..]);
    let id = m1.get("ack").unwrap().to_string();
    c.write(format!("NACK\nid:{id}\n\n\0").as_bytes()).await;
    let m2 = loop {
        let f = c.frame().await.expect("m2 after the NACK");
        if f.command == Command::Message {
            break f;
        }
    };
    assert_eq!(m2.body, &b"m2"[..]);
    ack(&mut c, &m2, "a2").await;
    c.write(b"DISCONNECT\nreceipt:d\n\n\0").await;
    receipt(&mut c, "d").await;
    let mut c = Client::connected(s.addr, Some("n1")).await;
    c.write(&durable_sub("N", "1", "s", "")).await;
    receipt(&mut c, "sub-1").await;
    let again = c.frame().await.expect("m1 again");
    assert_eq!(again.body, &b"m1"[..]);
    assert_eq!(again.get("redelivered"), Some("true"));
    assert!(c.quiet().await.is_none());
    s.stop().await;
}

on_every_backend!(
    #[actix_rt::test]
    exp_01_expiry_for_every_durable_subscription,
    dur_01_priority_acks_keep_low_priority_messages,
    dur_03_offline_subscription_survives_restart,
    nack_releases_the_slot_and_redelivers_on_reattach,
);
