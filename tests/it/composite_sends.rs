//! Composite sends are pipelined (issue 52): the sender goes on while the broker's
//! committer stores them, many in one store transaction, all or none each; they keep
//! their order beside plain sends of the same producer; a durable subscriber gets
//! every message when composite sends, or transactions' COMMITs, race plain sends to
//! its topic (store ids grow in the order the topic releases them); a shutdown stores or refuses the sends under
//! way, never half of one. Both backends; embedding API and STOMP.

use std::collections::HashMap;
use std::sync::Arc;

use ebb::stomp::frame::Command;
use ebb::test_util::stomp::*;
use ebb::test_util::*;
use ebb::{Broker, BrokerConfig, DestinationKey, Message, SendOptions, SubscribeOptions};
use ebb_store::WriteOp;

use crate::faulty_store::FaultyStore;

/// The rows `destination` holds in the store.
async fn rows(b: &Broker, destination: &str) -> u64 {
    b.store().count_messages(destination).await.unwrap()
}

fn keys(composite: &str) -> Vec<DestinationKey> {
    DestinationKey::parse_composite(composite).unwrap()
}

/// Checks what a durable subscriber got while producers raced: store ids grow in
/// delivery order, and each producer's messages (bodies `<letter><index>`) come in
/// index order from 0. Answers how many each producer's letter had.
fn check_delivery_order(got: &[ebb::Received]) -> HashMap<char, usize> {
    let ids: Vec<i64> = got.iter().map(|m| m.store_id().unwrap()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "store ids out of delivery order: {ids:?}"
    );
    let mut next: HashMap<char, usize> = HashMap::new();
    for m in got {
        let text = body(m);
        let (producer, i) = text.split_at(1);
        let expected = next.entry(producer.chars().next().unwrap()).or_default();
        assert_eq!(
            i.parse::<usize>().unwrap(),
            *expected,
            "{text} out of order"
        );
        *expected += 1;
    }
    next
}

/// One producer, pipelined: every third send is a plain one to `a`, the others are
/// composites to `a` and `b`; nothing is awaited until the end. `a` gets all of them
/// in send order, `b` the composites in send order.
async fn composite_and_plain_sends_of_one_producer_keep_their_order(t: TestStore) {
    let b = broker(&t, policy(0, 400), 2).await;
    let both = keys("/queue/ord.a,/queue/ord.b");
    let mut pending = Vec::new();
    for i in 0..300 {
        let m = Message::new(format!("{i}")).persistent(true);
        let p = if i % 3 == 0 {
            b.start_send_with("queue://ord.a", m, SendOptions::checked())
                .await
        } else {
            b.start_send_to_each_with(&both, m, SendOptions::default())
                .await
        };
        pending.push(p.unwrap());
    }
    for p in pending {
        p.await.unwrap();
    }
    assert_eq!(rows(&b, "queue://ord.a").await, 300);
    assert_eq!(rows(&b, "queue://ord.b").await, 200);
    let mut a = b
        .subscribe("queue://ord.a", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut a, 300).await.iter().map(body).collect();
    let want: Vec<String> = (0..300).map(|i| i.to_string()).collect();
    assert_eq!(got, want);
    let mut q = b
        .subscribe("queue://ord.b", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut q, 200).await.iter().map(body).collect();
    let want: Vec<String> = (0..300)
        .filter(|i| i % 3 != 0)
        .map(|i| i.to_string())
        .collect();
    assert_eq!(got, want);
    b.shutdown().await.unwrap();
}

