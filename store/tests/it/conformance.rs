//! The store's behaviour, checked the same way on every backend (SQLite always,
//! PostgreSQL when `EBB_TEST_POSTGRES_URL` is set): subscriptions and marks, individual
//! acks, prepared transactions, cleanup, restart, and open errors.

use std::sync::Arc;

use ebb_store::test_util::{message, message_p, now_ms, on_every_backend, TestStore, EXPIRED};
use ebb_store::{
    MessageStore, MessageStoreExt, Payload, StoreError, StoreOptions, SubscriptionKey, WriteOp,
    WriteOutcome,
};

const T: &str = "topic://conformance";

fn key(name: &str) -> SubscriptionKey {
    SubscriptionKey::new("c1", name)
}

pub async fn subscribe(store: &dyn MessageStore, container: &str, k: &SubscriptionKey, prio: bool) {
    store
        .write_one(WriteOp::Subscribe {
            container: container.into(),
            key: k.clone(),
            selector: None,
            prioritized: prio,
        })
        .await
        .unwrap();
}

async fn ack(store: &dyn MessageStore, k: &SubscriptionKey, ids: &[i64]) -> u64 {
    let out = store
        .write_one(WriteOp::Ack {
            container: T.into(),
            key: k.clone(),
            messages: ids.iter().map(|&id| (id, 4)).collect(),
        })
        .await
        .unwrap();
    match out {
        WriteOutcome::Acked { newly_acked } => newly_acked,
        other => panic!("unexpected {other:?}"),
    }
}

async fn mark(store: &dyn MessageStore, k: &SubscriptionKey) -> i64 {
    store.find_subscription(T, k).await.unwrap().unwrap().marks[0].1
}

async fn pending_ids(store: &dyn MessageStore, k: &SubscriptionKey) -> Vec<i64> {
    store
        .read_pending(T, k, 0, None, 100)
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect()
}

