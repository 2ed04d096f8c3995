//! A small STOMP 1.2 load client for benchmarks: producers that pipeline SENDs with a
//! bounded window of outstanding receipts, and consumers that ack every message
//! individually (`client-individual`). It speaks through Ebb's own codec
//! (`ebb::stomp::codec`) over a tokio `TcpStream`, so the same client measures Ebb and
//! any other STOMP broker; what differs between brokers is a [`Dialect`].
//!
//! A run ([`run`]) connects everything first (CONNECT, SUBSCRIBE with a receipt), then
//! times from the first SEND until every consumer's DISCONNECT receipt: a broker
//! answers DISCONNECT after the frames before it, so the time covers the last ACK.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb::stomp::codec::{Incoming, Limits, Outgoing, StompCodec};
use ebb::stomp::frame::{Command, Frame, Version};
use futures::{FutureExt, SinkExt, StreamExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};
use tokio_util::codec::{FramedRead, FramedWrite};

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

/// One STOMP connection, read and written through Ebb's codec.
pub struct Conn {
    reader: FramedRead<OwnedReadHalf, StompCodec>,
    writer: FramedWrite<OwnedWriteHalf, StompCodec>,
}

fn codec() -> StompCodec {
    let mut codec = StompCodec::new(Limits::default());
    codec.version = Version::V1_2;
    codec
}

impl Conn {
    /// Connects and logs in; `Err` says why not (refused, ERROR frame, no answer).
    pub async fn connect(addr: SocketAddr, dialect: &Dialect) -> Result<Self, String> {
        let stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
            .await
            .map_err(|_| format!("no answer from {addr} within 5 s"))?
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (read, write) = stream.into_split();
        let mut conn = Self {
            reader: FramedRead::new(read, codec()),
            writer: FramedWrite::new(write, codec()),
        };
        let mut connect = Frame::new(Command::Connect)
            .header("accept-version", "1.2")
            .header("host", dialect.host.clone())
            .header("heart-beat", "0,0");
        if let Some((login, passcode)) = &dialect.login {
            connect = connect
                .header("login", login.clone())
                .header("passcode", passcode.clone());
        }
        conn.write(connect).await?;
        let answer = tokio::time::timeout(Duration::from_secs(5), conn.frame())
            .await
            .map_err(|_| format!("no CONNECTED from {addr} within 5 s"))??;
        match answer.command {
            Command::Connected => Ok(conn),
            _ => Err(format!("{addr} answered CONNECT with {answer:?}")),
        }
    }

    async fn write(&mut self, frame: Frame) -> Result<(), String> {
        self.writer
            .send(Outgoing::Frame(frame))
            .await
            .map_err(|e| format!("write failed: {e}"))
    }

    /// The next frame (heart-beats skipped); an ERROR frame or a closed connection is
    /// an `Err`.
    pub async fn frame(&mut self) -> Result<Frame, String> {
        loop {
            match self.reader.next().await {
                Some(Ok(Incoming::Frame(f))) if f.command == Command::Error => {
                    return Err(format!(
                        "ERROR frame: {} {}",
                        f.get("message").unwrap_or_default(),
                        String::from_utf8_lossy(&f.body)
                    ))
                }
                Some(Ok(Incoming::Frame(f))) => return Ok(f),
                Some(Ok(Incoming::Heartbeat)) => continue,
                Some(Err(e)) => return Err(format!("bad frame from the broker: {e}")),
                None => return Err("the broker closed the connection".into()),
            }
        }
    }

    /// Waits for the RECEIPT `id`; other frames are handed to `other`.
    async fn receipt(&mut self, id: &str, mut other: impl FnMut(Frame)) -> Result<(), String> {
        loop {
            let f = self.frame().await?;
            if f.command == Command::Receipt && f.get("receipt-id") == Some(id) {
                return Ok(());
            }
            other(f);
        }
    }

    /// SUBSCRIBE, answered by its receipt (so the consumer is attached before timing);
    /// answers the frames that came before the receipt.
    pub async fn subscribe(
        &mut self,
        dialect: &Dialect,
        id: &str,
        ack: &str,
        prefetch: u32,
    ) -> Result<Vec<Frame>, String> {
        let mut subscribe = Frame::new(Command::Subscribe)
            .header("id", id)
            .header("destination", dialect.destination.clone())
            .header("ack", ack)
            .header(dialect.prefetch_header.clone(), prefetch.to_string())
            .header("receipt", format!("sub-{id}"));
        for (name, value) in &dialect.subscribe_headers {
            subscribe = subscribe.header(name.clone(), value.clone());
        }
        self.write(subscribe).await?;
        let mut early = Vec::new();
        self.receipt(&format!("sub-{id}"), |f| early.push(f))
            .await?;
        Ok(early)
    }

    /// DISCONNECT with a receipt; frames before the receipt go to `other`.
    pub async fn disconnect(mut self, other: impl FnMut(Frame)) -> Result<(), String> {
        self.write(Frame::new(Command::Disconnect).header("receipt", "bye"))
            .await?;
        self.receipt("bye", other).await
    }
}

