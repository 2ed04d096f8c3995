//! Scheduled delivery at scale (issue 32): N persistent 1 KiB messages scheduled on one
//! queue, due evenly over a span of time, then released by the scheduler to a consumer
//! that acks each; printed as a table and one JSON line.
//!
//! Workload: one producer schedules N messages (`Message::deliver_at`, ActiveMQ's
//! `AMQ_SCHEDULED_DELAY`) through the embedding API, pipelined (`Broker::send_all`,
//! 256 sends in flight), message `i` due at `start + lead + i × span / N`; the lead
//! (default: enough for the sends, see below) puts every due time after the last
//! send, so the scheduler releases all of them. One consumer (auto ack, prefetch 1,000)
//! takes them; each message's lateness is its arrival minus its due time (a message
//! can never come early: one that did would count as a failure).
//!
//! Figures: the scheduling rate; peak resident memory of the process (the broker and
//! this small client, which holds a fixed histogram and a bitmap of N bits) while
//! scheduling and while releasing, sampled every 250 ms, and `VmHWM` at the end; the
//! release rate at its busiest second; lateness p50, p99 and max. The run fails if a
//! message is lost, comes twice or comes early.
//!
//! Run: `cargo bench --bench scheduled`. Settings: `EBB_BENCH_SCHEDULED_MESSAGES`
//! (N, default 1,000,000), `EBB_BENCH_SCHEDULED_SPAN_S` (default 600: the due times
//! spread over 10 minutes), `EBB_BENCH_SCHEDULED_LEAD_S` (default N / 10,000 s: the
//! first due time after the start), `EBB_BENCH_POSTGRES_URL` (runs on PostgreSQL
//! instead of a temporary SQLite file).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::ebb_run::{self, Store};
use common::report::{env, thousands};
use ebb::{Message, SubscribeOptions};
use futures::StreamExt;

