//! [`Server`]: a broker with its listeners — STOMP over TCP, STOMP over TLS, MQTT
//! over TCP and TLS, and the HTTP server (admin API, console, metrics, STOMP over WebSocket) — started and
//! stopped as one. `ebb serve`, the test harness (`test_util`) and the benchmarks
//! all start their listeners through it, so a listener (or a protocol) is added in
//! one place.
//!
//! Start: every address is bound first, so an address in use fails the start before
//! anything serves ([`crate::Error::Listen`]); then the listeners accept. Stop: the
//! listeners stop accepting, the HTTP server stops, and the broker shuts down last
//! (open connections end with it: their writes fail).

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::stomp::connection::{ConnectionConfig, Stomp};
use crate::{Broker, Error};

/// What a [`Server`] listens on, and the settings its STOMP connections share.
#[derive(Default)]
pub struct ServerOptions {
    /// STOMP over TCP on this address (`None`: no plain listener). Port 0 takes an
    /// ephemeral port ([`Server::stomp_addr`] says which).
    pub stomp: Option<SocketAddr>,
    /// STOMP over TLS on this address with this acceptor (ActiveMQ's `stomp+ssl`).
    #[cfg(feature = "tls")]
    pub stomp_tls: Option<(SocketAddr, tokio_rustls::TlsAcceptor)>,
    /// MQTT over TCP on this address, with the settings of its connections
    /// ([`crate::mqtt`]; `None`: no MQTT listener).
    pub mqtt: Option<(SocketAddr, crate::mqtt::MqttConfig)>,
    /// MQTT over TLS (`mqtts`) on this address with this acceptor; its connections
    /// share the settings of [`ServerOptions::mqtt`] (or the defaults without it).
    #[cfg(feature = "tls")]
    pub mqtt_tls: Option<(SocketAddr, tokio_rustls::TlsAcceptor)>,
    /// Limits, users and rights, caps and the registry of every STOMP connection, over
    /// TCP, TLS and WebSocket alike.
    pub connection: ConnectionConfig,
    /// The HTTP server, if any. Its `stomp` settings, when it serves STOMP over
    /// WebSocket, should be clones of [`ServerOptions::connection`] (one registry,
    /// one set of caps).
    #[cfg(feature = "http")]
    pub http: Option<crate::http::HttpOptions>,
}

