//! [`CommittedCounts`]: each container's committed row count, counted once and kept
//! until a write changes the container, so that [`crate::MessageStore::count_committed`]
//! costs nothing for a destination nothing was written to since it was last counted.
//!
//! Why: the broker's stats reading (every second while the HTTP server runs) asks the
//! committed rows of every running destination. A `COUNT` walks the container's index
//! range, about 40 µs on SQLite for a queue of 10 rows, so 10,000 idle queues cost 40 %
//! of a core for numbers that never change. The store is the one writer
//! ([`crate::MessageStore::write`]): every change to a container's committed rows passes
//! through it, and it drops the container's count after the write's transaction,
//! whatever its outcome. A count taken while a write that changes the container was in
//! flight is answered but not kept (its token no longer matches): the next question
//! counts again. So a kept count is the committed rows as of now, exactly.
//!
//! Only a broker's own writes are seen: a second broker writing the same tables (not
//! possible today: a store has one active broker at a time, see `crate::lease`) would
//! leave this broker's counts stale.
//!
//! Memory: one entry per container counted and not written since (about 60 bytes and
//! the name); a write, a deletion included, removes its containers' entries.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct CommittedCounts {
    entries: Mutex<HashMap<String, Entry>>,
    tokens: AtomicU64,
    /// Containers written since the last [`Self::take_written`] (`None` until the
    /// first call: nobody reads the feed, nothing is recorded).
    written: Mutex<Option<HashSet<String>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// A count was started with this token; a write to the container since removed the
    /// entry (then the count's answer is not kept).
    Counting(u64),
    /// The committed rows, as of the last write to the container.
    Counted(u64),
}

impl CommittedCounts {
    /// The kept count of `container`, if one is kept.
    pub(crate) fn get(&self, container: &str) -> Option<u64> {
        match self.lock().get(container) {
            Some(Entry::Counted(n)) => Some(*n),
            _ => None,
        }
    }

    /// A count of `container` starts: the token to hand to [`Self::finish`].
    pub(crate) fn start(&self, container: &str) -> u64 {
        let token = self.tokens.fetch_add(1, Ordering::Relaxed);
        self.lock()
            .insert(container.to_string(), Entry::Counting(token));
        token
    }

    /// The count of `container` started with `token` found `rows`: kept, unless a
    /// write to the container came in between.
    pub(crate) fn finish(&self, container: &str, token: u64, rows: u64) {
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(container) {
            if *entry == Entry::Counting(token) {
                *entry = Entry::Counted(rows);
            }
        }
    }

    /// The kept count of `container` goes (a count under way is then not kept
    /// either: its token no longer matches).
    pub(crate) fn forget(&self, container: &str) {
        self.lock().remove(container);
    }

    /// A write to `containers` is over (committed or not): their counts are dropped.
    pub(crate) fn written<'a>(&self, containers: impl IntoIterator<Item = &'a str>) {
        let mut feed = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let mut entries = self.lock();
        if entries.is_empty() && feed.is_none() {
            return;
        }
        for container in containers {
            entries.remove(container);
            if let Some(feed) = feed.as_mut() {
                if !feed.contains(container) {
                    feed.insert(container.to_string());
                }
            }
        }
    }

    /// The containers written since the last call, each once; `None` on the first
    /// call, which starts the feed (nothing was recorded before it). Memory: one entry
    /// per container written between two calls.
    pub(crate) fn take_written(&self) -> Option<Vec<String>> {
        let mut feed = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        match feed.as_mut() {
            // Taken, not drained: a burst of writes to many containers leaves no
            // table of that size behind.
            Some(written) => Some(std::mem::take(written).into_iter().collect()),
            None => {
                *feed = Some(HashSet::new());
                None
            }
        }
    }

    /// Containers with an entry now (kept or being counted).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_feed_names_each_container_once_from_its_first_call() {
        let c = CommittedCounts::default();
        c.written(["queue://before"]);
        assert_eq!(c.take_written(), None, "the first call starts the feed");
        c.written(["queue://a", "queue://b"]);
        c.written(["queue://a"]);
        let mut written = c.take_written().unwrap();
        written.sort();
        assert_eq!(written, ["queue://a", "queue://b"]);
        assert_eq!(c.take_written(), Some(Vec::new()));
    }

    #[test]
    fn a_count_is_kept_until_its_container_is_written() {
        let c = CommittedCounts::default();
        assert_eq!(c.get("queue://a"), None);
        let t = c.start("queue://a");
        c.finish("queue://a", t, 10);
        assert_eq!(c.get("queue://a"), Some(10));
        c.written(["queue://b"]);
        assert_eq!(c.get("queue://a"), Some(10), "another container's write");
        c.written(["queue://a"]);
        assert_eq!(c.get("queue://a"), None);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_count_a_write_overtook_is_not_kept() {
        let c = CommittedCounts::default();
        let t = c.start("queue://a");
        // The write commits while the count runs: the count may have seen the rows
        // before it.
        c.written(["queue://a"]);
        c.finish("queue://a", t, 10);
        assert_eq!(c.get("queue://a"), None);
        // A later count, started after the write, is kept; an older one finishing
        // after it changes nothing.
        let old = c.start("queue://a");
        let new = c.start("queue://a");
        c.finish("queue://a", old, 1);
        assert_eq!(c.get("queue://a"), None);
        c.finish("queue://a", new, 11);
        assert_eq!(c.get("queue://a"), Some(11));
    }
}
