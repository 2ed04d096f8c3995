//! Runs of ops in one write: consecutive [`WriteOp::Commit`]s, and consecutive
//! [`WriteOp::Redelivered`]s of one container, and consecutive
//! [`WriteOp::DeadLetter`]s, go into a few statements for the whole
//! run (a scheduler page releases many messages, a consumer refuses many), and answer
//! exactly as the same ops one by one: each commit its own rows, in op order then id
//! order, an xid committed twice or without rows gets none, last values replace older
//! ones in commit order, the stored bytes follow; each count changes only a row that
//! is there and not prepared; each move to a dead-letter queue moves a row that is
//! there once, the new rows in op order. A run over [`ebb_store::statements::WRITE_BATCH`] rows
//! is committed one xid at a time, with the same answer.

use ebb_store::statements::WRITE_BATCH;
use ebb_store::test_util::{message, on_every_backend, prepared, Raw, TestStore};
use ebb_store::{MessageStore, MessageStoreExt, NewMessage, WriteOp, WriteOutcome};

const Q: &str = "queue://runs";

fn body(m: &ebb_store::StoredMessage) -> String {
    String::from_utf8(m.payload.body.to_vec()).unwrap()
}

/// `(body, redeliveries)` of what waits on `container`, in id order.
async fn waiting(store: &dyn MessageStore, container: &str) -> Vec<(String, u32)> {
    store
        .browse(container, 0, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|m| (body(m), m.redeliveries))
        .collect()
}

async fn add(store: &dyn MessageStore, messages: Vec<NewMessage>) -> Vec<i64> {
    store.add_messages(messages).await.unwrap()
}

fn commits(outcomes: Vec<WriteOutcome>) -> Vec<Vec<(i64, i64)>> {
    outcomes
        .into_iter()
        .map(|o| match o {
            WriteOutcome::Committed(pairs) => pairs,
            other => panic!("{other:?}"),
        })
        .collect()
}

async fn a_run_of_commits_answers_as_one_by_one(t: TestStore) {
    let store = t.open().await;
    let keyed = |body: &str, xid: Option<&str>| {
        let mut m = match xid {
            Some(xid) => prepared(Q, body, 0, xid),
            None => message(Q, body, 0),
        };
        m.last_value = Some("k".into());
        m
    };
    let old_k = add(&*store, vec![keyed("k committed", None)]).await;
    let a = add(
        &*store,
        vec![
            prepared(Q, "a1", 0, "A"),
            prepared(Q, "b1", 0, "B"),
            prepared(Q, "a2", 0, "A"),
            keyed("k of D", Some("D")),
            prepared(Q, "a3", 0, "A"),
            keyed("k of E", Some("E")),
            prepared(Q, "left prepared", 0, "F"),
        ],
    )
    .await;
    let bytes_before = store.stored_bytes();
    let ops = ["A", "C", "B", "A", "D", "E"]
        .map(|xid| WriteOp::Commit { xid: xid.into() })
        .to_vec();
    let outcome = commits(store.write(ops).await.unwrap());
    let renumbered: Vec<Vec<i64>> = outcome
        .iter()
        .map(|pairs| pairs.iter().map(|(old, _)| *old).collect())
        .collect();
    assert_eq!(
        renumbered,
        [
            vec![a[0], a[2], a[4]],
            vec![],
            vec![a[1]],
            vec![],
            vec![a[3]],
            vec![a[5]]
        ],
        "each commit takes its own rows, in id order; a second commit of A and C take none"
    );
    let new: Vec<i64> = outcome.iter().flatten().map(|(_, new)| *new).collect();
    assert!(
        new.windows(2).all(|w| w[0] < w[1]) && new[0] > a[6],
        "new ids follow op order, after every id before: {new:?}"
    );
    assert_eq!(
        waiting(&*store, Q)
            .await
            .into_iter()
            .map(|(b, _)| b)
            .collect::<Vec<_>>(),
        ["a1", "a2", "a3", "b1", "k of E"],
        "E's value, committed last, replaces D's and the older committed one"
    );
    let replaced = (b"k committed".len() + b"k of D".len()) as u64;
    assert!(
        store.stored_bytes() < bytes_before && bytes_before - store.stored_bytes() >= replaced,
        "the replaced rows' bytes are taken off: {bytes_before} → {}",
        store.stored_bytes()
    );
    assert_eq!(
        store.stored_bytes(),
        Raw::connect(&t).await.stored_bytes().await
    );
    assert!(old_k[0] < a[0]);
    // F is still prepared: its commit alone finds it.
    let f = commits(
        store
            .write(vec![WriteOp::Commit { xid: "F".into() }])
            .await
            .unwrap(),
    );
    assert_eq!(f[0].len(), 1);
    assert_eq!(f[0][0].0, a[6]);
    store.close().await;
}

