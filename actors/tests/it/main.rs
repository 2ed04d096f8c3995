//! The actors' property tests, one binary: one module per promise, each run on SQLite
//! and on PostgreSQL. One binary links once.

mod database_gone;
mod group_commit;
mod marks_never_move_backwards;
