//! Queues through the embedding API: competing consumers each get their share and
//! every message once; a backlog pages from the store in order; redelivery counts
//! failed deliveries and ends in the dead-letter queue; expiry finds expired messages
//! anywhere in the queue (case EXP-02) in bounded pages.

use std::collections::HashSet;
use std::time::Duration;

use ebb::test_util::*;
use ebb::{AckMode, Message, Policy, SubscribeOptions, UsageConfig};
use futures::StreamExt;

fn queue_policy() -> Policy {
    Policy {
        expire_messages_period: 0,
        ..Policy::default()
    }
}

/// `prioritized_messages` on a queue's policy is refused when the broker starts (a
/// queue delivers in arrival order; it was accepted and ignored), with the entry named.
#[actix_rt::test]
async fn a_prioritized_queue_policy_is_refused() {
    let t = TestStore::sqlite();
    let config = ebb::BrokerConfig {
        store: t.options.clone(),
        policies: ebb::PolicyMap {
            entries: vec![ebb::PolicyEntry {
                destination: "queue://orders.>".into(),
                policy: Policy {
                    prioritized_messages: true,
                    ..queue_policy()
                },
            }],
        },
        ..ebb::BrokerConfig::default()
    };
    let Err(e) = ebb::Broker::start(&t.url, config).await else {
        panic!("a broker started with prioritized_messages on a queue");
    };
    assert_eq!(e.code(), ebb::ErrorCode::InvalidValue, "{e}");
    assert!(e.to_string().contains("queue://orders.>"), "{e}");
}

/// 10,000 messages, 3 consumers consuming at the same speed: each message is received
/// exactly once, and round-robin gives each consumer a third within 5 %.
async fn competing_consumers_share_round_robin(t: TestStore) {
    let b = broker_with(
        &t,
        vec![("queue://>", queue_policy())],
        UsageConfig::default(),
    )
    .await;
    const N: usize = 10_000;
    let mut tasks = Vec::new();
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    // Messages received by all consumers together.
    let received = std::rc::Rc::new(std::cell::Cell::new(0usize));
    for _ in 0..3 {
        let mut sub = b
            .subscribe("queue://work", SubscribeOptions::non_durable())
            .await
            .unwrap();
        let mut done = done_rx.clone();
        let received = received.clone();
        tasks.push(actix_rt::spawn(async move {
            let mut got = Vec::new();
            loop {
                tokio::select! {
                    m = sub.next() => {
                        got.push(body(&m.unwrap()));
                        received.set(received.get() + 1);
                    }
                    _ = done.changed() => break,
                }
            }
            got
        }));
    }
    for i in 0..N {
        b.send("queue://work", Message::new(format!("m{i}")))
            .await
            .unwrap();
    }
    poll_until("every message received", || async {
        (received.get() >= N).then_some(())
    })
    .await;
    wait_rows(&b, "queue://work", 0).await;
    done_tx.send(true).unwrap();
    let mut all = HashSet::new();
    let mut shares = Vec::new();
    for task in tasks {
        let got = task.await.unwrap();
        shares.push(got.len());
        for m in got {
            assert!(all.insert(m.clone()), "{m} delivered twice");
        }
    }
    assert_eq!(all.len(), N, "every message once");
    assert_eq!(b.queue_stats("work").await.unwrap().dequeued, N as u64);
    for share in &shares {
        let third = N as f64 / 3.0;
        assert!(
            (*share as f64 - third).abs() <= third * 0.05,
            "shares {shares:?} are not within 5 % of a third"
        );
    }
    b.shutdown().await.unwrap();
}

