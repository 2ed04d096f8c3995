//! Every SQL statement of the store, built once per store with its table prefix and
//! for its backend.
//!
//! The same text serves SQLite and PostgreSQL (`$N` placeholders, `ON CONFLICT`,
//! `LIMIT`/`OFFSET`, scalar sub-selects), except the id ranges of the reads a drain runs
//! per page, which each backend writes so that only their index can serve them (see
//! the notes on plans below). Every read of the message table is bounded
//! in SQL: by `LIMIT`, by an aggregate that returns one row, or by an id window that
//! was itself found with `LIMIT`. No statement returns a number of rows that grows
//! with the backlog.

use crate::Backend;

/// Rows the mark advance looks at per statement (individual acks above the mark).
pub const ADVANCE_WINDOW: i64 = 512;

/// Most messages per multi-row `INSERT` (10 parameters each: SQLite allows 32,766).
pub const INSERT_BATCH: usize = 256;

/// How many of `left` messages (more than 0) the next multi-row `INSERT` takes: the
/// largest power of two not above `left`, at most [`INSERT_BATCH`].
///
/// Each row count is its own statement text, and each text is a statement prepared
/// and cached on every connection (sqlx keeps 100 per connection). With any count
/// from 1 to 500 a busy SQLite store held hundreds of prepared multi-row inserts per
/// connection, and its memory grew with them (54 MiB resident where 18 MiB serve);
/// powers of two make at most 9 texts, and a group of n rows takes at most
/// log2(n) + 1 statements.
pub fn insert_chunk(left: usize) -> usize {
    debug_assert!(left > 0);
    let pow = 1usize << (usize::BITS - 1 - left.leading_zeros());
    pow.min(INSERT_BATCH)
}

/// Rows a commit, rollback or cleanup statement touches at most.
pub const WRITE_BATCH: i64 = 1000;

/// Most ids one statement with an id list takes (queue remove, [`crate::WriteOp::Reclaim`],
/// individual acks): a longer list is cut into chunks of this many, so each
/// statement's work stays bounded.
///
/// The list is one bound value: on SQLite a JSON array read by `json_each`, on
/// PostgreSQL a `BIGINT[]` compared with `= ANY` (`sql::IdList`). Both search the
/// primary key (or `indacks_midx`) once per id. It was a list of `$N` placeholders in
/// four padded sizes; sqlx binds SQLite's `$N` by name, and SQLite finds each name by
/// walking the statement's list of names, so a 512-id statement took about 131,000
/// steps to bind (6 % of a topic expiry drain's time), and each size was one more
/// statement prepared and kept on every connection.
pub const ID_LIST_MAX: usize = 512;

/// The prefixed SQL texts. Field names say what each does.
#[derive(Debug, Default)]
pub(crate) struct Statements {
    pub prefix: String,
    pub backend: Backend,
    /// `INSERT ... (columns)`; the rows are added by a query builder, up to
    /// [`INSERT_BATCH`] per statement
    pub insert_messages: String,
    pub max_message_id: String,
    pub max_acked_id: String,
    /// the commit mark's token (one row, by its primary key)
    pub commit_mark: String,
    /// sets the commit mark's token to `$1`
    pub set_commit_mark: String,
    pub subscription_rows: String,
    pub insert_subscription_row: String,
    pub delete_subscription: String,
    pub delete_subscription_indacks: String,
    /// keyset page of subscription rows: `(client_id, sub_name) > ($2, $3)`, `LIMIT $4`
    pub list_subscription_rows: String,
    /// individual acks of sub-row `($2, $3, $4)` (client id, subscription name, mark
    /// row) for the messages of id list `$5` ([`ID_LIST_MAX`]) of container `$1` that
    /// are stored (an ack of a message already gone is not kept); an ack kept before
    /// is left as it is (`ON CONFLICT DO NOTHING`), so the rows inserted are the
    /// messages newly acked
    pub insert_indacks: String,
    /// how far mark `$5` of sub-row `($2, $3, $4)` (client id, subscription name, mark
    /// row) of container `$1` may move in the window of the `$6` rows after it, with
    /// the ids of list `$7` ([`ID_LIST_MAX`]) acked now: one row `(last id it may move
    /// to or NULL, rows passed not acked individually before, rows passed, rows in the
    /// window)`; two variants (`[0]` one mark for all priorities, `[1]` per priority)
    /// so each uses its index
    pub advance_window: [String; 2],
    pub update_mark: String,
    pub delete_indacks_upto: String,
    pub prepared_ids: String,
    /// gives prepared row `$1` id `$2` and commits it; returns its container and
    /// last-value key
    pub renumber_prepared: String,
    /// a run of commits: `(xid, id)` of the prepared rows of the xids of text list `$1`
    /// ([`ID_LIST_MAX`]), by `msgs_xidx`, `LIMIT $2` (unordered: the store sorts them)
    pub prepared_ids_many: String,
    /// a run of commits: the rows of pair list `$1` (a JSON array of `[old id, new
    /// id]`, [`ID_LIST_MAX`] pairs) get their new ids and are committed; returns each
    /// one's new id, container and last-value key
    pub renumber_many: String,
    /// deletes the rows of container `$1` with last-value key `$2` and an id below `$3`
    /// (what a newer row with that key replaces) that are committed or held back
    /// ([`crate::SCHEDULED_XID_PREFIX`]: a message already accepted, which arrived
    /// before the newer row), never a transaction's, at most `$4` of them
    /// (by the rule itself there is at most one, plus the batch's own older rows);
    /// returns each one's `msg` length
    pub replace_last_values: String,
    /// one row (its id) of container `$1` with last-value key `$2` that arrived after
    /// `$3` (its `COALESCE(arrived, id)`, see migration 0011) and is committed or held
    /// back ([`crate::SCHEDULED_XID_PREFIX`]), `LIMIT 1`: whether a message of that
    /// arrival moved into the container is superseded. One range of `msgs_lvidx`
    /// `(container, lvkey)`, which by the last-value rule holds one such row at most
    /// (plus a transaction's, which the filter skips)
    pub newer_last_value: String,
    /// the prepared rows of xid `$1` move to xid `$2` (a repeating job's next due
    /// time), by `msgs_xidx`
    pub move_prepared: String,
    pub delete_prepared: String,
    /// prepared rows whose xid matches `LIKE $1 ESCAPE '!'` (a pattern made by
    /// `sql::like_prefix`) and starts with `$3` exactly (SQLite's `LIKE` ignores ASCII
    /// case, PostgreSQL's does not: the second test makes both case-sensitive),
    /// `LIMIT $2`
    pub delete_prepared_prefix: String,
    pub min_marks: String,
    /// cleanup of the ids after `$4` up to mark `$2`: `[0]` every priority, `LIMIT $3`;
    /// `[1]` priority `$3`, `LIMIT $4`, after `$5`; returns `(id, msg length)` of each
    /// deleted row
    pub cleanup: [String; 2],
    /// queue ack: delete the rows of id list `$2` ([`ID_LIST_MAX`]) of container `$1`
    /// that are not prepared; returns each deleted row's `msg` length
    pub remove: String,
    /// [`Self::remove`] returning `(id, msg length, arrival)` of each deleted row (a
    /// move to another queue: the copy keeps the arrival, `COALESCE(arrived, id)`)
    pub remove_ids: String,
    /// topic expiry: delete the rows of id list `$2` of container `$1` (not prepared)
    /// that every durable subscription of the container is done with (at or below the
    /// mark of the row's priority, or acked individually); returns `(id, msg length)`
    /// of each deleted row
    pub reclaim: String,
    /// the individual acks of the messages of id list `$2` of container `$1` (every
    /// subscription), by `indacks_midx`
    pub delete_message_indacks: String,
    /// a queue message's failed deliveries: row `$2` of container `$1` (not prepared)
    /// gets count `$3` and due time `$4` (epoch ms; NULL: not held, the cursor's;
    /// else held in its row until then, see migration 0012): two integer columns of
    /// the one row, no other column, so its place, its arrival and its other indexes
    /// stay as they are
    pub redelivered: String,
    /// a run of [`Self::redelivered`]: the rows of list `$2` (a JSON array of `[id,
    /// count, due or null]`, [`ID_LIST_MAX`] entries) of container `$1` (not prepared)
    /// get their counts and due times (as [`Self::redelivered`]); returns the id of
    /// each row changed. The container is
    /// compared as an expression (`+container`, `container || ''`), so that no plan
    /// reads the container's rows by its index and joins: each listed row is one probe
    /// of the primary key, whatever the statistics say of the container
    pub redelivered_many: String,
    /// PostgreSQL, a broker without a lease, at the start of each write: 1 when a
    /// broker with a lease is active; the lease row stays share-locked until the
    /// write ends, so a takeover waits for it (see `crate::lease`)
    pub lease_active: String,
    /// one queue expiry page: delete the first `$3` expired rows (at `$2`) by
    /// `(expiration, id)`; returns `(id, msg length)`
    pub expire_queue: String,
    /// the first `$3` expired rows (at `$2`) by `(expiration, id)`, with their bodies
    pub read_expired: String,
    /// the same after the position `(expiration, id)` in that order, two statements,
    /// each one range of `msgs_eidx` in its order, `LIMIT $3`: `[0]` the rest of
    /// expiration `$4` after id `$5`, `[1]` the expirations after `$4` (`$4 >= 0`, so
    /// never 0: no expiration) up to `$2`
    pub read_expired_after: [String; 2],
    /// the same ranges, columns `id, expiration, priority` only (no body)
    pub read_expired_keys_after: [String; 2],
    /// the `msg` bytes of the whole table: one aggregate row, read at open
    pub stored_bytes: String,
    /// the pending messages of a subscription with one mark for every priority:
    /// `container = $1 AND id > $2` (the bound, `max(after_id, mark)`, resolved before;
    /// a row comparison on PostgreSQL, see the notes), not prepared, not acked
    /// individually by `($3, $4)` (client id, subscription name, mark row -1), `LIMIT
    /// $5`; one range of `msgs_cidx`
    pub read_pending: String,
    /// the same for one priority `$6`, individual acks of mark row `$7` (-1, or the
    /// priority with per-priority marks); one range of `msgs_pidx`
    pub read_pending_priority: String,
    /// every priority of a subscription with per-priority marks: ten ranges of
    /// `msgs_pidx`, priority `k` after bound `$(5 + k)`, merged by id, `LIMIT $4`
    /// (`$1` container, `$2` client id, `$3` subscription name)
    pub read_pending_merged: String,
    /// a page of a container: `container = $1 AND id > $2`, not prepared, `LIMIT $3`
    pub browse: String,
    /// [`Self::browse`] without the rows held back for a redelivery (`due` set): a
    /// queue's cursor page, one range of `msgs_cidx`
    pub read_queue: String,
    /// a queue's held rows due by `$4` (epoch ms) after position `($2, $3)` (due, id)
    /// in `(due, id)` order, `LIMIT $5`: one range of
    /// the partial index `msgs_didx (container, due, id) WHERE due IS NOT NULL`
    pub read_held: String,
    /// the due time of a queue's first held row after position `($2, $3)` (due, id):
    /// one entry of `msgs_didx`, `LIMIT 1`
    pub next_held_due: String,
    /// prepared rows whose xid is in `[$1, $2)`, in xid order, `LIMIT $3`: one range of
    /// the partial xid index (`msgs_xidx`); the scheduler's page by due time
    pub read_prepared_range: String,
    /// how many prepared rows have an xid in `[$1, $2)`, counted up to `$3`: the same
    /// range of `msgs_xidx`, keys only, `LIMIT $3` in a subquery
    pub count_prepared_range: String,
    /// the earliest expiration of container `$1` (`expiration > 0`), `LIMIT 1`: one
    /// seek of the expiration index (`msgs_eidx`)
    pub next_expiration: String,
    /// one row of container `$1`, prepared ones included (`LIMIT 1`, one seek of
    /// `msgs_cidx`): whether the store holds anything for it
    pub has_rows: String,
    /// one row with an id in `$1..=$2` (a batch's new ids), by the primary key,
    /// `LIMIT 1`: whether a commit whose answer was lost went through
    pub committed_probe: String,
    pub count_messages: String,
    /// the committed rows of container `$1` (not prepared: not of an open transaction,
    /// not scheduled)
    pub count_committed: String,
    pub count_subscriptions: String,
    /// the durable subscriptions of client id `$1` (one row each: priority -1 or 0),
    /// counted up to `$2`, by `acks_kidx`
    pub count_client_subscriptions: String,
    pub count_indacks: String,
    /// the containers after `$3` holding durable subscription `($1, $2)` (client id,
    /// name), by `acks_kidx`, `LIMIT $4`
    pub subscription_containers: String,
    /// the first container of the message table after `$1` and below `$2`: one seek
    /// of `msgs_cidx`, `LIMIT 1`
    pub next_container: String,
    /// keyset page of the subscriptions (their first row: priority -1 or 0) whose
    /// container is in `[$1, $2)`, after `($3, $4, $5)` in `(container, client_id,
    /// sub_name)` order, by the primary key, `LIMIT $6`
    pub subscriptions_between: String,
    /// Consumer groups ([`crate::groups`]). Their parameters: `$1` the topic, `$3`
    /// the group client id, `$4` the group (its store key: the subscription's name
    /// and `group_deliveries.grp`).
    pub groups: GroupStatements,
}

