//! `ebb serve`: the broker and its STOMP listener, with STOMP over TLS and the HTTP
//! server (metrics, health, admin API, console, STOMP over WebSocket) when asked for,
//! until SIGINT or SIGTERM; then the graceful shutdown (a second signal exits at
//! once).
//!
//! Every setting comes from a flag, else the configuration file (`--config`,
//! [`crate::config`]), else a default; an error about a value names where it came
//! from.

use crate::{redact_url, StoreOptions};

use super::{DEFAULT_STOMP, DEFAULT_STORE};
use crate::config::{ByteSize, FileConfig, Listener};
use crate::stomp::connection::ConnectionConfig;

/// The `ebb serve` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Store URL: sqlite://PATH, sqlite::memory: or postgres://... [default: sqlite://ebb-data/ebb.db]
    #[arg(long, env = "EBB_STORE")]
    pub store: Option<String>,
    /// STOMP listen address [default: 127.0.0.1:61613]
    #[arg(long)]
    pub stomp: Option<String>,
    /// Also listen for STOMP over TLS on ADDR (ActiveMQ's stomp+ssl, usually port
    /// 61614), with the certificate of `[tls]`; also `[listeners.stomp_tls] listen`.
    #[arg(long, value_name = "ADDR")]
    pub stomp_ssl: Option<String>,
    /// Configuration file (TOML); flags override it.
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Listen on a non-loopback address although no users are configured (anyone
    /// who can reach the port can then send and subscribe). Not needed with users.
    #[arg(long)]
    pub allow_anonymous: bool,
    /// Serve HTTP on ADDR: /metrics, /healthz, /readyz, the admin API (/api/v1) and
    /// STOMP over WebSocket (/stomp). Off by default; also `[listeners.http] listen` in the
    /// configuration file.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// The same as --http (its older name, from when the server served only
    /// /metrics); also `[metrics] listen`.
    #[arg(long, value_name = "ADDR", conflicts_with = "http")]
    pub metrics: Option<String>,
    /// When another broker holds the store, wait as a standby (no STOMP listener;
    /// `/readyz` says standby) and take over once its lease expires or is released;
    /// the same as `[ha] mode = "shared-store"`. On PostgreSQL the store is then held
    /// by a lease (`[ha] lease_ms`, `renew_ms`).
    #[arg(long)]
    pub standby: bool,
}

