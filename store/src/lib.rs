//! # ebb-store: Ebb's SQL message store
//!
//! Everything Ebb keeps on disk goes through this crate: the schema and its migrations
//! (one folder per backend, `migrations/{sqlite,postgres}`), every SQL statement
//! ([`statements`]), and the async [`MessageStore`] API. It knows nothing of actors or
//! STOMP; the store actor in `ebb-actors` is its only writer in a running broker.
//!
//! Map of the crate:
//! - [`MessageStore`]: the API; [`open`] picks the backend from the URL.
//! - [`model`]: messages, durable subscriptions, the writes ([`WriteOp`]) and what each
//!   answers ([`WriteOutcome`], read through its typed accessors such as
//!   [`WriteOutcome::added`]: a wrong kind of answer is an error, never a panic).
//! - [`encoding`]: the stored body format (a format byte, then postcard).
//! - [`statements`]: every SQL text, made once per table prefix and backend.
//! - [`groups`]: consumer groups over a topic's rows, stored once.
//! - `sql` (private): the one implementation of the API, instantiated for
//!   [`sqlite::SqliteStore`] and [`postgres::PgStore`]; one method per write, and
//!   `apply` only dispatches a batch of writes inside one transaction.
//! - `migrate` (private): the migrations of each backend.
//!
//! In a running broker, writes reach the store through the store actor
//! (`ebb_actors::StoreHandle`), which batches writes of many callers into one
//! transaction (group commit) and answers each caller with its own typed value.
//!
//! Queues keep their messages in the same table as topics (container `queue://NAME`),
//! without marks: acking deletes the row ([`WriteOp::Remove`]), expiry deletes expired
//! rows chosen by expiration time ([`WriteOp::ExpireQueue`], or
//! [`MessageStore::read_expired`] then [`WriteOp::DeadLetter`] for a dead-letter queue).
//! [`MessageStore::stored_bytes`] is the store usage every write keeps exact. A queue
//! message whose redelivery waits (a queue's back-off, ActiveMQ's `redeliveryDelay`)
//! stays in its row: [`WriteOp::Redelivered`] with `hold_until` writes its count and
//! its due time (the `due` column, migration 0012) in one `UPDATE`; the queue's cursor
//! reads skip it ([`MessageStore::read_queue`]) and the queue reads it back when due
//! ([`MessageStore::read_held`], the partial index `msgs_didx`).
//!
//! A consumer group (a virtual topic's `Consumer.A.VirtualTopic.X` queue) is a queue
//! whose messages are its topic's rows, stored once for every group ([`groups`]): it
//! is bound by a durable subscription of the topic under [`GROUP_CLIENT_ID`], and
//! every queue read and write above on its container merges its own rows with the
//! topic's rows it still needs (an ack acks for it; its failed deliveries and held
//! redeliveries are rows of `group_deliveries`, migration 0013).
//!
//! Three promises hold on both backends, and the conformance suite (`tests/`) checks them:
//! 1. **Every read is bounded in SQL.** No statement returns a number of rows that grows
//!    with the backlog; [`ReadStats`] counts the message rows really fetched (and the
//!    expiry keys fetched without a body, [`MessageStore::read_expired_keys_after`]).
//! 2. **A high-water mark never passes an un-acked message, and never moves back.**
//!    Expiry returns only the run of expired messages directly after a subscription's
//!    mark ([`MessageStore::recover_expired`]), the fix for ActiveMQ's JDBC store, where
//!    acking an expired message moved `LAST_ACKED_ID` past live ones. Expired messages
//!    further on ([`MessageStore::read_expired_after`]) are acked individually
//!    ([`WriteOp::Ack`] keeps them above the mark) and deleted once every subscription
//!    is done with them ([`WriteOp::Reclaim`]). How far a mark may move is worked out
//!    by the database, a window of at most [`statements::ADVANCE_WINDOW`] rows after it
//!    at a time, answered in one row; cleanup ([`WriteOp::Cleanup`]) goes on from the
//!    id where the batch before stopped.
//! 3. **The reads a drain runs per page are index ranges whatever the statistics.**
//!    `read_pending`, `browse`, `read_expired` and the writes' mark advance, cleanup
//!    and queue expiry are each a range of one index in the order it gives, with no
//!    sub-select in the range, written so that no other index and no sort can serve
//!    them (the index's order, by a row comparison on its columns where needed, on
//!    PostgreSQL, whose transactions also price sorts and sequential scans out;
//!    `INDEXED BY` on SQLite): a table with
//!    no statistics (autovacuum off, or bulk-loaded before autoanalyze) or stale ones
//!    gets the same plan ([`statements`] has the notes and the figures).

mod counts;
pub mod detached;
pub mod encoding;
mod error;
pub mod groups;
mod lease;
mod migrate;
pub mod model;
pub mod postgres;
pub mod proxy;
mod sql;
pub mod sqlite;
pub mod statements;
#[cfg(feature = "test-util")]
pub mod test_util;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use error::{redact_url, Result, StoreError};
pub use groups::GROUP_CLIENT_ID;
pub use model::*;

