//! Last-value keys ([`NewMessage::last_value`]): committing a message with a key
//! deletes the older committed messages of its container with the same key, in the
//! same store transaction, on every path that commits a message (an add, a batch of
//! adds, a prepared transaction's commit) and with [`WriteOp::ReplaceLastValue`]; the
//! stored bytes follow; other keys, other containers, prepared rows and rows without
//! a key are left alone; and what is replaced stays replaced after a reopen. A message
//! moved in from another queue ([`WriteOp::DeadLetter`]) keeps its arrival at the
//! broker through every move, and is dropped ([`Moved::Superseded`]) instead of
//! replacing a message with its key that arrived after it: one by one and in a run.

use ebb_store::test_util::{message, on_every_backend, prepared, Raw, TestStore};
use ebb_store::{MessageStore, MessageStoreExt, Moved, NewMessage, WriteOp, WriteOutcome};

const Q: &str = "lvq://prices";
const OTHER: &str = "lvq://other";

/// A message on `container` with body `body` and last-value key `key`.
fn keyed(container: &str, body: &str, key: Option<&str>) -> NewMessage {
    let mut m = message(container, body, 0);
    m.last_value = key.map(str::to_string);
    m
}

/// The bodies waiting on `container`, in id order.
async fn bodies(store: &dyn MessageStore, container: &str) -> Vec<String> {
    store
        .browse(container, 0, 1_000)
        .await
        .unwrap()
        .iter()
        .map(|m| String::from_utf8(m.payload.body.to_vec()).unwrap())
        .collect()
}

async fn a_newer_message_replaces_the_older_with_its_key(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    store
        .add_messages(vec![
            keyed(Q, "ibm 1", Some("IBM")),
            keyed(Q, "aapl 1", Some("AAPL")),
            keyed(Q, "no key", None),
            keyed(OTHER, "other ibm", Some("IBM")),
        ])
        .await
        .unwrap();
    // One add at a time.
    store
        .add_messages(vec![keyed(Q, "ibm 2", Some("IBM"))])
        .await
        .unwrap();
    assert_eq!(
        bodies(&*store, Q).await,
        ["aapl 1", "no key", "ibm 2"],
        "IBM's older value is gone, the others stay"
    );
    assert_eq!(bodies(&*store, OTHER).await, ["other ibm"]);
    // Several with one key in one batch (one transaction): the last one is left.
    store
        .add_messages(vec![
            keyed(Q, "ibm 3", Some("IBM")),
            keyed(Q, "aapl 2", Some("AAPL")),
            keyed(Q, "ibm 4", Some("IBM")),
            keyed(Q, "no key 2", None),
        ])
        .await
        .unwrap();
    assert_eq!(
        bodies(&*store, Q).await,
        ["no key", "aapl 2", "ibm 4", "no key 2"]
    );
    assert_eq!(store.stored_bytes(), raw.stored_bytes().await);
    assert_eq!(store.count_messages(Q).await.unwrap(), 4);

    // After a reopen ("restart"): the same rows, the same bytes.
    drop(store);
    let store = t.open().await;
    assert_eq!(
        bodies(&*store, Q).await,
        ["no key", "aapl 2", "ibm 4", "no key 2"]
    );
    assert_eq!(store.stored_bytes(), raw.stored_bytes().await);
}

async fn a_transaction_replaces_when_it_commits(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    store
        .add_messages(vec![keyed(Q, "ibm 1", Some("IBM"))])
        .await
        .unwrap();
    let mut in_tx = prepared(Q, "ibm 2", 0, "tx-1");
    in_tx.last_value = Some("IBM".into());
    let mut in_tx_too = prepared(Q, "ibm 3", 0, "tx-1");
    in_tx_too.last_value = Some("IBM".into());
    store.add_messages(vec![in_tx, in_tx_too]).await.unwrap();
    assert_eq!(
        bodies(&*store, Q).await,
        ["ibm 1"],
        "a prepared message replaces nothing yet"
    );
    // A rolled back one never replaces.
    let mut rolled_back = prepared(Q, "ibm x", 0, "tx-2");
    rolled_back.last_value = Some("IBM".into());
    store.add_messages(vec![rolled_back]).await.unwrap();
    store
        .write_one(WriteOp::Rollback { xid: "tx-2".into() })
        .await
        .unwrap();
    assert_eq!(bodies(&*store, Q).await, ["ibm 1"]);

    let committed = store
        .write_one(WriteOp::Commit { xid: "tx-1".into() })
        .await
        .unwrap();
    assert!(matches!(committed, WriteOutcome::Committed(ref c) if c.len() == 2));
    assert_eq!(bodies(&*store, Q).await, ["ibm 3"]);
    assert_eq!(store.stored_bytes(), raw.stored_bytes().await);
}

