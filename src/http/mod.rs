//! The HTTP server (the `http` feature, part of `cli`): one axum server that answers
//! for operators, load balancers and browsers.
//!
//! | route | what | login |
//! |---|---|---|
//! | `GET /metrics` | Prometheus text ([`crate::metrics`]) | none |
//! | `GET /healthz` | the process is up: always `200 {"status":"alive"}` | none |
//! | `GET /readyz` | ready to serve: the broker is not shut down, its STOMP listeners are up ([`Readiness`]) and the store answers within [`READY_STORE_TIMEOUT`]; `200` or `503`, with each check | none |
//! | `/api/v1/...` | the JSON admin API ([`api`]) | a configured user; changes need the admin group |
//! | `GET /console` (and `/`) | the web console ([`CONSOLE_HTML`], charts drawn with [`UPLOT_JS`] at `/console/uplot.js`): overview with charts of the broker's rates, depth and memory ([`crate::history`]) and a sorted, filtered, paged destination table with depth sparklines refreshing every 2 s, a destination's charts, a destination's counters, durable subscriptions and paged message browser, purge, DLQ retry, remove subscription, the connections page; every button asks for a confirmation | as the API |
//! | `GET /stomp` | STOMP over WebSocket (`v12.stomp`, `v11.stomp`, `v10.stomp` subprotocols, [`ws`]) | STOMP's own CONNECT |
//!
//! **Who may call.** Without users in the configuration anyone who reaches the server
//! may call everything, so `ebb serve` refuses a non-loopback address then (as for
//! STOMP) unless `--allow-anonymous`. With users, the admin API wants HTTP Basic
//! credentials of one of them ([`login`]); a call that changes something (send,
//! remove a subscription) wants a user in [`HttpOptions::admin_group`] (`admin`).
//! A refused login waits [`crate::auth::FAILED_LOGIN_DELAY`] before its `401`.
//!
//! **Slots.** At most [`HttpOptions::max_connections`] connections are served at
//! once ([`HttpOptions::max_connections_per_address`] from one address); beyond
//! them, [`HEALTH_CONNECTIONS`] more are kept for `/healthz` and `/readyz`, so that
//! slow clients holding every slot do not make the health probes fail.
//!
//! **Other sites' pages** cannot use the operator's browser against the server: a
//! change from another `Origin` is refused, a POST must carry JSON, and without users
//! a WebSocket from another origin is refused (`same_origin`; `[http]
//! allowed_origins` lists exceptions).
//!
//! **Errors** are JSON, `{"error": "...", "code": "...", "status": N}` (`code`: a stable [`crate::ErrorCode`]), with a 4xx status for the
//! caller's mistakes (unknown destination or route, bad cursor, bad JSON, body over
//! [`HttpOptions::max_body_bytes`]) and `503` when the store cannot be reached or the
//! broker is shutting down; never a `500` for bad input.
//!
//! **Where it runs.** The server runs on the tokio runtime it is started on (axum
//! spawns a task per connection); the broker's calls work from there as from any
//! runtime ([`crate::runtime`]). A WebSocket's STOMP session is handed to the broker's
//! actix system ([`Broker`]'s arbiter), where every STOMP connection runs.

pub mod api;
pub mod error;
pub mod login;
pub mod ws;

/// The web console: one static page over the admin API (no build step, nothing
/// fetched from elsewhere), served at `/console`.
pub const CONSOLE_HTML: &str = include_str!("console.html");

/// The chart library the console draws with: uPlot 1.6.32 (MIT, `vendor/uplot/`
/// with its license), served at `/console/uplot.js`.
pub const UPLOT_JS: &str = include_str!("vendor/uplot/uPlot.iife.min.js");

/// uPlot's stylesheet, served at `/console/uplot.css`.
pub const UPLOT_CSS: &str = include_str!("vendor/uplot/uPlot.min.css");

