//! Destination policies, matched by pattern as ActiveMQ's `policyMap`.
//!
//! A pattern is `topic://` or `queue://` followed by a name whose `.`-separated
//! segments may be `*` (exactly one segment) or end with `>` (every remaining segment,
//! at least zero): `topic://>` matches every topic, `topic://orders.*` matches
//! `topic://orders.eu` but not `topic://orders.eu.north`. The first entry that matches
//! wins; a destination no entry matches gets [`Policy::default`]. Patterns are
//! [`DestinationPattern`]s.

use super::key::{DestinationKey, DestinationPattern};

/// Per-destination settings. Names follow ActiveMQ's `PolicyEntry` in snake_case.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// How often housekeeping looks for expired messages, ms; 0 turns it off
    /// (ActiveMQ's `expireMessagesPeriod`, default 30,000).
    pub expire_messages_period: u64,
    /// Most messages one expiry page loads (ActiveMQ's `maxExpirePageSize`, default 400).
    pub max_expire_page_size: u32,
    /// Deliver higher priorities first and keep one high-water mark per priority
    /// (ActiveMQ's `prioritizedMessages`, default off).
    pub prioritized_messages: bool,
    /// Prefetch of a durable topic subscription: messages dispatched and not yet acked
    /// (ActiveMQ's default 100).
    pub durable_prefetch: u32,
    /// Prefetch of a non-durable topic subscription (ActiveMQ's default 32,767).
    pub topic_prefetch: u32,
    /// Also expire messages of durable subscriptions that are online (ActiveMQ's
    /// `enableMessageExpirationOnActiveDurableSubs`, default off: online ones drop
    /// expired messages at dispatch instead).
    pub expire_online_durable_subscriptions: bool,
    /// Most messages waiting for a non-durable subscription beyond its prefetch; over
    /// it the oldest waiting message is discarded and counted (ActiveMQ's pending
    /// message limit for slow topic consumers).
    pub max_pending_non_durable: u32,
    /// Prefetch of a queue consumer: messages dispatched to it and not yet acked
    /// (ActiveMQ's default 1,000).
    pub queue_prefetch: u32,
    /// Most messages a queue reads from the store in one page, and half of what its
    /// in-memory cursor caches (ActiveMQ's `maxPageSize`, default 200).
    pub max_page_size: u32,
    /// Most messages one page of a queue browse, or of a selector's scan of a queue's
    /// store beyond its cursor, reads (ActiveMQ's `maxBrowsePageSize`, default 400).
    pub max_browse_page_size: u32,
    /// Deliveries a queue message may fail (NACK, or its consumer closing without an
    /// ack) before it goes to the dead-letter queue (ActiveMQ's redelivery policy
    /// `maximumRedeliveries`, default 6).
    pub maximum_redeliveries: u32,
    /// How long a queue message waits after its first failed delivery before it is
    /// delivered again, ms; 0 = at once (ActiveMQ's broker-side redelivery policy
    /// `initialRedeliveryDelay`; Ebb's default 0 keeps redelivery immediate). A
    /// waiting message is held in the store by the scheduler (a persistent one) or in
    /// memory (a non-persistent one) while the messages behind it flow.
    pub initial_redelivery_delay: u64,
    /// The wait after each later failed delivery, ms (ActiveMQ's `redeliveryDelay`;
    /// defaults to `initial_redelivery_delay`).
    pub redelivery_delay: u64,
    /// Each wait is the one before times `backoff_multiplier` (ActiveMQ's
    /// `useExponentialBackOff`, default off).
    pub use_exponential_backoff: bool,
    /// The growth of each wait with `use_exponential_backoff` (ActiveMQ's
    /// `backOffMultiplier`, default 5; at least 1).
    pub backoff_multiplier: f64,
    /// The longest wait, ms; 0 = no maximum (ActiveMQ's `maximumRedeliveryDelay`,
    /// whose -1 is this 0).
    pub maximum_redelivery_delay: u64,
    /// Where a queue's dead messages go: `None` = one dead-letter queue per queue,
    /// `DLQ.<queue>` (ActiveMQ's `individualDeadLetterStrategy` with its `DLQ.` prefix);
    /// `Some(name)` = the shared queue `name` (as ActiveMQ's `ActiveMQ.DLQ`).
    pub dead_letter_queue: Option<String>,
    /// Send expired queue messages to the dead-letter queue instead of dropping them
    /// (default off: a DLQ without expiry would keep them forever; ActiveMQ's
    /// `processExpired`).
    pub dead_letter_expired: bool,
    /// Bytes of message bodies this destination may hold in memory (pending, in
    /// flight, in cursors); when reached, producers to it wait (producer flow control).
    /// 0 = only the broker-wide memory limit applies (ActiveMQ's `memoryLimit`). A
    /// queue with a limit of its own caches what is sent to it also while nobody
    /// consumes, so that its producers are held once it is full; without one, a queue
    /// with no consumer leaves persistent messages in the store (they cost no memory).
    pub memory_limit: u64,
    /// Percent of the broker's memory limit above which the destination's cursors
    /// stop caching stored messages and leave them in the store,
    /// to be read back in pages (ActiveMQ's `cursorMemoryHighWaterMark`, default 70).
    /// So a backlog without consumers costs store, not memory, and never makes the
    /// producers of other destinations wait: what is cached stays below this share,
    /// and only non-persistent messages and messages in flight use the rest. 1–100.
    pub cursor_memory_high_water_mark: u8,
    /// How long a queue or topic stays idle before its actor stops and it sleeps, ms;
    /// 0 = it never sleeps. Idle: no consumer (a topic's durable subscriptions all
    /// offline), nothing held in memory but a cache of stored messages (no
    /// non-persistent message, no delivery, no open transaction, no write in flight),
    /// no expiry run under way. Asleep it keeps only its key and counters (a few
    /// hundred bytes); a persistent send to a sleeping queue is written without waking it
    /// ([`crate::broker::PublishAsleep`]); another send, a subscription, browse, purge,
    /// move, dead letter or scheduled release wakes it, with nothing lost or reordered,
    /// and so does its
    /// earliest stored expiration (at most once per `expire_messages_period`; see
    /// [`crate::destination::sleep`]). It falls asleep between one and two timeouts after the last
    /// thing that happened to it. After ActiveMQ's `inactiveTimeoutBeforeGC` (default
    /// 60,000), which deletes an inactive destination; Ebb keeps it and its messages.
    pub inactive_timeout_before_sleep: u64,
}