/// Entries of a topic's expiration index a group's next expiration looks at, at most.
pub const EXPIRING_LOOKED_AT: u32 = 1000;

/// The entries of a topic's expired range a group's expiry page of `limit` looks at,
/// at most: `limit` plus [`EXPIRING_LOOKED_AT`] for the rows the group is done with
/// and another subscription keeps (passed over; a page that finds fewer than `limit`
/// in its window ends the run, and the next run looks again once those are gone).
pub fn expired_window(limit: u32) -> i64 {
    i64::from(limit) + i64::from(EXPIRING_LOOKED_AT)
}

/// The statements of consumer groups over a topic's rows ([`crate::groups`]).
#[derive(Debug, Default)]
pub(crate) struct GroupStatements {
    /// keyset page of the groups' bindings: `(container, sub_name)` of client id `$1`
    /// with a name after `$2`, by `acks_kidx`, `LIMIT $3`
    pub list: String,
    /// the topic's rows the group needs after bound `$2` (`max(after, mark)`), not
    /// prepared, not acked individually, `LIMIT $5`, with the group's failed
    /// deliveries and due time: `[0]` without the held ones (the cursor's page),
    /// `[1]` with them (a browse); one range of `msgs_cidx`, one probe of `indacks`
    /// and of `group_deliveries` per row
    pub pending: [String; 2],
    /// [`Self::pending`]`[0]` in the id window `$2 < id <= $6` (a selector's scan)
    pub window: String,
    /// the group's held messages due by `$4` after position `($2, $3)` (due, id),
    /// `LIMIT $5`, with their rows: one range of `group_deliveries_didx`, one probe
    /// of the message's primary key each; `$1` the group
    pub held: String,
    /// the due time of the group's first held message after `($2, $3)`, `LIMIT 1`
    pub next_held_due: String,
    /// the topic's expired rows at `$2` the group needs (above mark `$6`, not acked
    /// individually), by `(expiration, id)`, `LIMIT $5`, among the first `$7` entries
    /// of the topic's expired range of `msgs_eidx` (a window: what the group is done
    /// with and another subscription keeps is passed over within it), with their rows
    pub expired: String,
    /// [`Self::expired`] with the ids only (an expiry page acks them, reading no body)
    pub expired_ids: String,
    /// how many of the topic's rows the group needs (above mark `$2`)
    pub count: String,
    /// among the first [`EXPIRING_LOOKED_AT`] entries of the topic's expiration index:
    /// the earliest expiration of a row the group needs (above mark `$2`, not acked),
    /// the last expiration looked at, and how many were looked at (a full window with
    /// none the group needs answers its last expiration: a bound, so that expiry still
    /// looks again then)
    pub next_expiration: String,
    /// a topic row's failed deliveries for the group: row `$2` of topic `$5` (above
    /// mark `$6`, not prepared, not acked individually by client `$7`) gets count `$3`
    /// and due time `$4` in `group_deliveries` of group `$1` (insert or update)
    pub redelivered: String,
    /// the group `$1`'s delivery rows of the messages of id list `$2`
    pub forget: String,
    /// every delivery row of group `$1` (its binding is removed)
    pub forget_all: String,
}

// In the topic expiry statements `+m.expiration` keeps the planners (both backends) off
// the expiration index: the scan must follow the id range of a window, which is bounded,
// not the expired rows of the whole container, which are not.
//
// The queue expiry statements (`expire_queue`, `read_expired`) want that index: a queue
// has no mark, and an expired message may sit anywhere behind live ones (ActiveMQ
// AMQ-6967, case EXP-02), so rows are chosen by `ORDER BY expiration, id LIMIT n` over
// `msgs_eidx (container, expiration, id)` (migration 0002 added `id`). The plans, with
// 50,000 live rows (no TTL, then a long TTL) ahead of the expired ones, checked by the
// `plans` tests below:
// - SQLite: `SEARCH m USING INDEX ebb_msgs_eidx (container=? AND expiration>? AND
//   expiration<?)`, no `USE TEMP B-TREE FOR ORDER BY`; the delete adds `SEARCH ebb_msgs
//   USING INTEGER PRIMARY KEY (rowid=?)` over `LIST SUBQUERY 1`.
// - PostgreSQL (custom and generic plans): `Limit -> Index Scan using ebb_msgs_eidx
//   (Index Cond: container = $1 AND expiration > 0 AND expiration <= $2; Filter: xid IS
//   NULL)`, no Sort node; the delete is `Nested Loop -> HashAggregate (the sub-select
//   above) -> Index Scan using ebb_msgs_pkey`. It reads `limit` index entries (plus any
//   prepared expired rows the filter skips). The outer side is the planner's choice:
//   when the whole table costs less to scan than `limit` primary-key probes (a small
//   table, tiny rows) it takes `Hash Semi Join` over `Seq Scan`, so that choice is bounded
//   by the cost of `limit` probes too. With the old `(container, expiration)` index
//   PostgreSQL sorted by id within equal expirations (`Incremental Sort`) and read every
//   row of a tie: 50,000 rows sent in one millisecond with one TTL were all read for a
//   page of 400.

