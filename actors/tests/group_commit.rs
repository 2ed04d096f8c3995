//! The store actor batches writes that arrive while a transaction is in flight into
//! the next one (group commit), answers each write only after its commit, and keeps
//! ids in send order for every writer.

use ebb_actors::{StoreActorConfig, StoreHandle};
use ebb_store::test_util::{message, on_every_backend, TestStore};
use ebb_store::{WriteOp, WriteOutcome};

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
                let out = handle
                    .write(WriteOp::Add(message(T, &format!("w{w}-{i}"), 0)))
                    .await
                    .expect("write");
                let WriteOutcome::Added(id) = out else {
                    panic!("{out:?}")
                };
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
            actix_rt::spawn(async move {
                handle
                    .write(WriteOp::Add(message(T, &format!("m{i}"), 0)))
                    .await
            })
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
    let err = handle
        .write(WriteOp::Add(message(T, "late", 0)))
        .await
        .unwrap_err();
    assert!(matches!(err, ebb_actors::ActorError::Closed), "{err:?}");
    let reopened = t.open().await;
    assert_eq!(reopened.count_messages(T).await.unwrap(), committed);
    assert_eq!(
        committed, 20,
        "writes sent before close are flushed, not dropped"
    );
}

on_every_backend!(
    #[actix_rt::test]
    concurrent_writers_share_transactions,
    close_flushes_then_refuses,
);