/// Sends messages `indices` with a receipt each, at most `window` without their receipt.
async fn produce(
    conn: Conn,
    load: Arc<Load>,
    indices: std::ops::Range<u64>,
    tally: Arc<Tally>,
) -> Result<(), String> {
    let Conn {
        mut reader,
        mut writer,
    } = conn;
    let count = indices.end - indices.start;
    let window = Arc::new(Semaphore::new(load.window.max(1)));
    let send = {
        let window = Arc::clone(&window);
        let load = Arc::clone(&load);
        async move {
            for index in indices {
                match window.try_acquire() {
                    Ok(permit) => permit.forget(),
                    Err(_) => {
                        // The window is full: put what is written on the wire, then wait.
                        writer.flush().await.map_err(|e| e.to_string())?;
                        window.acquire().await.expect("never closed").forget();
                    }
                }
                let mut frame = Frame::new(Command::Send)
                    .header("destination", load.dialect.destination.clone())
                    .header("receipt", index.to_string());
                for (name, value) in &load.dialect.send_headers {
                    frame = frame.header(name.clone(), value.clone());
                }
                let frame = frame.body(super::tally::body(index, load.body_bytes));
                writer
                    .feed(Outgoing::Frame(frame))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            writer.flush().await.map_err(|e| e.to_string())?;
            Ok::<_, String>(writer)
        }
    };
    let confirm = async {
        let mut confirmed = 0;
        while confirmed < count {
            match reader.next().await {
                Some(Ok(Incoming::Frame(f))) if f.command == Command::Receipt => {
                    confirmed += 1;
                    tally.confirmed.fetch_add(1, Ordering::Relaxed);
                    window.add_permits(1);
                }
                Some(Ok(Incoming::Heartbeat)) => {}
                Some(Ok(Incoming::Frame(f))) => {
                    return Err(format!(
                        "producer got {} {:?}",
                        f.command.as_str(),
                        f.headers
                    ))
                }
                Some(Err(e)) => return Err(format!("bad frame from the broker: {e}")),
                None => return Err("the broker closed a producer's connection".into()),
            }
        }
        Ok(())
    };
    let (writer, ()) = tokio::try_join!(send, confirm)?;
    Conn { reader, writer }.disconnect(|_| {}).await
}

/// Receives and acks (one ACK per MESSAGE) until every message has arrived somewhere.
async fn consume(
    mut conn: Conn,
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
        tokio::select! {
            first = conn.frame() => {
                let mut next = Some(first?);
                let mut handled = 0;
                while let Some(f) = next.take() {
                    if f.command != Command::Message {
                        return Err(format!("consumer got {} {:?}", f.command.as_str(), f.headers));
                    }
                    if tally.record(&f.body) == Seen::Foreign {
                        return Err(format!("a message this run never sent: {:?}", f.headers));
                    }
                    conn.writer.feed(Outgoing::Frame(ack(&f)?)).await.map_err(|e| e.to_string())?;
                    tally.acked.fetch_add(1, Ordering::Relaxed);
                    handled += 1;
                    if handled < ACK_BATCH {
                        // Frames already here are handled before the ACKs go out.
                        if let Some(more) = conn.frame().now_or_never() {
                            next = Some(more?);
                        }
                    }
                }
                conn.writer.flush().await.map_err(|e| e.to_string())?;
            }
            _ = done.wait_for(|d| *d) => break,
        }
    }
    // A MESSAGE after every message arrived can only be a duplicate: counted.
    conn.disconnect(|f| {
        tally.record(&f.body);
    })
    .await
}

/// Drains what `dialect.destination` holds (a leftover of an interrupted run), acking
/// it; returns how many messages it removed. Ends after 300 ms without a message.
pub async fn drain(addr: SocketAddr, dialect: &Dialect) -> Result<u64, String> {
    let mut conn = Conn::connect(addr, dialect).await?;
    let mut early = conn
        .subscribe(dialect, "drain", "client-individual", 1_000)
        .await?
        .into_iter();
    let mut drained = 0;
    loop {
        let f = match early.next() {
            Some(f) => f,
            None => match tokio::time::timeout(Duration::from_millis(300), conn.frame()).await {
                Ok(f) => f?,
                Err(_) => break,
            },
        };
        if let Some(id) = f.get("ack") {
            conn.write(Frame::new(Command::Ack).header("id", id))
                .await?;
            drained += 1;
        }
    }
    conn.disconnect(|_| {}).await?;
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
        let mut conn = Conn::connect(load.addr, &load.dialect).await?;
        let id = format!("c{i}");
        let early = conn
            .subscribe(&load.dialect, &id, "client-individual", load.prefetch)
            .await?;
        if !early.is_empty() {
            return Err(format!(
                "{} frames before anything was sent (the queue was not empty): {:?}",
                early.len(),
                early[0]
            ));
        }
        consumers.push(conn);
    }
    let mut producers = Vec::new();
    for _ in 0..load.producers {
        producers.push(Conn::connect(load.addr, &load.dialect).await?);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (p, conn) in producers.into_iter().enumerate() {
        let indices = super::tally::share(load.messages, load.producers, p);
        let task = produce(conn, Arc::clone(&load), indices, Arc::clone(&tally));
        tasks.push(tokio::task::spawn_local(task));
    }
    for conn in consumers {
        let task = consume(conn, Arc::clone(&tally), tally.done());
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
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let local = tokio::task::LocalSet::new();
        let _ = tx.send(local.block_on(&runtime, run(load, tally)));
    });
    rx
}
