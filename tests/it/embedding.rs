//! The embedding API as a service author meets it (issue 16's faults, each a test):
//! shutdown ends every stream and later calls fail with `Error::ShuttingDown`;
//! messages only prefetched are not counted as failed deliveries; fast acks stay
//! safe (committed by `commit_acks` and by shutdown); one destination syntax.

use std::sync::atomic::{AtomicUsize, Ordering};

use ebb::test_util::*;
use ebb::{AckMode, Broker, BrokerConfig, Error, Message, SubscribeOptions, Subscription};

async fn start(t: &TestStore) -> Broker {
    let config = BrokerConfig {
        store: t.options.clone(),
        ..BrokerConfig::default()
    };
    Broker::start(&t.url, config).await.expect("broker starts")
}

/// What a stream yields until it ends, or `Err` with what it yielded if it has not
/// ended within [`PATIENCE`] (the fault: `next()` hung forever after shutdown).
/// `yielded` counts the streams that have yielded their first message.
async fn until_end(
    sub: &mut Subscription,
    yielded: &AtomicUsize,
) -> Result<Vec<String>, Vec<String>> {
    let mut got = Vec::new();
    loop {
        match tokio::time::timeout(PATIENCE, futures::StreamExt::next(sub)).await {
            Ok(Some(m)) => {
                got.push(body(&m));
                if got.len() == 1 {
                    yielded.fetch_add(1, Ordering::SeqCst);
                }
            }
            Ok(None) => return Ok(got),
            Err(_) => return Err(got),
        }
    }
}

