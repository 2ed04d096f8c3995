//! Shared subscriptions: one topic, or every topic a pattern matches, delivered to a
//! queue whose consumers compete for the messages (MQTT 5.0's `$share/GROUP/FILTER`,
//! and JMS 2.0's shared durable subscription, which STOMP names with
//! `shared-subscription-name`; as Artemis, which keeps one queue per shared
//! subscription). Both protocols name a group's queue alike
//! ([`shared_subscription_queue`]), so their members of one group compete. Each
//! message published to a matching topic reaches the group's queue, so each goes to
//! one member; the queue keeps what arrives while no member is connected, with its
//! own acks, redeliveries and dead letters.
//!
//! How a message reaches the queue depends on what the group reads:
//! - **One topic**: the queue is a consumer group *bound* to the topic
//!   ([`ebb_store::groups`], as a virtual topic's groups): it reads the topic's one
//!   stored row through its own mark and acks, and the topic feeds it what it
//!   releases. Nothing is copied; the queue's own rows are only what was sent to it by
//!   name (or copied by an earlier Ebb: such a group is bound at start).
//! - **A pattern**: each message is copied into the queue, with
//!   [`SHARED_TOPIC_HEADER`] naming the topic it was published to (which the queue's
//!   name cannot say). Copies reach groups as they reach a virtual topic's
//!   last-value groups ([`super::routing`]): separate pipelined sends, or one
//!   transaction with [`super::VirtualTopics::transacted_send`].
//!
//! A group is made ([`Broker::join_shared_subscription`]) by its first member and
//! lives while it has one: a member connected now (counted in memory, by connection)
//! or a durable member (a persistent session's, stored as a row under
//! [`SHARED_MEMBER_PREFIX`], so it holds the group and its backlog across restarts).
//! When the last member leaves ([`Broker::leave_shared_subscription`]) the group
//! ends: its binding, then its queue with its messages. The group is stored under
//! [`SHARED_CONTAINER_PREFIX`] (container: the filter's store key, one row per queue),
//! read at start; a group that had no durable member when the broker stopped ends at
//! start (its members were connections, which a restart ended).

use super::destination::Target;
use super::Broker;
use crate::error::Error;
use ebb_actors::DestinationKey;
use ebb_store::SubscriptionKey;
use std::collections::{HashMap, HashSet};

/// The store container prefix of the shared subscriptions' bindings:
/// `shared:topic://a.*.c`, one row per group queue (named by its store key).
pub const SHARED_CONTAINER_PREFIX: &str = "shared:";

/// The store container prefix of a group's durable members: `shared-member:QUEUE`,
/// one row per member (a persistent session, named by its protocol and client id).
pub const SHARED_MEMBER_PREFIX: &str = "shared-member:";

/// The header of a group's copy naming the topic it was published to, in store-key
/// form (`topic://a.b.c`). A message sent straight to the group's queue has none.
pub const SHARED_TOPIC_HEADER: &str = "ebb-topic";

/// Most shared subscription groups of a broker: each gets its own copy of every
/// matching message, and every topic send is matched against each, so clients that
/// subscribe under made-up group names cannot grow a send's cost without bound. The
/// next group is refused (`invalid-destination`).
pub const MAX_SHARED_GROUPS: usize = 1_000;

/// Why a group past [`MAX_SHARED_GROUPS`] is refused.
pub const TOO_MANY_GROUPS: &str =
    "the broker has 1,000 shared subscription groups already (MAX_SHARED_GROUPS)";

/// The client id of the binding and member rows (their containers say whose).
const SHARED_ROW_CLIENT: &str = "ebb:shared";

/// A group queue is deleted when its last member leaves; a member's consumer detaches
/// as its subscription is dropped, so a delete that finds it still attached is tried
/// again this many times, 20 ms apart, before the group is left for the next start.
const DELETE_TRIES: u32 = 50;

