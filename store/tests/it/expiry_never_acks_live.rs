//! `recover_expired` returns, per subscription, only the run of expired messages
//! directly after its mark, so acking it can never move a mark over a live message
//! (the ActiveMQ JDBC data loss). Mirrors ActiveMQ's `JDBCRecoverExpiredTest`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ebb_store::test_util::{message, message_p, now_ms, on_every_backend, TestStore, EXPIRED};
use ebb_store::{MessageStore, MessageStoreExt, SubscriptionKey, WriteOp, WriteOutcome};

const T: &str = "topic://expiry";

fn key(name: &str) -> SubscriptionKey {
    SubscriptionKey::new("clientId", name)
}

async fn subscribe(store: &dyn MessageStore, name: &str, prioritized: bool) -> SubscriptionKey {
    let k = key(name);
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

/// Ids per subscription name.
async fn expired(
    store: &dyn MessageStore,
    subs: &[SubscriptionKey],
    limit: u32,
) -> BTreeMap<String, Vec<i64>> {
    let page = store
        .recover_expired(T, subs, now_ms(), limit)
        .await
        .unwrap();
    assert!(page.rows <= limit as usize);
    page.by_subscription
        .into_iter()
        .map(|(k, v)| (k.subscription_name, v.iter().map(|m| m.id).collect()))
        .collect()
}

/// Acks messages for a subscription as the expiry task would; returns how many were new.
async fn expire_ack(store: &dyn MessageStore, k: &SubscriptionKey, ids: &[(i64, u8)]) -> u64 {
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

fn at4(ids: &[i64]) -> Vec<(i64, u8)> {
    ids.iter().map(|&id| (id, 4)).collect()
}

fn map(entries: &[(&str, &[i64])]) -> BTreeMap<String, Vec<i64>> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}

/// The first case: message 1 (no TTL) blocks 2 and 3 until it is acked.
async fn live_message_at_the_mark_blocks_the_run(t: TestStore) {
    let store = t.open().await;
    let s1 = subscribe(&*store, "sub1", false).await;
    let ids = store
        .add_messages(vec![
            message(T, "1", 0),
            message(T, "2", EXPIRED),
            message(T, "3", EXPIRED),
        ])
        .await
        .unwrap();
    assert!(expired(&*store, std::slice::from_ref(&s1), 400)
        .await
        .is_empty());
    expire_ack(&*store, &s1, &at4(&ids[..1])).await;
    assert_eq!(
        expired(&*store, std::slice::from_ref(&s1), 400).await,
        map(&[("sub1", &ids[1..])])
    );
}

/// `testRecoverExpiredStopsAtFirstNonExpired`.
async fn run_stops_at_first_non_expired(t: TestStore) {
    let store = t.open().await;
    let subs = [
        subscribe(&*store, "sub1", false).await,
        subscribe(&*store, "sub2", false).await,
    ];
    assert!(expired(&*store, &subs, 400).await.is_empty());
    let f = store
        .add_messages(
            (0..3)
                .map(|i| message(T, &format!("F{i}"), EXPIRED))
                .collect(),
        )
        .await
        .unwrap();
    let n = store.add_messages(vec![message(T, "N", 0)]).await.unwrap();
    let l = store
        .add_messages(
            (0..3)
                .map(|i| message(T, &format!("L{i}"), EXPIRED))
                .collect(),
        )
        .await
        .unwrap();
    assert_eq!(
        expired(&*store, &subs, 400).await,
        map(&[("sub1", &f), ("sub2", &f)])
    );
    assert_eq!(expire_ack(&*store, &subs[0], &at4(&f)).await, 3);
    assert_eq!(expired(&*store, &subs, 400).await, map(&[("sub2", &f)]));
    expire_ack(&*store, &subs[0], &at4(&n)).await;
    assert_eq!(
        expired(&*store, &subs, 400).await,
        map(&[("sub1", &l), ("sub2", &f)])
    );
}

/// `testNonExpiredHeadBlocksExpiry`: 50 live then 50 expired: nothing.
async fn live_head_blocks_everything_behind_it(t: TestStore) {
    let store = t.open().await;
    let subs = [subscribe(&*store, "sub1", false).await];
    store
        .add_messages((0..50).map(|i| message(T, &format!("n{i}"), 0)).collect())
        .await
        .unwrap();
    store
        .add_messages(
            (0..50)
                .map(|i| message(T, &format!("e{i}"), EXPIRED))
                .collect(),
        )
        .await
        .unwrap();
    let before = store.stats().snapshot();
    assert!(expired(&*store, &subs, 400).await.is_empty());
    assert_eq!(store.stats().snapshot().message_rows, before.message_rows);
}

/// The page-limit case: 3 subscriptions, 1,000 expired, limit 400: each call
/// loads at most 400 rows, and calls with acks in between hand every subscription all
/// 1,000 exactly once.
async fn pages_are_bounded_and_cover_everything_once(t: TestStore) {
    let store = t.open().await;
    let subs: Vec<_> = futures_join(&*store, &["a", "b", "c"]).await;
    let ids = store
        .add_messages(
            (0..1000)
                .map(|i| message(T, &format!("e{i}"), EXPIRED))
                .collect(),
        )
        .await
        .unwrap();
    // Stagger the marks so pages differ per subscription.
    expire_ack(&*store, &subs[1], &at4(&ids[..150])).await;
    let mut seen: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    seen.insert("b".into(), ids[..150].to_vec());
    let mut calls = 0;
    loop {
        let page = store
            .recover_expired(T, &subs, now_ms(), 400)
            .await
            .unwrap();
        calls += 1;
        assert!(page.rows <= 400, "a page loaded {} rows", page.rows);
        if page.by_subscription.is_empty() {
            assert!(!page.more);
            break;
        }
        for (k, messages) in page.by_subscription {
            let got: Vec<i64> = messages.iter().map(|m| m.id).collect();
            assert_eq!(expire_ack(&*store, &k, &at4(&got)).await, got.len() as u64);
            seen.entry(k.subscription_name).or_default().extend(got);
        }
        assert!(calls < 20, "expiry does not converge");
    }
    for name in ["a", "b", "c"] {
        let got = &seen[name];
        assert_eq!(
            got, &ids,
            "subscription {name} got every message exactly once, in order"
        );
    }
    let distinct: BTreeSet<i64> = seen.values().flatten().copied().collect();
    assert_eq!(distinct.len(), 1000);
}

async fn futures_join(store: &dyn MessageStore, names: &[&str]) -> Vec<SubscriptionKey> {
    let mut out = Vec::new();
    for n in names {
        out.push(subscribe(store, n, false).await);
    }
    out
}

/// `testRecoverExpiredMax`.
async fn limit_counts_rows_for_the_whole_call(t: TestStore) {
    let store = t.open().await;
    let subs = [
        subscribe(&*store, "sub1", false).await,
        subscribe(&*store, "sub2", false).await,
    ];
    let ids = store
        .add_messages(
            (0..100)
                .map(|i| message(T, &format!("e{i}"), EXPIRED))
                .collect(),
        )
        .await
        .unwrap();
    let page = store.recover_expired(T, &subs, now_ms(), 30).await.unwrap();
    assert_eq!(page.rows, 30);
    assert!(page.more);
    for list in page.by_subscription.values() {
        assert_eq!(
            list.iter().map(|m| m.id).collect::<Vec<_>>(),
            ids[..30].to_vec()
        );
    }
    expire_ack(&*store, &subs[0], &at4(&ids[..25])).await;
    let got = expired(&*store, &subs, 100).await;
    assert_eq!(got["sub1"], ids[25..].to_vec());
    assert_eq!(got["sub2"], ids.to_vec());
}

/// `testRecoverExpiredSubSet`.
async fn only_requested_subscriptions_are_answered(t: TestStore) {
    let store = t.open().await;
    let s1 = subscribe(&*store, "sub1", false).await;
    let s2 = subscribe(&*store, "sub2", false).await;
    let ids = store
        .add_messages(
            (0..10)
                .map(|i| message(T, &format!("e{i}"), EXPIRED))
                .collect(),
        )
        .await
        .unwrap();
    assert_eq!(
        expired(&*store, std::slice::from_ref(&s2), 400).await,
        map(&[("sub2", &ids)])
    );
    expire_ack(&*store, &s2, &at4(&ids[..1])).await;
    assert_eq!(
        expired(&*store, std::slice::from_ref(&s2), 400).await,
        map(&[("sub2", &ids[1..])])
    );
    assert_eq!(
        expired(&*store, std::slice::from_ref(&s1), 400).await,
        map(&[("sub1", &ids)])
    );
    assert!(expired(&*store, &[key("sub3")], 400).await.is_empty());
    assert_eq!(expired(&*store, &[s1, s2, key("sub3")], 400).await.len(), 2);
}

/// `testRecoverExpiredPrioritized`: the live priority-4 message blocks only priority 4.
async fn prioritized_runs_are_per_priority(t: TestStore) {
    let store = t.open().await;
    let subs = [
        subscribe(&*store, "sub1", true).await,
        subscribe(&*store, "sub2", true).await,
    ];
    let ids = store
        .add_messages(vec![
            message_p(T, "live4", 0, 4),
            message_p(T, "e9a", EXPIRED, 9),
            message_p(T, "e9b", EXPIRED, 9),
            message_p(T, "e4a", EXPIRED, 4),
            message_p(T, "e4b", EXPIRED, 4),
        ])
        .await
        .unwrap();
    assert_eq!(
        expired(&*store, &subs, 400).await,
        map(&[("sub1", &ids[1..3]), ("sub2", &ids[1..3])])
    );
    // Acking the priority-9 run moves only the priority-9 mark.
    let nine: Vec<(i64, u8)> = ids[1..3].iter().map(|&id| (id, 9)).collect();
    assert_eq!(expire_ack(&*store, &subs[0], &nine).await, 2);
    let sub = store.find_subscription(T, &subs[0]).await.unwrap().unwrap();
    assert_eq!(sub.mark_for(9), ids[2]);
    assert!(sub.mark_for(4) < ids[0]);
    // Once the live priority-4 message is acked, the priority-4 run follows.
    expire_ack(&*store, &subs[0], &at4(&ids[..1])).await;
    assert_eq!(
        expired(&*store, &subs[..1], 400).await,
        map(&[("sub1", &ids[3..])])
    );
}

/// `testPreparedTransactionBlocksExpiry`.
async fn prepared_transaction_stops_the_run(t: TestStore) {
    let store = t.open().await;
    let subs = [
        subscribe(&*store, "sub1", false).await,
        subscribe(&*store, "sub2", false).await,
    ];
    let b = store
        .add_messages(vec![message(T, "B1", EXPIRED), message(T, "B2", EXPIRED)])
        .await
        .unwrap();
    let mut prepared = message(T, "X", EXPIRED);
    prepared.xid = Some("xa-1".into());
    store.add_messages(vec![prepared]).await.unwrap();
    store
        .add_messages(vec![message(T, "A1", EXPIRED), message(T, "A2", EXPIRED)])
        .await
        .unwrap();
    assert_eq!(
        expired(&*store, &subs, 400).await,
        map(&[("sub1", &b), ("sub2", &b)])
    );
    store
        .write_one(WriteOp::Commit { xid: "xa-1".into() })
        .await
        .unwrap();
    let got = expired(&*store, &subs, 400).await;
    assert_eq!(got["sub1"].len(), 5);
    assert_eq!(got["sub2"].len(), 5);
}

/// `testRecoverExpiredRecoveryListener`: a message needed by several subscriptions is
/// loaded once and shared.
async fn shared_messages_are_loaded_once(t: TestStore) {
    let store = t.open().await;
    let subs = [
        subscribe(&*store, "sub1", false).await,
        subscribe(&*store, "sub2", false).await,
    ];
    store
        .add_messages(
            (0..10)
                .map(|i| message(T, &format!("e{i}"), EXPIRED))
                .collect(),
        )
        .await
        .unwrap();
    let before = store.stats().snapshot();
    let page = store
        .recover_expired(T, &subs, now_ms(), 400)
        .await
        .unwrap();
    let after = store.stats().snapshot();
    assert_eq!(page.rows, 10);
    assert_eq!(
        after.message_rows - before.message_rows,
        10,
        "each row fetched once"
    );
    let a = &page.by_subscription[&subs[0]];
    let b = &page.by_subscription[&subs[1]];
    assert_eq!(a.len(), 10);
    assert!(
        a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y)),
        "one body, shared"
    );
}

