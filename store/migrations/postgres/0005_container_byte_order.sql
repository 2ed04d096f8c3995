-- Store keys (`container`) compare byte by byte, as on SQLite (BINARY), whatever the
-- database's collation: a wildcard subscription finds the destinations it matches by
-- a range of keys (`queue://jobs` .. `queue://jobs/`), which a linguistic collation
-- (en_US.UTF-8 ignores punctuation) would not keep together. The indexes on the
-- columns are rebuilt with them.
ALTER TABLE {p}msgs ALTER COLUMN container TYPE TEXT COLLATE "C";
ALTER TABLE {p}acks ALTER COLUMN container TYPE TEXT COLLATE "C";
ALTER TABLE {p}indacks ALTER COLUMN container TYPE TEXT COLLATE "C";