/// A backlog larger than the cursor's cache, sent before any consumer: delivered in
/// send order, each once, read from the store in pages no larger than the cache.
async fn backlog_pages_from_the_store_in_order(t: TestStore) {
    let policy = Policy {
        max_page_size: 50,
        ..queue_policy()
    };
    let b = broker_with(&t, vec![("queue://>", policy)], UsageConfig::default()).await;
    for i in 0..1_000 {
        b.send("queue://backlog", Message::new(format!("m{i:04}")))
            .await
            .unwrap();
    }
    let stats = b.queue_stats("backlog").await.unwrap();
    assert!(
        stats.pending_in_memory <= 100,
        "the cache holds at most 2 x max_page_size: {stats:?}"
    );
    let before = b.store().stats().snapshot().message_rows;
    let mut sub = b
        .subscribe(
            "queue://backlog",
            SubscribeOptions::non_durable().prefetch(10),
        )
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 1_000).await.iter().map(body).collect();
    assert_eq!(
        got,
        (0..1_000).map(|i| format!("m{i:04}")).collect::<Vec<_>>()
    );
    let read = b.store().stats().snapshot().message_rows - before;
    assert!(
        read <= 1_000,
        "each stored message read once at most: {read}"
    );
    wait_for_queue(&b, "backlog", |s| s.dequeued == 1_000).await;
    drop(sub);
    b.shutdown().await.unwrap();
}

/// A delivery that a graceful shutdown ends without an ack counts as failed, as one
/// a disconnect ends: the count is stored before the store closes, so after the
/// restart the message comes marked redelivered (its consumer may have processed
/// it); one only prefetched is not counted; a consumer that ends after the
/// shutdown writes nothing more.
async fn messages_in_flight_at_shutdown_come_back_redelivered(t: TestStore) {
    let client = || {
        SubscribeOptions::non_durable()
            .ack(AckMode::Client)
            .prefetch(10)
    };
    let b = broker_with(
        &t,
        vec![("queue://>", queue_policy())],
        UsageConfig::default(),
    )
    .await;
    for body in ["a", "b", "c"] {
        b.send("queue://inflight", Message::new(body))
            .await
            .unwrap();
    }
    let mut sub = b.subscribe("queue://inflight", client()).await.unwrap();
    let first = next(&mut sub).await;
    assert!(!first.redelivered());
    sub.ack(&first).await.unwrap();
    for expected in ["b", "c"] {
        assert_eq!(body(&next(&mut sub).await), expected);
    }
    b.shutdown().await.unwrap();
    drop(sub);

    let b = broker_with(
        &t,
        vec![("queue://>", queue_policy())],
        UsageConfig::default(),
    )
    .await;
    let rows = b.browse("queue://inflight", 0, 10).await.unwrap();
    assert_eq!(
        rows.iter().map(|m| m.redeliveries).collect::<Vec<_>>(),
        [1, 1],
        "the acked message is gone; the two in flight failed once"
    );
    let mut sub = b.subscribe("queue://inflight", client()).await.unwrap();
    for expected in ["b", "c"] {
        let m = next(&mut sub).await;
        assert_eq!(body(&m), expected);
        assert!(
            m.redelivered(),
            "{expected} was delivered before the restart"
        );
        sub.ack(&m).await.unwrap();
    }
    wait_rows(&b, "queue://inflight", 0).await;
    drop(sub);
    b.shutdown().await.unwrap();
}

/// A queue message's failed deliveries are stored: after a restart (or a failover:
/// the standby starts from the store the same way) it is delivered marked
/// redelivered and goes on counting, so the failure that passes
/// `maximum_redeliveries` still sends it to the dead-letter queue, not one more
/// round of failures.
async fn redelivery_counts_survive_a_restart(t: TestStore) {
    let policy = || Policy {
        maximum_redeliveries: 2,
        ..queue_policy()
    };
    let client = || {
        SubscribeOptions::non_durable()
            .ack(AckMode::Client)
            .prefetch(1)
    };
    let b = broker_with(&t, vec![("queue://>", policy())], UsageConfig::default()).await;
    b.send("queue://retry", Message::new("poison"))
        .await
        .unwrap();
    b.send("queue://retry", Message::new("fine")).await.unwrap();
    let mut sub = b.subscribe("queue://retry", client()).await.unwrap();
    for failure in 1..=2 {
        let m = next(&mut sub).await;
        assert_eq!(body(&m), "poison", "failure {failure}");
        sub.nack(&m).await.unwrap();
    }
    drop(sub);
    let counted = |b: ebb::Broker| async move {
        let rows = b.browse("queue://retry", 0, 10).await.unwrap();
        rows.iter().map(|m| m.redeliveries).collect::<Vec<_>>()
    };
    poll_until("the stored counts [2, 0]", || async {
        (counted(b.clone()).await == [2, 0]).then_some(())
    })
    .await;
    b.shutdown().await.unwrap();

    let b = broker_with(&t, vec![("queue://>", policy())], UsageConfig::default()).await;
    let mut sub = b.subscribe("queue://retry", client()).await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!(body(&m), "poison");
    assert!(m.redelivered(), "the stored count says it failed before");
    // Failure 3 > maximum_redeliveries 2.
    sub.nack(&m).await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!(body(&m), "fine");
    assert!(!m.redelivered());
    sub.ack(&m).await.unwrap();
    wait_for_queue(&b, "retry", |s| s.dead_lettered == 1).await;
    wait_rows(&b, "queue://DLQ.retry", 1).await;
    wait_rows(&b, "queue://retry", 0).await;
    drop(sub);
    b.shutdown().await.unwrap();
}

