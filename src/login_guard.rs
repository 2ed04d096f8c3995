//! Refused logins per client address, across every way in (STOMP over TCP, TLS and
//! WebSocket, the HTTP API): one [`LoginGuard`] per broker, in its
//! [`Security`](crate::auth::Security).
//!
//! An address may have at most [`MAX_FAILED_LOGINS`] refused logins within
//! [`FAILED_LOGIN_WINDOW`] (counted from its first refusal); after that its logins are
//! refused at once, with no passcode check, until the window ends (STOMP: an ERROR;
//! HTTP: `429`). Parallel attempts cannot get past it: while an address has refusals
//! in its window, at most as many of its logins are checked at once as it has
//! refusals left, and the others wait for those to end (an address without refusals
//! is checked up to that many at once too, so a flood of parallel guesses is cut at
//! the limit, while a pool of good connections only waits its turn). Every refusal
//! also waits [`crate::auth::FAILED_LOGIN_DELAY`] before its answer, and passcodes
//! are checked one per core at a time ([`crate::auth::login_checks`]).
//!
//! Counted in `/metrics`: `ebb_login_failures_total` and `ebb_logins_throttled_total`,
//! by `protocol`; refused logins are logged with the client's address. Memory: at
//! most [`MAX_ADDRESSES`] addresses are remembered (those whose window ended go
//! first, then the oldest).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Refused logins from one address within [`FAILED_LOGIN_WINDOW`] after which its
/// logins are refused without a check.
pub const MAX_FAILED_LOGINS: u32 = 5;

/// How long an address's refused logins are counted from its first one.
pub const FAILED_LOGIN_WINDOW: Duration = Duration::from_secs(10);

/// Most addresses remembered at once.
pub const MAX_ADDRESSES: usize = 65_536;

#[derive(Debug)]
struct Tries {
    /// Refused logins in the window.
    failures: u32,
    /// When the window began (its first refusal).
    since: Instant,
    /// Logins being checked now.
    checking: u32,
}

/// See the module documentation. Shared (`Arc`) by every protocol of a broker.
#[derive(Debug)]
pub struct LoginGuard {
    window: Duration,
    max_failures: u32,
    tries: Mutex<HashMap<IpAddr, Tries>>,
    /// Wakes logins waiting for a check of their address to end.
    ended: tokio::sync::Notify,
    failures_total: AtomicU64,
    throttled_total: AtomicU64,
}

impl Default for LoginGuard {
    fn default() -> Self {
        Self::new(FAILED_LOGIN_WINDOW, MAX_FAILED_LOGINS)
    }
}

/// A login refused without a check: its address used up its refused logins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    /// Seconds until the address may try again (rounded up).
    pub retry_after_s: u64,
}

impl std::fmt::Display for Throttled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "too many refused logins from this address: try again in {} s",
            self.retry_after_s
        )
    }
}

impl LoginGuard {
    /// A guard that allows `max_failures` refused logins per address within `window`.
    pub fn new(window: Duration, max_failures: u32) -> Self {
        Self {
            window,
            max_failures: max_failures.max(1),
            tries: Mutex::new(HashMap::new()),
            ended: tokio::sync::Notify::new(),
            failures_total: AtomicU64::new(0),
            throttled_total: AtomicU64::new(0),
        }
    }

    /// A login from `peer` (`None`: unknown, not counted) may be checked: waits while
    /// as many of its logins are being checked as it has refusals left; errors at once
    /// when it has none left. `protocol` labels the metrics (`stomp`, `http`).
    pub async fn admit(
        self: &Arc<Self>,
        peer: Option<IpAddr>,
        protocol: &'static str,
    ) -> Result<LoginCheck, Throttled> {
        let Some(addr) = peer else {
            return Ok(LoginCheck::untracked(Arc::clone(self), protocol));
        };
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            {
                let mut tries = self.tries.lock();
                self.forget_old(&mut tries);
                let entry = tries.entry(addr).or_insert_with(|| Tries {
                    failures: 0,
                    since: Instant::now(),
                    checking: 0,
                });
                if entry.failures > 0 && entry.since.elapsed() >= self.window {
                    entry.failures = 0;
                }
                if entry.failures >= self.max_failures {
                    self.throttled_total.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!(crate::metrics::names::LOGINS_THROTTLED_TOTAL, "protocol" => protocol)
                        .increment(1);
                    let left = self.window.saturating_sub(entry.since.elapsed());
                    return Err(Throttled {
                        retry_after_s: left.as_secs() + 1,
                    });
                }
                if entry.failures + entry.checking < self.max_failures {
                    entry.checking += 1;
                    return Ok(LoginCheck {
                        guard: Arc::clone(self),
                        addr: Some(addr),
                        protocol,
                        done: false,
                    });
                }
            }
            ended.await;
        }
    }

    /// Refused logins counted since start (all addresses, all protocols).
    pub fn failures_total(&self) -> u64 {
        self.failures_total.load(Ordering::Relaxed)
    }

    /// Logins refused without a check since start.
    pub fn throttled_total(&self) -> u64 {
        self.throttled_total.load(Ordering::Relaxed)
    }

    /// Addresses remembered now.
    pub fn addresses(&self) -> usize {
        self.tries.lock().len()
    }

    /// Drops what no longer counts once the map is large: addresses whose window
    /// ended with nothing being checked, then (over [`MAX_ADDRESSES`]) the oldest.
    fn forget_old(&self, tries: &mut HashMap<IpAddr, Tries>) {
        if tries.len() < 1024 {
            return;
        }
        let window = self.window;
        tries.retain(|_, t| t.checking > 0 || (t.failures > 0 && t.since.elapsed() < window));
        while tries.len() >= MAX_ADDRESSES {
            let oldest = tries
                .iter()
                .filter(|(_, t)| t.checking == 0)
                .min_by_key(|(_, t)| t.since)
                .map(|(addr, _)| *addr);
            match oldest {
                Some(addr) => tries.remove(&addr),
                None => break,
            };
        }
    }

    fn end(&self, addr: Option<IpAddr>, refused: bool, protocol: &'static str) {
        if refused {
            self.failures_total.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(crate::metrics::names::LOGIN_FAILURES_TOTAL, "protocol" => protocol)
                .increment(1);
        }
        if let Some(addr) = addr {
            let mut tries = self.tries.lock();
            if let Some(entry) = tries.get_mut(&addr) {
                entry.checking = entry.checking.saturating_sub(1);
                if refused {
                    if entry.failures == 0 || entry.since.elapsed() >= self.window {
                        entry.failures = 0;
                        entry.since = Instant::now();
                    }
                    entry.failures += 1;
                }
                if entry.failures == 0 && entry.checking == 0 {
                    tries.remove(&addr);
                }
            }
        }
        self.ended.notify_waiters();
    }
}

