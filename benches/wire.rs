//! Wire speed over STOMP, Ebb beside RabbitMQ's STOMP plugin on the same machine and
//! in the same run (issue 11's figures): persistent SEND throughput, topic fan-out,
//! SEND → RECEIPT latency under an open-loop load, and what idle connections cost.
//! Printed as a table and one JSON line.
//!
//! Workloads (1 KiB bodies throughout; each message's body carries its index, so
//! every message is counted: a run that loses one, sees one twice, or sees one it never
//! sent fails):
//! - `send-batch`: persistent SENDs to a durable queue, 1 producer, no consumer; the
//!   producer writes `batch` (default 100) SENDs, the last of them with `receipt:`,
//!   waits for that RECEIPT, and repeats. Timed from the first SEND to the last
//!   RECEIPT; afterwards the queue must hold each of the N messages exactly once (Ebb:
//!   browsed from the store; RabbitMQ: drained).
//! - `send-last`: the same with a receipt on the last message only (one batch of N).
//! - `fanout`: non-persistent SENDs to a topic, 1 producer (a receipt every `batch`
//!   SENDs, as `send-batch`) → `subscribers` (default 10) subscriptions with
//!   `ack:auto`, each on its own connection. Every delivery is counted, per
//!   subscriber; the run ends when each subscriber has received all N. The figure is
//!   deliveries per second (N × subscribers / time from the first SEND until the last
//!   subscriber has its N-th message). Ebb: `/topic/NAME` on the SQLite store only
//!   (non-persistent messages never reach the store); RabbitMQ: `/topic/NAME` (the
//!   `amq.topic` exchange, a queue per subscription).
//! - `latency`: persistent SENDs to a durable queue, each with `receipt:`, at a fixed
//!   rate (default 1,000 msg/s) for a fixed count (default 5,000), no consumer. Open
//!   loop: message `i` is due at `t0 + i / rate`; a pacing thread (a plain sleep, well
//!   under 1 ms late) hands each index to the connection's task when it is due, which
//!   writes it at once, whether or not earlier receipts came back. Each latency is
//!   measured from the message's *scheduled* time to its RECEIPT, so a stall of the
//!   broker (or of the client's writes behind it) counts for every message it delays,
//!   as coordinated omission would hide. Shows p50, p99 and max, and the send lag (how
//!   late the client queued a frame after its scheduled time: the client's share). The
//!   row's figure is the p99.
//! - `idle`: `connections` (default 10,000) STOMP connections, each CONNECT offering
//!   `heart-beat:H,H` (default H = 10,000 ms); the client sends a heart-beat on each at
//!   the negotiated interval and reads the broker's. Once all are connected (and 1 s
//!   later) the broker's resident memory is read again: per connection = (after −
//!   before) / connections. Then 10 s (`EBB_BENCH_WIRE_IDLE_SECONDS`) of idleness:
//!   the broker's CPU seconds over them. Afterwards every connection must still be open
//!   and answer DISCONNECT with its receipt. To measure Ebb alone, Ebb here is `ebb
//!   serve` as a child process (the release binary cargo built with this bench, or
//!   `EBB_BENCH_EBB_BIN`) on a temporary SQLite store and an ephemeral loopback port,
//!   read through `/proc/PID/status` (`VmRSS`) and `/proc/PID/stat` (utime + stime);
//!   RabbitMQ is its node's `beam.smp`. The bench raises its own open-files limit
//!   (RLIMIT_NOFILE, soft and if need be hard) before anything starts; the child
//!   inherits it. What the machine cannot give is a skipped row with a line saying so:
//!   too few ephemeral ports, an open-files limit that cannot be raised far enough, a
//!   RabbitMQ node whose own limit is too low for the connections (its sockets are
//!   about 0.9 × (open files − 100)), no `ebb` binary.
//!
//! Rows: Ebb over STOMP (the listener `ebb serve` runs, in this process on an
//! ephemeral port, like `queues.rs`; `idle`: the child process) on SQLite (a temporary
//! file, `synchronous=FULL`) and on PostgreSQL (a schema of its own, dropped
//! afterwards) when `EBB_BENCH_POSTGRES_URL` is set; RabbitMQ over STOMP (durable queue:
//! `durable:true`, `auto-delete:false`, `persistent:true`; set up by
//! `benches/peers/rabbitmq-stomp.sh`). The client runs on a thread of its own whichever
//! broker it drives, through Ebb's STOMP client, the same code for both.
//!
//! Columns: the ratio is Ebb / RabbitMQ for the same workload in the same run (for
//! `latency` of the p99, for `idle` of the memory per connection: above 1, Ebb is
//! slower or bigger). CPU is in cores (CPU seconds / wall seconds): the broker's (Ebb in
//! process: the process less the client's thread; RabbitMQ: its `beam.smp`; idle: the
//! child's or the node's, over the idle seconds) and the client's thread; PostgreSQL's
//! own processes are not counted. For Ebb rows in process, the store's transactions
//! committed per second of the run and the writes in each (a send is one write), read
//! from the store's counters as `queues.rs` does; an `ebb serve` child does not show
//! its counters, so the `idle` row has none.
//!
//! Each row runs `EBB_BENCH_WIRE_ROUNDS` times (default 3), the rows in turn within a
//! round; the table shows the median round by the row's figure, and the lowest and
//! highest.
//!
//! Run: `cargo bench --bench wire`. Settings: `EBB_BENCH_WIRE_MESSAGES` (N of
//! `send-*` and `fanout`, default 20,000), `EBB_BENCH_WIRE_BATCH` (100),
//! `EBB_BENCH_WIRE_SUBSCRIBERS` (10), `EBB_BENCH_WIRE_LATENCY_MESSAGES` (5,000),
//! `EBB_BENCH_WIRE_RATE` (msg/s, 1,000), `EBB_BENCH_WIRE_CONNECTIONS` (10,000),
//! `EBB_BENCH_WIRE_IDLE_SECONDS` (10), `EBB_BENCH_WIRE_HEARTBEAT_MS` (10,000),
//! `EBB_BENCH_WIRE_ROUNDS` (3), `EBB_BENCH_POSTGRES_URL` adds the PostgreSQL rows,
//! `EBB_BENCH_RABBITMQ_STOMP` (default `127.0.0.1:61623`; unreachable: those rows are
//! skipped, with a line saying so), `EBB_BENCH_EBB_BIN` (the `ebb` binary for `idle`),
//! `EBB_BENCH_WIRE_ONLY` runs only the rows whose label contains one of its
//! comma-separated parts (labels: `send-batch ebb sqlite`, `send-last rabbitmq`,
//! `fanout ebb sqlite`, `latency ebb postgresql`, `idle ebb sqlite`, `idle rabbitmq`;
//! so `latency,idle` or `rabbitmq`). A run that loses or duplicates a message, stalls
//! for 30 s, or loses an idle connection, is reported and the bench fails at the end,
//! after the table of the other rows.

