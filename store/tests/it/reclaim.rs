//! A topic's expiry behind live messages (issue 17): `read_expired_after` pages through
//! a topic's expired messages in `(expiration, id)` order wherever they sit, bounded by
//! its limit; `WriteOp::Reclaim` deletes only the rows every durable subscription is
//! done with (by its mark or an individual ack), with their individual acks, and never
//! a prepared row.

use ebb_store::test_util::{message, message_p, now_ms, on_every_backend, prepared, TestStore};
use ebb_store::{MessageStore, MessageStoreExt, SubscriptionKey, WriteOp, WriteOutcome};

const T: &str = "topic://reclaim";

async fn subscribe(store: &dyn MessageStore, name: &str, prioritized: bool) -> SubscriptionKey {
    let k = SubscriptionKey::new("c", name);
    store
        .write_one(WriteOp::Subscribe {
            container: T.into(),
            key: k.clone(),
            selector: None,
            prioritized,
        })
        .await
        .unwrap();
    k
}

async fn ack(store: &dyn MessageStore, k: &SubscriptionKey, ids: &[(i64, u8)]) -> u64 {
    match store
        .write_one(WriteOp::Ack {
            container: T.into(),
            key: k.clone(),
            messages: ids.to_vec(),
        })
        .await
        .unwrap()
    {
        WriteOutcome::Acked { newly_acked } => newly_acked,
        other => panic!("{other:?}"),
    }
}

async fn reclaim(store: &dyn MessageStore, ids: &[i64]) -> Vec<i64> {
    store
        .write_one(WriteOp::Reclaim {
            container: T.into(),
            ids: ids.to_vec(),
        })
        .await
        .unwrap()
        .removed()
        .unwrap()
}

fn at4(ids: &[i64]) -> Vec<(i64, u8)> {
    ids.iter().map(|&id| (id, 4)).collect()
}

/// Live, then 1,000 expired with three expirations (out of id order), then live: pages
/// of 300 from `(0, MAX)` on return every expired row once, in `(expiration, id)`
/// order, each page at most 300 rows read.
async fn expired_pages_pass_live_messages_in_expiration_order(t: TestStore) {
    let store = t.open().await;
    let now = now_ms();
    let mut batch = vec![message(T, "head", 0)];
    for n in 0..1000 {
        // Expirations 3, 1, 2 (ms ago, in that cycle): id order is not expiration order.
        let ago = [3, 1, 2][n % 3];
        batch.push(message(T, &format!("e{n}"), now - 1_000 * ago));
    }
    batch.push(message(T, "tail", 0));
    batch.push(message(T, "later", now + 3_600_000));
    let ids = store.add_messages(batch).await.unwrap();
    let mut want: Vec<(i64, i64)> = Vec::new();
    for (n, id) in ids[1..1001].iter().enumerate() {
        want.push((now - 1_000 * [3, 1, 2][n % 3], *id));
    }
    want.sort_unstable();

    let mut after = (0, i64::MAX);
    let mut got = Vec::new();
    loop {
        let before = store.stats().snapshot().message_rows;
        let page = store.read_expired_after(T, now, after, 300).await.unwrap();
        let read = store.stats().snapshot().message_rows - before;
        assert!(read <= 300, "a page read {read} rows");
        assert!(page.len() <= 300);
        got.extend(page.iter().map(|m| (m.expiration, m.id)));
        match page.last() {
            Some(m) if page.len() == 300 => after = (m.expiration, m.id),
            _ => break,
        }
    }
    assert_eq!(
        got, want,
        "every expired row once, in (expiration, id) order"
    );
}

/// Prepared expired rows are not read; neither are rows of another topic.
async fn expired_pages_skip_prepared_rows_and_other_topics(t: TestStore) {
    let store = t.open().await;
    let ids = store
        .add_messages(vec![
            prepared(T, "p", 1, "tx1"),
            message(T, "e", 1),
            message("topic://other", "o", 1),
        ])
        .await
        .unwrap();
    let page = store
        .read_expired_after(T, now_ms(), (0, i64::MAX), 10)
        .await
        .unwrap();
    assert_eq!(page.iter().map(|m| m.id).collect::<Vec<_>>(), vec![ids[1]]);
}

