//! Test harness shared by the workspace's tests (cargo feature `test-util`, enabled
//! only from dev-dependencies): a fresh store per test on every backend, and helpers
//! to fill and inspect it.
//!
//! SQLite always (a file in a temporary folder, so WAL and reopening are exercised).
//! PostgreSQL when `EBB_TEST_POSTGRES_URL` is set, each store in a schema of its own
//! (`ebb_test_<pid>_<n>`), so runs never see each other's rows.
//!
//! [`on_every_backend!`] writes one test per backend. Whether the PostgreSQL variant
//! runs is decided when the test crate is built: its build script (`build.rs`, through
//! `build/test_services.rs`) sets `cfg(ebb_test_postgres)` when `EBB_TEST_POSTGRES_URL`
//! or `CI` is set. Without it the variant is ignored, and `cargo test` says why; under
//! CI it runs, and fails if the URL is missing.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::{MessageStore, NewMessage, Payload, StoreOptions};

pub use crate::on_every_backend;

/// The environment variable with the PostgreSQL URL the tests use
/// (`postgres://USER@HOST:PORT/DB`).
pub const POSTGRES_ENV: &str = "EBB_TEST_POSTGRES_URL";

/// Where a test store lives, so it can be opened again ("restart").
pub struct TestStore {
    /// `sqlite://<temporary folder>/ebb.db`, or the PostgreSQL URL.
    pub url: String,
    /// What [`TestStore::open`] passes to [`crate::open`] (the schema on PostgreSQL).
    pub options: StoreOptions,
    _dir: Option<tempfile_dir::Dir>,
}

impl Drop for TestStore {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.drop_schema();
        }
    }
}

mod tempfile_dir {
    /// A temporary folder removed on drop (no extra crate needed).
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst),
        nanos % 100_000
    )
}

impl TestStore {
    /// A SQLite store in a new temporary folder (removed when this is dropped), with
    /// `synchronous=NORMAL` to spare the disk.
    pub fn sqlite() -> Self {
        let dir = std::env::temp_dir().join(format!("ebb-test-{}", unique()));
        std::fs::create_dir_all(&dir).unwrap();
        Self {
            url: format!("sqlite://{}/ebb.db", dir.display()),
            options: StoreOptions {
                sqlite_sync_full: false,
                ..StoreOptions::default()
            },
            _dir: Some(tempfile_dir::Dir(dir)),
        }
    }

    /// A SQLite store in the folder `dir`, which the test owns (it is not removed):
    /// a test that puts the store on a filesystem of its own (a small tmpfs).
    pub fn sqlite_in(dir: &std::path::Path) -> Self {
        Self {
            url: format!("sqlite://{}/ebb.db", dir.display()),
            options: StoreOptions {
                sqlite_sync_full: false,
                ..StoreOptions::default()
            },
            _dir: None,
        }
    }

    /// A PostgreSQL store at `EBB_TEST_POSTGRES_URL`, in a schema of its own (dropped
    /// when this is dropped, unless the test panicked).
    ///
    /// Panics when the variable is not set: a test that calls this is ignored unless
    /// built with `cfg(ebb_test_postgres)`, so it gets here without the URL only
    /// under CI (which must run it) or when asked to run ignored tests.
    pub fn postgres() -> Self {
        match std::env::var(POSTGRES_ENV) {
            Ok(url) if !url.is_empty() => Self {
                url,
                options: StoreOptions {
                    schema: Some(format!("ebb_test_{}", unique())),
                    ..StoreOptions::default()
                },
                _dir: None,
            },
            _ if std::env::var_os("CI").is_some() => {
                panic!("{POSTGRES_ENV} is not set: CI must run the PostgreSQL tests")
            }
            _ => panic!("{POSTGRES_ENV} is not set: the PostgreSQL tests need its URL"),
        }
    }

