//! The store actor batches writes that arrive while a transaction is in flight into
//! the next one (group commit), answers each write only after its commit, and keeps
//! ids in send order for every writer. Live writes of every kind share a transaction,
//! housekeeping writes wait behind them in transactions of their own, and each typed
//! write is answered with the value of its own op.

use ebb_actors::{StoreActorConfig, StoreHandle};
use ebb_store::test_util::{message, now_ms, on_every_backend, prepared, TestStore, EXPIRED};
use ebb_store::SubscriptionKey;

const T: &str = "topic://group";
const WRITERS: usize = 64;
const EACH: usize = 50;

async fn concurrent_writers_share_transactions(t: TestStore) {
    let store = t.open().await;
    let handle = StoreHandle::start(store.clone(), StoreActorConfig::default());
    let before = store.stats().snapshot();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let handle = handle.clone();
        tasks.push(actix_rt::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..EACH {
                let id = handle
                    .add(message(T, &format!("w{w}-{i}"), 0))
                    .await
                    .expect("write");
                // Answered after commit: a separate read sees it at once.
                let seen = handle.store().browse(T, id - 1, 1).await.unwrap();
                assert_eq!(seen.first().map(|m| m.id), Some(id));
                ids.push(id);
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let ids = task.await.unwrap();
        assert!(
            ids.windows(2).all(|w| w[1] > w[0]),
            "one writer's ids in send order"
        );
        all.extend(ids);
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), WRITERS * EACH);
    assert_eq!(
        store.count_messages(T).await.unwrap(),
        (WRITERS * EACH) as u64
    );
    let after = store.stats().snapshot();
    let ops = after.write_ops - before.write_ops;
    let transactions = after.write_transactions - before.write_transactions;
    assert_eq!(ops, (WRITERS * EACH) as u64);
    assert!(
        transactions < ops / 2,
        "{transactions} transactions for {ops} writes: writes were not batched"
    );
    handle.close().await.unwrap();
}

async fn close_flushes_then_refuses(t: TestStore) {
    let store = t.open().await;
    let handle = StoreHandle::start(store.clone(), StoreActorConfig::default());
    let pending: Vec<_> = (0..20)
        .map(|i| {
            let handle = handle.clone();
            actix_rt::spawn(async move { handle.add(message(T, &format!("m{i}"), 0)).await })
        })
        .collect();
    actix_rt::task::yield_now().await;
    handle.close().await.unwrap();
    let mut committed = 0;
    for p in pending {
        if p.await.unwrap().is_ok() {
            committed += 1;
        }
    }
    let err = handle.add(message(T, "late", 0)).await.unwrap_err();
    assert!(matches!(err, ebb_actors::ActorError::Closed), "{err:?}");
    let reopened = t.open().await;
    assert_eq!(reopened.count_messages(T).await.unwrap(), committed);
    assert_eq!(
        committed, 20,
        "writes sent before close are flushed, not dropped"
    );
}

