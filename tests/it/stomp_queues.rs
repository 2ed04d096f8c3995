//! Queues over STOMP with raw frames: the cases TX-01 (transactional acks in
//! client-individual mode, COMMIT and ABORT edge cases, a transaction over a queue and
//! a topic), FLOW-01 (producer flow control blocks and resumes, keeps applying ACKs
//! from a blocked connection, or fails loudly with the receipt id) and EXP-03 (one
//! queue's expiry never starves another's, nor live traffic).

use std::time::Duration;

use ebb::stomp::codec::Limits;
use ebb::stomp::frame::{Command, Frame};
use ebb::test_util::stomp::*;
use ebb::test_util::*;
use ebb::{Policy, UsageConfig};

async fn send(c: &mut Client, destination: &str, body: &str, extra: &str) {
    c.write(
        format!("SEND\ndestination:{destination}\npersistent:true\n{extra}\n{body}\0").as_bytes(),
    )
    .await;
}

async fn messages(c: &mut Client, n: usize) -> Vec<Frame> {
    let mut got = Vec::new();
    for _ in 0..n {
        let f = c.frame().await.expect("a MESSAGE");
        assert_eq!(f.command, Command::Message, "{f:?}");
        got.push(f);
    }
    got
}

fn ack_id(f: &Frame) -> String {
    f.get("ack").expect("an ack header").to_string()
}

async fn rows(s: &Server, container: &str) -> u64 {
    s.broker.store().count_messages(container).await.unwrap()
}

async fn queue_server(t: &TestStore, policy: Policy, usage: UsageConfig) -> Server {
    let broker = broker_with(
        t,
        vec![("queue://>", policy.clone()), ("topic://>", policy)],
        usage,
    )
    .await;
    serve(broker, Limits::default(), Default::default(), 30_000).await
}

/// TX-01, every step of the case.
async fn tx_01_transactional_acks_commit_and_abort(t: TestStore) {
    let s = queue_server(&t, policy(0, 400), UsageConfig::default()).await;
    let mut c = Client::connected(s.addr, None).await;
    for i in 1..=4 {
        send(
            &mut c,
            "/queue/TX",
            &format!("M{i}"),
            &format!("receipt:p{i}\n"),
        )
        .await;
        receipt(&mut c, &format!("p{i}")).await;
    }
    c.write(b"SUBSCRIBE\nid:1\ndestination:/queue/TX\nack:client-individual\nactivemq.prefetchSize:4\n\n\0")
        .await;
    let m = messages(&mut c, 4).await;
    let bodies: Vec<&[u8]> = m.iter().map(|f| &f.body[..]).collect();
    assert_eq!(bodies, [b"M1", b"M2", b"M3", b"M4"]);

    // Step 3: out-of-order acks in tx1, committed.
    c.write(b"BEGIN\ntransaction:tx1\n\n\0").await;
    for i in [1, 0] {
        c.write(format!("ACK\nid:{}\ntransaction:tx1\n\n\0", ack_id(&m[i])).as_bytes())
            .await;
    }
    c.write(b"COMMIT\ntransaction:tx1\nreceipt:c1\n\n\0").await;
    receipt(&mut c, "c1").await;
    assert_eq!(rows(&s, "queue://TX").await, 2);

    // Step 4: a plain ack after the commit still works.
    c.write(format!("ACK\nid:{}\nreceipt:a4\n\n\0", ack_id(&m[3])).as_bytes())
        .await;
    receipt(&mut c, "a4").await;
    assert_eq!(rows(&s, "queue://TX").await, 1);

    // Step 5: ack and send in tx2, aborted: M3 stays un-acked, Z never exists.
    c.write(b"BEGIN\ntransaction:tx2\n\n\0").await;
    c.write(format!("ACK\nid:{}\ntransaction:tx2\n\n\0", ack_id(&m[2])).as_bytes())
        .await;
    send(&mut c, "/queue/TX2", "Z", "transaction:tx2\n").await;
    c.write(b"ABORT\ntransaction:tx2\nreceipt:ab2\n\n\0").await;
    receipt(&mut c, "ab2").await;
    assert_eq!(rows(&s, "queue://TX").await, 1);
    assert_eq!(rows(&s, "queue://TX2").await, 0);

    // Step 6: M3 can be acked again outside any transaction.
    c.write(format!("ACK\nid:{}\nreceipt:a3\n\n\0", ack_id(&m[2])).as_bytes())
        .await;
    receipt(&mut c, "a3").await;
    assert_eq!(rows(&s, "queue://TX").await, 0);
    c.write(b"DISCONNECT\nreceipt:d\n\n\0").await;
    receipt(&mut c, "d").await;

    // Re-subscribing delivers nothing.
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\nid:1\ndestination:/queue/TX\nack:auto\nreceipt:s\n\n\0")
        .await;
    receipt(&mut c, "s").await;
    c.write(b"SUBSCRIBE\nid:2\ndestination:/queue/TX2\nack:auto\nreceipt:s2\n\n\0")
        .await;
    receipt(&mut c, "s2").await;
    assert!(c.quiet().await.is_none(), "nothing left, Z never delivered");

    // Step 7: one transaction over a queue and a topic; visible only after COMMIT.
    let mut live = Client::connected(s.addr, None).await;
    live.write(b"SUBSCRIBE\nid:b\ndestination:/topic/B\nack:auto\nreceipt:sb\n\n\0")
        .await;
    receipt(&mut live, "sb").await;
    live.write(b"SUBSCRIBE\nid:a\ndestination:/queue/A\nack:auto\nreceipt:sa\n\n\0")
        .await;
    receipt(&mut live, "sa").await;
    c.write(b"BEGIN\ntransaction:tx3\n\n\0").await;
    send(&mut c, "/queue/A", "to-a", "transaction:tx3\n").await;
    send(
        &mut c,
        "/topic/B",
        "to-b",
        "transaction:tx3\nreceipt:before\n",
    )
    .await;
    receipt(&mut c, "before").await;
    assert!(live.quiet().await.is_none(), "nothing before COMMIT");
    c.write(b"COMMIT\ntransaction:tx3\nreceipt:c3\n\n\0").await;
    receipt(&mut c, "c3").await;
    let mut got: Vec<(String, Vec<u8>)> = messages(&mut live, 2)
        .await
        .into_iter()
        .map(|f| (f.get("destination").unwrap().to_string(), f.body.to_vec()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("/queue/A".to_string(), b"to-a".to_vec()),
            ("/topic/B".to_string(), b"to-b".to_vec())
        ]
    );
    s.stop().await;
}

