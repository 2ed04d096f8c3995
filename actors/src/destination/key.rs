//! [`DestinationKey`]: what names a destination everywhere inside Ebb.
//!
//! A destination is named once, at the edge (a STOMP frame, the configuration, the
//! embedding API), and carried as a key from there on: its kind and its plain name.
//! Its text forms are made here and nowhere else:
//!
//! | form | example | used by |
//! |---|---|---|
//! | store key ([`DestinationKey::container`]) | `queue://jobs` | the store's `container` column, policies, metrics labels |
//! | STOMP ([`DestinationKey::stomp`]) | `/queue/jobs` | STOMP's `destination` header, ActiveMQ's convention |
//! | plain name ([`DestinationKey::name`]) | `jobs` | dead-letter queue names (`DLQ.jobs`) |

use std::fmt;
use std::sync::LazyLock;

use thiserror::Error;

use crate::kinds::{self, Capabilities, KindSpec, KINDS};

/// Why a name without its kind is refused ([`DestinationKey::parse`]): every kind of
/// the table with its two forms ("a destination names its kind: queue://NAME or
/// /queue/NAME for a queue, topic://NAME or /topic/NAME for a topic").
pub static NO_KIND: LazyLock<String> = LazyLock::new(|| {
    let forms: Vec<String> = KINDS
        .iter()
        .map(|k| {
            format!(
                "{}://NAME or {}NAME for a {}",
                k.name, k.stomp_prefix, k.name
            )
        })
        .collect();
    format!("a destination names its kind: {}", forms.join(", "))
});

/// The schemes of every kind, joined with "or" (`queue:// or topic://`), for
/// refusal texts.
static SCHEMES: LazyLock<String> = LazyLock::new(|| {
    let schemes: Vec<String> = KINDS.iter().map(|k| format!("{}://", k.name)).collect();
    schemes.join(" or ")
});

/// A name with a scheme of its own or control characters.
static NOT_PLAIN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "give the plain name after {}, without another scheme or control characters",
        *SCHEMES
    )
});

/// Why a text is not a store key.
static STORE_KEY: LazyLock<String> =
    LazyLock::new(|| format!("a store key starts with {}", *SCHEMES));

/// Why a text is not a destination pattern.
static PATTERN_KEY: LazyLock<String> =
    LazyLock::new(|| format!("a destination pattern starts with {}", *SCHEMES));

/// Why a name with a comma is refused: the comma separates a composite's
/// destinations ([`DestinationKey::parse_composite`]).
pub const COMPOSITE_ONLY: &str = "`,` separates the destinations of a composite send (`/queue/a,/topic/b`): a destination's name cannot hold one, and a subscription names one destination";

/// Most destinations in one composite destination ([`DestinationKey::parse_composite`]).
pub const MAX_COMPOSITE: usize = 64;

/// The longest destination name, bytes (the store's `container` column holds the
/// name and its `queue://` / `topic://` prefix).
pub const MAX_NAME_BYTES: usize = 200;

