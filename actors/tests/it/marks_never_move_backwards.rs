//! Mark updates through the store actor never move a mark backwards and are never
//! lost, however they interleave: 10,000 cumulative acks in random order end at the
//! highest id, and an expiry ack racing a consumer ack always ends past both.

use ebb_actors::{StoreActorConfig, StoreHandle};
use ebb_store::test_util::{fill, on_every_backend, subscribe_durable, TestStore, EXPIRED};
use ebb_store::{MessageStore, SubscriptionKey};
use rand::seq::SliceRandom;

const T: &str = "topic://marks";

async fn setup(
    t: &TestStore,
    count: usize,
    expiration: i64,
) -> (StoreHandle, SubscriptionKey, Vec<i64>) {
    let store = t.open().await;
    let k = subscribe_durable(&*store, T, "c1", "s1").await;
    let ids = fill(&*store, T, count, expiration).await;
    (
        StoreHandle::start(store, StoreActorConfig::default()),
        k,
        ids,
    )
}

/// A cumulative ack of every priority up to `up_to`; returns whether the mark moved.
async fn ack_up_to(
    handle: &StoreHandle,
    key: SubscriptionKey,
    up_to: i64,
) -> Result<bool, ebb_actors::ActorError> {
    handle.ack_up_to(T.into(), key, None, up_to).await
}

async fn mark(store: &dyn MessageStore, k: &SubscriptionKey) -> i64 {
    store.find_subscription(T, k).await.unwrap().unwrap().marks[0].1
}

async fn random_order_cumulative_acks_end_at_the_highest(t: TestStore) {
    let (handle, k, mut ids) = setup(&t, 10_000, 0).await;
    let highest = *ids.last().unwrap();
    ids.shuffle(&mut rand::thread_rng());
    let tasks: Vec<_> = ids
        .into_iter()
        .map(|id| {
            let handle = handle.clone();
            let k = k.clone();
            actix_rt::spawn(async move { ack_up_to(&handle, k, id).await.unwrap() })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(mark(&**handle.store(), &k).await, highest);
    handle.close().await.unwrap();
}

async fn expiry_ack_racing_consumer_ack_is_never_lost(t: TestStore) {
    let (handle, k, ids) = setup(&t, 500, EXPIRED).await;
    for round in 0..50 {
        let base = round * 10;
        let consumer = {
            let (handle, k) = (handle.clone(), k.clone());
            let up_to = ids[base + 4];
            actix_rt::spawn(async move { ack_up_to(&handle, k, up_to).await })
        };
        let expiry = {
            let (handle, k) = (handle.clone(), k.clone());
            let run: Vec<(i64, u8)> = ids[base + 5..base + 10].iter().map(|&id| (id, 4)).collect();
            actix_rt::spawn(async move { handle.ack(T.into(), k, run).await })
        };
        consumer.await.unwrap().unwrap();
        expiry.await.unwrap().unwrap();
        assert_eq!(
            mark(&**handle.store(), &k).await,
            ids[base + 9],
            "round {round}"
        );
    }
    assert_eq!(handle.store().count_individual_acks(T).await.unwrap(), 0);
    handle.close().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    random_order_cumulative_acks_end_at_the_highest,
    expiry_ack_racing_consumer_ack_is_never_lost,
);
