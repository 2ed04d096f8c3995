//! Scheduled delivery (issue 32, first slice: ActiveMQ's `AMQ_SCHEDULED_DELAY`): a
//! scheduled message waits in the store, invisible (not browsed, not delivered), and
//! is delivered when due, never before; due messages survive a stop and come once, in
//! due order; headers that cannot be honoured are refused, not ignored. On both
//! backends.

use std::time::Duration;

use ebb::now_ms;
use ebb::stomp::frame::Command;
use ebb::test_util::stomp::*;
use ebb::test_util::*;
use ebb::{Broker, CronSchedule, Error, ErrorCode, Message, Policy, SubscribeOptions, UsageConfig};

const Q: &str = "queue://scheduled";

async fn queue_broker(t: &TestStore) -> Broker {
    let policy = Policy {
        expire_messages_period: 0,
        ..Policy::default()
    };
    broker_with(t, vec![("queue://>", policy)], UsageConfig::default()).await
}

/// A message due in 1.5 s waits invisible while one sent after it is delivered; it
/// comes at or after its due time, once; the topic's subscriber gets one the same way.
async fn a_scheduled_message_is_delivered_when_due_and_not_before(t: TestStore) {
    let b = queue_broker(&t).await;
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let due = now_ms() + 1_500;
    b.send(Q, Message::new("later").deliver_at(due))
        .await
        .unwrap();
    b.send(Q, Message::new("now")).await.unwrap();
    let first = take(&mut sub, 1).await;
    assert_eq!(body(&first[0]), "now");
    // Stored, but not browsable before it is due.
    let browsed = b.browse(Q, 0, 100).await.unwrap();
    if now_ms() < due {
        assert!(
            browsed.iter().all(|m| m.body != b"later"[..]),
            "{browsed:?}"
        );
    }
    let later = take(&mut sub, 1).await;
    let received_at = now_ms();
    assert_eq!(body(&later[0]), "later");
    assert!(
        received_at >= due,
        "delivered {} ms early",
        due - received_at
    );
    assert!(quiet(&mut sub).await.is_none(), "delivered once");
    assert_eq!(b.scheduled_released(), 1);

    let mut topic_sub = b
        .subscribe("topic://scheduled", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let due = now_ms() + 300;
    b.send(
        "topic://scheduled",
        Message::new("to the topic").deliver_at(due),
    )
    .await
    .unwrap();
    let got = take(&mut topic_sub, 1).await;
    assert!(now_ms() >= due);
    assert_eq!(body(&got[0]), "to the topic");
    b.shutdown().await.unwrap();
}

/// Scheduled messages that fall due while no broker runs are delivered at the next
/// start, once each, in due order (not send order); a second restart delivers none
/// again.
async fn due_messages_survive_a_stop_and_come_once_in_due_order(t: TestStore) {
    let b = queue_broker(&t).await;
    let base = now_ms() + 400;
    for (name, offset) in [("third", 300), ("first", 100), ("second", 200)] {
        b.send(Q, Message::new(name).deliver_at(base + offset))
            .await
            .unwrap();
    }
    b.shutdown().await.unwrap();
    drop(b);
    // All three fall due while the store is closed.
    let wait = (base + 300 - now_ms()).max(0) as u64 + 50;
    actix_rt::time::sleep(Duration::from_millis(wait)).await;

    let b = queue_broker(&t).await;
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 3).await.iter().map(body).collect();
    assert_eq!(got, ["first", "second", "third"]);
    assert!(quiet(&mut sub).await.is_none());
    drop(sub);
    b.shutdown().await.unwrap();
    drop(b);

    let b = queue_broker(&t).await;
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    assert!(quiet(&mut sub).await.is_none(), "acked messages came again");
    assert_eq!(b.scheduled_released(), 0);
    b.shutdown().await.unwrap();
}