/// A kind of destination: a row of the kind table ([`crate::kinds::KINDS`]), e.g.
/// [`DestinationKind::QUEUE`]. Compared, hashed and ordered by name (so keys sort as
/// their store keys); serialized as its name (`"queue"`). Ask what it can do with
/// [`DestinationKind::capabilities`] rather than which one it is.
#[derive(Clone, Copy)]
pub struct DestinationKind(&'static KindSpec);

impl DestinationKind {
    /// Queues ([`crate::kinds::QUEUE`]).
    pub const QUEUE: Self = Self(&kinds::QUEUE);
    /// Temporary queues ([`crate::kinds::TEMP_QUEUE`]).
    pub const TEMP_QUEUE: Self = Self(&kinds::TEMP_QUEUE);
    /// Temporary topics ([`crate::kinds::TEMP_TOPIC`]).
    pub const TEMP_TOPIC: Self = Self(&kinds::TEMP_TOPIC);
    /// Topics ([`crate::kinds::TOPIC`]).
    pub const TOPIC: Self = Self(&kinds::TOPIC);
    /// The name before the kind table; use [`Self::QUEUE`].
    #[deprecated(note = "use DestinationKind::QUEUE, or ask the kind what it can do")]
    #[allow(non_upper_case_globals)]
    pub const Queue: Self = Self::QUEUE;
    /// The name before the kind table; use [`Self::TOPIC`].
    #[deprecated(note = "use DestinationKind::TOPIC, or ask the kind what it can do")]
    #[allow(non_upper_case_globals)]
    pub const Topic: Self = Self::TOPIC;

    /// Every kind of the table, in its order.
    pub fn all() -> impl Iterator<Item = Self> {
        KINDS.iter().map(|spec| Self(spec))
    }

    /// The kind named `name` (`"queue"`), if the table has one.
    pub fn by_name(name: &str) -> Option<Self> {
        kinds::by_name(name).map(Self)
    }

    /// Its row of the table.
    pub fn spec(self) -> &'static KindSpec {
        self.0
    }

    /// What it can do.
    pub fn capabilities(self) -> Capabilities {
        self.0.capabilities
    }

    /// Its name (`"queue"`): the scheme of the store key.
    pub fn as_str(self) -> &'static str {
        self.0.name
    }

    /// The kind a store key names (`topic://...`, `queue://...`); `None` for others.
    pub fn of_container(container: &str) -> Option<Self> {
        DestinationKey::split_container(container).map(|(kind, _)| kind)
    }
}

impl PartialEq for DestinationKind {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for DestinationKind {}

impl std::hash::Hash for DestinationKind {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name.hash(state)
    }
}

impl PartialOrd for DestinationKind {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for DestinationKind {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.name.cmp(other.0.name)
    }
}

impl fmt::Debug for DestinationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl fmt::Display for DestinationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for DestinationKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.name)
    }
}

impl<'de> serde::Deserialize<'de> for DestinationKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Self::by_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("no destination kind `{name}`")))
    }
}

/// Why a text cannot name a destination. Its `Display` is the text a client sees.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid destination `{name}`: {reason}")]
pub struct InvalidDestination {
    /// The text as given.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// One destination: its kind and its plain name (`jobs`, never `queue://jobs`).
///
/// Ordered as their store keys are (`queue://…` before `topic://…`, then by name).
/// Made only by
/// the constructors below, so a key always holds a valid name: not empty, at most
/// [`MAX_NAME_BYTES`], no control characters, no scheme, no wildcard segment (`*`,
/// `>`: those name patterns, see the policy map).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DestinationKey {
    kind: DestinationKind,
    /// Shared by every clone: the registry, the stats board, the memory usages and the
    /// readings each keep a key per destination, one name between them.
    name: std::sync::Arc<str>,
}