/// Two producers race to a topic with an online durable subscription: one sends
/// composites to the topic and a queue, the other plain sends to the topic, both
/// pipelined. The subscriber gets every message once, each producer's in order, with
/// store ids growing in delivery order (its cursor passes a lower id after a higher
/// one as already read: a message would be lost); after a restart nothing is left.
async fn a_durable_subscriber_gets_every_message_while_composite_and_plain_sends_race(
    t: TestStore,
) {
    const EACH: usize = 400;
    let b = broker(&t, policy(0, 400), 2).await;
    let options = || SubscribeOptions::durable("race", "d").prefetch(1_000);
    let mut sub = b.subscribe("topic://race.t", options()).await.unwrap();
    let composite = {
        let b = b.clone();
        let both = keys("/topic/race.t,/queue/race.q");
        actix_rt::spawn(async move {
            let mut pending = Vec::new();
            for i in 0..EACH {
                let m = Message::new(format!("c{i}")).persistent(true);
                pending.push(
                    b.start_send_to_each_with(&both, m, SendOptions::default())
                        .await
                        .unwrap(),
                );
            }
            for p in pending {
                p.await.unwrap();
            }
        })
    };
    let plain = {
        let b = b.clone();
        actix_rt::spawn(async move {
            let messages = (0..EACH).map(|i| Message::new(format!("p{i}")).persistent(true));
            for outcome in b.send_all("topic://race.t", messages).await {
                outcome.unwrap();
            }
        })
    };
    let got = take(&mut sub, 2 * EACH).await;
    composite.await.unwrap();
    plain.await.unwrap();
    let next = check_delivery_order(&got);
    assert_eq!(next.get(&'c'), Some(&EACH));
    assert_eq!(next.get(&'p'), Some(&EACH));
    for m in &got {
        sub.ack(m).await.unwrap();
    }
    assert_eq!(rows(&b, "queue://race.q").await, EACH as u64);
    drop(sub);
    b.shutdown().await.unwrap();
    let b = broker(&t, policy(0, 400), 2).await;
    let mut sub = b.subscribe("topic://race.t", options()).await.unwrap();
    b.send("topic://race.t", Message::new("last").persistent(true))
        .await
        .unwrap();
    let got = take(&mut sub, 1).await;
    assert_eq!(body(&got[0]), "last", "a message was left behind");
    b.shutdown().await.unwrap();
}

/// The same race with transactions: one producer commits transactions of three sends
/// each to the topic (the broker writes each COMMIT, the topic fenced meanwhile),
/// another sends plain messages, pipelined. Every message reaches the durable
/// subscriber once, each producer's in order, store ids growing in delivery order.
async fn a_durable_subscriber_gets_every_message_while_commits_and_plain_sends_race(t: TestStore) {
    const TRANSACTIONS: usize = 100;
    const PLAIN: usize = 300;
    let b = broker(&t, policy(0, 400), 2).await;
    let options = || SubscribeOptions::durable("race-tx", "d").prefetch(1_000);
    let mut sub = b.subscribe("topic://race.tx", options()).await.unwrap();
    let transactions = {
        let b = b.clone();
        actix_rt::spawn(async move {
            for n in 0..TRANSACTIONS {
                let mut tx = b.transaction(format!("race-tx:{n}"));
                for i in 0..3 {
                    let m = Message::new(format!("t{}", n * 3 + i)).persistent(true);
                    tx.send("topic://race.tx", m).await.unwrap();
                }
                tx.commit().await.unwrap();
            }
        })
    };
    let plain = {
        let b = b.clone();
        actix_rt::spawn(async move {
            let messages = (0..PLAIN).map(|i| Message::new(format!("p{i}")).persistent(true));
            for outcome in b.send_all("topic://race.tx", messages).await {
                outcome.unwrap();
            }
        })
    };
    let got = take(&mut sub, 3 * TRANSACTIONS + PLAIN).await;
    transactions.await.unwrap();
    plain.await.unwrap();
    let next = check_delivery_order(&got);
    assert_eq!(next.get(&'t'), Some(&(3 * TRANSACTIONS)));
    assert_eq!(next.get(&'p'), Some(&PLAIN));
    b.shutdown().await.unwrap();
}