/// An offline durable subscription gets a scheduled message when it is due, not when
/// it was sent: before, its backlog holds nothing; after, the message waits for it.
async fn a_durable_subscription_gets_it_when_due(t: TestStore) {
    let b = queue_broker(&t).await;
    let topic = "topic://scheduled.durable";
    let durable = || SubscribeOptions::durable("scheduler-test", "d");
    drop(b.subscribe(topic, durable()).await.unwrap());
    let due = now_ms() + 800;
    b.send(topic, Message::new("due later").deliver_at(due))
        .await
        .unwrap();
    let mut sub = b.subscribe(topic, durable()).await.unwrap();
    if let Some(early) = quiet(&mut sub).await {
        assert!(now_ms() >= due, "`{}` before it was due", body(&early));
    }
    drop(sub);
    let wait = (due - now_ms()).max(0) as u64 + 100;
    actix_rt::time::sleep(Duration::from_millis(wait)).await;
    let mut sub = b.subscribe(topic, durable()).await.unwrap();
    let got = take(&mut sub, 1).await;
    assert_eq!(body(&got[0]), "due later");
    b.shutdown().await.unwrap();
}

/// 2,000 messages falling due together are released in pages: each read once (the
/// store's fetched rows grow by what is released, never a re-read of the backlog), all
/// delivered once, in due order.
async fn a_large_schedule_is_released_in_pages_each_row_read_once(t: TestStore) {
    const N: usize = 2_000;
    let b = queue_broker(&t).await;
    // Far enough ahead that every one is scheduled before the first falls due (a
    // scheduled send waits for its commit: 2,000 of them take seconds on a busy
    // machine); checked below.
    let due = now_ms() + 10_000;
    let messages: Vec<Message> = (0..N)
        .map(|i| Message::new(format!("{i:05}")).deliver_at(due + (i / 100) as i64))
        .collect();
    for outcome in b.send_all(Q, messages).await {
        outcome.unwrap();
    }
    assert!(
        now_ms() < due,
        "sending took too long for this test's schedule"
    );
    let before = b.store().stats().snapshot();
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, N).await.iter().map(body).collect();
    let expected: Vec<String> = (0..N).map(|i| format!("{i:05}")).collect();
    assert_eq!(got, expected, "due order, each once");
    assert!(quiet(&mut sub).await.is_none());
    let fetched = b.store().stats().snapshot().message_rows - before.message_rows;
    assert!(
        fetched <= N as u64 + ebb::SCHEDULER_PAGE as u64,
        "{fetched} rows fetched to release {N}"
    );
    assert_eq!(b.scheduled_released(), N as u64);
    b.shutdown().await.unwrap();
}

/// Deleting a queue while its scheduled messages fall due: each one is either
/// released before the deletion (and deleted with the queue's rows) or cancelled by
/// it; none is released after it to make the queue again (the issue's trial: 248–295
/// messages in a queue deleted 4.5 s before, counted neither deleted nor cancelled).
async fn deleting_a_queue_as_its_messages_fall_due_cancels_every_one(t: TestStore) {
    const N: u64 = 2_000;
    let b = queue_broker(&t).await;
    let due = now_ms() + 3_000;
    let messages: Vec<Message> = (0..N)
        .map(|i| Message::new(format!("{i:05}")).deliver_at(due + 2 * i as i64))
        .collect();
    for outcome in b.send_all(Q, messages).await {
        outcome.unwrap();
    }
    // One falls due every 2 ms for 4 s: the deletion comes while they are released.
    poll_until("the first release", || async {
        (b.scheduled_released() > 0).then_some(())
    })
    .await;
    let deleted = b.delete_destination(Q).await.unwrap();
    assert_eq!(
        deleted.messages + deleted.scheduled,
        N,
        "each message released and deleted, or cancelled: {deleted:?}"
    );
    assert!(
        deleted.scheduled > 0,
        "the deletion came too late: {deleted:?}"
    );
    let released = b.scheduled_released();
    // Past anything the scheduler could still find due (a wait, not a measure).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(b.schedule_backlog().await.unwrap().scheduled, 0);
    assert_eq!(
        b.scheduled_released(),
        released,
        "released after the deletion"
    );
    assert_eq!(
        b.store().count_messages(Q).await.unwrap(),
        0,
        "the queue came back"
    );
    b.shutdown().await.unwrap();
}

