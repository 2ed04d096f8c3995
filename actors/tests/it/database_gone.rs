//! When the database goes away, writes fail with an error (never a panic, never a
//! silent drop), and once it is back the store actor works again with nothing
//! committed lost. PostgreSQL is reached through a TCP proxy
//! ([`DatabaseProxy`]) that can cut every connection and refuse new ones, and later
//! let them through again.

use ebb_actors::{ActorError, StoreActorConfig, StoreHandle};
use ebb_store::proxy::DatabaseProxy;
use ebb_store::test_util::{message, TestStore};
use ebb_store::StoreOptions;

const T: &str = "topic://gone";

#[actix_rt::test]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run this PostgreSQL test"
)]
async fn writes_fail_while_the_database_is_gone_and_work_after() {
    let t = TestStore::postgres();
    let direct = t.open().await;
    let proxy = DatabaseProxy::start(&t.url).await.unwrap();
    let options = StoreOptions {
        acquire_timeout_ms: 1_500,
        max_connections: 2,
        ..t.options.clone()
    };
    let store = ebb_store::open(proxy.url(), &options).await.unwrap();
    let handle = StoreHandle::start(store, StoreActorConfig::default());
    let add = |name: String| message(T, &name, 0);

    let mut committed = Vec::new();
    for i in 0..20 {
        committed.push(handle.add(add(format!("before-{i}"))).await.unwrap());
    }

    // Writes in flight when the connections are cut, and writes while it is down.
    let in_flight: Vec<_> = (0..50)
        .map(|i| {
            let (handle, m) = (handle.clone(), add(format!("during-{i}")));
            actix_rt::spawn(async move { handle.add(m).await })
        })
        .collect();
    proxy.cut();
    let mut failed = 0;
    for task in in_flight {
        match task.await.unwrap() {
            Ok(id) => committed.push(id),
            Err(ActorError::Store(e)) => {
                failed += 1;
                assert!(e.to_string().starts_with("store "), "{e}");
            }
            Err(other) => panic!("unexpected error kind: {other:?}"),
        }
    }
    let down = handle.add(add("while-down".into())).await;
    let err = down.expect_err("a write while the database is gone must fail");
    assert!(matches!(err, ActorError::Store(_)), "{err:?}");
    assert!(failed > 0 || committed.len() == 70);

    // Back: the same actor writes again, on new connections.
    proxy.restore();
    for i in 0..20 {
        committed.push(handle.add(add(format!("after-{i}"))).await.unwrap());
    }
    handle.close().await.unwrap();

    // Nothing that was acknowledged is lost.
    for id in &committed {
        let found = direct.browse(T, id - 1, 1).await.unwrap();
        assert_eq!(
            found.first().map(|m| m.id),
            Some(*id),
            "committed message {id} lost"
        );
    }
    let stored = direct.count_messages(T).await.unwrap();
    assert!(stored >= committed.len() as u64);
    assert!(
        stored <= committed.len() as u64 + 51,
        "at most the failed writes are in doubt"
    );
}
