//! The Prometheus metrics endpoint: `ebb serve --metrics ADDR` (or `[metrics] listen`
//! in the configuration file) serves `GET /metrics` in Prometheus' text format.
//!
//! **How it is built.** Metrics go through the `metrics` facade into the recorder of
//! `metrics-exporter-prometheus`, installed once per process ([`install_recorder`]:
//! the facade has one global recorder, so a second call hands back the same handle
//! instead of fighting over it). The exporter's own HTTP listener (hyper) is not used:
//! [`MetricsServer`] is a small HTTP/1.1 responder on a tokio listener that answers
//! each `GET /metrics` with [`PrometheusHandle::render`] and closes the connection,
//! with a bound on connections at once, on the request head's size and on the time a
//! request may take. That keeps the dependency tree small, runs on the broker's actix
//! system like the STOMP listener, and lets tests start any number of endpoints on
//! ephemeral ports in one process, all rendering the one recorder.
//!
//! **Where values come from.** Broker and destination values are copied from a
//! [`Broker::stats`] snapshot by a refresh task every [`REFRESH_EVERY`] (one second);
//! when a snapshot takes longer than that, the task waits as long as the snapshot took
//! before the next one, so it never keeps the store busy more than half the time. The
//! histogram `ebb_expiry_page_rows` is recorded by the topic actor itself when an
//! expiry page finishes, so it holds every page, not a sample.
//!
//! **Names** (Prometheus conventions: base units, `_total` for counters, usage as a
//! ratio from 0 to 1, never a percentage):
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `ebb_memory_usage_bytes`, `ebb_memory_limit_bytes`, `ebb_memory_usage_ratio` | gauge | | memory usage, its limit (0 = none), usage / limit (0 without a limit) |
//! | `ebb_store_usage_bytes`, `ebb_store_limit_bytes`, `ebb_store_usage_ratio` | gauge | | the same for the store |
//! | `ebb_temp_usage_bytes`, `ebb_temp_limit_bytes`, `ebb_temp_usage_ratio` | gauge | | the same for temporary storage |
//! | `ebb_producers_blocked` | gauge | | producers waiting for space |
//! | `ebb_destinations` | gauge | | running destinations (also those past the report's cap) |
//! | `ebb_destination_queue_size` | gauge | `destination` | messages pending plus in flight |
//! | `ebb_destination_in_flight` | gauge | `destination` | delivered, not acked |
//! | `ebb_destination_consumers`, `ebb_destination_producers` | gauge | `destination` | attached now |
//! | `ebb_destination_memory_usage_bytes`, `ebb_destination_producers_blocked` | gauge | `destination` | per destination usage |
//! | `ebb_destination_enqueued_total`, `ebb_destination_dequeued_total`, `ebb_destination_expired_total`, `ebb_destination_dead_lettered_total` | counter | `destination` | messages since start |
//! | `ebb_expiry_pages_total` | counter | `destination` | expiry pages finished |
//! | `ebb_expiry_page_rows` | histogram | `destination` | rows one expiry page loaded (buckets [`PAGE_ROW_BUCKETS`]); a page that failed is counted in `ebb_expiry_pages_total` only |
//!
//! The `destination` label is the store key (`topic://orders`). What each value means,
//! and which are not measured yet (0), is in [`crate::stats`]. Usage values are 0 until
//! producer flow control measures them.
//!
//! Left out: `ebb_housekeeping_lag_seconds`. The topics do not record when a tick or
//! page became due, and the housekeeping budget does not say how long pages wait for a
//! permit, so no honest lag can be derived from outside the actors yet.
//!
//! A destination's series stay for the life of the process (destinations are never
//! removed while the broker runs). The endpoint has no authentication and shows
//! destination names: keep it on loopback or a private network.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Label};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::stats::BrokerStats;
use crate::{Broker, Error};

/// The address `ebb stat` reads when none is given (the endpoint itself is off unless
/// asked for).
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9404";

