//! Ebb's end-to-end tests, one binary: one module per promise, each file's `//!`
//! says which. One binary links once (a test binary per file linked the whole broker
//! again for each), and its tests share the cores instead of running one file after
//! another. `tests/flow_control.rs` stays apart: it counts the heap of its whole
//! process.

mod advisory;
mod atomic_commit;
mod backlog_never_blocks;
#[cfg(feature = "cli")]
mod chaos;
#[cfg(feature = "cli")]
mod cli_check;
#[cfg(feature = "cli")]
mod cli_passwd;
#[cfg(feature = "http")]
mod console;
mod consumer_cases;
mod delete_destination;
mod docs;
mod durable_subscriptions;
mod embedding;
mod examples;
mod expiry_never_acks_live;
mod expiry_pages;
mod faulty_store;
mod graceful_shutdown;
#[cfg(feature = "cli")]
mod ha;
mod heartbeats;
mod housekeeping_fairness;
#[cfg(feature = "http")]
mod http_api;
mod last_value_queue;
mod layering;
mod pipelining;
// These drive the `ebb` binary's tools (`ebb::cli`, the binary itself): they need the
// default `cli` feature.
#[cfg(feature = "cli")]
mod metrics;
mod mqtt;
mod mqtt_fuzz;
mod queue_concurrency;
mod queues;
mod redelivery_delay;
mod routing;
mod runtimes;
mod scheduled;
mod selectors;
#[cfg(feature = "cli")]
mod soak;
mod stomp_cases;
mod stomp_codec_props;
mod stomp_fuzz;
#[cfg(feature = "cli")]
mod stomp_py;
mod stomp_queues;
mod stomp_raw;
#[cfg(feature = "cli")]
mod stompjs;
mod store_full;
#[cfg(feature = "tls")]
mod temporary;
mod tls;
mod transaction_memory;
mod wildcards;

/// Runs the `ebb` binary with `args`; returns (success, stdout, stderr). For the tests
/// of its commands (`cli_check`, `metrics`).
#[cfg(feature = "cli")]
async fn run_ebb(args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ebb"))
        .args(args)
        .output()
        .await
        .expect("ebb runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
