//! The schema migrations, embedded from `migrations/{sqlite,postgres}/NNNN_name.sql`.
//!
//! Our own small runner instead of `sqlx::migrate!`: the table prefix is part of every
//! table name (`{p}` in the files), and sqlx keeps one `_sqlx_migrations` table per
//! schema, so two stores with different prefixes in one database would collide. The
//! applied version is kept in `{p}schema_version`.

/// `(version, name, SQL with {p})`, in version order.
pub(crate) type Migration = (i64, &'static str, &'static str);

pub(crate) const SQLITE: &[Migration] = &[
    (
        1,
        "initial",
        include_str!("../migrations/sqlite/0001_initial.sql"),
    ),
    (
        2,
        "expiration_index_with_id",
        include_str!("../migrations/sqlite/0002_expiration_index_with_id.sql"),
    ),
    (
        3,
        "subscription_key_index",
        include_str!("../migrations/sqlite/0003_subscription_key_index.sql"),
    ),
    (
        4,
        "queryable_headers",
        include_str!("../migrations/sqlite/0004_queryable_headers.sql"),
    ),
    (
        5,
        "container_byte_order",
        include_str!("../migrations/sqlite/0005_container_byte_order.sql"),
    ),
    (
        6,
        "lease_lock",
        include_str!("../migrations/sqlite/0006_lease_lock.sql"),
    ),
    (
        7,
        "redeliveries",
        include_str!("../migrations/sqlite/0007_redeliveries.sql"),
    ),
    (
        8,
        "indacks_by_message",
        include_str!("../migrations/sqlite/0008_indacks_by_message.sql"),
    ),
    (
        9,
        "last_values",
        include_str!("../migrations/sqlite/0009_last_values.sql"),
    ),
    (
        10,
        "commit_mark",
        include_str!("../migrations/sqlite/0010_commit_mark.sql"),
    ),
    (
        11,
        "arrival",
        include_str!("../migrations/sqlite/0011_arrival.sql"),
    ),
    (
        12,
        "redelivery_due",
        include_str!("../migrations/sqlite/0012_redelivery_due.sql"),
    ),
    (
        13,
        "group_deliveries",
        include_str!("../migrations/sqlite/0013_group_deliveries.sql"),
    ),
];

pub(crate) const POSTGRES: &[Migration] = &[
    (
        1,
        "initial",
        include_str!("../migrations/postgres/0001_initial.sql"),
    ),
    (
        2,
        "expiration_index_with_id",
        include_str!("../migrations/postgres/0002_expiration_index_with_id.sql"),
    ),
    (
        3,
        "subscription_key_index",
        include_str!("../migrations/postgres/0003_subscription_key_index.sql"),
    ),
    (
        4,
        "queryable_headers",
        include_str!("../migrations/postgres/0004_queryable_headers.sql"),
    ),
    (
        5,
        "container_byte_order",
        include_str!("../migrations/postgres/0005_container_byte_order.sql"),
    ),
    (
        6,
        "lease_lock",
        include_str!("../migrations/postgres/0006_lease_lock.sql"),
    ),
    (
        7,
        "redeliveries",
        include_str!("../migrations/postgres/0007_redeliveries.sql"),
    ),
    (
        8,
        "indacks_by_message",
        include_str!("../migrations/postgres/0008_indacks_by_message.sql"),
    ),
    (
        9,
        "last_values",
        include_str!("../migrations/postgres/0009_last_values.sql"),
    ),
    (
        10,
        "commit_mark",
        include_str!("../migrations/postgres/0010_commit_mark.sql"),
    ),
    (
        11,
        "arrival",
        include_str!("../migrations/postgres/0011_arrival.sql"),
    ),
    (
        12,
        "redelivery_due",
        include_str!("../migrations/postgres/0012_redelivery_due.sql"),
    ),
    (
        13,
        "group_deliveries",
        include_str!("../migrations/postgres/0013_group_deliveries.sql"),
    ),
];

/// The version table's DDL (same on both backends).
pub(crate) fn version_table(p: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {p}schema_version \
         (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_ms BIGINT NOT NULL)"
    )
}

pub(crate) fn current_version(p: &str) -> String {
    format!("SELECT MAX(version) FROM {p}schema_version")
}

pub(crate) fn record_version(p: &str) -> String {
    format!("INSERT INTO {p}schema_version (version, name, applied_ms) VALUES ($1, $2, $3)")
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_backends_have_the_same_migrations() {
        let names = |m: &[super::Migration]| m.iter().map(|(v, n, _)| (*v, *n)).collect::<Vec<_>>();
        assert_eq!(names(super::SQLITE), names(super::POSTGRES));
        for (_, _, sql) in super::SQLITE.iter().chain(super::POSTGRES) {
            // Every table name carries the prefix.
            assert!(
                sql.contains("{p}msgs")
                    || sql.contains("{p}acks")
                    || sql.contains("{p}indacks")
                    || sql.contains("{p}lock")
                    || sql.contains("{p}commit_mark")
                    || sql.contains("{p}group_deliveries"),
                "{sql}"
            );
            assert!(!sql.contains(" ebb_"), "{sql}");
        }
    }
}