/// A static file of the console (no login: it is a public library), cached a day.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (axum::http::header::CONTENT_TYPE, content_type),
            (axum::http::header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        body,
    )
        .into_response()
}

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;

use crate::auth::Security;
use crate::stomp::connection::ConnectionConfig;
use crate::transport::connections::Connections;
use crate::{Broker, Error};

/// How long `/readyz` waits for the store's answer before it reports not ready.
pub const READY_STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// Default of [`HttpOptions::admin_group`].
pub const ADMIN_GROUP: &str = "admin";

/// Default of [`HttpOptions::max_body_bytes`]: 4 MiB.
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// Default of [`HttpOptions::max_connections`].
pub const MAX_HTTP_CONNECTIONS: usize = 1024;

/// Default of [`HttpOptions::max_connections_per_address`].
pub const MAX_HTTP_CONNECTIONS_PER_ADDRESS: usize = 64;

/// A connection that sends no whole request head for this long, also between the
/// requests of a kept-alive connection, is closed (hyper's `header_read_timeout`).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections kept for health probes (`GET /healthz`, `GET /readyz`) beyond
/// [`HttpOptions::max_connections`]: when every other slot is taken (by slow
/// clients, say), a new connection takes one of these, and once its request head is
/// read it is answered only if it asks for `/healthz` or `/readyz`; anything else
/// gets `503` and the connection is closed after one request. So a flood that holds
/// every slot (1,024 trickling bodies held for [`BODY_READ_TIMEOUT`]) does not make
/// an orchestrator's liveness probe fail and kill a healthy broker.
pub const HEALTH_CONNECTIONS: usize = 32;

/// Most of the [`HEALTH_CONNECTIONS`] one IP address may hold at once (an
/// orchestrator probes liveness and readiness from one address).
pub const HEALTH_CONNECTIONS_PER_ADDRESS: usize = 4;

