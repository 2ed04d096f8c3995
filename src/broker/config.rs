//! How a broker is set up: [`BrokerConfig`] and its usage limits, [`UsageConfig`].

use ebb_actors::policy::PolicyMap;
use ebb_actors::StoreActorConfig;
use ebb_store::StoreOptions;

/// How a broker is set up. `Default` gives ActiveMQ's defaults.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Table prefix, PostgreSQL schema, pool size, SQLite durability.
    pub store: StoreOptions,
    /// Per-destination settings by pattern (`expire_messages_period`,
    /// `max_expire_page_size`, prefetch, ...).
    pub policies: PolicyMap,
    /// Expiry pages that may run at once over all destinations (default: one per core).
    pub housekeeping_permits: usize,
    /// Group-commit batch and the bound on outstanding store writes.
    pub store_actor: StoreActorConfig,
    /// Memory, store and temp limits and what a producer meets at them.
    pub usage: UsageConfig,
    /// Virtual topics and configured composite destinations.
    pub routing: super::RoutingConfig,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            store: StoreOptions::default(),
            policies: PolicyMap::default(),
            housekeeping_permits: std::thread::available_parallelism().map_or(1, |n| n.get()),
            store_actor: StoreActorConfig::default(),
            usage: UsageConfig::default(),
            routing: super::RoutingConfig::default(),
        }
    }
}

/// System usage limits, as ActiveMQ's `systemUsage`, and producer flow control. All
/// limits in bytes; 0 = no limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageConfig {
    /// Bytes of messages the broker holds in memory (waiting in cursors, in flight to
    /// consumers, in consumers' channels), each message counted once. Default 64 MiB
    /// (ActiveMQ's example configuration).
    pub memory: u64,
    /// Bytes of message bodies in the store. Default 100 GiB (ActiveMQ's default).
    pub store: u64,
    /// Bytes of non-persistent messages held (they exist only in memory, so they count
    /// in `memory` too). Default 0: only `memory` bounds them.
    pub temp: u64,
    /// Fail a send at once with [`Error::ResourceLimit`] instead of waiting for space
    /// (ActiveMQ's `sendFailIfNoSpace`, default off: producers wait).
    pub send_fail_if_no_space: bool,
    /// Wait at most this long (ms) for space, then fail (ActiveMQ's
    /// `sendFailIfNoSpaceAfterTimeout`). `None`: wait as long as it takes.
    pub send_fail_if_no_space_after_timeout: Option<u64>,
    /// Bytes of messages all open transactions hold until their COMMIT (bodies and
    /// headers), apart from `memory`: an open transaction never makes another
    /// producer wait, nor waits for space its own COMMIT would free (at COMMIT its
    /// messages move to their destinations' memory, whatever it holds). A
    /// transactional send beyond it is refused at once with [`Error::ResourceLimit`]
    /// naming `transactions`, never held. `None`: half of `memory` (32 MiB by
    /// default); `Some(0)`: no limit.
    pub transactions: Option<u64>,
    /// Durable subscriptions one client id may have (over every topic; each keeps a
    /// backlog in the store while offline): creating one more is refused with
    /// [`Error::TooManyDurableSubscriptions`]. Default 1,000; 0 = no limit.
    pub max_durable_subscriptions_per_client: u32,
    /// Temporary destinations alive at once in the whole broker, over every connection
    /// and user (each costs a few tens of KB of memory while it lives, messages
    /// apart): making one more is refused with
    /// [`crate::Error::TooManyTemporaryDestinations`] until one ends. A bound in the manner of ActiveMQ's `maxDestinations`. Default
    /// 10,000 (one per connection at the default `max_connections`); 0 = no limit.
    pub max_temporary_destinations: u32,
    /// Temporary destinations one user (login) may have alive at once, over all its
    /// connections: making one more is refused with
    /// [`crate::Error::TooManyTemporaryDestinations`] until one of them ends. Connections
    /// without a login (a broker without users) and the embedding API's
    /// [`crate::TemporaryQueue`]s count toward the broker's and their connection's
    /// limits only. Default 1,000; 0 = no limit.
    pub max_temporary_destinations_per_user: u32,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            memory: 64 << 20,
            store: 100 << 30,
            temp: 0,
            send_fail_if_no_space: false,
            send_fail_if_no_space_after_timeout: None,
            transactions: None,
            max_durable_subscriptions_per_client: 1_000,
            max_temporary_destinations: 10_000,
            max_temporary_destinations_per_user: 1_000,
        }
    }
}

impl UsageConfig {
    /// The transactions' budget in bytes (0 = none): [`Self::transactions`], or half of
    /// `memory`.
    pub fn transactions_limit(&self) -> u64 {
        self.transactions.unwrap_or(self.memory / 2)
    }
}
