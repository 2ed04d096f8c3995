//! A protocol's persistent sessions (MQTT's `clean session` 0): the subscriptions a
//! client id holds while it is offline, kept in the store beside the destinations,
//! as wildcard durables and virtual topic groups keep their definitions. Each is one
//! row of the subscriptions table in container `session:PROTOCOL:CLIENT_ID`, named
//! `QOS:FILTER`; the messages themselves wait in the durable subscriptions the
//! protocol makes for them ([`crate::SubscribeOptions::durable`]).
//!
//! A session that ends after a time offline (MQTT 5.0's session expiry interval) has
//! its deadline stored twice: a row `expiry:DEADLINE_MS` in its own container, and a
//! row `DEADLINE_MS:CLIENT_ID` (the deadline zero-padded to 20 digits, so the rows
//! sort by deadline) in `session-expiry:PROTOCOL`, which the protocol's sweeper reads
//! in pages, earliest first ([`Broker::session_expiries`]).

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

/// The name prefix of a session's deadline row in its own container.
const EXPIRY_ROW: &str = "expiry:";

fn container(protocol: &str, client_id: &str) -> String {
    format!("session:{protocol}:{client_id}")
}

fn expiry_container(protocol: &str) -> String {
    format!("session-expiry:{protocol}")
}

fn expiry_index_name(deadline_ms: i64, client_id: &str) -> String {
    format!("{deadline_ms:020}:{client_id}")
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
                if name.starts_with(EXPIRY_ROW) {
                    continue;
                }
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

    /// Stores that `client_id`'s session of `protocol` ends at `deadline_ms` (ms since
    /// the epoch) unless it is resumed before ([`Broker::cancel_session_expiry`]),
    /// replacing an earlier deadline. The protocol deletes it then.
    ///
    /// Errors: a store error.
    pub async fn expire_session_at(
        &self,
        protocol: &str,
        client_id: &str,
        deadline_ms: i64,
    ) -> Result<(), Error> {
        self.cancel_session_expiry(protocol, client_id).await?;
        let deadline_ms = deadline_ms.max(0);
        self.store
            .subscribe(
                expiry_container(protocol),
                SubscriptionKey::new(
                    SESSION_ROW_CLIENT,
                    expiry_index_name(deadline_ms, client_id),
                ),
                None,
                false,
            )
            .await?;
        self.store
            .subscribe(
                container(protocol, client_id),
                SubscriptionKey::new(SESSION_ROW_CLIENT, format!("{EXPIRY_ROW}{deadline_ms}")),
                None,
                false,
            )
            .await?;
        Ok(())
    }

    /// When `client_id`'s session of `protocol` is to end (ms since the epoch), or
    /// `None` when no deadline is stored. Reads at most 4 rows.
    ///
    /// Errors: a store error.
    pub async fn session_expires_at(
        &self,
        protocol: &str,
        client_id: &str,
    ) -> Result<Option<i64>, Error> {
        Ok(self
            .expiry_rows(protocol, client_id)
            .await?
            .into_iter()
            .min())
    }

    /// The deadlines stored in `client_id`'s session container (one, unless a crash
    /// came between two writes).
    async fn expiry_rows(&self, protocol: &str, client_id: &str) -> Result<Vec<i64>, Error> {
        // `expiry:` sorts after every `QOS:FILTER` name (`0:`..`2:` < `e`).
        let from = SubscriptionKey::new(SESSION_ROW_CLIENT, EXPIRY_ROW);
        let rows = self
            .store()
            .list_subscriptions(&container(protocol, client_id), Some(&from), 4)
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                r.key
                    .subscription_name
                    .strip_prefix(EXPIRY_ROW)
                    .and_then(|d| d.parse().ok())
            })
            .collect())
    }

    /// Removes `client_id`'s session deadline (it was resumed, or has ended). Returns
    /// whether one was stored.
    ///
    /// Errors: a store error.
    pub async fn cancel_session_expiry(
        &self,
        protocol: &str,
        client_id: &str,
    ) -> Result<bool, Error> {
        let deadlines = self.expiry_rows(protocol, client_id).await?;
        for deadline in &deadlines {
            self.store
                .unsubscribe(
                    expiry_container(protocol),
                    SubscriptionKey::new(
                        SESSION_ROW_CLIENT,
                        expiry_index_name(*deadline, client_id),
                    ),
                )
                .await?;
            self.store
                .unsubscribe(
                    container(protocol, client_id),
                    SubscriptionKey::new(SESSION_ROW_CLIENT, format!("{EXPIRY_ROW}{deadline}")),
                )
                .await?;
        }
        Ok(!deadlines.is_empty())
    }

    /// Removes one row of `protocol`'s deadline index (one whose session row says
    /// otherwise: the session was resumed and ended again, or its client is
    /// connected).
    ///
    /// Errors: a store error.
    pub async fn forget_session_expiry(
        &self,
        protocol: &str,
        client_id: &str,
        deadline_ms: i64,
    ) -> Result<(), Error> {
        self.store
            .unsubscribe(
                expiry_container(protocol),
                SubscriptionKey::new(
                    SESSION_ROW_CLIENT,
                    expiry_index_name(deadline_ms, client_id),
                ),
            )
            .await?;
        Ok(())
    }

    /// The first `limit` session deadlines of `protocol` after `after` (a deadline and
    /// client id read before, in that order; `None`: from the earliest), earliest
    /// first: (client id, deadline ms since the epoch). One bounded read of the index.
    ///
    /// Errors: a store error.
    pub async fn session_expiries(
        &self,
        protocol: &str,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<(String, i64)>, Error> {
        self.refuse_if_shut_down()?;
        let after = after.map(|(deadline, client)| {
            SubscriptionKey::new(
                SESSION_ROW_CLIENT,
                expiry_index_name(deadline.max(0), client),
            )
        });
        let rows = self
            .store()
            .list_subscriptions(&expiry_container(protocol), after.as_ref(), limit)
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let (deadline, client) = r.key.subscription_name.split_once(':')?;
                Some((client.to_string(), deadline.parse().ok()?))
            })
            .collect())
    }
}
