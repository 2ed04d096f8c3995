//! The one implementation of [`MessageStore`](crate::MessageStore), written once and
//! instantiated for each backend by [`impl_sql_store!`].
//!
//! A macro rather than generics over `sqlx::Database`: the statement texts are the same
//! on both backends, and concrete pool and row types keep sqlx's type checks exact (no
//! `sqlx::Any`, which loses type fidelity) without a page of trait bounds.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::{ExpiredPage, StoredMessage, SubscriptionKey};

/// Row of statement 1 of `recover_expired`.
pub(crate) type RunRow = (
    String,
    String,
    i32,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// Row of a message read: `(id, msgid, expiration, priority, msg)`.
pub(crate) type MessageRow = (i64, String, i64, i32, Vec<u8>, i32, Option<i64>);

/// Counts the rows a `DELETE ... RETURNING` length statement deleted, and takes their
/// `msg` lengths off `bytes`, the transaction's change of stored bytes.
pub(crate) fn deleted(lengths: Vec<i64>, bytes: &mut i64) -> u64 {
    *bytes -= lengths.iter().sum::<i64>();
    lengths.len() as u64
}

/// The `LIKE` pattern (with `ESCAPE '!'`) that matches every text starting with
/// `prefix`, taken literally: `%`, `_` and the escape character `!` itself are escaped.
/// `!` rather than a backslash, which PostgreSQL reads as a string escape when
/// `standard_conforming_strings` is off.
pub(crate) fn like_prefix(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '%' | '_' | '!') {
            pattern.push('!');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// How a backend takes a list of ids as one bound value (see
/// [`crate::statements::ID_LIST_MAX`]): SQLite a JSON array of integers, which
/// `json_each` reads; PostgreSQL a `BIGINT[]`.
pub(crate) trait IdList: sqlx::Database {
    type Ids: for<'q> sqlx::Encode<'q, Self> + sqlx::Type<Self> + Send + 'static;
    type Texts: for<'q> sqlx::Encode<'q, Self> + sqlx::Type<Self> + Send + 'static;
    fn id_list(ids: &[i64]) -> Self::Ids;
    /// A list of texts the same way: SQLite a JSON array of strings, PostgreSQL a
    /// `TEXT[]`.
    fn text_list(texts: &[&str]) -> Self::Texts;
}

impl IdList for sqlx::Sqlite {
    type Ids = String;
    type Texts = String;
    fn text_list(texts: &[&str]) -> String {
        serde_json::to_string(texts).unwrap_or_else(|_| "[]".into())
    }
    fn id_list(ids: &[i64]) -> String {
        use std::fmt::Write;
        let mut json = String::with_capacity(ids.len() * 8 + 2);
        json.push('[');
        for (n, id) in ids.iter().enumerate() {
            if n > 0 {
                json.push(',');
            }
            let _ = write!(json, "{id}");
        }
        json.push(']');
        json
    }
}

impl IdList for sqlx::Postgres {
    type Ids = Vec<i64>;
    type Texts = Vec<String>;
    fn text_list(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| t.to_string()).collect()
    }
    fn id_list(ids: &[i64]) -> Vec<i64> {
        ids.to_vec()
    }
}

/// The sub-row priority a message of `priority` falls under: -1 when the subscription
/// keeps one mark for every priority.
pub(crate) fn mark_row(prioritized: bool, priority: u8) -> i32 {
    if prioritized {
        i32::from(priority)
    } else {
        -1
    }
}

/// Which statement a `read_pending` runs, with its lower bounds: read from the
/// subscription's mark rows first, in the same read transaction, so the message read is
/// plain index ranges with no sub-select in their bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PendingRead {
    /// No such subscription: nothing is pending, no message row is read.
    Nothing,
    /// `read_pending`: one mark for every priority; ids after `bound`.
    All { bound: i64 },
    /// `read_pending_priority`: messages of `priority` after `bound`, individual acks
    /// of mark row `row` (-1 with one mark for every priority).
    Priority { priority: u8, bound: i64, row: i32 },
    /// `read_pending_merged`: per-priority marks; priority `k` after `bounds[k]`.
    Merged { bounds: [i64; 10] },
}

/// The read `read_pending(after_id, priority)` needs for a subscription with
/// `(mark row, mark)` rows `marks`: each lower bound is `max(after_id, the mark that
/// covers the priority)`. A priority without a mark row (none with per-priority marks
/// has one outside 0..=9) gets `i64::MAX`: nothing, as before, when its mark sub-select
/// found no row.
pub(crate) fn pending_read(
    marks: &[(i32, i64)],
    after_id: i64,
    priority: Option<u8>,
) -> PendingRead {
    if marks.is_empty() {
        return PendingRead::Nothing;
    }
    if let Some(&(_, mark)) = marks.iter().find(|(row, _)| *row < 0) {
        let bound = mark.max(after_id);
        return match priority {
            None => PendingRead::All { bound },
            Some(priority) => PendingRead::Priority {
                priority,
                bound,
                row: -1,
            },
        };
    }
    let bound = |p: u8| {
        marks
            .iter()
            .find(|(row, _)| *row == i32::from(p))
            .map_or(i64::MAX, |&(_, mark)| mark.max(after_id))
    };
    match priority {
        Some(priority) => PendingRead::Priority {
            priority,
            bound: bound(priority),
            row: i32::from(priority),
        },
        None => PendingRead::Merged {
            bounds: std::array::from_fn(|k| bound(k as u8)),
        },
    }
}

/// Builds a subscription from its `(priority, mark, selector)` rows.
pub(crate) fn subscription_of(
    container: String,
    key: SubscriptionKey,
    rows: Vec<(i32, i64, Option<String>)>,
) -> crate::DurableSubscription {
    let selector = rows.first().and_then(|r| r.2.clone());
    let marks = rows
        .into_iter()
        .map(|(p, mark, _)| ((p >= 0).then(|| priority_of(p)), mark))
        .collect();
    crate::DurableSubscription {
        container,
        key,
        selector,
        marks,
    }
}

/// Converts a stored priority (an INTEGER column) to 0..=9.
pub(crate) fn priority_of(stored: i32) -> u8 {
    stored.clamp(0, crate::MAX_PRIORITY as i32) as u8
}

/// The `hdrs` column of a new message: when its destination indexes headers
/// ([`crate::NewMessage::indexed_headers`]), its headers as a JSON object, the first
/// value of each name (what a selector reads); `None` otherwise.
pub(crate) fn queryable_headers(
    indexed: bool,
    payload: &crate::Payload,
) -> Option<sqlx::types::Json<serde_json::Value>> {
    if !indexed {
        return None;
    }
    let mut object = serde_json::Map::new();
    for (name, value) in &payload.headers {
        if !object.contains_key(name) {
            object.insert(name.clone(), serde_json::Value::String(value.clone()));
        }
    }
    Some(sqlx::types::Json(serde_json::Value::Object(object)))
}

/// How `scan_matching` names header `name` (without `"` or `\`) in the `hdrs` JSON:
/// SQLite's `json_extract` takes a path (`$."name"`, the name quoted); PostgreSQL's
/// `->>` the key itself.
pub(crate) fn json_path(backend: crate::Backend, name: &str) -> String {
    match backend {
        crate::Backend::Sqlite => format!("$.\"{name}\""),
        crate::Backend::Postgres => name.to_string(),
    }
}

/// Turns fetched message rows into shared messages, counting them in `stats`.
pub(crate) fn decode_messages(
    container: &str,
    rows: Vec<MessageRow>,
    stats: &crate::ReadStats,
) -> crate::Result<Vec<Arc<StoredMessage>>> {
    let bytes: usize = rows.iter().map(|r| r.4.len()).sum();
    stats.fetched(rows.len() as u64, bytes as u64);
    rows.into_iter()
        .map(
            |(id, message_id, expiration, priority, msg, redeliveries, held_until)| {
                let payload =
                    crate::encoding::decode(&msg).map_err(|e| crate::StoreError::Corrupt {
                        id,
                        reason: e.to_string(),
                    })?;
                Ok(Arc::new(StoredMessage {
                    id,
                    container: container.to_string(),
                    message_id,
                    expiration,
                    priority: priority_of(priority),
                    payload: Arc::new(payload),
                    redeliveries: redeliveries.max(0) as u32,
                    held_until,
                }))
            },
        )
        .collect()
}

/// One subscription row's expired run: ids in `(after, before)`, `before = None`
/// meaning no upper end (the window held fewer than `limit` rows).
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub key: SubscriptionKey,
    pub priority: Option<u8>,
    pub after: i64,
    pub before: Option<i64>,
}

/// Reads statement 1's rows into runs; returns the runs and whether some run reached
/// the end of its full window (so there may be more after this page).
pub(crate) fn runs_of(rows: Vec<RunRow>) -> (Vec<Run>, bool) {
    let mut more = false;
    let mut runs = Vec::new();
    for (client_id, sub_name, priority, mark, wend, stop, first_expired) in rows {
        let Some(first_expired) = first_expired else {
            continue;
        };
        if stop.is_some_and(|stop| stop < first_expired) {
            continue;
        }
        let before = match (stop, wend) {
            (Some(stop), _) => Some(stop),
            (None, Some(wend)) => {
                more = true;
                Some(wend + 1)
            }
            (None, None) => None,
        };
        runs.push(Run {
            key: SubscriptionKey::new(client_id, sub_name),
            priority: (priority >= 0).then(|| priority_of(priority)),
            after: mark,
            before,
        });
    }
    (runs, more)
}

/// Hands each loaded message to every run it belongs to; the `Arc` is shared.
pub(crate) fn assign(
    runs: &[Run],
    messages: Vec<Arc<StoredMessage>>,
    limit: usize,
    more: bool,
) -> ExpiredPage {
    let rows = messages.len();
    let mut by_subscription: BTreeMap<SubscriptionKey, Vec<Arc<StoredMessage>>> = BTreeMap::new();
    for message in &messages {
        for run in runs {
            let in_run = message.id > run.after
                && run.before.is_none_or(|b| message.id < b)
                && run.priority.is_none_or(|p| p == message.priority);
            if in_run {
                by_subscription
                    .entry(run.key.clone())
                    .or_default()
                    .push(Arc::clone(message));
            }
        }
    }
    ExpiredPage {
        by_subscription,
        rows,
        more: more || rows >= limit,
    }
}

/// How a backend opens its transactions: the `BEGIN` texts, and the planner settings
/// that make PostgreSQL plan each message read as its index range (see the notes in
/// [`crate::statements`]). Each text is sent as one simple query (one round trip).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Transactions {
    /// Starts a migration: a plain write transaction, planner settings untouched.
    pub migration: &'static str,
    /// Starts a write transaction ([`crate::MessageStore::write`]).
    pub write: &'static str,
    /// Starts a read transaction: the statements of one read see one snapshot.
    pub read: &'static str,
    /// Gives the planner its usual settings back for the rest of the transaction, for a
    /// statement no index orders; empty when the backend changes none.
    pub usual_plans: &'static str,
    /// Sets the index-plan settings again after [`Self::usual_plans`]; empty when the
    /// backend has none.
    pub index_plans: &'static str,
}

