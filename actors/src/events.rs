//! What happens to destinations, as the broker's advisory topics report it
//! (ActiveMQ's advisory messages): [`Event`]s, emitted through [`Events`].
//!
//! Emitting costs nothing while nobody watches: [`Events::emit`] takes a closure and
//! builds the event only when a watcher exists ([`Events::watch`]: a subscription to
//! an advisory topic holds one) and a sink is set ([`Events::set`], once, by the
//! broker). The registry, the queues and the topics hold clones of one [`Events`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::destination::DestinationKey;

/// One thing that happened to a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Its actor started: first use, or its first use since the broker started
    /// (ActiveMQ's `DestinationInfo` ADD).
    DestinationAdded(DestinationKey),
    /// It was deleted with its messages (ActiveMQ's `DestinationInfo` REMOVE).
    DestinationRemoved(DestinationKey),
    /// `count` of its messages expired (one expiry page, or one message found
    /// expired on arrival or at delivery): counted, not listed, so that an expiry page
    /// that deletes rows in SQL reads none of them for this.
    Expired {
        /// Where they expired.
        destination: DestinationKey,
        /// How many, at least 1.
        count: u64,
    },
    /// A message was moved to a dead-letter queue.
    DeadLettered {
        /// Where it was.
        destination: DestinationKey,
        /// Where it went.
        dead_letter_queue: DestinationKey,
        /// Its message id.
        message_id: String,
        /// Why (`message expired`, `delivery failed 7 times`, ...).
        cause: String,
    },
}

/// What a broker does with an [`Event`].
pub type EventSink = Box<dyn Fn(Event) + Send + Sync>;

#[derive(Default)]
struct Inner {
    watchers: AtomicUsize,
    sink: OnceLock<EventSink>,
}

/// Where events go; cheap to clone (one shared sink and watcher count).
#[derive(Clone, Default)]
pub struct Events(Arc<Inner>);

impl Events {
    /// Sends every event to `sink` from now on; a second call is ignored.
    pub fn set(&self, sink: impl Fn(Event) + Send + Sync + 'static) {
        let _ = self.0.sink.set(Box::new(sink));
    }

    /// True while some [`EventWatch`] is held.
    pub fn watched(&self) -> bool {
        self.0.watchers.load(Ordering::Relaxed) > 0
    }

    /// A watcher, counted until dropped: events are built and sent while any exists.
    pub fn watch(&self) -> EventWatch {
        self.0.watchers.fetch_add(1, Ordering::Relaxed);
        EventWatch(self.clone())
    }

    /// Builds the event with `make` and sends it to the sink, only while watched.
    pub fn emit(&self, make: impl FnOnce() -> Event) {
        if !self.watched() {
            return;
        }
        if let Some(sink) = self.0.sink.get() {
            sink(make());
        }
    }
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("watchers", &self.0.watchers.load(Ordering::Relaxed))
            .finish()
    }
}

/// A watcher of [`Events`] ([`Events::watch`]); dropping it stops counting it.
#[derive(Debug)]
pub struct EventWatch(Events);

impl Drop for EventWatch {
    fn drop(&mut self) {
        (self.0).0.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn events_are_built_only_while_watched() {
        let events = Events::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&seen);
        events.set(move |e| into.lock().unwrap().push(e));
        let key = DestinationKey::queue("q").unwrap();
        let mut built = 0;
        events.emit(|| {
            built += 1;
            Event::DestinationAdded(key.clone())
        });
        assert_eq!(built, 0, "built while nobody watches");
        let watch = events.watch();
        let second = events.clone().watch();
        events.emit(|| Event::DestinationRemoved(key.clone()));
        drop(watch);
        events.emit(|| Event::DestinationAdded(key.clone()));
        drop(second);
        events.emit(|| Event::DestinationRemoved(key.clone()));
        assert_eq!(
            *seen.lock().unwrap(),
            [
                Event::DestinationRemoved(key.clone()),
                Event::DestinationAdded(key.clone())
            ]
        );
        assert!(!events.watched());
    }
}