/// Repeating jobs meet the store limit as producers do: 5 jobs of 10 kB firing every
/// 100 ms (the shortest period; a shorter one is refused) with nobody consuming stop
/// firing once the store holds its limit, and fire again once a consumer makes room.
/// Before, firings ignored the limit: 20 such jobs at 1 ms stored 136 × it.
async fn repeating_jobs_wait_at_the_store_limit(t: TestStore) {
    const LIMIT: u64 = 200 * 1024;
    const BODY: usize = 10 * 1024;
    let usage = UsageConfig {
        store: LIMIT,
        ..UsageConfig::default()
    };
    let policy = Policy {
        expire_messages_period: 0,
        ..Policy::default()
    };
    let b = broker_with(&t, vec![("queue://>", policy)], usage).await;
    let e = b
        .send(Q, Message::new("fast").repeat(Duration::from_millis(99), 3))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidValue, "{e}");
    for _ in 0..5 {
        let job = Message::new(vec![b'j'; BODY]).repeat(
            Duration::from_millis(ebb::MIN_SCHEDULED_PERIOD_MS),
            1_000_000,
        );
        b.send(Q, job).await.unwrap();
    }
    // Long enough for 150 firings without the limit (a wait, not a measure).
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let held = b.store().stored_bytes();
    let firings = b.store().count_messages(Q).await.unwrap();
    // What one page of the scheduler may fire past the limit: each job once.
    let page = 5 * (BODY as u64 + 1024);
    assert!(
        held <= LIMIT + page,
        "{held} bytes stored, limit {LIMIT}, {firings} messages"
    );
    assert!(firings >= 10, "only {firings} firings before the limit");
    // Room again: the jobs go on.
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got = take(&mut sub, firings as usize + 10).await;
    assert!(got.iter().all(|m| m.body().len() == BODY));
    drop(sub);
    b.shutdown().await.unwrap();
}

/// Scheduled messages falling due while a producer sends to the same queue: the
/// releases' ids and the publishes' interleave, and none is lost or doubled, also
/// with the consumer's cursor paging through the store.
async fn releases_racing_publishes_lose_nothing(t: TestStore) {
    let b = queue_broker(&t).await;
    // The consumer comes after: its cursor pages through what the race left stored.
    let sent = send_racing(&b, Q, 1_500).await;
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    expect_each_once(&mut sub, sent).await;
    b.shutdown().await.unwrap();
}

/// The same race on a topic: an online durable subscription gets every scheduled
/// message and every publish once, at once.
async fn a_durable_subscription_gets_releases_racing_publishes(t: TestStore) {
    let b = queue_broker(&t).await;
    let topic = "topic://scheduled.race";
    let mut sub = b
        .subscribe(topic, SubscribeOptions::durable("race", "d"))
        .await
        .unwrap();
    let sent = send_racing(&b, topic, 1_000).await;
    expect_each_once(&mut sub, sent).await;
    drop(sub);
    b.shutdown().await.unwrap();
}

/// Schedules `n` messages to `destination` falling due over 300 ms, then, as they
/// fall due, publishes `n` more there; returns how many were sent.
async fn send_racing(b: &Broker, destination: &str, n: usize) -> usize {
    let due = now_ms() + 1_500;
    let scheduled: Vec<Message> = (0..n)
        .map(|i| Message::new(format!("s{i}")).deliver_at(due + (i % 300) as i64))
        .collect();
    for outcome in b.send_all(destination, scheduled).await {
        outcome.unwrap();
    }
    let wait = (due - now_ms()).max(0) as u64;
    actix_rt::time::sleep(Duration::from_millis(wait)).await;
    let live: Vec<Message> = (0..n).map(|i| Message::new(format!("p{i}"))).collect();
    for outcome in b.send_all(destination, live).await {
        outcome.unwrap();
    }
    2 * n
}

/// `sent` distinct messages come on `sub`, each once, and no more.
async fn expect_each_once(sub: &mut ebb::Subscription, sent: usize) {
    let mut got: Vec<String> = take(sub, sent).await.iter().map(body).collect();
    assert!(quiet(sub).await.is_none(), "more than {sent}");
    got.sort();
    got.dedup();
    assert_eq!(got.len(), sent, "each once");
}

/// What cannot be honoured is refused: a non-persistent scheduled message, one to a
/// last-value queue; nothing of either is delivered.
async fn a_schedule_that_cannot_be_kept_is_refused(t: TestStore) {
    let b = queue_broker(&t).await;
    let due = now_ms() + 200;
    let e = b
        .send(Q, Message::new("np").persistent(false).deliver_at(due))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert_eq!(e.code(), ErrorCode::Unsupported);
    let e = b
        .send("lvq://scheduled", Message::new("keyed").deliver_at(due))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Unsupported, "{e}");
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    actix_rt::time::sleep(Duration::from_millis(300)).await;
    assert!(quiet(&mut sub).await.is_none());
    assert_eq!(b.scheduled_released(), 0);
    b.shutdown().await.unwrap();
}