/// Individually acked live messages do not stop the run; acking the run then closes
/// the gap and moves the mark over both.
async fn individually_acked_live_message_does_not_block(t: TestStore) {
    let store = t.open().await;
    let s1 = subscribe(&*store, "sub1", false).await;
    let ids = store
        .add_messages(vec![
            message(T, "live", 0),
            message(T, "e1", EXPIRED),
            message(T, "e2", EXPIRED),
            message(T, "live2", 0),
        ])
        .await
        .unwrap();
    expire_ack(&*store, &s1, &at4(&ids[..1])).await;
    assert_eq!(
        expired(&*store, std::slice::from_ref(&s1), 400).await,
        map(&[("sub1", &ids[1..3])])
    );
    expire_ack(&*store, &s1, &at4(&ids[1..])).await;
    assert_eq!(mark_of(&*store, &s1).await, ids[3]);
    // Out of order: a live message between two expired ones is acked individually
    // first; it neither stops the run nor is returned in it.
    let more = store
        .add_messages(vec![
            message(T, "e3", EXPIRED),
            message(T, "live3", 0),
            message(T, "e4", EXPIRED),
        ])
        .await
        .unwrap();
    assert_eq!(expire_ack(&*store, &s1, &at4(&more[1..2])).await, 1);
    assert_eq!(mark_of(&*store, &s1).await, ids[3], "e3 is not acked yet");
    assert_eq!(
        expired(&*store, std::slice::from_ref(&s1), 400).await,
        map(&[("sub1", &[more[0], more[2]])])
    );
    assert_eq!(expire_ack(&*store, &s1, &at4(&[more[0], more[2]])).await, 2);
    assert_eq!(mark_of(&*store, &s1).await, more[2]);
    assert_eq!(store.count_individual_acks(T).await.unwrap(), 0);
}

