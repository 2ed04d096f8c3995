//! Where a [`Broker`]'s actors run: an actix system, the caller's or the broker's own.
//!
//! The embedding API's handles ([`Broker`], [`Subscription`], [`Acker`]) only send
//! messages to actors and await their answers, which works from any executor; what
//! needs actix's own runtime (starting an actor, the actors' tasks) happens on the
//! broker's system. So a service on tokio's multi-threaded runtime, a current-thread
//! one, a `LocalSet` or actix uses the same API.
//!
//! Called from a thread of an actix system (actix-rt, actix-web: `ebb serve` is one),
//! the broker uses that system's arbiter instead, as a caller on actix expects: its
//! actors then share the caller's thread, and an awaited call costs no hop between
//! threads (a send and its answer cross two threads in about 90 µs on a busy 2-core
//! machine, against about 2 µs on one thread). Everywhere else it starts its own
//! thread, which lives as long as some [`Broker`] clone holds it: the last one dropped
//! stops its system (and the streams of it end).
//!
//! [`Broker`]: crate::Broker
//! [`Broker::shutdown`]: crate::Broker::shutdown
//! [`Subscription`]: crate::Subscription
//! [`Acker`]: crate::Acker

use std::future::Future;
use std::thread::{JoinHandle, ThreadId};

use std::sync::Arc;

use ebb_store::MessageStore;

use crate::error::Error;

/// See the module documentation.
pub(crate) struct BrokerThread {
    arbiter: actix_rt::ArbiterHandle,
    /// The system and thread of its own; `None` on the caller's actix system.
    own: Option<Own>,
}

struct Own {
    system: actix_rt::System,
    arbiter: actix_rt::ArbiterHandle,
    id: ThreadId,
    thread: parking_lot::Mutex<Option<JoinHandle<()>>>,
    /// The broker's store, closed on this thread before it stops (a broker dropped
    /// without [`Broker::shutdown`](crate::Broker::shutdown) still releases its lock
    /// and connections in order, instead of dropping them with the runtime).
    store: parking_lot::Mutex<Option<Arc<dyn MessageStore>>>,
}

impl BrokerThread {
    /// The caller's actix arbiter if it runs on one, else a thread of its own.
    ///
    /// Errors: [`Error::Runtime`] when the operating system refuses a thread.
    pub(crate) fn new() -> Result<Self, Error> {
        match actix_rt::Arbiter::try_current() {
            Some(arbiter) => Ok(Self { arbiter, own: None }),
            None => Self::spawn(),
        }
    }

    /// Starts a thread and its actix system.
    fn spawn() -> Result<Self, Error> {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("ebb-broker".into())
            .spawn(move || {
                let runner = actix_rt::System::new();
                let started = (actix_rt::System::current(), actix_rt::Arbiter::current());
                if tx.send(started).is_ok() {
                    // Until `System::stop`.
                    let _ = runner.run();
                }
            })
            .map_err(|e| Error::Runtime(format!("cannot start the broker's thread: {e}")))?;
        let id = thread.thread().id();
        let (system, arbiter) = rx
            .recv()
            .map_err(|_| Error::Runtime("the broker's thread ended at start".into()))?;
        Ok(Self {
            arbiter: arbiter.clone(),
            own: Some(Own {
                system,
                arbiter,
                id,
                thread: parking_lot::Mutex::new(Some(thread)),
                store: parking_lot::Mutex::new(None),
            }),
        })
    }

    /// On a thread of its own: `store` is closed there when the last handle goes.
    pub(crate) fn hold_store(&self, store: &Arc<dyn MessageStore>) {
        if let Some(own) = &self.own {
            *own.store.lock() = Some(Arc::clone(store));
        }
    }

    /// The arbiter of the broker's system, to start actors on
    /// (`Actor::start_in_arbiter`).
    pub(crate) fn arbiter(&self) -> &actix_rt::ArbiterHandle {
        &self.arbiter
    }

    /// Runs `make()` (a future that need not be `Send`) on the broker's thread and
    /// returns its output. Errors: [`Error::ShuttingDown`] when the thread has stopped.
    pub(crate) async fn run<F, Fut, R>(&self, make: F) -> Result<R, Error>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = self.arbiter.spawn_fn(move || {
            actix_rt::spawn(async move {
                let _ = tx.send(make().await);
            });
        });
        if !spawned {
            return Err(Error::ShuttingDown);
        }
        rx.await.map_err(|_| Error::ShuttingDown)
    }

    /// [`Self::run`] for a function that needs no await, from synchronous code: blocks
    /// the calling thread until the broker's thread has run it (on the caller's own
    /// actix system: runs it at once, on this thread).
    pub(crate) fn run_blocking<F, R>(&self, make: F) -> Result<R, Error>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        if self.own.is_none() {
            return Ok(make());
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = self.arbiter.spawn_fn(move || {
            let _ = tx.send(make());
        });
        if !spawned {
            return Err(Error::ShuttingDown);
        }
        rx.recv().map_err(|_| Error::ShuttingDown)
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        let system = self.system.clone();
        match self.store.lock().take() {
            Some(store) => {
                let closing = self.arbiter.spawn(async move {
                    // Harmless after a shutdown, which closed it already.
                    store.close().await;
                    system.stop();
                });
                if !closing {
                    self.system.stop();
                }
            }
            None => self.system.stop(),
        }
        // Joined unless this is the broker's own thread (a handle dropped by an actor).
        if std::thread::current().id() != self.id {
            if let Some(thread) = self.thread.lock().take() {
                let _ = thread.join();
            }
        }
    }
}
