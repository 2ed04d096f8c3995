//! Promise 3: the reads a drain runs per page are index ranges whatever the statistics.
//!
//! A fresh schema, 55,000 rows bulk-inserted (every 11th a queue's, the rest a topic's,
//! priorities 0 to 9, a few prepared), 20 durable subscriptions with one mark and one
//! with per-priority marks, 90 individual acks, and no `ANALYZE` (on PostgreSQL with
//! autovacuum off for the tables, so nothing analyzes them in between; the test checks
//! that no statistics exist). Then the same after `ANALYZE`, and then with stale
//! statistics: a second topic bulk-loaded after the `ANALYZE`, which the statistics do
//! not know. In each state, every statement a drain runs per page is planned, in the
//! transaction the store runs it in, as a range of the index that gives its order, with
//! no sort and no scan of the message table:
//! - PostgreSQL: `EXPLAIN (FORMAT JSON)` of its custom and its generic plan (`PREPARE`,
//!   `plan_cache_mode`); for the reads also `EXPLAIN (ANALYZE, FORMAT JSON)`, which says
//!   how many rows the index scans really examined.
//! - SQLite: `EXPLAIN QUERY PLAN`: `SEARCH ... USING INDEX` with the range, no `SCAN` of
//!   the table, no `USE TEMP B-TREE`.

use ebb_store::test_util::{on_every_backend, statement, transaction_begin, Raw, TestStore};
use ebb_store::Backend;
use serde_json::Value;
use sqlx::Row;

/// Rows per load; row `x` (1-based) has id `offset + x`.
const ROWS: i64 = 55_000;
/// The page size of the reads.
const LIMIT: i64 = 200;
/// "Now" for the expiry statements: the expired rows expire at 1,000.
const NOW: i64 = 2_000;

/// Row `x` of a load belongs to the queue (else to the topic).
fn is_queue(x: i64) -> bool {
    x % 11 == 0
}

/// Row `x` is in a prepared transaction.
fn is_prepared(x: i64) -> bool {
    x % 997 == 0
}

/// Row `x` is a queue's message held back for a redelivery (its `due` is `x`).
fn is_held(x: i64) -> bool {
    is_queue(x) && x % 3 == 0
}

/// Row `x` is acked individually by `c1/sub1` (one mark for every priority, at the
/// start of the load): 90 topic rows among the first 300.
fn is_acked(x: i64) -> bool {
    x <= 300 && x % 3 == 0 && !is_queue(x)
}

/// [`Case::index`] of a probe by the message table's primary key.
const PRIMARY_KEY: &str = "ebb_msgs_pkey";

/// A bind value.
#[derive(Debug, Clone)]
enum B {
    Text(String),
    Int(i64),
    Int4(i32),
    /// An id list, as the store binds one (SQLite a JSON array, PostgreSQL a `BIGINT[]`).
    Ids(Vec<i64>),
    /// A text list, as the store binds one (SQLite a JSON array, PostgreSQL a `TEXT[]`).
    Texts(Vec<String>),
    /// JSON text (a list of tuples, read by `json_each` or `jsonb_array_elements`).
    Json(String),
}

fn text(s: &str) -> B {
    B::Text(s.to_string())
}

/// One bulk load: a topic and a queue whose rows have ids after `offset`.
struct Load {
    topic: String,
    queue: String,
    offset: i64,
}

impl Load {
    fn new(name: &str, offset: i64) -> Self {
        Self {
            topic: format!("topic://{name}"),
            queue: format!("queue://{name}"),
            offset,
        }
    }