/// Over STOMP: `AMQ_SCHEDULED_DELAY` delays a persistent SEND (RECEIPT at once, the
/// MESSAGE after the delay, with the header kept); a bad delay, the repeating headers
/// and a non-persistent scheduled SEND get an ERROR with its code.
async fn stomp_sends_take_amq_scheduled_delay(t: TestStore) {
    let s = server(&t, Policy::default()).await;
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\ndestination:/queue/delayed\nid:1\nreceipt:s\n\n\0")
        .await;
    receipt(&mut c, "s").await;
    let sent = now_ms();
    c.write(b"SEND\ndestination:/queue/delayed\npersistent:true\nAMQ_SCHEDULED_DELAY:700\nreceipt:r\n\nlater\0")
        .await;
    receipt(&mut c, "r").await;
    let m = c.frame().await.expect("the delayed MESSAGE");
    assert_eq!(m.command, Command::Message);
    assert!(now_ms() - sent >= 700, "{} ms", now_ms() - sent);
    assert_eq!(m.body, &b"later"[..]);
    assert_eq!(m.get("AMQ_SCHEDULED_DELAY"), Some("700"));

    // A cron job (every second, with seconds first): each firing delayed by 100 ms
    // and delivered without the scheduling headers; cancelled through its id.
    let cron_sent = now_ms();
    c.write(b"SEND\ndestination:/queue/delayed\npersistent:true\nAMQ_SCHEDULED_CRON:* * * * * *\nAMQ_SCHEDULED_DELAY:100\nkept:yes\nreceipt:cr\n\ntick\0")
        .await;
    receipt(&mut c, "cr").await;
    let mut ids = Vec::new();
    for n in 0..2 {
        let m = c.frame().await.expect("a cron firing");
        assert_eq!(m.body, &b"tick"[..]);
        // At the earliest: the next whole second after the SEND, plus the delay.
        let due = (cron_sent / 1000 + 1 + n) * 1000 + 100;
        assert!(now_ms() >= due, "{} ms before its delay", due - now_ms());
        assert_eq!(m.get("kept"), Some("yes"));
        assert_eq!(m.get("AMQ_SCHEDULED_CRON"), None, "{m:?}");
        assert_eq!(m.get("AMQ_SCHEDULED_DELAY"), None, "{m:?}");
        ids.push(m.get("message-id").unwrap().to_string());
    }
    assert_ne!(ids[0], ids[1], "each firing has its own message id");
    assert_eq!(
        s.broker
            .cancel_scheduled_to("queue://delayed")
            .await
            .unwrap(),
        1
    );
    while c.frame_within(1_200).await.is_some() {}

    // In a transaction: an ABORT drops it, a COMMIT schedules it.
    c.write(b"BEGIN\ntransaction:t1\n\n\0SEND\ndestination:/queue/delayed\npersistent:true\ntransaction:t1\nAMQ_SCHEDULED_DELAY:300\n\naborted\0ABORT\ntransaction:t1\n\n\0")
        .await;
    // The delay counts from the SEND (the broker stamps the due time when it reads
    // it), so the MESSAGE comes at least 300 ms after the frame was written; from the
    // COMMIT's receipt it may be less on a busy machine.
    let sent_at = now_ms();
    c.write(b"BEGIN\ntransaction:t2\n\n\0SEND\ndestination:/queue/delayed\npersistent:true\ntransaction:t2\nAMQ_SCHEDULED_DELAY:300\n\ncommitted\0")
        .await;
    c.write(b"COMMIT\ntransaction:t2\nreceipt:c\n\n\0").await;
    receipt(&mut c, "c").await;
    let m = c.frame().await.expect("the committed delayed MESSAGE");
    assert_eq!(m.body, &b"committed"[..]);
    assert!(
        now_ms() - sent_at >= 300,
        "{} ms after the SEND",
        now_ms() - sent_at
    );

    for (frame, code, says) in [
        (
            "SEND\ndestination:/queue/delayed\npersistent:true\nAMQ_SCHEDULED_DELAY:soon\n\nx\0",
            "invalid-value",
            "AMQ_SCHEDULED_DELAY",
        ),
        (
            "SEND\ndestination:/queue/delayed\npersistent:true\nAMQ_SCHEDULED_DELAY:-5\n\nx\0",
            "invalid-value",
            "AMQ_SCHEDULED_DELAY",
        ),
        (
            "SEND\ndestination:/queue/delayed\npersistent:true\nAMQ_SCHEDULED_DELAY:100\nAMQ_SCHEDULED_REPEAT:3\n\nx\0",
            "invalid-value",
            "AMQ_SCHEDULED_PERIOD",
        ),
        (
            "SEND\ndestination:/queue/delayed\npersistent:true\nAMQ_SCHEDULED_PERIOD:100\nAMQ_SCHEDULED_REPEAT:-1\n\nx\0",
            "invalid-value",
            "AMQ_SCHEDULED_REPEAT",
        ),
        (
            "SEND\ndestination:/queue/delayed\npersistent:true\nAMQ_SCHEDULED_CRON:61 * * * *\n\nx\0",
            "invalid-value",
            "AMQ_SCHEDULED_CRON",
        ),
        (
            "SEND\ndestination:/queue/delayed\npersistent:true\nAMQ_SCHEDULED_CRON:0 0 31 2 *\n\nx\0",
            "invalid-value",
            "never occurs",
        ),
        (
            "SEND\ndestination:/queue/delayed\npersistent:true\nAMQ_SCHEDULED_CRON:* * * * *\nAMQ_SCHEDULED_DELAY:x\n\nx\0",
            "invalid-value",
            "AMQ_SCHEDULED_DELAY",
        ),
        (
            "SEND\ndestination:/queue/delayed\nAMQ_SCHEDULED_DELAY:100\n\nnot persistent\0",
            "unsupported",
            "persistent",
        ),
    ] {
        let mut bad = Client::connected(s.addr, None).await;
        bad.write(frame.as_bytes()).await;
        let e = bad.frame().await.expect("an ERROR");
        assert_eq!(e.command, Command::Error, "{frame:?}: {e:?}");
        assert_eq!(e.get("error-code"), Some(code), "{frame:?}: {e:?}");
        assert!(
            e.get("message").unwrap_or_default().contains(says),
            "{frame:?}: {e:?}"
        );
        assert!(bad.closed().await);
    }
    assert!(c.quiet().await.is_none(), "nothing refused was delivered");
    s.stop().await;
}

