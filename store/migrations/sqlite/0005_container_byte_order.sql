-- Store keys (`container`) compare byte by byte: SQLite's default collation (BINARY)
-- already does, so there is nothing to change here; the PostgreSQL migration of this
-- number sets the same order there. (The statement only keeps the version numbers of
-- both backends in step.)
SELECT 1 FROM {p}msgs LIMIT 0;
