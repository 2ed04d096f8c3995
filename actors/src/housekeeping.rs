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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// See the module documentation. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct HousekeepingBudget {
    permits: Arc<Semaphore>,
    tickets: Arc<AtomicU64>,
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
        }
    }

    /// Waits for a permit (in arrival order). `None` once the budget is closed.
    pub async fn acquire(&self) -> Option<PagePermit> {
        let permit = Arc::clone(&self.permits).acquire_owned().await.ok()?;
        Some(PagePermit {
            _permit: permit,
            ticket: self.tickets.fetch_add(1, Ordering::SeqCst) + 1,
        })
    }

    /// Pages started so far, over all destinations.
    pub fn pages_started(&self) -> u64 {
        self.tickets.load(Ordering::SeqCst)
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
        drop(first);
        assert_eq!(big.await.unwrap(), 2);
        assert_eq!(small.await.unwrap(), 3);
        assert_eq!(budget.pages_started(), 3);
    }
}
