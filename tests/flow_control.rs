//! Producer flow control and memory usage through the embedding API: a non-durable
//! subscriber that reads nothing fills memory up to the limit, then its producers
//! wait (or fail, as configured) while producers to other destinations go on; the
//! process's heap stays bounded (counted in allocated bytes); a stalled durable
//! subscriber costs store, not memory, and never holds the others back (the
//! HornetQ/Artemis caveat); a full store stops producers with the store-limit error.

use ebb::test_util::*;
use ebb::{AckMode, Error, Message, SubscribeOptions, UsageConfig};
use futures::StreamExt;

/// Counts the bytes allocated and not yet freed by the whole test process.
#[global_allocator]
static ALLOCATOR: heap::CountingAllocator = heap::CountingAllocator;

const MIB: u64 = 1 << 20;

fn limits(memory: u64, fail: bool) -> UsageConfig {
    UsageConfig {
        memory,
        send_fail_if_no_space: fail,
        ..UsageConfig::default()
    }
}

/// Waits until some producer is blocked by flow control.
async fn until_blocked(b: &ebb::Broker) {
    poll_until("a producer blocked by flow control", || async {
        (b.usage().blocked_producers > 0).then_some(())
    })
    .await;
}

/// A topic memory limit of 8 MiB, a non-durable subscriber that reads nothing, 64 KiB
/// messages: the producer blocks once about 8 MiB is held, a producer to another topic
/// goes on, and the heap grows by about the limit, not by what the producer would
/// send. Then the subscriber reads: the blocked send completes.
async fn a_subscriber_that_reads_nothing_blocks_its_producers(t: TestStore) {
    let wide = ebb::Policy {
        memory_limit: 8 * MIB,
        ..ebb::Policy::default()
    };
    let b = broker_with(&t, vec![("topic://wide", wide)], limits(64 * MIB, false)).await;
    let baseline = heap::live_bytes();
    let mut idle = b
        .subscribe("topic://wide", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let producer = {
        let b = b.clone();
        let payload = vec![7u8; 64 * 1024];
        actix_rt::spawn(async move {
            let mut sent = 0u64;
            // Far more than the limit: 64 MiB if nothing held it back.
            for _ in 0..1024 {
                b.send(
                    "topic://wide",
                    Message::new(payload.clone()).persistent(false),
                )
                .await
                .unwrap();
                sent += 1;
            }
            sent
        })
    };
    until_blocked(&b).await;
    let held = b.usage().memory_bytes;
    assert!(
        (8 * MIB..8 * MIB + 65 * 1024).contains(&held),
        "held {held} bytes at the block"
    );
    assert_eq!(
        b.destination_flow("topic://wide")
            .unwrap()
            .blocked_producers,
        1
    );
    // Another destination's producer is not held.
    let mut fast = b
        .subscribe("topic://fast", SubscribeOptions::non_durable())
        .await
        .unwrap();
    for i in 0..100 {
        b.send(
            "topic://fast",
            Message::new(format!("f{i}")).persistent(false),
        )
        .await
        .unwrap();
        assert_eq!(body(&next(&mut fast).await), format!("f{i}"));
    }
    let grown = heap::live_bytes().saturating_sub(baseline) as u64;
    assert!(
        grown < 16 * MIB,
        "the heap grew by {grown} bytes for an 8 MiB limit"
    );
    // Reading frees memory; the producer finishes.
    let mut read = 0u64;
    while read < 1024 {
        let m = next(&mut idle).await;
        assert_eq!(m.body().len(), 64 * 1024);
        read += 1;
    }
    assert_eq!(producer.await.unwrap(), 1024);
    drop(idle);
    b.shutdown().await.unwrap();
}

/// With send_fail_if_no_space the same producer gets the resource error naming the
/// limit, at once, and nothing is sent.
async fn fail_mode_refuses_with_the_limit_named(t: TestStore) {
    let b = broker_with(&t, vec![], limits(MIB, true)).await;
    let _idle = b
        .subscribe("topic://wide", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let body = vec![7u8; 64 * 1024];
    let mut accepted = 0;
    let err = loop {
        match b
            .send("topic://wide", Message::new(body.clone()).persistent(false))
            .await
        {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted < 100, "never refused");
    };
    assert_eq!(accepted, 16, "1 MiB of 64 KiB messages");
    match &err {
        Error::ResourceLimit { usage, limit, .. } => {
            assert_eq!((usage.as_str(), *limit), ("memory", MIB));
        }
        other => panic!("not a resource error: {other}"),
    }
    assert!(
        err.to_string().contains("memory usage limit reached"),
        "{err}"
    );
    b.shutdown().await.unwrap();
}

/// Ten durable subscriptions, one stalled (attached, reading nothing): the other nine
/// receive everything although far more than the memory limit is sent; the stalled
/// one's backlog waits in the store, and memory stays near the limit.
async fn a_stalled_durable_subscriber_costs_store_not_memory(t: TestStore) {
    let b = broker_with(&t, vec![("topic://>", policy(0, 400))], limits(MIB, false)).await;
    let durable = |name: &str| {
        SubscribeOptions::durable("c", name)
            .ack(AckMode::Auto)
            .prefetch(10)
    };
    let _stalled = b
        .subscribe("topic://fan", durable("stalled"))
        .await
        .unwrap();
    const N: usize = 400; // 400 x 8 KiB = 3.2 MiB through a 1 MiB limit
    let mut readers = Vec::new();
    for i in 0..9 {
        let mut sub = b
            .subscribe("topic://fan", durable(&format!("s{i}")))
            .await
            .unwrap();
        readers.push(actix_rt::spawn(async move {
            let mut got = 0;
            while got < N {
                match actix_rt::time::timeout(PATIENCE, sub.next()).await {
                    Ok(Some(_)) => got += 1,
                    _ => break,
                }
            }
            got
        }));
    }
    let mut peak = 0;
    for i in 0..N {
        let mut m = Message::new(vec![0u8; 8 * 1024]);
        m.headers.push(("n".into(), i.to_string()));
        b.send("topic://fan", m).await.unwrap();
        peak = peak.max(b.usage().memory_bytes);
    }
    for reader in readers {
        assert_eq!(
            reader.await.unwrap(),
            N,
            "a reading subscriber got everything"
        );
    }
    let backlog = b
        .browse_subscription("topic://fan", "c", "stalled", 0, 1000)
        .await
        .unwrap();
    assert_eq!(
        backlog.len(),
        N,
        "the stalled subscriber's messages wait in the store"
    );
    assert!(peak <= MIB + 16 * 1024, "memory peaked at {peak} bytes");
    b.shutdown().await.unwrap();
}

/// A store over its limit stops producers of persistent messages with the store-limit
/// error (fail mode), while non-persistent ones still go.
async fn a_full_store_stops_persistent_producers(t: TestStore) {
    let usage = UsageConfig {
        store: 64 * 1024,
        send_fail_if_no_space: true,
        ..UsageConfig::default()
    };
    let b = broker_with(&t, vec![], usage).await;
    let mut stored = 0;
    let err = loop {
        match b.send("queue://full", Message::new(vec![0u8; 4096])).await {
            Ok(_) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 100, "never refused");
    };
    assert!(
        matches!(&err, Error::ResourceLimit { usage, .. } if usage == "store"),
        "{err}"
    );
    assert!(
        (15..=17).contains(&stored),
        "stored {stored} x 4 KiB in 64 KiB"
    );
    assert_eq!(
        b.store().count_messages("queue://full").await.unwrap(),
        stored
    );
    b.send("queue://full", Message::new("light").persistent(false))
        .await
        .unwrap();
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    a_subscriber_that_reads_nothing_blocks_its_producers,
    fail_mode_refuses_with_the_limit_named,
    a_stalled_durable_subscriber_costs_store_not_memory,
    a_full_store_stops_persistent_producers,
);