fn flow_policy(limit: u64) -> Policy {
    Policy {
        memory_limit: limit,
        ..policy(0, 400)
    }
}

/// Sends 1 KiB persistent messages with receipts to `destination` (`/queue/NAME`)
/// until one is held: its receipt has not come and the broker counts a blocked
/// producer on the queue (polled while no receipt comes, within PATIENCE). Returns how
/// many receipts came.
async fn send_until_blocked(
    c: &mut Client,
    broker: &ebb::Broker,
    destination: &str,
    from: usize,
) -> usize {
    let key = destination.replacen("/queue/", "queue://", 1);
    let body = "x".repeat(1024);
    let mut sent = from;
    let mut receipts = 0;
    loop {
        send(c, destination, &body, &format!("receipt:r{sent}\n")).await;
        sent += 1;
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            match c.frame_within(20).await {
                Some(f) if f.command == Command::Receipt => {
                    receipts += 1;
                    break;
                }
                Some(f) => panic!("unexpected {f:?}"),
                None if broker
                    .destination_flow(key.as_str())
                    .unwrap()
                    .blocked_producers
                    > 0 =>
                {
                    return receipts
                }
                None => assert!(
                    std::time::Instant::now() < deadline,
                    "SEND r{} neither receipted nor held within {PATIENCE:?}",
                    sent - 1
                ),
            }
        }
    }
}

