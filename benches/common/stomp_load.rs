//! A small STOMP 1.2 load for benchmarks: producers that pipeline SENDs with a bounded
//! window of outstanding receipts, and consumers that ack every message individually
//! (`client-individual`). It speaks through Ebb's own client (`ebb::stomp::client`,
//! on Ebb's codec), so the same client measures Ebb and any other STOMP broker; what
//! differs between brokers is a [`Dialect`].
//!
//! A run ([`run`]) connects everything first (CONNECT, SUBSCRIBE with a receipt), then
//! times from the first SEND until every consumer's DISCONNECT receipt: a broker
//! answers DISCONNECT after the frames before it, so the time covers the last ACK.
//!
//! The pieces are there for other workloads too: [`connect_with`] (heart-beats),
//! [`subscribe`], [`next`], [`drain_with`] (what a queue held, message by message),
//! [`on_thread`] (a client on a thread of its own), and the CPU counters.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb::stomp::client::{ClientError, StompClient, StompReader};
use ebb::stomp::frame::{Command, Frame};
use futures::FutureExt;
use tokio::sync::{watch, Semaphore};

use super::tally::{Seen, Tally};

/// Most frames a consumer handles before it flushes its ACKs.
const ACK_BATCH: usize = 256;

/// How one broker wants to be spoken to.
#[derive(Debug, Clone)]
pub struct Dialect {
    /// `login`, `passcode` on CONNECT.
    pub login: Option<(String, String)>,
    /// CONNECT's `host` header (RabbitMQ: the virtual host).
    pub host: String,
    /// The destination, as the broker names it (`/queue/NAME`).
    pub destination: String,
    /// Extra SEND headers (`persistent:true`, ...).
    pub send_headers: Vec<(String, String)>,
    /// Extra SUBSCRIBE headers besides `id`, `destination` and `ack`.
    pub subscribe_headers: Vec<(String, String)>,
    /// The SUBSCRIBE header that carries the prefetch (`activemq.prefetchSize`,
    /// `prefetch-count`).
    pub prefetch_header: String,
}

impl Dialect {
    /// Ebb's STOMP: no login (no users configured), `host:localhost`, `destination`
    /// as Ebb names it (`/queue/NAME`, `/topic/NAME`), prefetch
    /// `activemq.prefetchSize`; no extra headers (add them with [`Self::persistent`]).
    pub fn ebb(destination: &str) -> Self {
        Self {
            login: None,
            host: "localhost".into(),
            destination: destination.into(),
            send_headers: vec![],
            subscribe_headers: vec![],
            prefetch_header: "activemq.prefetchSize".into(),
        }
    }

    /// RabbitMQ's STOMP plugin: `guest`/`guest` on the virtual host `/`, prefetch
    /// `prefetch-count`; no extra headers (see [`Self::durable`], [`Self::persistent`]).
    pub fn rabbitmq(destination: &str) -> Self {
        Self {
            login: Some(("guest".into(), "guest".into())),
            host: "/".into(),
            destination: destination.into(),
            send_headers: vec![],
            subscribe_headers: vec![],
            prefetch_header: "prefetch-count".into(),
        }
    }

    /// SENDs carry `persistent:true`.
    pub fn persistent(mut self) -> Self {
        self.send_headers.push(("persistent".into(), "true".into()));
        self
    }

    /// RabbitMQ: SEND and SUBSCRIBE declare the queue `durable:true`,
    /// `auto-delete:false` (the broker refuses a declaration that differs from the
    /// queue's, so both carry the same).
    pub fn durable(mut self) -> Self {
        for headers in [&mut self.send_headers, &mut self.subscribe_headers] {
            headers.push(("durable".into(), "true".into()));
            headers.push(("auto-delete".into(), "false".into()));
        }
        self
    }

    /// A SEND of `body` to the destination with the dialect's SEND headers (no
    /// receipt: the caller adds one when it wants it).
    pub fn send_frame(&self, body: Vec<u8>) -> Frame {
        let mut frame = Frame::new(Command::Send).header("destination", self.destination.clone());
        for (name, value) in &self.send_headers {
            frame = frame.header(name.clone(), value.clone());
        }
        frame.body(body)
    }
}

