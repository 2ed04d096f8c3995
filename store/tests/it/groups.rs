//! Consumer groups stored once ([`ebb_store::groups`]): a group queue bound to a topic
//! reads the topic's rows through its own mark and acks, merged with the rows sent to
//! it directly, through every queue read and write of the store. The same on every
//! backend.

use ebb_store::test_util::{message, now_ms, on_every_backend, TestStore, EXPIRED};
use ebb_store::{MessageStore, MessageStoreExt, Moved, SubscriptionKey, WriteOp, WriteOutcome};

const T: &str = "topic://VirtualTopic.Orders";
const G: &str = "queue://Consumer.A.VirtualTopic.Orders";
const H: &str = "queue://Consumer.B.VirtualTopic.Orders";
const DLQ: &str = "queue://DLQ.Consumer.A.VirtualTopic.Orders";

async fn bind(store: &dyn MessageStore, group: &str) {
    store
        .write_one(WriteOp::Subscribe {
            container: T.into(),
            key: SubscriptionKey::group(group),
            selector: None,
            prioritized: false,
        })
        .await
        .unwrap();
}

async fn add(store: &dyn MessageStore, container: &str, body: &str, expiration: i64) -> i64 {
    store
        .add_messages(vec![message(container, body, expiration)])
        .await
        .unwrap()[0]
}

async fn ids(store: &dyn MessageStore, container: &str, browse: bool) -> Vec<i64> {
    let page = if browse {
        store.browse(container, 0, 100).await.unwrap()
    } else {
        store.read_queue(container, 0, 100).await.unwrap()
    };
    assert!(page.iter().all(|m| m.container == container));
    page.iter().map(|m| m.id).collect()
}

async fn deleted(store: &dyn MessageStore, op: WriteOp) -> u64 {
    match store.write_one(op).await.unwrap() {
        WriteOutcome::Deleted(n) => n,
        other => panic!("{other:?}"),
    }
}

/// Two groups read one stored copy of each topic message, each with its own acks, and
/// a group's own rows beside them; the topic's rows go once every group is done.
async fn groups_read_the_topic_rows_once_stored(t: TestStore) {
    let store = t.open().await;
    let before = add(&*store, T, "before the groups", 0).await;
    bind(&*store, G).await;
    bind(&*store, H).await;
    let t1 = add(&*store, T, "t1", 0).await;
    let own = add(&*store, G, "sent to the group", 0).await;
    let t2 = add(&*store, T, "t2", 0).await;
    assert_eq!(store.count_messages(T).await.unwrap(), 3, "stored once");
    assert_eq!(ids(&*store, G, false).await, [t1, own, t2]);
    assert_eq!(
        ids(&*store, H, false).await,
        [t1, t2],
        "not what came before"
    );
    assert!(!ids(&*store, G, false).await.contains(&before));
    assert_eq!(store.count_committed(G).await.unwrap(), 3);
    assert_eq!(store.count_messages(H).await.unwrap(), 2);
    assert!(store.has_rows(H).await.unwrap());
    // A page is cut at its limit, in id order.
    let page: Vec<i64> = store
        .read_queue(G, 0, 2)
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(page, [t1, own]);
    let page: Vec<i64> = store
        .read_queue(G, t1, 1)
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(page, [own]);
    // Group A acks t2 and its own row: a queue ack on the group's container.
    let n = deleted(
        &*store,
        WriteOp::Remove {
            container: G.into(),
            ids: vec![t2, own],
        },
    )
    .await;
    assert_eq!(n, 2);
    assert_eq!(ids(&*store, G, false).await, [t1]);
    assert_eq!(
        store.count_committed(G).await.unwrap(),
        1,
        "the kept count follows"
    );
    assert_eq!(ids(&*store, H, false).await, [t1, t2], "B still has both");
    // Acking again counts nothing.
    let again = WriteOp::Remove {
        container: G.into(),
        ids: vec![t2],
    };
    assert_eq!(deleted(&*store, again).await, 0);
    // B acks t1 and t2, A acks t1: the topic's cleanup may delete them now.
    for (group, acked, newly) in [(H, vec![t1, t2], 2), (G, vec![t1], 1)] {
        let op = WriteOp::Remove {
            container: group.into(),
            ids: acked,
        };
        assert_eq!(deleted(&*store, op).await, newly);
    }
    store
        .write_one(WriteOp::Cleanup {
            container: T.into(),
            limit: 100,
            after: 0,
            orphans_up_to: None,
        })
        .await
        .unwrap();
    assert_eq!(
        store.count_messages(T).await.unwrap(),
        0,
        "every row is done: the groups' (by their marks) and the one before them"
    );
    assert!(!store.has_rows(G).await.unwrap());
    store.close().await;
}

