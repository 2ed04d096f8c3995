//! Expiry runs in bounded pages: a full page chains the next one at once through the
//! topic's mailbox, a short page ends the run, and no page loads more than
//! `max_expire_page_size` rows. A topic with no message that expires does no expiry
//! work at all, however often its timer ticks.

use ebb::test_util::*;

/// 1,000 expired messages, page 400, period one hour: one tick expires all 1,000 in
/// exactly 3 pages (400, 400, 200) without waiting for another period. With no
/// selector the pages read the messages' ids, not their bodies.
async fn full_pages_chain_without_waiting_for_the_next_period(t: TestStore) {
    preload(&t, "topic://chain", &[("c", "s")], 1_000, EXPIRED).await;
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let before = b.store().stats().snapshot();
    b.run_housekeeping("topic://chain").await.unwrap();
    let stats = wait_for(&b, "chain", |s| s.expired == 1_000).await;
    let read = b.store().stats().snapshot();
    assert_eq!(read.key_rows - before.key_rows, 1_000);
    assert_eq!(read.message_rows - before.message_rows, 0, "no body read");
    assert_eq!(stats.ticks, 1, "one tick");
    assert_eq!(stats.expiry_pages, 3);
    assert_eq!(stats.expiry_pages_started, 3);
    assert_eq!(
        stats.max_expiry_page_rows, 400,
        "no page holds more than 400"
    );
    // The run is over: nothing else starts. No later event marks when a chained page
    // would start (one is due at once, through the mailbox): watch QUIET. A slow
    // machine can only make this pass wrongly, never fail a correct broker.
    actix_rt::time::sleep(QUIET).await;
    let after = b.topic_stats("topic://chain").await.unwrap();
    assert_eq!(after.expiry_pages_started, 3);
    // The next tick deletes the acked rows, in bounded batches.
    b.run_housekeeping("topic://chain").await.unwrap();
    wait_for(&b, "chain", |s| s.cleaned_up == 1_000).await;
    assert_eq!(b.store().count_messages("topic://chain").await.unwrap(), 0);
    b.shutdown().await.unwrap();
}

/// 50,000 messages without TTL, period 10 ms, for 100 periods: zero expiry pages, zero
/// message rows read, and no timer wake-ups once the start-up cleanup is done.
async fn no_ttl_backlog_costs_no_expiry_work(t: TestStore) {
    preload(&t, "topic://calm", &[("c", "offline")], 50_000, 0).await;
    let b = broker(&t, policy(10, 400), 2).await;
    let before = b.store().stats().snapshot();
    let started = wait_for(&b, "calm", |s| s.cleanup_batches == 1).await;
    // Timer wake-ups that do not happen: no later event marks them, so this watches 100
    // periods (the window is what is measured). A slow machine can only make it pass
    // wrongly (fewer ticks), never fail a correct broker.
    actix_rt::time::sleep(std::time::Duration::from_millis(100 * 10)).await;
    let stats = b.topic_stats("topic://calm").await.unwrap();
    assert!(!stats.expiry_armed);
    assert_eq!(stats.expiry_pages_started, 0, "no expiry query was made");
    // The start-up cleanup took a tick or two; then the timer stopped.
    assert!(stats.ticks <= started.ticks + 1, "{} ticks", stats.ticks);
    assert!(
        stats.ticks < 10,
        "the timer kept running: {} ticks",
        stats.ticks
    );
    let after = b.store().stats().snapshot();
    assert_eq!(
        after.message_rows - before.message_rows,
        0,
        "no message row was read"
    );
    b.shutdown().await.unwrap();
}

/// A message with an expiration arms housekeeping; once the store holds no message
/// with an expiration, a run that finds nothing disarms it again.
async fn expiry_arms_on_first_expiring_message_and_disarms_when_none_left(t: TestStore) {
    let b = broker(&t, policy(20, 400), 2).await;
    drop(
        b.subscribe("topic://arm", ebb::SubscribeOptions::durable("c", "s"))
            .await
            .unwrap(),
    );
    assert!(!b.topic_stats("topic://arm").await.unwrap().expiry_armed);
    b.send(
        "topic://arm",
        // Long enough that no tick can expire it (and disarm) before the check below,
        // however slow the commit on a loaded machine.
        ebb::Message::new("x").ttl(std::time::Duration::from_millis(1_000)),
    )
    .await
    .unwrap();
    assert!(b.topic_stats("topic://arm").await.unwrap().expiry_armed);
    wait_for(&b, "arm", |s| s.expired == 1 && s.cleaned_up == 1).await;
    let disarmed = wait_for(&b, "arm", |s| !s.expiry_armed).await;
    b.send("topic://arm", ebb::Message::new("plain"))
        .await
        .unwrap();
    // Arming happens as the send is accepted, so `expiry_armed` below is read after
    // it; wake-ups that do not happen have no later event: this watches 5 periods (the
    // window is what is measured; a slow machine can only make it pass wrongly).
    actix_rt::time::sleep(std::time::Duration::from_millis(5 * 20)).await;
    let later = b.topic_stats("topic://arm").await.unwrap();
    assert!(
        !later.expiry_armed,
        "a message without expiration does not arm it"
    );
    assert_eq!(
        later.ticks, disarmed.ticks,
        "the timer stopped: no wake-ups"
    );
    assert_eq!(later.expiry_pages_started, disarmed.expiry_pages_started);
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    full_pages_chain_without_waiting_for_the_next_period,
    no_ttl_backlog_costs_no_expiry_work,
    expiry_arms_on_first_expiring_message_and_disarms_when_none_left,
);
