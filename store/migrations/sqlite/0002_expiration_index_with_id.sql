-- Queue expiry pages pick rows by `ORDER BY expiration, id LIMIT n` (ExpireQueue,
-- read_expired). With `id` in the expiration index that order is the index order, so a
-- page reads `n` index entries. Without it PostgreSQL sorts by id within each run of
-- equal expirations and reads the whole run: messages sent in the same millisecond
-- with the same TTL share an expiration, and a burst of them made one page read all of
-- them. SQLite's index already ended in the rowid (= id); the same DDL keeps the two
-- schemas alike. `has_expiring` uses the same index prefix as before.
DROP INDEX IF EXISTS {p}msgs_eidx;
CREATE INDEX IF NOT EXISTS {p}msgs_eidx ON {p}msgs (container, expiration, id);
