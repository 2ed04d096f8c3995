//! 5.0's session expiry: a persistent session whose connection ended more than its
//! session expiry interval ago is deleted, with its durable subscriptions and their
//! backlogs. The deadline is stored when the connection ends
//! ([`crate::broker::Broker::expire_session_at`]); one task per server reads the earliest
//! deadlines in pages of [`EXPIRY_PAGE`] rows, ends the sessions that are due, and
//! sleeps until the next deadline (at most [`EXPIRY_IDLE`]), or until a session gets a
//! deadline. Deadlines are in the store, so a session that expires while the broker
//! is down is deleted when it starts again.
//!
//! A connected session's deadline is not known yet: its CONNECT stores
//! [`connected`]`(interval)` in its place (a value past any real deadline, which
//! never falls due), so a session whose connection a stop or a crash ended is found
//! at the next start, and its interval counts from then.

use std::time::Duration;

use tokio::sync::watch;

use super::session::{connected, discard_stored_session, PROTOCOL};
use super::Mqtt;
use crate::Error;

/// Deadlines read per page, earliest first.
pub const EXPIRY_PAGE: u32 = 100;

/// Longest sleep between two reads of the deadlines (another server on the store may
/// have written one this one was not told of).
pub const EXPIRY_IDLE: Duration = Duration::from_secs(60);

/// After a store error, the next read waits this long.
const RETRY: Duration = Duration::from_secs(5);

/// Ends the persistent sessions whose deadline has passed, until `stopped`. First,
/// the sessions that were connected when the broker last stopped (their deadline is
/// still [`connected`]) get their deadline, counted from now.
pub async fn run(mqtt: Mqtt, mut stopped: watch::Receiver<bool>) {
    if let Err(e) = count_from_start(&mqtt).await {
        tracing::warn!(error = %e, "cannot give the MQTT sessions connected at the last stop their deadlines");
    }
    loop {
        let wait = match expire_due(&mqtt).await {
            Ok(Some(next)) => Duration::from_millis(next.max(0) as u64).min(EXPIRY_IDLE),
            Ok(None) => EXPIRY_IDLE,
            Err(Error::ShuttingDown) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the MQTT sessions' deadlines; trying again");
                RETRY
            }
        };
        if wait.is_zero() {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = mqtt.config.state.expiries.notified() => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
    }
}

/// The sessions connected when the broker stopped (deadline [`connected`]) and not
/// connected again since: their interval counts from now.
async fn count_from_start(mqtt: &Mqtt) -> Result<(), Error> {
    let now = super::session::epoch_ms();
    // Below every mark (`DEADLINE:` sorts before `DEADLINE:CLIENT`).
    let mut after = (connected(0) - 1, String::new());
    loop {
        let page = mqtt
            .broker
            .session_expiries(PROTOCOL, Some((after.0, &after.1)), EXPIRY_PAGE)
            .await?;
        let full = page.len() == EXPIRY_PAGE as usize;
        for (client, marker) in page {
            let secs = marker - connected(0);
            if secs >= i64::from(u32::MAX) {
                // Sessions that never expire sort last: nothing more to count.
                return Ok(());
            }
            if let Ok(_claim) = mqtt.config.client_ids.claim(&client, false).await {
                if mqtt.broker.session_expires_at(PROTOCOL, &client).await? == Some(marker) {
                    mqtt.broker
                        .expire_session_at(PROTOCOL, &client, now + secs * 1_000)
                        .await?;
                }
            }
            after = (marker, client);
        }
        if !full {
            return Ok(());
        }
    }
}

/// Ends the due sessions of the first page: the ms until the next deadline (0: read
/// again at once), or `None` when none is stored.
async fn expire_due(mqtt: &Mqtt) -> Result<Option<i64>, Error> {
    let page = mqtt
        .broker
        .session_expiries(PROTOCOL, None, EXPIRY_PAGE)
        .await?;
    let now = super::session::epoch_ms();
    let full = page.len() == EXPIRY_PAGE as usize;
    for (client, deadline) in page {
        if deadline > now {
            return Ok(Some(deadline - now));
        }
        expire(mqtt, &client, deadline).await?;
    }
    Ok(full.then_some(0))
}

/// Ends `client`'s session if it is still offline with this deadline.
async fn expire(mqtt: &Mqtt, client: &str, deadline: i64) -> Result<(), Error> {
    let broker = &mqtt.broker;
    // Held while it ends, so the client cannot resume half of it.
    let Ok(_claim) = mqtt.config.client_ids.claim(client, false).await else {
        // Its client id is held. By the session's MQTT client connected again: its
        // CONNECT replaced the deadline, so this row is stale. By another connection
        // (a STOMP client of the same id, or a CONNECT under way): the session ends
        // once the id is free, tried again after a while.
        if broker.session_expires_at(PROTOCOL, client).await? == Some(deadline) {
            let later = super::session::epoch_ms() + RETRY.as_millis() as i64;
            return broker.expire_session_at(PROTOCOL, client, later).await;
        }
        return broker
            .forget_session_expiry(PROTOCOL, client, deadline)
            .await;
    };
    if broker.session_expires_at(PROTOCOL, client).await? != Some(deadline) {
        return broker
            .forget_session_expiry(PROTOCOL, client, deadline)
            .await;
    }
    let stored = broker.session_subscriptions(PROTOCOL, client).await?;
    discard_stored_session(broker, client, &stored, None).await?;
    broker
        .forget_session_expiry(PROTOCOL, client, deadline)
        .await?;
    mqtt.config.state.received.lock().remove(client);
    tracing::info!(client_id = %client, subscriptions = stored.len(), "an MQTT session expired (5.0's session expiry interval): deleted with its backlog");
    Ok(())
}
