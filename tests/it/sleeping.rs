//! Idle queues and topics sleep (`inactive_timeout_before_sleep`): the actor stops and only the
//! key and counters stay. A persistent send to a sleeping queue is written without
//! waking it (and a send to a missing queue makes it asleep); whatever else reaches a
//! sleeping queue wakes it, with nothing lost or reordered — a subscription (plain or
//! wildcard), a browse, a purge, a dead letter, a scheduled release, a send to a topic
//! — also when it races the queue going to sleep or the writes made while it slept;
//! and its messages expire while it sleeps.

use std::time::Duration;

use ebb::test_util::*;
use ebb::{AckMode, Broker, Message, Policy, SubscribeOptions, UsageConfig};
use futures::StreamExt;

/// A queue policy that sleeps after `ms` idle (no expiry timer).
fn sleepy(ms: u64) -> Policy {
    Policy {
        expire_messages_period: 0,
        inactive_timeout_before_sleep: ms,
        ..Policy::default()
    }
}

/// The reading of queue `name` (`queue://name`), or of the destination `name` names
/// when it has a kind (`topic://news`).
async fn reading(b: &Broker, name: &str) -> ebb::stats::DestinationStats {
    let container = if name.contains("://") {
        name.to_string()
    } else {
        format!("queue://{name}")
    };
    b.stats()
        .await
        .unwrap()
        .destinations
        .into_iter()
        .find(|d| d.destination == container)
        .unwrap_or_else(|| panic!("{container} is not in the reading"))
}

/// Waits until queue `name` is asleep, and answers its reading then.
async fn asleep(b: &Broker, name: &str) -> ebb::stats::DestinationStats {
    poll_until(&format!("{name} sleeps"), || async {
        let d = reading(b, name).await;
        d.asleep.then_some(d)
    })
    .await
}

/// A queue with a backlog and no consumer sleeps: the reading keeps it, with its
/// depth and counters, and says it sleeps. A consumer wakes it and gets the backlog
/// in order; the counters carry on from where they were.
async fn an_idle_queue_sleeps_and_wakes_with_its_messages(t: TestStore) {
    let b = broker_with(&t, vec![("queue://>", sleepy(30))], UsageConfig::default()).await;
    for i in 0..10 {
        b.send(
            "queue://idle",
            Message::new(format!("m{i}")).persistent(true),
        )
        .await
        .unwrap();
    }
    let d = asleep(&b, "idle").await;
    assert_eq!((d.queue_size, d.enqueued_total), (10, 10), "{d:?}");
    assert_eq!(
        d.sleeps_total, 0,
        "made asleep by the first send, never awake: {d:?}"
    );
    let summary = b.stats().await.unwrap();
    assert_eq!(summary.totals.asleep, 1, "{:?}", summary.totals);

    let mut sub = b
        .subscribe(
            "queue://idle",
            SubscribeOptions::non_durable().ack(AckMode::Client),
        )
        .await
        .unwrap();
    let got = take(&mut sub, 10).await;
    let bodies: Vec<String> = got.iter().map(body).collect();
    let sent: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies, sent, "woken, it reads its backlog in order");
    for m in &got {
        sub.ack(m).await.unwrap();
    }
    let d = reading(&b, "idle").await;
    assert!(!d.asleep, "a consumer keeps it awake: {d:?}");
    assert_eq!(
        (d.enqueued_total, d.dequeued_total, d.delivered_total),
        (10, 10, 10),
        "the counters carried on across the sleep: {d:?}"
    );
    drop(sub);
    // Alone and empty again, it sleeps again.
    let d = asleep(&b, "idle").await;
    assert_eq!((d.queue_size, d.sleeps_total), (0, 1), "{d:?}");
    b.shutdown().await.unwrap();
}

/// `got` (bodies `P-IIII`) holds each of `producers`' `n` messages once, in the order
/// it sent them.
fn each_producer_once_in_order(got: &[String], producers: usize, n: usize) {
    for p in 0..producers {
        let mine: Vec<&String> = got
            .iter()
            .filter(|m| m.starts_with(&format!("{p}-")))
            .collect();
        let sent: Vec<String> = (0..n).map(|i| format!("{p}-{i:04}")).collect();
        assert_eq!(
            mine,
            sent.iter().collect::<Vec<_>>(),
            "producer {p}: every message once, in order"
        );
    }
}

