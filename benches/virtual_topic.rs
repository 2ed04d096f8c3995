//! Virtual topic beside durable subscriptions (issue 33): what one message costs the
//! store, and how fast a backlog is delivered, when 10 consumers each want every
//! message — as 10 consumer groups of a virtual topic (`Consumer.<g>.VirtualTopic.X`
//! queues reading the topic's rows, stored once, each through its own mark and acks)
//! or as 10 durable subscriptions of one topic (one stored row, one high-water mark
//! per subscription).
//!
//! Workload, per run (a fresh store each): the 10 groups (or subscriptions) are
//! created by a first subscription each and left offline; one producer sends N
//! persistent 1 KiB messages through the embedding API, pipelined
//! (`Broker::send_all`, batches of 1,000): the send rate. Then the rows stored (of
//! every container holding rows in the message table) and the
//! store's size on disk (the SQLite file with its WAL, or PostgreSQL's
//! `pg_total_relation_size` of the schema's tables) are read: per message. Then the
//! 10 consumers attach at once and drain (auto ack): deliveries per second (N × 10
//! over the time to the last delivery), each consumer checked to get all N, none
//! twice. The median of R rounds, the two runs of a round one after the other (which
//! goes first alternates); and
//! the median of the rounds' send-rate ratios (each round's two runs side by side).
//!
//! Run: `cargo bench --bench virtual_topic`. Settings: `EBB_BENCH_VT_MESSAGES` (N,
//! default 20,000), `EBB_BENCH_VT_GROUPS` (default 10), `EBB_BENCH_VT_ROUNDS` (R,
//! default 3), `EBB_BENCH_POSTGRES_URL` (runs on PostgreSQL instead of SQLite).

mod common;

use std::time::{Duration, Instant};

use common::ebb_run::{self, Store};
use common::report::{env, thousands};
use ebb::{Message, SubscribeOptions};
use futures::StreamExt;

const BODY_BYTES: usize = 1024;
/// No delivery for this long: the run failed.
const STALL: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Consumer groups of a virtual topic.
    Virtual,
    /// Durable subscriptions of one topic.
    Durable,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Self::Virtual => "virtual topic, groups",
            Self::Durable => "topic, durable subscriptions",
        }
    }
}

