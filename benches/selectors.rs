//! Selectors on queues, printed as two tables and one JSON line.
//!
//! **Deep.** A queue holds `EBB_BENCH_SELECTOR_AHEAD` (default 1,000,000) persistent
//! messages with `kind:video` (1 KiB bodies, written straight into the store before
//! the queue starts), then 3 with `kind:image`. A consumer subscribes with
//! `kind = 'image'`, then (on a fresh store) with `kind LIKE 'im%'` (prefetch 10)
//! while nobody consumes the videos. Measured: the time
//! from SUBSCRIBE to the first and to the third image, the rows the queue read for it
//! (its scan of the store beyond the cursor: `kind = 'image'` is tested in SQL, so each
//! page covers a window of 10,000 ids and reads back only what matches; `LIKE` is not,
//! so each page reads 400 rows back and the selector tests them;
//! `QueueStats::scan_pages` and `scan_rows`), the messages it held in memory at the
//! end, and the
//! process's resident memory: before the subscribe and its peak during the scan
//! (sampled every 10 ms). This is where Artemis's paging fails (messages for a
//! selector deep in a paged backlog are not found until the backlog ahead is consumed)
//! and ActiveMQ's dispatch stalls once its page (200) is full of messages no consumer
//! takes. On SQLite (a temporary file) and, with `EBB_BENCH_POSTGRES_URL`, PostgreSQL.
//!
//! **Dispatch.** `EBB_BENCH_SELECTOR_MESSAGES` (default 200,000) non-persistent
//! messages to one queue with 10 consumers (auto ack, prefetch 1,000), each message
//! carrying `color`, `size` and `region`: once with plain consumers, once with each
//! consumer's 3-term selector `color = 'cN' AND size > 10 AND region IN ('eu', 'us')`
//! (every message matches exactly one consumer). Sends are started without waiting
//! for each (`Broker::start_send`). Measured: messages per second from the first send
//! to the last delivery, the median of `EBB_BENCH_SELECTOR_ROUNDS`
//! (default 3) rounds, and the ratio with / without.
//!
//! **Hostile LIKE** (issue 35, point 9). 10 subscriptions to one topic, each with
//! `h LIKE '%aaaa…ab%'` (a 4,000-character run, searched for), and 5 non-persistent messages whose
//! header `h` is 60,000 `a`s and a `b` (the worst case of a backtracking matcher,
//! ~2.4·10⁸ steps a message and subscription): measured, the time from the first send
//! to the 50th delivery, then a round trip on an unrelated queue. Before the linear
//! matcher the sends took 18.5 s and such a round trip up to 3.8 s.
//!
//! Run: `cargo bench --bench selectors` (`EBB_BENCH_SELECTOR_ONLY=deep`, `dispatch`
//! or `like` picks one table).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::ebb_run::{self, Store};
use common::procfs;
use common::report::{self, env, thousands};
use ebb::{AckMode, Broker, Message, Selector, SubscribeOptions};
use ebb_store::{MessageStoreExt, NewMessage, Payload};
use futures::StreamExt;

const BODY_BYTES: usize = 1024;

/// The deep table's selectors: one the store tests in SQL (an equality on a header),
/// one it cannot (`LIKE`), which reads every row back and tests it in memory.
const SELECTORS: [&str; 2] = ["kind = 'image'", "kind LIKE 'im%'"];