/// A broker serving its listeners ([`Server::start`]).
pub struct Server {
    broker: Broker,
    stomp: Option<SocketAddr>,
    stomp_tls: Option<SocketAddr>,
    mqtt: Option<SocketAddr>,
    mqtt_tls: Option<SocketAddr>,
    #[cfg(feature = "http")]
    http: Option<crate::http::HttpServer>,
    stop: watch::Sender<bool>,
    accepting: Vec<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Starts `options`' listeners in front of `broker` (a broker the caller started:
    /// from a store URL, as a standby, on a test store). Must run inside the broker's
    /// actix system (as `ebb serve` and the tests do).
    ///
    /// Errors: [`Error::Listen`] for an address that cannot be bound (nothing is
    /// served then), or the HTTP server's ([`crate::http::HttpServer::start`]).
    pub async fn start(broker: Broker, options: ServerOptions) -> Result<Server, Error> {
        let stomp = match options.stomp {
            Some(addr) => Some(bind(addr, "STOMP").await?),
            None => None,
        };
        #[cfg(feature = "tls")]
        let stomp_tls = match options.stomp_tls {
            Some((addr, acceptor)) => Some((bind(addr, "STOMP over TLS").await?, acceptor)),
            None => None,
        };
        let (mqtt, mqtt_config) = match options.mqtt {
            Some((addr, config)) => (Some(bind(addr, "MQTT").await?), config),
            None => (None, crate::mqtt::MqttConfig::default()),
        };
        #[cfg(feature = "tls")]
        let mqtt_tls = match options.mqtt_tls {
            Some((addr, acceptor)) => Some((bind(addr, "MQTT over TLS").await?, acceptor)),
            None => None,
        };
        #[cfg(feature = "http")]
        let http = match options.http {
            Some(http) => Some(crate::http::HttpServer::start(http, broker.clone()).await?),
            None => None,
        };
        let (stop, stopped) = watch::channel(false);
        let mut server = Server {
            broker: broker.clone(),
            stomp: None,
            stomp_tls: None,
            mqtt: None,
            mqtt_tls: None,
            #[cfg(feature = "http")]
            http,
            stop,
            accepting: Vec::new(),
        };
        let mqtt_protocol = crate::mqtt::Mqtt::new(broker.clone(), mqtt_config);
        #[cfg(feature = "tls")]
        let serves_mqtt = mqtt.is_some() || mqtt_tls.is_some();
        #[cfg(not(feature = "tls"))]
        let serves_mqtt = mqtt.is_some();
        if serves_mqtt {
            // 5.0's session expiry: persistent sessions offline past their interval end.
            let sweep = crate::mqtt::expiry::run(mqtt_protocol.clone(), stopped.clone());
            server.accepting.push(actix_rt::spawn(sweep));
        }
        if let Some((listener, addr)) = mqtt {
            server.mqtt = Some(addr);
            let run =
                crate::transport::listener::run(listener, mqtt_protocol.clone(), stopped.clone());
            server.accepting.push(actix_rt::spawn(run));
        }
        #[cfg(feature = "tls")]
        if let Some(((listener, addr), acceptor)) = mqtt_tls {
            server.mqtt_tls = Some(addr);
            let run = crate::transport::listener::run_tls(
                listener,
                acceptor,
                mqtt_protocol,
                stopped.clone(),
            );
            server.accepting.push(actix_rt::spawn(run));
        }
        let protocol = Stomp::new(broker, options.connection);
        if let Some((listener, addr)) = stomp {
            server.stomp = Some(addr);
            let run = crate::transport::listener::run(listener, protocol.clone(), stopped.clone());
            server.accepting.push(actix_rt::spawn(run));
        }
        #[cfg(feature = "tls")]
        if let Some(((listener, addr), acceptor)) = stomp_tls {
            server.stomp_tls = Some(addr);
            let run = crate::transport::listener::run_tls(listener, acceptor, protocol, stopped);
            server.accepting.push(actix_rt::spawn(run));
        }
        Ok(server)
    }

    /// The broker it serves.
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// Where STOMP over TCP listens (the port taken, for port 0).
    pub fn stomp_addr(&self) -> Option<SocketAddr> {
        self.stomp
    }

    /// Where STOMP over TLS listens.
    pub fn stomp_tls_addr(&self) -> Option<SocketAddr> {
        self.stomp_tls
    }

    /// Where MQTT over TCP listens.
    pub fn mqtt_addr(&self) -> Option<SocketAddr> {
        self.mqtt
    }

    /// Where MQTT over TLS listens.
    pub fn mqtt_tls_addr(&self) -> Option<SocketAddr> {
        self.mqtt_tls
    }

    /// Where the HTTP server listens.
    #[cfg(feature = "http")]
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|h| h.local_addr())
    }

    /// Stops accepting: the listeners stop, then the HTTP server; the broker goes on
    /// (open connections too, until it shuts down) and is returned.
    pub async fn stop_listening(self) -> Broker {
        let _ = self.stop.send(true);
        for accepting in self.accepting {
            let _ = accepting.await;
        }
        #[cfg(feature = "http")]
        if let Some(http) = self.http {
            http.stop().await;
        }
        self.broker
    }

    /// Stops accepting ([`Server::stop_listening`]), then shuts the broker down
    /// (every accepted send and ack committed, the store closed).
    pub async fn stop(self) -> Result<(), Error> {
        self.stop_listening().await.shutdown().await
    }
}

/// A listener on `addr`, and the address it got; the error names `what`.
async fn bind(addr: SocketAddr, what: &'static str) -> Result<(TcpListener, SocketAddr), Error> {
    let listen = |cause| Error::Listen { what, addr, cause };
    let listener = TcpListener::bind(addr).await.map_err(listen)?;
    let bound = listener.local_addr().map_err(listen)?;
    Ok((listener, bound))
}
