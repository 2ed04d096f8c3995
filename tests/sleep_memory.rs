//! What a sleeping destination costs, counted in bytes: the process's heap (a
//! counting allocator, this binary's own) before 2,000 queues are made and once they
//! all sleep, each with a stored message (the send made it asleep; a browse then woke
//! it, its actor read its message, and it slept again after
//! `inactive_timeout_before_sleep`): its registry slot and its stats entry, which
//! holds what the stats reading read of it. (SQLite's page cache is its own, outside
//! this count.) Issue 52's goal is 1 KiB: measured 1,153–1,168 bytes on 2026-12-07
//! before a sleeping queue gave back its memory usage and the copies of its name
//! became one, 884–887 after, 430 once the reading kept its part on the stats entry
//! instead of a map of its own and the store dropped a sleeping queue's kept count;
//! the test holds 512 bytes, so a copy per destination coming back fails it. An
//! actor, a mailbox or a cursor left behind by a sleep costs kilobytes.

use ebb::test_util::*;
use ebb::{Message, Policy, UsageConfig};
use futures::StreamExt;

/// Counts the bytes allocated and not yet freed by the whole test process.
#[global_allocator]
static ALLOCATOR: heap::CountingAllocator = heap::CountingAllocator;

/// The two backends' variants run one after the other: the count is the process's.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Queues made, each with one stored message, left to sleep.
const QUEUES: usize = 2_000;

/// The most heap a sleeping destination may hold, bytes (issue 52's goal is 1,024;
/// measured 430).
const BOUND: usize = 512;

async fn all_asleep(b: &ebb::Broker, n: u64) {
    poll_until("every queue sleeps", || async {
        (b.stats().await.unwrap().totals.asleep >= n).then_some(())
    })
    .await;
}

/// 2,000 sleeping queues hold at most 512 bytes of heap each, counted from before they
/// were made (after one queue slept and woke, so that what the broker makes once —
/// pool connections, statement caches, the reading — is there already).
async fn a_sleeping_queue_costs_at_most_half_a_kib(t: TestStore) {
    let _serial = SERIAL.lock().await;
    let policy = Policy {
        expire_messages_period: 0,
        inactive_timeout_before_sleep: 30,
        ..Policy::default()
    };
    let b = broker_with(&t, vec![("queue://>", policy)], UsageConfig::default()).await;
    // Sent (made asleep), then browsed (woken: its actor reads the message).
    let send = |name: String| {
        let b = b.clone();
        async move {
            b.send(&*name, Message::new("x").persistent(true))
                .await
                .unwrap();
            let shown: Vec<_> = b.browse_queue(&*name).await.unwrap().collect().await;
            assert!(
                !shown.is_empty() && shown.iter().all(|m| m.is_ok()),
                "{shown:?}"
            );
        }
    };
    send("queue://warm".into()).await;
    all_asleep(&b, 1).await;
    send("queue://warm".into()).await;
    all_asleep(&b, 1).await;
    let before = heap::live_bytes();
    for i in 0..QUEUES {
        send(format!("queue://m.{i:05}")).await;
    }
    all_asleep(&b, QUEUES as u64 + 1).await;
    // One more reading, so that the one kept is of them all asleep.
    let stats = b.stats().await.unwrap();
    assert_eq!(stats.totals.asleep, QUEUES as u64 + 1, "{:?}", stats.totals);
    drop(stats);
    let after = heap::live_bytes();
    let per = after.saturating_sub(before) / QUEUES;
    println!(
        "{QUEUES} sleeping queues: {} bytes of heap, {per} bytes each",
        after.saturating_sub(before)
    );
    assert!(
        per <= BOUND,
        "{per} bytes of heap per sleeping queue (at most {BOUND})"
    );
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    a_sleeping_queue_costs_at_most_half_a_kib,
);
