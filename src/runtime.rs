//! The broker's own thread: an actix system that runs every actor of one [`Broker`].
//!
//! The embedding API's handles ([`Broker`], [`Subscription`], [`Acker`]) only send
//! messages to actors and await their answers, which works from any executor; what
//! needs actix's own runtime (starting an actor, the actors' tasks) happens on this
//! thread. So a service on tokio's multi-threaded runtime, a current-thread one, a
//! `LocalSet` or actix uses the same API, and nothing of the broker runs on the
//! caller's threads.
//!
//! The thread lives as long as some handle holds it: the last [`Broker`] clone (and
//! every stream of it) dropped stops its system; [`Broker::shutdown`] stops it once
//! the store is closed.
//!
//! [`Broker`]: crate::Broker
//! [`Broker::shutdown`]: crate::Broker::shutdown
//! [`Subscription`]: crate::Subscription
//! [`Acker`]: crate::Acker

use std::future::Future;
use std::thread::{JoinHandle, ThreadId};

use crate::error::Error;

/// See the module documentation.
pub(crate) struct BrokerThread {
    system: actix_rt::System,
    arbiter: actix_rt::ArbiterHandle,
    id: ThreadId,
    thread: parking_lot::Mutex<Option<JoinHandle<()>>>,
}

impl BrokerThread {
    /// Starts the thread and its actix system.
    ///
    /// Errors: [`Error::Runtime`] when the operating system refuses a thread.
    pub(crate) fn spawn() -> Result<Self, Error> {
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
            system,
            arbiter,
            id,
            thread: parking_lot::Mutex::new(Some(thread)),
        })
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
    /// the calling thread until the broker's thread has run it.
    pub(crate) fn run_blocking<F, R>(&self, make: F) -> Result<R, Error>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
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

impl Drop for BrokerThread {
    fn drop(&mut self) {
        self.system.stop();
        // Joined unless this is the broker's own thread (a handle dropped by an actor).
        if std::thread::current().id() != self.id {
            if let Some(thread) = self.thread.lock().take() {
                let _ = thread.join();
            }
        }
    }
}
