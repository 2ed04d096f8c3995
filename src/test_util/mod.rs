//! The harness of Ebb's end-to-end tests (cargo feature `test-util`, enabled only
//! from dev-dependencies): the store harness of [`ebb_store::test_util`] (a fresh
//! store per test, SQLite and PostgreSQL, and [`on_every_backend!`]) plus helpers to
//! run a broker on it and wait for what it reports; [`stomp`] puts it on a TCP port
//! and talks to it.

pub mod stomp;

use std::time::Duration;

pub use ebb_store::test_util::*;
use futures::StreamExt;

use crate::{
    Broker, BrokerConfig, Policy, PolicyEntry, PolicyMap, Received, Subscription, TopicStats,
};

/// A broker on `t` with `policy` for every topic and `permits` housekeeping permits.
pub async fn broker(t: &TestStore, policy: Policy, permits: usize) -> Broker {
    let config = BrokerConfig {
        store: t.options.clone(),
        housekeeping_permits: permits,
        ..topic_config(policy)
    };
    Broker::start(&t.url, config).await.expect("broker starts")
}

/// The default configuration with `policy` for every topic (for
/// [`Broker::start_with_store`], which takes its store as it is).
pub fn topic_config(policy: Policy) -> BrokerConfig {
    BrokerConfig {
        policies: PolicyMap {
            entries: vec![PolicyEntry {
                destination: "topic://>".into(),
                policy,
            }],
        },
        ..BrokerConfig::default()
    }
}

/// A policy with `period` ms between housekeeping ticks and `page` rows per expiry page.
pub fn policy(period: u64, page: u32) -> Policy {
    Policy {
        expire_messages_period: period,
        max_expire_page_size: page,
        ..Policy::default()
    }
}

/// Polls the topic's counters until `done` holds. The 30 s limit only keeps a broken
/// build from hanging; no assertion depends on how long this takes.
pub async fn wait_for(
    broker: &Broker,
    topic: &str,
    done: impl Fn(&TopicStats) -> bool,
) -> TopicStats {
    // The topic's plain name or its key (`long`, `topic://long`).
    let key = match topic.contains("://") {
        true => topic.to_string(),
        false => format!("topic://{topic}"),
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stats = broker.topic_stats(&key).await.unwrap();
        if done(&stats) {
            return stats;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "condition never held: {stats:?}"
        );
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The next message, or `None` if none arrives within `ms`.
pub async fn next_within(sub: &mut Subscription, ms: u64) -> Option<Received> {
    actix_rt::time::timeout(Duration::from_millis(ms), sub.next())
        .await
        .ok()
        .flatten()
}

/// Bodies as text.
pub fn body(m: &Received) -> String {
    String::from_utf8_lossy(m.body()).into_owned()
}

/// Creates durable subscriptions directly in the store and fills `container` with
/// `count` messages expiring at `expiration`, before any broker runs on it (fast
/// set-up of large backlogs).
pub async fn preload(
    t: &TestStore,
    container: &str,
    subs: &[(&str, &str)],
    count: usize,
    expiration: i64,
) {
    let store = t.open().await;
    for (client, name) in subs {
        subscribe_durable(&*store, container, client, name).await;
    }
    fill(&*store, container, count, expiration).await;
    store.close().await;
}

/// A broker on `t` with the given policy entries and usage limits.
pub async fn broker_with(
    t: &TestStore,
    entries: Vec<(&str, Policy)>,
    usage: crate::UsageConfig,
) -> Broker {
    let config = BrokerConfig {
        store: t.options.clone(),
        policies: PolicyMap {
            entries: entries
                .into_iter()
                .map(|(destination, policy)| PolicyEntry {
                    destination: destination.into(),
                    policy,
                })
                .collect(),
        },
        housekeeping_permits: 2,
        usage,
        ..BrokerConfig::default()
    };
    Broker::start(&t.url, config).await.expect("broker starts")
}

/// Polls a queue's counters until `done` holds (30 s only keeps a broken build from
/// hanging; no assertion depends on how long this takes).
pub async fn wait_for_queue(
    broker: &Broker,
    queue: &str,
    done: impl Fn(&crate::QueueStats) -> bool,
) -> crate::QueueStats {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stats = broker.queue_stats(queue).await.unwrap();
        if done(&stats) {
            return stats;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "condition never held: {stats:?}"
        );
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls the store until `container` holds `rows` message rows (acks are answered
/// after their commit, but an auto ack is sent in the background).
pub async fn wait_rows(broker: &Broker, container: &str, rows: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = broker.store().count_messages(container).await.unwrap();
        if now == rows {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{container} holds {now} rows, never {rows}"
        );
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
}