    /// The load, as SQL both backends run (recursive CTEs, no `generate_series`).
    fn sql(&self, backend: Backend) -> Vec<String> {
        let Load {
            topic,
            queue,
            offset,
        } = self;
        // 1,000-byte bodies on PostgreSQL, whose costs weigh the heap; SQLite's plans do
        // not depend on the width.
        let body = match backend {
            Backend::Postgres => "decode(repeat('ab', 1000), 'hex')",
            Backend::Sqlite => "zeroblob(100)",
        };
        let series = |n: i64| {
            format!("WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {n})")
        };
        vec![
            format!(
                "{} INSERT INTO ebb_msgs (id, container, msgid, expiration, priority, xid, msg, due) \
                 SELECT {offset} + x, CASE WHEN x % 11 = 0 THEN '{queue}' ELSE '{topic}' END, \
                   'ID:' || x, CASE WHEN x % 11 = 0 AND x % 2 = 0 THEN 1000 ELSE 0 END, x % 10, \
                   CASE WHEN x % 997 = 0 THEN 'tx{offset}:' ELSE NULL END, {body}, \
                   CASE WHEN x % 33 = 0 THEN x ELSE NULL END FROM g",
                series(ROWS)
            ),
            format!(
                "{} INSERT INTO ebb_acks (container, client_id, sub_name, selector, last_acked_id, priority) \
                 SELECT '{topic}', 'c' || x, 'sub' || x, NULL, {offset}, -1 FROM g",
                series(20)
            ),
            format!(
                "{} INSERT INTO ebb_acks (container, client_id, sub_name, selector, last_acked_id, priority) \
                 SELECT '{topic}', 'c0', 'prio', NULL, {offset} + 1000 * (x - 1), x - 1 FROM g",
                series(10)
            ),
            format!(
                "{} INSERT INTO ebb_indacks (container, client_id, sub_name, priority, msg_id) \
                 SELECT '{topic}', 'c1', 'sub1', -1, {offset} + x FROM g \
                 WHERE x % 3 = 0 AND x % 11 <> 0",
                series(300)
            ),
        ]
    }

    /// `(rows returned, rows the range's filter removed)` of a page of [`LIMIT`] from
    /// the start of the topic (of `priority` only with `Some`); `acks` says whether
    /// `c1/sub1`'s individual acks are filtered.
    fn page(&self, priority: Option<i64>, acks: bool) -> (i64, i64) {
        let (mut returned, mut removed) = (0, 0);
        for x in 1..=ROWS {
            if is_queue(x) || priority.is_some_and(|p| x % 10 != p) {
                continue;
            }
            if is_prepared(x) || (acks && is_acked(x)) {
                removed += 1;
                continue;
            }
            returned += 1;
            if returned == LIMIT {
                break;
            }
        }
        (returned, removed)
    }

    /// `(rows returned, rows the filter removed)` of a page of [`LIMIT`] from the
    /// start of the queue for its cursor: prepared and held rows are passed over.
    fn queue_page(&self) -> (i64, i64) {
        let (mut returned, mut removed) = (0, 0);
        for x in (1..=ROWS).filter(|x| is_queue(*x)) {
            if is_prepared(x) || is_held(x) {
                removed += 1;
                continue;
            }
            returned += 1;
            if returned == LIMIT {
                break;
            }
        }
        (returned, removed)
    }