/// Shutdown with `next()`s pending on a queue, a durable and a non-durable topic
/// subscription and a wildcard one: each stream gives what it already held, then
/// `None`; later calls are `Error::ShuttingDown`; counters stay readable.
async fn shutdown_ends_every_stream(t: TestStore) {
    let b = start(&t).await;
    let client = SubscribeOptions::non_durable().ack(AckMode::Client);
    let mut queue = b.subscribe("queue://jobs", client.clone()).await.unwrap();
    let durable = SubscribeOptions::durable("c", "d").ack(AckMode::Client);
    let mut durable = b.subscribe("topic://events", durable).await.unwrap();
    let mut plain = b.subscribe("topic://events", client.clone()).await.unwrap();
    let mut wildcard = b.subscribe("queue://work.*", client).await.unwrap();
    b.send("queue://jobs", Message::new("j1")).await.unwrap();
    b.send("topic://events", Message::new("e1")).await.unwrap();
    b.send("queue://work.a", Message::new("w1")).await.unwrap();
    // Handed to each stream before shutdown (taken from the queue's only when the
    // broker has handed it over: wait for the stats to say so).
    wait_for_queue(&b, "jobs", |s| s.in_flight == 1).await;
    wait_for_queue(&b, "work.a", |s| s.in_flight == 1).await;
    wait_for(&b, "events", |s| s.dispatched == 2).await;

    // A task waits on each stream while the broker shuts down: once each has yielded
    // what it held, its next `next()` is pending (all run on this task, so a stream
    // that has yielded has polled its next `next()` before the shutdown starts).
    let yielded = AtomicUsize::new(0);
    let waiting: Vec<_> = [&mut queue, &mut durable, &mut plain, &mut wildcard]
        .into_iter()
        .map(|sub| Box::pin(until_end(sub, &yielded)))
        .collect();
    let (ended, ()) = tokio::join!(futures::future::join_all(waiting), async {
        poll_until("each stream yields what it held", || async {
            (yielded.load(Ordering::SeqCst) == 4).then_some(())
        })
        .await;
        b.shutdown().await.unwrap();
    });
    let ended: Vec<_> = ended
        .into_iter()
        .map(|e| e.expect("the stream ended"))
        .collect();
    assert_eq!(ended, vec![vec!["j1"], vec!["e1"], vec!["e1"], vec!["w1"]]);

    let late = b
        .subscribe("queue://jobs", SubscribeOptions::non_durable())
        .await;
    assert!(matches!(late, Err(Error::ShuttingDown)), "{:?}", late.err());
    let late = b
        .subscribe("queue://x.*", SubscribeOptions::non_durable())
        .await;
    assert!(matches!(late, Err(Error::ShuttingDown)), "{:?}", late.err());
    let sent = b.send("queue://jobs", Message::new("late")).await;
    assert!(matches!(sent, Err(Error::ShuttingDown)), "{:?}", sent.err());
    let browsed = b.browse("queue://jobs", 0, 10).await;
    assert!(
        matches!(browsed, Err(Error::ShuttingDown)),
        "{:?}",
        browsed.err()
    );
    // Counters stay readable: the queue still holds its one message, un-acked.
    assert_eq!(b.queue_stats("queue://jobs").await.unwrap().enqueued, 1);
    // Calling it again is harmless.
    b.shutdown().await.unwrap();

    // Nothing was acked: every message is there after a restart.
    let b = start(&t).await;
    let mut queue = b
        .subscribe("queue://jobs", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let m = next(&mut queue).await;
    assert_eq!(body(&m), "j1");
    drop(queue);
    b.shutdown().await.unwrap();
}

/// An ack after shutdown is `Error::ShuttingDown`, not a puzzle
/// (`unknown subscription`).
async fn acks_after_shutdown_say_so(t: TestStore) {
    let b = start(&t).await;
    let options = SubscribeOptions::non_durable().ack(AckMode::Client);
    let mut sub = b.subscribe("queue://acks", options).await.unwrap();
    b.send("queue://acks", Message::new("a")).await.unwrap();
    let m = next(&mut sub).await;
    b.shutdown().await.unwrap();
    let acked = sub.acker().ack(&m).await;
    assert!(
        matches!(acked, Err(Error::ShuttingDown)),
        "{:?}",
        acked.err()
    );
    let nacked = sub.nack(&m).await;
    assert!(
        matches!(nacked, Err(Error::ShuttingDown)),
        "{:?}",
        nacked.err()
    );
    // The stream ends: nothing more comes.
    let end = tokio::time::timeout(PATIENCE, futures::StreamExt::next(&mut sub)).await;
    assert!(matches!(end, Ok(None)), "the stream ended after shutdown");
}

/// Case: ten rounds of "subscribe to a queue with the default prefetch, take and ack
/// one message, drop the subscription". Messages only prefetched went back as failed
/// deliveries and, after `maximum_redeliveries`, to `DLQ.<queue>` unseen. Only what
/// the stream yielded counts (ActiveMQ's `lastDeliveredSequenceId`): all ten reach
/// the application, none is marked redelivered, none is dead. A message yielded and
/// not acked still counts, and comes back marked redelivered. The same through a
/// wildcard subscription, and in the default auto-ack mode.
async fn only_messages_handed_over_count_as_delivered(t: TestStore) {
    let b = start(&t).await;
    for (queue, subscribed, ack) in [
        ("queue://rounds", "queue://rounds", AckMode::Client),
        ("queue://auto", "queue://auto", AckMode::Auto),
        ("queue://wild.a", "queue://wild.*", AckMode::Client),
    ] {
        for i in 0..10 {
            b.send(queue, Message::new(format!("m{i}"))).await.unwrap();
        }
        let mut got = Vec::new();
        for _ in 0..10 {
            let options = SubscribeOptions::non_durable().ack(ack);
            let mut sub = b.subscribe(subscribed, options).await.unwrap();
            let m = next(&mut sub).await;
            assert!(
                !m.redelivered(),
                "{queue}: {} was never seen before",
                body(&m)
            );
            got.push(body(&m));
            if ack == AckMode::Client {
                sub.ack(&m).await.unwrap();
            }
            // Dropped with the rest of the queue in its prefetch.
        }
        let expected: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
        assert_eq!(got, expected, "{queue}");
        let name = queue.trim_start_matches("queue://");
        let stats = wait_for_queue(&b, name, |s| s.in_flight == 0 && s.dequeued == 10).await;
        assert_eq!(stats.dead_lettered, 0, "{queue}: {stats:?}");
        assert_eq!(stats.redelivered, 0, "{queue}: {stats:?}");
        let dead = b
            .browse(format!("queue://DLQ.{name}").as_str(), 0, 100)
            .await;
        assert_eq!(dead.unwrap().len(), 0, "{queue}: nothing is dead");
    }

    // Yielded and not acked: that one counts, the one behind it does not.
    b.send("queue://seen", Message::new("s1")).await.unwrap();
    b.send("queue://seen", Message::new("s2")).await.unwrap();
    let client = SubscribeOptions::non_durable().ack(AckMode::Client);
    let mut sub = b.subscribe("queue://seen", client.clone()).await.unwrap();
    assert_eq!(body(&next(&mut sub).await), "s1");
    drop(sub);
    let mut sub = b.subscribe("queue://seen", client).await.unwrap();
    let first = next(&mut sub).await;
    let second = next(&mut sub).await;
    assert_eq!((body(&first), first.redelivered()), ("s1".into(), true));
    assert_eq!((body(&second), second.redelivered()), ("s2".into(), false));
    drop(sub);
    b.shutdown().await.unwrap();
}

/// A durable topic subscription marks redelivered only what its consumer was handed
/// before: the messages it only prefetched come back unmarked.
async fn a_durable_subscription_marks_only_what_was_handed_over(t: TestStore) {
    let b = start(&t).await;
    let options = SubscribeOptions::durable("c", "marks").ack(AckMode::Client);
    drop(b.subscribe("topic://marks", options.clone()).await.unwrap());
    for i in 0..5 {
        b.send("topic://marks", Message::new(format!("t{i}")))
            .await
            .unwrap();
    }
    let mut sub = b.subscribe("topic://marks", options.clone()).await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!(body(&m), "t0");
    wait_for(&b, "marks", |s| s.dispatched >= 5).await;
    drop(sub);
    let mut sub = b.subscribe("topic://marks", options).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..5 {
        let m = next(&mut sub).await;
        got.push((body(&m), m.redelivered()));
    }
    let expected: Vec<(String, bool)> = (0..5).map(|i| (format!("t{i}"), i == 0)).collect();
    assert_eq!(got, expected);
    drop(sub);
    b.shutdown().await.unwrap();
}

on_every_backend!(
    shutdown_ends_every_stream,
    acks_after_shutdown_say_so,
    only_messages_handed_over_count_as_delivered,
    a_durable_subscription_marks_only_what_was_handed_over,
    fast_acks_are_committed_by_commit_acks_and_by_shutdown,
    a_broker_dropped_without_shutdown_releases_its_store,
    a_broker_whose_system_ends_keeps_nothing_alive,
    acking_a_refused_or_acked_delivery_is_an_error,
    misuses_get_a_clear_answer,
);

/// Fast acks stay safe. The obvious loop (`next`, then `ack(..).await`) returns before
/// each commit; `commit_acks` waits for them (nothing is left stored); an ack followed
/// at once by a drop still comes first (the next consumer gets only what was not
/// acked); a graceful shutdown commits the acks not waited for (nothing comes back
/// after a restart). On a queue and on a durable subscription.
async fn fast_acks_are_committed_by_commit_acks_and_by_shutdown(t: TestStore) {
    let b = start(&t).await;
    let durable = SubscribeOptions::durable("c", "fast").ack(AckMode::Client);
    drop(b.subscribe("topic://fast", durable.clone()).await.unwrap());
    for (destination, options) in [
        (
            "queue://fast",
            SubscribeOptions::non_durable().ack(AckMode::Client),
        ),
        ("topic://fast", durable.clone()),
    ] {
        for i in 0..300 {
            b.send(destination, Message::new(format!("f{i}")))
                .await
                .unwrap();
        }
        let container = destination.to_string();
        let mut sub = b.subscribe(destination, options.clone()).await.unwrap();
        for i in 0..200 {
            let m = next(&mut sub).await;
            assert_eq!(body(&m), format!("f{i}"), "{destination}");
            sub.ack(&m).await.unwrap();
        }
        sub.commit_acks().await.unwrap();
        let stored = b.store().count_messages(&container).await.unwrap();
        let pending = match destination {
            "queue://fast" => stored,
            _ => b
                .browse_subscription(destination, "c", "fast", 0, 1000)
                .await
                .unwrap()
                .len() as u64,
        };
        assert_eq!(pending, 100, "{destination}: 200 acks committed");
        // Acked, then dropped at once: the acks are handled before the detach.
        for i in 200..250 {
            let m = next(&mut sub).await;
            assert_eq!(body(&m), format!("f{i}"));
            sub.ack(&m).await.unwrap();
        }
        drop(sub);
        let mut sub = b.subscribe(destination, options.clone()).await.unwrap();
        let m = next(&mut sub).await;
        assert_eq!(body(&m), "f250", "{destination}: nothing acked comes back");
        sub.ack(&m).await.unwrap();
        for i in 251..300 {
            let m = next(&mut sub).await;
            assert_eq!(body(&m), format!("f{i}"));
            sub.ack(&m).await.unwrap();
        }
        // Not waited for: the shutdown below commits them.
        std::mem::forget(sub);
    }
    b.shutdown().await.unwrap();

    let b = start(&t).await;
    let mut queue = b
        .subscribe("queue://fast", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let mut topic = b.subscribe("topic://fast", durable).await.unwrap();
    // A marker behind whatever was left: it comes first only if nothing was.
    b.send("queue://fast", Message::new("marker"))
        .await
        .unwrap();
    b.send("topic://fast", Message::new("marker"))
        .await
        .unwrap();
    assert_eq!(
        body(&next(&mut queue).await),
        "marker",
        "the queue is empty"
    );
    assert_eq!(body(&next(&mut topic).await), "marker", "all acked");
    b.shutdown().await.unwrap();
}

/// A broker on an actix system that ends without `shutdown` (its last handle dropped
/// first) keeps nothing alive: no reference to its store stays, so its pool and its
/// connections go with the system. The advisories' event sink held a strong handle
/// back to them: the whole broker leaked, with a PostgreSQL connection per broker,
/// until a run of the suite found the server's connections all taken.
async fn a_broker_whose_system_ends_keeps_nothing_alive(t: TestStore) {
    let (url, options) = (t.url.clone(), t.options.clone());
    let store = std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let config = BrokerConfig {
                store: options,
                ..BrokerConfig::default()
            };
            let b = Broker::start(&url, config).await.unwrap();
            b.send("queue://kept", Message::new("k")).await.unwrap();
            let mut sub = b
                .subscribe("queue://kept", SubscribeOptions::non_durable())
                .await
                .unwrap();
            assert_eq!(body(&next(&mut sub).await), "k");
            let store = std::sync::Arc::downgrade(b.store());
            drop(sub);
            drop(b);
            store
        })
    })
    .join()
    .unwrap();
    assert_eq!(
        store.strong_count(),
        0,
        "the store outlived its broker's system"
    );
}

