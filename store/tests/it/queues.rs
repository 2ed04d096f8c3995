//! What a queue needs from the store, the same on every backend: acking deletes the
//! rows ([`WriteOp::Remove`]), expiry deletes expired rows wherever they sit, chosen by
//! expiration time ([`WriteOp::ExpireQueue`], [`MessageStore::read_expired`]; ActiveMQ
//! AMQ-6967, case EXP-02), and a message moves to a dead-letter queue at most once
//! ([`WriteOp::DeadLetter`]).

use std::sync::Arc;

use ebb_store::test_util::{
    message, message_p, now_ms, on_every_backend, prepared, TestStore, EXPIRED,
};
use ebb_store::{MessageStore, MessageStoreExt, Moved, NewMessage, Payload, WriteOp, WriteOutcome};

const Q: &str = "queue://orders";
const DLQ: &str = "queue://DLQ.orders";

async fn remove(store: &dyn MessageStore, ids: &[i64]) -> u64 {
    match store
        .write_one(WriteOp::Remove {
            container: Q.into(),
            ids: ids.to_vec(),
        })
        .await
        .unwrap()
    {
        WriteOutcome::Deleted(n) => n,
        other => panic!("{other:?}"),
    }
}

async fn expire(store: &dyn MessageStore, container: &str, limit: u32) -> Vec<i64> {
    match store
        .write_one(WriteOp::ExpireQueue {
            container: container.into(),
            now_ms: now_ms(),
            limit,
        })
        .await
        .unwrap()
    {
        WriteOutcome::Removed(ids) => ids,
        other => panic!("{other:?}"),
    }
}

async fn dead_letter(store: &dyn MessageStore, id: i64, message: NewMessage) -> Option<i64> {
    match store
        .write_one(WriteOp::DeadLetter {
            container: Q.into(),
            id,
            message,
        })
        .await
        .unwrap()
    {
        WriteOutcome::DeadLettered(moved) => moved.id(),
        other => panic!("{other:?}"),
    }
}