    /// Every statement to check on this load.
    fn cases(&self) -> Vec<Case> {
        let (t, q, off) = (&self.topic, &self.queue, self.offset);
        // The queue's 100th expired row (every 22nd row expires, at 1,000).
        let tie = off + 22 * 100;
        let marks = (0..10).map(|k| B::Int(off + 1000 * k));
        let (pending, pending4, browse) = (
            self.page(None, true),
            self.page(Some(4), true),
            self.page(None, false),
        );
        // A topic's expiry pages, with and without the bodies: the same two ranges.
        let expired_after = [
            ("read_expired_tie", "read_expired_later"),
            ("read_expired_keys_tie", "read_expired_keys_later"),
        ]
        .map(|(tie_name, later_name)| {
            [
                Case {
                    name: tie_name,
                    write: false,
                    // The rows of expiration 1,000 after the 100th expired row's id.
                    binds: vec![
                        text(q),
                        B::Int(NOW),
                        B::Int(LIMIT),
                        B::Int(1_000),
                        B::Int(tie),
                    ],
                    index: "ebb_msgs_eidx",
                    sqlite_range: "(container=? AND expiration=? AND id>?)",
                    pg_range: "ROW(container, expiration, id) > ROW(",
                    ranges: 1,
                    examined: Examined::Exactly((LIMIT, 0)),
                },
                Case {
                    name: later_name,
                    write: false,
                    binds: vec![text(q), B::Int(NOW), B::Int(LIMIT), B::Int(0)],
                    index: "ebb_msgs_eidx",
                    sqlite_range: "(container=? AND expiration>? AND expiration<?)",
                    pg_range: "ROW(container, expiration, id) > ROW(",
                    ranges: 1,
                    examined: Examined::Exactly((LIMIT, 0)),
                },
            ]
        });
        let mut cases = vec![
            Case {
                name: "read_pending",
                write: false,
                binds: vec![
                    text(t),
                    B::Int(off),
                    text("c1"),
                    text("sub1"),
                    B::Int(LIMIT),
                ],
                index: "ebb_msgs_cidx",
                sqlite_range: "(container=? AND id>?)",
                pg_range: "ROW(container, id) > ROW(",
                ranges: 1,
                examined: Examined::Exactly(pending),
            },
            Case {
                name: "read_pending_priority",
                write: false,
                binds: vec![
                    text(t),
                    B::Int(off),
                    text("c1"),
                    text("sub1"),
                    B::Int(LIMIT),
                    B::Int4(4),
                    B::Int4(-1),
                ],
                index: "ebb_msgs_pidx",
                sqlite_range: "(container=? AND priority=? AND id>?)",
                pg_range: "ROW(container, priority, id) > ROW(",
                ranges: 1,
                examined: Examined::Exactly(pending4),
            },
            Case {
                name: "read_pending_merged",
                write: false,
                binds: [text(t), text("c0"), text("prio"), B::Int(LIMIT)]
                    .into_iter()
                    .chain(marks)
                    .collect(),
                index: "ebb_msgs_pidx",
                sqlite_range: "(container=? AND priority=? AND id>?)",
                pg_range: "(id > ",
                ranges: 10,
                examined: Examined::Merged,
            },
            Case {
                name: "browse",
                write: false,
                binds: vec![text(t), B::Int(off), B::Int(LIMIT)],
                index: "ebb_msgs_cidx",
                sqlite_range: "(container=? AND id>?)",
                pg_range: "ROW(container, id) > ROW(",
                ranges: 1,
                examined: Examined::Exactly(browse),
            },
            // A queue's cursor page: the same range of the queue, held rows passed over.
            Case {
                name: "read_queue",
                write: false,
                binds: vec![text(q), B::Int(off), B::Int(LIMIT)],
                index: "ebb_msgs_cidx",
                sqlite_range: "(container=? AND id>?)",
                pg_range: "ROW(container, id) > ROW(",
                ranges: 1,
                examined: Examined::Exactly(self.queue_page()),
            },
            // A queue's held rows read back by due time (the load's: every 33rd row,
            // due at its number): a range of the partial index, never the table.
            Case {
                name: "read_held",
                write: false,
                binds: vec![
                    text(q),
                    B::Int(0),
                    B::Int(0),
                    B::Int(i64::MAX),
                    B::Int(LIMIT),
                ],
                index: "ebb_msgs_didx",
                sqlite_range: "(container=? AND due>? AND due<?)",
                pg_range: "ROW(container, due, id) > ROW(",
                ranges: 1,
                examined: Examined::Exactly((LIMIT, 0)),
            },
            // The scheduler's page: prepared rows by xid (the load's are `tx<offset>:`, one in
            // every 997 rows), a range of the partial xid index, never the table.
            Case {
                name: "read_prepared_range",
                write: false,
                binds: vec![
                    B::Text(format!("tx{off}:")),
                    B::Text(format!("tx{off};")),
                    B::Int(LIMIT),
                ],
                index: "ebb_msgs_xidx",
                sqlite_range: "(xid>? AND xid<?)",
                pg_range: "(xid >= ",
                ranges: 1,
                examined: Examined::Exactly(((ROWS / 997).min(LIMIT), 0)),
            },
            // The scheduler's backlog: the same range, keys only, counted up to LIMIT.
            Case {
                name: "count_prepared_range",
                write: false,
                binds: vec![
                    B::Text(format!("tx{off}:")),
                    B::Text(format!("tx{off};")),
                    B::Int(LIMIT),
                ],
                index: "ebb_msgs_xidx",
                sqlite_range: "(xid>? AND xid<?)",
                pg_range: "(xid >= ",
                ranges: 1,
                examined: Examined::Exactly(((ROWS / 997).min(LIMIT), 0)),
            },
            Case {
                name: "read_expired",
                write: false,
                binds: vec![text(q), B::Int(NOW), B::Int(400)],
                index: "ebb_msgs_eidx",
                sqlite_range: "(container=? AND expiration>? AND expiration<?)",
                pg_range: "(expiration <= ",
                ranges: 1,
                // The first 400 expired rows hold no prepared one (those are rows 21,934
                // and 43,868).
                examined: Examined::Exactly((400, 0)),
            },
            Case {
                name: "advance_window",
                write: true,
                binds: vec![
                    text(t),
                    text("c1"),
                    text("sub1"),
                    B::Int4(-1),
                    B::Int(off),
                    B::Int(512),
                    // Acked now: the mark's next rows and one further on.
                    B::Ids(vec![off + 1, off + 2, off + 100]),
                ],
                index: "ebb_msgs_cidx",
                sqlite_range: "(container=? AND id>?)",
                pg_range: "ROW(container, id) > ROW(",
                ranges: 1,
                examined: Examined::NotRun,
            },
            Case {
                name: "advance_window_priority",
                write: true,
                binds: vec![
                    text(t),
                    text("c0"),
                    text("prio"),
                    B::Int4(4),
                    B::Int(off + 4000),
                    B::Int(512),
                    B::Ids(vec![off + 4001]),
                ],
                index: "ebb_msgs_pidx",
                sqlite_range: "(container=? AND priority=? AND id>?)",
                pg_range: "ROW(container, priority, id) > ROW(",
                ranges: 1,
                examined: Examined::NotRun,
            },
            Case {
                name: "cleanup",
                write: true,
                binds: vec![
                    text(t),
                    B::Int(off + 40_000),
                    B::Int(1000),
                    B::Int(off + 30_000),
                ],
                index: "ebb_msgs_cidx",
                sqlite_range: "(container=? AND id>? AND id<?)",
                pg_range: "ROW(container, id) > ROW(",
                ranges: 1,
                examined: Examined::NotRun,
            },
            Case {
                name: "cleanup_priority",
                write: true,
                binds: vec![
                    text(t),
                    B::Int(off + 40_000),
                    B::Int4(4),
                    B::Int(1000),
                    B::Int(off + 30_000),
                ],
                index: "ebb_msgs_pidx",
                sqlite_range: "(container=? AND priority=? AND id>? AND id<?)",
                pg_range: "ROW(container, priority, id) > ROW(",
                ranges: 1,
                examined: Examined::NotRun,
            },
            // A run of commits: the prepared rows of the listed xids (the load's 55, and
            // none of an xid without rows), by the xid index.
            Case {
                name: "prepared_ids_many",
                write: true,
                binds: vec![
                    B::Texts(vec![format!("tx{off}:"), format!("tx{off}:none")]),
                    B::Int(1000),
                ],
                index: "ebb_msgs_xidx",
                sqlite_range: "(xid=?)",
                pg_range: "(xid = ANY (",
                ranges: 1,
                examined: Examined::NotRun,
            },
            // Its renumbering, and a run of failed-delivery counts: one primary-key
            // probe per listed row.
            Case {
                name: "renumber_many",
                write: true,
                binds: vec![B::Json(format!(
                    "[[{},{}],[{},{}]]",
                    off + 997,
                    2 * ROWS + 1,
                    off + 1994,
                    2 * ROWS + 2
                ))],
                index: PRIMARY_KEY,
                sqlite_range: "(rowid=?)",
                pg_range: "(id = ",
                ranges: 1,
                examined: Examined::NotRun,
            },
            Case {
                name: "redelivered_many",
                write: true,
                binds: vec![
                    text(q),
                    B::Json(format!("[[{},1,null],[{},2,5000]]", off + 11, off + 22)),
                ],
                index: PRIMARY_KEY,
                sqlite_range: "(rowid=?)",
                pg_range: "(id = ",
                ranges: 1,
                examined: Examined::NotRun,
            },
            Case {
                name: "expire_queue",
                write: true,
                binds: vec![text(q), B::Int(NOW), B::Int(400)],
                index: "ebb_msgs_eidx",
                sqlite_range: "(container=? AND expiration>? AND expiration<?)",
                pg_range: "(expiration <= ",
                ranges: 1,
                examined: Examined::NotRun,
            },
        ];
        cases.extend(expired_after.into_iter().flatten());
        cases
    }
}