/// The queue of shared subscription `share` of `target` (a topic or a wildcard
/// topic): `queue://$share.SHARE.NAME`, with the share's `.` written `/` and a
/// wildcard segment written as MQTT writes it (`*` as `+`, `>` as `#`), so that it
/// names one queue, and the same one as MQTT's `$share/SHARE/FILTER` of that topic
/// (`orders.*` and `orders/+` share `queue://$share.S.orders.+`): members of either
/// protocol share its messages.
///
/// Errors: [`Error::InvalidDestination`] for a share name with `/`, `,` or a wildcard,
/// a topic with a `+` or `#` segment, or a queue name too long (over 200 bytes).
pub fn shared_subscription_queue(share: &str, target: &Target) -> Result<DestinationKey, Error> {
    let invalid = |reason| Error::InvalidDestination {
        name: share.to_string(),
        reason,
    };
    if share.is_empty() || share.contains(['/', ',', '*', '>', '+', '#']) {
        return Err(invalid(
            "a shared subscription's name is not empty and has no / , * > + #",
        ));
    }
    let name = match target {
        // Its queue would be a wildcard's (`a.+` is `a.*`'s).
        Target::One(key) if key.name().split('.').any(|s| s == "+" || s == "#") => {
            return Err(Error::InvalidDestination {
                name: key.stomp(),
                reason: "a topic with a `+` or `#` segment has no shared subscription: its queue would be a wildcard's",
            })
        }
        Target::One(key) => key.name().to_string(),
        Target::Pattern(p) => p
            .to_string()
            .split_once("://")
            .map_or_else(String::new, |(_, name)| name.to_string())
            .split('.')
            .map(|segment| match segment {
                "*" => "+",
                ">" => "#",
                segment => segment,
            })
            .collect::<Vec<_>>()
            .join("."),
    };
    let queue = format!("$share.{}.{name}", share.replace('.', "/"));
    DestinationKey::queue(&queue).map_err(|e| Error::InvalidDestination {
        name: queue.clone(),
        reason: e.reason,
    })
}

/// The shared subscription groups of a broker now.
#[derive(Default)]
pub(super) struct SharedGroups {
    /// By group queue: what it reads and its members connected now.
    groups: parking_lot::RwLock<HashMap<DestinationKey, Group>>,
    /// Joins and leaves one at a time, so a group never ends under a joining member.
    changes: tokio::sync::Mutex<()>,
}

struct Group {
    target: Target,
    /// The connections ([`super::next_connection_id`]) consuming now.
    online: HashSet<u64>,
}

fn binding_container(target: &Target) -> String {
    let text = match target {
        Target::One(key) => key.container(),
        Target::Pattern(p) => p.to_string(),
    };
    format!("{SHARED_CONTAINER_PREFIX}{text}")
}

/// Whether a group of one topic, of `queue`'s kind, is bound to the topic and reads
/// its rows (a queue) rather than getting copies (a last-value queue).
fn reads_its_topic(queue: &DestinationKey) -> bool {
    queue.capabilities().group_reads_topic
}

fn member_container(queue: &DestinationKey) -> String {
    format!("{SHARED_MEMBER_PREFIX}{}", queue.container())
}

impl SharedGroups {
    /// The group queues that get a copy of what is sent to `topic`, in no set order:
    /// those whose filter matches it, but for a group of that one topic that reads the
    /// topic's rows (bound to it, fed by it).
    pub(super) fn queues_for(&self, topic: &DestinationKey) -> Vec<DestinationKey> {
        let groups = self.groups.read();
        if groups.is_empty() {
            return Vec::new();
        }
        groups
            .iter()
            .filter(|(queue, g)| match &g.target {
                Target::One(key) => key == topic && !reads_its_topic(queue),
                Target::Pattern(p) => p.matches(topic),
            })
            .map(|(queue, _)| queue.clone())
            .collect()
    }
}

