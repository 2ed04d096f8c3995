//! Temporary destinations (JMS `TemporaryQueue` / `TemporaryTopic`, STOMP
//! `/temp-queue/NAME` and `/temp-topic/NAME` as ActiveMQ and RabbitMQ take them): the
//! reply address of request/reply.
//!
//! A connection (a STOMP session, or a [`TemporaryQueue`] of the embedding API) names
//! one in its own namespace; [`Broker::temporary`] gives it the name no other
//! connection has, `<broker tag>-<connection>-<unguessable>.<NAME>` (store key
//! `temp-queue://ebb-lx3k9q-7-2f0c...k1.replies`, STOMP
//! `/remote-temp-queue/ebb-lx3k9q-7-2f0c...k1.replies`, ActiveMQ's form for another
//! connection's temporary destination), and records the connection as its owner. The
//! unguessable part is 128 bits from the operating system's CSPRNG
//! ([`UNGUESSABLE_DIGITS`] base-36 digits), drawn anew for every temporary
//! destination: knowing the broker's tag, the connection numbers, and the names of
//! one's own temporary destinations tells nothing of another's (the tag and the
//! connection number alone made them guessable: hardening issue, point 2). The rules,
//! the same on every way in:
//! - **Consume**: only the owner ([`SubscribeOptions::connection`]); a subscription
//!   from elsewhere gets [`Error::InvalidDestination`]. No wildcard matches one.
//! - **Browse**: the owner, or a user with the `read` right of
//!   `[temp_destination_authorization_entry]` ([`Broker::may_browse`]).
//! - **Send**: while it exists; a send to one whose connection has ended (or that was
//!   never made) gets [`Error::InvalidDestination`] and nothing is stored: as
//!   ActiveMQ, which refuses a publish to a deleted temporary destination
//!   (`InvalidDestinationException`), rather than dropping it unseen.
//! - **Rights** (the protocols check them, [`crate::auth::Security::authorize_temporary`]):
//!   its own connection needs none on it. Making one and sending to another
//!   connection's need the `admin` and `write` rights of
//!   `[temp_destination_authorization_entry]` (ActiveMQ's
//!   `tempDestinationAuthorizationEntry`) when it is configured; without it, anyone
//!   connected may make one, and may send to one whose name it was given (a
//!   request's `reply-to`): the name is the capability, and it cannot be guessed.
//! - **Bounds**: a connection has at most [`MAX_TEMPORARIES_PER_CONNECTION`] alive at
//!   once, a user (over its connections) at most
//!   [`crate::UsageConfig::max_temporary_destinations_per_user`], the broker at most
//!   [`crate::UsageConfig::max_temporary_destinations`]; one more is refused with
//!   [`Error::TooManyTemporaryDestinations`] (`limit-exceeded`) until one ends, so
//!   clients that make them in a loop cannot take the broker's memory (each costs a
//!   few tens of KB while it lives: hardening issue, point 4).
//! - **Life**: [`Broker::end_temporaries`] (the STOMP session calls it when its
//!   connection ends; a [`TemporaryQueue`] when dropped) forgets them at once, so
//!   sends are refused from then on, and deletes each with its stored messages
//!   ([`Broker::delete_destination`]). At start, the broker deletes what a previous
//!   run left in the store (a crash ends every connection): nothing temporary
//!   survives a restart or a takeover.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ebb_actors::destination::now_ms;
use ebb_actors::{DestinationKey, DestinationKind};
use rand::Rng;

use super::{Broker, Message, Received, SubscribeOptions, Subscription};
use crate::error::{Error, TemporaryLimit};

/// Connection numbers, one counter for every way in: a message's origin
/// ([`Message::from_connection`]) and the owner of temporary destinations.
static CONNECTIONS: AtomicU64 = AtomicU64::new(1);

/// A new connection number, never given before in this process (see
/// [`Message::from_connection`], [`SubscribeOptions::connection`]).
pub fn next_connection_id() -> u64 {
    CONNECTIONS.fetch_add(1, Ordering::Relaxed)
}

/// Most temporary destinations one connection may have at once (a client that makes
/// them in a loop is refused with [`Error::TooManyTemporaryDestinations`], not served
/// until memory runs out; the user's and the broker's limits are in
/// [`crate::UsageConfig`]).
pub const MAX_TEMPORARIES_PER_CONNECTION: usize = 1_000;