/// What `EXPLAIN ANALYZE` must find the index scans examined (PostgreSQL, reads only).
#[derive(Debug, Clone, Copy)]
enum Examined {
    /// `(rows returned, rows removed by the filter)` of the one index scan.
    Exactly((i64, i64)),
    /// Ten merged ranges: the page, plus at most one row ahead in each range.
    Merged,
    /// A write: only planned (EXPLAIN), never executed.
    NotRun,
}

/// One statement and what its plan must be.
struct Case {
    name: &'static str,
    /// Run in a write transaction (else a read transaction).
    write: bool,
    binds: Vec<B>,
    /// The index every range uses.
    index: &'static str,
    /// SQLite: the range in `SEARCH ... USING INDEX <index> <range>`.
    sqlite_range: &'static str,
    /// PostgreSQL: the part of the index scan's `Index Cond` that bounds the range
    /// (a row comparison on the index's columns for a single range, see `statements.rs`).
    pg_range: &'static str,
    /// How many such ranges the plan has.
    ranges: usize,
    examined: Examined,
}

async fn setup(raw: &mut Raw, backend: Backend, load: &Load) {
    for sql in load.sql(backend) {
        execute(raw, &sql).await;
    }
}

async fn execute(raw: &mut Raw, sql: &str) {
    match raw {
        Raw::Sqlite(c) => {
            sqlx::raw_sql(sql).execute(c).await.unwrap();
        }
        Raw::Postgres(c) => {
            sqlx::raw_sql(sql).execute(c).await.unwrap();
        }
    }
}

