-- A consumer group over a topic (a virtual topic's `Consumer.A.VirtualTopic.X`):
-- a queue whose messages are the topic's own rows, stored once, and read through the
-- group's durable subscription on the topic (an `acks` row with client id
-- `ebb:group` named by the group queue's store key: its high-water mark, with its
-- individual acks in `indacks`), plus the rows sent to the group queue itself. What
-- a queue keeps in a row of its own for each message (its failed deliveries and the
-- due time of a redelivery held back, migration 0012) the group keeps here, for the
-- topic's rows it failed to deliver only: one row per (group, message), deleted when
-- the group acks the message. `grp` is the group queue's store key.
CREATE TABLE IF NOT EXISTS {p}group_deliveries (
    grp          TEXT    NOT NULL,
    msg_id       INTEGER  NOT NULL,
    redeliveries INTEGER NOT NULL,
    due          INTEGER,
    PRIMARY KEY (grp, msg_id)
);
-- The group's held messages in due order, as `msgs_didx` for a queue's own rows.
CREATE INDEX IF NOT EXISTS {p}group_deliveries_didx
    ON {p}group_deliveries (grp, due, msg_id) WHERE due IS NOT NULL;
