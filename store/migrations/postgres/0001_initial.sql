-- Ebb store schema, PostgreSQL. `{p}` is the table prefix (default `ebb_`).
-- Modelled on ActiveMQ's JDBC schema (ACTIVEMQ_MSGS / ACTIVEMQ_ACKS / ACTIVEMQ_LOCK).
CREATE TABLE IF NOT EXISTS {p}msgs (
    id          BIGINT  PRIMARY KEY,          -- store sequence, send order
    container   TEXT    NOT NULL,             -- destination key, e.g. topic://orders
    msgid       TEXT    NOT NULL,             -- broker message id
    expiration  BIGINT  NOT NULL DEFAULT 0,   -- epoch ms, 0 = never
    priority    INTEGER NOT NULL DEFAULT 4,   -- 0..9
    xid         TEXT,                         -- set while in a prepared transaction
    msg         BYTEA   NOT NULL              -- format byte + postcard(Payload)
);
CREATE INDEX IF NOT EXISTS {p}msgs_cidx ON {p}msgs (container, id);
CREATE INDEX IF NOT EXISTS {p}msgs_pidx ON {p}msgs (container, priority, id);
CREATE INDEX IF NOT EXISTS {p}msgs_eidx ON {p}msgs (container, expiration);
-- Partial: serves commit and rollback lookups only, so no plan uses it for `xid IS NULL`.
CREATE INDEX IF NOT EXISTS {p}msgs_xidx ON {p}msgs (xid) WHERE xid IS NOT NULL;

-- One row per durable subscription (priority -1: one mark for every priority),
-- or ten rows, priority 0..9, when the destination has prioritized messages.
CREATE TABLE IF NOT EXISTS {p}acks (
    container     TEXT    NOT NULL,
    client_id     TEXT    NOT NULL,
    sub_name      TEXT    NOT NULL,
    selector      TEXT,
    last_acked_id BIGINT  NOT NULL,           -- high-water mark: id <= mark is done
    priority      INTEGER NOT NULL,
    PRIMARY KEY (container, client_id, sub_name, priority)
);

-- Acks above the mark that arrived out of order; the mark advances over them when
-- the gap before them closes, and they are deleted then.
CREATE TABLE IF NOT EXISTS {p}indacks (
    container  TEXT    NOT NULL,
    client_id  TEXT    NOT NULL,
    sub_name   TEXT    NOT NULL,
    priority   INTEGER NOT NULL,              -- the acks row this belongs to
    msg_id     BIGINT  NOT NULL,
    PRIMARY KEY (container, client_id, sub_name, priority, msg_id)
);

-- For an exclusive or lease lock between brokers sharing one database (later).
CREATE TABLE IF NOT EXISTS {p}lock (
    id          BIGINT PRIMARY KEY,
    time        BIGINT,
    broker_name TEXT
);
INSERT INTO {p}lock (id) VALUES (1) ON CONFLICT DO NOTHING;