mod common;

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::ebb_run::{self, EbbRun, Store};
use common::procfs;
use common::report::{self, env, thousands};
use common::stomp_load::{self, Dialect};
use common::tally::{self, Seen, Tally};
use ebb::stomp::client::{ClientError, StompClient};
use ebb::stomp::frame::Command;

const BODY_BYTES: usize = 1024;
/// A run that makes no progress for this long fails.
const STALL: Duration = Duration::from_secs(30);
/// Ebb's destinations over STOMP and as store keys (each run has a fresh store).
const EBB_QUEUE: &str = "/queue/bench-wire";
const EBB_QUEUE_KEY: &str = "queue://bench-wire";
const EBB_TOPIC: &str = "/topic/bench-wire";
const EBB_TOPIC_KEY: &str = "topic://bench-wire";
/// RabbitMQ's (the queue is kept between runs: emptied before each and after it).
const RABBIT_QUEUE: &str = "/queue/ebb-bench-wire";
const RABBIT_TOPIC: &str = "/topic/ebb-bench-wire";
/// Connections being opened at once by the idle workload.
const CONNECTING_AT_ONCE: usize = 64;
/// Wait after the last connection (or the broker's start) before memory is read.
const SETTLE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
struct Settings {
    /// Messages of a `send-*` or `fanout` run.
    messages: u64,
    /// SENDs per receipt (`send-batch`, `fanout`).
    batch: u64,
    subscribers: usize,
    latency_messages: u64,
    /// `latency`'s schedule, messages per second.
    rate: u64,
    connections: u64,
    idle: Duration,
    heartbeat_ms: u64,
    rounds: usize,
    postgres: Option<String>,
    rabbit: SocketAddr,
    /// The `ebb` binary for `idle`, if one was found.
    ebb_bin: Option<PathBuf>,
    dir: PathBuf,
    /// Rows to run: substrings of their labels; empty: all.
    only: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    SendBatch,
    SendLast,
    Fanout,
    Latency,
    Idle,
}

impl Workload {
    const ALL: [Workload; 5] = [
        Workload::SendBatch,
        Workload::SendLast,
        Workload::Fanout,
        Workload::Latency,
        Workload::Idle,
    ];

    fn label(self) -> &'static str {
        match self {
            Workload::SendBatch => "send-batch",
            Workload::SendLast => "send-last",
            Workload::Fanout => "fanout",
            Workload::Latency => "latency",
            Workload::Idle => "idle",
        }
    }

    /// The workload column of the table.
    fn title(self, s: &Settings) -> String {
        match self {
            Workload::SendBatch => format!("persistent SEND, receipt every {}", s.batch),
            Workload::SendLast => "persistent SEND, receipt on the last".into(),
            Workload::Fanout => format!("topic fan-out 1 → {}, auto ack", s.subscribers),
            Workload::Latency => format!(
                "SEND → RECEIPT at {} msg/s (open loop)",
                thousands(s.rate as f64)
            ),
            Workload::Idle => format!(
                "{} idle connections, heart-beat {} ms",
                thousands(s.connections as f64),
                thousands(s.heartbeat_ms as f64)
            ),
        }
    }

    /// Whether the workload leaves its messages in a queue (to be checked and emptied).
    fn fills_queue(self) -> bool {
        matches!(
            self,
            Workload::SendBatch | Workload::SendLast | Workload::Latency
        )
    }

    /// The unit of the row's figure.
    fn unit(self) -> &'static str {
        match self {
            Workload::SendBatch | Workload::SendLast => "msg/s",
            Workload::Fanout => "deliveries/s",
            Workload::Latency => "ms (p99)",
            Workload::Idle => "KiB per connection",
        }
    }
}

#[derive(Debug, Clone)]
enum Peer {
    Rabbit,
    Ebb(Store),
}

impl Peer {
    fn broker(&self) -> &'static str {
        match self {
            Peer::Rabbit => "RabbitMQ",
            Peer::Ebb(_) => "Ebb",
        }
    }

    fn store(&self, workload: Workload) -> &'static str {
        match (self, workload) {
            (Peer::Rabbit, Workload::Fanout | Workload::Idle) => "—",
            (Peer::Rabbit, _) => "classic queue",
            (Peer::Ebb(store), _) => store.label(),
        }
    }

    fn label(&self, workload: Workload) -> String {
        match self {
            Peer::Rabbit => format!("{} rabbitmq", workload.label()),
            Peer::Ebb(store) => {
                format!("{} ebb {}", workload.label(), store.label()).to_lowercase()
            }
        }
    }

    fn dialect(&self, workload: Workload) -> Dialect {
        match (self, workload) {
            (Peer::Ebb(_), Workload::Fanout) => Dialect::ebb(EBB_TOPIC),
            (Peer::Ebb(_), _) => Dialect::ebb(EBB_QUEUE).persistent(),
            (Peer::Rabbit, Workload::Fanout) => Dialect::rabbitmq(RABBIT_TOPIC),
            (Peer::Rabbit, _) => Dialect::rabbitmq(RABBIT_QUEUE).persistent().durable(),
        }
    }
}

/// Latencies of one `latency` run, in ms.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct LatencyMs {
    p50: f64,
    p99: f64,
    max: f64,
    mean: f64,
    /// How late the client queued a SEND after its scheduled time.
    send_lag_p99: f64,
    send_lag_max: f64,
}

/// What one `idle` run measured.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct IdleFigures {
    connections: u64,
    /// Seconds to open and log in every connection.
    connect_seconds: f64,
    /// The broker's resident memory before the first connection, once all are
    /// connected, and at the end of the idle time (bytes).
    rss_before: u64,
    rss_connected: u64,
    rss_end: u64,
    /// (rss_connected − rss_before) / connections, KiB.
    kib_per_connection: f64,
    /// The broker's CPU seconds over the idle time, and that time.
    idle_cpu_s: f64,
    idle_seconds: f64,
    /// Heart-beats the client sent over the whole run.
    heartbeats_sent: u64,
}

/// What the client thread reports.
#[derive(Debug, Clone)]
struct ClientReport {
    /// The timed part of the run.
    elapsed: Duration,
    /// CPU seconds of the client's thread, connecting included.
    cpu_s: f64,
    latency: Option<LatencyMs>,
}

/// What one run measured, before it becomes a row.
#[derive(Debug, Clone)]
struct Measured {
    seconds: f64,
    /// CPU seconds of the broker and of the client (see the module documentation).
    broker_cpu_s: Option<f64>,
    client_cpu_s: Option<f64>,
    /// Ebb in process: store transactions committed during the run, writes in them.
    commits: Option<(u64, u64)>,
    latency: Option<LatencyMs>,
    idle: Option<IdleFigures>,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    workload: &'static str,
    broker: &'static str,
    store: &'static str,
    /// Messages sent in the run (0 for `idle`).
    messages: u64,
    /// Seconds of the timed part (`idle`: of the idle time).
    seconds: f64,
    msgs_per_s: Option<f64>,
    /// Body bytes only, MiB (2^20) per second.
    mib_per_s: Option<f64>,
    deliveries_per_s: Option<f64>,
    latency_ms: Option<LatencyMs>,
    idle: Option<IdleFigures>,
    /// The row's figure, in `unit` (msg/s, deliveries/s, p99 ms, KiB per connection).
    figure: f64,
    unit: &'static str,
    /// Ebb's figure / RabbitMQ's in the same workload (see the module documentation).
    ratio_to_rabbitmq: Option<f64>,
    broker_cpu_cores: Option<f64>,
    client_cpu_cores: Option<f64>,
    store_commits: Option<u64>,
    store_writes: Option<u64>,
    store_commits_per_s: Option<f64>,
    writes_per_commit: Option<f64>,
    /// The figure of every round, lowest first (the row is the median round).
    rounds: Vec<f64>,
}