/// A scheduled send in a transaction is scheduled only if the transaction commits:
/// rolled back, it is never delivered and leaves no row; committed, it is delivered
/// when due, not at the commit. Its bytes count against the transactions' budget
/// until then.
async fn a_scheduled_send_in_a_transaction_waits_for_the_commit(t: TestStore) {
    let b = queue_broker(&t).await;
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let mut tx = b.transaction("test:rolled-back");
    tx.send(Q, Message::new("rolled back").deliver_at(now_ms() + 200))
        .await
        .unwrap();
    assert!(b.usage().transactions_bytes > 0, "held by the transaction");
    assert_eq!(b.scheduled(None, 10).await.unwrap().messages.len(), 0);
    tx.rollback().await.unwrap();
    assert_eq!(b.usage().transactions_bytes, 0);

    let mut tx = b.transaction("test:committed");
    let due = now_ms() + 600;
    tx.send(Q, Message::new("committed").deliver_at(due))
        .await
        .unwrap();
    tx.send(Q, Message::new("at once")).await.unwrap();
    assert_eq!(
        b.scheduled(None, 10).await.unwrap().messages.len(),
        0,
        "not before the commit"
    );
    tx.commit().await.unwrap();
    assert_eq!(b.usage().transactions_bytes, 0);
    let page = b.scheduled(None, 10).await.unwrap();
    assert_eq!(page.messages.len(), 1, "{page:?}");
    assert_eq!(page.messages[0].due_ms, due);
    let first = take(&mut sub, 1).await;
    assert_eq!(body(&first[0]), "at once");
    let later = take(&mut sub, 1).await;
    assert!(now_ms() >= due, "delivered {} ms early", due - now_ms());
    assert_eq!(body(&later[0]), "committed");
    assert!(
        quiet(&mut sub).await.is_none(),
        "the rolled-back one never comes"
    );
    assert_eq!(b.scheduled_released(), 1);
    b.shutdown().await.unwrap();
}