    /// Drops this test's PostgreSQL schema (at the end of the test), so runs leave
    /// nothing behind. A test that panics keeps its schema for a look; `.ci/run`
    /// drops those at the start of the next run.
    fn drop_schema(&self) {
        let Some(schema) = self.options.schema.clone() else {
            return;
        };
        let url = self.url.clone();
        // Drop runs inside the test's runtime: use a thread with a runtime of its own.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(&url).await.ok()?;
                // A test that panicked may have left a transaction of its broker
                // open on this thread's runtime, which cannot run while this waits:
                // give up after 5 s (the schema stays, `.ci/run` drops it later)
                // instead of hanging the whole run.
                sqlx::raw_sql(&format!(
                    "SET lock_timeout = '5s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                ))
                .execute(&mut conn)
                .await
                .ok()
            })
        })
        .join();
    }

    /// Opens the store (again, for a "restart"); panics if it cannot.
    pub async fn open(&self) -> Arc<dyn MessageStore> {
        crate::open(&self.url, &self.options)
            .await
            .unwrap_or_else(|e| panic!("open {}: {e}", self.url))
    }
}

/// Generates `<name>::sqlite` and `<name>::postgres` tests from an
/// `async fn(TestStore)`; the test attribute may be given first (default: a two-thread
/// tokio runtime), e.g. `on_every_backend!(#[actix_rt::test] a, b)`.
///
/// The PostgreSQL variant is `#[ignore]`d, with the reason, unless the calling crate
/// is built with `cfg(ebb_test_postgres)` (see the module documentation): a crate
/// that uses this macro needs the build script that sets it.
#[macro_export]
macro_rules! on_every_backend {
    (#[$attr:meta] $($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[$attr]
                async fn sqlite() {
                    super::$name($crate::test_util::TestStore::sqlite()).await;
                }

                #[$attr]
                #[cfg_attr(
                    not(ebb_test_postgres),
                    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
                )]
                async fn postgres() {
                    super::$name($crate::test_util::TestStore::postgres()).await;
                }
            }
        )*
    };
    ($($name:ident),* $(,)?) => {
        $crate::on_every_backend!(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] $($name),*
        );
    };
}

/// The wall clock, ms since the Unix epoch (what expirations are compared with).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A message on `container` with `expiration` (epoch ms, 0 = never) and priority 4.
pub fn message(container: &str, body: &str, expiration: i64) -> NewMessage {
    message_p(container, body, expiration, 4)
}

/// [`message`] with a priority (0..=9).
pub fn message_p(container: &str, body: &str, expiration: i64, priority: u8) -> NewMessage {
    NewMessage {
        container: container.to_string(),
        // As the broker's queue kind asks (`indexed_headers` in its kind table).
        indexed_headers: container.starts_with("queue://"),
        last_value: None,
        message_id: format!("ID:{body}"),
        expiration,
        priority,
        xid: None,
        payload: Arc::new(Payload {
            timestamp_ms: now_ms(),
            headers: vec![("body".into(), body.into())],
            body: body.as_bytes().to_vec().into(),
        }),
    }
}

/// A message on `container` in prepared transaction `xid` (invisible until committed).
pub fn prepared(container: &str, body: &str, expiration: i64, xid: &str) -> NewMessage {
    let mut m = message(container, body, expiration);
    m.xid = Some(xid.into());
    m
}

/// Creates durable subscription `client/name` on `container`, one mark for every
/// priority, and returns its key.
pub async fn subscribe_durable(
    store: &dyn MessageStore,
    container: &str,
    client: &str,
    name: &str,
) -> crate::SubscriptionKey {
    use crate::{MessageStoreExt, SubscriptionKey, WriteOp};
    let key = SubscriptionKey::new(client, name);
    store
        .write_one(WriteOp::Subscribe {
            container: container.into(),
            key: key.clone(),
            selector: None,
            prioritized: false,
        })
        .await
        .unwrap();
    key
}

/// Adds `count` messages expiring at `expiration` to `container`, in transactions of
/// 5,000, and returns their ids in order.
pub async fn fill(
    store: &dyn MessageStore,
    container: &str,
    count: usize,
    expiration: i64,
) -> Vec<i64> {
    use crate::MessageStoreExt;
    let mut ids = Vec::with_capacity(count);
    while ids.len() < count {
        let n = (count - ids.len()).min(5_000);
        let start = ids.len();
        let batch = (0..n)
            .map(|i| message(container, &format!("m{}", start + i), expiration))
            .collect();
        ids.extend(store.add_messages(batch).await.unwrap());
    }
    ids
}

/// An expiration already in the past.
pub const EXPIRED: i64 = 1;

