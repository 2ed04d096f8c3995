//! `ebb soak`: the ActiveMQ expiry out-of-memory workload, run against Ebb, with the
//! figures a user needs to check that memory does not grow with the backlog.
//!
//! On ActiveMQ with the JDBC store, a topic with one offline durable subscriber and a
//! backlog of 200,000 persistent 5 KB messages runs a 1 GB heap out of memory, because
//! every expiry run reads the whole backlog. This command builds the same backlog on an
//! in-process broker (SQLite in a temporary folder by default, or PostgreSQL in a
//! schema of its own), samples resident memory and stored rows while it grows, and
//! reports them: a table, a JSON line, a chart.

use crate::DestinationKey;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::{redact_url, StoreOptions};
use crate::{Broker, BrokerConfig, Message, Policy, PolicyEntry, PolicyMap, SubscribeOptions};

/// The workload and what to do with the results (the `ebb soak` flags).
#[derive(Debug, Clone, clap::Args)]
pub struct SoakOptions {
    /// Store URL [default: a fresh SQLite file in a temporary folder]; a postgres://
    /// store gets a schema of its own, dropped at the end.
    #[arg(long)]
    pub store: Option<String>,
    /// Durable subscriptions created and left offline.
    #[arg(long, default_value_t = 1)]
    pub durable_subscribers: u32,
    /// Messages to send.
    #[arg(long, default_value_t = 200_000)]
    pub messages: u64,
    /// Body size, bytes.
    #[arg(long, default_value_t = 5120)]
    pub size: usize,
    /// Time to live of every message, ms (0 = no expiration).
    #[arg(long, default_value_t = 0)]
    pub ttl_ms: u64,
    /// Housekeeping period, ms (30x more often than ActiveMQ's 30,000 default).
    #[arg(long, default_value_t = 1000)]
    pub expire_period_ms: u64,
    /// Rows per expiry page.
    #[arg(long, default_value_t = 400)]
    pub max_expire_page_size: u32,
    /// Concurrent producers.
    #[arg(long, default_value_t = 1)]
    pub producers: u32,
    /// Sends of each producer in flight at once (pipelined, as [`Broker::start_send`]:
    /// their commits share the store's group commit); 1 waits for each commit.
    #[arg(long, default_value_t = 64)]
    pub window: usize,
    /// After the backlog is stored, every durable subscription comes back and takes
    /// all of it, checked to arrive in store order, acking as it goes; then the run
    /// waits for cleanup to delete every row. Needs `--ttl-ms 0` (with a TTL the
    /// backlog expires instead); not with `--stomp`.
    #[arg(long, conflicts_with = "stomp")]
    pub drain: bool,
    /// Non-durable subscribers that consume everything.
    #[arg(long, default_value_t = 0)]
    pub live_subscribers: u32,
    /// SQLite: each connection's page cache, KiB (as `[store] sqlite_cache_size`).
    #[arg(long, default_value_t = crate::DEFAULT_SQLITE_CACHE_KIB)]
    pub sqlite_cache_kib: u32,
    /// SQLite: the bound on all of SQLite's memory, KiB; 0 = none (as `[store]
    /// sqlite_memory_limit`).
    #[arg(long, default_value_t = crate::DEFAULT_SQLITE_MEMORY_LIMIT_KIB)]
    pub sqlite_memory_limit_kib: u64,
    /// Print one JSON object with the results as the last line.
    #[arg(long)]
    pub json: bool,
    /// Draw resident memory and stored rows against time into this PNG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Exit non-zero if peak resident memory in the second half of the run exceeds the
    /// first half's by more than 20 %, or an expiry page read more rows than its size.
    #[arg(long)]
    pub assert_flat: bool,
    /// Drive a running broker (`ebb serve`) over STOMP at this address instead of an
    /// in-process one. Its own configuration then sets the store and the expiry
    /// policy (`--store`, `--expire-period-ms` and `--max-expire-page-size` do not
    /// apply; `--assert-flat` checks pages against `--max-expire-page-size`).
    #[arg(long, requires = "metrics")]
    pub stomp: Option<String>,
    /// With `--stomp`: the broker's metrics endpoint (`ebb serve --metrics ADDR`), read
    /// every 500 ms for its resident memory, stored rows and expiry pages.
    #[arg(long, requires = "stomp")]
    pub metrics: Option<String>,
    /// With `--stomp`: login and passcode, as `LOGIN:PASSCODE`.
    #[arg(long, requires = "stomp")]
    pub login: Option<String>,
}

