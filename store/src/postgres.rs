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
    /// The last token this store gave the commit mark (see `MessageStore::write`).
    commit_mark: AtomicI64,
    /// [`crate::MessageStore::stored_bytes`]: bytes of the `msg` column, changed only
    /// after a write commits. Signed so a net change is one `fetch_add`.
    stored_bytes: AtomicI64,
    /// The connection that holds the advisory lock while
    /// [`crate::MessageStore::lock_exclusive`] holds it.
    lock: tokio::sync::Mutex<Option<sqlx::PgConnection>>,
    /// `url` and the lock's key (schema and table prefix), tab-separated.
    lock_target: String,
    /// With [`StoreOptions::lease`]: the lease lock instead of the advisory lock.
    lease: crate::lease::LeaseSlot,
    /// Committed row counts kept until their container is written
    /// ([`crate::counts::CommittedCounts`]).
    counts: crate::counts::CommittedCounts,
    /// The consumer groups over topics it knows ([`crate::groups`]).
    groups: crate::groups::Groups,
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
            .application_name("ebb")
            // The server's notices ("already exists, skipping" at each open) are
            // not for the broker's log.
            .options([("client_min_messages", "warning")]);
        let cannot_open = |source| StoreError::Open {
            url: shown.clone(),
            source,
        };
        if let Some(schema) = &options.schema {
            check_name("schema", schema)?;
            let mut conn = connect.connect().await.map_err(cannot_open)?;
            if options.create {
                sqlx::raw_sql(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                    .execute(&mut conn)
                    .await
                    .map_err(cannot_open)?;
            } else {
                let exists: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
                )
                .bind(schema)
                .fetch_one(&mut conn)
                .await
                .map_err(cannot_open)?;
                if !exists {
                    return Err(StoreError::Missing {
                        url: shown.clone(),
                        reason: format!("there is no schema `{schema}` (--create creates it)"),
                    });
                }
            }
            conn.close().await.map_err(cannot_open)?;
            connect = connect.options([("search_path", schema.as_str())]);
        }
        if let Some(lease) = &options.lease {
            // A paused broker's open write holds the lease row (share-locked): the
            // server ends such a session, so that a standby can take over.
            let idle = format!("{}ms", lease.lease_ms);
            connect = connect.options([("idle_in_transaction_session_timeout", idle)]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(Duration::from_millis(options.acquire_timeout_ms))
            .connect_with(connect.clone())
            .await
            .map_err(cannot_open)?;
        let key = format!(
            "ebb:{}:{}",
            options.schema.as_deref().unwrap_or("(search_path)"),
            options.table_prefix
        );
        let mut store = Self::from_pool(pool, options, &shown, format!("{url}\t{key}")).await?;
        if let Some(lease) = &options.lease {
            let sql = crate::lease::LeaseSql::new(options.schema.as_deref(), &options.table_prefix);
            store.lease = crate::lease::LeaseSlot::configured(lease.clone(), sql, connect);
        }
        Ok(store)
    }
}

impl PgStore {
    /// A session-level advisory lock on a connection of its own (the server releases
    /// it when that connection ends, also when the holder dies), refused while a
    /// broker with a lease holds the store; with [`StoreOptions::lease`], the lease
    /// instead (`None`: nothing to keep here).
    async fn take_lock(&self) -> crate::Result<Option<sqlx::PgConnection>> {
        let (url, key) = self
            .lock_target
            .split_once('\t')
            .unwrap_or((&self.lock_target, ""));
        if self.lease.enabled() {
            return match self.lease.try_take(key).await? {
                None => Ok(None),
                Some(why) => Err(StoreError::Locked(format!(
                    "{} ({key}): {why}",
                    redact_url(url)
                ))),
            };
        }
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
        if !locked {
            return Err(StoreError::Locked(format!("{} ({key})", redact_url(url))));
        }
        // On a pooled connection, whose search_path finds the schema's table.
        let other = match self.pool.acquire().await {
            Ok(mut pooled) => crate::lease::held_by_other(&mut pooled, &self.sql.prefix).await,
            Err(e) => Err(crate::error::db("read the lease")(e)),
        };
        match other {
            Ok(None) => {
                self.lease.advisory_taken();
                Ok(Some(conn))
            }
            Ok(Some(why)) => {
                self.release_lock(conn).await;
                Err(StoreError::Locked(format!(
                    "{} ({key}): {why}",
                    redact_url(url)
                )))
            }
            Err(e) => {
                self.release_lock(conn).await;
                Err(e)
            }
        }
    }