/// A connection of its own to a test store's database, beside the store (its tables
/// have the default `ebb_` prefix), to check the store against what is really stored.
pub enum Raw {
    /// On a SQLite store.
    Sqlite(sqlx::SqliteConnection),
    /// On a PostgreSQL store, with `search_path` set to its schema.
    Postgres(sqlx::PgConnection),
}

impl Raw {
    /// Connects to `t`'s database (panics if it cannot).
    pub async fn connect(t: &TestStore) -> Self {
        use sqlx::Connection;
        if t.url.starts_with("sqlite:") {
            Raw::Sqlite(sqlx::SqliteConnection::connect(&t.url).await.unwrap())
        } else {
            let mut conn = sqlx::PgConnection::connect(&t.url).await.unwrap();
            if let Some(schema) = &t.options.schema {
                sqlx::raw_sql(&format!("SET search_path TO \"{schema}\""))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            Raw::Postgres(conn)
        }
    }

    /// `SUM` of the `msg` lengths of every message row: what
    /// [`MessageStore::stored_bytes`] must say.
    pub async fn stored_bytes(&mut self) -> u64 {
        let sql = "SELECT CAST(COALESCE(SUM(length(msg)), 0) AS BIGINT) FROM ebb_msgs";
        let n: i64 = match self {
            Raw::Sqlite(c) => sqlx::query_scalar(sql).fetch_one(c).await.unwrap(),
            Raw::Postgres(c) => sqlx::query_scalar(sql).fetch_one(c).await.unwrap(),
        };
        n as u64
    }

    /// A fresh `COUNT` of the committed rows of `container`: what
    /// [`MessageStore::count_committed`] must say, kept count or not.
    pub async fn count_committed(&mut self, container: &str) -> u64 {
        let sql = "SELECT COUNT(*) FROM ebb_msgs WHERE container = $1 AND xid IS NULL";
        let n: i64 = match self {
            Raw::Sqlite(c) => sqlx::query_scalar(sql)
                .bind(container)
                .fetch_one(c)
                .await
                .unwrap(),
            Raw::Postgres(c) => sqlx::query_scalar(sql)
                .bind(container)
                .fetch_one(c)
                .await
                .unwrap(),
        };
        n as u64
    }

    /// Clears the `hdrs` column of row `id`, as for a row written before migration 4.
    pub async fn clear_headers(&mut self, id: i64) {
        let sql = "UPDATE ebb_msgs SET hdrs = NULL WHERE id = $1";
        match self {
            Raw::Sqlite(c) => drop(sqlx::query(sql).bind(id).execute(c).await.unwrap()),
            Raw::Postgres(c) => drop(sqlx::query(sql).bind(id).execute(c).await.unwrap()),
        }
    }

    /// Inserts a message row with `id` behind the store's back (a body of `len` bytes).
    pub async fn insert_message(&mut self, id: i64, container: &str, len: usize) {
        let sql = "INSERT INTO ebb_msgs (id, container, msgid, msg) VALUES ($1, $2, 'raw', $3)";
        let body = vec![7u8; len];
        match self {
            Raw::Sqlite(c) => {
                sqlx::query(sql)
                    .bind(id)
                    .bind(container)
                    .bind(body)
                    .execute(c)
                    .await
                    .unwrap();
            }
            Raw::Postgres(c) => {
                sqlx::query(sql)
                    .bind(id)
                    .bind(container)
                    .bind(body)
                    .execute(c)
                    .await
                    .unwrap();
            }
        }
    }

    /// Deletes the message row `id` behind the store's back.
    pub async fn delete_message(&mut self, id: i64) {
        let sql = "DELETE FROM ebb_msgs WHERE id = $1";
        match self {
            Raw::Sqlite(c) => {
                sqlx::query(sql).bind(id).execute(c).await.unwrap();
            }
            Raw::Postgres(c) => {
                sqlx::query(sql).bind(id).execute(c).await.unwrap();
            }
        }
    }
}

/// The text of one of the store's statements on `backend`, with the default `ebb_`
/// prefix, for tests that check plans: `read_pending`, `read_pending_priority`,
/// `read_pending_merged`, `browse`, `read_queue`, `read_held`, `read_expired`, `read_expired_tie` and `read_expired_later` (the two
/// statements of `read_expired_after`), `read_expired_keys_tie` and `read_expired_keys_later`
/// (the same without bodies), `read_prepared_range`, `count_prepared_range`, `advance_window`,
/// `advance_window_priority`, `cleanup`, `cleanup_priority`, `expire_queue`. The binds
/// of each are documented on its field in `statements.rs`. Panics on another name.
pub fn statement(backend: crate::Backend, name: &str) -> String {
    let s = crate::statements::Statements::new("ebb_", backend);
    match name {
        "read_pending" => s.read_pending,
        "read_pending_priority" => s.read_pending_priority,
        "read_pending_merged" => s.read_pending_merged,
        "browse" => s.browse,
        "read_queue" => s.read_queue,
        "read_held" => s.read_held,
        "read_prepared_range" => s.read_prepared_range,
        "count_prepared_range" => s.count_prepared_range,
        "read_expired" => s.read_expired,
        "read_expired_tie" => s.read_expired_after[0].clone(),
        "read_expired_later" => s.read_expired_after[1].clone(),
        "read_expired_keys_tie" => s.read_expired_keys_after[0].clone(),
        "read_expired_keys_later" => s.read_expired_keys_after[1].clone(),
        "advance_window" => s.advance_window[0].clone(),
        "advance_window_priority" => s.advance_window[1].clone(),
        "cleanup" => s.cleanup[0].clone(),
        "cleanup_priority" => s.cleanup[1].clone(),
        "expire_queue" => s.expire_queue,
        "prepared_ids_many" => s.prepared_ids_many,
        "renumber_many" => s.renumber_many,
        "redelivered_many" => s.redelivered_many,
        other => panic!("no statement {other} for plan tests"),
    }
}

/// The text that opens a read (`write == false`) or write transaction of the store on
/// `backend`, planner settings included: a plan test runs `EXPLAIN` after it, so it sees
/// the plan the store gets.
pub fn transaction_begin(backend: crate::Backend, write: bool) -> &'static str {
    let tx = match backend {
        crate::Backend::Sqlite => crate::sqlite::TRANSACTIONS,
        crate::Backend::Postgres => crate::postgres::TRANSACTIONS,
    };
    if write {
        tx.write
    } else {
        tx.read
    }
}

