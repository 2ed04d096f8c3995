//! A backlog lives in the store, not in memory: persistent messages waiting on a
//! queue (or a durable subscription) without consumers are cached only below the
//! memory high-water mark (`cursor_memory_high_water_mark`, 70 % by default, as
//! ActiveMQ's store cursor), so a consumer-less backlog ten times the memory limit never
//! makes a producer wait, of its own destination or another, and every message of it
//! is delivered later, in order (hardening issue, point 0: 70 × 1 MiB persistent
//! SENDs to one queue filled the 64 MiB limit and then held every producer of the
//! broker). Each check counts bytes and producers, never time.

use ebb::test_util::*;
use ebb::{Broker, Message, Policy, Space, SubscribeOptions, UsageConfig};

const KIB: usize = 1 << 10;
const LIMIT: u64 = 4 << 20;

async fn limited(t: &TestStore) -> Broker {
    let quiet = Policy {
        expire_messages_period: 0,
        ..Policy::default()
    };
    let usage = UsageConfig {
        memory: LIMIT,
        ..UsageConfig::default()
    };
    broker_with(
        t,
        vec![("queue://>", quiet.clone()), ("topic://>", quiet)],
        usage,
    )
    .await
}

/// Sends `message` to `destination` and panics if it is refused or still waits after
/// [`PATIENCE`] (a producer held by flow control: the fault this file is about; the
/// assertions of [`assert_room`] catch it sooner, as a count).
async fn send(b: &Broker, destination: &str, message: Message) {
    match tokio::time::timeout(PATIENCE, b.send(destination, message)).await {
        Ok(sent) => drop(sent.unwrap()),
        Err(_) => panic!(
            "a send to {destination} waited {PATIENCE:?}: {:?}",
            b.usage()
        ),
    }
}

/// The broker has room for one more persistent and one more non-persistent message
/// to `other`, no producer waits, and memory holds at most the high-water mark plus
/// one message in flight.
fn assert_room(b: &Broker, other: &str, largest: usize, after: &str) {
    let usage = b.usage();
    assert_eq!(usage.blocked_producers, 0, "after {after}: {usage:?}");
    assert!(
        usage.memory_bytes <= LIMIT * 70 / 100 + largest as u64,
        "after {after}: memory holds {} of {LIMIT}",
        usage.memory_bytes
    );
    assert_eq!(
        b.check_space(other, true).unwrap(),
        Space::Free,
        "after {after}"
    );
    assert_eq!(
        b.check_space(other, false).unwrap(),
        Space::Free,
        "after {after}"
    );
}

/// 40 MiB of 256 KiB persistent messages to a queue nobody consumes (10× the 4 MiB
/// limit), each followed by a 1 KiB send to another queue: both are accepted every
/// time, no producer ever waits, memory stays under the mark; then a consumer gets
/// all 160 in order, and the other queue's 160.
async fn a_queue_backlog_never_blocks_other_producers(t: TestStore) {
    let b = limited(&t).await;
    const N: usize = 160;
    let big = 256 * KIB;
    for i in 0..N {
        let mut body = vec![b'x'; big];
        body[..8].copy_from_slice(format!("{i:08}").as_bytes());
        send(&b, "queue://backlog", Message::new(body).persistent(true)).await;
        send(
            &b,
            "queue://other",
            Message::new(format!("o{i}")).persistent(true),
        )
        .await;
        assert_room(&b, "queue://third", big, &format!("message {i}"));
    }
    assert_eq!(
        b.store().count_messages("queue://backlog").await.unwrap(),
        N as u64
    );
    let mut other = b
        .subscribe("queue://other", SubscribeOptions::non_durable())
        .await
        .unwrap();
    for (i, m) in take(&mut other, N).await.iter().enumerate() {
        assert_eq!(body(m), format!("o{i}"));
    }
    let mut backlog = b
        .subscribe("queue://backlog", SubscribeOptions::non_durable())
        .await
        .unwrap();
    for i in 0..N {
        let m = next(&mut backlog).await;
        assert_eq!(m.body().len(), big);
        assert_eq!(&m.body()[..8], format!("{i:08}").as_bytes(), "in order");
    }
    wait_rows(&b, "queue://backlog", 0).await;
    drop((other, backlog));
    b.shutdown().await.unwrap();
}

/// 20 idle queues, 40 messages of 64 KiB each (50 MiB together, 12× the limit): no
/// producer waits at any point, and each queue then delivers its 40.
async fn many_idle_queues_never_block_a_producer(t: TestStore) {
    let b = limited(&t).await;
    let size = 64 * KIB;
    for round in 0..40 {
        for q in 0..20 {
            let mut body = vec![b'y'; size];
            body[..4].copy_from_slice(format!("{round:04}").as_bytes());
            send(
                &b,
                format!("queue://idle.{q}").as_str(),
                Message::new(body).persistent(true),
            )
            .await;
        }
        assert_room(&b, "queue://fresh", size, &format!("round {round}"));
    }
    for q in 0..20 {
        let mut sub = b
            .subscribe(
                format!("queue://idle.{q}").as_str(),
                SubscribeOptions::non_durable(),
            )
            .await
            .unwrap();
        for (round, m) in take(&mut sub, 40).await.iter().enumerate() {
            assert_eq!(&m.body()[..4], format!("{round:04}").as_bytes());
        }
    }
    b.shutdown().await.unwrap();
}

/// The same for an offline durable topic subscription: 160 × 256 KiB to its topic,
/// no producer waits, and it gets them all when it comes back.
async fn an_offline_durable_backlog_never_blocks(t: TestStore) {
    let b = limited(&t).await;
    let options = || SubscribeOptions::durable("billing", "invoices");
    drop(b.subscribe("topic://orders", options()).await.unwrap());
    const N: usize = 160;
    let big = 256 * KIB;
    for i in 0..N {
        let mut body = vec![b'z'; big];
        body[..8].copy_from_slice(format!("{i:08}").as_bytes());
        send(&b, "topic://orders", Message::new(body).persistent(true)).await;
        assert_room(&b, "topic://news", big, &format!("message {i}"));
    }
    let mut sub = b.subscribe("topic://orders", options()).await.unwrap();
    for i in 0..N {
        let m = next(&mut sub).await;
        assert_eq!(&m.body()[..8], format!("{i:08}").as_bytes(), "in order");
    }
    drop(sub);
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    a_queue_backlog_never_blocks_other_producers,
    many_idle_queues_never_block_a_producer,
    an_offline_durable_backlog_never_blocks,
);
