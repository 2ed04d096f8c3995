//! The store's one error type.

use thiserror::Error;

/// Every way a store call can fail. The `Display` text is stable: operators grep for it.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The store URL cannot be used. `url` has its password removed.
    #[error("store URL `{url}` cannot be used: {reason}")]
    InvalidUrl { url: String, reason: String },

    /// A name that goes into SQL text (table prefix, PostgreSQL schema) is not plain
    /// ASCII letters, digits and `_`.
    #[error(
        "invalid {what} `{value}`: only ASCII letters, digits and `_` are allowed (at most 48)"
    )]
    InvalidName { what: &'static str, value: String },

    /// The database could not be reached or refused the connection.
    #[error("cannot open store `{url}`: {source}")]
    Open {
        url: String,
        #[source]
        source: sqlx::Error,
    },

    /// A schema migration failed; the store was not opened.
    #[error("migration {version} ({name}) failed: {source}")]
    Migration {
        version: i64,
        name: &'static str,
        #[source]
        source: sqlx::Error,
    },

    /// A statement failed (lost connection, full disk, lock timeout ...). What the
    /// statement was doing is in `op`. Nothing of the failed transaction was committed.
    #[error("store {op} failed: {source}")]
    Database {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },

    /// A stored message body could not be decoded (unknown format byte, truncated).
    #[error("message {id}: stored body cannot be decoded: {reason}")]
    Corrupt { id: i64, reason: String },

    /// Another broker holds this store's exclusive lock (as ActiveMQ's JDBC exclusive
    /// locker: one broker per store, so message ids never collide).
    #[error("store `{0}` is in use by another broker (its exclusive lock is held)")]
    Locked(String),

    /// The store held a lease ([`crate::LeaseOptions`]) and lost it: the write was
    /// not made, nor will any later one be. The broker must stop: another may be
    /// active on the store now.
    #[error("the store's lease is lost ({0}): this broker no longer writes to it")]
    LeaseLost(String),

    /// Opened without [`crate::StoreOptions::create`], the store is not there as this
    /// build needs it (no file, no schema, no tables, an older schema version); nothing
    /// was created or changed.
    #[error("no store at `{url}`: {reason}")]
    Missing { url: String, reason: String },

    /// A [`crate::MessageStore::write`] answered an op with an outcome of another kind
    /// than the op's (see [`crate::WriteOutcome`]'s typed accessors). The built-in
    /// backends never do; a wrapper or another implementation that broke the contract
    /// can.
    #[error("store answered with a {got} outcome where {expected} was due")]
    WrongOutcome {
        expected: &'static str,
        got: &'static str,
    },

    /// The store was closed by [`crate::MessageStore::close`].
    #[error("store is closed")]
    Closed,
}

/// Result alias of this crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Wraps an sqlx error with the name of the operation, for `map_err`.
pub(crate) fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| match source {
        sqlx::Error::PoolClosed => StoreError::Closed,
        source => StoreError::Database { op, source },
    }
}

/// Removes the password from a database URL so it can be logged or shown.
pub fn redact_url(url: &str) -> String {
    // scheme://user:password@host/... -> scheme://user:***@host/...
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match (authority.rfind('@'), authority.find(':')) {
        (Some(at), Some(colon)) if colon < at => format!(
            "{}{}:***{}",
            &url[..scheme_end + 3],
            &authority[..colon],
            &rest[at..]
        ),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn password_is_removed_from_urls() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite://a/b.db"), "sqlite://a/b.db");
        assert_eq!(redact_url("sqlite::memory:"), "sqlite::memory:");
    }
}