async fn a_message_that_is_not_stored_replaces_by_an_op(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    let ids = store
        .add_messages(vec![
            keyed(Q, "ibm 1", Some("IBM")),
            keyed(Q, "aapl 1", Some("AAPL")),
        ])
        .await
        .unwrap();
    let mut pending = prepared(Q, "ibm in tx", 0, "tx-3");
    pending.last_value = Some("IBM".into());
    store.add_messages(vec![pending]).await.unwrap();
    let replace = |key: &str, below: i64| WriteOp::ReplaceLastValue {
        container: Q.into(),
        key: key.into(),
        below,
    };
    // Only rows below `below`.
    let none = store.write_one(replace("IBM", ids[0])).await.unwrap();
    assert_eq!(none, WriteOutcome::Deleted(0));
    let one = store.write_one(replace("IBM", ids[1] + 100)).await.unwrap();
    assert_eq!(
        one,
        WriteOutcome::Deleted(1),
        "the prepared row is left alone"
    );
    assert_eq!(bodies(&*store, Q).await, ["aapl 1"]);
    assert_eq!(store.stored_bytes(), raw.stored_bytes().await);
    store
        .write_one(WriteOp::Commit { xid: "tx-3".into() })
        .await
        .unwrap();
    assert_eq!(bodies(&*store, Q).await, ["aapl 1", "ibm in tx"]);
}

const PLAIN: &str = "queue://plain";
const DLQ: &str = "queue://DLQ.prices";

/// Row `id` of `from` moves to `to` as `body`, with last-value key `key` there.
fn move_op(from: &str, id: i64, to: &str, body: &str, key: Option<&str>) -> WriteOp {
    WriteOp::DeadLetter {
        container: from.into(),
        id,
        message: keyed(to, body, key),
    }
}

async fn move_one(store: &dyn MessageStore, op: WriteOp) -> Moved {
    match store.write_one(op).await.unwrap() {
        WriteOutcome::DeadLettered(moved) => moved,
        other => panic!("{other:?}"),
    }
}

/// The ids waiting on `container`, in id order.
async fn ids(store: &dyn MessageStore, container: &str) -> Vec<i64> {
    let rows = store.browse(container, 0, 1_000).await.unwrap();
    rows.iter().map(|m| m.id).collect()
}

async fn a_message_moved_in_never_replaces_one_that_arrived_after_it(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    // v1 arrives, and goes to the dead-letter queue (no key there).
    let v1 = store
        .add_messages(vec![keyed(Q, "v1", Some("IBM"))])
        .await
        .unwrap()[0];
    let Moved::Added(dead) = move_one(&*store, move_op(Q, v1, DLQ, "v1", None)).await else {
        panic!("not moved")
    };
    // v2 arrives; v1 comes back: superseded, its dead-letter row deleted.
    store
        .add_messages(vec![keyed(Q, "v2", Some("IBM"))])
        .await
        .unwrap();
    let back = move_one(&*store, move_op(DLQ, dead, Q, "v1", Some("IBM"))).await;
    assert_eq!(back, Moved::Superseded);
    assert_eq!(bodies(&*store, Q).await, ["v2"]);
    assert_eq!(bodies(&*store, DLQ).await, Vec::<String>::new());
    assert_eq!(store.stored_bytes(), raw.stored_bytes().await);
    // Gone is gone.
    let again = move_one(&*store, move_op(DLQ, dead, Q, "v1", Some("IBM"))).await;
    assert_eq!(again, Moved::Gone);

    // Nothing newer: it comes back, replacing an older value. Its arrival goes with
    // it through a second round trip: `w`, sent to another queue after it arrived and
    // moved in later, is newer.
    let [a1, w] = store
        .add_messages(vec![keyed(Q, "a1", Some("AAPL")), keyed(PLAIN, "w", None)])
        .await
        .unwrap()[..]
    else {
        panic!()
    };
    let Moved::Added(dead) = move_one(&*store, move_op(Q, a1, DLQ, "a1", None)).await else {
        panic!("not moved")
    };
    let Moved::Added(a1) = move_one(&*store, move_op(DLQ, dead, Q, "a1", Some("AAPL"))).await
    else {
        panic!("superseded with nothing newer")
    };
    assert_eq!(bodies(&*store, Q).await, ["v2", "a1"]);
    let Moved::Added(dead) = move_one(&*store, move_op(Q, a1, DLQ, "a1", None)).await else {
        panic!("not moved")
    };
    let Moved::Added(_) = move_one(&*store, move_op(PLAIN, w, Q, "w", Some("AAPL"))).await else {
        panic!("w superseded")
    };
    let back = move_one(&*store, move_op(DLQ, dead, Q, "a1", Some("AAPL"))).await;
    assert_eq!(back, Moved::Superseded, "a1 kept no arrival of its own");
    assert_eq!(bodies(&*store, Q).await, ["v2", "w"]);
    assert_eq!(store.stored_bytes(), raw.stored_bytes().await);

    // Arrivals are stored: they hold after a reopen.
    let older = store
        .add_messages(vec![keyed(PLAIN, "older", None)])
        .await
        .unwrap()[0];
    let newer = store
        .add_messages(vec![keyed(PLAIN, "newer", None)])
        .await
        .unwrap()[0];
    let Moved::Added(newer) = move_one(&*store, move_op(PLAIN, newer, DLQ, "newer", None)).await
    else {
        panic!("not moved")
    };
    drop(store);
    let store = t.open().await;
    let Moved::Added(_) = move_one(&*store, move_op(DLQ, newer, Q, "newer", Some("MSFT"))).await
    else {
        panic!("newer superseded")
    };
    let back = move_one(&*store, move_op(PLAIN, older, Q, "older", Some("MSFT"))).await;
    assert_eq!(back, Moved::Superseded);
    assert_eq!(bodies(&*store, Q).await, ["v2", "w", "newer"]);
}