/// FLOW-01 A: a producer blocks when its queue is full, resumes when a consumer acks,
/// blocks again; a producer to another queue is never held.
async fn flow_01_block_and_resume(t: TestStore) {
    let s = queue_server(&t, flow_policy(64 * 1024), UsageConfig::default()).await;
    let mut p = Client::connected(s.addr, None).await;
    let accepted = send_until_blocked(&mut p, &s.broker, "/queue/Q", 0).await;
    // Each message is 1 KiB of body; the queue holds its limit (plus the one that
    // crossed it). Messages its cursor read back from the store while the first
    // messages arrived are not charged (reads are bounded by a page instead), so a few
    // more may be accepted: never more than the queue's first page.
    assert!((60..=64 + 200).contains(&accepted), "accepted {accepted}");
    let usage = s.broker.usage();
    assert_eq!(usage.blocked_producers, 1);
    // Another producer, another queue: never held.
    let mut p2 = Client::connected(s.addr, None).await;
    for i in 0..20 {
        send(&mut p2, "/queue/OTHER", "o", &format!("receipt:o{i}\n")).await;
        receipt(&mut p2, &format!("o{i}")).await;
    }
    // A consumer takes messages and acks 5: the held SEND goes through.
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\nid:1\ndestination:/queue/Q\nack:client-individual\nactivemq.prefetchSize:5\n\n\0")
        .await;
    let m = messages(&mut c, 5).await;
    // (Each ack frees a prefetch slot, so more MESSAGEs follow; no receipts to wait for.)
    for f in &m {
        c.write(format!("ACK\nid:{}\n\n\0", ack_id(f)).as_bytes())
            .await;
    }
    let f = p.frame().await.expect("the held SEND's receipt");
    assert_eq!(f.get("receipt-id"), Some(format!("r{accepted}").as_str()));
    // ... and it blocks again once the queue is full again.
    let more = send_until_blocked(&mut p, &s.broker, "/queue/Q", accepted + 1).await;
    assert!(
        more <= 6,
        "blocked again after at most the freed space: {more}"
    );
    s.stop().await;
}

/// A SEND held by flow control for longer than the stall timeout: the client is not
/// stalled (the broker is the one not reading), so the connection stays open and the
/// SEND completes when space comes back.
async fn a_held_send_outlasts_the_stall_timeout(t: TestStore) {
    let broker = broker_with(
        &t,
        vec![("queue://>", flow_policy(16 * 1024))],
        UsageConfig::default(),
    )
    .await;
    let s = serve(broker, Limits::default(), Default::default(), 300).await;
    let mut p = Client::connected(s.addr, None).await;
    let accepted = send_until_blocked(&mut p, &s.broker, "/queue/Q", 0).await;
    assert!(accepted > 0);
    // Three stall timeouts more (the window is what is measured), still held.
    assert!(p.frame_within(900).await.is_none());
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\nid:1\ndestination:/queue/Q\nack:auto\n\n\0")
        .await;
    let f = p.frame().await.expect("the held SEND's receipt");
    assert_eq!(f.command, Command::Receipt, "{f:?}");
    assert_eq!(f.get("receipt-id"), Some(format!("r{accepted}").as_str()));
    s.stop().await;
}

/// FLOW-01 B: one connection consumes and produces; its SEND is held, but its ACKs are
/// still read and applied, which frees the space its SEND waits for. No deadlock.
async fn flow_01_blocked_connection_still_acks(t: TestStore) {
    let s = queue_server(&t, flow_policy(16 * 1024), UsageConfig::default()).await;
    let mut x = Client::connected(s.addr, None).await;
    x.write(b"SUBSCRIBE\nid:1\ndestination:/queue/Q\nack:client-individual\nactivemq.prefetchSize:10\nreceipt:s\n\n\0")
        .await;
    receipt(&mut x, "s").await;
    let body = "x".repeat(1024);
    let mut delivered = Vec::new();
    let mut receipts = 0;
    let mut next = 0;
    // Send until one is held (MESSAGE frames arrive meanwhile): no receipt, and the
    // broker counts the blocked producer.
    'sending: loop {
        send(&mut x, "/queue/Q", &body, &format!("receipt:r{next}\n")).await;
        next += 1;
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            match x.frame_within(20).await {
                Some(f) if f.command == Command::Message => delivered.push(f),
                Some(f) if f.command == Command::Receipt => {
                    receipts += 1;
                    break;
                }
                Some(f) => panic!("{f:?}"),
                None if s
                    .broker
                    .destination_flow("queue://Q")
                    .unwrap()
                    .blocked_producers
                    > 0 =>
                {
                    break 'sending
                }
                None => assert!(
                    std::time::Instant::now() < deadline,
                    "SEND r{} neither receipted nor held",
                    next - 1
                ),
            }
        }
    }
    // Prefetch 10: the tenth MESSAGE may come after the SEND was held.
    while delivered.len() < 10 {
        let f = x.frame().await.expect("a MESSAGE");
        assert_eq!(f.command, Command::Message, "{f:?}");
        delivered.push(f);
    }
    assert_eq!(delivered.len(), 10, "prefetch 10 delivered");
    assert_eq!(s.broker.usage().blocked_producers, 1);
    // ACK on the same connection: applied although a SEND of this connection is held.
    for f in &delivered {
        x.write(format!("ACK\nid:{}\n\n\0", ack_id(f)).as_bytes())
            .await;
    }
    // The held SEND completes after the ACKs (more MESSAGEs may come first).
    loop {
        let f = x.frame().await.expect("the held SEND's receipt");
        if f.command == Command::Receipt {
            assert_eq!(f.get("receipt-id"), Some(format!("r{receipts}").as_str()));
            break;
        }
    }
    s.stop().await;
}