// The reads a drain runs per page (`read_pending*`, `browse`, `read_expired`) and the
// writes it runs per ack or cleanup page (`advance_window`, `cleanup`, `expire_queue`)
// are each ranges of one index, read in that index's order and stopped by `LIMIT`.
// Nothing in a range bound is a sub-select: `read_pending` reads the subscription's
// marks first, in the same read transaction (one snapshot), and binds `max(after_id,
// mark)`. The old `read_pending` compared each row with a sub-select correlated on
// `m.priority` (the mark of the row's priority); that can only be a filter, so its range
// was every row after `after_id`, and its individual-ack probe, lacking the mark row,
// matched every ack of the subscription for each row. With per-priority marks and every
// priority, `read_pending_merged` merges ten ranges, one per priority after its own
// mark, rather than one range from the lowest mark, which would pass every acked row of
// the priorities whose marks are further on.
//
// The individual acks a range meets are skipped, not counted against the page: a page
// examines `limit` + S index entries (+ 10 when merged), S being the prepared and
// individually acked rows in its id span, each one primary-key probe of `indacks` and no
// body. S has no cap: a page cut after a fixed number of skipped rows would come back
// short, which a durable cursor takes for the end of its backlog. A caller paging with
// its cursor passes each of those rows once per drain.
//
// PostgreSQL, measured with 50,000 rows after the mark, 1 kB bodies, 20 durable
// subscriptions, no statistics (PostgreSQL 15): the old statement took a bitmap heap
// scan of all 50,000 rows, ran the mark sub-select and the ack probe for each, and
// sorted: 150 to 270 ms per 200-row page, custom and generic plans alike. Rewriting the
// text is not enough. The same statement with the mark bound and a plain `NOT EXISTS`
// still got the bitmap scan and an external merge sort (51 MB on disk, 195 ms): without
// statistics the planner takes `xid IS NULL` to keep 0.5% of the rows (its default), so
// it expects fewer rows than the `LIMIT`, and a stop at the `LIMIT` is then worth
// nothing against a cheaper heap order. After `ANALYZE` it may walk the primary key in
// id order with the container as a filter (it did for `browse` when one topic held most
// rows): cheap while the statistics hold, every other container's rows in the span
// when they are stale. So on PostgreSQL:
// - every transaction the store opens but a migration prices sorts, incremental sorts
//   and sequential scans out, and turns JIT and parallel workers off
//   (`postgres::INDEX_PLANS`, `SET LOCAL`); `Commit` gives the planner its usual
//   settings back for `prepared_ids` (`xid = $1 ORDER BY id`), which no index orders;
// - a single range is written as row comparisons on its index's columns,
//   `(container, id) > ($1, $2) AND (container, id) <= ($1, MAX)` (or `(container,
//   priority, id)`), ordered by those columns: only that index serves it as a range
//   and gives that order, so it is the one plan left, whatever the statistics (the
//   primary key gives no container order; the expiration index only the container's);
// - the arms of `read_pending_merged` keep equalities, so that each arm's index order
//   is id order and the ten merge (Merge Append) with no sort; statistics could still
//   take an arm to the primary key (its rows of every container in the span). It serves
//   reads of every priority with per-priority marks: a browse, not the per-priority
//   reads of a drain.
// After: an index range scan of `msgs_cidx` reading the 200 rows of the page and one
// `indacks` probe each, 0.2 to 0.3 ms, with or without statistics, stale ones included
// (`tests/it/plans.rs` checks each plan, custom and generic, and the rows it examines).
// Statements outside those transactions keep the planner's own choice: `recover_expired`'s
// two (bounded by their id windows whatever the plan: the windows end at the
// `limit`-th row, and the second reads only the runs found in them), `next_expiration`
// (`LIMIT 1` on the expiration index), the counts and the subscription reads (`acks`).
//
// SQLite positions a row comparison by its first column only, so its ranges are the
// plain equalities and id bound, with `INDEXED BY` their index: the store never runs
// `ANALYZE`, and without statistics SQLite takes that index anyway (`SEARCH m USING
// INDEX ebb_msgs_cidx (container=? AND id>?)`, no `USE TEMP B-TREE`), but after a manual
// `ANALYZE` it took the primary key's id range with the container as a filter.

/// The length of a deleted row's `msg` column, in bytes, for `RETURNING`: `length` of a
/// BLOB (SQLite) or a BYTEA (PostgreSQL, `int4`, hence the cast) counts bytes, without
/// loading a large value (SQLite reads the size from the record header, PostgreSQL from
/// the TOAST pointer).
const MSG_LENGTH: &str = "CAST(length(msg) AS BIGINT)";

/// The largest id, an open upper end in range conditions.
const MAX_ID: i64 = i64::MAX;

const MESSAGE_COLUMNS: &str =
    "m.id, m.msgid, m.expiration, m.priority, m.msg, m.redeliveries, m.due";

/// What an expiry page without selectors reads of a message (`read_expired_keys_after`).
const KEY_COLUMNS: &str = "m.id, m.expiration, m.priority";

/// Which end of an id range a statement binds.
#[derive(Debug, Clone, Copy)]
enum Bound<'a> {
    /// `id > $n`, to the end of the container (or priority).
    After(&'a str),
    /// `$a < id <= $b`: a window of ids.
    Window(&'a str, &'a str),
}

/// The range of one index a hot read or write scans, written for its backend: the
/// `FROM` item, the `WHERE` terms and the `ORDER BY` (see the notes above).
struct IdRange {
    from: String,
    range: String,
    order: String,
}

impl IdRange {
    /// The ids of `container` (a placeholder), of `priority` too with `Some`, on one
    /// side of `bound`: a range of `msgs_cidx (container, id)` or `msgs_pidx (container,
    /// priority, id)`.
    fn new(
        p: &str,
        backend: Backend,
        container: &str,
        priority: Option<&str>,
        bound: Bound,
    ) -> Self {
        let (index, columns, key) = match priority {
            None => ("cidx", "m.container", container.to_string()),
            Some(prio) => (
                "pidx",
                "m.container, m.priority",
                format!("{container}, {prio}"),
            ),
        };
        match backend {
            // Row comparisons on the index's columns: only that index serves them as a
            // range, and its order is the `ORDER BY`, so no other index (the primary key
            // would give id order with the container as a filter) and no sort qualifies.
            Backend::Postgres => Self {
                from: format!("{p}msgs m"),
                range: match bound {
                    Bound::After(after) => format!(
                        "({columns}, m.id) > ({key}, {after}) AND ({columns}, m.id) <= ({key}, {MAX_ID})"
                    ),
                    Bound::Window(after, upto) => format!(
                        "({columns}, m.id) > ({key}, {after}) AND ({columns}, m.id) <= ({key}, {upto})"
                    ),
                },
                order: format!("{columns}, m.id"),
            },
            // SQLite positions a row comparison on its first column only: equalities and
            // the id bound, and `INDEXED BY`, so that statistics from a manual `ANALYZE`
            // cannot turn the range into the primary key's.
            Backend::Sqlite => {
                let equal = match priority {
                    None => format!("m.container = {container}"),
                    Some(prio) => format!("m.container = {container} AND m.priority = {prio}"),
                };
                Self {
                    from: format!("{p}msgs m INDEXED BY {p}msgs_{index}"),
                    range: match bound {
                        Bound::After(after) => format!("{equal} AND m.id > {after}"),
                        Bound::Window(after, upto) => {
                            format!("{equal} AND m.id > {after} AND m.id <= {upto}")
                        }
                    },
                    order: "m.id".to_string(),
                }
            }
        }
    }
}

/// One primary-key probe of `indacks` per message row the range scan examines: the
/// individual ack of subscription (`client`, `sub`) and priority `row` of row `m`. A
/// scalar sub-select, not `NOT EXISTS`: no planner turns it into a join, so the probe
/// is always by the whole key (a hash anti join loses the id order, and a nested loop
/// over a materialized inner compares each row with every individual ack of the
/// subscription).
fn acked(p: &str, client: &str, sub: &str, row: &str) -> String {
    format!(
        "(SELECT 1 FROM {p}indacks i WHERE i.container = $1 AND i.client_id = {client} \
           AND i.sub_name = {sub} AND i.priority = {row} AND i.msg_id = m.id)"
    )
}

