//! Destinations at scale (issue 52): what many destinations cost `ebb serve` in memory
//! and in idle CPU, beside RabbitMQ's classic queues in the same run.
//!
//! Workload, on `ebb serve` (the release binary of this build, a process of the run's
//! own, SQLite in a temporary folder, HTTP on so that `/metrics` is refreshed every
//! second as in production): D queues (`EBB_BENCH_DESTINATIONS`, default 10,000) get
//! 10 persistent messages each over STOMP (4 connections, receipts pipelined), and one
//! topic gets 1,000 durable subscriptions, left offline, and then 10 messages. Figures:
//!
//! - **peak while filling**: the process's peak resident memory (`VmHWM`);
//! - **idle CPU**: the share of one core the broker used over `EBB_BENCH_IDLE_SECONDS`
//!   (default 30) with nobody connected (`utime + stime` of `/proc/PID/stat`), over
//!   two windows one after the other: right after the fill (the stats reading reads
//!   each queue written to once more) and then;
//! - **one scrape**: the time and bytes of one `GET /metrics`;
//! - **after a restart**: resident memory (`VmRSS`) of a new process on the same store,
//!   once it answers, nothing touched;
//! - **after touching each**: resident memory once every queue was browsed once over
//!   STOMP (`browser:true`, which starts its actor), and that growth per queue;
//! - **once they sleep**: resident memory once every queue is asleep again
//!   (`ebb_destinations_asleep` on `/metrics`), and that growth per queue over the
//!   restart's. The broker runs with `inactive_timeout_before_sleep = "2s"` for all
//!   queues (`EBB_BENCH_SLEEP_AFTER`, a duration; default 60 s in production), so
//!   queues also sleep during the fill.
//!
//! RabbitMQ (its STOMP plugin on 127.0.0.1:61623: `bash benches/peers/rabbitmq-stomp.sh`;
//! missing, its row is skipped, saying so) gets the same D queues × 10 persistent
//! messages, durable (`/queue/` with `durable:true`); the figure is the node's
//! resident memory after minus before, per queue. The queues are deleted afterwards
//! (`rabbitmqctl eval`), and expire by themselves 30 min after the run should that
//! fail (`x-expires`).
//!
//! Run: `cargo bench --bench destinations`; `EBB_BENCH_DESTINATIONS=100000` for the
//! issue's 100,000; `EBB_BENCH_ONLY=ebb` or `rabbitmq` for one side.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::procfs;
use common::report::{env, only, thousands, wanted};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Messages per queue.
const PER_QUEUE: usize = 10;
/// Offline durable subscriptions of the one topic (Ebb).
const SUBSCRIPTIONS: usize = 1_000;
/// Client connections that fill (and browse) in parallel.
const CONNECTIONS: usize = 4;
/// SENDs written before their receipts are read.
const WINDOW: usize = 500;
const RABBITMQ_STOMP: &str = "127.0.0.1:61623";

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let queues: usize = env("EBB_BENCH_DESTINATIONS", 10_000usize).max(CONNECTIONS);
    let idle_s: u64 = env("EBB_BENCH_IDLE_SECONDS", 30u64).max(1);
    let only = only("EBB_BENCH_ONLY");
    println!(
        "destinations: {} queues × {PER_QUEUE} persistent messages, plus (Ebb) one topic with {} offline durable subscriptions",
        thousands(queues as f64),
        thousands(SUBSCRIPTIONS as f64)
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    if wanted(&only, "ebb") {
        rows.push(runtime.block_on(ebb(queues, idle_s)));
    }
    if wanted(&only, "rabbitmq") {
        match runtime.block_on(rabbitmq(queues)) {
            Ok(row) => rows.push(row),
            Err(why) => println!("RabbitMQ: skipped: {why}"),
        }
    }
    println!();
    for row in rows {
        println!("{row}");
    }
}

