//! The harness of Ebb's end-to-end tests (cargo feature `test-util`, enabled only
//! from dev-dependencies): the store harness of [`ebb_store::test_util`] (a fresh
//! store per test, SQLite and PostgreSQL, and [`on_every_backend!`]) plus helpers to
//! run a broker on it and wait for what it reports; [`stomp`] puts it on a TCP port
//! and talks to it.

//!
//! **Waiting.** A test waits for the event it needs (the frame, the message, the row,
//! the counter), never for a time: every wait for something that must happen is
//! guarded by one limit, [`PATIENCE`], that only turns a hang into a failure and that
//! no passing run comes near. A check that something does *not* happen waits for a
//! later event that would come after it (a marker message behind it on the same
//! destination, the receipt of a later frame, a counter that moves only after it); where
//! there is none it watches for [`QUIET`] and says why that window is enough. No test
//! sleeps to order events.

pub mod heap;
pub mod mqtt;
pub mod stomp;

use std::time::Duration;

/// How long a test waits for something that must happen before it calls it a hang:
/// 60 s. It is a guard, not a measure: no assertion depends on how long a wait took,
/// and a passing run on a loaded 2-core machine takes a small fraction of it. Every
/// positive wait of the harness (`next`, `take`, `frame`, `wait_for`, `poll_until`)
/// uses it; change it here and only here.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The window a test watches to see that something does *not* happen when no later
/// event marks the moment it would have happened by: 300 ms. A busy machine can only
/// make such a check pass when it should have failed (the unwanted frame comes after
/// the window), never fail a correct broker, so the window decides how sensitive the
/// check is, not whether the suite is stable. Prefer a marker: see [`stomp::Client::next_is`].
pub const QUIET: Duration = Duration::from_millis(300);

/// Polls `check` every 10 ms until it returns `Some`, and returns that value; panics
/// naming `what` after [`PATIENCE`]. For an event the test cannot subscribe to (a row
/// count, a counter, a file, a log line).
pub async fn poll_until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waited {PATIENCE:?} for {what}"
        );
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A broker (SQLite in memory) on a thread of its own named `thread`, with an actix
/// system, as `ebb serve` runs it, for a fuzz test's cases to share: `serve` starts
/// the listener the test needs and returns its address and what must live as long
/// as it (the server). Panics on that thread are counted in `panics` (a panic hook,
/// chained to the one before). Returns the address once it listens.
pub fn serve_on_thread<F, Fut>(
    thread: &'static str,
    panics: &'static std::sync::atomic::AtomicU64,
    serve: F,
) -> std::net::SocketAddr
where
    F: FnOnce(crate::Broker) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = (std::net::SocketAddr, Box<dyn std::any::Any>)>,
{
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() == Some(thread) {
            panics.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        previous(info);
    }));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            actix_rt::System::new().block_on(async move {
                let broker =
                    crate::Broker::start("sqlite::memory:", crate::BrokerConfig::default())
                        .await
                        .expect("broker");
                let (addr, _alive) = serve(broker).await;
                tx.send(addr).unwrap();
                std::future::pending::<()>().await;
            });
        })
        .unwrap();
    rx.recv().expect("the fuzz server starts")
}

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

/// Polls the topic's counters until `done` holds ([`PATIENCE`] only keeps a broken
/// build from hanging; no assertion depends on how long this takes).
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
    let deadline = std::time::Instant::now() + PATIENCE;
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

/// The next message, or `None` if none arrives within `ms`. For the few tests that
/// measure a window themselves; wait with [`next`], [`take`] or [`quiet`] instead.
pub async fn next_within(sub: &mut Subscription, ms: u64) -> Option<Received> {
    actix_rt::time::timeout(Duration::from_millis(ms), sub.next())
        .await
        .ok()
        .flatten()
}

/// The next message; panics if the subscription ends or none comes within
/// [`PATIENCE`].
pub async fn next(sub: &mut Subscription) -> Received {
    match actix_rt::time::timeout(PATIENCE, sub.next()).await {
        Ok(Some(m)) => m,
        Ok(None) => panic!("the subscription ended while a message was awaited"),
        Err(_) => panic!("no message within {PATIENCE:?}"),
    }
}

/// Exactly the next `n` messages, in order (each awaited as [`next`] does).
pub async fn take(sub: &mut Subscription, n: usize) -> Vec<Received> {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        match actix_rt::time::timeout(PATIENCE, sub.next()).await {
            Ok(Some(m)) => got.push(m),
            Ok(None) => panic!("the subscription ended after {} of {n} messages", got.len()),
            Err(_) => panic!("{} of {n} messages within {PATIENCE:?}", got.len()),
        }
    }
    got
}

/// Exactly `n` messages in total from whichever of `subs` has one, each as it comes
/// (competing consumers: which one takes a message is the destination's choice);
/// then checks that none of them gets one more within [`QUIET`]. Returns what each
/// received, in order, one `Vec` per subscription. Panics as [`take`] does.
pub async fn take_spread(subs: &mut [Subscription], n: usize) -> Vec<Vec<Received>> {
    let mut got: Vec<Vec<Received>> = subs.iter().map(|_| Vec::new()).collect();
    {
        let mut all = futures::stream::select_all(
            subs.iter_mut()
                .enumerate()
                .map(|(i, sub)| sub.map(move |m| (i, m))),
        );
        for k in 0..n {
            match actix_rt::time::timeout(PATIENCE, all.next()).await {
                Ok(Some((i, m))) => got[i].push(m),
                Ok(None) => panic!("the subscriptions ended after {k} of {n} messages"),
                Err(_) => panic!("{k} of {n} messages within {PATIENCE:?}"),
            }
        }
    }
    for (i, sub) in subs.iter_mut().enumerate() {
        if let Some(m) = quiet(sub).await {
            panic!("more than {n}: subscription {i} got {:?} too", body(&m));
        }
    }
    got
}

/// A message that comes within [`QUIET`], or `None`: for a check that nothing more
/// comes when no later event marks the moment (see [`QUIET`]).
pub async fn quiet(sub: &mut Subscription) -> Option<Received> {
    actix_rt::time::timeout(QUIET, sub.next())
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

/// Polls a queue's counters until `done` holds ([`PATIENCE`] only keeps a broken
/// build from hanging; no assertion depends on how long this takes).
pub async fn wait_for_queue(
    broker: &Broker,
    queue: &str,
    done: impl Fn(&crate::QueueStats) -> bool,
) -> crate::QueueStats {
    let deadline = std::time::Instant::now() + PATIENCE;
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
    let deadline = std::time::Instant::now() + PATIENCE;
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
