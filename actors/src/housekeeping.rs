//! The housekeeping budget shared by every destination's expiry pages.
//!
//! A page holds a permit of a fair (first come, first served) semaphore while it runs.
//! A destination that chains pages asks for a permit again for each page and queues
//! behind the others that are waiting, so a destination with a million expired
//! messages delays a small one by at most a page per permit, never by its whole run
//! (the fairness Qpid's QPID-7364 asked of housekeeping).
//!
//! Each page also takes a ticket (a global count of pages started), so tests and
//! operators can tell in what order pages ran without looking at the clock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// See the module documentation. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct HousekeepingBudget {
    permits: Arc<Semaphore>,
    tickets: Arc<AtomicU64>,
    /// Pages waiting for a permit: arrival number → since when.
    waiting: Arc<parking_lot::Mutex<BTreeMap<u64, Instant>>>,
    arrivals: Arc<AtomicU64>,
}

/// A running page's permit; dropping it lets the next page run.
pub struct PagePermit {
    _permit: OwnedSemaphorePermit,
    /// The page's place in the order pages started, from 1.
    pub ticket: u64,
}

impl HousekeepingBudget {
    /// `permits` pages may run at once (at least 1); the broker's default is one per
    /// core.
    pub fn new(permits: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(permits.max(1))),
            tickets: Arc::new(AtomicU64::new(0)),
            waiting: Default::default(),
            arrivals: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Waits for a permit (in arrival order). `None` once the budget is closed.
    pub async fn acquire(&self) -> Option<PagePermit> {
        let arrival = self.arrivals.fetch_add(1, Ordering::Relaxed);
        self.waiting.lock().insert(arrival, Instant::now());
        // Removed from `waiting` however the wait ends (also if it is cancelled).
        let _waiting = Waiting(&self.waiting, arrival);
        let permit = Arc::clone(&self.permits).acquire_owned().await.ok()?;
        Some(PagePermit {
            _permit: permit,
            ticket: self.tickets.fetch_add(1, Ordering::SeqCst) + 1,
        })
    }

    /// Housekeeping lag: how long the page that has waited longest for a permit has
    /// been waiting (zero when none waits). It grows when expiry work arrives faster
    /// than the permits get through it.
    pub fn lag(&self) -> Duration {
        self.waiting
            .lock()
            .values()
            .next()
            .map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// Pages waiting for a permit now.
    pub fn pages_waiting(&self) -> usize {
        self.waiting.lock().len()
    }

    /// Pages started so far, over all destinations.
    pub fn pages_started(&self) -> u64 {
        self.tickets.load(Ordering::SeqCst)
    }
}

struct Waiting<'a>(&'a parking_lot::Mutex<BTreeMap<u64, Instant>>, u64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.lock().remove(&self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn permits_are_granted_in_arrival_order() {
        let budget = HousekeepingBudget::new(1);
        let first = budget.acquire().await.unwrap();
        let (b1, b2) = (budget.clone(), budget.clone());
        let big = tokio::spawn(async move { b1.acquire().await.unwrap().ticket });
        tokio::task::yield_now().await;
        let small = tokio::spawn(async move { b2.acquire().await.unwrap().ticket });
        tokio::task::yield_now().await;
        assert_eq!(budget.pages_waiting(), 2);
        assert!(budget.lag() > Duration::ZERO);
        drop(first);
        assert_eq!(big.await.unwrap(), 2);
        assert_eq!(small.await.unwrap(), 3);
        assert_eq!((budget.pages_waiting(), budget.lag()), (0, Duration::ZERO));
        assert_eq!(budget.pages_started(), 3);
    }
}