async fn every_typed_write_answers_its_own_value(t: TestStore) {
    const Q: &str = "queue://typed";
    const DLQ: &str = "queue://DLQ.typed";
    let store = t.open().await;
    let handle = StoreHandle::start(store.clone(), StoreActorConfig::default());
    let key = |name: &str| SubscriptionKey::new("c1", name);

    // Set-up, one write at a time.
    let sub = handle.subscribe(T.into(), key("s1"), None, false).await;
    let sub = sub.unwrap();
    assert_eq!((sub.container.as_str(), &sub.key), (T, &key("s1")));
    assert_eq!(sub.selector, None);
    assert_eq!(sub.marks, vec![(None, store.last_assigned_id())]);
    handle
        .subscribe(T.into(), key("gone"), None, false)
        .await
        .unwrap();
    let mut topic = Vec::new();
    for body in ["t0", "t1", "t2"] {
        topic.push(handle.add(message(T, body, 0)).await.unwrap());
    }
    assert!(topic.windows(2).all(|w| w[1] > w[0]), "{topic:?}");
    let to_commit = handle.add(prepared(T, "c", 0, "tx-c")).await.unwrap();
    handle.add(prepared(T, "r", 0, "tx-r")).await.unwrap();
    handle.add(prepared(T, "a", 0, "my_app:1")).await.unwrap();
    let mut queue = Vec::new();
    for (body, expiration) in [("q0", EXPIRED), ("q1", EXPIRED), ("q2", 0), ("q3", 0)] {
        queue.push(handle.add(message(Q, body, expiration)).await.unwrap());
    }

    // Every kind at once. The two in-order writes are queued when they are made, the
    // others when first polled, in argument order; all but the first arrive while the
    // first one's transaction is in flight, so they share the next.
    let before = store.stats().snapshot();
    let late = handle.add_in_order(message(T, "late", 0));
    let moved = handle.dead_letter_in_order(Q.into(), queue[3], message(DLQ, "dead", 0));
    let (
        late,
        moved,
        acked,
        up_to,
        gone,
        never,
        renumbered,
        rolled,
        abandoned,
        removed,
        expired,
        not_moved,
        cleaned,
    ) = futures::join!(
        late,
        moved,
        handle.ack(T.into(), key("s1"), vec![(topic[0], 4), (topic[1], 4)]),
        handle.ack_up_to(T.into(), key("s1"), None, topic[2]),
        handle.unsubscribe(T.into(), key("gone")),
        handle.unsubscribe(T.into(), key("never")),
        handle.commit("tx-c".into()),
        handle.rollback("tx-r".into()),
        handle.rollback_abandoned("my_app:".into()),
        handle.remove(Q.into(), vec![queue[2]]),
        handle.expire_queue(Q.into(), now_ms(), 10),
        handle.dead_letter(Q.into(), queue[2], message(DLQ, "twice", 0)),
        handle.cleanup(T.into(), 100, 0, None),
    );
    let after = store.stats().snapshot();

    let (late, moved) = (
        late.unwrap(),
        moved.unwrap().id().expect("q3 was there to move"),
    );
    assert!(late > queue[3] && moved > late, "{late} {moved}");
    assert_eq!(acked.unwrap(), 2);
    assert!(up_to.unwrap(), "the mark moves to {}", topic[2]);
    assert!(gone.unwrap());
    assert!(!never.unwrap());
    let renumbered = renumbered.unwrap();
    assert_eq!(renumbered.len(), 1);
    assert_eq!(renumbered[0].0, to_commit);
    assert!(renumbered[0].1 > moved, "{renumbered:?}");
    assert_eq!(rolled.unwrap(), 1);
    assert_eq!(abandoned.unwrap(), 1);
    assert_eq!(removed.unwrap(), 1);
    assert_eq!(expired.unwrap(), vec![queue[0], queue[1]]);
    assert_eq!(
        not_moved.unwrap(),
        ebb_store::Moved::Gone,
        "q2 was removed before"
    );
    assert_eq!(
        cleaned.unwrap(),
        (3, topic[2]),
        "t0..t2: acked by s1, the one subscription left"
    );

    assert_eq!(after.write_ops - before.write_ops, 13);
    let transactions = after.write_transactions - before.write_transactions;
    // The 11 live writes share at most two transactions; the two housekeeping ones
    // (`expire_queue`, `cleanup`) share one of their own, never a live one's.
    assert!(
        transactions <= 3,
        "{transactions} transactions for 13 writes sent at once"
    );
    let dead: Vec<i64> = store
        .browse(DLQ, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(dead, vec![moved]);
    assert_eq!(store.count_messages(Q).await.unwrap(), 0);
    assert_eq!(
        store.count_messages(T).await.unwrap(),
        2,
        "late and the committed one"
    );
    handle.close().await.unwrap();
}

/// Live writes go before housekeeping and never share its transaction: a cleanup of
/// every orphan (`orphans_up_to` the largest id) queued behind a write in flight and
/// ahead of five more is applied after those five, in a transaction of its own, so it
/// deletes all six. In arrival order it would have deleted one.
async fn live_writes_go_before_housekeeping(t: TestStore) {
    let store = t.open().await;
    let handle = StoreHandle::start(store.clone(), StoreActorConfig::default());
    let before = store.stats().snapshot();
    let live = |n: usize| handle.add(message(T, &format!("live{n}"), 0));
    let (first, cleaned, rest) = futures::join!(
        live(0),
        handle.cleanup(T.into(), 100, 0, Some(i64::MAX)),
        futures::future::join_all((1..6).map(live)),
    );
    first.unwrap();
    assert!(rest.iter().all(|r| r.is_ok()), "{rest:?}");
    assert_eq!(
        cleaned.unwrap().0,
        6,
        "the cleanup ran after every live write"
    );
    assert_eq!(store.count_messages(T).await.unwrap(), 0);
    let after = store.stats().snapshot();
    assert_eq!(
        after.write_transactions - before.write_transactions,
        3,
        "the first write, the five behind it, the cleanup alone"
    );
    handle.close().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    live_writes_go_before_housekeeping,
    concurrent_writers_share_transactions,
    close_flushes_then_refuses,
    every_typed_write_answers_its_own_value,
);
