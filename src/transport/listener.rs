//! The STOMP listener: accepts connections (TCP_NODELAY on each) and serves each in a
//! task of its own until shutdown is signalled.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
    mut stop: watch::Receiver<bool>,
) {
    let sessions = Arc::new(AtomicU64::new(1));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::info!(%peer, error = %e, "refused connection: cannot set TCP_NODELAY");
                        continue;
                    }
                    let id = format!("ebb-{}", sessions.fetch_add(1, Ordering::Relaxed));
                    tracing::debug!(%peer, session = %id, "connection accepted");
                    let (broker, config) = (broker.clone(), config.clone());
                    actix_rt::spawn(serve_connection(stream, broker, config, id));
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
