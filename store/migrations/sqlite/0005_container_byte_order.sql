-- Store keys (`container`) compare byte by byte: SQLite's default collation (BINARY)
-- already does. The PostgreSQL migration of this number sets the same order there.
SELECT 1;
