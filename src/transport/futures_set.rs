//! [`Lazy`]: a connection's set of futures in flight (commits awaited, acks being
//! written) that exists only while something is in it. `futures`' `FuturesOrdered`
//! and `FuturesUnordered` allocate when they are made (a shared queue with a stub
//! task, 144–152 bytes), so a connection holding one of each for its whole life paid
//! for them while idle (issue 53).

use futures::stream::{FuturesOrdered, FuturesUnordered};
use futures::{Stream, StreamExt};
use std::future::Future;

/// A set of futures polled together: [`FuturesOrdered`] (outputs in the order
/// pushed) or [`FuturesUnordered`] (as they finish).
pub trait FutureSet: Stream + Unpin + Default {
    /// What it holds.
    type Fut;
    /// Adds `future` (at the back, for an ordered set).
    fn push_one(&mut self, future: Self::Fut);
    /// Futures in it.
    fn in_flight(&self) -> usize;
}

impl<F: Future> FutureSet for FuturesOrdered<F> {
    type Fut = F;

    fn push_one(&mut self, future: F) {
        self.push_back(future);
    }

    fn in_flight(&self) -> usize {
        self.len()
    }
}

impl<F: Future> FutureSet for FuturesUnordered<F> {
    type Fut = F;

    fn push_one(&mut self, future: F) {
        self.push(future);
    }

    fn in_flight(&self) -> usize {
        self.len()
    }
}

/// A [`FutureSet`] made at its first push and dropped when it is empty again.
pub struct Lazy<T>(Option<T>);

impl<T> Default for Lazy<T> {
    fn default() -> Self {
        Lazy(None)
    }
}

impl<T: FutureSet> Lazy<T> {
    /// Futures in the set.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, FutureSet::in_flight)
    }

    /// Whether nothing is in the set.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `future`, making the set if there is none.
    pub fn push(&mut self, future: T::Fut) {
        self.0.get_or_insert_with(T::default).push_one(future);
    }

    /// The next output; `None` when the set is empty. Cancel-safe, as the set's own
    /// `next`.
    pub async fn next(&mut self) -> Option<T::Item> {
        let set = self.0.as_mut()?;
        let item = set.next().await;
        if set.in_flight() == 0 {
            self.0 = None;
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outputs come in the order pushed, and the set is gone once it is empty.
    #[tokio::test]
    async fn an_ordered_set_is_made_and_dropped() {
        let mut set: Lazy<FuturesOrdered<std::future::Ready<u8>>> = Lazy::default();
        assert!(set.0.is_none() && set.next().await.is_none());
        set.push(std::future::ready(1));
        set.push(std::future::ready(2));
        assert_eq!(set.len(), 2);
        assert_eq!(set.next().await, Some(1));
        assert!(set.0.is_some());
        assert_eq!(set.next().await, Some(2));
        assert!(set.0.is_none() && set.is_empty());
    }
}
