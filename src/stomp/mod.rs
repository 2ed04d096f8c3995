//! The STOMP wire protocol (1.0, 1.1, 1.2): frames, escaping and the codec. No actix,
//! no store: this is where hostile bytes arrive, so it stands alone and is tested
//! alone (unit tests, property tests).

// Only `ebb soak --stomp` drives it, and it answers with anyhow errors: a tool's part.
#[cfg(feature = "cli")]
pub mod client;
pub mod codec;
pub mod escape;
pub mod frame;