/// How often the refresh task copies [`Broker::stats`] into the metrics.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// Upper bounds of the `ebb_expiry_page_rows` buckets, in rows (the default page is
/// 400 rows).
pub const PAGE_ROW_BUCKETS: &[f64] = &[0.0, 1.0, 10.0, 50.0, 100.0, 200.0, 400.0, 1000.0, 5000.0];

/// Scrapes answered at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 16;
/// Largest request head read, bytes; a longer one gets 431.
const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// Time one connection may take from accept to the end of the answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Metric names, shared with `ebb stat`'s reader ([`crate::stat`]).
pub mod names {
    pub const MEMORY_USAGE_BYTES: &str = "ebb_memory_usage_bytes";
    pub const MEMORY_LIMIT_BYTES: &str = "ebb_memory_limit_bytes";
    pub const MEMORY_USAGE_RATIO: &str = "ebb_memory_usage_ratio";
    pub const STORE_USAGE_BYTES: &str = "ebb_store_usage_bytes";
    pub const STORE_LIMIT_BYTES: &str = "ebb_store_limit_bytes";
    pub const STORE_USAGE_RATIO: &str = "ebb_store_usage_ratio";
    pub const TEMP_USAGE_BYTES: &str = "ebb_temp_usage_bytes";
    pub const TEMP_LIMIT_BYTES: &str = "ebb_temp_limit_bytes";
    pub const TEMP_USAGE_RATIO: &str = "ebb_temp_usage_ratio";
    pub const PRODUCERS_BLOCKED: &str = "ebb_producers_blocked";
    pub const DESTINATIONS: &str = "ebb_destinations";
    pub const HOUSEKEEPING_LAG_SECONDS: &str = "ebb_housekeeping_lag_seconds";
    pub const HOUSEKEEPING_PAGES_WAITING: &str = "ebb_housekeeping_pages_waiting";
    pub const PROCESS_RESIDENT_BYTES: &str = "ebb_process_resident_memory_bytes";
    pub const PROCESS_PEAK_RESIDENT_BYTES: &str = "ebb_process_peak_resident_memory_bytes";
    pub const MAX_EXPIRY_PAGE_ROWS: &str = "ebb_destination_max_expiry_page_rows";
    pub const QUEUE_SIZE: &str = "ebb_destination_queue_size";
    pub const IN_FLIGHT: &str = "ebb_destination_in_flight";
    pub const CONSUMERS: &str = "ebb_destination_consumers";
    pub const PRODUCERS: &str = "ebb_destination_producers";
    pub const DESTINATION_MEMORY_BYTES: &str = "ebb_destination_memory_usage_bytes";
    pub const DESTINATION_PRODUCERS_BLOCKED: &str = "ebb_destination_producers_blocked";
    pub const ENQUEUED_TOTAL: &str = "ebb_destination_enqueued_total";
    pub const DEQUEUED_TOTAL: &str = "ebb_destination_dequeued_total";
    pub const EXPIRED_TOTAL: &str = "ebb_destination_expired_total";
    pub const DEAD_LETTERED_TOTAL: &str = "ebb_destination_dead_lettered_total";
    pub const EXPIRY_PAGES_TOTAL: &str = "ebb_expiry_pages_total";
    pub const EXPIRY_RUNS_TOTAL: &str = "ebb_expiry_runs_total";
    pub const EXPIRY_PAGE_ROWS: &str = "ebb_expiry_page_rows";
    /// The label every per-destination metric has: the store key.
    pub const DESTINATION_LABEL: &str = "destination";
}

/// `[metrics]` in `ebb serve`'s configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    /// `host:port` to serve `/metrics` on; without it there is no endpoint.
    /// `ebb serve --metrics` overrides it.
    pub listen: Option<String>,
}

static HANDLE: Mutex<Option<PrometheusHandle>> = Mutex::new(None);