/// The one-statement `read_pending` the store ran before issue 11: the mark as a
/// sub-select correlated on each row's priority, and individual acks matched on the
/// subscription and id alone. The conformance suite compares the bounded reads with it.
/// Binds: `$1` container, `$2` after id, `$3` client id, `$4` subscription name, `$5`
/// limit, and with `priority` `$6` the priority (INTEGER).
pub fn reference_read_pending(priority: bool) -> String {
    let prio = if priority { "AND m.priority = $6" } else { "" };
    format!(
        "SELECT m.id FROM ebb_msgs m \
         WHERE m.container = $1 AND m.id > $2 AND m.xid IS NULL {prio} \
           AND m.id > (SELECT a.last_acked_id FROM ebb_acks a \
                       WHERE a.container = $1 AND a.client_id = $3 AND a.sub_name = $4 \
                         AND (a.priority < 0 OR a.priority = m.priority)) \
           AND NOT EXISTS (SELECT 1 FROM ebb_indacks i \
                           WHERE i.container = $1 AND i.client_id = $3 AND i.sub_name = $4 \
                             AND i.msg_id = m.id) \
         ORDER BY m.id LIMIT $5"
    )
}

impl Raw {
    /// Ids `reference_read_pending` returns (the old statement, run on this connection).
    pub async fn reference_pending(
        &mut self,
        container: &str,
        key: &crate::SubscriptionKey,
        after_id: i64,
        priority: Option<u8>,
        limit: u32,
    ) -> Vec<i64> {
        let sql = reference_read_pending(priority.is_some());
        macro_rules! run {
            ($conn:expr) => {{
                let query = sqlx::query_scalar(&sql)
                    .bind(container)
                    .bind(after_id)
                    .bind(&key.client_id)
                    .bind(&key.subscription_name)
                    .bind(i64::from(limit));
                let query = match priority {
                    Some(p) => query.bind(i32::from(p)),
                    None => query,
                };
                query.fetch_all($conn).await.unwrap()
            }};
        }
        match self {
            Raw::Sqlite(c) => run!(c),
            Raw::Postgres(c) => run!(c),
        }
    }
}