/// The xid prefix of scheduled messages (and of redeliveries held back by a build
/// before migration 0012, which held them as scheduled messages; a hold now stays in
/// its row, [`WriteOp::Redelivered`]). Such a prepared row is a message the
/// broker has already accepted: unlike a transaction's, it has its place in arrival
/// order (its id, or its `arrived` column once an older build's redelivery held it: the
/// release gives it a new id, not a new arrival), so a newer message with its last-value key deletes
/// it ([`NewMessage::last_value`]) rather than letting it come back later as the
/// newest, and a message moved in that arrived before it is superseded
/// ([`WriteOp::DeadLetter`]).
pub const SCHEDULED_XID_PREFIX: &str = "sched:";

/// Which database a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// SQLite, the embedded default.
    #[default]
    Sqlite,
    Postgres,
}

/// [`StoreOptions::sqlite_cache_kib`]'s default: 1 MiB per connection.
pub const DEFAULT_SQLITE_CACHE_KIB: u32 = 1024;

/// [`StoreOptions::sqlite_memory_limit_kib`]'s default: 8 MiB for all of SQLite.
pub const DEFAULT_SQLITE_MEMORY_LIMIT_KIB: u64 = 8 * 1024;

/// How to open a store. `Default` is what `ebb` uses.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Prefix of every table name (default `ebb_`: `ebb_msgs`, `ebb_acks`, ...), as
    /// ActiveMQ's `tablePrefix`. ASCII letters, digits and `_` only.
    pub table_prefix: String,
    /// PostgreSQL only: the schema to create (if missing) and use, so the store touches
    /// nothing else in the database. `None` uses the connection's `search_path`.
    pub schema: Option<String>,
    /// Connections in the pool (reads run on the pool; writes on one connection at a
    /// time through the store actor). `sqlite::memory:` always uses 1.
    pub max_connections: u32,
    /// How long a call waits for a connection before it fails, ms. This is also how
    /// long a write waits for a database that went away.
    pub acquire_timeout_ms: u64,
    /// SQLite only: `synchronous=FULL` (true, default: a commit survives power loss) or
    /// `NORMAL` (a commit survives a process crash).
    pub sqlite_sync_full: bool,
    /// SQLite only: the page cache of each pooled connection, KiB (`PRAGMA cache_size =
    /// -N`; SQLite's own default is 2,000). Default [`DEFAULT_SQLITE_CACHE_KIB`]. The
    /// cache fills as the tables grow, one connection at a time as the pool opens
    /// them: without a bound it is the step resident memory takes as a backlog grows.
    pub sqlite_cache_kib: u32,
    /// SQLite only: a bound on all the memory SQLite allocates in this process (page
    /// caches, prepared statements, sorts), KiB, set with `sqlite3_soft_heap_limit64`:
    /// past it SQLite reuses its own cache pages instead of allocating more. It is
    /// soft (a statement that needs more still runs) and process-wide (the last store
    /// opened sets it). Default [`DEFAULT_SQLITE_MEMORY_LIMIT_KIB`]; 0 = no limit.
    pub sqlite_memory_limit_kib: u64,
    /// PostgreSQL only: hold the store by a lease instead of a session lock (high
    /// availability: an active broker and standbys on one database; see
    /// [`LeaseOptions`]). `None` (the default): the session-level advisory lock, which
    /// the server releases when the holder's connection ends.
    pub lease: Option<LeaseOptions>,
    /// Create what is missing and migrate (true, default: a broker's store): the SQLite
    /// file and its folder, the PostgreSQL schema, the tables. False opens only a store
    /// that exists at the schema version this build expects, and changes nothing
    /// (`ebb check` without `--create`): otherwise [`StoreError::Missing`].
    pub create: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            table_prefix: "ebb_".into(),
            schema: None,
            max_connections: 8,
            acquire_timeout_ms: 10_000,
            sqlite_sync_full: true,
            sqlite_cache_kib: DEFAULT_SQLITE_CACHE_KIB,
            sqlite_memory_limit_kib: DEFAULT_SQLITE_MEMORY_LIMIT_KIB,
            create: true,
            lease: None,
        }
    }
}