/// Installs the Prometheus recorder as the process's `metrics` recorder, once, and
/// returns a handle that renders it; later calls return the same handle.
///
/// Errors: [`Error::Metrics`] when another `metrics` recorder was installed first (an
/// application embedding Ebb with its own exporter: Ebb's metrics then go to that one,
/// and this endpoint cannot serve them).
pub fn install_recorder() -> Result<PrometheusHandle, Error> {
    let mut slot = HANDLE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(handle) = slot.as_ref() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(names::EXPIRY_PAGE_ROWS.into()),
            PAGE_ROW_BUCKETS,
        )
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| Error::Metrics(format!("cannot install the Prometheus recorder: {e}")))?;
    describe();
    *slot = Some(handle.clone());
    Ok(handle)
}

/// `# HELP` lines, with units.
fn describe() {
    use ::metrics::Unit;
    use names::*;
    for (name, what) in [
        (MEMORY_USAGE_BYTES, "Bytes of messages held in memory"),
        (MEMORY_LIMIT_BYTES, "Memory limit in bytes (0 = none)"),
        (STORE_USAGE_BYTES, "Bytes the store's messages take"),
        (STORE_LIMIT_BYTES, "Store limit in bytes (0 = none)"),
        (TEMP_USAGE_BYTES, "Bytes in temporary storage"),
        (
            TEMP_LIMIT_BYTES,
            "Temporary storage limit in bytes (0 = none)",
        ),
        (
            DESTINATION_MEMORY_BYTES,
            "Bytes of messages a destination holds in memory",
        ),
        (
            PROCESS_RESIDENT_BYTES,
            "The broker process's resident memory",
        ),
        (
            PROCESS_PEAK_RESIDENT_BYTES,
            "The broker process's peak resident memory",
        ),
    ] {
        describe_gauge!(name, Unit::Bytes, what);
    }
    for (name, what) in [
        (
            MEMORY_USAGE_RATIO,
            "Memory usage / limit, 0..1 (0 without a limit)",
        ),
        (
            STORE_USAGE_RATIO,
            "Store usage / limit, 0..1 (0 without a limit)",
        ),
        (
            TEMP_USAGE_RATIO,
            "Temp usage / limit, 0..1 (0 without a limit)",
        ),
    ] {
        describe_gauge!(name, what);
    }
    for (name, what) in [
        (
            PRODUCERS_BLOCKED,
            "Producers waiting for space (flow control)",
        ),
        (DESTINATIONS, "Running destinations"),
        (
            HOUSEKEEPING_LAG_SECONDS,
            "How long the expiry page waiting longest for a housekeeping permit has waited, seconds",
        ),
        (
            HOUSEKEEPING_PAGES_WAITING,
            "Expiry pages waiting for a housekeeping permit",
        ),
        (QUEUE_SIZE, "Messages pending plus in flight"),
        (IN_FLIGHT, "Deliveries not acked yet"),
        (CONSUMERS, "Consumers attached"),
        (
            MAX_EXPIRY_PAGE_ROWS,
            "Most rows one expiry page of a destination handled since start",
        ),
        (PRODUCERS, "Producers sending"),
        (
            DESTINATION_PRODUCERS_BLOCKED,
            "Producers of a destination waiting for space",
        ),
    ] {
        describe_gauge!(name, what);
    }
    for (name, what) in [
        (ENQUEUED_TOTAL, "Messages accepted since start"),
        (
            DEQUEUED_TOTAL,
            "Deliveries handed to consumers since start (topics: not acks)",
        ),
        (EXPIRED_TOTAL, "Message expirations since start"),
        (DEAD_LETTERED_TOTAL, "Messages sent to a dead-letter queue"),
        (EXPIRY_PAGES_TOTAL, "Expiry pages finished since start"),
        (
            EXPIRY_RUNS_TOTAL,
            "Expiry runs (chains of pages) started since start",
        ),
    ] {
        describe_counter!(name, what);
    }
    describe_histogram!(EXPIRY_PAGE_ROWS, "Rows one expiry page loaded");
}

/// usage / limit, 0..1; 0 without a limit.
fn ratio(used: u64, limit: u64) -> f64 {
    crate::stats::percent(used, limit) / 100.0
}