impl Policy {
    /// The dead-letter queue (its name, without `queue://`) of queue `name`.
    pub fn dead_letter_queue_for(&self, name: &str) -> String {
        match &self.dead_letter_queue {
            Some(shared) => shared.clone(),
            None => format!("DLQ.{name}"),
        }
    }

    /// How long (ms) a queue message waits before it is delivered again after its
    /// `failed`-th failed delivery (1 for the first): `initial_redelivery_delay` after
    /// the first, then `redelivery_delay`, or with `use_exponential_backoff` the wait
    /// before times `backoff_multiplier`, at most `maximum_redelivery_delay` (but
    /// never below `redelivery_delay`), as ActiveMQ's
    /// `RedeliveryPolicy.getNextRedeliveryDelay`. 0 = at once.
    pub fn redelivery_delay_after(&self, failed: u32) -> u64 {
        if failed <= 1 {
            return self.initial_redelivery_delay;
        }
        let grows = self.use_exponential_backoff && self.backoff_multiplier > 1.0;
        if !grows {
            return self.redelivery_delay;
        }
        // The first wait that is not 0 grows from there on (a wait of 0 does not grow:
        // the next is `redelivery_delay`, as ActiveMQ's).
        let (base, steps) = if self.initial_redelivery_delay > 0 {
            (self.initial_redelivery_delay, failed - 1)
        } else {
            (self.redelivery_delay, failed - 2)
        };
        let grown = base as f64
            * self
                .backoff_multiplier
                .powi(steps.min(i32::MAX as u32) as i32);
        let grown = if grown.is_finite() && grown < u64::MAX as f64 {
            grown as u64
        } else {
            u64::MAX
        };
        match self.maximum_redelivery_delay {
            0 => grown,
            max if grown > max => max.max(self.redelivery_delay),
            _ => grown,
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            expire_messages_period: 30_000,
            max_expire_page_size: 400,
            prioritized_messages: false,
            durable_prefetch: 100,
            topic_prefetch: 32_767,
            expire_online_durable_subscriptions: false,
            max_pending_non_durable: 10_000,
            queue_prefetch: 1_000,
            max_page_size: 200,
            max_browse_page_size: 400,
            maximum_redeliveries: 6,
            initial_redelivery_delay: 0,
            redelivery_delay: 0,
            use_exponential_backoff: false,
            backoff_multiplier: 5.0,
            maximum_redelivery_delay: 0,
            dead_letter_queue: None,
            dead_letter_expired: false,
            memory_limit: 0,
            cursor_memory_high_water_mark: 70,
            inactive_timeout_before_sleep: 60_000,
        }
    }
}

