//! Deleting a destination through the embedding API (`Broker::delete_destination`,
//! ActiveMQ's `removeQueue` / `removeTopic`): every stored row goes, in bounded pages;
//! a destination in use (a consumer, an open transaction) is refused with nothing
//! deleted; sends racing the deletion are never refused and never lost (they go to
//! the new destination of the same name); a topic's durable subscriptions go with
//! it. On both backends.

use ebb::test_util::*;
use ebb::{Error, Message, SubscribeOptions};

fn in_use(e: &Error) -> bool {
    matches!(e, Error::InUse(_))
}

/// A queue of 2,500 stored messages (more than two pages of
/// `ebb_actors::broker::DELETE_PAGE`) and 3 non-persistent ones: refused while a
/// consumer is attached, with every row kept; deleted once it is gone, and the next
/// send starts an empty queue of the same name.
async fn a_queue_goes_with_every_row(t: TestStore) {
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let queue = "queue://del.q";
    for i in 0..2_500 {
        b.send(queue, Message::new(format!("p{i}"))).await.unwrap();
    }
    for i in 0..3 {
        b.send(queue, Message::new(format!("n{i}")).persistent(false))
            .await
            .unwrap();
    }
    let consumer = b
        .subscribe(
            queue,
            SubscribeOptions::non_durable()
                .prefetch(1)
                .ack(ebb::AckMode::Client),
        )
        .await
        .unwrap();
    let refused = b.delete_destination(queue).await.unwrap_err();
    assert!(in_use(&refused), "{refused}");
    assert!(refused.to_string().contains("1 consumers"), "{refused}");
    assert_eq!(b.store().count_messages(queue).await.unwrap(), 2_500);
    drop(consumer);
    // The dropped consumer detaches through the queue's mailbox.
    let deleted = poll_until("the dropped consumer detaches", || async {
        match b.delete_destination(queue).await {
            Err(e) if in_use(&e) => None,
            other => Some(other.unwrap()),
        }
    })
    .await;
    assert_eq!(deleted.messages, 2_500, "every stored row, counted once");
    assert_eq!(deleted.subscriptions, 0);
    assert_eq!(b.store().count_messages(queue).await.unwrap(), 0);
    let key = ebb::DestinationKey::parse(queue).unwrap();
    assert!(!b.destination_exists(&key).await.unwrap());

    b.send(queue, Message::new("after")).await.unwrap();
    let mut consumer = b
        .subscribe(queue, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let first = next(&mut consumer).await;
    assert_eq!(body(&first), "after");
    let stats = b.queue_stats("del.q").await.unwrap();
    assert_eq!(stats.enqueued, 1, "the new queue counts from zero");
    // A marker sent now comes next: nothing deleted is delivered before it.
    b.send(queue, Message::new("marker")).await.unwrap();
    assert_eq!(
        body(&next(&mut consumer).await),
        "marker",
        "a deleted message (stored or in memory) was delivered"
    );
    drop(consumer);
    b.shutdown().await.unwrap();
}

/// An open transaction that sent to the queue stops its deletion (its messages would
/// appear in the new queue at commit) and loses nothing; once it has committed, the
/// queue goes with its message.
async fn an_open_transaction_holds_the_queue(t: TestStore) {
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let queue = "queue://del.tx";
    b.send(queue, Message::new("plain")).await.unwrap();
    let mut tx = b.transaction("tx-del-1");
    tx.send(queue, Message::new("in tx")).await.unwrap();
    let refused = b.delete_destination(queue).await.unwrap_err();
    assert!(in_use(&refused), "{refused}");
    assert!(refused.to_string().contains("transaction"), "{refused}");
    // The count holds prepared rows too.
    assert_eq!(b.store().count_messages(queue).await.unwrap(), 2);
    tx.commit().await.unwrap();
    let browsed = b.browse(queue, 0, 10).await.unwrap();
    let bodies: Vec<_> = browsed
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).to_string())
        .collect();
    assert_eq!(
        bodies,
        ["plain", "in tx"],
        "the transaction's message was kept"
    );
    let deleted = b.delete_destination(queue).await.unwrap();
    assert_eq!(deleted.messages, 2);
    assert_eq!(b.store().count_messages(queue).await.unwrap(), 0);
    b.shutdown().await.unwrap();
}