/// `column` is one of the ids of list `param` (see [`ID_LIST_MAX`]), or one of the
/// texts of a text list (`sql::IdList::text_list`: SQLite a JSON array of strings,
/// PostgreSQL a `TEXT[]`).
fn in_list(backend: Backend, column: &str, param: &str) -> String {
    match backend {
        Backend::Postgres => format!("{column} = ANY({param})"),
        Backend::Sqlite => format!("{column} IN (SELECT value FROM json_each({param}))"),
    }
}

/// A page of a subscription's backlog in range `r`: rows neither prepared nor acked
/// individually (priority `row`), `LIMIT $5`.
fn pending(p: &str, r: IdRange, row: &str) -> String {
    format!(
        "SELECT {MESSAGE_COLUMNS} FROM {} WHERE {} AND m.xid IS NULL \
           AND {} IS NULL ORDER BY {} LIMIT $5",
        r.from,
        r.range,
        acked(p, "$3", "$4", row),
        r.order
    )
}

/// A page of a subscription's backlog over all ten priorities at once, in id order.
/// Each arm is ordered by id in a sub-select: PostgreSQL plans the union as a Merge
/// Append of the ten ranges, SQLite flattens the arms into a MERGE (UNION ALL); both
/// pull rows from the arms one at a time, so the page reads at most `limit` + 10 rows
/// (plus the prepared and individually acked ones it skips), not ten pages. The arms
/// compare priority and container by equality, so that their index order is id order
/// (see the notes above about PostgreSQL).
fn merged(p: &str, backend: Backend) -> String {
    (0..=crate::MAX_PRIORITY)
        .map(|k| {
            let from = match backend {
                Backend::Postgres => format!("{p}msgs m"),
                Backend::Sqlite => format!("{p}msgs m INDEXED BY {p}msgs_pidx"),
            };
            format!(
                "SELECT * FROM (SELECT {MESSAGE_COLUMNS} FROM {from} \
                 WHERE m.container = $1 AND m.priority = {k} AND m.id > ${} \
                   AND m.xid IS NULL AND {} IS NULL \
                 ORDER BY m.id) a{k}",
                5 + u32::from(k),
                acked(p, "$2", "$3", &k.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// The mark advance over range `r`: the window of at most `$6` rows after the mark,
/// and in it the first row that is neither acked individually before nor in this
/// op's acks (list `$7`): the mark may move over the rows before that one. One row
/// comes back, whatever the window holds: the last id it may move to (NULL: none),
/// how many of those rows were not acked individually before, how many it may pass,
/// how many the window held. The first such row is an uncorrelated sub-select,
/// computed once (as a join, PostgreSQL computed it again for every row of the
/// window).
fn advance(p: &str, backend: Backend, r: IdRange) -> String {
    format!(
        "WITH w AS (SELECT m.id, CASE WHEN {} IS NULL THEN 0 ELSE 1 END AS done \
           FROM {} WHERE {} AND m.xid IS NULL ORDER BY {} LIMIT $6) \
         SELECT MAX(w.id), CAST(COALESCE(SUM(1 - w.done), 0) AS BIGINT), \
           CAST(COUNT(w.id) AS BIGINT), (SELECT CAST(COUNT(*) AS BIGINT) FROM w) \
         FROM w WHERE w.id < COALESCE((SELECT MIN(b.id) FROM w b \
           WHERE b.done = 0 AND NOT ({})), {MAX_ID})",
        acked(p, "$2", "$3", "$4"),
        r.from,
        r.range,
        r.order,
        in_list(backend, "b.id", "$7"),
    )
}

/// A cleanup batch over range `r`: deletes at most `limit` rows, not prepared.
fn cleanup(p: &str, r: IdRange, limit: &str) -> String {
    format!(
        "DELETE FROM {p}msgs WHERE id IN (SELECT m.id FROM {} \
         WHERE {} AND m.xid IS NULL ORDER BY {} LIMIT {limit}) \
         RETURNING id, {MSG_LENGTH}",
        r.from, r.range, r.order
    )
}

/// The message table as read by expiration: only the expiration index gives
/// `(expiration, id)` order; SQLite is told so.
fn by_expiration(p: &str, backend: Backend) -> String {
    match backend {
        Backend::Postgres => format!("{p}msgs m"),
        Backend::Sqlite => format!("{p}msgs m INDEXED BY {p}msgs_eidx"),
    }
}

/// A queue's held rows (`due` set, migration 0012) after position `($2, $3)` (due,
/// id) with a due time up to `upto`, in `(due, id)` order, `LIMIT limit`, with
/// `columns`: one range of the partial index `msgs_didx`. `due IS NOT NULL` is
/// written out, so that both planners see the index's own condition.
fn held(p: &str, backend: Backend, columns: &str, upto: &str, limit: &str) -> String {
    match backend {
        // Row comparisons on the index's columns, ordered by them (see the notes
        // above): only `msgs_didx` serves them, as one range.
        Backend::Postgres => format!(
            "SELECT {columns} FROM {p}msgs m \
             WHERE (m.container, m.due, m.id) > ($1, $2, $3) \
               AND (m.container, m.due, m.id) <= ($1, {upto}, {MAX_ID}) \
               AND m.due IS NOT NULL AND m.xid IS NULL \
             ORDER BY m.container, m.due, m.id LIMIT {limit}"
        ),
        // The range is `due >= $2` up to `upto`; the rows of due time `$2` up to id
        // `$3` are skipped by a filter in it (`due > $2 OR id > $3` is the row
        // comparison once `due >= $2`). A row comparison here let SQLite, after an
        // `ANALYZE`, skip-scan the index and sort.
        Backend::Sqlite => format!(
            "SELECT {columns} FROM {p}msgs m INDEXED BY {p}msgs_didx \
             WHERE m.container = $1 AND m.due IS NOT NULL AND m.due >= $2 \
               AND m.due <= {upto} AND (m.due > $2 OR m.id > $3) AND m.xid IS NULL \
             ORDER BY m.due, m.id LIMIT {limit}"
        ),
    }
}

/// A topic's expiry pages, with `columns`: see `read_expired_after`.
fn expired_after(p: &str, backend: Backend, columns: &str) -> [String; 2] {
    let by_expiration = by_expiration(p, backend);
    match backend {
        // Row comparisons on the index's columns, ordered by them: only `msgs_eidx`
        // serves them as one range (see the notes above).
        Backend::Postgres => [
            format!(
                "SELECT {columns} FROM {p}msgs m \
                 WHERE (m.container, m.expiration, m.id) > ($1, $4, $5) \
                   AND (m.container, m.expiration, m.id) <= ($1, $4, {MAX_ID}) \
                   AND m.xid IS NULL AND $2 > 0 \
                 ORDER BY m.container, m.expiration, m.id LIMIT $3"
            ),
            format!(
                "SELECT {columns} FROM {p}msgs m \
                 WHERE (m.container, m.expiration, m.id) > ($1, $4, {MAX_ID}) \
                   AND (m.container, m.expiration, m.id) <= ($1, $2, {MAX_ID}) \
                   AND m.xid IS NULL \
                 ORDER BY m.container, m.expiration, m.id LIMIT $3"
            ),
        ],
        // `$4` is a position a page before reached (expired then), or 0 with `$5` the
        // largest id (nothing): the tie's range is the equality and the id (`$2` stays
        // bound, unused).
        Backend::Sqlite => [
            format!(
                "SELECT {columns} FROM {by_expiration} \
                 WHERE m.container = $1 AND m.expiration = $4 AND m.id > $5 \
                   AND m.xid IS NULL AND $2 > 0 \
                 ORDER BY m.expiration, m.id LIMIT $3"
            ),
            format!(
                "SELECT {columns} FROM {by_expiration} \
                 WHERE m.container = $1 AND m.expiration > $4 \
                   AND m.expiration <= $2 AND m.xid IS NULL \
                 ORDER BY m.expiration, m.id LIMIT $3"
            ),
        ],
    }
}

/// The sizes of the `IN` lists [`Statements::count_committed_in`] makes: a batch of
/// containers is padded to the smallest that holds it (repeating its last name), so
/// that two texts are prepared. Not larger: with lists of 256, each SQLite
/// connection's prepared statement and its work space raised the peak resident
/// memory of a 10,000-queue fill by 5 MiB (50.2–51.1 against 44.9–45.4 MiB with 32);
/// 32 already ends the round trip per container.
pub(crate) const COUNT_BATCH_SIZES: [usize; 2] = [8, 32];

impl Statements {
    /// The committed rows of each of `$1..=$n` (`n` one of [`COUNT_BATCH_SIZES`]):
    /// one row `(container, count)` per container that holds any, so at most `n`
    /// rows (and `LIMIT n` says so), each count a walk of `msgs_cidx` over that
    /// container as [`Statements::count_committed`]'s.
    pub(crate) fn count_committed_in(&self, n: usize) -> String {
        let list = (1..=n)
            .map(|i| format!("${i}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "SELECT container, COUNT(*) FROM {}msgs WHERE container IN ({list}) \
             AND xid IS NULL GROUP BY container LIMIT {n}",
            self.prefix
        )
    }

    pub fn new(p: &str, backend: Backend) -> Self {
        let mut s = Self::message_statements(p, backend).with_subscription_statements();
        s.groups = GroupStatements::new(p, backend);
        s
    }

    /// The statements over messages alone: inserts, the pages of a queue and of a
    /// subscription's backlog, expiry, prepared rows, counts.
    fn message_statements(p: &str, backend: Backend) -> Self {
        let range = |container: &str, priority: Option<&str>, bound: Bound| {
            IdRange::new(p, backend, container, priority, bound)
        };
        let expired = "m.container = $1 AND m.expiration > 0 AND m.expiration <= $2 \
                       AND m.xid IS NULL ORDER BY m.expiration, m.id LIMIT $3";
        let by_expiration = by_expiration(p, backend);
        Self {
            prefix: p.to_string(),
            backend,
            insert_messages: format!(
                "INSERT INTO {p}msgs (id, container, msgid, expiration, priority, xid, msg, hdrs, lvkey, arrived) "
            ),
            max_message_id: format!("SELECT MAX(id) FROM {p}msgs"),
            prepared_ids: format!("SELECT id FROM {p}msgs WHERE xid = $1 ORDER BY id LIMIT $2"),
            renumber_prepared: format!(
                "UPDATE {p}msgs SET id = $2, xid = NULL WHERE id = $1 RETURNING container, lvkey"
            ),
            prepared_ids_many: format!(
                "SELECT xid, id FROM {p}msgs WHERE xid IS NOT NULL AND {} LIMIT $2",
                in_list(backend, "xid", "$1")
            ),
            renumber_many: match backend {
                Backend::Sqlite => format!(
                    "UPDATE {p}msgs SET id = json_extract(r.value, '$[1]'), xid = NULL \
                     FROM json_each($1) r WHERE {p}msgs.id = json_extract(r.value, '$[0]') \
                     RETURNING {p}msgs.id, {p}msgs.container, {p}msgs.lvkey"
                ),
                Backend::Postgres => format!(
                    "UPDATE {p}msgs m SET id = (r.v->>1)::bigint, xid = NULL \
                     FROM jsonb_array_elements($1::jsonb) r(v) WHERE m.id = (r.v->>0)::bigint \
                     RETURNING m.id, m.container, m.lvkey"
                ),
            },
            move_prepared: format!(
                "UPDATE {p}msgs SET xid = $2 WHERE xid IS NOT NULL AND xid = $1"
            ),
            replace_last_values: format!(
                "DELETE FROM {p}msgs WHERE id IN (SELECT id FROM {p}msgs \
                 WHERE container = $1 AND lvkey = $2 AND id < $3 \
                 AND (xid IS NULL OR substr(xid, 1, {sl}) = '{sched}') \
                 ORDER BY id LIMIT $4) RETURNING {MSG_LENGTH}",
                sl = crate::SCHEDULED_XID_PREFIX.len(),
                sched = crate::SCHEDULED_XID_PREFIX,
            ),
            newer_last_value: format!(
                "SELECT id FROM {p}msgs WHERE container = $1 AND lvkey = $2 \
                 AND COALESCE(arrived, id) > $3 \
                 AND (xid IS NULL OR substr(xid, 1, {sl}) = '{sched}') LIMIT 1",
                sl = crate::SCHEDULED_XID_PREFIX.len(),
                sched = crate::SCHEDULED_XID_PREFIX,
            ),
            delete_prepared: format!(
                "DELETE FROM {p}msgs WHERE id IN (SELECT id FROM {p}msgs WHERE xid = $1 LIMIT $2) \
                 RETURNING {MSG_LENGTH}"
            ),
            delete_prepared_prefix: format!(
                "DELETE FROM {p}msgs WHERE id IN (SELECT id FROM {p}msgs \
                 WHERE xid IS NOT NULL AND xid LIKE $1 ESCAPE '!' \
                 AND substr(xid, 1, length($3)) = $3 LIMIT $2) \
                 RETURNING {MSG_LENGTH}"
            ),
            remove: format!(
                "DELETE FROM {p}msgs WHERE container = $1 AND xid IS NULL AND {} \
                 RETURNING {MSG_LENGTH}",
                in_list(backend, "id", "$2")
            ),
            remove_ids: format!(
                "DELETE FROM {p}msgs WHERE container = $1 AND xid IS NULL AND {} \
                 RETURNING id, {MSG_LENGTH}, COALESCE(arrived, id)",
                in_list(backend, "id", "$2")
            ),
            redelivered: format!(
                "UPDATE {p}msgs SET redeliveries = $3, due = $4 \
                 WHERE container = $1 AND id = $2 AND xid IS NULL"
            ),
            redelivered_many: match backend {
                Backend::Sqlite => format!(
                    "UPDATE {p}msgs SET redeliveries = json_extract(r.value, '$[1]'), \
                       due = json_extract(r.value, '$[2]') \
                     FROM json_each($2) r WHERE +{p}msgs.container = $1 \
                       AND {p}msgs.id = json_extract(r.value, '$[0]') AND {p}msgs.xid IS NULL \
                     RETURNING {p}msgs.id"
                ),
                Backend::Postgres => format!(
                    "UPDATE {p}msgs m SET redeliveries = (r.v->>1)::int, due = (r.v->>2)::bigint \
                     FROM jsonb_array_elements($2::jsonb) r(v) WHERE m.container || '' = $1 \
                       AND m.id = (r.v->>0)::bigint AND m.xid IS NULL \
                     RETURNING m.id"
                ),
            },
            expire_queue: format!(
                "DELETE FROM {p}msgs WHERE id IN (SELECT id FROM {by_expiration} WHERE {expired}) \
                 RETURNING id, {MSG_LENGTH}"
            ),
            read_expired: format!("SELECT {MESSAGE_COLUMNS} FROM {by_expiration} WHERE {expired}"),
            read_expired_after: expired_after(p, backend, MESSAGE_COLUMNS),
            read_expired_keys_after: expired_after(p, backend, KEY_COLUMNS),
            stored_bytes: format!(
                "SELECT CAST(COALESCE(SUM(length(msg)), 0) AS BIGINT) FROM {p}msgs"
            ),
            read_pending: pending(p, range("$1", None, Bound::After("$2")), "-1"),
            read_pending_priority: pending(p, range("$1", Some("$6"), Bound::After("$2")), "$7"),
            read_pending_merged: format!("{} ORDER BY id LIMIT $4", merged(p, backend)),
            read_prepared_range: format!(
                "SELECT {MESSAGE_COLUMNS}, m.container, m.xid FROM {p}msgs m \
                 WHERE m.xid IS NOT NULL AND m.xid >= $1 AND m.xid < $2 \
                 ORDER BY m.xid LIMIT $3"
            ),
            count_prepared_range: format!(
                "SELECT COUNT(*) FROM (SELECT m.xid FROM {p}msgs m \
                 WHERE m.xid IS NOT NULL AND m.xid >= $1 AND m.xid < $2 \
                 ORDER BY m.xid LIMIT $3) r"
            ),
            browse: {
                let r = range("$1", None, Bound::After("$2"));
                format!(
                    "SELECT {MESSAGE_COLUMNS} FROM {} WHERE {} AND m.xid IS NULL \
                     ORDER BY {} LIMIT $3",
                    r.from, r.range, r.order
                )
            },
            read_queue: {
                let r = range("$1", None, Bound::After("$2"));
                format!(
                    "SELECT {MESSAGE_COLUMNS} FROM {} WHERE {} AND m.xid IS NULL \
                     AND m.due IS NULL ORDER BY {} LIMIT $3",
                    r.from, r.range, r.order
                )
            },
            read_held: held(p, backend, MESSAGE_COLUMNS, "$4", "$5"),
            next_held_due: held(p, backend, "m.due", &MAX_ID.to_string(), "1"),
            next_expiration: format!(
                "SELECT expiration FROM {p}msgs WHERE container = $1 AND expiration > 0 \
                 ORDER BY expiration LIMIT 1"
            ),
            has_rows: format!("SELECT 1 FROM {p}msgs WHERE container = $1 LIMIT 1"),
            committed_probe: format!(
                "SELECT id FROM {p}msgs WHERE id >= $1 AND id <= $2 LIMIT 1"
            ),
            count_messages: format!("SELECT COUNT(*) FROM {p}msgs WHERE container = $1"),
            count_committed: format!(
                "SELECT COUNT(*) FROM {p}msgs WHERE container = $1 AND xid IS NULL"
            ),
            next_container: format!(
                "SELECT container FROM {p}msgs WHERE container > $1 AND container < $2 \
                 ORDER BY container LIMIT 1"
            ),
            ..Self::default()
        }
    }

    /// [`Statements::message_statements`] with the statements of durable
    /// subscriptions: their rows and marks, individual acks, the mark advance,
    /// cleanup of what every subscription acked, the lease and the commit mark.
    fn with_subscription_statements(self) -> Self {
        let (p, backend) = (self.prefix.clone(), self.backend);
        let range = |container: &str, priority: Option<&str>, bound: Bound| {
            IdRange::new(&p, backend, container, priority, bound)
        };
        Self {
            max_acked_id: format!("SELECT MAX(last_acked_id) FROM {p}acks"),
            commit_mark: format!("SELECT token FROM {p}commit_mark WHERE id = 1"),
            set_commit_mark: format!("UPDATE {p}commit_mark SET token = $1 WHERE id = 1"),
            subscription_rows: format!(
                "SELECT priority, last_acked_id, selector FROM {p}acks \
                 WHERE container = $1 AND client_id = $2 AND sub_name = $3 \
                 ORDER BY priority LIMIT 11"
            ),
            insert_subscription_row: format!(
                "INSERT INTO {p}acks (container, client_id, sub_name, selector, last_acked_id, priority) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING"
            ),
            delete_subscription: format!(
                "DELETE FROM {p}acks WHERE container = $1 AND client_id = $2 AND sub_name = $3"
            ),
            delete_subscription_indacks: format!(
                "DELETE FROM {p}indacks WHERE container = $1 AND client_id = $2 AND sub_name = $3"
            ),
            list_subscription_rows: format!(
                "SELECT client_id, sub_name, selector, priority, last_acked_id FROM {p}acks \
                 WHERE container = $1 AND (client_id > $2 OR (client_id = $2 AND sub_name > $3)) \
                 ORDER BY client_id, sub_name, priority LIMIT $4"
            ),
            insert_indacks: format!(
                "INSERT INTO {p}indacks (container, client_id, sub_name, priority, msg_id) \
                 SELECT $1, $2, $3, $4, m.id FROM {p}msgs m \
                 WHERE m.container = $1 AND {} \
                 ON CONFLICT DO NOTHING",
                in_list(backend, "m.id", "$5")
            ),
            advance_window: [
                advance(&p, backend, range("$1", None, Bound::After("$5"))),
                advance(&p, backend, range("$1", Some("$4"), Bound::After("$5"))),
            ],
            update_mark: format!(
                "UPDATE {p}acks SET last_acked_id = $5 \
                 WHERE container = $1 AND client_id = $2 AND sub_name = $3 AND priority = $4 \
                   AND last_acked_id < $5"
            ),
            delete_indacks_upto: format!(
                "DELETE FROM {p}indacks WHERE container = $1 AND client_id = $2 AND sub_name = $3 \
                 AND priority = $4 AND msg_id <= $5"
            ),
            min_marks: format!(
                "SELECT priority, MIN(last_acked_id) FROM {p}acks WHERE container = $1 \
                 GROUP BY priority ORDER BY priority LIMIT 11"
            ),
            cleanup: [
                cleanup(&p, range("$1", None, Bound::Window("$4", "$2")), "$3"),
                cleanup(&p, range("$1", Some("$3"), Bound::Window("$5", "$2")), "$4"),
            ],
            lease_active: format!(
                "SELECT CASE WHEN expires_at > clock_timestamp() THEN 1 ELSE 0 END \
                 FROM {p}lock WHERE name = 'broker' FOR SHARE"
            ),
            reclaim: format!(
                "DELETE FROM {p}msgs WHERE container = $1 AND xid IS NULL AND {} \
                 AND NOT EXISTS (SELECT 1 FROM {p}acks a WHERE a.container = $1 \
                   AND (a.priority < 0 OR a.priority = {p}msgs.priority) \
                   AND a.last_acked_id < {p}msgs.id \
                   AND NOT EXISTS (SELECT 1 FROM {p}indacks i WHERE i.container = $1 \
                     AND i.client_id = a.client_id AND i.sub_name = a.sub_name \
                     AND i.priority = a.priority AND i.msg_id = {p}msgs.id)) \
                 RETURNING id, {MSG_LENGTH}",
                in_list(backend, "id", "$2")
            ),
            delete_message_indacks: format!(
                "DELETE FROM {p}indacks WHERE container = $1 AND {}",
                in_list(backend, "msg_id", "$2")
            ),
            count_subscriptions: format!(
                "SELECT COUNT(*) FROM {p}acks WHERE container = $1 AND priority <= 0"
            ),
            count_indacks: format!("SELECT COUNT(*) FROM {p}indacks WHERE container = $1"),
            count_client_subscriptions: format!(
                "SELECT COUNT(*) FROM (SELECT 1 FROM {p}acks WHERE client_id = $1 \
                 AND priority <= 0 LIMIT $2) s"
            ),
            subscription_containers: format!(
                "SELECT DISTINCT container FROM {p}acks WHERE client_id = $1 AND sub_name = $2 \
                 AND container > $3 ORDER BY container LIMIT $4"
            ),
            subscriptions_between: format!(
                "SELECT container, client_id, sub_name, selector FROM {p}acks \
                 WHERE container >= $1 AND container < $2 AND priority <= 0 \
                 AND (container > $3 OR (container = $3 AND (client_id > $4 \
                   OR (client_id = $4 AND sub_name > $5)))) \
                 ORDER BY container, client_id, sub_name LIMIT $6"
            ),
            ..self
        }
    }

    /// A page of a selector's scan of a queue: the rows of container `$1` in the id
    /// window `$2 < id <= $3`, neither prepared nor held back for a redelivery (`due`
    /// set: the queue reads those by due time), whose headers may match: for each entry
    /// of `values` (the count of allowed values of one header), the header named by
    /// the next placeholder has one of the values that follow (rows without the
    /// `hdrs` column's JSON, written before it existed, are returned to be tested in
    /// memory); `LIMIT` the placeholder after them. One range of `msgs_cidx`, bounded
    /// by the window whatever the filter keeps.
    pub fn scan_matching(&self, values: &[usize]) -> String {
        let mut n = 4;
        let mut terms = Vec::new();
        for &count in values {
            let name = format!("${n}");
            n += 1;
            let list: Vec<String> = (0..count).map(|i| format!("${}", n + i)).collect();
            n += count;
            let header = match self.backend {
                Backend::Sqlite => format!("json_extract(m.hdrs, {name})"),
                Backend::Postgres => format!("(m.hdrs ->> {name})"),
            };
            terms.push(format!("{header} IN ({})", list.join(", ")));
        }
        let filter = if terms.is_empty() {
            String::new()
        } else {
            format!(" AND (m.hdrs IS NULL OR ({}))", terms.join(" AND "))
        };
        let r = IdRange::new(
            &self.prefix,
            self.backend,
            "$1",
            None,
            Bound::Window("$2", "$3"),
        );
        format!(
            "SELECT {MESSAGE_COLUMNS} FROM {} WHERE {} AND m.xid IS NULL AND m.due IS NULL{filter} \
             ORDER BY {} LIMIT ${n}",
            r.from, r.range, r.order
        )
    }

    /// Statement 1 of `recover_expired`: for each requested subscription row, its mark,
    /// the end of its window (the `limit`-th pending id, `OFFSET $3`), the first id in
    /// the window that stops an expiry run (not expired, or prepared, and not acked
    /// individually) and the first expired id. Reads index entries of at most `limit`
    /// rows per subscription row, and no message body.
    ///
    /// Binds: `$1` container, `$2` now (epoch ms), `$3` limit - 1, then
    /// `(client_id, sub_name)` pairs from `$4`.
    pub fn expiry_runs(&self, subscriptions: usize) -> String {
        let p = &self.prefix;
        let subset = (0..subscriptions)
            .map(|k| {
                format!(
                    "(a.client_id = ${} AND a.sub_name = ${})",
                    4 + 2 * k,
                    5 + 2 * k
                )
            })
            .collect::<Vec<_>>()
            .join(" OR ");
        // The window end is computed once per subscription row (MATERIALIZED), and used
        // as an index range bound (COALESCE to the largest id when the window is short),
        // so the scans below stop at it instead of running to the end of the backlog.
        let window = |prio: &str| {
            format!(
                "(SELECT m.id FROM {p}msgs m WHERE m.container = $1 {prio} \
                 AND m.id > a.last_acked_id ORDER BY m.id LIMIT 1 OFFSET $3)"
            )
        };
        let part = |mode: &str, prio: &str| {
            format!(
                "SELECT w.client_id, w.sub_name, w.priority, w.last_acked_id, w.wend, \
                   (SELECT MIN(m.id) FROM {p}msgs m \
                    WHERE m.container = $1 {prio} AND m.id > w.last_acked_id \
                      AND m.id <= COALESCE(w.wend, {MAX_ID}) \
                      AND (+m.expiration = 0 OR +m.expiration > $2 OR m.xid IS NOT NULL) \
                      AND NOT EXISTS (SELECT 1 FROM {p}indacks i \
                          WHERE i.container = $1 AND i.client_id = w.client_id \
                            AND i.sub_name = w.sub_name AND i.priority = w.priority \
                            AND i.msg_id = m.id)) AS stop_id, \
                   (SELECT MIN(m.id) FROM {p}msgs m \
                    WHERE m.container = $1 {prio} AND m.id > w.last_acked_id \
                      AND m.id <= COALESCE(w.wend, {MAX_ID}) \
                      AND +m.expiration > 0 AND +m.expiration <= $2 AND m.xid IS NULL) AS first_expired \
                 FROM w WHERE w.priority {mode}"
            )
        };
        format!(
            "WITH w AS MATERIALIZED (\
               SELECT a.client_id, a.sub_name, a.priority, a.last_acked_id, \
                 CASE WHEN a.priority < 0 THEN {} ELSE {} END AS wend \
               FROM {p}acks a WHERE a.container = $1 AND ({subset})) \
             {} UNION ALL {}",
            window(""),
            window("AND m.priority = a.priority"),
            part("< 0", ""),
            part(">= 0", "AND m.priority = w.priority"),
        )
    }

    /// Statement 2 of `recover_expired`: the expired messages inside the given id
    /// ranges, `LIMIT $3`. `ranges` are `(priority, after_id, before_id)`: ids with
    /// `after_id < id < before_id` (no upper end with `None`), of one priority with
    /// `Some`. The numbers were read from the store as integers, so they are written
    /// into the text. Binds: `$1` container, `$2` now (epoch ms), `$3` limit.
    pub fn expired_in_ranges(&self, ranges: &[(Option<u8>, i64, Option<i64>)]) -> String {
        let p = &self.prefix;
        let ranges = ranges
            .iter()
            .map(|(prio, after, before)| {
                let mut r = format!("(m.id > {after}");
                if let Some(before) = before {
                    r.push_str(&format!(" AND m.id < {before}"));
                }
                if let Some(prio) = prio {
                    r.push_str(&format!(" AND m.priority = {prio}"));
                }
                r.push(')');
                r
            })
            .collect::<Vec<_>>()
            .join(" OR ");
        format!(
            "SELECT {MESSAGE_COLUMNS} FROM {p}msgs m \
             WHERE m.container = $1 AND +m.expiration > 0 AND +m.expiration <= $2 \
               AND m.xid IS NULL AND ({ranges}) \
             ORDER BY m.id LIMIT $3"
        )
    }
}

/// Checks a name that is written into SQL text (table prefix, schema).
pub(crate) fn check_name(what: &'static str, value: &str) -> crate::Result<()> {
    let ok = value.len() <= 48
        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !value.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(crate::StoreError::InvalidName {
            what,
            value: value.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_table_read_is_bounded() {
        for backend in [crate::Backend::Sqlite, crate::Backend::Postgres] {
            every_read_is_bounded_on(backend);
        }
    }

    fn every_read_is_bounded_on(backend: crate::Backend) {
        let s = Statements::new("ebb_", backend);
        let reads = [
            &s.read_pending,
            &s.read_pending_priority,
            &s.read_pending_merged,
            &s.advance_window[0],
            &s.advance_window[1],
            &s.browse,
            &s.read_queue,
            &s.read_held,
            &s.next_held_due,
            &s.next_expiration,
            &s.has_rows,
            &s.count_prepared_range,
            &s.prepared_ids,
            &s.prepared_ids_many,
            &s.replace_last_values,
            &s.newer_last_value,
            &s.cleanup[0],
            &s.cleanup[1],
            &s.delete_prepared,
            &s.delete_prepared_prefix,
            &s.expire_queue,
            &s.read_expired,
            &s.read_expired_after[0],
            &s.read_expired_after[1],
            &s.read_expired_keys_after[0],
            &s.read_expired_keys_after[1],
            &s.subscription_containers,
            &s.count_client_subscriptions,
            &s.next_container,
            &s.subscriptions_between,
        ];
        for sql in reads {
            assert!(sql.contains("LIMIT"), "unbounded: {sql}");
        }
        // A selector's scan: its page `LIMIT` after the filter's values, and an id
        // window (`$2 < id <= $3`) that bounds what it examines.
        for counts in [&[][..], &[1], &[2, 3]] {
            let scan = s.scan_matching(counts);
            let last = 4 + counts.len() + counts.iter().sum::<usize>();
            assert!(scan.ends_with(&format!("LIMIT ${last}")), "{scan}");
            assert!(scan.contains("$2") && scan.contains("$3"), "{scan}");
        }
        assert!(s.expiry_runs(2).contains("OFFSET $3"));
        // One row by its key.
        assert!(s.redelivered.ends_with("AND id = $2 AND xid IS NULL"));
        // Runs: one bound list each (at most `ID_LIST_MAX` entries), one row per entry.
        for text in [&s.redelivered_many, &s.renumber_many] {
            let list = match backend {
                crate::Backend::Sqlite => "FROM json_each(",
                crate::Backend::Postgres => "FROM jsonb_array_elements(",
            };
            assert!(text.contains(list), "{text}");
        }
        // A remove is bounded by its id list, one bound value (at most `ID_LIST_MAX`).
        let list = match backend {
            crate::Backend::Sqlite => "IN (SELECT value FROM json_each($2))",
            crate::Backend::Postgres => "= ANY($2)",
        };
        for text in [
            &s.remove,
            &s.remove_ids,
            &s.reclaim,
            &s.delete_message_indacks,
        ] {
            assert!(text.contains(list) && !text.contains("$3"), "{text}");
        }
        assert!(s.insert_indacks.contains(&list.replace("$2", "$5")));
        assert!(s.remove.ends_with("RETURNING CAST(length(msg) AS BIGINT)"));
        assert!(s
            .expired_in_ranges(&[(None, 1, Some(5)), (Some(3), 0, None)])
            .ends_with("ORDER BY m.id LIMIT $3"));
    }

    #[test]
    fn names_in_sql_text_are_checked() {
        assert!(check_name("table prefix", "ebb_").is_ok());
        assert!(check_name("table prefix", "").is_ok());
        assert!(check_name("table prefix", "x; DROP TABLE y").is_err());
        assert!(check_name("schema", "1abc").is_err());
    }
}

/// The plans noted above the statements: the queue expiry statements search the
/// expiration index and sort nothing, with 50,000 live rows (no TTL, then a long TTL)
/// ahead of 5,000 expired ones that share one expiration. SQLite always; PostgreSQL
/// when `EBB_TEST_POSTGRES_URL` is set (ignored without it, required with `CI`, as in
/// the integration tests), custom and generic plans, in a schema of its own,
/// with 1,000-byte bodies (on a table of tiny rows PostgreSQL rightly prefers one
/// sequential scan to 400 primary-key probes for the outer delete).
#[cfg(test)]
mod plans {
    use super::Statements;

    const Q: &str = "'queue://q'";

    fn queries(s: &Statements) -> [(&'static str, String); 2] {
        [
            ("read_expired", s.read_expired.clone()),
            ("expire_queue", s.expire_queue.clone()),
        ]
    }

    #[tokio::test]
    async fn sqlite_queue_expiry_searches_the_expiration_index() {
        use sqlx::Row;
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        for (_, _, text) in crate::migrate::SQLITE {
            sqlx::raw_sql(&text.replace("{p}", "ebb_"))
                .execute(&pool)
                .await
                .unwrap();
        }
        sqlx::raw_sql(
            "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < 55000) \
             INSERT INTO ebb_msgs (id, container, msgid, expiration, priority, msg) \
             SELECT x, 'queue://q', 'ID:' || x, \
               CASE WHEN x <= 25000 THEN 0 WHEN x <= 50000 THEN 9999999999999 ELSE 1000 END, \
               4, x'0102' FROM g",
        )
        .execute(&pool)
        .await
        .unwrap();
        for (name, sql) in queries(&Statements::new("ebb_", crate::Backend::Sqlite)) {
            let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
                .bind("queue://q")
                .bind(2000_i64)
                .bind(400_i64)
                .fetch_all(&pool)
                .await
                .unwrap();
            let plan: Vec<String> = rows.iter().map(|r| r.get::<String, _>(3)).collect();
            let text = plan.join("\n");
            assert!(
                plan.iter().any(|l| l.starts_with("SEARCH")
                    && l.contains(
                        "USING INDEX ebb_msgs_eidx (container=? AND expiration>? AND expiration<?)"
                    )),
                "{name}: {text}"
            );
            assert!(!text.contains("TEMP B-TREE"), "{name} sorts: {text}");
            assert!(
                !plan.iter().any(|l| l.starts_with("SCAN")),
                "{name} scans: {text}"
            );
        }
    }

    #[tokio::test]
    #[cfg_attr(
        not(ebb_test_postgres),
        ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to check the PostgreSQL plans"
    )]
    async fn postgres_queue_expiry_scans_the_expiration_index() {
        use sqlx::Connection;
        // Without the URL this runs only under CI (see `build.rs`), which must check
        // the plans, or with `--ignored`.
        let url = std::env::var("EBB_TEST_POSTGRES_URL")
            .ok()
            .filter(|url| !url.is_empty())
            .expect("EBB_TEST_POSTGRES_URL is not set: the PostgreSQL plans need its URL");
        // `ebb_test_` so `.ci/run` drops it if a failed run leaves it behind.
        let schema = format!("ebb_test_plans_{}", std::process::id());
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let mut setup = format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
             SET search_path = {schema};"
        );
        for (_, _, text) in crate::migrate::POSTGRES {
            setup.push_str(&text.replace("{p}", "ebb_"));
        }
        setup.push_str(
            "INSERT INTO ebb_msgs (id, container, msgid, expiration, priority, msg) \
             SELECT x, 'queue://q', 'ID:' || x, \
               CASE WHEN x <= 25000 THEN 0 WHEN x <= 50000 THEN 9999999999999 ELSE 1000 END, \
               4, decode(repeat('ab', 1000), 'hex') FROM generate_series(1, 55000) x; \
             ANALYZE ebb_msgs;",
        );
        sqlx::raw_sql(&setup).execute(&mut conn).await.unwrap();
        for (name, sql) in queries(&Statements::new("ebb_", crate::Backend::Postgres)) {
            sqlx::raw_sql(&format!("PREPARE {name}(text, bigint, bigint) AS {sql}"))
                .execute(&mut conn)
                .await
                .unwrap();
            for mode in ["force_custom_plan", "force_generic_plan"] {
                sqlx::raw_sql(&format!("SET plan_cache_mode = {mode}"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let plan: Vec<String> =
                    sqlx::query_scalar(&format!("EXPLAIN EXECUTE {name}({Q}, 2000, 400)"))
                        .fetch_all(&mut conn)
                        .await
                        .unwrap();
                let text = plan.join("\n");
                assert!(
                    text.contains("Index Scan using ebb_msgs_eidx"),
                    "{name}, {mode}: {text}"
                );
                assert!(!text.contains("Sort"), "{name}, {mode} sorts: {text}");
                assert!(!text.contains("Seq Scan"), "{name}, {mode} scans: {text}");
                if name == "expire_queue" {
                    assert!(
                        text.contains("Nested Loop")
                            && text.contains("Index Scan using ebb_msgs_pkey"),
                        "{name}, {mode}: {text}"
                    );
                }
            }
        }
        sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(&mut conn)
            .await
            .unwrap();
    }
}

#[cfg(test)]
mod print_sql {
    #[test]
    #[ignore = "not a check: prints the expiry and pending-read statements (--ignored --nocapture)"]
    fn print() {
        let s = super::Statements::new("ebb_", crate::Backend::Sqlite);
        println!("{}", s.expiry_runs(1));
        println!("---");
        println!("{}", s.expired_in_ranges(&[(None, 0, Some(500))]));
        for backend in [crate::Backend::Sqlite, crate::Backend::Postgres] {
            let s = super::Statements::new("ebb_", backend);
            for sql in [
                &s.read_pending,
                &s.read_pending_priority,
                &s.read_pending_merged,
            ] {
                println!("--- {backend:?}\n{sql}");
            }
        }
    }
}

#[cfg(test)]
mod insert_chunk_tests {
    use super::{insert_chunk, INSERT_BATCH};

    #[test]
    fn chunks_are_powers_of_two_that_add_up() {
        let mut sizes = std::collections::BTreeSet::new();
        for n in 1..2000usize {
            let mut left = n;
            let mut statements = 0;
            while left > 0 {
                let size = insert_chunk(left);
                assert!(size.is_power_of_two() && size <= left && size <= INSERT_BATCH);
                sizes.insert(size);
                left -= size;
                statements += 1;
            }
            if n < INSERT_BATCH {
                assert_eq!(statements, n.count_ones(), "{n}");
            }
        }
        assert_eq!(sizes.len(), 9, "{sizes:?}");
    }
}

impl GroupStatements {
    fn new(p: &str, backend: Backend) -> Self {
        let range = |bound: Bound| IdRange::new(p, backend, "$1", None, bound);
        let delivery = |column: &str| {
            format!("(SELECT d.{column} FROM {p}group_deliveries d WHERE d.grp = $4 AND d.msg_id = m.id)")
        };
        let columns = format!(
            "m.id, m.msgid, m.expiration, m.priority, m.msg, COALESCE({}, 0), {}",
            delivery("redeliveries"),
            delivery("due")
        );
        let acked = acked(p, "$3", "$4", "-1");
        let page = |r: IdRange, held: bool| {
            let not_held = if held {
                String::new()
            } else {
                format!(" AND {} IS NULL", delivery("due"))
            };
            format!(
                "SELECT {columns} FROM {} WHERE {} AND m.xid IS NULL AND {acked} IS NULL{not_held} \
                 ORDER BY {} LIMIT $5",
                r.from, r.range, r.order
            )
        };
        let held = |columns: &str, upto: &str, limit: &str| {
            format!(
                "SELECT {columns} FROM {p}group_deliveries d \
                 JOIN {p}msgs m ON m.id = d.msg_id \
                 WHERE d.grp = $1 AND d.due IS NOT NULL AND d.due >= $2 AND d.due <= {upto} \
                   AND (d.due > $2 OR d.msg_id > $3) AND m.xid IS NULL \
                 ORDER BY d.due, d.msg_id LIMIT {limit}"
            )
        };
        let by_expiration = by_expiration(p, backend);
        // The topic's expired rows at `$2` in `(expiration, id)` order, the first
        // `$7` index entries at most (a window: the rows the group is done with and
        // another subscription keeps are passed over, never without bound), then
        // those the group needs (above mark `$6`, not acked individually), `LIMIT $5`.
        let window_acked = format!(
            "(SELECT 1 FROM {p}indacks i WHERE i.container = $1 AND i.client_id = $3 \
               AND i.sub_name = $4 AND i.priority = -1 AND i.msg_id = e.id)"
        );
        let window = format!(
            "SELECT e.id FROM (SELECT m.id, m.expiration FROM {by_expiration} \
               WHERE m.container = $1 AND m.expiration > 0 AND m.expiration <= $2 \
                 AND m.xid IS NULL ORDER BY m.expiration, m.id LIMIT $7) e \
             WHERE e.id > $6 AND {window_acked} IS NULL ORDER BY e.expiration, e.id LIMIT $5"
        );
        Self {
            list: format!(
                "SELECT container, sub_name FROM {p}acks \
                 WHERE client_id = $1 AND sub_name > $2 ORDER BY client_id, sub_name LIMIT $3"
            ),
            pending: [
                page(range(Bound::After("$2")), false),
                page(range(Bound::After("$2")), true),
            ],
            window: page(range(Bound::Window("$2", "$6")), false),
            held: held(
                "m.id, m.msgid, m.expiration, m.priority, m.msg, d.redeliveries, d.due",
                "$4",
                "$5",
            ),
            next_held_due: held("d.due", &MAX_ID.to_string(), "1"),
            expired: format!(
                "SELECT {columns} FROM ({window}) w JOIN {p}msgs m ON m.id = w.id \
                 ORDER BY m.expiration, m.id"
            ),
            expired_ids: window.clone(),
            count: {
                let r = range(Bound::After("$2"));
                format!(
                    "SELECT COUNT(*) FROM {} WHERE {} AND m.xid IS NULL AND {acked} IS NULL",
                    r.from, r.range
                )
            },
            next_expiration: format!(
                "SELECT MIN(CASE WHEN m.id > $2 AND {acked} IS NULL THEN m.expiration END), \
                   MAX(m.expiration), CAST(COUNT(*) AS BIGINT) \
                 FROM (SELECT e.id, e.expiration FROM {} \
                   WHERE e.container = $1 AND e.expiration > 0 AND e.xid IS NULL \
                   ORDER BY e.expiration, e.id LIMIT {EXPIRING_LOOKED_AT}) m",
                match backend {
                    Backend::Postgres => format!("{p}msgs e"),
                    Backend::Sqlite => format!("{p}msgs e INDEXED BY {p}msgs_eidx"),
                }
            ),
            redelivered: format!(
                "INSERT INTO {p}group_deliveries (grp, msg_id, redeliveries, due) \
                 SELECT $1, m.id, $3, $4 FROM {p}msgs m \
                 WHERE m.id = $2 AND m.container = $5 AND m.id > $6 AND m.xid IS NULL \
                   AND (SELECT 1 FROM {p}indacks i WHERE i.container = $5 AND i.client_id = $7 \
                     AND i.sub_name = $1 AND i.priority = -1 AND i.msg_id = m.id) IS NULL \
                 ON CONFLICT (grp, msg_id) DO UPDATE \
                 SET redeliveries = excluded.redeliveries, due = excluded.due"
            ),
            forget: format!(
                "DELETE FROM {p}group_deliveries WHERE grp = $1 AND {}",
                in_list(backend, "msg_id", "$2")
            ),
            forget_all: format!("DELETE FROM {p}group_deliveries WHERE grp = $1"),
        }
    }
}
