//! Ebb's end-to-end tests, one binary: one module per promise, each file's `//!`
//! says which. One binary links once (a test binary per file linked the whole broker
//! again for each), and its tests share the cores instead of running one file after
//! another. `tests/flow_control.rs` stays apart: it counts the heap of its whole
//! process.

/// `<name>::sqlite` and `<name>::postgres` for each Python scenario (stomp.py's,
/// paho-mqtt's), as `on_every_backend!` writes them, and both ignored (with the
/// reason) without `cfg(ebb_test_python)`.
macro_rules! python_scenarios {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[cfg_attr(
                    not(ebb_test_python),
                    ignore = "set EBB_TEST_PYTHON=/path/to/python (with stomp.py and paho-mqtt) to run the Python scenarios"
                )]
                async fn sqlite() {
                    super::$name(ebb::test_util::TestStore::sqlite()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[cfg_attr(
                    not(ebb_test_python),
                    ignore = "set EBB_TEST_PYTHON=/path/to/python (with stomp.py and paho-mqtt) to run the Python scenarios"
                )]
                #[cfg_attr(
                    all(ebb_test_python, not(ebb_test_postgres)),
                    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
                )]
                async fn postgres() {
                    super::$name(ebb::test_util::TestStore::postgres()).await;
                }
            }
        )*
    };
}

mod advisory;
mod atomic_commit;
mod backlog_never_blocks;
#[cfg(feature = "cli")]
mod chaos;
#[cfg(feature = "cli")]
mod cli_check;
#[cfg(feature = "cli")]
mod cli_passwd;
mod composite_sends;
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
#[cfg(feature = "cli")]
mod mqtt_py;
mod queue_concurrency;
mod queues;
mod redelivery_delay;
mod routing;
mod runtimes;
mod scheduled;
mod selectors;
mod sleeping;
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