/// Closes `pool` with every connection it opened. `Pool::close` (sqlx 0.8) can return
/// with a connection still open: one whose return to the pool had checked that the
/// pool was open just before `close` began lands in the idle queue after `close`
/// emptied it for the last time, and nothing closes it (sqlx issue #3217). Closing
/// again until the pool holds none ends those; after 5 s a straggler is left to the
/// process's end, with a warning.
pub(crate) async fn close_pool<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) {
    let started = std::time::Instant::now();
    loop {
        pool.close().await;
        if pool.size() == 0 {
            return;
        }
        if started.elapsed() > std::time::Duration::from_secs(5) {
            tracing::warn!(
                connections = pool.size(),
                "the store's pool still holds connections 5 s after closing; they end with the process"
            );
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Implements [`crate::MessageStore`] for `$store`, whose fields are `pool:
/// sqlx::Pool<$db>`, `sql: Statements`, `stats: ReadStats`, `last_id: AtomicI64`,
/// `stored_bytes: AtomicI64`, and whose transactions are opened as `$tx`
/// ([`Transactions`]) says.
///
/// Every op that adds or deletes message rows adds the change of stored `msg` bytes to
/// a `bytes: &mut i64` of its transaction; [`crate::MessageStore::write`] applies it to
/// `stored_bytes` after the commit, so a failed transaction changes nothing.
macro_rules! impl_sql_store {
    ($store:ty, $db:ty, $backend:expr, $tx:expr, $migrations:expr) => {
        impl $store {
            /// Checks, without changing anything, that the tables are there at the
            /// newest schema version ([`crate::StoreOptions::create`] false).
            async fn check_schema(
                pool: &sqlx::Pool<$db>,
                prefix: &str,
                shown_url: &str,
            ) -> $crate::Result<()> {
                use $crate::migrate::*;
                let missing = |reason: String| $crate::StoreError::Missing {
                    url: shown_url.to_string(),
                    reason,
                };
                let current: Option<i64> = match sqlx::query_scalar(&current_version(prefix))
                    .fetch_one(pool)
                    .await
                {
                    Ok(version) => version,
                    // PostgreSQL's undefined_table, SQLite's "no such table".
                    Err(sqlx::Error::Database(e))
                        if e.code().as_deref() == Some("42P01")
                            || e.message().contains("no such table") =>
                    {
                        return Err(missing(format!(
                            "it holds no Ebb tables (prefix `{prefix}`); --create creates them"
                        )));
                    }
                    Err(e) => return Err($crate::error::db("read the schema version")(e)),
                };
                let newest = $migrations.last().map(|(v, _, _)| *v);
                if current < newest {
                    return Err(missing(format!(
                        "its schema is at version {}, this ebb needs {}: `ebb serve` or --create migrates it",
                        current.unwrap_or(0),
                        newest.unwrap_or(0)
                    )));
                }
                Ok(())
            }

            /// Applies the embedded migrations newer than the stored schema version.
            async fn migrate(pool: &sqlx::Pool<$db>, prefix: &str) -> $crate::Result<()> {
                use $crate::migrate::*;
                let mut tx = pool
                    .begin_with($tx.migration)
                    .await
                    .map_err($crate::error::db("migration begin"))?;
                sqlx::raw_sql(&version_table(prefix))
                    .execute(&mut *tx)
                    .await
                    .map_err($crate::error::db("migration version table"))?;
                let current: Option<i64> = sqlx::query_scalar(&current_version(prefix))
                    .fetch_one(&mut *tx)
                    .await
                    .map_err($crate::error::db("migration version"))?;
                for (version, name, text) in $migrations {
                    if Some(*version) <= current {
                        continue;
                    }
                    let text = text.replace("{p}", prefix);
                    let failed = |source| $crate::StoreError::Migration {
                        version: *version,
                        name,
                        source,
                    };
                    sqlx::raw_sql(&text)
                        .execute(&mut *tx)
                        .await
                        .map_err(failed)?;
                    sqlx::query(&record_version(prefix))
                        .bind(*version)
                        .bind(*name)
                        .bind(now_ms())
                        .execute(&mut *tx)
                        .await
                        .map_err(failed)?;
                    tracing::info!(version, name, "store schema migrated");
                }
                tx.commit()
                    .await
                    .map_err($crate::error::db("migration commit"))?;
                Ok(())
            }

            /// Finishes opening on a connected pool: migrations, statements, the id
            /// sequence.
            async fn from_pool(
                pool: sqlx::Pool<$db>,
                options: &$crate::StoreOptions,
                shown_url: &str,
                lock_target: String,
            ) -> $crate::Result<Self> {
                if options.create {
                    Self::migrate(&pool, &options.table_prefix).await?;
                } else {
                    Self::check_schema(&pool, &options.table_prefix, shown_url).await?;
                }
                let sql = $crate::statements::Statements::new(&options.table_prefix, $backend);
                let last_id = Self::seed_last_id(&pool, &sql).await?;
                let commit_mark = Self::read_commit_mark(&pool, &sql).await?;
                let stored_bytes: i64 = sqlx::query_scalar(&sql.stored_bytes)
                    .fetch_one(&pool)
                    .await
                    .map_err($crate::error::db("read stored bytes"))?;
                let groups = Self::load_groups(&pool, &sql).await?;
                tracing::info!(
                    url = %shown_url,
                    backend = ?$backend,
                    last_id,
                    stored_bytes,
                    "store opened"
                );
                Ok(Self {
                    pool,
                    sql,
                    stats: $crate::ReadStats::default(),
                    last_id: std::sync::atomic::AtomicI64::new(last_id),
                    commit_mark: std::sync::atomic::AtomicI64::new(commit_mark),
                    stored_bytes: std::sync::atomic::AtomicI64::new(stored_bytes),
                    lock: Default::default(),
                    lock_target,
                    lease: Default::default(),
                    counts: Default::default(),
                    groups,
                })
            }

            /// The consumer groups bound in the store ([`crate::groups`]), a keyset
            /// page of [`GROUP_PAGE`](crate::groups::GROUP_PAGE) at a time.
            async fn load_groups(
                pool: &sqlx::Pool<$db>,
                sql: &$crate::statements::Statements,
            ) -> $crate::Result<$crate::groups::Groups> {
                let groups = $crate::groups::Groups::default();
                let mut after = String::new();
                loop {
                    let page: Vec<(String, String)> = sqlx::query_as(&sql.groups.list)
                        .bind($crate::GROUP_CLIENT_ID)
                        .bind(&after)
                        .bind(i64::from($crate::groups::GROUP_PAGE))
                        .fetch_all(pool)
                        .await
                        .map_err($crate::error::db("read consumer groups"))?;
                    let full = page.len() == $crate::groups::GROUP_PAGE as usize;
                    for (topic, group) in page {
                        groups.bind(&topic, &group);
                        after = group;
                    }
                    if !full {
                        return Ok(groups);
                    }
                }
            }

            /// The group's mark on its topic (its binding's one row), or `None` when
            /// `group` is no longer bound to `topic`.
            async fn group_mark(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                topic: &str,
                group: &str,
            ) -> $crate::Result<Option<i64>> {
                let key = $crate::SubscriptionKey::group(group);
                let rows = self.subscription_rows(conn, topic, &key).await?;
                Ok(rows.iter().map(|r| r.1).min())
            }

            /// A page of the topic rows group `group` needs after `after_id` (`[0]`
            /// without the held ones, `[1]` with them), or in the window up to
            /// `upto` (a scan), in one snapshot with its mark.
            async fn group_page(
                &self,
                topic: &str,
                group: &str,
                after_id: i64,
                upto: Option<i64>,
                held_too: bool,
                limit: u32,
            ) -> $crate::Result<Vec<std::sync::Arc<$crate::StoredMessage>>> {
                const OP: &str = "read group";
                let mut tx = self.begin_read(OP).await?;
                let Some(mark) = self.group_mark(&mut *tx, topic, group).await? else {
                    return Ok(Vec::new());
                };
                let bound = after_id.max(mark);
                let sql = match upto {
                    Some(_) => &self.sql.groups.window,
                    None => &self.sql.groups.pending[usize::from(held_too)],
                };
                let rows: Vec<$crate::sql::MessageRow> = sqlx::query_as(sql)
                    .bind(topic)
                    .bind(bound)
                    .bind($crate::GROUP_CLIENT_ID)
                    .bind(group)
                    .bind(i64::from(limit))
                    .bind(upto.unwrap_or(0))
                    .fetch_all(&mut *tx)
                    .await
                    .map_err($crate::error::db(OP))?;
                tx.commit().await.map_err($crate::error::db(OP))?;
                $crate::sql::decode_messages(group, rows, &self.stats)
            }

            /// The topic rows group `group` needs that are expired at `now_ms`, by
            /// `(expiration, id)`, at most `limit`.
            async fn group_expired(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                topic: &str,
                group: &str,
                now_ms: i64,
                limit: u32,
            ) -> $crate::Result<Vec<std::sync::Arc<$crate::StoredMessage>>> {
                let Some(mark) = self.group_mark(conn, topic, group).await? else {
                    return Ok(Vec::new());
                };
                let rows: Vec<$crate::sql::MessageRow> = sqlx::query_as(&self.sql.groups.expired)
                    .bind(topic)
                    .bind(now_ms)
                    .bind($crate::GROUP_CLIENT_ID)
                    .bind(group)
                    .bind(i64::from(limit))
                    .bind(mark)
                    .bind($crate::statements::expired_window(limit))
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($crate::error::db("read expired"))?;
                $crate::sql::decode_messages(group, rows, &self.stats)
            }

            /// How many of the topic's rows group `group` needs.
            async fn group_count(&self, topic: &str, group: &str) -> $crate::Result<u64> {
                const OP: &str = "count group messages";
                let mut tx = self.begin_read(OP).await?;
                let Some(mark) = self.group_mark(&mut *tx, topic, group).await? else {
                    return Ok(0);
                };
                let n: i64 = sqlx::query_scalar(&self.sql.groups.count)
                    .bind(topic)
                    .bind(mark)
                    .bind($crate::GROUP_CLIENT_ID)
                    .bind(group)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err($crate::error::db(OP))?;
                tx.commit().await.map_err($crate::error::db(OP))?;
                Ok(n.max(0) as u64)
            }

            /// A group's queue ack ([`WriteOp::Remove`](crate::WriteOp::Remove) on a
            /// group): its own rows among `ids` are deleted, the topic's are acked for
            /// it (and their delivery rows dropped). Returns how many were deleted or
            /// newly acked.
            async fn group_remove(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                topic: &str,
                group: &str,
                ids: &[i64],
                bytes: &mut i64,
            ) -> $crate::Result<u64> {
                let own = self.remove(conn, group, ids, bytes).await?;
                Ok(own + self.group_ack(conn, topic, group, ids).await?)
            }

            /// Acks `ids` (those that are the topic's rows) for group `group`, and
            /// drops their delivery rows. Returns how many were newly acked.
            async fn group_ack(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                topic: &str,
                group: &str,
                ids: &[i64],
            ) -> $crate::Result<u64> {
                if ids.is_empty() {
                    return Ok(0);
                }
                let key = $crate::SubscriptionKey::group(group);
                // One mark for every priority: the priority is not looked at.
                let messages = ids.iter().map(|id| (*id, 0)).collect();
                let acked = self.ack(conn, topic, &key, messages).await?;
                for chunk in ids.chunks($crate::statements::ID_LIST_MAX) {
                    sqlx::query(&self.sql.groups.forget)
                        .bind(group)
                        .bind(<$db as $crate::sql::IdList>::id_list(chunk))
                        .execute(&mut *conn)
                        .await
                        .map_err($crate::error::db("drop group deliveries"))?;
                }
                Ok(acked)
            }

            /// [`WriteOp::Redelivered`](crate::WriteOp::Redelivered) on a group: its
            /// own row as a queue's, else the topic's row in `group_deliveries`.
            async fn group_redelivered(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                topic: &str,
                group: &str,
                id: i64,
                count: u32,
                hold_until: Option<i64>,
            ) -> $crate::Result<u64> {
                let own = self.redelivered(conn, group, id, count, hold_until).await?;
                if own > 0 {
                    return Ok(own);
                }
                let Some(mark) = self.group_mark(conn, topic, group).await? else {
                    return Ok(0);
                };
                let changed = sqlx::query(&self.sql.groups.redelivered)
                    .bind(group)
                    .bind(id)
                    .bind(i64::from(count))
                    .bind(hold_until)
                    .bind(topic)
                    .bind(mark)
                    .bind($crate::GROUP_CLIENT_ID)
                    .execute(&mut *conn)
                    .await
                    .map_err($crate::error::db("count a failed delivery"))?;
                Ok(changed.rows_affected())
            }

            /// [`WriteOp::DeadLetter`](crate::WriteOp::DeadLetter) from a group: its own
            /// row as a queue's; a topic row the group still needs is acked for it and
            /// its copy added (arriving when the topic row did).
            async fn group_dead_letter(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                topic: &str,
                group: &str,
                id: i64,
                message: $crate::NewMessage,
                bytes: &mut i64,
            ) -> $crate::Result<$crate::Moved> {
                let rows: Vec<(i64, i64, i64)> = sqlx::query_as(&self.sql.remove_ids)
                    .bind(group)
                    .bind(<$db as $crate::sql::IdList>::id_list(&[id]))
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($crate::error::db("dead-letter message"))?;
                if let Some(&(_, length, arrival)) = rows.first() {
                    $crate::sql::deleted(vec![length], bytes);
                    return self.move_in(conn, message, arrival, bytes).await;
                }
                if self.group_ack(conn, topic, group, &[id]).await? == 0 {
                    return Ok($crate::Moved::Gone);
                }
                self.move_in(conn, message, id, bytes).await
            }

            /// [`WriteOp::ExpireQueue`](crate::WriteOp::ExpireQueue) on a group: its own
            /// expired rows are deleted, then the topic's it needs are acked for it,
            /// `limit` in all. Returns the ids, ascending.
            async fn group_expire(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                topic: &str,
                group: &str,
                now_ms: i64,
                limit: u32,
                bytes: &mut i64,
            ) -> $crate::Result<Vec<i64>> {
                let mut ids = self.expire_queue(conn, group, now_ms, limit, bytes).await?;
                let left = limit.saturating_sub(ids.len() as u32);
                if left > 0 {
                    if let Some(mark) = self.group_mark(conn, topic, group).await? {
                        let shared: Vec<i64> = sqlx::query_scalar(&self.sql.groups.expired_ids)
                            .bind(topic)
                            .bind(now_ms)
                            .bind($crate::GROUP_CLIENT_ID)
                            .bind(group)
                            .bind(i64::from(left))
                            .bind(mark)
                            .bind($crate::statements::expired_window(left))
                            .fetch_all(&mut *conn)
                            .await
                            .map_err($crate::error::db("expire group messages"))?;
                        self.group_ack(conn, topic, group, &shared).await?;
                        ids.extend(shared);
                    }
                }
                ids.sort_unstable();
                Ok(ids)
            }

            /// A page of held messages of `container` read by `statements` (the page,
            /// then the next due time after a short one): a queue's own, or a
            /// group's in `group_deliveries` (see [`crate::MessageStore::read_held`]).
            async fn held_page(
                &self,
                statements: [&str; 2],
                container: &str,
                after: (i64, i64),
                now_ms: i64,
                limit: u32,
            ) -> $crate::Result<$crate::HeldPage> {
                const OP: &str = "read held";
                let mut tx = self.begin_read(OP).await?;
                let rows: Vec<$crate::sql::MessageRow> =
                    sqlx::query_as(statements[0])
                        .bind(container)
                        .bind(after.0)
                        .bind(after.1)
                        .bind(now_ms)
                        .bind(i64::from(limit))
                        .fetch_all(&mut *tx)
                        .await
                        .map_err($crate::error::db(OP))?;
                // A short page holds every row due by now: the next one's due time
                // (one index entry) tells the queue when to read again.
                let next_due = if rows.len() < limit as usize {
                    let from = rows
                        .last()
                        .and_then(|r| r.6.map(|due| (due, r.0)))
                        .unwrap_or(after);
                    sqlx::query_scalar::<_, i64>(statements[1])
                        .bind(container)
                        .bind(from.0)
                        .bind(from.1)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err($crate::error::db(OP))?
                } else {
                    None
                };
                tx.commit().await.map_err($crate::error::db(OP))?;
                let messages = $crate::sql::decode_messages(container, rows, &self.stats)?
                    .into_iter()
                    .map(|message| $crate::HeldMessage {
                        due: message.held_until.unwrap_or(i64::MIN),
                        message,
                    })
                    .collect();
                Ok($crate::HeldPage { messages, next_due })
            }


            /// A statement whose first binds are a subscription's mark row:
            /// `$1` container, `$2` client id, `$3` subscription name, `$4` priority row.
            fn for_row<'q>(
                sql: &'q str,
                container: &'q str,
                key: &'q $crate::SubscriptionKey,
                row: i32,
            ) -> sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>> {
                sqlx::query(sql)
                    .bind(container)
                    .bind(&key.client_id)
                    .bind(&key.subscription_name)
                    .bind(row)
            }

            /// Runs planner settings (`$tx.usual_plans` or `$tx.index_plans`, one simple
            /// query) on `conn`, inside its transaction; nothing when `text` is empty.
            async fn plans(
                conn: &mut <$db as sqlx::Database>::Connection,
                text: &str,
            ) -> $crate::Result<()> {
                if !text.is_empty() {
                    // A `&str` without arguments goes as one simple query.
                    sqlx::Executor::execute(&mut *conn, text)
                        .await
                        .map_err($crate::error::db("planner settings"))?;
                }
                Ok(())
            }

            /// A read transaction (`$tx.read`): one snapshot, and on PostgreSQL the
            /// index-plan settings, for the reads of the message table a drain runs per
            /// page. Read-only; ended with `commit`.
            async fn begin_read(
                &self,
                op: &'static str,
            ) -> $crate::Result<sqlx::Transaction<'_, $db>> {
                self.pool
                    .begin_with($tx.read)
                    .await
                    .map_err($crate::error::db(op))
            }

            /// The highest id in messages and marks: where the id sequence resumes
            /// (as ActiveMQ seeds its sequence from MSGS and ACKS).
            async fn seed_last_id(
                pool: &sqlx::Pool<$db>,
                sql: &$crate::statements::Statements,
            ) -> $crate::Result<i64> {
                let messages: Option<i64> = sqlx::query_scalar(&sql.max_message_id)
                    .fetch_one(pool)
                    .await
                    .map_err($crate::error::db("read highest id"))?;
                let marks: Option<i64> = sqlx::query_scalar(&sql.max_acked_id)
                    .fetch_one(pool)
                    .await
                    .map_err($crate::error::db("read highest mark"))?;
                Ok(messages.unwrap_or(0).max(marks.unwrap_or(0)).max(0))
            }

            /// The commit mark's token now (see [`crate::MessageStore::write`]).
            async fn read_commit_mark(
                pool: &sqlx::Pool<$db>,
                sql: &$crate::statements::Statements,
            ) -> $crate::Result<i64> {
                let token: Option<i64> = sqlx::query_scalar(&sql.commit_mark)
                    .fetch_optional(pool)
                    .await
                    .map_err($crate::error::db("read commit mark"))?;
                Ok(token.unwrap_or(0))
            }

            /// Whether the commit mark holds `token`: the transaction that set it
            /// committed. Retried as [`Self::committed`].
            async fn marked(&self, token: i64) -> bool {
                let deadline =
                    std::time::Instant::now() + self.pool.options().get_acquire_timeout();
                loop {
                    match Self::read_commit_mark(&self.pool, &self.sql).await {
                        Ok(now) => return now == token,
                        Err(_) if std::time::Instant::now() < deadline => {
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        }
                        Err(_) => return false,
                    }
                }
            }

            /// Reads the highest id, the commit mark and the stored bytes again, as at
            /// open: once the lock is taken, after another broker may have written
            /// since the open.
            async fn reseed(&self) -> $crate::Result<()> {
                use std::sync::atomic::Ordering::SeqCst;
                let last_id = Self::seed_last_id(&self.pool, &self.sql).await?;
                let commit_mark = Self::read_commit_mark(&self.pool, &self.sql).await?;
                self.commit_mark.fetch_max(commit_mark, SeqCst);
                let stored_bytes: i64 = sqlx::query_scalar(&self.sql.stored_bytes)
                    .fetch_one(&self.pool)
                    .await
                    .map_err($crate::error::db("read stored bytes"))?;
                self.last_id.fetch_max(last_id, SeqCst);
                self.stored_bytes.store(stored_bytes, SeqCst);
                Ok(())
            }

            /// Runs a `SELECT COUNT(*) ... WHERE container = $1`.
            async fn count(
                &self,
                sql: &str,
                container: &str,
                op: &'static str,
            ) -> $crate::Result<u64> {
                let n: i64 = sqlx::query_scalar(sql)
                    .bind(container)
                    .fetch_one(&self.pool)
                    .await
                    .map_err($crate::error::db(op))?;
                Ok(n as u64)
            }

            /// Whether a row with an id in `first..=last` is stored: one bounded read
            /// on a fresh connection, tried again every 100 ms while the database
            /// cannot be reached, for as long as a call waits for a connection
            /// (`acquire_timeout_ms`). `false` when the range is empty or the
            /// database could not be asked in that time.
            async fn committed(&self, first: i64, last: i64) -> bool {
                if last < first {
                    return false;
                }
                let deadline =
                    std::time::Instant::now() + self.pool.options().get_acquire_timeout();
                loop {
                    let probe = sqlx::query_scalar::<_, i64>(&self.sql.committed_probe)
                        .bind(first)
                        .bind(last)
                        .fetch_optional(&self.pool)
                        .await;
                    match probe {
                        Ok(row) => return row.is_some(),
                        Err(_) if std::time::Instant::now() < deadline => {
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        }
                        Err(_) => return false,
                    }
                }
            }

            fn next_id(&self) -> i64 {
                self.last_id
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                    + 1
            }

            /// `(priority, mark, selector)` rows of a subscription, at most 11.
            async fn subscription_rows(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                key: &$crate::SubscriptionKey,
            ) -> $crate::Result<Vec<(i32, i64, Option<String>)>> {
                sqlx::query_as(&self.sql.subscription_rows)
                    .bind(container)
                    .bind(&key.client_id)
                    .bind(&key.subscription_name)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($crate::error::db("read subscription"))
            }

            /// Moves the mark of sub-row `row` forward over messages that are done: acked
            /// individually before, or in `acking` (this op's acks, which are taken out of
            /// the set as the mark passes them), in bounded windows, each answered by the
            /// database in one row (`advance_window`); then drops the individual acks it
            /// passed. Returns the new mark and how many of `acking` it passed that were
            /// not acked before.
            ///
            /// A window is told the first [`ID_LIST_MAX`] of `acking` after the mark: one
            /// beyond those stops the mark as an un-acked message would, and is kept as
            /// an individual ack by the caller (the mark passes it later), so the mark
            /// never passes a message that is not done.
            ///
            /// [`ID_LIST_MAX`]: crate::statements::ID_LIST_MAX
            async fn advance_mark(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                key: &$crate::SubscriptionKey,
                row: i32,
                mark: i64,
                acking: &mut std::collections::BTreeSet<i64>,
            ) -> $crate::Result<(i64, u64)> {
                use $crate::statements::{ADVANCE_WINDOW, ID_LIST_MAX};
                let sql = &self.sql.advance_window[usize::from(row >= 0)];
                let mut new_mark = mark;
                let mut newly = 0;
                loop {
                    let told: Vec<i64> = acking
                        .range(new_mark.saturating_add(1)..)
                        .take(ID_LIST_MAX)
                        .copied()
                        .collect();
                    let (last, not_acked_before, passed, held): (Option<i64>, i64, i64, i64) =
                        sqlx::query_as(sql)
                            .bind(container)
                            .bind(&key.client_id)
                            .bind(&key.subscription_name)
                            .bind(row)
                            .bind(new_mark)
                            .bind(ADVANCE_WINDOW)
                            .bind(<$db as $crate::sql::IdList>::id_list(&told))
                            .fetch_one(&mut *conn)
                            .await
                            .map_err($crate::error::db("advance mark"))?;
                    if let Some(last) = last {
                        new_mark = new_mark.max(last);
                    }
                    newly += not_acked_before.max(0) as u64;
                    if passed < held || held < ADVANCE_WINDOW {
                        break;
                    }
                }
                // What the mark passed is done: in the store, or gone from it.
                acking.retain(|id| *id > new_mark);
                self.set_mark(conn, container, key, row, new_mark).await?;
                Ok((new_mark, newly))
            }

            /// Raises the mark of sub-row `row` to `mark` (never lowers it) and drops
            /// the individual acks at or below it. Returns whether the mark moved.
            async fn set_mark(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                key: &$crate::SubscriptionKey,
                row: i32,
                mark: i64,
            ) -> $crate::Result<bool> {
                let moved = Self::for_row(&self.sql.update_mark, container, key, row)
                    .bind(mark)
                    .execute(&mut *conn)
                    .await
                    .map_err($crate::error::db("update mark"))?
                    .rows_affected()
                    > 0;
                if moved {
                    Self::for_row(&self.sql.delete_indacks_upto, container, key, row)
                        .bind(mark)
                        .execute(&mut *conn)
                        .await
                        .map_err($crate::error::db("drop individual acks"))?;
                }
                Ok(moved)
            }

            /// Inserts messages with new ids, in order, in multi-row statements, and adds
            /// their encoded lengths to `bytes`. Each new id is its message's arrival.
            async fn insert_messages(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                messages: Vec<$crate::NewMessage>,
                bytes: &mut i64,
            ) -> $crate::Result<Vec<i64>> {
                let messages = messages.into_iter().map(|m| (m, None)).collect();
                self.insert_arrived(conn, messages, bytes).await
            }

            /// [`Self::insert_messages`] of messages with their arrival at the broker
            /// (the `arrived` column, see [`WriteOp::DeadLetter`]): `None` when the new
            /// id is the arrival.
            ///
            /// [`WriteOp::DeadLetter`]: crate::WriteOp::DeadLetter
            async fn insert_arrived(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                messages: Vec<($crate::NewMessage, Option<i64>)>,
                bytes: &mut i64,
            ) -> $crate::Result<Vec<i64>> {
                let mut ids = Vec::with_capacity(messages.len());
                let mut messages = messages.into_iter().peekable();
                let mut left = messages.len();
                while messages.peek().is_some() {
                    let size = $crate::statements::insert_chunk(left);
                    left -= size;
                    let chunk: Vec<(i64, $crate::NewMessage, Option<i64>)> = messages
                        .by_ref()
                        .take(size)
                        .map(|(m, arrived)| (self.next_id(), m, arrived))
                        .collect();
                    ids.extend(chunk.iter().map(|(id, ..)| *id));
                    // What the rows with a last-value key replace, once they are in.
                    let keyed: Vec<(String, String, i64)> = chunk
                        .iter()
                        .filter(|(_, m, _)| m.xid.is_none())
                        .filter_map(|(id, m, _)| {
                            let key = m.last_value.clone()?;
                            Some((m.container.clone(), key, *id))
                        })
                        .collect();
                    let mut insert = sqlx::QueryBuilder::<$db>::new(&self.sql.insert_messages);
                    insert.push_values(chunk, |mut row, (id, m, arrived)| {
                        let msg = $crate::encoding::encode(&m.payload);
                        *bytes += msg.len() as i64;
                        let hdrs = $crate::sql::queryable_headers(m.indexed_headers, &m.payload);
                        row.push_bind(id)
                            .push_bind(m.container)
                            .push_bind(m.message_id)
                            .push_bind(m.expiration)
                            .push_bind(i32::from(m.priority.min($crate::MAX_PRIORITY)))
                            .push_bind(m.xid)
                            .push_bind(msg)
                            .push_bind(hdrs)
                            .push_bind(m.last_value)
                            .push_bind(arrived);
                    });
                    insert
                        .build()
                        .execute(&mut *conn)
                        .await
                        .map_err($crate::error::db("add message"))?;
                    for (container, key, id) in keyed {
                        self.replace_last_values(conn, &container, &key, id, bytes)
                            .await?;
                    }
                }
                Ok(ids)
            }

            /// Deletes the committed rows of `container` with last-value key `key` and
            /// an id below `below` (see [`crate::NewMessage::last_value`]), subtracting
            /// their lengths from `bytes`; returns how many it deleted.
            async fn replace_last_values(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                key: &str,
                below: i64,
                bytes: &mut i64,
            ) -> $crate::Result<u64> {
                let lengths: Vec<i64> = sqlx::query_scalar(&self.sql.replace_last_values)
                    .bind(container)
                    .bind(key)
                    .bind(below)
                    .bind($crate::statements::WRITE_BATCH)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($crate::error::db("replace last values"))?;
                Ok($crate::sql::deleted(lengths, bytes))
            }

            /// Applies one op in the transaction on `conn`: one method per
            /// [`WriteOp`](crate::WriteOp) variant (documented there) does the work,
            /// and this wraps its answer in the op's [`WriteOutcome`](crate::WriteOutcome).
            /// Adds the op's change of stored bytes to `bytes`, and to `touched` the
            /// containers a commit changed (see [`crate::WriteOp::containers`]).
            async fn apply(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                op: $crate::WriteOp,
                bytes: &mut i64,
                touched: &mut Vec<String>,
            ) -> $crate::Result<$crate::WriteOutcome> {
                use $crate::{WriteOp, WriteOutcome};
                Ok(match op {
                    WriteOp::Add(m) => {
                        WriteOutcome::Added(self.insert_messages(conn, vec![m], bytes).await?[0])
                    }
                    WriteOp::Subscribe {
                        container,
                        key,
                        selector,
                        prioritized,
                    } => WriteOutcome::Subscribed(
                        self.subscribe(conn, container, key, selector, prioritized)
                            .await?,
                    ),
                    WriteOp::Unsubscribe { container, key } => {
                        let binding = key.is_group()
                            && self.groups.topic_of(&key.subscription_name).as_deref()
                                == Some(container.as_str());
                        if binding {
                            sqlx::query(&self.sql.groups.forget_all)
                                .bind(&key.subscription_name)
                                .execute(&mut *conn)
                                .await
                                .map_err($crate::error::db("drop group deliveries"))?;
                        }
                        WriteOutcome::Unsubscribed(self.unsubscribe(conn, &container, &key).await?)
                    }
                    WriteOp::Ack {
                        container,
                        key,
                        messages,
                    } => WriteOutcome::Acked {
                        newly_acked: self.ack(conn, &container, &key, messages).await?,
                    },
                    WriteOp::AckUpTo {
                        container,
                        key,
                        priority,
                        up_to,
                    } => WriteOutcome::AckedUpTo {
                        moved: self
                            .ack_up_to(conn, &container, &key, priority, up_to)
                            .await?,
                    },
                    WriteOp::Commit { xid } => {
                        WriteOutcome::Committed(
                            self.commit_prepared(conn, &xid, bytes, touched).await?,
                        )
                    }
                    WriteOp::Rollback { xid } => {
                        WriteOutcome::Deleted(self.rollback_prepared(conn, &xid, bytes).await?)
                    }
                    WriteOp::RollbackAbandoned { xid_prefix } => WriteOutcome::Deleted(
                        self.rollback_abandoned(conn, &xid_prefix, bytes).await?,
                    ),
                    WriteOp::Cleanup {
                        container,
                        limit,
                        after,
                        orphans_up_to,
                    } => {
                        let (deleted, reached) = self
                            .cleanup(conn, &container, limit, after, orphans_up_to, bytes)
                            .await?;
                        WriteOutcome::CleanedUp { deleted, reached }
                    }
                    WriteOp::Remove { container, ids } => match self.groups.topic_of(&container) {
                        Some(topic) => WriteOutcome::Deleted(
                            self.group_remove(conn, &topic, &container, &ids, bytes).await?,
                        ),
                        None => {
                            WriteOutcome::Deleted(self.remove(conn, &container, &ids, bytes).await?)
                        }
                    },
                    WriteOp::Redelivered {
                        container,
                        id,
                        count,
                        hold_until,
                    } => WriteOutcome::Deleted(match self.groups.topic_of(&container) {
                        Some(topic) => {
                            self.group_redelivered(conn, &topic, &container, id, count, hold_until)
                                .await?
                        }
                        None => {
                            self.redelivered(conn, &container, id, count, hold_until)
                                .await?
                        }
                    }),
                    WriteOp::ExpireQueue {
                        container,
                        now_ms,
                        limit,
                    } => WriteOutcome::Removed(match self.groups.topic_of(&container) {
                        Some(topic) => {
                            self.group_expire(conn, &topic, &container, now_ms, limit, bytes)
                                .await?
                        }
                        None => {
                            self.expire_queue(conn, &container, now_ms, limit, bytes)
                                .await?
                        }
                    }),
                    WriteOp::Reclaim { container, ids } => {
                        WriteOutcome::Removed(self.reclaim(conn, &container, &ids, bytes).await?)
                    }
                    WriteOp::DeadLetter {
                        container,
                        id,
                        message,
                    } => WriteOutcome::DeadLettered(match self.groups.topic_of(&container) {
                        Some(topic) => {
                            self.group_dead_letter(conn, &topic, &container, id, message, bytes)
                                .await?
                        }
                        None => {
                            self.dead_letter(conn, &container, id, message, bytes)
                                .await?
                        }
                    }),
                    WriteOp::ReplaceLastValue {
                        container,
                        key,
                        below,
                    } => WriteOutcome::Deleted(
                        self.replace_last_values(conn, &container, &key, below, bytes)
                            .await?,
                    ),
                    WriteOp::Repeat {
                        xid,
                        next_xid,
                        copy,
                    } => WriteOutcome::Repeated(
                        self.repeat(conn, &xid, &next_xid, copy, bytes).await?,
                    ),
                })
            }

            /// [`WriteOp::Redelivered`](crate::WriteOp::Redelivered): row `id` of
            /// `container` has `count` failed deliveries now, and is held in its row until
            /// `hold_until` (epoch ms) if given; returns the rows changed (0 for a row that is gone or
            /// prepared, else 1).
            async fn redelivered(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                id: i64,
                count: u32,
                hold_until: Option<i64>,
            ) -> $crate::Result<u64> {
                let changed = sqlx::query(&self.sql.redelivered)
                    .bind(container)
                    .bind(id)
                    .bind(i64::from(count))
                    .bind(hold_until)
                    .execute(&mut *conn)
                    .await
                    .map_err($crate::error::db("count a failed delivery"))?;
                Ok(changed.rows_affected())
            }

            /// Whether the next op of a write is a commit.
            fn next_is_commit(
                ops: &mut std::iter::Peekable<std::vec::IntoIter<$crate::WriteOp>>,
            ) -> bool {
                matches!(ops.peek(), Some($crate::WriteOp::Commit { .. }))
            }

            /// Whether the next op of a write is a move to a dead-letter queue (from a
            /// container that is not a group: a group's moves go one by one).
            fn next_is_dead_letter(
                &self,
                ops: &mut std::iter::Peekable<std::vec::IntoIter<$crate::WriteOp>>,
            ) -> bool {
                matches!(ops.peek(), Some($crate::WriteOp::DeadLetter { container, .. })
                    if !self.groups.is_group(container))
            }

            /// A run of [`WriteOp::DeadLetter`](crate::WriteOp::DeadLetter) (at most
            /// [`ID_LIST_MAX`](crate::statements::ID_LIST_MAX) moves `(container, id,
            /// message)`): one delete per source container, then multi-row inserts of
            /// the messages whose rows were there, in op order (their new ids follow
            /// it, as one by one). A message with a last-value key is compared and
            /// added on its own ([`Self::move_in`]), after the ones before it, so that it
            /// sees them as one by one would. Returns each move's [`Moved`].
            ///
            /// [`Moved`]: crate::Moved
            async fn dead_letter_many(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                moves: Vec<(String, i64, $crate::NewMessage)>,
                bytes: &mut i64,
            ) -> $crate::Result<Vec<$crate::Moved>> {
                let mut by_container: std::collections::BTreeMap<&str, Vec<i64>> =
                    Default::default();
                for (container, id, _) in &moves {
                    by_container.entry(container.as_str()).or_default().push(*id);
                }
                // (container, id) → the removed row's arrival.
                let mut removed = std::collections::HashMap::new();
                for (container, ids) in by_container {
                    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(&self.sql.remove_ids)
                        .bind(container)
                        .bind(<$db as $crate::sql::IdList>::id_list(&ids))
                        .fetch_all(&mut *conn)
                        .await
                        .map_err($crate::error::db("dead-letter messages"))?;
                    let lengths = rows.iter().map(|(_, length, _)| *length).collect();
                    $crate::sql::deleted(lengths, bytes);
                    removed.extend(
                        rows.into_iter()
                            .map(|(id, _, arrival)| ((container.to_string(), id), arrival)),
                    );
                }
                let mut moved = Vec::with_capacity(moves.len());
                // Messages without a key waiting for one multi-row insert: (their
                // place in `moved`, message, arrival).
                let mut adds = Vec::new();
                for (container, id, message) in moves {
                    // A row named twice moves once (the first move), as one by one.
                    let Some(arrival) = removed.remove(&(container, id)) else {
                        moved.push($crate::Moved::Gone);
                        continue;
                    };
                    if message.last_value.is_some() && message.xid.is_none() {
                        self.add_moved(conn, std::mem::take(&mut adds), &mut moved, bytes)
                            .await?;
                        moved.push(self.move_in(conn, message, arrival, bytes).await?);
                    } else {
                        adds.push((moved.len(), message, arrival));
                        moved.push($crate::Moved::Gone);
                    }
                }
                self.add_moved(conn, adds, &mut moved, bytes).await?;
                Ok(moved)
            }

            /// Inserts moved messages without a last-value key `(place in moved,
            /// message, arrival)` in multi-row statements, and records their new ids
            /// in `moved`.
            async fn add_moved(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                adds: Vec<(usize, $crate::NewMessage, i64)>,
                moved: &mut [$crate::Moved],
                bytes: &mut i64,
            ) -> $crate::Result<()> {
                if adds.is_empty() {
                    return Ok(());
                }
                let places: Vec<usize> = adds.iter().map(|(at, ..)| *at).collect();
                let messages = adds
                    .into_iter()
                    .map(|(_, m, arrival)| (m, Some(arrival)))
                    .collect();
                let ids = self.insert_arrived(conn, messages, bytes).await?;
                for (at, id) in places.into_iter().zip(ids) {
                    moved[at] = $crate::Moved::Added(id);
                }
                Ok(())
            }

            /// Adds `message`, moved from another queue (its row there deleted in this
            /// transaction), with its arrival `arrival`; but not when it has a last-value
            /// key and its container holds a committed or held-back message with that
            /// key that arrived after it (one read, `LIMIT 1`, by `msgs_lvidx`): a
            /// newer value came while it was away, and it must not replace it
            /// ([`WriteOp::DeadLetter`](crate::WriteOp::DeadLetter)).
            async fn move_in(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                message: $crate::NewMessage,
                arrival: i64,
                bytes: &mut i64,
            ) -> $crate::Result<$crate::Moved> {
                if let (Some(key), None) = (&message.last_value, &message.xid) {
                    let newer: Option<i64> = sqlx::query_scalar(&self.sql.newer_last_value)
                        .bind(&message.container)
                        .bind(key)
                        .bind(arrival)
                        .fetch_optional(&mut *conn)
                        .await
                        .map_err($crate::error::db("compare last values"))?;
                    if newer.is_some() {
                        return Ok($crate::Moved::Superseded);
                    }
                }
                let ids = self
                    .insert_arrived(conn, vec![(message, Some(arrival))], bytes)
                    .await?;
                Ok($crate::Moved::Added(ids[0]))
            }

            /// Whether the next op of a write is a failed-delivery count of `container`.
            fn next_is_redelivered(
                ops: &mut std::iter::Peekable<std::vec::IntoIter<$crate::WriteOp>>,
                container: &str,
            ) -> bool {
                matches!(ops.peek(), Some($crate::WriteOp::Redelivered { container: c, .. }) if c == container)
            }

            /// A run of [`WriteOp::Redelivered`](crate::WriteOp::Redelivered) of one
            /// container (at most [`ID_LIST_MAX`](crate::statements::ID_LIST_MAX)
            /// rows `(id, count, hold_until)`) in one statement; returns the ids of the
            /// rows changed (a row gone or prepared is not).
            async fn redelivered_many(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                rows: &[(i64, u32, Option<i64>)],
            ) -> $crate::Result<std::collections::HashSet<i64>> {
                let list = serde_json::to_string(rows).unwrap_or_else(|_| "[]".into());
                let changed: Vec<i64> = sqlx::query_scalar(&self.sql.redelivered_many)
                    .bind(container)
                    .bind(list)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($crate::error::db("count failed deliveries"))?;
                Ok(changed.into_iter().collect())
            }

            /// A run of [`WriteOp::Commit`](crate::WriteOp::Commit) (at most
            /// [`ID_LIST_MAX`](crate::statements::ID_LIST_MAX) xids): their rows are
            /// read in one statement and renumbered in one per
            /// [`ID_LIST_MAX`](crate::statements::ID_LIST_MAX) rows, in the order the
            /// commits would give them one by one (op order, then id); returns each
            /// commit's `(old id, new id)` pairs. When the xids hold more than
            /// [`WRITE_BATCH`](crate::statements::WRITE_BATCH) rows together, they are
            /// committed one by one instead (each in batches).
            async fn commit_many(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                xids: &[String],
                bytes: &mut i64,
                touched: &mut Vec<String>,
            ) -> $crate::Result<Vec<Vec<(i64, i64)>>> {
                let texts: Vec<&str> = xids.iter().map(String::as_str).collect();
                // By the xid index; no order is asked, so the index plans serve (unlike
                // `commit_prepared`'s read).
                let rows: Vec<(String, i64)> = sqlx::query_as(&self.sql.prepared_ids_many)
                    .bind(<$db as $crate::sql::IdList>::text_list(&texts))
                    .bind($crate::statements::WRITE_BATCH)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($crate::error::db("commit transactions"))?;
                if rows.len() as i64 >= $crate::statements::WRITE_BATCH {
                    let mut all = Vec::with_capacity(xids.len());
                    for xid in xids {
                        all.push(self.commit_prepared(conn, xid, bytes, touched).await?);
                    }
                    return Ok(all);
                }
                // Op order: the first commit of an xid takes its rows (a later commit
                // of the same xid finds none, as one by one).
                let mut position = std::collections::HashMap::with_capacity(xids.len());
                for (at, xid) in xids.iter().enumerate() {
                    position.entry(xid.as_str()).or_insert(at);
                }
                let mut rows: Vec<(usize, i64)> = rows
                    .iter()
                    .filter_map(|(xid, id)| Some((*position.get(xid.as_str())?, *id)))
                    .collect();
                rows.sort_unstable();
                let mut renumbered = vec![Vec::new(); xids.len()];
                let mut pairs = Vec::with_capacity(rows.len());
                for (at, old) in rows {
                    let new = self.next_id();
                    renumbered[at].push((old, new));
                    pairs.push((old, new));
                }
                let mut last_values: Vec<(i64, String, String)> = Vec::new();
                for chunk in pairs.chunks($crate::statements::ID_LIST_MAX) {
                    let list = serde_json::to_string(chunk).unwrap_or_else(|_| "[]".into());
                    let committed: Vec<(i64, String, Option<String>)> =
                        sqlx::query_as(&self.sql.renumber_many)
                            .bind(list)
                            .fetch_all(&mut *conn)
                            .await
                            .map_err($crate::error::db("commit transactions"))?;
                    for (_, container, _) in &committed {
                        if touched.last() != Some(container) {
                            touched.push(container.clone());
                        }
                    }
                    last_values.extend(
                        committed
                            .into_iter()
                            .filter_map(|(new, container, key)| Some((new, container, key?))),
                    );
                }
                // Each replaces the older rows of its key, in new-id order (as one by
                // one: a later row of the batch replaces an earlier one).
                last_values.sort_unstable();
                for (new, container, key) in last_values {
                    self.replace_last_values(conn, &container, &key, new, bytes)
                        .await?;
                }
                Ok(renumbered)
            }

            /// [`WriteOp::Subscribe`](crate::WriteOp::Subscribe): creates the
            /// subscription unless it exists, and returns it as stored.
            async fn subscribe(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: String,
                key: $crate::SubscriptionKey,
                selector: Option<String>,
                prioritized: bool,
            ) -> $crate::Result<$crate::DurableSubscription> {
                let rows = self.subscription_rows(conn, &container, &key).await?;
                if rows.is_empty() {
                    let mark = self.last_id.load(std::sync::atomic::Ordering::SeqCst);
                    let priorities: Vec<i32> = if prioritized {
                        (0..=i32::from($crate::MAX_PRIORITY)).collect()
                    } else {
                        vec![-1]
                    };
                    for priority in priorities {
                        sqlx::query(&self.sql.insert_subscription_row)
                            .bind(&container)
                            .bind(&key.client_id)
                            .bind(&key.subscription_name)
                            .bind(&selector)
                            .bind(mark)
                            .bind(priority)
                            .execute(&mut *conn)
                            .await
                            .map_err($crate::error::db("add subscription"))?;
                    }
                }
                let rows = self.subscription_rows(conn, &container, &key).await?;
                Ok($crate::sql::subscription_of(container, key, rows))
            }

            /// [`WriteOp::Unsubscribe`](crate::WriteOp::Unsubscribe): returns whether
            /// the subscription existed.
            async fn unsubscribe(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                key: &$crate::SubscriptionKey,
            ) -> $crate::Result<bool> {
                let removed = sqlx::query(&self.sql.delete_subscription)
                    .bind(container)
                    .bind(&key.client_id)
                    .bind(&key.subscription_name)
                    .execute(&mut *conn)
                    .await
                    .map_err($crate::error::db("remove subscription"))?
                    .rows_affected();
                sqlx::query(&self.sql.delete_subscription_indacks)
                    .bind(container)
                    .bind(&key.client_id)
                    .bind(&key.subscription_name)
                    .execute(&mut *conn)
                    .await
                    .map_err($crate::error::db("remove subscription"))?;
                Ok(removed > 0)
            }

            /// [`WriteOp::Ack`](crate::WriteOp::Ack): returns how many of `messages`
            /// were not done for the subscription before.
            async fn ack(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                key: &$crate::SubscriptionKey,
                messages: Vec<(i64, u8)>,
            ) -> $crate::Result<u64> {
                // Acks that close the gap after the mark move it directly; only the ones
                // left above the first un-acked message are recorded.
                let rows = self.subscription_rows(conn, container, key).await?;
                let prioritized = rows.iter().any(|r| r.0 >= 0);
                let mut by_row: std::collections::BTreeMap<i32, std::collections::BTreeSet<i64>> =
                    Default::default();
                for (id, priority) in messages {
                    by_row
                        .entry($crate::sql::mark_row(prioritized, priority))
                        .or_default()
                        .insert(id);
                }
                let mut newly_acked = 0;
                for (row, mut acking) in by_row {
                    let Some(&(_, mark, _)) = rows.iter().find(|r| r.0 == row) else {
                        continue;
                    };
                    acking.retain(|id| *id > mark);
                    if acking.is_empty() {
                        continue;
                    }
                    let (_, passed) = self
                        .advance_mark(conn, container, key, row, mark, &mut acking)
                        .await?;
                    newly_acked += passed;
                    let acking: Vec<i64> = acking.into_iter().collect();
                    for chunk in acking.chunks($crate::statements::ID_LIST_MAX) {
                        newly_acked += Self::for_row(&self.sql.insert_indacks, container, key, row)
                            .bind(<$db as $crate::sql::IdList>::id_list(chunk))
                            .execute(&mut *conn)
                            .await
                            .map_err($crate::error::db("record acks"))?
                            .rows_affected();
                    }
                }
                Ok(newly_acked)
            }

            /// [`WriteOp::AckUpTo`](crate::WriteOp::AckUpTo): returns whether any mark
            /// moved.
            async fn ack_up_to(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                key: &$crate::SubscriptionKey,
                priority: Option<u8>,
                up_to: i64,
            ) -> $crate::Result<bool> {
                let rows = self.subscription_rows(conn, container, key).await?;
                let mut moved = false;
                for (row, mark, _) in rows {
                    if row >= 0 && priority.is_some_and(|p| i32::from(p) != row) {
                        continue;
                    }
                    moved |= self.set_mark(conn, container, key, row, up_to).await?;
                    let (advanced, _) = self
                        .advance_mark(
                            conn,
                            container,
                            key,
                            row,
                            mark.max(up_to),
                            &mut Default::default(),
                        )
                        .await?;
                    moved |= advanced > mark.max(up_to);
                }
                Ok(moved)
            }

            /// [`WriteOp::Commit`](crate::WriteOp::Commit): gives each message of `xid`
            /// a new, highest id, in batches of
            /// [`WRITE_BATCH`](crate::statements::WRITE_BATCH); returns
            /// `(old id, new id)` of each.
            async fn commit_prepared(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                xid: &str,
                bytes: &mut i64,
                touched: &mut Vec<String>,
            ) -> $crate::Result<Vec<(i64, i64)>> {
                // `xid = $1 ORDER BY id`: no index has that order on PostgreSQL (the xid
                // index is on `xid` alone), so under the index-plan settings the planner
                // would walk the primary key of the whole table to avoid the sort. With its
                // usual settings it reads the transaction's rows by the xid index and sorts
                // them.
                Self::plans(&mut *conn, $tx.usual_plans).await?;
                let mut renumbered = Vec::new();
                loop {
                    let ids: Vec<i64> = sqlx::query_scalar(&self.sql.prepared_ids)
                        .bind(xid)
                        .bind($crate::statements::WRITE_BATCH)
                        .fetch_all(&mut *conn)
                        .await
                        .map_err($crate::error::db("commit transaction"))?;
                    if ids.is_empty() {
                        break;
                    }
                    // A short read took every row left: this transaction is the only
                    // writer, and a renumbered row no longer has the xid. (One read
                    // fewer per commit: a scheduled release is one row.)
                    let last = ids.len() < $crate::statements::WRITE_BATCH as usize;
                    for old in ids {
                        let new = self.next_id();
                        let (container, key): (String, Option<String>) =
                            sqlx::query_as(&self.sql.renumber_prepared)
                                .bind(old)
                                .bind(new)
                                .fetch_one(&mut *conn)
                                .await
                                .map_err($crate::error::db("commit transaction"))?;
                        if touched.last() != Some(&container) {
                            touched.push(container.clone());
                        }
                        if let Some(key) = key {
                            self.replace_last_values(conn, &container, &key, new, bytes)
                                .await?;
                        }
                        renumbered.push((old, new));
                    }
                    if last {
                        break;
                    }
                }
                Self::plans(&mut *conn, $tx.index_plans).await?;
                Ok(renumbered)
            }

            /// [`WriteOp::Rollback`](crate::WriteOp::Rollback): returns how many
            /// messages it deleted.
            async fn rollback_prepared(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                xid: &str,
                bytes: &mut i64,
            ) -> $crate::Result<u64> {
                self.delete_prepared(conn, &self.sql.delete_prepared, xid, None, bytes)
                    .await
            }

            /// [`WriteOp::RollbackAbandoned`](crate::WriteOp::RollbackAbandoned): the
            /// prefix is matched literally, `%` and `_` included
            /// ([`like_prefix`](crate::sql::like_prefix)); returns how many messages it
            /// deleted.
            async fn rollback_abandoned(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                xid_prefix: &str,
                bytes: &mut i64,
            ) -> $crate::Result<u64> {
                let pattern = $crate::sql::like_prefix(xid_prefix);
                let sql = &self.sql.delete_prepared_prefix;
                self.delete_prepared(conn, sql, &pattern, Some(xid_prefix), bytes)
                    .await
            }

            /// Runs a prepared-message delete (`$1` the xid or its pattern, `$2` the
            /// batch size, `$3` the exact prefix if given) until it deletes nothing;
            /// returns how many rows it deleted.
            async fn delete_prepared(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                sql: &str,
                xid: &str,
                prefix: Option<&str>,
                bytes: &mut i64,
            ) -> $crate::Result<u64> {
                let mut count = 0;
                loop {
                    let mut query = sqlx::query_scalar(sql)
                        .bind(xid)
                        .bind($crate::statements::WRITE_BATCH);
                    if let Some(prefix) = prefix {
                        query = query.bind(prefix);
                    }
                    let lengths: Vec<i64> = query
                        .fetch_all(&mut *conn)
                        .await
                        .map_err($crate::error::db("roll back transaction"))?;
                    let n = $crate::sql::deleted(lengths, bytes);
                    count += n;
                    if n == 0 {
                        break;
                    }
                }
                Ok(count)
            }

            /// The messages `sql` reads in one read transaction, bound `(container,
            /// value, limit)`; `op` names the call in an error.
            async fn read_page(
                &self,
                op: &'static str,
                sql: &str,
                container: &str,
                value: i64,
                limit: u32,
            ) -> $crate::Result<Vec<std::sync::Arc<$crate::StoredMessage>>> {
                let mut tx = self.begin_read(op).await?;
                let rows: Vec<$crate::sql::MessageRow> = sqlx::query_as(sql)
                    .bind(container)
                    .bind(value)
                    .bind(i64::from(limit))
                    .fetch_all(&mut *tx)
                    .await
                    .map_err($crate::error::db(op))?;
                tx.commit().await.map_err($crate::error::db(op))?;
                $crate::sql::decode_messages(container, rows, &self.stats)
            }

            /// The rows of a topic's expiry page after `after`, read by `statements`
            /// (`read_expired_after` or `read_expired_keys_after`): the rest of
            /// `after`'s expiration, then the later ones, two ranges of the expiration
            /// index, each in its order, together `limit` rows, in one snapshot.
            async fn expired_after<R>(
                &self,
                statements: &[String; 2],
                container: &str,
                now_ms: i64,
                after: (i64, i64),
                limit: u32,
            ) -> $crate::Result<Vec<R>>
            where
                R: for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row> + Send + Unpin,
            {
                let mut tx = self.begin_read("read expired").await?;
                let mut rows: Vec<R> = sqlx::query_as(&statements[0])
                    .bind(container)
                    .bind(now_ms)
                    .bind(i64::from(limit))
                    .bind(after.0)
                    .bind(after.1)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err($crate::error::db("read expired"))?;
                let left = i64::from(limit) - rows.len() as i64;
                if left > 0 {
                    let later: Vec<R> = sqlx::query_as(&statements[1])
                        .bind(container)
                        .bind(now_ms)
                        .bind(left)
                        .bind(after.0)
                        .fetch_all(&mut *tx)
                        .await
                        .map_err($crate::error::db("read expired"))?;
                    rows.extend(later);
                }
                tx.commit().await.map_err($crate::error::db("read expired"))?;
                Ok(rows)
            }

            /// [`WriteOp::Cleanup`](crate::WriteOp::Cleanup): returns how many messages
            /// it deleted and the id up to which it is done (the next batch's `after`).
            async fn cleanup(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                limit: u32,
                after: i64,
                orphans_up_to: Option<i64>,
                bytes: &mut i64,
            ) -> $crate::Result<(u64, i64)> {
                let marks: Vec<(i32, i64)> = sqlx::query_as(&self.sql.min_marks)
                    .bind(container)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($crate::error::db("cleanup"))?;
                let all = marks.iter().find(|m| m.0 < 0).map(|m| m.1);
                let per_priority: Vec<(i32, i64)> =
                    marks.iter().filter(|m| m.0 >= 0).copied().collect();
                let limit = i64::from(limit);
                let all = if marks.is_empty() { orphans_up_to } else { all };
                // Where one range stopped: at its mark when it deleted less than it
                // could, else at the last row it deleted (more may follow it).
                let done_up_to = |rows: &[(i64, i64)], left: i64, mark: i64| {
                    if (rows.len() as i64) < left {
                        mark.max(after)
                    } else {
                        rows.iter().map(|r| r.0).max().unwrap_or(after)
                    }
                };
                let mut count = 0;
                if per_priority.is_empty() {
                    let Some(mark) = all else {
                        return Ok((0, after));
                    };
                    let rows: Vec<(i64, i64)> = sqlx::query_as(&self.sql.cleanup[0])
                        .bind(container)
                        .bind(mark)
                        .bind(limit)
                        .bind(after)
                        .fetch_all(&mut *conn)
                        .await
                        .map_err($crate::error::db("cleanup"))?;
                    let reached = done_up_to(&rows, limit, mark);
                    count += $crate::sql::deleted(rows.into_iter().map(|r| r.1).collect(), bytes);
                    return Ok((count, reached));
                }
                // Each priority's range goes on from `after`; the batch is done up to
                // the lowest point any of them reached (`after` for one the limit left
                // unvisited).
                let mut lowest = i64::MAX;
                for (priority, mark) in per_priority {
                    let mark = all.map_or(mark, |all| all.min(mark));
                    let left = limit - count as i64;
                    if left <= 0 {
                        lowest = after;
                        break;
                    }
                    let rows: Vec<(i64, i64)> = sqlx::query_as(&self.sql.cleanup[1])
                        .bind(container)
                        .bind(mark)
                        .bind(priority)
                        .bind(left)
                        .bind(after)
                        .fetch_all(&mut *conn)
                        .await
                        .map_err($crate::error::db("cleanup"))?;
                    lowest = lowest.min(done_up_to(&rows, left, mark));
                    count += $crate::sql::deleted(rows.into_iter().map(|r| r.1).collect(), bytes);
                }
                Ok((count, lowest))
            }

            /// [`WriteOp::Remove`](crate::WriteOp::Remove): returns how many rows it
            /// deleted.
            async fn remove(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                ids: &[i64],
                bytes: &mut i64,
            ) -> $crate::Result<u64> {
                let mut count = 0;
                for chunk in ids.chunks($crate::statements::ID_LIST_MAX) {
                    let lengths: Vec<i64> = sqlx::query_scalar(&self.sql.remove)
                        .bind(container)
                        .bind(<$db as $crate::sql::IdList>::id_list(chunk))
                        .fetch_all(&mut *conn)
                        .await
                        .map_err($crate::error::db("remove messages"))?;
                    count += $crate::sql::deleted(lengths, bytes);
                }
                Ok(count)
            }

            /// [`WriteOp::Reclaim`](crate::WriteOp::Reclaim): returns the deleted ids,
            /// ascending.
            async fn reclaim(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                ids: &[i64],
                bytes: &mut i64,
            ) -> $crate::Result<Vec<i64>> {
                let mut gone = Vec::new();
                for chunk in ids.chunks($crate::statements::ID_LIST_MAX) {
                    let rows: Vec<(i64, i64)> = sqlx::query_as(&self.sql.reclaim)
                        .bind(container)
                        .bind(<$db as $crate::sql::IdList>::id_list(chunk))
                        .fetch_all(&mut *conn)
                        .await
                        .map_err($crate::error::db("reclaim expired messages"))?;
                    let (deleted, lengths): (Vec<i64>, Vec<i64>) = rows.into_iter().unzip();
                    $crate::sql::deleted(lengths, bytes);
                    if deleted.is_empty() {
                        continue;
                    }
                    sqlx::query(&self.sql.delete_message_indacks)
                        .bind(container)
                        .bind(<$db as $crate::sql::IdList>::id_list(&deleted))
                        .execute(&mut *conn)
                        .await
                        .map_err($crate::error::db("drop individual acks"))?;
                    gone.extend(deleted);
                }
                gone.sort_unstable();
                Ok(gone)
            }

            /// [`WriteOp::ExpireQueue`](crate::WriteOp::ExpireQueue): returns the
            /// deleted ids, ascending.
            async fn expire_queue(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                now_ms: i64,
                limit: u32,
                bytes: &mut i64,
            ) -> $crate::Result<Vec<i64>> {
                let rows: Vec<(i64, i64)> = sqlx::query_as(&self.sql.expire_queue)
                    .bind(container)
                    .bind(now_ms)
                    .bind(i64::from(limit))
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($crate::error::db("expire queue messages"))?;
                let (mut ids, lengths): (Vec<i64>, Vec<i64>) = rows.into_iter().unzip();
                $crate::sql::deleted(lengths, bytes);
                ids.sort_unstable();
                Ok(ids)
            }

            /// [`WriteOp::Repeat`](crate::WriteOp::Repeat): the job's rows move to
            /// `next_xid`; only if there were any, `copy` is added (its new id).
            async fn repeat(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                xid: &str,
                next_xid: &str,
                copy: $crate::NewMessage,
                bytes: &mut i64,
            ) -> $crate::Result<Option<i64>> {
                let moved = sqlx::query(&self.sql.move_prepared)
                    .bind(xid)
                    .bind(next_xid)
                    .execute(&mut *conn)
                    .await
                    .map_err($crate::error::db("reschedule a repeating message"))?;
                if moved.rows_affected() == 0 {
                    return Ok(None);
                }
                Ok(Some(self.insert_messages(conn, vec![copy], bytes).await?[0]))
            }

            /// [`WriteOp::DeadLetter`](crate::WriteOp::DeadLetter): what became of row
            /// `id` of `container` and its copy `message` (see [`Self::move_in`]).
            async fn dead_letter(
                &self,
                conn: &mut <$db as sqlx::Database>::Connection,
                container: &str,
                id: i64,
                message: $crate::NewMessage,
                bytes: &mut i64,
            ) -> $crate::Result<$crate::Moved> {
                // The remove statement with one id: only a row that is still there, and
                // not prepared, is moved; it returns the row's arrival.
                let rows: Vec<(i64, i64, i64)> = sqlx::query_as(&self.sql.remove_ids)
                    .bind(container)
                    .bind(<$db as $crate::sql::IdList>::id_list(&[id]))
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($crate::error::db("dead-letter message"))?;
                let Some(&(_, length, arrival)) = rows.first() else {
                    return Ok($crate::Moved::Gone);
                };
                $crate::sql::deleted(vec![length], bytes);
                self.move_in(conn, message, arrival, bytes).await
            }
        }

        #[async_trait::async_trait]
        impl $crate::MessageStore for $store {
            fn backend(&self) -> $crate::Backend {
                $backend
            }

            fn stats(&self) -> &$crate::ReadStats {
                &self.stats
            }

            fn group_topic(&self, container: &str) -> Option<String> {
                self.groups.topic_of(container).map(|t| t.to_string())
            }

            fn last_assigned_id(&self) -> i64 {
                self.last_id.load(std::sync::atomic::Ordering::SeqCst)
            }

            fn stored_bytes(&self) -> u64 {
                // Negative only for a moment if two writers' commits and updates
                // interleave (a broker has one writer).
                self.stored_bytes
                    .load(std::sync::atomic::Ordering::SeqCst)
                    .max(0) as u64
            }

            async fn write(
                &self,
                ops: Vec<$crate::WriteOp>,
            ) -> $crate::Result<Vec<$crate::WriteOutcome>> {
                let count = ops.len() as u64;
                let mut conn = self
                    .pool
                    .acquire()
                    .await
                    .map_err($crate::error::db("begin"))?;
                // A connection whose write failed is closed, not pooled again: after a
                // failed COMMIT (SQLite's disk full, a broken PostgreSQL link) the
                // driver may still count a transaction open on it, and every later
                // BEGIN on it would fail ("non-zero transaction depth").
                // The ids this batch gives new rows: `first_new..=last_new` (this is
                // the store's one writer), to settle a commit whose answer is lost.
                let first_new = self.last_assigned_id() + 1;
                // The containers whose kept counts go after this write, whatever its
                // outcome (see `crate::counts`); a commit adds its rows' below.
                let mut touched: Vec<String> = Vec::new();
                // Consumer groups bound or unbound by this write: known once it commits.
                let mut bindings: Vec<(bool, String, String)> = Vec::new();
                for op in &ops {
                    for container in op.containers() {
                        if touched.last().map(String::as_str) != Some(container) {
                            touched.push(container.to_string());
                        }
                    }
                    match op {
                        $crate::WriteOp::Subscribe { container, key, .. } if key.is_group() => {
                            bindings.push((true, container.clone(), key.subscription_name.clone()));
                        }
                        $crate::WriteOp::Unsubscribe { container, key } if key.is_group() => {
                            bindings.push((false, container.clone(), key.subscription_name.clone()));
                        }
                        _ => {}
                    }
                }
                let written = async {
                    let mut tx = sqlx::Connection::begin_with(&mut *conn, $tx.write)
                        .await
                        .map_err($crate::error::db("begin"))?;
                    // With a lease: only while it is held (see `crate::lease`).
                    self.guard_write(&mut *tx).await?;
                    let mut outcomes = Vec::with_capacity(ops.len());
                    let mut bytes = 0;
                    let mut ops = ops.into_iter().peekable();
                    while let Some(op) = ops.next() {
                        // A run of commits, or of failed-delivery counts of one
                        // container, goes into a few statements for the whole run.
                        let op = match op {
                            $crate::WriteOp::Commit { xid } if Self::next_is_commit(&mut ops) => {
                                let mut xids = vec![xid];
                                while xids.len() < $crate::statements::ID_LIST_MAX
                                    && Self::next_is_commit(&mut ops)
                                {
                                    if let Some($crate::WriteOp::Commit { xid }) = ops.next() {
                                        xids.push(xid);
                                    }
                                }
                                let renumbered =
                                    self.commit_many(&mut *tx, &xids, &mut bytes, &mut touched).await?;
                                outcomes.extend(
                                    renumbered.into_iter().map($crate::WriteOutcome::Committed),
                                );
                                continue;
                            }
                            $crate::WriteOp::Redelivered { container, id, count, hold_until }
                                if Self::next_is_redelivered(&mut ops, &container)
                                    && !self.groups.is_group(&container) =>
                            {
                                let mut rows = vec![(id, count, hold_until)];
                                while rows.len() < $crate::statements::ID_LIST_MAX
                                    && Self::next_is_redelivered(&mut ops, &container)
                                {
                                    if let Some($crate::WriteOp::Redelivered {
                                        id, count, hold_until, ..
                                    }) = ops.next()
                                    {
                                        rows.push((id, count, hold_until));
                                    }
                                }
                                let changed =
                                    self.redelivered_many(&mut *tx, &container, &rows).await?;
                                outcomes.extend(rows.iter().map(|(id, ..)| {
                                    $crate::WriteOutcome::Deleted(u64::from(changed.contains(id)))
                                }));
                                continue;
                            }
                            $crate::WriteOp::DeadLetter { container, id, message }
                                if !self.groups.is_group(&container)
                                    && self.next_is_dead_letter(&mut ops) =>
                            {
                                let mut moves = vec![(container, id, message)];
                                while moves.len() < $crate::statements::ID_LIST_MAX
                                    && self.next_is_dead_letter(&mut ops)
                                {
                                    if let Some($crate::WriteOp::DeadLetter {
                                        container, id, message,
                                    }) = ops.next()
                                    {
                                        moves.push((container, id, message));
                                    }
                                }
                                let moved = self.dead_letter_many(&mut *tx, moves, &mut bytes).await?;
                                outcomes.extend(moved.into_iter().map($crate::WriteOutcome::DeadLettered));
                                continue;
                            }
                            op => op,
                        };
                        let $crate::WriteOp::Add(first) = op else {
                            outcomes.push(self.apply(&mut *tx, op, &mut bytes, &mut touched).await?);
                            continue;
                        };
                        // A run of adds goes into multi-row inserts.
                        let mut adds = vec![first];
                        while let Some($crate::WriteOp::Add(_)) = ops.peek() {
                            if let Some($crate::WriteOp::Add(m)) = ops.next() {
                                adds.push(m);
                            }
                        }
                        let ids = self.insert_messages(&mut *tx, adds, &mut bytes).await?;
                        outcomes.extend(ids.into_iter().map($crate::WriteOutcome::Added));
                    }
                    // A batch that gives no row a new id (acks, deletes) leaves its
                    // own token in the commit mark instead, as its proof.
                    let mut token = None;
                    if self.last_assigned_id() < first_new {
                        let t = self
                            .commit_mark
                            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                            + 1;
                        sqlx::query(&self.sql.set_commit_mark)
                            .bind(t)
                            .execute(&mut *tx)
                            .await
                            .map_err($crate::error::db("set commit mark"))?;
                        token = Some(t);
                    }
                    let refused = tx.commit().await.err();
                    Ok((outcomes, bytes, refused, token))
                }
                .await;
                // After the transaction, committed or not: a count taken from now on
                // sees what it left. A topic's rows are its groups' too.
                let groups: Vec<std::sync::Arc<str>> = touched
                    .iter()
                    .flat_map(|c| self.groups.groups_of(c))
                    .collect();
                self.counts.written(
                    touched
                        .iter()
                        .map(String::as_str)
                        .chain(groups.iter().map(|g| &**g)),
                );
                let last_new = self.last_assigned_id();
                let (outcomes, bytes, refused, token) = match written {
                    Ok(written) => written,
                    Err(e) => {
                        conn.close_on_drop();
                        return Err(e);
                    }
                };
                if let Some(e) = refused {
                    // Gone before the probe below, which may need its pool slot.
                    conn.close_on_drop();
                    drop(conn);
                    // The connection may have broken after the server committed and
                    // before its answer came back (PostgreSQL over a network). Rows
                    // with the batch's new ids prove that it committed, or, for a batch
                    // without new ids, its token in the commit mark: answer as
                    // committed, so nothing stored is reported refused (and sent
                    // again by its producer) and no committed ack is taken back.
                    // Without the proof it stays an error.
                    let proven = match token {
                        Some(token) => self.marked(token).await,
                        None => self.committed(first_new, last_new).await,
                    };
                    if !proven {
                        return Err($crate::error::db("commit")(e));
                    }
                    tracing::warn!(
                        error = %e,
                        "a commit's answer was lost; its rows are stored, so it committed"
                    );
                    self.stats.in_doubt_commit_settled();
                }
                self.stored_bytes
                    .fetch_add(bytes, std::sync::atomic::Ordering::SeqCst);
                self.stats.committed(count);
                for (bound, topic, group) in bindings {
                    if bound {
                        self.groups.bind(&topic, &group);
                    } else {
                        self.groups.unbind(&topic, &group);
                    }
                    self.counts.written([group.as_str()]);
                }
                Ok(outcomes)
            }

            async fn find_subscription(
                &self,
                container: &str,
                key: &$crate::SubscriptionKey,
            ) -> $crate::Result<Option<$crate::DurableSubscription>> {
                let mut conn = self
                    .pool
                    .acquire()
                    .await
                    .map_err($crate::error::db("read subscription"))?;
                let rows = self.subscription_rows(&mut *conn, container, key).await?;
                Ok((!rows.is_empty()).then(|| {
                    $crate::sql::subscription_of(container.to_string(), key.clone(), rows)
                }))
            }

            async fn find_subscription_containers(
                &self,
                key: &$crate::SubscriptionKey,
                after: &str,
                limit: u32,
            ) -> $crate::Result<Vec<String>> {
                let rows: Vec<(String,)> = sqlx::query_as(&self.sql.subscription_containers)
                    .bind(&key.client_id)
                    .bind(&key.subscription_name)
                    .bind(after)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err($crate::error::db("find subscription"))?;
                Ok(rows.into_iter().map(|(c,)| c).collect())
            }

            async fn count_client_subscriptions(
                &self,
                client_id: &str,
                limit: u32,
            ) -> $crate::Result<u64> {
                let n: i64 = sqlx::query_scalar(&self.sql.count_client_subscriptions)
                    .bind(client_id)
                    .bind(i64::from(limit))
                    .fetch_one(&self.pool)
                    .await
                    .map_err($crate::error::db("count subscriptions"))?;
                Ok(n.max(0) as u64)
            }

            async fn list_containers(
                &self,
                after: &str,
                below: &str,
                limit: u32,
            ) -> $crate::Result<Vec<String>> {
                let mut conn = self
                    .pool
                    .acquire()
                    .await
                    .map_err($crate::error::db("list containers"))?;
                let mut found: Vec<String> = Vec::new();
                while found.len() < limit as usize {
                    let from = found.last().map(String::as_str).unwrap_or(after);
                    let next: Option<(String,)> = sqlx::query_as(&self.sql.next_container)
                        .bind(from)
                        .bind(below)
                        .fetch_optional(&mut *conn)
                        .await
                        .map_err($crate::error::db("list containers"))?;
                    match next {
                        Some((c,)) => found.push(c),
                        None => break,
                    }
                }
                Ok(found)
            }

            async fn list_subscriptions_between(
                &self,
                from: &str,
                below: &str,
                after: Option<(&str, &$crate::SubscriptionKey)>,
                limit: u32,
            ) -> $crate::Result<Vec<$crate::DurableSubscription>> {
                let (container, client, name) = after
                    .map(|(c, k)| (c, k.client_id.as_str(), k.subscription_name.as_str()))
                    .unwrap_or(("", "", ""));
                let rows: Vec<(String, String, String, Option<String>)> =
                    sqlx::query_as(&self.sql.subscriptions_between)
                        .bind(from)
                        .bind(below)
                        .bind(container)
                        .bind(client)
                        .bind(name)
                        .bind(i64::from(limit))
                        .fetch_all(&self.pool)
                        .await
                        .map_err($crate::error::db("list subscriptions"))?;
                Ok(rows
                    .into_iter()
                    .map(|(container, client_id, sub_name, selector)| $crate::DurableSubscription {
                        container,
                        key: $crate::SubscriptionKey::new(client_id, sub_name),
                        selector,
                        marks: Vec::new(),
                    })
                    .collect())
            }

            async fn list_subscriptions(
                &self,
                container: &str,
                after: Option<&$crate::SubscriptionKey>,
                limit: u32,
            ) -> $crate::Result<Vec<$crate::DurableSubscription>> {
                let per_sub = i64::from($crate::MAX_PRIORITY) + 1;
                let cap = i64::from(limit) * per_sub;
                let (client, name) = after
                    .map(|k| (k.client_id.as_str(), k.subscription_name.as_str()))
                    .unwrap_or(("", ""));
                let rows: Vec<(String, String, Option<String>, i32, i64)> =
                    sqlx::query_as(&self.sql.list_subscription_rows)
                        .bind(container)
                        .bind(client)
                        .bind(name)
                        .bind(cap)
                        .fetch_all(&self.pool)
                        .await
                        .map_err($crate::error::db("list subscriptions"))?;
                let truncated = rows.len() as i64 == cap;
                let mut subs: Vec<$crate::DurableSubscription> = Vec::new();
                let mut group: Vec<(i32, i64, Option<String>)> = Vec::new();
                let mut current: Option<$crate::SubscriptionKey> = None;
                for (client_id, sub_name, selector, priority, mark) in rows {
                    let key = $crate::SubscriptionKey::new(client_id, sub_name);
                    if current.as_ref() != Some(&key) {
                        if let Some(done) = current.take() {
                            subs.push($crate::sql::subscription_of(
                                container.to_string(),
                                done,
                                std::mem::take(&mut group),
                            ));
                        }
                        current = Some(key);
                    }
                    group.push((priority, mark, selector));
                }
                if let Some(last) = current {
                    // A page cut in the middle of a subscription's rows leaves it for
                    // the next page.
                    let complete = !truncated || group.len() as i64 == per_sub || group[0].0 < 0;
                    if complete {
                        subs.push($crate::sql::subscription_of(
                            container.to_string(),
                            last,
                            group,
                        ));
                    }
                }
                subs.truncate(limit as usize);
                Ok(subs)
            }

            async fn read_pending(
                &self,
                container: &str,
                key: &$crate::SubscriptionKey,
                after_id: i64,
                priority: Option<u8>,
                limit: u32,
            ) -> $crate::Result<Vec<std::sync::Arc<$crate::StoredMessage>>> {
                use $crate::sql::PendingRead;
                const OP: &str = "read pending";
                let mut tx = self.begin_read(OP).await?;
                let marks: Vec<(i32, i64)> = self
                    .subscription_rows(&mut *tx, container, key)
                    .await?
                    .into_iter()
                    .map(|(row, mark, _)| (row, mark))
                    .collect();
                let limit = i64::from(limit);
                let read = $crate::sql::pending_read(&marks, after_id, priority);
                let rows: Vec<$crate::sql::MessageRow> = match read {
                    PendingRead::Nothing => Vec::new(),
                    PendingRead::All { bound } => {
                        sqlx::query_as(&self.sql.read_pending)
                            .bind(container)
                            .bind(bound)
                            .bind(&key.client_id)
                            .bind(&key.subscription_name)
                            .bind(limit)
                            .fetch_all(&mut *tx)
                            .await
                            .map_err($crate::error::db(OP))?
                    }
                    PendingRead::Priority {
                        priority,
                        bound,
                        row,
                    } => {
                        sqlx::query_as(&self.sql.read_pending_priority)
                            .bind(container)
                            .bind(bound)
                            .bind(&key.client_id)
                            .bind(&key.subscription_name)
                            .bind(limit)
                            .bind(i32::from(priority))
                            .bind(row)
                            .fetch_all(&mut *tx)
                            .await
                            .map_err($crate::error::db(OP))?
                    }
                    PendingRead::Merged { bounds } => {
                        let mut query = sqlx::query_as(&self.sql.read_pending_merged)
                            .bind(container)
                            .bind(&key.client_id)
                            .bind(&key.subscription_name)
                            .bind(limit);
                        for bound in bounds {
                            query = query.bind(bound);
                        }
                        query.fetch_all(&mut *tx).await.map_err($crate::error::db(OP))?
                    }
                };
                tx.commit().await.map_err($crate::error::db(OP))?;
                $crate::sql::decode_messages(container, rows, &self.stats)
            }

            async fn scan_matching(
                &self,
                container: &str,
                after_id: i64,
                upto_id: i64,
                filter: &[(String, Vec<String>)],
                limit: u32,
            ) -> $crate::Result<Vec<std::sync::Arc<$crate::StoredMessage>>> {
                const OP: &str = "scan";
                // A name SQLite's JSON paths cannot quote (`"` or `\` in it; a
                // selector's identifiers have neither) is not tested in SQL: the
                // caller's selector still tests it.
                let filter: Vec<&(String, Vec<String>)> = filter
                    .iter()
                    .filter(|(name, values)| !name.contains(['"', '\\']) && !values.is_empty())
                    .collect();
                let counts: Vec<usize> = filter.iter().map(|(_, v)| v.len()).collect();
                let sql = self.sql.scan_matching(&counts);
                let mut tx = self.begin_read(OP).await?;
                let mut query = sqlx::query_as(&sql)
                    .bind(container)
                    .bind(after_id)
                    .bind(upto_id);
                for (name, values) in filter {
                    query = query.bind($crate::sql::json_path(self.backend(), name));
                    for value in values {
                        query = query.bind(value);
                    }
                }
                let rows: Vec<$crate::sql::MessageRow> = query
                    .bind(i64::from(limit))
                    .fetch_all(&mut *tx)
                    .await
                    .map_err($crate::error::db(OP))?;
                tx.commit().await.map_err($crate::error::db(OP))?;
                let own = $crate::sql::decode_messages(container, rows, &self.stats)?;
                // A group's topic rows have no headers column: they come back to be
                // tested by the caller's selector.
                match self.groups.topic_of(container) {
                    Some(topic) => {
                        let shared = self
                            .group_page(&topic, container, after_id, Some(upto_id), false, limit)
                            .await?;
                        Ok($crate::groups::merge_by_id(own, shared, limit))
                    }
                    None => Ok(own),
                }
            }

            async fn browse(
                &self,
                container: &str,
                after_id: i64,
                limit: u32,
            ) -> $crate::Result<Vec<std::sync::Arc<$crate::StoredMessage>>> {
                let own = self
                    .read_page("browse", &self.sql.browse, container, after_id, limit)
                    .await?;
                match self.groups.topic_of(container) {
                    Some(topic) => {
                        let shared = self
                            .group_page(&topic, container, after_id, None, true, limit)
                            .await?;
                        Ok($crate::groups::merge_by_id(own, shared, limit))
                    }
                    None => Ok(own),
                }
            }

            async fn read_queue(
                &self,
                container: &str,
                after_id: i64,
                limit: u32,
            ) -> $crate::Result<Vec<std::sync::Arc<$crate::StoredMessage>>> {
                let own = self
                    .read_page("read queue", &self.sql.read_queue, container, after_id, limit)
                    .await?;
                match self.groups.topic_of(container) {
                    Some(topic) => {
                        let shared = self
                            .group_page(&topic, container, after_id, None, false, limit)
                            .await?;
                        Ok($crate::groups::merge_by_id(own, shared, limit))
                    }
                    None => Ok(own),
                }
            }

            async fn read_held(
                &self,
                container: &str,
                after: (i64, i64),
                now_ms: i64,
                limit: u32,
            ) -> $crate::Result<$crate::HeldPage> {
                let own = self
                    .held_page(
                        [self.sql.read_held.as_str(), self.sql.next_held_due.as_str()],
                        container,
                        after,
                        now_ms,
                        limit,
                    )
                    .await?;
                if !self.groups.is_group(container) {
                    return Ok(own);
                }
                let statements = [self.sql.groups.held.as_str(), self.sql.groups.next_held_due.as_str()];
                let shared = self.held_page(statements, container, after, now_ms, limit).await?;
                let next_due = match (own.next_due, shared.next_due) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let full = own.messages.len() + shared.messages.len() >= limit as usize;
                let messages = $crate::groups::merge_by(own.messages, shared.messages, limit, |m| {
                    (m.due, m.message.id)
                });
                Ok($crate::HeldPage {
                    messages,
                    next_due: if full { None } else { next_due },
                })
            }

            async fn read_prepared_range(
                &self,
                from: &str,
                to: &str,
                limit: u32,
            ) -> $crate::Result<Vec<$crate::PreparedMessage>> {
                const OP: &str = "read prepared range";
                let mut tx = self.begin_read(OP).await?;
                #[allow(clippy::type_complexity)]
                let rows: Vec<(i64, String, i64, i32, Vec<u8>, i32, Option<i64>, String, String)> =
                    sqlx::query_as(&self.sql.read_prepared_range)
                        .bind(from)
                        .bind(to)
                        .bind(i64::from(limit))
                        .fetch_all(&mut *tx)
                        .await
                        .map_err($crate::error::db(OP))?;
                tx.commit().await.map_err($crate::error::db(OP))?;
                let mut out = Vec::with_capacity(rows.len());
                for (id, msgid, expiration, priority, msg, redeliveries, due, container, xid) in rows {
                    let row = (id, msgid, expiration, priority, msg, redeliveries, due);
                    let mut decoded =
                        $crate::sql::decode_messages(&container, vec![row], &self.stats)?;
                    out.push($crate::PreparedMessage {
                        xid,
                        message: decoded.remove(0),
                    });
                }
                Ok(out)
            }

            async fn count_prepared_range(
                &self,
                from: &str,
                to: &str,
                limit: u32,
            ) -> $crate::Result<u64> {
                const OP: &str = "count prepared range";
                let mut tx = self.begin_read(OP).await?;
                let count: i64 = sqlx::query_scalar(&self.sql.count_prepared_range)
                    .bind(from)
                    .bind(to)
                    .bind(i64::from(limit))
                    .fetch_one(&mut *tx)
                    .await
                    .map_err($crate::error::db(OP))?;
                tx.commit().await.map_err($crate::error::db(OP))?;
                self.stats.fetched_keys(count.max(0) as u64);
                Ok(count.max(0) as u64)
            }

            async fn recover_expired(
                &self,
                container: &str,
                subscriptions: &[$crate::SubscriptionKey],
                now_ms: i64,
                limit: u32,
            ) -> $crate::Result<$crate::ExpiredPage> {
                if subscriptions.is_empty() || limit == 0 {
                    return Ok($crate::ExpiredPage::default());
                }
                let text = self.sql.expiry_runs(subscriptions.len());
                let mut query = sqlx::query_as(&text)
                    .persistent(false)
                    .bind(container)
                    .bind(now_ms)
                    .bind(i64::from(limit) - 1);
                for key in subscriptions {
                    query = query.bind(&key.client_id).bind(&key.subscription_name);
                }
                let rows: Vec<$crate::sql::RunRow> = query
                    .fetch_all(&self.pool)
                    .await
                    .map_err($crate::error::db("find expired runs"))?;
                let (runs, more) = $crate::sql::runs_of(rows);
                if runs.is_empty() {
                    return Ok($crate::ExpiredPage::default());
                }
                let mut ranges: Vec<(Option<u8>, i64, Option<i64>)> = runs
                    .iter()
                    .map(|r| (r.priority, r.after, r.before))
                    .collect();
                ranges.sort_unstable();
                ranges.dedup();
                let text = self.sql.expired_in_ranges(&ranges);
                let rows: Vec<$crate::sql::MessageRow> = sqlx::query_as(&text)
                    .persistent(false)
                    .bind(container)
                    .bind(now_ms)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err($crate::error::db("load expired"))?;
                let messages = $crate::sql::decode_messages(container, rows, &self.stats)?;
                Ok($crate::sql::assign(&runs, messages, limit as usize, more))
            }

            async fn read_expired(
                &self,
                container: &str,
                now_ms: i64,
                limit: u32,
            ) -> $crate::Result<Vec<std::sync::Arc<$crate::StoredMessage>>> {
                let own = self
                    .read_page("read expired", &self.sql.read_expired, container, now_ms, limit)
                    .await?;
                let Some(topic) = self.groups.topic_of(container) else {
                    return Ok(own);
                };
                let mut tx = self.begin_read("read expired").await?;
                let shared = self
                    .group_expired(&mut *tx, &topic, container, now_ms, limit)
                    .await?;
                tx.commit().await.map_err($crate::error::db("read expired"))?;
                let key = |m: &std::sync::Arc<$crate::StoredMessage>| (m.expiration, m.id);
                Ok($crate::groups::merge_by(own, shared, limit, key))
            }

            async fn read_expired_after(
                &self,
                container: &str,
                now_ms: i64,
                after: (i64, i64),
                limit: u32,
            ) -> $crate::Result<Vec<std::sync::Arc<$crate::StoredMessage>>> {
                let rows: Vec<$crate::sql::MessageRow> = self
                    .expired_after(&self.sql.read_expired_after, container, now_ms, after, limit)
                    .await?;
                $crate::sql::decode_messages(container, rows, &self.stats)
            }

            async fn read_expired_keys_after(
                &self,
                container: &str,
                now_ms: i64,
                after: (i64, i64),
                limit: u32,
            ) -> $crate::Result<Vec<$crate::ExpiredKey>> {
                let rows: Vec<(i64, i64, i32)> = self
                    .expired_after(&self.sql.read_expired_keys_after, container, now_ms, after, limit)
                    .await?;
                self.stats.fetched_keys(rows.len() as u64);
                Ok(rows
                    .into_iter()
                    .map(|(id, expiration, priority)| $crate::ExpiredKey {
                        id,
                        expiration,
                        priority: $crate::sql::priority_of(priority),
                    })
                    .collect())
            }

            async fn next_expiration(&self, container: &str) -> $crate::Result<Option<i64>> {
                const OP: &str = "read the next expiration";
                let own: Option<i64> = sqlx::query_scalar(&self.sql.next_expiration)
                    .bind(container)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err($crate::error::db(OP))?;
                let Some(topic) = self.groups.topic_of(container) else {
                    return Ok(own);
                };
                let mut tx = self.begin_read(OP).await?;
                let Some(mark) = self.group_mark(&mut *tx, &topic, container).await? else {
                    return Ok(own);
                };
                let (needed, last, looked): (Option<i64>, Option<i64>, i64) =
                    sqlx::query_as(&self.sql.groups.next_expiration)
                        .bind(&*topic)
                        .bind(mark)
                        .bind($crate::GROUP_CLIENT_ID)
                        .bind(container)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err($crate::error::db(OP))?;
                tx.commit().await.map_err($crate::error::db(OP))?;
                // A full window with nothing the group needs: its last expiration is
                // a bound (what the group needs expires then or later).
                let full = looked >= i64::from($crate::statements::EXPIRING_LOOKED_AT);
                let shared = needed.or(if full { last } else { None });
                Ok(match (own, shared) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                })
            }

            async fn has_rows(&self, container: &str) -> $crate::Result<bool> {
                let row: Option<i32> = sqlx::query_scalar(&self.sql.has_rows)
                    .bind(container)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err($crate::error::db("check rows"))?;
                if row.is_some() {
                    return Ok(true);
                }
                match self.groups.topic_of(container) {
                    Some(topic) => Ok(!self
                        .group_page(&topic, container, 0, None, true, 1)
                        .await?
                        .is_empty()),
                    None => Ok(false),
                }
            }

            async fn count_committed(&self, container: &str) -> $crate::Result<u64> {
                // Kept since the container's last write (see `crate::counts`).
                if let Some(rows) = self.counts.get(container) {
                    return Ok(rows);
                }
                let token = self.counts.start(container);
                self.stats.counted_committed();
                let mut rows = self
                    .count(&self.sql.count_committed, container, "count messages")
                    .await?;
                if let Some(topic) = self.groups.topic_of(container) {
                    rows += self.group_count(&topic, container).await?;
                }
                self.counts.finish(container, token, rows);
                Ok(rows)
            }

            async fn count_committed_many(
                &self,
                containers: &[String],
            ) -> $crate::Result<Vec<u64>> {
                use $crate::statements::COUNT_BATCH_SIZES;
                let mut counts = vec![0; containers.len()];
                let mut uncounted = Vec::new();
                for (i, container) in containers.iter().enumerate() {
                    match self.counts.get(container) {
                        Some(rows) => counts[i] = rows,
                        // A group's rows are counted with its topic's: one at a time.
                        None if self.groups.topic_of(container).is_some() => {
                            counts[i] = self.count_committed(container).await?;
                        }
                        None => uncounted.push(i),
                    }
                }
                let largest = COUNT_BATCH_SIZES[COUNT_BATCH_SIZES.len() - 1];
                for batch in uncounted.chunks(largest) {
                    let size = COUNT_BATCH_SIZES
                        .into_iter()
                        .find(|&n| n >= batch.len())
                        .unwrap_or(largest);
                    let tokens: Vec<u64> = batch
                        .iter()
                        .map(|&i| self.counts.start(&containers[i]))
                        .collect();
                    self.stats.counted_committed();
                    let sql = self.sql.count_committed_in(size);
                    let mut query = sqlx::query_as::<_, (String, i64)>(&sql);
                    for k in 0..size {
                        // Padded with the batch's last name (`IN` ignores repeats).
                        query = query.bind(&containers[batch[k.min(batch.len() - 1)]]);
                    }
                    let rows: std::collections::HashMap<String, i64> = query
                        .fetch_all(&self.pool)
                        .await
                        .map_err($crate::error::db("count messages"))?
                        .into_iter()
                        .collect();
                    for (&i, token) in batch.iter().zip(tokens) {
                        let n = rows.get(&containers[i]).copied().unwrap_or(0) as u64;
                        counts[i] = n;
                        self.counts.finish(&containers[i], token, n);
                    }
                }
                Ok(counts)
            }

            fn take_written(&self) -> Option<Vec<String>> {
                self.counts.take_written()
            }

            fn forget_committed_count(&self, container: &str) {
                self.counts.forget(container);
            }

            async fn count_messages(&self, container: &str) -> $crate::Result<u64> {
                let own = self
                    .count(&self.sql.count_messages, container, "count messages")
                    .await?;
                match self.groups.topic_of(container) {
                    Some(topic) => Ok(own + self.group_count(&topic, container).await?),
                    None => Ok(own),
                }
            }

            async fn count_subscriptions(&self, container: &str) -> $crate::Result<u64> {
                self.count(
                    &self.sql.count_subscriptions,
                    container,
                    "count subscriptions",
                )
                .await
            }

            async fn count_individual_acks(&self, container: &str) -> $crate::Result<u64> {
                self.count(&self.sql.count_indacks, container, "count individual acks")
                    .await
            }

            async fn try_lock(&self) -> $crate::Result<$crate::LockAttempt> {
                let mut held = self.lock.lock().await;
                if held.is_some() {
                    return Ok($crate::LockAttempt::Acquired);
                }
                let had_lease = self.lease.held().is_some();
                match self.take_lock().await {
                    Ok(lock) => {
                        let fresh = lock.is_some() || (!had_lease && self.lease.held().is_some());
                        *held = lock;
                        if fresh {
                            // A standby opened the store long before: what another
                            // broker wrote meanwhile counts now.
                            self.reseed().await?;
                        }
                        Ok($crate::LockAttempt::Acquired)
                    }
                    Err($crate::StoreError::Locked(by)) => Ok($crate::LockAttempt::Held(by)),
                    Err(e) => Err(e),
                }
            }

            fn lease_state(
                &self,
            ) -> Option<tokio::sync::watch::Receiver<$crate::LeaseState>> {
                self.lease.state()
            }

            async fn wait_for_release(&self, within: std::time::Duration) {
                self.wait_released(within).await;
            }

            fn lease_renewals(&self) -> Option<$crate::LeaseRenewals> {
                self.lease.held().map(|lease| lease.renewals())
            }

            fn lease_current(&self) -> bool {
                self.lease.held().is_none_or(|lease| lease.current())
            }

            async fn locked_by_another(&self) -> $crate::Result<bool> {
                if self.lock.lock().await.is_some() || self.lease.held().is_some() {
                    return Ok(false);
                }
                if self.lease.enabled() {
                    return self.lease.held_by_other().await;
                }
                match self.take_lock().await {
                    Ok(Some(lock)) => {
                        self.release_lock(lock).await;
                        Ok(false)
                    }
                    Ok(None) => Ok(false),
                    Err($crate::StoreError::Locked(_)) => Ok(true),
                    Err(e) => Err(e),
                }
            }

            async fn ping(&self) -> $crate::Result<()> {
                let _: i32 = sqlx::query_scalar("SELECT 1")
                    .fetch_one(&self.pool)
                    .await
                    .map_err($crate::error::db("ping"))?;
                Ok(())
            }

            async fn close(&self) {
                // A standby's listener holds a pooled connection.
                self.lease.drop_listener().await;
                $crate::sql::close_pool(&self.pool).await;
                if let Some(lock) = self.lock.lock().await.take() {
                    self.release_lock(lock).await;
                }
                if let Some(lease) = self.lease.held() {
                    lease.release().await;
                }
            }
        }
    };
}

