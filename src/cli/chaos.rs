//! `ebb chaos`: a mixed STOMP workload against an `ebb serve` it runs itself, with
//! faults injected on a schedule, then a reconciliation of every message.
//!
//! The workload, all over STOMP on `127.0.0.1`:
//! - producers: receipted persistent SENDs to a queue and to a topic (one in five with
//!   a 300 ms TTL; one queue message in forty is "poison" and goes to a queue of its
//!   own), transactions of three SENDs committed with a receipt, and SENDs without a
//!   receipt;
//! - consume-transform-produce: a producer of receipted messages to an input queue,
//!   and a consumer of it that, for each message, sends one output message to an
//!   output queue and acks the input in one transaction, committed with a receipt;
//!   a reader of the output queue;
//! - consumers of the queue in each ack mode: `client-individual`, `client`
//!   (cumulative acks every ten messages) and `auto`; one of the poison queue that NACKs
//!   every delivery, so each poison message must reach its dead-letter queue after
//!   `maximum_redeliveries` (2), and one of that dead-letter queue; a durable
//!   subscription on the topic that goes offline every other cycle;
//! - clients that vanish mid-frame (a SEND cut before its NUL or its `content-length`);
//! - a probe that sends one receipted message every 50 ms, to measure how long each
//!   fault leaves the broker unable to take a message.
//!
//! One fault per cycle, in turn: the broker SIGKILLed and restarted at once (`kill`); a
//! consumer that promises heart-beats and then sends nothing, which the broker must
//! close (`stalled-consumer`); and on PostgreSQL, every database connection cut for
//! 1.5 s by a TCP proxy in front of the server (`db-cut`), and every connection of the
//! broker ended by the server itself, as a PostgreSQL restart ends them
//! (`db-terminate`, `pg_terminate_backend`); with `--restart-postgres COMMAND`, also
//! the database server restarted by that command (`db-restart`).
//!
//! At the end the producers stop, every consumer drains until the broker is quiet
//! (the durable subscription included, then the dead-letter queue), the broker stops
//! gracefully, and the ledger is reconciled. A failure is any of: a receipted message
//! without TTL never delivered (**lost**); a delivery after its ack's RECEIPT (an acked
//! message came back); a message both acked and dead-lettered; a poison message that
//! never reached the dead-letter queue; a delivery of a frame
//! a client never finished; a transaction delivered in part; a delivery nobody sent; a
//! stalled consumer the broker did not close; a graceful stop that failed. Deliveries
//! after a NACK, a crash or a broken connection are allowed and counted (STOMP is
//! at-least-once), as are TTL messages never delivered (expired). For the transform:
//! an input message delivered again after its COMMIT's RECEIPT (acked, came back), a
//! receipted input never transformed by a receipted COMMIT, a receipted output never
//! delivered (lost), and an input whose output was produced by two different
//! transactions (a COMMIT that stored its send but not its ack) are failures.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::stomp::client::{describe, ClientError, StompClient};
use crate::stomp::frame::{Command, Frame};
use crate::{now_ms, DatabaseProxy};

/// The `ebb chaos` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ChaosOptions {
    /// Store URL [default: a fresh SQLite file in a temporary folder]; a sqlite://
    /// file must not exist yet (the run fills it); a postgres:// store gets a schema
    /// of its own, dropped at the end, and is reached through a TCP proxy so its
    /// connections can be cut. `sqlite::memory:` is refused: the broker is killed.
    #[arg(long)]
    pub store: Option<String>,
    /// Faults to inject, one per cycle (at least 1).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub cycles: u32,
    /// Workload between two faults, ms (at least 100).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(100..))]
    pub cycle_ms: u64,
    /// Messages per second of each producer (1 to 10,000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub rate: u32,
    /// Print one JSON object with the tally as the last line.
    #[arg(long)]
    pub json: bool,
    /// The `ebb` binary to run as the broker [default: this one].
    #[arg(long)]
    pub ebb: Option<PathBuf>,
    /// PostgreSQL only: a shell command that restarts the database server (e.g.
    /// `pg_ctlcluster 15 main restart`), injected as the fault `db-restart` in turn
    /// with the others. Off by default: it ends every other client of that server too.
    #[arg(long, value_name = "COMMAND")]
    pub restart_postgres: Option<String>,
    /// Only these faults, in turn (comma-separated: `kill`, `stalled-consumer`, and on
    /// PostgreSQL `db-cut`, `db-terminate`, `db-restart` with `--restart-postgres`)
    /// [default: every fault the store allows].
    #[arg(long, value_delimiter = ',')]
    pub faults: Vec<String>,
}

const QUEUE: &str = "/queue/chaos.work";
/// Where the queue producer sends its poison messages: their only consumer NACKs each
/// delivery, so every one must reach [`DLQ`] after `maximum_redeliveries` (2).
const POISON: &str = "/queue/chaos.poison";
const DLQ: &str = "/queue/DLQ.chaos.poison";
const TOPIC: &str = "/topic/chaos.events";
const PROBE: &str = "/queue/chaos.probe";
/// The transform's input and output queues.
const XFORM_IN: &str = "/queue/chaos.xform.in";
const XFORM_OUT: &str = "/queue/chaos.xform.out";
const DURABLE_CLIENT: &str = "chaos-durable";
const DURABLE_NAME: &str = "chaos";
/// TTL of one message in five, ms.
const TTL_MS: u64 = 300;
/// How long a client waits for a RECEIPT before it gives the connection up.
const RECEIPT_WAIT: Duration = Duration::from_secs(10);
/// How long a final drain waits for a message it should still get before it counts
/// it lost.
const GIVE_UP_QUIET: Duration = Duration::from_secs(15);
/// How long a producer waits after an ERROR or a broken connection before it connects
/// again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// One queue message in this many is poison (sent to [`POISON`]).
const POISON_EVERY: u64 = 40;

/// What the ledger knows of one message, by its `chaos-id`.
#[derive(Debug, Default)]
struct Record {
    topic: bool,
    /// Its SEND (or its transaction's COMMIT) got a RECEIPT.
    receipted: bool,
    /// Its SEND got an ERROR: the broker refused it.
    refused: bool,
    /// Epoch ms; 0 = never.
    expires_ms: u64,
    tx: Option<u64>,
    /// A frame the client never finished.
    partial: bool,
    /// Sent to [`POISON`]: it must end in the dead-letter queue.
    poison: bool,
    /// From the queue, or from the durable subscription for a topic message.
    deliveries: u32,
    dlq_deliveries: u32,
    /// Its ACK got a RECEIPT.
    acked: bool,
    /// Deliveries after `acked`.
    came_back: u32,
    /// Sent to [`XFORM_IN`]: a transform must consume it with a receipted COMMIT.
    xform_in: bool,
    /// Sent to [`XFORM_OUT`] by a transform's transaction (id: the input's and `>`).
    xform_out: bool,
    /// For an output: the transactions (`chaos-attempt`) whose copy was delivered.
    attempts_delivered: std::collections::BTreeSet<String>,
}

/// A fault injected, with how long the probe could not get a message in.
#[derive(Debug, Clone, serde::Serialize)]
struct FaultRecord {
    kind: &'static str,
    /// The longest time without a probe receipt from the fault's start until the
    /// first probe sent after its end got one, ms; `None` when none came within 60 s.
    unavailable_ms: Option<u64>,
    /// `stalled-consumer` only: the broker closed the silent connection.
    closed_by_broker: Option<bool>,
}

#[derive(Default)]
struct Ledger {
    records: HashMap<String, Record>,
    /// Deliveries whose `chaos-id` nobody sent (or that had none).
    unknown: u64,
    last_delivery: Option<Instant>,
    /// (sent at, receipted at) of each successful probe.
    probes: Vec<(Instant, Instant)>,
    /// ERROR frames clients got, by `message`.
    errors: BTreeMap<String, u64>,
    transactions_committed: u64,
    /// Transform transactions committed with a receipt.
    transforms_committed: u64,
}

