//! A store wrapper that injects faults (failed reads, slow writes) into the broker's
//! calls, for tests of what the actors do when the store misbehaves.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ebb_store::*;

/// A store that passes every call to `inner`, except:
/// - the calls of `read_expired_after` numbered in `fail_reads` (from 1) fail with
///   [`StoreError::Closed`], each counted in `read_failures` (a topic's expiry page
///   reads through it: this store has no `read_expired_keys_after` of its own);
/// - a write with an op `slow_writes` picks waits `write_delay` before it goes on;
/// - a write with an op `fail_writes` picks fails with [`StoreError::Database`], as a
///   lost database connection, nothing of it applied (as a crash before its commit
///   leaves it).
///
/// Build it with struct update syntax over [`FaultyStore::new`].
pub struct FaultyStore {
    /// The store every call goes to.
    pub inner: Arc<dyn MessageStore>,
    /// `read_expired_after` calls so far.
    pub reads: AtomicU64,
    pub fail_reads: Range<u64>,
    pub read_failures: Arc<AtomicU64>,
    pub slow_writes: fn(&WriteOp) -> bool,
    pub write_delay: Duration,
    pub fail_writes: fn(&WriteOp) -> bool,
}

impl FaultyStore {
    /// `inner` with no faults.
    pub fn new(inner: Arc<dyn MessageStore>) -> Self {
        Self {
            inner,
            reads: AtomicU64::new(0),
            fail_reads: 0..0,
            read_failures: Arc::default(),
            slow_writes: |_| false,
            write_delay: Duration::ZERO,
            fail_writes: |_| false,
        }
    }
}

#[async_trait::async_trait]
impl MessageStore for FaultyStore {
    fn backend(&self) -> Backend {
        self.inner.backend()
    }
    fn stats(&self) -> &ReadStats {
        self.inner.stats()
    }
    fn take_written(&self) -> Option<Vec<String>> {
        self.inner.take_written()
    }
    fn forget_committed_count(&self, container: &str) {
        self.inner.forget_committed_count(container)
    }
    async fn write(&self, ops: Vec<WriteOp>) -> Result<Vec<WriteOutcome>> {
        if ops.iter().any(self.slow_writes) {
            tokio::time::sleep(self.write_delay).await;
        }
        if ops.iter().any(self.fail_writes) {
            // As a lost database connection answers.
            return Err(StoreError::Database {
                op: "write (an injected fault)",
                source: sqlx::Error::PoolTimedOut,
            });
        }
        self.inner.write(ops).await
    }
    async fn find_subscription(
        &self,
        c: &str,
        k: &SubscriptionKey,
    ) -> Result<Option<DurableSubscription>> {
        self.inner.find_subscription(c, k).await
    }
    async fn count_client_subscriptions(&self, client_id: &str, limit: u32) -> Result<u64> {
        self.inner
            .count_client_subscriptions(client_id, limit)
            .await
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
    async fn read_queue(&self, c: &str, after: i64, limit: u32) -> Result<Vec<Arc<StoredMessage>>> {
        self.inner.read_queue(c, after, limit).await
    }
    async fn read_held(
        &self,
        c: &str,
        after: (i64, i64),
        now_ms: i64,
        limit: u32,
    ) -> Result<ebb_store::HeldPage> {
        self.inner.read_held(c, after, now_ms, limit).await
    }
    async fn read_prepared_range(
        &self,
        from: &str,
        to: &str,
        limit: u32,
    ) -> Result<Vec<PreparedMessage>> {
        self.inner.read_prepared_range(from, to, limit).await
    }
    async fn count_prepared_range(&self, from: &str, to: &str, limit: u32) -> Result<u64> {
        self.inner.count_prepared_range(from, to, limit).await
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
        let call = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
        if self.fail_reads.contains(&call) {
            self.read_failures.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Closed);
        }
        self.inner.read_expired_after(c, now, after, limit).await
    }
    async fn has_rows(&self, c: &str) -> Result<bool> {
        self.inner.has_rows(c).await
    }
    async fn next_expiration(&self, c: &str) -> Result<Option<i64>> {
        self.inner.next_expiration(c).await
    }
    async fn count_messages(&self, c: &str) -> Result<u64> {
        self.inner.count_messages(c).await
    }
    async fn count_committed(&self, c: &str) -> Result<u64> {
        self.inner.count_committed(c).await
    }
    async fn count_subscriptions(&self, c: &str) -> Result<u64> {
        self.inner.count_subscriptions(c).await
    }
    async fn count_individual_acks(&self, c: &str) -> Result<u64> {
        self.inner.count_individual_acks(c).await
    }
    fn group_topic(&self, container: &str) -> Option<String> {
        self.inner.group_topic(container)
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
