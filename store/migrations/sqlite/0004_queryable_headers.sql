-- A queue message's headers as a JSON object (`{"name": "value"}`, the first value of
-- each name), beside the encoded `msg`, so that a selector's scan of a queue can test
-- the headers in SQL (`scan_matching`) instead of reading every row back. NULL for
-- topic messages and for rows written before this migration (a scan reads those back
-- and tests them in memory).
ALTER TABLE {p}msgs ADD COLUMN hdrs TEXT;
