//! The embedding API's obvious loops, under a plain `#[tokio::main]`-style runtime
//! (tokio's multi-threaded runtime; the broker runs its actors on a thread of its own):
//! how fast a service that writes the code the README shows consumes a backlog.
//!
//! Workload per row: N persistent 1 KiB messages (default 100,000) are sent to a fresh
//! queue with [`Broker::send_all`] (timed too: the producer's batch), then one
//! consumer (client-individual acks, the default prefetch) takes them all; the row
//! is the consume time, first `next()` to the last ack committed. Rows:
//! - `next + ack().await`: `while let Some(m) = sub.next().await { sub.ack(&m).await? }`,
//!   then `commit_acks()`: the obvious loop;
//! - `next + Acker::ack().await`: the same loop waiting for each ack's commit (what
//!   the obvious loop did before acks were windowed: 1,646 msg/s on SQLite);
//! - `next + ack_up_to every 100`: a cumulative ack per 100 messages, each awaited
//!   (`Acker::ack_up_to`);
//! - `auto ack`: `while let Some(m) = sub.next().await {}` in the default mode.
//!
//! Each row checks that every message arrived once and that the queue is empty after
//! it (all acks committed). On SQLite (a temporary file, `synchronous=FULL`) and, with
//! `EBB_BENCH_POSTGRES_URL`, PostgreSQL. Run: `cargo bench --bench embedding`.
//! Settings: `EBB_BENCH_EMBED_MESSAGES` (N), `EBB_BENCH_EMBED_ONLY` (rows whose label
//! contains one of its comma-separated parts). Prints a table and one JSON line.

mod common;

use std::time::{Duration, Instant};

use common::ebb_run::{self, Store};
use common::report::{env, thousands};
use ebb::{AckMode, Broker, Message, SubscribeOptions};
use futures::StreamExt;

const QUEUE: &str = "queue://embedding";
const BODY_BYTES: usize = 1024;

#[derive(Debug, Clone, Copy)]
enum Loop {
    Windowed,
    EachCommit,
    UpTo100,
    Auto,
}

impl Loop {
    fn label(self) -> &'static str {
        match self {
            Loop::Windowed => "next + ack().await",
            Loop::EachCommit => "next + Acker::ack().await (each commit)",
            Loop::UpTo100 => "next + ack_up_to every 100",
            Loop::Auto => "auto ack",
        }
    }
}

#[derive(serde::Serialize)]
struct Row {
    store: &'static str,
    consumer: &'static str,
    messages: u64,
    send_all_msgs_per_s: f64,
    msgs_per_s: f64,
    commits: u64,
}

/// Consumes every message with `how`; the number taken.
async fn consume(broker: &Broker, how: Loop, messages: u64) -> Result<u64, String> {
    let ack = match how {
        Loop::Auto => AckMode::Auto,
        _ => AckMode::Client,
    };
    let options = SubscribeOptions::non_durable().ack(ack);
    let mut sub = broker
        .subscribe(QUEUE, options)
        .await
        .map_err(|e| e.to_string())?;
    let acker = sub.acker();
    let mut taken = 0u64;
    while taken < messages {
        let m = tokio::time::timeout(Duration::from_secs(30), sub.next())
            .await
            .map_err(|_| format!("stalled after {taken} messages"))?
            .ok_or("the subscription ended")?;
        taken += 1;
        let acked = match how {
            Loop::Windowed => sub.ack(&m).await,
            Loop::EachCommit => acker.ack(&m).await,
            Loop::UpTo100 if taken.is_multiple_of(100) || taken == messages => {
                acker.ack_up_to(&m).await
            }
            Loop::UpTo100 | Loop::Auto => Ok(()),
        };
        acked.map_err(|e| format!("ack failed: {e}"))?;
    }
    sub.commit_acks().await.map_err(|e| e.to_string())?;
    drop(sub);
    Ok(taken)
}

async fn row(
    store: &Store,
    dir: &std::path::Path,
    how: Loop,
    n: u64,
    run: usize,
) -> Result<Row, String> {
    let ebb = ebb_run::start(store, dir, "embedding", run).await;
    let broker = &ebb.broker;
    let started = Instant::now();
    let body = vec![b'x'; BODY_BYTES];
    let sent = broker
        .send_all(QUEUE, (0..n).map(|_| Message::new(body.clone())))
        .await;
    let send_s = started.elapsed().as_secs_f64();
    if let Some(e) = sent.iter().find_map(|r| r.as_ref().err()) {
        return Err(format!("send failed: {e}"));
    }
    let before = ebb.store_stats();
    let started = Instant::now();
    let taken = consume(broker, how, n).await?;
    let consume_s = started.elapsed().as_secs_f64();
    let after = ebb.store_stats();
    // Every ack committed: nothing is left in the queue.
    let left = broker
        .browse(QUEUE, 0, 10)
        .await
        .map_err(|e| e.to_string())?
        .len();
    ebb.finish().await;
    if taken != n || left != 0 {
        return Err(format!(
            "{}: took {taken} of {n}, {left} left stored",
            how.label()
        ));
    }
    Ok(Row {
        store: store.label(),
        consumer: how.label(),
        messages: n,
        send_all_msgs_per_s: n as f64 / send_s,
        msgs_per_s: n as f64 / consume_s,
        commits: after.write_transactions - before.write_transactions,
    })
}

async fn bench(n: u64, only: Vec<String>, dir: std::path::PathBuf) -> (Vec<Row>, Vec<String>) {
    let mut stores = vec![Store::Sqlite];
    if let Ok(url) = std::env::var("EBB_BENCH_POSTGRES_URL") {
        stores.push(Store::Postgres(url));
    }
    let (mut rows, mut failures) = (Vec::new(), Vec::new());
    let mut run = 0;
    for store in &stores {
        for how in [Loop::Windowed, Loop::EachCommit, Loop::UpTo100, Loop::Auto] {
            let label = format!("{} {}", store.label(), how.label());
            if !common::report::wanted(&only, &label) {
                continue;
            }
            run += 1;
            match row(store, &dir, how, n, run).await {
                Ok(r) => {
                    println!(
                        "{label}: {} msg/s ({} commits; send_all {} msg/s)",
                        thousands(r.msgs_per_s),
                        r.commits,
                        thousands(r.send_all_msgs_per_s)
                    );
                    rows.push(r);
                }
                Err(e) => {
                    println!("{label}: FAILED: {e}");
                    failures.push(format!("{label}: {e}"));
                }
            }
        }
    }
    (rows, failures)
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` / `cargo bench -- --list`: nothing to list.
    }
    let n = env("EBB_BENCH_EMBED_MESSAGES", 100_000u64).max(1);
    let only = common::report::only("EBB_BENCH_EMBED_ONLY");
    let dir = std::env::temp_dir().join(format!("ebb-bench-embedding-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    println!(
        "embedding: {n} persistent messages of {BODY_BYTES} bytes to one queue (send_all), \
         then one consumer takes them; tokio multi-threaded runtime; {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (rows, failures) = runtime.block_on(bench(n, only, dir.clone()));
    println!();
    println!("| store | consumer | msg/s | commits |");
    println!("|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} |",
            r.store,
            r.consumer,
            thousands(r.msgs_per_s),
            r.commits
        );
    }
    let json = serde_json::json!({"bench": "embedding", "rows": rows, "failed": failures});
    println!("{json}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{} rows failed", failures.len());
}
