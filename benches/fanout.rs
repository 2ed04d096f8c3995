//! Fan-out: one topic, 1, 10 and 100 non-durable subscriptions, in-process,
//! non-persistent 256-byte messages, auto ack. Throughput is in deliveries per second
//! (messages × subscriptions).
//!
//! Run: `cargo bench --bench fanout`.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ebb::{Broker, BrokerConfig, Message, Policy, PolicyEntry, PolicyMap, SubscribeOptions};
use futures::StreamExt;

fn config() -> BrokerConfig {
    BrokerConfig {
        policies: PolicyMap {
            entries: vec![PolicyEntry {
                destination: "topic://>".into(),
                // No discards while the consumers catch up with the producer.
                policy: Policy {
                    max_pending_non_durable: u32::MAX,
                    ..Policy::default()
                },
            }],
        },
        ..BrokerConfig::default()
    }
}

fn fanout(c: &mut Criterion) {
    let mut group = c.benchmark_group("fanout");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for subscribers in [1u64, 10, 100] {
        group.throughput(Throughput::Elements(subscribers));
        group.bench_function(BenchmarkId::from_parameter(subscribers), |b| {
            b.iter_custom(|iters| {
                actix_rt::System::new().block_on(async move {
                    let broker = Broker::start("sqlite::memory:", config()).await.unwrap();
                    let mut consumers = Vec::new();
                    for _ in 0..subscribers {
                        let mut sub = broker
                            .subscribe("topic://fan", SubscribeOptions::non_durable())
                            .await
                            .unwrap();
                        consumers.push(actix_rt::spawn(async move {
                            for _ in 0..iters {
                                sub.next().await.expect("delivery");
                            }
                        }));
                    }
                    let start = Instant::now();
                    for _ in 0..iters {
                        let m = Message::new(vec![b'x'; 256]).persistent(false);
                        broker.send("topic://fan", m).await.unwrap();
                    }
                    for c in consumers {
                        c.await.unwrap();
                    }
                    let elapsed = start.elapsed();
                    broker.shutdown().await.unwrap();
                    elapsed
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, fanout);
criterion_main!(benches);