/// In one write, a run of moves is answered as one by one: each sees the moves before
/// it. A message held back for a redelivery counts as arrived when it first arrived,
/// also once its release gives it a new id.
async fn moves_in_a_run_and_held_back_messages_compare_arrivals(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    let plain = store
        .add_messages(vec![
            keyed(PLAIN, "k1 old", None),
            keyed(PLAIN, "k1 new", None),
            keyed(PLAIN, "k2 old", None),
            keyed(PLAIN, "k2 new", None),
            keyed(PLAIN, "no key", None),
        ])
        .await
        .unwrap();
    let outcomes = store
        .write(vec![
            // The newer first: the older one after it is superseded.
            move_op(PLAIN, plain[1], Q, "k1 new", Some("K1")),
            move_op(PLAIN, plain[4], Q, "no key", None),
            move_op(PLAIN, plain[0], Q, "k1 old", Some("K1")),
            // The older first: the newer one replaces it.
            move_op(PLAIN, plain[2], Q, "k2 old", Some("K2")),
            move_op(PLAIN, plain[3], Q, "k2 new", Some("K2")),
            // Named twice: moved once.
            move_op(PLAIN, plain[3], Q, "k2 new", Some("K2")),
        ])
        .await
        .unwrap();
    let moved: Vec<Moved> = outcomes
        .into_iter()
        .map(|o| match o {
            WriteOutcome::DeadLettered(moved) => moved,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(
        matches!(
            moved[..],
            [
                Moved::Added(a),
                Moved::Added(b),
                Moved::Superseded,
                Moved::Added(c),
                Moved::Added(d),
                Moved::Gone
            ] if a < b && b < c && c < d
        ),
        "{moved:?}"
    );
    assert_eq!(bodies(&*store, Q).await, ["k1 new", "no key", "k2 new"]);
    assert_eq!(store.stored_bytes(), raw.stored_bytes().await);

    // Held back in its row (a redelivery's back-off): it keeps its id, so its arrival.
    let [before, h, between] = store
        .add_messages(vec![
            keyed(PLAIN, "before", None),
            keyed(Q, "h", Some("H")),
            keyed(PLAIN, "between", None),
        ])
        .await
        .unwrap()[..]
    else {
        panic!()
    };
    store
        .write_one(WriteOp::Redelivered {
            container: Q.into(),
            id: h,
            count: 1,
            hold_until: Some(ebb_store::test_util::now_ms() + 60_000),
        })
        .await
        .unwrap();
    let back = move_one(&*store, move_op(PLAIN, before, Q, "before", Some("H"))).await;
    assert_eq!(back, Moved::Superseded, "the held-back h arrived after it");
    // `between` arrived after h: moved in, it replaces the held h.
    let Moved::Added(last) =
        move_one(&*store, move_op(PLAIN, between, Q, "between", Some("H"))).await
    else {
        panic!("between superseded by the held h")
    };
    assert_eq!(ids(&*store, Q).await.last(), Some(&last));
    assert_eq!(
        bodies(&*store, Q).await,
        ["k1 new", "no key", "k2 new", "between"]
    );
    let held = store
        .read_held(Q, (i64::MIN, i64::MIN), i64::MAX, 10)
        .await
        .unwrap();
    assert!(held.messages.is_empty(), "h was replaced: {held:?}");
    assert_eq!(store.stored_bytes(), raw.stored_bytes().await);
}

on_every_backend!(
    a_newer_message_replaces_the_older_with_its_key,
    a_transaction_replaces_when_it_commits,
    a_message_that_is_not_stored_replaces_by_an_op,
    a_message_moved_in_never_replaces_one_that_arrived_after_it,
    moves_in_a_run_and_held_back_messages_compare_arrivals,
);
