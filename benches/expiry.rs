//! Expiry and idle-topic figures, printed as a table (long runs and memory, which a
//! statistics harness does not suit).
//!
//! 1. Drain: 200,000 expired messages (256 bytes), one offline durable subscription,
//!    pages of 400 chained at once, nothing else running: seconds from the first tick
//!    until all are expired and their rows gone, and rows per second; and, for
//!    comparison, what one page per 30 s period (ActiveMQ's schedule) would take for
//!    the same pages (computed: pages x period).
//! 2. A producer on another topic (one persistent send at a time) alone, then during
//!    a drain of the same backlog (its first 20 s), in one run: sends per second and
//!    their ratio, and the rows the drain expired meanwhile.
//! 3. Idle topics: 10,000 topics with no TTL: resident memory per topic (SQLite run
//!    only), and timer wake-ups per second over 5 s.
//!
//! Run: `cargo bench --bench expiry` (SQLite in a temporary folder; set
//! `EBB_BENCH_POSTGRES_URL` to add PostgreSQL). `EBB_BENCH_DRAIN=N` changes the
//! backlog; `EBB_BENCH_EXPIRY_ONLY=drain` runs only the drain alone (for a profiler).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb::{Broker, BrokerConfig, Message, Policy, PolicyEntry, PolicyMap, SubscribeOptions};
use ebb_store::{MessageStoreExt, NewMessage, Payload, StoreOptions, SubscriptionKey, WriteOp};

const PAGE: u32 = 400;

