//! A TCP proxy in front of a database server, for fault tests and `ebb chaos`: it lets
//! a broker's connections through until [`DatabaseProxy::cut`] closes every one of them
//! and refuses new ones, as a network partition or a database host that went away
//! would; [`DatabaseProxy::restore`] lets them through again.
//!
//! It is plain tokio (no TLS): bytes are copied both ways, read only to spot a `COMMIT`
//! query for [`DatabaseProxy::lose_next_commit_answer`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// See the module documentation.
pub struct DatabaseProxy {
    url: String,
    up: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// The local ports of the proxy's live connections to the server, as the server's
    /// `pg_stat_activity.client_port` shows them.
    ports: Arc<Mutex<std::collections::HashSet<u16>>>,
    /// Set by [`DatabaseProxy::lose_next_commit_answer`].
    lose_commit: Arc<AtomicBool>,
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
        let lose_commit = Arc::new(AtomicBool::new(false));
        let lose_commit2 = lose_commit.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let (target, ports, lose) = (target.clone(), ports2.clone(), lose_commit2.clone());
                let mut links = lock(&links2);
                links.retain(|link| !link.is_finished());
                links.push(tokio::spawn(async move {
                    if let Ok(server) = tokio::net::TcpStream::connect(target).await {
                        let port = server.local_addr().map_or(0, |a| a.port());
                        lock(&ports).insert(port);
                        // Removed also when the link is aborted (`cut`): a stale port
                        // could name another client's connection later.
                        let _listed = Listed(ports, port);
                        link(client, server, &lose).await;
                    }
                }));
            }
        });
        Ok(Self {
            url: url.replacen(&host_port, &format!("127.0.0.1:{port}"), 1),
            up,
            links,
            ports,
            lose_commit,
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

    /// The next `COMMIT` a client sends (a PostgreSQL simple query) reaches the server,
    /// and then its connection is closed before the answer comes back: the client
    /// cannot know whether the transaction committed (it did, unless the server
    /// refused it). For tests of a commit whose outcome is in doubt.
    pub fn lose_next_commit_answer(&self) {
        self.lose_commit.store(true, Ordering::SeqCst);
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

/// Copies bytes both ways until either side closes. With `lose_commit` set, a chunk
/// from the client holding a `COMMIT` query is the last thing that passes: it goes to
/// the server, nothing more comes back, and the link closes once the server has had
/// the time to commit.
async fn link(client: TcpStream, server: TcpStream, lose_commit: &AtomicBool) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let muted = AtomicBool::new(false);
    let to_server = async {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let chunk = &buf[..n];
            let commit = chunk.windows(7).any(|w| w == b"COMMIT\0");
            if commit && lose_commit.swap(false, Ordering::SeqCst) {
                muted.store(true, Ordering::SeqCst);
                let _ = server_write.write_all(chunk).await;
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                return;
            }
            if server_write.write_all(chunk).await.is_err() {
                return;
            }
        }
    };
    let to_client = async {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if muted.load(Ordering::SeqCst) || client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = to_server => {}
        () = to_client => {}
    }
}

/// A port in [`DatabaseProxy::server_ports`] while its link lives.
struct Listed(Arc<Mutex<std::collections::HashSet<u16>>>, u16);

impl Drop for Listed {
    fn drop(&mut self) {
        lock(&self.0).remove(&self.1);
    }
}

/// A mutex's guard, poisoned or not: the data (handles and ports) stays valid.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
