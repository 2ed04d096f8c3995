-- The commit mark: one row whose `token` a write transaction that gives no row a new
-- id (acks, deletes, expiry pages) sets to a value of its own before it commits. When
-- the answer to such a COMMIT is lost (PostgreSQL's connection breaks after the server
-- got it), the store reads the row: its token proves that the transaction committed,
-- as the rows of its new ids do for one that adds messages. One row, updated in place.
CREATE TABLE IF NOT EXISTS {p}commit_mark (
    id INTEGER PRIMARY KEY,
    token BIGINT NOT NULL
);
INSERT INTO {p}commit_mark (id, token) VALUES (1, 0) ON CONFLICT DO NOTHING;