impl Broker {
    /// Joins connection `connection` to the shared subscription whose queue is `queue`
    /// and which reads `target` (a topic or a topic pattern), making the group first
    /// when it is new: from then on every message published to a matching topic also
    /// reaches `queue` (a group of one topic is bound to it and reads its rows, one of
    /// a pattern gets copies). `durable_member` (a persistent session, e.g. `mqtt:CLIENT`) is
    /// stored, so the group and what arrives for it outlive this connection and a
    /// restart until [`Broker::leave_shared_subscription`] forgets it. Subscribe to
    /// `queue` after this to consume.
    ///
    /// Errors: [`Error::InvalidDestination`] when `queue` is not a queue, is bound to
    /// another filter, or [`MAX_SHARED_GROUPS`] are bound, or for a durable member of
    /// an advisory topic's group (advisories are not persistent); a store error
    /// (nothing joined).
    pub async fn join_shared_subscription(
        &self,
        target: &Target,
        queue: &DestinationKey,
        connection: u64,
        durable_member: Option<&str>,
    ) -> Result<(), Error> {
        self.refuse_if_shut_down()?;
        let caps = queue.capabilities();
        if !caps.point_to_point || caps.temporary {
            return Err(Error::InvalidDestination {
                name: queue.stomp(),
                reason: "a shared subscription's messages wait in a queue",
            });
        }
        if let (Some(_), Target::One(topic)) = (durable_member, target) {
            if super::advisory::is_advisory(topic) {
                return Err(Error::InvalidDestination {
                    name: topic.stomp(),
                    reason: "advisory messages are not persistent, so a durable shared subscription would keep none: share it from clean sessions only",
                });
            }
        }
        let shared = &self.routes.shared;
        let _one_at_a_time = shared.changes.lock().await;
        let bound = shared.groups.read().get(queue).map(|g| g.target.clone());
        match bound {
            Some(t) if t != *target => {
                return Err(Error::InvalidDestination {
                    name: queue.stomp(),
                    reason: "this queue holds a shared subscription to another filter",
                })
            }
            Some(_) => {}
            None => {
                if shared.groups.read().len() >= MAX_SHARED_GROUPS {
                    return Err(Error::InvalidDestination {
                        name: queue.stomp(),
                        reason: TOO_MANY_GROUPS,
                    });
                }
                self.store
                    .subscribe(
                        binding_container(target),
                        SubscriptionKey::new(SHARED_ROW_CLIENT, queue.container()),
                        None,
                        false,
                    )
                    .await?;
                if let Target::One(topic) = target {
                    // Through the topic, in its write order: from the answer on,
                    // every message the topic stores reaches the group.
                    self.bind_group(topic, queue).await?;
                }
                shared.groups.write().insert(
                    queue.clone(),
                    Group {
                        target: target.clone(),
                        online: HashSet::new(),
                    },
                );
            }
        }
        if let Some(member) = durable_member {
            self.store
                .subscribe(
                    member_container(queue),
                    SubscriptionKey::new(SHARED_ROW_CLIENT, member),
                    None,
                    false,
                )
                .await?;
        }
        if let Some(group) = shared.groups.write().get_mut(queue) {
            group.online.insert(connection);
        }
        Ok(())
    }

    /// Connection `connection` (if given) leaves the shared subscription of `queue`,
    /// and durable member `forget_member` (if given) is forgotten. When no member is
    /// left, connected or durable, the group ends: no topic sends to `queue` any more,
    /// and the queue is deleted with its messages. Drop the member's subscription to
    /// `queue` before this. Returns whether the group ended.
    ///
    /// Errors: a store error (the group stays; a later leave or the next start ends it).
    pub async fn leave_shared_subscription(
        &self,
        queue: &DestinationKey,
        connection: Option<u64>,
        forget_member: Option<&str>,
    ) -> Result<bool, Error> {
        let shared = &self.routes.shared;
        let _one_at_a_time = shared.changes.lock().await;
        let online = {
            let mut groups = shared.groups.write();
            let Some(group) = groups.get_mut(queue) else {
                return Ok(false);
            };
            if let Some(c) = connection {
                group.online.remove(&c);
            }
            group.online.len()
        };
        if let Some(member) = forget_member {
            self.store
                .unsubscribe(
                    member_container(queue),
                    SubscriptionKey::new(SHARED_ROW_CLIENT, member),
                )
                .await?;
        }
        if online > 0 || self.has_durable_member(queue).await? {
            return Ok(false);
        }
        self.unbind_shared(queue).await?;
        drop(_one_at_a_time);
        self.delete_group_queue(queue).await?;
        Ok(true)
    }

    /// Whether `member` is a durable member of the shared subscription whose queue is
    /// `queue` (one row read): then joining it as that member makes nothing new.
    ///
    /// Errors: a store error.
    pub async fn is_shared_member(
        &self,
        queue: &DestinationKey,
        member: &str,
    ) -> Result<bool, Error> {
        let key = SubscriptionKey::new(SHARED_ROW_CLIENT, member);
        Ok(self
            .store()
            .find_subscription(&member_container(queue), &key)
            .await?
            .is_some())
    }

    /// Whether a durable member of `queue`'s group is stored (one row read).
    async fn has_durable_member(&self, queue: &DestinationKey) -> Result<bool, Error> {
        let rows = self
            .store()
            .list_subscriptions(&member_container(queue), None, 1)
            .await?;
        Ok(!rows.is_empty())
    }

