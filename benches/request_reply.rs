//! Request/reply over STOMP with temporary queues (issue 33), Ebb beside RabbitMQ's
//! STOMP plugin (`/temp-queue/`, which it supports) on the same machine and in the same
//! run: round trips per second and their latency, with 1 and with 16 requesters.
//!
//! Workload, per broker and requester count R: one worker connection subscribes to the
//! work queue (`ack:auto`) and answers each request with a SEND to the request's
//! `reply-to` header, as it came (Ebb rewrites `/temp-queue/replies` to
//! `/remote-temp-queue/...`, RabbitMQ to `/reply-queue/...`), carrying the request's
//! `correlation-id`. Each of R requester connections sends a request with
//! `reply-to:/temp-queue/replies` and a `correlation-id` of its own, waits for the
//! reply, checks its correlation id (a reply to another requester fails the run), and
//! sends the next one: closed loop, one request in flight per requester. Ebb needs a
//! SUBSCRIBE to `/temp-queue/replies` first; RabbitMQ subscribes the connection to its
//! reply queue itself when it first sees the `reply-to`. Messages are STOMP's
//! default, non-persistent, on both. The figure is N / (first request to last reply),
//! and p50 / p99 of each round trip. The client runs on threads of its own (one for
//! the worker, one for the requesters), the same code for both brokers. Median of
//! rounds, the brokers alternated within a round.
//!
//! Run: `bash benches/peers/rabbitmq-stomp.sh` once as root (RabbitMQ's STOMP on
//! 127.0.0.1:61623), then `cargo bench --bench request_reply`. Settings:
//! `EBB_BENCH_RR_REQUESTS` (N per run, default 20,000), `EBB_BENCH_RR_REQUESTERS`
//! (default `1,16`), `EBB_BENCH_ROUNDS` (default 3), `EBB_BENCH_RABBITMQ_STOMP`
//! (default `127.0.0.1:61623`; unreachable: the RabbitMQ rows are skipped, saying so).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::ebb_run;
use common::report::{env, thousands};
use common::stomp_load::{self, Dialect};
use ebb::stomp::frame::{Command, Frame};

const WORK_QUEUE: &str = "/queue/ebb-bench-rr";
const BODY_BYTES: usize = 256;
/// A reply that does not come within this long fails the run.
const STALL: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Peer {
    Ebb,
    Rabbit,
}

impl Peer {
    fn label(self) -> &'static str {
        match self {
            Peer::Ebb => "Ebb (SQLite)",
            Peer::Rabbit => "RabbitMQ",
        }
    }

    fn dialect(self) -> Dialect {
        match self {
            Peer::Ebb => Dialect::ebb(WORK_QUEUE),
            Peer::Rabbit => Dialect::rabbitmq(WORK_QUEUE).durable(),
        }
    }
}