/// A connection on one of the [`HEALTH_CONNECTIONS`] must send its whole request
/// head within this long (a probe sends it at once): one that trickles its head is
/// closed sooner than on an ordinary slot, so slow heads hold the reserve briefly.
pub const HEALTH_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The paths a connection on one of the [`HEALTH_CONNECTIONS`] is answered for.
pub const HEALTH_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// A request's whole body must arrive within this long after its head (default of
/// [`HttpOptions::body_read_timeout`]): a body that trickles in (1 byte every few
/// seconds) gets `408` and the connection is closed, so slow clients cannot hold
/// every connection slot and starve `/healthz` and `/metrics`.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether the broker's listeners are up, for `/readyz`: `ebb serve` sets it once its
/// STOMP listener accepts and clears it when shutdown begins. Clones share the flag.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the listeners up (`true`) or down.
    pub fn set_listening(&self, up: bool) {
        self.0.store(up, Ordering::Release);
    }

    /// Whether the listeners are up.
    pub fn listening(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// How the HTTP server is set up.
#[derive(Clone)]
pub struct HttpOptions {
    /// Address to listen on; port 0 picks a free one ([`HttpServer::local_addr`]).
    pub listen: SocketAddr,
    /// Users and rights: with users, the admin API wants one of them.
    pub security: Arc<Security>,
    /// The group whose users may change things through the admin API (default
    /// [`ADMIN_GROUP`]).
    pub admin_group: String,
    /// STOMP over WebSocket at `/stomp`, with these connection settings (share the
    /// TCP listener's, so the connection limits count both); `None`: no `/stomp`.
    pub stomp: Option<ConnectionConfig>,
    /// MQTT over WebSocket at `/mqtt` (subprotocol `mqtt`), with these settings
    /// (share the MQTT listener's); `None`: no `/mqtt`.
    pub mqtt: Option<crate::mqtt::MqttConfig>,
    /// The STOMP connections the admin API lists and closes (the TCP listener's
    /// [`ConnectionConfig::connections`]; WebSocket ones register in the registry of
    /// `stomp`, normally the same).
    pub connections: Connections,
    /// The listeners' flag `/readyz` reports.
    pub readiness: Readiness,
    /// Origins (`https://app.example:8443`) of other sites whose pages may call the
    /// API's changes and open STOMP WebSockets without users configured (see
    /// `same_origin`); default none. `[http] allowed_origins`.
    pub allowed_origins: Vec<String>,
    /// Host names served besides IP addresses, `localhost` (and `*.localhost`) and
    /// this machine's name (`/proc/sys/kernel/hostname`): each a name, `.example`
    /// for a name and every name under it, or `*` for any. Checked against every
    /// request's `Host` (WebSocket upgrades included): another name gets `403`, which
    /// keeps out pages whose name was made to resolve to this server (DNS
    /// rebinding). Default none; `[http] allowed_hosts`.
    pub allowed_hosts: Vec<String>,
    /// Largest request body accepted, bytes (a message sent through the API); a
    /// larger one gets `413`. Default [`MAX_BODY_BYTES`].
    pub max_body_bytes: usize,
    /// Most HTTP connections served at once (WebSockets included); beyond it, a
    /// connection gets one of the [`HEALTH_CONNECTIONS`] (health probes only), or is
    /// closed at once when those are taken too. Default [`MAX_HTTP_CONNECTIONS`];
    /// `[http] max_connections`.
    pub max_connections: usize,
    /// Most HTTP connections from one IP address at once. Default
    /// [`MAX_HTTP_CONNECTIONS_PER_ADDRESS`]; `[http] max_connections_per_address`.
    pub max_connections_per_address: usize,
    /// How long a request's whole body may take to arrive after its head; `408`
    /// after that. Default [`BODY_READ_TIMEOUT`].
    pub body_read_timeout: Duration,
    /// Serve `https` and `wss` with this acceptor instead of plain HTTP (the `tls`
    /// feature; [`crate::tls::TlsFiles::acceptor`] with ALPN `http/1.1`).
    #[cfg(feature = "tls")]
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Most destinations with series in `/metrics` (named ones first, then temporary
    /// ones); the rest are counted in `ebb_destination_series_omitted` and in the
    /// broker's totals. Default [`crate::metrics::MAX_DESTINATION_SERIES`] (10,000);
    /// `[http] max_destination_series`.
    pub max_destination_series: usize,
    /// The time between two points of the rates and depths the console charts
    /// ([`crate::history`]); default [`crate::history::DEFAULT_STEP`] (5 s).
    pub history_step: Duration,
}

impl HttpOptions {
    /// Options for `listen` with every other setting at its default: no users, no
    /// `/stomp`, listeners reported up.
    pub fn new(listen: SocketAddr) -> Self {
        let readiness = Readiness::default();
        readiness.set_listening(true);
        Self {
            listen,
            security: Arc::default(),
            admin_group: ADMIN_GROUP.to_string(),
            stomp: None,
            mqtt: None,
            connections: Connections::default(),
            readiness,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_body_bytes: MAX_BODY_BYTES,
            max_connections: MAX_HTTP_CONNECTIONS,
            max_connections_per_address: MAX_HTTP_CONNECTIONS_PER_ADDRESS,
            body_read_timeout: BODY_READ_TIMEOUT,
            #[cfg(feature = "tls")]
            tls: None,
            history_step: crate::history::DEFAULT_STEP,
            max_destination_series: crate::metrics::MAX_DESTINATION_SERIES,
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub broker: Broker,
    pub options: Arc<HttpOptions>,
    pub metrics: PrometheusHandle,
    /// The per-destination series of the last reading, rendered at each scrape.
    pub series: crate::metrics::DestinationSeries,
    pub logins: Arc<login::LoginCache>,
    /// Rates and depths over time, fed by the metrics refresh task.
    pub history: Arc<crate::history::History>,
}

/// A running HTTP server and its metrics refresh task. Stop it with
/// [`HttpServer::stop`] before the broker shuts down.
pub struct HttpServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl HttpServer {
    /// Installs the Prometheus recorder (once per process), binds `options.listen` and
    /// starts serving, with the metrics refreshed from `broker` every
    /// [`crate::metrics::REFRESH_EVERY`]. Call it within a tokio runtime. Logs one line
    /// saying where it serves.
    ///
    /// Errors: [`Error::Http`] when the address cannot be bound, [`Error::Metrics`]
    /// when another metrics recorder is installed in the process.
    pub async fn start(options: HttpOptions, broker: Broker) -> Result<Self, Error> {
        let metrics = crate::metrics::install_recorder()?;
        let (listener, addr) = bind(options.listen).await?;
        let body_limit = options.max_body_bytes;
        let limits = (options.max_connections, options.max_connections_per_address);
        #[cfg(feature = "tls")]
        let tls = options.tls.clone();
        let logins = Arc::new(login::LoginCache::default());
        let history = Arc::new(crate::history::History::new(options.history_step));
        let connections = options.connections.clone();
        let series = crate::metrics::DestinationSeries::new(options.max_destination_series);
        let state = AppState {
            broker: broker.clone(),
            options: Arc::new(options),
            metrics: metrics.clone(),
            series: series.clone(),
            logins,
            history: history.clone(),
        };
        let app = router(state, body_limit);
        let (stop, stop_rx) = watch::channel(false);
        // The first scrape, even one made the moment the address is logged, finds
        // the broker's values (the loop then refreshes them; a failure here is its
        // to report).
        let _ = crate::metrics::refresh(&broker, &history, &connections).await;
        series.follow(broker.clone());
        let refresh = tokio::spawn(crate::metrics::refresh_loop(
            broker,
            metrics,
            series,
            history.clone(),
            connections,
            stop_rx.clone(),
        ));
        #[cfg(feature = "tls")]
        let scheme = if tls.is_some() { "https" } else { "http" };
        #[cfg(not(feature = "tls"))]
        let scheme = "http";
        let accept = tokio::spawn(serve_http(
            listener,
            #[cfg(feature = "tls")]
            tls,
            app,
            limits,
            stop_rx,
        ));
        tracing::info!(http = %addr, "HTTP on {scheme}://{addr} (/metrics, /healthz, /readyz, /api/v1, /console, /stomp)");
        Ok(Self {
            addr,
            stop,
            tasks: vec![accept, refresh],
        })
    }

    /// The server of a standby (`ebb serve --standby` while another broker holds the
    /// store), on `options.listen` (with its TLS): `/healthz` says alive, `/readyz`
    /// answers `503` with `"status": "standby"` and who holds the store (from
    /// `waiting`, as [`Broker::start_when_free`] keeps it), `/metrics` has
    /// `ebb_ha_role{role="standby"} 1`, every other route `503` with the same reason. No admin API, console or STOMP: the standby serves
    /// nothing until it is active. Stop it ([`HttpServer::stop`]) before starting the
    /// active broker's server on the same address.
    ///
    /// Errors: [`Error::Http`] when the address cannot be bound, [`Error::Metrics`]
    /// when another metrics recorder is installed in the process.
    pub async fn start_standby(
        options: &HttpOptions,
        waiting: watch::Receiver<Option<String>>,
    ) -> Result<Self, Error> {
        let (listener, addr) = bind(options.listen).await?;
        let metrics = crate::metrics::install_recorder()?;
        crate::metrics::record_ha_role(false);
        let standby = move || {
            let held = waiting.borrow().clone();
            let why = match held {
                Some(by) => format!("standby: another broker holds the store ({by})"),
                None => "standby: waiting for the store".to_string(),
            };
            let body = serde_json::json!({
                "status": "standby",
                "checks": { "broker": why },
                "error": why,
            });
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        };
        let readyz = standby.clone();
        let app = Router::new()
            .route(
                "/healthz",
                get(|| async { Json(serde_json::json!({ "status": "alive", "role": "standby" })) }),
            )
            .route("/readyz", get(move || async move { readyz() }))
            .route(
                "/metrics",
                get(move || async move {
                    let content_type = "text/plain; version=0.0.4; charset=utf-8";
                    (
                        [(axum::http::header::CONTENT_TYPE, content_type)],
                        metrics.render(),
                    )
                }),
            )
            .fallback(move || async move { standby() });
        let (stop, stop_rx) = watch::channel(false);
        let limits = (options.max_connections, options.max_connections_per_address);
        let accept = tokio::spawn(serve_http(
            listener,
            #[cfg(feature = "tls")]
            options.tls.clone(),
            app,
            limits,
            stop_rx,
        ));
        tracing::info!(http = %addr, "HTTP on {addr} for a standby (/healthz, /readyz, /metrics)");
        Ok(Self {
            addr,
            stop,
            tasks: vec![accept],
        })
    }

    /// The address it listens on (with the port picked when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets requests in progress finish, stops the refresh task, and
    /// returns when both have ended. WebSocket sessions end with the broker's
    /// shutdown, as TCP ones do.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// A listener on `listen`, and the address it got. Errors: [`Error::Http`] naming
/// the address.
async fn bind(listen: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), Error> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Error::Http(format!("cannot listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Http(e.to_string()))?;
    Ok((listener, addr))
}

/// Accepts connections until `stop` and serves each with `app` (HTTP/1.1, with
/// upgrades for WebSocket), at most `limits` = (in all, per address) at once, each
/// closed when it sends no whole request head for [`HEADER_READ_TIMEOUT`]; with
/// `tls`, after a handshake that must end within [`crate::tls::HANDSHAKE_TIMEOUT`].
/// Beyond the limits, a connection takes one of the [`HEALTH_CONNECTIONS`] (at most
/// [`HEALTH_CONNECTIONS_PER_ADDRESS`] from one address): one request, answered only
/// at [`HEALTH_PATHS`]; past those too, it is closed at once.
async fn serve_http(
    listener: tokio::net::TcpListener,
    #[cfg(feature = "tls")] tls: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    limits: (usize, usize),
    mut stop: watch::Receiver<bool>,
) {
    let slots = crate::transport::caps::Slots::default();
    // The health probes' reserve: counted apart, so the other slots never use it.
    let reserve = crate::transport::caps::Slots::default();
    let probes = app
        .clone()
        .layer(axum::middleware::from_fn(health_probes_only));
    let (mut last_logged, mut unlogged) = (None::<std::time::Instant>, 0u64);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors and the like: wait a little, do not spin.
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = until_stopped(&mut stop) => return,
        };
        let (slot, probe) = match slots.take_within(peer.ip(), limits.0, limits.1) {
            Ok(slot) => (slot, false),
            Err(refusal) => {
                let kept = reserve.take_within(
                    peer.ip(),
                    HEALTH_CONNECTIONS,
                    HEALTH_CONNECTIONS_PER_ADDRESS,
                );
                if last_logged.is_none_or(|at: std::time::Instant| at.elapsed().as_secs() >= 1) {
                    match &kept {
                        Ok(_) => tracing::warn!(%peer, not_logged = unlogged,
                            "HTTP connection served for health probes only: {refusal}"),
                        Err(_) => tracing::warn!(%peer, not_logged = unlogged,
                            "refused HTTP connection: {refusal}, and the health probes' {HEALTH_CONNECTIONS} are taken"),
                    }
                    (last_logged, unlogged) = (Some(std::time::Instant::now()), 0);
                } else {
                    unlogged += 1;
                }
                match kept {
                    Ok(slot) => (slot, true),
                    Err(_) => {
                        drop(stream);
                        continue;
                    }
                }
            }
        };
        let app = match probe {
            true => probes.clone(),
            false => app.clone(),
        };
        #[cfg(feature = "tls")]
        let tls = tls.clone();
        tokio::spawn(async move {
            let _slot = slot;
            #[cfg(feature = "tls")]
            if let Some(acceptor) = tls {
                let handshake = acceptor.accept(stream);
                match tokio::time::timeout(crate::tls::HANDSHAKE_TIMEOUT, handshake).await {
                    Ok(Ok(stream)) => {
                        let subject = crate::tls::certificate_subject(stream.get_ref().1);
                        serve_one(stream, peer, subject, app, probe).await
                    }
                    Ok(Err(e)) => tracing::info!(%peer, error = %e, "HTTPS: TLS handshake failed"),
                    Err(_) => tracing::info!(%peer, "HTTPS: TLS handshake timed out"),
                }
                return;
            }
            serve_one(stream, peer, None, app, probe).await;
        });
    }
}

/// Serves the requests of one connection from `peer` (its address reaches the
/// handlers as [`axum::extract::ConnectInfo`], the subject of its verified client
/// certificate, if any, as [`ws::ClientCertificate`]). A `probe` connection (one of
/// the [`HEALTH_CONNECTIONS`]) serves one request, and must send its head within
/// [`HEALTH_HEADER_READ_TIMEOUT`].
async fn serve_one<S>(
    stream: S,
    peer: SocketAddr,
    subject: Option<crate::auth::DistinguishedName>,
    app: Router,
    probe: bool,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    use tower::ServiceExt;
    // Counts what a STOMP WebSocket reads before its session answers (`ws`).
    let meter = Arc::new(ws::PreConnectMeter::default());
    let stream = ws::Metered {
        inner: stream,
        meter: Arc::clone(&meter),
    };
    let app = app.map_request(
        move |mut request: axum::http::Request<hyper::body::Incoming>| {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            request.extensions_mut().insert(Arc::clone(&meter));
            if let Some(subject) = &subject {
                request
                    .extensions_mut()
                    .insert(ws::ClientCertificate(subject.clone()));
            }
            request
        },
    );
    let service = hyper_util::service::TowerToHyperService::new(app);
    // hyper's own HTTP/1 server (not the auto-detecting one, which waits for the
    // first bytes before any timeout runs): the header-read timeout starts at once.
    let head_within = match probe {
        true => HEALTH_HEADER_READ_TIMEOUT,
        false => HEADER_READ_TIMEOUT,
    };
    let served = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(head_within)
        .keep_alive(!probe)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
    }
}

/// In front of the routes on a connection of the health probes' reserve
/// ([`HEALTH_CONNECTIONS`]): a request for one of [`HEALTH_PATHS`] goes on; any other
/// gets `503` (naming the cap, `Connection: close`) without reaching its route.
async fn health_probes_only(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if HEALTH_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let mut refused = error::ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the HTTP server serves its most connections ([http] max_connections or \
             max_connections_per_address): only {} are answered now, on the connections \
             kept for health probes",
            HEALTH_PATHS.join(" and ")
        ),
    )
    .into_response();
    refused.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    refused
}

/// Returns once `stop` says stopped (or its sender is gone).
async fn until_stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// Every route, with the JSON answers for unknown routes and methods.
fn router(state: AppState, body_limit: usize) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/stomp", get(ws::upgrade))
        .route("/mqtt", get(ws::upgrade_mqtt))
        .route(
            "/",
            get(|| async { axum::response::Redirect::to("/console") }),
        )
        .route("/console", get(console))
        .route(
            "/console/uplot.js",
            get(|| async { asset("text/javascript; charset=utf-8", UPLOT_JS) }),
        )
        .route(
            "/console/uplot.css",
            get(|| async { asset("text/css; charset=utf-8", UPLOT_CSS) }),
        )
        .nest("/api/v1", api::routes(state.clone()))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            same_origin,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            known_host,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// This machine's name, read once (Linux: `/proc/sys/kernel/hostname`); empty when
/// it cannot be read.
fn machine_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|n| n.trim().to_ascii_lowercase())
            .unwrap_or_default()
    })
}

