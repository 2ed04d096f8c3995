//! An Ebb broker in the bench process, on a fresh store per run, and its STOMP
//! listener (the one `ebb serve` runs) on an ephemeral port of 127.0.0.1: what the
//! end-to-end benchmarks measure Ebb with.
//!
//! SQLite runs on a temporary file (`synchronous=FULL`, the store's default) removed
//! afterwards; PostgreSQL on a schema of its own (`ebb_bench_<tag>_<pid>_<run>`),
//! dropped afterwards. The broker has every default, as `ebb serve` without a
//! configuration file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ebb::stomp::connection::ConnectionConfig;
use ebb::{Broker, BrokerConfig};
use ebb_store::{StatsSnapshot, StoreOptions};

/// Which database a run's store is.
#[derive(Debug, Clone)]
pub enum Store {
    /// A temporary SQLite file.
    Sqlite,
    /// PostgreSQL at this URL (a schema of its own per run).
    Postgres(String),
}

impl Store {
    /// `SQLite` or `PostgreSQL`, for tables.
    pub fn label(&self) -> &'static str {
        match self {
            Store::Sqlite => "SQLite",
            Store::Postgres(_) => "PostgreSQL",
        }
    }
}

/// The store a single-store bench runs on: PostgreSQL at `EBB_BENCH_POSTGRES_URL` when
/// it is set, else a temporary SQLite file.
pub fn store_from_env() -> Store {
    match std::env::var("EBB_BENCH_POSTGRES_URL") {
        Ok(url) => Store::Postgres(url),
        Err(_) => Store::Sqlite,
    }
}

/// An empty folder for a bench's files, `ebb-bench-<tag>-<pid>` in the temporary
/// folder (emptied first when it exists); remove it when done.
pub fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ebb-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the bench's temporary folder");
    dir
}

/// The runtime an end-to-end bench drives its clients on: 2 worker threads, as many
/// as the development machine's cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the bench's runtime")
}

/// An Ebb broker on a fresh store, and what to remove after it.
pub struct EbbRun {
    pub broker: Broker,
    schema: Option<(String, String)>,
    file: Option<PathBuf>,
}

/// Starts a broker on a fresh `store`: the SQLite file `run-<run>.db` in `dir` (its pool
/// `EBB_BENCH_MAX_CONNECTIONS` connections, default 8 as `ebb serve`), or the
/// PostgreSQL schema `ebb_bench_<tag>_<pid>_<run>`; every other setting the default, as
/// `ebb serve` without a configuration file. Panics if the broker cannot start.
pub async fn start(store: &Store, dir: &Path, tag: &str, run: usize) -> EbbRun {
    start_with(store, dir, tag, run, BrokerConfig::default()).await
}

/// As [`start`], with `config` (its `store` options are the run's).
pub async fn start_with(
    store: &Store,
    dir: &Path,
    tag: &str,
    run: usize,
    config: BrokerConfig,
) -> EbbRun {
    let (url, options, schema, file) = match store {
        Store::Sqlite => {
            let file = dir.join(format!("run-{run}.db"));
            let url = format!("sqlite://{}", file.display());
            let options = StoreOptions {
                max_connections: super::report::env("EBB_BENCH_MAX_CONNECTIONS", 8u32),
                ..StoreOptions::default()
            };
            (url, options, None, Some(file))
        }
        Store::Postgres(url) => {
            let schema = format!("ebb_bench_{tag}_{}_{run}", std::process::id());
            let options = StoreOptions {
                schema: Some(schema.clone()),
                ..StoreOptions::default()
            };
            (url.clone(), options, Some((url.clone(), schema)), None)
        }
    };
    let config = BrokerConfig {
        store: options,
        ..config
    };
    let broker = Broker::start(&url, config)
        .await
        .expect("the broker starts");
    EbbRun {
        broker,
        schema,
        file,
    }
}

impl EbbRun {
    /// Shuts the broker down (a warning if that fails or takes over 30 s), then removes
    /// its store.
    pub async fn finish(self) {
        let stopped = tokio::time::timeout(Duration::from_secs(30), self.broker.shutdown()).await;
        if !matches!(stopped, Ok(Ok(()))) {
            eprintln!("warning: the broker did not shut down cleanly: {stopped:?}");
        }
        if let Some((url, schema)) = self.schema {
            drop_schema(&url, &schema).await;
        }
        if let Some(file) = self.file {
            for suffix in ["", "-wal", "-shm", ".lock"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
            }
        }
    }