pub(crate) use impl_sql_store;

#[cfg(test)]
mod closing {
    use super::close_pool;

    /// Reads on every connection of a pool, their connections dropped (going back to
    /// the pool on tasks of their own) as `close_pool` begins: after it, the pool
    /// holds none, in each of 50 rounds. With `Pool::close` alone a connection whose
    /// return raced the close stayed open (sqlx issue #3217): one per test broker,
    /// until a run of the suite found PostgreSQL's 100 connections taken.
    macro_rules! no_connection_outlives_the_close {
        ($options:expr, $url:expr) => {
            for round in 0..50 {
                let pool = $options.max_connections(4).connect($url).await.unwrap();
                let reads: Vec<_> = (0..4)
                    .map(|_| {
                        let pool = pool.clone();
                        tokio::spawn(async move {
                            sqlx::query_scalar::<_, i32>("SELECT 1")
                                .fetch_one(&pool)
                                .await
                        })
                    })
                    .collect();
                for read in reads {
                    assert_eq!(read.await.unwrap().unwrap(), 1);
                }
                close_pool(&pool).await;
                assert!(pool.is_closed());
                assert_eq!(
                    pool.size(),
                    0,
                    "round {round}: a connection outlived the close"
                );
            }
        };
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_pool_closes_every_connection() {
        no_connection_outlives_the_close!(
            sqlx::sqlite::SqlitePoolOptions::new(),
            "sqlite::memory:"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(ebb_test_postgres),
        ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
    )]
    async fn postgres_pool_closes_every_connection() {
        let url = std::env::var("EBB_TEST_POSTGRES_URL")
            .ok()
            .filter(|url| !url.is_empty())
            .expect("EBB_TEST_POSTGRES_URL is not set: the PostgreSQL variant needs its URL");
        no_connection_outlives_the_close!(sqlx::postgres::PgPoolOptions::new(), &url);
    }
}

#[cfg(test)]
mod tests {
    use super::{like_prefix, pending_read, IdList, PendingRead};

