//! Helpers shared by the benchmarks that drive a broker end to end.
#![allow(dead_code)]

pub mod ebb_run;
pub mod procfs;
pub mod report;
pub mod stomp_load;
pub mod tally;
