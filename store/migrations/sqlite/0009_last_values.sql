-- A message's last-value key (`NewMessage::last_value`): on a kind of destination that
-- keeps one message per value of a header (a last-value queue), the value of that
-- header. Committing a row with a key deletes the older committed rows of its
-- container with the same key, in the same transaction; this index makes that delete
-- one range of (container, lvkey). NULL on every other row, which the index leaves out.
ALTER TABLE {p}msgs ADD COLUMN lvkey TEXT;
CREATE INDEX IF NOT EXISTS {p}msgs_lvidx ON {p}msgs (container, lvkey, id) WHERE lvkey IS NOT NULL;