/// Whether a request whose `Host` is `host` (`name[:port]`, `[v6]:port`) is for
/// this server: an IP address (a name cannot be rebound to it), `localhost` or a
/// name under it, this machine's name, or one of `allowed` ([`HttpOptions::allowed_hosts`]).
pub(crate) fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        },
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name.parse::<std::net::IpAddr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
        || (!machine_name().is_empty() && name == machine_name())
    {
        return true;
    }
    allowed.iter().any(|a| {
        let a = a.to_ascii_lowercase();
        a == "*"
            || a == name
            || a.strip_prefix('.')
                .is_some_and(|domain| name == domain || name.ends_with(&format!(".{domain}")))
    })
}

/// Reads a request's body whole within [`HttpOptions::body_read_timeout`] (and at
/// most `max_body_bytes`) before its handler runs, after the login check (a wrong
/// password is answered without reading the body): `408` when it does not arrive in
/// time, `413` when it is larger. A request without a body (GET, a WebSocket
/// upgrade) goes straight on.
pub(crate) async fn body_deadline(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::http::Method;
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let limit = state.options.max_body_bytes;
    let timeout = state.options.body_read_timeout;
    let bytes = match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => {
            return error::ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                "cannot read the body: it is larger than {limit} bytes ([stomp] max_frame_size)"
            ),
            )
            .into_response()
        }
        Err(_) => {
            let mut refused = error::ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the body did not arrive within {} s of the request's head",
                    timeout.as_secs_f64()
                ),
            )
            .into_response();
            refused.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            return refused;
        }
    };
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