/// NACK and a consumer closing both count as failed deliveries; the message comes
/// back marked redelivered until `maximum_redeliveries` failures, then it is in the
/// dead-letter queue with the reason and its origin, and nowhere else.
async fn failed_deliveries_end_in_the_dead_letter_queue(t: TestStore) {
    let policy = Policy {
        maximum_redeliveries: 2,
        ..queue_policy()
    };
    let b = broker_with(&t, vec![("queue://>", policy)], UsageConfig::default()).await;
    b.send("queue://orders", Message::new("poison").header("k", "v"))
        .await
        .unwrap();
    let client = || SubscribeOptions::non_durable().ack(AckMode::Client);

    // Failure 1: NACK.
    let mut sub = b.subscribe("queue://orders", client()).await.unwrap();
    let m = next(&mut sub).await;
    assert!(!m.redelivered());
    sub.nack(&m).await.unwrap();
    // Failure 2: the consumer closes without an ack.
    let m = next(&mut sub).await;
    assert!(m.redelivered());
    drop(sub);
    let mut sub = b.subscribe("queue://orders", client()).await.unwrap();
    let m = next(&mut sub).await;
    assert!(m.redelivered());
    // Failure 3 > maximum_redeliveries 2: dead-lettered.
    sub.nack(&m).await.unwrap();
    let stats = wait_for_queue(&b, "orders", |s| s.dead_lettered == 1).await;
    assert_eq!((stats.redelivered, stats.dequeued), (2, 0));
    assert_eq!(b.store().count_messages("queue://orders").await.unwrap(), 0);

    let mut dlq = b
        .subscribe("queue://DLQ.orders", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let dead = next(&mut dlq).await;
    assert_eq!(body(&dead), "poison");
    let header = |name: &str| {
        dead.headers()
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header("k").as_deref(), Some("v"));
    assert_eq!(
        header("originalDestination").as_deref(),
        Some("/queue/orders")
    );
    let cause = header("dlqDeliveryFailureCause").unwrap();
    assert!(
        cause.contains("3 times") && cause.contains("NACK"),
        "{cause}"
    );
    wait_rows(&b, "queue://DLQ.orders", 0).await;
    // What operators see (Broker::stats, the metrics endpoint's source).
    let stats = b.stats().await.unwrap();
    let row = |key: &str| {
        stats
            .destinations
            .iter()
            .find(|d| d.destination == key)
            .cloned()
            .unwrap_or_else(|| panic!("{key} missing from {stats:?}"))
    };
    let orders = row("queue://orders");
    assert_eq!(orders.kind, ebb::stats::DestinationKind::QUEUE);
    assert_eq!(
        (
            orders.enqueued_total,
            orders.dead_lettered_total,
            orders.queue_size
        ),
        (1, 1, 0)
    );
    let dlq = row("queue://DLQ.orders");
    assert_eq!((dlq.enqueued_total, dlq.dequeued_total), (1, 1));
    // The dead message never came back to its consumer: a marker sent now is next.
    b.send("queue://orders", Message::new("marker"))
        .await
        .unwrap();
    assert_eq!(body(&next(&mut sub).await), "marker");
    drop((sub, dlq));
    b.shutdown().await.unwrap();
}

/// Case EXP-02 B: a short TTL behind a long one (and behind a higher priority) is
/// expired by housekeeping without any consumer; the consumer then gets the others in
/// order.
async fn expiry_finds_messages_behind_the_head(t: TestStore) {
    let b = broker_with(
        &t,
        vec![("queue://>", policy(100, 100))],
        UsageConfig::default(),
    )
    .await;
    let now = now_ms();
    for (q, first) in [
        ("q2", Message::new("m1")),
        ("q3", Message::new("m1").priority(9)),
    ] {
        let q = format!("queue://{q}");
        b.send(&q, first.expires_at(now + 600_000)).await.unwrap();
        b.send(&q, Message::new("m2").priority(1).expires_at(now + 300))
            .await
            .unwrap();
        b.send(&q, Message::new("m3")).await.unwrap();
    }
    for q in ["q2", "q3"] {
        wait_for_queue(&b, q, |s| s.expired == 1).await;
        let container = format!("queue://{q}");
        assert_eq!(b.store().count_messages(&container).await.unwrap(), 2);
        let mut sub = b
            .subscribe(&container, SubscribeOptions::non_durable())
            .await
            .unwrap();
        let got: Vec<String> = take(&mut sub, 2).await.iter().map(body).collect();
        assert_eq!(got, ["m1", "m3"]);
        // m2 never comes: a marker of the lowest priority, sent now, is next.
        b.send(&container, Message::new("marker").priority(0))
            .await
            .unwrap();
        assert_eq!(body(&next(&mut sub).await), "marker");
    }
    b.shutdown().await.unwrap();
}

/// Case EXP-02 A: a queue without consumers whose messages do not fit its memory
/// limit: every message expires, the store empties, and no page removes more than the
/// page size. The producer is held by flow control while the queue is full, and goes
/// on as expiry frees memory.
async fn expiry_drains_a_queue_larger_than_its_memory(t: TestStore) {
    let queue = Policy {
        memory_limit: 1_600_000,
        ..policy(200, 100)
    };
    let b = broker_with(&t, vec![("queue://>", queue)], UsageConfig::default()).await;
    let body = vec![b'x'; 16 * 1024];
    for _ in 0..500 {
        let m = Message::new(body.clone()).ttl(Duration::from_millis(1_000));
        b.send("queue://Q", m).await.unwrap();
    }
    let stats = wait_for_queue(&b, "Q", |s| s.expired == 500).await;
    assert!(stats.max_expiry_page_rows <= 100, "{stats:?}");
    assert_eq!(b.store().count_messages("queue://Q").await.unwrap(), 0);
    assert_eq!(b.destination_flow("queue://Q").unwrap().memory_bytes, 0);
    b.shutdown().await.unwrap();
}

/// With `dead_letter_expired`, expired messages move to the dead-letter queue (bounded
/// pages) instead of being dropped; a DLQ message does not expire.
async fn expired_messages_can_go_to_the_dead_letter_queue(t: TestStore) {
    let queue = Policy {
        dead_letter_expired: true,
        ..policy(100, 3)
    };
    let b = broker_with(&t, vec![("queue://>", queue)], UsageConfig::default()).await;
    for i in 0..10 {
        let m = Message::new(format!("e{i}")).ttl(Duration::from_millis(100));
        b.send("queue://late", m).await.unwrap();
    }
    b.send("queue://late", Message::new("live")).await.unwrap();
    let stats = wait_for_queue(&b, "late", |s| s.dead_lettered == 10).await;
    assert_eq!(stats.expired, 10);
    assert!(stats.max_expiry_page_rows <= 3, "{stats:?}");
    assert_eq!(b.store().count_messages("queue://late").await.unwrap(), 1);
    let rows = b.browse("queue://DLQ.late", 0, 100).await.unwrap();
    assert_eq!(rows.len(), 10);
    assert!(rows.iter().all(|r| r.expiration == 0));
    assert!(rows.iter().all(|r| r
        .headers
        .iter()
        .any(|(k, v)| k == "dlqDeliveryFailureCause" && v == "message expired")));
    b.shutdown().await.unwrap();
}

/// A queue keeps its messages across a restart, and a durable subscription on a queue
/// is refused with a reason.
async fn queue_survives_restart(t: TestStore) {
    let b = broker_with(&t, vec![], UsageConfig::default()).await;
    for i in 0..5 {
        b.send("queue://keep", Message::new(format!("k{i}")))
            .await
            .unwrap();
    }
    let err = b
        .subscribe("queue://keep", SubscribeOptions::durable("c", "s"))
        .await
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("no durable subscriptions"),
        "{err}"
    );
    b.shutdown().await.unwrap();
    let b = broker_with(&t, vec![], UsageConfig::default()).await;
    let mut sub = b
        .subscribe("queue://keep", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 5).await.iter().map(body).collect();
    assert_eq!(got, ["k0", "k1", "k2", "k3", "k4"]);
    // Nothing else was kept: a marker sent now is next.
    b.send("queue://keep", Message::new("marker"))
        .await
        .unwrap();
    assert_eq!(body(&next(&mut sub).await), "marker");
    drop(sub);
    b.shutdown().await.unwrap();
}

