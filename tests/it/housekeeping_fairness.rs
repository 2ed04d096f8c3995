//! No destination hogs housekeeping: expiry pages of all topics share a fair budget,
//! so a topic with 100,000 expired messages delays a small one by a few pages, not by
//! its whole run (EXP-03). A failed page is logged, ends the run, and the next tick
//! carries on. Order is read from the budget's page tickets, not from the clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ebb::test_util::*;
use ebb::Broker;

use crate::faulty_store::FaultyStore;

/// Topic A: 100,000 expired; topic B: 10. One permit. B is done before A has run more
/// than 3 pages, and A then drains completely in pages of at most 400.
async fn small_topic_is_not_held_back_by_a_big_one(t: TestStore) {
    preload(&t, "topic://big", &[("c", "s")], 100_000, EXPIRED).await;
    preload(&t, "topic://small", &[("c", "s")], 10, EXPIRED).await;
    let b = broker(&t, policy(3_600_000, 400), 1).await;
    b.topic_stats("topic://big").await.unwrap();
    b.topic_stats("topic://small").await.unwrap();
    b.run_housekeeping("topic://big").await.unwrap();
    b.run_housekeeping("topic://small").await.unwrap();

    let small = wait_for(&b, "small", |s| s.expired == 10).await;
    let big_pages_before_small_was_done = small.last_page_ticket - small.expiry_pages;
    assert!(
        big_pages_before_small_was_done <= 3,
        "the small topic waited for {big_pages_before_small_was_done} pages of the big one"
    );

    let big = wait_for(&b, "big", |s| s.expired == 100_000).await;
    assert!(big.max_expiry_page_rows <= 400);
    assert!(big.expiry_pages >= 250);
    b.shutdown().await.unwrap();
}

/// EXP-03's fault variant: one store error in the middle of a long expiry run. It is
/// logged, the run ends, the next tick runs normally, and the topic still drains.
async fn a_failed_page_does_not_stop_later_expiry(t: TestStore) {
    preload(&t, "topic://big", &[("c", "s")], 5_000, EXPIRED).await;
    let failures = Arc::new(AtomicU64::new(0));
    let store = Arc::new(FaultyStore {
        fail_reads: 3..4,
        read_failures: Arc::clone(&failures),
        ..FaultyStore::new(t.open().await)
    });
    let b = Broker::start_with_store(store, topic_config(policy(50, 400))).unwrap();
    let stats = wait_for(&b, "big", |s| s.expired == 5_000).await;
    assert_eq!(failures.load(Ordering::SeqCst), 1);
    assert!(
        stats.expiry_pages > 13,
        "the failed page plus the 13 that drained it"
    );
    assert_eq!(stats.max_expiry_page_rows, 400);
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    small_topic_is_not_held_back_by_a_big_one,
    a_failed_page_does_not_stop_later_expiry,
);
