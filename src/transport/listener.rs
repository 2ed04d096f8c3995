//! The listener, for any [`Protocol`]: accepts connections (TCP_NODELAY on each) and
//! serves each in a task of its own until shutdown is signalled. It holds the
//! connection caps: a connection over the protocol's limits
//! ([`Protocol::take_slot`]: `max_connections` at once, `max_connections_per_address`
//! from one IP address) gets the protocol's refusal naming the limit (STOMP: an
//! ERROR frame) and is closed before it is read.

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::caps::{next_session_id, Slot};
use super::connections::Transport;
use super::{Accepted, Protocol};

/// Accepts connections on `listener` for `protocol` until `stop` turns true; then
/// stops accepting and returns (open connections are ended by the broker's
/// shutdown: their writes fail).
pub async fn run<P: Protocol>(listener: TcpListener, protocol: P, stop: watch::Receiver<bool>) {
    accept(listener, protocol, stop, None).await
}

/// [`run`] over TLS (ActiveMQ's `stomp+ssl`): each accepted connection's TLS
/// handshake must end within [`crate::tls::HANDSHAKE_TIMEOUT`]; one that fails (a
/// client that does not trust the certificate, or presents none when client
/// certificates are required) is logged and dropped. The connection limits count it
/// from its accept, before the handshake.
#[cfg(feature = "tls")]
pub async fn run_tls<P: Protocol>(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    protocol: P,
    stop: watch::Receiver<bool>,
) {
    accept(listener, protocol, stop, Some(acceptor)).await
}

#[cfg(feature = "tls")]
type Acceptor = tokio_rustls::TlsAcceptor;
#[cfg(not(feature = "tls"))]
type Acceptor = std::convert::Infallible;

async fn accept<P: Protocol>(
    listener: TcpListener,
    protocol: P,
    mut stop: watch::Receiver<bool>,
    tls: Option<Acceptor>,
) {
    // Refusals are logged at most once a second, with how many were not: a flood of
    // connections must not flood the log too.
    let (mut last_logged, mut unlogged) = (None::<std::time::Instant>, 0u64);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((mut stream, peer)) => {
                    let slot = match protocol.take_slot(peer.ip()) {
                        Ok(slot) => slot,
                        Err(refusal) => {
                            if last_logged.is_none_or(|at| at.elapsed().as_secs() >= 1) {
                                tracing::warn!(protocol = P::NAME, %peer, not_logged = unlogged, "refused connection: {refusal}");
                                (last_logged, unlogged) = (Some(std::time::Instant::now()), 0);
                            } else {
                                unlogged += 1;
                            }
                            // Told why, briefly: a client that does not read is dropped.
                            let answer = protocol.refusal(&refusal.to_string());
                            actix_rt::spawn(async move {
                                let write = stream.write_all(&answer);
                                let _ = tokio::time::timeout(REFUSAL_WRITE, write).await;
                            });
                            continue;
                        }
                    };
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::info!(%peer, error = %e, "refused connection: cannot set TCP_NODELAY");
                        continue;
                    }
                    let session_id = next_session_id();
                    tracing::debug!(protocol = P::NAME, %peer, session = %session_id, "connection accepted");
                    #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
                    let mut connection = Accepted {
                        session_id,
                        peer,
                        transport: Transport::Tcp,
                        certificate_subject: None,
                    };
                    let protocol = protocol.clone();
                    match &tls {
                        None => spawn_serving(protocol.serve(stream, connection), slot),
                        #[cfg(feature = "tls")]
                        Some(acceptor) => {
                            let handshake = acceptor.accept(stream);
                            actix_rt::spawn(async move {
                                match tokio::time::timeout(crate::tls::HANDSHAKE_TIMEOUT, handshake).await {
                                    Ok(Ok(stream)) => {
                                        connection.certificate_subject = crate::tls::certificate_subject(stream.get_ref().1);
                                        // A task of its own, as over TCP: this one ends,
                                        // and its handshake's bytes with it.
                                        spawn_serving(protocol.serve(stream, connection), slot);
                                    }
                                    Ok(Err(e)) => tracing::info!(%peer, error = %e, "TLS handshake failed"),
                                    Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                                }
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

/// Spawns a connection's future as its task, which gives the connection's `slot`
/// back when it ends. The future is mapped, not awaited in an `async` block: the
/// task then holds it once (a block holds what it awaits beside what it captured:
/// twice the bytes of every connection, issue 53).
fn spawn_serving(serving: impl std::future::Future<Output = ()> + 'static, slot: Slot) {
    actix_rt::spawn(futures::FutureExt::map(serving, move |()| drop(slot)));
}

/// How long a refused connection's ERROR may take to write.
const REFUSAL_WRITE: std::time::Duration = std::time::Duration::from_secs(1);
