//! The SQLite backend: the embedded default, zero set-up.
//!
//! Opened with WAL, `synchronous` FULL (or NORMAL, [`StoreOptions::sqlite_sync_full`]),
//! a 5 s `busy_timeout`, and the file created if missing (sqlx sets no journal mode by
//! itself). Write transactions start with `BEGIN IMMEDIATE`, so a write never fails
//! half-way on a lock upgrade. `sqlite::memory:` gets a single connection that lives as
//! long as the store, since every connection to `:memory:` is a database of its own.
//!
//! Memory is bounded by configuration, not by the size of the tables: each connection's
//! page cache is [`StoreOptions::sqlite_cache_kib`] and all of SQLite's allocations stay
//! under the soft heap limit [`StoreOptions::sqlite_memory_limit_kib`] ([`memory_used`]
//! reads them). Without these, each pooled connection filled SQLite's default 2 MB
//! cache as a backlog grew: the steps of resident memory a soak showed.

use std::str::FromStr;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::error::redact_url;
use crate::statements::Statements;
use crate::{Backend, ReadStats, StoreError, StoreOptions};

/// A store on SQLite.
pub struct SqliteStore {
    pool: SqlitePool,
    sql: Statements,
    stats: ReadStats,
    last_id: AtomicI64,
    /// The last token this store gave the commit mark (see `MessageStore::write`).
    commit_mark: AtomicI64,
    /// [`crate::MessageStore::stored_bytes`]: bytes of the `msg` column, changed only
    /// after a write commits. Signed so a net change is one `fetch_add`.
    stored_bytes: AtomicI64,
    /// The open lock file while [`crate::MessageStore::lock_exclusive`] holds it.
    lock: tokio::sync::Mutex<Option<std::fs::File>>,
    /// `<database file>.lock`; empty for `sqlite::memory:`.
    lock_target: String,
    /// Never configured on SQLite (the lock file is the lock).
    lease: crate::lease::LeaseSlot,
    /// Committed row counts kept until their container is written
    /// ([`crate::counts::CommittedCounts`]).
    counts: crate::counts::CommittedCounts,
    /// The consumer groups over topics it knows ([`crate::groups`]).
    groups: crate::groups::Groups,
}

/// The smallest page cache a connection gets, KiB, whatever
/// [`StoreOptions::sqlite_cache_kib`] says (SQLite needs a few pages to work).
pub const MIN_CACHE_KIB: u32 = 64;

/// Sets SQLite's process-wide soft heap limit ([`StoreOptions::sqlite_memory_limit_kib`];
/// 0 = none).
fn set_memory_limit(kib: u64) {
    let bytes = i64::try_from(kib.saturating_mul(1024)).unwrap_or(i64::MAX);
    // SAFETY: a plain setter of SQLite's global configuration, safe at any time and
    // from any thread (SQLite serializes it with its memory mutex).
    unsafe {
        libsqlite3_sys::sqlite3_soft_heap_limit64(bytes);
    }
}

/// SQLite's memory in this process, bytes: `(now, highest since start)` (SQLite's
/// `sqlite3_memory_used` and `sqlite3_memory_highwater`), page caches and prepared
/// statements of every connection included. For the soak's figures and the metrics.
pub fn memory_used() -> (u64, u64) {
    // SAFETY: read-only counters of SQLite's allocator, safe from any thread.
    let (now, peak) = unsafe {
        (
            libsqlite3_sys::sqlite3_memory_used(),
            libsqlite3_sys::sqlite3_memory_highwater(0),
        )
    };
    (now.max(0) as u64, peak.max(0) as u64)
}