async fn new_subscription_starts_after_existing_messages(t: TestStore) {
    let store = t.open().await;
    let before = store
        .add_messages(vec![message(T, "old", 0)])
        .await
        .unwrap();
    subscribe(&*store, T, &key("s1"), false).await;
    let sub = store
        .find_subscription(T, &key("s1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sub.marks, vec![(None, before[0])]);
    assert!(!sub.prioritized());
    // Subscribing again returns the same subscription, mark unchanged.
    let after = store
        .add_messages(vec![message(T, "new", 0)])
        .await
        .unwrap();
    subscribe(&*store, T, &key("s1"), false).await;
    assert_eq!(mark(&*store, &key("s1")).await, before[0]);
    assert_eq!(pending_ids(&*store, &key("s1")).await, after);
    assert_eq!(store.count_subscriptions(T).await.unwrap(), 1);
}

async fn ids_increase_in_send_order_and_survive_restart(t: TestStore) {
    let store = t.open().await;
    let ids = store
        .add_messages((0..5).map(|i| message(T, &format!("m{i}"), 0)).collect())
        .await
        .unwrap();
    assert!(ids.windows(2).all(|w| w[1] > w[0]), "{ids:?}");
    store.close().await;
    let store = t.open().await;
    assert_eq!(store.last_assigned_id(), ids[4]);
    let more = store.add_messages(vec![message(T, "m5", 0)]).await.unwrap();
    assert!(more[0] > ids[4]);
}

async fn body_bytes_and_headers_round_trip(t: TestStore) {
    let store = t.open().await;
    subscribe(&*store, T, &key("s1"), false).await;
    let mut m = message(T, "x", 0);
    let payload = Payload {
        timestamp_ms: 42,
        headers: vec![
            ("note".into(), "line1\nline2:x\\end".into()),
            ("k:ey".into(), "v".into()),
            ("sp".into(), " padded ".into()),
        ],
        body: vec![0x61, 0, 0x62, 0, 0, 0x63, 0x0a].into(),
    };
    m.payload = Arc::new(payload.clone());
    store.add_messages(vec![m]).await.unwrap();
    store.close().await;
    let store = t.open().await;
    let got = store
        .read_pending(T, &key("s1"), 0, None, 10)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(*got[0].payload, payload);
}

async fn mark_never_moves_backwards(t: TestStore) {
    let store = t.open().await;
    let k = key("s1");
    subscribe(&*store, T, &k, false).await;
    let ids = store
        .add_messages((0..10).map(|i| message(T, &format!("m{i}"), 0)).collect())
        .await
        .unwrap();
    let up_to = |id| WriteOp::AckUpTo {
        container: T.into(),
        key: k.clone(),
        priority: None,
        up_to: id,
    };
    assert_eq!(
        store.write_one(up_to(ids[6])).await.unwrap(),
        WriteOutcome::AckedUpTo { moved: true }
    );
    assert_eq!(
        store.write_one(up_to(ids[2])).await.unwrap(),
        WriteOutcome::AckedUpTo { moved: false }
    );
    assert_eq!(mark(&*store, &k).await, ids[6]);
    // An individual ack below the mark is not new and changes nothing.
    assert_eq!(ack(&*store, &k, &[ids[1]]).await, 0);
    assert_eq!(mark(&*store, &k).await, ids[6]);
    assert_eq!(pending_ids(&*store, &k).await, ids[7..].to_vec());
}

/// The issue's scenario: marks at 0, messages 1-5; ack 2, 4, 5 individually.
async fn individual_acks_never_skip_a_gap(t: TestStore) {
    let store = t.open().await;
    let k = key("s1");
    subscribe(&*store, T, &k, false).await;
    let m0 = mark(&*store, &k).await;
    let ids = store
        .add_messages((1..=5).map(|i| message(T, &format!("m{i}"), 0)).collect())
        .await
        .unwrap();
    assert_eq!(ack(&*store, &k, &[ids[1], ids[3], ids[4]]).await, 3);
    assert_eq!(
        mark(&*store, &k).await,
        m0,
        "the mark must not pass message 1"
    );
    assert_eq!(store.count_individual_acks(T).await.unwrap(), 3);
    // Acking the same message again is not new.
    assert_eq!(ack(&*store, &k, &[ids[3]]).await, 0);
    store.close().await;

    let store = t.open().await;
    assert_eq!(pending_ids(&*store, &k).await, vec![ids[0], ids[2]]);
    ack(&*store, &k, &[ids[0]]).await;
    assert_eq!(mark(&*store, &k).await, ids[1]);
    ack(&*store, &k, &[ids[2]]).await;
    assert_eq!(mark(&*store, &k).await, ids[4]);
    assert_eq!(store.count_individual_acks(T).await.unwrap(), 0);
    assert!(pending_ids(&*store, &k).await.is_empty());
}

/// One ack op of more ids than a window holds (512) and than the list a window is told
/// (512): the mark moves window by window up to the one message left out, and the
/// acks after it are kept individually; acking that message moves the mark to the end.
async fn acks_beyond_one_window_move_the_mark_window_by_window(t: TestStore) {
    let store = t.open().await;
    let k = key("s1");
    subscribe(&*store, T, &k, false).await;
    let ids = store
        .add_messages(
            (1..=1_300)
                .map(|i| message(T, &format!("m{i}"), 0))
                .collect(),
        )
        .await
        .unwrap();
    let mut all_but_700th = ids.clone();
    all_but_700th.remove(699);
    assert_eq!(ack(&*store, &k, &all_but_700th).await, 1_299);
    assert_eq!(
        mark(&*store, &k).await,
        ids[698],
        "up to the message left out"
    );
    assert_eq!(store.count_individual_acks(T).await.unwrap(), 600);
    assert_eq!(ack(&*store, &k, &all_but_700th).await, 0, "nothing new");
    assert_eq!(ack(&*store, &k, &[ids[699]]).await, 1);
    assert_eq!(mark(&*store, &k).await, ids[1_299]);
    assert_eq!(store.count_individual_acks(T).await.unwrap(), 0);
    assert!(pending_ids(&*store, &k).await.is_empty());
}

/// DUR-01 at the store level: acks of high-priority messages with large ids must not
/// move the mark of the low-priority ones.
async fn per_priority_marks_keep_older_low_priority_messages(t: TestStore) {
    let store = t.open().await;
    let k = key("s1");
    subscribe(&*store, T, &k, true).await;
    let sub = store.find_subscription(T, &k).await.unwrap().unwrap();
    assert!(sub.prioritized());
    assert_eq!(sub.marks.len(), 10);
    let ids = store
        .add_messages(vec![
            message_p(T, "L1", 0, 1),
            message_p(T, "L2", 0, 1),
            message_p(T, "H1", 0, 9),
            message_p(T, "H2", 0, 9),
        ])
        .await
        .unwrap();
    let high = store.read_pending(T, &k, 0, Some(9), 10).await.unwrap();
    assert_eq!(
        high.iter().map(|m| m.id).collect::<Vec<_>>(),
        ids[2..].to_vec()
    );
    store
        .write_one(WriteOp::Ack {
            container: T.into(),
            key: k.clone(),
            messages: vec![(ids[2], 9), (ids[3], 9)],
        })
        .await
        .unwrap();
    store
        .write_one(WriteOp::Cleanup {
            container: T.into(),
            limit: 100,
            after: 0,
            orphans_up_to: None,
        })
        .await
        .unwrap();
    store.close().await;
    let store = t.open().await;
    let sub = store.find_subscription(T, &k).await.unwrap().unwrap();
    assert_eq!(sub.mark_for(9), ids[3]);
    assert!(sub.mark_for(1) < ids[0]);
    assert_eq!(pending_ids(&*store, &k).await, ids[..2].to_vec());
    assert_eq!(
        store.count_messages(T).await.unwrap(),
        2,
        "L1 and L2 stay stored"
    );
}

async fn prepared_messages_are_invisible_until_commit(t: TestStore) {
    let store = t.open().await;
    let k = key("s1");
    subscribe(&*store, T, &k, false).await;
    let mut tx_message = message(T, "tx", 0);
    tx_message.xid = Some("xid-1".into());
    let mut rolled = message(T, "rolled", 0);
    rolled.xid = Some("xid-2".into());
    let ids = store
        .add_messages(vec![tx_message, message(T, "plain", 0), rolled])
        .await
        .unwrap();
    assert_eq!(pending_ids(&*store, &k).await, vec![ids[1]]);
    assert_eq!(store.browse(T, 0, 10).await.unwrap().len(), 1);
    // The consumer acks what it saw; the prepared message stays pending for it.
    ack(&*store, &k, &[ids[1]]).await;
    let out = store
        .write_one(WriteOp::Commit {
            xid: "xid-1".into(),
        })
        .await
        .unwrap();
    let WriteOutcome::Committed(renumbered) = out else {
        panic!("{out:?}")
    };
    assert_eq!(renumbered.len(), 1);
    assert_eq!(renumbered[0].0, ids[0]);
    assert!(
        renumbered[0].1 > ids[2],
        "a committed message gets a new, highest id"
    );
    assert_eq!(pending_ids(&*store, &k).await, vec![renumbered[0].1]);
    assert_eq!(
        store
            .write_one(WriteOp::Rollback {
                xid: "xid-2".into()
            })
            .await
            .unwrap(),
        WriteOutcome::Deleted(1)
    );
    assert_eq!(store.count_messages(T).await.unwrap(), 2);
    // Transactions a stopped broker left open are rolled back by prefix, others kept.
    let mut left = message(T, "left", 0);
    left.xid = Some("stomp:ebb-1:tx1".into());
    let mut kept = message(T, "kept", 0);
    kept.xid = Some("xa:other".into());
    store.add_messages(vec![left, kept]).await.unwrap();
    let out = store
        .write_one(WriteOp::RollbackAbandoned {
            xid_prefix: "stomp:".into(),
        })
        .await
        .unwrap();
    assert_eq!(out, WriteOutcome::Deleted(1));
    assert_eq!(store.count_messages(T).await.unwrap(), 3);
}

/// The prefix of [`WriteOp::RollbackAbandoned`] is matched literally: `_` and `%` (and
/// the store's `LIKE` escape character, `!`) are themselves, not wildcards.
async fn rollback_abandoned_takes_the_prefix_literally(t: TestStore) {
    let store = t.open().await;
    // (prefix, xids it rolls back, xids it keeps)
    let cases: [(&str, &[&str], &[&str]); 5] = [
        (
            "my_app:",
            &["my_app:1", "my_app:", "my_app:2_%"],
            &[
                "myXapp:1",
                "my%app:1",
                "myapp:1",
                "my_app",
                "x:my_app:1",
                "MY_APP:1",
            ],
        ),
        (
            "50%:",
            &["50%:a", "50%:"],
            &["50:a", "500:a", "50%", "50%x:a"],
        ),
        ("a!_", &["a!_1"], &["a!x1", "a_1", "a!1", "a!!_1"]),
        ("%", &["%", "%x"], &["x%", "_x"]),
        ("_", &["_", "_x"], &["x", "x_", "%x"]),
    ];
    for (prefix, rolled, kept) in cases {
        let batch = rolled
            .iter()
            .chain(kept)
            .map(|xid| ebb_store::test_util::prepared(T, "tx", 0, xid))
            .collect();
        store.add_messages(batch).await.unwrap();
        let out = store
            .write_one(WriteOp::RollbackAbandoned {
                xid_prefix: prefix.into(),
            })
            .await
            .unwrap();
        assert_eq!(out, WriteOutcome::Deleted(rolled.len() as u64), "{prefix}");
        // What is left of each transaction is what its commit makes visible.
        for xid in rolled.iter().chain(kept) {
            let out = store
                .write_one(WriteOp::Commit {
                    xid: xid.to_string(),
                })
                .await
                .unwrap();
            let WriteOutcome::Committed(renumbered) = out else {
                panic!("{out:?}")
            };
            let left = usize::from(kept.contains(xid));
            assert_eq!(renumbered.len(), left, "prefix {prefix}, xid {xid}");
        }
    }
    let total: usize = cases.iter().map(|c| c.2.len()).sum();
    assert_eq!(store.count_messages(T).await.unwrap(), total as u64);
}

async fn cleanup_deletes_only_what_every_subscription_acked(t: TestStore) {
    let store = t.open().await;
    let (a, b) = (key("a"), key("b"));
    subscribe(&*store, T, &a, false).await;
    subscribe(&*store, T, &b, false).await;
    let ids = store
        .add_messages((0..25).map(|i| message(T, &format!("m{i}"), 0)).collect())
        .await
        .unwrap();
    let mut prepared = message(T, "prepared", 0);
    prepared.xid = Some("x".into());
    store.add_messages(vec![prepared]).await.unwrap();
    let up_to = |k: &SubscriptionKey, id| WriteOp::AckUpTo {
        container: T.into(),
        key: k.clone(),
        priority: None,
        up_to: id,
    };
    store.write_one(up_to(&a, ids[24])).await.unwrap();
    store.write_one(up_to(&b, ids[19])).await.unwrap();
    let cleanup = |after| WriteOp::Cleanup {
        container: T.into(),
        limit: 8,
        after,
        orphans_up_to: None,
    };
    // Each batch goes on after the point the one before reached: the last row it
    // deleted while batches are full, then b's mark, the lower one.
    let (mut deleted, mut reached, mut after) = (Vec::new(), Vec::new(), 0);
    loop {
        let out = store.write_one(cleanup(after)).await.unwrap();
        let (n, up_to) = out.cleaned_up().unwrap();
        reached.push(up_to);
        after = up_to;
        if n == 0 {
            break;
        }
        deleted.push(n);
    }
    assert_eq!(deleted, vec![8, 8, 4], "bounded batches of at most 8");
    assert_eq!(reached, vec![ids[7], ids[15], ids[19], ids[19]]);
    // 5 messages b has not acked, and the prepared one.
    assert_eq!(store.count_messages(T).await.unwrap(), 6);
    // Rows at or below `after` are not looked at: with b's mark moved on, a batch
    // after ids[21] deletes ids[22..=24] only; one from 0 takes the other two.
    store.write_one(up_to(&b, ids[24])).await.unwrap();
    let out = store.write_one(cleanup(ids[21])).await.unwrap();
    assert_eq!(out.cleaned_up().unwrap(), (3, ids[24]));
    assert_eq!(store.count_messages(T).await.unwrap(), 3);
    let out = store.write_one(cleanup(0)).await.unwrap();
    assert_eq!(out.cleaned_up().unwrap(), (2, ids[24]));
    assert_eq!(
        store.count_messages(T).await.unwrap(),
        1,
        "the prepared one"
    );
    // A container without durable subscriptions is left alone.
    store
        .add_messages(vec![message("topic://nosubs", "m", 0)])
        .await
        .unwrap();
    store
        .write_one(WriteOp::Cleanup {
            container: "topic://nosubs".into(),
            limit: 10,
            after: 0,
            orphans_up_to: None,
        })
        .await
        .unwrap();
    assert_eq!(store.count_messages("topic://nosubs").await.unwrap(), 1);
    // ... unless the caller says its last subscription is gone: then everything up to
    // the given id goes, except a prepared message.
    let mut prepared = message("topic://nosubs", "p", 0);
    prepared.xid = Some("x2".into());
    store.add_messages(vec![prepared]).await.unwrap();
    let out = store
        .write_one(WriteOp::Cleanup {
            container: "topic://nosubs".into(),
            limit: 10,
            after: 0,
            orphans_up_to: Some(store.last_assigned_id()),
        })
        .await
        .unwrap();
    assert_eq!(
        out,
        WriteOutcome::CleanedUp {
            deleted: 1,
            reached: store.last_assigned_id()
        }
    );
    assert_eq!(store.count_messages("topic://nosubs").await.unwrap(), 1);
}

/// DUR-03 at the store level: a subscription with no stored messages survives a
/// restart, and messages sent after it are kept for it.
async fn subscription_survives_restart_without_messages(t: TestStore) {
    let store = t.open().await;
    let k = key("r");
    subscribe(&*store, T, &k, false).await;
    let ids = store
        .add_messages((0..10).map(|i| message(T, &format!("m{i}"), 0)).collect())
        .await
        .unwrap();
    ack(&*store, &k, &ids).await;
    store
        .write_one(WriteOp::Cleanup {
            container: T.into(),
            limit: 100,
            after: 0,
            orphans_up_to: None,
        })
        .await
        .unwrap();
    assert_eq!(store.count_messages(T).await.unwrap(), 0);
    store.close().await;

    let store = t.open().await;
    let new = store
        .add_messages((0..10).map(|i| message(T, &format!("n{i}"), 0)).collect())
        .await
        .unwrap();
    store
        .write_one(WriteOp::Cleanup {
            container: T.into(),
            limit: 100,
            after: 0,
            orphans_up_to: None,
        })
        .await
        .unwrap();
    assert_eq!(store.count_messages(T).await.unwrap(), 10);
    assert_eq!(pending_ids(&*store, &k).await, new);
}

async fn unsubscribe_removes_marks_and_acks(t: TestStore) {
    let store = t.open().await;
    let k = key("s1");
    subscribe(&*store, T, &k, false).await;
    let ids = store
        .add_messages(vec![message(T, "a", 0), message(T, "b", 0)])
        .await
        .unwrap();
    ack(&*store, &k, &[ids[1]]).await;
    let out = store
        .write_one(WriteOp::Unsubscribe {
            container: T.into(),
            key: k.clone(),
        })
        .await
        .unwrap();
    assert_eq!(out, WriteOutcome::Unsubscribed(true));
    assert!(store.find_subscription(T, &k).await.unwrap().is_none());
    assert_eq!(store.count_individual_acks(T).await.unwrap(), 0);
    assert!(store
        .read_pending(T, &k, 0, None, 10)
        .await
        .unwrap()
        .is_empty());
}

async fn subscriptions_are_listed_in_bounded_pages(t: TestStore) {
    let store = t.open().await;
    for i in 0..7 {
        subscribe(&*store, T, &key(&format!("s{i}")), i % 2 == 0).await;
    }
    let mut seen = Vec::new();
    let mut after: Option<SubscriptionKey> = None;
    loop {
        let page = store
            .list_subscriptions(T, after.as_ref(), 3)
            .await
            .unwrap();
        assert!(page.len() <= 3);
        let Some(last) = page.last() else { break };
        after = Some(last.key.clone());
        seen.extend(
            page.iter()
                .map(|s| (s.key.subscription_name.clone(), s.marks.len())),
        );
    }
    let expected: Vec<_> = (0..7)
        .map(|i| (format!("s{i}"), if i % 2 == 0 { 10 } else { 1 }))
        .collect();
    assert_eq!(seen, expected);
}

async fn has_expiring_sees_only_messages_with_an_expiration(t: TestStore) {
    let store = t.open().await;
    assert!(!store.has_expiring(T).await.unwrap());
    store.add_messages(vec![message(T, "a", 0)]).await.unwrap();
    assert!(!store.has_expiring(T).await.unwrap());
    assert_eq!(store.next_expiration(T).await.unwrap(), None);
    let later = now_ms() + 60_000;
    store
        .add_messages(vec![message(T, "b", later), message(T, "c", later + 5)])
        .await
        .unwrap();
    assert!(store.has_expiring(T).await.unwrap());
    assert_eq!(store.next_expiration(T).await.unwrap(), Some(later));
    // The earliest, not the first stored.
    store
        .add_messages(vec![message(T, "d", later - 7)])
        .await
        .unwrap();
    assert_eq!(store.next_expiration(T).await.unwrap(), Some(later - 7));
    assert!(!store.has_expiring("topic://other").await.unwrap());
    assert_eq!(store.next_expiration("topic://other").await.unwrap(), None);
    let _ = EXPIRED;
}

async fn table_prefix_keeps_stores_apart(t: TestStore) {
    let store = t.open().await;
    store.add_messages(vec![message(T, "a", 0)]).await.unwrap();
    let other = ebb_store::open(
        &t.url,
        &StoreOptions {
            table_prefix: "other_".into(),
            ..t.options.clone()
        },
    )
    .await
    .unwrap();
    assert_eq!(other.count_messages(T).await.unwrap(), 0);
    assert_eq!(store.count_messages(T).await.unwrap(), 1);
    let bad = ebb_store::open(
        &t.url,
        &StoreOptions {
            table_prefix: "x;drop".into(),
            ..t.options.clone()
        },
    )
    .await;
    assert!(matches!(bad, Err(StoreError::InvalidName { .. })));
}

/// One broker per store: a second lock on the same store is refused until the first
/// holder closes.
async fn exclusive_lock_admits_one_holder(t: TestStore) {
    let first = t.open().await;
    first.lock_exclusive().await.unwrap();
    first.lock_exclusive().await.unwrap(); // again by the holder: fine
    let second = t.open().await;
    let err = second.lock_exclusive().await.unwrap_err();
    assert!(matches!(err, StoreError::Locked(_)), "{err:?}");
    assert!(
        err.to_string().contains("in use by another broker"),
        "{err}"
    );
    first.close().await;
    second.lock_exclusive().await.unwrap();
    second.close().await;
}

async fn closed_store_says_so(t: TestStore) {
    let store = t.open().await;
    store.close().await;
    let err = store
        .add_messages(vec![message(T, "a", 0)])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Closed), "{err:?}");
}