fn row(workload: Workload, peer: &Peer, s: &Settings, m: &Measured) -> Row {
    let messages = match workload {
        Workload::SendBatch | Workload::SendLast | Workload::Fanout => s.messages,
        Workload::Latency => s.latency_messages,
        Workload::Idle => 0,
    };
    let seconds = m.seconds;
    let rate = (messages > 0).then(|| messages as f64 / seconds);
    let deliveries_per_s =
        (workload == Workload::Fanout).then(|| (messages * s.subscribers as u64) as f64 / seconds);
    let figure = match workload {
        Workload::SendBatch | Workload::SendLast => rate.unwrap_or(0.0),
        Workload::Fanout => deliveries_per_s.unwrap_or(0.0),
        Workload::Latency => m.latency.map_or(0.0, |l| l.p99),
        Workload::Idle => m.idle.map_or(0.0, |i| i.kib_per_connection),
    };
    let (commits, writes) = match m.commits {
        Some((c, w)) => (Some(c), Some(w)),
        None => (None, None),
    };
    Row {
        workload: workload.label(),
        broker: peer.broker(),
        store: peer.store(workload),
        messages,
        seconds,
        msgs_per_s: rate,
        mib_per_s: rate.map(|r| r * BODY_BYTES as f64 / (1 << 20) as f64),
        deliveries_per_s,
        latency_ms: m.latency,
        idle: m.idle,
        figure,
        unit: workload.unit(),
        ratio_to_rabbitmq: None,
        broker_cpu_cores: m.broker_cpu_s.map(|c| c / seconds),
        client_cpu_cores: m.client_cpu_s.map(|c| c / seconds),
        store_commits: commits,
        store_writes: writes,
        store_commits_per_s: commits.map(|c| c as f64 / seconds),
        writes_per_commit: match (commits, writes) {
            (Some(c), Some(w)) if c > 0 => Some(w as f64 / c as f64),
            _ => None,
        },
        rounds: Vec::new(),
    }
}

// ---------------------------------------------------------------------------------
// The client side: each runs on a thread of its own (`stomp_load::on_thread`).

fn failed(e: ClientError) -> String {
    e.to_string()
}

/// Writes SENDs `from..to` (the last with `receipt:<index>`), then waits for that
/// RECEIPT. `written` counts the SENDs queued, for the stall watchdog.
async fn send_batch(
    client: &mut StompClient,
    dialect: &Dialect,
    from: u64,
    to: u64,
    written: &Cell<u64>,
) -> Result<(), String> {
    let (reader, writer) = client.halves();
    for index in from..to {
        let mut frame = dialect.send_frame(tally::body(index, BODY_BYTES));
        if index + 1 == to {
            frame = frame.header("receipt", index.to_string());
        }
        writer.feed(frame).await.map_err(failed)?;
        written.set(written.get() + 1);
    }
    writer.flush().await.map_err(failed)?;
    let f = stomp_load::next(reader).await?;
    let want = (to - 1).to_string();
    if f.command != Command::Receipt || f.get("receipt-id") != Some(want.as_str()) {
        return Err(format!(
            "waiting for RECEIPT {want}, the producer got {} {:?}",
            f.command.as_str(),
            f.headers
        ));
    }
    Ok(())
}

/// `send-batch` (`every` = the batch) and `send-last` (`every` = `messages`).
async fn send_client(
    addr: SocketAddr,
    dialect: Dialect,
    messages: u64,
    every: u64,
) -> Result<ClientReport, String> {
    let mut client = stomp_load::connect(addr, &dialect).await?;
    let cpu = stomp_load::thread_cpu_s();
    let written = Cell::new(0);
    let started = Instant::now();
    let work = async {
        let mut from = 0;
        while from < messages {
            let to = (from + every.max(1)).min(messages);
            send_batch(&mut client, &dialect, from, to, &written).await?;
            from = to;
        }
        Ok::<_, String>(started.elapsed())
    };
    let describe = || format!("{} of {messages} SENDs written", written.get());
    let elapsed = tokio::select! {
        done = work => done?,
        stalled = tally::stalled(|| written.get(), describe, STALL) => return Err(stalled),
    };
    let cpu_s = stomp_load::thread_cpu_s() - cpu;
    client.disconnect().await.map_err(failed)?;
    Ok(ClientReport {
        elapsed,
        cpu_s,
        latency: None,
    })
}

/// One fan-out subscriber: counts every MESSAGE until it has all of them, then
/// disconnects (a MESSAGE before the DISCONNECT receipt is a duplicate, counted).
async fn fan_in(mut client: StompClient, tally: Arc<Tally>) -> Result<(), String> {
    let mut done = tally.done();
    loop {
        let (reader, _) = client.halves();
        tokio::select! {
            f = stomp_load::next(reader) => {
                let f = f?;
                if f.command != Command::Message {
                    return Err(format!("a subscriber got {} {:?}", f.command.as_str(), f.headers));
                }
                if tally.record(&f.body) == Seen::Foreign {
                    return Err(format!("a message this run never sent: {:?}", f.headers));
                }
            }
            _ = done.wait_for(|d| *d) => break,
        }
    }
    client
        .disconnect_with(|f| {
            tally.record(&f.body);
        })
        .await
        .map_err(failed)
}