/// The lease lock of a PostgreSQL store, as ActiveMQ's lease database locker and
/// Artemis's JDBC shared store: one row in `{prefix}lock` names the active broker
/// (`holder`) and when its lease ends, by the **database's** clock. The active broker
/// renews it every `renew_ms` on a connection of its own; every write transaction
/// first checks, under a share lock on that row, that this store still holds an
/// unexpired lease, so a broker that lost it commits nothing more, however late it
/// notices. A renewal that fails, or does not succeed in time, makes the store report
/// [`LeaseState::Lost`] one `renew_ms` before the lease could expire: the broker then
/// fences itself (stops serving) before a standby may take over, which it does only
/// once the lease has expired by the database's clock, or at once when the holder
/// released it (a graceful shutdown, [`MessageStore::close`]).
///
/// A broker with a lease and one with the advisory lock exclude each other too: the
/// lease is taken inside a transaction that also takes the advisory lock's key, and a
/// broker with the advisory lock refuses a store whose lease is unexpired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseOptions {
    /// How long a lease lasts after each renewal, ms (Artemis's
    /// `jdbc-lock-expiration`, 20 s there; ebb's default 10,000).
    pub lease_ms: u64,
    /// How often the holder renews it, ms (Artemis's `jdbc-lock-renew-period`, 2 s;
    /// ebb's default 2,000); at most a third of `lease_ms`, so that two renewals can
    /// fail before the broker fences itself.
    pub renew_ms: u64,
    /// Who holds it, for people and logs (`host/pid/...`): unique to each process, so
    /// a restarted broker never takes over a lease its dead predecessor held before
    /// that lease expired.
    pub holder: String,
}

/// A lease's times out of range ([`LeaseOptions::new`]), both in ms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseRangeError {
    /// `renew_ms` below [`MIN_RENEW_MS`] or above a third of `lease_ms`.
    #[error("renew_ms = {renew_ms} must be at least {MIN_RENEW_MS} and at most a third of lease_ms = {lease_ms}")]
    Renew {
        /// The lease, ms.
        lease_ms: u64,
        /// The renewal period, ms.
        renew_ms: u64,
    },
    /// `lease_ms` above [`MAX_LEASE_MS`].
    #[error("lease_ms = {lease_ms} is above the largest, {MAX_LEASE_MS} (1 hour)")]
    Lease {
        /// The lease, ms.
        lease_ms: u64,
    },
}

impl LeaseOptions {
    /// A lease of `lease_ms` renewed every `renew_ms`, held under a name unique to this
    /// process (host name, process id, start time). Errors ([`LeaseRangeError`]):
    /// which value is out of range (`renew_ms` below [`MIN_RENEW_MS`] or more than a
    /// third of `lease_ms`; `lease_ms` above [`MAX_LEASE_MS`]).
    pub fn new(lease_ms: u64, renew_ms: u64) -> std::result::Result<Self, LeaseRangeError> {
        if renew_ms < MIN_RENEW_MS || renew_ms.saturating_mul(3) > lease_ms {
            return Err(LeaseRangeError::Renew { lease_ms, renew_ms });
        }
        if lease_ms > MAX_LEASE_MS {
            return Err(LeaseRangeError::Lease { lease_ms });
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "host".into());
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Ok(Self {
            lease_ms,
            renew_ms,
            holder: format!("{host}/{}/{started}", std::process::id()),
        })
    }
}

/// The least `renew_ms` of a lease ([`LeaseOptions::new`]), ms.
pub const MIN_RENEW_MS: u64 = 10;
/// The longest `lease_ms` ([`LeaseOptions::new`]), ms: 1 hour.
pub const MAX_LEASE_MS: u64 = 3_600_000;

/// Whether a store's lease is still held ([`MessageStore::lease_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseState {
    /// Held and renewed in time.
    Held,
    /// Lost (the text says why: renewals failed until the fence time, or another
    /// broker holds it now): every later write fails with [`StoreError::LeaseLost`],
    /// and the broker must stop serving. It never comes back.
    Lost(String),
}

/// The renewals of a lease this store holds ([`MessageStore::lease_renewals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseRenewals {
    /// Renewals that succeeded since the lease was taken.
    pub count: u64,
    /// The last one's round trip, µs.
    pub last_us: u64,
    /// The longest round trip so far, µs.
    pub max_us: u64,
}

/// The answer to [`MessageStore::try_lock`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockAttempt {
    /// This store holds the lock now (also when it held it already).
    Acquired,
    /// Another broker holds it; the text names it as well as the store can (the lock
    /// file, the lease's holder and when the lease ends).
    Held(String),
}

/// Counters of what the store really fetched and wrote; cheap, always on.
#[derive(Debug, Default)]
pub struct ReadStats {
    message_rows: AtomicU64,
    body_bytes: AtomicU64,
    key_rows: AtomicU64,
    write_transactions: AtomicU64,
    write_ops: AtomicU64,
    in_doubt_commits: AtomicU64,
    committed_counts: AtomicU64,
}

/// A copy of [`ReadStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Rows of the message table fetched with their body, since the store opened.
    pub message_rows: u64,
    /// Stored body bytes fetched (the encoded `msg` column).
    pub body_bytes: u64,
    /// Rows of the message table fetched without their body: id, expiration and
    /// priority ([`MessageStore::read_expired_keys_after`]).
    pub key_rows: u64,
    /// Write transactions committed.
    pub write_transactions: u64,
    /// Write operations committed (a transaction holds one or more).
    pub write_ops: u64,
    /// Commits whose answer was lost (the connection broke) and that were found
    /// committed, by their rows or by the commit mark, so answered as committed.
    pub in_doubt_commits: u64,
    /// `COUNT` statements run by [`MessageStore::count_committed`] and
    /// [`MessageStore::count_committed_many`] (a count kept since the container's last
    /// write runs none; a batch of up to 32 containers runs one).
    pub committed_counts: u64,
}

