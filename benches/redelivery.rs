//! Redelivery back-off under load (issue 32): on one queue, F messages that consumers
//! ack flow beside P poison messages that every consumer refuses (NACK), each of which
//! waits with ActiveMQ's exponential back-off before it comes again, and reaches the
//! dead-letter queue after `maximum_redeliveries`. The figure is the flowing messages'
//! rate beside the same run without redeliveries: the same F + P messages, the P acked
//! at their first delivery (goal ≥ 0.9): what the redeliveries cost the others. The
//! rate of the F alone is shown too (what the P messages cost in all, their own sends
//! and acks included).
//!
//! Workload, per run (a fresh store each): one producer sends the F flowing messages
//! (every `F / P`-th followed by a poison one) through the embedding API, pipelined
//! (`Broker::send_all`, in batches of 1,000); one consumer (`AckMode::Client`, each message acked on its own,
//! prefetch 1,000) acks each flowing message and NACKs each poison one (not waiting for
//! the NACK's answer before it takes the next message, as a STOMP client does). Policy of the
//! queue: `initial_redelivery_delay` and `redelivery_delay` D ms, exponential back-off
//! ×2 up to 8·D, `maximum_redeliveries` 3. The flowing rate is F over the time from the
//! first send to the last flowing ack; the run with poison also waits until every
//! poison message is in the dead-letter queue (and fails if one is not, or if a
//! flowing message is lost or comes twice). The median of R rounds of each is taken,
//! the three runs of a round one after the other.
//!
//! Run: `cargo bench --bench redelivery`. Settings: `EBB_BENCH_REDELIVERY_FLOWING`
//! (F, default 100,000), `EBB_BENCH_REDELIVERY_POISON` (P, default 10,000),
//! `EBB_BENCH_REDELIVERY_DELAY_MS` (D, default 100), `EBB_BENCH_REDELIVERY_ROUNDS`
//! (R, default 3), `EBB_BENCH_POSTGRES_URL` (runs on PostgreSQL instead of SQLite).

mod common;

use std::time::{Duration, Instant};

use common::ebb_run::{self, Store};
use common::report::{env, thousands};
use ebb::{AckMode, BrokerConfig, Message, Policy, PolicyEntry, PolicyMap, SubscribeOptions};
use futures::StreamExt;

const QUEUE: &str = "queue://bench.redelivery";
const BODY_BYTES: usize = 1024;
const MAXIMUM_REDELIVERIES: u32 = 3;
/// No delivery for this long: the run failed.
const STALL: Duration = Duration::from_secs(60);

/// What a run does with the P messages.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// None are sent: the F alone.
    Alone,
    /// Sent and acked at their first delivery: the run without redeliveries.
    Acked,
    /// Sent and refused each time: redelivered with back-off, then dead-lettered.
    Refused,
}

impl Mode {
    fn tag(self) -> &'static str {
        match self {
            Self::Alone => "alone",
            Self::Acked => "acked",
            Self::Refused => "refused",
        }
    }
}

struct Settings {
    flowing: u64,
    poison: u64,
    delay_ms: u64,
}