/// `fanout`: subscribers attached first (SUBSCRIBE answered by its receipt), then one
/// producer; timed until every subscriber has every message.
async fn fanout_client(
    addr: SocketAddr,
    dialect: Dialect,
    messages: u64,
    every: u64,
    subscribers: usize,
) -> Result<ClientReport, String> {
    let mut subs = Vec::new();
    for i in 0..subscribers {
        let mut client = stomp_load::connect(addr, &dialect).await?;
        let early =
            stomp_load::subscribe(&mut client, &dialect, &format!("s{i}"), "auto", None).await?;
        if !early.is_empty() {
            return Err(format!(
                "{} frames before anything was sent: {:?}",
                early.len(),
                early[0]
            ));
        }
        subs.push(client);
    }
    let mut producer = stomp_load::connect(addr, &dialect).await?;
    let tallies: Vec<Arc<Tally>> = (0..subscribers)
        .map(|_| Arc::new(Tally::new(messages)))
        .collect();
    let cpu = stomp_load::thread_cpu_s();
    let written = Cell::new(0);
    let started = Instant::now();
    let tasks: Vec<_> = subs
        .into_iter()
        .zip(&tallies)
        .map(|(client, t)| tokio::task::spawn_local(fan_in(client, Arc::clone(t))))
        .collect();
    let produce = async {
        let mut from = 0;
        while from < messages {
            let to = (from + every.max(1)).min(messages);
            send_batch(&mut producer, &dialect, from, to, &written).await?;
            from = to;
        }
        Ok::<_, String>(())
    };
    let all_received = async {
        for t in &tallies {
            t.done().wait_for(|d| *d).await.expect("the tally lives");
        }
        started.elapsed()
    };
    let work = async {
        let (produced, elapsed) = tokio::join!(produce, all_received);
        produced?;
        for task in tasks {
            task.await
                .map_err(|e| format!("a subscriber task failed: {e}"))??;
        }
        Ok::<_, String>(elapsed)
    };
    let progress = || written.get() + tallies.iter().map(|t| t.unique()).sum::<u64>();
    let describe = || {
        let got: Vec<u64> = tallies.iter().map(|t| t.unique()).collect();
        format!(
            "{} of {messages} SENDs written; messages each subscriber has: {got:?}",
            written.get()
        )
    };
    let elapsed = tokio::select! {
        done = work => done?,
        stalled = tally::stalled(progress, describe, STALL) => return Err(stalled),
    };
    let cpu_s = stomp_load::thread_cpu_s() - cpu;
    for (i, t) in tallies.iter().enumerate() {
        t.check().map_err(|e| format!("subscriber {i}: {e}"))?;
    }
    producer.disconnect().await.map_err(failed)?;
    Ok(ClientReport {
        elapsed,
        cpu_s,
        latency: None,
    })
}

/// The value at quantile `q` (0..=1) of sorted `values` (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `latency`: see the module documentation.
async fn latency_client(
    addr: SocketAddr,
    dialect: Dialect,
    messages: u64,
    rate: u64,
) -> Result<ClientReport, String> {
    let mut client = stomp_load::connect(addr, &dialect).await?;
    let period_ns = 1_000_000_000 / rate.max(1);
    let t0 = Instant::now() + Duration::from_millis(20);
    let due = move |i: u64| t0 + Duration::from_nanos(period_ns * i);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let pacer = std::thread::spawn(move || {
        for i in 0..messages {
            let now = Instant::now();
            if due(i) > now {
                std::thread::sleep(due(i) - now);
            }
            if tx.send(i).is_err() {
                return;
            }
        }
    });
    let cpu = stomp_load::thread_cpu_s();
    let sent = Cell::new(0u64);
    let received = Cell::new(0u64);
    let mut lags = Vec::with_capacity(messages as usize);
    let mut latencies: Vec<Option<f64>> = vec![None; messages as usize];
    let (reader, writer) = client.halves();
    let write = async {
        while let Some(first) = rx.recv().await {
            let mut next = Some(first);
            while let Some(i) = next.take() {
                let frame = dialect
                    .send_frame(tally::body(i, BODY_BYTES))
                    .header("receipt", i.to_string());
                writer.feed(frame).await.map_err(failed)?;
                lags.push(ms(Instant::now().saturating_duration_since(due(i))));
                sent.set(sent.get() + 1);
                // Indices already due go out in the same write.
                next = rx.try_recv().ok();
            }
            writer.flush().await.map_err(failed)?;
        }
        Ok::<_, String>(())
    };
    let read = async {
        while received.get() < messages {
            let f = stomp_load::next(reader).await?;
            let now = Instant::now();
            let id = f.get("receipt-id").and_then(|id| id.parse::<u64>().ok());
            let slot = match (f.command, id) {
                (Command::Receipt, Some(id)) => latencies.get_mut(id as usize),
                _ => None,
            };
            match slot {
                Some(slot @ None) => {
                    *slot = Some(ms(now.saturating_duration_since(due(id.unwrap()))))
                }
                Some(Some(_)) => return Err(format!("RECEIPT {} came twice", id.unwrap())),
                None => {
                    return Err(format!(
                        "the producer got {} {:?}",
                        f.command.as_str(),
                        f.headers
                    ))
                }
            }
            received.set(received.get() + 1);
        }
        Ok::<_, String>(Instant::now())
    };
    let progress = || sent.get() + received.get();
    let describe = || {
        format!(
            "{} of {messages} SENDs written, {} receipts",
            sent.get(),
            received.get()
        )
    };
    let last = tokio::select! {
        done = async { tokio::try_join!(write, read) } => done?.1,
        stalled = tally::stalled(progress, describe, STALL) => return Err(stalled),
    };
    let cpu_s = stomp_load::thread_cpu_s() - cpu;
    let _ = pacer.join();
    client.disconnect().await.map_err(failed)?;
    Ok(ClientReport {
        elapsed: last.saturating_duration_since(t0),
        cpu_s,
        latency: Some(latency_of(latencies, lags, messages)?),
    })
}

/// The latency figures (ms) of one latency client: `latencies` by message (every one
/// must have its receipt), `lags` the SENDs' delays behind their due times.
fn latency_of(
    latencies: Vec<Option<f64>>,
    mut lags: Vec<f64>,
    messages: u64,
) -> Result<LatencyMs, String> {
    let mut all: Vec<f64> = latencies.into_iter().flatten().collect();
    if all.len() as u64 != messages {
        return Err(format!("{} receipts of {messages}", all.len()));
    }
    all.sort_by(f64::total_cmp);
    lags.sort_by(f64::total_cmp);
    Ok(LatencyMs {
        p50: quantile(&all, 0.50),
        p99: quantile(&all, 0.99),
        max: *all.last().unwrap_or(&0.0),
        mean: all.iter().sum::<f64>() / all.len().max(1) as f64,
        send_lag_p99: quantile(&lags, 0.99),
        send_lag_max: *lags.last().unwrap_or(&0.0),
    })
}

/// Counters of the idle connections (one client thread: plain cells).
#[derive(Default)]
struct IdleCounts {
    connected: Cell<u64>,
    failed: Cell<u64>,
    closed: Cell<u64>,
    disconnected: Cell<u64>,
    heartbeats: Cell<u64>,
    first_error: RefCell<Option<String>>,
}

impl IdleCounts {
    fn fail(&self, why: String) {
        self.failed.set(self.failed.get() + 1);
        self.first_error.borrow_mut().get_or_insert(why);
    }
}

