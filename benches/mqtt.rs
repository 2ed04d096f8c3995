//! MQTT (issue 34), Ebb beside Mosquitto on the same machine and in the same run, the
//! same client code for both:
//!
//! - **QoS 1 publish**: 1 and 10 publishers send N messages of 1 KiB at QoS 1 (each
//!   with up to 64 unacknowledged: PUBACKs pipelined), to one subscriber of a
//!   persistent session (clean session 0) at QoS 1 that PUBACKs each delivery, so
//!   both brokers must keep every message until it is acknowledged. The figure is
//!   N / (first publish to last delivery). Ebb stores on SQLite (`synchronous=FULL`):
//!   each PUBACK comes after a commit to disk. Mosquitto runs with `persistence true`,
//!   which writes its in-memory state to disk at its `autosave_interval` (30 min by
//!   default) and at shutdown, not per message: a crash loses what it held since.
//! - **Fan-out at QoS 0**: 1 publisher, 100 subscribers (clean sessions, QoS 0), M
//!   messages of 1 KiB; deliveries/s = deliveries received / (first publish to last
//!   delivery), with how many of the M × 100 arrived (QoS 0 may drop).
//! - **Idle connections**: 10,000 MQTT connections (CONNECT with keep-alive 60 s, then
//!   silent), opened by a child process: the broker's resident memory after, minus
//!   before, per connection. Ebb runs in this process (its RSS); Mosquitto is its
//!   own process (`/proc/PID/status`).
//!
//! Mosquitto is a process of the run's own (`/usr/sbin/mosquitto`, Debian's package;
//! `EBB_BENCH_MOSQUITTO_BIN` names another; missing: its rows are skipped, saying
//! so), on a free port, with `persistence true`, `max_queued_messages 0` (its
//! default, 1,000, drops QoS 1 messages queued past it for a session: Ebb drops
//! none) and `max_inflight_messages 64` (the bench's window).
//!
//! Run: `cargo bench --bench mqtt`. Settings:
//! `EBB_BENCH_MQTT_MESSAGES` (N, default 20,000), `EBB_BENCH_MQTT_FANOUT_MESSAGES` (M,
//! default 2,000), `EBB_BENCH_MQTT_IDLE` (default 10,000), `EBB_BENCH_ROUNDS` (default
//! 3; the median is shown), `EBB_BENCH_MQTT_ONLY` (`publish`, `fanout`, `idle`: the rows to run).

mod common;

use std::net::SocketAddr;
use std::num::NonZeroU16;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use bytestring::ByteString;
use common::ebb_run;
use common::procfs;
use common::report::{env, only, thousands, wanted};
use common::stomp_load::on_thread;
use futures::{FutureExt, SinkExt, StreamExt};
use rmqtt_codec::types::QoS;
use rmqtt_codec::{v3, MqttCodec, MqttPacket};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

const BODY: usize = 1024;
const WINDOW: usize = 64;
const FANOUT_SUBSCRIBERS: usize = 100;
/// A run that makes no progress for this long fails (or, for QoS 0, ends).
const STALL: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Peer {
    Ebb,
    Mosquitto,
}

