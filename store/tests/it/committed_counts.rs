//! [`MessageStore::count_committed`] keeps each container's count until a write
//! changes the container, and what it answers is always a fresh `COUNT`'s answer:
//! after every kind of write that adds, deletes, holds back, releases, commits or moves
//! rows (a commit's containers are known only from its rows), in a batch of several
//! ops, and when nothing was written (then it runs no statement at all).

use ebb_store::test_util::{message, on_every_backend, prepared, Raw, TestStore, EXPIRED};
use ebb_store::{MessageStoreExt, WriteOp};

const Q: &str = "queue://counts";
const DLQ: &str = "queue://DLQ.counts";
const T: &str = "topic://counts";
const IDLE: &str = "queue://counts.idle";

async fn committed_counts_follow_every_write(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    let counts = || store.stats().snapshot().committed_counts;
    // Every container's answer is the fresh count's, and asking again without a write
    // runs no statement.
    macro_rules! same {
        ($after:literal) => {
            for c in [Q, DLQ, T, IDLE] {
                let kept = store.count_committed(c).await.unwrap();
                assert_eq!(kept, raw.count_committed(c).await, "{c} after {}", $after);
                let before = counts();
                assert_eq!(store.count_committed(c).await.unwrap(), kept);
                assert_eq!(counts(), before, "{c} counted again after {}", $after);
            }
        };
    }
    store
        .add_messages((0..3).map(|i| message(IDLE, &format!("i{i}"), 0)).collect())
        .await
        .unwrap();
    same!("nothing");

    let q = store
        .add_messages((0..10).map(|i| message(Q, &format!("m{i}"), 0)).collect())
        .await
        .unwrap();
    let expired = store
        .add_messages(
            (0..4)
                .map(|i| message(Q, &format!("x{i}"), EXPIRED))
                .collect(),
        )
        .await
        .unwrap();
    same!("adds");
    // The idle queue is not counted again for the others' writes.
    let before = counts();
    assert_eq!(store.count_committed(IDLE).await.unwrap(), 3);
    assert_eq!(counts(), before);

    store
        .write_one(WriteOp::Remove {
            container: Q.into(),
            ids: q[..2].to_vec(),
        })
        .await
        .unwrap();
    same!("remove");
    store
        .write_one(WriteOp::ExpireQueue {
            container: Q.into(),
            now_ms: ebb_store::test_util::now_ms(),
            limit: 2,
        })
        .await
        .unwrap();
    same!("queue expiry");
    store
        .write_one(WriteOp::DeadLetter {
            container: Q.into(),
            id: expired[3],
            message: message(DLQ, "dead", 0),
        })
        .await
        .unwrap();
    same!("dead letter");

    // A redelivery held back stays a committed row (its due time written with its
    // count); clearing the hold changes no count either.
    store
        .write_one(WriteOp::Redelivered {
            container: Q.into(),
            id: q[5],
            count: 1,
            hold_until: Some(ebb_store::test_util::now_ms() + 60_000),
        })
        .await
        .unwrap();
    same!("redelivery held back");
    store
        .write_one(WriteOp::Redelivered {
            container: Q.into(),
            id: q[5],
            count: 2,
            hold_until: None,
        })
        .await
        .unwrap();
    same!("release");

    // A transaction: prepared rows are not committed ones; its commit makes them so,
    // in two containers at once; a run of commits is one statement.
    store
        .add_messages(vec![
            prepared(Q, "tx1", 0, "xid-1"),
            prepared(DLQ, "tx2", 0, "xid-1"),
            prepared(Q, "tx3", 0, "xid-2"),
            prepared(T, "tx4", 0, "xid-3"),
        ])
        .await
        .unwrap();
    same!("prepared adds");
    store
        .write_one(WriteOp::Commit {
            xid: "xid-1".into(),
        })
        .await
        .unwrap();
    same!("commit");
    store
        .write(vec![
            WriteOp::Commit {
                xid: "xid-2".into(),
            },
            WriteOp::Commit {
                xid: "xid-3".into(),
            },
        ])
        .await
        .unwrap();
    same!("a run of commits");

    // Topic cleanup after a durable subscription acked everything.
    let key = ebb_store::test_util::subscribe_durable(&*store, T, "c", "s").await;
    let topic = store
        .add_messages((0..5).map(|i| message(T, &format!("t{i}"), 0)).collect())
        .await
        .unwrap();
    same!("topic adds");
    store
        .write(vec![
            WriteOp::AckUpTo {
                container: T.into(),
                key,
                priority: None,
                up_to: topic[4],
            },
            WriteOp::Cleanup {
                container: T.into(),
                limit: 100,
                after: 0,
                orphans_up_to: None,
            },
        ])
        .await
        .unwrap();
    same!("ack and cleanup in one batch");
}

/// A count that a write overtakes is answered but not kept: counts run beside a
/// stream of adds always answer at most what is stored, and once the writes stop,
/// the kept count is the fresh one.
async fn a_count_beside_writes_is_never_kept_stale(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..200 {
                store
                    .add_messages(vec![message(Q, &format!("w{i}"), 0)])
                    .await
                    .unwrap();
            }
        })
    };
    let mut last = 0;
    while !writer.is_finished() {
        let n = store.count_committed(Q).await.unwrap();
        assert!(n >= last && n <= 200, "{n} after {last}");
        last = n;
        tokio::task::yield_now().await;
    }
    writer.await.unwrap();
    assert_eq!(store.count_committed(Q).await.unwrap(), 200);
    assert_eq!(raw.count_committed(Q).await, 200);
}

/// Counts of many containers at once are each container's fresh `COUNT` (prepared
/// rows left out, an empty or unknown container 0, a name given twice answered
/// twice), in the order asked, with one statement per 32 containers not kept, and
/// none for those kept since their last write.
async fn counts_of_many_containers_take_a_statement_per_batch(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    let counts = || store.stats().snapshot().committed_counts;
    let names: Vec<String> = (0..300).map(|i| format!("queue://many.{i:03}")).collect();
    store
        .add_messages(
            names
                .iter()
                .enumerate()
                .flat_map(|(i, n)| (0..i % 4).map(move |j| message(n, &format!("{j}"), 0)))
                .chain([prepared(&names[1], "held", 0, "xid-many")])
                .collect(),
        )
        .await
        .unwrap();
    let mut asked = names.clone();
    asked.push("queue://many.unknown".into());
    asked.push(names[3].clone());
    let before = counts();
    let many = store.count_committed_many(&asked).await.unwrap();
    // 302 names, none kept: 9 batches of 32 and one of 14.
    assert_eq!(counts(), before + 10);
    assert_eq!(many.len(), asked.len());
    for (name, n) in asked.iter().zip(&many) {
        assert_eq!(*n, raw.count_committed(name).await, "{name}");
    }
    assert_eq!(many[1], 1, "the prepared row is not counted");
    assert_eq!(many[300], 0);
    assert_eq!(many[301], 3);
    // Kept now: asked again, nothing runs; one written to is counted alone.
    store
        .add_messages(vec![message(&names[7], "more", 0)])
        .await
        .unwrap();
    let before = counts();
    let again = store.count_committed_many(&asked).await.unwrap();
    assert_eq!(counts(), before + 1);
    assert_eq!(again[7], many[7] + 1);
    assert_eq!(store.count_committed(&names[7]).await.unwrap(), again[7]);
    assert_eq!(counts(), before + 1, "the batch's count is kept");
}

on_every_backend!(
    committed_counts_follow_every_write,
    a_count_beside_writes_is_never_kept_stale,
    counts_of_many_containers_take_a_statement_per_batch,
);
