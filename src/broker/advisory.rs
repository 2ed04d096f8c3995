//! Advisory messages: the broker reports what happens to destinations on topics
//! named as ActiveMQ names them, so that clients written against ActiveMQ's
//! advisories keep working. Each message is non-persistent, has the header
//! `type:Advisory` (ActiveMQ's JMSType), `content-type:application/json`, and a JSON
//! body (fields below; every body has `event`, `destination` in STOMP form and
//! `timestamp_ms`).
//!
//! | topic (`KIND`: `Queue`, `Topic`, `TempQueue`, `TempTopic`, `LastValueQueue`, from the kind table) | `event` | other fields, headers |
//! |---|---|---|
//! | `ActiveMQ.Advisory.Consumer.KIND.NAME` | `consumer_added`, `consumer_removed` | `consumer_id`, `consumer_count`, `connection` (when known), `selector`; header `consumerCount` |
//! | `ActiveMQ.Advisory.Producer.KIND.NAME` | `producer_added`, `producer_removed` | `producer_count`; header `producerCount` |
//! | `ActiveMQ.Advisory.KIND` | `destination_added`, `destination_removed` | |
//! | `ActiveMQ.Advisory.Expired.KIND.NAME` | `expired` | `count` (one expiry page's, or 1) |
//! | `ActiveMQ.Advisory.MessageDLQd.KIND.NAME` | `dead_lettered` | `message_id`, `dead_letter_queue`, `cause` |
//!
//! **No cost while nobody listens**: an event is built only while some subscription
//! to an advisory topic (or to a wildcard that can match one) exists
//! ([`ebb_actors::events::Events`]), and sent only to an advisory topic that is
//! running or when a wildcard subscription could match it. Advisories are not
//! given about advisory topics themselves, nor about wildcard subscriptions.
//! Clients may not send to advisory topics: the broker alone writes them. Reading
//! one needs `read` on it, as any topic.

use super::send::SendOptions;
use super::{Broker, WeakBroker};
use ebb_actors::destination::{now_ms, DestinationPattern};
use ebb_actors::events::{Event, EventWatch, Events};
use ebb_actors::DestinationKey;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::message::Message;
use crate::error::Error;

/// The name prefix of every advisory topic (ActiveMQ's `ActiveMQ.Advisory.`).
pub const ADVISORY_PREFIX: &str = "ActiveMQ.Advisory.";

/// The broker's advisory state: the events its destinations report and who watches.
#[derive(Default)]
pub(super) struct Advisories {
    pub(super) events: Events,
    /// Wildcard subscriptions that could match an advisory topic.
    wildcards: Arc<AtomicUsize>,
}

/// What a subscription holds for advisories: a watch while it reads an advisory
/// topic, and the consumer to report removed when it ends.
#[derive(Default)]
pub(super) struct Advised {
    _watch: Option<EventWatch>,
    wildcard: Option<Arc<AtomicUsize>>,
    consumer: Option<(WeakBroker, DestinationKey, u64)>,
}

impl Drop for Advised {
    fn drop(&mut self) {
        if let Some(wildcards) = self.wildcard.take() {
            wildcards.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some((weak, key, id)) = self.consumer.take() {
            let Some(broker) = weak.upgrade() else { return };
            if broker.advisories.events.watched() {
                let reporting = broker.clone();
                broker.spawn_task(async move {
                    reporting.advise_consumer(&key, id, None, None, false).await;
                });
            }
        }
    }
}

/// True for an advisory topic.
pub fn is_advisory(key: &DestinationKey) -> bool {
    // `ActiveMQ.Advisory` itself too: `ActiveMQ.Advisory.>` matches it.
    let name = key.name();
    (name.starts_with(ADVISORY_PREFIX) || name == &ADVISORY_PREFIX[..ADVISORY_PREFIX.len() - 1])
        && DestinationKey::topic(name).is_ok_and(|topic| &topic == key)
}

/// Whether `pattern` could match an advisory topic (`topic://ActiveMQ.Advisory.>`,
/// `topic://>`, `topic://*.Advisory.>`, ...).
fn may_match_advisory(pattern: &DestinationPattern) -> bool {
    let advisories = DestinationKey::topic("ActiveMQ.Advisory.Topic").map(|t| t.kind());
    if advisories.ok() != Some(pattern.kind()) {
        return false;
    }
    let text = pattern.to_string();
    let name = text
        .split_once("://")
        .map_or(text.as_str(), |(_, name)| name);
    let mut segments = name.split('.');
    for want in ["ActiveMQ", "Advisory"] {
        match segments.next() {
            Some(">") => return true,
            Some("*") => continue,
            Some(s) if s == want => continue,
            _ => return false,
        }
    }
    // `ActiveMQ.Advisory` alone names no advisory topic; anything after may.
    segments.next().is_some()
}

/// The advisory topic `ActiveMQ.Advisory.<what>.<KIND>.<name>` (or without the name),
/// if its name is a valid one (not longer than a name may be).
fn advisory_topic(
    what: Option<&str>,
    subject: &DestinationKey,
    with_name: bool,
) -> Option<DestinationKey> {
    let kind = subject.kind().spec().advisory;
    let mut name = String::from(ADVISORY_PREFIX);
    if let Some(what) = what {
        name.push_str(what);
        name.push('.');
    }
    name.push_str(kind);
    if with_name {
        name.push('.');
        name.push_str(subject.name());
    }
    DestinationKey::topic(&name).ok()
}

impl Broker {
    /// Starts reporting events to advisory topics: called once at start.
    pub(super) fn start_advisories(&self) {
        let weak = self.downgrade();
        self.advisories.events.set(move |event| {
            if let Some(broker) = weak.upgrade() {
                let reporting = broker.clone();
                broker.spawn_task(async move { reporting.advise_event(event).await });
            }
        });
    }