fn config(store: StoreOptions, period: u64) -> BrokerConfig {
    BrokerConfig {
        store,
        policies: PolicyMap {
            entries: vec![PolicyEntry {
                destination: "topic://>".into(),
                policy: Policy {
                    expire_messages_period: period,
                    max_expire_page_size: PAGE,
                    ..Policy::default()
                },
            }],
        },
        ..BrokerConfig::default()
    }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

async fn preload(url: &str, options: &StoreOptions, count: u64) {
    let store = ebb_store::open(url, options).await.unwrap();
    store
        .write_one(WriteOp::Subscribe {
            container: "topic://drain".into(),
            key: SubscriptionKey::new("bench", "offline"),
            selector: None,
            prioritized: false,
        })
        .await
        .unwrap();
    let mut sent = 0;
    while sent < count {
        let n = (count - sent).min(5_000);
        let batch = (0..n)
            .map(|i| NewMessage {
                container: "topic://drain".into(),
                indexed_headers: false,
                last_value: None,
                message_id: format!("ID:drain-{}", sent + i),
                expiration: 1,
                priority: 4,
                xid: None,
                payload: Arc::new(Payload {
                    timestamp_ms: 0,
                    headers: vec![],
                    body: vec![b'x'; 256].into(),
                }),
            })
            .collect();
        store.add_messages(batch).await.unwrap();
        sent += n;
    }
    store.close().await;
}

/// Sends persistent messages to `topic://other` (which has a durable subscription)
/// until `stop` says so; returns sends per second.
async fn producer(broker: Broker, stop: impl Fn() -> bool) -> f64 {
    let start = Instant::now();
    let mut sent = 0u64;
    while !stop() {
        broker
            .send("topic://other", Message::new(vec![b'y'; 256]))
            .await
            .unwrap();
        sent += 1;
    }
    sent as f64 / start.elapsed().as_secs_f64()
}

/// Runs one expiry run of the `count` expired messages on `topic://drain` to its end
/// (every one expired and its row gone) or for `at_most`, with `beside` (a producer,
/// or nothing) running until then. Returns `(seconds, messages expired, pages, max
/// rows per page, what beside returned)`.
async fn run_drain<F, T>(
    broker: &Broker,
    count: u64,
    at_most: Duration,
    beside: F,
) -> (f64, u64, u64, u64, T)
where
    F: FnOnce(Arc<std::sync::atomic::AtomicBool>) -> actix_rt::task::JoinHandle<T>,
{
    let before = broker.topic_stats("topic://drain").await.unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let side = beside(Arc::clone(&done));
    let start = Instant::now();
    broker.run_housekeeping("topic://drain").await.unwrap();
    loop {
        let stats = broker.topic_stats("topic://drain").await.unwrap();
        // Rows are counted (a scan of the topic's index) only once all are expired.
        let expired = stats.expired >= before.expired + count;
        let over = start.elapsed() >= at_most;
        if over
            || expired
                && broker
                    .store()
                    .count_messages("topic://drain")
                    .await
                    .unwrap()
                    == 0
        {
            let seconds = start.elapsed().as_secs_f64();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            let got = side.await.unwrap();
            return (
                seconds,
                stats.expired - before.expired,
                stats.expiry_pages - before.expiry_pages,
                stats.max_expiry_page_rows,
                got,
            );
        }
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `EBB_BENCH_EXPIRY_ONLY=drain`: only the drain alone.
fn drain_only() -> bool {
    std::env::var("EBB_BENCH_EXPIRY_ONLY").is_ok_and(|v| v == "drain")
}

async fn drain(label: &str, url: &str, options: StoreOptions, count: u64) {
    preload(url, &options, count).await;
    let broker = Broker::start(url, config(options.clone(), 3_600_000))
        .await
        .unwrap();
    drop(
        broker
            .subscribe("topic://other", SubscribeOptions::durable("bench", "other"))
            .await
            .unwrap(),
    );
    broker.topic_stats("topic://drain").await.unwrap();

    // Baseline: the producer alone for 3 s.
    let until = Instant::now() + Duration::from_secs(3);
    let alone = producer(broker.clone(), move || Instant::now() >= until).await;

    // The drain alone.
    let (alone_s, _, pages, max_rows, ()) =
        run_drain(&broker, count, Duration::MAX, |_| actix_rt::spawn(async {})).await;

    broker.shutdown().await.unwrap();
    if drain_only() {
        println!(
            "| {label} | {count} | {pages} | {max_rows} | {alone_s:.1} s ({:.0} rows/s) | | | |",
            count as f64 / alone_s
        );
        return;
    }
    // The same backlog again, drained with the producer running beside it.
    preload(url, &options, count).await;
    let broker = Broker::start(url, config(options, 3_600_000))
        .await
        .unwrap();
    broker.topic_stats("topic://drain").await.unwrap();
    let b = broker.clone();
    // Housekeeping yields to live writes: the drain beside the producer is slow, so it
    // is measured for 20 s (or to its end).
    let (beside_s, beside_n, _, _, during) =
        run_drain(&broker, count, Duration::from_secs(20), move |done| {
            actix_rt::spawn(producer(b, move || {
                done.load(std::sync::atomic::Ordering::Relaxed)
            }))
        })
        .await;
    println!(
        "| {label} | {count} | {pages} | {max_rows} | {alone_s:.1} s ({:.0} rows/s) | {:.0} s ({:.1} h) | {alone:.0}/s | {during:.0}/s ({:.2}); drain meanwhile {:.0} rows/s |",
        count as f64 / alone_s,
        pages as f64 * 30.0,
        pages as f64 * 30.0 / 3600.0,
        during / alone,
        beside_n as f64 / beside_s,
    );
    broker.shutdown().await.unwrap();
}

async fn idle_topics(label: &str, url: &str, options: StoreOptions) {
    const TOPICS: usize = 10_000;
    let broker = Broker::start(url, config(options, 30_000)).await.unwrap();
    broker.topic_stats("topic://warm-up").await.unwrap();
    let before = rss_bytes();
    for i in 0..TOPICS {
        broker
            .topic_stats(&format!("topic://idle.{i}"))
            .await
            .unwrap();
    }
    let after = rss_bytes();
    let ticks_before: u64 = ticks(&broker, TOPICS).await;
    actix_rt::time::sleep(Duration::from_secs(5)).await;
    let ticks_after: u64 = ticks(&broker, TOPICS).await;
    println!(
        "| {label} | {TOPICS} | {} bytes | {:.1} |",
        (after.saturating_sub(before)) / TOPICS as u64,
        (ticks_after - ticks_before) as f64 / 5.0
    );
    broker.shutdown().await.unwrap();
}

async fn ticks(broker: &Broker, topics: usize) -> u64 {
    let mut total = 0;
    for i in 0..topics {
        total += broker
            .topic_stats(&format!("topic://idle.{i}"))
            .await
            .unwrap()
            .ticks;
    }
    total
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` / `cargo bench -- --list`: nothing to list.
    }
    let count: u64 = std::env::var("EBB_BENCH_DRAIN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let dir = std::env::temp_dir().join(format!("ebb-bench-expiry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut backends = vec![(
        "sqlite".to_string(),
        format!("sqlite://{}/drain.db", dir.display()),
        StoreOptions::default(),
    )];
    if let Ok(url) = std::env::var("EBB_BENCH_POSTGRES_URL") {
        backends.push((
            "postgres".to_string(),
            url,
            StoreOptions {
                schema: Some(format!("ebb_bench_expiry_{}", std::process::id())),
                ..StoreOptions::default()
            },
        ));
    }
    actix_rt::System::new().block_on(async {
        println!("| store | expired backlog | pages | max rows/page | drain alone, pages chained | one page per 30 s (computed) | producer alone | producer during a drain (ratio); the drain meanwhile |");
        println!("|---|---|---|---|---|---|---|---|");
        for (label, url, options) in &backends {
            drain(label, url, options.clone(), count).await;
        }
        if drain_only() {
            return;
        }
        println!();
        println!("| store | idle topics | resident memory per topic | wake-ups per second |");
        println!("|---|---|---|---|");
        // Once, on SQLite: a topic's memory does not depend on the store, and a second
        // run in the same process reuses the memory the first one freed.
        let (label, url, options) = &backends[0];
        idle_topics(label, &url.replace("drain.db", "idle.db"), options.clone()).await;
    });
    let _ = std::fs::remove_dir_all(&dir);
}