/// Ebb's figures, as one line.
async fn ebb(queues: usize, idle_s: u64) -> String {
    let dir = std::env::temp_dir().join(format!("ebb-bench-destinations-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sleep_after = std::env::var("EBB_BENCH_SLEEP_AFTER").unwrap_or_else(|_| "2s".into());
    std::fs::write(
        dir.join("ebb.toml"),
        format!("[[policy]]\ndestination = \"queue://>\"\ninactive_timeout_before_sleep = \"{sleep_after}\"\n"),
    )
    .unwrap();
    let (stomp, http) = (free_addr(), free_addr());
    let mut broker = serve(&dir, stomp, http).await;
    let pid = broker.id();

    let started = Instant::now();
    let names: Vec<String> = (0..queues).map(|i| format!("/queue/d.{i:06}")).collect();
    fill(stomp, None, "localhost", &names, &[]).await;
    let mut c = Stomp::connect(stomp, None, "localhost", Some("bench")).await;
    for i in 0..SUBSCRIPTIONS {
        let id = format!("s{i}");
        let mut headers = vec![
            ("id", id.as_str()),
            ("destination", "/topic/d.topic"),
            ("activemq.subscriptionName", id.as_str()),
        ];
        if i + 1 == SUBSCRIPTIONS {
            headers.push(("receipt", "subscribed"));
        }
        c.frame("SUBSCRIBE", &headers, b"").await;
    }
    c.flush().await;
    c.expect("RECEIPT").await;
    c.disconnect().await;
    fill(
        stomp,
        None,
        "localhost",
        &["/topic/d.topic".to_string()],
        &[],
    )
    .await;
    let fill_s = started.elapsed().as_secs_f64();
    let peak_fill = peak_bytes(pid);
    println!(
        "Ebb: filled in {fill_s:.1} s ({} msg/s); peak resident {}",
        thousands(((queues + 1) * PER_QUEUE) as f64 / fill_s),
        mib(peak_fill)
    );

    // Idle: nobody connected, the HTTP server refreshing its metrics every second.
    // The first window holds the reading's catching up with the fill (each queue
    // written to is read again once: one COUNT each); the second is the steady idle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu = cpu_s(pid);
    tokio::time::sleep(Duration::from_secs(idle_s)).await;
    let cpu_first = cpu_s(pid);
    let first_cpu = (cpu_first - cpu) / idle_s as f64 * 100.0;
    tokio::time::sleep(Duration::from_secs(idle_s)).await;
    let idle_cpu = (cpu_s(pid) - cpu_first) / idle_s as f64 * 100.0;
    let scrape = Instant::now();
    let metrics_bytes = http_get(http, "/metrics").await.len();
    let scrape_ms = scrape.elapsed().as_secs_f64() * 1000.0;
    println!(
        "Ebb: idle CPU {idle_cpu:.1} % of a core over {idle_s} s (the {idle_s} s before, right after the fill: {first_cpu:.1} %); one /metrics scrape {scrape_ms:.0} ms, {} bytes",
        thousands(metrics_bytes as f64)
    );

    stop(&mut broker);
    let mut broker = serve(&dir, stomp, http).await;
    let pid = broker.id();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restarted = rss(pid);
    let started = Instant::now();
    browse_each(stomp, &names).await;
    let touched = rss(pid);
    println!(
        "Ebb: after a restart {}; after browsing each queue once ({:.1} s) {}, {} bytes per queue",
        mib(restarted),
        started.elapsed().as_secs_f64(),
        mib(touched),
        thousands(touched.saturating_sub(restarted) as f64 / queues as f64)
    );
    let started = Instant::now();
    let all_asleep = loop {
        let metrics = String::from_utf8_lossy(&http_get(http, "/metrics").await).into_owned();
        let asleep = metrics
            .lines()
            .find_map(|l| l.strip_prefix("ebb_destinations_asleep "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0) as usize;
        if asleep >= queues || started.elapsed() > Duration::from_secs(120) {
            break asleep;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let slept = rss(pid);
    println!(
        "Ebb: {} queues asleep after {:.1} s: {}, {} bytes per queue over the restart's",
        thousands(all_asleep as f64),
        started.elapsed().as_secs_f64(),
        mib(slept),
        thousands(slept.saturating_sub(restarted) as f64 / queues as f64)
    );
    stop(&mut broker);
    let _ = std::fs::remove_dir_all(&dir);
    format!(
        "Ebb (SQLite), {} queues, asleep after {sleep_after} idle: peak while filling {}; idle CPU {idle_cpu:.1} % (right after the fill {first_cpu:.1} %); /metrics {scrape_ms:.0} ms, {} bytes; after a restart {}; after touching each {} ({} bytes per queue); once {} sleep {} ({} bytes per queue)",
        thousands(queues as f64),
        mib(peak_fill),
        thousands(metrics_bytes as f64),
        mib(restarted),
        mib(touched),
        thousands(touched.saturating_sub(restarted) as f64 / queues as f64),
        thousands(all_asleep as f64),
        mib(slept),
        thousands(slept.saturating_sub(restarted) as f64 / queues as f64)
    )
}

/// RabbitMQ's figure, as one line; `Err` says why it could not run.
async fn rabbitmq(queues: usize) -> Result<String, String> {
    let addr: SocketAddr = RABBITMQ_STOMP.parse().unwrap();
    TcpStream::connect(addr).await.map_err(|e| {
        format!("no STOMP at {addr} ({e}): run `bash benches/peers/rabbitmq-stomp.sh`")
    })?;
    let pid = procfs::rabbitmq_pid().ok_or("no RabbitMQ node process found")?;
    let prefix = format!("ebb-bench-d{}.", std::process::id());
    let names: Vec<String> = (0..queues)
        .map(|i| format!("/queue/{prefix}{i:06}"))
        .collect();
    let before = rss(pid);
    let started = Instant::now();
    let declare = [
        ("durable", "true"),
        ("auto-delete", "false"),
        ("x-expires", "1800000"),
    ];
    fill(addr, Some(("guest", "guest")), "/", &names, &declare).await;
    let fill_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss(pid);
    let per_queue = after.saturating_sub(before) as f64 / queues as f64;
    println!(
        "RabbitMQ: filled in {fill_s:.1} s; resident {} before, {} after: {} bytes per queue",
        mib(before),
        mib(after),
        thousands(per_queue)
    );
    let deleted = Command::new("rabbitmqctl")
        .args([
            "eval",
            &format!(
                "length([rabbit_amqqueue:delete(Q, false, false, <<\"bench\">>) || Q <- rabbit_amqqueue:list(<<\"/\">>), binary:match(element(4, amqqueue:get_name(Q)), <<\"{prefix}\">>) =/= nomatch])."
            ),
        ])
        .output();
    match deleted {
        Ok(out) if out.status.success() => println!(
            "RabbitMQ: deleted {} bench queues",
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        _ => println!(
            "RabbitMQ: could not delete the bench queues; they expire 30 min after the run"
        ),
    }
    Ok(format!(
        "RabbitMQ {}, {} classic queues: resident {} before, {} after, {} bytes per queue",
        rabbitmq_version(),
        thousands(queues as f64),
        mib(before),
        mib(after),
        thousands(per_queue)
    ))
}

fn rabbitmq_version() -> String {
    Command::new("rabbitmqctl")
        .arg("version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().last().map(str::to_string))
        .unwrap_or_default()
}

/// `PER_QUEUE` persistent SENDs to each of `names`, over `CONNECTIONS` connections,
/// each SEND with a receipt (read `WINDOW` at a time).
async fn fill(
    addr: SocketAddr,
    login: Option<(&str, &str)>,
    host: &str,
    names: &[String],
    extra: &[(&str, &str)],
) {
    let share = names.len().div_ceil(CONNECTIONS);
    let tasks: Vec<_> = names
        .chunks(share)
        .map(|chunk| {
            let chunk = chunk.to_vec();
            let login = login.map(|(u, p)| (u.to_string(), p.to_string()));
            let host = host.to_string();
            let extra: Vec<(String, String)> = extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            tokio::spawn(async move {
                let login = login.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
                let mut c = Stomp::connect(addr, login, &host, None).await;
                let mut outstanding = 0;
                for name in &chunk {
                    for i in 0..PER_QUEUE {
                        let mut headers: Vec<(&str, &str)> = vec![
                            ("destination", name),
                            ("persistent", "true"),
                            ("receipt", "r"),
                        ];
                        headers.extend(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                        c.frame(
                            "SEND",
                            &headers,
                            format!("message {i} of {name}").as_bytes(),
                        )
                        .await;
                        outstanding += 1;
                        if outstanding == WINDOW {
                            c.flush().await;
                            for _ in 0..outstanding {
                                c.expect("RECEIPT").await;
                            }
                            outstanding = 0;
                        }
                    }
                }
                c.flush().await;
                for _ in 0..outstanding {
                    c.expect("RECEIPT").await;
                }
                c.disconnect().await;
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// Browses each queue once (`browser:true`, read to its `browser:end`).
async fn browse_each(addr: SocketAddr, names: &[String]) {
    let share = names.len().div_ceil(CONNECTIONS);
    let tasks: Vec<_> = names
        .chunks(share)
        .map(|chunk| {
            let chunk = chunk.to_vec();
            tokio::spawn(async move {
                let mut c = Stomp::connect(addr, None, "localhost", None).await;
                for name in &chunk {
                    c.frame(
                        "SUBSCRIBE",
                        &[("id", "b"), ("destination", name), ("browser", "true")],
                        b"",
                    )
                    .await;
                    c.flush().await;
                    let mut seen = 0;
                    loop {
                        let (command, headers) = c.read().await;
                        assert_eq!(command, "MESSAGE", "{headers:?}");
                        if headers.iter().any(|(k, v)| k == "browser" && v == "end") {
                            break;
                        }
                        seen += 1;
                    }
                    assert_eq!(seen, PER_QUEUE, "{name}");
                    c.frame("UNSUBSCRIBE", &[("id", "b")], b"").await;
                }
                c.disconnect().await;
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// A STOMP 1.2 client just big enough for this bench.
struct Stomp {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::io::BufWriter<tokio::net::tcp::OwnedWriteHalf>,
}

impl Stomp {
    async fn connect(
        addr: SocketAddr,
        login: Option<(&str, &str)>,
        host: &str,
        client_id: Option<&str>,
    ) -> Self {
        let (r, w) = TcpStream::connect(addr)
            .await
            .expect("connect")
            .into_split();
        let mut c = Self {
            reader: BufReader::new(r),
            writer: tokio::io::BufWriter::new(w),
        };
        let mut headers = vec![("accept-version", "1.2"), ("host", host)];
        if let Some((user, pass)) = login {
            headers.push(("login", user));
            headers.push(("passcode", pass));
        }
        if let Some(id) = client_id {
            headers.push(("client-id", id));
        }
        c.frame("CONNECT", &headers, b"").await;
        c.flush().await;
        c.expect("CONNECTED").await;
        c
    }

    async fn frame(&mut self, command: &str, headers: &[(&str, &str)], body: &[u8]) {
        let mut out = Vec::with_capacity(64 + body.len());
        out.extend_from_slice(command.as_bytes());
        out.push(b'\n');
        for (k, v) in headers {
            out.extend_from_slice(format!("{k}:{v}\n").as_bytes());
        }
        if !body.is_empty() {
            out.extend_from_slice(format!("content-length:{}\n", body.len()).as_bytes());
        }
        out.push(b'\n');
        out.extend_from_slice(body);
        out.push(0);
        self.writer.write_all(&out).await.expect("write");
    }

    async fn flush(&mut self) {
        self.writer.flush().await.expect("flush");
    }

    /// The next frame's command and headers (its body is skipped).
    async fn read(&mut self) -> (String, Vec<(String, String)>) {
        let mut line = String::new();
        let command = loop {
            line.clear();
            assert!(
                self.reader.read_line(&mut line).await.expect("read") > 0,
                "closed"
            );
            let l = line.trim_matches(|c| c == '\n' || c == '\r' || c == '\0');
            if !l.is_empty() {
                break l.to_string();
            }
        };
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).await.expect("read");
            let l = line.trim_end_matches(['\n', '\r']);
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.push((k.to_string(), v.to_string()));
            }
        }
        let length = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok());
        match length {
            Some(n) => {
                let mut body = vec![0; n + 1];
                self.reader.read_exact(&mut body).await.expect("body");
            }
            None => {
                let mut body = Vec::new();
                self.reader.read_until(0, &mut body).await.expect("body");
            }
        }
        (command, headers)
    }

    async fn expect(&mut self, command: &str) {
        let (got, headers) = self.read().await;
        assert_eq!(got, command, "{headers:?}");
    }

    /// A DISCONNECT with a receipt, read.
    async fn disconnect(mut self) {
        self.frame("DISCONNECT", &[("receipt", "bye")], b"").await;
        self.flush().await;
        self.expect("RECEIPT").await;
    }
}

/// A free port of 127.0.0.1 (bound, then let go).
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Starts `ebb serve` on the store in `dir`, and waits until its STOMP port answers.
async fn serve(dir: &Path, stomp: SocketAddr, http: SocketAddr) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_ebb"))
        .args([
            "serve",
            "--store",
            &format!("sqlite://{}/ebb.db", dir.display()),
            "--stomp",
            &stomp.to_string(),
            "--http",
            &http.to_string(),
            "--config",
            &dir.join("ebb.toml").display().to_string(),
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ebb serve starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    while TcpStream::connect(stomp).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "ebb serve never listened on {stomp}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child
}

/// Stops `ebb serve` gracefully (SIGTERM) and waits for it.
fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// `GET path` over HTTP/1.1, the whole body.
async fn http_get(addr: SocketAddr, path: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).await.unwrap();
    let at = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(0, |i| i + 4);
    all.split_off(at)
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn rss(pid: u32) -> u64 {
    procfs::rss_bytes(pid).unwrap_or(0)
}

fn peak_bytes(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:") * 1024
}

/// CPU seconds process `pid` used (user + system).
fn cpu_s(pid: u32) -> f64 {
    common::stomp_load::cpu_s(&format!("/proc/{pid}/stat"))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}
