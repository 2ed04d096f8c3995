//! Queue throughput, Ebb beside RabbitMQ: persistent 1 KiB messages through one
//! durable queue, end to end (first send to last ack), printed as a table and one JSON
//! line.
//!
//! Workload, the same for every row:
//! - producers send persistent messages and wait for the broker's confirmation of each
//!   one (`Broker::send` returning; over STOMP a RECEIPT), pipelined: each producer
//!   keeps at most `window` (default 100) sends without their confirmation;
//! - consumers ack every message individually (`client-individual`), with a prefetch
//!   of `prefetch` (default 100); in process each consumer keeps at most `window` acks
//!   unanswered, over STOMP it writes one ACK per MESSAGE (acks have no receipt);
//! - 1 producer / 1 consumer, then 4 / 4; N messages per run, each counted on arrival:
//!   the run fails if one is lost, arrives twice, or the run stalls for 30 s.
//!
//! Rows: Ebb in process (embedding API) and Ebb over STOMP (the listener `ebb serve`
//! runs, in process, on an ephemeral port), each on SQLite (a temporary file,
//! `synchronous=FULL`) and on PostgreSQL (a schema of its own, dropped afterwards);
//! RabbitMQ over STOMP (`/queue/NAME`, `durable:true`, `auto-delete:false`,
//! `persistent:true`, `prefetch-count`; set up by `benches/peers/rabbitmq-stomp.sh`).
//! The STOMP client runs on a thread of its own whichever broker it drives. For STOMP
//! rows the ratio column is Ebb / RabbitMQ for the same producers and consumers, in the
//! same run. CPU is in cores (CPU seconds / wall seconds): of the whole process in
//! process, of the broker over STOMP (Ebb: the process less the client's thread;
//! RabbitMQ: its `beam.smp`); PostgreSQL's own processes are not counted. For Ebb the
//! table also shows the store transactions committed during the run with the writes
//! in each (a send is one write, an ack one delete), and the message rows read back
//! from the store (a queue whose memory cache is full pages from the store).
//!
//! Each row runs `EBB_BENCH_QUEUE_ROUNDS` times (default 3), the rows in turn within a
//! round; the table shows the median round and the lowest and highest.
//!
//! Run: `cargo bench --bench queues`. Settings: `EBB_BENCH_QUEUE_MESSAGES` (N, default
//! 20,000), `EBB_BENCH_QUEUE_WINDOW` (100), `EBB_BENCH_QUEUE_PREFETCH` (100),
//! `EBB_BENCH_POSTGRES_URL` adds the PostgreSQL rows, `EBB_BENCH_RABBITMQ_STOMP`
//! (default `127.0.0.1:61623`; unreachable: those rows are skipped, with a line
//! saying so), `EBB_BENCH_QUEUE_ONLY` runs only the rows whose label contains one of
//! its comma-separated parts (`ebb sqlite in-process 4/4`, `rabbitmq stomp 1/1`). A run
//! that loses or duplicates a message, or stalls, is reported and the bench fails at
//! the end, after the table of the other rows.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::ebb_run::{self, EbbRun, Store};
use common::report::{self, env, thousands};
use common::stomp_load::{self, Dialect, Load};
use common::tally::{self, Seen, Tally};
use ebb::{AckMode, Broker, Message, SubscribeOptions};
use futures::stream::FuturesUnordered;
use futures::{StreamExt, TryStreamExt};

/// The queue every Ebb run uses (each run has a fresh store).
const QUEUE: &str = "queue://bench";
/// The queue on RabbitMQ (kept between runs: emptied before each).
const RABBIT_QUEUE: &str = "/queue/ebb-bench-queues";
const BODY_BYTES: usize = 1024;
const STALL: Duration = Duration::from_secs(30);
const CONFIGS: [(usize, usize); 2] = [(1, 1), (4, 4)];

#[derive(Debug, Clone)]
struct Settings {
    messages: u64,
    window: usize,
    prefetch: u32,
    postgres: Option<String>,
    rabbit: SocketAddr,
    dir: std::path::PathBuf,
    /// Runs of each row; the table shows the median.
    rounds: usize,
    /// Rows to run: substrings of their labels (`ebb sqlite in-process 4/4`); empty: all.
    only: Vec<String>,
}

