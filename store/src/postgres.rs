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
        Self::from_pool(pool, options, &shown).await
    }
}

crate::sql::impl_sql_store!(
    PgStore,
    sqlx::Postgres,
    Backend::Postgres,
    "BEGIN",
    crate::migrate::POSTGRES
);