/// FLOW-01 B with a client that pipelines SENDs without receipts and acks what it
/// receives on the same connection: the broker keeps reading (the held frames are
/// bounded in bytes, not at a handful), so the ACKs behind the SENDs are applied and
/// every message goes through.
async fn flow_01_pipelined_sends_without_receipts_still_ack(t: TestStore) {
    let s = queue_server(&t, flow_policy(16 * 1024), UsageConfig::default()).await;
    let mut x = Client::connected(s.addr, None).await;
    x.write(b"SUBSCRIBE\nid:1\ndestination:/queue/Q\nack:client-individual\nactivemq.prefetchSize:10\nreceipt:s\n\n\0")
        .await;
    receipt(&mut x, "s").await;
    let body = "x".repeat(1024);
    let mut burst = Vec::new();
    for i in 0..200 {
        burst.extend_from_slice(
            format!("SEND\ndestination:/queue/Q\npersistent:true\nn:{i}\n\n{body}\0").as_bytes(),
        );
    }
    x.write(&burst).await;
    let mut seen = std::collections::HashSet::new();
    while seen.len() < 200 {
        let f = x.frame().await.expect("the next MESSAGE");
        assert_eq!(f.command, Command::Message, "{:?}", f.get("message"));
        seen.insert(f.get("n").unwrap().to_string());
        x.write(format!("ACK\nid:{}\n\n\0", ack_id(&f)).as_bytes())
            .await;
    }
    wait_rows(&s.broker, "queue://Q", 0).await;
    s.stop().await;
}

/// Acks and NACKs inside transactions: out-of-order `client` (cumulative) acks commit
/// without an error; a transactional NACK does nothing until COMMIT and is forgotten
/// at ABORT.
async fn transactional_nack_and_cumulative_acks(t: TestStore) {
    let s = queue_server(&t, policy(0, 400), UsageConfig::default()).await;
    let mut c = Client::connected(s.addr, None).await;
    for i in 1..=3 {
        send(
            &mut c,
            "/queue/T",
            &format!("M{i}"),
            &format!("receipt:p{i}\n"),
        )
        .await;
        receipt(&mut c, &format!("p{i}")).await;
    }
    c.write(b"SUBSCRIBE\nid:1\ndestination:/queue/T\nack:client\nactivemq.prefetchSize:3\n\n\0")
        .await;
    let m = messages(&mut c, 3).await;
    c.write(b"BEGIN\ntransaction:t1\n\n\0").await;
    for i in [1, 0] {
        c.write(format!("ACK\nid:{}\ntransaction:t1\n\n\0", ack_id(&m[i])).as_bytes())
            .await;
    }
    c.write(b"COMMIT\ntransaction:t1\nreceipt:c1\n\n\0").await;
    receipt(&mut c, "c1").await;
    assert_eq!(rows(&s, "queue://T").await, 1);
    c.write(b"BEGIN\ntransaction:t2\n\n\0").await;
    c.write(format!("NACK\nid:{}\ntransaction:t2\n\n\0", ack_id(&m[2])).as_bytes())
        .await;
    c.write(b"ABORT\ntransaction:t2\nreceipt:a2\n\n\0").await;
    receipt(&mut c, "a2").await;
    assert!(
        c.quiet().await.is_none(),
        "an aborted NACK redelivers nothing"
    );
    c.write(b"BEGIN\ntransaction:t3\n\n\0").await;
    c.write(format!("NACK\nid:{}\ntransaction:t3\n\n\0", ack_id(&m[2])).as_bytes())
        .await;
    assert!(c.quiet().await.is_none(), "nothing before COMMIT");
    c.write(b"COMMIT\ntransaction:t3\nreceipt:c3\n\n\0").await;
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(c.frame().await.expect("RECEIPT and the redelivery"));
    }
    let again = got
        .iter()
        .find(|f| f.command == Command::Message)
        .expect("redelivered");
    assert_eq!(
        (&again.body[..], again.get("redelivered")),
        (&b"M3"[..], Some("true"))
    );
    s.stop().await;
}