async fn mark_of(store: &dyn MessageStore, k: &SubscriptionKey) -> i64 {
    store.find_subscription(T, k).await.unwrap().unwrap().marks[0].1
}

/// An expired message that the subscription had already acked individually is
/// returned in its run, but acking it again is not counted as new.
async fn already_acked_expired_messages_are_not_counted_twice(t: TestStore) {
    let store = t.open().await;
    let s1 = subscribe(&*store, "sub1", false).await;
    let ids = store
        .add_messages(vec![
            message(T, "live", 0),
            message(T, "e1", EXPIRED),
            message(T, "e2", EXPIRED),
        ])
        .await
        .unwrap();
    assert_eq!(expire_ack(&*store, &s1, &at4(&ids[2..])).await, 1);
    expire_ack(&*store, &s1, &at4(&ids[..1])).await;
    let got = expired(&*store, std::slice::from_ref(&s1), 400).await;
    assert_eq!(got["sub1"], ids[1..].to_vec());
    assert_eq!(expire_ack(&*store, &s1, &at4(&got["sub1"])).await, 1);
    assert!(expired(&*store, &[s1], 400).await.is_empty());
}

on_every_backend!(
    live_message_at_the_mark_blocks_the_run,
    run_stops_at_first_non_expired,
    live_head_blocks_everything_behind_it,
    pages_are_bounded_and_cover_everything_once,
    limit_counts_rows_for_the_whole_call,
    only_requested_subscriptions_are_answered,
    prioritized_runs_are_per_priority,
    prepared_transaction_stops_the_run,
    shared_messages_are_loaded_once,
    individually_acked_live_message_does_not_block,
    already_acked_expired_messages_are_not_counted_twice,
);