/// One sample of the run, taken every 500 ms.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Sample {
    /// Seconds since the first send.
    pub elapsed_s: f64,
    /// Resident memory, bytes: this process's ([`crate::process`]), or with `--stomp`
    /// the broker's, read from its metrics.
    pub rss_bytes: u64,
    /// Of that, what SQLite has allocated (page caches, statements), bytes
    /// ([`crate::sqlite_memory_used`]); `None` on PostgreSQL and with `--stomp`.
    pub sqlite_memory_bytes: Option<u64>,
    /// The store's size on disk, bytes (SQLite: the file, its WAL and index;
    /// PostgreSQL: the run's schema with indexes and TOAST); 0 with `--stomp`.
    pub store_bytes: u64,
    /// Rows the soak topic holds in the store, as last counted: counts take at most a
    /// tenth of the run's time, so on a large store this may be a few samples old.
    pub stored_rows: u64,
    /// Messages sent so far (with `--stomp`, receipted).
    pub sent: u64,
    /// Messages the returning subscriptions received so far (`--drain`).
    pub received: u64,
}

/// What `--drain` measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DrainReport {
    /// Messages the returning subscriptions received, all subscriptions together
    /// (each its whole backlog, in store order).
    pub messages: u64,
    /// Seconds from the subscriptions' return until the last one had every message
    /// and its acks were committed.
    pub consumed_s: f64,
    /// `messages / consumed_s`.
    pub messages_per_s: f64,
    /// Seconds from then until cleanup had deleted every row.
    pub cleanup_s: f64,
}

/// The results (the JSON line has these fields).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SoakReport {
    /// Messages sent (with `--stomp`, receipted by the broker).
    pub messages_sent: u64,
    /// Messages the broker stored (sent while a durable subscription existed).
    pub messages_stored: u64,
    /// Expirations the topic counted (one per message and offline subscription).
    pub messages_expired: u64,
    /// Expiry runs (chains of pages) started.
    pub expiry_runs: u64,
    /// Expiry pages finished.
    pub expiry_pages: u64,
    /// Most rows one expiry page read: never more than the page size.
    pub max_rows_per_expiry_page: u64,
    /// Peak resident memory, bytes (as [`Sample::rss_bytes`]: whose depends on the mode).
    pub peak_rss_bytes: u64,
    /// SQLite's peak allocation, bytes (`sqlite3_memory_highwater`); `None` on
    /// PostgreSQL and with `--stomp`.
    pub peak_sqlite_memory_bytes: Option<u64>,
    /// The store's largest size on disk among the samples, bytes.
    pub peak_store_bytes: u64,
    /// Seconds from the first send to the end of the run.
    pub elapsed_s: f64,
    /// Seconds from the last send until every message had expired (with a TTL).
    pub drain_s: Option<f64>,
    /// `--drain`: the returning subscriptions' figures.
    pub drained: Option<DrainReport>,
    /// The store, password hidden; with `--stomp`, `stomp://ADDR (topic://NAME)`.
    pub store_url: String,
    /// The samples, for the chart (not in the JSON line).
    #[serde(skip)]
    pub samples: Vec<Sample>,
}

/// Runs `ebb soak`: the workload with a progress bar on stderr ([`run`]), then the
/// table ([`table`]), the chart with `--plot` ([`plot`]), the JSON line with `--json`,
/// and the check of `--assert-flat` ([`check_flat`]).
///
/// Errors: as [`run`]; the chart cannot be drawn; `--assert-flat failed: why`.
pub async fn execute(options: &SoakOptions) -> anyhow::Result<()> {
    let report = run(options, true).await?;
    print!("{}", table(&report, options));
    if let Some(path) = &options.plot {
        plot(&report, options, path)?;
        println!("{:<28} {}", "chart", path.display());
    }
    if options.json {
        println!("{}", serde_json::to_string(&report)?);
    }
    if options.assert_flat {
        check_flat(&report, options.max_expire_page_size)
            .map_err(|why| anyhow::anyhow!("--assert-flat failed: {why}"))?;
    }
    Ok(())
}

const TOPIC: &str = "topic://soak";