/// Base-36 digits of the unguessable part of a temporary destination's name: 25
/// digits hold every 128-bit number (36^25 > 2^129).
pub const UNGUESSABLE_DIGITS: usize = 25;

/// Who owns which temporary destination (see the module documentation).
pub(crate) struct Temporaries {
    /// This broker's part of every name: its start time, base 36.
    tag: String,
    owners: parking_lot::Mutex<Owners>,
}

#[derive(Default)]
struct Owners {
    /// Every temporary destination alive → the connection that made it.
    by_key: HashMap<DestinationKey, u64>,
    by_connection: HashMap<u64, Made>,
    /// How many each user (login) has alive, over its connections (none at 0).
    by_user: HashMap<String, usize>,
}

/// What one connection has made: its names (kind, the name it gave) → their keys,
/// and the user it made them as.
#[derive(Default)]
struct Made {
    named: HashMap<(DestinationKind, String), DestinationKey>,
    user: Option<String>,
}

impl Default for Temporaries {
    fn default() -> Self {
        Self {
            tag: format!("ebb-{}", base36(u128::from(now_ms().max(0) as u64), 0)),
            owners: Default::default(),
        }
    }
}

/// `n` in base 36 (lower case), at least `width` digits (zeros in front).
fn base36(mut n: u128, width: usize) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 && out.len() >= width {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// The unguessable part of a new temporary destination's name: 128 bits from the
/// operating system's CSPRNG ([`rand::rngs::OsRng`]), [`UNGUESSABLE_DIGITS`] base-36
/// digits.
fn unguessable() -> String {
    base36(rand::rngs::OsRng.gen::<u128>(), UNGUESSABLE_DIGITS)
}

impl Broker {
    /// The temporary destination of `kind` ([`DestinationKind::TEMP_QUEUE`] or
    /// [`DestinationKind::TEMP_TOPIC`]) that connection `connection` calls `name`
    /// (STOMP's `/temp-queue/NAME`): made on first use, with a name no one can guess
    /// (`<broker tag>-<connection>-<128 random bits>.NAME`), the same key each time
    /// after. See the module documentation for its rules. Rights are the caller's to
    /// check (the protocols check the `admin` right of
    /// `[temp_destination_authorization_entry]` before they call it).
    ///
    /// Errors: [`Error::InvalidDestination`] for a kind that is not temporary, or a
    /// name that cannot be one (empty, wildcards, too long with the broker's prefix:
    /// about 150 bytes are left for it); [`Error::TooManyTemporaryDestinations`] when
    /// the connection has [`MAX_TEMPORARIES_PER_CONNECTION`] alive, or the broker
    /// [`crate::UsageConfig::max_temporary_destinations`].
    pub fn temporary(
        &self,
        connection: u64,
        kind: DestinationKind,
        name: &str,
    ) -> Result<DestinationKey, Error> {
        self.temporary_for(connection, None, kind, name)
    }

    /// [`Broker::temporary`] for a connection logged in as `user` (its login; `None`:
    /// without one), whose temporary destinations alive at once, over all its
    /// connections, are bounded by [`crate::UsageConfig::max_temporary_destinations_per_user`].
    /// A connection's first temporary destination records its user.
    ///
    /// Errors: as [`Broker::temporary`], and [`Error::TooManyTemporaryDestinations`]
    /// when the connection, the user or the broker has as many alive as it may
    /// ([`MAX_TEMPORARIES_PER_CONNECTION`],
    /// [`crate::UsageConfig::max_temporary_destinations_per_user`],
    /// [`crate::UsageConfig::max_temporary_destinations`]): nothing is made.
    pub fn temporary_for(
        &self,
        connection: u64,
        user: Option<&str>,
        kind: DestinationKind,
        name: &str,
    ) -> Result<DestinationKey, Error> {
        let invalid = |reason| Error::InvalidDestination {
            name: name.to_string(),
            reason,
        };
        if !kind.capabilities().temporary {
            return Err(invalid("not a temporary kind of destination"));
        }
        if name.is_empty() {
            return Err(invalid("empty"));
        }
        let local = (kind, name.to_string());
        let mut owners = self.temporaries.owners.lock();
        if let Some(key) = owners
            .by_connection
            .get(&connection)
            .and_then(|made| made.named.get(&local))
        {
            return Ok(key.clone());
        }
        let global = format!(
            "{}-{connection}-{}.{name}",
            self.temporaries.tag,
            unguessable()
        );
        let key = DestinationKey::new(kind, &global).map_err(|e| invalid(e.reason))?;
        let usage = &self.usages.config;
        let full = |limit, max: u64| Err(Error::TooManyTemporaryDestinations { limit, max });
        let made = owners.by_connection.get(&connection);
        if made.map_or(0, |m| m.named.len()) >= MAX_TEMPORARIES_PER_CONNECTION {
            return full(
                TemporaryLimit::Connection,
                MAX_TEMPORARIES_PER_CONNECTION as u64,
            );
        }
        let user = made.map_or(user, |m| m.user.as_deref());
        let per_user = usage.max_temporary_destinations_per_user as usize;
        if let Some(user) = user {
            if per_user > 0 && owners.by_user.get(user).copied().unwrap_or(0) >= per_user {
                return full(TemporaryLimit::User(user.to_string()), per_user as u64);
            }
        }
        let most = usage.max_temporary_destinations as usize;
        if most > 0 && owners.by_key.len() >= most {
            return full(TemporaryLimit::Broker, most as u64);
        }
        let user = user.map(str::to_string);
        if let Some(user) = &user {
            *owners.by_user.entry(user.clone()).or_default() += 1;
        }
        let made = owners.by_connection.entry(connection).or_default();
        made.user = user;
        made.named.insert(local, key.clone());
        owners.by_key.insert(key.clone(), connection);
        Ok(key)
    }

    /// How many temporary destinations are alive now (made, and their connection not
    /// ended), the count [`crate::UsageConfig::max_temporary_destinations`] bounds.
    pub fn temporary_destinations(&self) -> usize {
        self.temporaries.owners.lock().by_key.len()
    }

    /// The connection that owns temporary destination `key`, if it exists.
    pub fn temporary_owner(&self, key: &DestinationKey) -> Option<u64> {
        self.temporaries.owners.lock().by_key.get(key).copied()
    }

    /// A send to `key`: refused when it is temporary and does not exist.
    pub(super) fn check_temporary_send(&self, key: &DestinationKey) -> Result<(), Error> {
        if !key.capabilities().temporary || self.temporary_owner(key).is_some() {
            return Ok(());
        }
        Err(Error::InvalidDestination {
            name: key.stomp(),
            reason: "no such temporary destination: the connection that made it has ended",
        })
    }

    /// Whether `connection` may consume from (or browse) `key`: any destination but a
    /// temporary one of another connection, or one that no longer exists.
    ///
    /// Errors: [`Error::InvalidDestination`] saying which.
    pub fn may_consume(&self, key: &DestinationKey, connection: Option<u64>) -> Result<(), Error> {
        self.check_temporary_consumer(key, connection)
    }

    /// Whether `connection` may browse `key`: any destination but a temporary one that
    /// no longer exists, or of another connection unless `others` (the user has the
    /// `read` right of `[temp_destination_authorization_entry]`,
    /// [`crate::auth::Security::authorize_temporary`]). Consuming stays the owner's
    /// alone ([`Broker::may_consume`]), as ActiveMQ refuses a consumer of another
    /// connection's temporary destination whatever the rights.
    ///
    /// Errors: [`Error::InvalidDestination`] saying which.
    pub fn may_browse(
        &self,
        key: &DestinationKey,
        connection: Option<u64>,
        others: bool,
    ) -> Result<(), Error> {
        if !key.capabilities().temporary {
            return Ok(());
        }
        match self.temporary_owner(key) {
            Some(owner) if others || Some(owner) == connection => Ok(()),
            Some(_) => Err(Error::InvalidDestination {
                name: key.stomp(),
                reason: "a temporary destination is browsed only by the connection that made it, or a user with the read right of [temp_destination_authorization_entry]",
            }),
            None => Err(Error::InvalidDestination {
                name: key.stomp(),
                reason: "no such temporary destination: the connection that made it has ended",
            }),
        }
    }

    /// Whether `key` is a temporary destination whose connection has ended (or that
    /// never was): such a one is never started again, and a transaction that sent to it
    /// cannot commit.
    pub(crate) fn is_ended_temporary(&self, key: &DestinationKey) -> bool {
        key.capabilities().temporary && self.temporary_owner(key).is_none()
    }

    /// After a transaction that sent to `destinations` ended: those that are ended
    /// temporary destinations are deleted (their deletion at their connection's end
    /// may have waited on this transaction).
    pub(super) async fn delete_ended_temporaries(&self, destinations: &[DestinationKey]) {
        for key in destinations {
            if self.is_ended_temporary(key) {
                self.delete_temporary(key).await;
            }
        }
    }

    /// A subscription to `key` from `connection`: refused when `key` is temporary and
    /// `connection` does not own it.
    pub(super) fn check_temporary_consumer(
        &self,
        key: &DestinationKey,
        connection: Option<u64>,
    ) -> Result<(), Error> {
        if !key.capabilities().temporary {
            return Ok(());
        }
        match self.temporary_owner(key) {
            Some(owner) if Some(owner) == connection => Ok(()),
            Some(_) => Err(Error::InvalidDestination {
                name: key.stomp(),
                reason: "a temporary destination is consumed only by the connection that made it",
            }),
            None => Err(Error::InvalidDestination {
                name: key.stomp(),
                reason: "no such temporary destination: the connection that made it has ended",
            }),
        }
    }

    /// Connection `connection` has ended: its temporary destinations are forgotten at
    /// once (sends to them are refused from now on) and each is deleted with its
    /// messages. Its subscriptions must be dropped first; a deletion that finds one
    /// still detaching is tried again for up to 5 s. Returns how many were deleted;
    /// a failure is logged (what stays in the store is deleted at the next start).
    pub async fn end_temporaries(&self, connection: u64) -> usize {
        let mut deleted = 0;
        for key in self.forget_temporaries(connection) {
            if self.delete_temporary(&key).await {
                deleted += 1;
            }
        }
        deleted
    }

    /// Forgets the temporary destinations of `connection` (sends to them are refused
    /// from now on) and returns them, to be deleted.
    fn forget_temporaries(&self, connection: u64) -> Vec<DestinationKey> {
        let mut owners = self.temporaries.owners.lock();
        let made = owners.by_connection.remove(&connection).unwrap_or_default();
        let keys: Vec<DestinationKey> = made.named.into_values().collect();
        for key in &keys {
            owners.by_key.remove(key);
        }
        if let Some(user) = made.user {
            if let Some(count) = owners.by_user.get_mut(&user) {
                *count = count.saturating_sub(keys.len());
                if *count == 0 {
                    owners.by_user.remove(&user);
                }
            }
        }
        keys
    }

    /// Deletes temporary destination `key` (no longer registered), retrying while its
    /// last consumers detach.
    async fn delete_temporary(&self, key: &DestinationKey) -> bool {
        let mut wait = Duration::from_millis(5);
        let mut waited = Duration::ZERO;
        loop {
            match self.delete_destination(key).await {
                Ok(_) => return true,
                Err(Error::ShuttingDown) => return false,
                Err(e) if waited < Duration::from_secs(5) => {
                    tracing::debug!(destination = %key, error = %e, "temporary destination not deleted yet; trying again");
                    tokio::time::sleep(wait).await;
                    waited += wait;
                    wait = (wait * 2).min(Duration::from_millis(500));
                }
                Err(e) => {
                    tracing::warn!(destination = %key, error = %e, "cannot delete a temporary destination; the next start deletes what it stored");
                    return false;
                }
            }
        }
    }

    /// At start: deletes the temporary destinations a previous run left in the store
    /// (their connections ended with it), in pages of 100 container names. Returns how
    /// many.
    pub(crate) async fn sweep_temporaries(&self) -> Result<usize, Error> {
        let mut swept = 0;
        for kind in DestinationKind::all().filter(|k| k.capabilities().temporary) {
            let from = format!("{}://", kind.as_str());
            // Every key of the kind sorts below this one (`/` + 1 = `0`).
            let below = format!("{}:/0", kind.as_str());
            let mut after = from.clone();
            loop {
                let page = self.store().list_containers(&after, &below, 100).await?;
                let Some(last) = page.last().cloned() else {
                    break;
                };
                for container in page {
                    let Ok(key) = DestinationKey::from_container(&container) else {
                        continue;
                    };
                    if self.temporary_owner(&key).is_none() {
                        self.delete_destination(&key).await?;
                        swept += 1;
                    }
                }
                after = last;
            }
        }
        if swept > 0 {
            tracing::info!(
                destinations = swept,
                "deleted the temporary destinations a previous run left in the store"
            );
        }
        Ok(swept)
    }

    /// A temporary queue of its own connection ([`TemporaryQueue`]): deleted, with its
    /// messages, when the handle is dropped. Consume from it with
    /// [`TemporaryQueue::subscribe`]; hand out [`TemporaryQueue::key`] (or its STOMP
    /// form, for a `reply-to` header) for others to send to.
    ///
    /// Errors: as [`Broker::temporary`].
    pub fn temporary_queue(&self) -> Result<TemporaryQueue, Error> {
        let connection = next_connection_id();
        let key = self.temporary(connection, DestinationKind::TEMP_QUEUE, "queue")?;
        Ok(TemporaryQueue {
            broker: self.clone(),
            connection,
            key,
        })
    }

    /// Request/reply over a temporary queue: sends `message` to `destination` with
    /// `reply-to` naming a new temporary queue (its STOMP form, so a STOMP worker can
    /// SEND to exactly that header's value), and waits up to `timeout` for the first
    /// reply on it (the queue is this request's alone, so no `correlation-id` is
    /// needed). The queue is deleted afterwards (a late reply is refused to its
    /// sender).
    ///
    /// Errors: [`Error::Timeout`] when no reply comes in time; those of
    /// [`Broker::send`] and [`Broker::subscribe`].
    pub async fn request(
        &self,
        destination: impl super::ToDestination,
        message: Message,
        timeout: Duration,
    ) -> Result<Received, Error> {
        let replies = self.temporary_queue()?;
        let mut sub = replies.subscribe().await?;
        let message = message
            .header("reply-to", replies.key().stomp())
            .from_connection(replies.connection);
        self.send(destination, message).await?;
        let reply = tokio::time::timeout(timeout, futures::StreamExt::next(&mut sub)).await;
        match reply {
            Ok(Some(reply)) => Ok(reply),
            Ok(None) => Err(Error::ShuttingDown),
            Err(_) => Err(Error::Timeout(timeout.as_millis() as u64)),
        }
    }
}

/// A temporary queue made by [`Broker::temporary_queue`], owned by a connection of
/// its own; dropping it deletes the queue and its messages (in the background).
pub struct TemporaryQueue {
    broker: Broker,
    connection: u64,
    key: DestinationKey,
}

impl TemporaryQueue {
    /// Its key (`temp-queue://ebb-...-7-....queue`); [`DestinationKey::stomp`] gives the
    /// form for a `reply-to` header.
    pub fn key(&self) -> &DestinationKey {
        &self.key
    }

    /// The connection that owns it (its only consumer may come from it).
    pub fn connection(&self) -> u64 {
        self.connection
    }

    /// A consumer of it (automatic acks).
    ///
    /// Errors: as [`Broker::subscribe`].
    pub async fn subscribe(&self) -> Result<Subscription, Error> {
        self.subscribe_with(SubscribeOptions::non_durable()).await
    }

    /// A consumer of it with `options` (their connection is this queue's).
    ///
    /// Errors: as [`Broker::subscribe`].
    pub async fn subscribe_with(&self, options: SubscribeOptions) -> Result<Subscription, Error> {
        self.broker
            .subscribe(&self.key, options.connection(self.connection))
            .await
    }
}

impl Drop for TemporaryQueue {
    fn drop(&mut self) {
        // Forgotten now (sends are refused from here on); deleted in the background.
        let keys = self.broker.forget_temporaries(self.connection);
        if keys.is_empty() {
            return;
        }
        let broker = self.broker.downgrade();
        self.broker.spawn_task(async move {
            if let Some(broker) = broker.upgrade() {
                for key in keys {
                    broker.delete_temporary(&key).await;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base36_pads_to_its_width_and_holds_every_128_bit_number() {
        assert_eq!(base36(0, 0), "0");
        assert_eq!(base36(35, 3), "00z");
        assert_eq!(base36(36, 0), "10");
        assert_eq!(
            base36(u128::MAX, UNGUESSABLE_DIGITS).len(),
            UNGUESSABLE_DIGITS
        );
        assert_eq!(
            base36(0, UNGUESSABLE_DIGITS),
            "0".repeat(UNGUESSABLE_DIGITS)
        );
    }

    #[test]
    fn every_unguessable_part_is_new() {
        let parts: std::collections::HashSet<String> = (0..1_000).map(|_| unguessable()).collect();
        assert_eq!(parts.len(), 1_000);
        assert!(parts.iter().all(|p| p.len() == UNGUESSABLE_DIGITS
            && p.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())));
    }
}