/// Copies a snapshot into the installed recorder: gauges are set, counters are raised
/// to the snapshot's totals (a counter never goes down). Does nothing without an
/// installed recorder.
pub fn record(stats: &BrokerStats) {
    use names::*;
    let u = &stats.usage;
    for (name, value) in [
        (MEMORY_USAGE_BYTES, u.memory_bytes as f64),
        (MEMORY_LIMIT_BYTES, u.memory_limit_bytes as f64),
        (
            MEMORY_USAGE_RATIO,
            ratio(u.memory_bytes, u.memory_limit_bytes),
        ),
        (STORE_USAGE_BYTES, u.store_bytes as f64),
        (STORE_LIMIT_BYTES, u.store_limit_bytes as f64),
        (STORE_USAGE_RATIO, ratio(u.store_bytes, u.store_limit_bytes)),
        (TEMP_USAGE_BYTES, u.temp_bytes as f64),
        (TEMP_LIMIT_BYTES, u.temp_limit_bytes as f64),
        (TEMP_USAGE_RATIO, ratio(u.temp_bytes, u.temp_limit_bytes)),
        (PRODUCERS_BLOCKED, u.blocked_producers as f64),
        (DESTINATIONS, stats.destinations_total as f64),
        (PROCESS_RESIDENT_BYTES, u.process_resident_bytes as f64),
        (
            HOUSEKEEPING_LAG_SECONDS,
            u.housekeeping_lag_ms as f64 / 1000.0,
        ),
        (
            HOUSEKEEPING_PAGES_WAITING,
            u.housekeeping_pages_waiting as f64,
        ),
        (
            PROCESS_PEAK_RESIDENT_BYTES,
            u.process_peak_resident_bytes as f64,
        ),
    ] {
        gauge!(name).set(value);
    }
    for d in &stats.destinations {
        let labels = [Label::new(DESTINATION_LABEL, d.destination.clone())];
        for (name, value) in [
            (QUEUE_SIZE, d.queue_size),
            (IN_FLIGHT, d.in_flight),
            (CONSUMERS, d.consumers),
            (PRODUCERS, d.producers),
            (DESTINATION_MEMORY_BYTES, d.memory_bytes),
            (DESTINATION_PRODUCERS_BLOCKED, d.blocked_producers),
            (MAX_EXPIRY_PAGE_ROWS, d.max_expiry_page_rows),
        ] {
            gauge!(name, labels.iter()).set(value as f64);
        }
        for (name, value) in [
            (ENQUEUED_TOTAL, d.enqueued_total),
            (DEQUEUED_TOTAL, d.dequeued_total),
            (EXPIRED_TOTAL, d.expired_total),
            (DEAD_LETTERED_TOTAL, d.dead_lettered_total),
            (EXPIRY_PAGES_TOTAL, d.expiry_pages_total),
            (EXPIRY_RUNS_TOTAL, d.expiry_runs_total),
        ] {
            counter!(name, labels.iter()).absolute(value);
        }
    }
}

/// A running metrics endpoint: the HTTP responder and the refresh task. Stop it with
/// [`MetricsServer::stop`] before the broker shuts down.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<actix_rt::task::JoinHandle<()>>,
}