    /// What a subscription to `target` holds: a watch while it reads an advisory
    /// topic (or a wildcard that may match one), and, for one destination that is not
    /// an advisory topic, its consumer `id` to report removed when it ends.
    pub(super) fn advised(
        &self,
        one: Option<&DestinationKey>,
        pattern: Option<&DestinationPattern>,
        id: u64,
    ) -> Advised {
        let mut advised = Advised::default();
        match (one, pattern) {
            (Some(key), _) if is_advisory(key) => {
                advised._watch = Some(self.advisories.events.watch());
            }
            (Some(key), _) => advised.consumer = Some((self.downgrade(), key.clone(), id)),
            (None, Some(p)) if may_match_advisory(p) => {
                advised._watch = Some(self.advisories.events.watch());
                self.advisories.wildcards.fetch_add(1, Ordering::Relaxed);
                advised.wildcard = Some(Arc::clone(&self.advisories.wildcards));
            }
            _ => {}
        }
        advised
    }

    /// Refuses a client's send to an advisory topic: the broker alone writes them.
    pub(super) fn refuse_advisory_send(
        &self,
        destinations: &[DestinationKey],
    ) -> Result<(), Error> {
        match destinations.iter().find(|k| is_advisory(k)) {
            Some(key) => Err(Error::InvalidDestination {
                name: key.stomp(),
                reason: "advisory topics (ActiveMQ.Advisory.*) are written by the broker only",
            }),
            None => Ok(()),
        }
    }

    /// Reports consumer `id` of `key` added or removed, if anyone listens.
    pub(super) async fn advise_consumer(
        &self,
        key: &DestinationKey,
        id: u64,
        connection: Option<u64>,
        selector: Option<String>,
        added: bool,
    ) {
        if !self.advisories.events.watched() || is_advisory(key) {
            return;
        }
        let Some(topic) = advisory_topic(Some("Consumer"), key, true) else {
            return;
        };
        if !self.advisory_wanted(&topic) {
            return;
        }
        // As the destination published it (it did before it answered the change).
        let count = self
            .stats_board()
            .get(key)
            .map_or(0, |entry| entry.read().consumers);
        let event = if added {
            "consumer_added"
        } else {
            "consumer_removed"
        };
        let body = serde_json::json!({
            "event": event,
            "destination": key.stomp(),
            "consumer_id": id,
            "consumer_count": count,
            "connection": connection,
            "selector": selector,
            "timestamp_ms": now_ms(),
        });
        self.publish_advisory(&topic, body, Some(("consumerCount", count)))
            .await;
    }

    /// Reports a producer of `key` added or removed, with the count now, if anyone
    /// listens.
    pub(super) fn advise_producer(&self, key: &DestinationKey, count: u64, added: bool) {
        if !self.advisories.events.watched() || is_advisory(key) {
            return;
        }
        let Some(topic) = advisory_topic(Some("Producer"), key, true) else {
            return;
        };
        if !self.advisory_wanted(&topic) {
            return;
        }
        let event = if added {
            "producer_added"
        } else {
            "producer_removed"
        };
        let body = serde_json::json!({
            "event": event,
            "destination": key.stomp(),
            "producer_count": count,
            "timestamp_ms": now_ms(),
        });
        let reporting = self.clone();
        self.spawn_task(async move {
            reporting
                .publish_advisory(&topic, body, Some(("producerCount", count)))
                .await;
        });
    }

