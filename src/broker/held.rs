//! Held sends: a message stored now, invisible, under a name the sender chooses, and
//! delivered only when the sender releases that name — also after a restart of the
//! broker, since it waits in the store, never in memory. MQTT's QoS 2 exactly once
//! for a persistent session is one: the PUBLISH is held under its client id and packet
//! id and answered (PUBREC) once stored; a PUBLISH resent after a crash finds it held
//! ([`Broker::is_held`]) and is not stored twice; PUBREL releases it
//! ([`Broker::release_held`]).
//!
//! A held send is routed as a send is ([`Broker::routes_of`]: a virtual topic's
//! groups, shared subscriptions, a configured composite); each copy is a prepared
//! message of its destination under xid `held:NAME:NNNNN` (its own, numbered: a
//! destination commits one xid at a time), as a scheduled message is under its due
//! time, and a release hands each destination its rows, which it commits in its publish
//! order and delivers as if just published ([`ReleaseScheduled`]). Reads are one range
//! of the store's xid index, at most [`HELD_PAGE`] rows.

use super::message::{Message, PendingSend};
use super::routing::keys_of;
use super::Broker;
use crate::error::Error;
use ebb_actors::destination::{DueMessage, PublishTicket, ReleaseScheduled};
use ebb_actors::messages::{PublishOutcome, TopicMessage};
use ebb_actors::DestinationKey;
use ebb_store::NewMessage;

/// The prefix of held sends' store xids (`held:NAME:NNNNN`).
pub const HELD_XID_PREFIX: &str = "held:";

/// Most rows one read of a held send takes (its copies: a send reaches at most a
/// topic, its virtual topic groups and its shared subscriptions).
pub const HELD_PAGE: u32 = 500;

/// The xid range of everything held under names starting with `prefix`.
fn range(prefix: &str) -> (String, String) {
    let from = format!("{HELD_XID_PREFIX}{prefix}");
    // Every xid under the prefix sorts below the prefix with its last byte raised;
    // names end with `:` here (`held:NAME:`), and `;` follows `:`.
    let mut below = from.clone();
    match below.pop() {
        Some(':') => below.push(';'),
        Some(c) => {
            below.push(c);
            below.push('\u{10FFFF}');
        }
        None => {}
    }
    (from, below)
}

impl Broker {
    /// Sends `message` to `destination`, held under `name` (one the sender does not
    /// hold anything under now): every copy routing makes is stored, invisible, and
    /// delivered only by [`Broker::release_held`]`(name)`. The [`PendingSend`]
    /// answers once every copy is stored.
    ///
    /// Errors: [`Error::Unsupported`] for a non-persistent message or a last-value
    /// queue (as a scheduled send); [`Error::InvalidValue`] for an empty name or one
    /// that ends with `:`; as [`Broker::send`] otherwise (nothing is held then, unless
    /// a copy was already written: release or drop the name).
    pub async fn hold_send(
        &self,
        destination: &DestinationKey,
        message: Message,
        name: &str,
    ) -> Result<PendingSend, Error> {
        self.refuse_if_shut_down()?;
        if name.is_empty() || name.ends_with(':') {
            return Err(Error::InvalidValue(
                "a held send's name is not empty and does not end with `:`",
            ));
        }
        self.refuse_advisory_send(std::slice::from_ref(destination))?;
        let routes = self.plan(std::slice::from_ref(destination), &message).0;
        self.refuse_advisory_send(&keys_of(&routes))?;
        let message_id = self.next_message_id();
        let mut copies = Vec::with_capacity(routes.len());
        for (n, route) in routes.iter().enumerate() {
            let xid = format!("{HELD_XID_PREFIX}{name}:{n:05}");
            let (row, outgoing) =
                self.held_row(&route.key, route.copy_of(&message), &message_id, xid)?;
            let write = self.store.add_in_order(row);
            let (ticket, answer) = PublishTicket::waiting();
            self.runtime.arbiter().spawn(async move {
                let stored = write.await.map(|id| PublishOutcome {
                    id: Some(id),
                    expired_on_arrival: false,
                });
                drop(outgoing);
                let _ = answer.send(stored);
            });
            copies.push(PendingSend::new(message_id.clone(), ticket));
        }
        Ok(match copies.len() {
            0 => PendingSend::accepted(message_id, false),
            _ => PendingSend::all(copies),
        })
    }

