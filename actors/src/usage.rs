//! Memory usage and its limits: what producer flow control looks at.
//!
//! A [`Usage`] counts bytes against a limit, as ActiveMQ's `MemoryUsage`: the broker has
//! one for all memory (`[usage] memory`), one for non-persistent messages (`[usage]
//! temp`: they exist only in memory, so this bounds what a fast producer of them can
//! pile up), and each destination one of its own (its policy's `memory_limit`) whose
//! parent is the broker's. Bytes charged to a destination count in its parent too.
//!
//! A message is charged once, when the broker accepts it, by the size of its body and
//! headers: the [`MemoryCharge`] travels inside the message (`Arc`-shared by every
//! subscription, queue cursor and consumer channel that holds it) and gives the bytes
//! back when the last holder drops it. So a message many subscriptions share costs its
//! size once, and nothing has to remember to release it. Messages read back from the
//! store are not charged: every read is bounded (a page, a prefetch).
//!
//! Producers wait with [`Usage::wait_for_space`]. Every release wakes every waiter,
//! which checks again (no wake-up can be lost between the check and the wait, the
//! fault of ActiveMQ's AMQ-2523).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use crate::destination::Published;

/// A byte counter with a limit; see the module documentation. Shared (`Arc`).
#[derive(Debug)]
pub struct Usage {
    name: String,
    /// Bytes; 0 = no limit.
    limit: u64,
    used: AtomicU64,
    parent: Option<Arc<Usage>>,
    /// Shared by a root and all its children: every release wakes every waiter.
    space: Arc<Notify>,
    blocked: Arc<AtomicU64>,
    /// Producers blocked anywhere in this usage's tree (shared by a root and its
    /// children), so that the broker's count reads one number.
    tree_blocked: Arc<AtomicU64>,
    /// A destination's usage marks the destination's stats entry when its bytes or
    /// blocked producers change (see [`crate::destination::StatsBoard`]).
    watch: Option<Arc<Published>>,
}

