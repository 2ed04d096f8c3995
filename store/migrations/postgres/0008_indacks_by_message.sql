-- Individual acks by message: a topic's expiry deletes an expired message that every
-- durable subscription is done with (by its mark or an individual ack), and then the
-- individual acks of that message, by id (`WriteOp::Reclaim`); this index makes that
-- delete a lookup per id instead of a scan of the topic's acks.
CREATE INDEX IF NOT EXISTS {p}indacks_midx ON {p}indacks (container, msg_id);