async fn scalar_i64(raw: &mut Raw, sql: &str) -> i64 {
    match raw {
        Raw::Sqlite(c) => sqlx::query_scalar(sql).fetch_one(c).await.unwrap(),
        Raw::Postgres(c) => sqlx::query_scalar(sql).fetch_one(c).await.unwrap(),
    }
}

/// The statistics the planner has of the message table: `None` when there are none,
/// else the row count they give it.
async fn statistics(raw: &mut Raw) -> Option<i64> {
    match raw {
        Raw::Sqlite(_) => {
            let tables = scalar_i64(
                raw,
                "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'sqlite_stat%'",
            )
            .await;
            if tables == 0 {
                return None;
            }
            let Raw::Sqlite(c) = raw else { unreachable!() };
            let stat: String =
                sqlx::query_scalar("SELECT stat FROM sqlite_stat1 WHERE idx = 'ebb_msgs_cidx'")
                    .fetch_one(c)
                    .await
                    .unwrap();
            Some(stat.split(' ').next().unwrap().parse().unwrap())
        }
        Raw::Postgres(c) => {
            let columns: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_stats WHERE schemaname = current_schema() \
                 AND tablename IN ('ebb_msgs', 'ebb_acks', 'ebb_indacks')",
            )
            .fetch_one(&mut *c)
            .await
            .unwrap();
            let tuples: f32 = sqlx::query_scalar(
                "SELECT reltuples FROM pg_class WHERE oid = 'ebb_msgs'::regclass",
            )
            .fetch_one(&mut *c)
            .await
            .unwrap();
            // -1: never analyzed nor vacuumed.
            (columns > 0 || tuples >= 0.0).then_some(tuples as i64)
        }
    }
}

async fn analyze(raw: &mut Raw) {
    match raw {
        Raw::Sqlite(_) => execute(raw, "ANALYZE").await,
        Raw::Postgres(_) => execute(raw, "ANALYZE ebb_msgs, ebb_acks, ebb_indacks").await,
    }
}

/// Checks every statement of `load` in the current state; `state` names it.
async fn check(raw: &mut Raw, backend: Backend, load: &Load, state: &str) {
    for case in load.cases() {
        let sql = statement(backend, case.name);
        let begin = transaction_begin(backend, case.write);
        match raw {
            Raw::Sqlite(c) => check_sqlite(c, begin, &sql, &case, state).await,
            Raw::Postgres(c) => check_postgres(c, begin, &sql, &case, state).await,
        }
    }
}