on_every_backend!(
    new_subscription_starts_after_existing_messages,
    ids_increase_in_send_order_and_survive_restart,
    body_bytes_and_headers_round_trip,
    mark_never_moves_backwards,
    individual_acks_never_skip_a_gap,
    acks_beyond_one_window_move_the_mark_window_by_window,
    per_priority_marks_keep_older_low_priority_messages,
    prepared_messages_are_invisible_until_commit,
    rollback_abandoned_takes_the_prefix_literally,
    cleanup_deletes_only_what_every_subscription_acked,
    subscription_survives_restart_without_messages,
    unsubscribe_removes_marks_and_acks,
    subscriptions_are_listed_in_bounded_pages,
    has_expiring_sees_only_messages_with_an_expiration,
    table_prefix_keeps_stores_apart,
    closed_store_says_so,
    exclusive_lock_admits_one_holder,
);

#[tokio::test]
async fn unusable_urls_name_the_url_and_the_reason() {
    let err = ebb_store::open("mysql://u:pw@h/db", &StoreOptions::default())
        .await
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(text.contains("mysql://u:***@h/db"), "{text}");
    assert!(text.contains("expected sqlite://"), "{text}");

    let err = ebb_store::open(
        "postgres://postgres:pw@127.0.0.1:1/test",
        &StoreOptions {
            acquire_timeout_ms: 2_000,
            ..StoreOptions::default()
        },
    )
    .await
    .err()
    .unwrap();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{text}");
    assert!(
        text.contains("postgres://postgres:***@127.0.0.1:1/test"),
        "{text}"
    );
    assert!(!text.contains("pw@"), "{text}");

    let err = ebb_store::open("sqlite:///proc/no/such/dir/x.db", &StoreOptions::default())
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("/proc/no/such/dir"), "{err}");
}