/// A queue nobody consumes keeps its persistent backlog in the store only: nothing
/// of it is cached or charged to memory (10,000 idle queues with a backlog each used
/// to hold it all); the first consumer reads it, in send order, and a queue whose
/// last consumer left caches nothing more.
async fn a_backlog_without_consumers_stays_in_the_store(t: TestStore) {
    let b = broker_with(
        &t,
        vec![("queue://>", queue_policy())],
        UsageConfig::default(),
    )
    .await;
    let q = "queue://unread";
    for i in 0..50 {
        b.send(q, Message::new(format!("m{i:02}"))).await.unwrap();
    }
    let stats = b.queue_stats(q).await.unwrap();
    assert_eq!(stats.pending_in_memory, 0, "{stats:?}");
    assert!(!stats.cursor_live, "{stats:?}");
    assert_eq!(b.destination_flow(q).unwrap().memory_bytes, 0);
    assert_eq!(b.stats().await.unwrap().destinations[0].queue_size, 50);

    let mut sub = b
        .subscribe(q, SubscribeOptions::non_durable().prefetch(100))
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 50).await.iter().map(body).collect();
    let sent: Vec<String> = (0..50).map(|i| format!("m{i:02}")).collect();
    assert_eq!(got, sent, "read from the store in send order");
    b.send(q, Message::new("live")).await.unwrap();
    assert_eq!(body(&next(&mut sub).await), "live");
    drop(sub);
    poll_until("the consumer is gone", || async {
        (b.queue_stats(q).await.ok()?.consumers == 0).then_some(())
    })
    .await;
    for i in 0..20 {
        b.send(q, Message::new(format!("after{i}"))).await.unwrap();
    }
    let stats = b.queue_stats(q).await.unwrap();
    assert_eq!(
        stats.pending_in_memory, 0,
        "nothing cached once alone: {stats:?}"
    );
    assert_eq!(b.destination_flow(q).unwrap().memory_bytes, 0);
    let mut sub = b
        .subscribe(q, SubscribeOptions::non_durable().prefetch(100))
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 20).await.iter().map(body).collect();
    let sent: Vec<String> = (0..20).map(|i| format!("after{i}")).collect();
    assert_eq!(got, sent);
    drop(sub);
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    a_backlog_without_consumers_stays_in_the_store,
    competing_consumers_share_round_robin,
    backlog_pages_from_the_store_in_order,
    failed_deliveries_end_in_the_dead_letter_queue,
    redelivery_counts_survive_a_restart,
    messages_in_flight_at_shutdown_come_back_redelivered,
    expiry_finds_messages_behind_the_head,
    expiry_drains_a_queue_larger_than_its_memory,
    expired_messages_can_go_to_the_dead_letter_queue,
    queue_survives_restart,
);
