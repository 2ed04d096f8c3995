//! [`Detached`]: every call of a store runs to its end on a task of its own, whoever
//! stops waiting for it.
//!
//! A caller may drop a store call's future half-way: an actor that stops (a deleted
//! destination) drops the reads it had in flight, an HTTP request whose client went
//! away drops its handler. sqlx's transactions are not safe to cancel while their
//! `BEGIN` is on the wire: the connection then goes back to the pool with the server
//! still in the transaction (a read-only one, for a read), and the next write on it
//! fails ("cannot execute DELETE in a read-only transaction"). Run on a task of its
//! own, a call always finishes (or fails) and puts its connection back clean; a
//! caller that went away only misses the answer.

use std::sync::Arc;

use crate::{
    Backend, DurableSubscription, ExpiredKey, ExpiredPage, HeldPage, LeaseState, LockAttempt,
    MessageStore, PreparedMessage, ReadStats, Result, StoredMessage, SubscriptionKey, WriteOp,
    WriteOutcome,
};

/// A store whose calls run detached from their callers (see the module
/// documentation); what [`crate::open`] answers.
pub struct Detached(pub Arc<dyn MessageStore>);

/// Runs `call` on the store on a task of its own and answers its result; a panic in
/// it is a panic here, a runtime shutting down is [`crate::StoreError::Closed`].
async fn detached<T, F, Fut>(store: &Arc<dyn MessageStore>, call: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(Arc<dyn MessageStore>) -> Fut,
    Fut: std::future::Future<Output = Result<T>> + Send + 'static,
{
    match tokio::spawn(call(Arc::clone(store))).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(crate::StoreError::Closed),
    }
}

#[async_trait::async_trait]
impl MessageStore for Detached {
    fn backend(&self) -> Backend {
        self.0.backend()
    }

    fn stats(&self) -> &ReadStats {
        self.0.stats()
    }

    async fn write(&self, ops: Vec<WriteOp>) -> Result<Vec<WriteOutcome>> {
        detached(&self.0, |s| async move { s.write(ops).await }).await
    }

    async fn find_subscription(
        &self,
        container: &str,
        key: &SubscriptionKey,
    ) -> Result<Option<DurableSubscription>> {
        let (container, key) = (container.to_string(), key.clone());
        detached(&self.0, |s| async move {
            s.find_subscription(&container, &key).await
        })
        .await
    }

    async fn count_client_subscriptions(&self, client_id: &str, limit: u32) -> Result<u64> {
        let client_id = client_id.to_string();
        detached(&self.0, |s| async move {
            s.count_client_subscriptions(&client_id, limit).await
        })
        .await
    }

    async fn find_subscription_containers(
        &self,
        key: &SubscriptionKey,
        after: &str,
        limit: u32,
    ) -> Result<Vec<String>> {
        let (key, after) = (key.clone(), after.to_string());
        detached(&self.0, |s| async move {
            s.find_subscription_containers(&key, &after, limit).await
        })
        .await
    }

    async fn list_containers(&self, after: &str, below: &str, limit: u32) -> Result<Vec<String>> {
        let (after, below) = (after.to_string(), below.to_string());
        detached(&self.0, |s| async move {
            s.list_containers(&after, &below, limit).await
        })
        .await
    }

    async fn list_subscriptions_between(
        &self,
        from: &str,
        below: &str,
        after: Option<(&str, &SubscriptionKey)>,
        limit: u32,
    ) -> Result<Vec<DurableSubscription>> {
        let (from, below) = (from.to_string(), below.to_string());
        let after = after.map(|(c, k)| (c.to_string(), k.clone()));
        detached(&self.0, |s| async move {
            let after = after.as_ref().map(|(c, k)| (c.as_str(), k));
            s.list_subscriptions_between(&from, &below, after, limit)
                .await
        })
        .await
    }

    async fn list_subscriptions(
        &self,
        container: &str,
        after: Option<&SubscriptionKey>,
        limit: u32,
    ) -> Result<Vec<DurableSubscription>> {
        let (container, after) = (container.to_string(), after.cloned());
        detached(&self.0, |s| async move {
            s.list_subscriptions(&container, after.as_ref(), limit)
                .await
        })
        .await
    }