    /// Reports an event of the destinations' actors.
    async fn advise_event(&self, event: Event) {
        let (topic, body) = match event {
            Event::DestinationAdded(key) | Event::DestinationRemoved(key) if is_advisory(&key) => {
                return
            }
            Event::DestinationAdded(key) => (
                advisory_topic(None, &key, false),
                serde_json::json!({ "event": "destination_added", "destination": key.stomp() }),
            ),
            Event::DestinationRemoved(key) => (
                advisory_topic(None, &key, false),
                serde_json::json!({ "event": "destination_removed", "destination": key.stomp() }),
            ),
            Event::Expired { destination, count } => (
                advisory_topic(Some("Expired"), &destination, true),
                serde_json::json!({ "event": "expired", "destination": destination.stomp(), "count": count }),
            ),
            Event::DeadLettered {
                destination,
                dead_letter_queue,
                message_id,
                cause,
            } => (
                advisory_topic(Some("MessageDLQd"), &destination, true),
                serde_json::json!({
                    "event": "dead_lettered",
                    "destination": destination.stomp(),
                    "dead_letter_queue": dead_letter_queue.stomp(),
                    "message_id": message_id,
                    "cause": cause,
                }),
            ),
        };
        let Some(topic) = topic else { return };
        if !self.advisory_wanted(&topic) {
            return;
        }
        let mut body = body;
        body["timestamp_ms"] = now_ms().into();
        self.publish_advisory(&topic, body, None).await;
    }

    /// Whether an advisory to `topic` may reach someone: the topic is running (a
    /// subscriber started it) or a wildcard subscription could match it.
    fn advisory_wanted(&self, topic: &DestinationKey) -> bool {
        self.advisories.wildcards.load(Ordering::Relaxed) > 0
            || self.addresses.read().contains_key(topic)
    }

    /// Sends one advisory message to `topic` (non-persistent; failures are logged).
    async fn publish_advisory(
        &self,
        topic: &DestinationKey,
        body: serde_json::Value,
        count: Option<(&str, u64)>,
    ) {
        let event = body["event"].as_str().unwrap_or("").to_string();
        let mut message = Message::new(body.to_string())
            .persistent(false)
            .header("type", "Advisory")
            .header("content-type", "application/json");
        if let Some((name, n)) = count {
            message = message.header(name, n.to_string());
        }
        let sent = match self
            .start_send_one(topic, message, SendOptions::checked(), None)
            .await
        {
            Ok(pending) => pending.await.map(drop),
            Err(e) => Err(e),
        };
        match sent {
            Ok(()) => metrics::counter!(crate::metrics::names::ADVISORIES_TOTAL, "event" => event)
                .increment(1),
            Err(e) => tracing::debug!(topic = %topic, error = %e, "advisory message not sent"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_names_and_wildcards() {
        let q = DestinationKey::queue("orders").unwrap();
        assert_eq!(
            advisory_topic(Some("Consumer"), &q, true).unwrap().stomp(),
            "/topic/ActiveMQ.Advisory.Consumer.Queue.orders"
        );
        let t = DestinationKey::topic("prices").unwrap();
        assert_eq!(
            advisory_topic(None, &t, false).unwrap().stomp(),
            "/topic/ActiveMQ.Advisory.Topic"
        );
        let long = DestinationKey::queue(&"x".repeat(190)).unwrap();
        assert!(advisory_topic(Some("Consumer"), &long, true).is_none());
        let p = |t: &str| DestinationPattern::parse(t).unwrap();
        for yes in [
            "topic://>",
            "topic://ActiveMQ.>",
            "topic://ActiveMQ.Advisory.>",
            "topic://*.*.Consumer.>",
            "topic://ActiveMQ.Advisory.*",
        ] {
            assert!(may_match_advisory(&p(yes)), "{yes}");
        }
        for no in [
            "queue://>",
            "topic://orders.>",
            "topic://ActiveMQ.Other.>",
            "topic://*.Other.*",
        ] {
            assert!(!may_match_advisory(&p(no)), "{no}");
        }
        assert!(is_advisory(
            &DestinationKey::topic("ActiveMQ.Advisory.Queue").unwrap()
        ));
        assert!(!is_advisory(
            &DestinationKey::queue("ActiveMQ.Advisory.Queue").unwrap()
        ));
        assert!(is_advisory(
            &DestinationKey::topic("ActiveMQ.Advisory").unwrap()
        ));
        assert!(!is_advisory(
            &DestinationKey::topic("ActiveMQ.Advisoryx").unwrap()
        ));
    }
}
