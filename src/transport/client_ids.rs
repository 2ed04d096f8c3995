//! The client ids of the connections that are open: a client id may be connected
//! only once (case CONN-10), as ActiveMQ's `RegionBroker.addConnection`.
//!
//! A CONNECT with a `client-id` claims it ([`ClientIds::claim`]); the claim is
//! released when the connection's session ends (the [`Claim`] is dropped), however it
//! ends: DISCONNECT, a reset, an ERROR, a heart-beat timeout. A second CONNECT with an
//! id that is claimed gets an ERROR (ActiveMQ's `InvalidClientIDException`), unless
//! the listener allows link stealing (ActiveMQ's `allowLinkStealing`): then the older
//! connection is told to close ([`Claim::take_over_signal`]) and the newer one waits, up to
//! [`TAKEOVER_WAIT`], until the older one has let go of everything it held (its
//! durable subscriptions detached), so that it can re-attach them at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

/// Longest a CONNECT that steals a client id waits for the older connection to end.
pub const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

/// The client ids in use, shared by every connection of the broker's listeners.
#[derive(Debug, Default)]
pub struct ClientIds {
    held: Mutex<HashMap<String, Holder>>,
    next_token: std::sync::atomic::AtomicU64,
    /// Wakes the claims waiting for a holder to let go (link stealing) whenever a
    /// claim ends: one for the broker, not a channel per claim (a watch channel is
    /// 344 bytes, which every connection with a client id held: issue 53).
    released: Notify,
}

#[derive(Debug)]
struct Holder {
    token: u64,
    /// Fired to tell the holder a newer connection takes the id over.
    take_over: Option<oneshot::Sender<()>>,
}

/// A connection's hold on its client id; dropping it releases the id.
#[derive(Debug)]
pub struct Claim {
    ids: Arc<ClientIds>,
    id: String,
    token: u64,
    taken_over: Option<oneshot::Receiver<()>>,
}

/// Why a client id cannot be claimed. The text is the refused CONNECT's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// Another connection holds it and link stealing is off.
    #[error("client id `{id}` is already connected: close that connection first (a broker may be set to take the id over: [stomp] allow_link_stealing)")]
    Held {
        /// The client id.
        id: String,
    },
    /// Link stealing told the holder to close, and it did not within `waited_ms`.
    #[error(
        "client id `{id}` is still held by a connection that did not close within {waited_ms} ms"
    )]
    NotReleased {
        /// The client id.
        id: String,
        /// How long the claim waited, ms.
        waited_ms: u64,
    },
}

impl ClientIds {
    /// Claims `id` for a new connection. When it is held by another connection:
    /// without `steal`, `Err` with the text of the ERROR; with `steal`, the other
    /// connection is told to close and this waits until it has, then claims the id (if
    /// another stealing CONNECT got it first, this takes it from that one in turn), for
    /// at most [`TAKEOVER_WAIT`] in all.
    pub async fn claim(self: &Arc<Self>, id: &str, steal: bool) -> Result<Claim, ClaimError> {
        let deadline = tokio::time::Instant::now() + TAKEOVER_WAIT;
        loop {
            // Listening before the look, so that a release between the two is seen.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let told = {
                let mut held = self.held.lock();
                match held.get_mut(id) {
                    None => return Ok(self.hold(&mut held, id)),
                    Some(_) if !steal => return Err(ClaimError::Held { id: id.to_string() }),
                    // The holder is told once; a later look finds it told already.
                    Some(holder) => holder.take_over.take().map(|tell| tell.send(())).is_some(),
                }
            };
            if told {
                tracing::info!(client_id = %id, "client id taken over by a newer connection");
            }
            // Another CONNECT stealing the same id at the same moment may claim it
            // first; then this one takes it from that one in turn, until the deadline.
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                return Err(ClaimError::NotReleased {
                    id: id.to_string(),
                    waited_ms: TAKEOVER_WAIT.as_millis() as u64,
                });
            }
        }
    }

    /// Records `id` as held by a new claim (the caller checked it is free).
    fn hold(self: &Arc<Self>, held: &mut HashMap<String, Holder>, id: &str) -> Claim {
        let token = self
            .next_token
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tell, taken_over) = oneshot::channel();
        held.insert(
            id.to_string(),
            Holder {
                token,
                take_over: Some(tell),
            },
        );
        Claim {
            ids: Arc::clone(self),
            id: id.to_string(),
            token,
            taken_over: Some(taken_over),
        }
    }

    /// Client ids connected now.
    pub fn len(&self) -> usize {
        self.held.lock().len()
    }

    /// True when no client id is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Claim {
    /// The client id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What resolves (`Ok`) when a newer connection takes the id over (link
    /// stealing); `Err` means it never will. `None` after the first call.
    pub fn take_over_signal(&mut self) -> Option<oneshot::Receiver<()>> {
        self.taken_over.take()
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut held = self.ids.held.lock();
        if held.get(&self.id).is_some_and(|h| h.token == self.token) {
            held.remove(&self.id);
        }
        drop(held);
        self.ids.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_id_is_held_once_and_free_again_after_the_claim_ends() {
        let ids = Arc::new(ClientIds::default());
        let first = ids.claim("c", false).await.unwrap();
        let refused = ids.claim("c", false).await.unwrap_err().to_string();
        assert!(
            refused.starts_with("client id `c` is already connected"),
            "{refused}"
        );
        assert!(ids.claim("other", false).await.is_ok());
        assert_eq!(ids.len(), 1, "the other claim was dropped at once");
        drop(first);
        assert!(ids.is_empty());
        assert!(ids.claim("c", false).await.is_ok());
    }

    #[tokio::test]
    async fn stealing_tells_the_holder_and_waits_until_it_lets_go() {
        let ids = Arc::new(ClientIds::default());
        let mut first = ids.claim("c", false).await.unwrap();
        let told = first.take_over_signal().unwrap();
        let steal = tokio::spawn({
            let ids = Arc::clone(&ids);
            async move { ids.claim("c", true).await }
        });
        // The holder is told, and the newer claim waits until it is dropped.
        tokio::time::timeout(Duration::from_secs(2), told)
            .await
            .expect("told in time")
            .expect("told to close");
        tokio::task::yield_now().await;
        assert!(!steal.is_finished());
        let first_token = first.token;
        drop(first);
        let second = steal
            .await
            .unwrap()
            .expect("claimed after the holder let go");
        assert_ne!(second.token, first_token);
        assert_eq!(ids.len(), 1);
    }

    /// Many CONNECTs stealing one id at once: each gets the id in turn (the one that
    /// lost a race takes it from the winner), and one holds it at the end.
    #[tokio::test]
    async fn concurrent_steals_each_take_the_id_in_turn() {
        let ids = Arc::new(ClientIds::default());
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..10 {
            let (ids, done) = (Arc::clone(&ids), done_tx.clone());
            tokio::spawn(async move {
                let mut claim = ids.claim("c", true).await.expect("every steal succeeds");
                let told = claim.take_over_signal().unwrap();
                let _ = done.send(());
                // A connection closes when told, as the socket loop does.
                if told.await.is_ok() {
                    drop(claim);
                } else {
                    std::future::pending::<()>().await;
                }
            });
        }
        drop(done_tx);
        for _ in 0..10 {
            tokio::time::timeout(Duration::from_secs(5), done_rx.recv())
                .await
                .expect("each claim in time")
                .expect("a claim");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(ids.len(), 1, "one holds the id at the end");
    }
}
