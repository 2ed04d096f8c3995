//! Helpers shared by the benchmarks that drive a broker end to end.
#![allow(dead_code)]

pub mod stomp_load;
pub mod tally;