/// Runs `ebb serve` until a signal and the shutdown that follows it.
///
/// Errors: a bad configuration file or address (naming the flag or key it came from),
/// a non-loopback address without users and without `--allow-anonymous`, a store that
/// cannot be opened, an address that cannot be bound.
pub async fn execute(args: ServeArgs) -> anyhow::Result<()> {
    let ServeArgs {
        store,
        stomp,
        stomp_ssl,
        config,
        allow_anonymous,
        http,
        metrics,
        standby,
    } = args;
    let file = match &config {
        Some(path) => FileConfig::load(path).map_err(anyhow::Error::msg)?,
        None => FileConfig::default(),
    };
    // Where a value came from, for errors: the flag, or the key in the file.
    let from_file = |key: &str| {
        config.as_ref().map_or(String::new(), |p| {
            format!(" (from {key} in {})", p.display())
        })
    };
    let (store_url, store_from) = match (store, &file.store.url) {
        (Some(url), _) => (url, " (from --store)".to_string()),
        (None, Some(url)) => (url.clone(), from_file("[store] url")),
        (None, None) => (DEFAULT_STORE.to_string(), String::new()),
    };
    let (listen, listen_from) = match (stomp, file.listen_address(Listener::Stomp)) {
        (Some(addr), _) => (addr, " (from --stomp)".to_string()),
        (None, Some((addr, key))) => (addr.to_string(), from_file(key)),
        (None, None) => (DEFAULT_STOMP.to_string(), String::new()),
    };
    let invalid = |why: String| {
        anyhow::anyhow!("invalid STOMP address `{listen}`{listen_from}: {why}; use host:port")
    };
    let addr: std::net::SocketAddr = tokio::net::lookup_host(&listen)
        .await
        .map_err(|e| invalid(e.to_string()))?
        .next()
        .ok_or_else(|| invalid("it resolves to nothing".into()))?;
    if file.store.schema.is_some() && !store_url.starts_with("postgres") {
        anyhow::bail!(
            "schema{} applies to PostgreSQL stores only; the store is {}",
            from_file("[store] schema"),
            redact_url(&store_url)
        );
    }
    let http_addr = match (http, metrics, file.listen_address(Listener::Http)) {
        (Some(addr), _, _) => Some((addr, " (from --http)".to_string())),
        (None, Some(addr), _) => Some((addr, " (from --metrics)".to_string())),
        (None, None, Some((addr, key))) => Some((addr.to_string(), from_file(key))),
        (None, None, None) => None,
    };
    let http_addr = match http_addr {
        Some((text, from)) => Some(resolve(&text, &from, "HTTP").await?),
        None => None,
    };
    let ssl_addr = match (stomp_ssl, file.listen_address(Listener::StompTls)) {
        (Some(addr), _) => Some((addr, " (from --stomp-ssl)".to_string())),
        (None, Some((addr, key))) => Some((addr.to_string(), from_file(key))),
        (None, None) => None,
    };
    let ssl_addr = match ssl_addr {
        Some((text, from)) => Some(resolve(&text, &from, "STOMP over TLS").await?),
        None => None,
    };
    let mqtt_addr = match file.listen_address(Listener::Mqtt) {
        Some((text, key)) => Some(resolve(text, &from_file(key), "MQTT").await?),
        None => None,
    };
    let mqtt_tls_addr = match file.listen_address(Listener::MqttTls) {
        Some((text, key)) => Some(resolve(text, &from_file(key), "MQTT over TLS").await?),
        None => None,
    };
    for (key, value) in [
        ("max_connections", file.http.max_connections),
        (
            "max_connections_per_address",
            file.http.max_connections_per_address,
        ),
    ] {
        if value == Some(0) {
            anyhow::bail!(
                "[http] {key} = 0 is below its least value, 1{}",
                from_file(&format!("[http] {key}"))
            );
        }
    }
    let http_tls = file.http.tls == Some(true);
    // The certificate, read and checked before anything listens.
    let tls_for = |what: &str, alpn: &[&[u8]]| -> anyhow::Result<tokio_rustls::TlsAcceptor> {
        let files = file.tls.as_ref().ok_or_else(|| {
            anyhow::anyhow!(
                "{what} needs a certificate: cert_file and key_file under [tls]{}",
                config.as_ref().map_or(
                    " in a configuration file (--config)".to_string(),
                    |p| format!(" in {}", p.display())
                )
            )
        })?;
        files.acceptor(alpn).map_err(|e| {
            anyhow::anyhow!(
                "[tls]: {e}{}",
                config
                    .as_ref()
                    .map_or(String::new(), |p| format!(" (in {})", p.display()))
            )
        })
    };
    let ssl_acceptor = match ssl_addr {
        Some(_) => Some(tls_for("STOMP over TLS", &[])?),
        None => None,
    };
    let mqtt_acceptor = match mqtt_tls_addr {
        Some(_) => Some(tls_for("MQTT over TLS", &[b"mqtt"])?),
        None => None,
    };
    let http_acceptor = match (http_tls, http_addr) {
        (true, Some(_)) => Some(tls_for("[http] tls", &[b"http/1.1"])?),
        (true, None) => anyhow::bail!(
            "[http] tls = true{} needs an HTTP address: [listeners.http] listen or --http",
            from_file("[http] tls")
        ),
        (false, _) => None,
    };
    let security = file.security();
    // A user who logs in only by certificate needs a listener that asks for one.
    let asks_for_certificates = file
        .tls
        .as_ref()
        .is_some_and(|t| t.client_ca_file.is_some())
        && (ssl_acceptor.is_some() || http_acceptor.is_some() || mqtt_acceptor.is_some());
    if let Some(user) = security
        .users
        .iter()
        .find(|u| u.certificate_subject.is_some() && u.password_hash.is_empty())
    {
        if !asks_for_certificates {
            anyhow::bail!(
                "user `{}` logs in only by client certificate, but no listener asks for one: \
                 set [tls] client_ca_file and a TLS listener ([listeners.stomp_tls] or [http] tls){}",
                user.login,
                from_file("[[users]]")
            );
        }
    }
    // Without users, every listener stays on loopback unless told otherwise.
    let listeners = [
        (Some(addr), "listen on", "send and subscribe"),
        (ssl_addr, "listen on", "send and subscribe"),
        (mqtt_addr, "listen on", "publish and subscribe"),
        (mqtt_tls_addr, "listen on", "publish and subscribe"),
        (http_addr, "serve HTTP on", "use the admin API"),
    ];
    for (listen, verb, could) in listeners {
        let Some(listen) = listen else { continue };
        if !listen.ip().is_loopback() && !security.requires_login() && !allow_anonymous {
            anyhow::bail!(
                "refusing to {verb} {listen}: it is not a loopback address and no users are \
                 configured, so anyone who reaches it could {could}; pass \
                 --allow-anonymous to do it anyway"
            );
        }
    }
    let mut options = StoreOptions::default();
    if let Some(prefix) = &file.store.table_prefix {
        options.table_prefix = prefix.clone();
    }
    options.schema = file.store.schema.clone();
    if let Some(size) = file.store.sqlite_cache_size {
        options.sqlite_cache_kib = u32::try_from(size.0 / 1024).unwrap_or(u32::MAX);
    }
    if let Some(size) = file.store.sqlite_memory_limit {
        options.sqlite_memory_limit_kib = size.0 / 1024;
    }
    let ha = standby || file.ha.mode == Some(crate::config::HaMode::SharedStore);
    if !ha && (file.ha.lease_ms.is_some() || file.ha.renew_ms.is_some()) {
        anyhow::bail!(
            "[ha] lease_ms and renew_ms{} need [ha] mode = \"shared-store\" (or --standby)",
            from_file("[ha]")
        );
    }
    let renew_ms = file
        .ha
        .renew_ms
        .map_or(crate::config::DEFAULT_RENEW_MS, |m| m.0);
    if ha {
        let lease_ms = file
            .ha
            .lease_ms
            .map_or(crate::config::DEFAULT_LEASE_MS, |m| m.0);
        // Checked on SQLite too, where only renew_ms (how often a standby asks) is used.
        let lease = crate::LeaseOptions::new(lease_ms, renew_ms)
            .map_err(|e| anyhow::anyhow!("[ha]: {e}{}", from_file("[ha]")))?;
        if store_url.starts_with("postgres") {
            options.lease = Some(lease);
        }
    }
    let mut broker_config = crate::BrokerConfig {
        store: options,
        policies: file.policies(),
        usage: file.usage.usage(),
        routing: file.routing()?,
        ..crate::BrokerConfig::default()
    };
    if let Some(permits) = file.housekeeping.permits {
        broker_config.housekeeping_permits = permits;
    }
    let mut connection = ConnectionConfig::default();
    let stomp = &file.stomp;
    // A limit below its floor would refuse every client (even its CONNECT).
    let at_least =
        |value: Option<usize>, floor: usize, key: &str| -> anyhow::Result<Option<usize>> {
            match value {
                Some(n) if n < floor => anyhow::bail!(
                    "[stomp] {key} = {n} is below its least value, {floor}{}",
                    from_file(&format!("[stomp] {key}"))
                ),
                other => Ok(other),
            }
        };
    let size_at_least = |value: Option<ByteSize>, floor: u64, key: &str| {
        at_least(value.map(|b| b.0 as usize), floor as usize, key)
    };
    if let Some(n) = size_at_least(stomp.max_frame_size, 1024, "max_frame_size")? {
        connection.limits.max_frame_bytes = n;
    }
    if let Some(n) = at_least(stomp.max_connections, 1, "max_connections")? {
        connection.max_connections = n;
    }
    if let Some(n) = at_least(
        stomp.max_connections_per_address,
        1,
        "max_connections_per_address",
    )? {
        connection.max_connections_per_address = n;
    }
    let session = &mut connection.session_limits;
    if let Some(n) = at_least(stomp.max_subscriptions, 1, "max_subscriptions")? {
        session.max_subscriptions = n;
    }
    if let Some(n) = at_least(stomp.max_open_transactions, 1, "max_open_transactions")? {
        session.max_open_transactions = n;
    }
    if let Some(n) = at_least(stomp.max_transaction_frames, 1, "max_transaction_frames")? {
        session.max_transaction_frames = n;
    }
    if let Some(n) = at_least(stomp.max_unacked, 1, "max_unacked")? {
        session.max_unacked = n;
    }
    if let Some(n) = size_at_least(stomp.max_transaction_size, 1024, "max_transaction_size")? {
        session.max_transaction_bytes = n;
    }
    if let Some(n) = at_least(stomp.max_headers, 16, "max_headers")? {
        connection.limits.max_headers = n;
    }
    if let Some(n) = size_at_least(stomp.max_header_size, 64, "max_header_size")? {
        connection.limits.max_header_bytes = n;
    }
    if let Some([send, expect]) = file.stomp.heartbeat_ms {
        connection.heartbeat_ms = (send.0, expect.0);
    }
    if let Some(ms) = file.stomp.stall_timeout_ms {
        connection.stall_timeout_ms = ms.0;
    }
    if let Some(frames) = file.stomp.pipeline_frames {
        anyhow::ensure!(frames > 0, "[stomp] pipeline_frames must be at least 1");
        connection.pipeline_frames = frames;
    }
    if let Some(bytes) = file.stomp.pipeline_bytes {
        anyhow::ensure!(
            bytes.0 > 0,
            "[stomp] pipeline_bytes must be at least 1 byte"
        );
        connection.pipeline_bytes = bytes.0 as usize;
    }
    if let Some(steal) = file.stomp.allow_link_stealing {
        connection.allow_link_stealing = steal;
    }
    connection.security = std::sync::Arc::new(security);
    let mqtt_config = mqtt_config(&file, &connection, &from_file)?;
    // MQTT over WebSocket (`/mqtt`) is on with MQTT itself.
    let mqtt_on = mqtt_addr.is_some() || mqtt_tls_addr.is_some();

    let readiness = crate::http::Readiness::default();
    let http_options = http_addr.map(|listen| crate::http::HttpOptions {
        listen,
        security: std::sync::Arc::clone(&connection.security),
        admin_group: file
            .http
            .admin_group
            .clone()
            .unwrap_or_else(|| crate::http::ADMIN_GROUP.to_string()),
        stomp: Some(connection.clone()),
        mqtt: mqtt_on.then(|| mqtt_config.clone()),
        connections: connection.connections.clone(),
        readiness: readiness.clone(),
        allowed_origins: file.http.allowed_origins.clone().unwrap_or_default(),
        allowed_hosts: file.http.allowed_hosts.clone().unwrap_or_default(),
        max_connections: file
            .http
            .max_connections
            .unwrap_or(crate::http::MAX_HTTP_CONNECTIONS),
        max_connections_per_address: file
            .http
            .max_connections_per_address
            .unwrap_or(crate::http::MAX_HTTP_CONNECTIONS_PER_ADDRESS),
        body_read_timeout: crate::http::BODY_READ_TIMEOUT,
        max_body_bytes: connection.limits.max_frame_bytes,
        tls: http_acceptor,
        history_step: crate::history::DEFAULT_STEP,
        max_destination_series: file
            .http
            .max_destination_series
            .unwrap_or(crate::metrics::MAX_DESTINATION_SERIES),
    });

    let broker = if ha {
        match start_as_standby(&store_url, broker_config, renew_ms, http_options.as_ref()).await {
            Ok(Some(broker)) => broker,
            Ok(None) => {
                println!("ebb: stopped (standby)");
                return Ok(());
            }
            Err(e) => anyhow::bail!("{e}{store_from}"),
        }
    } else {
        crate::Broker::start(&store_url, broker_config)
            .await
            .map_err(|e| match e {
                crate::Error::Store(crate::StoreError::Locked(_)) => anyhow::anyhow!(
                    "{e}{store_from}; to wait as a standby and take over when it stops, pass --standby"
                ),
                e => anyhow::anyhow!("{e}{store_from}"),
            })?
    };
    let abandoned = broker
        .rollback_abandoned(crate::stomp::connection::XID_PREFIX)
        .await?;
    if abandoned > 0 {
        tracing::info!(
            messages = abandoned,
            "rolled back STOMP transactions left open by the last run"
        );
    }
    if let Some(options) = &http_options {
        if options.security.requires_login()
            && !options
                .security
                .users
                .iter()
                .any(|u| u.groups.contains(&options.admin_group))
        {
            tracing::warn!(admin_group = %options.admin_group, "no user is in the admin group: every change through the admin API will be refused (403)");
        }
    }
    let options = crate::server::ServerOptions {
        stomp: Some(addr),
        stomp_tls: ssl_addr.zip(ssl_acceptor),
        mqtt: mqtt_addr.map(|addr| (addr, mqtt_config.clone())),
        mqtt_tls: mqtt_tls_addr.zip(mqtt_acceptor),
        connection,
        http: http_options,
    };
    let server = crate::server::Server::start(broker.clone(), options).await?;
    let bound = server.stomp_addr().expect("a STOMP listener was asked for");
    tracing::info!(stomp = %bound, store = %redact_url(&store_url), "ebb is running");
    println!("ebb: STOMP on {bound}, store {}", redact_url(&store_url));
    if let Some(ssl) = server.stomp_tls_addr() {
        println!("ebb: STOMP over TLS on {ssl}");
    }
    if let Some(mqtt) = server.mqtt_addr() {
        println!("ebb: MQTT on {mqtt}");
    }
    if let Some(mqtts) = server.mqtt_tls_addr() {
        println!("ebb: MQTT over TLS on {mqtts}");
    }
    if let Some(at) = server.http_addr() {
        if ha {
            crate::metrics::record_ha_role(true);
        }
        let (http, ws) = if http_tls {
            ("https", "wss")
        } else {
            ("http", "ws")
        };
        println!(
                        "ebb: HTTP on {http}://{at} (console /console, admin API /api/v1, STOMP over {ws}://{at}/stomp{})",
            if mqtt_on { format!(", MQTT over {ws}://{at}/mqtt") } else { String::new() }
        );
    }
    readiness.set_listening(true);
    let lease = broker.lease_state();
    let lost = async move {
        let Some(mut state) = lease else {
            return std::future::pending().await;
        };
        let lost = state
            .wait_for(|s| matches!(s, crate::LeaseState::Lost(_)))
            .await
            .map(|s| s.clone());
        match lost {
            Ok(crate::LeaseState::Lost(why)) => why,
            _ => "the store is gone".to_string(),
        }
    };
    let fenced = tokio::select! {
        _ = shutdown_signal() => None,
        why = lost => Some(why),
    };
    readiness.set_listening(false);
    match &fenced {
        // Fence: stop serving at once; every write is refused already.
        Some(why) => {
            tracing::error!(reason = %why, "store lease lost: fencing this broker (closing listeners and connections)");
            eprintln!(
                "ebb: the store's lease is lost ({why}): stopping so that a standby can take over"
            );
        }
        None => {
            tracing::info!("shutting down (a second signal exits at once)");
            actix_rt::spawn(async {
                shutdown_signal().await;
                eprintln!("ebb: second signal, exiting now");
                std::process::exit(130);
            });
        }
    }
    let broker = server.stop_listening().await;
    if let Some(why) = fenced {
        let _ = broker.shutdown().await;
        anyhow::bail!("fenced: the store's lease is lost ({why})");
    }
    broker.shutdown().await?;
    println!("ebb: stopped");
    Ok(())
}

