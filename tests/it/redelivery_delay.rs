//! Broker-side redelivery back-off (issue 32; ActiveMQ's redelivery policy in
//! `[[policy]]`: `initial_redelivery_delay`, `redelivery_delay`,
//! `use_exponential_backoff`, `backoff_multiplier`, `maximum_redelivery_delay`): a
//! NACKed queue message waits before it comes again, each wait longer by the
//! multiplier, while the messages behind it flow; past `maximum_redeliveries` it goes
//! to the dead-letter queue as before. A persistent one waits in its own row of the
//! store (its due time written with its failure count, one row written per back-off,
//! none at its release; kept across a restart); a non-persistent one in memory. On
//! both backends.

use ebb::now_ms;
use ebb::test_util::*;
use ebb::{AckMode, Broker, Message, Policy, SubscribeOptions, UsageConfig};

/// Waits of 300 ms, then 600 ms (× 2), at most 2 redeliveries.
/// The messages of `queue` held back in their rows, whatever their due time.
async fn held(b: &Broker, queue: &str) -> Vec<ebb_store::HeldMessage> {
    b.store()
        .read_held(queue, (i64::MIN, i64::MIN), i64::MAX, 100)
        .await
        .unwrap()
        .messages
}

fn body_of(m: &ebb_store::StoredMessage) -> String {
    String::from_utf8_lossy(&m.payload.body).into_owned()
}

async fn backoff_broker(t: &TestStore) -> Broker {
    let policy = Policy {
        expire_messages_period: 0,
        maximum_redeliveries: 2,
        initial_redelivery_delay: 300,
        redelivery_delay: 300,
        use_exponential_backoff: true,
        backoff_multiplier: 2.0,
        maximum_redelivery_delay: 10_000,
        ..Policy::default()
    };
    broker_with(t, vec![("queue://>", policy)], UsageConfig::default()).await
}

fn client_ack() -> SubscribeOptions {
    SubscribeOptions::non_durable().ack(AckMode::Client)
}