impl MetricsServer {
    /// Installs the recorder (once per process), binds `addr` (port 0 picks a free
    /// one), and starts serving `GET /metrics` and refreshing from `broker` every
    /// [`REFRESH_EVERY`]. Call it on the broker's actix system. Logs one line saying
    /// where metrics are served.
    ///
    /// Errors: [`Error::Metrics`] when `addr` cannot be bound or the recorder cannot be
    /// installed ([`install_recorder`]).
    pub async fn start(addr: SocketAddr, broker: Broker) -> Result<Self, Error> {
        let handle = install_recorder()?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| Error::Metrics(format!("cannot listen on {addr}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Metrics(e.to_string()))?;
        let (stop, stop_rx) = watch::channel(false);
        let tasks = vec![
            actix_rt::spawn(serve_http(listener, handle.clone(), stop_rx.clone())),
            actix_rt::spawn(refresh_loop(broker, handle, stop_rx)),
        ];
        tracing::info!(metrics = %addr, "Prometheus metrics at http://{addr}/metrics");
        if !addr.ip().is_loopback() {
            tracing::warn!(metrics = %addr, "the metrics endpoint has no authentication and shows destination names");
        }
        Ok(Self { addr, stop, tasks })
    }

    /// The address it listens on (with the port picked when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening and refreshing; returns when both tasks have ended (scrapes
    /// being answered are cut off).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Refreshes the metrics from the broker until `stop`; see the module documentation.
async fn refresh_loop(broker: Broker, handle: PrometheusHandle, mut stop: watch::Receiver<bool>) {
    let mut failing = false;
    while !*stop.borrow() {
        let started = Instant::now();
        match broker.stats().await {
            Ok(stats) => {
                record(&stats);
                if failing {
                    tracing::info!("metrics refresh works again");
                    failing = false;
                }
            }
            Err(e) if !failing => {
                tracing::warn!(error = %e, "metrics refresh failed; the last values stay until it works again");
                failing = true;
            }
            Err(_) => {}
        }
        // Drains histogram samples into their buckets (the recorder leaves it to us).
        handle.run_upkeep();
        let wait = REFRESH_EVERY.max(started.elapsed());
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            changed = stop.changed() => if changed.is_err() { break },
        }
    }
}

/// Accepts scrapes until `stop`, at most [`MAX_CONNECTIONS`] at once.
async fn serve_http(
    listener: TcpListener,
    handle: PrometheusHandle,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    while !*stop.borrow() {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = stop.changed() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors and the like: wait a little, do not spin.
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let handle = handle.clone();
        actix_rt::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &handle)).await;
        });
    }
}

/// Reads one request head and writes the answer; the connection is then closed.
async fn answer(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let response = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&head) {
            break response_for(&head[..end], || handle.render());
        }
        if head.len() > MAX_REQUEST_HEAD {
            break http_response(
                "431 Request Header Fields Too Large",
                "text/plain",
                "request head too large\n",
                true,
            );
        }
    };
    stream.write_all(&response).await?;
    stream.shutdown().await
}

/// Where the request head ends (after its blank line), if it has.
fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
        .or_else(|| bytes.windows(2).position(|w| w == b"\n\n").map(|i| i + 2))
}

/// The whole HTTP answer to request `head`: `GET /metrics` (a query is ignored) gets
/// `render()`; `HEAD /metrics` its headers; other paths 404, other methods 405.
fn response_for(head: &[u8], render: impl FnOnce() -> String) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut parts = text.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => http_response(
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            &render(),
            method == "GET",
        ),
        ("GET" | "HEAD", _) => http_response(
            "404 Not Found",
            "text/plain",
            "ebb serves its metrics at /metrics\n",
            method == "GET",
        ),
        _ => http_response(
            "405 Method Not Allowed",
            "text/plain",
            "use GET /metrics\n",
            true,
        ),
    }
}

fn http_response(status: &str, content_type: &str, body: &str, with_body: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if with_body {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer_to(request: &str) -> String {
        let head = request.as_bytes();
        let end = head_end(head).expect("a whole head");
        String::from_utf8(response_for(&head[..end], || "ebb_x 1\n".into())).unwrap()
    }

    #[test]
    fn get_metrics_renders_and_others_do_not() {
        let ok = answer_to("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Content-Length: 8\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\nebb_x 1\n"), "{ok}");
        let query = answer_to("GET /metrics?x=1 HTTP/1.0\n\n");
        assert!(query.starts_with("HTTP/1.1 200 OK"), "{query}");
        let head = answer_to("HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.contains("Content-Length: 8\r\n") && head.ends_with("\r\n\r\n"));
        assert!(answer_to("GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(answer_to("POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(answer_to("\r\n\r\n").starts_with("HTTP/1.1 405"));
    }

    #[test]
    fn ratios_are_zero_without_a_limit() {
        assert_eq!(ratio(5, 0), 0.0);
        assert_eq!(ratio(1, 4), 0.25);
    }
}
