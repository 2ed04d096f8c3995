-- A queue message held back for its redelivery delay (a queue's back-off, ActiveMQ's
-- redeliveryDelay) stays in its row: `due` is when it may be delivered again, epoch
-- ms, written with its failure count (`redeliveries`) by one UPDATE
-- (`WriteOp::Redelivered` with `hold_until`). A row with `due` set is the
-- queue's held partition: the queue's cursor reads (`read_queue`, `scan_matching`)
-- skip it, and the queue reads it back by this index, in due order, once due
-- (`read_held`), at start too, so a hold survives a crash. Before this migration a
-- hold made the row prepared under a `sched:` xid and its release renumbered it:
-- two rewrites of the row and of every index; such rows still left in a store are
-- released by the scheduler as before. NULL on every other row: nullable, without a
-- default, so adding the column rewrites no row, and the partial index leaves those
-- rows out (a send or an ack does not touch it).
ALTER TABLE {p}msgs ADD COLUMN due INTEGER;
CREATE INDEX IF NOT EXISTS {p}msgs_didx ON {p}msgs (container, due, id) WHERE due IS NOT NULL;
