//! A queue's message groups, as a plain struct (no actor): which consumer owns each
//! group (ActiveMQ's message groups, the `JMSXGroupID` header).
//!
//! Every message of a group goes to the group's owner, in queue order, so a group is
//! processed in order by one consumer. The first message of a group (or the first after
//! its owner went, or after the group was closed) picks the owner the usual way
//! (round-robin among consumers with credit); the group stays with it until that
//! consumer goes ([`MessageGroups::release`]) or a message with `JMSXGroupSeq: -1`
//! closes the group ([`MessageGroups::close`], after that message is delivered). Groups
//! spread over the consumers because each new group is assigned round-robin.
//!
//! The map is bounded: at most [`MAX_GROUPS`] groups are remembered, the oldest
//! assignment forgotten first (as ActiveMQ's `CachedMessageGroupMap`, 1,024 by
//! default). A forgotten group is assigned anew by its next message, so a broker with
//! more live groups than that keeps each group's order only while it is remembered.

use std::collections::{HashMap, VecDeque};

/// The header naming a message's group.
pub const GROUP_HEADER: &str = "JMSXGroupID";

/// The header whose value `-1` closes a group (after that message).
pub const GROUP_SEQ_HEADER: &str = "JMSXGroupSeq";

/// Most groups remembered at once (ActiveMQ's `CachedMessageGroupMap` default).
pub const MAX_GROUPS: usize = 1_024;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct MessageGroups {
    /// Group → (owner, the assignment's number).
    owners: HashMap<String, (u64, u64)>,
    /// Assignments in the order they were made, by number (some gone since).
    order: VecDeque<(String, u64)>,
    next: u64,
}

impl MessageGroups {
    /// The consumer that owns `group`, if any.
    pub fn owner(&self, group: &str) -> Option<u64> {
        self.owners.get(group).map(|(owner, _)| *owner)
    }

    /// Gives `group` to `consumer` (its next messages all go there).
    pub fn assign(&mut self, group: &str, consumer: u64) {
        self.next += 1;
        self.owners.insert(group.to_string(), (consumer, self.next));
        self.order.push_back((group.to_string(), self.next));
        while self.owners.len() > MAX_GROUPS {
            let Some((oldest, number)) = self.order.pop_front() else {
                break;
            };
            // Only the assignment still in force: a group assigned again since is
            // younger than this entry says.
            if self.owners.get(&oldest).is_some_and(|(_, n)| *n == number) {
                self.owners.remove(&oldest);
            }
        }
        // Keep the order list from growing with assignments that are gone.
        if self.order.len() > 2 * MAX_GROUPS {
            let owners = &self.owners;
            self.order
                .retain(|(g, number)| owners.get(g).is_some_and(|(_, n)| n == number));
        }
    }

    /// `group` is closed (`JMSXGroupSeq: -1`): its next message picks an owner anew.
    pub fn close(&mut self, group: &str) {
        self.owners.remove(group);
    }

    /// Consumer `consumer` went: its groups pick owners anew.
    pub fn release(&mut self, consumer: u64) {
        self.owners.retain(|_, (owner, _)| *owner != consumer);
    }

    /// Groups with an owner now.
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_stays_with_its_owner_until_it_goes_or_the_group_closes() {
        let mut g = MessageGroups::default();
        g.assign("a", 1);
        g.assign("b", 2);
        assert_eq!(
            (g.owner("a"), g.owner("b"), g.owner("c")),
            (Some(1), Some(2), None)
        );
        g.close("a");
        assert_eq!(g.owner("a"), None);
        g.assign("a", 2);
        g.release(2);
        assert!(g.is_empty());
    }

    #[test]
    fn at_most_max_groups_are_remembered_oldest_forgotten_first() {
        let mut g = MessageGroups::default();
        for i in 0..MAX_GROUPS + 10 {
            g.assign(&format!("g{i}"), 1);
        }
        assert_eq!(g.len(), MAX_GROUPS);
        assert_eq!(g.owner("g0"), None);
        assert_eq!(g.owner(&format!("g{}", MAX_GROUPS + 9)), Some(1));
        // Reassigning and closing many keeps the bookkeeping bounded.
        for round in 0..10 {
            for i in 0..MAX_GROUPS {
                let name = format!("r{round}-{i}");
                g.assign(&name, 2);
                g.close(&name);
            }
        }
        assert!(g.order.len() <= 2 * MAX_GROUPS + 1, "{}", g.order.len());
    }

    /// A group assigned again is as young as its last assignment: the eviction of its
    /// first one does not take it.
    #[test]
    fn reassigning_a_group_makes_it_young_again() {
        let mut g = MessageGroups::default();
        g.assign("old", 1);
        g.close("old");
        for i in 0..MAX_GROUPS - 1 {
            g.assign(&format!("g{i}"), 1);
        }
        g.assign("old", 3);
        g.assign("one-more", 1);
        assert_eq!(
            g.owner("old"),
            Some(3),
            "its first assignment was the one evicted"
        );
        assert_eq!(g.owner("g0"), None, "the oldest in force went");
    }
}