    async fn read_pending(
        &self,
        container: &str,
        key: &SubscriptionKey,
        after_id: i64,
        priority: Option<u8>,
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>> {
        let (container, key) = (container.to_string(), key.clone());
        detached(&self.0, |s| async move {
            s.read_pending(&container, &key, after_id, priority, limit)
                .await
        })
        .await
    }

    async fn scan_matching(
        &self,
        container: &str,
        after_id: i64,
        upto_id: i64,
        filter: &[(String, Vec<String>)],
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>> {
        let (container, filter) = (container.to_string(), filter.to_vec());
        detached(&self.0, |s| async move {
            s.scan_matching(&container, after_id, upto_id, &filter, limit)
                .await
        })
        .await
    }

    async fn browse(
        &self,
        container: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>> {
        let container = container.to_string();
        detached(&self.0, |s| async move {
            s.browse(&container, after_id, limit).await
        })
        .await
    }

    async fn read_queue(
        &self,
        container: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>> {
        let container = container.to_string();
        detached(&self.0, |s| async move {
            s.read_queue(&container, after_id, limit).await
        })
        .await
    }

    async fn read_held(
        &self,
        container: &str,
        after: (i64, i64),
        now_ms: i64,
        limit: u32,
    ) -> Result<HeldPage> {
        let container = container.to_string();
        detached(&self.0, |s| async move {
            s.read_held(&container, after, now_ms, limit).await
        })
        .await
    }

    async fn read_prepared_range(
        &self,
        from: &str,
        to: &str,
        limit: u32,
    ) -> Result<Vec<PreparedMessage>> {
        let (from, to) = (from.to_string(), to.to_string());
        detached(&self.0, |s| async move {
            s.read_prepared_range(&from, &to, limit).await
        })
        .await
    }

    async fn count_prepared_range(&self, from: &str, to: &str, limit: u32) -> Result<u64> {
        let (from, to) = (from.to_string(), to.to_string());
        detached(&self.0, |s| async move {
            s.count_prepared_range(&from, &to, limit).await
        })
        .await
    }

    async fn recover_expired(
        &self,
        container: &str,
        subscriptions: &[SubscriptionKey],
        now_ms: i64,
        limit: u32,
    ) -> Result<ExpiredPage> {
        let (container, subscriptions) = (container.to_string(), subscriptions.to_vec());
        detached(&self.0, |s| async move {
            s.recover_expired(&container, &subscriptions, now_ms, limit)
                .await
        })
        .await
    }

    async fn read_expired(
        &self,
        container: &str,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>> {
        let container = container.to_string();
        detached(&self.0, |s| async move {
            s.read_expired(&container, now_ms, limit).await
        })
        .await
    }

    async fn read_expired_after(
        &self,
        container: &str,
        now_ms: i64,
        after: (i64, i64),
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>> {
        let container = container.to_string();
        detached(&self.0, |s| async move {
            s.read_expired_after(&container, now_ms, after, limit).await
        })
        .await
    }

    async fn read_expired_keys_after(
        &self,
        container: &str,
        now_ms: i64,
        after: (i64, i64),
        limit: u32,
    ) -> Result<Vec<ExpiredKey>> {
        let container = container.to_string();
        detached(&self.0, |s| async move {
            s.read_expired_keys_after(&container, now_ms, after, limit)
                .await
        })
        .await
    }

    async fn has_rows(&self, container: &str) -> Result<bool> {
        let container = container.to_string();
        detached(&self.0, |s| async move { s.has_rows(&container).await }).await
    }

    async fn next_expiration(&self, container: &str) -> Result<Option<i64>> {
        let container = container.to_string();
        detached(
            &self.0,
            |s| async move { s.next_expiration(&container).await },
        )
        .await
    }

    async fn count_messages(&self, container: &str) -> Result<u64> {
        let container = container.to_string();
        detached(
            &self.0,
            |s| async move { s.count_messages(&container).await },
        )
        .await
    }

    async fn count_committed(&self, container: &str) -> Result<u64> {
        let container = container.to_string();
        detached(
            &self.0,
            |s| async move { s.count_committed(&container).await },
        )
        .await
    }

    async fn count_committed_many(&self, containers: &[String]) -> Result<Vec<u64>> {
        let containers = containers.to_vec();
        detached(&self.0, |s| async move {
            s.count_committed_many(&containers).await
        })
        .await
    }

    fn take_written(&self) -> Option<Vec<String>> {
        self.0.take_written()
    }

    fn forget_committed_count(&self, container: &str) {
        self.0.forget_committed_count(container);
    }

    async fn count_subscriptions(&self, container: &str) -> Result<u64> {
        let container = container.to_string();
        detached(&self.0, |s| async move {
            s.count_subscriptions(&container).await
        })
        .await
    }

    async fn count_individual_acks(&self, container: &str) -> Result<u64> {
        let container = container.to_string();
        detached(&self.0, |s| async move {
            s.count_individual_acks(&container).await
        })
        .await
    }

    fn group_topic(&self, container: &str) -> Option<String> {
        self.0.group_topic(container)
    }

    fn last_assigned_id(&self) -> i64 {
        self.0.last_assigned_id()
    }

    fn stored_bytes(&self) -> u64 {
        self.0.stored_bytes()
    }

    async fn try_lock(&self) -> Result<LockAttempt> {
        detached(&self.0, |s| async move { s.try_lock().await }).await
    }

    fn lease_state(&self) -> Option<tokio::sync::watch::Receiver<LeaseState>> {
        self.0.lease_state()
    }

    fn lease_renewals(&self) -> Option<crate::LeaseRenewals> {
        self.0.lease_renewals()
    }

    fn lease_current(&self) -> bool {
        self.0.lease_current()
    }

    async fn wait_for_release(&self, within: std::time::Duration) {
        let _ = detached(&self.0, |s| async move {
            s.wait_for_release(within).await;
            Ok(())
        })
        .await;
    }

    async fn locked_by_another(&self) -> Result<bool> {
        detached(&self.0, |s| async move { s.locked_by_another().await }).await
    }

    async fn ping(&self) -> Result<()> {
        detached(&self.0, |s| async move { s.ping().await }).await
    }

    async fn close(&self) {
        let _ = detached(&self.0, |s| async move {
            s.close().await;
            Ok(())
        })
        .await;
    }
}
