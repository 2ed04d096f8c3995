//! Every read of the message table is bounded in SQL: with a 50,000-message backlog,
//! the store fetches no more rows than the call's limit, and `recover_expired` fetches
//! no message row at all when nothing is expired. Counted by the store's own fetch
//! counters ([`ebb_store::ReadStats`]), which see every message row that comes back
//! from the database. The same holds for a queue's expiry (`read_expired`, and the
//! ids `ExpireQueue` deletes and returns).

use ebb_store::test_util::{fill, now_ms, on_every_backend, subscribe_durable, TestStore, EXPIRED};
use ebb_store::{MessageStore, MessageStoreExt, SubscriptionKey, WriteOp, WriteOutcome};

const T: &str = "topic://backlog";
const Q: &str = "queue://backlog";
const BACKLOG: usize = 50_000;

async fn backlog(store: &dyn MessageStore, expiration: i64) {
    fill(store, T, BACKLOG, expiration).await;
    assert_eq!(store.count_messages(T).await.unwrap(), BACKLOG as u64);
}

async fn subscribe(store: &dyn MessageStore) -> SubscriptionKey {
    subscribe_durable(store, T, "c1", "offline").await
}

fn rows(store: &dyn MessageStore) -> u64 {
    store.stats().snapshot().message_rows
}

async fn backlog_without_ttl_reads_no_message_rows(t: TestStore) {
    let store = t.open().await;
    let k = subscribe(&*store).await;
    backlog(&*store, 0).await;

    let before = rows(&*store);
    let page = store
        .recover_expired(T, std::slice::from_ref(&k), now_ms(), 400)
        .await
        .unwrap();
    assert!(page.by_subscription.is_empty());
    assert_eq!(
        rows(&*store) - before,
        0,
        "recover_expired read message rows"
    );

    let before = rows(&*store);
    let pending = store.read_pending(T, &k, 0, None, 100).await.unwrap();
    assert_eq!(pending.len(), 100);
    let browsed = store.browse(T, 0, 250).await.unwrap();
    assert_eq!(browsed.len(), 250);
    assert_eq!(rows(&*store) - before, 350);
}

async fn fully_expired_backlog_reads_one_page(t: TestStore) {
    let store = t.open().await;
    let k = subscribe(&*store).await;
    backlog(&*store, EXPIRED).await;

    let before = rows(&*store);
    let page = store
        .recover_expired(T, std::slice::from_ref(&k), now_ms(), 400)
        .await
        .unwrap();
    assert_eq!(
        rows(&*store) - before,
        400,
        "one page is 400 rows, not the backlog"
    );
    assert_eq!(page.rows, 400);
    assert!(page.more);
    assert_eq!(page.by_subscription[&k].len(), 400);
}

async fn expire_queue(store: &dyn MessageStore, limit: u32) -> Vec<i64> {
    match store
        .write_one(WriteOp::ExpireQueue {
            container: Q.into(),
            now_ms: now_ms(),
            limit,
        })
        .await
        .unwrap()
    {
        WriteOutcome::Removed(ids) => ids,
        other => panic!("{other:?}"),
    }
}

/// Half without TTL, half with a long one: nothing is expired, nothing is fetched.
async fn queue_backlog_without_expired_reads_no_message_rows(t: TestStore) {
    let store = t.open().await;
    fill(&*store, Q, BACKLOG / 2, 0).await;
    fill(&*store, Q, BACKLOG / 2, now_ms() + 3_600_000).await;

    let before = rows(&*store);
    assert!(store
        .read_expired(Q, now_ms(), 400)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(rows(&*store) - before, 0, "read_expired read message rows");
    assert!(expire_queue(&*store, 400).await.is_empty());
    assert_eq!(store.count_messages(Q).await.unwrap(), BACKLOG as u64);
}

/// Everything expired: each call fetches, or deletes and returns, exactly `limit`.
async fn fully_expired_queue_backlog_goes_one_page_per_call(t: TestStore) {
    let store = t.open().await;
    let ids = fill(&*store, Q, BACKLOG, EXPIRED).await;

    let before = rows(&*store);
    let page = store.read_expired(Q, now_ms(), 400).await.unwrap();
    assert_eq!(page.len(), 400);
    assert_eq!(
        rows(&*store) - before,
        400,
        "one page is 400 rows, not the backlog"
    );
    // All share one expiration, so the page is the first 400 by id.
    assert_eq!(page.iter().map(|m| m.id).collect::<Vec<_>>(), ids[..400]);

    let before = rows(&*store);
    assert_eq!(expire_queue(&*store, 400).await, ids[..400]);
    assert_eq!(expire_queue(&*store, 400).await, ids[400..800]);
    assert_eq!(expire_queue(&*store, 1_000).await.len(), 1_000);
    assert_eq!(
        rows(&*store) - before,
        0,
        "a delete page decodes no message"
    );
    assert_eq!(
        store.count_messages(Q).await.unwrap(),
        BACKLOG as u64 - 1_800
    );
}

/// A consumer group's reads of its topic's rows ([`ebb_store::groups`]) are bounded as
/// a queue's: with 50,000 expired topic rows behind the group's mark, each page
/// fetches at most its limit, and an expiry page (acking for the group) decodes none.
async fn a_groups_pages_of_its_topic_are_bounded(t: TestStore) {
    const G: &str = "queue://Consumer.A.backlog";
    let store = t.open().await;
    store
        .write_one(WriteOp::Subscribe {
            container: T.into(),
            key: SubscriptionKey::group(G),
            selector: None,
            prioritized: false,
        })
        .await
        .unwrap();
    backlog(&*store, EXPIRED).await;
    let before = rows(&*store);
    assert_eq!(store.read_queue(G, 0, 100).await.unwrap().len(), 100);
    assert_eq!(store.browse(G, 0, 250).await.unwrap().len(), 250);
    assert_eq!(
        store
            .scan_matching(G, 0, i64::MAX, &[], 50)
            .await
            .unwrap()
            .len(),
        50
    );
    assert_eq!(
        store.read_expired(G, now_ms(), 400).await.unwrap().len(),
        400
    );
    assert_eq!(
        rows(&*store) - before,
        800,
        "each page its limit, not the backlog"
    );
    let before = rows(&*store);
    let page = match store
        .write_one(WriteOp::ExpireQueue {
            container: G.into(),
            now_ms: now_ms(),
            limit: 400,
        })
        .await
        .unwrap()
    {
        WriteOutcome::Removed(ids) => ids,
        other => panic!("{other:?}"),
    };
    assert_eq!(page.len(), 400);
    assert_eq!(
        rows(&*store) - before,
        0,
        "an expiry page decodes no message"
    );
    assert_eq!(
        store.count_committed(G).await.unwrap(),
        BACKLOG as u64 - 400
    );
}

on_every_backend!(
    a_groups_pages_of_its_topic_are_bounded,
    backlog_without_ttl_reads_no_message_rows,
    fully_expired_backlog_reads_one_page,
    queue_backlog_without_expired_reads_no_message_rows,
    fully_expired_queue_backlog_goes_one_page_per_call,
);
