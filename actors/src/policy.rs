//! Destination policies, matched by pattern as ActiveMQ's `policyMap`.
//!
//! A pattern is `topic://` or `queue://` followed by a name whose `.`-separated
//! segments may be `*` (exactly one segment) or end with `>` (every remaining segment,
//! at least zero): `topic://>` matches every topic, `topic://orders.*` matches
//! `topic://orders.eu` but not `topic://orders.eu.north`. The first entry that matches
//! wins; a destination no entry matches gets [`Policy::default`].

/// Per-destination settings. Names follow ActiveMQ's `PolicyEntry` in snake_case.
#[derive(Debug, Clone, PartialEq, Eq)]
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
        }
    }
}

/// A pattern and the policy for what it matches.
#[derive(Debug, Clone)]
pub struct PolicyEntry {
    pub destination: String,
    pub policy: Policy,
}

/// The ordered list of entries.
#[derive(Debug, Clone, Default)]
pub struct PolicyMap {
    pub entries: Vec<PolicyEntry>,
}

impl PolicyMap {
    /// The policy of `destination` (e.g. `topic://orders`).
    pub fn policy_for(&self, destination: &str) -> Policy {
        self.entries
            .iter()
            .find(|e| matches(&e.destination, destination))
            .map(|e| e.policy.clone())
            .unwrap_or_default()
    }
}

/// Whether `pattern` matches `destination` (both with their `topic://`/`queue://`).
pub fn matches(pattern: &str, destination: &str) -> bool {
    let (Some((pk, pname)), Some((dk, dname))) =
        (pattern.split_once("://"), destination.split_once("://"))
    else {
        return false;
    };
    if pk != dk {
        return false;
    }
    let mut p = pname.split('.');
    let mut d = dname.split('.');
    loop {
        match (p.next(), d.next()) {
            (Some(">"), _) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_follow_activemq() {
        assert!(matches("topic://>", "topic://orders"));
        assert!(matches("topic://>", "topic://a.b.c"));
        assert!(!matches("topic://>", "queue://orders"));
        assert!(matches("topic://orders.*", "topic://orders.eu"));
        assert!(!matches("topic://orders.*", "topic://orders.eu.north"));
        assert!(!matches("topic://orders.*", "topic://orders"));
        assert!(matches("topic://orders.>", "topic://orders.eu.north"));
        assert!(matches("topic://*.eu", "topic://orders.eu"));
        assert!(matches("topic://orders", "topic://orders"));
        assert!(!matches("topic://orders", "topic://orders2"));
        assert!(!matches("orders", "topic://orders"));
    }

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
        assert_eq!(map.policy_for("topic://fast.x"), fast);
        assert_eq!(map.policy_for("topic://slow").max_expire_page_size, 5);
        assert_eq!(map.policy_for("queue://q"), Policy::default());
    }
}