/// A COMMIT the store refuses rolls its transaction back, and the places its fence
/// reserved at the destination are freed: a later send to that queue is delivered
/// (a place left open would hold every later message back).
async fn a_failed_commit_frees_the_places_its_fence_reserved(t: TestStore) {
    let store = t.open().await;
    let faulty = Arc::new(FaultyStore {
        fail_writes: |op| matches!(op, WriteOp::Commit { xid } if xid == "doomed"),
        ..FaultyStore::new(store)
    });
    let config = BrokerConfig {
        store: t.options.clone(),
        ..topic_config(policy(0, 400))
    };
    let b = Broker::start_with_store(faulty, config).unwrap();
    let mut tx = b.transaction("doomed");
    tx.send("queue://fenced", Message::new("never").persistent(true))
        .await
        .unwrap();
    assert!(tx.commit().await.is_err());
    b.send("queue://fenced", Message::new("after").persistent(true))
        .await
        .unwrap();
    // The refused transaction's row is gone; the later send's is there (counted
    // before a consumer acks it).
    assert_eq!(rows(&b, "queue://fenced").await, 1);
    let mut sub = b
        .subscribe("queue://fenced", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got = take(&mut sub, 1).await;
    assert_eq!(body(&got[0]), "after");
    b.shutdown().await.unwrap();
}

/// Composite sends still waiting for their commit when the broker shuts down are
/// stored first: each one's receipt comes, and after a restart both queues hold every
/// one of them.
async fn a_shutdown_stores_the_composite_sends_under_way(t: TestStore) {
    let b = broker(&t, policy(0, 400), 2).await;
    let both = keys("/queue/down.a,/queue/down.b");
    let mut pending = Vec::new();
    for i in 0..200 {
        let m = Message::new(format!("{i}")).persistent(true);
        pending.push(
            b.start_send_to_each_with(&both, m, SendOptions::default())
                .await
                .unwrap(),
        );
    }
    b.shutdown().await.unwrap();
    for p in pending {
        p.await.unwrap();
    }
    let refused = b.send_to_each(&both, Message::new("late")).await;
    assert!(
        matches!(refused, Err(ebb::Error::ShuttingDown)),
        "{refused:?}"
    );
    let b = broker(&t, policy(0, 400), 2).await;
    assert_eq!(rows(&b, "queue://down.a").await, 200);
    assert_eq!(rows(&b, "queue://down.b").await, 200);
    b.shutdown().await.unwrap();
}

/// STOMP: a producer writes 200 composite SENDs and then a plain one, with a receipt
/// on the last only; the receipt comes once all are stored, and the queue's consumer
/// gets them in the order written.
async fn stomp_composite_sends_are_pipelined_in_order(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut producer = Client::connected(s.addr, None).await;
    let mut frames = Vec::new();
    for i in 0..200 {
        frames.extend(
            format!("SEND\ndestination:/queue/pipe.a,/queue/pipe.b\npersistent:true\n\n{i}\0")
                .into_bytes(),
        );
    }
    frames.extend(b"SEND\ndestination:/queue/pipe.a\npersistent:true\nreceipt:last\n\nplain\0");
    producer.write(&frames).await;
    let receipt = producer.frame().await.unwrap();
    assert_eq!(receipt.command, Command::Receipt, "{receipt:?}");
    assert_eq!(receipt.get("receipt-id"), Some("last"));
    assert_eq!(rows(&s.broker, "queue://pipe.a").await, 201);
    assert_eq!(rows(&s.broker, "queue://pipe.b").await, 200);
    let mut consumer = Client::connected(s.addr, None).await;
    consumer
        .write(b"SUBSCRIBE\nid:1\ndestination:/queue/pipe.a\n\n\0")
        .await;
    let mut got = Vec::new();
    for _ in 0..201 {
        let m = consumer.frame().await.unwrap();
        assert_eq!(m.command, Command::Message);
        got.push(String::from_utf8_lossy(&m.body).into_owned());
    }
    let mut want: Vec<String> = (0..200).map(|i| i.to_string()).collect();
    want.push("plain".into());
    assert_eq!(got, want);
    s.stop().await;
}

on_every_backend!(
    #[actix_rt::test]
    composite_and_plain_sends_of_one_producer_keep_their_order,
    a_durable_subscriber_gets_every_message_while_composite_and_plain_sends_race,
    a_durable_subscriber_gets_every_message_while_commits_and_plain_sends_race,
    a_failed_commit_frees_the_places_its_fence_reserved,
    a_shutdown_stores_the_composite_sends_under_way,
    stomp_composite_sends_are_pipelined_in_order,
);
