//! The Prometheus recorder (the `prometheus` feature), installed once per process,
//! and the task that refreshes it from [`Broker::stats`]; the HTTP server
//! (`crate::http`) renders it at `/metrics`. How and why is in the parent module's
//! documentation.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;

use super::{describe, names, record, LATENESS_BUCKETS, PAGE_ROW_BUCKETS};
use crate::{Broker, Error};

/// How often the refresh task copies [`Broker::stats`] into the metrics.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

static HANDLE: Mutex<Option<PrometheusHandle>> = Mutex::new(None);

/// Installs the Prometheus recorder as the process's `metrics` recorder, once, and
/// returns a handle that renders it; later calls return the same handle.
///
/// Errors: [`Error::Metrics`] when another `metrics` recorder was installed first (an
/// application embedding Ebb with its own exporter: Ebb's metrics then go to that one,
/// and this endpoint cannot serve them).
pub fn install_recorder() -> Result<PrometheusHandle, Error> {
    let mut slot = HANDLE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(handle) = slot.as_ref() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(names::EXPIRY_PAGE_ROWS.into()),
            PAGE_ROW_BUCKETS,
        )
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(names::SCHEDULED_LATENESS_SECONDS.into()),
                LATENESS_BUCKETS,
            )
        })
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| Error::Metrics(format!("cannot install the Prometheus recorder: {e}")))?;
    describe();
    *slot = Some(handle.clone());
    Ok(handle)
}

/// One refresh: the broker's kept reading brought up to date (what changed since the
/// last one), its broker-wide values recorded, and, when a step is due, the history's
/// point from what changed since the last point. Costs what changed.
pub(crate) async fn refresh(
    broker: &Broker,
    history: &crate::history::History,
    connections: &crate::transport::connections::Connections,
) -> Result<(), Error> {
    broker.refresh_reading().await?;
    let summary = broker.stats_summary().await?;
    record(&summary);
    let now = crate::history::now_ms();
    if history.wants(now) {
        // What changed since the last point (whoever refreshed the reading since).
        // Each destination's stats are made as the history takes them, one at a time.
        let changes = broker.reading().take_since_point(broker.stats_board());
        history.record_changes(changes, &summary, connections.len(), now);
    }
    Ok(())
}

/// Refreshes the metrics from the broker until `stop`: the recorder's broker-wide
/// values, the per-destination `series`, and `history` (with the open `connections`
/// counted); see the module documentation.
pub(crate) async fn refresh_loop(
    broker: Broker,
    handle: PrometheusHandle,
    series: super::DestinationSeries,
    history: std::sync::Arc<crate::history::History>,
    connections: crate::transport::connections::Connections,
    mut stop: watch::Receiver<bool>,
) {
    let mut failing = false;
    series.follow(broker.clone());
    while !*stop.borrow() {
        let started = Instant::now();
        match refresh(&broker, &history, &connections).await {
            Ok(()) => {
                if failing {
                    tracing::info!("metrics refresh works again");
                    failing = false;
                }
            }
            Err(e) if !failing => {
                tracing::warn!(error = %e, "metrics refresh failed; the last values stay until it works again");
                failing = true;
            }
            Err(_) => {}
        }
        crate::metrics::record_lease(broker.lease_renewals());
        // Drains histogram samples into their buckets (the recorder leaves it to us).
        handle.run_upkeep();
        let wait = REFRESH_EVERY.max(started.elapsed());
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            changed = stop.changed() => if changed.is_err() { break },
        }
    }
}
