//! The embedding API works from any async runtime (issue: a plain `#[tokio::main]`
//! panicked in `Broker::start` with "`spawn_local` called from outside of a
//! `task::LocalSet`", and so did an auto-ack `Subscription` polled from a
//! `tokio::spawn`ed task): off actix the broker runs its actors on a thread of its
//! own (on actix, on the caller's system), and its handles are `Send + Sync`. The same workload runs under tokio's multi-threaded and
//! current-thread runtimes, in a `LocalSet`, and under actix: a durable topic
//! subscription, a queue consumer in a spawned task in the default auto-ack mode, a
//! wildcard topic subscription (an actor started from the caller), a restart that finds
//! what was left, and shutdown.

use ebb::test_util::*;
use ebb::{
    Acker, Broker, BrokerConfig, Message, QueueBrowser, Received, SubscribeOptions, Subscription,
};

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

/// The workload each runtime runs; `spawn` runs a consumer task the runtime's way.
async fn workload<S, F>(t: TestStore, spawn: S)
where
    S: Fn(Subscription) -> F,
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
        .subscribe("topic://rt.*", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let consumer = spawn(queue);
    for i in 0..20 {
        b.send("queue://rt.jobs", Message::new(format!("j{i}")))
            .await
            .unwrap();
        b.send("topic://rt.events", Message::new(format!("e{i}")))
            .await
            .unwrap();
    }
    let got = consumer.await;
    assert_eq!(got, (0..20).map(|i| format!("j{i}")).collect::<Vec<_>>());
    let events: Vec<String> = take(&mut wildcard, 20).await.iter().map(body).collect();
    assert_eq!(events, (0..20).map(|i| format!("e{i}")).collect::<Vec<_>>());
    assert!(quiet(&mut wildcard).await.is_none(), "20 events, once each");
    b.shutdown().await.unwrap();
    drop(b);

    let b = start(&t).await;
    let mut sub = b.subscribe("topic://rt.events", durable).await.unwrap();
    let events: Vec<String> = take(&mut sub, 20).await.iter().map(body).collect();
    assert_eq!(events, (0..20).map(|i| format!("e{i}")).collect::<Vec<_>>());
    assert!(
        quiet(&mut sub).await.is_none(),
        "the durable subscription kept 20"
    );
    b.shutdown().await.unwrap();
}

/// The 20 jobs, taken in the consumer's task; then nothing more (QUIET).
async fn consume(mut queue: Subscription) -> Vec<String> {
    let got = take(&mut queue, 20).await.iter().map(body).collect();
    assert!(quiet(&mut queue).await.is_none(), "20 jobs, once each");
    got
}

async fn on_tokio_multi_thread(t: TestStore) {
    workload(
        t,
        |q| async move { tokio::spawn(consume(q)).await.unwrap() },
    )
    .await;
}

async fn on_tokio_current_thread(t: TestStore) {
    workload(
        t,
        |q| async move { tokio::spawn(consume(q)).await.unwrap() },
    )
    .await;
}

async fn in_a_local_set(t: TestStore) {
    let local = tokio::task::LocalSet::new();
    local
        .run_until(workload(t, |q| async move {
            tokio::task::spawn_local(consume(q)).await.unwrap()
        }))
        .await;
}

async fn on_actix(t: TestStore) {
    workload(
        t,
        |q| async move { actix_rt::spawn(consume(q)).await.unwrap() },
    )
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