impl Ledger {
    fn delivered(&mut self, id: Option<&str>, dlq: bool) {
        self.last_delivery = Some(Instant::now());
        let Some(record) = id.and_then(|id| self.records.get_mut(id)) else {
            self.unknown += 1;
            return;
        };
        if dlq {
            record.dlq_deliveries += 1;
        } else {
            if record.acked {
                record.came_back += 1;
            }
            record.deliveries += 1;
        }
    }

    /// Receipted messages without TTL that the final reader of `destination` should
    /// still get: a drain does not end while there are any (until it gives up).
    fn outstanding(&self, destination: &str) -> usize {
        let waiting = |m: &Record| m.receipted && !m.partial && m.expires_ms == 0;
        let xform = |m: &Record| m.xform_in || m.xform_out;
        self.records
            .iter()
            .filter(|(id, m)| match destination {
                QUEUE => waiting(m) && !m.topic && !m.poison && !xform(m) && m.deliveries == 0,
                XFORM_IN => waiting(m) && m.xform_in && !self.transformed(id, m),
                XFORM_OUT => waiting(m) && m.xform_out && m.deliveries == 0,
                TOPIC => waiting(m) && m.topic && m.deliveries == 0,
                DLQ => waiting(m) && m.poison && m.dlq_deliveries == 0,
                _ => false,
            })
            .count()
    }

    /// Whether transform input `id` was consumed by a committed transaction: its
    /// COMMIT was receipted, or (a fault ate the receipt) its output was delivered.
    fn transformed(&self, id: &str, input: &Record) -> bool {
        input.acked
            || self
                .records
                .get(&format!("{id}>"))
                .is_some_and(|output| output.deliveries > 0)
    }

    fn error(&mut self, text: String) {
        *self.errors.entry(text).or_default() += 1;
    }
}

/// What every task shares.
#[derive(Clone)]
struct Ctx {
    addr: String,
    ledger: Arc<Mutex<Ledger>>,
    /// Producers, the probe and the vanishing clients stop when set.
    stop: Arc<AtomicBool>,
}

