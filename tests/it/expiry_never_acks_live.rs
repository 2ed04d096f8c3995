//! Through the embedding API: housekeeping never acks a live message. ActiveMQ's JDBC
//! store lost M1 here: expiring M2 moved the durable subscription's mark past M1.

use ebb::test_util::*;
use ebb::{AckMode, Message, SubscribeOptions};
use std::time::Duration;

/// The scenario: offline durable subscription; M1 (no TTL) then M2 (a TTL of
/// 50 ms, long enough to be stored even on a busy machine, where the issue says 1 ms);
/// housekeeping runs (and a browse); restart; M1 is delivered and M2 is not; M2's row
/// stays until M1 is acked, then both rows go.
async fn activemq_data_loss_does_not_happen(t: TestStore) {
    let b = broker(&t, policy(50, 400), 2).await;
    let sub = b
        .subscribe(
            "topic://orders",
            SubscribeOptions::durable("c1", "s1").ack(AckMode::Client),
        )
        .await
        .unwrap();
    drop(sub); // offline
    b.send("topic://orders", Message::new("M1")).await.unwrap();
    let m2 = b
        .send(
            "topic://orders",
            Message::new("M2").ttl(Duration::from_millis(50)),
        )
        .await
        .unwrap();
    assert!(m2.store_id.is_some());
    actix_rt::time::sleep(Duration::from_millis(60)).await;
    let stats = wait_for(&b, "orders", |s| s.ticks >= 4).await;
    assert_eq!(
        stats.expired, 0,
        "M1 blocks M2's expiry: nothing may be acked"
    );
    assert_eq!(b.browse("topic://orders", 0, 10).await.unwrap().len(), 2);
    b.shutdown().await.unwrap();

    let b = broker(&t, policy(50, 400), 2).await;
    assert_eq!(b.store().count_messages("topic://orders").await.unwrap(), 2);
    let mut sub = b
        .subscribe(
            "topic://orders",
            SubscribeOptions::durable("c1", "s1").ack(AckMode::Client),
        )
        .await
        .unwrap();
    let m1 = next_within(&mut sub, 5_000)
        .await
        .expect("M1 is delivered after the restart");
    assert_eq!(body(&m1), "M1");
    assert!(
        next_within(&mut sub, 300).await.is_none(),
        "M2 expired: never delivered"
    );
    wait_for(&b, "orders", |s| s.expired == 1).await;
    assert_eq!(
        b.store().count_messages("topic://orders").await.unwrap(),
        2,
        "M2's row stays while M1 is un-acked"
    );
    sub.ack(&m1).await.unwrap();
    wait_for(&b, "orders", |s| s.cleaned_up == 2).await;
    assert_eq!(b.store().count_messages("topic://orders").await.unwrap(), 0);
    b.shutdown().await.unwrap();
}

/// Browsing shows expired messages but never acks or expires them.
async fn browse_never_acks_or_expires(t: TestStore) {
    let b = broker(&t, policy(0, 400), 2).await;
    drop(
        b.subscribe("topic://t", SubscribeOptions::durable("c", "s"))
            .await
            .unwrap(),
    );
    let late = b
        .send("topic://t", Message::new("x").expires_at(1_000))
        .await
        .unwrap();
    assert!(late.expired_on_arrival);
    assert_eq!(late.store_id, None, "expired on arrival: never stored");
    b.send("topic://t", Message::new("live")).await.unwrap();
    b.send(
        "topic://t",
        Message::new("soon").ttl(Duration::from_millis(50)),
    )
    .await
    .unwrap();
    actix_rt::time::sleep(Duration::from_millis(60)).await;
    for _ in 0..3 {
        assert_eq!(b.browse("topic://t", 0, 10).await.unwrap().len(), 2);
        assert_eq!(
            b.browse_subscription("topic://t", "c", "s", 0, 10)
                .await
                .unwrap()
                .len(),
            2
        );
    }
    let stats = b.topic_stats("topic://t").await.unwrap();
    assert_eq!(stats.expired, 1, "only the message that expired on arrival");
    let sub = b
        .store()
        .find_subscription("topic://t", &ebb_store::SubscriptionKey::new("c", "s"))
        .await;
    let before = sub.unwrap().unwrap().marks;
    assert_eq!(b.browse("topic://t", 0, 10).await.unwrap().len(), 2);
    let after = b
        .store()
        .find_subscription("topic://t", &ebb_store::SubscriptionKey::new("c", "s"))
        .await
        .unwrap()
        .unwrap()
        .marks;
    assert_eq!(before, after);
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    activemq_data_loss_does_not_happen,
    browse_never_acks_or_expires,
);