async fn ids_of(store: &dyn MessageStore, container: &str) -> Vec<i64> {
    store
        .browse(container, 0, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect()
}

async fn remove_deletes_only_the_named_rows_that_are_not_prepared(t: TestStore) {
    let store = t.open().await;
    let ids = store
        .add_messages((0..5).map(|i| message(Q, &format!("m{i}"), 0)).collect())
        .await
        .unwrap();
    let held = store
        .add_messages(vec![prepared(Q, "tx", 0, "xid-1")])
        .await
        .unwrap()[0];
    let other = store
        .add_messages(vec![message("queue://other", "o", 0)])
        .await
        .unwrap()[0];

    // Two of ours, a prepared one, another queue's, one that never existed, a repeat.
    let asked = [ids[0], ids[2], held, other, other + 1_000, ids[2]];
    assert_eq!(remove(&*store, &asked).await, 2);
    assert_eq!(ids_of(&*store, Q).await, vec![ids[1], ids[3], ids[4]]);
    assert_eq!(
        store.count_messages(Q).await.unwrap(),
        4,
        "the prepared row stays"
    );
    assert_eq!(store.count_messages("queue://other").await.unwrap(), 1);
    // Removing again counts nothing.
    assert_eq!(remove(&*store, &asked).await, 0);
    assert_eq!(remove(&*store, &[]).await, 0);

    // A long list goes in several statements (512 + 512 + 277 ids) and counts exactly.
    let many = store
        .add_messages(
            (0..1_300)
                .map(|i| message(Q, &format!("n{i}"), 0))
                .collect(),
        )
        .await
        .unwrap();
    let mut asked = many.clone();
    asked.push(ids[0]); // already gone
    assert_eq!(remove(&*store, &asked).await, 1_300);
    assert_eq!(ids_of(&*store, Q).await, vec![ids[1], ids[3], ids[4]]);
}

/// EXP-02 scenario B: m2 (short TTL) behind m1 (long TTL), m3 (no TTL) after it.
async fn expired_message_behind_live_ones_is_expired(t: TestStore) {
    let store = t.open().await;
    let now = now_ms();
    let ids = store
        .add_messages(vec![
            message(Q, "m1", now + 600_000),
            message(Q, "m2", now - 1),
            message(Q, "m3", 0),
        ])
        .await
        .unwrap();
    assert_eq!(expire(&*store, Q, 100).await, vec![ids[1]]);
    assert_eq!(store.count_messages(Q).await.unwrap(), 2);
    assert_eq!(ids_of(&*store, Q).await, vec![ids[0], ids[2]]);
    assert_eq!(expire(&*store, Q, 100).await, Vec::<i64>::new());

    // The priority variant: m1 priority 9 long TTL, m2 priority 1 expired.
    const P: &str = "queue://prio";
    let ids = store
        .add_messages(vec![
            message_p(P, "m1", now + 600_000, 9),
            message_p(P, "m2", now - 1, 1),
            message_p(P, "m3", 0, 4),
        ])
        .await
        .unwrap();
    assert_eq!(expire(&*store, P, 100).await, vec![ids[1]]);
    assert_eq!(ids_of(&*store, P).await, vec![ids[0], ids[2]]);

    // Behind a backlog of live messages (no TTL, then a long TTL) larger than a page.
    const B: &str = "queue://backlog";
    ebb_store::test_util::fill(&*store, B, 600, 0).await;
    ebb_store::test_util::fill(&*store, B, 600, now + 600_000).await;
    let late = store
        .add_messages(vec![message(B, "late", now - 1)])
        .await
        .unwrap();
    assert_eq!(expire(&*store, B, 10).await, late);
    assert_eq!(store.count_messages(B).await.unwrap(), 1_200);
}

/// Rows are chosen by expiration, then id; live and prepared rows stay; at most `limit`
/// per call; repeated calls drain. `read_expired` sees the same rows in the same order.
async fn expiry_pages_follow_expiration_order_and_drain(t: TestStore) {
    let store = t.open().await;
    let now = now_ms();
    let ids = store
        .add_messages(vec![
            message(Q, "e3", now - 100),
            message(Q, "e1", now - 300),
            message(Q, "live", 0),
            message(Q, "long", now + 600_000),
            message(Q, "e2", now - 200),
            message(Q, "e1b", now - 300),
        ])
        .await
        .unwrap();
    let held = store
        .add_messages(vec![prepared(Q, "tx", now - 400, "xid-1")])
        .await
        .unwrap()[0];
    let (e3, e1, live, long, e2, e1b) = (ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]);

    let page = store.read_expired(Q, now, 10).await.unwrap();
    let order: Vec<(i64, String)> = page
        .iter()
        .map(|m| (m.id, String::from_utf8(m.payload.body.to_vec()).unwrap()))
        .collect();
    assert_eq!(
        order,
        vec![
            (e1, "e1".into()),
            (e1b, "e1b".into()),
            (e2, "e2".into()),
            (e3, "e3".into())
        ],
        "by expiration, then id; not the prepared or live ones"
    );
    assert!(page.iter().all(|m| m.container == Q && m.is_expired(now)));
    let first_two: Vec<i64> = store
        .read_expired(Q, now, 2)
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(first_two, vec![e1, e1b]);

    // The same choice for the delete: the two earliest expirations (ids ascending).
    assert_eq!(expire(&*store, Q, 2).await, vec![e1, e1b]);
    // Next e2 (now - 200) and e3 (now - 100); returned by id (e3 was sent first).
    assert_eq!(expire(&*store, Q, 2).await, vec![e3, e2]);
    assert_eq!(expire(&*store, Q, 2).await, Vec::<i64>::new());
    assert_eq!(expire(&*store, Q, 0).await, Vec::<i64>::new());
    assert!(store.read_expired(Q, now, 10).await.unwrap().is_empty());
    assert_eq!(ids_of(&*store, Q).await, vec![live, long]);
    assert_eq!(
        store.count_messages(Q).await.unwrap(),
        3,
        "and the prepared one"
    );

    // Once committed the prepared message is an ordinary expired one.
    let WriteOutcome::Committed(renumbered) = store
        .write_one(WriteOp::Commit {
            xid: "xid-1".into(),
        })
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(renumbered[0].0, held);
    assert_eq!(expire(&*store, Q, 10).await, vec![renumbered[0].1]);
}

async fn dead_letter_moves_a_message_once(t: TestStore) {
    let store = t.open().await;
    let ids = store
        .add_messages(vec![message(Q, "a", EXPIRED), message(Q, "b", 0)])
        .await
        .unwrap();
    store
        .add_messages(vec![message("queue://other", "x", 0)])
        .await
        .unwrap();
    let before = store.last_assigned_id();

    let mut copy = message(DLQ, "a", 0);
    copy.message_id = "ID:a".into();
    copy.payload = Arc::new(Payload {
        timestamp_ms: 7,
        headers: vec![("originalExpiration".into(), EXPIRED.to_string())],
        body: b"a".to_vec().into(),
    });
    let new = dead_letter(&*store, ids[0], copy.clone()).await.unwrap();
    assert!(
        new > before,
        "{new} must be above every earlier id ({before})"
    );
    assert_eq!(store.last_assigned_id(), new);
    assert_eq!(ids_of(&*store, Q).await, vec![ids[1]]);
    let dlq = store.browse(DLQ, 0, 10).await.unwrap();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].id, new);
    assert_eq!(dlq[0].container, DLQ);
    assert_eq!(dlq[0].message_id, "ID:a");
    assert_eq!(dlq[0].expiration, 0);
    assert_eq!(*dlq[0].payload, *copy.payload);

    // Again for the same id: the source is gone, nothing is added, no id is used.
    assert_eq!(dead_letter(&*store, ids[0], copy.clone()).await, None);
    assert_eq!(store.count_messages(DLQ).await.unwrap(), 1);
    assert_eq!(store.last_assigned_id(), new);
    // Neither a prepared row nor another container's row is moved.
    let held = store
        .add_messages(vec![prepared(Q, "tx", 0, "xid-1")])
        .await
        .unwrap()[0];
    assert_eq!(dead_letter(&*store, held, copy.clone()).await, None);
    let other = ids_of(&*store, "queue://other").await[0];
    assert_eq!(dead_letter(&*store, other, copy.clone()).await, None);
    assert_eq!(store.count_messages(DLQ).await.unwrap(), 1);

    // In a batch, ids follow op order: the dead-lettered copy, then the add after it.
    let out = store
        .write(vec![
            WriteOp::DeadLetter {
                container: Q.into(),
                id: ids[1],
                message: message(DLQ, "b", 0),
            },
            WriteOp::Add(message(Q, "c", 0)),
        ])
        .await
        .unwrap();
    let (WriteOutcome::DeadLettered(Moved::Added(moved)), WriteOutcome::Added(added)) =
        (&out[0], &out[1])
    else {
        panic!("{out:?}")
    };
    assert!(*moved > held && *added > *moved, "{out:?}");
    assert_eq!(ids_of(&*store, DLQ).await, vec![new, *moved]);
    assert_eq!(ids_of(&*store, Q).await, vec![*added]);
}

