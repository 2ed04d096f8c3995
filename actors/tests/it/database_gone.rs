//! When the database goes away, writes fail with an error (never a panic, never a
//! silent drop), and once it is back the store actor works again with nothing
//! committed lost. PostgreSQL is reached through a TCP proxy in this test that can
//! cut every connection and refuse new ones, and later let them through again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ebb_actors::{ActorError, StoreActorConfig, StoreHandle};
use ebb_store::test_util::{message, TestStore};
use ebb_store::StoreOptions;
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const T: &str = "topic://gone";

/// Forwards 127.0.0.1:<port> to the database; `cut` closes every connection and makes
/// new ones close at once, `restore` lets them through again.
struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(target: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (up2, links2) = (up.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let target = target.clone();
                links2.lock().push(tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                }));
            }
        });
        Self { port, up, links }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for link in self.links.lock().drain(..) {
            link.abort();
        }
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// `postgres://user@host:port/db` -> (`host:port`, URL through the proxy port).
fn through_proxy(url: &str, port: u16) -> (String, String) {
    let rest = url
        .split_once('@')
        .map(|(_, r)| r)
        .unwrap_or(url.trim_start_matches("postgres://"));
    let host_port = rest.split('/').next().unwrap().to_string();
    (
        host_port.clone(),
        url.replacen(&host_port, &format!("127.0.0.1:{port}"), 1),
    )
}

#[actix_rt::test]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run this PostgreSQL test"
)]
async fn writes_fail_while_the_database_is_gone_and_work_after() {
    let t = TestStore::postgres();
    let direct = t.open().await;
    let (target, _) = through_proxy(&t.url, 0);
    let proxy = Proxy::start(target).await;
    let (_, url) = through_proxy(&t.url, proxy.port);
    let options = StoreOptions {
        acquire_timeout_ms: 1_500,
        max_connections: 2,
        ..t.options.clone()
    };
    let store = ebb_store::open(&url, &options).await.unwrap();
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