    #[test]
    fn pending_reads_start_after_the_mark_of_each_priority() {
        use PendingRead::*;
        assert_eq!(pending_read(&[], 5, None), Nothing);
        assert_eq!(pending_read(&[], 5, Some(3)), Nothing);
        // One mark: the cursor below it, then above it.
        assert_eq!(pending_read(&[(-1, 10)], 5, None), All { bound: 10 });
        assert_eq!(pending_read(&[(-1, 10)], 15, None), All { bound: 15 });
        assert_eq!(
            pending_read(&[(-1, 10)], 5, Some(7)),
            Priority {
                priority: 7,
                bound: 10,
                row: -1
            }
        );
        // Per-priority marks 0, 100, ..., 900.
        let marks: Vec<(i32, i64)> = (0..10).map(|p| (p, 100 * i64::from(p))).collect();
        assert_eq!(
            pending_read(&marks, 250, Some(4)),
            Priority {
                priority: 4,
                bound: 400,
                row: 4
            }
        );
        assert_eq!(
            pending_read(&marks, 250, Some(1)),
            Priority {
                priority: 1,
                bound: 250,
                row: 1
            }
        );
        assert_eq!(
            pending_read(&marks, 250, None),
            Merged {
                bounds: [250, 250, 250, 300, 400, 500, 600, 700, 800, 900]
            }
        );
        // A priority without a mark row has nothing pending.
        assert_eq!(
            pending_read(&marks[..9], 0, Some(9)),
            Priority {
                priority: 9,
                bound: i64::MAX,
                row: 9
            }
        );
        let PendingRead::Merged { bounds } = pending_read(&marks[..9], 0, None) else {
            panic!("per-priority marks read merged")
        };
        assert_eq!((bounds[8], bounds[9]), (800, i64::MAX));
    }

    #[test]
    fn like_prefixes_are_taken_literally() {
        assert_eq!(like_prefix("stomp:"), "stomp:%");
        assert_eq!(like_prefix("my_app:"), "my!_app:%");
        assert_eq!(like_prefix("50%!"), "50!%!!%");
        assert_eq!(like_prefix(""), "%");
    }

    #[test]
    fn sqlite_id_lists_are_json_arrays() {
        assert_eq!(sqlx::Sqlite::id_list(&[]), "[]");
        assert_eq!(sqlx::Sqlite::id_list(&[5]), "[5]");
        assert_eq!(
            sqlx::Sqlite::id_list(&[-1, 0, i64::MAX]),
            "[-1,0,9223372036854775807]"
        );
        assert_eq!(sqlx::Postgres::id_list(&[5, 6]), vec![5, 6]);
    }
}