/// One run's shape.
#[derive(Debug, Clone)]
pub struct Load {
    pub addr: SocketAddr,
    pub dialect: Dialect,
    pub producers: usize,
    pub consumers: usize,
    pub messages: u64,
    pub body_bytes: usize,
    /// SENDs a producer may have written without their RECEIPT.
    pub window: usize,
    pub prefetch: u32,
    /// A run that makes no progress for this long fails.
    pub stall: Duration,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// First SEND to the last consumer's DISCONNECT receipt.
    pub elapsed: Duration,
    /// CPU seconds of the thread that ran the client, connecting included.
    pub client_cpu_s: f64,
}

/// Connects and logs in with `dialect`'s CONNECT, without heart-beats; `Err` says why
/// not (refused, ERROR frame, no answer within 5 s).
pub async fn connect(addr: SocketAddr, dialect: &Dialect) -> Result<StompClient, String> {
    Ok(connect_with(addr, dialect, (0, 0)).await?.0)
}

/// [`connect`] offering `heart_beat` (ms: can send every `.0`, wants one every `.1`;
/// 0 = none) in CONNECT's `heart-beat` header; answers the client and the broker's
/// CONNECTED frame (its `heart-beat` header is the broker's side of the negotiation).
pub async fn connect_with(
    addr: SocketAddr,
    dialect: &Dialect,
    heart_beat: (u64, u64),
) -> Result<(StompClient, Frame), String> {
    let mut client = tokio::time::timeout(Duration::from_secs(5), StompClient::open(addr))
        .await
        .map_err(|_| format!("no answer from {addr} within 5 s"))?
        .map_err(|e| e.to_string())?;
    let mut connect = Frame::new(Command::Connect)
        .header("accept-version", "1.2")
        .header("host", dialect.host.clone())
        .header("heart-beat", format!("{},{}", heart_beat.0, heart_beat.1));
    if let Some((login, passcode)) = &dialect.login {
        connect = connect
            .header("login", login.clone())
            .header("passcode", passcode.clone());
    }
    let connected = tokio::time::timeout(Duration::from_secs(5), client.handshake(connect))
        .await
        .map_err(|_| format!("no CONNECTED from {addr} within 5 s"))?
        .map_err(|e| e.to_string())?;
    Ok((client, connected))
}

/// The next frame (heart-beats skipped); an ERROR frame or a closed connection is an
/// `Err`.
pub async fn next(reader: &mut StompReader) -> Result<Frame, String> {
    let f = reader.next().await.map_err(|e| e.to_string())?;
    if f.command == Command::Error {
        return Err(format!(
            "ERROR frame: {} {}",
            f.get("message").unwrap_or_default(),
            String::from_utf8_lossy(&f.body)
        ));
    }
    Ok(f)
}

/// SUBSCRIBE with `ack` (`auto`, `client`, `client-individual`) and the dialect's
/// prefetch header when `prefetch` is given, answered by its receipt (so the consumer
/// is attached before timing); answers the frames that came before the receipt.
pub async fn subscribe(
    client: &mut StompClient,
    dialect: &Dialect,
    id: &str,
    ack: &str,
    prefetch: Option<u32>,
) -> Result<Vec<Frame>, String> {
    let mut subscribe = Frame::new(Command::Subscribe)
        .header("id", id)
        .header("destination", dialect.destination.clone())
        .header("ack", ack)
        .header("receipt", format!("sub-{id}"));
    if let Some(prefetch) = prefetch {
        subscribe = subscribe.header(dialect.prefetch_header.clone(), prefetch.to_string());
    }
    for (name, value) in &dialect.subscribe_headers {
        subscribe = subscribe.header(name.clone(), value.clone());
    }
    client.send(subscribe).await.map_err(|e| e.to_string())?;
    let mut early = Vec::new();
    client
        .receipt(&format!("sub-{id}"), |f| early.push(f))
        .await
        .map_err(|e| e.to_string())?;
    Ok(early)
}