/// Refuses a request for a host name this server does not answer to
/// ([`host_allowed`]): `403`, on every route, before anything else is read. A
/// request without `Host` (HTTP/1.0, no browser) passes.
async fn known_host(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = request
        .headers()
        .get(axum::http::header::HOST)
        .map(|v| v.to_str().unwrap_or("\u{fffd}").to_string());
    match host {
        Some(host) if !host_allowed(&host, &state.options.allowed_hosts) => error::ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "host `{host}` is not served here: use an IP address, localhost, this \
                     machine's name, or add it to [http] allowed_hosts"
            ),
        )
        .into_response(),
        _ => next.run(request).await,
    }
}

/// Refuses what a web page of another site could make a browser send here (the
/// operator's browser has the console's credentials, or no users are configured):
/// - a change (any method but GET and HEAD) whose `Origin` is not this server, or a
///   POST without `Content-Type: application/json` (a plain HTML form cannot send
///   one, and a script of another site cannot without a CORS preflight, which this
///   server does not grant): `403` / `415`;
/// - a WebSocket upgrade at `/stomp` from another origin, unless users are
///   configured (CONNECT then needs a login) or the origin is in
///   [`HttpOptions::allowed_origins`]: `403`.
///
/// Clients that are not browsers send no `Origin` and are not affected.
async fn same_origin(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::http::{header, Method};
    let headers = request.headers();
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    // `scheme://host[:port]` against the Host the request was sent to.
    let same = |origin: &str| {
        origin
            .split_once("://")
            .is_some_and(|(_, authority)| Some(authority) == host)
    };
    let allowed = |origin: &str| state.options.allowed_origins.iter().any(|o| o == origin);
    let method = request.method().clone();
    if request.uri().path() == "/stomp" {
        if let Some(origin) = origin {
            if !same(origin) && !allowed(origin) && !state.options.security.requires_login() {
                return error::ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "WebSocket from {origin} refused: no users are configured, so only pages of \
                         this server or of [http] allowed_origins may open STOMP sessions"
                    ),
                )
                .into_response();
            }
        }
        return next.run(request).await;
    }
    if method != Method::GET && method != Method::HEAD {
        if let Some(origin) = origin {
            if !same(origin) && !allowed(origin) {
                return error::ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!("cross-origin {method} from {origin} refused"),
                )
                .into_response();
            }
        }
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if method == Method::POST && !json {
            return error::ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "a POST needs Content-Type: application/json (with a body of {} when there is nothing to say)",
            )
            .into_response();
        }
    }
    next.run(request).await
}

