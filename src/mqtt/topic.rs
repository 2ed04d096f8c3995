//! MQTT topic names and filters as Ebb's destinations, as ActiveMQ's MQTT transport
//! maps them: a level separator `/` is Ebb's `.`, and a `.` in an MQTT topic is
//! Ebb's `/` (the two swap, so every MQTT name has exactly one destination and back);
//! the wildcards `+` (one level) and `#` (the rest) are Ebb's `*` and `>`. `a/b/c` is
//! `topic://a.b.c`, which a STOMP client sends to as `/topic/a.b.c`. A level that is
//! `>` or `*` (plain text to MQTT, a wildcard to Ebb) is escaped with a `+` in front,
//! which no MQTT topic name has: `a/>` is `topic://a.+>` and back.
//!
//! Ebb's names are stricter than MQTT's: an empty level (`a//b`, `/a`) is refused in a
//! filter with a wildcard (an Ebb pattern has no empty segment), a name over 200
//! bytes, a `,` (Ebb's composite convention) or a control character is refused, each
//! with its reason. `a/#` matches `a/b` and deeper, not `a` itself (Ebb's `>` needs a
//! segment; MQTT's `#` also matches the parent): subscribe to both for both.
//!
//! A filter reads fewer topics than its pattern matches ([`reads`]): one that starts
//! with a wildcard does not read topics whose name starts with `$` (MQTT-4.7.2-1), and
//! only one that names Ebb's advisory prefix literally reads the advisory topics.

use crate::broker::Target;
use crate::DestinationKey;

/// Why a topic name or filter has no destination.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} `{text}` is not valid: {reason}")]
pub struct TopicError {
    /// "topic name" or "topic filter".
    pub what: &'static str,
    /// The text as the client sent it (at most 64 characters of it).
    pub text: String,
    /// Why.
    pub reason: String,
}

fn refuse(what: &'static str, text: &str, reason: impl Into<String>) -> TopicError {
    TopicError {
        what,
        text: text.chars().take(64).collect(),
        reason: reason.into(),
    }
}

/// `text` with `/` and `.` swapped.
fn swap_separators(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '/' => '.',
            '.' => '/',
            c => c,
        })
        .collect()
}

/// What marks an escaped level: no MQTT topic name has a `+`, so no other level
/// maps to a segment that starts with one.
const ESCAPE: char = '+';

