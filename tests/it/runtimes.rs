//! The embedding API works from any async runtime (issue: a plain `#[tokio::main]`
//! panicked in `Broker::start` with "`spawn_local` called from outside of a
//! `task::LocalSet`", and so did an auto-ack `Subscription` polled from a
//! `tokio::spawn`ed task): off actix the broker runs its actors on a thread of its
//! own (on actix, on the caller's system), and its handles are `Send + Sync`. The same workload runs under tokio's multi-threaded and
//! current-thread runtimes, in a `LocalSet`, and under actix: a durable topic
//! subscription, a queue consumer in a spawned task in the default auto-ack mode, a
//! wildcard subscription (an actor started from the caller), a restart that finds
//! what was left, and shutdown.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ebb::test_util::*;
use ebb::{
    Acker, Broker, BrokerConfig, Message, QueueBrowser, Received, SubscribeOptions, Subscription,
};
use futures::StreamExt;

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Broker>();
    send_sync::<Acker>();
    send_sync::<Received>();
    send::<Subscription>();
    send::<QueueBrowser>();
}

async fn start(t: &TestStore) -> Broker {
    let config = BrokerConfig {
        store: t.options.clone(),
        ..BrokerConfig::default()
    };
    Broker::start(&t.url, config).await.expect("broker starts")
}

/// How the consumer task learns that all 20 jobs were received (by it or by the
/// wildcard subscription), and counts its own.
#[derive(Clone)]
struct Jobs {
    received: Arc<AtomicUsize>,
    done: tokio::sync::watch::Receiver<bool>,
}

/// The workload each runtime runs; `spawn` runs a consumer task the runtime's way.
async fn workload<S, F>(t: TestStore, spawn: S)
where
    S: Fn(Subscription, Jobs) -> F,
    F: std::future::Future<Output = Vec<String>>,
{
    let b = start(&t).await;
    let durable = SubscribeOptions::durable("rt", "sub");
    drop(
        b.subscribe("topic://rt.events", durable.clone())
            .await
            .unwrap(),
    );
    let queue = b
        .subscribe("queue://rt.jobs", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let mut wildcard = b
        .subscribe("queue://rt.*", SubscribeOptions::non_durable().prefetch(1))
        .await
        .unwrap();
    let (done_tx, done) = tokio::sync::watch::channel(false);
    let received = Arc::new(AtomicUsize::new(0));
    let jobs = Jobs {
        received: Arc::clone(&received),
        done,
    };
    let consumer = spawn(queue, jobs);
    for i in 0..20 {
        b.send("queue://rt.jobs", Message::new(format!("j{i}")))
            .await
            .unwrap();
        b.send("topic://rt.events", Message::new(format!("e{i}")))
            .await
            .unwrap();
    }
    // The wildcard subscription's share, read until the two have all 20.
    let mut from_wildcard = Vec::new();
    {
        let reading = async {
            while let Some(m) = wildcard.next().await {
                from_wildcard.push(body(&m));
                received.fetch_add(1, Ordering::SeqCst);
            }
        };
        tokio::select! {
            () = reading => panic!("the wildcard subscription ended"),
            () = poll_until("20 jobs received", || async {
                (received.load(Ordering::SeqCst) >= 20).then_some(())
            }) => {}
        }
    }
    done_tx.send(true).unwrap();
    let got = consumer.await;
    let mut all: Vec<String> = got.iter().chain(&from_wildcard).cloned().collect();
    all.sort_by_key(|j| j[1..].parse::<u32>().unwrap());
    assert_eq!(
        all,
        (0..20).map(|i| format!("j{i}")).collect::<Vec<_>>(),
        "{got:?} and {from_wildcard:?}"
    );
    b.shutdown().await.unwrap();
    drop(b);

    let b = start(&t).await;
    let mut sub = b.subscribe("topic://rt.events", durable).await.unwrap();
    let events: Vec<String> = take(&mut sub, 20).await.iter().map(body).collect();
    assert_eq!(events, (0..20).map(|i| format!("e{i}")).collect::<Vec<_>>());
    // Only 20 were sent: a marker sent now is next.
    b.send("topic://rt.events", Message::new("marker"))
        .await
        .unwrap();
    assert_eq!(body(&next(&mut sub).await), "marker");
    b.shutdown().await.unwrap();
}

/// The consumer's share of 20 jobs (it stops once all 20 were received).
async fn consume(mut queue: Subscription, mut jobs: Jobs) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        tokio::select! {
            m = queue.next() => {
                got.push(body(&m.expect("the queue subscription ended")));
                jobs.received.fetch_add(1, Ordering::SeqCst);
            }
            _ = jobs.done.changed() => return got,
        }
    }
}

async fn on_tokio_multi_thread(t: TestStore) {
    workload(t, |q, jobs| async move {
        tokio::spawn(consume(q, jobs)).await.unwrap()
    })
    .await;
}

async fn on_tokio_current_thread(t: TestStore) {
    workload(t, |q, jobs| async move {
        tokio::spawn(consume(q, jobs)).await.unwrap()
    })
    .await;
}

async fn in_a_local_set(t: TestStore) {
    let local = tokio::task::LocalSet::new();
    local
        .run_until(workload(t, |q, jobs| async move {
            tokio::task::spawn_local(consume(q, jobs)).await.unwrap()
        }))
        .await;
}

async fn on_actix(t: TestStore) {
    workload(t, |q, jobs| async move {
        actix_rt::spawn(consume(q, jobs)).await.unwrap()
    })
    .await;
}

on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    on_tokio_multi_thread,
);
on_every_backend!(
    #[tokio::test(flavor = "current_thread")]
    on_tokio_current_thread,
    in_a_local_set,
);
on_every_backend!(
    #[actix_rt::test]
    on_actix
);