    /// Deletes an ended group's `queue` (unbound before), tried again while a leaving
    /// member's consumer is still detaching. Each try holds the group changes' lock
    /// (a member joining the group again meanwhile keeps the queue); the waits
    /// between them do not, so other groups' joins and leaves go on.
    async fn delete_group_queue(&self, queue: &DestinationKey) -> Result<(), Error> {
        for _ in 0..DELETE_TRIES {
            {
                let _one_at_a_time = self.routes.shared.changes.lock().await;
                if self.is_shared_group(queue) {
                    return Ok(()); // bound again: the new group keeps it
                }
                match self.delete_destination(queue).await {
                    Err(Error::InUse(_)) => {}
                    other => return other.map(|_| ()),
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        tracing::warn!(queue = %queue.stomp(), "an ended shared subscription's queue still has a consumer (not a member: a client of the queue itself); it stays, as a plain queue, until deleted");
        Ok(())
    }

    /// `queue` is no longer a group's: its binding (to its topic too, with its acks
    /// of the topic's rows) and durable members' rows go, and no topic sends to it
    /// (called when the queue is deleted, by whoever). Returns whether it was one.
    pub(crate) async fn unbind_shared(&self, queue: &DestinationKey) -> Result<bool, Error> {
        let Some(group) = self.routes.shared.groups.write().remove(queue) else {
            return Ok(false);
        };
        if let Target::One(topic) = &group.target {
            self.unbind_group(topic, queue).await?;
        }
        self.store
            .unsubscribe(
                binding_container(&group.target),
                SubscriptionKey::new(SHARED_ROW_CLIENT, queue.container()),
            )
            .await?;
        let container = member_container(queue);
        loop {
            let page = self
                .store()
                .list_subscriptions(&container, None, 500)
                .await?;
            if page.is_empty() {
                return Ok(true);
            }
            for row in page {
                self.store.unsubscribe(container.clone(), row.key).await?;
            }
        }
    }

    /// Whether `queue` is a shared subscription group's now.
    pub(crate) fn is_shared_group(&self, queue: &DestinationKey) -> bool {
        self.routes.shared.groups.read().contains_key(queue)
    }

    /// The shared subscription groups bound now: each queue and the filter it reads,
    /// in queue order.
    pub fn shared_subscriptions(&self) -> Vec<(DestinationKey, Target)> {
        let mut all: Vec<_> = self
            .routes
            .shared
            .groups
            .read()
            .iter()
            .map(|(q, g)| (q.clone(), g.target.clone()))
            .collect();
        all.sort_by_key(|(queue, _)| queue.container());
        all
    }

    /// At start: reads the stored bindings; a group without a durable member ends (its
    /// members were connections of the previous run).
    pub(super) async fn load_shared_groups(&self) -> Result<(), Error> {
        let definitions = ebb_actors::broker::read_definitions_under(
            self.store.store().as_ref(),
            SHARED_CONTAINER_PREFIX,
        )
        .await?;
        let mut ended = Vec::new();
        for row in definitions {
            let text = &row.container[SHARED_CONTAINER_PREFIX.len()..];
            let target = match ebb_actors::destination::DestinationPattern::subscription(text) {
                Ok(Some(p)) => Some(Target::Pattern(p)),
                Ok(None) => DestinationKey::from_container(text).ok().map(Target::One),
                Err(_) => None,
            };
            let queue = DestinationKey::from_container(&row.key.subscription_name);
            let (Some(target), Ok(queue)) = (target, queue) else {
                tracing::warn!(container = %row.container, queue = %row.key.subscription_name,
                    "a stored shared subscription does not parse; it is left alone");
                continue;
            };
            self.routes.shared.groups.write().insert(
                queue.clone(),
                Group {
                    target: target.clone(),
                    online: HashSet::new(),
                },
            );
            if !self.has_durable_member(&queue).await? {
                ended.push(queue);
            } else if let Target::One(topic) = &target {
                // Bound already (one lookup), or made by an earlier Ebb as a queue of
                // copies: its copies stay its own rows, and it reads the topic's from
                // now on.
                self.bind_group(topic, &queue).await?;
                self.know_group(&queue).await?;
            }
        }
        for queue in &ended {
            self.unbind_shared(queue).await?;
            self.delete_group_queue(queue).await?;
        }
        if !ended.is_empty() {
            tracing::info!(
                groups = ended.len(),
                "ended the shared subscriptions whose members were connections of the previous run"
            );
        }
        Ok(())
    }
}
