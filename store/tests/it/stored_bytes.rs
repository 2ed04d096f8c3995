//! [`MessageStore::stored_bytes`] (store usage, checked against `[usage] store`) always
//! equals the bytes of the `msg` column really stored: after every kind of write that
//! adds or deletes rows, after a reopen (when it is read again from the table), and
//! after a write that failed (which changes nothing). Checked against a fresh
//! `SUM(length(msg))` on a connection of its own.

use std::sync::Arc;

use ebb_store::test_util::{message, on_every_backend, prepared, Raw, TestStore, EXPIRED};
use ebb_store::{MessageStore, MessageStoreExt, NewMessage, Payload, WriteOp, WriteOutcome};

const Q: &str = "queue://bytes";
const DLQ: &str = "queue://DLQ.bytes";
const T: &str = "topic://bytes";

/// A message whose encoded size grows with `n`.
fn sized(container: &str, n: usize, expiration: i64) -> NewMessage {
    let mut m = message(container, &format!("s{n}"), expiration);
    m.payload = Arc::new(Payload {
        timestamp_ms: 1,
        headers: vec![("k".into(), "v".repeat(n % 7))],
        body: vec![b'x'; n].into(),
    });
    m
}

async fn write(store: &dyn MessageStore, op: WriteOp) -> WriteOutcome {
    store.write_one(op).await.unwrap()
}

async fn stored_bytes_follows_every_add_and_delete(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    assert_eq!(store.stored_bytes(), 0);
    macro_rules! same {
        ($after:literal) => {
            assert_eq!(
                store.stored_bytes(),
                raw.stored_bytes().await,
                concat!("after ", $after)
            );
        };
    }

    let q = store
        .add_messages((0..40).map(|n| sized(Q, 10 + n * 37, 0)).collect())
        .await
        .unwrap();
    let expired = store
        .add_messages((0..12).map(|n| sized(Q, 3 + n * 101, EXPIRED)).collect())
        .await
        .unwrap();
    assert!(store.stored_bytes() > 40 * 10);
    same!("adds");

    let removed = write(
        &*store,
        WriteOp::Remove {
            container: Q.into(),
            ids: q[..15].to_vec(),
        },
    )
    .await;
    assert_eq!(removed, WriteOutcome::Deleted(15));
    same!("remove");
    let WriteOutcome::Removed(gone) = write(
        &*store,
        WriteOp::ExpireQueue {
            container: Q.into(),
            now_ms: ebb_store::test_util::now_ms(),
            limit: 5,
        },
    )
    .await
    else {
        panic!()
    };
    assert_eq!(gone.len(), 5);
    same!("queue expiry");
    let moved = write(
        &*store,
        WriteOp::DeadLetter {
            container: Q.into(),
            id: expired[11],
            message: sized(DLQ, 999, 0),
        },
    )
    .await;
    assert!(matches!(
        moved,
        WriteOutcome::DeadLettered(ebb_store::Moved::Added(_))
    ));
    same!("dead letter");

    // Topic cleanup after a durable subscription acked everything.
    let key = ebb_store::test_util::subscribe_durable(&*store, T, "c", "s").await;
    let topic = store
        .add_messages((0..9).map(|n| sized(T, 50 + n, 0)).collect())
        .await
        .unwrap();
    write(
        &*store,
        WriteOp::AckUpTo {
            container: T.into(),
            key,
            priority: None,
            up_to: topic[8],
        },
    )
    .await;
    let cleaned = write(
        &*store,
        WriteOp::Cleanup {
            container: T.into(),
            limit: 100,
            after: 0,
            orphans_up_to: None,
        },
    )
    .await;
    assert_eq!(
        cleaned,
        WriteOutcome::CleanedUp {
            deleted: 9,
            reached: topic[8]
        }
    );
    same!("cleanup");

    // Prepared messages count while stored; rollback and abandoned rollback take them
    // off; commit changes nothing.
    store
        .add_messages(vec![
            prepared(Q, "tx1", 0, "xid-1"),
            prepared(Q, "tx2", 0, "xid-2"),
            prepared(Q, "tx3", 0, "stomp:b1:t1"),
        ])
        .await
        .unwrap();
    same!("prepared adds");
    let rolled = write(
        &*store,
        WriteOp::Rollback {
            xid: "xid-1".into(),
        },
    )
    .await;
    assert_eq!(rolled, WriteOutcome::Deleted(1));
    same!("rollback");
    let bytes = store.stored_bytes();
    write(
        &*store,
        WriteOp::Commit {
            xid: "xid-2".into(),
        },
    )
    .await;
    assert_eq!(store.stored_bytes(), bytes);
    same!("commit");
    let abandoned = write(
        &*store,
        WriteOp::RollbackAbandoned {
            xid_prefix: "stomp:".into(),
        },
    )
    .await;
    assert_eq!(abandoned, WriteOutcome::Deleted(1));
    same!("abandoned rollback");

    // A batch that adds and deletes the same row nets out.
    let next = store.last_assigned_id() + 1;
    let out = store
        .write(vec![
            WriteOp::Add(sized(Q, 4_000, 0)),
            WriteOp::Remove {
                container: Q.into(),
                ids: vec![next],
            },
        ])
        .await
        .unwrap();
    assert_eq!(out[1], WriteOutcome::Deleted(1));
    same!("add and remove in one batch");

    // Reopened: read again with the aggregate.
    let bytes = store.stored_bytes();
    assert!(bytes > 0);
    store.close().await;
    let store = t.open().await;
    assert_eq!(store.stored_bytes(), bytes);
    assert_eq!(raw.stored_bytes().await, bytes);
}

/// A write that fails changes nothing: the rows its first ops deleted are back, and
/// `stored_bytes` is what it was.
async fn stored_bytes_unchanged_after_a_failed_write(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    let ids = store
        .add_messages((0..3).map(|i| message(Q, &format!("m{i}"), 0)).collect())
        .await
        .unwrap();
    store
        .add_messages(vec![prepared(Q, "tx", 0, "xid-1")])
        .await
        .unwrap();
    let bytes = store.stored_bytes();
    assert_eq!(bytes, raw.stored_bytes().await);

    // A row written behind the store's back takes the id the store assigns next, so
    // the add after the deletes fails on the primary key and the batch rolls back.
    let taken = store.last_assigned_id() + 1;
    raw.insert_message(taken, "queue://intruder", 100).await;
    let result = store
        .write(vec![
            WriteOp::Remove {
                container: Q.into(),
                ids: ids.clone(),
            },
            WriteOp::Rollback {
                xid: "xid-1".into(),
            },
            WriteOp::Add(message(Q, "clash", 0)),
        ])
        .await;
    assert!(result.is_err(), "{result:?}");
    assert_eq!(store.stored_bytes(), bytes);
    assert_eq!(store.count_messages(Q).await.unwrap(), 4);

    raw.delete_message(taken).await;
    assert_eq!(store.stored_bytes(), raw.stored_bytes().await);
    // The store goes on.
    let out = store
        .write(vec![
            WriteOp::Remove {
                container: Q.into(),
                ids,
            },
            WriteOp::Rollback {
                xid: "xid-1".into(),
            },
        ])
        .await
        .unwrap();
    assert_eq!(
        out,
        vec![WriteOutcome::Deleted(3), WriteOutcome::Deleted(1)]
    );
    assert_eq!(store.stored_bytes(), 0);
    assert_eq!(raw.stored_bytes().await, 0);
}

on_every_backend!(
    stored_bytes_follows_every_add_and_delete,
    stored_bytes_unchanged_after_a_failed_write,
);
