//! The kind table: every kind of destination, declared once.
//!
//! A [`KindSpec`] says what a kind is called (its store scheme `NAME://`, its STOMP
//! prefix, the admin API's path segment), what it can do ([`Capabilities`]) and which
//! actor runs it ([`KindActor`]). [`KINDS`] lists them all. Key parsing and the
//! refusal texts ([`crate::destination::key`]), the registry, the facade's checks,
//! stats, the admin API and the console read this table and ask "can it do X?"
//! ([`crate::DestinationKind::capabilities`]), never "is it a queue?".
//!
//! Each kind is a file of this folder that declares its `KindSpec`. Adding a kind:
//! such a file (and, if no existing actor runs it, its actor), plus its line in
//! [`KINDS`] (with the `mod` line that names the file).

/// What a kind of destination can do: the questions the rest of Ebb asks of a
/// destination instead of naming its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Capabilities {
    /// Keeps durable subscriptions (a client id and a subscription name, with a
    /// backlog kept while offline), as a JMS topic does.
    pub durable_subscriptions: bool,
    /// Each message goes to one consumer: consumers compete, with prefetch, client
    /// acks, redelivery, a dead-letter queue, message groups and exclusive consumers
    /// (JMS point to point).
    pub point_to_point: bool,
    /// Its waiting messages can be browsed, listed and purged (STOMP
    /// `browser:true`, the admin API's message pages).
    pub browse: bool,
    /// Messages can be moved into it by an operator, or dead-lettered into it.
    pub move_target: bool,
    /// A non-durable subscription's automatic acks only give credit back, through
    /// shared counters instead of a message each (every subscription gets its own
    /// copy, so an ack changes nothing stored).
    pub shared_auto_acks: bool,
    /// The store indexes each message's headers (the `hdrs` column), so a selector
    /// is answered in SQL deep in a backlog.
    pub indexed_headers: bool,
    /// Keeps one waiting message per value of this header: a newer message with the
    /// same value replaces the older one, in the store (in the transaction that
    /// commits the newer one) and in memory, and one in flight is not redelivered
    /// (Artemis's last-value queue, keyed by `_AMQ_LVQ_NAME`). Messages without the
    /// header are kept as on a queue. `None`: nothing is replaced.
    pub last_value_header: Option<&'static str>,
    /// Belongs to the connection that made it (JMS temporary destinations): only that
    /// connection may consume from it, a send to one that does not exist is refused,
    /// it is deleted with its messages when its connection ends, and none survives a
    /// restart. Never matched by a subscription's wildcard.
    pub temporary: bool,
    /// A persistent message sent to it while it sleeps is written to the store by the
    /// registry without waking it ([`crate::broker::PublishAsleep`]): its actor adds
    /// nothing to such a message but the row (no consumer is attached to a sleeping
    /// destination, and nothing of it is in memory). A destination of such a kind is
    /// also made asleep by a send that finds it missing, so a backlog built up with
    /// nobody consuming costs no running actor. Kinds whose actor does more with a
    /// message than store it (a last value replaced, a topic's subscriptions) wake.
    pub stored_while_asleep: bool,
    /// As a consumer group (a virtual topic's `Consumer.A.VirtualTopic.X`), it reads
    /// its topic's rows, stored once for every group, through its own mark and acks
    /// ([`ebb_store::groups`]), instead of getting a copy of each message: a plain
    /// queue. A kind that keeps state per message of its own (a last-value queue's
    /// key) gets copies.
    pub group_reads_topic: bool,
}

/// The actor that runs a kind's destinations. Kinds that differ only in what the
/// table says (their name, prefix and capabilities) share an actor; a kind with a
/// dispatch of its own brings its actor and a variant here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KindActor {
    /// [`crate::topic::TopicActor`]: every subscription gets every message.
    Topic,
    /// [`crate::queue::QueueActor`]: each message to one consumer.
    Queue,
}

/// One kind of destination, as the rest of Ebb sees it. Serialized (the admin API's
/// `GET /api/v1/kinds`) without its actor.
#[derive(Debug, serde::Serialize)]
pub struct KindSpec {
    /// Its name (`queue`): the store key's scheme (`queue://NAME`), its name in JSON,
    /// metrics labels and refusal texts.
    pub name: &'static str,
    /// The admin API's path segment for destinations of this kind (`queues`:
    /// `/api/v1/queues/NAME`).
    pub plural: &'static str,
    /// The STOMP `destination` prefix (`/queue/`), as ActiveMQ and RabbitMQ name
    /// destinations.
    pub stomp_prefix: &'static str,
    /// Its segment in advisory topic names (`Queue`:
    /// `ActiveMQ.Advisory.Consumer.Queue.NAME`), as ActiveMQ names its own kinds
    /// (`Queue`, `Topic`, `TempQueue`, `TempTopic`).
    pub advisory: &'static str,
    /// What it can do.
    pub capabilities: Capabilities,
    /// Which actor runs it.
    #[serde(skip)]
    pub actor: KindActor,
}

mod last_value_queue;
mod queue;
mod temporary;
mod topic;

pub use queue::QUEUE;
pub use temporary::{TEMP_QUEUE, TEMP_TOPIC};
pub use topic::TOPIC;

/// Every kind, in the order of their store keys (by name). Parsing tries them in
/// this order; refusal texts list them in it.
pub static KINDS: &[&KindSpec] = &[
    &last_value_queue::LAST_VALUE_QUEUE,
    &QUEUE,
    &TEMP_QUEUE,
    &TEMP_TOPIC,
    &TOPIC,
];

/// The kind named `name` (`queue`), if there is one.
pub fn by_name(name: &str) -> Option<&'static KindSpec> {
    KINDS.iter().copied().find(|k| k.name == name)
}

/// The kind whose admin API path segment is `plural` (`queues`), if there is one.
pub fn by_plural(plural: &str) -> Option<&'static KindSpec> {
    KINDS.iter().copied().find(|k| k.plural == plural)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_prefixes_and_segments_are_unique() {
        for (i, a) in KINDS.iter().enumerate() {
            for b in &KINDS[i + 1..] {
                assert_ne!(a.name, b.name);
                assert_ne!(a.plural, b.plural);
                assert_ne!(a.advisory, b.advisory);
                assert!(!a.stomp_prefix.starts_with(b.stomp_prefix));
                assert!(!b.stomp_prefix.starts_with(a.stomp_prefix));
            }
            assert!(a.stomp_prefix.starts_with('/') && a.stomp_prefix.ends_with('/'));
        }
        let mut names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
        names.sort();
        assert_eq!(
            names,
            KINDS.iter().map(|k| k.name).collect::<Vec<_>>(),
            "listed in store-key order"
        );
    }

    #[test]
    fn kinds_are_found_by_name_and_segment() {
        assert_eq!(by_name("queue").unwrap().plural, "queues");
        assert_eq!(by_plural("topics").unwrap().name, "topic");
        assert!(by_name("queues").is_none());
        assert!(by_plural("queue").is_none());
    }
}