/// A pattern and the policy for what it matches.
#[derive(Debug, Clone)]
pub struct PolicyEntry {
    /// A [`DestinationPattern`], e.g. `queue://jobs.>`.
    pub destination: String,
    pub policy: Policy,
}

/// The ordered list of entries.
#[derive(Debug, Clone, Default)]
pub struct PolicyMap {
    pub entries: Vec<PolicyEntry>,
}

impl PolicyMap {
    /// Checks every entry before a broker takes the map: its destination is a pattern
    /// ([`DestinationPattern::parse`]), and it asks nothing its kind cannot do: with
    /// `prioritized_messages`, a pattern of a point-to-point kind (a queue, a
    /// last-value queue, a temporary queue) is refused, since a queue dispatches in
    /// arrival order (ActiveMQ's `prioritizedMessages` on queues, and Artemis's
    /// default, are not offered yet; topics keep a mark per priority). A setting a
    /// destination would ignore is refused, never accepted.
    ///
    /// Errors: the first entry that breaks a rule, as text naming its pattern.
    pub fn check(&self) -> Result<(), String> {
        for entry in &self.entries {
            let pattern = DestinationPattern::parse(&entry.destination)
                .map_err(|e| format!("[[policy]] destination `{}`: {}", e.name, e.reason))?;
            if entry.policy.prioritized_messages && pattern.kind().capabilities().point_to_point {
                return Err(format!(
                    "[[policy]] destination `{}`: prioritized_messages is offered on topics only (a queue delivers in arrival order); remove it from this entry",
                    entry.destination
                ));
            }
        }
        Ok(())
    }

    /// The policy of destination `key`: the first entry whose pattern matches it (an
    /// entry whose pattern does not parse matches nothing), or the default.
    pub fn policy_for(&self, key: &DestinationKey) -> Policy {
        self.entries
            .iter()
            .find(|e| DestinationPattern::parse(&e.destination).is_ok_and(|p| p.matches(key)))
            .map(|e| e.policy.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_matching_entry_wins() {
        let fast = Policy {
            expire_messages_period: 100,
            ..Policy::default()
        };
        let map = PolicyMap {
            entries: vec![
                PolicyEntry {
                    destination: "topic://fast.>".into(),
                    policy: fast.clone(),
                },
                PolicyEntry {
                    destination: "topic://>".into(),
                    policy: Policy {
                        max_expire_page_size: 5,
                        ..Policy::default()
                    },
                },
            ],
        };
        let key = |k| DestinationKey::from_container(k).unwrap();
        assert_eq!(map.policy_for(&key("topic://fast.x")), fast);
        assert_eq!(map.policy_for(&key("topic://slow")).max_expire_page_size, 5);
        assert_eq!(map.policy_for(&key("queue://q")), Policy::default());
    }

    #[test]
    fn redelivery_waits_grow_by_the_multiplier_up_to_the_maximum() {
        let mut p = Policy::default();
        assert_eq!(p.redelivery_delay_after(1), 0, "at once by default");
        p.initial_redelivery_delay = 100;
        p.redelivery_delay = 250;
        assert_eq!(
            (1..=4)
                .map(|n| p.redelivery_delay_after(n))
                .collect::<Vec<_>>(),
            [100, 250, 250, 250]
        );
        p.use_exponential_backoff = true;
        p.backoff_multiplier = 2.0;
        p.maximum_redelivery_delay = 1_000;
        assert_eq!(
            (1..=6)
                .map(|n| p.redelivery_delay_after(n))
                .collect::<Vec<_>>(),
            [100, 200, 400, 800, 1_000, 1_000]
        );
        p.maximum_redelivery_delay = 0;
        assert_eq!(
            p.redelivery_delay_after(100),
            u64::MAX,
            "no maximum: saturates"
        );
        // A first wait of 0 does not grow: the next is redelivery_delay, then it grows.
        p.initial_redelivery_delay = 0;
        assert_eq!(
            (1..=4)
                .map(|n| p.redelivery_delay_after(n))
                .collect::<Vec<_>>(),
            [0, 250, 500, 1_000]
        );
    }
}
