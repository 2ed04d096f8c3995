-- The lease lock of a broker in high-availability mode (`[ha] mode = "shared-store"`):
-- one row, whose holder is the active broker until `expires_at`, by the database's
-- clock. The active broker renews it; a standby takes it only once it has expired
-- (or was released). As ActiveMQ's lease database locker (ACTIVEMQ_LOCK) and Artemis's
-- JDBC node manager.
-- It replaces the placeholder of the first migration, which nothing used.
DROP TABLE IF EXISTS {p}lock;
CREATE TABLE {p}lock (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    acquired_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
-- The row is always there (expired until a broker with a lease takes it), so that a
-- write's share lock on it orders it against a takeover.
INSERT INTO {p}lock (name, holder, acquired_at, expires_at)
    VALUES ('broker', '', 'epoch', 'epoch') ON CONFLICT DO NOTHING;
