//! What every destination shares.
//!
//! - [`key`]: [`DestinationKey`], the one name of a destination inside Ebb.

pub mod key;

pub use key::{DestinationKey, DestinationKind, InvalidDestination, MAX_NAME_BYTES};