/// Runs the workload and returns the report (printing progress to stderr when
/// `progress`): on an in-process broker, or over STOMP with `--stomp`.
///
/// Errors: `--drain` with a TTL or with `--stomp`; the store cannot be opened; a
/// send, the sampling or the drain fails (a message out of order, a subscription
/// short of its backlog, cleanup not done within [`CLEANUP_LIMIT_S`]).
pub async fn run(options: &SoakOptions, progress: bool) -> anyhow::Result<SoakReport> {
    if options.drain && options.ttl_ms > 0 {
        anyhow::bail!("--drain needs messages without a TTL (--ttl-ms 0): with one the backlog expires instead of being drained");
    }
    if options.drain && options.stomp.is_some() {
        anyhow::bail!("--drain runs on an in-process broker only, not with --stomp");
    }
    if let (Some(stomp), Some(metrics)) = (&options.stomp, &options.metrics) {
        return run_stomp(options, stomp, metrics, progress).await;
    }
    let stamp = format!("{}_{}", std::process::id(), crate::now_ms() % 1_000_000);
    let temp_dir = std::env::temp_dir().join(format!("ebb-soak-{stamp}"));
    let (url, schema) = match &options.store {
        Some(url) if url.starts_with("postgres") => {
            (url.clone(), Some(format!("ebb_soak_{stamp}")))
        }
        Some(url) => (url.clone(), None),
        None => {
            std::fs::create_dir_all(&temp_dir)?;
            (format!("sqlite://{}/soak.db", temp_dir.display()), None)
        }
    };
    let config = BrokerConfig {
        store: StoreOptions {
            schema: schema.clone(),
            sqlite_cache_kib: options.sqlite_cache_kib,
            sqlite_memory_limit_kib: options.sqlite_memory_limit_kib,
            ..StoreOptions::default()
        },
        policies: PolicyMap {
            entries: vec![PolicyEntry {
                destination: "topic://>".into(),
                policy: Policy {
                    expire_messages_period: options.expire_period_ms,
                    max_expire_page_size: options.max_expire_page_size.max(1),
                    ..Policy::default()
                },
            }],
        },
        ..BrokerConfig::default()
    };
    let broker = Broker::start(&url, config).await?;
    for n in 0..options.durable_subscribers {
        let durable = SubscribeOptions::durable("soak", format!("offline-{n}"));
        drop(broker.subscribe(TOPIC, durable).await?);
    }
    let mut consumers = Vec::new();
    for _ in 0..options.live_subscribers {
        let mut sub = broker
            .subscribe(TOPIC, SubscribeOptions::non_durable())
            .await?;
        consumers.push(actix_rt::spawn(async move {
            while sub.next().await.is_some() {}
        }));
    }

    let sent = Arc::new(AtomicU64::new(0));
    let stored = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let bar = progress.then(|| progress_bar(options.messages));

    // Producers: messages split among them, each persistent, with the TTL if any, at
    // most `window` sends of each awaiting their commit.
    let producer_count = u64::from(options.producers.max(1));
    let producers: Vec<_> = (0..producer_count)
        .map(|p| {
            let (broker, sent, stored) = (broker.clone(), sent.clone(), stored.clone());
            let count = options.messages / producer_count
                + u64::from(p < options.messages % producer_count);
            let (size, ttl, window) = (options.size, options.ttl_ms, options.window.max(1));
            actix_rt::spawn(async move {
                let body = bytes::Bytes::from(vec![b'x'; size]);
                let mut waiting = futures::stream::FuturesOrdered::new();
                let settle = |receipt: crate::SendReceipt| {
                    sent.fetch_add(1, Ordering::Relaxed);
                    if receipt.store_id.is_some() {
                        stored.fetch_add(1, Ordering::Relaxed);
                    }
                };
                for _ in 0..count {
                    let mut m = Message::new(body.clone());
                    if ttl > 0 {
                        m = m.ttl(Duration::from_millis(ttl));
                    }
                    waiting.push_back(broker.start_send(TOPIC, m).await?);
                    if waiting.len() >= window {
                        if let Some(receipt) = waiting.next().await {
                            settle(receipt?);
                        }
                    }
                }
                while let Some(receipt) = waiting.next().await {
                    settle(receipt?);
                }
                Ok::<_, crate::Error>(())
            })
        })
        .collect();

    let sampler = Sampler {
        broker: broker.clone(),
        container: DestinationKey::parse(TOPIC)?.container(),
        size: StoreSize::of(&url, schema.as_deref()).await,
        sent: sent.clone(),
        received: received.clone(),
        start,
        samples: Vec::new(),
        bar,
        rows: 0,
        rows_due: start,
    };
    let mut sampler = sampler;

    // Phase 1: sample until every producer is done (and, with a TTL, until everything
    // expired).
    let mut sent_done_at: Option<Instant> = None;
    let expected_expired = options.messages * u64::from(options.durable_subscribers);
    loop {
        // Read before the sample, so the last sample is taken after the last send.
        let all_sent = producers.iter().all(|p| p.is_finished());
        let stats = sampler.sample().await?;
        if sent_done_at.is_none() && all_sent {
            sent_done_at = Some(Instant::now());
        }
        let drained = options.ttl_ms == 0
            || stats.expired >= expected_expired
            || options.durable_subscribers == 0;
        if sent_done_at.is_some() && drained {
            break;
        }
        actix_rt::time::sleep(SAMPLE_EVERY).await;
    }
    for producer in producers {
        producer.await??;
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    let stats = broker.topic_stats(TOPIC).await?;
    let drain_s =
        (options.ttl_ms > 0).then(|| sent_done_at.map_or(0.0, |t| t.elapsed().as_secs_f64()));

    // Phase 2 (`--drain`): every durable subscription comes back and takes its whole
    // backlog, checked to come in store order; then cleanup deletes the rows.
    let drained = if options.drain {
        Some(
            drain(
                options,
                &broker,
                &mut sampler,
                stored.load(Ordering::Relaxed),
            )
            .await?,
        )
    } else {
        None
    };
    if let Some(bar) = &sampler.bar {
        bar.finish();
    }
    broker.shutdown().await?;
    for c in consumers {
        c.abort();
    }
    if let Some(schema) = &schema {
        drop_schema(&url, schema).await;
    }
    let _ = std::fs::remove_dir_all(&temp_dir);
    let samples = std::mem::take(&mut sampler.samples);
    let sqlite = sampler.size.is_sqlite();
    Ok(SoakReport {
        messages_sent: sent.load(Ordering::Relaxed),
        messages_stored: stored.load(Ordering::Relaxed),
        messages_expired: stats.expired,
        expiry_runs: stats.expiry_runs,
        expiry_pages: stats.expiry_pages,
        max_rows_per_expiry_page: stats.max_expiry_page_rows,
        peak_rss_bytes: crate::process::peak_resident_bytes(),
        peak_sqlite_memory_bytes: sqlite.then(|| crate::sqlite_memory_used().1),
        peak_store_bytes: samples.iter().map(|s| s.store_bytes).max().unwrap_or(0),
        elapsed_s,
        drain_s,
        drained,
        store_url: redact_url(&url),
        samples,
    })
}

/// How often the soak samples memory, rows and the store's size.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// Most time cleanup may take to delete a drained backlog before the run fails, s.
const CLEANUP_LIMIT_S: u64 = 600;

/// Takes the samples of an in-process run.
struct Sampler {
    broker: Broker,
    container: String,
    size: StoreSize,
    sent: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
    start: Instant,
    samples: Vec<Sample>,
    bar: Option<indicatif::ProgressBar>,
    /// The last count of the topic's rows, and when the next one is due.
    rows: u64,
    rows_due: Instant,
}

impl Sampler {
    /// Takes one sample (and moves the progress bar); returns the topic's counters.
    async fn sample(&mut self) -> anyhow::Result<crate::TopicStats> {
        let stats = self.broker.topic_stats(TOPIC).await?;
        // Counting the rows reads the container's whole index range (seconds for ten
        // million rows on PostgreSQL): at most a tenth of the run's time goes to it, so
        // the count does not slow the workload it measures; in between, the last count
        // stands.
        if Instant::now() >= self.rows_due {
            let started = Instant::now();
            self.rows = self.broker.store().count_messages(&self.container).await?;
            self.rows_due = Instant::now() + (started.elapsed() * 9).max(SAMPLE_EVERY / 2);
        }
        let rows = self.rows;
        let (sent, received) = (
            self.sent.load(Ordering::Relaxed),
            self.received.load(Ordering::Relaxed),
        );
        let sample = Sample {
            elapsed_s: self.start.elapsed().as_secs_f64(),
            rss_bytes: crate::process::resident_bytes(),
            sqlite_memory_bytes: self.size.is_sqlite().then(|| crate::sqlite_memory_used().0),
            store_bytes: self.size.bytes().await,
            stored_rows: rows,
            sent,
            received,
        };
        self.samples.push(sample);
        if let Some(bar) = &self.bar {
            if received > 0 {
                bar.set_position(received);
            } else {
                bar.set_position(sent);
            }
            bar.set_message(format!(
                "| {rows} rows | RSS {} MiB | store {} MiB | {} expiry pages",
                sample.rss_bytes >> 20,
                sample.store_bytes >> 20,
                stats.expiry_pages
            ));
        }
        Ok(stats)
    }
}

/// `--drain`: attaches every offline durable subscription again, each takes its
/// `backlog` (the messages stored) with a prefetch of [`DRAIN_PREFETCH`] and acks it
/// cumulatively every [`DRAIN_ACK_EVERY`] messages; fails if a message comes out of store order (a store
/// id not above the one before) or a subscription gets more or fewer than `backlog`.
/// Then waits (sampling) until cleanup has deleted every row, at most
/// [`CLEANUP_LIMIT_S`].
async fn drain(
    options: &SoakOptions,
    broker: &Broker,
    sampler: &mut Sampler,
    backlog: u64,
) -> anyhow::Result<DrainReport> {
    if let Some(bar) = &sampler.bar {
        bar.set_length(backlog * u64::from(options.durable_subscribers));
        bar.set_position(0);
    }
    let start = Instant::now();
    let consumers: Vec<_> = (0..options.durable_subscribers)
        .map(|n| {
            let (broker, received) = (broker.clone(), sampler.received.clone());
            actix_rt::spawn(async move {
                let durable = SubscribeOptions::durable("soak", format!("offline-{n}"))
                    .ack(crate::AckMode::Client)
                    .prefetch(DRAIN_PREFETCH);
                let mut sub = broker.subscribe(TOPIC, durable).await?;
                let (mut got, mut last_id) = (0u64, 0i64);
                while got < backlog {
                    let Some(m) = sub.next().await else {
                        anyhow::bail!("offline-{n}: the stream ended after {got} of {backlog}");
                    };
                    let id = m.store_id().unwrap_or(0);
                    if id <= last_id {
                        anyhow::bail!(
                            "offline-{n}: store id {id} came after {last_id}: out of order"
                        );
                    }
                    (got, last_id) = (got + 1, id);
                    received.fetch_add(1, Ordering::Relaxed);
                    if got % DRAIN_ACK_EVERY == 0 || got == backlog {
                        sub.ack_up_to(&m).await?;
                    }
                }
                sub.commit_acks().await?;
                Ok(got)
            })
        })
        .collect();
    while !consumers.iter().all(|c| c.is_finished()) {
        sampler.sample().await?;
        actix_rt::time::sleep(SAMPLE_EVERY).await;
    }
    let mut messages = 0;
    for c in consumers {
        messages += c.await??;
    }
    let consumed_s = start.elapsed().as_secs_f64();
    // Cleanup deletes what every subscription acked, in housekeeping batches.
    let cleaned = Instant::now();
    loop {
        sampler.sample().await?;
        if sampler.samples.last().is_some_and(|s| s.stored_rows == 0) {
            break;
        }
        if cleaned.elapsed().as_secs() > CLEANUP_LIMIT_S {
            anyhow::bail!(
                "cleanup left {} rows {CLEANUP_LIMIT_S} s after the drain",
                sampler.samples.last().map_or(0, |s| s.stored_rows)
            );
        }
        actix_rt::time::sleep(SAMPLE_EVERY).await;
    }
    Ok(DrainReport {
        messages,
        consumed_s,
        messages_per_s: messages as f64 / consumed_s.max(1e-9),
        cleanup_s: cleaned.elapsed().as_secs_f64(),
    })
}

/// The prefetch of a returning subscription (ActiveMQ's default for queues; the
/// policy's `durable_prefetch` is 100).
const DRAIN_PREFETCH: u32 = 1000;

/// A returning subscription acks every this many messages (cumulatively): a quarter of
/// [`DRAIN_PREFETCH`], so credit never runs out while acks are on their way.
const DRAIN_ACK_EVERY: u64 = DRAIN_PREFETCH as u64 / 4;

/// The size of the store on disk, sampled: the SQLite file with its WAL and shared
/// memory index, or the run's PostgreSQL schema (tables, indexes, TOAST).
enum StoreSize {
    Files(PathBuf),
    Postgres(Box<sqlx::PgConnection>, String),
    Unknown,
}

impl StoreSize {
    async fn of(url: &str, schema: Option<&str>) -> Self {
        use sqlx::Connection;
        match schema {
            Some(schema) => match sqlx::PgConnection::connect(url).await {
                Ok(conn) => Self::Postgres(Box::new(conn), schema.to_string()),
                Err(_) => Self::Unknown,
            },
            None => {
                let path = url
                    .strip_prefix("sqlite://")
                    .or_else(|| url.strip_prefix("sqlite:"))
                    .map(|p| p.split('?').next().unwrap_or(p));
                match path {
                    Some(p) if !p.contains(":memory:") && !p.is_empty() => {
                        Self::Files(PathBuf::from(p))
                    }
                    _ => Self::Unknown,
                }
            }
        }
    }

    fn is_sqlite(&self) -> bool {
        matches!(self, Self::Files(_))
    }

    /// Bytes on disk now; 0 when unknown.
    async fn bytes(&mut self) -> u64 {
        match self {
            Self::Files(db) => ["", "-wal", "-shm"]
                .iter()
                .filter_map(|suffix| {
                    let mut name = db.clone().into_os_string();
                    name.push(suffix);
                    std::fs::metadata(name).ok()
                })
                .map(|m| m.len())
                .sum(),
            Self::Postgres(conn, schema) => sqlx::query_scalar::<_, i64>(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint \
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relkind = 'r'",
            )
            .bind(schema.as_str())
            .fetch_one(conn.as_mut())
            .await
            .map_or(0, |b| b.max(0) as u64),
            Self::Unknown => 0,
        }
    }
}

/// The progress bar both modes show.
fn progress_bar(messages: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(messages);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} sent, {per_sec} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// `--stomp`: the same workload against a running broker. Durable subscriptions are
/// created on a topic of the run's own (`soak.<pid>.<ms>`) and left offline, every
/// SEND is persistent and receipted (at most `--window` unconfirmed per
/// producer), and the broker's memory, rows and pages come from its metrics endpoint.
/// The durable subscriptions are removed at the end, so the broker's cleanup frees
/// what the run stored.
async fn run_stomp(
    options: &SoakOptions,
    addr: &str,
    metrics: &str,
    progress: bool,
) -> anyhow::Result<SoakReport> {
    use crate::stomp::client::{describe, StompClient};
    use crate::stomp::frame::{Command, Frame};

    let topic = format!(
        "soak.{}.{}",
        std::process::id(),
        crate::now_ms() % 1_000_000
    );
    let key = DestinationKey::topic(&topic)?;
    let (container, destination) = (key.container(), key.stomp());
    let login = options
        .login
        .as_deref()
        .map(|l| l.split_once(':').unwrap_or((l, "")));
    // The endpoint must answer before anything is sent.
    super::stat::fetch(metrics).await?;
    let client_id = format!("soak-{}", std::process::id());
    let mut admin = StompClient::connect(addr, Some(&client_id), login).await?;
    for n in 0..options.durable_subscribers {
        let subscribe = Frame::new(Command::Subscribe)
            .header("destination", destination.clone())
            .header("id", n.to_string())
            .header("activemq.subscriptionName", format!("offline-{n}"));
        admin.request(subscribe, &format!("sub-{n}")).await?;
    }
    admin.disconnect().await?;
    let mut consumers = Vec::new();
    for n in 0..options.live_subscribers {
        let mut live = StompClient::connect(addr, None, login).await?;
        let subscribe = Frame::new(Command::Subscribe)
            .header("destination", destination.clone())
            .header("id", format!("live-{n}"));
        live.request(subscribe, "live").await?;
        consumers.push(actix_rt::spawn(async move {
            while live.next().await.is_ok() {}
        }));
    }

    let sent = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let bar = progress.then(|| progress_bar(options.messages));
    let per = |p: u32| {
        let n = u64::from(options.producers.max(1));
        options.messages / n + u64::from(u64::from(p) < options.messages % n)
    };
    let mut producers = Vec::new();
    for p in 0..options.producers.max(1) {
        let mut client = StompClient::connect(addr, None, login).await?;
        let (sent, count, size, ttl) = (sent.clone(), per(p), options.size, options.ttl_ms);
        let window = options.window.max(1);
        let destination = destination.clone();
        producers.push(actix_rt::spawn(async move {
            let body = vec![b'x'; size];
            let (mut next, mut outstanding) = (0u64, 0usize);
            while next < count || outstanding > 0 {
                while next < count && outstanding < window {
                    let mut send = Frame::new(Command::Send)
                        .header("destination", destination.clone())
                        .header("persistent", "true")
                        .header("receipt", next.to_string());
                    if ttl > 0 {
                        let at = crate::now_ms() + ttl as i64;
                        send = send.header("expires", at.to_string());
                    }
                    client.feed(send.body(body.clone())).await?;
                    next += 1;
                    outstanding += 1;
                }
                client.flush().await?;
                let answer = client.next().await?;
                match answer.command {
                    Command::Receipt => {
                        outstanding -= 1;
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    Command::Error => {
                        anyhow::bail!("the broker refused a send: {}", describe(&answer))
                    }
                    _ => {}
                }
            }
            Ok(client.disconnect().await?)
        }));
    }

    let mut samples = Vec::new();
    let mut sent_done_at: Option<Instant> = None;
    let expected_expired = options.messages * u64::from(options.durable_subscribers);
    let (report_at_end, last) = loop {
        // Read before the sample, so the last sample is taken after the last send.
        let all_sent = producers.iter().all(|p| p.is_finished());
        let scraped = super::stat::parse(&super::stat::fetch(metrics).await?)
            .map_err(|e| anyhow::anyhow!("cannot read {metrics}: {e}"))?;
        let stats = super::stat::from_samples(&scraped)
            .ok_or_else(|| anyhow::anyhow!("{metrics} serves no Ebb broker metrics"))?;
        let dest = stats
            .destinations
            .iter()
            .find(|d| d.destination == container)
            .cloned();
        let rows = dest.as_ref().map_or(0, |d| d.queue_size);
        let expired = dest.as_ref().map_or(0, |d| d.expired_total);
        let pages = dest.as_ref().map_or(0, |d| d.expiry_pages_total);
        let now_sent = sent.load(Ordering::Relaxed);
        samples.push(Sample {
            elapsed_s: start.elapsed().as_secs_f64(),
            rss_bytes: stats.usage.process_resident_bytes,
            sqlite_memory_bytes: None,
            store_bytes: 0,
            stored_rows: rows,
            sent: now_sent,
            received: 0,
        });
        if let Some(bar) = &bar {
            bar.set_position(now_sent);
            bar.set_message(format!(
                "| {rows} rows | broker RSS {} MiB | {pages} expiry pages",
                stats.usage.process_resident_bytes >> 20
            ));
        }
        if sent_done_at.is_none() && all_sent {
            sent_done_at = Some(Instant::now());
        }
        let drained =
            options.ttl_ms == 0 || expired >= expected_expired || options.durable_subscribers == 0;
        if sent_done_at.is_some() && drained {
            break (stats, dest);
        }
        actix_rt::time::sleep(Duration::from_millis(500)).await;
    };
    for producer in producers {
        producer.await??;
    }
    if let Some(bar) = &bar {
        bar.finish();
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    let drain_s =
        (options.ttl_ms > 0).then(|| sent_done_at.map_or(0.0, |t| t.elapsed().as_secs_f64()));
    for c in consumers {
        c.abort();
    }
    // Remove the run's durable subscriptions: the broker's cleanup frees their rows.
    let mut admin = StompClient::connect(addr, Some(&client_id), login).await?;
    for n in 0..options.durable_subscribers {
        let subscribe = Frame::new(Command::Subscribe)
            .header("destination", destination.clone())
            .header("id", n.to_string())
            .header("activemq.subscriptionName", format!("offline-{n}"));
        admin.request(subscribe, &format!("attach-{n}")).await?;
        let unsubscribe = Frame::new(Command::Unsubscribe)
            .header("id", n.to_string())
            .header("activemq.subscriptionName", format!("offline-{n}"));
        admin.request(unsubscribe, &format!("remove-{n}")).await?;
    }
    admin.disconnect().await?;
    let dest = last.unwrap_or_else(|| {
        crate::stats::DestinationStats::stored_only(container.clone(), key.kind(), 0)
    });
    Ok(SoakReport {
        messages_sent: sent.load(Ordering::Relaxed),
        // Every receipted persistent SEND to a topic with a durable subscription is
        // stored (the broker answers after the commit).
        messages_stored: if options.durable_subscribers > 0 {
            sent.load(Ordering::Relaxed)
        } else {
            0
        },
        messages_expired: dest.expired_total,
        expiry_runs: dest.expiry_runs_total,
        expiry_pages: dest.expiry_pages_total,
        max_rows_per_expiry_page: dest.max_expiry_page_rows,
        peak_rss_bytes: report_at_end.usage.process_peak_resident_bytes,
        peak_sqlite_memory_bytes: None,
        peak_store_bytes: 0,
        elapsed_s,
        drain_s,
        drained: None,
        store_url: format!("stomp://{addr} ({container})"),
        samples,
    })
}

/// Drops `schema` (a run's own) from the PostgreSQL database at `url`; errors ignored.
pub(crate) async fn drop_schema(url: &str, schema: &str) {
    use sqlx::Connection;
    if let Ok(mut conn) = sqlx::PgConnection::connect(url).await {
        // Without the notice "drop cascades to N other objects" in the output.
        let sql = format!(
            "SET client_min_messages = warning; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
        );
        let _ = sqlx::raw_sql(&sql).execute(&mut conn).await;
    }
}

/// `--assert-flat`: `Err` says which condition failed.
pub fn check_flat(report: &SoakReport, page_size: u32) -> anyhow::Result<()> {
    if report.max_rows_per_expiry_page > u64::from(page_size) {
        return Err(anyhow::anyhow!(
            "an expiry page read {} rows, more than the page size {page_size}",
            report.max_rows_per_expiry_page
        ));
    }
    let half = report.samples.len() / 2;
    let peak = |s: &[Sample]| s.iter().map(|x| x.rss_bytes).max().unwrap_or(0);
    let (first, second) = (peak(&report.samples[..half]), peak(&report.samples[half..]));
    if half > 0 && second as f64 > first as f64 * 1.2 {
        return Err(anyhow::anyhow!(
            "resident memory grew: peak {} MiB in the second half vs {} MiB in the first (more than 20 %)",
            second >> 20,
            first >> 20
        ));
    }
    Ok(())
}

/// The summary table.
pub fn table(report: &SoakReport, options: &SoakOptions) -> String {
    let mut out = String::new();
    let row = |out: &mut String, k: &str, v: String| out.push_str(&format!("{k:<28} {v}\n"));
    row(&mut out, "store", report.store_url.clone());
    row(
        &mut out,
        "workload",
        format!(
            "{} x {} B, ttl {} ms, {} offline durable, {} producers, expiry every {} ms, page {}",
            options.messages,
            options.size,
            options.ttl_ms,
            options.durable_subscribers,
            options.producers,
            options.expire_period_ms,
            options.max_expire_page_size
        ),
    );
    row(
        &mut out,
        "messages sent / stored",
        format!("{} / {}", report.messages_sent, report.messages_stored),
    );
    row(
        &mut out,
        "messages expired",
        report.messages_expired.to_string(),
    );
    row(
        &mut out,
        "expiry runs / pages",
        format!("{} / {}", report.expiry_runs, report.expiry_pages),
    );
    row(
        &mut out,
        "max rows per expiry page",
        report.max_rows_per_expiry_page.to_string(),
    );
    row(
        &mut out,
        "peak resident memory",
        format!("{:.1} MiB", report.peak_rss_bytes as f64 / 1048576.0),
    );
    if let Some(b) = report.peak_sqlite_memory_bytes {
        row(
            &mut out,
            "of which SQLite, peak",
            format!("{:.1} MiB", b as f64 / 1048576.0),
        );
    }
    if report.peak_store_bytes > 0 {
        row(
            &mut out,
            "store on disk, peak",
            format!("{:.1} MiB", report.peak_store_bytes as f64 / 1048576.0),
        );
    }
    row(&mut out, "elapsed", format!("{:.1} s", report.elapsed_s));
    if let Some(d) = report.drain_s {
        row(&mut out, "drain after the last send", format!("{d:.1} s"));
    }
    if let Some(d) = &report.drained {
        row(
            &mut out,
            "drained in store order",
            format!(
                "{} in {:.1} s ({:.0} msg/s)",
                d.messages, d.consumed_s, d.messages_per_s
            ),
        );
        row(
            &mut out,
            "cleanup after the drain",
            format!("{:.1} s", d.cleanup_s),
        );
    }
    out
}

/// Draws resident memory (MiB, left axis) and stored rows (right axis) against time.
pub fn plot(
    report: &SoakReport,
    options: &SoakOptions,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let font = ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"]
        .iter()
        .find_map(|p| std::fs::read(p).ok());
    let text = match font {
        Some(bytes) => {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
        }
        None => false,
    };
    if !text {
        eprintln!(
            "ebb soak: no TTF font found (install fonts-dejavu-core): the chart has no labels"
        );
    }
    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let samples = &report.samples;
    let t_max = samples.last().map_or(1.0, |s| s.elapsed_s).max(1.0);
    let mib_max = samples
        .iter()
        .map(|s| s.rss_bytes >> 20)
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.2;
    let rows_max = samples
        .iter()
        .map(|s| s.stored_rows)
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.1;
    let title = format!(
        "ebb soak: {} x {} B, ttl {} ms, {} offline durable ({})",
        options.messages,
        options.size,
        options.ttl_ms,
        options.durable_subscribers,
        report.store_url
    );
    let mut builder = ChartBuilder::on(&root);
    builder
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .right_y_label_area_size(70);
    if text {
        builder.caption(title, ("sans-serif", 20));
    }
    let mut chart = builder
        .build_cartesian_2d(0f64..t_max, 0f64..mib_max)?
        .set_secondary_coord(0f64..t_max, 0f64..rows_max);
    if text {
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("resident memory, MiB")
            .draw()?;
        chart
            .configure_secondary_axes()
            .y_desc("stored rows")
            .draw()?;
    }
    let rss = samples
        .iter()
        .map(|s| (s.elapsed_s, (s.rss_bytes >> 20) as f64));
    let rows = samples.iter().map(|s| (s.elapsed_s, s.stored_rows as f64));
    let rss_series = chart.draw_series(LineSeries::new(rss, RED.stroke_width(2)))?;
    if text {
        rss_series
            .label("resident memory (MiB)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
    }
    if samples.iter().any(|s| s.sqlite_memory_bytes.is_some()) {
        let sqlite = samples.iter().map(|s| {
            let mib = s.sqlite_memory_bytes.unwrap_or(0) as f64 / 1048576.0;
            (s.elapsed_s, mib)
        });
        let orange = RGBColor(230, 140, 0);
        let series = chart.draw_series(LineSeries::new(sqlite, orange.stroke_width(2)))?;
        if text {
            series
                .label("of which SQLite (MiB)")
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], orange));
        }
    }
    let rows_series = chart.draw_secondary_series(LineSeries::new(rows, BLUE.stroke_width(2)))?;
    if text {
        rows_series
            .label("stored rows")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(rss_mib: &[u64], max_rows: u64) -> SoakReport {
        SoakReport {
            messages_sent: 0,
            messages_stored: 0,
            messages_expired: 0,
            expiry_runs: 0,
            expiry_pages: 0,
            max_rows_per_expiry_page: max_rows,
            peak_rss_bytes: 0,
            peak_sqlite_memory_bytes: None,
            peak_store_bytes: 0,
            elapsed_s: 0.0,
            drain_s: None,
            drained: None,
            store_url: String::new(),
            samples: rss_mib
                .iter()
                .enumerate()
                .map(|(i, m)| Sample {
                    elapsed_s: i as f64,
                    rss_bytes: m << 20,
                    sqlite_memory_bytes: None,
                    store_bytes: 0,
                    stored_rows: 0,
                    sent: 0,
                    received: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn assert_flat_names_the_condition_that_failed() {
        assert!(check_flat(&report(&[20, 21, 22, 22], 400), 400).is_ok());
        let grew = check_flat(&report(&[20, 21, 30, 40], 400), 400)
            .unwrap_err()
            .to_string();
        assert!(grew.contains("resident memory grew"), "{grew}");
        let page = check_flat(&report(&[20, 20], 401), 400)
            .unwrap_err()
            .to_string();
        assert!(page.contains("401 rows"), "{page}");
    }
}
