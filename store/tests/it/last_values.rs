//! Last-value keys ([`NewMessage::last_value`]): committing a message with a key
//! deletes the older committed messages of its container with the same key, in the
//! same store transaction, on every path that commits a message (an add, a batch of
//! adds, a prepared transaction's commit) and with [`WriteOp::ReplaceLastValue`]; the
//! stored bytes follow; other keys, other containers, prepared rows and rows without
//! a key are left alone; and what is replaced stays replaced after a reopen.

use ebb_store::test_util::{message, on_every_backend, prepared, Raw, TestStore};
use ebb_store::{MessageStore, MessageStoreExt, NewMessage, WriteOp, WriteOutcome};

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

on_every_backend!(
    a_newer_message_replaces_the_older_with_its_key,
    a_transaction_replaces_when_it_commits,
    a_message_that_is_not_stored_replaces_by_an_op,
);