    /// A standby's wait between two attempts: until a lease of this store is
    /// released (announced by `NOTIFY`), or `within`.
    async fn wait_released(&self, within: std::time::Duration) {
        let key = self.lock_target.split_once('\t').map_or("", |(_, key)| key);
        self.lease.wait_released(&self.pool, key, within).await;
    }

    /// With a lease: the write goes on only while it is held (see [`crate::lease`]).
    async fn guard_write(&self, tx: &mut sqlx::PgConnection) -> crate::Result<()> {
        match self.lease.held() {
            Some(lease) => lease.guard(tx).await,
            // A standby writes nothing.
            None if self.lease.enabled() => Err(StoreError::LeaseLost(
                "this store does not hold the lease (a standby)".into(),
            )),
            // The advisory lock's session may have ended (a lost connection) and a
            // standby with a lease taken over: then this broker writes nothing more.
            // The share lock orders this write against such a takeover.
            None => {
                let active: Option<i32> = sqlx::query_scalar(&self.sql.lease_active)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(crate::error::db("check the lease"))?;
                match active {
                    Some(1) => Err(self.lease.advisory_lost()),
                    _ => Ok(()),
                }
            }
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

/// The planner settings of every transaction the store opens on PostgreSQL but a
/// migration's (`SET LOCAL`: they end with the transaction; the pooled connection keeps
/// its own). With sorts (incremental ones too) and sequential scans priced out, a
/// statement whose order only one index gives is planned as that index's range,
/// whatever the table's statistics say: none yet (autovacuum off, or a bulk load
/// before autoanalyze), or stale ones. Without them a table with no statistics got a
/// bitmap scan of every row after the mark and a sort for each 200-row page (the notes
/// in [`crate::statements`]). No JIT and no parallel workers either: a plan that stops
/// at its `LIMIT` can still carry the estimated cost of its whole range, which is
/// enough to start JIT compilation (measured: 8 to 9 ms of compiling for a page read in
/// 0.3 ms) or parallel workers, for a page of a few hundred rows.
macro_rules! index_plans {
    () => {
        "SET LOCAL enable_sort = off; SET LOCAL enable_incremental_sort = off; \
         SET LOCAL enable_seqscan = off; SET LOCAL jit = off; \
         SET LOCAL max_parallel_workers_per_gather = 0"
    };
}

/// [`index_plans!`] as a value.
pub(crate) const INDEX_PLANS: &str = index_plans!();

/// How the store opens its transactions on PostgreSQL. Reads are `REPEATABLE READ`: a
/// read of several statements (marks, then messages) sees one snapshot; a read-only
/// transaction at that level never fails to serialize.
pub(crate) const TRANSACTIONS: crate::sql::Transactions = crate::sql::Transactions {
    migration: "BEGIN",
    write: concat!("BEGIN; ", index_plans!()),
    read: concat!(
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; ",
        index_plans!()
    ),
    usual_plans: "SET LOCAL enable_sort TO DEFAULT; SET LOCAL enable_incremental_sort TO DEFAULT; \
                  SET LOCAL enable_seqscan TO DEFAULT; SET LOCAL jit TO DEFAULT; \
                  SET LOCAL max_parallel_workers_per_gather TO DEFAULT",
    index_plans: INDEX_PLANS,
};

crate::sql::impl_sql_store!(
    PgStore,
    sqlx::Postgres,
    Backend::Postgres,
    TRANSACTIONS,
    crate::migrate::POSTGRES
);

#[cfg(test)]
mod tests {
    #[test]
    fn every_transaction_but_a_migration_plans_by_index() {
        let tx = super::TRANSACTIONS;
        assert!(tx.write.starts_with("BEGIN;") && tx.write.ends_with(super::INDEX_PLANS));
        assert!(tx
            .read
            .starts_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;"));
        assert!(tx.read.ends_with(super::INDEX_PLANS));
        assert_eq!(tx.migration, "BEGIN");
        // `usual_plans` gives back every setting `index_plans` takes.
        for setting in super::INDEX_PLANS.split(';') {
            let name = setting
                .trim()
                .trim_start_matches("SET LOCAL ")
                .split(' ')
                .next();
            let reset = format!("SET LOCAL {} TO DEFAULT", name.unwrap());
            assert!(tx.usual_plans.contains(&reset), "{reset}");
        }
        assert_eq!(
            tx.usual_plans.split(';').count(),
            super::INDEX_PLANS.split(';').count()
        );
    }
}
