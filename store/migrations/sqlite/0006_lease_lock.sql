-- The lease lock's table, as on PostgreSQL. Unused on SQLite: a broker holds an
-- SQLite store through the lock file (`<database>.lock`), which the operating system
-- releases when the broker dies; a standby waits for that lock.
-- It replaces the placeholder of the first migration, which nothing used.
DROP TABLE IF EXISTS {p}lock;
CREATE TABLE {p}lock (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
INSERT INTO {p}lock (name, holder, acquired_at, expires_at)
    VALUES ('broker', '', 0, 0) ON CONFLICT DO NOTHING;
