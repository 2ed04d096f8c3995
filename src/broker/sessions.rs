//! A protocol's persistent sessions (MQTT's `clean session` 0): the subscriptions a
//! client id holds while it is offline, kept in the store beside the destinations,
//! as wildcard durables and virtual topic groups keep their definitions. Each is one
//! row of the subscriptions table in container `session:PROTOCOL:CLIENT_ID`, named
//! `QOS:FILTER`; the messages themselves wait in the durable subscriptions the
//! protocol makes for them ([`crate::SubscribeOptions::durable`]).

use ebb_store::SubscriptionKey;

use super::Broker;
use crate::error::Error;

/// The client id of a session definition's row (never a client's: its container
/// says whose session it is).
const SESSION_ROW_CLIENT: &str = "ebb:session";

/// Rows read per page of a session's subscriptions.
const SESSION_PAGE: u32 = 500;

/// Most subscriptions a persistent session keeps (a SUBSCRIBE past it is refused).
pub const MAX_SESSION_SUBSCRIPTIONS: usize = 1_000;

/// One subscription of a persistent session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSubscription {
    /// The filter as the protocol names it (MQTT's `a/+/c`).
    pub filter: String,
    /// The QoS granted (0, 1 or 2).
    pub qos: u8,
}

fn container(protocol: &str, client_id: &str) -> String {
    format!("session:{protocol}:{client_id}")
}

impl Broker {
    /// The subscriptions stored for `client_id`'s persistent session of `protocol`
    /// (`"mqtt"`), in filter order; empty when it has none. Reads pages of
    /// [`SESSION_PAGE`] rows, at most [`MAX_SESSION_SUBSCRIPTIONS`] in all.
    ///
    /// Errors: a store error.
    pub async fn session_subscriptions(
        &self,
        protocol: &str,
        client_id: &str,
    ) -> Result<Vec<SessionSubscription>, Error> {
        self.refuse_if_shut_down()?;
        let container = container(protocol, client_id);
        let mut found = Vec::new();
        let mut after: Option<SubscriptionKey> = None;
        loop {
            let page = self
                .store()
                .list_subscriptions(&container, after.as_ref(), SESSION_PAGE)
                .await?;
            let full = page.len() == SESSION_PAGE as usize;
            after = page.last().map(|s| s.key.clone());
            for row in page {
                let name = &row.key.subscription_name;
                match name.split_once(':') {
                    Some((qos, filter)) if matches!(qos, "0" | "1" | "2") => {
                        found.push(SessionSubscription {
                            filter: filter.to_string(),
                            qos: qos.parse().unwrap_or(0),
                        })
                    }
                    _ => {
                        tracing::warn!(%container, %name, "a stored session subscription does not parse; it is left alone")
                    }
                }
            }
            if !full || found.len() >= MAX_SESSION_SUBSCRIPTIONS {
                found.sort_by(|a, b| a.filter.cmp(&b.filter));
                return Ok(found);
            }
        }
    }

    /// Stores `subscription` in `client_id`'s persistent session of `protocol`,
    /// replacing the one with the same filter (another QoS).
    ///
    /// Errors: a store error.
    pub async fn remember_session_subscription(
        &self,
        protocol: &str,
        client_id: &str,
        subscription: &SessionSubscription,
    ) -> Result<(), Error> {
        self.forget_session_subscription(protocol, client_id, &subscription.filter)
            .await?;
        let name = format!("{}:{}", subscription.qos, subscription.filter);
        self.store
            .subscribe(
                container(protocol, client_id),
                SubscriptionKey::new(SESSION_ROW_CLIENT, name),
                None,
                false,
            )
            .await?;
        Ok(())
    }

    /// Removes `filter` from `client_id`'s persistent session of `protocol`.
    /// Returns whether it was there.
    ///
    /// Errors: a store error.
    pub async fn forget_session_subscription(
        &self,
        protocol: &str,
        client_id: &str,
        filter: &str,
    ) -> Result<bool, Error> {
        let mut was = false;
        for qos in 0..=2u8 {
            let key = SubscriptionKey::new(SESSION_ROW_CLIENT, format!("{qos}:{filter}"));
            was |= self
                .store
                .unsubscribe(container(protocol, client_id), key)
                .await?;
        }
        Ok(was)
    }
}