/// Two subscriptions and a live head: a row goes only once both are done with it (by
/// an individual ack or the mark), with its individual acks; prepared rows and rows
/// one subscription still needs stay.
async fn a_row_goes_when_every_subscription_is_done_with_it(t: TestStore) {
    let store = t.open().await;
    let a = subscribe(&*store, "a", false).await;
    let b = subscribe(&*store, "b", false).await;
    let ids = store
        .add_messages(vec![
            message(T, "head", 0),
            message(T, "x", 1),
            message(T, "y", 1),
        ])
        .await
        .unwrap();
    let (head, x, y) = (ids[0], ids[1], ids[2]);
    // a: x individually (the mark stays before the live head).
    assert_eq!(ack(&*store, &a, &at4(&[x])).await, 1);
    assert!(
        reclaim(&*store, &[x, y]).await.is_empty(),
        "b still needs both"
    );
    // b: x and y individually; a still needs y.
    assert_eq!(ack(&*store, &b, &at4(&[x, y])).await, 2);
    assert_eq!(reclaim(&*store, &[x, y]).await, vec![x]);
    assert_eq!(store.count_messages(T).await.unwrap(), 2);
    // a passes head and y by its mark: y is done for both.
    assert_eq!(ack(&*store, &a, &at4(&[head, y])).await, 2);
    assert_eq!(
        reclaim(&*store, &[head, y]).await,
        vec![y],
        "b still needs head"
    );
    assert_eq!(store.count_messages(T).await.unwrap(), 1);
    // b's individual acks of x and y went with the rows; its mark is still before head.
    assert_eq!(store.count_individual_acks(T).await.unwrap(), 0);
    let marks = store.find_subscription(T, &b).await.unwrap().unwrap().marks;
    assert!(marks[0].1 < head, "{marks:?}");
    // A repeated reclaim deletes nothing more.
    assert!(reclaim(&*store, &[x, y]).await.is_empty());
}

/// Per-priority marks: a row is judged by the mark of its own priority.
async fn per_priority_marks_judge_each_row_by_its_priority(t: TestStore) {
    let store = t.open().await;
    let a = subscribe(&*store, "a", true).await;
    let ids = store
        .add_messages(vec![
            message_p(T, "live4", 0, 4),
            message_p(T, "e4", 1, 4),
            message_p(T, "e9", 1, 9),
        ])
        .await
        .unwrap();
    // Priority 9's mark passes e9 (its run); e4 sits behind live4: an individual ack.
    assert_eq!(ack(&*store, &a, &[(ids[1], 4), (ids[2], 9)]).await, 2);
    let marks = store.find_subscription(T, &a).await.unwrap().unwrap().marks;
    assert!(marks.contains(&(Some(9), ids[2])), "{marks:?}");
    assert!(
        marks.iter().any(|(p, m)| *p == Some(4) && *m < ids[0]),
        "priority 4's mark stays before live4: {marks:?}"
    );
    let mut gone = reclaim(&*store, &ids).await;
    gone.sort_unstable();
    assert_eq!(gone, vec![ids[1], ids[2]]);
    assert_eq!(store.count_individual_acks(T).await.unwrap(), 0);
}

/// A prepared row is never reclaimed; without durable subscriptions every other row of
/// the list goes.
async fn prepared_rows_stay_and_orphans_go(t: TestStore) {
    let store = t.open().await;
    let ids = store
        .add_messages(vec![prepared(T, "p", 1, "tx1"), message(T, "e", 1)])
        .await
        .unwrap();
    assert_eq!(reclaim(&*store, &ids).await, vec![ids[1]]);
    assert_eq!(store.count_messages(T).await.unwrap(), 1);
}

/// More than one statement's worth of ids (512): 1,200 rows, all done, all go.
async fn long_lists_are_cut_into_statements(t: TestStore) {
    let store = t.open().await;
    let a = subscribe(&*store, "a", false).await;
    let mut batch = vec![message(T, "head", 0)];
    batch.extend((0..1200).map(|n| message(T, &format!("e{n}"), 1)));
    let ids = store.add_messages(batch).await.unwrap();
    assert_eq!(ack(&*store, &a, &at4(&ids[1..])).await, 1200);
    assert_eq!(store.count_individual_acks(T).await.unwrap(), 1200);
    assert_eq!(reclaim(&*store, &ids[1..]).await, ids[1..].to_vec());
    assert_eq!(store.count_individual_acks(T).await.unwrap(), 0);
    assert_eq!(store.count_messages(T).await.unwrap(), 1);
}

on_every_backend!(
    expired_pages_pass_live_messages_in_expiration_order,
    expired_pages_skip_prepared_rows_and_other_topics,
    a_row_goes_when_every_subscription_is_done_with_it,
    per_priority_marks_judge_each_row_by_its_priority,
    prepared_rows_stay_and_orphans_go,
    long_lists_are_cut_into_statements,
);