impl Usage {
    /// A root usage named `name` with `limit` bytes (0 = no limit).
    pub fn root(name: impl Into<String>, limit: u64) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            limit,
            used: AtomicU64::new(0),
            parent: None,
            space: Arc::new(Notify::new()),
            blocked: Arc::new(AtomicU64::new(0)),
            tree_blocked: Arc::new(AtomicU64::new(0)),
            watch: None,
        })
    }

    /// A child of this usage (a destination's): its bytes count here too.
    pub fn child(self: &Arc<Self>, name: impl Into<String>, limit: u64) -> Arc<Self> {
        self.child_watched(name.into(), limit, None)
    }

    /// A destination's usage, a child of this one ([`Self::child`]) that marks the
    /// destination's stats entry `published` whenever its bytes or its blocked
    /// producers change, so that a stats reading reads it again.
    pub fn destination_child(
        self: &Arc<Self>,
        name: impl Into<String>,
        limit: u64,
        published: Arc<Published>,
    ) -> Arc<Self> {
        self.child_watched(name.into(), limit, Some(published))
    }

    fn child_watched(
        self: &Arc<Self>,
        name: String,
        limit: u64,
        watch: Option<Arc<Published>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            name,
            limit,
            used: AtomicU64::new(0),
            parent: Some(Arc::clone(self)),
            space: Arc::clone(&self.space),
            blocked: Arc::new(AtomicU64::new(0)),
            tree_blocked: Arc::clone(&self.tree_blocked),
            watch,
        })
    }

    /// Whether it marks `published` when it changes ([`Self::destination_child`]).
    pub fn watches(&self, published: &Arc<Published>) -> bool {
        self.watch
            .as_ref()
            .is_some_and(|w| Arc::ptr_eq(w, published))
    }

    /// Marks the watched stats entry, if any.
    fn changed(&self) {
        if let Some(published) = &self.watch {
            published.mark();
        }
    }

    /// What it is named in errors and metrics (`memory`, `temp`, `queue://jobs`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The limit in bytes; 0 = none.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Producers waiting for space here now.
    pub fn blocked_producers(&self) -> u64 {
        self.blocked.load(Ordering::Relaxed)
    }

    /// Producers waiting for space anywhere in this usage's tree now (its root and
    /// every child of it): one read, however many destinations there are.
    pub fn tree_blocked_producers(&self) -> u64 {
        self.tree_blocked.load(Ordering::Relaxed)
    }

    /// Counts one more producer blocked here.
    fn block(&self) {
        self.blocked.fetch_add(1, Ordering::Relaxed);
        self.tree_blocked.fetch_add(1, Ordering::Relaxed);
        self.changed();
    }

    /// The first usage, this one or an ancestor, that is at or over its limit.
    pub fn full(&self) -> Option<&Usage> {
        let mut at = Some(self);
        while let Some(usage) = at {
            if usage.limit > 0 && usage.used() >= usage.limit {
                return Some(usage);
            }
            at = usage.parent.as_deref();
        }
        None
    }

    /// The first usage, this one or an ancestor, whose bytes are at or over `percent`
    /// of its limit: where a cursor stops caching stored messages (ActiveMQ's
    /// `cursorMemoryHighWaterMark`), so that what cursors cache never fills memory and
    /// never makes a producer wait. `percent` 100 is [`Self::full`].
    pub fn above(&self, percent: u8) -> Option<&Usage> {
        let percent = u64::from(percent.min(100));
        let mut at = Some(self);
        while let Some(usage) = at {
            if usage.limit > 0 && usage.used() * 100 >= usage.limit * percent {
                return Some(usage);
            }
            at = usage.parent.as_deref();
        }
        None
    }

    /// Charges `bytes` here and in every ancestor, whatever the limits (the caller
    /// waited for space first, if it had to); they are given back when the returned
    /// charge is dropped.
    pub fn charge(self: &Arc<Self>, bytes: u64) -> MemoryCharge {
        self.add(bytes);
        MemoryCharge {
            usages: parking_lot::Mutex::new(vec![Arc::clone(self)]),
            bytes,
            at_commit: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// Charges `bytes` here (the transactions' budget) until the message's transaction
    /// commits ([`MemoryCharge::commit`]): then they move to `at_commit` (its
    /// destination's memory, and temp for a non-persistent message), whatever their
    /// limits, as for a message sent then. An aborted transaction's messages give them
    /// back here when they are dropped.
    pub fn charge_until_commit(
        self: &Arc<Self>,
        bytes: u64,
        at_commit: Vec<Arc<Usage>>,
    ) -> MemoryCharge {
        let charge = self.charge(bytes);
        *charge.at_commit.lock() = at_commit;
        charge
    }

    /// Whether `bytes` more fit under the limit (always, without one).
    pub fn has_room_for(&self, bytes: u64) -> bool {
        self.limit == 0 || self.used().saturating_add(bytes) <= self.limit
    }

    /// Waits until neither this usage nor an ancestor is full. Returns at once if there
    /// is space. Counted in [`Self::blocked_producers`] while it waits.
    pub async fn wait_for_space(&self) {
        if self.full().is_none() {
            return;
        }
        self.block();
        let _unblock = Unblock(self);
        loop {
            let notified = self.space.notified();
            tokio::pin!(notified);
            // Registered before the check: a release between the check and the await
            // still wakes this waiter.
            notified.as_mut().enable();
            if self.full().is_none() {
                return;
            }
            notified.await;
        }
    }

    /// Counts a producer as blocked here until the returned guard is dropped (for
    /// waits this usage does not run itself, such as on the store limit).
    pub fn blocked(&self) -> impl Drop + '_ {
        self.block();
        Unblock(self)
    }

    fn add(&self, bytes: u64) {
        let mut at = Some(self);
        while let Some(usage) = at {
            usage.used.fetch_add(bytes, Ordering::Relaxed);
            at = usage.parent.as_deref();
        }
        self.changed();
    }

    fn release(&self, bytes: u64) {
        let mut at = Some(self);
        while let Some(usage) = at {
            usage.used.fetch_sub(bytes, Ordering::Relaxed);
            at = usage.parent.as_deref();
        }
        self.changed();
        self.space.notify_waiters();
    }
}

struct Unblock<'a>(&'a Usage);

impl Drop for Unblock<'_> {
    fn drop(&mut self) {
        self.0.blocked.fetch_sub(1, Ordering::Relaxed);
        self.0.tree_blocked.fetch_sub(1, Ordering::Relaxed);
        self.0.changed();
    }
}

/// Bytes charged to one or more usages, given back on drop. Travels inside a message.
/// A message of an open transaction is charged to the transactions' budget and moves
/// to its destination's usages when the transaction commits
/// ([`Usage::charge_until_commit`], [`MemoryCharge::commit`]).
#[derive(Debug)]
pub struct MemoryCharge {
    usages: parking_lot::Mutex<Vec<Arc<Usage>>>,
    bytes: u64,
    /// Where the bytes go at commit (empty: nowhere, they stay).
    at_commit: parking_lot::Mutex<Vec<Arc<Usage>>>,
}