/// Starts the broker as a standby would ([`crate::Broker::start_when_free`]): while
/// another broker holds the store, says so once, serves `/healthz` and `/readyz`
/// (standby) on the HTTP address if there is one, and asks again every `renew_ms`;
/// returns the broker once it is active, or `None` after a signal.
async fn start_as_standby(
    store_url: &str,
    config: crate::BrokerConfig,
    renew_ms: u64,
    http: Option<&crate::http::HttpOptions>,
) -> anyhow::Result<Option<crate::Broker>> {
    let (waiting, mut held) = tokio::sync::watch::channel(None::<String>);
    let http = http.cloned();
    let say = actix_rt::spawn(async move {
        // The standby's own HTTP server, once it knows it is one.
        let mut server = None;
        while held.changed().await.is_ok() {
            let by = held.borrow_and_update().clone();
            match by {
                Some(by) if server.is_none() => {
                    tracing::info!(held_by = %by, renew_ms, "standby: waiting for the store");
                    println!("ebb: standby: {by}; asking again every {renew_ms} ms");
                    server = Some(match &http {
                        Some(options) => {
                            let started =
                                crate::http::HttpServer::start_standby(options, held.clone()).await;
                            match started {
                                Ok(server) => {
                                    println!(
                                        "ebb: standby HTTP on http://{} (/healthz, /readyz, /metrics)",
                                        server.local_addr()
                                    );
                                    Some(server)
                                }
                                Err(e) => return Err(anyhow::Error::from(e)),
                            }
                        }
                        None => None,
                    });
                }
                None if server.is_some() => {
                    println!("ebb: the store is free: taking over");
                    crate::metrics::record_takeover();
                    break;
                }
                _ => {}
            }
        }
        if let Some(Some(server)) = server {
            server.stop().await;
        }
        Ok(())
    });
    let poll = std::time::Duration::from_millis(renew_ms);
    let start = crate::Broker::start_when_free(store_url, config, poll, waiting);
    tokio::pin!(start);
    let mut say = say;
    let (started, said) = tokio::select! {
        started = &mut start => (Some(started), None),
        _ = shutdown_signal() => (None, None),
        // The standby's HTTP server could not start: say so now, not at takeover.
        said = &mut say => match said {
            Ok(Err(e)) => return Err(e),
            said => (Some(start.await), Some(said)),
        },
    };
    let said = match (&started, said) {
        (Some(Ok(_)), None) => Some(say.await),
        (_, Some(said)) => Some(said),
        (_, None) => {
            say.abort();
            None
        }
    };
    if let Some(said) = said {
        said??;
    }
    Ok(started.transpose()?)
}

