//! Composite sends beside plain sends on one STOMP connection (issue 52): how many
//! persistent SENDs per second one producer gets when each names two queues
//! (`destination:/queue/a,/queue/b`, ActiveMQ's composite convention: stored in both,
//! all or none) against each naming one.
//!
//! Workload, per run (a fresh store each): one producer connection writes N persistent
//! 1 KiB SENDs in batches of `batch` (default 100), the last of each batch with
//! `receipt:`, and waits for that RECEIPT before the next batch (as `wire`'s
//! `send-batch`). Timed from the first SEND to the last RECEIPT. Afterwards each queue
//! must hold N messages, counted in the store. The median of R rounds, the two runs of
//! a round one after the other; the ratio is composite ÷ plain of the same round's
//! medians.
//!
//! Run: `cargo bench --bench composite`. Settings: `EBB_BENCH_COMPOSITE_MESSAGES` (N,
//! default 20,000), `EBB_BENCH_COMPOSITE_BATCH` (default 100),
//! `EBB_BENCH_COMPOSITE_ROUNDS` (R, default 3), `EBB_BENCH_POSTGRES_URL` (runs on
//! PostgreSQL instead of SQLite).

mod common;

use std::time::{Duration, Instant};

use common::ebb_run::{self, Store};
use common::report::{env, thousands};
use ebb::stomp::frame::{Command, Frame};

const BODY_BYTES: usize = 1024;
/// No RECEIPT for this long: the run failed.
const STALL: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Each SEND names one queue.
    Plain,
    /// Each SEND names two queues.
    Composite,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Self::Plain => "plain SEND (/queue/a)",
            Self::Composite => "composite SEND (/queue/a,/queue/b)",
        }
    }

    fn destination(self) -> &'static str {
        match self {
            Self::Plain => "/queue/bench-a",
            Self::Composite => "/queue/bench-a,/queue/bench-b",
        }
    }

    fn queues(self) -> &'static [&'static str] {
        match self {
            Self::Plain => &["queue://bench-a"],
            Self::Composite => &["queue://bench-a", "queue://bench-b"],
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` / `cargo bench -- --list`: nothing to list.
    }
    let messages: u64 = env("EBB_BENCH_COMPOSITE_MESSAGES", 20_000u64).max(1);
    let batch: u64 = env("EBB_BENCH_COMPOSITE_BATCH", 100u64).max(1);
    let rounds: usize = env("EBB_BENCH_COMPOSITE_ROUNDS", 3usize).max(1);
    let store = ebb_run::store_from_env();
    let dir = ebb_run::fresh_dir("composite");
    println!(
        "composite: {} persistent {BODY_BYTES}-byte SENDs on one STOMP connection, a receipt every {batch}; \
         {} store; median of {rounds} rounds; {} cores",
        thousands(messages as f64),
        store.label(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let mut runs: [Vec<f64>; 2] = Default::default();
    let mut failures = Vec::new();
    for round in 0..rounds {
        for (at, mode) in [Mode::Plain, Mode::Composite].into_iter().enumerate() {
            match actix_rt::System::new().block_on(run(&store, &dir, messages, batch, mode, round))
            {
                Ok(rate) => runs[at].push(rate),
                Err(e) => failures.push(format!("{}: {e}", mode.label())),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let [plain, composite] = runs.each_mut().map(|rates| {
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    });
    println!();
    println!(
        "| one producer, {} SENDs | SENDs/s |",
        thousands(messages as f64)
    );
    println!("|---|---|");
    println!("| {} | {} |", Mode::Plain.label(), thousands(plain));
    println!("| {} | {} |", Mode::Composite.label(), thousands(composite));
    println!("| composite ÷ plain | {:.2} |", composite / plain);
    println!(
        "{}",
        serde_json::json!({
            "bench": "composite",
            "store": store.label(),
            "messages": messages,
            "batch": batch,
            "rounds": rounds,
            "plain_rate": plain,
            "composite_rate": composite,
            "ratio": composite / plain,
        })
    );
}

/// One run: the SENDs/s of `mode`, once both queues were checked.
async fn run(
    store: &Store,
    dir: &std::path::Path,
    messages: u64,
    batch: u64,
    mode: Mode,
    round: usize,
) -> Result<f64, String> {
    let ebb = ebb_run::start(store, dir, "composite", round * 2 + mode as usize).await;
    let listener = ebb.listen().await?;
    let addr = listener.addr;
    let client = common::stomp_load::on_thread(move || produce(addr, mode, messages, batch));
    let elapsed = client.await.map_err(|_| "the client thread died")??;
    for queue in mode.queues() {
        let held = ebb
            .broker
            .store()
            .count_messages(queue)
            .await
            .map_err(|e| e.to_string())?;
        if held != messages {
            return Err(format!(
                "{queue} holds {held} messages, {messages} were sent"
            ));
        }
    }
    listener.stop().await;
    ebb.finish().await;
    let rate = messages as f64 / elapsed;
    println!(
        "round {round} {}: {} SENDs/s",
        mode.label(),
        thousands(rate)
    );
    Ok(rate)
}

/// The producer, on a thread of its own: writes the SENDs, a batch at a time; answers
/// the seconds from the first SEND to the last RECEIPT.
async fn produce(
    addr: std::net::SocketAddr,
    mode: Mode,
    messages: u64,
    batch: u64,
) -> Result<f64, String> {
    let dialect = common::stomp_load::Dialect::ebb(mode.destination()).persistent();
    let mut client = common::stomp_load::connect(addr, &dialect).await?;
    let began = Instant::now();
    let mut from = 0;
    while from < messages {
        let to = (from + batch).min(messages);
        let (reader, writer) = client.halves();
        for i in from..to {
            let mut frame: Frame = dialect
                .send_frame(vec![b'x'; BODY_BYTES])
                .header("i", i.to_string());
            if i + 1 == to {
                frame = frame.header("receipt", i.to_string());
            }
            writer.feed(frame).await.map_err(|e| e.to_string())?;
        }
        writer.flush().await.map_err(|e| e.to_string())?;
        let f = tokio::time::timeout(STALL, common::stomp_load::next(reader))
            .await
            .map_err(|_| format!("no RECEIPT for SEND {} within {STALL:?}", to - 1))??;
        let want = (to - 1).to_string();
        if f.command != Command::Receipt || f.get("receipt-id") != Some(want.as_str()) {
            return Err(format!(
                "waiting for RECEIPT {want}, got {} {:?}",
                f.command.as_str(),
                f.headers
            ));
        }
        from = to;
    }
    let elapsed = began.elapsed().as_secs_f64();
    client.disconnect().await.map_err(|e| e.to_string())?;
    Ok(elapsed)
}