impl DestinationKey {
    /// A key of `kind` for the plain `name`, or why the name cannot be one.
    pub fn new(kind: DestinationKind, name: &str) -> Result<Self, InvalidDestination> {
        let invalid = |reason| InvalidDestination {
            name: name.to_string(),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("empty"));
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(invalid("longer than 200 bytes"));
        }
        if name.contains("://") || name.chars().any(|c| c.is_control()) {
            return Err(invalid(NOT_PLAIN.as_str()));
        }
        if name.split('.').any(|s| s == "*" || s == ">") {
            return Err(invalid(
                "wildcards `*` and `>` name patterns, not a destination",
            ));
        }
        if name.contains(',') {
            return Err(invalid(COMPOSITE_ONLY));
        }
        Ok(Self {
            kind,
            name: name.into(),
        })
    }

    /// A composite destination, ActiveMQ's comma convention: `/queue/a,/topic/b,c`
    /// names several destinations, each in [`DestinationKey::parse`]'s forms; one
    /// without its kind (`c`) has the kind of the one before it (as ActiveMQ, where
    /// `queue://` or `topic://` switches the kind for one element). A text without a
    /// comma is one destination. Duplicates are dropped, the first kept; at most
    /// [`MAX_COMPOSITE`] destinations. Composites are for sending: a subscription
    /// names one destination ([`COMPOSITE_ONLY`]).
    pub fn parse_composite(text: &str) -> Result<Vec<Self>, InvalidDestination> {
        let mut keys: Vec<Self> = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            let key = match (Self::split_any(part), keys.last()) {
                (Some(_), _) => Self::parse(part),
                (None, _) if part.is_empty() => Err(InvalidDestination {
                    name: text.to_string(),
                    reason:
                        "a composite destination has an empty part (two commas, or one at an end)",
                }),
                // `/queu/typo`, `temp-queue://x`: a kind was meant, not a name.
                (None, Some(_)) if part.starts_with('/') || part.contains("://") => {
                    Err(InvalidDestination {
                        name: text.to_string(),
                        reason: NO_KIND.as_str(),
                    })
                }
                (None, Some(last)) => Self::new(last.kind, part),
                (None, None) => Self::parse(part),
            }
            .map_err(|e| InvalidDestination {
                name: text.to_string(),
                reason: e.reason,
            })?;
            if !keys.contains(&key) {
                keys.push(key);
            }
            if keys.len() > MAX_COMPOSITE {
                return Err(InvalidDestination {
                    name: text.to_string(),
                    reason: "a composite destination names at most 64 destinations",
                });
            }
        }
        Ok(keys)
    }

    /// The topic `name` (plain name: the kind is given).
    pub fn topic(name: &str) -> Result<Self, InvalidDestination> {
        Self::new(DestinationKind::TOPIC, name)
    }

    /// The queue `name` (plain name).
    pub fn queue(name: &str) -> Result<Self, InvalidDestination> {
        Self::new(DestinationKind::QUEUE, name)
    }

    /// A destination as the embedding API and STOMP both take it: `queue://NAME` or
    /// `/queue/NAME` → a queue, `topic://NAME` or `/topic/NAME` → a topic. A name
    /// without its kind (`orders`) is refused ([`NO_KIND`]): a queue and a topic of
    /// the same name are different destinations, and a message sent to a topic
    /// nobody subscribes to is dropped, so the broker does not guess (ActiveMQ's STOMP
    /// refuses it too: "destinations must begin with one of /queue/ /topic/").
    pub fn parse(text: &str) -> Result<Self, InvalidDestination> {
        match Self::split_any(text) {
            Some((kind, name)) => Self::new(kind, name).map_err(|e| InvalidDestination {
                name: text.to_string(),
                reason: e.reason,
            }),
            None => Err(InvalidDestination {
                name: text.to_string(),
                reason: NO_KIND.as_str(),
            }),
        }
    }

    /// The kind and plain name of `text` in any of [`DestinationKey::parse`]'s forms.
    fn split_any(text: &str) -> Option<(DestinationKind, &str)> {
        Self::split_container(text).or_else(|| {
            DestinationKind::all().find_map(|kind| {
                text.strip_prefix(kind.spec().stomp_prefix)
                    .map(|name| (kind, name))
            })
        })
    }

    /// A store key (`topic://NAME` or `queue://NAME`) read back from the store or a
    /// configuration; a text without one of the two schemes is refused.
    pub fn from_container(container: &str) -> Result<Self, InvalidDestination> {
        match Self::split_container(container) {
            Some((kind, name)) => Self::new(kind, name),
            None => Err(InvalidDestination {
                name: container.to_string(),
                reason: STORE_KEY.as_str(),
            }),
        }
    }

    /// A STOMP `destination` header: the same forms as [`DestinationKey::parse`]
    /// (ActiveMQ's `/queue/NAME`, `/topic/NAME`, and the API's `queue://NAME`,
    /// `topic://NAME`), meaning the same.
    pub fn from_stomp(destination: &str) -> Result<Self, InvalidDestination> {
        Self::parse(destination)
    }

    /// The kind and plain name of a store key (`NAME://plain`), no allocation.
    fn split_container(text: &str) -> Option<(DestinationKind, &str)> {
        DestinationKind::all().find_map(|kind| {
            text.strip_prefix(kind.as_str())
                .and_then(|rest| rest.strip_prefix("://"))
                .map(|name| (kind, name))
        })
    }

    /// Its kind: ask it what it can do ([`DestinationKind::capabilities`]).
    pub fn kind(&self) -> DestinationKind {
        self.kind
    }

    /// What its kind can do.
    pub fn capabilities(&self) -> Capabilities {
        self.kind.capabilities()
    }

    /// True for a queue. Kept for one release: ask what it can do instead
    /// ([`Self::capabilities`]).
    #[deprecated(note = "ask the kind what it can do: key.capabilities()")]
    pub fn is_queue(&self) -> bool {
        self.kind == DestinationKind::QUEUE
    }

    /// True for a topic. Kept for one release: ask what it can do instead.
    #[deprecated(note = "ask the kind what it can do: key.capabilities()")]
    pub fn is_topic(&self) -> bool {
        self.kind == DestinationKind::TOPIC
    }

    /// The plain name, e.g. `jobs`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store key, e.g. `queue://jobs`: the `container` column, what policies
    /// match and what metrics label.
    pub fn container(&self) -> String {
        format!("{}://{}", self.kind.as_str(), self.name)
    }

    /// STOMP's form, e.g. `/queue/jobs`.
    pub fn stomp(&self) -> String {
        format!("{}{}", self.kind.spec().stomp_prefix, self.name)
    }
}