/// A NACKed message waits 300 ms, then 600 ms, never less, while the three sent after
/// it are delivered at once; its third failure sends it to `DLQ.<queue>`.
async fn a_nacked_message_waits_longer_each_time_while_others_flow(t: TestStore) {
    let b = backoff_broker(&t).await;
    let q = "queue://backoff";
    for body in ["poison", "a", "b", "c"] {
        b.send(q, Message::new(body)).await.unwrap();
    }
    let mut sub = b.subscribe(q, client_ack()).await.unwrap();
    let poison = take(&mut sub, 1).await.remove(0);
    assert_eq!(body(&poison), "poison");
    let mut nacked_at = now_ms();
    sub.nack(&poison).await.unwrap();
    // The others flow while it waits.
    let others = take(&mut sub, 3).await;
    assert_eq!(others.iter().map(body).collect::<Vec<_>>(), ["a", "b", "c"]);
    assert!(
        now_ms() - nacked_at < 300,
        "the others waited for the poison message"
    );
    for m in &others {
        sub.ack(m).await.unwrap();
    }
    // While it waits it is held in its row (the NACK was answered once that was
    // committed), with its due time and count, and is not a scheduled message.
    let waiting = held(&b, q).await;
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(body_of(&waiting[0].message), "poison");
    assert_eq!(waiting[0].message.redeliveries, 1);
    assert!(waiting[0].due >= nacked_at + 300, "{waiting:?}");
    assert!(b.scheduled(None, 10).await.unwrap().messages.is_empty());

    for wait in [300, 600] {
        let again = take(&mut sub, 1).await.remove(0);
        let waited = now_ms() - nacked_at;
        assert_eq!(body(&again), "poison");
        assert!(again.redelivered(), "marked redelivered");
        assert!(
            waited >= wait,
            "came after {waited} ms, before its {wait} ms wait"
        );
        nacked_at = now_ms();
        sub.nack(&again).await.unwrap();
    }
    // The third failure is past maximum_redeliveries (2): to the dead-letter queue at once.
    assert!(quiet(&mut sub).await.is_none(), "delivered a fourth time");
    let mut dlq = b
        .subscribe("queue://DLQ.backoff", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let dead = take(&mut dlq, 1).await;
    assert_eq!(body(&dead[0]), "poison");
    let stats = b.queue_stats("backoff").await.unwrap();
    assert_eq!(stats.redeliveries_delayed, 2);
    assert_eq!(stats.dead_lettered, 1);
    assert_eq!(b.scheduled(None, 10).await.unwrap().messages.len(), 0);
    b.shutdown().await.unwrap();
}

/// A non-persistent message waits in memory, not in the store, and comes back after
/// its wait.
async fn a_non_persistent_message_waits_in_memory(t: TestStore) {
    let b = backoff_broker(&t).await;
    let q = "queue://backoff.np";
    let mut sub = b.subscribe(q, client_ack()).await.unwrap();
    b.send(q, Message::new("np").persistent(false))
        .await
        .unwrap();
    let m = take(&mut sub, 1).await.remove(0);
    let nacked_at = now_ms();
    sub.nack(&m).await.unwrap();
    assert_eq!(
        b.scheduled(None, 10).await.unwrap().messages.len(),
        0,
        "not in the store"
    );
    let again = take(&mut sub, 1).await.remove(0);
    assert_eq!(body(&again), "np");
    assert!(again.redelivered());
    assert!(now_ms() - nacked_at >= 300, "{} ms", now_ms() - nacked_at);
    sub.ack(&again).await.unwrap();
    b.shutdown().await.unwrap();
}

/// A redelivery waiting in the store survives a restart: it comes once, when due,
/// still marked redelivered (its count kept), and counts on towards the dead-letter
/// queue.
async fn a_waiting_redelivery_survives_a_restart(t: TestStore) {
    let b = backoff_broker(&t).await;
    let q = "queue://backoff.restart";
    b.send(q, Message::new("later")).await.unwrap();
    let mut sub = b.subscribe(q, client_ack()).await.unwrap();
    let m = take(&mut sub, 1).await.remove(0);
    let nacked_at = now_ms();
    sub.nack(&m).await.unwrap();
    // Held in its row before the restart (the NACK's answer follows the commit).
    assert_eq!(held(&b, q).await.len(), 1);
    drop(sub);
    b.shutdown().await.unwrap();
    drop(b);

    let b = backoff_broker(&t).await;
    let mut sub = b.subscribe(q, client_ack()).await.unwrap();
    let again = take(&mut sub, 1).await.remove(0);
    assert_eq!(body(&again), "later");
    assert!(again.redelivered(), "the count was kept");
    assert!(now_ms() - nacked_at >= 300);
    // Its second failure waits 600 ms (it counts on from 1).
    let nacked_at = now_ms();
    sub.nack(&again).await.unwrap();
    let third = take(&mut sub, 1).await.remove(0);
    assert!(now_ms() - nacked_at >= 600, "{} ms", now_ms() - nacked_at);
    sub.ack(&third).await.unwrap();
    assert!(quiet(&mut sub).await.is_none(), "delivered once each time");
    b.shutdown().await.unwrap();
}

/// A back-off costs one row written (its count and due time, one `UPDATE`), and its
/// release none: the queue reads the row back when it is due and puts the message
/// back in its place, with the same id. (It was two writes of the row and of its
/// indexes: a hold as a scheduled message, then a release that renumbered it.) The
/// broker's scheduler has nothing to do with it.
async fn a_back_off_writes_one_row_and_its_release_none(t: TestStore) {
    let b = backoff_broker(&t).await;
    let q = "queue://backoff.rows";
    b.send(q, Message::new("once")).await.unwrap();
    let mut sub = b.subscribe(q, client_ack()).await.unwrap();
    let m = take(&mut sub, 1).await.remove(0);
    let before = b.store().stats().snapshot();
    sub.nack(&m).await.unwrap();
    let held_at = b.store().stats().snapshot();
    assert_eq!(
        (
            held_at.write_ops - before.write_ops,
            held_at.write_transactions - before.write_transactions
        ),
        (1, 1),
        "the hold is one op in one transaction"
    );
    let again = take(&mut sub, 1).await.remove(0);
    assert!(again.redelivered());
    assert_eq!(again.message_id(), m.message_id());
    let back = b.store().stats().snapshot();
    assert_eq!(
        back.write_ops, held_at.write_ops,
        "the release wrote nothing"
    );
    assert_eq!(
        back.message_rows - held_at.message_rows,
        1,
        "one row read back"
    );
    let stats = b.queue_stats("backoff.rows").await.unwrap();
    assert_eq!(
        (stats.redeliveries_delayed, stats.redeliveries_released),
        (1, 1)
    );
    assert_eq!(b.schedule_backlog().await.unwrap().released_total, 0);
    sub.ack(&again).await.unwrap();
    poll_until("the acked row deleted", || async {
        held(&b, q).await.is_empty().then_some(())
    })
    .await;
    b.shutdown().await.unwrap();
}

/// A message held back is still a message of its queue: browsing shows it while it
/// waits, and a purge deletes it from its row; it never comes back.
async fn a_held_message_is_browsed_and_purged_with_its_queue(t: TestStore) {
    let b = backoff_broker(&t).await;
    let q = "queue://backoff.purge";
    b.send(q, Message::new("held")).await.unwrap();
    let mut sub = b.subscribe(q, client_ack()).await.unwrap();
    let m = take(&mut sub, 1).await.remove(0);
    sub.nack(&m).await.unwrap();
    assert_eq!(held(&b, q).await.len(), 1);
    let page = b.browse(q, 0, 10).await.unwrap();
    assert_eq!(page.len(), 1, "browsing shows the held message");
    let purged = b.purge_queue(q).await.unwrap();
    assert_eq!(purged.taken, 1, "{purged:?}");
    assert!(held(&b, q).await.is_empty(), "its row is gone");
    assert!(
        quiet(&mut sub).await.is_none(),
        "the purged message came back"
    );
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    a_back_off_writes_one_row_and_its_release_none,
    a_held_message_is_browsed_and_purged_with_its_queue,
    a_nacked_message_waits_longer_each_time_while_others_flow,
    a_non_persistent_message_waits_in_memory,
    a_waiting_redelivery_survives_a_restart,
);
