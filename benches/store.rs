//! Store benchmarks, on SQLite (always) and PostgreSQL (when `EBB_BENCH_POSTGRES_URL`
//! is set, e.g. `postgres://postgres@127.0.0.1:5432/test`; a schema of its own is used).
//!
//! - `group_commit`: persistent adds through the store actor, one writer at a time vs
//!   64 writers in flight (throughput in messages per second; SQLite `synchronous=FULL`);
//!   on PostgreSQL also with a lease (`postgres-lease`: each transaction checks it).
//! - `recover_expired`: time per call with a backlog of 1,000, 100,000 and 1,000,000
//!   messages for one durable subscription, with no TTL (nothing to expire) and with all
//!   expired (a full page of 400). Bounded reads mean the time must not grow with the
//!   backlog.
//!
//! Run: `cargo bench --bench store` (add `-- recover_expired` or `-- group_commit` to
//! pick one). Backlog sizes can be cut with `EBB_BENCH_MAX_BACKLOG=100000`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ebb_actors::{StoreActorConfig, StoreHandle};
use ebb_store::{
    MessageStore, MessageStoreExt, NewMessage, Payload, StoreOptions, SubscriptionKey, WriteOp,
};

const PAGE: u32 = 400;

/// `(label, url, options)` of each backend to measure.
fn backends(tag: &str) -> Vec<(&'static str, String, StoreOptions, Option<tempdir::Dir>)> {
    let dir = tempdir::Dir::new(tag);
    let mut out = vec![(
        "sqlite",
        format!("sqlite://{}/bench.db", dir.0.display()),
        StoreOptions::default(),
        Some(dir),
    )];
    if let Ok(url) = std::env::var("EBB_BENCH_POSTGRES_URL") {
        out.push((
            "postgres",
            url,
            StoreOptions {
                schema: Some(format!("ebb_bench_{tag}_{}", std::process::id())),
                ..StoreOptions::default()
            },
            None,
        ));
    }
    out
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> Self {
            let p = std::env::temp_dir().join(format!("ebb-bench-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn message(container: &str, i: u64, expiration: i64) -> NewMessage {
    NewMessage {
        container: container.into(),
        indexed_headers: container.starts_with("queue://"),
        last_value: None,
        message_id: format!("ID:bench-{i}"),
        expiration,
        priority: 4,
        xid: None,
        payload: Arc::new(Payload {
            timestamp_ms: 0,
            headers: vec![],
            body: vec![b'x'; 256].into(),
        }),
    }
}

fn group_commit(c: &mut Criterion) {
    let mut group = c.benchmark_group("group_commit");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(1));
    let mut measured = backends("gc");
    // High availability: every write transaction also checks the lease.
    if let Some((_, url, options, _)) = measured.iter().find(|b| b.0 == "postgres") {
        let mut leased = options.clone();
        leased.schema = leased.schema.map(|s| format!("{s}_lease"));
        leased.lease = Some(ebb_store::LeaseOptions::new(10_000, 2_000).unwrap());
        measured.push(("postgres-lease", url.clone(), leased, None));
    }
    for (label, url, options, _dir) in measured {
        for writers in [1u64, 64] {
            let id = BenchmarkId::new(label, format!("{writers} writers"));
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    actix_rt::System::new().block_on(async {
                        let store = ebb_store::open(&url, &options).await.unwrap();
                        // (the lease, when there is one: the previous run released it)
                        store.lock_exclusive().await.unwrap();
                        let handle = StoreHandle::start(store, StoreActorConfig::default());
                        let per_writer = iters.div_ceil(writers);
                        let start = Instant::now();
                        let tasks: Vec<_> = (0..writers)
                            .map(|w| {
                                let handle = handle.clone();
                                actix_rt::spawn(async move {
                                    for i in 0..per_writer {
                                        let m = message("queue://bench", w * per_writer + i, 0);
                                        handle.add(m).await.unwrap();
                                    }
                                })
                            })
                            .collect();
                        for t in tasks {
                            t.await.unwrap();
                        }
                        let elapsed = start.elapsed();
                        handle.close().await.unwrap();
                        // Report per message actually sent (iters rounded up to writers).
                        elapsed.mul_f64(iters as f64 / (per_writer * writers) as f64)
                    })
                })
            });
        }
    }
    group.finish();
}

/// Fills `container` up to `target` messages (in transactions of 5,000).
async fn fill(store: &dyn MessageStore, container: &str, have: &mut u64, target: u64, exp: i64) {
    while *have < target {
        let n = (target - *have).min(5_000);
        let batch = (0..n).map(|i| message(container, *have + i, exp)).collect();
        store.add_messages(batch).await.unwrap();
        *have += n;
    }
}

fn recover_expired(c: &mut Criterion) {
    let max: u64 = std::env::var("EBB_BENCH_MAX_BACKLOG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("recover_expired");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    for (label, url, options, _dir) in backends("re") {
        let store = rt.block_on(ebb_store::open(&url, &options)).unwrap();
        let sub = SubscriptionKey::new("bench", "offline");
        let (live, expired) = ("topic://bench-live", "topic://bench-expired");
        for container in [live, expired] {
            rt.block_on(store.write_one(WriteOp::Subscribe {
                container: container.into(),
                key: sub.clone(),
                selector: None,
                prioritized: false,
            }))
            .unwrap();
        }
        let (mut have_live, mut have_expired) = (0, 0);
        for backlog in [1_000u64, 100_000, 1_000_000]
            .into_iter()
            .filter(|b| *b <= max)
        {
            rt.block_on(fill(&*store, live, &mut have_live, backlog, 0));
            rt.block_on(fill(&*store, expired, &mut have_expired, backlog, 1));
            for (kind, container, rows) in [("no_ttl", live, 0), ("all_expired", expired, PAGE)] {
                let id = BenchmarkId::new(format!("{label}/{kind}"), backlog);
                let subs = [sub.clone()];
                group.bench_function(id, |b| {
                    b.to_async(&rt).iter(|| async {
                        let page = store
                            .recover_expired(container, &subs, i64::MAX / 2, PAGE)
                            .await
                            .unwrap();
                        assert_eq!(page.rows as u32, rows);
                    })
                });
            }
        }
        rt.block_on(store.close());
    }
    group.finish();
}

criterion_group!(benches, group_commit, recover_expired);
criterion_main!(benches);