/// One idle connection: CONNECT with heart-beats, then only heart-beats both ways until
/// `stop`; then DISCONNECT with a receipt.
async fn idle_connection(
    addr: SocketAddr,
    dialect: Rc<Dialect>,
    heartbeat_ms: u64,
    gate: Rc<tokio::sync::Semaphore>,
    counts: Rc<IdleCounts>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let permit = gate.acquire().await.expect("never closed");
    let connected = stomp_load::connect_with(addr, &dialect, (heartbeat_ms, heartbeat_ms)).await;
    drop(permit);
    let (mut client, frame) = match connected {
        Ok(c) => c,
        Err(e) => return counts.fail(e),
    };
    counts.connected.set(counts.connected.get() + 1);
    // The client sends every max(what it offered, what the broker wants) ms.
    let wanted = frame
        .get("heart-beat")
        .and_then(|h| h.split(',').nth(1)?.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let every =
        (heartbeat_ms > 0 && wanted > 0).then(|| Duration::from_millis(heartbeat_ms.max(wanted)));
    let mut next_beat = tokio::time::Instant::now() + every.unwrap_or(Duration::from_secs(3600));
    loop {
        let (reader, writer) = client.halves();
        tokio::select! {
            f = reader.next() => {
                counts.closed.set(counts.closed.get() + u64::from(matches!(f, Err(ClientError::Closed | ClientError::Io(_)))));
                return counts.fail(match f {
                    Ok(f) => format!("an idle connection got {} {:?}", f.command.as_str(), f.headers),
                    Err(e) => format!("an idle connection ended: {e}"),
                });
            }
            _ = tokio::time::sleep_until(next_beat), if every.is_some() => {
                if let Err(e) = writer.send_raw(b"\n").await {
                    counts.closed.set(counts.closed.get() + 1);
                    return counts.fail(format!("a heart-beat could not be written: {e}"));
                }
                counts.heartbeats.set(counts.heartbeats.get() + 1);
                next_beat += every.expect("guarded");
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    match tokio::time::timeout(STALL, client.disconnect()).await {
        Ok(Ok(())) => counts.disconnected.set(counts.disconnected.get() + 1),
        Ok(Err(e)) => counts.fail(format!("DISCONNECT after the idle time: {e}")),
        Err(_) => counts.fail("no DISCONNECT receipt within 30 s".into()),
    }
}

/// What the idle client reports when its connections are up.
struct IdleUp {
    connect_time: Duration,
}

/// What the idle client reports at the end.
struct IdleDown {
    heartbeats: u64,
}

/// `idle`'s client: opens `n` connections, reports through `up` once all are
/// connected (or why not), keeps them until `stop`, then closes them.
async fn idle_client(
    addr: SocketAddr,
    dialect: Dialect,
    n: u64,
    heartbeat_ms: u64,
    up: tokio::sync::oneshot::Sender<Result<IdleUp, String>>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<IdleDown, String> {
    let counts = Rc::new(IdleCounts::default());
    let gate = Rc::new(tokio::sync::Semaphore::new(CONNECTING_AT_ONCE));
    let dialect = Rc::new(dialect);
    let started = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            tokio::task::spawn_local(idle_connection(
                addr,
                Rc::clone(&dialect),
                heartbeat_ms,
                Rc::clone(&gate),
                Rc::clone(&counts),
                stop.clone(),
            ))
        })
        .collect();
    let mut last = (0, Instant::now());
    let ready = loop {
        let (ok, bad) = (counts.connected.get(), counts.failed.get());
        if bad > 0 {
            break Err(format!(
                "{bad} of {n} connections failed ({ok} connected): the first: {}",
                counts.first_error.borrow().clone().unwrap_or_default()
            ));
        }
        if ok == n {
            break Ok(IdleUp {
                connect_time: started.elapsed(),
            });
        }
        if ok != last.0 {
            last = (ok, Instant::now());
        } else if last.1.elapsed() > STALL {
            break Err(format!("{ok} of {n} connected, then none for 30 s"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let ready_ok = ready.is_ok();
    let _ = up.send(ready);
    for task in tasks {
        let _ = task.await;
    }
    if !ready_ok {
        return Err("the connections did not all come up".into());
    }
    let (closed, down, bad) = (
        counts.closed.get(),
        counts.disconnected.get(),
        counts.failed.get(),
    );
    if bad > 0 || down != n {
        return Err(format!(
            "after the idle time {down} of {n} connections answered DISCONNECT, {closed} \
             had been closed by the broker, {bad} failed; the first: {}",
            counts.first_error.borrow().clone().unwrap_or_default()
        ));
    }
    Ok(IdleDown {
        heartbeats: counts.heartbeats.get(),
    })
}

// ---------------------------------------------------------------------------------
// The broker side.

/// Runs `workload`'s client against `addr` on a thread of its own.
async fn run_client(
    workload: Workload,
    addr: SocketAddr,
    dialect: Dialect,
    s: &Settings,
) -> Result<ClientReport, String> {
    let s = s.clone();
    let answer = match workload {
        Workload::SendBatch => {
            stomp_load::on_thread(move || send_client(addr, dialect, s.messages, s.batch))
        }
        Workload::SendLast => {
            stomp_load::on_thread(move || send_client(addr, dialect, s.messages, s.messages))
        }
        Workload::Fanout => stomp_load::on_thread(move || {
            fanout_client(addr, dialect, s.messages, s.batch, s.subscribers)
        }),
        Workload::Latency => {
            stomp_load::on_thread(move || latency_client(addr, dialect, s.latency_messages, s.rate))
        }
        Workload::Idle => unreachable!("idle runs through measure_idle"),
    };
    answer
        .await
        .map_err(|_| "the client thread died".to_string())?
}

fn queue_messages(workload: Workload, s: &Settings) -> u64 {
    match workload {
        Workload::Latency => s.latency_messages,
        _ => s.messages,
    }
}

/// Ebb's queue after a run: it must hold each of the `n` messages exactly once.
async fn check_ebb_queue(ebb: &EbbRun, n: u64) -> Result<(), String> {
    let tally = Tally::new(n);
    let (mut after, mut rows) = (0, 0u64);
    loop {
        let page = ebb
            .broker
            .browse(EBB_QUEUE_KEY, after, 1_000)
            .await
            .map_err(|e| format!("browsing {EBB_QUEUE_KEY}: {e}"))?;
        let Some(last) = page.last() else { break };
        after = last.store_id;
        for m in &page {
            tally.record(&m.body);
            rows += 1;
        }
    }
    tally.check().map_err(|e| {
        format!("after the run the store holds {rows} messages of {EBB_QUEUE_KEY}: {e}")
    })
}

/// RabbitMQ's queue after a run: drained, it must give each of the `n` messages
/// exactly once.
async fn check_rabbit_queue(addr: SocketAddr, dialect: &Dialect, n: u64) -> Result<(), String> {
    let tally = Tally::new(n);
    let drained = stomp_load::drain_with(addr, dialect, |f| {
        tally.record(&f.body);
    })
    .await?;
    tally
        .check()
        .map_err(|e| format!("after the run {RABBIT_QUEUE} held {drained} messages: {e}"))
}

async fn describe_ebb(ebb: &EbbRun, workload: Workload) -> String {
    if workload == Workload::Fanout {
        match ebb.broker.topic_stats(EBB_TOPIC_KEY).await {
            Ok(stats) => format!("topic stats: {stats:?}"),
            Err(e) => format!("topic stats unavailable: {e}"),
        }
    } else {
        match ebb.broker.queue_stats(EBB_QUEUE_KEY).await {
            Ok(stats) => format!("queue stats: {stats:?}"),
            Err(e) => format!("queue stats unavailable: {e}"),
        }
    }
}

/// An Ebb row of workloads 1–3: the broker in process on a fresh store, its listener.
async fn measure_ebb(
    workload: Workload,
    store: &Store,
    s: &Settings,
    run: usize,
) -> Result<Measured, String> {
    let ebb = ebb_run::start(store, &s.dir, "wire", run).await;
    let measured = measure_ebb_on(&ebb, workload, store, s).await;
    ebb.finish().await;
    measured
}

async fn measure_ebb_on(
    ebb: &EbbRun,
    workload: Workload,
    store: &Store,
    s: &Settings,
) -> Result<Measured, String> {
    let listener = ebb.listen().await?;
    let dialect = Peer::Ebb(store.clone()).dialect(workload);
    let before = ebb.store_stats();
    let cpu_before = stomp_load::cpu_s("/proc/self/stat");
    let report = run_client(workload, listener.addr, dialect, s).await;
    let cpu_s = stomp_load::cpu_s("/proc/self/stat") - cpu_before;
    let after = ebb.store_stats();
    listener.stop().await;
    let report = match report {
        Ok(report) => report,
        Err(e) => return Err(format!("{e}; {}", describe_ebb(ebb, workload).await)),
    };
    if workload.fills_queue() {
        check_ebb_queue(ebb, queue_messages(workload, s)).await?;
    }
    Ok(Measured {
        seconds: report.elapsed.as_secs_f64(),
        broker_cpu_s: Some(cpu_s - report.cpu_s),
        client_cpu_s: Some(report.cpu_s),
        commits: Some((
            after.write_transactions - before.write_transactions,
            after.write_ops - before.write_ops,
        )),
        latency: report.latency,
        idle: None,
    })
}

/// A RabbitMQ row of workloads 1–3.
async fn measure_rabbit(workload: Workload, s: &Settings) -> Result<Measured, String> {
    let dialect = Peer::Rabbit.dialect(workload);
    if workload.fills_queue() {
        let drained = stomp_load::drain(s.rabbit, &dialect).await?;
        if drained > 0 {
            eprintln!("  (removed {drained} messages an earlier run left in {RABBIT_QUEUE})");
        }
    }
    let stat = procfs::rabbitmq_stat();
    let cpu_before = stat.as_deref().map(stomp_load::cpu_s);
    let report = run_client(workload, s.rabbit, dialect.clone(), s).await?;
    let cpu_s = stat.as_deref().map(stomp_load::cpu_s);
    if workload.fills_queue() {
        check_rabbit_queue(s.rabbit, &dialect, queue_messages(workload, s)).await?;
    }
    Ok(Measured {
        seconds: report.elapsed.as_secs_f64(),
        broker_cpu_s: cpu_s.zip(cpu_before).map(|(a, b)| a - b),
        client_cpu_s: Some(report.cpu_s),
        commits: None,
        latency: report.latency,
        idle: None,
    })
}

/// `ebb serve` as a child process on a temporary SQLite store and a free loopback
/// port; killed if dropped while it runs.
struct ServeChild {
    child: std::process::Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl ServeChild {
    /// Starts `bin serve` and waits (≤ 30 s) until it answers a STOMP CONNECT.
    async fn start(bin: &Path, dir: &Path, run: usize) -> Result<Self, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let store = dir.join(format!("serve-{run}.db"));
        let log = dir.join(format!("serve-{run}.log"));
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        // The idle row opens 10,000 connections from one address: above the default
        // per-address limit.
        let config = dir.join(format!("serve-{run}.toml"));
        std::fs::write(
            &config,
            "[stomp]\nmax_connections = 1000000\nmax_connections_per_address = 1000000\n",
        )
        .map_err(|e| e.to_string())?;
        let child = std::process::Command::new(bin)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--stomp")
            .arg(addr.to_string())
            .arg("--store")
            .arg(format!("sqlite://{}", store.display()))
            .current_dir(dir)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut serve = ServeChild { child, addr, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = serve.child.try_wait() {
                return Err(format!("ebb serve exited ({status}): {}", serve.log_tail()));
            }
            match stomp_load::connect(addr, &Dialect::ebb(EBB_QUEUE)).await {
                Ok(client) => {
                    client.disconnect().await.map_err(failed)?;
                    return Ok(serve);
                }
                Err(e) if Instant::now() > deadline => {
                    return Err(format!(
                        "ebb serve did not answer on {addr} within 30 s ({e}): {}",
                        serve.log_tail()
                    ))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of what the child wrote.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" / ")
    }

    /// SIGTERM (the graceful shutdown), then waits ≤ 30 s; kills it after that.
    async fn stop(mut self) -> Result<(), String> {
        // SAFETY: kill only sends a signal, to the child this struct started.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Err("ebb serve did not stop within 30 s of SIGTERM: killed".into())
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `idle` against the broker process `pid` listening on `addr`.
async fn measure_idle(
    pid: u32,
    addr: SocketAddr,
    dialect: Dialect,
    s: &Settings,
) -> Result<Measured, String> {
    let stat = format!("/proc/{pid}/stat");
    let rss = || procfs::rss_bytes(pid).ok_or_else(|| format!("cannot read /proc/{pid}/status"));
    let rss_before = rss()?;
    let (up_tx, up_rx) = tokio::sync::oneshot::channel();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let (n, hb) = (s.connections, s.heartbeat_ms);
    let client = stomp_load::on_thread(move || idle_client(addr, dialect, n, hb, up_tx, stop_rx));
    let up = match up_rx.await {
        Ok(Ok(up)) => up,
        Ok(Err(e)) => {
            let _ = stop.send(true);
            let _ = client.await;
            return Err(e);
        }
        Err(_) => return Err("the client thread died".into()),
    };
    tokio::time::sleep(SETTLE).await;
    let rss_connected = rss()?;
    let cpu_before = stomp_load::cpu_s(&stat);
    let idle_started = Instant::now();
    tokio::time::sleep(s.idle).await;
    let idle_cpu_s = stomp_load::cpu_s(&stat) - cpu_before;
    let idle_seconds = idle_started.elapsed().as_secs_f64();
    let rss_end = rss()?;
    let _ = stop.send(true);
    let down = client
        .await
        .map_err(|_| "the client thread died".to_string())??;
    let figures = IdleFigures {
        connections: n,
        connect_seconds: up.connect_time.as_secs_f64(),
        rss_before,
        rss_connected,
        rss_end,
        kib_per_connection: (rss_connected as f64 - rss_before as f64) / n as f64 / 1024.0,
        idle_cpu_s,
        idle_seconds,
        heartbeats_sent: down.heartbeats,
    };
    Ok(Measured {
        seconds: idle_seconds,
        broker_cpu_s: Some(idle_cpu_s),
        client_cpu_s: None,
        commits: None,
        latency: None,
        idle: Some(figures),
    })
}

async fn measure_idle_ebb(s: &Settings, run: usize) -> Result<Measured, String> {
    let bin = s.ebb_bin.as_deref().expect("checked before the rows");
    let serve = ServeChild::start(bin, &s.dir, run).await?;
    let limit = procfs::open_files_limit(serve.pid()).unwrap_or(0);
    if limit < s.connections + 100 {
        let _ = serve.stop().await;
        return Err(format!(
            "ebb serve may open {limit} files, too few for {} connections",
            s.connections
        ));
    }
    let (pid, addr) = (serve.pid(), serve.addr);
    let measured = measure_idle(pid, addr, Dialect::ebb(EBB_QUEUE), s).await;
    let stopped = serve.stop().await;
    let measured = measured?;
    stopped?;
    Ok(measured)
}

async fn measure_idle_rabbit(s: &Settings) -> Result<Measured, String> {
    let pid = procfs::rabbitmq_pid().ok_or("the RabbitMQ node's process is gone")?;
    measure_idle(pid, s.rabbit, Dialect::rabbitmq(RABBIT_QUEUE), s).await
}

async fn measure(
    workload: Workload,
    peer: &Peer,
    s: &Settings,
    run: usize,
) -> Result<Measured, String> {
    match (workload, peer) {
        (Workload::Idle, Peer::Ebb(_)) => measure_idle_ebb(s, run).await,
        (Workload::Idle, Peer::Rabbit) => measure_idle_rabbit(s).await,
        (_, Peer::Ebb(store)) => measure_ebb(workload, store, s, run).await,
        (_, Peer::Rabbit) => measure_rabbit(workload, s).await,
    }
}

// ---------------------------------------------------------------------------------
// The rows, the table.

/// Why the `idle` rows cannot run on this machine, if they cannot (for both brokers:
/// the client's side).
fn idle_unavailable(s: &Settings, open_files: u64) -> Option<String> {
    let n = s.connections;
    if open_files < n + 100 {
        return Some(format!(
            "this process may open {open_files} files and could not raise the limit to \
             {}: too few for {n} connections",
            n + 100
        ));
    }
    match procfs::ephemeral_ports() {
        Some(ports) if ports < n + 100 => Some(format!(
            "{ports} ephemeral ports (net.ipv4.ip_local_port_range): too few for {n} \
             connections from one address"
        )),
        _ => None,
    }
}

/// Why RabbitMQ's `idle` row cannot run, if it cannot.
fn rabbit_idle_unavailable(s: &Settings) -> Option<String> {
    let Some(pid) = procfs::rabbitmq_pid() else {
        return Some(
            "no RabbitMQ node (beam.smp) runs on this machine to read its memory and CPU from"
                .into(),
        );
    };
    let limit = procfs::open_files_limit(pid)?;
    let sockets = (limit.saturating_sub(100) as f64 * 0.9) as u64;
    (sockets < s.connections + 10).then(|| {
        format!(
            "the RabbitMQ node may open {limit} files (about {sockets} sockets): too few for \
             {} connections (raise its limit, `ulimit -n` where the service starts, and \
             restart it; or set EBB_BENCH_WIRE_CONNECTIONS below {})",
            s.connections,
            sockets.saturating_sub(10)
        )
    })
}

/// Milliseconds with the digits that matter: `0.61 ms`, `12.3 ms`, `2,820 ms`.
fn fmt_ms(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.2} ms")
    } else if x < 100.0 {
        format!("{x:.1} ms")
    } else {
        format!("{} ms", thousands(x))
    }
}

fn fmt_figure(unit: &str, x: f64) -> String {
    match unit {
        "ms (p99)" => fmt_ms(x),
        "KiB per connection" => format!("{x:.1} KiB"),
        _ => thousands(x),
    }
}

fn result_text(r: &Row) -> String {
    match r.workload {
        "send-batch" | "send-last" => format!(
            "{} msg/s, {:.2} MiB/s",
            thousands(r.msgs_per_s.unwrap_or(0.0)),
            r.mib_per_s.unwrap_or(0.0)
        ),
        "fanout" => format!(
            "{} deliveries/s ({} msg/s in)",
            thousands(r.deliveries_per_s.unwrap_or(0.0)),
            thousands(r.msgs_per_s.unwrap_or(0.0))
        ),
        "latency" => match r.latency_ms {
            Some(l) => format!(
                "p50 {}, p99 {}, max {} (send lag p99 {})",
                fmt_ms(l.p50),
                fmt_ms(l.p99),
                fmt_ms(l.max),
                fmt_ms(l.send_lag_p99)
            ),
            None => "—".into(),
        },
        "idle" => match r.idle {
            Some(i) => format!(
                "{:.1} KiB per connection (RSS {:.1} → {:.1} MiB); idle CPU {:.2} s in {:.0} s",
                i.kib_per_connection,
                i.rss_before as f64 / (1 << 20) as f64,
                i.rss_connected as f64 / (1 << 20) as f64,
                i.idle_cpu_s,
                i.idle_seconds
            ),
            None => "—".into(),
        },
        _ => "—".into(),
    }
}

fn print_table(rows: &[Row], s: &Settings) {
    println!("| workload | broker | store | result (median round) | Ebb/RabbitMQ | rounds min–max | seconds | CPU broker / client (cores) | store commits/s (writes per commit) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let workload = Workload::ALL
            .into_iter()
            .find(|w| w.label() == r.workload)
            .expect("a known workload");
        let ratio = r
            .ratio_to_rabbitmq
            .map_or("—".to_string(), |x| format!("{x:.2}"));
        let spread = match (r.rounds.first(), r.rounds.last()) {
            (Some(lo), Some(hi)) if r.rounds.len() > 1 => {
                format!("{}–{}", fmt_figure(r.unit, *lo), fmt_figure(r.unit, *hi))
            }
            _ => "—".into(),
        };
        let cpu = match (r.broker_cpu_cores, r.client_cpu_cores) {
            (Some(b), Some(c)) => format!("{b:.2} / {c:.2}"),
            (Some(b), None) => format!("{b:.3} / —"),
            (None, Some(c)) => format!("— / {c:.2}"),
            (None, None) => "—".into(),
        };
        let commits = match (r.store_commits_per_s, r.writes_per_commit) {
            (Some(c), Some(w)) => format!("{} ({w:.1})", thousands(c)),
            (Some(c), None) => format!("{} (—)", thousands(c)),
            _ if r.broker == "Ebb" && r.workload == "idle" => "— (child process)".into(),
            _ => "—".into(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.1} | {} | {} |",
            workload.title(s),
            r.broker,
            r.store,
            result_text(r),
            ratio,
            spread,
            r.seconds,
            cpu,
            commits,
        );
    }
    println!();
    println!(
        "Ebb/RabbitMQ: send and fan-out rows: Ebb's rate over RabbitMQ's (above 1: Ebb is \
         faster); latency: Ebb's p99 over RabbitMQ's (above 1: Ebb is slower); idle: Ebb's \
         memory per connection over RabbitMQ's (above 1: Ebb uses more)."
    );
}

/// Runs every wanted row `rounds` times, the rows in turn within a round; answers
/// each row's median round, the runs that failed and the rows skipped.
async fn bench(s: Settings, open_files: u64) -> (Vec<Row>, Vec<String>, Vec<String>) {
    let mut skipped = Vec::new();
    let mut skip = |line: String| {
        println!("{line}");
        skipped.push(line);
    };
    let stores = ebb_run::stores(s.postgres.as_deref()).await;
    let rabbit = match stomp_load::connect(s.rabbit, &Dialect::rabbitmq(RABBIT_QUEUE)).await {
        Ok(conn) => conn.disconnect().await.is_ok(),
        Err(e) => {
            skip(format!(
                "RabbitMQ's STOMP at {} cannot be reached ({e}): its rows are skipped \
                 (benches/peers/rabbitmq-stomp.sh enables it)",
                s.rabbit
            ));
            false
        }
    };
    let wants = |w: Workload, p: &Peer| common::report::wanted(&s.only, &p.label(w));
    let mut specs: Vec<(Workload, Peer)> = Vec::new();
    for w in Workload::ALL {
        let mut peers = Vec::new();
        if rabbit {
            peers.push(Peer::Rabbit);
        }
        match w {
            // Non-persistent and idle: the store does not matter; SQLite only.
            Workload::Fanout | Workload::Idle => peers.push(Peer::Ebb(Store::Sqlite)),
            _ => peers.extend(stores.iter().cloned().map(Peer::Ebb)),
        }
        peers.retain(|p| wants(w, p));
        if w == Workload::Idle && !peers.is_empty() {
            if let Some(why) = idle_unavailable(&s, open_files) {
                skip(format!("the idle rows are skipped: {why}"));
                peers.clear();
            }
            if peers.iter().any(|p| matches!(p, Peer::Ebb(_))) && s.ebb_bin.is_none() {
                skip(
                    "the idle Ebb row is skipped: no ebb binary (build it with `cargo build \
                     --release` or set EBB_BENCH_EBB_BIN)"
                        .into(),
                );
                peers.retain(|p| !matches!(p, Peer::Ebb(_)));
            }
            if peers.iter().any(|p| matches!(p, Peer::Rabbit)) {
                if let Some(why) = rabbit_idle_unavailable(&s) {
                    skip(format!("the idle RabbitMQ row is skipped: {why}"));
                    peers.retain(|p| !matches!(p, Peer::Rabbit));
                }
            }
        }
        specs.extend(peers.into_iter().map(|p| (w, p)));
    }
    let mut runs: Vec<Vec<Row>> = vec![Vec::new(); specs.len()];
    let mut failures = Vec::new();
    let mut run = 0;
    for round in 1..=s.rounds {
        for (i, (workload, peer)) in specs.iter().enumerate() {
            let label = peer.label(*workload);
            run += 1;
            eprintln!("running: {label} (round {round} of {})", s.rounds);
            match measure(*workload, peer, &s, run).await {
                Ok(m) => runs[i].push(row(*workload, peer, &s, &m)),
                Err(e) => {
                    let failure = format!("{label}, round {round}: {e}");
                    eprintln!("FAILED: {failure}");
                    failures.push(failure);
                }
            }
        }
    }
    let mut rows: Vec<Row> =
        report::median_rounds(runs, |r: &Row| r.figure, |r, rounds| r.rounds = rounds);
    let reference: Vec<(&'static str, f64)> = rows
        .iter()
        .filter(|r| r.broker == "RabbitMQ")
        .map(|r| (r.workload, r.figure))
        .collect();
    for r in rows.iter_mut().filter(|r| r.broker == "Ebb") {
        r.ratio_to_rabbitmq = reference
            .iter()
            .find(|(w, _)| *w == r.workload)
            .filter(|(_, x)| *x > 0.0)
            .map(|(_, rabbit)| r.figure / rabbit);
    }
    (rows, failures, skipped)
}

/// The `ebb` binary: `EBB_BENCH_EBB_BIN`, else the one cargo built with this bench,
/// else `target/release/ebb`.
fn ebb_bin() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("EBB_BENCH_EBB_BIN") {
        return Some(PathBuf::from(path));
    }
    let built = option_env!("CARGO_BIN_EXE_ebb").map(PathBuf::from);
    let release = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/ebb");
    built.into_iter().chain([release]).find(|p| p.is_file())
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` / `cargo bench -- --list`: nothing to list.
    }
    let dir = std::env::temp_dir().join(format!("ebb-bench-wire-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let settings = Settings {
        messages: env("EBB_BENCH_WIRE_MESSAGES", 20_000u64).max(1),
        batch: env("EBB_BENCH_WIRE_BATCH", 100u64).max(1),
        subscribers: env("EBB_BENCH_WIRE_SUBSCRIBERS", 10usize).max(1),
        latency_messages: env("EBB_BENCH_WIRE_LATENCY_MESSAGES", 5_000u64).max(1),
        rate: env("EBB_BENCH_WIRE_RATE", 1_000u64).max(1),
        connections: env("EBB_BENCH_WIRE_CONNECTIONS", 10_000u64).max(1),
        idle: Duration::from_secs_f64(env("EBB_BENCH_WIRE_IDLE_SECONDS", 10f64).max(0.1)),
        heartbeat_ms: env("EBB_BENCH_WIRE_HEARTBEAT_MS", 10_000u64),
        rounds: env("EBB_BENCH_WIRE_ROUNDS", 3usize).max(1),
        postgres: std::env::var("EBB_BENCH_POSTGRES_URL").ok(),
        rabbit: env(
            "EBB_BENCH_RABBITMQ_STOMP",
            SocketAddr::from(([127, 0, 0, 1], 61623)),
        ),
        ebb_bin: ebb_bin(),
        dir: dir.clone(),
        only: common::report::only("EBB_BENCH_WIRE_ONLY"),
    };
    // The idle client's sockets, and the `ebb serve` child's (it inherits the limit).
    let open_files = procfs::raise_open_files(settings.connections + 1_024);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "wire: {BODY_BYTES}-byte bodies; send and fan-out {} messages per run (receipt \
         every {}), fan-out to {} subscribers; latency {} messages at {} msg/s; idle {} \
         connections for {} s (heart-beat {} ms); median of {} rounds; {cores} cores; \
         open files {open_files}",
        settings.messages,
        settings.batch,
        settings.subscribers,
        settings.latency_messages,
        settings.rate,
        settings.connections,
        settings.idle.as_secs_f64(),
        settings.heartbeat_ms,
        settings.rounds,
    );
    let (rows, failures, skipped) =
        actix_rt::System::new().block_on(bench(settings.clone(), open_files));
    println!();
    print_table(&rows, &settings);
    let json = serde_json::json!({
        "bench": "wire",
        "body_bytes": BODY_BYTES,
        "messages": settings.messages,
        "batch": settings.batch,
        "subscribers": settings.subscribers,
        "latency_messages": settings.latency_messages,
        "rate": settings.rate,
        "connections": settings.connections,
        "idle_seconds": settings.idle.as_secs_f64(),
        "heartbeat_ms": settings.heartbeat_ms,
        "rounds": settings.rounds,
        "cores": cores,
        "rows": rows,
        "skipped": skipped,
        "failed": failures,
    });
    println!("{json}");
    let _ = std::fs::remove_dir_all(&dir);
    // A lost or duplicated message, a stall, a lost connection: the bench fails.
    assert!(
        failures.is_empty(),
        "{} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
