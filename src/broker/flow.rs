//! Producer flow control and usage: the memory, store, temp and transactions limits a send meets ([`Broker::check_space`], [`Broker::wait_for_space`]), and their snapshots ([`UsageSnapshot`], [`DestinationFlow`]).

use super::config::UsageConfig;
use super::destination::ToDestination;
use super::message::Message;
use super::Broker;
use crate::error::Error;
use ebb_actors::destination::StatsBoard;
use ebb_actors::policy::PolicyMap;
use ebb_actors::usage::Usage;
use ebb_actors::DestinationKey;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// What a send meets in producer flow control, checked without waiting
/// ([`Broker::check_space`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Space {
    /// There is room: send now.
    Free,
    /// A limit is reached and the producer should wait ([`Broker::wait_for_space`]).
    Wait,
    /// A limit is reached and the broker is set to fail at once.
    Fail(String),
}

/// The broker's usage counters and limits, shared by every clone of a [`Broker`].
pub(super) struct Usages {
    pub(super) config: UsageConfig,
    pub(super) memory: Arc<Usage>,
    pub(super) temp: Arc<Usage>,
    /// What open transactions hold until their commit ([`UsageConfig::transactions`]).
    pub(super) transactions: Arc<Usage>,
    pub(super) policies: PolicyMap,
    /// Per destination, children of `memory` (named by their store keys).
    pub(super) destinations: parking_lot::Mutex<HashMap<DestinationKey, Arc<Usage>>>,
    /// Producers per destination, as transports report them.
    pub(super) producers: parking_lot::Mutex<HashMap<DestinationKey, u64>>,
    /// Where each destination publishes its counters (the registry's too): a
    /// destination's usage marks its entry when its bytes change.
    pub(super) board: Arc<StatsBoard>,
}

impl Usages {
    /// Destination `key`'s usage if it has one now (none is made).
    pub(super) fn existing(&self, key: &DestinationKey) -> Option<Arc<Usage>> {
        let entry = self.board.get(key)?;
        let map = self.destinations.lock();
        map.get(key).filter(|u| u.watches(&entry)).cloned()
    }

    /// Destination `key`'s usage, a child of `memory` that marks `key`'s stats entry;
    /// made anew when the destination was deleted and started again since (its entry
    /// is a new one).
    pub(super) fn of(&self, key: &DestinationKey) -> Arc<Usage> {
        let entry = self.board.entry(key);
        let mut map = self.destinations.lock();
        match map.get(key) {
            Some(usage) if usage.watches(&entry) => Arc::clone(usage),
            _ => {
                let limit = self.policies.policy_for(key).memory_limit;
                let usage = self.memory.destination_child(key.container(), limit, entry);
                map.insert(key.clone(), Arc::clone(&usage));
                usage
            }
        }
    }
}

impl Broker {
    /// The limit a send of a `persistent` message to `container` would meet now:
    /// `(name, used, limit)` of the first full usage (store, then the destination's
    /// memory, then the broker's memory, then temp for a non-persistent message).
    pub(super) fn full_usage(
        &self,
        key: &DestinationKey,
        persistent: bool,
    ) -> Option<(String, u64, u64)> {
        let config = &self.usages.config;
        if persistent && config.store > 0 {
            let used = self.store.store().stored_bytes();
            if used >= config.store {
                return Some(("store".into(), used, config.store));
            }
        }
        // A destination without a usage holds nothing in memory: only the broker's
        // memory can be full for it. Checking makes none (a producer sending to many
        // sleeping queues leaves nothing behind for each).
        let usage = self
            .usages
            .existing(key)
            .unwrap_or_else(|| Arc::clone(&self.usages.memory));
        if let Some(full) = usage.full() {
            return Some((full.name().to_string(), full.used(), full.limit()));
        }
        if !persistent {
            if let Some(full) = self.usages.temp.full() {
                return Some((full.name().to_string(), full.used(), full.limit()));
            }
        }
        None
    }

    /// Producer flow control without waiting: whether a send of a `persistent` (or
    /// not) message to destination `name` can go now, must wait, or fails at once
    /// (with `send_fail_if_no_space`; the text names the limit). A transport that must
    /// not block (STOMP) holds the send while this says [`Space::Wait`].
    pub fn check_space(
        &self,
        destination: impl ToDestination,
        persistent: bool,
    ) -> Result<Space, Error> {
        let key = destination.to_destination()?;
        Ok(match self.full_usage(&key, persistent) {
            None => Space::Free,
            Some((usage, used, limit))
                if self.usages.config.send_fail_if_no_space
                    && self
                        .usages
                        .config
                        .send_fail_if_no_space_after_timeout
                        .is_none() =>
            {
                Space::Fail(
                    Error::ResourceLimit {
                        usage,
                        used,
                        limit,
                        waited_ms: None,
                    }
                    .to_string(),
                )
            }
            Some(_) => Space::Wait,
        })
    }

