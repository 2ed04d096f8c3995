//! The broker sends heart-beats on time (case HB-10): never more than the negotiated
//! interval between any two things it writes, also for the first beat after CONNECTED
//! and right after other traffic (ActiveMQ's AMQ-4710 skipped a beat after data and
//! beat up to twice the interval late); a connection that negotiated none gets none.

use std::time::{Duration, Instant};

use ebb::stomp::connection::ConnectionConfig;
use ebb::stomp::frame::Command;
use ebb::test_util::stomp::*;
use ebb::test_util::*;

/// The server offers to beat every `BEAT_MS`.
const BEAT_MS: u64 = 2_000;
/// Scheduling slack allowed on top of the interval (the case allows 100 ms; more here,
/// for a loaded test machine). The fault this catches was a beat up to a whole check
/// period (250 ms) late: see [`MESSAGE_AT_MS`].
const SLACK_MS: u128 = 200;

/// When the other connection's message arrives, ms after CONNECTED: just after a
/// 250 ms check of the old fixed tick (which ran from the connection's start), so that
/// a beat on that tick came about 245 ms late, beyond the slack.
const MESSAGE_AT_MS: u64 = 2_255;

/// HB-10: `heart-beat:0,500` against a server that can beat every 2,000 ms: the
/// negotiated interval is 2,000 ms; over 6.5 s, with a MESSAGE at 2.255 s, no gap between
/// received bytes is longer than that plus slack. A `heart-beat:0,0` connection gets
/// no beats and stays open.
async fn heart_beats_come_on_time_also_after_traffic(t: TestStore) {
    let broker = broker(&t, policy(30_000, 400), 2).await;
    let config = ConnectionConfig {
        heartbeat_ms: (BEAT_MS, BEAT_MS),
        ..ConnectionConfig::default()
    };
    let s = serve_with(broker, config).await;
    let mut c = Client::open(s.addr).await;
    c.write(b"CONNECT\naccept-version:1.2\nheart-beat:0,500\n\n\0")
        .await;
    let connected = c.frame().await.expect("CONNECTED");
    let start = Instant::now();
    assert_eq!(connected.command, Command::Connected);
    assert_eq!(connected.get("heart-beat"), Some("2000,0"));
    c.write(b"SUBSCRIBE\ndestination:/topic/HB\nid:1\nack:auto\n\n\0")
        .await;
    let mut p = Client::connected(s.addr, None).await;
    let producer = actix_rt::spawn(async move {
        let at = start + Duration::from_millis(MESSAGE_AT_MS);
        actix_rt::time::sleep_until(at.into()).await;
        p.write(b"SEND\ndestination:/topic/HB\nreceipt:r\n\nbeat\0")
            .await;
        receipt(&mut p, "r").await;
        s
    });
    // The arrival of everything the broker writes, frames and heart-beats (EOLs).
    let mut last = start;
    let mut worst = Duration::ZERO;
    let mut messages = 0;
    while start.elapsed() < Duration::from_millis(6_500) {
        match c.0.next_any_within(Duration::from_millis(50)).await {
            Ok(Some(frame)) => {
                if let Some(frame) = frame {
                    assert_eq!(frame.command, Command::Message, "{frame:?}");
                    messages += 1;
                }
                worst = worst.max(last.elapsed());
                last = Instant::now();
            }
            Ok(None) => {}
            Err(e) => panic!("the connection failed: {e}"),
        }
    }
    worst = worst.max(last.elapsed().min(Duration::from_millis(BEAT_MS)));
    assert_eq!(messages, 1, "the one MESSAGE");
    assert!(
        worst.as_millis() <= u128::from(BEAT_MS) + SLACK_MS,
        "a gap of {} ms between the broker's bytes; the interval is {BEAT_MS} ms",
        worst.as_millis()
    );
    let s = producer.await.unwrap();

    let mut quiet = Client::open(s.addr).await;
    quiet
        .write(b"CONNECT\naccept-version:1.2\nheart-beat:0,0\n\n\0")
        .await;
    let connected = quiet.frame().await.expect("CONNECTED");
    assert_eq!(connected.get("heart-beat"), Some("0,0"));
    let beats = quiet.0.next_any_within(Duration::from_millis(3_000)).await;
    assert!(matches!(beats, Ok(None)), "no beats: {beats:?}");
    quiet.write(b"DISCONNECT\nreceipt:q\n\n\0").await;
    receipt(&mut quiet, "q").await;
    s.stop().await;
}

/// Issue 35, point 11: a client's own heart-beat of a second is honoured with the
/// default configuration (the broker's floor is 1 s; it was 10 s, which raised a
/// client's 1 s to 10 s), and a shorter one is raised to the floor.
async fn a_clients_one_second_is_honoured_by_default(t: TestStore) {
    let broker = broker(&t, policy(30_000, 400), 2).await;
    let s = serve_with(broker, ConnectionConfig::default()).await;
    for (asked, negotiated) in [
        ("1000,1000", "1000,1000"),
        ("250,5000", "5000,1000"),
        ("0,1000", "1000,0"),
    ] {
        let mut c = Client::open(s.addr).await;
        c.write(format!("CONNECT\naccept-version:1.2\nheart-beat:{asked}\n\n\0").as_bytes())
            .await;
        let connected = c.frame().await.expect("CONNECTED");
        assert_eq!(
            connected.get("heart-beat"),
            Some(negotiated),
            "asked {asked}"
        );
    }
    s.stop().await;
}

on_every_backend!(
    #[actix_rt::test]
    heart_beats_come_on_time_also_after_traffic,
    a_clients_one_second_is_honoured_by_default,
);