impl SqliteStore {
    /// Opens `sqlite://PATH` or `sqlite::memory:`, creating the file and the schema
    /// (unless [`StoreOptions::create`] is false: then only an existing file).
    pub async fn open(url: &str, options: &StoreOptions) -> crate::Result<Self> {
        let invalid = |reason: String| StoreError::InvalidUrl {
            url: redact_url(url),
            reason,
        };
        let memory = url.contains(":memory:") || url.contains("mode=memory");
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(|e| invalid(e.to_string()))?
            .create_if_missing(options.create)
            .busy_timeout(Duration::from_secs(5))
            .synchronous(if options.sqlite_sync_full {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            })
            .foreign_keys(false)
            .pragma(
                "cache_size",
                format!("-{}", options.sqlite_cache_kib.max(MIN_CACHE_KIB)),
            );
        set_memory_limit(options.sqlite_memory_limit_kib);
        let connect_path = connect.get_filename().to_path_buf();
        let connect = if memory {
            connect
        } else if !options.create {
            if !connect.get_filename().exists() {
                return Err(StoreError::Missing {
                    url: redact_url(url),
                    reason: format!(
                        "{} does not exist (--create creates it)",
                        connect.get_filename().display()
                    ),
                });
            }
            connect.journal_mode(SqliteJournalMode::Wal)
        } else {
            if let Some(dir) = std::path::Path::new(connect.get_filename()).parent() {
                if !dir.as_os_str().is_empty() {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        invalid(format!("cannot create folder {}: {e}", dir.display()))
                    })?;
                }
            }
            connect.journal_mode(SqliteJournalMode::Wal)
        };
        let pool_options = SqlitePoolOptions::new()
            .acquire_timeout(Duration::from_millis(options.acquire_timeout_ms));
        let pool_options = if memory {
            pool_options
                .min_connections(1)
                .max_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        } else {
            pool_options.max_connections(options.max_connections.max(1))
        };
        let pool = pool_options
            .connect_with(connect)
            .await
            .map_err(|source| StoreError::Open {
                url: redact_url(url),
                source,
            })?;
        let lock_target = if memory {
            String::new()
        } else {
            format!("{}.lock", connect_path.display())
        };
        Self::from_pool(pool, options, &redact_url(url), lock_target).await
    }
}

impl SqliteStore {
    /// An exclusive lock on `<database file>.lock` (released by the OS if we die).
    async fn take_lock(&self) -> crate::Result<Option<std::fs::File>> {
        if self.lock_target.is_empty() {
            return Ok(None);
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock_target)
            .map_err(|e| StoreError::InvalidUrl {
                url: self.lock_target.clone(),
                reason: format!("cannot open the lock file: {e}"),
            })?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) => {
                Err(StoreError::Locked(self.lock_target.clone()))
            }
            Err(std::fs::TryLockError::Error(e)) => Err(StoreError::InvalidUrl {
                url: self.lock_target.clone(),
                reason: format!("cannot lock: {e}"),
            }),
        }
    }

    async fn release_lock(&self, file: std::fs::File) {
        let _ = file.unlock();
    }

    /// A standby's wait: no announcement on SQLite (a lock file).
    async fn wait_released(&self, within: std::time::Duration) {
        tokio::time::sleep(within).await;
    }

    /// Nothing to check: SQLite has no lease.
    async fn guard_write(&self, _: &mut sqlx::SqliteConnection) -> crate::Result<()> {
        Ok(())
    }
}

/// How the store opens its transactions on SQLite: writes take the write lock at once
/// (`IMMEDIATE`); a read is deferred, and its snapshot starts with its first statement
/// and lasts until it ends (WAL). No planner settings: the hot statements name their
/// index (`INDEXED BY`, see [`crate::statements`]).
pub(crate) const TRANSACTIONS: crate::sql::Transactions = crate::sql::Transactions {
    migration: "BEGIN IMMEDIATE",
    write: "BEGIN IMMEDIATE",
    read: "BEGIN",
    usual_plans: "",
    index_plans: "",
};

crate::sql::impl_sql_store!(
    SqliteStore,
    sqlx::Sqlite,
    Backend::Sqlite,
    TRANSACTIONS,
    crate::migrate::SQLITE
);
