//! SQLite's memory is bounded by configuration (`StoreOptions::sqlite_cache_kib` and
//! `sqlite_memory_limit_kib`), not by the size of the tables: the bytes SQLite has
//! allocated are counted (`ebb_store::sqlite::memory_used`), never timed.
//!
//! A binary of its own: SQLite's soft heap limit and its counters are process-wide, so
//! no other test's store may open beside this one.

use std::sync::Arc;

use ebb_store::test_util::{message, TestStore};
use ebb_store::{MessageStore, MessageStoreExt};

const MIB: u64 = 1024 * 1024;

/// What the bounded run may reach: its 2 MiB limit and 1.5 MiB over.
const BOUND: u64 = 2 * MIB + 3 * MIB / 2;

/// 24 MiB of messages (24,000 of 1 KiB) in `container`, then read back whole by four
/// readers at once, so that several pooled connections fill their caches.
async fn fill_and_read(store: &Arc<dyn MessageStore>, container: &str) {
    let body = "x".repeat(1024);
    for _ in 0..8 {
        let batch = (0..3_000).map(|_| message(container, &body, 0)).collect();
        store.add_messages(batch).await.unwrap();
    }
    let readers = (0..4).map(|_| {
        let store = store.clone();
        let container = container.to_string();
        tokio::spawn(async move {
            let (mut after, mut read) = (0, 0);
            loop {
                let page = store.browse(&container, after, 500).await.unwrap();
                let Some(last) = page.last() else { break };
                after = last.id;
                read += page.len();
            }
            read
        })
    });
    for reader in readers {
        assert_eq!(
            reader.await.unwrap(),
            24_000,
            "each reader saw every message"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_stays_under_its_limit_whatever_the_table_size() {
    // Bounded: 256 KiB of cache per connection, 2 MiB for all of SQLite.
    let mut bounded = TestStore::sqlite();
    bounded.options.sqlite_cache_kib = 256;
    bounded.options.sqlite_memory_limit_kib = 2048;
    let store = bounded.open().await;
    fill_and_read(&store, "queue://bounded").await;
    let (_, peak) = ebb_store::sqlite::memory_used();
    eprintln!("bounded: SQLite peak {peak} bytes");
    // The limit is soft (prepared statements and a statement that needs more get
    // it), so a margin of 1.5 MiB.
    assert!(
        peak <= BOUND,
        "SQLite's peak allocation {peak} bytes is over its 2 MiB limit by more than 1.5 MiB"
    );
    store.close().await;

    // The same work without the limit, and caches of 8,000 KiB a connection: they
    // grow with the tables, far past what the bounds allowed.
    let mut unbounded = TestStore::sqlite();
    unbounded.options.sqlite_cache_kib = 8000;
    unbounded.options.sqlite_memory_limit_kib = 0;
    let store = unbounded.open().await;
    fill_and_read(&store, "queue://unbounded").await;
    let (now, _) = ebb_store::sqlite::memory_used();
    eprintln!("unbounded: SQLite holds {now} bytes");
    assert!(
        now > 2 * BOUND,
        "without bounds SQLite holds {now} bytes: the bounded run proved nothing"
    );
    store.close().await;
}
