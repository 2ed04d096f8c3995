//! `ebb soak` end to end, short: 10,000 messages of 1 KiB on SQLite and PostgreSQL,
//! in process and through `--stomp` against a broker served over STOMP.
//! The counts are asserted (stored = sent; with a TTL, every message expires and the
//! drain ends), and no expiry page reads more rows than its size. Memory figures are
//! reported by the command, not asserted against the clock.

use ebb::cli::soak::{run, SoakOptions};
use ebb::test_util::*;

/// The TTL of the runs that expire their messages, ms. Long enough that every message
/// is stored before it expires, also on a loaded machine: a message that arrives
/// expired is counted expired at once, by no expiry page, and the page counts below
/// assume that housekeeping expired every one (200 ms was too short under a full
/// `.ci/run`: the STOMP run's sends queued that long).
const TTL_MS: u64 = 2_000;

fn options(t: &TestStore, ttl_ms: u64) -> SoakOptions {
    SoakOptions {
        store: Some(t.url.clone()),
        durable_subscribers: 1,
        messages: 10_000,
        size: 1024,
        ttl_ms,
        expire_period_ms: 100,
        max_expire_page_size: 400,
        producers: 4,
        window: 64,
        drain: false,
        sqlite_cache_kib: ebb_store::DEFAULT_SQLITE_CACHE_KIB,
        sqlite_memory_limit_kib: ebb_store::DEFAULT_SQLITE_MEMORY_LIMIT_KIB,
        live_subscribers: 0,
        json: true,
        plot: None,
        assert_flat: false,
        stomp: None,
        metrics: None,
        login: None,
    }
}

async fn backlog_without_ttl_is_stored_and_never_expired(t: TestStore) {
    let o = options(&t, 0);
    let report = run(&o, false).await.unwrap();
    assert_eq!(report.messages_sent, 10_000);
    assert_eq!(report.messages_stored, 10_000);
    assert_eq!(report.messages_expired, 0);
    assert_eq!(report.expiry_pages, 0, "no TTL: no expiry work");
    assert!(report.samples.iter().any(|s| s.stored_rows == 10_000));
    let json = serde_json::to_value(&report).unwrap();
    for key in [
        "messages_sent",
        "messages_stored",
        "messages_expired",
        "expiry_runs",
        "expiry_pages",
        "max_rows_per_expiry_page",
        "peak_rss_bytes",
        "elapsed_s",
        "store_url",
    ] {
        assert!(json.get(key).is_some(), "JSON lacks {key}");
    }
}

async fn backlog_with_ttl_drains_completely_in_bounded_pages(t: TestStore) {
    let o = options(&t, TTL_MS);
    let report = run(&o, false).await.unwrap();
    assert_eq!(report.messages_sent, 10_000);
    assert_eq!(
        report.messages_expired, 10_000,
        "every message expired for the durable subscription"
    );
    assert!(report.max_rows_per_expiry_page <= 400);
    assert!(
        report.expiry_pages >= 25,
        "10,000 rows take 25 pages of 400: {} pages",
        report.expiry_pages
    );
    assert!(report.drain_s.is_some());
}

/// `--drain`: the subscriber comes back, takes every message in store order (the run
/// fails otherwise), and cleanup then deletes every row.
async fn drain_takes_the_whole_backlog_in_order(t: TestStore) {
    let o = SoakOptions {
        drain: true,
        messages: 3_000,
        ..options(&t, 0)
    };
    let report = run(&o, false).await.unwrap();
    let drained = report.drained.expect("--drain reports its figures");
    assert_eq!(drained.messages, 3_000);
    assert!(report.samples.iter().any(|s| s.received == 3_000));
    assert_eq!(report.samples.last().map(|s| s.stored_rows), Some(0));
    assert!(report.samples.iter().any(|s| s.store_bytes > 0));
    let with_ttl = SoakOptions { ttl_ms: 200, ..o };
    let refused = run(&with_ttl, false).await.unwrap_err().to_string();
    assert!(refused.contains("--ttl-ms 0"), "{refused}");
}

/// `--stomp`: the same run against a broker served over STOMP, its figures read from
/// its metrics endpoint; the run's durable subscription is removed at the end.
async fn the_same_run_through_stomp(t: TestStore) {
    let s = ebb::test_util::stomp::server(&t, policy(100, 400)).await;
    let metrics = ebb::http::HttpServer::start(
        ebb::http::HttpOptions::new("127.0.0.1:0".parse().unwrap()),
        s.broker.clone(),
    )
    .await
    .unwrap();
    let o = SoakOptions {
        stomp: Some(s.addr.to_string()),
        metrics: Some(metrics.local_addr().to_string()),
        store: None,
        ..options(&t, TTL_MS)
    };
    let report = run(&o, false).await.unwrap();
    assert_eq!(report.messages_sent, 10_000);
    assert_eq!(report.messages_expired, 10_000);
    assert!(report.max_rows_per_expiry_page <= 400 && report.max_rows_per_expiry_page > 0);
    assert!(
        report.expiry_runs >= 1 && report.expiry_pages >= 25,
        "10,000 rows take 25 pages of 400: {} runs, {} pages",
        report.expiry_runs,
        report.expiry_pages
    );
    assert!(
        report.peak_rss_bytes > 0,
        "the broker's memory, read from its metrics"
    );
    assert!(report.store_url.starts_with("stomp://"));
    metrics.stop().await;
    s.stop().await;
}

on_every_backend!(
    #[actix_rt::test]
    the_same_run_through_stomp,
    backlog_without_ttl_is_stored_and_never_expired,
    backlog_with_ttl_drains_completely_in_bounded_pages,
    drain_takes_the_whole_backlog_in_order,
);