/// A queue message with header `kind: value` (and a second `kind`, which a selector
/// never reads: the first value counts).
fn kind(value: &str) -> NewMessage {
    let mut m = message(Q, value, 0);
    m.payload = Arc::new(Payload {
        timestamp_ms: 1,
        headers: vec![
            ("kind".into(), value.into()),
            ("kind".into(), "shadow".into()),
            ("we\"ird".into(), "q".into()),
        ],
        body: value.as_bytes().to_vec().into(),
    });
    m
}

/// A selector's scan page (`scan_matching`) returns the rows of its id window whose
/// first header value is one of those asked for, in id order, at most `limit`; it
/// never looks past the window; prepared rows and other containers' rows are left
/// out; a row without the queryable headers (written before them) comes back for the
/// caller to test. Header names with quotes work.
async fn scan_matching_tests_headers_within_a_window(t: TestStore) {
    let store = t.open().await;
    let mut batch: Vec<NewMessage> = (0..50)
        .map(|i| kind(if i % 10 == 3 { "image" } else { "video" }))
        .collect();
    batch.push(kind("gif"));
    let ids = store.add_messages(batch).await.unwrap();
    let mut other = kind("image");
    other.container = "queue://other".into();
    store.add_messages(vec![other]).await.unwrap();
    let mut hidden = kind("image");
    hidden.xid = Some("tx".into());
    store.add_messages(vec![hidden]).await.unwrap();
    let filter = |values: &[&str]| {
        vec![(
            "kind".to_string(),
            values.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
        )]
    };
    let scan = |after: i64, upto: i64, filter: Vec<(String, Vec<String>)>, limit: u32| {
        let store = Arc::clone(&store);
        async move {
            store
                .scan_matching(Q, after, upto, &filter, limit)
                .await
                .unwrap()
                .iter()
                .map(|m| m.id)
                .collect::<Vec<_>>()
        }
    };
    let images: Vec<i64> = [3, 13, 23, 33, 43].iter().map(|i| ids[*i]).collect();
    let last = *ids.last().unwrap();
    assert_eq!(scan(0, last + 10, filter(&["image"]), 100).await, images);
    assert_eq!(
        scan(0, last, filter(&["image"]), 2).await,
        images[..2].to_vec()
    );
    // The window bounds the page: nothing after `upto`, nothing at or before `after`.
    assert_eq!(
        scan(ids[3], ids[23], filter(&["image"]), 100).await,
        vec![ids[13], ids[23]]
    );
    assert_eq!(
        scan(0, last, filter(&["image", "gif"]), 100).await,
        [images.clone(), vec![last]].concat()
    );
    assert_eq!(
        scan(0, last, filter(&["shadow"]), 100).await,
        Vec::<i64>::new(),
        "the first value counts"
    );
    let quoted = vec![("we\"ird".to_string(), vec!["q".to_string()])];
    assert_eq!(scan(0, last, quoted, 100).await.len(), 51);
    assert_eq!(
        scan(0, last, vec![], 10).await,
        ids[..10].to_vec(),
        "no filter: every row"
    );
    // A row without queryable headers is returned whatever the filter.
    let mut raw = ebb_store::test_util::Raw::connect(&t).await;
    raw.clear_headers(ids[5]).await;
    assert_eq!(
        scan(0, ids[20], filter(&["image"]), 100).await,
        vec![ids[3], ids[5], ids[13]]
    );
    store.close().await;
}

on_every_backend!(
    scan_matching_tests_headers_within_a_window,
    remove_deletes_only_the_named_rows_that_are_not_prepared,
    expired_message_behind_live_ones_is_expired,
    expiry_pages_follow_expiration_order_and_drain,
    dead_letter_moves_a_message_once,
);
