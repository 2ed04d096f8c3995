//! A caller that drops a store call half-way (an actor that stops, an HTTP client that
//! goes away) leaves nothing behind: the call runs to its end on a task of its own
//! (`ebb_store::detached`), so no pooled connection stays inside the transaction it
//! had begun. Before, a read dropped while its `BEGIN ... READ ONLY` was on the wire
//! left its connection in a read-only transaction on PostgreSQL, and a later write on
//! it failed ("cannot execute DELETE in a read-only transaction").

use ebb_store::test_util::{message, on_every_backend, TestStore};
use ebb_store::{MessageStoreExt, StoreOptions, WriteOp};

async fn dropped_reads_leave_no_transaction_open(t: TestStore) {
    // A small pool, so the writes below meet the connections the reads used.
    let options = StoreOptions {
        max_connections: 2,
        ..t.options.clone()
    };
    let store = ebb_store::open(&t.url, &options).await.unwrap();
    store
        .add_messages(
            (0..50)
                .map(|i| message("queue://cancel", &format!("m{i}"), 0))
                .collect(),
        )
        .await
        .unwrap();
    for round in 0..1000u64 {
        // Dropped after a few polls: somewhere in acquire, BEGIN, the read.
        let mut read = std::pin::pin!(store.browse("queue://cancel", 0, 50));
        for _ in 0..round % 25 {
            if futures::poll!(read.as_mut()).is_ready() {
                break;
            }
            tokio::task::yield_now().await;
        }
        let write = store
            .write(vec![WriteOp::Add(message("queue://cancel", "w", 0))])
            .await;
        if let Err(e) = write {
            panic!("round {round}: a write after a dropped read failed: {e}");
        }
    }
    assert_eq!(store.count_messages("queue://cancel").await.unwrap(), 1050);
    store.close().await;
}

on_every_backend!(dropped_reads_leave_no_transaction_open);