/// A producer sends 3,000 persistent messages one after another while the queue is
/// deleted twice in the middle: no send fails, and every message a send accepted is
/// either counted by a deletion or still stored afterwards (in the new queue): none
/// is lost, none is counted twice.
async fn sends_racing_a_deletion_are_kept(t: TestStore) {
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let queue = "queue://del.race";
    const N: usize = 3_000;
    b.send(queue, Message::new("first")).await.unwrap();
    let producer = {
        let b = b.clone();
        tokio::spawn(async move {
            for i in 0..N {
                b.send(queue, Message::new(format!("m{i}")))
                    .await
                    .unwrap_or_else(|e| panic!("send {i} failed: {e}"));
            }
        })
    };
    let mut deleted = 0;
    for _ in 0..2 {
        // Let some sends in first.
        let before = b.store().count_messages(queue).await.unwrap();
        poll_until("200 more sends (or the last)", || async {
            let now = b.store().count_messages(queue).await.unwrap();
            (now >= before + 200 || producer.is_finished()).then_some(())
        })
        .await;
        deleted += b.delete_destination(queue).await.unwrap().messages;
    }
    producer.await.unwrap();
    let left = b.store().count_messages(queue).await.unwrap();
    assert!(deleted > 0, "a deletion deleted something");
    assert_eq!(
        deleted + left,
        N as u64 + 1,
        "deleted {deleted} + left {left}: every accepted message once"
    );
    // What is left is the new queue's, in order, deliverable.
    let mut consumer = b
        .subscribe(queue, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let mut last = None;
    for _ in 0..left {
        let m = next(&mut consumer).await;
        let n: usize = body(&m)[1..].parse().unwrap();
        assert!(last.is_none_or(|l| n > l), "m{n} after m{last:?}");
        last = Some(n);
    }
    assert_eq!(last, Some(N - 1), "the last message sent is kept");
    drop(consumer);
    b.shutdown().await.unwrap();
}

/// A topic with two offline durable subscriptions and their backlog: refused while
/// a non-durable subscriber is online; then its subscriptions (marks, individual
/// acks) and messages go, and a durable subscriber that comes back to the new topic
/// starts from scratch.
async fn a_topic_goes_with_its_durable_subscriptions(t: TestStore) {
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let topic = "topic://del.t";
    for name in ["a", "b"] {
        drop(
            b.subscribe(topic, SubscribeOptions::durable("del-client", name))
                .await
                .unwrap(),
        );
    }
    for i in 0..1_200 {
        b.send(topic, Message::new(format!("t{i}"))).await.unwrap();
    }
    let live = b
        .subscribe(topic, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let refused = b.delete_destination(topic).await.unwrap_err();
    assert!(in_use(&refused), "{refused}");
    assert_eq!(b.store().count_subscriptions(topic).await.unwrap(), 2);
    drop(live);
    let deleted = poll_until("the dropped subscriber detaches", || async {
        match b.delete_destination(topic).await {
            Err(e) if in_use(&e) => None,
            other => Some(other.unwrap()),
        }
    })
    .await;
    assert_eq!(deleted.subscriptions, 2);
    assert_eq!(deleted.messages, 1_200);
    assert_eq!(b.store().count_subscriptions(topic).await.unwrap(), 0);
    assert_eq!(b.store().count_messages(topic).await.unwrap(), 0);

    let mut back = b
        .subscribe(topic, SubscribeOptions::durable("del-client", "a"))
        .await
        .unwrap();
    // The first message sent to the new topic is the first it gets.
    b.send(topic, Message::new("new")).await.unwrap();
    let m = next(&mut back).await;
    assert_eq!(
        body(&m),
        "new",
        "a deleted message reached a new subscription"
    );
    drop(back);
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    a_queue_goes_with_every_row,
    an_open_transaction_holds_the_queue,
    sends_racing_a_deletion_are_kept,
    a_topic_goes_with_its_durable_subscriptions,
);