/// `host:port` from `text` (`from` says where it came from, `what` names the
/// listener), for errors that name both.
async fn resolve(text: &str, from: &str, what: &str) -> anyhow::Result<std::net::SocketAddr> {
    let invalid = |why: String| {
        anyhow::anyhow!("invalid {what} address `{text}`{from}: {why}; use host:port")
    };
    tokio::net::lookup_host(text)
        .await
        .map_err(|e| invalid(e.to_string()))?
        .next()
        .ok_or_else(|| invalid("it resolves to nothing".into()))
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// The settings of MQTT connections: `[mqtt]`'s limits, with STOMP's users, rights,
/// caps and registries (one set for the broker).
fn mqtt_config(
    file: &FileConfig,
    connection: &ConnectionConfig,
    from_file: &dyn Fn(&str) -> String,
) -> anyhow::Result<crate::mqtt::MqttConfig> {
    let m = &file.mqtt;
    let mut config = crate::mqtt::MqttConfig {
        security: std::sync::Arc::clone(&connection.security),
        client_ids: std::sync::Arc::clone(&connection.client_ids),
        connections: connection.connections.clone(),
        slots: connection.slots.clone(),
        max_connections: connection.max_connections,
        max_connections_per_address: connection.max_connections_per_address,
        max_subscriptions: connection.session_limits.max_subscriptions,
        ..Default::default()
    };
    if let Some(size) = m.max_packet_size {
        anyhow::ensure!(
            (1024..=u32::MAX as u64).contains(&size.0),
            "[mqtt] max_packet_size = {} is outside 1kb to 4gb{}",
            size.0,
            from_file("[mqtt] max_packet_size")
        );
        config.max_packet_size = size.0 as u32;
    }
    if let Some(n) = m.receive_maximum {
        anyhow::ensure!(
            n > 0,
            "[mqtt] receive_maximum must be at least 1{}",
            from_file("[mqtt] receive_maximum")
        );
        config.receive_maximum = n;
    }
    if let Some(n) = m.delivery_window {
        anyhow::ensure!(
            n > 0,
            "[mqtt] delivery_window must be at least 1{}",
            from_file("[mqtt] delivery_window")
        );
        config.delivery_window = n;
    }
    if let Some(ms) = m.connect_timeout_ms {
        config.connect_timeout_ms = ms.0.max(1);
    }
    Ok(config)
}