/// A repeating message is one stored job: it fires `count + 1` times, a period
/// apart, never early, each firing a copy with its own message id, while one row
/// waits; its listing shows the firings left; cancelling it stops the rest.
async fn a_repeating_message_is_one_job_that_fires_its_count(t: TestStore) {
    let b = queue_broker(&t).await;
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let due = now_ms() + 200;
    b.send(
        Q,
        Message::new("tick")
            .deliver_at(due)
            .repeat(Duration::from_millis(300), 2),
    )
    .await
    .unwrap();
    let listed = b.scheduled(None, 10).await.unwrap().messages;
    assert_eq!(listed.len(), 1, "one job: {listed:?}");
    assert_eq!((listed[0].period_ms, listed[0].repeats_left), (300, 2));
    let mut ids = Vec::new();
    for firing in 0..3i64 {
        let m = take(&mut sub, 1).await.remove(0);
        let late = now_ms() - (due + firing * 300);
        assert!(late >= 0, "firing {firing} came {} ms early", -late);
        assert_eq!(body(&m), "tick");
        ids.push(m.message_id().to_string());
        let backlog = b.schedule_backlog().await.unwrap();
        assert_eq!(
            backlog.scheduled,
            u64::from(firing < 2),
            "after firing {firing}"
        );
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "each firing has its own message id");
    assert!(quiet(&mut sub).await.is_none(), "a fourth firing");
    assert_eq!(b.scheduled_released(), 3);

    // Cancelled after its first firing: no more come.
    b.send(
        Q,
        Message::new("stopped").repeat(Duration::from_millis(400), 5),
    )
    .await
    .unwrap();
    let first = take(&mut sub, 1).await.remove(0);
    assert_eq!(body(&first), "stopped");
    let job = poll_until("the job moved to its second firing", || async {
        let page = b.scheduled(None, 10).await.unwrap().messages;
        page.into_iter().find(|m| m.repeats_left == 4)
    })
    .await;
    assert!(b.cancel_scheduled(&job.id).await.unwrap());
    actix_rt::time::sleep(Duration::from_millis(500)).await;
    assert!(
        quiet(&mut sub).await.is_none(),
        "fired after it was cancelled"
    );
    let e = b
        .send(Q, Message::new("no period").repeat(Duration::ZERO, 3))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidValue, "{e}");
    b.shutdown().await.unwrap();
}

/// Firings that fall due while no broker runs come at the next start, each once: the
/// count in all is right across the restart.
async fn a_repeating_job_keeps_its_count_across_a_restart(t: TestStore) {
    let b = queue_broker(&t).await;
    b.send(
        Q,
        Message::new("r")
            .deliver_at(now_ms() + 100)
            .repeat(Duration::from_millis(150), 4),
    )
    .await
    .unwrap();
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let before = take(&mut sub, 1).await.len();
    drop(sub);
    b.shutdown().await.unwrap();
    drop(b);
    actix_rt::time::sleep(Duration::from_millis(500)).await;
    let b = queue_broker(&t).await;
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let mut after = 0;
    while quiet(&mut sub).await.is_some() {
        after += 1;
    }
    assert_eq!(
        before + after,
        5,
        "{before} before the restart, {after} after"
    );
    assert_eq!(b.schedule_backlog().await.unwrap().scheduled, 0);
    b.shutdown().await.unwrap();
}

