//! Routing kinds (issue 33): virtual topics (ActiveMQ's `VirtualTopic.>` with
//! `Consumer.<group>.` queues) and composite destinations (the comma convention and
//! `[[composite]]` with a selector per forward). A send routed to several
//! destinations is one store transaction: all of them have it or none. Both backends;
//! embedding API and STOMP.

use std::sync::Arc;

use ebb::stomp::frame::{Command, Frame};
use ebb::test_util::stomp::*;
use ebb::test_util::*;
use ebb::{
    Broker, BrokerConfig, CompositeDestination, DestinationKey, Error, Forward, Message,
    RoutingConfig, Selector, SubscribeOptions,
};
use ebb_store::{MessageStoreExt, WriteOp};

use crate::faulty_store::FaultyStore;

const TOPIC: &str = "topic://VirtualTopic.Orders";

fn group(name: &str) -> String {
    format!("queue://Consumer.{name}.VirtualTopic.Orders")
}

/// The rows `destination` holds in the store.
async fn rows(b: &Broker, destination: &str) -> u64 {
    b.store().count_messages(destination).await.unwrap()
}

/// The default routing with virtual topics turned off.
fn virtual_topics_off() -> RoutingConfig {
    RoutingConfig {
        virtual_topics: ebb::VirtualTopics {
            enabled: false,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn config(t: &TestStore, routing: RoutingConfig) -> BrokerConfig {
    BrokerConfig {
        store: t.options.clone(),
        routing,
        ..topic_config(policy(0, 400))
    }
}

async fn every_group_gets_every_message_once_spread_over_its_consumers(t: TestStore) {
    let b = Broker::start(&t.url, config(&t, RoutingConfig::default()))
        .await
        .unwrap();
    let options = || SubscribeOptions::non_durable().prefetch(10);
    let mut a = vec![
        b.subscribe(group("A").as_str(), options()).await.unwrap(),
        b.subscribe(group("A").as_str(), options()).await.unwrap(),
    ];
    let mut group_b = b.subscribe(group("B").as_str(), options()).await.unwrap();
    let mut plain = b.subscribe(TOPIC, options()).await.unwrap();
    assert_eq!(
        b.virtual_groups(&DestinationKey::parse(TOPIC).unwrap()),
        [
            DestinationKey::parse(&group("A")).unwrap(),
            DestinationKey::parse(&group("B")).unwrap()
        ]
    );
    let mut ids = Vec::new();
    for n in 0..100 {
        let receipt = b.send(TOPIC, Message::new(format!("m{n}"))).await.unwrap();
        ids.push(receipt.message_id);
    }
    // Group A: each message once, over both consumers.
    let spread = take_spread(&mut a, 100).await;
    assert!(
        spread.iter().all(|got| !got.is_empty()),
        "one consumer of A got none"
    );
    let mut bodies: Vec<String> = spread.iter().flatten().map(body).collect();
    bodies.sort_by_key(|m| m[1..].parse::<u32>().unwrap());
    assert_eq!(
        bodies,
        (0..100).map(|n| format!("m{n}")).collect::<Vec<_>>()
    );
    // Group B and the topic's own subscriber: each message once, in order, with the
    // id the sender got (one id for every copy).
    for sub in [&mut group_b, &mut plain] {
        let got = take(sub, 100).await;
        assert_eq!(
            got.iter().map(body).collect::<Vec<_>>(),
            (0..100).map(|n| format!("m{n}")).collect::<Vec<_>>()
        );
        assert_eq!(
            got.iter()
                .map(|m| m.message_id().to_string())
                .collect::<Vec<_>>(),
            ids
        );
    }
    // A subscription that is refused makes no group.
    assert!(b
        .subscribe(
            group("Refused").as_str(),
            SubscribeOptions::durable("c", "d")
        )
        .await
        .is_err());
    // The admin API's view of the topic lists its groups.
    let view = b
        .destination_view(TOPIC)
        .await
        .unwrap()
        .expect("the topic runs");
    assert_eq!(
        view.virtual_groups,
        [
            "/queue/Consumer.A.VirtualTopic.Orders",
            "/queue/Consumer.B.VirtualTopic.Orders"
        ]
    );
    // Group C is created now: it gets what is sent from now on only.
    drop(a);
    let mut c = b.subscribe(group("C").as_str(), options()).await.unwrap();
    b.send(TOPIC, Message::new("after C")).await.unwrap();
    assert_eq!(body(&take(&mut c, 1).await[0]), "after C");
    b.shutdown().await.unwrap();
}

async fn an_offline_group_keeps_its_messages_across_a_restart(t: TestStore) {
    let b = Broker::start(&t.url, config(&t, RoutingConfig::default()))
        .await
        .unwrap();
    // The group exists from its first subscription on, then goes offline.
    drop(
        b.subscribe(group("Offline").as_str(), SubscribeOptions::non_durable())
            .await
            .unwrap(),
    );
    b.send(TOPIC, Message::new("before restart")).await.unwrap();
    assert_eq!(rows(&b, &group("Offline")).await, 1);
    b.shutdown().await.unwrap();
    // The definition is read back: the group still gets the topic's messages.
    let b = Broker::start(&t.url, config(&t, RoutingConfig::default()))
        .await
        .unwrap();
    b.send(TOPIC, Message::new("after restart")).await.unwrap();
    assert_eq!(rows(&b, &group("Offline")).await, 2);
    let mut sub = b
        .subscribe(group("Offline").as_str(), SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 2).await.iter().map(body).collect();
    assert_eq!(got, ["before restart", "after restart"]);
    drop(sub);
    // Deleting the group's queue ends the group.
    b.delete_destination(group("Offline").as_str())
        .await
        .unwrap();
    b.send(TOPIC, Message::new("after delete").persistent(true))
        .await
        .unwrap();
    assert_eq!(rows(&b, &group("Offline")).await, 0);
    let deleted = DestinationKey::parse(&group("Offline")).unwrap();
    assert!(
        !b.destination_exists(&deleted).await.unwrap(),
        "the topic's feed does not make the deleted group again"
    );
    assert!(b
        .virtual_groups(&DestinationKey::parse(TOPIC).unwrap())
        .is_empty());
    b.shutdown().await.unwrap();
    // Virtual topics off: a queue of that name is a queue like any other.
    let off = virtual_topics_off();
    let b = Broker::start(&t.url, config(&t, off)).await.unwrap();
    drop(
        b.subscribe(group("Off").as_str(), SubscribeOptions::non_durable())
            .await
            .unwrap(),
    );
    b.send(TOPIC, Message::new("to the topic only"))
        .await
        .unwrap();
    assert_eq!(rows(&b, &group("Off")).await, 0);
    b.shutdown().await.unwrap();
}

/// The store fails the write that `fail` picks; a composite send to three
/// destinations then leaves none of them with the message, and the same send once
/// the store works reaches all three.
async fn a_composite_send_is_all_or_none(t: TestStore) {
    let store = t.open().await;
    // One fault switch per backend: the two variants of this test run at once.
    use std::sync::atomic::{AtomicU8, Ordering::SeqCst};
    static FAIL_SQLITE: AtomicU8 = AtomicU8::new(0);
    static FAIL_POSTGRES: AtomicU8 = AtomicU8::new(0);
    fn fails(fault: &AtomicU8, op: &WriteOp) -> bool {
        match (fault.load(SeqCst), op) {
            // Mid-way: the copy to the third destination cannot be stored.
            (1, WriteOp::Add(m)) => m.container == "queue://all.c",
            // At the start: the copy to the first destination.
            (2, WriteOp::Add(m)) => m.container == "queue://all.a",
            _ => false,
        }
    }
    let (fail, fail_writes): (&AtomicU8, fn(&WriteOp) -> bool) = if t.options.schema.is_some() {
        (&FAIL_POSTGRES, |op| fails(&FAIL_POSTGRES, op))
    } else {
        (&FAIL_SQLITE, |op| fails(&FAIL_SQLITE, op))
    };
    let faulty = Arc::new(FaultyStore {
        fail_writes,
        ..FaultyStore::new(store)
    });
    let b = Broker::start_with_store(faulty, config(&t, RoutingConfig::default())).unwrap();
    let mut topic_sub = b
        .subscribe("topic://all.b", SubscribeOptions::durable("c1", "d1"))
        .await
        .unwrap();
    let keys = DestinationKey::parse_composite("/queue/all.a,/topic/all.b,queue://all.c").unwrap();
    for fault in [1, 2] {
        fail.store(fault, SeqCst);
        let refused = b
            .send_to_each(&keys, Message::new(format!("fault {fault}")))
            .await;
        assert!(refused.is_err(), "fault {fault}: {refused:?}");
        for c in ["queue://all.a", "topic://all.b", "queue://all.c"] {
            assert_eq!(rows(&b, c).await, 0, "fault {fault}: {c} kept a row");
        }
    }
    fail.store(0, SeqCst);
    let receipt = b.send_to_each(&keys, Message::new("whole")).await.unwrap();
    for c in ["queue://all.a", "topic://all.b", "queue://all.c"] {
        assert_eq!(rows(&b, c).await, 1, "{c}");
    }
    // The durable subscriber never saw the failed ones.
    let got = take(&mut topic_sub, 1).await;
    assert_eq!(body(&got[0]), "whole");
    assert_eq!(got[0].message_id(), receipt.message_id);
    for q in ["queue://all.a", "queue://all.c"] {
        let mut sub = b
            .subscribe(q, SubscribeOptions::non_durable())
            .await
            .unwrap();
        let got = take(&mut sub, 1).await;
        assert_eq!(body(&got[0]), "whole");
        assert_eq!(got[0].message_id(), receipt.message_id);
    }
    b.shutdown().await.unwrap();
}

/// A virtual topic's message is one row of the topic, which every group that reads
/// the topic's rows (a plain queue) gets: a store that refuses that row leaves no
/// group with it, whatever `transacted_send` says. A group that gets copies (a
/// last-value queue) is one more send: with `transacted_send` a refused copy leaves
/// no group with the message; without, the others keep theirs (separate sends, as
/// ActiveMQ's default) and the send is still refused.
async fn transacted_send_makes_the_groups_all_or_none(t: TestStore) {
    const COPIED: &str = "lvq://Consumer.L.VirtualTopic.Orders";
    for (transacted, refuse_topic) in [(true, false), (false, false), (false, true)] {
        let store = t.open().await;
        let faulty = Arc::new(FaultyStore {
            fail_writes: if refuse_topic {
                |op| matches!(op, WriteOp::Add(m) if m.container == TOPIC)
            } else {
                |op| matches!(op, WriteOp::Add(m) if m.container.starts_with("lvq://Consumer.L."))
            },
            ..FaultyStore::new(store)
        });
        let routing = RoutingConfig {
            virtual_topics: ebb::VirtualTopics {
                transacted_send: transacted,
                ..Default::default()
            },
            ..Default::default()
        };
        let b = Broker::start_with_store(faulty, config(&t, routing)).unwrap();
        for g in [group("A"), group("B"), COPIED.to_string()] {
            drop(
                b.subscribe(g.as_str(), SubscribeOptions::non_durable())
                    .await
                    .unwrap(),
            );
        }
        let before = [rows(&b, &group("A")).await, rows(&b, &group("B")).await];
        let topic_before = rows(&b, TOPIC).await;
        assert!(b.send(TOPIC, Message::new("x")).await.is_err());
        let kept = [
            rows(&b, &group("A")).await - before[0],
            rows(&b, &group("B")).await - before[1],
        ];
        let expected = u64::from(!transacted && !refuse_topic);
        assert_eq!(
            kept,
            [expected, expected],
            "transacted_send = {transacted}, topic row refused = {refuse_topic}"
        );
        assert_eq!(
            rows(&b, TOPIC).await - topic_before,
            expected,
            "one row for both groups"
        );
        // The copy is a send of its own: kept when another part is refused, unless
        // the send is transacted.
        assert_eq!(
            rows(&b, COPIED).await,
            u64::from(!transacted && refuse_topic)
        );
        b.shutdown().await.unwrap();
    }
}

/// A virtual topic's message is stored once for all its groups: one row of the topic,
/// which each group reads through its own acks. A group's consumers ack, NACK and
/// dead-letter as on any queue without touching another group's view; a message sent
/// to a group's queue itself is that group's only; once every group has acked, the
/// topic's cleanup deletes the rows.
async fn a_virtual_topic_message_is_one_row_for_every_group(t: TestStore) {
    // No redelivery: a NACK dead-letters. The topic ticks every 50 ms (its cleanup).
    let no_redelivery = ebb::Policy {
        maximum_redeliveries: 0,
        ..ebb::Policy::default()
    };
    let mut config = config(&t, RoutingConfig::default());
    config.policies.entries = vec![
        ebb::PolicyEntry {
            destination: "queue://>".into(),
            policy: no_redelivery,
        },
        ebb::PolicyEntry {
            destination: "topic://>".into(),
            policy: policy(50, 400),
        },
    ];
    let b = Broker::start(&t.url, config).await.unwrap();
    let groups = ["A", "B", "C"];
    for g in groups {
        drop(
            b.subscribe(group(g).as_str(), SubscribeOptions::non_durable())
                .await
                .unwrap(),
        );
    }
    for n in 0..10 {
        b.send(TOPIC, Message::new(format!("m{n}")).persistent(true))
            .await
            .unwrap();
    }
    b.send(group("A").as_str(), Message::new("only A").persistent(true))
        .await
        .unwrap();
    assert_eq!(
        rows(&b, TOPIC).await,
        10,
        "one row per message, for 3 groups"
    );
    let store = b.store();
    let mut holding = store.list_containers("", "\u{7f}", 100).await.unwrap();
    holding.sort();
    assert_eq!(
        holding,
        [group("A"), TOPIC.to_string()],
        "B and C hold no row"
    );
    assert_eq!(rows(&b, &group("A")).await, 11);
    assert_eq!(rows(&b, &group("B")).await, 10);
    // A takes everything; B NACKs its first message (no redelivery: dead-lettered)
    // and acks the rest; C takes nothing yet.
    let client = || SubscribeOptions::non_durable().ack(ebb::AckMode::Client);
    let mut a = b.subscribe(group("A").as_str(), client()).await.unwrap();
    let got = take(&mut a, 11).await;
    let mut bodies: Vec<String> = got.iter().map(body).collect();
    assert_eq!(
        bodies.remove(10),
        "only A",
        "A's own message after the topic's"
    );
    assert_eq!(bodies, (0..10).map(|n| format!("m{n}")).collect::<Vec<_>>());
    for m in &got {
        a.ack(m).await.unwrap();
    }
    let mut sub_b = b.subscribe(group("B").as_str(), client()).await.unwrap();
    let got = take(&mut sub_b, 10).await;
    sub_b.nack(&got[0]).await.unwrap();
    for m in &got[1..] {
        sub_b.ack(m).await.unwrap();
    }
    let dlq = "queue://DLQ.Consumer.B.VirtualTopic.Orders";

    poll_until("B's refused message is dead-lettered", || async {
        (rows(&b, dlq).await == 1).then_some(())
    })
    .await;
    poll_until("A and B have nothing left", || async {
        (rows(&b, &group("A")).await == 0 && rows(&b, &group("B")).await == 0).then_some(())
    })
    .await;
    assert_eq!(rows(&b, &group("C")).await, 10, "C keeps every message");
    assert_eq!(rows(&b, TOPIC).await, 10, "C still needs every row");
    // Deleting the topic leaves its groups with what they have not read, and they
    // get what is sent to it from then on.
    b.delete_destination(TOPIC).await.unwrap();
    assert_eq!(rows(&b, &group("C")).await, 10, "C keeps its messages");
    b.send(TOPIC, Message::new("m10").persistent(true))
        .await
        .unwrap();
    let mut c = b.subscribe(group("C").as_str(), client()).await.unwrap();
    let got = take(&mut c, 11).await;
    assert_eq!(
        got.iter().map(body).collect::<Vec<_>>(),
        (0..11).map(|n| format!("m{n}")).collect::<Vec<_>>()
    );
    for m in &got {
        c.ack(m).await.unwrap();
    }
    // A and B got the message sent after the deletion too.
    for sub in [&mut a, &mut sub_b] {
        let m10 = take(sub, 1).await;
        assert_eq!(body(&m10[0]), "m10");
        sub.ack(&m10[0]).await.unwrap();
    }
    poll_until(
        "the topic's cleanup deletes what every group acked",
        || async { (rows(&b, TOPIC).await == 0).then_some(()) },
    )
    .await;
    drop((a, sub_b, c));
    b.shutdown().await.unwrap();
}

/// A composite send naming a virtual topic and one of its groups delivers once to the
/// group: it reads the topic's row, so no copy of its own is added.
async fn a_composite_naming_a_topic_and_its_group_delivers_once(t: TestStore) {
    let b = Broker::start(&t.url, config(&t, RoutingConfig::default()))
        .await
        .unwrap();
    let mut a = b
        .subscribe(group("A").as_str(), SubscribeOptions::non_durable())
        .await
        .unwrap();
    let keys = [
        DestinationKey::parse(TOPIC).unwrap(),
        DestinationKey::parse(&group("A")).unwrap(),
    ];
    b.send_to_each(&keys, Message::new("both").persistent(true))
        .await
        .unwrap();
    b.send(TOPIC, Message::new("after").persistent(true))
        .await
        .unwrap();
    let got: Vec<String> = take(&mut a, 2).await.iter().map(body).collect();
    assert_eq!(got, ["both", "after"], "once, then the next one");
    assert_eq!(rows(&b, TOPIC).await, 2);
    let holding = b.store().list_containers("", "\u{7f}", 10).await.unwrap();
    assert_eq!(holding, [TOPIC.to_string()], "no copy in the group's queue");
    drop(a);
    b.shutdown().await.unwrap();
}

/// Messages with an expiration sent to a virtual topic expire from each group that
/// reads them, as from a queue: counted as the group's expired and gone from its
/// depth; the topic's rows go once every group is done with them.
async fn a_group_expires_the_topic_rows_it_reads(t: TestStore) {
    let mut config = config(&t, RoutingConfig::default());
    config.policies.entries = vec![
        ebb::PolicyEntry {
            destination: "queue://>".into(),
            policy: policy(50, 400),
        },
        ebb::PolicyEntry {
            destination: "topic://>".into(),
            policy: policy(50, 400),
        },
    ];
    let b = Broker::start(&t.url, config).await.unwrap();
    for g in ["A", "B"] {
        drop(
            b.subscribe(group(g).as_str(), SubscribeOptions::non_durable())
                .await
                .unwrap(),
        );
    }
    for n in 0..5 {
        let m = Message::new(format!("short {n}"))
            .persistent(true)
            .ttl(std::time::Duration::from_millis(100));
        b.send(TOPIC, m).await.unwrap();
    }
    b.send(TOPIC, Message::new("keep").persistent(true))
        .await
        .unwrap();
    for g in ["A", "B"] {
        let container = group(g);
        let d = poll_until("the group expires the topic's rows", || async {
            let d = b
                .stats()
                .await
                .unwrap()
                .destinations
                .into_iter()
                .find(|d| d.destination == container)
                .unwrap();
            // The depth is counted again by a later reading than the one that
            // first shows the expiries.
            (d.expired_total == 5 && d.queue_size == 1).then_some(d)
        })
        .await;
        assert_eq!(d.enqueued_total, 6, "{d:?}");
    }
    poll_until(
        "the expired rows are deleted once both groups are done",
        || async { (rows(&b, TOPIC).await == 1).then_some(()) },
    )
    .await;
    let mut a = b
        .subscribe(group("A").as_str(), SubscribeOptions::non_durable())
        .await
        .unwrap();
    assert_eq!(body(&take(&mut a, 1).await[0]), "keep");
    drop(a);
    b.shutdown().await.unwrap();
}

/// A group that an earlier Ebb stored as a queue of copies (its definition, and a
/// row per message in its queue) is bound to its topic at start: it keeps its copies,
/// in order before what the topic gets from now on, which is stored once.
async fn a_group_stored_as_copies_is_bound_at_start(t: TestStore) {
    let old = group("Old");
    {
        let store = t.open().await;
        store
            .write_one(WriteOp::Subscribe {
                container: format!("{}{TOPIC}", ebb::broker::VIRTUAL_CONTAINER_PREFIX),
                key: ebb_store::SubscriptionKey::new("ebb:virtual-topic", &old),
                selector: None,
                prioritized: false,
            })
            .await
            .unwrap();
        for n in 0..2 {
            let copy = ebb_store::test_util::message(&old, &format!("copy {n}"), 0);
            store.add_messages(vec![copy]).await.unwrap();
        }
        store.close().await;
    }
    let b = Broker::start(&t.url, config(&t, RoutingConfig::default()))
        .await
        .unwrap();
    assert_eq!(b.store().group_topic(&old).as_deref(), Some(TOPIC));
    for n in 0..2 {
        b.send(TOPIC, Message::new(format!("new {n}")).persistent(true))
            .await
            .unwrap();
    }
    assert_eq!(rows(&b, TOPIC).await, 2);
    assert_eq!(rows(&b, &old).await, 4);
    let mut sub = b
        .subscribe(old.as_str(), SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 4).await.iter().map(body).collect();
    assert_eq!(got, ["copy 0", "copy 1", "new 0", "new 1"]);
    drop(sub);
    b.shutdown().await.unwrap();
}

async fn a_configured_composite_forwards_by_selector(t: TestStore) {
    let routing = RoutingConfig {
        composites: vec![CompositeDestination {
            name: DestinationKey::parse("queue://orders.all").unwrap(),
            forwards: vec![
                Forward {
                    destination: DestinationKey::parse("queue://orders.eu").unwrap(),
                    selector: Some(Selector::parse("region = 'eu'").unwrap()),
                },
                Forward {
                    destination: DestinationKey::parse("queue://audit").unwrap(),
                    selector: None,
                },
            ],
        }],
        ..Default::default()
    };
    let b = Broker::start(&t.url, config(&t, routing)).await.unwrap();
    for region in ["eu", "us", "eu"] {
        b.send(
            "/queue/orders.all",
            Message::new(region).header("region", region),
        )
        .await
        .unwrap();
    }
    assert_eq!(rows(&b, "queue://orders.eu").await, 2);
    assert_eq!(rows(&b, "queue://audit").await, 3);
    // Forward only: nothing stays at the composite's name.
    assert_eq!(rows(&b, "queue://orders.all").await, 0);
    // In a transaction too: nothing until the commit, then every forward.
    let mut tx = b.transaction("routing-tx-1");
    tx.send(
        "queue://orders.all",
        Message::new("eu").header("region", "eu"),
    )
    .await
    .unwrap();
    assert_eq!(rows(&b, "queue://orders.eu").await, 2 + 1);
    let mut sub = b
        .subscribe("queue://orders.eu", SubscribeOptions::non_durable())
        .await
        .unwrap();
    assert_eq!(take(&mut sub, 2).await.len(), 2);
    tx.commit().await.unwrap();
    assert_eq!(take(&mut sub, 1).await.len(), 1);
    assert_eq!(rows(&b, "queue://audit").await, 4);
    b.shutdown().await.unwrap();
}

async fn stomp_composite_send_and_its_refusals(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut consumer = Client::connected(s.addr, None).await;
    for (id, dest) in [
        ("1", "/queue/comp.a"),
        ("2", "/topic/comp.b"),
        ("3", "/queue/comp.c"),
    ] {
        consumer
            .write(
                format!("SUBSCRIBE\nid:{id}\ndestination:{dest}\nreceipt:s{id}\n\n\0").as_bytes(),
            )
            .await;
        assert_eq!(consumer.frame().await.unwrap().command, Command::Receipt);
    }
    let mut producer = Client::connected(s.addr, None).await;
    producer
        .write(
            b"SEND\ndestination:/queue/comp.a,/topic/comp.b,queue://comp.c\nreceipt:r1\n\nto all\0",
        )
        .await;
    assert_eq!(
        producer.frame().await.unwrap().get("receipt-id"),
        Some("r1")
    );
    let mut seen = Vec::new();
    for _ in 0..3 {
        let m = consumer.frame().await.unwrap();
        assert_eq!(m.command, Command::Message);
        assert_eq!(&m.body[..], b"to all");
        seen.push((
            m.get("destination").unwrap().to_string(),
            m.get("message-id").unwrap().to_string(),
        ));
    }
    seen.sort();
    assert_eq!(
        seen.iter().map(|(d, _)| d.as_str()).collect::<Vec<_>>(),
        ["/queue/comp.a", "/queue/comp.c", "/topic/comp.b"]
    );
    assert!(
        seen.iter().all(|(_, id)| *id == seen[0].1),
        "one message id: {seen:?}"
    );
    // A subscription names one destination.
    producer
        .write(b"SUBSCRIBE\nid:9\ndestination:/queue/comp.a,/queue/comp.c\n\n\0")
        .await;
    let refused = producer.frame().await.unwrap();
    assert_eq!(refused.command, Command::Error);
    assert!(
        refused.get("message").unwrap().contains("composite"),
        "{refused:?}"
    );
    let mut other = Client::connected(s.addr, None).await;
    other
        .write(b"SEND\ndestination:/queue/comp.a,\nreceipt:r2\n\nx\0")
        .await;
    let refused = other.frame().await.unwrap();
    assert_eq!(refused.command, Command::Error);
    assert_eq!(refused.get("error-code"), Some("invalid-destination"));
    s.stop().await;
}

/// SUBSCRIBE a STOMP client with `shared-subscription-name`, on `id`, to `dest`, and
/// wait for its receipt.
async fn subscribe_shared(c: &mut Client, id: &str, dest: &str, share: &str) {
    c.write(
        format!(
            "SUBSCRIBE\nid:{id}\ndestination:{dest}\nshared-subscription-name:{share}\nack:client-individual\nreceipt:sub-{id}\n\n\0"
        )
        .as_bytes(),
    )
    .await;
    receipt(c, &format!("sub-{id}")).await;
}

/// Takes MESSAGE frames from `clients` until `n` came (ACKing each), round robin.
async fn take_shared(clients: &mut [&mut Client], n: usize) -> Vec<(usize, Frame)> {
    let mut got = Vec::new();
    let mut quiet_rounds = 0;
    while got.len() < n && quiet_rounds < 50 {
        quiet_rounds += 1;
        for (k, c) in clients.iter_mut().enumerate() {
            while let Some(f) = c.frame_within(100).await {
                assert_eq!(f.command, Command::Message, "{f:?}");
                let ack = f.get("ack").unwrap().to_string();
                c.write(format!("ACK\nid:{ack}\n\n\0").as_bytes()).await;
                got.push((k, f));
                quiet_rounds = 0;
            }
        }
    }
    got
}

/// A STOMP shared durable subscription (`shared-subscription-name`, JMS 2.0's
/// `createSharedDurableConsumer`): its consumers, on any connection, split the
/// topic's messages, each MESSAGE naming the topic; the topic's row is stored once
/// (the share's queue reads it); the subscription keeps what arrives while none of
/// its consumers is connected, across a restart, until an UNSUBSCRIBE names it; a
/// plain subscriber of the topic gets every message. Bad uses are refused.
async fn a_stomp_shared_durable_subscription_splits_and_keeps(t: TestStore) {
    let topic = "/topic/jobs.eu";
    let s = server(&t, policy(50, 400)).await;
    let mut c1 = Client::connected(s.addr, None).await;
    let mut c2 = Client::connected(s.addr, None).await;
    subscribe_shared(&mut c1, "1", topic, "workers").await;
    subscribe_shared(&mut c2, "7", topic, "workers").await;
    let mut plain = Client::connected(s.addr, None).await;
    plain
        .write(format!("SUBSCRIBE\nid:p\ndestination:{topic}\nreceipt:p\n\n\0").as_bytes())
        .await;
    receipt(&mut plain, "p").await;
    let mut producer = Client::connected(s.addr, None).await;
    for n in 0..20 {
        producer
            .write(
                format!("SEND\ndestination:{topic}\npersistent:true\nreceipt:r{n}\n\nm{n}\0")
                    .as_bytes(),
            )
            .await;
        receipt(&mut producer, &format!("r{n}")).await;
    }
    let got = take_shared(&mut [&mut c1, &mut c2], 20).await;
    let mut bodies: Vec<String> = got
        .iter()
        .map(|(_, f)| String::from_utf8_lossy(&f.body).to_string())
        .collect();
    bodies.sort_by_key(|b| b[1..].parse::<u32>().unwrap());
    assert_eq!(
        bodies,
        (0..20).map(|n| format!("m{n}")).collect::<Vec<_>>(),
        "each message once between the consumers"
    );
    assert!(got.iter().any(|(k, _)| *k == 0) && got.iter().any(|(k, _)| *k == 1));
    for (_, f) in &got {
        assert_eq!(f.get("destination"), Some(topic));
        assert_eq!(f.get("ebb-topic"), None);
    }
    for n in 0..20 {
        assert_eq!(
            String::from_utf8_lossy(&plain.frame().await.unwrap().body),
            format!("m{n}")
        );
    }
    let queue = "queue://$share.workers.jobs.eu";
    let store = s.broker.store();
    assert_eq!(
        store.group_topic(queue).as_deref(),
        Some("topic://jobs.eu"),
        "the share's queue reads the topic's rows"
    );
    // Nobody consumes: what arrives waits, stored once, across a restart.
    drop((c1, c2));
    producer
        .write(
            format!("SEND\ndestination:{topic}\npersistent:true\nreceipt:w\n\nwaits\0").as_bytes(),
        )
        .await;
    receipt(&mut producer, "w").await;
    assert_eq!(s.broker.shared_subscriptions().len(), 1, "durable");
    assert_eq!(
        store.list_containers("", "\u{7f}", 100).await.unwrap(),
        ["topic://jobs.eu"],
        "the share's queue holds no row of its own"
    );
    drop((plain, producer));
    s.stop().await;
    let s = server(&t, policy(50, 400)).await;
    assert_eq!(s.broker.shared_subscriptions().len(), 1, "durable");
    // Listed (asleep) with what waits for it, though it has no row of its own.
    let listed = s.broker.list_destinations(None, 1_000).await.unwrap();
    let share = listed
        .destinations
        .iter()
        .find(|d| d.stats.destination.contains("$share.workers.jobs.eu"))
        .expect("the share's queue is listed after the restart");
    assert_eq!(share.stats.queue_size, 1, "{share:?}");
    let mut c3 = Client::connected(s.addr, None).await;
    subscribe_shared(&mut c3, "x", topic, "workers").await;
    let waited = c3.next_is("waits");
    let waited = waited.await;
    assert_eq!(waited.get("destination"), Some(topic));
    c3.write(format!("ACK\nid:{}\n\n\0", waited.get("ack").unwrap()).as_bytes())
        .await;
    // UNSUBSCRIBE naming it ends it (its last consumer): its queue goes.
    c3.write(b"UNSUBSCRIBE\nid:x\nshared-subscription-name:workers\nreceipt:u\n\n\0")
        .await;
    receipt(&mut c3, "u").await;
    assert!(s.broker.shared_subscriptions().is_empty(), "ended");
    let key = DestinationKey::parse(queue).unwrap();
    poll_until("its queue is deleted", || async {
        (!s.broker.destination_exists(&key).await.unwrap()).then_some(())
    })
    .await;
    assert_eq!(s.broker.store().group_topic(queue), None, "unbound");
    // Refused: on a queue, with a selector, with a durable name, a bad name.
    for (headers, code) in [
        (
            "destination:/queue/jobs\nshared-subscription-name:w",
            "invalid-request",
        ),
        (
            "destination:/topic/jobs\nshared-subscription-name:w\nselector:a = 1",
            "unsupported",
        ),
        (
            "destination:/topic/jobs\nshared-subscription-name:w\nactivemq.subscriptionName:d",
            "invalid-request",
        ),
        (
            "destination:/topic/jobs\nshared-subscription-name:a/b",
            "invalid-value",
        ),
        (
            "destination:/topic/ActiveMQ.Advisory.Queue\nshared-subscription-name:w",
            "invalid-destination",
        ),
    ] {
        let mut c = Client::connected(s.addr, None).await;
        c.write(format!("SUBSCRIBE\nid:1\n{headers}\n\n\0").as_bytes())
            .await;
        let refused = c.frame().await.unwrap();
        assert_eq!(refused.command, Command::Error, "{headers}");
        assert_eq!(
            refused.get("error-code"),
            Some(code),
            "{headers}: {refused:?}"
        );
    }
    assert!(s.broker.shared_subscriptions().is_empty());
    drop(c3);
    s.stop().await;
}

/// Embedding: a composite refused by name leaves nothing anywhere.
async fn a_refused_composite_sends_nothing(t: TestStore) {
    let b = broker(&t, policy(0, 400), 2).await;
    let mut keys = DestinationKey::parse_composite("/queue/ok.a,/queue/ok.b").unwrap();
    // A send to an ended temporary queue is refused; the others get nothing.
    let temp = b.temporary_queue().unwrap();
    keys.push(temp.key().clone());
    drop(temp);
    match b.send_to_each(&keys, Message::new("x")).await {
        Err(Error::InvalidDestination { .. }) => {}
        other => panic!("a composite with an ended temporary queue: {other:?}"),
    }
    assert_eq!(rows(&b, "queue://ok.a").await, 0);
    assert_eq!(rows(&b, "queue://ok.b").await, 0);
    b.shutdown().await.unwrap();
}

/// What a helper found breaking the first version (issue 33's review): groups follow
/// the settings now and keep their kind across a restart, a group queue that is empty
/// and not running can still be deleted (ending the group), and a configured
/// composite's forward to a virtual topic reaches its groups, never an advisory topic.
async fn groups_follow_the_settings_keep_their_kind_and_end_when_deleted(t: TestStore) {
    let start = |routing: RoutingConfig| Broker::start(&t.url, config(&t, routing));
    let b = start(RoutingConfig::default()).await.unwrap();
    for queue in [
        group("Plain"),
        group("Empty"),
        "lvq://Consumer.Last.VirtualTopic.Orders".to_string(),
    ] {
        drop(
            b.subscribe(queue.as_str(), SubscribeOptions::non_durable())
                .await
                .unwrap(),
        );
    }
    b.shutdown().await.unwrap();
    // Off: a stored group stays bound to its topic (it reads what the topic stores)
    // until its queue is deleted; a last-value group gets no copy.
    let off = virtual_topics_off();
    let b = start(off).await.unwrap();
    b.send(TOPIC, Message::new("while off").persistent(true))
        .await
        .unwrap();
    assert_eq!(rows(&b, &group("Plain")).await, 1);
    assert_eq!(rows(&b, "lvq://Consumer.Last.VirtualTopic.Orders").await, 0);
    b.shutdown().await.unwrap();
    // On again: the last-value group is still one, the empty group can be deleted
    // although it is neither running nor holding a row.
    let forward_to_topic = RoutingConfig {
        composites: vec![CompositeDestination {
            name: DestinationKey::parse("queue://orders.in").unwrap(),
            forwards: vec![Forward {
                destination: DestinationKey::parse(TOPIC).unwrap(),
                selector: None,
            }],
        }],
        ..Default::default()
    };
    let b = start(forward_to_topic).await.unwrap();
    let empty = DestinationKey::parse(&group("Empty")).unwrap();
    assert!(b.destination_exists(&empty).await.unwrap());
    b.delete_destination(&empty).await.unwrap();
    assert!(!b.destination_exists(&empty).await.unwrap());
    // Through the composite's forward: the topic's groups get it.
    b.send(
        "queue://orders.in",
        Message::new("forwarded").header("_AMQ_LVQ_NAME", "k"),
    )
    .await
    .unwrap();
    assert_eq!(rows(&b, &group("Plain")).await, 2);
    assert_eq!(rows(&b, "lvq://Consumer.Last.VirtualTopic.Orders").await, 1);
    assert_eq!(
        rows(&b, "queue://Consumer.Last.VirtualTopic.Orders").await,
        0
    );
    assert_eq!(rows(&b, &group("Empty")).await, 0);
    b.shutdown().await.unwrap();
    // The deleted group stays deleted after a restart.
    let b = start(RoutingConfig::default()).await.unwrap();
    assert_eq!(
        b.virtual_groups(&DestinationKey::parse(TOPIC).unwrap()),
        [
            DestinationKey::parse("lvq://Consumer.Last.VirtualTopic.Orders").unwrap(),
            DestinationKey::parse(&group("Plain")).unwrap(),
        ]
    );
    // A composite cannot reach an advisory topic through a forward either.
    b.shutdown().await.unwrap();
    let to_advisory = RoutingConfig {
        composites: vec![CompositeDestination {
            name: DestinationKey::parse("queue://spoof").unwrap(),
            forwards: vec![Forward {
                destination: DestinationKey::parse("topic://ActiveMQ.Advisory.Queue").unwrap(),
                selector: None,
            }],
        }],
        ..Default::default()
    };
    let b = start(to_advisory).await.unwrap();
    assert!(matches!(
        b.send("queue://spoof", Message::new("forged")).await,
        Err(Error::InvalidDestination { .. })
    ));
    b.shutdown().await.unwrap();
}

/// STOMP: a composite with a `/temp-queue/` part sends to the connection's own
/// temporary queue; a part with a mistyped kind is refused, not made a name.
async fn stomp_composite_parts_are_localized_and_checked(t: TestStore) {
    let s = server(&t, policy(0, 400)).await;
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\nid:1\ndestination:/temp-queue/mine\nreceipt:s\n\n\0")
        .await;
    assert_eq!(c.frame().await.unwrap().command, Command::Receipt);
    c.write(
        b"SEND\ndestination:/queue/loc.a, /temp-queue/mine\npersistent:true\nreceipt:r\n\nboth\0",
    )
    .await;
    let mut got = [c.frame().await.unwrap(), c.frame().await.unwrap()];
    got.sort_by_key(|f| f.command.as_str().to_string());
    assert_eq!(got[0].command, Command::Message, "{got:?}");
    assert_eq!(&got[0].body[..], b"both");
    assert_eq!(got[1].get("receipt-id"), Some("r"));
    assert_eq!(rows(&s.broker, "queue://loc.a").await, 1);
    c.write(b"SEND\ndestination:/queue/loc.a,/queu/typo\nreceipt:t\n\nx\0")
        .await;
    let refused = c.frame().await.unwrap();
    assert_eq!(refused.command, Command::Error);
    assert_eq!(refused.get("error-code"), Some("invalid-destination"));
    assert_eq!(rows(&s.broker, "queue://loc.a").await, 1);
    s.stop().await;
}

on_every_backend!(
    #[actix_rt::test]
    a_virtual_topic_message_is_one_row_for_every_group,
    a_group_stored_as_copies_is_bound_at_start,
    a_group_expires_the_topic_rows_it_reads,
    a_composite_naming_a_topic_and_its_group_delivers_once,
    every_group_gets_every_message_once_spread_over_its_consumers,
    an_offline_group_keeps_its_messages_across_a_restart,
    a_composite_send_is_all_or_none,
    transacted_send_makes_the_groups_all_or_none,
    a_configured_composite_forwards_by_selector,
    stomp_composite_send_and_its_refusals,
    a_stomp_shared_durable_subscription_splits_and_keeps,
    a_refused_composite_sends_nothing,
    groups_follow_the_settings_keep_their_kind_and_end_when_deleted,
    stomp_composite_parts_are_localized_and_checked,
);