/// FLOW-01 C: with send_fail_if_no_space, a SEND to a full queue gets an ERROR with its
/// receipt id naming the limit, no RECEIPT, and is not stored; once space is freed a
/// new connection sends.
async fn flow_01_fail_mode_errors_with_the_receipt(t: TestStore) {
    let usage = UsageConfig {
        send_fail_if_no_space: true,
        ..UsageConfig::default()
    };
    let s = queue_server(&t, flow_policy(64 * 1024), usage).await;
    let mut p = Client::connected(s.addr, None).await;
    let body = "x".repeat(1024);
    let mut i = 0;
    let error = loop {
        send(&mut p, "/queue/Q", &body, &format!("receipt:r{i}\n")).await;
        let f = p.frame().await.expect("a RECEIPT or an ERROR");
        if f.command == Command::Error {
            break f;
        }
        assert_eq!(f.get("receipt-id"), Some(format!("r{i}").as_str()));
        i += 1;
    };
    assert_eq!(error.get("receipt-id"), Some(format!("r{i}").as_str()));
    let text = error.get("message").unwrap();
    assert!(
        text.contains("queue://Q") && text.contains("limit"),
        "{text}"
    );
    assert!(p.closed().await, "the connection closes after the ERROR");
    assert_eq!(
        rows(&s, "queue://Q").await,
        i as u64,
        "the refused message was not stored"
    );
    // Free the space: consume everything.
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\nid:1\ndestination:/queue/Q\nack:auto\n\n\0")
        .await;
    messages(&mut c, i).await;
    wait_rows(&s.broker, "queue://Q", 0).await;
    let mut p = Client::connected(s.addr, None).await;
    send(&mut p, "/queue/Q", "again", "receipt:again\n").await;
    receipt(&mut p, "again").await;
    s.stop().await;
}

