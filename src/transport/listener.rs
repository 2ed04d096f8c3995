//! The STOMP listener: accepts connections (TCP_NODELAY on each) and serves each in a
//! task of its own until shutdown is signalled. It holds the connection limits: at most
//! [`ConnectionConfig::max_connections`] at once, and
//! [`ConnectionConfig::max_connections_per_address`] from one IP address; a connection
//! over either gets an ERROR frame naming the limit and is closed before it is read.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::connection::{serve_connection, ConnectionConfig};
use crate::broker::Broker;

/// Accepts connections on `listener` until `stop` turns true; then stops accepting and
/// returns (open connections are ended by the broker's shutdown: their writes fail).
pub async fn run(
    listener: TcpListener,
    broker: Broker,
    config: ConnectionConfig,
    stop: watch::Receiver<bool>,
) {
    accept(listener, broker, config, stop, None).await
}

/// [`run`] for STOMP over TLS (ActiveMQ's `stomp+ssl`): each accepted connection's
/// TLS handshake must end within [`crate::tls::HANDSHAKE_TIMEOUT`]; one that fails (a
/// client that does not trust the certificate, or presents none when client
/// certificates are required) is logged and dropped. The connection limits count it
/// from its accept, before the handshake.
#[cfg(feature = "tls")]
pub async fn run_tls(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    broker: Broker,
    config: ConnectionConfig,
    stop: watch::Receiver<bool>,
) {
    accept(listener, broker, config, stop, Some(acceptor)).await
}

#[cfg(feature = "tls")]
type Acceptor = tokio_rustls::TlsAcceptor;
#[cfg(not(feature = "tls"))]
type Acceptor = std::convert::Infallible;

async fn accept(
    listener: TcpListener,
    broker: Broker,
    config: ConnectionConfig,
    mut stop: watch::Receiver<bool>,
    tls: Option<Acceptor>,
) {
    let slots = config.slots.clone();
    // Refusals are logged at most once a second, with how many were not: a flood of
    // connections must not flood the log too.
    let (mut last_logged, mut unlogged) = (None::<std::time::Instant>, 0u64);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((mut stream, peer)) => {
                    let slot = match slots.take(peer.ip(), &config) {
                        Ok(slot) => slot,
                        Err(refusal) => {
                            if last_logged.is_none_or(|at| at.elapsed().as_secs() >= 1) {
                                tracing::warn!(%peer, not_logged = unlogged, "refused connection: {refusal}");
                                (last_logged, unlogged) = (Some(std::time::Instant::now()), 0);
                            } else {
                                unlogged += 1;
                            }
                            // Told why, briefly: a client that does not read is dropped.
                            let frame = format!("ERROR\nmessage:{refusal}\n\n\0");
                            actix_rt::spawn(async move {
                                let write = stream.write_all(frame.as_bytes());
                                let _ = tokio::time::timeout(REFUSAL_WRITE, write).await;
                            });
                            continue;
                        }
                    };
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::info!(%peer, error = %e, "refused connection: cannot set TCP_NODELAY");
                        continue;
                    }
                    let id = next_session_id();
                    tracing::debug!(%peer, session = %id, "connection accepted");
                    let (broker, config) = (broker.clone(), config.clone());
                    let transport = super::connections::Transport::Tcp;
                    match &tls {
                        None => {
                            actix_rt::spawn(async move {
                                serve_connection(stream, broker, config, id, peer, transport).await;
                                drop(slot);
                            });
                        }
                        #[cfg(feature = "tls")]
                        Some(acceptor) => {
                            let handshake = acceptor.accept(stream);
                            actix_rt::spawn(async move {
                                match tokio::time::timeout(crate::tls::HANDSHAKE_TIMEOUT, handshake).await {
                                    Ok(Ok(stream)) => {
                                        serve_connection(stream, broker, config, id, peer, transport).await;
                                    }
                                    Ok(Err(e)) => tracing::info!(%peer, error = %e, "TLS handshake failed"),
                                    Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                                }
                                drop(slot);
                            });
                        }
                        #[cfg(not(feature = "tls"))]
                        Some(never) => match *never {},
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            _ = stop.changed() => {
                if *stop.borrow() {
                    return;
                }
            }
        }
    }
}

/// How long a refused connection's ERROR may take to write.
const REFUSAL_WRITE: std::time::Duration = std::time::Duration::from_secs(1);

/// A new session id (`ebb-1`, `ebb-2`, ...), unique in the process: it names a
/// connection in CONNECTED's `session` header and in logs, whichever listener took it.
pub fn next_session_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("ebb-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The connections served now, in total and by source address, against
/// [`ConnectionConfig::max_connections`] and
/// [`ConnectionConfig::max_connections_per_address`]. Clones share the counts.
#[derive(Clone, Default)]
pub struct Slots(Arc<Mutex<SlotCounts>>);

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots")
            .field("total", &self.0.lock().total)
            .finish()
    }
}

#[derive(Default)]
struct SlotCounts {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// One served connection's place; given back on drop.
pub struct Slot {
    slots: Slots,
    address: IpAddr,
}

impl Slots {
    /// A place for a STOMP connection from `address` under `config`'s limits, or why
    /// there is none (the ERROR's message, naming the limit).
    pub fn take(&self, address: IpAddr, config: &ConnectionConfig) -> Result<Slot, String> {
        self.take_within(
            address,
            config.max_connections,
            config.max_connections_per_address,
        )
    }

    /// A place for a connection from `address` while fewer than `most` are served
    /// and fewer than `most_per_address` from it, or why there is none (naming the
    /// limit by its configuration key).
    pub fn take_within(
        &self,
        address: IpAddr,
        most: usize,
        most_per_address: usize,
    ) -> Result<Slot, String> {
        let mut counts = self.0.lock();
        if counts.total >= most {
            return Err(format!(
                "the broker serves {most} connections, its most (max_connections)"
            ));
        }
        let from = counts.by_address.entry(address).or_default();
        if *from >= most_per_address {
            return Err(format!(
                "{most_per_address} connections from {address} already, the most from one address (max_connections_per_address)"
            ));
        }
        *from += 1;
        counts.total += 1;
        Ok(Slot {
            slots: self.clone(),
            address,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.slots.0.lock();
        counts.total -= 1;
        if let Some(from) = counts.by_address.get_mut(&self.address) {
            *from -= 1;
            if *from == 0 {
                counts.by_address.remove(&self.address);
            }
        }
    }
}