impl Peer {
    fn label(self) -> &'static str {
        match self {
            Peer::Ebb => "Ebb (SQLite)",
            Peer::Mosquitto => "Mosquitto",
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    if let Ok(spec) = std::env::var("EBB_BENCH_MQTT_IDLE_CHILD") {
        idle_child(&spec);
        return;
    }
    let messages: usize = env("EBB_BENCH_MQTT_MESSAGES", 20_000usize).max(10);
    let fanout: usize = env("EBB_BENCH_MQTT_FANOUT_MESSAGES", 2_000usize).max(1);
    let idle: usize = env("EBB_BENCH_MQTT_IDLE", 10_000usize).max(1);
    let rounds: usize = env("EBB_BENCH_ROUNDS", 3usize).max(1);
    let binary =
        std::env::var("EBB_BENCH_MOSQUITTO_BIN").unwrap_or_else(|_| "/usr/sbin/mosquitto".into());
    let only = only("EBB_BENCH_MQTT_ONLY");
    println!(
        "MQTT beside Mosquitto: QoS 1 publish of {} × {BODY} B (1 and 10 publishers), fan-out QoS 0 of {} × {BODY} B to {FANOUT_SUBSCRIBERS}, {} idle connections; median of {rounds} rounds; {} cores",
        thousands(messages as f64),
        thousands(fanout as f64),
        thousands(idle as f64),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    procfs::raise_open_files(idle as u64 + 4_096);
    actix_rt::System::new().block_on(bench(messages, fanout, idle, rounds, binary, only));
}

/// One measured row: its name, the broker, the figure and a note.
#[derive(Clone, Debug)]
struct Row {
    name: String,
    peer: Peer,
    figure: f64,
    unit: &'static str,
    note: String,
}

async fn bench(
    messages: usize,
    fanout: usize,
    idle: usize,
    rounds: usize,
    binary: String,
    only: Vec<String>,
) {
    let dir = ebb_run::fresh_dir("mqtt");
    let store = ebb_run::Store::Sqlite;
    let mut peers = vec![Peer::Ebb];
    // A Mosquitto of the run's own: a fresh process (its memory is the run's), with
    // persistence on and no limit on a session's queue (its default, 1,000, drops
    // QoS 1 messages past it, which Ebb never does).
    let mut mosquitto = match Mosquitto::start(&binary, &dir).await {
        Ok(m) => {
            peers.push(Peer::Mosquitto);
            Some(m)
        }
        Err(e) => {
            println!("Mosquitto rows skipped: {e}");
            None
        }
    };
    let mosquitto_addr = mosquitto
        .as_ref()
        .map_or("127.0.0.1:1".parse().unwrap(), |m| m.addr);
    let mut rows: Vec<Row> = Vec::new();
    if wanted(&only, "idle") {
        for &peer in &peers {
            let ebb = ebb_run::start(&store, &dir, "mqtt-idle", 0).await;
            let listener = ebb.listen_mqtt().await.expect("Ebb's MQTT listener");
            let (addr, pid) = match peer {
                Peer::Ebb => (listener.addr, std::process::id()),
                Peer::Mosquitto => (
                    mosquitto_addr,
                    mosquitto
                        .as_ref()
                        .and_then(|m| m.child.id())
                        .expect("Mosquitto's process"),
                ),
            };
            match idle_memory(addr, pid, idle).await {
                Ok(per) => {
                    println!("{}: {:.0} bytes per idle connection", peer.label(), per);
                    rows.push(Row {
                        name: format!(
                            "{} idle connections, memory per connection",
                            thousands(idle as f64)
                        ),
                        peer,
                        figure: per,
                        unit: "bytes",
                        note: String::new(),
                    });
                }
                Err(e) => println!("{}: idle connections failed: {e}", peer.label()),
            }
            listener.stop().await;
            ebb.finish().await;
        }
    }
    let mut runs: Vec<Row> = Vec::new();
    for round in 0..rounds {
        let ebb = ebb_run::start(&store, &dir, "mqtt", round).await;
        let listener = ebb.listen_mqtt().await.expect("Ebb's MQTT listener");
        for &peer in &peers {
            let addr = match peer {
                Peer::Ebb => listener.addr,
                Peer::Mosquitto => mosquitto_addr,
            };
            if wanted(&only, "publish") {
                for publishers in [1usize, 10] {
                    let tag = format!("r{round}-{}", std::process::id());
                    let run = on_thread(move || publish_qos1(addr, publishers, messages, tag))
                        .await
                        .map_err(|_| "the client thread panicked".to_string())
                        .and_then(|r| r);
                    let name = format!(
                        "QoS 1 publish, 1 KiB, {publishers} publisher{}",
                        if publishers > 1 { "s" } else { "" }
                    );
                    match run {
                        Ok(rate) => {
                            println!(
                                "round {round} {} {name}: {} msg/s",
                                peer.label(),
                                thousands(rate)
                            );
                            runs.push(Row {
                                name,
                                peer,
                                figure: rate,
                                unit: "msg/s",
                                note: String::new(),
                            });
                        }
                        Err(e) => println!("round {round} {} {name}: failed: {e}", peer.label()),
                    }
                }
            }
            if wanted(&only, "fanout") {
                let run = on_thread(move || fan_out(addr, fanout))
                    .await
                    .map_err(|_| "the client thread panicked".to_string())
                    .and_then(|r| r);
                let name = format!("fan-out QoS 0, 1 KiB, 1 → {FANOUT_SUBSCRIBERS}");
                match run {
                    Ok((rate, got)) => {
                        let expected = fanout * FANOUT_SUBSCRIBERS;
                        println!(
                            "round {round} {} {name}: {} deliveries/s, {} of {} delivered",
                            peer.label(),
                            thousands(rate),
                            thousands(got as f64),
                            thousands(expected as f64)
                        );
                        runs.push(Row {
                            name,
                            peer,
                            figure: rate,
                            unit: "deliveries/s",
                            note: format!(
                                "{:.1} % delivered",
                                100.0 * got as f64 / expected as f64
                            ),
                        });
                    }
                    Err(e) => println!("round {round} {} {name}: failed: {e}", peer.label()),
                }
            }
        }
        listener.stop().await;
        ebb.finish().await;
    }
    if let Some(m) = mosquitto.as_mut() {
        let _ = m.child.kill().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    // The median round of each (row, broker).
    let mut keys: Vec<(String, Peer)> = Vec::new();
    for r in &runs {
        if !keys.iter().any(|(n, p)| *n == r.name && *p == r.peer) {
            keys.push((r.name.clone(), r.peer));
        }
    }
    for (name, peer) in keys {
        let mut of: Vec<Row> = runs
            .iter()
            .filter(|r| r.name == name && r.peer == peer)
            .cloned()
            .collect();
        of.sort_by(|a, b| a.figure.total_cmp(&b.figure));
        let rounds: Vec<String> = of.iter().map(|r| thousands(r.figure)).collect();
        let mut median = of[of.len() / 2].clone();
        median.note = format!(
            "{}rounds {}",
            if median.note.is_empty() {
                String::new()
            } else {
                format!("{}; ", median.note)
            },
            rounds.join(", ")
        );
        rows.push(median);
    }
    println!();
    println!("| what | broker | figure | Ebb / Mosquitto | note |");
    println!("|---|---|---|---|---|");
    let mut json = Vec::new();
    for r in &rows {
        let other = rows
            .iter()
            .find(|o| o.name == r.name && o.peer == Peer::Mosquitto);
        let ratio = match (r.peer, other) {
            (Peer::Ebb, Some(m)) if r.unit == "bytes" => {
                format!("{:.2} (memory)", r.figure / m.figure)
            }
            (Peer::Ebb, Some(m)) => format!("{:.2}", r.figure / m.figure),
            _ => String::new(),
        };
        println!(
            "| {} | {} | {} {} | {ratio} | {} |",
            r.name,
            r.peer.label(),
            thousands(r.figure),
            r.unit,
            r.note
        );
        json.push(serde_json::json!({"what": r.name, "broker": r.peer.label(), "figure": r.figure, "unit": r.unit, "note": r.note}));
    }
    println!(
        "{}",
        serde_json::json!({"bench": "mqtt", "messages": messages, "fanout_messages": fanout, "idle": idle, "rounds": rounds, "rows": json})
    );
}

/// The run's own Mosquitto: `binary` with a configuration file in the run's folder
/// (a free port of 127.0.0.1, `persistence true` in the folder, `max_queued_messages
/// 0`: no limit, `allow_anonymous true`). Killed when dropped.
struct Mosquitto {
    addr: SocketAddr,
    child: tokio::process::Child,
}

impl Mosquitto {
    async fn start(binary: &str, dir: &std::path::Path) -> Result<Mosquitto, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let data = dir.join("mosquitto");
        std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
        let config = dir.join("mosquitto.conf");
        std::fs::write(
            &config,
            format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\nmax_queued_messages 0\nmax_inflight_messages 64\n",
                data.display()
            ),
        )
        .map_err(|e| e.to_string())?;
        let child = tokio::process::Command::new(binary)
            .arg("-c")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {binary}: {e} (Debian's mosquitto package; EBB_BENCH_MOSQUITTO_BIN names another)"))?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        for _ in 0..100 {
            if Client::connect(addr, "ebb-bench-probe", true).await.is_ok() {
                return Ok(Mosquitto { addr, child });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("{binary} does not answer on {addr}"))
    }
}

/// A 3.1.1 connection of the bench's client.
struct Client {
    framed: Framed<TcpStream, MqttCodec>,
}

fn pid(n: usize) -> NonZeroU16 {
    NonZeroU16::new((n % 65_535 + 1) as u16).expect("not 0")
}

impl Client {
    async fn connect(addr: SocketAddr, id: &str, clean: bool) -> Result<Client, String> {
        let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut c = Client {
            framed: Framed::new(stream, MqttCodec::V3(v3::Codec::new(0))),
        };
        c.send(v3::Packet::Connect(Box::new(v3::Connect {
            clean_session: clean,
            keep_alive: 60,
            client_id: ByteString::from(id),
            ..Default::default()
        })))
        .await?;
        match c.recv().await? {
            v3::Packet::ConnectAck(a)
                if a.return_code == v3::ConnectAckReason::ConnectionAccepted =>
            {
                Ok(c)
            }
            other => Err(format!("CONNECT refused: {other:?}")),
        }
    }

    async fn send(&mut self, p: v3::Packet) -> Result<(), String> {
        self.framed
            .send(MqttPacket::V3(p))
            .await
            .map_err(|e| e.to_string())
    }

    async fn feed(&mut self, p: v3::Packet) -> Result<(), String> {
        self.framed
            .feed(MqttPacket::V3(p))
            .await
            .map_err(|e| e.to_string())
    }

    async fn recv(&mut self) -> Result<v3::Packet, String> {
        match tokio::time::timeout(STALL, self.framed.next()).await {
            Ok(Some(Ok((MqttPacket::V3(p), _)))) => Ok(p),
            Ok(Some(Ok(other))) => Err(format!("unexpected {other:?}")),
            Ok(Some(Err(e))) => Err(e.to_string()),
            Ok(None) => Err("closed".into()),
            Err(_) => Err(format!("nothing for {} s", STALL.as_secs())),
        }
    }

    async fn subscribe(&mut self, filter: &str, qos: QoS) -> Result<(), String> {
        self.send(v3::Packet::Subscribe {
            packet_id: pid(0),
            topic_filters: vec![(ByteString::from(filter), qos)],
        })
        .await?;
        match self.recv().await? {
            v3::Packet::SubscribeAck { status, .. }
                if !status.contains(&v3::SubscribeReturnCode::Failure) =>
            {
                Ok(())
            }
            other => Err(format!("SUBSCRIBE refused: {other:?}")),
        }
    }

    async fn disconnect(mut self) {
        let _ = self.send(v3::Packet::Disconnect).await;
    }
}

fn message(topic: &str, qos: QoS, id: Option<NonZeroU16>, payload: &Bytes) -> v3::Packet {
    v3::Packet::Publish(Box::new(rmqtt_codec::types::Publish {
        dup: false,
        retain: false,
        qos,
        topic: ByteString::from(topic),
        packet_id: id,
        payload: payload.clone(),
        properties: None,
    }))
}

/// `publishers` publish `n` messages at QoS 1 to one persistent-session subscriber:
/// messages per second from the first publish to the last delivery.
async fn publish_qos1(
    addr: SocketAddr,
    publishers: usize,
    n: usize,
    tag: String,
) -> Result<f64, String> {
    let sub_id = format!("ebb-bench-sub-{tag}-{publishers}");
    let mut sub = Client::connect(addr, &sub_id, false).await?;
    sub.subscribe("ebb-bench/q1/#", QoS::AtLeastOnce).await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for p in 0..publishers {
        let count = n / publishers + usize::from(p < n % publishers);
        let topic = format!("ebb-bench/q1/p{p}");
        tasks.push(tokio::task::spawn_local(async move {
            let mut c = Client::connect(addr, &format!("ebb-bench-pub-{p}"), true).await?;
            let payload = Bytes::from(vec![b'x'; BODY]);
            let (mut sent, mut acked) = (0usize, 0usize);
            while acked < count {
                while sent < count && sent - acked < WINDOW {
                    c.feed(message(&topic, QoS::AtLeastOnce, Some(pid(sent)), &payload))
                        .await?;
                    sent += 1;
                }
                c.framed.flush().await.map_err(|e| e.to_string())?;
                match c.recv().await? {
                    v3::Packet::PublishAck { .. } => acked += 1,
                    other => return Err(format!("publisher got {other:?}")),
                }
            }
            c.disconnect().await;
            Ok::<(), String>(())
        }));
    }
    let mut got = 0usize;
    while got < n {
        // PUBACKs go out when no more deliveries are read yet: a broker with a small
        // window of its own (Mosquitto's 20) is never kept waiting for them.
        let packet = match sub.framed.next().now_or_never() {
            Some(Some(Ok((MqttPacket::V3(p), _)))) => p,
            Some(_) => return Err("the subscriber's connection failed".into()),
            None => {
                sub.framed.flush().await.map_err(|e| e.to_string())?;
                sub.recv().await?
            }
        };
        match packet {
            v3::Packet::Publish(p) => {
                got += 1;
                if let Some(id) = p.packet_id {
                    sub.feed(v3::Packet::PublishAck { packet_id: id }).await?;
                }
            }
            other => return Err(format!("subscriber got {other:?}")),
        }
    }
    let elapsed = started.elapsed();
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    sub.framed.flush().await.map_err(|e| e.to_string())?;
    sub.disconnect().await;
    // The persistent session ends: a clean session of the same id discards it.
    Client::connect(addr, &sub_id, true)
        .await?
        .disconnect()
        .await;
    Ok(n as f64 / elapsed.as_secs_f64())
}

/// 1 publisher, [`FANOUT_SUBSCRIBERS`] subscribers at QoS 0, `n` messages: deliveries
/// per second, and how many arrived.
async fn fan_out(addr: SocketAddr, n: usize) -> Result<(f64, usize), String> {
    let total = Rc::new(std::cell::Cell::new(0usize));
    let last = Rc::new(std::cell::Cell::new(Instant::now()));
    let mut subs = Vec::new();
    for s in 0..FANOUT_SUBSCRIBERS {
        let mut c = Client::connect(addr, &format!("ebb-bench-fan-{s}"), true).await?;
        c.subscribe("ebb-bench/fan", QoS::AtMostOnce).await?;
        subs.push(c);
    }
    let started = Instant::now();
    let mut readers = Vec::new();
    for mut c in subs {
        let (total, last) = (Rc::clone(&total), Rc::clone(&last));
        readers.push(tokio::task::spawn_local(async move {
            let mut got = 0;
            while got < n {
                match tokio::time::timeout(Duration::from_secs(5), c.framed.next()).await {
                    Ok(Some(Ok((MqttPacket::V3(v3::Packet::Publish(_)), _)))) => {
                        got += 1;
                        total.set(total.get() + 1);
                        last.set(Instant::now());
                    }
                    Ok(Some(Ok(_))) => {}
                    _ => break,
                }
            }
            c.disconnect().await;
        }));
    }
    let mut publisher = Client::connect(addr, "ebb-bench-fan-pub", true).await?;
    let payload = Bytes::from(vec![b'x'; BODY]);
    for i in 0..n {
        publisher
            .feed(message("ebb-bench/fan", QoS::AtMostOnce, None, &payload))
            .await?;
        if i % 64 == 63 {
            publisher.framed.flush().await.map_err(|e| e.to_string())?;
        }
    }
    publisher.framed.flush().await.map_err(|e| e.to_string())?;
    for r in readers {
        let _ = r.await;
    }
    publisher.disconnect().await;
    let got = total.get();
    let elapsed = last.get().duration_since(started);
    Ok((got as f64 / elapsed.as_secs_f64().max(1e-6), got))
}

/// Opens `count` idle connections from a child process and answers the growth of
/// process `pid`'s resident memory per connection.
async fn idle_memory(addr: SocketAddr, pid: u32, count: usize) -> Result<f64, String> {
    use tokio::io::AsyncBufReadExt;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = procfs::rss_bytes(pid).ok_or("no RSS")?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new(exe)
        .env("EBB_BENCH_MQTT_IDLE_CHILD", format!("{addr},{count}"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().expect("piped");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    match tokio::time::timeout(Duration::from_secs(300), lines.next_line()).await {
        Ok(Ok(Some(line))) if line == "ready" => {}
        other => return Err(format!("the child did not get its connections: {other:?}")),
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = procfs::rss_bytes(pid).ok_or("no RSS")?;
    drop(child.stdin.take());
    let _ = child.wait().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(after.saturating_sub(before) as f64 / count as f64)
}

/// The child of [`idle_memory`]: `spec` is `ADDR,COUNT`; opens COUNT connections,
/// prints `ready`, and holds them until its stdin closes.
fn idle_child(spec: &str) {
    let (addr, count) = spec.split_once(',').expect("ADDR,COUNT");
    let addr: SocketAddr = addr.parse().expect("ADDR");
    let count: usize = count.parse().expect("COUNT");
    procfs::raise_open_files(count as u64 + 1_024);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let mut held = Vec::with_capacity(count);
        for i in 0..count {
            let c = Client::connect(addr, &format!("ebb-bench-idle-{i}"), true)
                .await
                .unwrap_or_else(|e| panic!("idle connection {i}: {e}"));
            held.push(c);
        }
        println!("ready");
        let _ = tokio::task::spawn_blocking(|| {
            use std::io::Read;
            let mut sink = Vec::new();
            std::io::stdin().read_to_end(&mut sink)
        })
        .await;
        drop(held);
    });
}