/// A login being checked ([`LoginGuard::admit`]): say how it ended with
/// [`LoginCheck::refused`] or [`LoginCheck::accepted`]; dropped without either, it
/// counts as neither.
#[derive(Debug)]
pub struct LoginCheck {
    guard: Arc<LoginGuard>,
    addr: Option<IpAddr>,
    protocol: &'static str,
    done: bool,
}

impl LoginCheck {
    fn untracked(guard: Arc<LoginGuard>, protocol: &'static str) -> Self {
        Self {
            guard,
            addr: None,
            protocol,
            done: false,
        }
    }

    /// The login was refused: counted against its address.
    pub fn refused(mut self) {
        self.done = true;
        self.guard.end(self.addr, true, self.protocol);
    }

    /// The login succeeded.
    pub fn accepted(mut self) {
        self.done = true;
        self.guard.end(self.addr, false, self.protocol);
    }
}

impl Drop for LoginCheck {
    fn drop(&mut self) {
        if !self.done {
            self.guard.end(self.addr, false, self.protocol);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[tokio::test]
    async fn an_address_is_cut_off_after_its_refusals_and_others_are_not() {
        let guard = Arc::new(LoginGuard::new(Duration::from_secs(600), 3));
        for _ in 0..3 {
            guard.admit(addr(1), "stomp").await.unwrap().refused();
        }
        let throttled = guard.admit(addr(1), "http").await.unwrap_err();
        assert!(throttled.retry_after_s > 590, "{throttled:?}");
        assert!(throttled.to_string().contains("too many refused logins"));
        assert_eq!(guard.failures_total(), 3);
        assert_eq!(guard.throttled_total(), 1);
        // Another address, and an unknown one, are not held.
        guard.admit(addr(2), "stomp").await.unwrap().accepted();
        guard.admit(None, "stomp").await.unwrap().refused();
        assert_eq!(
            guard.addresses(),
            1,
            "only the refused address is remembered"
        );
    }

    /// Parallel guesses cannot get past the limit: with 2 refusals left, 2 are
    /// checked at once and the rest wait; when those 2 are refused, the rest are
    /// refused without a check.
    #[tokio::test]
    async fn parallel_attempts_wait_for_the_checks_before_them() {
        let guard = Arc::new(LoginGuard::new(Duration::from_secs(600), 3));
        guard.admit(addr(1), "stomp").await.unwrap().refused();
        let first = guard.admit(addr(1), "stomp").await.unwrap();
        let second = guard.admit(addr(1), "stomp").await.unwrap();
        let waiting: Vec<_> = (0..10)
            .map(|_| {
                let guard = Arc::clone(&guard);
                tokio::spawn(async move { guard.admit(addr(1), "stomp").await.map(drop) })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(waiting.iter().all(|w| !w.is_finished()), "they wait");
        first.refused();
        second.refused();
        for w in waiting {
            assert!(w.await.unwrap().is_err(), "refused without a check");
        }
        assert_eq!(guard.failures_total(), 3);
        assert_eq!(guard.throttled_total(), 10);
    }

    /// A pool of good logins from one address only waits its turn.
    #[tokio::test]
    async fn good_logins_in_parallel_all_go_through() {
        let guard = Arc::new(LoginGuard::new(Duration::from_secs(600), 2));
        let logins: Vec<_> = (0..20)
            .map(|_| {
                let guard = Arc::clone(&guard);
                tokio::spawn(async move {
                    let check = guard.admit(addr(7), "stomp").await.unwrap();
                    tokio::task::yield_now().await;
                    check.accepted();
                })
            })
            .collect();
        for l in logins {
            l.await.unwrap();
        }
        assert_eq!(guard.failures_total(), 0);
        assert_eq!(guard.addresses(), 0);
    }
}