    /// The store row of one held copy.
    fn held_row(
        &self,
        key: &DestinationKey,
        message: Message,
        message_id: &str,
        xid: String,
    ) -> Result<(NewMessage, TopicMessage), Error> {
        if !message.persistent {
            return Err(Error::Unsupported(
                "a held send must be persistent: it waits in the store",
            ));
        }
        if key.capabilities().last_value_header.is_some() {
            return Err(Error::Unsupported(
                "a held send to a last-value queue is not supported",
            ));
        }
        let outgoing = self.outgoing_as(key, message, false, Some(message_id))?;
        let row = super::schedule::prepared_row(key, &outgoing, xid);
        Ok((row, outgoing))
    }

    /// Whether something is held under `name` (one row read).
    ///
    /// Errors: a store error.
    pub async fn is_held(&self, name: &str) -> Result<bool, Error> {
        let (from, below) = range(&format!("{name}:"));
        let rows = self.store().read_prepared_range(&from, &below, 1).await?;
        Ok(!rows.is_empty())
    }

    /// Delivers what is held under `name`: each destination commits its copy and
    /// delivers it as if just published; a copy for a shared subscription that has
    /// ended meanwhile is deleted instead (its queue is not made again), and so is one
    /// for a group that reads its topic's rows now (it gets the topic's copy). Returns
    /// the released copies, each with its destination (none when nothing is held:
    /// released before, or never held).
    ///
    /// Errors: a store error, or a destination that could not commit (what it did
    /// not commit stays held: release again).
    pub async fn release_held(&self, name: &str) -> Result<Vec<(DestinationKey, Message)>, Error> {
        self.refuse_if_shut_down()?;
        let (from, below) = range(&format!("{name}:"));
        let rows = self
            .store()
            .read_prepared_range(&from, &below, HELD_PAGE)
            .await?;
        let mut by_destination: Vec<(DestinationKey, Vec<DueMessage>)> = Vec::new();
        let mut released = Vec::new();
        for row in &rows {
            let container = &row.message.container;
            let Ok(key) = DestinationKey::from_container(container) else {
                tracing::warn!(%container, xid = %row.xid, "a held message names no destination; it stays held");
                continue;
            };
            let payload = &row.message.payload;
            let shared_copy = payload
                .headers
                .iter()
                .find(|(k, _)| k == super::shared::SHARED_TOPIC_HEADER);
            // A copy whose group ended while it was held is not made again for it; one
            // held (by an earlier Ebb) for a group now bound to that topic would come
            // twice: the group reads the topic's copy, released beside it.
            let ended_or_bound = |(_, topic): &(String, String)| {
                !self.is_shared_group(&key)
                    || self.store().group_topic(&key.container()).as_ref() == Some(topic)
            };
            if shared_copy.is_some_and(ended_or_bound) {
                self.rollback_abandoned(&row.xid).await?;
                continue;
            }
            let mut message = Message::new(payload.body.clone())
                .persistent(true)
                .priority(row.message.priority);
            message.headers = payload.headers.clone();
            if row.message.expiration > 0 {
                message = message.expires_at(row.message.expiration);
            }
            released.push((key.clone(), message));
            let due = DueMessage {
                xid: row.xid.clone(),
                message: TopicMessage::from_stored(&row.message),
                next: None,
            };
            match by_destination.iter_mut().find(|(k, _)| *k == key) {
                Some((_, releases)) => releases.push(due),
                None => by_destination.push((key, vec![due])),
            }
        }
        for (key, releases) in by_destination {
            let asked = releases.len();
            let n = self
                .ask_live(
                    &key,
                    || ReleaseScheduled {
                        releases: releases.clone(),
                    },
                    super::is_retired,
                )
                .await??;
            if n < asked {
                return Err(Error::Actor(ebb_actors::ActorError::Invalid(format!(
                    "{} of the messages held under `{name}` could not be committed at {key}; they stay held",
                    asked - n
                ))));
            }
        }
        Ok(released)
    }

    /// Deletes, undelivered, everything held under names starting with `prefix`
    /// (`mqtt:…:CLIENT:` for one client's). Returns how many copies went.
    ///
    /// Errors: a store error.
    pub async fn drop_held(&self, prefix: &str) -> Result<u64, Error> {
        self.rollback_abandoned(&format!("{HELD_XID_PREFIX}{prefix}"))
            .await
    }
}