/// Sends messages `indices` with a receipt each, at most `window` without their receipt.
async fn produce(
    mut client: StompClient,
    load: Arc<Load>,
    indices: std::ops::Range<u64>,
    tally: Arc<Tally>,
) -> Result<(), String> {
    let count = indices.end - indices.start;
    let window = Semaphore::new(load.window.max(1));
    let (reader, writer) = client.halves();
    let send = async {
        for index in indices {
            match window.try_acquire() {
                Ok(permit) => permit.forget(),
                Err(_) => {
                    // The window is full: put what is written on the wire, then wait.
                    writer.flush().await.map_err(|e| e.to_string())?;
                    window.acquire().await.expect("never closed").forget();
                }
            }
            let frame = load
                .dialect
                .send_frame(super::tally::body(index, load.body_bytes))
                .header("receipt", index.to_string());
            writer.feed(frame).await.map_err(|e| e.to_string())?;
        }
        writer.flush().await.map_err(|e| e.to_string())
    };
    let confirm = async {
        let mut confirmed = 0;
        while confirmed < count {
            match reader.next().await {
                Ok(f) if f.command == Command::Receipt => {
                    confirmed += 1;
                    tally.confirmed.fetch_add(1, Ordering::Relaxed);
                    window.add_permits(1);
                }
                Ok(f) => {
                    return Err(format!(
                        "producer got {} {:?}",
                        f.command.as_str(),
                        f.headers
                    ))
                }
                Err(ClientError::Closed) => {
                    return Err("the broker closed a producer's connection".into())
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    };
    tokio::try_join!(send, confirm)?;
    client.disconnect().await.map_err(|e| e.to_string())
}

/// Receives and acks (one ACK per MESSAGE) until every message has arrived somewhere.
async fn consume(
    mut client: StompClient,
    tally: Arc<Tally>,
    mut done: watch::Receiver<bool>,
) -> Result<(), String> {
    let ack = |f: &Frame| -> Result<Frame, String> {
        let id = f
            .get("ack")
            .ok_or_else(|| format!("a MESSAGE without an ack header: {:?}", f.headers))?;
        Ok(Frame::new(Command::Ack).header("id", id))
    };
    loop {
        let (reader, writer) = client.halves();
        tokio::select! {
            first = next(reader) => {
                let mut next_frame = Some(first?);
                let mut handled = 0;
                while let Some(f) = next_frame.take() {
                    if f.command != Command::Message {
                        return Err(format!("consumer got {} {:?}", f.command.as_str(), f.headers));
                    }
                    if tally.record(&f.body) == Seen::Foreign {
                        return Err(format!("a message this run never sent: {:?}", f.headers));
                    }
                    writer.feed(ack(&f)?).await.map_err(|e| e.to_string())?;
                    tally.acked.fetch_add(1, Ordering::Relaxed);
                    handled += 1;
                    if handled < ACK_BATCH {
                        // Frames already here are handled before the ACKs go out.
                        if let Some(more) = next(reader).now_or_never() {
                            next_frame = Some(more?);
                        }
                    }
                }
                writer.flush().await.map_err(|e| e.to_string())?;
            }
            _ = done.wait_for(|d| *d) => break,
        }
    }
    // A MESSAGE after every message arrived can only be a duplicate: counted.
    client
        .disconnect_with(|f| {
            tally.record(&f.body);
        })
        .await
        .map_err(|e| e.to_string())
}

/// Drains what `dialect.destination` holds (a leftover of an interrupted run), acking
/// it; returns how many messages it removed. Ends after 300 ms without a message.
pub async fn drain(addr: SocketAddr, dialect: &Dialect) -> Result<u64, String> {
    drain_with(addr, dialect, |_| {}).await
}

/// [`drain`], handing each message to `seen` before it is acked (to count what a
/// queue held).
pub async fn drain_with(
    addr: SocketAddr,
    dialect: &Dialect,
    mut seen: impl FnMut(&Frame),
) -> Result<u64, String> {
    let mut client = connect(addr, dialect).await?;
    let mut early = subscribe(
        &mut client,
        dialect,
        "drain",
        "client-individual",
        Some(1_000),
    )
    .await?
    .into_iter();
    let mut drained = 0;
    loop {
        let f = match early.next() {
            Some(f) => f,
            None => {
                let (reader, _) = client.halves();
                match tokio::time::timeout(Duration::from_millis(300), next(reader)).await {
                    Ok(f) => f?,
                    Err(_) => break,
                }
            }
        };
        if let Some(id) = f.get("ack") {
            seen(&f);
            client
                .send(Frame::new(Command::Ack).header("id", id))
                .await
                .map_err(|e| e.to_string())?;
            drained += 1;
        }
    }
    client.disconnect().await.map_err(|e| e.to_string())?;
    Ok(drained)
}

/// CPU seconds (user + system) of the calling thread so far (Linux; 0 elsewhere).
pub fn thread_cpu_s() -> f64 {
    cpu_s("/proc/thread-self/stat")
}

/// CPU seconds (user + system) of the process `stat` describes (`/proc/PID/stat`),
/// every thread together for a process.
pub fn cpu_s(stat: &str) -> f64 {
    let Ok(text) = std::fs::read_to_string(stat) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) in parentheses.
    let Some(rest) = text.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat; 12 and 13 after the name.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    ticks as f64 / 100.0 // USER_HZ is 100 on Linux.
}

/// Runs `load`: connects producers and consumers, then times the messages through.
/// Every message must arrive exactly once; `Err` says what went wrong (a stall, an
/// ERROR frame, a lost or duplicated message).
pub async fn run(load: Load, tally: Arc<Tally>) -> Result<LoadReport, String> {
    let cpu_before = thread_cpu_s();
    let load = Arc::new(load);
    let mut consumers = Vec::new();
    for i in 0..load.consumers {
        let mut client = connect(load.addr, &load.dialect).await?;
        let id = format!("c{i}");
        let early = subscribe(
            &mut client,
            &load.dialect,
            &id,
            "client-individual",
            Some(load.prefetch),
        )
        .await?;
        if !early.is_empty() {
            return Err(format!(
                "{} frames before anything was sent (the queue was not empty): {:?}",
                early.len(),
                early[0]
            ));
        }
        consumers.push(client);
    }
    let mut producers = Vec::new();
    for _ in 0..load.producers {
        producers.push(connect(load.addr, &load.dialect).await?);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (p, client) in producers.into_iter().enumerate() {
        let indices = super::tally::share(load.messages, load.producers, p);
        let task = produce(client, Arc::clone(&load), indices, Arc::clone(&tally));
        tasks.push(tokio::task::spawn_local(task));
    }
    for client in consumers {
        let task = consume(client, Arc::clone(&tally), tally.done());
        tasks.push(tokio::task::spawn_local(task));
    }
    let all = async {
        for task in tasks {
            task.await
                .map_err(|e| format!("a client task failed: {e}"))??;
        }
        Ok::<_, String>(())
    };
    tokio::select! {
        finished = all => finished?,
        stalled = super::tally::watchdog(&tally, load.stall) => return Err(stalled),
    }
    let elapsed = started.elapsed();
    let client_cpu_s = thread_cpu_s() - cpu_before;
    tally.check()?;
    Ok(LoadReport {
        elapsed,
        client_cpu_s,
    })
}

/// Runs `load` on a thread of its own (a current-thread tokio runtime), so the client
/// costs the same CPU whichever broker it measures; answers through the returned
/// channel.
pub fn spawn(
    load: Load,
    tally: Arc<Tally>,
) -> tokio::sync::oneshot::Receiver<Result<LoadReport, String>> {
    on_thread(move || run(load, tally))
}

/// Runs the future `make` builds on a new thread of its own (a current-thread tokio
/// runtime with a `LocalSet`, so it may `spawn_local`), and answers its output through
/// the returned channel (closed if the thread panics). What [`spawn`] runs a load on;
/// a benchmark's own client code goes the same way.
pub fn on_thread<F, Fut, T>(make: F) -> tokio::sync::oneshot::Receiver<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
    T: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let local = tokio::task::LocalSet::new();
        let _ = tx.send(local.block_on(&runtime, make()));
    });
    rx
}
