//! The `/metrics` endpoint (the `prometheus` feature): the Prometheus recorder,
//! installed once per process, a small HTTP/1.1 responder that renders it, and the
//! task that refreshes it from [`Broker::stats`]. How and why is in the parent
//! module's documentation.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use super::{describe, names, record, PAGE_ROW_BUCKETS};
use crate::{Broker, Error};

/// How often the refresh task copies [`Broker::stats`] into the metrics.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// Scrapes answered at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 16;
/// Largest request head read, bytes; a longer one gets 431.
const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// Time one connection may take from accept to the end of the answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

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
}
