//! Many sends in flight at once to one queue (producers pipelining, consumers acking
//! while pausing): every message is delivered exactly once and the queue ends empty.
//! Found by the queue benchmark: store ids once came back out of publish order, and
//! the cursor lost or repeated messages.

use std::collections::HashSet;

use ebb::test_util::*;
use ebb::{AckMode, Message, Policy, SubscribeOptions, UsageConfig};
use futures::StreamExt;

async fn concurrent_sends_are_each_delivered_once(t: TestStore) {
    let policy = Policy {
        expire_messages_period: 0,
        ..Policy::default()
    };
    let b = broker_with(&t, vec![("queue://>", policy)], UsageConfig::default()).await;
    const N: u64 = 3_000;
    futures::stream::iter(0..N)
        .map(|i| {
            let b = b.clone();
            async move {
                b.send("queue://c", Message::new(format!("{i}")))
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(400)
        .collect::<Vec<_>>()
        .await;
    let mut sub = b
        .subscribe(
            "queue://c",
            SubscribeOptions::non_durable()
                .ack(AckMode::Client)
                .prefetch(100),
        )
        .await
        .unwrap();
    let mut seen = HashSet::new();
    let mut dups = 0;
    for _ in 0..N {
        let m = next(&mut sub).await;
        if !seen.insert(body(&m)) {
            dups += 1;
        }
        sub.ack(&m).await.unwrap();
    }
    // Nothing more (no duplicate after the N-th): a marker sent now is next.
    b.send("queue://c", Message::new("marker")).await.unwrap();
    let marker = next(&mut sub).await;
    assert_eq!(
        body(&marker),
        "marker",
        "after {N} messages ({} distinct, {dups} duplicates)",
        seen.len()
    );
    sub.ack(&marker).await.unwrap();
    sub.commit_acks().await.unwrap();
    let rows = b.store().count_messages("queue://c").await.unwrap();
    let stats = b.queue_stats("queue://c").await.unwrap();
    eprintln!(
        "received {} distinct of {N}, {dups} duplicates; {rows} rows left; {stats:?}",
        seen.len()
    );
    assert_eq!((seen.len() as u64, dups, rows), (N, 0, 0));
    b.shutdown().await.unwrap();
}

async fn slow_consumers_while_producers_pipeline(t: TestStore) {
    let policy = Policy {
        expire_messages_period: 0,
        ..Policy::default()
    };
    let b = broker_with(&t, vec![("queue://>", policy)], UsageConfig::default()).await;
    const N: u64 = 20_000;
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    let seen = std::rc::Rc::new(std::cell::RefCell::new((HashSet::new(), 0u64)));
    let mut consumers = Vec::new();
    for _ in 0..4 {
        let mut sub = b
            .subscribe(
                "queue://s",
                SubscribeOptions::non_durable()
                    .ack(AckMode::Client)
                    .prefetch(100),
            )
            .await
            .unwrap();
        let seen = seen.clone();
        let mut done = done_rx.clone();
        consumers.push(actix_rt::spawn(async move {
            let mut n = 0u64;
            loop {
                tokio::select! {
                    m = sub.next() => {
                        let m = m.unwrap();
                        {
                            let mut s = seen.borrow_mut();
                            if !s.0.insert(body(&m)) { s.1 += 1; }
                        }
                        sub.ack(&m).await.unwrap();
                        n += 1;
                        if n.is_multiple_of(20) {
                            actix_rt::time::sleep(std::time::Duration::from_millis(10)).await;
                        }
                    }
                    _ = done.changed() => break,
                }
            }
            // Its acks are committed before the rows are counted.
            sub.commit_acks().await.unwrap();
        }));
    }
    let mut producers = Vec::new();
    for p in 0..4u64 {
        let b = b.clone();
        producers.push(actix_rt::spawn(async move {
            futures::stream::iter(p * N / 4..(p + 1) * N / 4)
                .map(|i| {
                    let b = b.clone();
                    async move {
                        b.send("queue://s", Message::new(format!("{i}")))
                            .await
                            .unwrap()
                    }
                })
                .buffer_unordered(100)
                .collect::<Vec<_>>()
                .await;
        }));
    }
    for p in producers {
        p.await.unwrap();
    }
    poll_until("every message delivered", || async {
        (seen.borrow().0.len() >= N as usize).then_some(())
    })
    .await;
    done_tx.send(true).unwrap();
    for c in consumers {
        c.await.unwrap();
    }
    let rows = b.store().count_messages("queue://s").await.unwrap();
    let stats = b.queue_stats("queue://s").await.unwrap();
    let (distinct, dups) = (seen.borrow().0.len(), seen.borrow().1);
    eprintln!(
        "received {distinct} distinct of {N}, {dups} duplicates; {rows} rows left; {stats:?}"
    );
    assert_eq!((distinct as u64, dups, rows), (N, 0, 0));
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    concurrent_sends_are_each_delivered_once,
    slow_consumers_while_producers_pipeline
);