    /// Whether `message` fits in the transactions' budget
    /// ([`UsageConfig::transactions`]) now, and, when persistent, in the store's
    /// limit. A transactional send never waits for space: errors with
    /// [`Error::ResourceLimit`] naming `store` or `transactions` when it does not fit.
    pub fn check_transaction_space(&self, message: &Message) -> Result<(), Error> {
        let config = &self.usages.config;
        if message.persistent && config.store > 0 {
            let used = self.store.store().stored_bytes();
            if used >= config.store {
                return Err(Error::ResourceLimit {
                    usage: "store".into(),
                    used,
                    limit: config.store,
                    waited_ms: None,
                });
            }
        }
        let bytes = message.charged_bytes();
        let budget = &self.usages.transactions;
        if budget.has_room_for(bytes as u64) {
            return Ok(());
        }
        Err(Error::ResourceLimit {
            usage: budget.name().to_string(),
            used: budget.used() + bytes as u64,
            limit: budget.limit(),
            waited_ms: None,
        })
    }

    /// Waits until a send of a `persistent` (or not) message to destination `name`
    /// finds space (producer flow control), or fails: at once with
    /// `send_fail_if_no_space`, after `send_fail_if_no_space_after_timeout` ms with it
    /// set, never otherwise. Errors: [`Error::ResourceLimit`] naming the limit.
    pub async fn wait_for_space(
        &self,
        destination: impl ToDestination,
        persistent: bool,
    ) -> Result<(), Error> {
        let key = destination.to_destination()?;
        let config = &self.usages.config;
        let started = std::time::Instant::now();
        let deadline = config
            .send_fail_if_no_space_after_timeout
            .map(|ms| started + Duration::from_millis(ms));
        if self.full_usage(&key, persistent).is_none() {
            // The common case: no wait, and no usage made to wait on.
            return Ok(());
        }
        let usage = self.usages.of(&key);
        loop {
            let Some((full, used, limit)) = self.full_usage(&key, persistent) else {
                return Ok(());
            };
            let refuse = |waited: bool| Error::ResourceLimit {
                usage: full.clone(),
                used,
                limit,
                waited_ms: waited.then(|| started.elapsed().as_millis() as u64),
            };
            if config.send_fail_if_no_space && deadline.is_none() {
                return Err(refuse(false));
            }
            // Memory wakes waiters on every release; the store is polled (rows go by
            // acks, expiry and cleanup, which do not notify).
            let space = async {
                if full == "store" {
                    let _counted = usage.blocked();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                } else if full == "temp" {
                    self.usages.temp.wait_for_space().await;
                } else {
                    usage.wait_for_space().await;
                }
            };
            match deadline {
                Some(at) => {
                    if tokio::time::timeout_at(at.into(), space).await.is_err() {
                        return Err(refuse(true));
                    }
                }
                None => space.await,
            }
        }
    }

    /// Housekeeping lag: how long the expiry page that has waited longest for a
    /// housekeeping permit has been waiting, and how many pages wait (zero and 0 when
    /// housekeeping keeps up).
    pub fn housekeeping_lag(&self) -> (Duration, usize) {
        (self.budget.lag(), self.budget.pages_waiting())
    }

    /// Destination `key` was deleted: its memory usage goes (a successor gets a new
    /// one), so that what the broker keeps per destination does not grow with every
    /// temporary queue ever made. Bytes still charged to it by messages in flight
    /// are given back to it and its parent when they are dropped, as before.
    pub(crate) fn forget_usage(&self, key: &DestinationKey) {
        self.usages.destinations.lock().remove(key);
    }

    /// Destination `key` sleeps: its memory usage goes too, unless something still
    /// holds it (a message charged to it, a producer waiting for its space), so that a
    /// sleeping destination keeps only its key and counters. The next send to it makes
    /// a new one (as after a deletion, [`Self::forget_usage`]); its bytes were 0.
    pub(crate) fn forget_idle_usage(&self, key: &DestinationKey) {
        let mut usages = self.usages.destinations.lock();
        if usages.get(key).is_some_and(|u| Arc::strong_count(u) == 1) {
            usages.remove(key);
            // The table shrinks with the destinations that sleep (a hash map keeps its
            // capacity otherwise).
            let len = usages.len();
            if usages.capacity() > 64 && len * 4 < usages.capacity() {
                usages.shrink_to(len * 2);
            }
        }
    }

    /// Where each destination publishes its counters ([`StatsBoard`]).
    pub(crate) fn stats_board(&self) -> &StatsBoard {
        &self.usages.board
    }

    /// The broker's memory, store and temp usage now, and producers blocked.
    pub fn usage(&self) -> UsageSnapshot {
        let u = &self.usages;
        // One read each: the trees count their producers blocked (the root's own
        // waits, as on the store limit, included).
        let blocked = u.memory.tree_blocked_producers() + u.temp.tree_blocked_producers();
        UsageSnapshot {
            memory_bytes: u.memory.used(),
            memory_limit: u.memory.limit(),
            store_bytes: self.store.store().stored_bytes(),
            store_limit: u.config.store,
            temp_bytes: u.temp.used(),
            temp_limit: u.temp.limit(),
            transactions_bytes: u.transactions.used(),
            transactions_limit: u.transactions.limit(),
            blocked_producers: blocked,
        }
    }