/// A cron job (ActiveMQ's `AMQ_SCHEDULED_CRON`, here every second): one stored job
/// listed with its expression; each occurrence delivers a copy after the schedule's
/// delay and repeats it as asked, none early; cancelled, it fires no more.
async fn a_cron_job_fires_each_occurrence_until_cancelled(t: TestStore) {
    let b = queue_broker(&t).await;
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let sent = now_ms();
    let schedule = CronSchedule::parse("* * * * * *")
        .unwrap()
        .delay(Duration::from_millis(200));
    b.send(
        Q,
        Message::new("cron")
            .header("h", "v")
            .cron(schedule)
            .repeat(Duration::from_millis(100), 1),
    )
    .await
    .unwrap();
    let listed = b.scheduled(None, 10).await.unwrap().messages;
    assert_eq!(listed.len(), 1, "one job: {listed:?}");
    assert_eq!(listed[0].cron.as_deref(), Some("* * * * * *"));
    assert_eq!((listed[0].period_ms, listed[0].repeats_left), (100, 1));
    let first = (sent / 1000 + 1) * 1000;
    assert_eq!(
        listed[0].due_ms, first,
        "the next whole second after the send"
    );
    // Three occurrences, two deliveries each: at +200 and +300 ms.
    let mut ids = Vec::new();
    for n in 0..6i64 {
        let m = take(&mut sub, 1).await.remove(0);
        let due = first + (n / 2) * 1000 + 200 + (n % 2) * 100;
        assert!(
            now_ms() >= due,
            "delivery {n} came {} ms early",
            due - now_ms()
        );
        assert_eq!(body(&m), "cron");
        assert_eq!(m.header("h"), Some("v"));
        assert_eq!(m.header("AMQ_SCHEDULED_CRON"), None);
        ids.push(m.message_id().to_string());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6, "each delivery has its own message id");
    let job = b
        .scheduled(None, 10)
        .await
        .unwrap()
        .messages
        .into_iter()
        .find(|m| m.cron.is_some())
        .expect("the job waits for its next occurrence");
    assert!(b.cancel_scheduled(&job.id).await.unwrap());
    // Copies stored before the cancel still come (at most one occurrence's two).
    let mut after = 0;
    while actix_rt::time::timeout(
        Duration::from_millis(1_500),
        futures::StreamExt::next(&mut sub),
    )
    .await
    .is_ok()
    {
        after += 1;
    }
    assert!(after <= 2, "{after} came after the cancel");
    assert_eq!(b.schedule_backlog().await.unwrap().scheduled, 0);

    // A cron with a due time of its own is refused, as is a bad expression.
    let e = b
        .send(
            Q,
            Message::new("x")
                .deliver_at(now_ms() + 1_000)
                .cron(CronSchedule::parse("* * * * *").unwrap()),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidValue, "{e}");
    let e = CronSchedule::parse("* * * 13 *").unwrap_err();
    assert!(matches!(e, Error::InvalidCron { .. }), "{e}");
    assert_eq!(e.code(), ErrorCode::InvalidValue);
    b.shutdown().await.unwrap();
}

/// Occurrences missed while no broker runs fire once at the next start (as a cron
/// job catching up would flood its destination), and the job goes on after.
async fn a_cron_job_missed_while_stopped_fires_once(t: TestStore) {
    let b = queue_broker(&t).await;
    b.send(
        Q,
        Message::new("m").cron(CronSchedule::parse("* * * * * *").unwrap()),
    )
    .await
    .unwrap();
    b.shutdown().await.unwrap();
    drop(b);
    // Three occurrences pass.
    actix_rt::time::sleep(Duration::from_millis(3_200)).await;
    // Read before the start: an occurrence due while a slow start and subscribe go
    // on waits in the queue, and is not a second catch-up.
    let restarted = now_ms();
    let b = queue_broker(&t).await;
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    take(&mut sub, 1).await;
    // The next comes at the next whole second after the restart, not at once.
    let second = take(&mut sub, 1).await;
    assert_eq!(second.len(), 1);
    let next_second = (restarted / 1000 + 1) * 1000;
    assert!(
        now_ms() >= next_second,
        "a missed occurrence fired twice ({} ms before the next)",
        next_second - now_ms()
    );
    assert!(b.cancel_scheduled_to(Q).await.unwrap() >= 1);
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    deleting_a_queue_as_its_messages_fall_due_cancels_every_one,
    repeating_jobs_wait_at_the_store_limit,
    a_cron_job_fires_each_occurrence_until_cancelled,
    a_cron_job_missed_while_stopped_fires_once,
    a_scheduled_message_is_delivered_when_due_and_not_before,
    due_messages_survive_a_stop_and_come_once_in_due_order,
    a_schedule_that_cannot_be_kept_is_refused,
    a_scheduled_send_in_a_transaction_waits_for_the_commit,
    a_repeating_message_is_one_job_that_fires_its_count,
    a_repeating_job_keeps_its_count_across_a_restart,
    a_durable_subscription_gets_it_when_due,
    a_large_schedule_is_released_in_pages_each_row_read_once,
    releases_racing_publishes_lose_nothing,
    a_durable_subscription_gets_releases_racing_publishes,
    stomp_sends_take_amq_scheduled_delay,
);
