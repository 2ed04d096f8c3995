//! Advisory messages (issue 33, ActiveMQ's `ActiveMQ.Advisory.*` topics): a
//! subscriber of an advisory topic sees consumers and producers come and go,
//! destinations added and removed, messages expired and dead-lettered, each as a
//! JSON body; nothing is built or sent while nobody subscribes; clients cannot send
//! to them. Both backends; embedding API and STOMP.

use ebb::stomp::frame::{Command, Frame};
use ebb::test_util::stomp::*;
use ebb::test_util::*;
use ebb::{AckMode, Broker, Error, Message, Policy, Received, SubscribeOptions, UsageConfig};

/// The JSON body of an advisory message, checked to be one.
fn json(m: &Received) -> serde_json::Value {
    assert_eq!(m.header("type"), Some("Advisory"));
    assert_eq!(m.header("content-type"), Some("application/json"));
    serde_json::from_slice(m.body()).expect("a JSON body")
}

fn frame_json(f: &Frame) -> serde_json::Value {
    assert_eq!(f.command, Command::Message, "{f:?}");
    assert_eq!(f.get("type"), Some("Advisory"));
    serde_json::from_slice(&f.body).expect("a JSON body")
}

async fn a_consumer_and_a_producer_come_and_go_over_stomp(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut watcher = Client::connected(s.addr, None).await;
    watcher
        .write(b"SUBSCRIBE\nid:c\ndestination:/topic/ActiveMQ.Advisory.Consumer.Queue.orders\n\n\0SUBSCRIBE\nid:p\ndestination:/topic/ActiveMQ.Advisory.Producer.Queue.orders\nreceipt:w\n\n\0")
        .await;
    assert_eq!(watcher.frame().await.unwrap().command, Command::Receipt);
    let mut consumer = Client::connected(s.addr, None).await;
    consumer
        .write(b"SUBSCRIBE\nid:1\ndestination:/queue/orders\nselector:color = 'red'\n\n\0")
        .await;
    let added = watcher.frame().await.expect("consumer_added");
    assert_eq!(added.get("consumerCount"), Some("1"));
    let body = frame_json(&added);
    assert_eq!(body["event"], "consumer_added");
    assert_eq!(body["destination"], "/queue/orders");
    assert_eq!(body["consumer_count"], 1);
    assert_eq!(body["selector"], "color = 'red'");
    assert!(body["connection"].is_u64(), "{body}");
    consumer.write(b"UNSUBSCRIBE\nid:1\n\n\0").await;
    let removed = frame_json(&watcher.frame().await.expect("consumer_removed"));
    assert_eq!(removed["event"], "consumer_removed");
    assert_eq!(removed["consumer_count"], 0);
    assert_eq!(removed["consumer_id"], body["consumer_id"]);
    // A producer: its first SEND adds it, its connection's end removes it.
    let mut producer = Client::connected(s.addr, None).await;
    producer
        .write(b"SEND\ndestination:/queue/orders\nreceipt:s\n\nx\0")
        .await;
    let answers = [
        watcher.frame().await.expect("producer_added"),
        producer.frame().await.expect("receipt"),
    ];
    let added = frame_json(&answers[0]);
    assert_eq!(added["event"], "producer_added");
    assert_eq!(added["producer_count"], 1);
    assert_eq!(answers[0].get("producerCount"), Some("1"));
    producer.write(b"DISCONNECT\nreceipt:bye\n\n\0").await;
    let removed = frame_json(&watcher.frame().await.expect("producer_removed"));
    assert_eq!(removed["event"], "producer_removed");
    assert_eq!(removed["producer_count"], 0);
    // Clients cannot write advisories.
    consumer
        .write(b"SEND\ndestination:/topic/ActiveMQ.Advisory.Consumer.Queue.orders\n\nforged\0")
        .await;
    let refused = consumer.frame().await.unwrap();
    assert_eq!(refused.command, Command::Error);
    assert!(
        refused.get("message").unwrap().contains("broker only"),
        "{refused:?}"
    );
    s.stop().await;
}