async fn check_sqlite(
    c: &mut sqlx::SqliteConnection,
    begin: &str,
    sql: &str,
    case: &Case,
    state: &str,
) {
    sqlx::raw_sql(begin).execute(&mut *c).await.unwrap();
    let eqp = format!("EXPLAIN QUERY PLAN {sql}");
    let mut query = sqlx::query(&eqp);
    for bind in &case.binds {
        query = match bind {
            B::Text(s) => query.bind(s.clone()),
            B::Int(i) => query.bind(*i),
            B::Int4(i) => query.bind(*i),
            B::Ids(ids) => query.bind(format!("{ids:?}").replace(' ', "")),
            B::Texts(texts) => query.bind(serde_json::to_string(texts).unwrap()),
            B::Json(json) => query.bind(json.clone()),
        };
    }
    let rows = query.fetch_all(&mut *c).await.unwrap();
    sqlx::raw_sql("ROLLBACK").execute(&mut *c).await.unwrap();
    let plan: Vec<String> = rows.iter().map(|r| r.get::<String, _>(3)).collect();
    let text = plan.join("\n");
    let name = format!("{} ({state})", case.name);
    // A covering index (keys only, no table row) is a range too.
    let range = match case.index {
        PRIMARY_KEY => format!("INTEGER PRIMARY KEY {}", case.sqlite_range),
        index => format!("INDEX {index} {}", case.sqlite_range),
    };
    let ranges = plan
        .iter()
        .filter(|l| {
            l.starts_with("SEARCH")
                && (l.ends_with(&format!("USING {range}"))
                    || l.ends_with(&format!("USING COVERING {range}")))
        })
        .count();
    assert_eq!(ranges, case.ranges, "{name}: ranges {range}:\n{text}");
    assert!(
        !plan
            .iter()
            .any(|l| l.starts_with("SCAN m") || l.starts_with("SCAN ebb_msgs")),
        "{name} scans the table:\n{text}"
    );
    assert!(!text.contains("TEMP B-TREE"), "{name} sorts:\n{text}");
    if case.ranges > 1 {
        assert!(text.contains("MERGE (UNION ALL)"), "{name}:\n{text}");
    }
}

/// Every node of a JSON plan, subplans included.
fn nodes<'a>(node: &'a Value, out: &mut Vec<&'a Value>) {
    out.push(node);
    for child in node["Plans"].as_array().into_iter().flatten() {
        nodes(child, out);
    }
}

fn literal(bind: &B) -> (String, &'static str) {
    match bind {
        B::Text(s) => (format!("'{}'", s.replace('\'', "''")), "text"),
        B::Int(i) => (i.to_string(), "bigint"),
        B::Int4(i) => (i.to_string(), "integer"),
        B::Ids(ids) => (
            format!(
                "'{{{}}}'",
                ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
            ),
            "bigint[]",
        ),
        B::Texts(texts) => (format!("'{{{}}}'", texts.join(",")), "text[]"),
        B::Json(json) => (format!("'{json}'"), "text"),
    }
}

async fn explain(c: &mut sqlx::PgConnection, sql: &str) -> Value {
    let rows = sqlx::raw_sql(sql).fetch_all(&mut *c).await.unwrap();
    let json: String = rows[0].try_get_unchecked(0).unwrap();
    serde_json::from_str(&json).unwrap()
}