const QUEUE: &str = "queue://bench.scheduled";
const BODY_BYTES: usize = 1024;
/// Lateness histogram: one bucket per ms up to this, then one overflow bucket.
const LATENESS_BUCKETS_MS: usize = 600_000;
/// No message for this long while some are still due: the run failed.
const STALL: Duration = Duration::from_secs(60);

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// This process's resident memory now and its peak (`VmRSS`, `VmHWM`), bytes.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Samples resident memory every 250 ms into `peak` while `running`.
fn sample_memory(peak: Arc<AtomicU64>, running: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while running.load(Ordering::Relaxed) {
            peak.fetch_max(memory().0, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(250));
        }
    })
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// The `q`-quantile (0..=1) of the histogram, ms.
fn quantile(histogram: &[u64], total: u64, q: f64) -> usize {
    let want = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (ms, n) in histogram.iter().enumerate() {
        seen += n;
        if seen >= want {
            return ms;
        }
    }
    histogram.len()
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` / `cargo bench -- --list`: nothing to list.
    }
    let n: u64 = env("EBB_BENCH_SCHEDULED_MESSAGES", 1_000_000u64).max(1);
    let span_s: u64 = env("EBB_BENCH_SCHEDULED_SPAN_S", 600u64).max(1);
    let lead_s: u64 = env("EBB_BENCH_SCHEDULED_LEAD_S", (n / 10_000).max(5));
    let store = ebb_run::store_from_env();
    let dir = ebb_run::fresh_dir("scheduled");
    println!(
        "scheduled: {} persistent messages of {BODY_BYTES} bytes on one queue, due evenly over \
         {span_s} s from {lead_s} s after the start; {} store; {} cores",
        thousands(n as f64),
        store.label(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let runtime = ebb_run::runtime();
    let outcome = runtime.block_on(run(&store, &dir, n, span_s, lead_s));
    let _ = std::fs::remove_dir_all(&dir);
    println!("{}", outcome.json);
    assert!(
        outcome.failures.is_empty(),
        "{}",
        outcome.failures.join("\n")
    );
}

struct Outcome {
    json: serde_json::Value,
    failures: Vec<String>,
}

async fn run(store: &Store, dir: &std::path::Path, n: u64, span_s: u64, lead_s: u64) -> Outcome {
    let run = ebb_run::start(store, dir, "scheduled", 0).await;
    let b = run.broker.clone();
    let start = now_ms();
    let first_due = start + (lead_s * 1000) as i64;
    let due_of = |i: u64| first_due + ((i as u128 * span_s as u128 * 1000) / n as u128) as i64;
    let body = bytes::Bytes::from(vec![b'x'; BODY_BYTES]);

    // Scheduling.
    let peak_scheduling = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = sample_memory(Arc::clone(&peak_scheduling), Arc::clone(&sampling));
    let began = Instant::now();
    let mut failures = Vec::new();
    const BATCH: u64 = 10_000;
    for from in (0..n).step_by(BATCH as usize) {
        let batch = (from..(from + BATCH).min(n)).map(|i| {
            Message::new(body.clone())
                .header("i", i.to_string())
                .deliver_at(due_of(i))
        });
        for outcome in b.send_all(QUEUE, batch).await {
            if let Err(e) = outcome {
                failures.push(format!("a send failed: {e}"));
            }
        }
    }
    let scheduling = began.elapsed();
    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let scheduled_at = now_ms();
    if scheduled_at > first_due {
        println!(
            "note: scheduling ended {} ms after the first due time: raise EBB_BENCH_SCHEDULED_LEAD_S",
            scheduled_at - first_due
        );
    }
    let sqlite_after_scheduling = ebb::sqlite_memory_used();
    let backlog = b.schedule_backlog().await.unwrap();
    if matches!(store, Store::Sqlite) {
        println!(
            "SQLite's allocations after scheduling: {} (peak {}); after counting the backlog: {}",
            mib(sqlite_after_scheduling.0),
            mib(sqlite_after_scheduling.1),
            mib(ebb::sqlite_memory_used().0),
        );
    }
    println!(
        "scheduled {} in {:.1} s ({} msg/s); {} wait in the store; resident peak while scheduling {}",
        thousands(n as f64),
        scheduling.as_secs_f64(),
        thousands(n as f64 / scheduling.as_secs_f64()),
        thousands(backlog.scheduled as f64),
        mib(peak_scheduling.load(Ordering::Relaxed)),
    );

    // Releasing.
    let peak_releasing = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = sample_memory(Arc::clone(&peak_releasing), Arc::clone(&sampling));
    let mut sub = b
        .subscribe(QUEUE, SubscribeOptions::non_durable().prefetch(1_000))
        .await
        .unwrap();
    let mut histogram = vec![0u64; LATENESS_BUCKETS_MS + 1];
    let mut seen = vec![0u64; n.div_ceil(64) as usize];
    let (mut received, mut duplicates, mut early, mut max_late) = (0u64, 0u64, 0u64, 0i64);
    let mut per_second: std::collections::BTreeMap<i64, u64> = Default::default();
    while received + duplicates < n {
        // Nothing is due before the first due time: the stall counts from then.
        let wait = STALL + Duration::from_millis((first_due - now_ms()).max(0) as u64);
        let Ok(Some(m)) = tokio::time::timeout(wait, sub.next()).await else {
            failures.push(format!(
                "stalled: {} of {} received, none for {} s",
                received,
                n,
                STALL.as_secs()
            ));
            break;
        };
        let at = now_ms();
        let i: u64 = m
            .headers()
            .iter()
            .find(|(k, _)| k == "i")
            .and_then(|(_, v)| v.parse().ok())
            .expect("every message has its index");
        let (word, bit) = ((i / 64) as usize, 1u64 << (i % 64));
        if seen[word] & bit != 0 {
            duplicates += 1;
            continue;
        }
        seen[word] |= bit;
        received += 1;
        let late = at - due_of(i);
        if late < 0 {
            early += 1;
        }
        max_late = max_late.max(late);
        histogram[(late.max(0) as usize).min(LATENESS_BUCKETS_MS)] += 1;
        *per_second.entry(at / 1000).or_default() += 1;
    }
    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let released_in = (now_ms() - first_due).max(1);
    let busiest = per_second.values().copied().max().unwrap_or(0);
    let (p50, p99) = (
        quantile(&histogram, received, 0.50),
        quantile(&histogram, received, 0.99),
    );
    let (_, hwm) = memory();
    if duplicates > 0 {
        failures.push(format!("{duplicates} messages came twice"));
    }
    if early > 0 {
        failures.push(format!("{early} messages came before their due time"));
    }
    if received < n {
        failures.push(format!("{} messages never came", n - received));
    }
    drop(sub);
    run.finish().await;

    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| scheduling | {} msg/s ({:.1} s) |",
        thousands(n as f64 / scheduling.as_secs_f64()),
        scheduling.as_secs_f64()
    );
    println!(
        "| resident memory, peak while scheduling | {} |",
        mib(peak_scheduling.load(Ordering::Relaxed))
    );
    println!(
        "| resident memory, peak while releasing | {} |",
        mib(peak_releasing.load(Ordering::Relaxed))
    );
    println!("| resident memory, VmHWM of the run | {} |", mib(hwm));
    if matches!(store, Store::Sqlite) {
        println!(
            "| of which SQLite's own allocations, peak | {} |",
            mib(ebb::sqlite_memory_used().1)
        );
    }
    println!(
        "| released, busiest second | {} msg/s |",
        thousands(busiest as f64)
    );
    println!(
        "| released in all | {} in {:.1} s after the first due time |",
        thousands(received as f64),
        released_in as f64 / 1000.0
    );
    println!("| lateness p50 / p99 / max | {p50} / {p99} / {max_late} ms |");
    Outcome {
        json: serde_json::json!({
            "bench": "scheduled",
            "store": store.label(),
            "messages": n,
            "body_bytes": BODY_BYTES,
            "span_s": span_s,
            "lead_s": lead_s,
            "scheduling_s": scheduling.as_secs_f64(),
            "rss_peak_scheduling_bytes": peak_scheduling.load(Ordering::Relaxed),
            "rss_peak_releasing_bytes": peak_releasing.load(Ordering::Relaxed),
            "vm_hwm_bytes": hwm,
            "sqlite_memory_peak_bytes": ebb::sqlite_memory_used().1,
            "released_busiest_second": busiest,
            "lateness_ms": { "p50": p50, "p99": p99, "max": max_late },
            "received": received,
            "duplicates": duplicates,
            "early": early,
            "failed": failures,
        }),
        failures,
    }
}