#[derive(Clone, Debug)]
struct Measured {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let requests: usize = env("EBB_BENCH_RR_REQUESTS", 20_000usize).max(16);
    let rounds: usize = env("EBB_BENCH_ROUNDS", 3usize).max(1);
    let counts: Vec<usize> = std::env::var("EBB_BENCH_RR_REQUESTERS")
        .unwrap_or_else(|_| "1,16".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .filter(|n| *n > 0)
        .collect();
    let rabbit: SocketAddr = std::env::var("EBB_BENCH_RABBITMQ_STOMP")
        .unwrap_or_else(|_| "127.0.0.1:61623".into())
        .parse()
        .expect("EBB_BENCH_RABBITMQ_STOMP: HOST:PORT");
    println!(
        "request/reply over STOMP: {} requests per run, {BODY_BYTES}-byte bodies, non-persistent; \
         requesters {counts:?}; median of {rounds} rounds; {} cores",
        thousands(requests as f64),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    // The STOMP listener runs its connections on an actix system.
    actix_rt::System::new().block_on(bench(requests, rounds, counts, rabbit));
}

async fn bench(requests: usize, rounds: usize, counts: Vec<usize>, rabbit: SocketAddr) {
    let dir = ebb_run::fresh_dir("request-reply");
    let store = ebb_run::Store::Sqlite;
    let rabbit_up = stomp_load::connect(rabbit, &Peer::Rabbit.dialect()).await;
    let peers: Vec<Peer> = match rabbit_up {
        Ok(_) => vec![Peer::Ebb, Peer::Rabbit],
        Err(e) => {
            println!("RabbitMQ rows skipped: no STOMP at {rabbit} ({e}); run benches/peers/rabbitmq-stomp.sh");
            vec![Peer::Ebb]
        }
    };
    let mut results: Vec<(usize, Peer, Vec<Measured>)> = Vec::new();
    let mut failures = Vec::new();
    for round in 0..rounds {
        let ebb = ebb_run::start(&store, &dir, "rr", round).await;
        let listener = ebb.listen().await.expect("Ebb's STOMP listener");
        for &requesters in &counts {
            for &peer in &peers {
                let addr = match peer {
                    Peer::Ebb => listener.addr,
                    Peer::Rabbit => rabbit,
                };
                let run = stomp_load::on_thread(move || measure(peer, addr, requesters, requests))
                    .await
                    .map_err(|_| "the client thread panicked".to_string())
                    .and_then(|r| r);
                match run {
                    Ok(m) => {
                        println!(
                            "round {round} {} × {requesters}: {} round trips/s, p50 {:.2} ms, p99 {:.2} ms",
                            peer.label(),
                            thousands(m.rate),
                            m.p50_ms,
                            m.p99_ms
                        );
                        match results
                            .iter_mut()
                            .find(|(r, p, _)| *r == requesters && *p == peer)
                        {
                            Some((_, _, rs)) => rs.push(m),
                            None => results.push((requesters, peer, vec![m])),
                        }
                    }
                    Err(e) => failures.push(format!("{} × {requesters}: {e}", peer.label())),
                }
            }
        }
        listener.stop().await;
        ebb.finish().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let median = |mut rs: Vec<Measured>| {
        rs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        rs[rs.len() / 2].clone()
    };
    println!();
    println!("| requesters | broker | round trips/s | p50 ms | p99 ms | ratio of round trips/s (Ebb / RabbitMQ) |");
    println!("|---|---|---|---|---|---|");
    let mut json = Vec::new();
    for &requesters in &counts {
        let row = |peer: Peer| {
            results
                .iter()
                .find(|(r, p, _)| *r == requesters && *p == peer)
                .map(|(_, _, rs)| median(rs.clone()))
        };
        let (ebb, rabbit) = (row(Peer::Ebb), row(Peer::Rabbit));
        let ratio = ebb
            .as_ref()
            .zip(rabbit.as_ref())
            .map(|(e, r)| e.rate / r.rate);
        for (peer, m) in [(Peer::Ebb, &ebb), (Peer::Rabbit, &rabbit)] {
            let Some(m) = m else { continue };
            println!(
                "| {requesters} | {} | {} | {:.2} | {:.2} | {} |",
                peer.label(),
                thousands(m.rate),
                m.p50_ms,
                m.p99_ms,
                match (peer, ratio) {
                    (Peer::Ebb, Some(r)) => format!("{r:.2}"),
                    _ => String::new(),
                }
            );
            json.push(serde_json::json!({
                "requesters": requesters,
                "broker": peer.label(),
                "round_trips_per_s": m.rate,
                "p50_ms": m.p50_ms,
                "p99_ms": m.p99_ms,
            }));
        }
    }
    println!(
        "{}",
        serde_json::json!({"bench": "request_reply", "requests": requests, "rounds": rounds, "rows": json})
    );
}

/// One run: a worker and `requesters` requesters on `addr` until `requests` round
/// trips are done.
async fn measure(
    peer: Peer,
    addr: SocketAddr,
    requesters: usize,
    requests: usize,
) -> Result<Measured, String> {
    let dialect = peer.dialect();
    // The worker, on a thread of its own.
    let mut worker = stomp_load::connect(addr, &dialect).await?;
    let mut subscribe = Frame::new(Command::Subscribe)
        .header("destination", WORK_QUEUE)
        .header("id", "work")
        .header("ack", "auto")
        .header("receipt", "work");
    for (name, value) in &dialect.subscribe_headers {
        subscribe = subscribe.header(name.clone(), value.clone());
    }
    worker
        .request(subscribe, "work")
        .await
        .map_err(|e| e.to_string())?;
    let working = stomp_load::on_thread(move || serve(worker, requests));

    let per = requests / requesters;
    let mut clients = Vec::with_capacity(requesters);
    for _ in 0..requesters {
        let mut client = stomp_load::connect(addr, &dialect).await?;
        if peer == Peer::Ebb {
            let subscribe = Frame::new(Command::Subscribe)
                .header("destination", "/temp-queue/replies")
                .header("id", "replies")
                .header("receipt", "replies");
            client
                .request(subscribe, "replies")
                .await
                .map_err(|e| e.to_string())?;
        }
        clients.push(client);
    }
    let began = Instant::now();
    let mut asking = Vec::new();
    for (r, client) in clients.into_iter().enumerate() {
        let dialect = dialect.clone();
        asking.push(tokio::task::spawn_local(ask(client, dialect, r, per)));
    }
    let mut latencies = Vec::with_capacity(per * requesters);
    for a in asking {
        latencies.extend(a.await.map_err(|e| e.to_string())??);
    }
    let elapsed = began.elapsed();
    // The worker ends once it has answered every request.
    let _ = tokio::time::timeout(Duration::from_secs(5), working).await;
    latencies.sort_by(f64::total_cmp);
    let q = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    Ok(Measured {
        rate: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
    })
}

/// Requester `r`: `n` requests one after the other; the round trip of each, ms.
async fn ask(
    mut client: ebb::stomp::client::StompClient,
    dialect: Dialect,
    r: usize,
    n: usize,
) -> Result<Vec<f64>, String> {
    let body = vec![b'q'; BODY_BYTES];
    let mut latencies = Vec::with_capacity(n);
    for i in 0..n {
        let id = format!("{r}-{i}");
        let mut frame = dialect
            .send_frame(body.clone())
            .header("reply-to", "/temp-queue/replies")
            .header("correlation-id", id.clone());
        frame.headers.retain(|(k, _)| k != "persistent");
        let sent = Instant::now();
        client.send(frame).await.map_err(|e| e.to_string())?;
        let reply = loop {
            let f = client
                .next_within(STALL)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("requester {r}: no reply to {id} within {STALL:?}"))?;
            match f.command {
                Command::Message => break f,
                Command::Error => {
                    return Err(format!(
                        "requester {r}: ERROR {}",
                        ebb::stomp::client::describe(&f)
                    ))
                }
                _ => continue,
            }
        };
        latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
        if reply.get("correlation-id") != Some(id.as_str()) {
            return Err(format!(
                "requester {r} got the reply to {:?}, not to {id}",
                reply.get("correlation-id")
            ));
        }
    }
    let _ = client.disconnect().await;
    Ok(latencies)
}

/// The worker: answers `requests` requests, each at its `reply-to`.
async fn serve(mut worker: ebb::stomp::client::StompClient, requests: usize) -> Result<(), String> {
    let body = vec![b'a'; BODY_BYTES];
    let mut answered = 0;
    while answered < requests {
        let Some(f) = worker.next_within(STALL).await.map_err(|e| e.to_string())? else {
            return Err(format!("the worker had {answered} of {requests} requests"));
        };
        if f.command != Command::Message {
            continue;
        }
        let to = f.get("reply-to").ok_or("a request without reply-to")?;
        let reply = Frame::new(Command::Send)
            .header("destination", to)
            .header(
                "correlation-id",
                f.get("correlation-id").unwrap_or_default(),
            )
            .body(body.clone());
        worker.send(reply).await.map_err(|e| e.to_string())?;
        answered += 1;
    }
    let _ = worker.disconnect().await;
    Ok(())
}