/// Ebb's name for MQTT topic text: `/` and `.` swapped, and a level that is one of
/// Ebb's wildcards (`>`, `*`) escaped (`+>`, `+*`), so that it names a destination.
fn swap(text: &str) -> String {
    if !text.contains(['>', '*']) {
        return swap_separators(text);
    }
    text.split('/')
        .map(|level| match level {
            ">" | "*" => format!("{ESCAPE}{level}"),
            level => swap_separators(level),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The MQTT topic text of Ebb name `name`: [`swap`] undone.
fn unswap(name: &str) -> String {
    if !name.contains(ESCAPE) {
        return swap_separators(name);
    }
    name.split('.')
        .map(|segment| match segment.strip_prefix(ESCAPE) {
            Some(level @ (">" | "*")) => level.to_string(),
            _ => swap_separators(segment),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The destination of MQTT topic name `name` (a PUBLISH's): `a/b` is `topic://a.b`.
///
/// Errors: an empty name, a wildcard (`+`, `#`: a name has none), a NUL, or what
/// Ebb refuses in a name ([`DestinationKey::parse`]'s reasons).
pub fn destination(name: &str) -> Result<DestinationKey, TopicError> {
    const WHAT: &str = "topic name";
    if name.is_empty() {
        return Err(refuse(WHAT, name, "empty"));
    }
    if name.contains(['+', '#']) {
        return Err(refuse(
            WHAT,
            name,
            "a topic name has no wildcard (`+`, `#`)",
        ));
    }
    if name.contains('\0') {
        return Err(refuse(WHAT, name, "a topic name has no NUL character"));
    }
    DestinationKey::parse(&format!("topic://{}", swap(name)))
        .map_err(|e| refuse(WHAT, name, e.reason))
}

/// The MQTT topic name of `key` (a delivery's): `topic://a.b` is `a/b`,
/// `topic://a.+>` is `a/>`; a queue's messages (a STOMP client's `/queue/x`) keep
/// their name the same way.
pub fn topic_name(key: &DestinationKey) -> String {
    unswap(key.name())
}

/// What MQTT topic filter `filter` (a SUBSCRIBE's) reads: one topic, or an Ebb
/// pattern for one with wildcards (`a/+/c` is `topic://a.*.c`, `a/#` is
/// `topic://a.>`, `#` is every topic).
///
/// Errors: an empty filter, a `+` or `#` that is not a whole level, a `#` that is not
/// the last level, an empty level beside a wildcard, `$share/` (a shared
/// subscription, named by [`shared`]), or what Ebb refuses in a name.
pub fn filter(filter: &str) -> Result<Target, TopicError> {
    const WHAT: &str = "topic filter";
    if filter.is_empty() {
        return Err(refuse(WHAT, filter, "empty"));
    }
    if filter.contains('\0') {
        return Err(refuse(WHAT, filter, "a topic filter has no NUL character"));
    }
    let levels: Vec<&str> = filter.split('/').collect();
    let mut wild = false;
    for (i, level) in levels.iter().enumerate() {
        match *level {
            "#" if i + 1 != levels.len() => {
                return Err(refuse(WHAT, filter, "`#` must be the last level"))
            }
            "#" | "+" => wild = true,
            l if l.contains(['+', '#']) => {
                return Err(refuse(
                    WHAT,
                    filter,
                    "`+` and `#` stand for whole levels (`a/+/c`, `a/#`)",
                ))
            }
            _ => {}
        }
    }
    if !wild {
        return destination(filter)
            .map(Target::One)
            .map_err(|e| refuse(WHAT, filter, e.reason));
    }
    if levels.iter().any(|l| l.is_empty()) {
        return Err(refuse(
            WHAT,
            filter,
            "a filter with a wildcard has no empty level here (Ebb's patterns have no empty segment)",
        ));
    }
    let pattern: Vec<String> = levels
        .iter()
        .map(|l| match *l {
            "+" => "*".to_string(),
            "#" => ">".to_string(),
            l => swap(l),
        })
        .collect();
    crate::DestinationPattern::parse(&format!("topic://{}", pattern.join(".")))
        .map(Target::Pattern)
        .map_err(|e| refuse(WHAT, filter, e.reason))
}

/// Whether MQTT filter `filter` (a subscription's, or the FILTER of
/// `$share/GROUP/FILTER`) reads topic `key`, which its Ebb pattern matches. MQTT's
/// rules narrow the pattern twice:
///
/// - a filter whose first level is a wildcard (`#`, `+/...`) does not read a topic
///   whose name starts with `$` (`$SYS/...`; MQTT-4.7.2-1): `$SYS/#` does;
/// - Ebb's advisory topics (`ActiveMQ/Advisory/...`, [`crate::broker::ADVISORY_PREFIX`])
///   are read only by a filter whose first two levels name them, `ActiveMQ/Advisory`
///   (`ActiveMQ/Advisory/#`, `ActiveMQ/Advisory/Consumer/+/orders`): the broker's own
///   messages reach no MQTT subscriber that did not ask for them by name, as the
///   `$` topics a broker writes reach none.
pub fn reads(filter: &str, key: &DestinationKey) -> bool {
    let mut levels = filter.split('/');
    let first = levels.next().unwrap_or_default();
    // The swap of `/` and `.` keeps a first `$` where it is.
    if key.name().starts_with('$') && matches!(first, "#" | "+") {
        return false;
    }
    if crate::broker::is_advisory(key) {
        return first == "ActiveMQ" && levels.next() == Some("Advisory");
    }
    true
}

/// A `$share/GROUP/FILTER` shared subscription's group and filter, or `None` for
/// any other filter. Errors: a `$share/` filter without a group or a filter.
pub fn shared(filter: &str) -> Result<Option<(&str, &str)>, TopicError> {
    let Some(rest) = filter.strip_prefix("$share/") else {
        return Ok(None);
    };
    match rest.split_once('/') {
        Some((group, f)) if !group.is_empty() && !f.is_empty() && !group.contains(['+', '#']) => {
            Ok(Some((group, f)))
        }
        _ => Err(refuse(
            "topic filter",
            filter,
            "a shared subscription is `$share/GROUP/FILTER`",
        )),
    }
}

/// The queue shared subscription `$share/GROUP/FILTER` (as [`shared`] splits it)
/// consumes from: `queue://$share.GROUP.FILTER` with `/` and `.` swapped and a
/// level `>` or `*` escaped as in a topic, the wildcards kept as MQTT writes them
/// (`$share/g/a/+/c` is `/queue/$share.g.a.+.c`), so every group of every filter has
/// its own queue and an operator reads which in the admin API.
///
/// Errors: what Ebb refuses in a name (over 200 bytes, a `,`).
pub fn shared_queue(group: &str, filter: &str) -> Result<DestinationKey, TopicError> {
    let name = format!("$share.{}.{}", swap(group), swap(filter));
    DestinationKey::queue(&name).map_err(|e| refuse("topic filter", filter, e.reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_map_to_topics_and_back() {
        let key = destination("sensors/room-1/temp").unwrap();
        assert_eq!(key.stomp(), "/topic/sensors.room-1.temp");
        assert_eq!(topic_name(&key), "sensors/room-1/temp");
        let dotted = destination("v1.2/x").unwrap();
        assert_eq!(dotted.stomp(), "/topic/v1/2.x");
        assert_eq!(topic_name(&dotted), "v1.2/x");
        // Ebb's wildcards as levels are escaped; inside a level they are plain.
        for (name, stomp) in [
            ("a/>", "/topic/a.+>"),
            ("*/b", "/topic/+*.b"),
            ("a>/b*", "/topic/a>.b*"),
        ] {
            let key = destination(name).unwrap();
            assert_eq!(key.stomp(), stomp);
            assert_eq!(topic_name(&key), name);
        }
        assert_eq!(filter("a/>").unwrap().stomp(), "/topic/a.+>");
        assert_eq!(filter("+/*/#").unwrap().stomp(), "/topic/*.+*.>");
    }

    #[test]
    fn filters_map_to_patterns() {
        assert_eq!(filter("a/+/c").unwrap().stomp(), "/topic/a.*.c");
        assert_eq!(filter("a/#").unwrap().stomp(), "/topic/a.>");
        assert_eq!(filter("#").unwrap().stomp(), "/topic/>");
        assert_eq!(filter("a/b").unwrap().stomp(), "/topic/a.b");
        assert!(matches!(filter("a/b").unwrap(), Target::One(_)));
    }

    #[test]
    fn bad_names_and_filters_say_why() {
        for (bad, why) in [
            ("", "empty"),
            ("a/+", "wildcard"),
            ("a,b", "comma"),
            ("a\0b", "NUL"),
        ] {
            let e = destination(bad).unwrap_err();
            assert!(!e.reason.is_empty(), "{bad}: {why}");
        }
        assert!(destination(&"x".repeat(201)).is_err());
        for bad in ["a/#/b", "a/b#", "a+/b", "", "a//+", "/+"] {
            let e = filter(bad).unwrap_err();
            assert_eq!(e.what, "topic filter", "{bad}");
        }
    }

    #[test]
    fn wildcards_read_no_dollar_topic_and_no_advisory() {
        let key = |name: &str| destination(name).unwrap();
        let advisory = DestinationKey::topic("ActiveMQ.Advisory.Consumer.Topic.a").unwrap();
        for (filter, topic, read) in [
            ("#", key("$SYS/x"), false),
            ("+/x", key("$SYS/x"), false),
            ("+/+", key("$SYS/x"), false),
            ("$SYS/#", key("$SYS/x"), true),
            ("$SYS/+", key("$SYS/x"), true),
            ("a/#", key("a/$x"), true),
            ("#", key("a/b"), true),
            ("#", advisory.clone(), false),
            ("ActiveMQ/#", advisory.clone(), false),
            ("+/Advisory/#", advisory.clone(), false),
            ("ActiveMQ/Advisory/#", advisory.clone(), true),
            ("ActiveMQ/Advisory/Consumer/+/a", advisory.clone(), true),
            ("ActiveMQ/+/x", key("ActiveMQ/Other/x"), true),
        ] {
            assert_eq!(reads(filter, &topic), read, "{filter} on {}", topic.stomp());
        }
    }

    /// A STOMP shared subscription names the same queue as MQTT's `$share` of the
    /// same group and filter, so members of both protocols share its messages.
    #[test]
    fn stomp_and_mqtt_shares_name_one_queue() {
        use crate::broker::shared_subscription_queue;
        for (group, filter, stomp) in [
            ("g", "jobs/eu", "/topic/jobs.eu"),
            ("g.1", "a/+/c", "/topic/a.*.c"),
            ("w", "a/#", "/topic/a.>"),
        ] {
            use crate::broker::Target;
            use crate::DestinationPattern;
            let target = match DestinationPattern::subscription_from_stomp(stomp).unwrap() {
                Some(p) => Target::Pattern(p),
                None => Target::One(DestinationKey::parse(stomp).unwrap()),
            };
            assert_eq!(
                shared_subscription_queue(group, &target).unwrap(),
                shared_queue(group, filter).unwrap(),
                "{group} {filter}"
            );
        }
        let topic = crate::broker::Target::One(DestinationKey::parse("/topic/a").unwrap());
        for bad in ["", "a/b", "a,b", "a*", "a>", "a+", "a#"] {
            assert!(shared_subscription_queue(bad, &topic).is_err(), "{bad}");
        }
        let plus = crate::broker::Target::One(DestinationKey::parse("/topic/a.+").unwrap());
        assert!(
            shared_subscription_queue("g", &plus).is_err(),
            "a.+ is a.*'s queue"
        );
    }

    #[test]
    fn shared_subscriptions_are_named() {
        assert_eq!(shared("$share/g/a/b").unwrap(), Some(("g", "a/b")));
        assert_eq!(shared("a/b").unwrap(), None);
        assert!(shared("$share/g").is_err());
        assert!(shared("$share//a").is_err());
        assert_eq!(
            shared_queue("g.1", "a/+/c.d").unwrap().stomp(),
            "/queue/$share.g/1.a.+.c/d"
        );
        assert_eq!(shared_queue("g", "#").unwrap().stomp(), "/queue/$share.g.#");
        assert_eq!(
            shared_queue(">", "a/*").unwrap().stomp(),
            "/queue/$share.+>.a.+*"
        );
        assert!(shared_queue("g", "a,b").is_err());
    }

    proptest! {
        /// Any text is a destination or refused with a reason, never a panic; a
        /// destination maps back to the same text.
        #[test]
        fn any_name_maps_back_or_is_refused(name in "[a-z/.+#,>*\\-]{0,12}") {
            match destination(&name) {
                Ok(key) => prop_assert_eq!(topic_name(&key), name.clone()),
                Err(e) => prop_assert!(!e.reason.is_empty()),
            }
            let _ = filter(&name);
        }
    }
}
