//! A TCP proxy in front of a database server, for fault tests and `ebb chaos`: it lets
//! a broker's connections through until [`DatabaseProxy::cut`] closes every one of them
//! and refuses new ones, as a network partition or a database host that went away
//! would; [`DatabaseProxy::restore`] lets them through again.
//!
//! It is plain tokio (no TLS, no protocol parsing): bytes are copied both ways.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

/// See the module documentation.
pub struct DatabaseProxy {
    url: String,
    up: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// The local ports of the proxy's live connections to the server, as the server's
    /// `pg_stat_activity.client_port` shows them.
    ports: Arc<Mutex<std::collections::HashSet<u16>>>,
    accept: JoinHandle<()>,
}

impl DatabaseProxy {
    /// A proxy on `127.0.0.1` and an ephemeral port to the server of `url`
    /// (`postgres://user@host:port/db?...`); [`DatabaseProxy::url`] is `url` through
    /// it. Runs on the current tokio runtime until dropped.
    ///
    /// Errors: the listener cannot be bound.
    pub async fn start(url: &str) -> std::io::Result<Self> {
        let after_scheme = url.split_once("://").map_or(url, |(_, r)| r);
        let rest = after_scheme
            .rsplit_once('@')
            .map_or(after_scheme, |(_, r)| r);
        let host_port = rest.split(['/', '?']).next().unwrap_or(rest).to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let up = Arc::new(AtomicBool::new(true));
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let ports: Arc<Mutex<std::collections::HashSet<u16>>> = Arc::default();
        let (up2, links2, target) = (up.clone(), links.clone(), host_port.clone());
        let ports2 = ports.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let (target, ports) = (target.clone(), ports2.clone());
                let mut links = lock(&links2);
                links.retain(|link| !link.is_finished());
                links.push(tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(target).await {
                        let port = server.local_addr().map_or(0, |a| a.port());
                        lock(&ports).insert(port);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        lock(&ports).remove(&port);
                    }
                }));
            }
        });
        Ok(Self {
            url: url.replacen(&host_port, &format!("127.0.0.1:{port}"), 1),
            up,
            links,
            ports,
            accept,
        })
    }

    /// The database's URL through the proxy.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Closes every connection and refuses new ones until [`DatabaseProxy::restore`].
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for link in lock(&self.links).drain(..) {
            link.abort();
        }
    }

    /// The local ports of the proxy's open connections to the server: what the
    /// server sees as their client ports (PostgreSQL's `pg_stat_activity.client_port`),
    /// so a test can have the server itself end them.
    pub fn server_ports(&self) -> Vec<u16> {
        lock(&self.ports).iter().copied().collect()
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for DatabaseProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// A mutex's guard, poisoned or not: the data (handles and ports) stays valid.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