impl Settings {
    fn wants(&self, label: &str) -> bool {
        common::report::wanted(&self.only, label)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Transport {
    #[serde(rename = "in-process")]
    InProcess,
    Stomp,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    broker: &'static str,
    store: &'static str,
    transport: Transport,
    producers: usize,
    consumers: usize,
    messages: u64,
    seconds: f64,
    msgs_per_s: f64,
    /// Ebb / RabbitMQ at the same producers and consumers (STOMP rows).
    ratio_to_rabbitmq: Option<f64>,
    /// CPU seconds / wall seconds (see the module documentation).
    cpu_cores: f64,
    /// Ebb only: store transactions committed during the run, and writes in them.
    store_commits: Option<u64>,
    store_writes: Option<u64>,
    /// Ebb only: message rows read back from the store during the run (a queue whose
    /// cache is full pages its messages from the store).
    store_rows_read: Option<u64>,
    /// msgs/s of every round, lowest first (the row is the median round).
    rounds_msgs_per_s: Vec<f64>,
}

impl Transport {
    fn label(self) -> &'static str {
        match self {
            Transport::InProcess => "in-process",
            Transport::Stomp => "STOMP",
        }
    }
}

async fn start_ebb(store: &Store, settings: &Settings, run: usize) -> EbbRun {
    ebb_run::start(store, &settings.dir, "queues", run).await
}

impl EbbRun {
    /// After a run: nothing left in the queue, each message dispatched once and acked.
    async fn check(&self, messages: u64) -> Result<(), String> {
        let rows = self
            .broker
            .store()
            .count_messages(QUEUE)
            .await
            .map_err(|e| e.to_string())?;
        let stats = self
            .broker
            .queue_stats(QUEUE)
            .await
            .map_err(|e| e.to_string())?;
        if rows != 0
            || stats.dispatched != messages
            || stats.dequeued != messages
            || stats.redelivered != 0
            || stats.in_flight != 0
        {
            return Err(format!(
                "after the run the store holds {rows} rows of {QUEUE}; queue stats: {stats:?}"
            ));
        }
        Ok(())
    }