impl MemoryCharge {
    /// Also charges the same bytes to `other` (a non-persistent message counts in the
    /// temp usage as well as in memory).
    pub fn and(self, other: &Arc<Usage>) -> Self {
        other.add(self.bytes);
        self.usages.lock().push(Arc::clone(other));
        self
    }

    /// The message's transaction committed: its bytes move from the transactions'
    /// budget to the usages named at the charge (once; a charge without them is left
    /// as it is). Nobody waits for this: the bytes are charged whatever the limits,
    /// and what they fill makes later producers wait, as any message does.
    pub fn commit(&self) {
        let targets = std::mem::take(&mut *self.at_commit.lock());
        if targets.is_empty() {
            return;
        }
        for usage in &targets {
            usage.add(self.bytes);
        }
        let held = std::mem::replace(&mut *self.usages.lock(), targets);
        for usage in &held {
            usage.release(self.bytes);
        }
    }

    /// Whether the broker's memory (the root of the usage it was charged to) holds
    /// `percent` of its limit or more: a cursor then leaves a stored message in the
    /// store rather than caching it, so that one destination's backlog never makes the
    /// producers of others wait. A destination's own `memory_limit` is not looked at
    /// here: it holds its own producers back when its cache is full (ActiveMQ's queue
    /// `memoryLimit`), which is what an operator who sets one asks for.
    pub fn is_above(&self, percent: u8) -> bool {
        self.usages.lock().first().is_some_and(|u| {
            let mut root = u.as_ref();
            while let Some(parent) = root.parent.as_deref() {
                root = parent;
            }
            root.above(percent).is_some()
        })
    }

    /// Whether the usage it was charged to, or an ancestor, is at its limit.
    pub fn is_full(&self) -> bool {
        self.usages
            .lock()
            .first()
            .is_some_and(|u| u.full().is_some())
    }

    /// The bytes charged.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for MemoryCharge {
    fn drop(&mut self) {
        for usage in self.usages.get_mut().iter() {
            usage.release(self.bytes);
        }
    }
}

// A charge says nothing about a message's identity: messages compare equal whatever
// they are charged to.
impl PartialEq for MemoryCharge {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for MemoryCharge {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn charges_count_in_parents_and_come_back_on_drop() {
        let memory = Usage::root("memory", 100);
        let queue = memory.child("queue://q", 50);
        let a = queue.charge(30);
        assert_eq!((queue.used(), memory.used()), (30, 30));
        assert!(queue.full().is_none());
        let b = queue.charge(20);
        assert_eq!(queue.full().map(Usage::name), Some("queue://q"));
        drop(a);
        drop(b);
        assert_eq!((queue.used(), memory.used()), (0, 0));
        let other = memory.child("queue://other", 0);
        let big = other.charge(100);
        assert_eq!(queue.full().map(Usage::name), Some("memory"));
        drop(big);
        assert!(queue.full().is_none());
    }

    #[test]
    fn above_a_high_water_mark_in_the_usage_or_an_ancestor() {
        let memory = Usage::root("memory", 100);
        let queue = memory.child("queue://q", 0);
        let a = queue.charge(69);
        assert!(!a.is_above(70) && queue.above(70).is_none());
        let b = queue.charge(1);
        assert_eq!(queue.above(70).map(Usage::name), Some("memory"));
        assert!(b.is_above(70) && !b.is_above(71) && queue.full().is_none());
        let limited = memory.child("queue://l", 10);
        drop((a, b));
        let c = limited.charge(7);
        assert_eq!(limited.above(70).map(Usage::name), Some("queue://l"));
        // A charge asks the broker's memory only: 7 of 100.
        assert!(!c.is_above(70) && queue.above(70).is_none());
        let unlimited = Usage::root("none", 0);
        let d = unlimited.charge(1 << 40);
        assert!(!d.is_above(1));
    }

    #[test]
    fn a_charge_can_count_twice_and_comes_back_from_both() {
        let memory = Usage::root("memory", 0);
        let temp = Usage::root("temp", 0);
        let charge = memory.charge(10).and(&temp);
        assert_eq!((memory.used(), temp.used(), charge.bytes()), (10, 10, 10));
        drop(charge);
        assert_eq!((memory.used(), temp.used()), (0, 0));
    }

    #[tokio::test]
    async fn a_waiting_producer_wakes_when_space_comes_back() {
        let memory = Usage::root("memory", 10);
        let queue = memory.child("queue://q", 0);
        let held = queue.charge(10);
        let waiter = {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move { queue.wait_for_space().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        assert_eq!(queue.blocked_producers(), 1);
        drop(held);
        waiter.await.unwrap();
        assert_eq!(queue.blocked_producers(), 0);
    }
}