/// The store key (`queue://jobs`).
impl fmt::Display for DestinationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.kind.as_str(), self.name)
    }
}

/// A pattern over destination names, as ActiveMQ's policy and authorization maps use:
/// `topic://` or `queue://`, then `.`-separated segments, each a name, `*` (exactly one
/// segment) or, last only, `>` (every remaining segment, at least zero). `topic://>`
/// matches every topic; `topic://orders.*` matches `topic://orders.eu` but not
/// `topic://orders.eu.north`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationPattern {
    kind: DestinationKind,
    segments: Vec<String>,
}

impl DestinationPattern {
    /// Parses `text`; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, InvalidDestination> {
        let invalid = |reason| InvalidDestination {
            name: text.to_string(),
            reason,
        };
        let (kind, name) =
            DestinationKey::split_container(text).ok_or_else(|| invalid(PATTERN_KEY.as_str()))?;
        let segments: Vec<String> = name.split('.').map(str::to_string).collect();
        if segments.iter().any(|s| s.is_empty()) {
            return Err(invalid("a destination pattern has no empty segment"));
        }
        if segments.iter().rev().skip(1).any(|s| s == ">") {
            return Err(invalid("`>` may only be the last segment of a pattern"));
        }
        Ok(Self { kind, segments })
    }

    /// A subscription's wildcard destination, in [`DestinationKey::parse`]'s forms
    /// (`queue://jobs.*`, `/topic/orders.>`; a name without its kind is refused):
    /// `Ok(None)` when `text` has no wildcard segment (it names one destination), the
    /// pattern when it has one, or why it can be neither. The name rules are those
    /// of [`DestinationKey::new`] (at most [`MAX_NAME_BYTES`], no control characters),
    /// plus the pattern's (no empty segment, `>` last).
    pub fn subscription(text: &str) -> Result<Option<Self>, InvalidDestination> {
        let Some((kind, name)) = DestinationKey::split_any(text) else {
            return Err(InvalidDestination {
                name: text.to_string(),
                reason: NO_KIND.as_str(),
            });
        };
        Self::of_name(kind, name, text)
    }

    /// [`Self::subscription`] for a STOMP `destination` header: the same forms.
    pub fn subscription_from_stomp(destination: &str) -> Result<Option<Self>, InvalidDestination> {
        Self::subscription(destination)
    }

    fn of_name(
        kind: DestinationKind,
        name: &str,
        text: &str,
    ) -> Result<Option<Self>, InvalidDestination> {
        if !name.split('.').any(|s| s == "*" || s == ">") {
            return Ok(None);
        }
        let invalid = |reason| InvalidDestination {
            name: text.to_string(),
            reason,
        };
        if kind.capabilities().temporary {
            return Err(invalid(
                "a temporary destination is subscribed to by its whole name, never by a wildcard",
            ));
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(invalid("longer than 200 bytes"));
        }
        if name.contains("://") || name.chars().any(|c| c.is_control()) {
            return Err(invalid(NOT_PLAIN.as_str()));
        }
        Self::parse(&format!("{}://{name}", kind.as_str()))
            .map(Some)
            .map_err(|e| invalid(e.reason))
    }

    /// Topic or queue: the kind of every destination it matches.
    pub fn kind(&self) -> DestinationKind {
        self.kind
    }

    /// STOMP's form, e.g. `/topic/orders.>`.
    pub fn stomp(&self) -> String {
        format!(
            "{}{}",
            self.kind.spec().stomp_prefix,
            self.segments.join(".")
        )
    }

    /// The store keys every destination it matches lies within: `(from, below)`, so
    /// that a match's [`DestinationKey::container`] `c` has `from <= c < below`. From
    /// the literal segments before the first wildcard (`queue://jobs.*` gives
    /// `queue://jobs` and `queue://jobs/`: `/` is the byte after `.`).
    pub fn container_range(&self) -> (String, String) {
        let literal: Vec<&str> = self
            .segments
            .iter()
            .take_while(|s| *s != "*" && *s != ">")
            .map(String::as_str)
            .collect();
        let scheme = format!("{}://", self.kind.as_str());
        if literal.is_empty() {
            // `topic://` .. `topic:/0` (`0` is the byte after `/`).
            let below = format!("{}:/0", self.kind.as_str());
            return (scheme, below);
        }
        let prefix = format!("{scheme}{}", literal.join("."));
        // A match is `prefix` itself (`orders.>` matches `orders`) or `prefix.…`.
        (prefix.clone(), format!("{prefix}/"))
    }

    /// Whether every destination `other` matches, this one matches too.
    pub fn covers(&self, other: &DestinationPattern) -> bool {
        self.kind == other.kind && covers(&self.segments, &other.segments)
    }

    /// Whether some destination matches both.
    pub fn intersects(&self, other: &DestinationPattern) -> bool {
        self.kind == other.kind && intersects(&self.segments, &other.segments)
    }

    /// Whether `key` is one of the destinations the pattern names.
    pub fn matches(&self, key: &DestinationKey) -> bool {
        if self.kind != key.kind {
            return false;
        }
        let mut names = key.name.split('.');
        for segment in &self.segments {
            match (segment.as_str(), names.next()) {
                (">", _) => return true,
                ("*", Some(_)) => {}
                (a, Some(b)) if a == b => {}
                _ => return false,
            }
        }
        names.next().is_none()
    }
}

