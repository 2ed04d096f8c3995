//! The console's history (issue 36) on a broker with many destinations: what it
//! holds in memory, and what one reading costs.
//!
//! Workload: a broker on a fresh store with its HTTP server (history step
//! `EBB_BENCH_HISTORY_STEP_MS`, default 1,000 ms, so that a run is short: a series'
//! rings have the same size at any step). D queues (`EBB_BENCH_HISTORY_QUEUES`,
//! default 10,000) get one message each; then one producer sends to A of them
//! (`EBB_BENCH_HISTORY_ACTIVE`, default 100) in turn, 1,000 messages a second, for S
//! seconds (`EBB_BENCH_HISTORY_SECONDS`, default 30). Then it reads
//! `GET /api/v1/broker/history` (the bytes the history counts: series, last
//! readings, the broker's series), times `GET /api/v1/broker/destinations` sorted by
//! depth (a sort of every running destination), and times `Broker::stats` (a refresh
//! of the kept reading, as the metrics task does every second, then a copy of every
//! destination's entry).
//!
//! Run: `cargo bench --bench history` (`EBB_BENCH_POSTGRES_URL` for PostgreSQL).

mod common;

use std::time::{Duration, Instant};

use common::ebb_run;
use common::report::{env, thousands};
use ebb::http::{HttpOptions, HttpServer};
use ebb::Message;
use futures::StreamExt;

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` / `cargo bench -- --list`: nothing to list.
    }
    let queues: usize = env("EBB_BENCH_HISTORY_QUEUES", 10_000usize).max(1);
    let active: usize = env("EBB_BENCH_HISTORY_ACTIVE", 100usize).clamp(1, queues);
    let seconds: u64 = env("EBB_BENCH_HISTORY_SECONDS", 30u64).max(2);
    let step = Duration::from_millis(env("EBB_BENCH_HISTORY_STEP_MS", 1_000u64).max(100));
    let store = ebb_run::store_from_env();
    let dir = ebb_run::fresh_dir("history");
    println!(
        "history: {} queues, {active} of them sent to at 1,000 msg/s for {seconds} s; step {} ms; {} store",
        thousands(queues as f64),
        step.as_millis(),
        store.label()
    );
    let runtime = ebb_run::runtime();
    runtime.block_on(async {
        let run = ebb_run::start(&store, &dir, "history", 0).await;
        let b = run.broker.clone();
        let started = Instant::now();
        futures::stream::iter(0..queues)
            .map(|i| {
                let b = b.clone();
                async move {
                    b.send(format!("queue://h.{i:05}").as_str(), Message::new("x"))
                        .await
                        .unwrap()
                }
            })
            .buffer_unordered(64)
            .for_each(|_| async {})
            .await;
        println!(
            "  {} queues made in {:.1} s",
            thousands(queues as f64),
            started.elapsed().as_secs_f64()
        );
        let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
        options.history_step = step;
        let server = HttpServer::start(options, b.clone()).await.unwrap();
        let api = format!("http://{}/api/v1", server.local_addr());
        let producer = {
            let b = b.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                let until = Instant::now() + Duration::from_secs(seconds);
                let mut n = 0usize;
                while Instant::now() < until {
                    tick.tick().await;
                    for _ in 0..10 {
                        let to = format!("queue://h.{:05}", (n % active) * (queues / active));
                        b.send(to.as_str(), Message::new("busy")).await.unwrap();
                        n += 1;
                    }
                }
                n
            })
        };
        let sent = producer.await.unwrap();
        // One more step, so the last sends are in a reading.
        tokio::time::sleep(step * 2).await;
        let history = get(format!("{api}/broker/history?window=1m")).await;
        let memory = &history.0["memory"];
        let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        let total =
            n(&memory["series_bytes"]) + n(&memory["reading_bytes"]) + n(&memory["broker_bytes"]);
        let sorted = get(format!(
            "{api}/broker/destinations?sort=depth&order=desc&limit=50"
        ))
        .await;
        let mut snapshots = Vec::new();
        for _ in 0..5 {
            let at = Instant::now();
            let stats = b.stats().await.unwrap();
            snapshots.push(at.elapsed());
            assert!(stats.destinations.len() >= queues);
        }
        snapshots.sort();
        let rates = history.0["enqueued_per_s"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let peak = rates.iter().filter_map(|r| r.as_f64()).fold(0.0, f64::max);
        println!(
            "  sent {} messages; the broker's chart saw up to {peak:.0} msg/s",
            thousands(sent as f64)
        );
        println!("| what | value |");
        println!("|---|---|");
        println!(
            "| destinations with a series / running | {} / {} |",
            n(&memory["series"]),
            thousands(n(&memory["readings"]) as f64)
        );
        println!(
            "| bytes of the destination series | {} |",
            thousands(n(&memory["series_bytes"]) as f64)
        );
        println!(
            "| bytes of the last readings | {} |",
            thousands(n(&memory["reading_bytes"]) as f64)
        );
        println!(
            "| bytes of the broker's series | {} |",
            thousands(n(&memory["broker_bytes"]) as f64)
        );
        println!(
            "| history in all | {} bytes ({:.2} MiB) |",
            thousands(total as f64),
            total as f64 / 1_048_576.0
        );
        println!(
            "| GET /api/v1/broker/destinations sorted by depth | {:.1} ms |",
            sorted.1.as_secs_f64() * 1000.0
        );
        println!(
            "| Broker::stats (a refresh of what changed, then a copy of every destination's reading), median of 5 | {:.1} ms |",
            snapshots[2].as_secs_f64() * 1000.0
        );
        server.stop().await;
        run.finish().await;
    });
}

/// `GET url`: its JSON and how long it took.
async fn get(url: String) -> (serde_json::Value, Duration) {
    tokio::task::spawn_blocking(move || {
        let at = Instant::now();
        let text = ureq::get(&url)
            .call()
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .into_string()
            .unwrap();
        (serde_json::from_str(&text).unwrap(), at.elapsed())
    })
    .await
    .unwrap()
}