impl ReadStats {
    pub(crate) fn fetched(&self, rows: u64, bytes: u64) {
        self.message_rows.fetch_add(rows, Ordering::Relaxed);
        self.body_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn fetched_keys(&self, rows: u64) {
        self.key_rows.fetch_add(rows, Ordering::Relaxed);
    }

    pub(crate) fn in_doubt_commit_settled(&self) {
        self.in_doubt_commits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn counted_committed(&self) {
        self.committed_counts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn committed(&self, ops: u64) {
        self.write_transactions.fetch_add(1, Ordering::Relaxed);
        self.write_ops.fetch_add(ops, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            message_rows: self.message_rows.load(Ordering::Relaxed),
            body_bytes: self.body_bytes.load(Ordering::Relaxed),
            key_rows: self.key_rows.load(Ordering::Relaxed),
            write_transactions: self.write_transactions.load(Ordering::Relaxed),
            write_ops: self.write_ops.load(Ordering::Relaxed),
            in_doubt_commits: self.in_doubt_commits.load(Ordering::Relaxed),
            committed_counts: self.committed_counts.load(Ordering::Relaxed),
        }
    }
}

/// The store API. Implemented once (`sql`) for SQLite and PostgreSQL.
///
/// Writes go through [`MessageStore::write`], which applies a batch in one transaction;
/// in a broker only the store actor calls it, one batch at a time, so ids are committed
/// in the order they were assigned. Reads may be called by anyone at any time.
#[async_trait::async_trait]
pub trait MessageStore: Send + Sync + 'static {
    /// Which database this is.
    fn backend(&self) -> Backend;

    /// What this store has fetched and written so far.
    fn stats(&self) -> &ReadStats;

    /// Applies `ops` in one transaction, in order, and returns one outcome per op. On an
    /// error nothing of the batch is committed. Ids of added messages (by
    /// [`WriteOp::Add`] and [`WriteOp::DeadLetter`]) are assigned in op order and are
    /// higher than every id assigned before.
    ///
    /// Runs of consecutive ops of one kind go into multi-row statements, with the same
    /// outcomes as one by one: adds (multi-row inserts), commits (one read of their
    /// rows by the xid index and one renumbering per
    /// [`statements::ID_LIST_MAX`] rows), [`WriteOp::Redelivered`] of one container
    /// (one update) and [`WriteOp::DeadLetter`] (one delete per source container, one
    /// insert). A scheduler page releases many messages at once and a consumer refuses
    /// many, so these runs are common.
    ///
    /// A commit whose answer is lost (the connection broke after the server got the
    /// `COMMIT`) is settled, not guessed: a batch that assigned new ids committed if
    /// rows with those ids exist; any other batch (acks, deletes, expiry) sets the
    /// one-row commit mark to a token of its own in the same transaction, and committed
    /// if the mark holds it. Settled batches are answered `Ok` and counted in
    /// [`StatsSnapshot::in_doubt_commits`].
    ///
    /// Errors: [`StoreError::Database`] (the database failed or went away),
    /// [`StoreError::Closed`].
    async fn write(&self, ops: Vec<WriteOp>) -> Result<Vec<WriteOutcome>>;

    /// The durable subscription `key` on `container`, if it exists.
    async fn find_subscription(
        &self,
        container: &str,
        key: &SubscriptionKey,
    ) -> Result<Option<DurableSubscription>>;

    /// Up to `limit` containers (in name order, after `after`; `""` = from the start)
    /// holding a durable subscription `key`. A key names one subscription across the
    /// broker (JMS): one container, or, for a subscription to a wildcard destination,
    /// the container of its definition and one per matching topic it has met (DUR-11).
    /// Cost: the key's rows in `acks_kidx`.
    async fn find_subscription_containers(
        &self,
        key: &SubscriptionKey,
        after: &str,
        limit: u32,
    ) -> Result<Vec<String>>;

    /// How many durable subscriptions client id `client_id` has, over every
    /// destination (a wildcard subscription counts once per topic it holds a backlog
    /// on, and once for its definition), counted up to `limit` (one bounded range of
    /// `acks_kidx`): what a limit per client id needs to know.
    async fn count_client_subscriptions(&self, client_id: &str, limit: u32) -> Result<u64>;

    /// Up to `limit` containers of the message table `c` with `after < c < below`, in
    /// name order (the destinations that hold messages, for a wildcard consumer to
    /// find the queues it matches). Cost: one seek of `msgs_cidx` per container
    /// returned, whatever the number of messages.
    async fn list_containers(&self, after: &str, below: &str, limit: u32) -> Result<Vec<String>>;

    /// Up to `limit` durable subscriptions whose container `c` has `from <= c < below`,
    /// after `after` (`(container, key)`; `None` = from the start) in `(container,
    /// client_id, subscription_name)` order, without their marks (`marks` is empty):
    /// the definitions of the subscriptions to wildcard destinations, which the broker
    /// keeps in containers of their own. Cost: one range of the primary key.
    async fn list_subscriptions_between(
        &self,
        from: &str,
        below: &str,
        after: Option<(&str, &SubscriptionKey)>,
        limit: u32,
    ) -> Result<Vec<DurableSubscription>>;

    /// Up to `limit` durable subscriptions of `container` after `after` in
    /// `(client_id, subscription_name)` order (keyset pagination; `None` = from the
    /// start).
    async fn list_subscriptions(
        &self,
        container: &str,
        after: Option<&SubscriptionKey>,
        limit: u32,
    ) -> Result<Vec<DurableSubscription>>;

    /// Up to `limit` messages a durable subscription has not acked, with `id > after_id`,
    /// in id order: above its mark (with per-priority marks, the mark of the message's
    /// priority), not acked individually (under that mark), not in a prepared
    /// transaction. With `priority`, only messages of that priority. Fewer than `limit`
    /// only when no more is pending; none for a subscription that does not exist. An
    /// online subscription pages its backlog with this, `after_id` being its cursor.
    ///
    /// Cost, whatever the table's statistics: in one read transaction (one snapshot),
    /// the subscription's marks (at most 11 rows of its primary key), then one index
    /// range after `max(after_id, mark)`: `(container, id)`, or `(container, priority,
    /// id)` for one priority, or ten of those merged by id for every priority with
    /// per-priority marks. The range stops at the `limit`-th pending message, so a page
    /// examines `limit + S` index entries (`+ 10` merged), where `S` counts the
    /// messages in the page's id span that are prepared or acked individually: each
    /// costs one primary-key probe of the individual acks and no body read, and a
    /// caller paging with its cursor passes each of them once per drain. At most
    /// `limit` bodies are fetched ([`ReadStats`]). `S` has no cap of its own: a page cut
    /// short after a fixed number of skipped rows would look like the end of the
    /// backlog to the caller (a durable cursor turns live on a short read).
    async fn read_pending(
        &self,
        container: &str,
        key: &SubscriptionKey,
        after_id: i64,
        priority: Option<u8>,
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>>;

    /// A page of a selector's scan of queue `container`: its messages with
    /// `after_id < id <= upto_id`, in id order, not in a prepared transaction, whose
    /// headers may match `filter`: for each `(name, values)`, the message's first
    /// header `name` is one of `values` (tested in SQL on the `hdrs` column; a row
    /// written before that column existed is returned, to be tested by the caller; a
    /// name with `"` or `\` in it is not tested in SQL, nor is an empty value list). At
    /// most `limit` rows. Cost: one range of `msgs_cidx` over the id window, so a page
    /// examines at most the container's rows in `upto_id - after_id` ids, whatever
    /// the filter keeps; a caller bounds the window. The caller still evaluates its
    /// whole selector on what comes back: `filter` only says what cannot match.
    async fn scan_matching(
        &self,
        container: &str,
        after_id: i64,
        upto_id: i64,
        filter: &[(String, Vec<String>)],
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>>;

    /// A page of queue `container` for its cursor: [`MessageStore::browse`] without the
    /// messages held back in their rows for a redelivery ([`WriteOp::Redelivered`]
    /// with `hold_until`; the queue reads those with [`MessageStore::read_held`]). The
    /// same one range of `msgs_cidx`, at most `limit` rows; a held row it passes costs
    /// one index entry and no body. The default is `browse` (a store that holds
    /// nothing back).
    ///
    /// Errors: [`StoreError::Database`], [`StoreError::Corrupt`], [`StoreError::Closed`].
    async fn read_queue(
        &self,
        container: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>> {
        self.browse(container, after_id, limit).await
    }

    /// Up to `limit` messages of queue `container` held back in their rows for a
    /// redelivery ([`WriteOp::Redelivered`] with `hold_until`) that are due at
    /// `now_ms` (epoch ms) and come after position `after` (`(due, id)` of the last
    /// one a page before returned; `(i64::MIN, i64::MIN)` for the first), in `(due,
    /// id)` order, with their due times and failure counts: one range of the partial
    /// index `msgs_didx`, `LIMIT` in SQL; counted in [`ReadStats`]. A short page also
    /// says when the next held message is due (one more index entry, no body). A row
    /// keeps its due time once it is due, so a queue pages on from its position: from
    /// the start again only when it starts (a crash or a restart then finds every
    /// held message). The default holds nothing.
    ///
    /// Errors: [`StoreError::Database`], [`StoreError::Corrupt`], [`StoreError::Closed`].
    async fn read_held(
        &self,
        container: &str,
        after: (i64, i64),
        now_ms: i64,
        limit: u32,
    ) -> Result<HeldPage> {
        let _ = (container, after, now_ms, limit);
        Ok(HeldPage::default())
    }

    /// Up to `limit` prepared messages (of any container) whose xid is at least `from`
    /// and below `to`, in xid order, with their xids: one range of the xid index,
    /// stopped at `limit` in SQL. The scheduler names its messages' transactions by
    /// due time (`sched:<due ms, 20 digits>:...`), so this reads the due ones, oldest
    /// first, a page at a time.
    async fn read_prepared_range(
        &self,
        from: &str,
        to: &str,
        limit: u32,
    ) -> Result<Vec<PreparedMessage>>;

    /// How many prepared messages have an xid at least `from` and below `to`, counted
    /// up to `limit` (a count of `limit` means "at least"): the same range of the xid
    /// index as [`MessageStore::read_prepared_range`], without bodies, stopped at
    /// `limit` in SQL. The scheduler's backlog.
    async fn count_prepared_range(&self, from: &str, to: &str, limit: u32) -> Result<u64>;

    /// Up to `limit` messages of `container` with `id > after_id`, in id order, that are
    /// not in a prepared transaction. Never acks or expires anything.
    async fn browse(
        &self,
        container: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>>;

    /// For each of `subscriptions` (that exists on `container`), the run of expired
    /// messages directly after its mark (per priority with per-priority marks), stopping
    /// at the first message that is not expired at `now_ms` (epoch ms) or belongs to a
    /// prepared transaction; messages acked individually neither stop the run nor
    /// count. At most `limit` message rows for the whole call, in id order; a message
    /// several subscriptions need is loaded once and shared (`Arc`).
    ///
    /// Acking what this returns (with [`WriteOp::Ack`]) moves each mark over expired
    /// messages only: never over a live one. Two bounded statements, as apache/activemq
    /// pull request #2630 does for the JDBC topic store; when nothing is expired the
    /// second (the only one that reads bodies) is not run.
    async fn recover_expired(
        &self,
        container: &str,
        subscriptions: &[SubscriptionKey],
        now_ms: i64,
        limit: u32,
    ) -> Result<ExpiredPage>;

    /// Up to `limit` messages of `container` that are expired at `now_ms` (epoch ms;
    /// `0 < expiration <= now_ms`) and not prepared, with their bodies, ordered by
    /// expiration, then id: the rows [`WriteOp::ExpireQueue`] would delete, in the
    /// same order. Wherever they sit in the queue: behind messages with a long TTL or
    /// none (ActiveMQ AMQ-6967, case EXP-02). Reads nothing else; counted in
    /// [`ReadStats`]. A queue whose expired messages go to a dead-letter queue reads
    /// them with this and moves each with [`WriteOp::DeadLetter`]; when that returns
    /// `None` another writer took the message first.
    ///
    /// Errors: [`StoreError::Database`], [`StoreError::Corrupt`] (a stored body cannot
    /// be decoded), [`StoreError::Closed`].
    async fn read_expired(
        &self,
        container: &str,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>>;

    /// Up to `limit` messages of `container` expired at `now_ms` (epoch ms) and not
    /// prepared that come after `after` in `(expiration, id)` order: a topic's expiry
    /// pages through its expired messages with it, wherever they sit behind live ones,
    /// passing `(expiration, id)` of the last message of the page before (`(0,
    /// i64::MAX)` for the first page: every expiration is above 0). Two ranges of the
    /// `(container, expiration, id)` index, whatever the backlog; counted in
    /// [`ReadStats`].
    ///
    /// Errors: [`StoreError::Database`], [`StoreError::Corrupt`], [`StoreError::Closed`].
    async fn read_expired_after(
        &self,
        container: &str,
        now_ms: i64,
        after: (i64, i64),
        limit: u32,
    ) -> Result<Vec<Arc<StoredMessage>>>;

    /// The same page as [`MessageStore::read_expired_after`], without the bodies: id,
    /// expiration and priority of each message, all a topic's expiry page needs when
    /// none of its subscriptions has a selector. The same two index ranges; a body is
    /// neither read (SQLite leaves its overflow pages alone) nor decoded; counted in
    /// [`StatsSnapshot::key_rows`]. The default reads the whole messages.
    ///
    /// Errors: as [`MessageStore::read_expired_after`].
    async fn read_expired_keys_after(
        &self,
        container: &str,
        now_ms: i64,
        after: (i64, i64),
        limit: u32,
    ) -> Result<Vec<ExpiredKey>> {
        let page = self
            .read_expired_after(container, now_ms, after, limit)
            .await?;
        Ok(page.iter().map(|m| ExpiredKey::of(m)).collect())
    }

    /// The earliest expiration (epoch ms) of `container`'s messages, prepared and held
    /// ones included; `None` when none has one. One row of the expiration index
    /// (`LIMIT 1`). A sleeping destination is woken for it
    /// (`inactive_timeout_before_sleep`).
    async fn next_expiration(&self, container: &str) -> Result<Option<i64>>;

    /// Whether `container` holds any message with an expiration (one indexed row at
    /// most, [`Self::next_expiration`]). A destination without one does no expiry work.
    async fn has_expiring(&self, container: &str) -> Result<bool> {
        Ok(self.next_expiration(container).await?.is_some())
    }

    /// Whether the store holds any message row of `container`, those of open
    /// transactions and scheduled ones included: one row, `LIMIT 1`.
    async fn has_rows(&self, container: &str) -> Result<bool>;

    /// How many message rows `container` holds (prepared ones included).
    async fn count_messages(&self, container: &str) -> Result<u64>;

    /// How many committed message rows `container` holds: what waits for delivery,
    /// without the rows of open transactions and scheduled messages (prepared rows).
    /// The SQL stores keep each container's count from one `COUNT` until a write of
    /// theirs changes the container (see the `counts` module): asked again with no
    /// write in between, it runs no statement ([`StatsSnapshot::committed_counts`]).
    async fn count_committed(&self, container: &str) -> Result<u64>;

    /// [`Self::count_committed`] of each of `containers`, in their order: the SQL
    /// stores answer kept counts from memory, count a virtual topic or shared
    /// subscription group's rows as [`Self::count_committed`] does (a statement or
    /// two each), and count the rest with one statement per 32 containers (a
    /// `GROUP BY` over an `IN` list, at most 32 rows), so a
    /// reader with many containers to count (the broker's stats reading after a
    /// fill of 100,000 queues) pays a round trip per batch, not per container. The
    /// default asks [`Self::count_committed`] for each.
    ///
    /// Errors: as [`Self::count_committed`]; the counts already kept stay kept.
    async fn count_committed_many(&self, containers: &[String]) -> Result<Vec<u64>> {
        let mut counts = Vec::with_capacity(containers.len());
        for container in containers {
            counts.push(self.count_committed(container).await?);
        }
        Ok(counts)
    }

    /// The containers whose committed rows this store's writes may have changed since
    /// the last call, each once: a reader that keeps each destination's count (the
    /// broker's stats reading) counts only those again. `None` on the first call,
    /// which starts the record (nothing was recorded before it: count every one).
    /// Only this store's own writes are seen (see [`Self::count_committed`]).
    fn take_written(&self) -> Option<Vec<String>>;

    /// Drops the count [`Self::count_committed`] keeps for `container`, if any: the
    /// next question counts again. For a container nobody will ask about for a
    /// while (the broker's sleeping destinations), so that it costs no memory here.
    /// The default keeps nothing to drop.
    fn forget_committed_count(&self, container: &str) {
        let _ = container;
    }

    /// How many durable subscriptions `container` has.
    async fn count_subscriptions(&self, container: &str) -> Result<u64>;

    /// How many individual acks above the marks `container` holds (acks that arrived
    /// out of order and wait for the gap before them to close).
    async fn count_individual_acks(&self, container: &str) -> Result<u64>;

    /// The highest message id assigned so far (0 for an empty store).
    fn last_assigned_id(&self) -> i64;

    /// The topic consumer group `container` (a queue's store key) is bound to, if it
    /// is a group ([`groups`]: its reads and writes then merge the topic's rows it
    /// needs with its own). From memory: the bindings read at open and written since.
    /// The default (a store without groups): none.
    fn group_topic(&self, container: &str) -> Option<String> {
        let _ = container;
        None
    }

    /// Bytes of the `msg` column (encoded headers and body, [`encoding`]) held in the
    /// store for every container, prepared messages included: what ActiveMQ calls store
    /// usage, checked against the store limit (`[usage] store`). Read once at open with
    /// one aggregate statement (`SUM(length(msg))`, one row), then kept exact in memory:
    /// each committed write adds the lengths of the rows it added and subtracts those of
    /// the rows it deleted (as `RETURNING` reported them); a write that fails changes
    /// nothing. Rows written to the tables by anything but this store are not seen
    /// until it is opened again.
    fn stored_bytes(&self) -> u64;

    /// Takes the store's exclusive lock for a broker, held until [`Self::close`] (or
    /// the process ends: it is a file lock on SQLite and a session-level advisory lock
    /// on PostgreSQL, both released by the operating system or the server when the
    /// holder dies, so a crash never leaves it stuck; with
    /// [`StoreOptions::lease`], PostgreSQL's lease lock, which a dead holder's lease
    /// ends by expiring). `sqlite::memory:` has nothing to lock.
    /// Errors: [`StoreError::Locked`] when another broker holds it.
    async fn lock_exclusive(&self) -> Result<()> {
        match self.try_lock().await? {
            LockAttempt::Acquired => Ok(()),
            LockAttempt::Held(by) => Err(StoreError::Locked(by)),
        }
    }

    /// Tries [`Self::lock_exclusive`] once: [`LockAttempt::Held`] when another broker
    /// holds the lock. A standby calls it every `renew_ms` until it is acquired.
    /// Errors: the database's, a lock file that cannot be opened.
    async fn try_lock(&self) -> Result<LockAttempt>;

    /// The renewals of the lease this store holds (`None` without one): how long
    /// they take tells how close the broker runs to fencing itself.
    fn lease_renewals(&self) -> Option<LeaseRenewals> {
        None
    }

    /// Waits until the broker that holds this store's lock releases it, or `within`
    /// passes, whichever comes first: what a standby does between two
    /// [`Self::try_lock`]s. On PostgreSQL with a lease, a release is announced
    /// (`NOTIFY`), so a standby takes over at once after a graceful stop; elsewhere
    /// it waits `within`.
    async fn wait_for_release(&self, within: std::time::Duration) {
        tokio::time::sleep(within).await;
    }

    /// While this store holds a lease ([`StoreOptions::lease`]): its state, which
    /// turns [`LeaseState::Lost`] once and for all when the lease is lost. On
    /// PostgreSQL without a lease, while it holds the advisory lock: it turns `Lost`
    /// when a write finds a broker with a lease active on the store (its own lock's
    /// session ended, and a standby took over). `None` on SQLite, and before
    /// [`Self::try_lock`].
    fn lease_state(&self) -> Option<tokio::sync::watch::Receiver<LeaseState>>;

    /// Whether this broker may serve now as far as its lease is concerned: true
    /// without a lease; with one, while it is not lost and its fence (one `renew_ms`
    /// before the last lease could end) has not passed on the monotonic clock. Cheap
    /// (one atomic read): the broker asks it before it serves anything, so that after
    /// a pause (SIGSTOP, a frozen VM) it serves nothing before its renewal task has
    /// noticed that the lease ran out.
    fn lease_current(&self) -> bool {
        true
    }

    /// Whether a broker holds the store's exclusive lock now: the lock is tried and,
    /// if taken, given back at once. Always false for `sqlite::memory:` and for a
    /// store that holds the lock itself.
    async fn locked_by_another(&self) -> Result<bool>;

    /// Whether the database answers now: one `SELECT 1` on a pooled connection (no
    /// table read). A readiness probe (`/readyz`) asks it. Errors: the store's error
    /// when no connection can be had (the database is down or unreachable, the pool
    /// is closed) or the statement fails.
    async fn ping(&self) -> Result<()>;

    /// Closes the pool after the statements in flight finish, then releases the
    /// exclusive lock; later calls fail with [`StoreError::Closed`]. When it returns,
    /// the pool holds no connection (one still on its way back to the pool is waited
    /// for, up to 5 s).
    async fn close(&self);
}

/// Convenience calls built on [`MessageStore::write`], one op per transaction.
/// Tests and tools use them; the store actor batches instead.
#[async_trait::async_trait]
pub trait MessageStoreExt: MessageStore {
    /// Adds messages in one transaction; returns their ids in order.
    async fn add_messages(&self, messages: Vec<NewMessage>) -> Result<Vec<i64>> {
        let outcomes = self
            .write(messages.into_iter().map(WriteOp::Add).collect())
            .await?;
        Ok(outcomes
            .into_iter()
            .filter_map(|o| match o {
                WriteOutcome::Added(id) => Some(id),
                _ => None,
            })
            .collect())
    }

    /// Runs one op and returns its outcome.
    async fn write_one(&self, op: WriteOp) -> Result<WriteOutcome> {
        let mut outcomes = self.write(vec![op]).await?;
        Ok(outcomes.pop().expect("one outcome per op"))
    }
}

impl<T: MessageStore + ?Sized> MessageStoreExt for T {}

/// Opens (creating and migrating if needed) the store at `url`:
/// `sqlite://PATH` (file created if missing, WAL), `sqlite::memory:`, or
/// `postgres://…` / `postgresql://…`.
///
/// Errors: [`StoreError::InvalidUrl`] for a URL of another kind or one the driver
/// rejects (the message names the URL, without its password, and the reason);
/// [`StoreError::Open`] when the database cannot be reached; [`StoreError::Migration`].
pub async fn open(url: &str, options: &StoreOptions) -> Result<Arc<dyn MessageStore>> {
    statements::check_name("table prefix", &options.table_prefix)?;
    // Each call on a task of its own: a caller that drops it cannot leave a
    // connection inside a transaction ([`detached`]).
    if url.starts_with("sqlite:") {
        let store: Arc<dyn MessageStore> = Arc::new(sqlite::SqliteStore::open(url, options).await?);
        Ok(Arc::new(detached::Detached(store)))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store: Arc<dyn MessageStore> = Arc::new(postgres::PgStore::open(url, options).await?);
        Ok(Arc::new(detached::Detached(store)))
    } else {
        Err(StoreError::InvalidUrl {
            url: redact_url(url),
            reason: "expected sqlite://PATH, sqlite::memory: or postgres://...".into(),
        })
    }
}