/// A failed delivery of a topic row is kept for the group (count and hold), across a
/// reopen; the held message leaves the cursor's pages and comes back by due time.
async fn a_groups_redeliveries_and_holds_are_its_own_and_durable(t: TestStore) {
    let store = t.open().await;
    bind(&*store, G).await;
    bind(&*store, H).await;
    let t1 = add(&*store, T, "t1", 0).await;
    let t2 = add(&*store, T, "t2", 0).await;
    let due = now_ms() + 60_000;
    let op = WriteOp::Redelivered {
        container: G.into(),
        id: t1,
        count: 2,
        hold_until: Some(due),
    };
    assert_eq!(deleted(&*store, op).await, 1);
    store.close().await;
    let store = t.open().await;
    assert_eq!(ids(&*store, G, false).await, [t2], "held: not the cursor's");
    assert_eq!(ids(&*store, G, true).await, [t1, t2], "a browse sees it");
    let browsed = store.browse(G, 0, 10).await.unwrap();
    assert_eq!(browsed[0].redeliveries, 2);
    assert_eq!(browsed[0].held_until, Some(due));
    assert_eq!(
        ids(&*store, H, false).await,
        [t1, t2],
        "B's copy is not held"
    );
    let page = store
        .read_held(G, (i64::MIN, i64::MIN), now_ms(), 10)
        .await
        .unwrap();
    assert!(page.messages.is_empty());
    assert_eq!(page.next_due, Some(due));
    let page = store
        .read_held(G, (i64::MIN, i64::MIN), due, 10)
        .await
        .unwrap();
    assert_eq!(page.messages.len(), 1);
    assert_eq!(page.messages[0].message.id, t1);
    assert_eq!(page.messages[0].due, due);
    assert_eq!(page.messages[0].message.redeliveries, 2);
    // Released: due cleared, the count stays; the cursor reads it again.
    let op = WriteOp::Redelivered {
        container: G.into(),
        id: t1,
        count: 2,
        hold_until: None,
    };
    assert_eq!(deleted(&*store, op).await, 1);
    let page = store.read_queue(G, 0, 10).await.unwrap();
    assert_eq!(page.iter().map(|m| m.id).collect::<Vec<_>>(), [t1, t2]);
    assert_eq!(page[0].redeliveries, 2);
    // Acked: its delivery row goes with it; a failed delivery of an acked row is not kept.
    let ack = WriteOp::Remove {
        container: G.into(),
        ids: vec![t1],
    };
    assert_eq!(deleted(&*store, ack).await, 1);
    let late = WriteOp::Redelivered {
        container: G.into(),
        id: t1,
        count: 3,
        hold_until: None,
    };
    assert_eq!(deleted(&*store, late).await, 0);
    store.close().await;
}

/// Dead-lettering and expiry take a topic row from the group once; the other group
/// keeps it.
async fn a_group_dead_letters_and_expires_its_topic_rows_once(t: TestStore) {
    let store = t.open().await;
    bind(&*store, G).await;
    bind(&*store, H).await;
    let t1 = add(&*store, T, "t1", 0).await;
    let expired = add(&*store, T, "expired", EXPIRED).await;
    let own_expired = add(&*store, G, "own expired", EXPIRED).await;
    let live = add(&*store, T, "live", 0).await;
    let move_t1 = || WriteOp::DeadLetter {
        container: G.into(),
        id: t1,
        message: message(DLQ, "t1 dead", 0),
    };
    let moved = |o: WriteOutcome| match o {
        WriteOutcome::DeadLettered(m) => m,
        other => panic!("{other:?}"),
    };
    let first = moved(store.write_one(move_t1()).await.unwrap());
    assert!(matches!(first, Moved::Added(_)), "{first:?}");
    assert_eq!(
        moved(store.write_one(move_t1()).await.unwrap()),
        Moved::Gone
    );
    assert_eq!(store.count_messages(DLQ).await.unwrap(), 1);
    // Expired, read for a dead-letter queue, in expiration order.
    let read: Vec<i64> = store
        .read_expired(G, now_ms(), 10)
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    let mut expected = vec![expired, own_expired];
    expected.sort_unstable();
    assert_eq!(read.len(), 2);
    assert!(read.contains(&expired) && read.contains(&own_expired));
    assert!(store.next_expiration(G).await.unwrap().is_some());
    // One page expires both: the own row deleted, the topic's acked for the group.
    let page = match store
        .write_one(WriteOp::ExpireQueue {
            container: G.into(),
            now_ms: now_ms(),
            limit: 10,
        })
        .await
        .unwrap()
    {
        WriteOutcome::Removed(ids) => ids,
        other => panic!("{other:?}"),
    };
    assert_eq!(page, expected);
    assert_eq!(ids(&*store, G, true).await, [live]);
    assert_eq!(ids(&*store, H, true).await, [t1, expired, live]);
    assert_eq!(store.next_expiration(G).await.unwrap(), None);
    store.close().await;
}

/// Unbinding a group (its subscription removed) leaves its own rows only; the store
/// knows its groups after a reopen.
async fn an_unbound_group_is_a_queue_again(t: TestStore) {
    let store = t.open().await;
    bind(&*store, G).await;
    let t1 = add(&*store, T, "t1", 0).await;
    let own = add(&*store, G, "own", 0).await;
    store.close().await;
    let store = t.open().await;
    assert_eq!(ids(&*store, G, false).await, [t1, own]);
    let removed = store
        .write_one(WriteOp::Unsubscribe {
            container: T.into(),
            key: SubscriptionKey::group(G),
        })
        .await
        .unwrap();
    assert_eq!(removed, WriteOutcome::Unsubscribed(true));
    assert_eq!(ids(&*store, G, false).await, [own]);
    assert_eq!(store.count_committed(G).await.unwrap(), 1);
    store.close().await;
    let store = t.open().await;
    assert_eq!(ids(&*store, G, false).await, [own]);
    store.close().await;
}

on_every_backend!(
    groups_read_the_topic_rows_once_stored,
    a_groups_redeliveries_and_holds_are_its_own_and_durable,
    a_group_dead_letters_and_expires_its_topic_rows_once,
    an_unbound_group_is_a_queue_again,
);
