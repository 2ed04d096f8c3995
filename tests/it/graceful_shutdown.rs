//! Shutdown stops the timers, lets the expiry page in flight finish, starts no new
//! one, flushes every accepted write, and closes the store last. Nothing accepted is
//! lost: after a restart every message that had not expired is still delivered.

use ebb::test_util::*;
use ebb::{AckMode, Message, SubscribeOptions};

async fn shutdown_during_a_long_expiry_run(t: TestStore) {
    preload(&t, "topic://long", &[("c", "s")], 20_000, EXPIRED).await;
    let b = broker(&t, policy(3_600_000, 100), 1).await;
    // Accepted just before shutdown: must survive it.
    for i in 0..5 {
        b.send("topic://long", Message::new(format!("live-{i}")))
            .await
            .unwrap();
    }
    b.run_housekeeping("topic://long").await.unwrap();
    wait_for(&b, "long", |s| s.expiry_pages >= 2).await;
    b.shutdown().await.unwrap();

    let at_shutdown = b.topic_stats("topic://long").await.unwrap();
    assert_eq!(
        at_shutdown.expiry_pages_started, at_shutdown.expiry_pages,
        "the page in flight finished before shutdown returned"
    );
    assert!(
        at_shutdown.expired < 20_000,
        "the run was cut short, not completed"
    );
    // A page that begins after shutdown has no later event to mark it: watch QUIET. A
    // slow machine can only make this pass wrongly, never fail a correct broker.
    actix_rt::time::sleep(QUIET).await;
    let later = b.topic_stats("topic://long").await.unwrap();
    assert_eq!(
        later.expiry_pages_started, at_shutdown.expiry_pages_started,
        "no page began after shutdown"
    );
    assert!(
        b.send("topic://long", Message::new("late")).await.is_err(),
        "a stopped broker refuses sends"
    );

    let b = broker(&t, policy(0, 100), 1).await;
    let mut sub = b
        .subscribe(
            "topic://long",
            SubscribeOptions::durable("c", "s")
                .ack(AckMode::Client)
                .prefetch(1000),
        )
        .await
        .unwrap();
    let mut got = Vec::new();
    for m in take(&mut sub, 5).await {
        got.push(body(&m));
        sub.ack(&m).await.unwrap();
    }
    assert_eq!(got, (0..5).map(|i| format!("live-{i}")).collect::<Vec<_>>());
    // Nothing expired is delivered: a marker sent now is next.
    b.send("topic://long", Message::new("marker"))
        .await
        .unwrap();
    assert_eq!(body(&next(&mut sub).await), "marker");
    b.shutdown().await.unwrap();
}

/// A second broker on the same store is refused while the first runs, and starts
/// once the first has shut down (case STORE-11; the SIGKILL half, where the lock dies
/// with the process and a restart serves at once, is `stomp_py::crash_safety`).
async fn one_broker_per_store(t: TestStore) {
    let first = broker(&t, policy(0, 100), 1).await;
    let config = ebb::BrokerConfig {
        store: t.options.clone(),
        ..ebb::BrokerConfig::default()
    };
    let err = ebb::Broker::start(&t.url, config.clone())
        .await
        .err()
        .expect("a second broker is refused");
    assert!(
        err.to_string().contains("in use by another broker"),
        "{err}"
    );
    first.shutdown().await.unwrap();
    let second = ebb::Broker::start(&t.url, config)
        .await
        .expect("starts after the first");
    second.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    shutdown_during_a_long_expiry_run,
    one_broker_per_store,
);