#[derive(Clone)]
struct Round {
    /// Flowing messages per second, first send to last flowing ack.
    flowing_rate: f64,
    /// Seconds until every poison message was in the dead-letter queue (0 without).
    dead_lettered_s: f64,
    /// NACKs sent.
    nacks: u64,
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` / `cargo bench -- --list`: nothing to list.
    }
    let settings = Settings {
        flowing: env("EBB_BENCH_REDELIVERY_FLOWING", 100_000u64).max(1),
        poison: env("EBB_BENCH_REDELIVERY_POISON", 10_000u64),
        delay_ms: env("EBB_BENCH_REDELIVERY_DELAY_MS", 100u64),
    };
    let rounds: usize = env("EBB_BENCH_REDELIVERY_ROUNDS", 3usize).max(1);
    let store = ebb_run::store_from_env();
    let dir = ebb_run::fresh_dir("redelivery");
    println!(
        "redelivery: {} flowing and {} poison persistent {BODY_BYTES}-byte messages on one queue; \
         back-off {} ms ×2 up to {} ms, maximum_redeliveries {MAXIMUM_REDELIVERIES}; {} store; \
         median of {rounds} rounds; {} cores",
        thousands(settings.flowing as f64),
        thousands(settings.poison as f64),
        settings.delay_ms,
        settings.delay_ms * 8,
        store.label(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let runtime = ebb_run::runtime();
    let mut runs: [Vec<Round>; 3] = Default::default();
    let mut failures = Vec::new();
    for round in 0..rounds {
        // One after the other, so that a slow spell of the machine hits all three.
        for (at, mode) in [Mode::Alone, Mode::Acked, Mode::Refused]
            .into_iter()
            .enumerate()
        {
            match runtime.block_on(run(&store, &dir, &settings, mode, round)) {
                Ok(r) => runs[at].push(r),
                Err(e) => failures.push(e),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let median = |rounds: &mut Vec<Round>| {
        rounds.sort_by(|a, b| a.flowing_rate.total_cmp(&b.flowing_rate));
        rounds[rounds.len() / 2].clone()
    };
    let [alone, acked, refused] = runs.each_mut().map(median);
    let ratio = refused.flowing_rate / acked.flowing_rate;
    let ratio_alone = refused.flowing_rate / alone.flowing_rate;
    let poison = thousands(settings.poison as f64);
    println!();
    println!("| run | flowing msg/s | NACKs | all poison dead-lettered after |");
    println!("|---|---|---|---|");
    println!(
        "| flowing alone | {} | 0 | — |",
        thousands(alone.flowing_rate)
    );
    println!(
        "| with {poison} more, acked (no redeliveries) | {} | 0 | — |",
        thousands(acked.flowing_rate)
    );
    println!(
        "| with {poison} poison, redelivered | {} | {} | {:.1} s |",
        thousands(refused.flowing_rate),
        thousands(refused.nacks as f64),
        refused.dead_lettered_s
    );
    println!("| ratio to the run without redeliveries | {ratio:.2} | | |");
    println!("| ratio to the flowing alone | {ratio_alone:.2} | | |");
    println!(
        "{}",
        serde_json::json!({
            "bench": "redelivery",
            "store": store.label(),
            "flowing": settings.flowing,
            "poison": settings.poison,
            "delay_ms": settings.delay_ms,
            "rounds": rounds,
            "flowing_rate_alone": alone.flowing_rate,
            "flowing_rate_acked": acked.flowing_rate,
            "flowing_rate_refused": refused.flowing_rate,
            "ratio": ratio,
            "ratio_alone": ratio_alone,
            "nacks": refused.nacks,
            "dead_lettered_s": refused.dead_lettered_s,
        })
    );
}

async fn run(
    store: &Store,
    dir: &std::path::Path,
    s: &Settings,
    mode: Mode,
    round: usize,
) -> Result<Round, String> {
    let policy = Policy {
        maximum_redeliveries: MAXIMUM_REDELIVERIES,
        initial_redelivery_delay: s.delay_ms,
        redelivery_delay: s.delay_ms,
        use_exponential_backoff: true,
        backoff_multiplier: 2.0,
        maximum_redelivery_delay: s.delay_ms * 8,
        ..Policy::default()
    };
    let config = BrokerConfig {
        policies: PolicyMap {
            entries: vec![PolicyEntry {
                destination: "queue://>".into(),
                policy,
            }],
        },
        ..BrokerConfig::default()
    };
    let tag = mode.tag();
    let run =
        ebb_run::start_with(store, dir, "redelivery", round * 3 + mode as usize, config).await;
    let b = run.broker.clone();
    let poison = if mode == Mode::Alone { 0 } else { s.poison };
    let every = s.flowing.checked_div(poison).map_or(u64::MAX, |n| n.max(1));
    let body = bytes::Bytes::from(vec![b'x'; BODY_BYTES]);

    let mut sub = b
        .subscribe(
            QUEUE,
            SubscribeOptions::non_durable()
                .ack(AckMode::Client)
                .prefetch(1_000),
        )
        .await
        .map_err(|e| e.to_string())?;
    let began = Instant::now();
    let b2 = b.clone();
    let (flowing, body2) = (s.flowing, body);
    let sending = tokio::spawn(async move {
        let mut sent_poison = 0u64;
        const BATCH: u64 = 1_000;
        for from in (0..flowing).step_by(BATCH as usize) {
            let mut batch = Vec::with_capacity(BATCH as usize + 2);
            for i in from..(from + BATCH).min(flowing) {
                batch.push(Message::new(body2.clone()).header("i", i.to_string()));
                if sent_poison < poison && i % every == every - 1 {
                    batch.push(
                        Message::new(body2.clone()).header("poison", sent_poison.to_string()),
                    );
                    sent_poison += 1;
                }
            }
            for outcome in b2.send_all(QUEUE, batch).await {
                outcome.map_err(|e| format!("a send failed: {e}"))?;
            }
        }
        Ok::<u64, String>(sent_poison)
    });

    let mut refusing = futures::stream::FuturesUnordered::new();
    let mut seen = vec![false; s.flowing as usize];
    let (mut acked, mut nacks) = (0u64, 0u64);
    let mut flowing_done = None;
    while acked < s.flowing {
        let Ok(Some(m)) = tokio::time::timeout(STALL, sub.next()).await else {
            return Err(format!(
                "{tag} round {round}: stalled at {acked} of {} flowing acked",
                s.flowing
            ));
        };
        if m.header("poison").is_some() {
            if mode == Mode::Acked {
                sub.ack(&m).await.map_err(|e| e.to_string())?;
                continue;
            }
            // As a STOMP client's NACK: sent, not waited for (the answer is awaited
            // beside the next deliveries).
            let acker = sub.acker();
            refusing.push(async move { acker.nack(&m).await });
            nacks += 1;
            while let Some(Some(done)) = futures::FutureExt::now_or_never(refusing.next()) {
                done.map_err(|e| e.to_string())?;
            }
            continue;
        }
        let i: usize = m
            .header("i")
            .and_then(|v| v.parse().ok())
            .ok_or("no index")?;
        if std::mem::replace(&mut seen[i], true) {
            return Err(format!(
                "{tag} round {round}: flowing message {i} came twice"
            ));
        }
        sub.ack(&m).await.map_err(|e| e.to_string())?;
        acked += 1;
        if acked == s.flowing {
            flowing_done = Some(began.elapsed());
        }
    }
    while let Some(done) = refusing.next().await {
        done.map_err(|e| e.to_string())?;
    }
    let sent_poison = sending.await.map_err(|e| e.to_string())??;
    // The poison messages still on their way: NACKed until each is dead-lettered.
    let mut dead_lettered_s = 0.0;
    if mode == Mode::Refused && sent_poison > 0 {
        loop {
            let dead = b
                .queue_stats(QUEUE)
                .await
                .map_err(|e| e.to_string())?
                .dead_lettered;
            if dead >= sent_poison {
                dead_lettered_s = began.elapsed().as_secs_f64();
                break;
            }
            match tokio::time::timeout(Duration::from_millis(50), sub.next()).await {
                Ok(Some(m)) => {
                    sub.nack(&m).await.map_err(|e| e.to_string())?;
                    nacks += 1;
                }
                Ok(None) => return Err("the subscription ended".into()),
                Err(_) if began.elapsed() > STALL * 2 => {
                    return Err(format!(
                        "{tag} round {round}: {dead} of {sent_poison} poison messages dead-lettered"
                    ))
                }
                Err(_) => {}
            }
        }
        let expected = sent_poison * u64::from(MAXIMUM_REDELIVERIES + 1);
        if nacks != expected {
            return Err(format!(
                "{tag} round {round}: {nacks} NACKs, {expected} expected"
            ));
        }
    }
    drop(sub);
    let store = run.store_stats();
    run.finish().await;
    let flowing_s = flowing_done
        .unwrap_or_else(|| began.elapsed())
        .as_secs_f64();
    let r = Round {
        flowing_rate: s.flowing as f64 / flowing_s,
        dead_lettered_s,
        nacks,
    };
    println!(
        "round {round} {tag}: {} flowing msg/s (store: {} transactions, {} writes, {} rows read){}",
        thousands(r.flowing_rate),
        thousands(store.write_transactions as f64),
        thousands(store.write_ops as f64),
        thousands(store.message_rows as f64),
        if mode == Mode::Refused && sent_poison > 0 {
            format!(
                ", {} NACKs, every poison message dead-lettered after {:.1} s",
                thousands(nacks as f64),
                dead_lettered_s
            )
        } else {
            String::new()
        }
    );
    Ok(r)
}
