//! No destination hogs housekeeping: expiry pages of all topics share a fair budget,
//! so a topic with 100,000 expired messages delays a small one by a few pages, not by
//! its whole run (EXP-03). A failed page is logged, ends the run, and the next tick
//! carries on. Order is read from the budget's page tickets, not from the clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ebb::test_util::*;
use ebb::{Broker, BrokerConfig, PolicyEntry, PolicyMap};
use ebb_store::*;

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

/// Fails the `fail_on`-th `read_expired_after` call (a topic's expiry page), once; everything else goes through.
struct FailOnce {
    inner: Arc<dyn MessageStore>,
    calls: AtomicU64,
    fail_on: u64,
    failures: Arc<AtomicU64>,
}

#[async_trait::async_trait]
impl MessageStore for FailOnce {
    fn backend(&self) -> Backend {
        self.inner.backend()
    }
    fn stats(&self) -> &ReadStats {
        self.inner.stats()
    }
    async fn write(&self, ops: Vec<WriteOp>) -> Result<Vec<WriteOutcome>> {
        self.inner.write(ops).await
    }
    async fn find_subscription(
        &self,
        c: &str,
        k: &SubscriptionKey,
    ) -> Result<Option<DurableSubscription>> {
        self.inner.find_subscription(c, k).await
    }
    async fn find_subscription_containers(
        &self,
        k: &SubscriptionKey,
        after: &str,
        limit: u32,
    ) -> Result<Vec<String>> {
        self.inner
            .find_subscription_containers(k, after, limit)
            .await
    }
    async fn list_containers(&self, after: &str, below: &str, limit: u32) -> Result<Vec<String>> {
        self.inner.list_containers(after, below, limit).await
    }
    async fn list_subscriptions_between(
        &self,
        from: &str,
        below: &str,
        after: Option<(&str, &SubscriptionKey)>,
        limit: u32,
    ) -> Result<Vec<DurableSubscription>> {
        self.inner
            .list_subscriptions_between(from, below, after, limit)
            .await
    }
    async fn scan_matching(
        &self,
        c: &str,
        after: i64,
        upto: i64,
        filter: &[(String, Vec<String>)],
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>> {
        self.inner
            .scan_matching(c, after, upto, filter, limit)
            .await
    }
    async fn list_subscriptions(
        &self,
        c: &str,
        after: Option<&SubscriptionKey>,
        limit: u32,
    ) -> Result<Vec<DurableSubscription>> {
        self.inner.list_subscriptions(c, after, limit).await
    }
    async fn read_pending(
        &self,
        c: &str,
        k: &SubscriptionKey,
        after: i64,
        p: Option<u8>,
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>> {
        self.inner.read_pending(c, k, after, p, limit).await
    }
    async fn browse(&self, c: &str, after: i64, limit: u32) -> Result<Vec<Arc<StoredMessage>>> {
        self.inner.browse(c, after, limit).await
    }
    async fn recover_expired(
        &self,
        c: &str,
        subs: &[SubscriptionKey],
        now: i64,
        limit: u32,
    ) -> Result<ExpiredPage> {
        self.inner.recover_expired(c, subs, now, limit).await
    }
    async fn read_expired(&self, c: &str, now: i64, limit: u32) -> Result<Vec<Arc<StoredMessage>>> {
        self.inner.read_expired(c, now, limit).await
    }
    async fn read_expired_after(
        &self,
        c: &str,
        now: i64,
        after: (i64, i64),
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>> {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 == self.fail_on {
            self.failures.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Closed);
        }
        self.inner.read_expired_after(c, now, after, limit).await
    }
    async fn has_expiring(&self, c: &str) -> Result<bool> {
        self.inner.has_expiring(c).await
    }
    async fn count_messages(&self, c: &str) -> Result<u64> {
        self.inner.count_messages(c).await
    }
    async fn count_subscriptions(&self, c: &str) -> Result<u64> {
        self.inner.count_subscriptions(c).await
    }
    async fn count_individual_acks(&self, c: &str) -> Result<u64> {
        self.inner.count_individual_acks(c).await
    }
    fn last_assigned_id(&self) -> i64 {
        self.inner.last_assigned_id()
    }
    fn stored_bytes(&self) -> u64 {
        self.inner.stored_bytes()
    }
    async fn try_lock(&self) -> Result<ebb_store::LockAttempt> {
        self.inner.try_lock().await
    }
    fn lease_state(&self) -> Option<tokio::sync::watch::Receiver<ebb_store::LeaseState>> {
        self.inner.lease_state()
    }
    async fn locked_by_another(&self) -> Result<bool> {
        self.inner.locked_by_another().await
    }
    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
    }
    async fn close(&self) {
        self.inner.close().await
    }
}

/// EXP-03's fault variant: one store error in the middle of a long expiry run. It is
/// logged, the run ends, the next tick runs normally, and the topic still drains.
async fn a_failed_page_does_not_stop_later_expiry(t: TestStore) {
    preload(&t, "topic://big", &[("c", "s")], 5_000, EXPIRED).await;
    let failures = Arc::new(AtomicU64::new(0));
    let store = Arc::new(FailOnce {
        inner: t.open().await,
        calls: AtomicU64::new(0),
        fail_on: 3,
        failures: Arc::clone(&failures),
    });
    let config = BrokerConfig {
        policies: PolicyMap {
            entries: vec![PolicyEntry {
                destination: "topic://>".into(),
                policy: policy(50, 400),
            }],
        },
        ..BrokerConfig::default()
    };
    let b = Broker::start_with_store(store, config).unwrap();
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