    /// Bytes the run's store takes on disk now: the SQLite file with its WAL, or the
    /// PostgreSQL schema's tables with their indexes and TOAST
    /// (`pg_total_relation_size`).
    #[allow(dead_code)]
    pub async fn disk_bytes(&self) -> u64 {
        if let Some(file) = &self.file {
            return ["", "-wal"]
                .iter()
                .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", file.display())).ok())
                .map(|m| m.len())
                .sum();
        }
        let Some((url, schema)) = &self.schema else {
            return 0;
        };
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(url).await.expect("PostgreSQL");
        let (bytes,): (i64,) = sqlx::query_as(
            "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'",
        )
        .bind(schema)
        .fetch_one(&mut conn)
        .await
        .expect("the schema's size");
        bytes as u64
    }

    /// The store's counters now (transactions committed, writes in them, rows read).
    pub fn store_stats(&self) -> StatsSnapshot {
        self.broker.store().stats().snapshot()
    }

    /// Starts the STOMP listener in front of the broker, with
    /// `ConnectionConfig::default()` (as `ebb serve`), on an ephemeral port.
    pub async fn listen(&self) -> Result<Listener, String> {
        let options = ebb::server::ServerOptions {
            stomp: Some("127.0.0.1:0".parse().unwrap()),
            connection: ConnectionConfig::default(),
            ..Default::default()
        };
        let server = ebb::server::Server::start(self.broker.clone(), options)
            .await
            .map_err(|e| e.to_string())?;
        let addr = server.stomp_addr().ok_or("no STOMP listener")?;
        Ok(Listener { addr, server })
    }

    /// Starts an MQTT listener in front of the broker, with `MqttConfig::default()`
    /// (as `ebb serve` with `[listeners.mqtt]`) except the connection caps, raised to
    /// 100,000 (every bench client comes from 127.0.0.1, past the 1,000 per address),
    /// on an ephemeral port; the [`Listener`]'s address is MQTT's.
    pub async fn listen_mqtt(&self) -> Result<Listener, String> {
        let options = ebb::server::ServerOptions {
            mqtt: Some((
                "127.0.0.1:0".parse().unwrap(),
                ebb::mqtt::MqttConfig {
                    max_connections: 100_000,
                    max_connections_per_address: 100_000,
                    ..Default::default()
                },
            )),
            ..Default::default()
        };
        let server = ebb::server::Server::start(self.broker.clone(), options)
            .await
            .map_err(|e| e.to_string())?;
        let addr = server.mqtt_addr().ok_or("no MQTT listener")?;
        Ok(Listener { addr, server })
    }
}

/// A running listener ([`EbbRun::listen`], [`EbbRun::listen_mqtt`]).
pub struct Listener {
    /// Where clients connect.
    pub addr: SocketAddr,
    server: ebb::server::Server,
}

impl Listener {
    /// Stops accepting (open connections end with the broker's shutdown).
    pub async fn stop(self) {
        self.server.stop_listening().await;
    }
}

/// Drops a run's PostgreSQL schema (errors ignored: a bench cleans up as it can).
pub async fn drop_schema(url: &str, schema: &str) {
    use sqlx::Connection;
    if let Ok(mut conn) = sqlx::PgConnection::connect(url).await {
        let _ = sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .execute(&mut conn)
            .await;
    }
}

/// `Err` when PostgreSQL at `url` cannot be reached within 5 s.
pub async fn postgres_answers(url: &str) -> Result<(), String> {
    use sqlx::Connection;
    let connect = sqlx::PgConnection::connect(url);
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 5 s".into()),
    }
}

/// The stores to measure: SQLite, and PostgreSQL when `url` is given and answers;
/// prints a line for a PostgreSQL that is skipped, and why.
pub async fn stores(url: Option<&str>) -> Vec<Store> {
    let mut stores = vec![Store::Sqlite];
    match url {
        Some(url) => match postgres_answers(url).await {
            Ok(()) => stores.push(Store::Postgres(url.to_string())),
            Err(e) => println!(
                "PostgreSQL at {} cannot be reached ({e}): its rows are skipped",
                ebb_store::redact_url(url)
            ),
        },
        None => println!("EBB_BENCH_POSTGRES_URL is not set: the PostgreSQL rows are skipped"),
    }
    stores
}
