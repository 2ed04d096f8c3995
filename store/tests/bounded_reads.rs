//! Every read of the message table is bounded in SQL: with a 50,000-message backlog,
//! the store fetches no more rows than the call's limit, and `recover_expired` fetches
//! no message row at all when nothing is expired. Counted by the store's own fetch
//! counters ([`ebb_store::ReadStats`]), which see every message row that comes back
//! from the database.

mod common;

use common::{fill, now_ms, subscribe_durable, TestStore, EXPIRED};
use ebb_store::{MessageStore, SubscriptionKey};

const T: &str = "topic://backlog";
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

on_every_backend!(
    backlog_without_ttl_reads_no_message_rows,
    fully_expired_backlog_reads_one_page,
);