/// A broker dropped without `shutdown` (its last handle gone, reads in flight) closes
/// its store on its own thread: the store's lock is free for the next broker at once.
async fn a_broker_dropped_without_shutdown_releases_its_store(t: TestStore) {
    let b = start(&t).await;
    for i in 0..100 {
        b.send("queue://dropped", Message::new(format!("d{i}")))
            .await
            .unwrap();
    }
    let sub = b
        .subscribe(
            "queue://dropped",
            SubscribeOptions::non_durable().prefetch(1),
        )
        .await
        .unwrap();
    drop(sub);
    drop(b);
    let b = start(&t).await;
    let mut sub = b
        .subscribe(
            "queue://dropped",
            SubscribeOptions::non_durable().ack(AckMode::Client),
        )
        .await
        .unwrap();
    assert_eq!(body(&next(&mut sub).await), "d0");
    drop(sub);
    b.shutdown().await.unwrap();
}

/// Case: acking a delivery that was refused (NACK) or acked already returned `Ok`.
/// It is an error now: at once from `Acker::ack`, and from `Subscription::commit_acks`
/// (or the next `ack`) for the windowed `Subscription::ack`; the refused message is
/// still delivered again. On a queue, a durable topic subscription and a wildcard one.
async fn acking_a_refused_or_acked_delivery_is_an_error(t: TestStore) {
    let b = start(&t).await;
    let durable = SubscribeOptions::durable("c", "twice").ack(AckMode::Client);
    drop(b.subscribe("topic://twice", durable.clone()).await.unwrap());
    let client = SubscribeOptions::non_durable().ack(AckMode::Client);
    for (destination, subscribed, options) in [
        ("queue://twice", "queue://twice", client.clone()),
        ("topic://twice", "topic://twice", durable),
        ("queue://twice.w", "queue://twice.*", client),
    ] {
        b.send(destination, Message::new("a")).await.unwrap();
        b.send(destination, Message::new("b")).await.unwrap();
        let mut sub = b.subscribe(subscribed, options).await.unwrap();
        let a = next(&mut sub).await;
        sub.nack(&a).await.unwrap();
        let acked = sub.acker().ack(&a).await;
        assert!(
            matches!(&acked, Err(Error::Actor(_)) if acked.as_ref().unwrap_err().to_string().contains("not waiting for an ack")),
            "{destination}: {acked:?}"
        );
        let b_msg = next(&mut sub).await;
        assert_eq!(body(&b_msg), "b");
        sub.ack(&b_msg).await.unwrap();
        sub.ack(&b_msg).await.unwrap(); // windowed: the refusal comes next
        let committed = sub.commit_acks().await;
        assert!(
            committed.is_err(),
            "{destination}: the second ack of b is refused"
        );
        assert!(sub.commit_acks().await.is_ok(), "reported once");
        drop(sub);
    }
    // The queue's refused message is delivered again; b was acked once and is gone.
    let mut sub = b
        .subscribe(
            "queue://twice",
            SubscribeOptions::non_durable().ack(AckMode::Client),
        )
        .await
        .unwrap();
    let again = next(&mut sub).await;
    assert_eq!((body(&again), again.redelivered()), ("a".into(), true));
    sub.ack(&again).await.unwrap();
    // Nothing else is left: a marker sent now is next.
    b.send("queue://twice", Message::new("marker"))
        .await
        .unwrap();
    assert_eq!(body(&next(&mut sub).await), "marker");
    drop(sub);
    b.shutdown().await.unwrap();
}

