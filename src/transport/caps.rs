//! Connection caps, for every protocol and listener: how many connections are served
//! at once, in total and from one address ([`Slots`]), and the session ids that name
//! them ([`next_session_id`]). It knows no protocol: a listener takes a [`Slot`]
//! before it reads a byte of a connection and gives it back when the connection ends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// A new session id (`ebb-1`, `ebb-2`, ...), unique in the process: it names a
/// connection in CONNECTED's `session` header and in logs, whichever listener took it.
pub fn next_session_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("ebb-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The connections served now, in total and by source address, against the
/// listeners' `max_connections` and `max_connections_per_address`. Clones share the
/// counts; every listener of a broker (TCP, TLS, WebSocket) takes from the same ones.
#[derive(Clone, Default)]
pub struct Slots(Arc<Mutex<SlotCounts>>);

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots")
            .field("total", &self.0.lock().total)
            .finish()
    }
}

#[derive(Default)]
struct SlotCounts {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// Why a connection gets no place: a cap is reached. The text names the cap by its
/// configuration key; it is what the refused client is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverCap {
    /// `max_connections` connections are served already.
    #[error("the broker serves {most} connections, its most (max_connections)")]
    Connections {
        /// The cap.
        most: usize,
    },
    /// `max_connections_per_address` connections come from `address` already.
    #[error("{most} connections from {address} already, the most from one address (max_connections_per_address)")]
    PerAddress {
        /// The cap.
        most: usize,
        /// The client's address.
        address: IpAddr,
    },
}

/// One served connection's place; given back on drop.
pub struct Slot {
    slots: Slots,
    address: IpAddr,
}

impl Slots {
    /// A place for a connection from `address` while fewer than `most` are served
    /// and fewer than `most_per_address` from it, or why there is none (naming the
    /// limit by its configuration key).
    pub fn take_within(
        &self,
        address: IpAddr,
        most: usize,
        most_per_address: usize,
    ) -> Result<Slot, OverCap> {
        let mut counts = self.0.lock();
        if counts.total >= most {
            return Err(OverCap::Connections { most });
        }
        let from = counts.by_address.entry(address).or_default();
        if *from >= most_per_address {
            return Err(OverCap::PerAddress {
                most: most_per_address,
                address,
            });
        }
        *from += 1;
        counts.total += 1;
        Ok(Slot {
            slots: self.clone(),
            address,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.slots.0.lock();
        counts.total -= 1;
        if let Some(from) = counts.by_address.get_mut(&self.address) {
            *from -= 1;
            if *from == 0 {
                counts.by_address.remove(&self.address);
            }
        }
    }
}
