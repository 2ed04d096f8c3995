//! Consumer groups stored once: the store's view of a group queue over a topic.
//!
//! A *group* is a queue (its store key, e.g. `queue://Consumer.A.VirtualTopic.Orders`)
//! whose messages are the rows of a topic (`topic://VirtualTopic.Orders`), stored once
//! however many groups read them, as Artemis keeps one copy per address with a
//! reference per queue, and as a durable subscription reads its topic. The group is
//! *bound* by a durable subscription on the topic: client id [`GROUP_CLIENT_ID`],
//! named by the group's store key ([`WriteOp::Subscribe`] with
//! [`crate::SubscriptionKey::group`]). Its high-water mark and individual acks say
//! which of the topic's rows the group is done with, so the topic's cleanup and
//! expiry keep every row a group still needs, as for any durable subscription.
//!
//! Through every queue read and write of the [`MessageStore`] the group's container
//! then shows, merged in id order:
//! - its **own rows** (sent to the group queue itself, moved back from a dead-letter
//!   queue), as any queue's;
//! - the **topic's rows** the group still needs: above its mark, not acked
//!   individually, not prepared. Its failed deliveries and redeliveries held back are
//!   kept in `group_deliveries` (migration 0013), one row per message that failed.
//!
//! A queue ack ([`WriteOp::Remove`]) deletes own rows and acks topic rows for the
//! group (the mark moves over the run it closes; the rest are individual acks); a
//! move to a dead-letter queue ([`WriteOp::DeadLetter`]) and an expiry page
//! ([`WriteOp::ExpireQueue`]) do the same for the rows they take. Reads are the
//! queue's (`read_queue`, `browse`, `scan_matching`, `read_held`, `read_expired`,
//! counts): each is two bounded reads, the own rows' and the topic's, merged and cut
//! to the limit. So the queue actor above does not know its messages are shared.
//!
//! The store learns its groups when it opens (a keyset page at a time over the
//! subscriptions of [`GROUP_CLIENT_ID`], by `acks_kidx`) and from its own writes
//! (a subscribe or unsubscribe of that client id, once committed). A second broker
//! writing the same tables would not be seen (one active broker at a time, as for
//! `crate::counts`).
//!
//! [`WriteOp::Subscribe`]: crate::WriteOp::Subscribe
//! [`WriteOp::Remove`]: crate::WriteOp::Remove
//! [`WriteOp::DeadLetter`]: crate::WriteOp::DeadLetter
//! [`WriteOp::ExpireQueue`]: crate::WriteOp::ExpireQueue
//! [`MessageStore`]: crate::MessageStore

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::{StoredMessage, SubscriptionKey};

/// The client id of the durable subscriptions that bind consumer groups to topics
/// (see the module documentation); the subscription's name is the group queue's store
/// key.
pub const GROUP_CLIENT_ID: &str = "ebb:group";

/// Groups the store reads per page when it opens.
pub(crate) const GROUP_PAGE: u32 = 500;

/// The groups a store knows: each group's topic, and each topic's groups.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    topic_of: HashMap<Arc<str>, Arc<str>>,
    groups_of: HashMap<Arc<str>, BTreeSet<Arc<str>>>,
}

impl Groups {
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The topic group `container` reads, if it is a group.
    pub(crate) fn topic_of(&self, container: &str) -> Option<Arc<str>> {
        let inner = self.read();
        if inner.topic_of.is_empty() {
            return None;
        }
        inner.topic_of.get(container).cloned()
    }

    /// Whether `container` is a group.
    pub(crate) fn is_group(&self, container: &str) -> bool {
        self.topic_of(container).is_some()
    }