    async fn describe(&self) -> String {
        match self.broker.queue_stats(QUEUE).await {
            Ok(stats) => format!("queue stats: {stats:?}"),
            Err(e) => format!("queue stats unavailable: {e}"),
        }
    }
}

async fn produce_in_process(
    broker: Broker,
    indices: std::ops::Range<u64>,
    window: usize,
    tally: Arc<Tally>,
) -> Result<(), String> {
    futures::stream::iter(indices)
        .map(|index| {
            let broker = broker.clone();
            async move {
                let message = Message::new(tally::body(index, BODY_BYTES));
                broker.send(QUEUE, message).await.map_err(|e| e.to_string())
            }
        })
        .buffer_unordered(window.max(1))
        .try_for_each(|_| {
            tally
                .confirmed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            futures::future::ready(Ok(()))
        })
        .await
}

async fn consume_in_process(
    mut sub: ebb::Subscription,
    window: usize,
    tally: Arc<Tally>,
) -> Result<(), String> {
    let acker = sub.acker();
    let mut done = tally.done();
    let mut acks = FuturesUnordered::new();
    let acked = |r: Result<(), ebb::Error>| -> Result<(), String> {
        r.map_err(|e| format!("ack failed: {e}"))?;
        tally
            .acked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    };
    loop {
        tokio::select! {
            biased;
            Some(r) = acks.next(), if !acks.is_empty() => acked(r)?,
            m = sub.next(), if acks.len() < window.max(1) => {
                let m = m.ok_or("the subscription ended")?;
                if tally.record(m.body()) == Seen::Foreign {
                    return Err(format!("a message this run never sent: {}", m.message_id()));
                }
                let acker = acker.clone();
                acks.push(async move { acker.ack(&m).await });
            }
            _ = done.wait_for(|d| *d) => break,
        }
    }
    while let Some(r) = acks.next().await {
        acked(r)?;
    }
    Ok(())
}

/// What one run measured, before it becomes a row.
struct Measured {
    elapsed: Duration,
    cpu_s: f64,
    /// Ebb: store transactions, writes in them, message rows read.
    commits: Option<(u64, u64, u64)>,
}

async fn ebb_in_process(
    run: &EbbRun,
    s: &Settings,
    p: usize,
    c: usize,
) -> Result<Measured, String> {
    let broker = &run.broker;
    let tally = Arc::new(Tally::new(s.messages));
    let mut subs = Vec::new();
    for _ in 0..c {
        let options = SubscribeOptions::non_durable()
            .ack(AckMode::Client)
            .prefetch(s.prefetch);
        subs.push(
            broker
                .subscribe(QUEUE, options)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let before = broker.store().stats().snapshot();
    let cpu_before = stomp_load::cpu_s("/proc/self/stat");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..p {
        let indices = tally::share(s.messages, p, i);
        let task = produce_in_process(broker.clone(), indices, s.window, Arc::clone(&tally));
        tasks.push(actix_rt::spawn(task));
    }
    for sub in subs {
        tasks.push(actix_rt::spawn(consume_in_process(
            sub,
            s.window,
            Arc::clone(&tally),
        )));
    }
    let all = async {
        for task in tasks {
            task.await.map_err(|e| format!("a task failed: {e}"))??;
        }
        Ok::<_, String>(())
    };
    tokio::select! {
        finished = all => finished?,
        stalled = tally::watchdog(&tally, STALL) => {
            return Err(format!("{stalled}; {}", run.describe().await));
        }
    }
    let elapsed = started.elapsed();
    let cpu_s = stomp_load::cpu_s("/proc/self/stat") - cpu_before;
    let after = broker.store().stats().snapshot();
    tally.check()?;
    run.check(s.messages).await?;
    Ok(Measured {
        elapsed,
        cpu_s,
        commits: Some((
            after.write_transactions - before.write_transactions,
            after.write_ops - before.write_ops,
            after.message_rows - before.message_rows,
        )),
    })
}

fn ebb_dialect() -> Dialect {
    Dialect::ebb("/queue/bench").persistent()
}

fn rabbit_dialect() -> Dialect {
    Dialect::rabbitmq(RABBIT_QUEUE).persistent().durable()
}

fn load(addr: SocketAddr, dialect: Dialect, s: &Settings, p: usize, c: usize) -> Load {
    Load {
        addr,
        dialect,
        producers: p,
        consumers: c,
        messages: s.messages,
        body_bytes: BODY_BYTES,
        window: s.window,
        prefetch: s.prefetch,
        stall: STALL,
    }
}

async fn ebb_stomp(run: &EbbRun, s: &Settings, p: usize, c: usize) -> Result<Measured, String> {
    let listener = run.listen().await?;
    let addr = listener.addr;
    let tally = Arc::new(Tally::new(s.messages));
    let before = run.broker.store().stats().snapshot();
    let cpu_before = stomp_load::cpu_s("/proc/self/stat");
    let report = stomp_load::spawn(load(addr, ebb_dialect(), s, p, c), Arc::clone(&tally)).await;
    let cpu_s = stomp_load::cpu_s("/proc/self/stat") - cpu_before;
    let after = run.broker.store().stats().snapshot();
    listener.stop().await;
    let report = match report {
        Ok(Ok(report)) => report,
        Ok(Err(e)) => return Err(format!("{e}; {}", run.describe().await)),
        Err(_) => return Err("the client thread died".into()),
    };
    run.check(s.messages).await?;
    Ok(Measured {
        elapsed: report.elapsed,
        cpu_s: cpu_s - report.client_cpu_s,
        commits: Some((
            after.write_transactions - before.write_transactions,
            after.write_ops - before.write_ops,
            after.message_rows - before.message_rows,
        )),
    })
}

async fn rabbit_stomp(s: &Settings, p: usize, c: usize) -> Result<Measured, String> {
    let dialect = rabbit_dialect();
    let drained = stomp_load::drain(s.rabbit, &dialect).await?;
    if drained > 0 {
        eprintln!("  (removed {drained} messages an earlier run left in {RABBIT_QUEUE})");
    }
    let stat = common::procfs::rabbitmq_stat();
    let cpu_before = stat.as_deref().map_or(0.0, stomp_load::cpu_s);
    let tally = Arc::new(Tally::new(s.messages));
    let report = stomp_load::spawn(load(s.rabbit, dialect.clone(), s, p, c), tally)
        .await
        .map_err(|_| "the client thread died".to_string())??;
    let cpu_s = stat.as_deref().map_or(0.0, stomp_load::cpu_s) - cpu_before;
    let left = stomp_load::drain(s.rabbit, &dialect).await?;
    if left > 0 {
        return Err(format!(
            "{left} messages were still in {RABBIT_QUEUE} after every one was acked"
        ));
    }
    Ok(Measured {
        elapsed: report.elapsed,
        cpu_s,
        commits: None,
    })
}

fn row(
    broker: &'static str,
    store: &'static str,
    transport: Transport,
    (p, c): (usize, usize),
    messages: u64,
    m: &Measured,
) -> Row {
    let seconds = m.elapsed.as_secs_f64();
    Row {
        broker,
        store,
        transport,
        producers: p,
        consumers: c,
        messages,
        seconds,
        msgs_per_s: messages as f64 / seconds,
        ratio_to_rabbitmq: None,
        cpu_cores: m.cpu_s / seconds,
        store_commits: m.commits.map(|c| c.0),
        store_writes: m.commits.map(|c| c.1),
        store_rows_read: m.commits.map(|c| c.2),
        rounds_msgs_per_s: Vec::new(),
    }
}

fn print_table(rows: &[Row]) {
    println!("| broker | store | transport | producers/consumers | msgs/s (median) | rounds min–max | Ebb/RabbitMQ | seconds | CPU (cores) | store commits (writes per commit) | rows read back |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let ratio = r
            .ratio_to_rabbitmq
            .map_or("—".to_string(), |x| format!("{x:.2}"));
        let commits = match (r.store_commits, r.store_writes) {
            (Some(c), Some(w)) if c > 0 => {
                format!("{} ({:.1})", thousands(c as f64), w as f64 / c as f64)
            }
            _ => "—".into(),
        };
        let spread = match (r.rounds_msgs_per_s.first(), r.rounds_msgs_per_s.last()) {
            (Some(lo), Some(hi)) if r.rounds_msgs_per_s.len() > 1 => {
                format!("{}–{}", thousands(*lo), thousands(*hi))
            }
            _ => "—".into(),
        };
        let read = r
            .store_rows_read
            .map_or("—".to_string(), |n| thousands(n as f64));
        println!(
            "| {} | {} | {} | {}/{} | {} | {} | {} | {:.1} | {:.2} | {} | {} |",
            r.broker,
            r.store,
            match r.transport {
                Transport::InProcess => "in process",
                Transport::Stomp => "STOMP",
            },
            r.producers,
            r.consumers,
            thousands(r.msgs_per_s),
            spread,
            ratio,
            r.seconds,
            r.cpu_cores,
            commits,
            read,
        );
    }
}

/// One row to measure.
#[derive(Debug, Clone)]
enum Spec {
    Rabbit,
    Ebb(Store, Transport),
}

impl Spec {
    fn label(&self, (p, c): (usize, usize)) -> String {
        match self {
            Spec::Rabbit => format!("rabbitmq stomp {p}/{c}"),
            Spec::Ebb(store, transport) => {
                format!("ebb {} {} {p}/{c}", store.label(), transport.label()).to_lowercase()
            }
        }
    }

    async fn measure(
        &self,
        s: &Settings,
        pc: (usize, usize),
        run: usize,
    ) -> Result<Measured, String> {
        let (p, c) = pc;
        match self {
            Spec::Rabbit => rabbit_stomp(s, p, c).await,
            Spec::Ebb(store, transport) => {
                let ebb = start_ebb(store, s, run).await;
                let measured = match transport {
                    Transport::Stomp => ebb_stomp(&ebb, s, p, c).await,
                    Transport::InProcess => ebb_in_process(&ebb, s, p, c).await,
                };
                ebb.finish().await;
                measured
            }
        }
    }

    fn row(&self, pc: (usize, usize), messages: u64, m: &Measured) -> Row {
        match self {
            Spec::Rabbit => row(
                "RabbitMQ",
                "classic queue",
                Transport::Stomp,
                pc,
                messages,
                m,
            ),
            Spec::Ebb(store, transport) => row("Ebb", store.label(), *transport, pc, messages, m),
        }
    }
}

/// Runs every wanted row `rounds` times, the rows in turn within a round (so a change
/// in the machine's load falls on all of them); answers each row's median run, and
/// the runs that failed.
async fn bench(s: Settings) -> (Vec<Row>, Vec<String>) {
    let stores = ebb_run::stores(s.postgres.as_deref()).await;
    let rabbit = match stomp_load::connect(s.rabbit, &rabbit_dialect()).await {
        Ok(conn) => conn.disconnect().await.is_ok(),
        Err(e) => {
            println!(
                "RabbitMQ's STOMP at {} cannot be reached ({e}): its rows are skipped \
                 (benches/peers/rabbitmq-stomp.sh enables it)",
                s.rabbit
            );
            false
        }
    };
    let mut specs = Vec::new();
    for pc in CONFIGS {
        if rabbit {
            specs.push((Spec::Rabbit, pc));
        }
        for transport in [Transport::Stomp, Transport::InProcess] {
            for store in &stores {
                specs.push((Spec::Ebb(store.clone(), transport), pc));
            }
        }
    }
    specs.retain(|(spec, pc)| s.wants(&spec.label(*pc)));
    let mut runs: Vec<Vec<Row>> = vec![Vec::new(); specs.len()];
    let mut failures = Vec::new();
    let mut run = 0;
    for round in 1..=s.rounds {
        for (i, (spec, pc)) in specs.iter().enumerate() {
            let label = spec.label(*pc);
            run += 1;
            eprintln!("running: {label} (round {round} of {})", s.rounds);
            match spec.measure(&s, *pc, run).await {
                Ok(m) => runs[i].push(spec.row(*pc, s.messages, &m)),
                Err(e) => {
                    let failure = format!("{label}, {} messages, round {round}: {e}", s.messages);
                    eprintln!("FAILED: {failure}");
                    failures.push(failure);
                }
            }
        }
    }
    let mut rows: Vec<Row> = report::median_rounds(
        runs,
        |r: &Row| r.msgs_per_s,
        |r, rounds| r.rounds_msgs_per_s = rounds,
    );
    // The ratio: each Ebb STOMP row against RabbitMQ's row with the same shape.
    let reference: Vec<(usize, usize, f64)> = rows
        .iter()
        .filter(|r| r.broker == "RabbitMQ")
        .map(|r| (r.producers, r.consumers, r.msgs_per_s))
        .collect();
    for r in rows
        .iter_mut()
        .filter(|r| r.broker == "Ebb" && r.transport == Transport::Stomp)
    {
        r.ratio_to_rabbitmq = reference
            .iter()
            .find(|(p, c, _)| (*p, *c) == (r.producers, r.consumers))
            .map(|(_, _, rabbit)| r.msgs_per_s / rabbit);
    }
    (rows, failures)
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` / `cargo bench -- --list`: nothing to list.
    }
    let dir = std::env::temp_dir().join(format!("ebb-bench-queues-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let settings = Settings {
        messages: env("EBB_BENCH_QUEUE_MESSAGES", 20_000u64).max(1),
        window: env("EBB_BENCH_QUEUE_WINDOW", 100usize).max(1),
        prefetch: env("EBB_BENCH_QUEUE_PREFETCH", 100u32).max(1),
        rounds: env("EBB_BENCH_QUEUE_ROUNDS", 3usize).max(1),
        postgres: std::env::var("EBB_BENCH_POSTGRES_URL").ok(),
        rabbit: env(
            "EBB_BENCH_RABBITMQ_STOMP",
            SocketAddr::from(([127, 0, 0, 1], 61623)),
        ),
        dir: dir.clone(),
        only: common::report::only("EBB_BENCH_QUEUE_ONLY"),
    };
    println!(
        "queues: {} persistent messages of {BODY_BYTES} bytes per run, one durable queue; \
         producers keep at most {} sends unconfirmed, consumers ack each message \
         (client-individual), prefetch {}; median of {} rounds; {} cores",
        settings.messages,
        settings.window,
        settings.prefetch,
        settings.rounds,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let (rows, failures) = actix_rt::System::new().block_on(bench(settings.clone()));
    println!();
    print_table(&rows);
    let json = serde_json::json!({
        "bench": "queues",
        "messages": settings.messages,
        "body_bytes": BODY_BYTES,
        "window": settings.window,
        "prefetch": settings.prefetch,
        "rounds": settings.rounds,
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "rows": rows,
        "failed": failures,
    });
    println!("{json}");
    let _ = std::fs::remove_dir_all(&dir);
    // A lost or duplicated message, or a stall, is a broker bug: the bench fails.
    assert!(
        failures.is_empty(),
        "{} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