/// A persistent send to a missing queue makes it asleep, and one to a sleeping queue
/// is written without waking it: no actor runs, the reading counts the messages. A
/// message with an expiration sent to it while it sleeps is expired while it sleeps
/// (its wake comes earlier). A non-persistent message wakes it (it lives in memory),
/// and a send to a missing queue that a wildcard consumer watches starts it, so that
/// the consumer gets the message.
async fn persistent_sends_to_a_sleeping_queue_do_not_wake_it(t: TestStore) {
    let policy = sleepy_expiring(30, 100);
    let b = broker_with(&t, vec![("queue://>", policy)], UsageConfig::default()).await;
    let q = "queue://born";
    for i in 0..3 {
        b.send(q, Message::new(format!("m{i}")).persistent(true))
            .await
            .unwrap();
    }
    let d = reading(&b, "born").await;
    assert!(d.asleep, "made asleep by the send: {d:?}");
    assert_eq!(
        (d.queue_size, d.enqueued_total, d.sleeps_total),
        (3, 3, 0),
        "{d:?}"
    );
    b.send(
        q,
        Message::new("soon")
            .persistent(true)
            .ttl(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let d = reading(&b, "born").await;
    assert!(d.asleep, "{d:?}");
    assert_eq!((d.queue_size, d.enqueued_total), (4, 4), "{d:?}");
    let d = poll_until("the message sent while it slept expires", || async {
        let d = reading(&b, "born").await;
        (d.expired_total == 1 && d.asleep).then_some(d)
    })
    .await;
    assert_eq!(
        (d.queue_size, d.sleeps_total),
        (3, 1),
        "woken once for it: {d:?}"
    );

    b.send(q, Message::new("m3").persistent(false))
        .await
        .unwrap();
    let d = reading(&b, "born").await;
    assert!(!d.asleep, "a non-persistent message wakes it: {d:?}");
    let mut sub = b
        .subscribe(q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 4).await.iter().map(body).collect();
    assert_eq!(got, ["m0", "m1", "m2", "m3"]);
    drop(sub);

    let mut watching = b
        .subscribe("queue://watched.>", SubscribeOptions::non_durable())
        .await
        .unwrap();
    b.send("queue://watched.a", Message::new("w").persistent(true))
        .await
        .unwrap();
    let got: Vec<String> = take(&mut watching, 1).await.iter().map(body).collect();
    assert_eq!(
        got,
        ["w"],
        "the wildcard consumer gets the new queue's message"
    );
    assert!(!reading(&b, "watched.a").await.asleep);
    b.shutdown().await.unwrap();
}

/// After a restart, the first send to a queue whose store holds a message that
/// expires makes it asleep and sets its expiry wake from the store (a queue made
/// asleep has not read its store): the old message expires while it sleeps.
async fn a_queue_made_asleep_after_a_restart_expires_what_it_stored(t: TestStore) {
    let policy = sleepy_expiring(30, 100);
    let b = broker_with(
        &t,
        vec![("queue://>", policy.clone())],
        UsageConfig::default(),
    )
    .await;
    let q = "queue://old";
    b.send(
        q,
        Message::new("soon")
            .persistent(true)
            .ttl(Duration::from_millis(500)),
    )
    .await
    .unwrap();
    b.shutdown().await.unwrap();

    let b = broker_with(&t, vec![("queue://>", policy)], UsageConfig::default()).await;
    b.send(q, Message::new("kept").persistent(true))
        .await
        .unwrap();
    let d = reading(&b, "old").await;
    assert!(d.asleep, "made asleep by the send: {d:?}");
    assert_eq!((d.queue_size, d.expired_total), (2, 0), "{d:?}");
    let d = poll_until("the message stored before the restart expires", || async {
        let d = reading(&b, "old").await;
        (d.expired_total == 1 && d.asleep).then_some(d)
    })
    .await;
    assert_eq!(d.queue_size, 1, "{d:?}");
    let mut sub = b
        .subscribe(q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 1).await.iter().map(body).collect();
    assert_eq!(got, ["kept"]);
    b.shutdown().await.unwrap();
}

/// Four producers send persistent messages in bursts the whole time, while a consumer
/// comes (waking the queue), takes and acks what it gets, and goes (the queue sleeps
/// after 3 ms alone): the sends alternate between the queue's actor and the registry,
/// which writes them while it sleeps, and each wake races those writes (the new actor
/// must read the store only once they committed). Every message arrives once, in each
/// producer's order.
async fn sends_racing_sleep_lose_nothing_and_keep_order(t: TestStore) {
    race_queue_sleeps(&t, "queue://race", "queue://race").await;
}

/// [`sends_racing_sleep_lose_nothing_and_keep_order`] for a virtual topic's consumer
/// group, which reads the topic's rows (stored once): the sends go to the topic, which
/// feeds the group without waking it while it sleeps; a consumer of the group wakes
/// it. Every message reaches the group once, in each producer's order.
async fn a_sleeping_group_is_fed_by_its_topic_and_loses_nothing(t: TestStore) {
    let group = "queue://Consumer.A.VirtualTopic.Race";
    race_queue_sleeps(&t, "topic://VirtualTopic.Race", group).await;
}

/// Sends to `send_to` race queue `q` going to sleep (see
/// [`sends_racing_sleep_lose_nothing_and_keep_order`]).
async fn race_queue_sleeps(t: &TestStore, send_to: &str, q: &str) {
    let policies = vec![("queue://>", sleepy(3)), ("topic://>", sleepy(3))];
    let b = broker_with(t, policies, UsageConfig::default()).await;
    const PRODUCERS: usize = 4;
    const BURST: usize = 4;
    const ROUNDS: usize = 40;
    const N: usize = BURST * ROUNDS;
    drop(
        b.subscribe(q, SubscribeOptions::non_durable())
            .await
            .unwrap(),
    );
    let mut got = Vec::new();
    let mut written_asleep = 0;
    for round in 0..ROUNDS {
        let bursts = (0..PRODUCERS).map(|p| {
            let b = b.clone();
            async move {
                for i in round * BURST..(round + 1) * BURST {
                    let m = Message::new(format!("{p}-{i:04}")).persistent(true);
                    b.send(send_to, m).await.unwrap();
                }
            }
        });
        let sends = futures::future::join_all(bursts);
        // Every other round a consumer visits during the burst, taking a few.
        let visit = async {
            let mut taken = Vec::new();
            if round % 2 == 1 {
                let options = SubscribeOptions::non_durable()
                    .ack(AckMode::Client)
                    .prefetch(1);
                let mut sub = b.subscribe(q, options).await.unwrap();
                while let Some(m) = next_within(&mut sub, 5).await {
                    sub.ack(&m).await.unwrap();
                    taken.push(body(&m));
                }
            }
            taken
        };
        let before = reading(&b, q).await;
        let (_, taken) = futures::join!(sends, visit);
        let after = reading(&b, q).await;
        if before.asleep && after.asleep && after.sleeps_total == before.sleeps_total {
            // Asleep through the whole burst: the registry wrote it.
            written_asleep += 1;
        }
        got.extend(taken);
        // 0–15 ms: some pauses outlast the timeout, some end as it dozes.
        let pause = (round * 7 % 16) as u64;
        actix_rt::time::sleep(Duration::from_millis(pause)).await;
    }
    let d = reading(&b, q).await;
    assert!(
        d.sleeps_total >= 3 && written_asleep >= 3,
        "slept {} times, {written_asleep} bursts written asleep: the race was not run",
        d.sleeps_total
    );
    assert_eq!(d.enqueued_total, (PRODUCERS * N) as u64, "{d:?}");
    let mut sub = b
        .subscribe(q, SubscribeOptions::non_durable().prefetch(50))
        .await
        .unwrap();
    let rest = PRODUCERS * N - got.len();
    got.extend(take(&mut sub, rest).await.iter().map(body));
    assert!(next_within(&mut sub, 100).await.is_none(), "nothing twice");
    each_producer_once_in_order(&got, PRODUCERS, N);
    drop(sub);
    b.shutdown().await.unwrap();
}

/// Four producers send in bursts to a topic with an offline durable subscription, with
/// pauses longer than the topic's timeout, so it goes to sleep and wakes again and
/// again while the sends go on (some reach it as it goes to sleep; a send wakes a
/// topic). Every message arrives once, in each producer's order.
async fn sends_racing_a_topic_sleep_lose_nothing_and_keep_order(t: TestStore) {
    race_sleeps(&t, "topic://race", SubscribeOptions::durable("c1", "r")).await;
}

/// See [`sends_racing_a_topic_sleep_lose_nothing_and_keep_order`]: `consumer`
/// subscribes to `destination` before (and detaches) and after the sends.
async fn race_sleeps(t: &TestStore, destination: &str, consumer: SubscribeOptions) {
    let b = broker_with(t, vec![("topic://>", sleepy(3))], UsageConfig::default()).await;
    drop(b.subscribe(destination, consumer.clone()).await.unwrap());
    const PRODUCERS: usize = 4;
    const BURST: usize = 4;
    const ROUNDS: usize = 40;
    const N: usize = BURST * ROUNDS;
    for round in 0..ROUNDS {
        // Each producer sends a burst, the four at once; then all pause together.
        let bursts = (0..PRODUCERS).map(|p| {
            let b = b.clone();
            async move {
                for i in round * BURST..(round + 1) * BURST {
                    let m = Message::new(format!("{p}-{i:04}")).persistent(true);
                    b.send(destination, m).await.unwrap();
                }
            }
        });
        futures::future::join_all(bursts).await;
        // 0–15 ms: some pauses outlast two ticks, some end as it dozes.
        let pause = (round * 7 % 16) as u64;
        actix_rt::time::sleep(Duration::from_millis(pause)).await;
    }
    let d = reading(&b, destination).await;
    assert!(
        d.sleeps_total >= 3,
        "{destination} slept only {} times: the race was not run",
        d.sleeps_total
    );
    let mut sub = b
        .subscribe(destination, consumer.prefetch(50))
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, PRODUCERS * N)
        .await
        .iter()
        .map(body)
        .collect();
    assert!(next_within(&mut sub, 100).await.is_none(), "nothing twice");
    each_producer_once_in_order(&got, PRODUCERS, N);
    drop(sub);
    b.shutdown().await.unwrap();
}

/// A dead letter for a sleeping dead-letter queue wakes it; a scheduled message due
/// for a sleeping queue wakes it; a wildcard consumer wakes the sleeping queues it
/// matches and consumes from them.
async fn dead_letters_scheduled_messages_and_wildcards_wake_a_queue(t: TestStore) {
    let policy = Policy {
        maximum_redeliveries: 0,
        ..sleepy(30)
    };
    let b = broker_with(&t, vec![("queue://>", policy)], UsageConfig::default()).await;
    b.send("queue://DLQ.work", Message::new("earlier").persistent(true))
        .await
        .unwrap();
    b.send("queue://later", Message::new("first").persistent(true))
        .await
        .unwrap();
    for q in ["DLQ.work", "later"] {
        asleep(&b, q).await;
    }

    // A dead letter.
    b.send("queue://work", Message::new("poison").persistent(true))
        .await
        .unwrap();
    let mut sub = b
        .subscribe(
            "queue://work",
            SubscribeOptions::non_durable().ack(AckMode::Client),
        )
        .await
        .unwrap();
    let m = next(&mut sub).await;
    sub.nack(&m).await.unwrap();
    drop(sub);
    let mut dlq = b
        .subscribe("queue://DLQ.work", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut dlq, 2).await.iter().map(body).collect();
    assert_eq!(got, ["earlier", "poison"]);
    drop(dlq);

    // A scheduled release, due while the queue sleeps.
    b.send(
        "queue://later",
        Message::new("second")
            .persistent(true)
            .delay(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    asleep(&b, "later").await;
    let d = poll_until("the scheduled message is released", || async {
        let d = reading(&b, "later").await;
        // The stored depth counts the commit; the actor counts the message
        // as enqueued when the commit's answer reaches it, a moment later.
        (d.queue_size == 2 && d.enqueued_total == 2).then_some(d)
    })
    .await;
    assert_eq!((d.queue_size, d.enqueued_total), (2, 2), "{d:?}");
    let mut sub = b
        .subscribe("queue://later", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 2).await.iter().map(body).collect();
    assert_eq!(got, ["first", "second"]);
    drop(sub);

    // A wildcard consumer.
    for q in ["w.a", "w.b"] {
        b.send(&*format!("queue://{q}"), Message::new(q).persistent(true))
            .await
            .unwrap();
    }
    for q in ["w.a", "w.b"] {
        asleep(&b, q).await;
    }
    let mut wild = b
        .subscribe("queue://w.>", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let mut got: Vec<String> = take(&mut wild, 2).await.iter().map(body).collect();
    got.sort();
    assert_eq!(got, ["w.a", "w.b"]);
    drop(wild);
    b.shutdown().await.unwrap();
}

/// Browsing, purging and moving the messages of a sleeping queue wake it and see
/// everything it holds; its stats are read without waking it.
async fn browse_purge_and_move_reach_a_sleeping_queue(t: TestStore) {
    let b = broker_with(&t, vec![("queue://>", sleepy(30))], UsageConfig::default()).await;
    for i in 0..5 {
        b.send(
            "queue://kept",
            Message::new(format!("k{i}")).persistent(true),
        )
        .await
        .unwrap();
    }
    let before = asleep(&b, "kept").await;
    let view = b.destination_view("queue://kept").await.unwrap().unwrap();
    assert_eq!(view.stats.queue_size, 5);
    assert!(view.stats.asleep, "reading its stats does not wake it");
    assert_eq!(reading(&b, "kept").await.sleeps_total, before.sleeps_total);

    let browsed: Vec<String> = b
        .browse_queue("queue://kept")
        .await
        .unwrap()
        .map(|m| body(&m.unwrap()))
        .collect()
        .await;
    assert_eq!(browsed, ["k0", "k1", "k2", "k3", "k4"]);
    asleep(&b, "kept").await;
    let moved = b
        .move_messages(
            "queue://kept",
            Some(ebb::DestinationKey::queue("moved").unwrap()),
            ebb::admin::Selection::All { after: 0 },
            2,
        )
        .await
        .unwrap();
    assert_eq!(moved.taken, 2, "{moved:?}");
    asleep(&b, "kept").await;
    let purged = b.purge_queue("queue://kept").await.unwrap();
    assert_eq!(purged.taken, 3, "{purged:?}");
    let d = asleep(&b, "kept").await;
    assert_eq!(d.queue_size, 0, "{d:?}");
    assert_eq!(reading(&b, "moved").await.queue_size, 2);
    b.shutdown().await.unwrap();
}

/// A queue policy that sleeps after `ms` idle and looks for expired messages every
/// `period` ms.
fn sleepy_expiring(ms: u64, period: u64) -> Policy {
    Policy {
        expire_messages_period: period,
        ..sleepy(ms)
    }
}

/// A queue holding messages that expire sleeps too; the registry wakes it when the
/// earliest expires, it expires it and goes back to sleep at once; a message that
/// expires much later does not wake it again meanwhile.
async fn a_sleeping_queue_expires_its_messages_and_sleeps_again(t: TestStore) {
    let policy = sleepy_expiring(30, 100);
    let b = broker_with(&t, vec![("queue://>", policy)], UsageConfig::default()).await;
    let q = "queue://ttl";
    b.send(q, Message::new("kept").persistent(true))
        .await
        .unwrap();
    b.send(
        q,
        Message::new("soon")
            .persistent(true)
            .ttl(Duration::from_millis(600)),
    )
    .await
    .unwrap();
    b.send(
        q,
        Message::new("later")
            .persistent(true)
            .ttl(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let d = asleep(&b, "ttl").await;
    assert_eq!((d.queue_size, d.expired_total), (3, 0), "{d:?}");
    let slept = d.sleeps_total;

    let d = poll_until("the sleeping queue's message expires", || async {
        let d = reading(&b, "ttl").await;
        (d.expired_total == 1 && d.asleep).then_some(d)
    })
    .await;
    assert_eq!(d.queue_size, 2, "{d:?}");
    assert_eq!(d.sleeps_total, slept + 1, "woken once, asleep again: {d:?}");

    // Six periods on, "later" (an hour away) has not woken it.
    actix_rt::time::sleep(Duration::from_millis(600)).await;
    let d = reading(&b, "ttl").await;
    assert!(d.asleep, "{d:?}");
    assert_eq!(d.sleeps_total, slept + 1, "woken again for nothing: {d:?}");

    let mut sub = b
        .subscribe(q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 2).await.iter().map(body).collect();
    assert_eq!(got, ["kept", "later"]);
    b.shutdown().await.unwrap();
}

/// More sleeping queues with messages expiring at once than the registry wakes in one
/// page ([`ebb_actors::broker::EXPIRY_WAKE_PAGE`]): every one expires its message,
/// keeps the other, and sleeps again.
async fn many_sleeping_queues_expire_page_by_page(t: TestStore) {
    const QUEUES: usize = ebb_actors::broker::EXPIRY_WAKE_PAGE + 36;
    let policy = sleepy_expiring(30, 100);
    let b = broker_with(&t, vec![("queue://>", policy)], UsageConfig::default()).await;
    let name = |i: usize| format!("many.{i:03}");
    for i in 0..QUEUES {
        let q = format!("queue://{}", name(i));
        b.send(&*q, Message::new("kept").persistent(true))
            .await
            .unwrap();
        b.send(
            &*q,
            Message::new("gone")
                .persistent(true)
                .ttl(Duration::from_millis(800)),
        )
        .await
        .unwrap();
    }
    poll_until(
        "every queue expires its message and sleeps again",
        || async {
            let stats = b.stats().await.unwrap();
            let done = stats
                .destinations
                .iter()
                .filter(|d| d.destination.starts_with("queue://many."))
                .filter(|d| d.asleep && d.expired_total == 1 && d.queue_size == 1)
                .count();
            (done == QUEUES).then_some(())
        },
    )
    .await;
    for i in [0, QUEUES / 2, QUEUES - 1] {
        let q = format!("queue://{}", name(i));
        let mut sub = b
            .subscribe(&*q, SubscribeOptions::non_durable())
            .await
            .unwrap();
        assert_eq!(body(&next(&mut sub).await), "kept");
        assert!(next_within(&mut sub, 50).await.is_none(), "{q}");
    }
    b.shutdown().await.unwrap();
}

/// A topic whose durable subscriptions are all offline sleeps with their backlogs in
/// the store (its rows every subscription acked are cleaned up first); a send wakes it
/// and is kept for both; each subscription gets its backlog in order when it comes
/// back; a message that expires while it sleeps is expired for them; listing its
/// subscriptions does not wake it, removing one reaches it.
async fn a_topic_with_offline_durable_subscriptions_sleeps(t: TestStore) {
    let policy = sleepy_expiring(30, 100);
    let b = broker_with(&t, vec![("topic://>", policy)], UsageConfig::default()).await;
    let topic = "topic://news";
    for name in ["a", "b", "c"] {
        let sub = b
            .subscribe(
                topic,
                SubscribeOptions::durable("c1", name).ack(AckMode::Client),
            )
            .await
            .unwrap();
        drop(sub);
    }
    for i in 0..3 {
        b.send(topic, Message::new(format!("m{i}")).persistent(true))
            .await
            .unwrap();
    }
    let d = asleep(&b, topic).await;
    assert_eq!(d.enqueued_total, 3, "{d:?}");
    let slept = d.sleeps_total;

    // Listing its subscriptions reads the store, not the sleeping actor.
    let listed = b.list_durables(topic, None, 10).await.unwrap();
    assert_eq!(listed.subscriptions.len(), 3);
    assert!(listed.subscriptions.iter().all(|s| !s.online));
    assert!(reading(&b, topic).await.asleep, "listing woke it");

    // "a" comes back: its backlog, in order; acked, it goes again.
    let mut a = b
        .subscribe(
            topic,
            SubscribeOptions::durable("c1", "a").ack(AckMode::Client),
        )
        .await
        .unwrap();
    let got = take(&mut a, 3).await;
    assert_eq!(got.iter().map(body).collect::<Vec<_>>(), ["m0", "m1", "m2"]);
    for m in &got {
        a.ack(m).await.unwrap();
    }
    drop(a);
    let d = asleep(&b, topic).await;
    assert!(d.sleeps_total > slept, "{d:?}");

    // Sent while it sleeps: kept for "b"; one that expires meanwhile is expired.
    b.send(topic, Message::new("m3").persistent(true))
        .await
        .unwrap();
    b.send(
        topic,
        Message::new("brief")
            .persistent(true)
            .ttl(Duration::from_millis(500)),
    )
    .await
    .unwrap();
    poll_until("the sleeping topic's message expires", || async {
        let d = reading(&b, topic).await;
        (d.asleep && d.expired_total >= 1).then_some(d)
    })
    .await;

    // "c" is removed while the topic sleeps.
    assert!(b.remove_durable(topic, "c1", "c").await.unwrap());
    let listed = b.list_durables(topic, None, 10).await.unwrap();
    let names: Vec<&str> = listed.subscriptions.iter().map(|s| &*s.name).collect();
    assert_eq!(names, ["a", "b"]);

    let mut sub = b
        .subscribe(topic, SubscribeOptions::durable("c1", "b"))
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 4).await.iter().map(body).collect();
    assert_eq!(got, ["m0", "m1", "m2", "m3"]);
    assert!(
        next_within(&mut sub, 100).await.is_none(),
        "the expired one came"
    );
    drop(sub);
    let mut a = b
        .subscribe(topic, SubscribeOptions::durable("c1", "a"))
        .await
        .unwrap();
    assert_eq!(body(&next(&mut a).await), "m3");
    assert!(next_within(&mut a, 100).await.is_none());
    b.shutdown().await.unwrap();
}

/// A consumer that leaves in the middle of a backlog leaves the queue's cache of it
/// (stored rows) behind: the queue sleeps all the same, and the next consumer gets the
/// rest in order, once each.
async fn a_queue_whose_consumer_left_mid_backlog_sleeps(t: TestStore) {
    let b = broker_with(&t, vec![("queue://>", sleepy(30))], UsageConfig::default()).await;
    let q = "queue://half";
    for i in 0..10 {
        b.send(q, Message::new(format!("m{i}")).persistent(true))
            .await
            .unwrap();
    }
    let mut sub = b
        .subscribe(
            q,
            SubscribeOptions::non_durable()
                .ack(AckMode::Client)
                .prefetch(1),
        )
        .await
        .unwrap();
    let first = next(&mut sub).await;
    assert_eq!(body(&first), "m0");
    sub.ack(&first).await.unwrap();
    drop(sub);
    let d = asleep(&b, "half").await;
    assert_eq!(d.queue_size, 9, "{d:?}");
    let mut sub = b
        .subscribe(q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 9).await.iter().map(body).collect();
    let rest: Vec<String> = (1..10).map(|i| format!("m{i}")).collect();
    assert_eq!(got, rest);
    assert!(next_within(&mut sub, 100).await.is_none(), "nothing twice");
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    an_idle_queue_sleeps_and_wakes_with_its_messages,
    persistent_sends_to_a_sleeping_queue_do_not_wake_it,
    a_queue_made_asleep_after_a_restart_expires_what_it_stored,
    sends_racing_sleep_lose_nothing_and_keep_order,
    a_sleeping_group_is_fed_by_its_topic_and_loses_nothing,
    sends_racing_a_topic_sleep_lose_nothing_and_keep_order,
    dead_letters_scheduled_messages_and_wildcards_wake_a_queue,
    browse_purge_and_move_reach_a_sleeping_queue,
    a_sleeping_queue_expires_its_messages_and_sleeps_again,
    many_sleeping_queues_expire_page_by_page,
    a_topic_with_offline_durable_subscriptions_sleeps,
    a_queue_whose_consumer_left_mid_backlog_sleeps,
);
