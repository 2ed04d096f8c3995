//! STOMP over TCP: the listener and one task per connection.

pub mod connection;
pub mod listener;
