//! The reads a wildcard subscription makes to find what it matches: the containers
//! holding messages within a range of names (`list_containers`), the containers of one
//! durable subscription, page by page (`find_subscription_containers`), and the
//! subscriptions kept in a range of containers (`list_subscriptions_between`). Each
//! is bounded by its `limit` and pages with its `after`.

use ebb_store::test_util::{message, on_every_backend, subscribe_durable, Raw, TestStore};
use ebb_store::{MessageStoreExt, SubscriptionKey, WriteOp};

/// The distinct containers in a range, in name order, a page at a time: whatever the
/// number of messages each holds, and never one outside the range.
async fn containers_in_a_range_page_in_name_order(t: TestStore) {
    let store = t.open().await;
    let mut batch = Vec::new();
    for c in [
        "queue://jobs.b",
        "queue://jobs.a",
        "queue://jobz",
        "queue://jobs",
        "topic://jobs.a",
    ] {
        for i in 0..30 {
            batch.push(message(c, &format!("{c}-{i}"), 0));
        }
    }
    batch.push(message("queue://jobs.a.deep", "x", 0));
    store.add_messages(batch).await.unwrap();
    let all = store
        .list_containers("queue://jobs", "queue://jobs/", 10)
        .await
        .unwrap();
    assert_eq!(
        all,
        ["queue://jobs.a", "queue://jobs.a.deep", "queue://jobs.b"]
    );
    let first = store
        .list_containers("queue://jobs", "queue://jobs/", 2)
        .await
        .unwrap();
    assert_eq!(first, ["queue://jobs.a", "queue://jobs.a.deep"]);
    let rest = store
        .list_containers(&first[1], "queue://jobs/", 2)
        .await
        .unwrap();
    assert_eq!(rest, ["queue://jobs.b"]);
    // `after` is exclusive: the range's own start is listed only from below it.
    let with_start = store
        .list_containers("queue://jobr", "queue://jobs/", 1)
        .await
        .unwrap();
    assert_eq!(with_start, ["queue://jobs"]);
    assert!(store
        .list_containers("queue://x", "queue://y", 5)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .list_containers("queue://", "queue:/0", 0)
        .await
        .unwrap()
        .is_empty());
    store.close().await;
}

/// One key's containers, a page at a time after the last one seen.
async fn a_subscriptions_containers_page(t: TestStore) {
    let store = t.open().await;
    for c in ["topic://c", "topic://a", "topic://b", "wildcard:topic://>"] {
        subscribe_durable(&*store, c, "client", "sub").await;
    }
    subscribe_durable(&*store, "topic://a", "client", "other").await;
    let key = SubscriptionKey::new("client", "sub");
    let first = store
        .find_subscription_containers(&key, "", 2)
        .await
        .unwrap();
    assert_eq!(first, ["topic://a", "topic://b"]);
    let rest = store
        .find_subscription_containers(&key, &first[1], 10)
        .await
        .unwrap();
    assert_eq!(rest, ["topic://c", "wildcard:topic://>"]);
    store.close().await;
}

/// The subscriptions of a range of containers, with their selectors, one entry per
/// subscription (also with a mark per priority), paged by `(container, key)`.
async fn subscriptions_in_a_range_page_by_key(t: TestStore) {
    let store = t.open().await;
    subscribe_durable(&*store, "wildcard:topic://a.>", "c1", "s").await;
    subscribe_durable(&*store, "wildcard:topic://a.>", "c2", "s").await;
    store
        .write_one(WriteOp::Subscribe {
            container: "wildcard:topic://b.*".into(),
            key: SubscriptionKey::new("c1", "t"),
            selector: Some("k = 'v'".into()),
            prioritized: true,
        })
        .await
        .unwrap();
    subscribe_durable(&*store, "topic://a.x", "c1", "s").await;
    subscribe_durable(&*store, "wildcarf", "c1", "s").await;
    let page = |after: Option<(String, SubscriptionKey)>, limit| {
        let store = store.clone();
        async move {
            let after = after.as_ref().map(|(c, k)| (c.as_str(), k));
            store
                .list_subscriptions_between("wildcard:", "wildcard;", after, limit)
                .await
                .unwrap()
        }
    };
    let all = page(None, 10).await;
    let shown: Vec<(String, String, Option<String>)> = all
        .iter()
        .map(|s| {
            (
                s.container.clone(),
                s.key.client_id.clone(),
                s.selector.clone(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("wildcard:topic://a.>".to_string(), "c1".to_string(), None),
            ("wildcard:topic://a.>".into(), "c2".into(), None),
            (
                "wildcard:topic://b.*".into(),
                "c1".into(),
                Some("k = 'v'".into())
            ),
        ]
    );
    let first = page(None, 1).await;
    assert_eq!(first.len(), 1);
    let next = page(Some((first[0].container.clone(), first[0].key.clone())), 5).await;
    assert_eq!(next, all[1..]);
    store.close().await;
}

/// The ranges above are ranges of bytes on both backends: PostgreSQL's `container`
/// columns use the "C" collation (migration 5), whatever the database's, as SQLite's
/// BINARY does. (A linguistic collation such as en_US.UTF-8 ignores punctuation, and
/// `queue://jobs.a` would sort among `queue://jobsa…`.)
async fn containers_compare_as_bytes(t: TestStore) {
    let store = t.open().await;
    match Raw::connect(&t).await {
        Raw::Sqlite(_) => {} // BINARY is SQLite's only default
        Raw::Postgres(mut c) => {
            let collations: Vec<(String, Option<String>)> = sqlx::query_as(
                "SELECT table_name::text, collation_name::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND column_name = 'container' \
                 ORDER BY table_name",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
            assert_eq!(
                collations,
                [
                    ("ebb_acks".to_string(), Some("C".to_string())),
                    ("ebb_indacks".into(), Some("C".into())),
                    ("ebb_msgs".into(), Some("C".into())),
                ]
            );
        }
    }
    store.close().await;
}

on_every_backend!(
    containers_compare_as_bytes,
    containers_in_a_range_page_in_name_order,
    a_subscriptions_containers_page,
    subscriptions_in_a_range_page_by_key,
);