/// EXP-03 over STOMP, scaled down: a big queue draining its expired messages to the
/// DLQ in pages never holds up a small queue's expiry or live traffic on a third
/// queue; the big one drains too.
async fn exp_03_big_expiry_does_not_starve_others(t: TestStore) {
    // Pages of 25: BIG's run is 120 pages, long enough to span SMALL's 300 ms tick on
    // a fast machine (with pages of 200 it could finish between two of SMALL's ticks;
    // with pages of 50, once in a few CI runs, it did).
    // The queues stay awake (each on its own housekeeping timer, which is what the
    // budget shares): a sleeping queue is woken for expiry by the registry instead.
    let expiring = Policy {
        dead_letter_expired: true,
        inactive_timeout_before_sleep: 0,
        ..policy(300, 25)
    };
    let s = queue_server(&t, expiring, UsageConfig::default()).await;
    let mut p = Client::connected(s.addr, None).await;
    let soon = ebb_actors::destination::now_ms() + 3_000;
    for i in 0..3_000 {
        let receipt_header = if i % 500 == 499 {
            format!("receipt:b{i}\n")
        } else {
            String::new()
        };
        send(
            &mut p,
            "/queue/BIG",
            "b",
            &format!("expires:{soon}\n{receipt_header}"),
        )
        .await;
        if !receipt_header.is_empty() {
            receipt(&mut p, &format!("b{i}")).await;
        }
    }
    for i in 0..10 {
        send(
            &mut p,
            "/queue/SMALL",
            "s",
            &format!("expires:{soon}\nreceipt:s{i}\n"),
        )
        .await;
        receipt(&mut p, &format!("s{i}")).await;
    }
    let mut live = Client::connected(s.addr, None).await;
    live.write(b"SUBSCRIBE\nid:1\ndestination:/queue/LIVE\nack:auto\nreceipt:l\n\n\0")
        .await;
    receipt(&mut live, "l").await;
    // Live traffic while BIG drains: every send is receipted and delivered.
    let mut worst_ms = 0u128;
    let mut small_done_while_big_had = None;
    // SMALL's last page ticket when it was first seen empty: its page that expired
    // the 10 came no later (empty pages of later ticks, which a loaded machine may
    // run after BIG's last page, do not count).
    let mut small_emptied_by_ticket = None;
    for i in 0..40 {
        let started = std::time::Instant::now();
        send(
            &mut p,
            "/queue/LIVE",
            &format!("l{i}"),
            &format!("receipt:live{i}\n"),
        )
        .await;
        receipt(&mut p, &format!("live{i}")).await;
        let m = live.frame().await.expect("the live message");
        assert_eq!(m.body, format!("l{i}").into_bytes());
        worst_ms = worst_ms.max(started.elapsed().as_millis());
        if small_done_while_big_had.is_none() && rows(&s, "queue://SMALL").await == 0 {
            small_done_while_big_had = Some(rows(&s, "queue://BIG").await);
            let small = s.broker.queue_stats("SMALL").await.unwrap();
            small_emptied_by_ticket = Some(small.last_page_ticket);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Each queue's last ticket is read once its housekeeping has disarmed (no page will
    // follow), so an empty page after the work cannot reorder them.
    let big = wait_for_queue(&s.broker, "BIG", |q| q.expired == 3_000 && !q.expiry_armed).await;
    assert!(big.max_expiry_page_rows <= 50, "{big:?}");
    assert_eq!(rows(&s, "queue://BIG").await, 0);
    // Those that expired before they arrived (a slow machine) are dropped, not moved.
    assert!(big.dead_lettered > 0);
    assert_eq!(rows(&s, "queue://DLQ.BIG").await, big.dead_lettered);
    let small = wait_for_queue(&s.broker, "SMALL", |q| q.expired == 10 && !q.expiry_armed).await;
    // Fairness by the budget's tickets, not the clock: SMALL's page that expired its
    // messages ran before BIG finished its run.
    let emptied_by = match small_emptied_by_ticket {
        Some(ticket) => ticket,
        // Not expired yet when the live traffic ended (a slow machine): now.
        None => small.last_page_ticket,
    };
    assert!(
        emptied_by < big.last_page_ticket,
        "SMALL emptied by ticket {emptied_by}: {small:?} {big:?}"
    );
    eprintln!(
        "EXP-03: worst live send-to-delivery {worst_ms} ms; SMALL emptied while BIG held {small_done_while_big_had:?} rows"
    );
    s.stop().await;
}

on_every_backend!(
    #[actix_rt::test]
    tx_01_transactional_acks_commit_and_abort,
    flow_01_block_and_resume,
    flow_01_blocked_connection_still_acks,
    a_held_send_outlasts_the_stall_timeout,
    flow_01_pipelined_sends_without_receipts_still_ack,
    transactional_nack_and_cumulative_acks,
    flow_01_fail_mode_errors_with_the_receipt,
    exp_03_big_expiry_does_not_starve_others,
    stomp_counts_only_frames_written,
);

/// Over STOMP only a MESSAGE frame written to the connection counts as delivered: a
/// client that stops reading holds what fits in the socket; the rest of its prefetch
/// waits in the broker unwritten. When it goes, the written ones come back marked
/// redelivered (a failed delivery each) and the unwritten ones go back as they were
/// (before, every message of the prefetch counted, and a few such clients sent a
/// whole queue to its dead-letter queue unseen).
async fn stomp_counts_only_frames_written(t: TestStore) {
    let s = queue_server(&t, policy(0, 400), UsageConfig::default()).await;
    let body = "x".repeat(64 * 1024);
    let sent = s
        .broker
        .send_all(
            "queue://slow",
            (0..200).map(|i| ebb::Message::new(format!("{i:03}{body}"))),
        )
        .await;
    assert!(sent.iter().all(|r| r.is_ok()));
    let mut c = Client::connected(s.addr, None).await;
    c.write(
        b"SUBSCRIBE\ndestination:/queue/slow\nid:1\nack:client-individual\nactivemq.prefetchSize:200\n\n\0",
    )
    .await;
    // All 200 are dispatched to it; the session writes what the socket takes (a few
    // MB of 12.8) and holds the rest.
    wait_for_queue(&s.broker, "slow", |q| q.in_flight == 200).await;
    let first = c.frame().await.expect("a MESSAGE");
    assert_eq!(first.command, Command::Message);
    assert!(first.body.starts_with(b"000"));
    drop(c); // gone without an ack

    let options = ebb::SubscribeOptions::non_durable().ack(ebb::AckMode::Client);
    let mut sub = s.broker.subscribe("queue://slow", options).await.unwrap();
    let mut marks = Vec::new();
    for i in 0..200 {
        let m = next(&mut sub).await;
        assert!(
            m.body().starts_with(format!("{i:03}").as_bytes()),
            "in order"
        );
        marks.push(m.redelivered());
        sub.ack(&m).await.unwrap();
    }
    let written = marks.iter().take_while(|r| **r).count();
    assert!(written >= 1, "the frame the client read counts");
    assert!(
        marks[written..].iter().all(|r| !r),
        "the redelivered ones are those written first: {marks:?}"
    );
    assert!(
        written < 200,
        "frames never written are not counted as delivered"
    );
    let stats = s.broker.queue_stats("slow").await.unwrap();
    assert_eq!(stats.dead_lettered, 0);
    drop(sub);
    s.stop().await;
}