/// [`DestinationPattern::covers`] over segments: `a` matches every name `b` matches.
fn covers(a: &[String], b: &[String]) -> bool {
    match (a.first().map(String::as_str), b.first().map(String::as_str)) {
        // `>` matches the rest, whatever it is (also nothing).
        (Some(">"), _) => true,
        (None, None) => true,
        // `b` may end here or go on (`>`) where `a` needs more, or ends where `a` does not.
        (None, Some(_)) | (Some(_), None) | (Some(_), Some(">")) => false,
        (Some("*"), Some(_)) => covers(&a[1..], &b[1..]),
        (Some(x), Some(y)) => x == y && covers(&a[1..], &b[1..]),
    }
}

/// [`DestinationPattern::intersects`] over segments: some name matches both.
fn intersects(a: &[String], b: &[String]) -> bool {
    match (a.first().map(String::as_str), b.first().map(String::as_str)) {
        (Some(">"), _) | (_, Some(">")) => true,
        (None, None) => true,
        (None, Some(_)) | (Some(_), None) => false,
        (Some("*"), Some(_)) | (Some(_), Some("*")) => intersects(&a[1..], &b[1..]),
        (Some(x), Some(y)) => x == y && intersects(&a[1..], &b[1..]),
    }
}

/// The pattern's text (`topic://orders.>`).
impl fmt::Display for DestinationPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.kind.as_str(), self.segments.join("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_composite_names_each_destination_once_in_order() {
        let keys =
            DestinationKey::parse_composite("/queue/a,/topic/b,queue://c,d,/queue/a").unwrap();
        let texts: Vec<String> = keys.iter().map(|k| k.container()).collect();
        assert_eq!(texts, ["queue://a", "topic://b", "queue://c", "queue://d"]);
        // One without a kind takes the kind of the one before it.
        let keys = DestinationKey::parse_composite("/topic/x,y").unwrap();
        assert_eq!(keys[1], DestinationKey::topic("y").unwrap());
        assert_eq!(
            DestinationKey::parse_composite("/queue/one").unwrap().len(),
            1
        );
        for bad in [
            "/queue/a,",
            ",/queue/a",
            "a,/queue/b",
            "/queue/a,b.*",
            "/queue/a,/queu/typo",
            "/queue/a,foo://x",
        ] {
            assert!(DestinationKey::parse_composite(bad).is_err(), "{bad}");
        }
        let many: Vec<String> = (0..=MAX_COMPOSITE)
            .map(|i| format!("/queue/q{i}"))
            .collect();
        assert!(DestinationKey::parse_composite(&many.join(",")).is_err());
        // A comma is never part of a name.
        let refused = DestinationKey::parse("/queue/a,b").unwrap_err();
        assert_eq!(refused.reason, COMPOSITE_ONLY);
    }

    #[test]
    fn every_form_names_the_same_key() {
        let q = DestinationKey::queue("jobs").unwrap();
        assert_eq!(DestinationKey::parse("queue://jobs").unwrap(), q);
        assert_eq!(DestinationKey::from_container("queue://jobs").unwrap(), q);
        assert_eq!(DestinationKey::from_stomp("/queue/jobs").unwrap(), q);
        // One syntax: each form means the same in the API and on STOMP.
        assert_eq!(DestinationKey::parse("/queue/jobs").unwrap(), q);
        assert_eq!(DestinationKey::from_stomp("queue://jobs").unwrap(), q);
        assert_eq!(q.container(), "queue://jobs");
        assert_eq!(q.to_string(), "queue://jobs");
        assert_eq!(q.stomp(), "/queue/jobs");
        assert_eq!(q.name(), "jobs");
        let t = DestinationKey::parse("/topic/orders.eu").unwrap();
        assert_eq!(t, DestinationKey::parse("topic://orders.eu").unwrap());
        assert_eq!(t, DestinationKey::from_stomp("/topic/orders.eu").unwrap());
        assert_eq!(t.kind(), DestinationKind::TOPIC);
        assert!(t.capabilities().durable_subscriptions && !t.capabilities().browse);
        assert_eq!(
            DestinationKind::of_container("topic://a"),
            Some(DestinationKind::TOPIC)
        );
        assert_eq!(
            DestinationKind::of_container("queue://a"),
            Some(DestinationKind::QUEUE)
        );
        assert_eq!(DestinationKind::of_container("queues://a"), None);
        assert_eq!(
            serde_json::to_string(&DestinationKind::QUEUE).unwrap(),
            "\"queue\""
        );
        assert_eq!(
            serde_json::from_str::<DestinationKind>("\"topic\"").unwrap(),
            DestinationKind::TOPIC
        );
        assert!(serde_json::from_str::<DestinationKind>("\"lake\"").is_err());
        assert_eq!(DestinationKind::of_container("jobs"), None);
    }

    #[test]
    fn bad_names_are_refused_with_the_reason() {
        for bad in [
            "",
            "orders",
            "/queue/",
            "/temp-queue/a",
            "topic://a://b",
            "a.*",
            "a.>",
            "bad\nname",
            "queue://",
            "queue://a.*",
        ] {
            assert!(DestinationKey::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(
            DestinationKey::topic("topic://x").is_err(),
            "a plain name has no scheme"
        );
        assert!(DestinationKey::topic(&"x".repeat(201)).is_err());
        assert!(DestinationKey::topic(&"x".repeat(200)).is_ok());
        assert!(DestinationKey::from_container("jobs").is_err());
        for bare in ["jobs", "orders.eu"] {
            let api = DestinationKey::parse(bare).unwrap_err();
            let stomp = DestinationKey::from_stomp(bare).unwrap_err();
            assert_eq!(api.to_string(), stomp.to_string(), "the same refusal");
            assert_eq!(
                api.to_string(),
                format!("invalid destination `{bare}`: {}", *NO_KIND)
            );
        }
        let e = DestinationKey::from_stomp("/queue/a.>").unwrap_err();
        assert_eq!(e.name, "/queue/a.>");
    }

    #[test]
    fn keys_sort_as_their_store_keys() {
        let mut keys = [
            DestinationKey::queue("a").unwrap(),
            DestinationKey::topic("b").unwrap(),
            DestinationKey::topic("a").unwrap(),
        ];
        keys.sort();
        let shown: Vec<String> = keys.iter().map(|k| k.container()).collect();
        let mut texts = shown.clone();
        texts.sort();
        assert_eq!(shown, texts);
        assert_eq!(shown, ["queue://a", "topic://a", "topic://b"]);
    }

    #[test]
    fn patterns_follow_activemq_wildcards() {
        let m = |p: &str, k: &str| {
            DestinationPattern::parse(p)
                .unwrap()
                .matches(&DestinationKey::from_container(k).unwrap())
        };
        assert!(m("topic://>", "topic://orders"));
        assert!(m("topic://>", "topic://a.b.c"));
        assert!(!m("topic://>", "queue://orders"));
        assert!(m("topic://orders.*", "topic://orders.eu"));
        assert!(!m("topic://orders.*", "topic://orders.eu.north"));
        assert!(!m("topic://orders.*", "topic://orders"));
        assert!(m("topic://orders.>", "topic://orders.eu.north"));
        assert!(m("topic://orders.>", "topic://orders"));
        assert!(m("topic://*.eu", "topic://orders.eu"));
        assert!(m("topic://orders", "topic://orders"));
        assert!(!m("topic://orders", "topic://orders2"));
        assert!(!m("topic://orders", "topic://orders.eu"));
        for bad in ["orders", "topic://a..b", "topic://>.a", "queue://"] {
            assert!(DestinationPattern::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            DestinationPattern::parse("queue://jobs.>")
                .unwrap()
                .to_string(),
            "queue://jobs.>"
        );
    }

    #[test]
    fn subscriptions_name_a_pattern_only_with_a_wildcard() {
        assert_eq!(
            DestinationPattern::subscription("topic://orders.eu").unwrap(),
            None
        );
        assert!(DestinationPattern::subscription("orders.>").is_err());
        let p = DestinationPattern::subscription("topic://orders.>")
            .unwrap()
            .unwrap();
        assert_eq!(
            DestinationPattern::subscription("/topic/orders.>").unwrap(),
            Some(p.clone())
        );
        assert_eq!(p.to_string(), "topic://orders.>");
        assert_eq!(p.stomp(), "/topic/orders.>");
        let q = DestinationPattern::subscription_from_stomp("/queue/jobs.*")
            .unwrap()
            .unwrap();
        assert_eq!(
            (q.kind(), q.to_string()),
            (DestinationKind::QUEUE, "queue://jobs.*".into())
        );
        assert_eq!(
            DestinationPattern::subscription_from_stomp("/queue/jobs").unwrap(),
            None
        );
        for bad in ["/topic/a.>.b", "/topic/a..*", "/topic/*.a\tb"] {
            let e = DestinationPattern::subscription_from_stomp(bad).unwrap_err();
            assert_eq!(e.name, bad);
        }
        assert!(DestinationPattern::subscription_from_stomp("/temp-queue/a.*").is_err());
        let long = format!("{}.>", "x".repeat(200));
        assert!(DestinationPattern::subscription(&long).is_err());
    }

    #[test]
    fn covering_and_intersecting_patterns() {
        let p = |t: &str| DestinationPattern::parse(t).unwrap();
        let covers = |a: &str, b: &str| p(a).covers(&p(b));
        let meets = |a: &str, b: &str| p(a).intersects(&p(b));
        assert!(covers("topic://>", "topic://orders.>"));
        assert!(covers("topic://orders.>", "topic://orders.*"));
        assert!(covers("topic://orders.>", "topic://orders"));
        assert!(covers("topic://orders.*", "topic://orders.eu"));
        assert!(!covers("topic://orders.*", "topic://orders.>"));
        assert!(!covers("topic://orders.eu", "topic://orders.*"));
        assert!(!covers("topic://orders.*", "topic://orders"));
        assert!(!covers("queue://>", "topic://a"));
        assert!(meets("topic://orders.secret", "topic://orders.*"));
        assert!(meets("topic://*.eu", "topic://orders.*"));
        assert!(meets("topic://orders", "topic://orders.>"));
        assert!(!meets("topic://orders.eu", "topic://orders.us"));
        assert!(!meets("topic://a.*", "topic://a.b.c"));
        assert!(!meets("topic://a", "queue://a"));
        // Checked against names: what both match is there exactly when they meet, and
        // a covering pattern matches all the other does.
        let names = ["a", "a.b", "a.c", "a.b.c", "b", "b.b", "a.b.d"];
        let all = [
            "topic://>",
            "topic://a.>",
            "topic://a.*",
            "topic://*.b",
            "topic://a.b",
            "topic://a",
            "topic://*",
            "topic://a.*.c",
            "topic://b.>",
        ];
        for x in all {
            for y in all {
                let keys = names.iter().map(|n| DestinationKey::topic(n).unwrap());
                let both = keys.clone().any(|k| p(x).matches(&k) && p(y).matches(&k));
                assert_eq!(meets(x, y), both, "{x} {y}");
                if covers(x, y) {
                    assert!(
                        keys.clone().all(|k| !p(y).matches(&k) || p(x).matches(&k)),
                        "{x} {y}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_patterns_matches_lie_in_its_container_range() {
        let names = [
            "topic://orders",
            "topic://orders.eu",
            "topic://orders.eu.north",
            "topic://orders2",
            "topic://order",
            "topic://orders-x",
            "topic://ordersa.b",
            "topic://a",
            "topic://z.orders",
            "queue://orders.eu",
            "topic://orders/x",
        ];
        for pattern in [
            "topic://orders.>",
            "topic://orders.*",
            "topic://*.eu",
            "topic://>",
            "topic://orders.*.north",
            "queue://>",
        ] {
            let p = DestinationPattern::parse(pattern).unwrap();
            let (from, below) = p.container_range();
            for name in names {
                let key = DestinationKey::from_container(name).unwrap();
                if p.matches(&key) {
                    let c = key.container();
                    assert!(
                        from.as_str() <= c.as_str() && c.as_str() < below.as_str(),
                        "{pattern}: {c} outside {from}..{below}"
                    );
                }
            }
        }
    }
}