async fn a_run_of_commits_over_a_write_batch_goes_one_by_one(t: TestStore) {
    let store = t.open().await;
    let per_xid = (WRITE_BATCH as usize) / 2 + 10;
    let mut messages = Vec::new();
    for i in 0..per_xid {
        // Interleaved, so that id order and op order differ.
        messages.push(prepared(Q, &format!("y{i}"), 0, "Y"));
        messages.push(prepared(Q, &format!("x{i}"), 0, "X"));
    }
    let ids = add(&*store, messages).await;
    let outcome = commits(
        store
            .write(vec![
                WriteOp::Commit { xid: "X".into() },
                WriteOp::Commit { xid: "Y".into() },
            ])
            .await
            .unwrap(),
    );
    let x: Vec<i64> = ids.iter().skip(1).step_by(2).copied().collect();
    let y: Vec<i64> = ids.iter().step_by(2).copied().collect();
    assert_eq!(outcome[0].iter().map(|p| p.0).collect::<Vec<_>>(), x);
    assert_eq!(outcome[1].iter().map(|p| p.0).collect::<Vec<_>>(), y);
    let bodies: Vec<String> = waiting(&*store, Q).await.into_iter().map(|w| w.0).collect();
    let expected: Vec<String> = (0..per_xid)
        .map(|i| format!("x{i}"))
        .chain((0..per_xid).map(|i| format!("y{i}")))
        .collect();
    assert_eq!(bodies, expected, "all of X, then all of Y");
    store.close().await;
}