#[derive(Clone)]
struct Round {
    send_rate: f64,
    rows_per_message: f64,
    bytes_per_message: f64,
    delivery_rate: f64,
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` / `cargo bench -- --list`: nothing to list.
    }
    let messages: u64 = env("EBB_BENCH_VT_MESSAGES", 20_000u64).max(1);
    let groups: usize = env("EBB_BENCH_VT_GROUPS", 10usize).max(1);
    let rounds: usize = env("EBB_BENCH_VT_ROUNDS", 3usize).max(1);
    let store = ebb_run::store_from_env();
    let dir = ebb_run::fresh_dir("virtual-topic");
    println!(
        "virtual_topic: {} persistent {BODY_BYTES}-byte messages, {groups} consumers each wanting every one; \
         {} store; median of {rounds} rounds; {} cores",
        thousands(messages as f64),
        store.label(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let runtime = ebb_run::runtime();
    let mut runs: [Vec<Round>; 2] = Default::default();
    let mut failures = Vec::new();
    for round in 0..rounds {
        // Which runs first alternates, so that neither always meets a cold start.
        let mut order = [(0, Mode::Virtual), (1, Mode::Durable)];
        if round % 2 == 1 {
            order.reverse();
        }
        for (at, mode) in order {
            match runtime.block_on(run(&store, &dir, messages, groups, mode, round)) {
                Ok(r) => runs[at].push(r),
                Err(e) => failures.push(e),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The ratio of each round's two runs, one right after the other (the machine's
    // load changes between rounds more than within one): their median is the
    // figure to quote.
    let mut send_ratios: Vec<f64> = runs[0]
        .iter()
        .zip(&runs[1])
        .map(|(v, d)| v.send_rate / d.send_rate)
        .collect();
    send_ratios.sort_by(f64::total_cmp);
    let send_ratio = send_ratios[send_ratios.len() / 2];
    let median = |rounds: &mut Vec<Round>| {
        rounds.sort_by(|a, b| a.delivery_rate.total_cmp(&b.delivery_rate));
        rounds[rounds.len() / 2].clone()
    };
    let [virtual_topic, durable] = runs.each_mut().map(median);
    println!();
    println!("| {groups} consumers as | send msg/s | rows stored per message | disk bytes per message | deliveries/s (backlog drained) |");
    println!("|---|---|---|---|---|");
    for (mode, r) in [(Mode::Virtual, &virtual_topic), (Mode::Durable, &durable)] {
        println!(
            "| {} | {} | {:.2} | {} | {} |",
            mode.label(),
            thousands(r.send_rate),
            r.rows_per_message,
            thousands(r.bytes_per_message),
            thousands(r.delivery_rate)
        );
    }
    println!(
        "| virtual ÷ durable | {:.2} | {:.2} | {:.2} | {:.2} |",
        virtual_topic.send_rate / durable.send_rate,
        virtual_topic.rows_per_message / durable.rows_per_message,
        virtual_topic.bytes_per_message / durable.bytes_per_message,
        virtual_topic.delivery_rate / durable.delivery_rate
    );
    println!(
        "send rate, virtual ÷ durable, per round: {}; median {send_ratio:.2}",
        send_ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "{}",
        serde_json::json!({
            "bench": "virtual_topic",
            "send_ratio_median": send_ratio,
            "store": store.label(),
            "messages": messages,
            "groups": groups,
            "rounds": rounds,
            "virtual": {
                "send_rate": virtual_topic.send_rate,
                "rows_per_message": virtual_topic.rows_per_message,
                "bytes_per_message": virtual_topic.bytes_per_message,
                "delivery_rate": virtual_topic.delivery_rate,
            },
            "durable": {
                "send_rate": durable.send_rate,
                "rows_per_message": durable.rows_per_message,
                "bytes_per_message": durable.bytes_per_message,
                "delivery_rate": durable.delivery_rate,
            },
        })
    );
}

async fn run(
    store: &Store,
    dir: &std::path::Path,
    messages: u64,
    groups: usize,
    mode: Mode,
    round: usize,
) -> Result<Round, String> {
    let run = ebb_run::start(store, dir, "vt", round * 2 + mode as usize).await;
    let b = run.broker.clone();
    let topic = "topic://VirtualTopic.Bench";
    let target = |g: usize| match mode {
        Mode::Virtual => (
            format!("queue://Consumer.G{g}.VirtualTopic.Bench"),
            SubscribeOptions::non_durable(),
        ),
        Mode::Durable => (
            topic.to_string(),
            SubscribeOptions::durable(format!("client-{g}"), "bench"),
        ),
    };
    // Each group (subscription) exists, offline.
    for g in 0..groups {
        let (destination, options) = target(g);
        drop(
            b.subscribe(destination.as_str(), options)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let before = run.disk_bytes().await;
    let body = bytes::Bytes::from(vec![b'x'; BODY_BYTES]);
    let began = Instant::now();
    let mut sent = 0u64;
    while sent < messages {
        let batch = (messages - sent).min(1_000);
        let batch_messages =
            (sent..sent + batch).map(|i| Message::new(body.clone()).header("i", i.to_string()));
        for outcome in b.send_all(topic, batch_messages).await {
            outcome.map_err(|e| e.to_string())?;
        }
        sent += batch;
    }
    let send_s = began.elapsed().as_secs_f64();
    // The rows of the message table (a fresh store): every container holding rows.
    // A consumer group that reads its topic's rows counts the topic's in its own
    // count, so only containers that are not groups are counted (a group holds no
    // row of its own here: nothing is sent to it directly).
    let store = b.store();
    let mut rows = 0u64;
    let mut after = String::new();
    loop {
        let page = store
            .list_containers(&after, "\u{7f}", 100)
            .await
            .map_err(|e| e.to_string())?;
        for c in &page {
            if store.group_topic(c).is_some() {
                return Err(format!("consumer group {c} holds rows of its own"));
            }
            rows += store.count_messages(c).await.map_err(|e| e.to_string())?;
        }
        match page.last() {
            Some(last) if page.len() == 100 => after = last.clone(),
            _ => break,
        }
    }
    let disk = run.disk_bytes().await.saturating_sub(before);
    // Drain: every consumer at once.
    let began = Instant::now();
    let mut draining = Vec::new();
    for g in 0..groups {
        let (destination, options) = target(g);
        let mut sub = b
            .subscribe(destination.as_str(), options)
            .await
            .map_err(|e| e.to_string())?;
        draining.push(tokio::spawn(async move {
            let mut seen = vec![false; messages as usize];
            for _ in 0..messages {
                let m = match tokio::time::timeout(STALL, sub.next()).await {
                    Ok(Some(m)) => m,
                    _ => return Err(format!("consumer {g} stalled")),
                };
                let i: usize = m
                    .header("i")
                    .and_then(|v| v.parse().ok())
                    .ok_or("no index")?;
                if std::mem::replace(&mut seen[i], true) {
                    return Err(format!("consumer {g}: message {i} came twice"));
                }
            }
            Ok::<(), String>(())
        }));
    }
    for d in draining {
        d.await.map_err(|e| e.to_string())??;
    }
    let drain_s = began.elapsed().as_secs_f64();
    run.finish().await;
    let r = Round {
        send_rate: messages as f64 / send_s,
        rows_per_message: rows as f64 / messages as f64,
        bytes_per_message: disk as f64 / messages as f64,
        delivery_rate: (messages * groups as u64) as f64 / drain_s,
    };
    println!(
        "round {round} {}: {} msg/s sent, {:.2} rows and {} bytes per message, {} deliveries/s",
        mode.label(),
        thousands(r.send_rate),
        r.rows_per_message,
        thousands(r.bytes_per_message),
        thousands(r.delivery_rate)
    );
    Ok(r)
}