    /// The groups reading topic `container` (none for another container).
    pub(crate) fn groups_of(&self, container: &str) -> Vec<Arc<str>> {
        let inner = self.read();
        if inner.groups_of.is_empty() {
            return Vec::new();
        }
        inner
            .groups_of
            .get(container)
            .map(|g| g.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Group `group` reads `topic` from now on.
    pub(crate) fn bind(&self, topic: &str, group: &str) {
        let mut inner = self.write();
        let topic: Arc<str> = Arc::from(topic);
        let group: Arc<str> = Arc::from(group);
        if let Some(old) = inner.topic_of.insert(group.clone(), topic.clone()) {
            if let Some(set) = inner.groups_of.get_mut(&old) {
                set.remove(&group);
            }
        }
        inner.groups_of.entry(topic).or_default().insert(group);
    }

    /// Group `group` of `topic` is unbound (its subscription was removed).
    pub(crate) fn unbind(&self, topic: &str, group: &str) {
        let mut inner = self.write();
        if inner.topic_of.get(group).is_some_and(|t| &**t == topic) {
            inner.topic_of.remove(group);
        }
        if let Some(set) = inner.groups_of.get_mut(topic) {
            set.remove(group);
            if set.is_empty() {
                inner.groups_of.remove(topic);
            }
        }
    }
}

impl SubscriptionKey {
    /// The subscription that binds group queue `group` (its store key) to a topic.
    pub fn group(group: &str) -> Self {
        SubscriptionKey {
            client_id: GROUP_CLIENT_ID.to_string(),
            subscription_name: group.to_string(),
        }
    }

    /// Whether this is a group's binding ([`GROUP_CLIENT_ID`]).
    pub fn is_group(&self) -> bool {
        self.client_id == GROUP_CLIENT_ID
    }
}

/// Merges two id-ordered pages (a group's own rows, the topic's rows it needs) into
/// one, in id order, cut to `limit`.
pub(crate) fn merge_by_id(
    own: Vec<Arc<StoredMessage>>,
    shared: Vec<Arc<StoredMessage>>,
    limit: u32,
) -> Vec<Arc<StoredMessage>> {
    merge_by(own, shared, limit, |m| (0, m.id))
}

/// Merges two pages ordered by `key` into one in that order, cut to `limit`.
pub(crate) fn merge_by<T, K: Ord>(
    a: Vec<T>,
    b: Vec<T>,
    limit: u32,
    key: impl Fn(&T) -> K,
) -> Vec<T> {
    if b.is_empty() {
        let mut a = a;
        a.truncate(limit as usize);
        return a;
    }
    if a.is_empty() {
        let mut b = b;
        b.truncate(limit as usize);
        return b;
    }
    let mut out = Vec::with_capacity((a.len() + b.len()).min(limit as usize));
    let mut a = a.into_iter().peekable();
    let mut b = b.into_iter().peekable();
    while out.len() < limit as usize {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => key(x) <= key(y),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_a { a.next() } else { b.next() };
        out.extend(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_order_and_limit() {
        let merged = merge_by(vec![1, 4, 6], vec![2, 3, 7, 8], 5, |x| *x);
        assert_eq!(merged, [1, 2, 3, 4, 6]);
        assert_eq!(merge_by(vec![1, 2, 3], vec![], 2, |x| *x), [1, 2]);
        assert_eq!(merge_by(vec![], vec![5, 6], 1, |x| *x), [5]);
    }

    #[test]
    fn binding_and_unbinding() {
        let g = Groups::default();
        assert!(g.topic_of("queue://a").is_none());
        g.bind("topic://t", "queue://a");
        g.bind("topic://t", "queue://b");
        assert_eq!(g.topic_of("queue://a").as_deref(), Some("topic://t"));
        assert_eq!(g.groups_of("topic://t").len(), 2);
        g.unbind("topic://t", "queue://a");
        assert!(!g.is_group("queue://a"));
        assert_eq!(g.groups_of("topic://t").len(), 1);
        g.unbind("topic://other", "queue://b");
        assert!(
            g.is_group("queue://b"),
            "unbinding from another topic changes nothing"
        );
    }
}