async fn metrics(State(state): State<AppState>) -> Response {
    let mut text = state.metrics.render();
    state.series.render(&mut text);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// `GET /console`: the page; with users it asks for a login first, so the browser
/// keeps the credentials for the page's calls to the API.
async fn console(
    State(state): State<AppState>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    headers: axum::http::HeaderMap,
) -> Response {
    match login::caller(&state, &headers, Some(peer.ip())).await {
        Ok(_) => (
            [
                (axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (axum::http::header::CACHE_CONTROL, "no-cache"),
            ],
            CONSOLE_HTML,
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "alive" }))
}

async fn readyz(State(state): State<AppState>) -> Response {
    // Each check: whether it passes, and what it says.
    let broker = match state.broker.is_shut_down() {
        true => (false, "shut down".to_string()),
        false => (true, "running".to_string()),
    };
    let listeners = match state.options.readiness.listening() {
        true => (true, "up".to_string()),
        false => (false, "down".to_string()),
    };
    let store = match tokio::time::timeout(READY_STORE_TIMEOUT, state.broker.ping_store()).await {
        Ok(Ok(())) => (true, "ok".to_string()),
        Ok(Err(e)) => (false, e.to_string()),
        Err(_) => (
            false,
            format!("no answer within {} ms", READY_STORE_TIMEOUT.as_millis()),
        ),
    };
    // Whether this broker still holds the store's lock (or lease, with `[ha]`).
    let lock = match state.broker.lease_state() {
        None => (true, "held".to_string()),
        Some(lock) => match &*lock.borrow() {
            crate::LeaseState::Held => (true, "held".to_string()),
            crate::LeaseState::Lost(why) => (false, format!("lost: {why}")),
        },
    };
    let ready = broker.0 && listeners.0 && store.0 && lock.0;
    let show = |check: (bool, String)| check.1;
    let body = serde_json::json!({
        "status": if ready { "ready" } else { "not ready" },
        "checks": {
            "broker": show(broker),
            "listeners": show(listeners),
            "store": show(store),
            "lock": show(lock),
        },
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> error::ApiError {
    error::ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} is not a method of {}: GET /api/v1 lists the routes",
            uri.path()
        ),
    )
}

async fn not_found(uri: axum::http::Uri) -> error::ApiError {
    error::ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no route {}: see /api/v1 for the admin API, /metrics, /healthz, /readyz, /stomp",
            uri.path()
        ),
    )
}

#[cfg(test)]
mod host_tests {
    use super::host_allowed;

    #[test]
    fn ip_addresses_localhost_and_listed_names_are_served() {
        let none: Vec<String> = Vec::new();
        for host in [
            "127.0.0.1:9404",
            "10.1.2.3",
            "[::1]:9404",
            "localhost:9404",
            "LOCALHOST",
            "app.localhost:80",
        ] {
            assert!(host_allowed(host, &none), "{host}");
        }
        for host in [
            "attacker.example",
            "attacker.example:9404",
            "127.0.0.1.nip.io",
            "localhost.attacker.example",
        ] {
            assert!(!host_allowed(host, &none), "{host}");
        }
        let listed = vec!["broker.internal".to_string(), ".corp.example".to_string()];
        assert!(host_allowed("broker.internal:9404", &listed));
        assert!(host_allowed("corp.example", &listed));
        assert!(host_allowed("a.b.corp.example:443", &listed));
        assert!(!host_allowed("evilcorp.example", &listed));
        assert!(host_allowed("anything.example", &["*".to_string()]));
    }
}
