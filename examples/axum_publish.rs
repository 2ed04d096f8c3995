//! An axum web service whose handler publishes to Ebb: `POST /queues/NAME` with a body
//! sends it, persistent, to `queue://NAME` and answers `202 Accepted` with the message
//! id once it is committed; `GET /queues/NAME` answers the queue's counters. A bad
//! name is a `400`, a full broker a `503`, never a panic. Ctrl-C stops the HTTP
//! server, then shuts the broker down.
//!
//! Run: `cargo run --example axum_publish` (listens on `127.0.0.1:3000`, or on
//! `EBB_EXAMPLE_HTTP`), then `curl -d 'hello' http://127.0.0.1:3000/queues/jobs`.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use ebb::{Broker, BrokerConfig, Error, Message};

/// An error as an HTTP answer: the client's fault (4xx) or the broker's state (503).
fn status(e: Error) -> (StatusCode, String) {
    let code = match &e {
        Error::InvalidDestination { .. } | Error::InvalidPriority(_) => StatusCode::BAD_REQUEST,
        Error::ResourceLimit { .. } | Error::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (code, format!("{e}\n"))
}

async fn publish(
    State(broker): State<Broker>,
    Path(queue): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, String), (StatusCode, String)> {
    let receipt = broker
        .send(format!("queue://{queue}"), Message::new(body))
        .await
        .map_err(status)?;
    Ok((StatusCode::ACCEPTED, format!("{}\n", receipt.message_id)))
}

async fn counters(
    State(broker): State<Broker>,
    Path(queue): Path<String>,
) -> Result<String, (StatusCode, String)> {
    let stats = broker.queue_stats(&queue).await.map_err(status)?;
    Ok(format!(
        "enqueued {} dequeued {} in_flight {}\n",
        stats.enqueued, stats.dequeued, stats.in_flight
    ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("EBB_EXAMPLE_HTTP").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let broker = Broker::start("sqlite::memory:", BrokerConfig::default()).await?;
    let app = Router::new()
        .route("/queues/:name", post(publish).get(counters))
        .with_state(broker.clone());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    broker.shutdown().await?;
    println!("shut down");
    Ok(())
}
