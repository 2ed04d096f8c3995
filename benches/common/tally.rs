//! What a queue benchmark run received: each message counted once, duplicates and
//! messages that were never sent counted apart, and a signal once every message sent
//! has arrived. Shared by the in-process and the STOMP consumers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::watch;

/// Bytes at the start of a body that hold the message's index, in decimal.
const INDEX_DIGITS: usize = 20;

/// The body of message `index`: its index in decimal, then `x` up to `size` bytes.
pub fn body(index: u64, size: usize) -> Vec<u8> {
    let mut body = format!("{index:0width$}", width = INDEX_DIGITS).into_bytes();
    body.resize(size.max(INDEX_DIGITS), b'x');
    body
}

/// The index [`body`] wrote, if `body` is one of its bodies.
pub fn index_of(body: &[u8]) -> Option<u64> {
    std::str::from_utf8(body.get(..INDEX_DIGITS)?)
        .ok()?
        .parse()
        .ok()
}

/// Message indices of producer `p` of `producers`, for `messages` in all.
pub fn share(messages: u64, producers: usize, p: usize) -> std::ops::Range<u64> {
    let each = messages / producers as u64;
    let from = p as u64 * each;
    let to = if p + 1 == producers {
        messages
    } else {
        from + each
    };
    from..to
}

/// Counters of one run; see the module documentation.
pub struct Tally {
    seen: Vec<AtomicBool>,
    unique: AtomicU64,
    duplicates: AtomicU64,
    foreign: AtomicU64,
    /// Sends the broker confirmed (receipts, or `send` returning).
    pub confirmed: AtomicU64,
    /// Acks applied (in process: answered; over STOMP: written).
    pub acked: AtomicU64,
    done: watch::Sender<bool>,
}

/// What [`Tally::record`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    First,
    Again,
    /// Not a body of this run (a leftover of another run, or garbage).
    Foreign,
}

impl Tally {
    pub fn new(total: u64) -> Self {
        Self {
            seen: (0..total).map(|_| AtomicBool::new(false)).collect(),
            unique: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            foreign: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            done: watch::channel(false).0,
        }
    }

    pub fn total(&self) -> u64 {
        self.seen.len() as u64
    }

    /// Turns true once every message has been received at least once.
    pub fn done(&self) -> watch::Receiver<bool> {
        self.done.subscribe()
    }

    /// Counts the message with this body.
    pub fn record(&self, body: &[u8]) -> Seen {
        let Some(flag) = index_of(body).and_then(|i| self.seen.get(i as usize)) else {
            self.foreign.fetch_add(1, Ordering::Relaxed);
            return Seen::Foreign;
        };
        if flag.swap(true, Ordering::Relaxed) {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
            return Seen::Again;
        }
        if self.unique.fetch_add(1, Ordering::Relaxed) + 1 == self.total() {
            self.done.send_replace(true);
        }
        Seen::First
    }

    pub fn unique(&self) -> u64 {
        self.unique.load(Ordering::Relaxed)
    }

    pub fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }

    pub fn foreign(&self) -> u64 {
        self.foreign.load(Ordering::Relaxed)
    }

    /// Everything counted, for progress lines and failures.
    pub fn describe(&self) -> String {
        format!(
            "confirmed {} of {} sends, received {} distinct (+{} duplicates, {} foreign), {} acks",
            self.confirmed.load(Ordering::Relaxed),
            self.total(),
            self.unique(),
            self.duplicates(),
            self.foreign(),
            self.acked.load(Ordering::Relaxed),
        )
    }

    /// A number that grows while the run makes progress (for a stall watchdog).
    pub fn progress(&self) -> u64 {
        self.confirmed.load(Ordering::Relaxed)
            + self.unique()
            + self.duplicates()
            + self.acked.load(Ordering::Relaxed)
    }

    /// `Err` naming what was lost or received twice.
    pub fn check(&self) -> Result<(), String> {
        let lost = self.total() - self.unique();
        if lost == 0 && self.duplicates() == 0 && self.foreign() == 0 {
            return Ok(());
        }
        let missing: Vec<usize> = self
            .seen
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.load(Ordering::Relaxed))
            .map(|(i, _)| i)
            .take(10)
            .collect();
        Err(format!(
            "{lost} lost (first missing indices {missing:?}), {} duplicated, {} foreign: {}",
            self.duplicates(),
            self.foreign(),
            self.describe()
        ))
    }
}

/// Waits until `tally` makes no progress for `stall`, then answers what it saw. Race it
/// against a run: a run that ends first wins.
pub async fn watchdog(tally: &Tally, stall: std::time::Duration) -> String {
    stalled(|| tally.progress(), || tally.describe(), stall).await
}

/// [`watchdog`] over anything that counts its progress: waits until `progress` has
/// not changed for `stall` (checked every 250 ms), then answers `no progress for N s:`
/// and `describe`'s text.
pub async fn stalled(
    progress: impl Fn() -> u64,
    describe: impl Fn() -> String,
    stall: std::time::Duration,
) -> String {
    let mut last = (progress(), std::time::Instant::now());
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        let now = progress();
        if now != last.0 {
            last = (now, std::time::Instant::now());
        } else if last.1.elapsed() >= stall {
            return format!("no progress for {} s: {}", stall.as_secs(), describe());
        }
    }
}
