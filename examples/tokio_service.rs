//! A plain tokio service that embeds Ebb: no actix in sight. A producer task sends a
//! job every 50 ms to `queue://jobs`, a consumer task takes each one, "works", and
//! acks it; Ctrl-C (SIGINT) shuts the broker down gracefully, which ends the
//! consumer's stream and the producer's sends, so both tasks return on their own.
//!
//! Run: `cargo run --example tokio_service` (messages in `ebb-data/example.db`; set
//! `EBB_EXAMPLE_STORE=sqlite::memory:` for none). Stop it with Ctrl-C.

use std::time::Duration;

use ebb::{AckMode, Broker, BrokerConfig, Error, Message, SubscribeOptions};
use futures::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let store = std::env::var("EBB_EXAMPLE_STORE")
        .unwrap_or_else(|_| "sqlite://ebb-data/example.db".into());
    let broker = Broker::start(&store, BrokerConfig::default()).await?;

    let mut jobs = broker
        .subscribe(
            "queue://jobs",
            SubscribeOptions::non_durable().ack(AckMode::Client),
        )
        .await?;
    let consumer = tokio::spawn(async move {
        let mut done = 0u64;
        // Ends (`None`) when the broker shuts down.
        while let Some(job) = jobs.next().await {
            let text = String::from_utf8_lossy(job.body()).into_owned();
            println!("worked on {text}");
            match jobs.ack(&job).await {
                Ok(()) => done += 1,
                // The broker shut down meanwhile: this job is not acked, so it is
                // delivered again after the next start.
                Err(Error::ShuttingDown) => break,
                Err(e) => return Err(e),
            }
        }
        Ok::<_, Error>(done)
    });

    let producer = {
        let broker = broker.clone();
        tokio::spawn(async move {
            let mut sent = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tick.tick().await;
                let job = Message::new(format!("job {sent}"));
                match broker.send("queue://jobs", job).await {
                    Ok(_) => sent += 1,
                    // After shutdown: stop producing.
                    Err(Error::ShuttingDown) => return Ok(sent),
                    Err(e) => return Err(e),
                }
            }
        })
    };

    println!("ready: sending a job every 50 ms; Ctrl-C stops");
    tokio::signal::ctrl_c().await.expect("a Ctrl-C handler");
    println!("shutting down");
    broker.shutdown().await?;
    let sent = producer.await.expect("the producer task")?;
    let done = consumer.await.expect("the consumer task")?;
    println!("sent {sent}, worked on {done}; the rest waits in the store");
    Ok(())
}