/// Cases from a trial as a new user: a message acked on another subscription acked
/// that subscription's own message instead; in the default auto-ack mode an explicit
/// ack failed partway through a loop; `queue_stats("/queue/x")` read another queue;
/// a NACK of a refused message said `Ok`; a prefetch of 0 was taken silently.
async fn misuses_get_a_clear_answer(t: TestStore) {
    let b = start(&t).await;
    b.send("queue://mis", Message::new("x")).await.unwrap();
    b.send("queue://mis", Message::new("y")).await.unwrap();
    let client = SubscribeOptions::non_durable()
        .ack(AckMode::Client)
        .prefetch(1);
    let mut a = b.subscribe("queue://mis", client.clone()).await.unwrap();
    let mut c = b.subscribe("queue://mis", client.clone()).await.unwrap();
    let x = next(&mut a).await;
    let y = next(&mut c).await;
    for refused in [
        c.acker().ack(&x).await,
        c.acker().ack_up_to(&x).await,
        c.ack(&x).await,
        c.nack(&x).await,
    ] {
        assert!(
            matches!(refused, Err(Error::NotThisSubscription)),
            "{refused:?}"
        );
    }
    // Nothing of c's was acked by those: y is still c's, x still a's.
    let stats = b.queue_stats("mis").await.unwrap();
    assert_eq!((stats.in_flight, stats.dequeued), (2, 0));
    c.nack(&y).await.unwrap();
    let again = c.nack(&y).await;
    assert!(
        again
            .as_ref()
            .is_err_and(|e| e.to_string().contains("not waiting for an ack")),
        "{again:?}"
    );
    a.ack(&x).await.unwrap();
    a.commit_acks().await.unwrap();
    drop((a, c));

    // Auto mode: the stream acks; an explicit ack is a no-op, a NACK an error.
    for i in 0..300 {
        b.send("queue://auto2", Message::new(format!("a{i}")))
            .await
            .unwrap();
    }
    let mut auto = b
        .subscribe("queue://auto2", SubscribeOptions::non_durable())
        .await
        .unwrap();
    for _ in 0..300 {
        let m = next(&mut auto).await;
        auto.ack(&m).await.unwrap();
    }
    auto.commit_acks().await.unwrap();
    let m = Message::new("last");
    b.send("queue://auto2", m).await.unwrap();
    let last = next(&mut auto).await;
    assert!(auto.nack(&last).await.is_err(), "a NACK in auto mode");
    drop(auto);
    wait_for_queue(&b, "auto2", |s| s.dequeued == 301).await;

    // Every form of a queue's name reads that queue.
    for name in ["mis", "queue://mis", "/queue/mis"] {
        assert_eq!(b.queue_stats(name).await.unwrap().enqueued, 2, "{name}");
    }
    assert!(b.queue_stats("topic://mis").await.is_err());
    let zero = b
        .subscribe("queue://mis", SubscribeOptions::non_durable().prefetch(0))
        .await;
    assert!(
        matches!(zero, Err(Error::InvalidPrefetch)),
        "{:?}",
        zero.err()
    );
    b.shutdown().await.unwrap();
}