async fn destinations_expiries_and_dead_letters_are_advised(t: TestStore) {
    let policy = Policy {
        maximum_redeliveries: 0,
        ..Policy::default()
    };
    let b = broker_with(&t, vec![("queue://>", policy)], UsageConfig::default()).await;
    let mut all = b
        .subscribe(
            "topic://ActiveMQ.Advisory.>",
            SubscribeOptions::non_durable(),
        )
        .await
        .unwrap();
    // A new queue is added.
    b.send("queue://jobs", Message::new("poison"))
        .await
        .unwrap();
    let added = json(&take(&mut all, 1).await[0]);
    assert_eq!(added["event"], "destination_added");
    assert_eq!(added["destination"], "/queue/jobs");
    // A message expired on arrival.
    b.send("queue://jobs", Message::new("late").expires_at(1))
        .await
        .unwrap();
    let expired = json(&take(&mut all, 1).await[0]);
    assert_eq!(expired["event"], "expired");
    assert_eq!(expired["destination"], "/queue/jobs");
    assert_eq!(expired["count"], 1);
    // A failed delivery past maximum_redeliveries: dead-lettered. (The consumer's own
    // advisories are on a topic nobody here runs: the wildcard matches them too.)
    let mut sub = b
        .subscribe(
            "queue://jobs",
            SubscribeOptions::non_durable().ack(AckMode::Client),
        )
        .await
        .unwrap();
    let m = take(&mut sub, 1).await.remove(0);
    sub.nack(&m).await.unwrap();
    // The consumer's advisory and the dead letter's come in either order.
    let mut events: Vec<serde_json::Value> = Vec::new();
    let seen = |events: &[serde_json::Value], what: &str| events.iter().any(|e| e["event"] == what);
    while !(seen(&events, "dead_lettered") && seen(&events, "consumer_added")) {
        events.push(json(&take(&mut all, 1).await[0]));
    }
    let dead = events
        .iter()
        .find(|e| e["event"] == "dead_lettered")
        .unwrap();
    assert_eq!(dead["destination"], "/queue/jobs");
    assert_eq!(dead["dead_letter_queue"], "/queue/DLQ.jobs");
    assert_eq!(dead["message_id"], m.message_id());
    assert!(events
        .iter()
        .any(|e| e["event"] == "consumer_added" && e["destination"] == "/queue/jobs"));
    drop(sub);
    // Deleted: removed.
    loop {
        let e = json(&take(&mut all, 1).await[0]);
        if e["event"] == "consumer_removed" {
            break;
        }
    }
    b.delete_destination("queue://jobs").await.unwrap();
    loop {
        let e = json(&take(&mut all, 1).await[0]);
        if e["event"] == "destination_removed" {
            assert_eq!(e["destination"], "/queue/jobs");
            break;
        }
    }
    // Embedding: a send to an advisory topic is refused, also to the parent name a
    // `>` matches; so is a durable subscription (advisories are not persistent).
    for forged in [
        "topic://ActiveMQ.Advisory.Queue",
        "topic://ActiveMQ.Advisory",
    ] {
        assert!(matches!(
            b.send(forged, Message::new("forged")).await,
            Err(Error::InvalidDestination { .. })
        ));
    }
    assert!(matches!(
        b.subscribe(
            "topic://ActiveMQ.Advisory.Queue",
            SubscribeOptions::durable("c", "d")
        )
        .await
        .map(drop),
        Err(Error::InvalidDestination { .. })
    ));
    b.shutdown().await.unwrap();
}

/// Nobody subscribes to advisories: none is built, and no advisory topic starts.
async fn no_subscriber_no_advisory(t: TestStore) {
    let b: Broker = broker(&t, policy(0, 400), 2).await;
    let sub = b
        .subscribe("queue://quiet", SubscribeOptions::non_durable())
        .await
        .unwrap();
    b.producer_joined("queue://quiet");
    b.send("queue://quiet", Message::new("x").expires_at(1))
        .await
        .unwrap();
    b.producer_left("queue://quiet");
    drop(sub);
    b.send("queue://quiet", Message::new("y")).await.unwrap();
    let listed = b
        .list_destinations(Some("topic://ActiveMQ.Advisory."), 100)
        .await
        .unwrap()
        .destinations;
    assert!(
        listed
            .iter()
            .all(|d| !d.stats.destination.contains("Advisory")),
        "advisory topics started with nobody subscribed: {:?}",
        listed
            .iter()
            .map(|d| &d.stats.destination)
            .collect::<Vec<_>>()
    );
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    a_consumer_and_a_producer_come_and_go_over_stomp,
    destinations_expiries_and_dead_letters_are_advised,
    no_subscriber_no_advisory,
);
