//! The PostgreSQL backend, for production.
//!
//! With [`StoreOptions::schema`] the store creates that schema if missing and puts it
//! first on every connection's `search_path`, so it touches nothing else in the
//! database (tests give each run a schema of its own).

use std::str::FromStr;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};

use crate::error::redact_url;
use crate::statements::{check_name, Statements};
use crate::{Backend, ReadStats, StoreError, StoreOptions};

/// A store on PostgreSQL.
pub struct PgStore {
    pool: PgPool,
    sql: Statements,
    stats: ReadStats,
    last_id: AtomicI64,
    /// [`crate::MessageStore::stored_bytes`]: bytes of the `msg` column, changed only
    /// after a write commits. Signed so a net change is one `fetch_add`.
    stored_bytes: AtomicI64,
    /// The connection that holds the advisory lock while
    /// [`crate::MessageStore::lock_exclusive`] holds it.
    lock: tokio::sync::Mutex<Option<sqlx::PgConnection>>,
    /// `url` and the lock's key (schema and table prefix), tab-separated.
    lock_target: String,
}

impl PgStore {
    /// Opens `postgres://…`, creating the schema (if one is configured) and the tables.
    pub async fn open(url: &str, options: &StoreOptions) -> crate::Result<Self> {
        let shown = redact_url(url);
        let mut connect = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::InvalidUrl {
                url: shown.clone(),
                reason: e.to_string(),
            })?
            .application_name("ebb");
        let cannot_open = |source| StoreError::Open {
            url: shown.clone(),
            source,
        };
        if let Some(schema) = &options.schema {
            check_name("schema", schema)?;
            let mut conn = connect.connect().await.map_err(cannot_open)?;
            sqlx::raw_sql(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                .execute(&mut conn)
                .await
                .map_err(cannot_open)?;
            conn.close().await.map_err(cannot_open)?;
            connect = connect.options([("search_path", schema.as_str())]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(Duration::from_millis(options.acquire_timeout_ms))
            .connect_with(connect)
            .await
            .map_err(cannot_open)?;
        let key = format!(
            "ebb:{}:{}",
            options.schema.as_deref().unwrap_or("(search_path)"),
            options.table_prefix
        );
        Self::from_pool(pool, options, &shown, format!("{url}\t{key}")).await
    }
}

impl PgStore {
    /// A session-level advisory lock on a connection of its own (the server releases
    /// it when that connection ends, also when the holder dies).
    async fn take_lock(&self) -> crate::Result<Option<sqlx::PgConnection>> {
        let (url, key) = self
            .lock_target
            .split_once('\t')
            .unwrap_or((&self.lock_target, ""));
        let mut conn =
            sqlx::PgConnection::connect(url)
                .await
                .map_err(|source| StoreError::Open {
                    url: redact_url(url),
                    source,
                })?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1))")
            .bind(key)
            .fetch_one(&mut conn)
            .await
            .map_err(crate::error::db("lock store"))?;
        if locked {
            Ok(Some(conn))
        } else {
            Err(StoreError::Locked(format!("{} ({key})", redact_url(url))))
        }
    }

    /// Unlocks explicitly before closing the connection: the server ends a closed
    /// session in the background, so without the unlock the next holder could still
    /// find the lock taken for a moment after [`crate::MessageStore::close`] returned.
    async fn release_lock(&self, mut conn: sqlx::PgConnection) {
        let key = self.lock_target.split_once('\t').map_or("", |(_, key)| key);
        let unlocked = sqlx::query_scalar::<_, bool>("SELECT pg_advisory_unlock(hashtext($1))")
            .bind(key)
            .fetch_one(&mut conn)
            .await;
        if let Err(e) = unlocked {
            tracing::warn!(error = %e, "advisory unlock failed; the server releases the lock when the session ends");
        }
        let _ = conn.close().await;
    }
}

crate::sql::impl_sql_store!(
    PgStore,
    sqlx::Postgres,
    Backend::Postgres,
    "BEGIN",
    crate::migrate::POSTGRES
);