async fn a_run_of_failed_delivery_counts_answers_as_one_by_one(t: TestStore) {
    let store = t.open().await;
    let ids = add(
        &*store,
        vec![
            message(Q, "r1", 0),
            message(Q, "r2", 0),
            message(Q, "r3", 0),
            prepared(Q, "in a transaction", 0, "T"),
            message(Q, "acked", 0),
            message("queue://other", "other", 0),
        ],
    )
    .await;
    store
        .write_one(WriteOp::Remove {
            container: Q.into(),
            ids: vec![ids[4]],
        })
        .await
        .unwrap();
    let count =
        |container: &str, id: i64, count: u32, hold_until: Option<i64>| WriteOp::Redelivered {
            container: container.into(),
            id,
            count,
            hold_until,
        };
    let outcomes = store
        .write(vec![
            count(Q, ids[0], 1, None),
            count(Q, ids[1], 2, Some(5_000)),
            count(Q, ids[4], 1, None),
            count(Q, ids[3], 1, None),
            count(Q, ids[2], 3, None),
            // Another container's row is not this run's: a run of its own.
            count("queue://other", ids[5], 4, None),
            // Not a row of Q.
            count(Q, ids[5], 9, None),
        ])
        .await
        .unwrap();
    let changed: Vec<u64> = outcomes
        .into_iter()
        .map(|o| match o {
            WriteOutcome::Deleted(n) => n,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        changed,
        [1, 1, 0, 0, 1, 1, 0],
        "a row gone, a prepared row, another container's row: unchanged"
    );
    // r2 is held in its row: browsing still shows it, the queue's cursor skips it.
    assert_eq!(
        waiting(&*store, Q).await,
        [
            ("r1".to_string(), 1),
            ("r2".to_string(), 2),
            ("r3".to_string(), 3)
        ],
    );
    let cursor: Vec<(String, u32)> = store
        .read_queue(Q, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|m| (body(m), m.redeliveries))
        .collect();
    assert_eq!(
        cursor,
        [("r1".to_string(), 1), ("r3".to_string(), 3)],
        "r2 is held"
    );
    assert_eq!(
        waiting(&*store, "queue://other").await,
        [("other".to_string(), 4)]
    );
    let held = store
        .read_held(Q, (i64::MIN, i64::MIN), 5_000, 10)
        .await
        .unwrap();
    assert_eq!(held.messages.len(), 1);
    assert_eq!(
        (
            held.messages[0].due,
            body(&held.messages[0].message),
            held.messages[0].message.redeliveries
        ),
        (5_000, "r2".to_string(), 2)
    );
    assert!(store
        .read_prepared_range("sched:", "sched;", 10)
        .await
        .unwrap()
        .is_empty());
    store.close().await;
}

async fn a_run_of_dead_letter_moves_answers_as_one_by_one(t: TestStore) {
    let store = t.open().await;
    let ids = add(
        &*store,
        vec![
            message(Q, "m1", 0),
            message(Q, "gone", 0),
            prepared(Q, "in a transaction", 0, "T"),
            message("queue://other", "m2", 0),
            message(Q, "m3", 0),
        ],
    )
    .await;
    store
        .write_one(WriteOp::Remove {
            container: Q.into(),
            ids: vec![ids[1]],
        })
        .await
        .unwrap();
    let bytes_before = store.stored_bytes();
    let letter = |from: &str, id: i64, body: &str| WriteOp::DeadLetter {
        container: from.into(),
        id,
        message: message("queue://DLQ", &format!("dead {body}"), 0),
    };
    let outcomes = store
        .write(vec![
            letter(Q, ids[0], "m1"),
            letter(Q, ids[1], "gone"),
            letter(Q, ids[2], "in a transaction"),
            letter("queue://other", ids[3], "m2"),
            letter(Q, ids[0], "m1 again"),
            // Named with the wrong container: not moved.
            letter("queue://other", ids[4], "m3"),
            letter(Q, ids[4], "m3"),
        ])
        .await
        .unwrap();
    let moved: Vec<Option<i64>> = outcomes
        .into_iter()
        .map(|o| match o {
            WriteOutcome::DeadLettered(moved) => moved.id(),
            other => panic!("{other:?}"),
        })
        .collect();
    let new: Vec<i64> = moved.iter().flatten().copied().collect();
    assert_eq!(
        moved.iter().map(Option::is_some).collect::<Vec<_>>(),
        [true, false, false, true, false, false, true],
        "{moved:?}"
    );
    assert!(
        new.windows(2).all(|w| w[0] < w[1]) && new[0] > ids[4],
        "{new:?}"
    );
    assert_eq!(
        waiting(&*store, "queue://DLQ")
            .await
            .into_iter()
            .map(|w| w.0)
            .collect::<Vec<_>>(),
        ["dead m1", "dead m2", "dead m3"],
        "in op order"
    );
    assert_eq!(
        waiting(&*store, Q).await,
        [],
        "the prepared row stays prepared"
    );
    assert_eq!(waiting(&*store, "queue://other").await, []);
    let mut raw = Raw::connect(&t).await;
    assert_eq!(
        store.stored_bytes(),
        raw.stored_bytes().await,
        "the store's count of bytes is the table's"
    );
    assert!(store.stored_bytes() > bytes_before);
    store.close().await;
}

on_every_backend!(
    a_run_of_dead_letter_moves_answers_as_one_by_one,
    a_run_of_commits_answers_as_one_by_one,
    a_run_of_commits_over_a_write_batch_goes_one_by_one,
    a_run_of_failed_delivery_counts_answers_as_one_by_one
);