#[derive(Debug, Clone, serde::Serialize)]
struct Deep {
    store: &'static str,
    selector: &'static str,
    ahead: usize,
    first_ms: f64,
    third_ms: f64,
    scan_rows: u64,
    scan_pages: u64,
    held_in_memory: u64,
    rss_before_mib: f64,
    rss_peak_mib: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Dispatch {
    with_selectors: bool,
    messages: usize,
    msg_per_s: f64,
    rounds: Vec<f64>,
}

/// Writes `count` messages with header `kind: kind` to `container`, in batches of
/// 5,000, straight into the store (the queue has not started: they are its backlog).
async fn preload(broker: &Broker, container: &str, from: usize, count: usize, kind: &str) {
    let body: bytes::Bytes = vec![b'x'; BODY_BYTES].into();
    let mut done = 0;
    while done < count {
        let n = (count - done).min(5_000);
        let batch = (from + done..from + done + n)
            .map(|i| NewMessage {
                container: container.into(),
                indexed_headers: container.starts_with("queue://"),
                last_value: None,
                message_id: format!("{kind}-{i}"),
                expiration: 0,
                priority: 4,
                xid: None,
                payload: Arc::new(Payload {
                    timestamp_ms: 0,
                    headers: vec![("kind".into(), kind.into())],
                    body: body.clone(),
                }),
            })
            .collect();
        broker.store().add_messages(batch).await.expect("preload");
        done += n;
    }
}

async fn deep(store: &Store, dir: &std::path::Path, ahead: usize, selector: &'static str) -> Deep {
    let run = ebb_run::start(store, dir, "sel", 0).await;
    let queue = "queue://deep";
    let t = Instant::now();
    preload(&run.broker, queue, 0, ahead, "video").await;
    preload(&run.broker, queue, 0, 3, "image").await;
    eprintln!(
        "  {}: {} messages stored in {:.1} s",
        store.label(),
        thousands((ahead + 3) as f64),
        t.elapsed().as_secs_f64()
    );
    let pid = std::process::id();
    let rss_before = procfs::rss_bytes(pid).unwrap_or(0);
    let peak = Arc::new(AtomicU64::new(rss_before));
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (Arc::clone(&peak), Arc::clone(&sampling));
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                if let Some(rss) = procfs::rss_bytes(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let started = Instant::now();
    let options = SubscribeOptions::non_durable()
        .ack(AckMode::Client)
        .prefetch(10)
        .selector(Selector::parse(selector).unwrap());
    let mut sub = run.broker.subscribe(queue, options).await.unwrap();
    let mut at = Vec::new();
    for _ in 0..3 {
        let m = tokio::time::timeout(Duration::from_secs(600), sub.next())
            .await
            .expect("an image within 600 s")
            .expect("the subscription is open");
        assert_eq!(
            m.headers()
                .iter()
                .find(|(n, _)| n == "kind")
                .map(|(_, v)| v.as_str()),
            Some("image")
        );
        at.push(started.elapsed().as_secs_f64() * 1000.0);
        sub.ack(&m).await.unwrap();
    }
    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let stats = run.broker.queue_stats("deep").await.unwrap();
    drop(sub);
    run.finish().await;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    Deep {
        store: store.label(),
        selector,
        ahead,
        first_ms: at[0],
        third_ms: at[2],
        scan_rows: stats.scan_rows,
        scan_pages: stats.scan_pages,
        held_in_memory: stats.pending_in_memory,
        rss_before_mib: mib(rss_before),
        rss_peak_mib: mib(peak.load(Ordering::Relaxed)),
    }
}

async fn dispatch(dir: &std::path::Path, messages: usize, with_selectors: bool) -> f64 {
    let run = ebb_run::start(&Store::Sqlite, dir, "dispatch", 1).await;
    let queue = "queue://dispatch";
    let received = Arc::new(AtomicU64::new(0));
    let mut consumers = Vec::new();
    for n in 0..10 {
        let mut options = SubscribeOptions::non_durable().prefetch(1_000);
        if with_selectors {
            let text = format!("color = 'c{n}' AND size > 10 AND region IN ('eu', 'us')");
            options = options.selector(Selector::parse(&text).unwrap());
        }
        let mut sub = run.broker.subscribe(queue, options).await.unwrap();
        let received = Arc::clone(&received);
        consumers.push(actix_rt::spawn(async move {
            while let Some(_m) = sub.next().await {
                received.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let started = Instant::now();
    let regions = ["eu", "us"];
    for i in 0..messages {
        let m = Message::new(vec![b'x'; 100])
            .header("color", format!("c{}", i % 10))
            .header("size", (11 + i % 50).to_string())
            .header("region", regions[i % 2]);
        // Non-persistent: it has its place at once; nothing to wait for.
        drop(run.broker.start_send(queue, m).await.unwrap());
    }
    while received.load(Ordering::Relaxed) < messages as u64 {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "dispatch stalled at {} of {messages}",
            received.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = messages as f64 / started.elapsed().as_secs_f64();
    for c in consumers {
        c.abort();
    }
    run.finish().await;
    rate
}

/// The hostile-LIKE table: (ms from the first send to the last of the 50 deliveries,
/// ms of the unrelated round trip after them).
async fn hostile_like(dir: &std::path::Path) -> (f64, f64) {
    let run = ebb_run::start(&Store::Sqlite, dir, "like", 1).await;
    let topic = "topic://like";
    let text = format!("h LIKE '%{}b%'", "a".repeat(4_000));
    let mut subs = Vec::new();
    for _ in 0..10 {
        let options = SubscribeOptions::non_durable().selector(Selector::parse(&text).unwrap());
        subs.push(run.broker.subscribe(topic, options).await.unwrap());
    }
    // 60,000 `a`s then the `b` the pattern ends with: every subscription takes it,
    // after a backtracking matcher's worst case (the run of `a`s fails at every place
    // but the last).
    let header = format!("{}b", "a".repeat(60_000));
    let started = Instant::now();
    for _ in 0..5 {
        let m = Message::new("x")
            .header("h", header.as_str())
            .persistent(false);
        run.broker.send(topic, m).await.unwrap();
    }
    for sub in &mut subs {
        for _ in 0..5 {
            sub.next().await.expect("a match");
        }
    }
    let sends = started.elapsed().as_secs_f64() * 1e3;
    let mut other = run
        .broker
        .subscribe("queue://like.other", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let started = Instant::now();
    run.broker
        .send("queue://like.other", Message::new("ping").persistent(false))
        .await
        .unwrap();
    other.next().await.expect("the ping");
    let round_trip = started.elapsed().as_secs_f64() * 1e3;
    drop((subs, other));
    run.finish().await;
    (sends, round_trip)
}

#[actix_rt::main]
async fn main() {
    let only = report::only("EBB_BENCH_SELECTOR_ONLY");
    let ahead: usize = env("EBB_BENCH_SELECTOR_AHEAD", 1_000_000);
    let messages: usize = env("EBB_BENCH_SELECTOR_MESSAGES", 200_000);
    let rounds: usize = env("EBB_BENCH_SELECTOR_ROUNDS", 3);
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut stores = vec![Store::Sqlite];
    match std::env::var("EBB_BENCH_POSTGRES_URL") {
        Ok(url) => stores.push(Store::Postgres(url)),
        Err(_) => eprintln!("EBB_BENCH_POSTGRES_URL not set: the PostgreSQL row is skipped"),
    }
    let mut deeps = Vec::new();
    if report::wanted(&only, "deep") {
        for store in &stores {
            for selector in SELECTORS {
                deeps.push(deep(store, dir.path(), ahead, selector).await);
            }
        }
        println!(
            "\nA selector on a queue with {} non-matching messages (1 KiB) ahead of 3 matching:\n",
            thousands(ahead as f64)
        );
        println!("| store | selector | first match | third match | rows read back | pages | held in memory | RSS before | RSS peak |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for d in &deeps {
            println!(
                "| {} | `{}` | {:.0} ms | {:.0} ms | {} | {} | {} messages | {:.1} MiB | {:.1} MiB |",
                d.store,
                d.selector,
                d.first_ms,
                d.third_ms,
                thousands(d.scan_rows as f64),
                thousands(d.scan_pages as f64),
                d.held_in_memory,
                d.rss_before_mib,
                d.rss_peak_mib
            );
        }
    }
    let mut dispatches = Vec::new();
    if report::wanted(&only, "dispatch") {
        for with_selectors in [false, true] {
            let mut r = Vec::new();
            for _ in 0..rounds {
                r.push(dispatch(dir.path(), messages, with_selectors).await);
            }
            r.sort_by(f64::total_cmp);
            dispatches.push(Dispatch {
                with_selectors,
                messages,
                msg_per_s: r[r.len() / 2],
                rounds: r,
            });
        }
        println!(
            "\nDispatch, {} non-persistent messages to one queue, 10 consumers (median of {rounds}):\n",
            thousands(messages as f64)
        );
        println!("| consumers | msg/s | rounds | ratio |");
        println!("|---|---|---|---|");
        let base = dispatches[0].msg_per_s;
        for d in &dispatches {
            println!(
                "| {} | {} | {} | {:.2} |",
                if d.with_selectors {
                    "10 with a 3-term selector"
                } else {
                    "10 plain"
                },
                thousands(d.msg_per_s),
                d.rounds
                    .iter()
                    .map(|r| thousands(*r))
                    .collect::<Vec<_>>()
                    .join(" / "),
                d.msg_per_s / base
            );
        }
    }
    let mut like = None;
    if report::wanted(&only, "like") {
        let (sends_ms, round_trip_ms) = hostile_like(dir.path()).await;
        println!("\nHostile LIKE: 10 subscriptions with a 4,000-character `%a…ab%`, 5 messages with a 60 KB header:\n");
        println!("| 5 sends to 50 deliveries | a round trip on another queue after them |");
        println!("|---|---|");
        println!("| {sends_ms:.1} ms | {round_trip_ms:.1} ms |");
        like = Some(serde_json::json!({ "sends_ms": sends_ms, "round_trip_ms": round_trip_ms }));
    }
    println!(
        "\n{}",
        serde_json::json!({ "bench": "selectors", "deep": deeps, "dispatch": dispatches, "like": like })
    );
}
