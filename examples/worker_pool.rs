//! A pool of competing consumers on one queue: each message goes to one worker,
//! round-robin among those with room in their prefetch. The main task sends a batch
//! with `send_all`, waits until every job is done, then shuts the broker down.
//!
//! Run: `cargo run --example worker_pool -- [WORKERS] [JOBS]` (default 4 and 1,000).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ebb::{AckMode, Broker, BrokerConfig, Error, Message, SubscribeOptions};
use futures::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let workers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
    let jobs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let broker = Broker::start("sqlite::memory:", BrokerConfig::default()).await?;

    let done = Arc::new(AtomicU64::new(0));
    let all_done = Arc::new(tokio::sync::Notify::new());
    let mut pool = Vec::new();
    for worker in 0..workers {
        // A small prefetch spreads the jobs; each worker acks as it goes.
        let options = SubscribeOptions::non_durable()
            .ack(AckMode::Client)
            .prefetch(10);
        let mut queue = broker.subscribe("queue://work", options).await?;
        let (done, all_done) = (Arc::clone(&done), Arc::clone(&all_done));
        pool.push(tokio::spawn(async move {
            let mut mine = 0u64;
            while let Some(job) = queue.next().await {
                mine += 1;
                queue.ack(&job).await?;
                if done.fetch_add(1, Ordering::AcqRel) + 1 == jobs {
                    all_done.notify_one();
                }
            }
            Ok::<_, Error>((worker, mine))
        }));
    }

    let batch = (0..jobs).map(|i| Message::new(format!("job {i}")));
    for outcome in broker.send_all("queue://work", batch).await {
        outcome?;
    }
    all_done.notified().await;
    // Every ack committed, every worker's stream ends.
    broker.shutdown().await?;
    let mut total = 0;
    for worker in pool {
        let (id, mine) = worker.await.expect("a worker task")?;
        println!("worker {id}: {mine} jobs");
        total += mine;
    }
    println!("{total} jobs done by {workers} workers");
    assert_eq!(total, jobs, "each job done once");
    Ok(())
}