    /// Destination `name`'s memory and producers now.
    pub fn destination_flow(
        &self,
        destination: impl ToDestination,
    ) -> Result<DestinationFlow, Error> {
        let key = destination.to_destination()?;
        let producers = self.usages.producers.lock().get(&key).copied().unwrap_or(0);
        // Read without making one: a sleeping destination has none (and uses nothing).
        let usage = self.usages.destinations.lock().get(&key).cloned();
        Ok(match usage {
            Some(usage) => DestinationFlow {
                memory_bytes: usage.used(),
                memory_limit: usage.limit(),
                blocked_producers: usage.blocked_producers(),
                producers,
            },
            None => DestinationFlow {
                memory_bytes: 0,
                memory_limit: self.usages.policies.policy_for(&key).memory_limit,
                blocked_producers: 0,
                producers,
            },
        })
    }

    /// A producer (a transport's connection) started sending to destination `name`;
    /// counted in [`DestinationFlow::producers`] until [`Broker::producer_left`].
    pub fn producer_joined(&self, destination: impl ToDestination) {
        if let Ok(key) = destination.to_destination() {
            let count = {
                let mut producers = self.usages.producers.lock();
                let n = producers.entry(key.clone()).or_default();
                *n += 1;
                *n
            };
            self.usages.board.mark(&key);
            self.advise_producer(&key, count, true);
        }
    }

    /// The producer counted by [`Broker::producer_joined`] is gone.
    pub fn producer_left(&self, destination: impl ToDestination) {
        if let Ok(key) = destination.to_destination() {
            let count = {
                let mut producers = self.usages.producers.lock();
                let count = producers.get_mut(&key).map(|n| {
                    *n = n.saturating_sub(1);
                    *n
                });
                // The last one gone: nothing is kept for the destination.
                if count == Some(0) {
                    producers.remove(&key);
                }
                count
            };
            if let Some(count) = count {
                self.usages.board.mark(&key);
                self.advise_producer(&key, count, false);
            }
        }
    }
}

/// Memory, store and temp usage at one moment ([`Broker::usage`]); bytes, limits 0 =
/// none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct UsageSnapshot {
    /// Bytes of messages held in memory now.
    pub memory_bytes: u64,
    /// [`UsageConfig::memory`].
    pub memory_limit: u64,
    /// Bytes of messages in the store now.
    pub store_bytes: u64,
    /// [`UsageConfig::store`].
    pub store_limit: u64,
    /// Bytes of non-persistent messages held now.
    pub temp_bytes: u64,
    /// [`UsageConfig::temp`].
    pub temp_limit: u64,
    /// Bytes open transactions hold until their COMMIT now.
    pub transactions_bytes: u64,
    /// [`UsageConfig::transactions_limit`] (0 = none).
    pub transactions_limit: u64,
    /// Producers waiting in [`Broker::wait_for_space`] now.
    pub blocked_producers: u64,
}

/// One destination's memory and producers ([`Broker::destination_flow`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DestinationFlow {
    /// Bytes of messages it holds in memory now.
    pub memory_bytes: u64,
    /// Its own memory limit, bytes (0 = only the broker's applies).
    pub memory_limit: u64,
    /// Producers waiting for space in it now.
    pub blocked_producers: u64,
    /// Producers reported by transports ([`Broker::producer_joined`]).
    pub producers: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BrokerConfig, Message};

    /// Checking a destination that holds nothing in memory makes no usage and no
    /// stats entry for it (a producer sending to 100,000 sleeping queues left one
    /// behind for each until the next stats reading), and still meets the broker's
    /// memory when that is full.
    #[actix_rt::test]
    async fn a_flow_check_makes_no_usage() {
        let mut config = BrokerConfig::default();
        config.usage.memory = 1024;
        let b = Broker::start("sqlite::memory:", config).await.unwrap();
        let held = |b: &Broker| b.usages.destinations.lock().len();
        for i in 0..100 {
            let name = format!("queue://q{i}");
            assert_eq!(b.check_space(name.as_str(), true).unwrap(), Space::Free);
        }
        assert_eq!(held(&b), 0, "no usage made by a check");
        assert_eq!(b.stats_board().len(), 0, "no stats entry made by a check");
        // A non-persistent message held in memory fills it.
        b.send(
            "queue://full",
            Message::new(vec![b'x'; 2048]).persistent(false),
        )
        .await
        .unwrap();
        assert_eq!(held(&b), 1);
        assert!(b.usage().memory_bytes >= 1024, "{:?}", b.usage());
        assert_eq!(b.check_space("queue://q0", true).unwrap(), Space::Wait);
        assert_eq!(b.check_space("queue://full", true).unwrap(), Space::Wait);
        assert_eq!(held(&b), 1, "still none made for q0");
        b.shutdown().await.unwrap();
    }
}
