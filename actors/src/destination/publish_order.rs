//! [`PublishOrder`]: releases published messages in the order they were published.
//!
//! A persistent message is released only after its store write commits, and writes
//! commit in batches, so answers can come back in another order than the publishes.
//! Each publish reserves a place (a sequence number) when the destination accepts it,
//! and fills it when its write answers: with the message, or with nothing when the
//! write failed. A message is released once every place before it is filled, so a
//! cursor sees store ids in increasing order and never a gap that closes later.

use std::collections::BTreeMap;

/// See the module documentation. `T` is what is released (a message, shared).
#[derive(Debug)]
pub struct PublishOrder<T> {
    /// The place the next publish gets.
    next: u64,
    /// The first place not released yet.
    release: u64,
    /// Filled places at or after `release`, waiting for an earlier one.
    filled: BTreeMap<u64, Option<T>>,
}

impl<T> Default for PublishOrder<T> {
    fn default() -> Self {
        Self {
            next: 0,
            release: 0,
            filled: BTreeMap::new(),
        }
    }
}

impl<T> PublishOrder<T> {
    /// Reserves the next place in publish order.
    pub fn reserve(&mut self) -> u64 {
        let place = self.next;
        self.next += 1;
        place
    }

    /// Fills `place` (`None`: its write failed, nothing to release) and returns, in
    /// publish order, every message now free to go: none while an earlier place is
    /// still open.
    pub fn fill(&mut self, place: u64, message: Option<T>) -> Vec<T> {
        debug_assert!(
            place >= self.release && place < self.next,
            "place {place} not open"
        );
        self.filled.insert(place, message);
        let mut released = Vec::new();
        while let Some(message) = self.filled.remove(&self.release) {
            self.release += 1;
            released.extend(message);
        }
        released
    }

    /// Reserves a place and fills it at once (a message that needs no store write):
    /// it is released now if nothing before it is open.
    pub fn push(&mut self, message: T) -> Vec<T> {
        let place = self.reserve();
        self.fill(place, Some(message))
    }

    /// Places reserved and not yet released (open, or filled behind an open one).
    pub fn waiting(&self) -> u64 {
        self.next - self.release
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_out_of_order_are_released_in_publish_order() {
        let mut order = PublishOrder::default();
        let (a, b, c) = (order.reserve(), order.reserve(), order.reserve());
        assert_eq!(order.fill(c, Some("c")), Vec::<&str>::new());
        assert_eq!(order.fill(b, Some("b")), Vec::<&str>::new());
        assert_eq!(order.waiting(), 3);
        assert_eq!(order.fill(a, Some("a")), ["a", "b", "c"]);
        assert_eq!(order.waiting(), 0);
    }

    #[test]
    fn a_failed_write_releases_what_follows_it() {
        let mut order = PublishOrder::default();
        let (a, b) = (order.reserve(), order.reserve());
        assert_eq!(order.fill(b, Some("b")), Vec::<&str>::new());
        assert_eq!(order.fill(a, None), ["b"]);
    }

    #[test]
    fn a_message_without_a_write_waits_behind_an_open_one() {
        let mut order = PublishOrder::default();
        let a = order.reserve();
        assert_eq!(order.push("non-persistent"), Vec::<&str>::new());
        assert_eq!(order.fill(a, Some("stored")), ["stored", "non-persistent"]);
        assert_eq!(order.push("next"), ["next"]);
    }
}