async fn check_postgres(
    c: &mut sqlx::PgConnection,
    begin: &str,
    sql: &str,
    case: &Case,
    state: &str,
) {
    let (args, types): (Vec<String>, Vec<&str>) = case.binds.iter().map(literal).unzip();
    sqlx::raw_sql(begin).execute(&mut *c).await.unwrap();
    sqlx::raw_sql(&format!("PREPARE q({}) AS {sql}", types.join(", ")))
        .execute(&mut *c)
        .await
        .unwrap();
    for mode in ["force_custom_plan", "force_generic_plan"] {
        sqlx::raw_sql(&format!("SET LOCAL plan_cache_mode = {mode}"))
            .execute(&mut *c)
            .await
            .unwrap();
        let analyze = !matches!(case.examined, Examined::NotRun);
        let options = if analyze {
            "ANALYZE, FORMAT JSON"
        } else {
            "FORMAT JSON"
        };
        let plan = explain(
            c,
            &format!("EXPLAIN ({options}) EXECUTE q({})", args.join(", ")),
        )
        .await;
        let name = format!("{} ({state}, {mode})", case.name);
        let text = serde_json::to_string_pretty(&plan).unwrap();
        let kind = |n: &Value| n["Node Type"].as_str().unwrap_or_default().to_string();
        let mut all = Vec::new();
        nodes(&plan[0]["Plan"], &mut all);
        // A page is a few hundred rows: never worth compiling or parallel workers.
        assert!(plan[0].get("JIT").is_none(), "{name} compiles:\n{text}");
        for node in &all {
            let kind = kind(node);
            assert!(!kind.contains("Sort"), "{name} sorts:\n{text}");
            assert!(!kind.starts_with("Gather"), "{name} in parallel:\n{text}");
            let on = node["Relation Name"].as_str();
            // A bitmap heap scan reads the rows its bitmap index scan (a range, checked
            // below) found: only a list of xids gets one.
            if on == Some("ebb_msgs") && kind.contains("Scan") {
                assert!(
                    kind == "Index Scan"
                        || kind == "Index Only Scan"
                        || (kind == "Bitmap Heap Scan" && case.name == "prepared_ids_many"),
                    "{name}: {kind} on ebb_msgs:\n{text}"
                );
            }
            if on == Some("ebb_indacks") {
                // The individual-ack probe is by the whole key, one row.
                assert!(
                    node["Index Cond"]
                        .as_str()
                        .is_some_and(|c| c.contains("(msg_id = ")),
                    "{name}: {kind} on ebb_indacks:\n{text}"
                );
            }
        }
        let ranges: Vec<&Value> = all
            .iter()
            .copied()
            .filter(|n| {
                (n["Relation Name"] == "ebb_msgs" || kind(n) == "Bitmap Index Scan")
                    && n["Index Name"] == case.index
                    && n["Index Cond"]
                        .as_str()
                        .is_some_and(|c| c.contains(case.pg_range))
            })
            .collect();
        assert_eq!(
            ranges.len(),
            case.ranges,
            "{name}: ranges of {} with {}:\n{text}",
            case.index,
            case.pg_range
        );
        if case.ranges > 1 {
            assert!(
                all.iter().any(|n| kind(n) == "Merge Append"),
                "{name}:\n{text}"
            );
        }
        let count = |n: &Value, key: &str| n[key].as_i64().unwrap_or(0);
        match case.examined {
            Examined::Exactly((returned, removed)) => {
                let scan = ranges[0];
                assert_eq!(count(scan, "Actual Loops"), 1, "{name}:\n{text}");
                assert_eq!(
                    (
                        count(scan, "Actual Rows"),
                        count(scan, "Rows Removed by Filter")
                    ),
                    (returned, removed),
                    "{name}: rows examined:\n{text}"
                );
            }
            Examined::Merged => {
                assert_eq!(count(&plan[0]["Plan"], "Actual Rows"), LIMIT, "{name}");
                let pulled: i64 = ranges.iter().map(|n| count(n, "Actual Rows")).sum();
                assert!(
                    (LIMIT..=LIMIT + 10).contains(&pulled),
                    "{name}: {pulled} rows pulled from the ranges:\n{text}"
                );
            }
            Examined::NotRun => {}
        }
    }
    sqlx::raw_sql("DEALLOCATE q; ROLLBACK")
        .execute(&mut *c)
        .await
        .unwrap();
}

async fn hot_reads_are_index_ranges_whatever_the_statistics(t: TestStore) {
    let store = t.open().await;
    let backend = store.backend();
    let mut raw = Raw::connect(&t).await;
    if backend == Backend::Postgres {
        execute(
            &mut raw,
            "ALTER TABLE ebb_msgs SET (autovacuum_enabled = false, toast.autovacuum_enabled = false); \
             ALTER TABLE ebb_acks SET (autovacuum_enabled = false); \
             ALTER TABLE ebb_indacks SET (autovacuum_enabled = false)",
        )
        .await;
    }
    let first = Load::new("plans", 0);
    setup(&mut raw, backend, &first).await;
    assert_eq!(
        scalar_i64(&mut raw, "SELECT COUNT(*) FROM ebb_msgs").await,
        ROWS
    );
    assert_eq!(
        statistics(&mut raw).await,
        None,
        "the tables have statistics"
    );
    check(&mut raw, backend, &first, "no statistics").await;

    analyze(&mut raw).await;
    assert_eq!(statistics(&mut raw).await, Some(ROWS));
    check(&mut raw, backend, &first, "analyzed").await;

    // A topic the statistics do not know: they still count one load's rows.
    let late = Load::new("late", ROWS);
    setup(&mut raw, backend, &late).await;
    assert_eq!(statistics(&mut raw).await, Some(ROWS));
    check(&mut raw, backend, &late, "stale statistics").await;
    store.close().await;
}

on_every_backend!(hot_reads_are_index_ranges_whatever_the_statistics);