impl Ctx {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// A logged-in connection, retried every 50 ms while the broker is down; `None`
    /// once `give_up` says so.
    async fn connect(
        &self,
        client_id: Option<&str>,
        give_up: impl Fn() -> bool,
    ) -> Option<StompClient> {
        loop {
            if give_up() {
                return None;
            }
            match StompClient::connect(self.addr.as_str(), client_id, None).await {
                Ok(client) => return Some(client),
                Err(ClientError::Refused { answer, .. }) => self.ledger.lock().error(answer),
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Waits for RECEIPT `id` within [`RECEIPT_WAIT`]: `Ok(true)` when it came, `Ok(false)`
/// for an ERROR (recorded), `Err` when the connection ended or nothing came.
async fn await_receipt(ctx: &Ctx, client: &mut StompClient, id: &str) -> Result<bool, ()> {
    match tokio::time::timeout(RECEIPT_WAIT, client.receipt(id, |_| {})).await {
        Ok(Ok(())) => Ok(true),
        Ok(Err(ClientError::ErrorFrame(text))) => {
            ctx.ledger.lock().error(text);
            Ok(false)
        }
        _ => Err(()),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum ProducerKind {
    Queue,
    Topic,
    Transactions,
    Unreceipted,
    /// Receipted SENDs to [`XFORM_IN`].
    TransformInput,
}

async fn producer(ctx: Ctx, kind: ProducerKind, rate: u32) {
    let pause = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let prefix = match kind {
        ProducerKind::Queue => "q",
        ProducerKind::Topic => "t",
        ProducerKind::Transactions => "x",
        ProducerKind::Unreceipted => "u",
        ProducerKind::TransformInput => "i",
    };
    let mut n = 0u64;
    'connection: while let Some(mut client) = ctx.connect(None, || ctx.stopped()).await {
        while !ctx.stopped() {
            n += 1;
            let ok = match kind {
                ProducerKind::Transactions => transaction(&ctx, &mut client, n).await,
                _ => send_one(&ctx, &mut client, kind, &format!("{prefix}{n}"), n).await,
            };
            if !ok {
                // A client backs off before it connects again.
                tokio::time::sleep(RETRY_PAUSE).await;
                continue 'connection;
            }
            tokio::time::sleep(pause).await;
        }
        let _ = tokio::time::timeout(RECEIPT_WAIT, client.disconnect()).await;
        return;
    }
}

/// One SEND (with a receipt unless `Unreceipted`); false when the connection must be
/// given up.
async fn send_one(
    ctx: &Ctx,
    client: &mut StompClient,
    kind: ProducerKind,
    id: &str,
    n: u64,
) -> bool {
    let topic = kind == ProducerKind::Topic;
    let expires_ms = if n.is_multiple_of(5) {
        now_ms() as u64 + TTL_MS
    } else {
        0
    };
    let xform_in = kind == ProducerKind::TransformInput;
    let expires_ms = if xform_in { 0 } else { expires_ms };
    let poison = kind == ProducerKind::Queue && n % POISON_EVERY == 1;
    ctx.ledger.lock().records.insert(
        id.to_string(),
        Record {
            topic,
            expires_ms,
            poison,
            xform_in,
            ..Record::default()
        },
    );
    let destination = match (topic, poison) {
        _ if xform_in => XFORM_IN,
        (true, _) => TOPIC,
        (false, true) => POISON,
        (false, false) => QUEUE,
    };
    let mut frame = Frame::new(Command::Send)
        .header("destination", destination)
        .header("persistent", "true")
        .header("chaos-id", id)
        .body(format!("chaos message {id}"));
    if expires_ms > 0 {
        frame = frame.header("expires", expires_ms.to_string());
    }
    if kind == ProducerKind::Unreceipted {
        return client.send(frame).await.is_ok();
    }
    if client.send(frame.header("receipt", id)).await.is_err() {
        return false;
    }
    match await_receipt(ctx, client, id).await {
        Ok(receipted) => {
            let mut ledger = ctx.ledger.lock();
            let record = ledger.records.get_mut(id).expect("recorded above");
            record.receipted = receipted;
            record.refused = !receipted;
            receipted
        }
        Err(()) => false,
    }
}

/// BEGIN, three SENDs, COMMIT with a receipt.
async fn transaction(ctx: &Ctx, client: &mut StompClient, n: u64) -> bool {
    let tx = format!("tx{n}");
    let ids: Vec<String> = (0..3).map(|k| format!("x{n}.{k}")).collect();
    {
        let mut ledger = ctx.ledger.lock();
        for id in &ids {
            let record = Record {
                tx: Some(n),
                ..Record::default()
            };
            ledger.records.insert(id.clone(), record);
        }
    }
    let mut frames = vec![Frame::new(Command::Begin).header("transaction", tx.as_str())];
    for id in &ids {
        frames.push(
            Frame::new(Command::Send)
                .header("destination", QUEUE)
                .header("persistent", "true")
                .header("transaction", tx.as_str())
                .header("chaos-id", id.as_str())
                .body(format!("chaos message {id}")),
        );
    }
    frames.push(
        Frame::new(Command::Commit)
            .header("transaction", tx.as_str())
            .header("receipt", tx.as_str()),
    );
    for frame in frames {
        if client.feed(frame).await.is_err() {
            return false;
        }
    }
    if client.flush().await.is_err() {
        return false;
    }
    match await_receipt(ctx, client, &tx).await {
        Ok(committed) => {
            let mut ledger = ctx.ledger.lock();
            for id in &ids {
                let record = ledger.records.get_mut(id).expect("recorded above");
                record.receipted = committed;
                record.refused = !committed;
            }
            ledger.transactions_committed += u64::from(committed);
            committed
        }
        Err(()) => false,
    }
}

/// Clients that connect, write part of a SEND and go.
async fn vanishing_clients(ctx: Ctx) {
    let mut n = 0u64;
    while !ctx.stopped() {
        tokio::time::sleep(Duration::from_millis(250)).await;
        n += 1;
        let id = format!("p{n}");
        ctx.ledger.lock().records.insert(
            id.clone(),
            Record {
                partial: true,
                ..Record::default()
            },
        );
        let Ok(mut client) = StompClient::open(ctx.addr.as_str()).await else {
            continue;
        };
        let head = format!("SEND\ndestination:{QUEUE}\npersistent:true\nchaos-id:{id}\n");
        // Cut inside a body its content-length promises, or before the NUL of one without.
        let cut = if n.is_multiple_of(2) {
            format!("{head}content-length:64\n\nonly part of")
        } else {
            format!("{head}\nno end")
        };
        let bytes = format!("CONNECT\naccept-version:1.2\nhost:ebb\n\n\0{cut}");
        let _ = client.send_raw(bytes.as_bytes()).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(client);
    }
}

/// One receipted SEND every 50 ms, to a queue nobody reads.
async fn probe(ctx: Ctx) {
    let mut n = 0u64;
    'connection: while let Some(mut client) = ctx.connect(None, || ctx.stopped()).await {
        while !ctx.stopped() {
            n += 1;
            let id = format!("probe{n}");
            let started = Instant::now();
            let frame = Frame::new(Command::Send)
                .header("destination", PROBE)
                .header("persistent", "true")
                .header("receipt", id.as_str())
                .body("probe");
            if client.send(frame).await.is_err() {
                continue 'connection;
            }
            match tokio::time::timeout(Duration::from_secs(2), client.receipt(&id, |_| {})).await {
                Ok(Ok(())) => ctx.ledger.lock().probes.push((started, Instant::now())),
                _ => continue 'connection,
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        return;
    }
}

/// A consumer: what it subscribes to and how it acks.
#[derive(Clone, Copy)]
struct ConsumerSpec {
    destination: &'static str,
    client_id: Option<&'static str>,
    durable_name: Option<&'static str>,
    /// `auto`, `client` or `client-individual`.
    ack: &'static str,
    /// Reads the dead-letter queue.
    dlq: bool,
    /// NACKs every delivery.
    nacks: bool,
    /// Consume-transform-produce: each delivery is acked in a transaction that sends
    /// one message to [`XFORM_OUT`] (`client-individual`).
    transform: bool,
}

/// When a consumer's session ends.
enum Until {
    /// When the flag turns false.
    Online(watch::Receiver<bool>),
    /// When no message came for this long.
    Quiet(Duration),
}

/// Acks sent and not yet receipted, and the cumulative ack that is due.
#[derive(Default)]
struct AckState {
    pending: HashMap<String, Vec<String>>,
    /// A transform's COMMIT receipts not yet come: receipt → output id.
    commits: HashMap<String, String>,
    unacked: Vec<String>,
    last_ack_header: Option<String>,
    receipts: u64,
}

async fn consumer(ctx: Ctx, spec: ConsumerSpec, mut online: watch::Receiver<bool>) {
    loop {
        if !*online.borrow() {
            // Offline: wait to be wanted again (or for the end).
            if online.changed().await.is_err() {
                return;
            }
            continue;
        }
        let off = online.clone();
        let Some(mut client) = ctx.connect(spec.client_id, || !*off.borrow()).await else {
            continue;
        };
        let until = Until::Online(online.clone());
        if session(&ctx, &mut client, spec, until).await.is_ok() {
            let _ = tokio::time::timeout(RECEIPT_WAIT, client.disconnect()).await;
        } else {
            // An ERROR or a broken connection: back off before connecting again.
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

/// Connects, reads until no message came for `quiet`, acking each, and disconnects.
async fn drain(ctx: &Ctx, spec: ConsumerSpec, quiet: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut client = ctx
            .connect(spec.client_id, || Instant::now() > deadline)
            .await
            .context("the broker did not take a connection for the final drain")?;
        if session(ctx, &mut client, spec, Until::Quiet(quiet))
            .await
            .is_ok()
        {
            let _ = tokio::time::timeout(RECEIPT_WAIT, client.disconnect()).await;
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the final drain kept failing");
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// SUBSCRIBE, then handle frames until `until` says so. `Err` when the connection
/// broke (the caller reconnects).
async fn session(
    ctx: &Ctx,
    client: &mut StompClient,
    spec: ConsumerSpec,
    until: Until,
) -> Result<(), ClientError> {
    let mut subscribe = Frame::new(Command::Subscribe)
        .header("id", "0")
        .header("destination", spec.destination)
        .header("ack", spec.ack)
        .header("activemq.prefetchSize", "20");
    if let Some(name) = spec.durable_name {
        subscribe = subscribe.header("activemq.subscriptionName", name);
    }
    client.send(subscribe).await?;
    let mut acks = AckState::default();
    let mut last_message = Instant::now();
    loop {
        let done = match &until {
            Until::Online(flag) => !*flag.borrow(),
            Until::Quiet(quiet) => {
                // Quiet, and nothing it should get is missing; or quiet for long: a
                // slow broker gets time, a lost message ends the drain all the same.
                let silent = last_message.elapsed();
                silent > *quiet
                    && acks.pending.is_empty()
                    && (silent > GIVE_UP_QUIET
                        || ctx.ledger.lock().outstanding(spec.destination) == 0)
            }
        };
        if done {
            flush_cumulative(client, &mut acks).await?;
            // Acks in flight get their receipts before the caller disconnects.
            let deadline = Instant::now() + RECEIPT_WAIT;
            while !acks.pending.is_empty() && Instant::now() < deadline {
                if let Some(frame) = client.next_within(Duration::from_millis(100)).await? {
                    handle(ctx, client, spec, &mut acks, frame).await?;
                }
            }
            return Ok(());
        }
        match client.next_within(Duration::from_millis(100)).await? {
            Some(frame) => {
                if frame.command == Command::Message {
                    last_message = Instant::now();
                }
                handle(ctx, client, spec, &mut acks, frame).await?;
            }
            None => flush_cumulative(client, &mut acks).await?,
        }
    }
}

async fn handle(
    ctx: &Ctx,
    client: &mut StompClient,
    spec: ConsumerSpec,
    acks: &mut AckState,
    frame: Frame,
) -> Result<(), ClientError> {
    match frame.command {
        Command::Message => {
            let id = frame.get("chaos-id").map(str::to_string);
            ctx.ledger.lock().delivered(id.as_deref(), spec.dlq);
            let ack = frame.get("ack").unwrap_or_default().to_string();
            let id = id.unwrap_or_default();
            if spec.transform {
                return transform(ctx, client, acks, id, ack).await;
            }
            if spec.destination == XFORM_OUT {
                if let (Some(attempt), Some(record)) = (
                    frame.get("chaos-attempt"),
                    ctx.ledger.lock().records.get_mut(&id),
                ) {
                    record.attempts_delivered.insert(attempt.to_string());
                }
            }
            match spec.ack {
                "client" => {
                    acks.unacked.push(id);
                    acks.last_ack_header = Some(ack);
                    if acks.unacked.len() >= 10 {
                        flush_cumulative(client, acks).await?;
                    }
                }
                "client-individual" => {
                    if spec.nacks {
                        client
                            .send(Frame::new(Command::Nack).header("id", ack))
                            .await?;
                    } else {
                        acks.receipts += 1;
                        let receipt = format!("ack{}", acks.receipts);
                        let frame = Frame::new(Command::Ack)
                            .header("id", ack)
                            .header("receipt", receipt.as_str());
                        client.send(frame).await?;
                        acks.pending.insert(receipt, vec![id]);
                    }
                }
                _ => {}
            }
        }
        Command::Receipt => {
            let receipt = frame.get("receipt-id").unwrap_or_default();
            // An ack on the dead-letter queue is not the queue's ack.
            if let Some(ids) = acks.pending.remove(receipt).filter(|_| !spec.dlq) {
                let mut ledger = ctx.ledger.lock();
                if let Some(output) = acks.commits.remove(receipt) {
                    ledger.transforms_committed += 1;
                    if let Some(record) = ledger.records.get_mut(&output) {
                        record.receipted = true;
                    }
                }
                for id in ids {
                    if let Some(record) = ledger.records.get_mut(&id) {
                        record.acked = true;
                    }
                }
            }
        }
        Command::Error => {
            let text = describe(&frame);
            ctx.ledger.lock().error(text.clone());
            return Err(ClientError::ErrorFrame(text));
        }
        _ => {}
    }
    Ok(())
}

/// Consume-transform-produce of input `id` (ack header `ack`): BEGIN, a SEND of its
/// output to [`XFORM_OUT`], the ACK, and a receipted COMMIT, pipelined. The output's
/// id is the input's with `>`; `chaos-attempt` names the transaction, so an output
/// produced twice (its input consumed twice) shows as two attempts delivered.
async fn transform(
    ctx: &Ctx,
    client: &mut StompClient,
    acks: &mut AckState,
    id: String,
    ack: String,
) -> Result<(), ClientError> {
    acks.receipts += 1;
    let tx = format!("xf{}.{}", id, acks.receipts);
    let receipt = format!("commit{}", acks.receipts);
    let output = format!("{id}>");
    ctx.ledger
        .lock()
        .records
        .entry(output.clone())
        .or_insert_with(|| Record {
            xform_out: true,
            ..Record::default()
        });
    let frames = [
        Frame::new(Command::Begin).header("transaction", tx.as_str()),
        Frame::new(Command::Send)
            .header("destination", XFORM_OUT)
            .header("persistent", "true")
            .header("transaction", tx.as_str())
            .header("chaos-id", output.as_str())
            .header("chaos-attempt", tx.as_str())
            .body(format!("chaos output of {id}")),
        Frame::new(Command::Ack)
            .header("id", ack)
            .header("transaction", tx.as_str()),
        Frame::new(Command::Commit)
            .header("transaction", tx.as_str())
            .header("receipt", receipt.as_str()),
    ];
    for frame in frames {
        client.feed(frame).await?;
    }
    client.flush().await?;
    acks.pending.insert(receipt.clone(), vec![id]);
    acks.commits.insert(receipt, output);
    Ok(())
}

/// `client` mode: one ACK (with a receipt) for every message since the last.
async fn flush_cumulative(
    client: &mut StompClient,
    acks: &mut AckState,
) -> Result<(), ClientError> {
    let Some(ack) = acks.last_ack_header.take() else {
        return Ok(());
    };
    acks.receipts += 1;
    let receipt = format!("ack{}", acks.receipts);
    let frame = Frame::new(Command::Ack)
        .header("id", ack)
        .header("receipt", receipt.as_str());
    client.send(frame).await?;
    acks.pending
        .insert(receipt, std::mem::take(&mut acks.unacked));
    Ok(())
}

/// The broker under test: `ebb serve` as a child process.
struct BrokerProcess {
    exe: PathBuf,
    config: PathBuf,
    addr: String,
    log: PathBuf,
    child: Option<tokio::process::Child>,
}

impl BrokerProcess {
    /// Starts it and waits until it takes a TCP connection (at most 60 s).
    async fn start(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut command = tokio::process::Command::new(&self.exe);
        command
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .arg("--stomp")
            .arg(&self.addr)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        // The broker dies with this process, however it ends (a SIGKILL included).
        // SAFETY: prctl(2) between fork and exec touches only the child's own state.
        #[cfg(target_os = "linux")]
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot run {}", self.exe.display()))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait()? {
                anyhow::bail!(
                    "ebb serve exited with {status} while starting; its log ({}):\n{}",
                    self.log.display(),
                    self.log_tail()
                );
            }
            if tokio::net::TcpStream::connect(&self.addr).await.is_ok() {
                self.child = Some(child);
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "ebb serve did not listen on {} within 60 s; its log ({}):\n{}",
                self.addr,
                self.log.display(),
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// SIGTERM, and the exit status within 60 s (`None`: it had to be killed).
    async fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let pid = child.id()? as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid, which is not yet reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        match tokio::time::timeout(Duration::from_secs(60), child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => {
                let _ = child.start_kill();
                None
            }
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// The faults of this run, in the order they are injected: those `chosen`
/// (`--faults`), or all the store allows. Errors: a chosen fault this run cannot
/// inject, named with those it can.
fn chosen_faults(
    chosen: &[String],
    postgres: bool,
    restart: bool,
) -> anyhow::Result<Vec<&'static str>> {
    let possible = fault_kinds(postgres, restart);
    if chosen.is_empty() {
        return Ok(possible.to_vec());
    }
    let every = fault_kinds(true, true);
    chosen
        .iter()
        .map(|name| {
            let name = name.trim();
            if name.is_empty() {
                anyhow::bail!(
                    "--faults: an empty fault name (a stray comma?); name faults among {}",
                    possible.join(", ")
                );
            }
            if let Some(kind) = possible.iter().copied().find(|k| *k == name) {
                return Ok(kind);
            }
            let why = match every.iter().find(|k| **k == name) {
                None => format!("`{name}` is not a fault"),
                Some(&"db-restart") if postgres => {
                    "`db-restart` needs --restart-postgres (the command that restarts the server)"
                        .to_string()
                }
                Some(_) => format!("`{name}` needs a PostgreSQL store (--store postgres://...)"),
            };
            Err(anyhow::anyhow!(
                "--faults: {why}; this run can inject {}",
                possible.join(", ")
            ))
        })
        .collect()
}

/// The faults the run can inject, in the order they are injected.
fn fault_kinds(postgres: bool, restart: bool) -> &'static [&'static str] {
    match (postgres, restart) {
        (true, true) => &[
            "kill",
            "stalled-consumer",
            "db-cut",
            "db-terminate",
            "db-restart",
        ],
        (true, false) => &["kill", "stalled-consumer", "db-cut", "db-terminate"],
        (false, _) => &["kill", "stalled-consumer"],
    }
}

/// The reconciliation and the faults (`--json` prints it).
#[derive(Debug, serde::Serialize)]
pub struct ChaosReport {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// Faults injected.
    pub cycles: u32,
    /// The whole run, s.
    pub elapsed_s: f64,
    /// Messages sent (receipted, refused or not confirmed), partial frames excluded.
    pub sent: u64,
    /// Messages whose SEND or COMMIT got a RECEIPT.
    pub receipted: u64,
    /// Messages whose SEND or COMMIT got an ERROR.
    pub refused: u64,
    /// Messages sent without a receipt or whose receipt never came (a fault cut the
    /// connection first).
    pub unconfirmed: u64,
    /// Of those, delivered.
    pub unconfirmed_delivered: u64,
    /// Transactions committed with a receipt.
    pub transactions_committed: u64,
    /// Consume-transform-produce transactions committed with a receipt.
    pub transforms_committed: u64,
    /// Receipted inputs of the transform that no committed transaction consumed (no
    /// receipted COMMIT, no output delivered): must be 0.
    pub untransformed: u64,
    /// Inputs whose output two different transactions produced (a COMMIT that kept
    /// its send and lost its ack): must be 0.
    pub transformed_twice: u64,
    /// Distinct messages delivered (queue, durable subscription or dead-letter queue).
    pub delivered: u64,
    /// Deliveries beyond each message's first (after a NACK, a crash, a broken
    /// connection): allowed.
    pub redeliveries: u64,
    /// Messages delivered more than once: allowed, counted.
    pub duplicates: u64,
    /// Messages read from the dead-letter queue.
    pub dead_lettered: u64,
    /// Receipted messages with a TTL never delivered.
    pub expired: u64,
    /// Frames clients never finished (none may be delivered).
    pub partial_frames: u64,
    /// ERROR frames clients got, by message.
    pub errors: BTreeMap<String, u64>,
    /// Receipted messages without TTL never delivered: must be 0.
    pub lost: u64,
    /// Deliveries after an ack's RECEIPT: must be 0.
    pub acked_came_back: u64,
    /// Messages acked on the queue and also in the dead-letter queue: must be 0.
    pub acked_and_dead_lettered: u64,
    /// Receipted poison messages (every delivery NACKed) that never reached the
    /// dead-letter queue: must be 0 (expired ones aside).
    pub poison_not_dead_lettered: u64,
    /// Partial frames delivered: must be 0.
    pub partial_delivered: u64,
    /// Transactions delivered in part: must be 0.
    pub transactions_split: u64,
    /// Deliveries nobody sent: must be 0.
    pub unknown_delivered: u64,
    /// Refused messages delivered anyway (an in-doubt commit): counted.
    pub refused_delivered: u64,
    /// The graceful stop at the end exited 0.
    pub clean_stop: bool,
    /// Each fault, in order.
    pub faults: Vec<FaultSummary>,
    /// Up to ten lost ids, to look for in the broker's log.
    pub lost_examples: Vec<String>,
    /// Up to ten transform inputs never consumed by a COMMIT, each with where it
    /// was seen (`(delivered N times, dead-lettered)`), to look for in the log.
    pub untransformed_examples: Vec<String>,
    /// Up to ten refused ids delivered anyway.
    pub refused_delivered_examples: Vec<String>,
    /// The broker's standard error over the run (kept when the run failed).
    pub broker_log: PathBuf,
}

/// One kind of fault over the run.
#[derive(Debug, serde::Serialize)]
pub struct FaultSummary {
    /// `kill`, `stalled-consumer`, `db-cut`, `db-terminate`, `db-restart`.
    pub kind: &'static str,
    /// Times injected.
    pub count: u32,
    /// Longest time the probe could not get a message in, ms (`None`: it never did,
    /// within 60 s, after one of them).
    pub max_unavailable_ms: Option<u64>,
    /// `stalled-consumer`: times the broker did not close the silent connection.
    pub not_closed: u32,
}

impl ChaosReport {
    /// Every failure, as sentences; empty when the run passed.
    pub fn failures(&self) -> Vec<String> {
        let mut out: Vec<String> = [
            (self.lost, "receipted messages lost"),
            (self.acked_came_back, "deliveries of acked messages"),
            (
                self.acked_and_dead_lettered,
                "messages both acked and dead-lettered",
            ),
            (
                self.poison_not_dead_lettered,
                "poison messages not dead-lettered",
            ),
            (self.partial_delivered, "partial frames delivered"),
            (self.transactions_split, "transactions delivered in part"),
            (
                self.untransformed,
                "transform inputs never consumed by a COMMIT",
            ),
            (
                self.transformed_twice,
                "transform inputs consumed by two COMMITs",
            ),
            (self.unknown_delivered, "deliveries nobody sent"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        for fault in &self.faults {
            if fault.not_closed > 0 {
                out.push(format!("{} stalled consumers left open", fault.not_closed));
            }
            if fault.max_unavailable_ms.is_none() {
                out.push(format!(
                    "the broker did not recover within 60 s after {}",
                    fault.kind
                ));
            }
        }
        if !self.clean_stop {
            out.push("the graceful stop at the end failed".into());
        }
        if self.receipted == 0 {
            out.push("no message was receipted: the workload did not run".into());
        }
        out
    }
}

/// Runs `ebb chaos`: [`run_chaos`], the tally printed (and its JSON with `--json`);
/// an error when the reconciliation found a failure.
pub async fn execute(options: &ChaosOptions) -> anyhow::Result<()> {
    let report = run_chaos_until(options, signalled()).await?;
    print_report(&report);
    if options.json {
        println!("{}", serde_json::to_string(&report)?);
    }
    let failures = report.failures();
    anyhow::ensure!(
        failures.is_empty(),
        "the reconciliation failed: {}; the broker's log is {}",
        failures.join("; "),
        report.broker_log.display()
    );
    Ok(())
}

/// Starts the broker, runs the workload and the faults, and reconciles (see the module
/// documentation). The temporary folder (SQLite store, configuration, the broker's
/// log) is removed when the run passed; a PostgreSQL run's schema is always dropped.
///
/// Errors: the broker cannot start or restart, the proxy cannot listen, the final
/// drain cannot connect; a failed reconciliation is in the report
/// ([`ChaosReport::failures`]), not an error.
pub async fn run_chaos(options: &ChaosOptions) -> anyhow::Result<ChaosReport> {
    run_chaos_until(options, std::future::pending()).await
}

/// SIGINT or SIGTERM, for the command line (a library caller's process keeps its own
/// signal handling: tokio's, once installed, stays).
async fn signalled() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

/// [`run_chaos`], ended early (an error, after the same cleanup) when `interrupted`
/// completes.
async fn run_chaos_until(
    options: &ChaosOptions,
    interrupted: impl std::future::Future<Output = ()>,
) -> anyhow::Result<ChaosReport> {
    let started = Instant::now();
    // Unique per run, also for runs at once in one process (the tests).
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let stamp = format!(
        "{}_{}_{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::SeqCst),
        now_ms() % 1_000_000
    );
    let dir = std::env::temp_dir().join(format!("ebb-chaos-{stamp}"));
    std::fs::create_dir_all(&dir)?;
    let postgres = options
        .store
        .as_deref()
        .is_some_and(|u| u.starts_with("postgres"));
    chosen_faults(
        &options.faults,
        postgres,
        options.restart_postgres.is_some(),
    )?;
    check_store(options.store.as_deref(), postgres).await?;
    let schema = postgres.then(|| format!("ebb_chaos_{stamp}"));
    let proxy = match &options.store {
        Some(url) if postgres => Some(DatabaseProxy::start(url).await?),
        _ => None,
    };
    let store_url = match (&proxy, &options.store) {
        (Some(proxy), _) => proxy.url().to_string(),
        (None, Some(url)) => url.clone(),
        (None, None) => format!("sqlite://{}/chaos.db", dir.display()),
    };
    let config = dir.join("chaos.toml");
    std::fs::write(&config, config_text(&store_url, schema.as_deref()))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut broker = BrokerProcess {
        exe: match &options.ebb {
            Some(exe) => exe.clone(),
            None => std::env::current_exe()?,
        },
        config,
        addr: format!("127.0.0.1:{port}"),
        log: dir.join("broker.log"),
        child: None,
    };
    // `interrupted` ends the run the same way as its end: the broker killed, the
    // schema dropped (the broker also dies with this process: `PR_SET_PDEATHSIG`).
    let result = tokio::select! {
        result = async {
            broker.start().await?;
            run(options, &mut broker, proxy.as_ref(), postgres).await
        } => result,
        () = interrupted => Err(anyhow::anyhow!("interrupted by a signal")),
    };
    broker.kill().await;
    drop(proxy);
    if let (Some(url), Some(schema)) = (&options.store, &schema) {
        super::soak::drop_schema(url, schema).await;
    }
    let mut report = result?;
    report.elapsed_s = started.elapsed().as_secs_f64();
    report.broker_log = broker.log.clone();
    if report.failures().is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(report)
}

fn config_text(url: &str, schema: Option<&str>) -> String {
    let schema = schema.map_or(String::new(), |s| format!("schema = \"{s}\"\n"));
    format!(
        "[store]\nurl = \"{url}\"\n{schema}\n\
         [stomp]\nheartbeat_ms = [1000, 1000]\nstall_timeout_ms = 3000\n\n\
         [[policy]]\ndestination = \"queue://>\"\nexpire_messages_period = 250\nmaximum_redeliveries = 2\n\n\
         [[policy]]\ndestination = \"topic://>\"\nexpire_messages_period = 250\n"
    )
}

async fn run(
    options: &ChaosOptions,
    broker: &mut BrokerProcess,
    proxy: Option<&DatabaseProxy>,
    postgres: bool,
) -> anyhow::Result<ChaosReport> {
    let ctx = Ctx {
        addr: broker.addr.clone(),
        ledger: Arc::default(),
        stop: Arc::default(),
    };
    // The durable subscription exists before the first message is sent.
    drain(&ctx, DURABLE, Duration::from_millis(100)).await?;
    let (queue_online, queue_rx) = watch::channel(true);
    let (durable_online, durable_rx) = watch::channel(true);
    let mut consumers = Vec::new();
    for spec in [
        INDIVIDUAL,
        CUMULATIVE,
        AUTO,
        POISONER,
        DEAD_LETTERS,
        TRANSFORMER,
        OUTPUTS,
    ] {
        consumers.push(tokio::spawn(consumer(ctx.clone(), spec, queue_rx.clone())));
    }
    consumers.push(tokio::spawn(consumer(ctx.clone(), DURABLE, durable_rx)));
    let mut producers = Vec::new();
    for kind in [
        ProducerKind::Queue,
        ProducerKind::Topic,
        ProducerKind::Transactions,
        ProducerKind::Unreceipted,
        ProducerKind::TransformInput,
    ] {
        producers.push(tokio::spawn(producer(ctx.clone(), kind, options.rate)));
    }
    producers.push(tokio::spawn(vanishing_clients(ctx.clone())));
    let prober = tokio::spawn(probe(ctx.clone()));

    let kinds = chosen_faults(
        &options.faults,
        postgres,
        options.restart_postgres.is_some(),
    )?;
    let mut faults = Vec::new();
    for cycle in 0..options.cycles {
        tokio::time::sleep(Duration::from_millis(options.cycle_ms)).await;
        // The durable subscription is offline every other cycle.
        durable_online.send_replace(cycle % 2 == 1);
        let kind = kinds[cycle as usize % kinds.len()];
        let restart = options.restart_postgres.as_deref();
        let fault = inject(&ctx, kind, broker, proxy, restart).await?;
        if !options.json {
            eprintln!(
                "cycle {}/{}: {kind}, unavailable {}",
                cycle + 1,
                options.cycles,
                fault
                    .unavailable_ms
                    .map_or("> 60 s".into(), |ms| format!("{ms} ms"))
            );
        }
        faults.push(fault);
    }
    tokio::time::sleep(Duration::from_millis(options.cycle_ms)).await;

    // The end: no more sends; everyone drains until the broker is quiet.
    ctx.stop.store(true, Ordering::SeqCst);
    for task in producers {
        task.await?;
    }
    durable_online.send_replace(true);
    let settle = Instant::now() + Duration::from_secs(60);
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let quiet = ctx
            .ledger
            .lock()
            .last_delivery
            .is_none_or(|at| at.elapsed() > Duration::from_secs(2));
        if quiet || Instant::now() > settle {
            break;
        }
    }
    // Offline for good: each consumer ends its session (its acks receipted) and exits.
    queue_online.send_replace(false);
    durable_online.send_replace(false);
    drop((queue_online, durable_online));
    for task in consumers {
        task.await?;
    }
    // What the consumers held when they left is redelivered to one last reader of each.
    for spec in [
        INDIVIDUAL,
        DURABLE,
        POISONER,
        DEAD_LETTERS,
        TRANSFORMER,
        OUTPUTS,
    ] {
        drain(&ctx, spec, Duration::from_millis(1500)).await?;
    }
    prober.await?;
    let clean_stop = broker.stop().await.is_some_and(|s| s.success());
    let ledger = std::mem::take(&mut *ctx.ledger.lock());
    Ok(reconcile(
        ledger,
        faults,
        options.cycles,
        if postgres { "postgres" } else { "sqlite" },
        clean_stop,
    ))
}

const INDIVIDUAL: ConsumerSpec = ConsumerSpec {
    destination: QUEUE,
    client_id: None,
    durable_name: None,
    ack: "client-individual",
    dlq: false,
    nacks: false,
    transform: false,
};
const CUMULATIVE: ConsumerSpec = ConsumerSpec {
    ack: "client",
    ..INDIVIDUAL
};
const AUTO: ConsumerSpec = ConsumerSpec {
    ack: "auto",
    ..INDIVIDUAL
};
const POISONER: ConsumerSpec = ConsumerSpec {
    destination: POISON,
    nacks: true,
    ..INDIVIDUAL
};
const DURABLE: ConsumerSpec = ConsumerSpec {
    destination: TOPIC,
    client_id: Some(DURABLE_CLIENT),
    durable_name: Some(DURABLE_NAME),
    ..INDIVIDUAL
};
const TRANSFORMER: ConsumerSpec = ConsumerSpec {
    destination: XFORM_IN,
    transform: true,
    ..INDIVIDUAL
};
const OUTPUTS: ConsumerSpec = ConsumerSpec {
    destination: XFORM_OUT,
    ..INDIVIDUAL
};
const DEAD_LETTERS: ConsumerSpec = ConsumerSpec {
    destination: DLQ,
    dlq: true,
    ..INDIVIDUAL
};

/// Injects one fault and measures until the probe gets a message in again.
async fn inject(
    ctx: &Ctx,
    kind: &'static str,
    broker: &mut BrokerProcess,
    proxy: Option<&DatabaseProxy>,
    restart_postgres: Option<&str>,
) -> anyhow::Result<FaultRecord> {
    let start = Instant::now();
    let mut closed_by_broker = None;
    match kind {
        "kill" => {
            broker.kill().await;
            broker.start().await?;
        }
        "stalled-consumer" => closed_by_broker = Some(stalled_consumer(&ctx.addr).await),
        "db-cut" => {
            let proxy = proxy.context("db-cut needs the proxy")?;
            proxy.cut();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            proxy.restore();
        }
        "db-terminate" => {
            let proxy = proxy.context("db-terminate needs the proxy")?;
            terminate_backends(proxy).await?;
        }
        "db-restart" => {
            let command = restart_postgres.context("db-restart needs --restart-postgres")?;
            let status = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(command)
                .status()
                .await?;
            anyhow::ensure!(status.success(), "`{command}` failed: {status}");
        }
        other => anyhow::bail!("unknown fault {other}"),
    }
    // The fault is over when its action returns; the broker is back at the first
    // probe sent after that which gets its receipt.
    let ended = Instant::now();
    let deadline = ended + Duration::from_secs(60);
    let unavailable_ms = loop {
        let gap = longest_gap(&ctx.ledger.lock().probes, start, ended);
        if gap.is_some() || Instant::now() > deadline {
            break gap;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    Ok(FaultRecord {
        kind,
        unavailable_ms,
        closed_by_broker,
    })
}

/// How long the broker was unavailable over a fault that began at `start` and whose
/// action ended at `ended`: the longest time from `start`, or from one probe's
/// receipt, to the next probe receipt, up to the receipt of the first probe sent after
/// `ended` (ms); `None` while no probe sent after `ended` has its receipt.
fn longest_gap(probes: &[(Instant, Instant)], start: Instant, ended: Instant) -> Option<u64> {
    let recovered = probes.iter().find(|(sent, _)| *sent >= ended)?.1;
    let mut last = start;
    let mut longest = Duration::ZERO;
    for &(_, receipted) in probes {
        if receipted > start && receipted <= recovered {
            longest = longest.max(receipted.duration_since(last));
            last = receipted;
        }
    }
    Some(longest.as_millis() as u64)
}

/// A consumer that promises a heart-beat every second, takes deliveries, then sends
/// and reads nothing: true when the broker closes it within 10 s.
async fn stalled_consumer(addr: &str) -> bool {
    let Ok(mut client) = StompClient::open(addr).await else {
        return false;
    };
    let connect = Frame::new(Command::Connect)
        .header("accept-version", "1.2")
        .header("host", "ebb")
        .header("heart-beat", "1000,0");
    if client.handshake(connect).await.is_err() {
        return false;
    }
    let subscribe = Frame::new(Command::Subscribe)
        .header("id", "0")
        .header("destination", QUEUE)
        .header("ack", "client-individual")
        .header("activemq.prefetchSize", "50");
    if client.send(subscribe).await.is_err() {
        return false;
    }
    // Read nothing for a while, then see whether the broker has closed it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    client
        .closes_within(Duration::from_secs(7))
        .await
        .unwrap_or(true)
}

/// Refuses a store a run cannot use, before anything starts: `sqlite::memory:` (the
/// `kill` fault would lose it all), an existing SQLite file (the run would mix its
/// messages with what is there, and leave its own), a PostgreSQL server that cannot
/// be reached (said with its own address, not the proxy's).
async fn check_store(store: Option<&str>, postgres: bool) -> anyhow::Result<()> {
    use sqlx::Connection;
    let Some(url) = store else {
        return Ok(());
    };
    if postgres {
        let conn = sqlx::PgConnection::connect(url)
            .await
            .with_context(|| format!("cannot reach PostgreSQL at {}", crate::redact_url(url)))?;
        let _ = conn.close().await;
        return Ok(());
    }
    anyhow::ensure!(
        !url.contains(":memory:") && !url.contains("mode=memory"),
        "`{url}` is in memory: the broker is SIGKILLed and restarted, so a run needs a store on disk"
    );
    let path = url
        .trim_start_matches("sqlite://")
        .split('?')
        .next()
        .unwrap_or("");
    anyhow::ensure!(
        !std::path::Path::new(path).exists(),
        "{path} exists: a run needs a store of its own (a file that does not exist yet)"
    );
    Ok(())
}

/// Ends the broker's database connections from the server's side
/// (`pg_terminate_backend`), as a restart of PostgreSQL does.
async fn terminate_backends(proxy: &DatabaseProxy) -> anyhow::Result<()> {
    use sqlx::Connection;
    let ports: Vec<i32> = proxy.server_ports().into_iter().map(i32::from).collect();
    // Through the proxy too: its own connection is not among `ports`.
    let mut conn = sqlx::PgConnection::connect(proxy.url()).await?;
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE client_port = ANY($1) AND application_name = 'ebb' \
         AND pid <> pg_backend_pid()",
    )
    .bind(&ports)
    .execute(&mut conn)
    .await?;
    Ok(())
}

fn reconcile(
    ledger: Ledger,
    faults: Vec<FaultRecord>,
    cycles: u32,
    backend: &'static str,
    clean_stop: bool,
) -> ChaosReport {
    let mut r = ChaosReport {
        backend,
        cycles,
        elapsed_s: 0.0,
        sent: 0,
        receipted: 0,
        refused: 0,
        unconfirmed: 0,
        unconfirmed_delivered: 0,
        transactions_committed: ledger.transactions_committed,
        transforms_committed: ledger.transforms_committed,
        untransformed: 0,
        transformed_twice: 0,
        delivered: 0,
        redeliveries: 0,
        duplicates: 0,
        dead_lettered: 0,
        expired: 0,
        partial_frames: 0,
        errors: ledger.errors.clone(),
        lost: 0,
        acked_came_back: 0,
        acked_and_dead_lettered: 0,
        poison_not_dead_lettered: 0,
        partial_delivered: 0,
        transactions_split: 0,
        unknown_delivered: ledger.unknown,
        refused_delivered: 0,
        clean_stop,
        faults: Vec::new(),
        lost_examples: Vec::new(),
        untransformed_examples: Vec::new(),
        refused_delivered_examples: Vec::new(),
        broker_log: PathBuf::new(),
    };
    // Per transaction: (members delivered, members).
    let mut transactions: HashMap<u64, (u32, u32)> = HashMap::new();
    for (id, m) in &ledger.records {
        let deliveries = m.deliveries + m.dlq_deliveries;
        if m.partial {
            r.partial_frames += 1;
            r.partial_delivered += u64::from(deliveries > 0);
            continue;
        }
        r.sent += 1;
        if deliveries > 0 {
            r.delivered += 1;
            r.redeliveries += u64::from(deliveries - 1);
            r.duplicates += u64::from(deliveries > 1);
        }
        r.dead_lettered += u64::from(m.dlq_deliveries > 0);
        r.acked_came_back += u64::from(m.came_back);
        r.acked_and_dead_lettered += u64::from(m.acked && m.dlq_deliveries > 0);
        if m.xform_in && m.receipted && !ledger.transformed(id, m) {
            r.untransformed += 1;
            if r.untransformed_examples.len() < 10 {
                r.untransformed_examples.push(format!(
                    "{id} (delivered {} times{})",
                    m.deliveries,
                    if m.dlq_deliveries > 0 {
                        ", dead-lettered"
                    } else {
                        ""
                    }
                ));
            }
        }
        r.transformed_twice += u64::from(m.attempts_delivered.len() > 1);
        if let Some(tx) = m.tx {
            let entry = transactions.entry(tx).or_default();
            entry.0 += u32::from(deliveries > 0);
            entry.1 += 1;
        }
        if m.receipted {
            r.receipted += 1;
            let reached_dlq = m.dlq_deliveries > 0;
            r.poison_not_dead_lettered += u64::from(m.poison && !reached_dlq && m.expires_ms == 0);
            if deliveries == 0 && m.expires_ms > 0 {
                r.expired += 1;
            } else if deliveries == 0 {
                r.lost += 1;
                if r.lost_examples.len() < 10 {
                    let destination = match m {
                        m if m.topic => TOPIC,
                        m if m.xform_in => XFORM_IN,
                        m if m.xform_out => XFORM_OUT,
                        _ => QUEUE,
                    };
                    r.lost_examples.push(format!("{id} ({destination})"));
                }
            }
        } else if m.refused {
            r.refused += 1;
            if deliveries > 0 {
                r.refused_delivered += 1;
                if r.refused_delivered_examples.len() < 10 {
                    r.refused_delivered_examples.push(id.clone());
                }
            }
        } else {
            r.unconfirmed += 1;
            r.unconfirmed_delivered += u64::from(deliveries > 0);
        }
    }
    r.transactions_split = transactions
        .values()
        .filter(|(delivered, members)| *delivered != 0 && delivered != members)
        .count() as u64;
    let mut kinds: Vec<&'static str> = Vec::new();
    for fault in &faults {
        if !kinds.contains(&fault.kind) {
            kinds.push(fault.kind);
        }
    }
    for kind in kinds {
        let of_kind: Vec<&FaultRecord> = faults.iter().filter(|f| f.kind == kind).collect();
        let max_unavailable_ms = of_kind
            .iter()
            .map(|f| f.unavailable_ms)
            .collect::<Option<Vec<u64>>>()
            .and_then(|all| all.into_iter().max());
        r.faults.push(FaultSummary {
            kind,
            count: of_kind.len() as u32,
            max_unavailable_ms,
            not_closed: of_kind
                .iter()
                .filter(|f| f.closed_by_broker == Some(false))
                .count() as u32,
        });
    }
    r
}

fn print_report(r: &ChaosReport) {
    println!(
        "ebb chaos on {}: {} faults in {:.1} s",
        r.backend, r.cycles, r.elapsed_s
    );
    let rows = [
        ("sent", r.sent),
        ("  receipted", r.receipted),
        ("  refused with an ERROR", r.refused),
        (
            "  not confirmed (no receipt asked, or none came)",
            r.unconfirmed,
        ),
        ("  not confirmed, delivered", r.unconfirmed_delivered),
        ("transactions committed", r.transactions_committed),
        ("transform transactions committed", r.transforms_committed),
        ("delivered (distinct)", r.delivered),
        ("redeliveries (allowed)", r.redeliveries),
        ("delivered more than once (allowed)", r.duplicates),
        ("dead-lettered", r.dead_lettered),
        ("expired (TTL, never delivered)", r.expired),
        ("partial frames written", r.partial_frames),
        ("refused, delivered anyway (in doubt)", r.refused_delivered),
        ("LOST (receipted, never delivered)", r.lost),
        ("acked, delivered again", r.acked_came_back),
        ("acked and dead-lettered", r.acked_and_dead_lettered),
        (
            "poison messages not dead-lettered",
            r.poison_not_dead_lettered,
        ),
        ("partial frames delivered", r.partial_delivered),
        ("transactions delivered in part", r.transactions_split),
        (
            "transform inputs never consumed by a COMMIT",
            r.untransformed,
        ),
        (
            "transform inputs consumed by two COMMITs",
            r.transformed_twice,
        ),
        ("deliveries nobody sent", r.unknown_delivered),
    ];
    for (what, n) in rows {
        println!("  {what:<50} {n:>9}");
    }
    println!(
        "  {:<50} {:>9}",
        "graceful stop at the end",
        if r.clean_stop { "ok" } else { "FAILED" }
    );
    println!("  fault              times  longest unavailable");
    for f in &r.faults {
        let longest = f
            .max_unavailable_ms
            .map_or("> 60 s".to_string(), |ms| format!("{ms} ms"));
        let extra = if f.kind == "stalled-consumer" {
            format!(
                "  (closed by the broker {} of {})",
                f.count - f.not_closed,
                f.count
            )
        } else {
            String::new()
        };
        println!("  {:<18} {:>5}  {longest}{extra}", f.kind, f.count);
    }
    for (text, n) in &r.errors {
        println!("  x{n}: {text}");
    }
    if !r.untransformed_examples.is_empty() {
        println!(
            "  never transformed, e.g.: {}",
            r.untransformed_examples.join(", ")
        );
    }
    if !r.lost_examples.is_empty() {
        println!("  lost, e.g.: {}", r.lost_examples.join(", "));
    }
    if !r.refused_delivered_examples.is_empty() {
        let ids = r.refused_delivered_examples.join(", ");
        println!("  refused and delivered, e.g.: {ids}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(f: impl FnOnce(&mut Record)) -> Record {
        let mut r = Record {
            receipted: true,
            ..Record::default()
        };
        f(&mut r);
        r
    }

    fn reconciled(records: Vec<(&str, Record)>) -> ChaosReport {
        let ledger = Ledger {
            records: records
                .into_iter()
                .map(|(id, r)| (id.to_string(), r))
                .collect(),
            ..Ledger::default()
        };
        reconcile(ledger, Vec::new(), 0, "sqlite", true)
    }

    #[test]
    fn the_reconciliation_names_each_kind_of_failure() {
        let r = reconciled(vec![
            ("q1", record(|r| r.deliveries = 1)),
            ("q2", record(|_| {})),
            ("q3", record(|r| r.expires_ms = 1)),
            (
                "q4",
                record(|r| (r.deliveries, r.acked, r.came_back) = (2, true, 1)),
            ),
            ("q5", record(|r| (r.dlq_deliveries, r.acked) = (1, true))),
            ("p1", record(|r| (r.partial, r.deliveries) = (true, 1))),
            ("x1.0", record(|r| (r.tx, r.deliveries) = (Some(1), 1))),
            ("x1.1", record(|r| r.tx = Some(1))),
            ("u1", record(|r| (r.receipted, r.deliveries) = (false, 3))),
            ("q41", record(|r| (r.poison, r.deliveries) = (true, 3))),
            (
                "q81",
                record(|r| (r.poison, r.deliveries, r.dlq_deliveries) = (true, 3, 1)),
            ),
        ]);
        assert_eq!(
            (r.sent, r.receipted, r.delivered, r.expired, r.lost),
            (10, 9, 7, 1, 2)
        );
        assert_eq!(r.poison_not_dead_lettered, 1);
        assert_eq!((r.acked_came_back, r.acked_and_dead_lettered), (1, 1));
        assert_eq!(r.dead_lettered, 2);
        assert_eq!((r.partial_frames, r.partial_delivered), (1, 1));
        assert_eq!(r.transactions_split, 1);
        assert_eq!((r.unconfirmed, r.unconfirmed_delivered), (1, 1));
        assert_eq!((r.duplicates, r.redeliveries), (4, 8));
        let failures = r.failures();
        assert_eq!(failures.len(), 6, "{failures:?}");
        assert!(
            failures[0].starts_with("2 receipted messages lost"),
            "{failures:?}"
        );
    }

    #[test]
    fn the_reconciliation_checks_each_transform() {
        let attempts = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        let r = reconciled(vec![
            (
                "i1",
                record(|r| (r.xform_in, r.deliveries, r.acked) = (true, 1, true)),
            ),
            (
                "i1>",
                record(|r| {
                    (r.xform_out, r.deliveries) = (true, 1);
                    r.attempts_delivered = attempts(&["xfi1.1"]);
                }),
            ),
            ("i2", record(|r| (r.xform_in, r.deliveries) = (true, 2))),
            (
                "i3",
                record(|r| (r.xform_in, r.deliveries, r.acked, r.came_back) = (true, 2, true, 1)),
            ),
            (
                "i3>",
                record(|r| {
                    (r.xform_out, r.deliveries) = (true, 2);
                    r.attempts_delivered = attempts(&["xfi3.1", "xfi3.2"]);
                }),
            ),
            ("i4>", record(|r| r.xform_out = true)),
            // Committed, its receipt lost to a fault: the output shows it.
            ("i5", record(|r| (r.xform_in, r.deliveries) = (true, 1))),
            (
                "i5>",
                record(|r| (r.xform_out, r.receipted, r.deliveries) = (true, false, 1)),
            ),
        ]);
        assert_eq!(r.untransformed, 1, "i2 was never consumed by a COMMIT");
        assert_eq!(r.transformed_twice, 1, "i3's output came from two COMMITs");
        assert_eq!(r.acked_came_back, 1);
        assert_eq!(r.lost, 1, "i4's receipted output never came");
        assert_eq!(r.failures().len(), 4, "{:?}", r.failures());
    }

    #[test]
    fn faults_can_be_chosen_among_those_the_store_allows() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            chosen_faults(&[], false, false).unwrap(),
            ["kill", "stalled-consumer"]
        );
        assert_eq!(
            chosen_faults(&names(&["kill"]), false, false).unwrap(),
            ["kill"]
        );
        let e = chosen_faults(&names(&["db-cut"]), false, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--faults: `db-cut` needs a PostgreSQL store (--store postgres://...); this run can inject kill, stalled-consumer"
        );
        let e = chosen_faults(&names(&["db-restart"]), true, false).unwrap_err();
        assert!(e.to_string().contains("needs --restart-postgres"), "{e}");
        let e = chosen_faults(&names(&["kil"]), true, true).unwrap_err();
        assert!(e.to_string().starts_with("--faults: `kil` is not a fault; this run can inject kill, stalled-consumer, db-cut"), "{e}");
        let e = chosen_faults(&names(&["kill", ""]), false, false).unwrap_err();
        assert!(e.to_string().contains("an empty fault name"), "{e}");
        assert_eq!(
            chosen_faults(&names(&[" kill"]), false, false).unwrap(),
            ["kill"]
        );
        assert_eq!(
            chosen_faults(&names(&["db-cut", "kill"]), true, false).unwrap(),
            ["db-cut", "kill"]
        );
    }

    #[test]
    fn unavailability_is_the_longest_gap_between_probe_receipts() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        // Probes (sent, receipted): one before the fault, two answered during it, then
        // a silence of 900 ms, then recovery after its end at 1,000 ms.
        let probes = [
            (at(0), at(5)),
            (at(10), at(60)),
            (at(70), at(100)),
            (at(150), at(1000)),
            (at(1010), at(1030)),
            (at(1100), at(1120)),
        ];
        assert_eq!(longest_gap(&probes, at(50), at(1000)), Some(900));
        assert_eq!(
            longest_gap(&probes, at(50), at(2000)),
            None,
            "no probe after the end yet"
        );
    }

    #[test]
    fn a_clean_ledger_passes() {
        let r = reconciled(vec![
            ("q1", record(|r| r.deliveries = 1)),
            ("q2", record(|r| (r.deliveries, r.acked) = (1, true))),
            ("x1.0", record(|r| (r.tx, r.deliveries) = (Some(1), 1))),
            ("x1.1", record(|r| (r.tx, r.deliveries) = (Some(1), 2))),
        ]);
        assert_eq!(r.failures(), Vec::<String>::new());
        assert_eq!((r.delivered, r.duplicates), (4, 1));
    }
}
