//! What names a destination in the embedding API: [`ToDestination`] and [`Target`].

use crate::error::Error;
use ebb_actors::destination::DestinationPattern;
use ebb_actors::{DestinationKey, DestinationKind};

/// What names a destination in the embedding API: a [`DestinationKey`] (parsed once,
/// e.g. by a transport), or text parsed by [`DestinationKey::parse`], the same forms
/// STOMP takes: `queue://NAME` or `/queue/NAME` → a queue, `topic://NAME` or
/// `/topic/NAME` → a topic. A name without its kind (`orders`) is
/// [`Error::InvalidDestination`]: the broker does not guess which of two different
/// destinations is meant.
pub trait ToDestination {
    /// The key; [`Error::InvalidDestination`] for text that cannot name one (empty,
    /// over 200 bytes, control characters, another scheme, wildcards).
    fn to_destination(&self) -> Result<DestinationKey, Error>;

    /// What a subscription reads: one destination, or for a text with a wildcard
    /// element (`orders.>`, `queue://jobs.*`) the destinations it matches.
    fn to_target(&self) -> Result<Target, Error> {
        self.to_destination().map(Target::One)
    }
}

/// What a subscription reads: one destination, or every destination a pattern
/// matches (ActiveMQ's wildcards: `.` separates elements, `*` matches one, `>` the
/// rest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One destination (`queue://jobs`, `/queue/jobs`).
    One(DestinationKey),
    /// Every destination the pattern matches (`topic://orders.>`, `/queue/jobs.*`).
    Pattern(DestinationPattern),
}

impl Target {
    /// STOMP's form (`/topic/orders.>`).
    pub fn stomp(&self) -> String {
        match self {
            Target::One(k) => k.stomp(),
            Target::Pattern(p) => p.stomp(),
        }
    }

    /// Topic or queue.
    pub fn kind(&self) -> DestinationKind {
        match self {
            Target::One(k) => k.kind(),
            Target::Pattern(p) => p.kind(),
        }
    }
}

/// The store key form (`topic://orders.>`).
impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::One(k) => k.fmt(f),
            Target::Pattern(p) => p.fmt(f),
        }
    }
}

impl ToDestination for Target {
    fn to_destination(&self) -> Result<DestinationKey, Error> {
        match self {
            Target::One(k) => Ok(k.clone()),
            Target::Pattern(p) => Err(Error::InvalidDestination {
                name: p.to_string(),
                reason: "wildcards `*` and `>` name patterns, not a destination: subscribe to it, or send to one destination",
            }),
        }
    }

    fn to_target(&self) -> Result<Target, Error> {
        Ok(self.clone())
    }
}

impl ToDestination for DestinationPattern {
    fn to_destination(&self) -> Result<DestinationKey, Error> {
        Target::Pattern(self.clone()).to_destination()
    }

    fn to_target(&self) -> Result<Target, Error> {
        Ok(Target::Pattern(self.clone()))
    }
}

impl ToDestination for DestinationKey {
    fn to_destination(&self) -> Result<DestinationKey, Error> {
        Ok(self.clone())
    }
}

impl ToDestination for str {
    fn to_destination(&self) -> Result<DestinationKey, Error> {
        Ok(DestinationKey::parse(self)?)
    }

    fn to_target(&self) -> Result<Target, Error> {
        match DestinationPattern::subscription(self)? {
            Some(pattern) => Ok(Target::Pattern(pattern)),
            None => self.to_destination().map(Target::One),
        }
    }
}

impl ToDestination for String {
    fn to_destination(&self) -> Result<DestinationKey, Error> {
        self.as_str().to_destination()
    }

    fn to_target(&self) -> Result<Target, Error> {
        self.as_str().to_target()
    }
}

impl<T: ToDestination + ?Sized> ToDestination for &T {
    fn to_destination(&self) -> Result<DestinationKey, Error> {
        (**self).to_destination()
    }

    fn to_target(&self) -> Result<Target, Error> {
        (**self).to_target()
    }
}
