//! `ebb serve`'s configuration file (TOML).
//!
//! Every key is checked: an unknown key or a bad value stops the broker at start with
//! an error that names the file, the line and the key, so it never runs on a
//! half-understood configuration. Command-line flags override the file.
//!
//! ```toml
//! [store]
//! url = "sqlite://ebb-data/ebb.db"
//!
//! [listeners.stomp]               # one section per listener
//! listen = "127.0.0.1:61613"
//!
//! [stomp]                         # the protocol's settings, for all its listeners
//! max_frame_size = "10mb"
//!
//! [usage]
//! memory = "64mb"
//! store = "10gb"
//!
//! [[policy]]
//! destination = "topic://>"        # ActiveMQ-style pattern
//! expire_messages_period = "30s"   # or 30000 (ms); 0 = off
//! max_expire_page_size = 400
//! ```
//!
//! Durations are ms or a string with a unit (`"500ms"`, `"30s"`, `"5m"`, `"1h"`);
//! sizes are bytes or a string with a unit (`"64kb"`, `"10mb"`, `"1gb"`).

use std::path::Path;

use crate::{Policy, PolicyEntry, PolicyMap};
use serde::Deserialize;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `[store]`: where messages are kept.
    #[serde(default)]
    pub store: StoreSection,
    /// `[stomp]`: the listener and its limits.
    #[serde(default)]
    pub stomp: StompSection,
    /// `[mqtt]`: the limits of MQTT connections (the listener is `[listeners.mqtt]`).
    #[serde(default)]
    pub mqtt: MqttSection,
    /// `[[policy]]` entries, matched by destination pattern, first match wins.
    #[serde(default)]
    pub policy: Vec<PolicySection>,
    /// `[housekeeping]`: expiry pages run at once.
    #[serde(default)]
    pub housekeeping: HousekeepingSection,
    /// System usage limits and producer flow control (`[usage]`).
    #[serde(default)]
    pub usage: UsageSection,
    /// `[metrics] listen = "host:port"`: the HTTP server's address, under its older
    /// name (`[http] listen` wins when both are given).
    #[serde(default)]
    pub metrics: crate::metrics::MetricsSection,
    /// `[http]`: the HTTP server (metrics, health, admin API, STOMP over WebSocket).
    #[serde(default)]
    pub http: HttpSection,
    /// `[tls]`: the certificate for `[stomp] ssl_listen` and `[http] tls`.
    pub tls: Option<TlsSection>,
    /// `[ha]`: an active broker and standbys on one store.
    #[serde(default)]
    pub ha: HaSection,
    /// `[listeners.NAME]`: where each listener listens, one section each
    /// ([`ListenersSection`]).
    #[serde(default)]
    pub listeners: ListenersSection,
    /// Users (`[[users]]`: login, password_hash from `ebb passwd`, groups). With any,
    /// CONNECT must log in.
    #[serde(default)]
    pub users: Vec<crate::auth::User>,
    /// Rights by destination pattern (`[[authorization]]`: destination, read, write,
    /// admin, each a list of logins or groups, `*` for every user).
    #[serde(default)]
    pub authorization: Vec<crate::auth::AuthorizationEntry>,
    /// `[temp_destination_authorization_entry]`: who may make temporary destinations
    /// (`admin`), send to another connection's (`write`) and browse another
    /// connection's (`read`), as ActiveMQ's `tempDestinationAuthorizationEntry`
    /// ([`crate::auth::Security::authorize_temporary`]). Absent: anyone connected may
    /// make one and send to one whose name it was given; only its connection reads it.
    pub temp_destination_authorization_entry:
        Option<crate::auth::TempDestinationAuthorizationEntry>,
    /// `[virtual_topics]`: ActiveMQ's virtual topics (on by default).
    #[serde(default)]
    pub virtual_topics: VirtualTopicsSection,
    /// `[[composite]]`: configured composite destinations, each a name that forwards
    /// to several destinations.
    #[serde(default)]
    pub composite: Vec<CompositeSection>,
}

/// `[virtual_topics]`: a send to a topic named `topic_prefix...` also goes to every
/// queue `consumer_prefix<group>.<topic>` that has had a subscriber
/// ([`crate::VirtualTopics`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtualTopicsSection {
    /// Default true, as ActiveMQ.
    pub enabled: Option<bool>,
    /// Default `VirtualTopic.`.
    pub topic_prefix: Option<String>,
    /// Default `Consumer.` (the group is the segment after it).
    pub consumer_prefix: Option<String>,
    /// Default false: one store transaction for the topic and all its groups
    /// (ActiveMQ's `transactedSend`; [`crate::VirtualTopics::transacted_send`]).
    pub transacted_send: Option<bool>,
}

/// One `[[composite]]`: a send to `name` goes to each `[[composite.forward]]` whose
/// selector matches ([`crate::CompositeDestination`], ActiveMQ's `compositeQueue`
/// with `filteredDestination`, `forwardOnly`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompositeSection {
    /// The name producers send to (`/queue/orders.all`, `queue://orders.all`).
    pub name: String,
    /// Where its messages go, at least one.
    pub forward: Vec<ForwardSection>,
}

/// One `[[composite.forward]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardSection {
    /// The destination (`/topic/audit`, `queue://orders.eu`).
    pub destination: String,
    /// A JMS selector; only the messages it matches are forwarded.
    pub selector: Option<String>,
}

/// `[listeners.NAME]`: the server's listeners, one section each (as rumqttd keeps its
/// listeners in maps of their own): `stomp` (STOMP over TCP, default
/// `127.0.0.1:61613`), `stomp_tls` (STOMP over TLS, ActiveMQ's `stomp+ssl`, with the
/// certificate of `[tls]`; off unless given), `http` (the HTTP server: health,
/// metrics, admin API, console, STOMP over WebSocket; off unless given). A protocol's
/// settings stay in its own section (`[stomp]`, `[http]`) and hold for all its
/// listeners.
///
/// The older keys are still read: `[stomp] listen`, `[stomp] ssl_listen`, `[http]
/// listen` and `[metrics] listen`. A listener given both ways is an error naming both
/// keys, so the file never says two things.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenersSection {
    /// `[listeners.stomp]`: STOMP over TCP.
    pub stomp: Option<ListenerSection>,
    /// `[listeners.stomp_tls]`: STOMP over TLS.
    pub stomp_tls: Option<ListenerSection>,
    /// `[listeners.http]`: the HTTP server (`https` and `wss` with `[http] tls`).
    pub http: Option<ListenerSection>,
    /// `[listeners.mqtt]`: MQTT 3.1.1 and 5.0 over TCP (off unless given; MQTT's port
    /// is 1883).
    pub mqtt: Option<ListenerSection>,
    /// `[listeners.mqtt_tls]`: MQTT over TLS (`mqtts`, port 8883), with the
    /// certificate of `[tls]`; off unless given.
    pub mqtt_tls: Option<ListenerSection>,
}

/// One listener's section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerSection {
    /// `host:port` it listens on (a name is resolved at start).
    pub listen: String,
}

/// Which listener of [`ListenersSection`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// STOMP over TCP.
    Stomp,
    /// STOMP over TLS.
    StompTls,
    /// The HTTP server.
    Http,
    /// MQTT over TCP.
    Mqtt,
    /// MQTT over TLS.
    MqttTls,
}

impl FileConfig {
    /// The address `listener` is configured with, and the key it came from
    /// (`[listeners.stomp] listen`, or an older key such as `[stomp] listen`); `None`
    /// when the file does not say. [`FileConfig::parse`] has refused a listener given
    /// both ways already; were it not, `[listeners.*]` wins.
    pub fn listen_address(&self, listener: Listener) -> Option<(&str, &'static str)> {
        let (section, older): (_, &[(Option<&String>, &'static str)]) = match listener {
            Listener::Stomp => (
                (&self.listeners.stomp, "[listeners.stomp] listen"),
                &[(self.stomp.listen.as_ref(), "[stomp] listen")],
            ),
            Listener::StompTls => (
                (&self.listeners.stomp_tls, "[listeners.stomp_tls] listen"),
                &[(self.stomp.ssl_listen.as_ref(), "[stomp] ssl_listen")],
            ),
            Listener::Http => (
                (&self.listeners.http, "[listeners.http] listen"),
                &[
                    (self.http.listen.as_ref(), "[http] listen"),
                    (self.metrics.listen.as_ref(), "[metrics] listen"),
                ],
            ),
            Listener::Mqtt => ((&self.listeners.mqtt, "[listeners.mqtt] listen"), &[]),
            Listener::MqttTls => (
                (&self.listeners.mqtt_tls, "[listeners.mqtt_tls] listen"),
                &[],
            ),
        };
        if let (Some(l), key) = section {
            return Some((l.listen.as_str(), key));
        }
        older
            .iter()
            .find_map(|(value, key)| value.map(|v| (v.as_str(), *key)))
    }

    /// The listeners given both as `[listeners.NAME]` and by an older key: an error
    /// naming both keys.
    fn check_listeners(&self) -> Result<(), ConfigError> {
        let twice = [
            (
                self.listeners.stomp.is_some() && self.stomp.listen.is_some(),
                "[listeners.stomp] listen",
                "[stomp] listen",
            ),
            (
                self.listeners.stomp_tls.is_some() && self.stomp.ssl_listen.is_some(),
                "[listeners.stomp_tls] listen",
                "[stomp] ssl_listen",
            ),
            (
                self.listeners.http.is_some() && self.http.listen.is_some(),
                "[listeners.http] listen",
                "[http] listen",
            ),
            (
                self.listeners.http.is_some() && self.metrics.listen.is_some(),
                "[listeners.http] listen",
                "[metrics] listen",
            ),
        ];
        match twice.iter().find(|(both, _, _)| *both) {
            Some((_, new, old)) => Err(ConfigError::ListenerTwice { new, old }),
            None => Ok(()),
        }
    }
}

/// `[mqtt]`: MQTT connections' limits; users, rights and connection caps are
/// STOMP's (`[[users]]`, `[[authorization]]`, `[stomp] max_connections`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqttSection {
    /// Largest packet a client may send, bytes or with a unit (`256kb`); default
    /// 1 MiB, at least `1kb`.
    pub max_packet_size: Option<ByteSize>,
    /// QoS 1 and 2 publishes one connection may have waiting for their commits
    /// (CONNACK's receive maximum); default 1,000, 1 to 65,535.
    pub receive_maximum: Option<u16>,
    /// QoS 1 and 2 deliveries a 3.1.1 client takes unacknowledged (5.0 clients say
    /// theirs); default 100, at least 1.
    pub delivery_window: Option<u16>,
    /// Close a connection that sends no CONNECT this long: ms or with a unit
    /// (`"30s"`); default 30,000.
    pub connect_timeout_ms: Option<Millis>,
}

/// `[http]`: the HTTP server of `ebb serve` (off without `listen`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSection {
    /// `host:port` it listens on (`ebb serve --http` overrides it). Without users it
    /// refuses a non-loopback address, as the STOMP listener does.
    pub listen: Option<String>,
    /// The group whose users may change things through the admin API (send, remove a
    /// subscription...); default `admin`. Reading needs any configured user.
    pub admin_group: Option<String>,
    /// Serve `https` and `wss` with the certificate of `[tls]` instead of plain HTTP.
    pub tls: Option<bool>,
    /// Origins (`https://app.example`) of other sites whose pages may call the admin
    /// API's changes and, without users, open STOMP WebSockets; default none.
    pub allowed_origins: Option<Vec<String>>,
    /// Host names (the request's `Host`, without its port) served besides IP
    /// addresses, `localhost` and this machine's name: `app.example`, `.example`
    /// (the name and every name under it), `*` (any: turns the check off). A request
    /// for another name is refused (`403`), so a page of another site whose name
    /// was made to resolve to this server (DNS rebinding) gets nothing.
    pub allowed_hosts: Option<Vec<String>>,
    /// Most HTTP connections at once, WebSockets included (default 1,024).
    pub max_connections: Option<usize>,
    /// Most HTTP connections from one IP address at once (default 64).
    pub max_connections_per_address: Option<usize>,
    /// Most destinations with series in `/metrics` (default 10,000): named ones
    /// first, then temporary ones; `ebb_destination_series_omitted` counts the rest,
    /// and the broker's totals (`ebb_messages_waiting`, ...) include them.
    pub max_destination_series: Option<usize>,
}

/// `[tls]`: the certificate of the TLS listeners (`[stomp] ssl_listen`, `[http] tls`),
/// PEM files.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// The server's certificate chain, PEM (leaf first).
    pub cert_file: std::path::PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key_file: std::path::PathBuf,
    /// With it, clients must present a certificate this CA (PEM) signed (mutual TLS),
    /// on top of STOMP's login.
    pub client_ca_file: Option<std::path::PathBuf>,
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// Store URL (`sqlite://PATH`, `postgres://...`).
    pub url: Option<String>,
    /// Table prefix (default `ebb_`).
    pub table_prefix: Option<String>,
    /// PostgreSQL schema to create and use.
    pub schema: Option<String>,
    /// SQLite: each connection's page cache (`StoreOptions::sqlite_cache_kib`; default
    /// 1 MiB).
    pub sqlite_cache_size: Option<ByteSize>,
    /// SQLite: a bound on all of SQLite's memory (`StoreOptions::sqlite_memory_limit_kib`;
    /// default 8 MiB; 0 = none).
    pub sqlite_memory_limit: Option<ByteSize>,
}

/// `[stomp]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StompSection {
    /// `host:port` to listen on (default `127.0.0.1:61613`).
    pub listen: Option<String>,
    /// `host:port` of a second listener for STOMP over TLS (ActiveMQ's `stomp+ssl`,
    /// usually port 61614), with the certificate of `[tls]`; off without it.
    pub ssl_listen: Option<String>,
    /// Largest frame accepted, bytes or with a unit (`10mb`); default 10 MiB, at least
    /// `1kb`.
    pub max_frame_size: Option<ByteSize>,
    /// The broker's heart-beat floor, `[send every, expect every]`: it sends no more
    /// often than the first, and wants one from the client no more often than the
    /// second (STOMP's `heart-beat`, negotiated with the client's: the larger of the two
    /// applies, 0 = none); a client silent for twice its interval is closed. Each ms or
    /// with a unit (`"10s"`); default `[1000, 1000]`, so a client's own interval of a
    /// second or more is honoured (as ActiveMQ honours the client's value).
    pub heartbeat_ms: Option<[Millis; 2]>,
    /// Close a connection that sends no CONNECT, or stalls in the middle of a frame
    /// (or whose socket takes no write), this long: ms or with a unit (`"30s"`);
    /// default 30,000.
    pub stall_timeout_ms: Option<Millis>,
    /// The pipeline's window: most frames one connection may have applied and not yet
    /// committed before the broker stops reading it (default 1,000; 1 applies one
    /// frame at a time, waiting for each commit).
    pub pipeline_frames: Option<usize>,
    /// The same window in bytes of frames (headers and body), or with a unit (default
    /// `8mb`).
    pub pipeline_bytes: Option<ByteSize>,
    /// A CONNECT with a `client-id` that is already connected closes the older
    /// connection instead of being refused with an ERROR (ActiveMQ's
    /// `allowLinkStealing`; default false).
    pub allow_link_stealing: Option<bool>,
    /// Most connections at once (ActiveMQ's `maximumConnections`; default 10,000).
    pub max_connections: Option<usize>,
    /// Most connections from one IP address at once (default 1,000).
    pub max_connections_per_address: Option<usize>,
    /// Most subscriptions (browses included) on one connection (default 1,000).
    pub max_subscriptions: Option<usize>,
    /// Most open transactions on one connection (default 100).
    pub max_open_transactions: Option<usize>,
    /// Most SEND, ACK and NACK frames in one transaction (default 10,000).
    pub max_transaction_frames: Option<usize>,
    /// Deliveries waiting for an ACK on one connection at which the broker stops
    /// delivering to it until acks come (default 100,000).
    pub max_unacked: Option<usize>,
    /// Most bytes (headers and bodies) one transaction sends before COMMIT, bytes or
    /// with a unit (default `64mb`, at least `1kb`).
    pub max_transaction_size: Option<ByteSize>,
    /// Most headers in one frame (default 1,000, at least 16).
    pub max_headers: Option<usize>,
    /// Longest header line (or command line) of a frame, bytes or with a unit
    /// (default `64kb`, at least 64 bytes).
    pub max_header_size: Option<ByteSize>,
}

/// `[usage]`: system usage limits, as ActiveMQ's `systemUsage`. Sizes in bytes or with a
/// unit (`64mb`); unset keys keep the defaults of [`crate::broker::UsageConfig`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSection {
    /// Memory held by messages (default 64 MiB); `0` = no limit.
    pub memory: Option<ByteSize>,
    /// Bytes of messages in the store (default 100 GiB); `0` = no limit.
    pub store: Option<ByteSize>,
    /// Bytes of non-persistent messages held (default 0 = bounded by `memory` only).
    pub temp: Option<ByteSize>,
    /// Fail a send at a limit instead of waiting (default false).
    pub send_fail_if_no_space: Option<bool>,
    /// Wait at most this long at a limit, then fail: ms or with a unit (`"5s"`).
    pub send_fail_if_no_space_after_timeout: Option<Millis>,
    /// Bytes all open transactions may hold until COMMIT, apart from `memory`
    /// (default half of `memory`; `0` = no limit): a transactional SEND beyond it is
    /// refused, never held.
    pub transactions: Option<ByteSize>,
    /// Durable subscriptions one client id may have (default 1,000; 0 = no limit).
    pub max_durable_subscriptions_per_client: Option<u32>,
    /// Temporary destinations alive at once in the broker (default 10,000; 0 = no
    /// limit; [`crate::UsageConfig::max_temporary_destinations`]).
    pub max_temporary_destinations: Option<u32>,
    /// Temporary destinations one user may have alive at once over its connections
    /// (default 1,000; 0 = no limit;
    /// [`crate::UsageConfig::max_temporary_destinations_per_user`]).
    pub max_temporary_destinations_per_user: Option<u32>,
}

impl UsageSection {
    /// The usage configuration this section gives.
    pub fn usage(&self) -> crate::broker::UsageConfig {
        let d = crate::broker::UsageConfig::default();
        crate::broker::UsageConfig {
            memory: self.memory.map_or(d.memory, |b| b.0),
            store: self.store.map_or(d.store, |b| b.0),
            temp: self.temp.map_or(d.temp, |b| b.0),
            send_fail_if_no_space: self
                .send_fail_if_no_space
                .unwrap_or(d.send_fail_if_no_space),
            send_fail_if_no_space_after_timeout: self
                .send_fail_if_no_space_after_timeout
                .map(|m| m.0)
                .or(d.send_fail_if_no_space_after_timeout),
            transactions: self.transactions.map(|b| b.0).or(d.transactions),
            max_durable_subscriptions_per_client: self
                .max_durable_subscriptions_per_client
                .unwrap_or(d.max_durable_subscriptions_per_client),
            max_temporary_destinations: self
                .max_temporary_destinations
                .unwrap_or(d.max_temporary_destinations),
            max_temporary_destinations_per_user: self
                .max_temporary_destinations_per_user
                .unwrap_or(d.max_temporary_destinations_per_user),
        }
    }
}

/// `[ha]`: high availability on a shared store (`ebb serve --standby` is
/// `mode = "shared-store"` with these defaults).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HaSection {
    /// `"shared-store"`: a broker that finds the store held waits as a standby and
    /// takes over when the active one's lease expires or is released (on PostgreSQL
    /// the store is then held by a lease, see [`crate::LeaseOptions`]; on SQLite
    /// by its lock file, as without `[ha]`). `"none"` (the default): such a broker
    /// exits with an error.
    pub mode: Option<HaMode>,
    /// How long the lease lasts after each renewal (PostgreSQL): ms or with a unit
    /// (`"10s"`); default 10,000, as Artemis's `jdbc-lock-expiration` (20 s there).
    pub lease_ms: Option<Millis>,
    /// How often the active broker renews its lease, and a standby asks for it: ms or
    /// with a unit; default 2,000 (Artemis's `jdbc-lock-renew-period`); at most a
    /// third of `lease_ms`.
    pub renew_ms: Option<Millis>,
}

/// `[ha] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HaMode {
    /// One broker per store; a second one exits with an error.
    None,
    /// An active broker and standbys on one store.
    SharedStore,
}

/// `[ha] lease_ms` when not given.
pub const DEFAULT_LEASE_MS: u64 = 10_000;
/// `[ha] renew_ms` when not given.
pub const DEFAULT_RENEW_MS: u64 = 2_000;

/// `[housekeeping]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HousekeepingSection {
    /// Expiry pages that may run at once over all destinations (default: cores).
    pub permits: Option<usize>,
}

/// One `[[policy]]` entry; unset keys keep ActiveMQ's defaults.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    /// The destinations it applies to: a pattern (`queue://>`, `topic://orders.*`).
    #[serde(deserialize_with = "pattern")]
    pub destination: String,
    /// How often expiry runs (ActiveMQ's `expireMessagesPeriod`): ms or with a unit
    /// (`"30s"`); 0 = off.
    pub expire_messages_period: Option<Millis>,
    /// Rows one expiry page loads at most (ActiveMQ's `maxExpirePageSize`, default 400).
    #[serde(default, deserialize_with = "at_least_one")]
    pub max_expire_page_size: Option<u32>,
    /// Higher priority first, one high-water mark per priority (ActiveMQ's `prioritizedMessages`; default off).
    pub prioritized_messages: Option<bool>,
    /// Un-acked deliveries of a durable subscription (default 100).
    #[serde(default, deserialize_with = "at_least_one")]
    pub durable_prefetch: Option<u32>,
    /// Un-acked deliveries of a non-durable topic subscription (default 32,767).
    #[serde(default, deserialize_with = "at_least_one")]
    pub topic_prefetch: Option<u32>,
    /// Expiry also acks for online durable subscriptions (default off).
    pub expire_online_durable_subscriptions: Option<bool>,
    /// Messages waiting for a slow non-durable subscription before the oldest are discarded (default 10,000).
    pub max_pending_non_durable: Option<u32>,
    /// Un-acked deliveries of a queue consumer (default 1,000).
    #[serde(default, deserialize_with = "at_least_one")]
    pub queue_prefetch: Option<u32>,
    /// Messages a queue reads from the store per page (ActiveMQ's `maxPageSize`, default 200).
    #[serde(default, deserialize_with = "at_least_one")]
    pub max_page_size: Option<u32>,
    /// Messages one page of a browse or selector scan reads (ActiveMQ's `maxBrowsePageSize`, default 400).
    #[serde(default, deserialize_with = "at_least_one")]
    pub max_browse_page_size: Option<u32>,
    /// Failed deliveries before a queue message goes to the dead-letter queue (ActiveMQ's `maximumRedeliveries`, default 6).
    pub maximum_redeliveries: Option<u32>,
    /// Wait before the first redelivery of a queue message (ms or with a unit; ActiveMQ's `initialRedeliveryDelay`, default 0: at once).
    pub initial_redelivery_delay: Option<Millis>,
    /// Wait before each later redelivery (ActiveMQ's `redeliveryDelay`; default `initial_redelivery_delay`).
    pub redelivery_delay: Option<Millis>,
    /// Each wait is the one before times `backoff_multiplier` (ActiveMQ's `useExponentialBackOff`, default off).
    pub use_exponential_backoff: Option<bool>,
    /// Growth of each wait with `use_exponential_backoff` (ActiveMQ's `backOffMultiplier`, default 5; at least 1).
    #[serde(default, deserialize_with = "multiplier")]
    pub backoff_multiplier: Option<f64>,
    /// The longest wait (ms or with a unit; ActiveMQ's `maximumRedeliveryDelay`; default 0: no maximum).
    pub maximum_redelivery_delay: Option<Millis>,
    /// A shared dead-letter queue's name (default: `DLQ.<queue>` per queue); it must be a
    /// valid queue name (no wildcards, not empty).
    #[serde(default, deserialize_with = "queue_name")]
    pub dead_letter_queue: Option<String>,
    /// Expired queue messages go to the dead-letter queue instead of being dropped (default off).
    pub dead_letter_expired: Option<bool>,
    /// The destination's own memory limit (bytes or with a unit; 0 = none).
    pub memory_limit: Option<ByteSize>,
    /// Percent of the memory limit above which cursors leave stored messages in the
    /// store (ActiveMQ's `cursorMemoryHighWaterMark`, default 70; 1 to 100).
    #[serde(default, deserialize_with = "percent")]
    pub cursor_memory_high_water_mark: Option<u8>,
    /// How long a queue or topic stays idle before its actor stops and it sleeps (ms or
    /// with a unit; default 60 s; 0 = never), after ActiveMQ's `inactiveTimeoutBeforeGC`.
    pub inactive_timeout_before_sleep: Option<Millis>,
}

/// A back-off multiplier: a finite number, 1 or more.
fn multiplier<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let m = f64::deserialize(d)?;
    if m.is_finite() && m >= 1.0 {
        Ok(Some(m))
    } else {
        Err(serde::de::Error::custom(format!(
            "must be a number, 1 or more, not {m}"
        )))
    }
}

/// A percentage, 1 to 100.
fn percent<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    let n = i64::deserialize(d)?;
    match u8::try_from(n) {
        Ok(p @ 1..=100) => Ok(Some(p)),
        _ => Err(serde::de::Error::custom(format!(
            "must be a percentage from 1 to 100, not {n}"
        ))),
    }
}

/// A queue's name (what follows `queue://`), checked as the broker checks names.
fn queue_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let name = String::deserialize(d)?;
    crate::DestinationKey::queue(&name).map_err(serde::de::Error::custom)?;
    Ok(Some(name))
}

/// A destination pattern: `topic://` or `queue://`, then `.`-separated segments, each
/// a name, `*`, or (last only) `>`.
fn pattern<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let text = String::deserialize(d)?;
    check_pattern(&text).map_err(serde::de::Error::custom)?;
    Ok(text)
}

/// Checks a destination pattern ([`crate::DestinationPattern`]):
/// `topic://` or `queue://`, then `.`-separated segments, each a name, `*`, or (last
/// only) `>`.
pub fn check_pattern(text: &str) -> Result<(), ConfigError> {
    crate::DestinationPattern::parse(text)
        .map(drop)
        .map_err(|e| ConfigError::Pattern {
            name: e.name,
            reason: e.reason,
        })
}

/// Refuses an `[[authorization]]` pattern over temporary destinations: their rights
/// are `[temp_destination_authorization_entry]`'s, and such an entry would be read
/// and never used.
fn check_not_temporary(text: &str) -> Result<(), ConfigError> {
    match crate::DestinationPattern::parse(text) {
        Ok(pattern) if pattern.kind().capabilities().temporary => Err(ConfigError::Pattern {
            name: text.to_string(),
            reason: "[[authorization]] entries do not cover temporary destinations: give their rights in [temp_destination_authorization_entry]",
        }),
        _ => Ok(()),
    }
}

/// A count that must be at least 1 (page sizes, prefetch).
fn at_least_one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let n = u32::deserialize(d)?;
    if n == 0 {
        return Err(serde::de::Error::custom("must be at least 1"));
    }
    Ok(Some(n))
}

/// A size in bytes: an integer, or a string with a unit (`64kb`, `10mb`, `1gb`,
/// also `kib`/`mib`/`gib`; units are powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SizeVisitor)
    }
}

/// Reads a [`ByteSize`] from an integer or a string, and says what it expected
/// otherwise (an untagged enum could only say that nothing matched).
struct SizeVisitor;

impl serde::de::Visitor<'_> for SizeVisitor {
    type Value = ByteSize;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a size: a whole number of bytes, or a string with a unit such as \"64kb\"")
    }

    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<ByteSize, E> {
        Ok(ByteSize(n))
    }

    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<ByteSize, E> {
        u64::try_from(n)
            .map(ByteSize)
            .map_err(|_| E::custom(format!("invalid size {n}: a size cannot be negative")))
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ByteSize, E> {
        parse_size(text).map(ByteSize).map_err(E::custom)
    }
}

/// A duration in ms: an integer (ms), or a string with a unit (`"500ms"`, `"30s"`,
/// `"5m"`, `"1h"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Millis(pub u64);

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MillisVisitor)
    }
}

/// Reads a [`Millis`] from an integer or a string, saying what it expected otherwise.
struct MillisVisitor;

impl serde::de::Visitor<'_> for MillisVisitor {
    type Value = Millis;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a duration: a whole number of ms, or a string with a unit such as \"30s\"")
    }

    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Millis, E> {
        Ok(Millis(n))
    }

    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Millis, E> {
        u64::try_from(n).map(Millis).map_err(|_| {
            E::custom(format!(
                "invalid duration {n}: a duration cannot be negative"
            ))
        })
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Millis, E> {
        parse_duration_ms(text).map(Millis).map_err(E::custom)
    }
}

/// Parses `500ms`, `30s`, `5m`, `1h`, `250` (ms) into ms.
pub fn parse_duration_ms(text: &str) -> Result<u64, ValueError> {
    const UNITS: &[(&str, u64)] = &[
        ("", 1),
        ("ms", 1),
        ("s", 1_000),
        ("m", 60_000),
        ("min", 60_000),
        ("h", 3_600_000),
    ];
    parse_with_unit(text, "duration", "30s", "ms, s, m or h", UNITS)
}

/// Parses `64mb`, `10 MiB`, `512`, ...
pub fn parse_size(text: &str) -> Result<u64, ValueError> {
    const UNITS: &[(&str, u64)] = &[
        ("", 1),
        ("b", 1),
        ("k", 1 << 10),
        ("kb", 1 << 10),
        ("kib", 1 << 10),
        ("m", 1 << 20),
        ("mb", 1 << 20),
        ("mib", 1 << 20),
        ("g", 1 << 30),
        ("gb", 1 << 30),
        ("gib", 1 << 30),
    ];
    parse_with_unit(text, "size", "64mb", "b, kb, mb or gb", UNITS)
}

/// A whole number with an optional unit (case ignored, space allowed between) times
/// that unit's factor. Errors name `what` was expected, with `example` and the `names`
/// of the units.
fn parse_with_unit(
    text: &str,
    what: &'static str,
    example: &'static str,
    names: &'static str,
    units: &[(&str, u64)],
) -> Result<u64, ValueError> {
    let t = text.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| ValueError::NotANumber {
        what,
        text: text.to_string(),
        example,
    })?;
    let unit = unit.trim();
    let Some((_, factor)) = units.iter().find(|(name, _)| *name == unit) else {
        return Err(ValueError::Unit {
            what,
            unit: unit.to_string(),
            text: text.to_string(),
            names,
        });
    };
    n.checked_mul(*factor).ok_or_else(|| ValueError::TooLarge {
        what,
        text: text.to_string(),
    })
}

/// A duration or size that cannot be read ([`parse_duration_ms`], [`parse_size`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// No whole number first.
    #[error("invalid {what} `{text}`: expected a number with an optional unit like {example}")]
    NotANumber {
        /// `duration` or `size`.
        what: &'static str,
        /// The text as given.
        text: String,
        /// A value that would do.
        example: &'static str,
    },
    /// A unit it does not know.
    #[error("invalid {what} unit `{unit}` in `{text}`: use {names}")]
    Unit {
        /// `duration` or `size`.
        what: &'static str,
        /// The unit as given (lower case).
        unit: String,
        /// The text as given.
        text: String,
        /// The units it knows.
        names: &'static str,
    },
    /// Over `u64` once multiplied by its unit.
    #[error("{what} `{text}` is too large")]
    TooLarge {
        /// `duration` or `size`.
        what: &'static str,
        /// The text as given.
        text: String,
    },
}

/// Why a configuration file cannot be used. The texts are what `ebb serve` prints:
/// they name the file, and for TOML errors the line, column and key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read configuration {}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// What is wrong in the file `path`.
    #[error("configuration {}: {source}", path.display())]
    In {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        source: Box<ConfigError>,
    },
    /// The TOML's own errors, each with its line (every bad `key = value` line, up
    /// to [`MAX_REPORTED_ERRORS`]).
    #[error("{}", syntax_text(.0))]
    Syntax(Vec<String>),
    /// A destination pattern of an `[[authorization]]` entry that does not parse, or
    /// that names temporary destinations (their rights are
    /// `[temp_destination_authorization_entry]`'s).
    #[error("destination pattern `{name}`: {reason}")]
    Pattern {
        /// The pattern's name part.
        name: String,
        /// Why it does not parse.
        reason: &'static str,
    },
    /// Users that cannot be used.
    #[error(transparent)]
    Users(#[from] crate::auth::UsersError),
    /// A `[virtual_topics]` or `[[composite]]` setting that cannot be used.
    #[error("{0}")]
    Routing(String),
    /// A `[[policy]]` entry the broker cannot honour (an invalid destination pattern, a
    /// setting its kind does not offer: [`crate::PolicyMap::check`]).
    #[error("{0}")]
    Policy(String),
    /// A listener's address given both as `[listeners.NAME]` and by an older key.
    #[error("{new} and {old} both give the listener's address: keep {new} (the older key is still read alone)")]
    ListenerTwice {
        /// The new key.
        new: &'static str,
        /// The older key.
        old: &'static str,
    },
}

/// One TOML error as it is, or `N errors:` and each on a line.
fn syntax_text(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        all => format!("{} errors:\n{}", all.len(), all.join("\n")),
    }
}

/// Most errors one configuration file reports at once.
pub const MAX_REPORTED_ERRORS: usize = 20;

/// Every error of `text`, `first` first: the line of each bad `key = value` is left
/// out (made a comment, so lines keep their numbers) and the text parsed again, until
/// it parses, an error is not on such a line (a table header, a missing key: later
/// errors would be guesses), or [`MAX_REPORTED_ERRORS`].
fn every_error(text: &str, first: toml::de::Error) -> ConfigError {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut errors = vec![first.to_string()];
    let mut error = first;
    while errors.len() < MAX_REPORTED_ERRORS {
        let Some(span) = error.span() else { break };
        let line = text[..span.start.min(text.len())].matches('\n').count();
        let Some(bad) = lines.get(line) else { break };
        let trimmed = bad.trim_start();
        if trimmed.starts_with('[') || !trimmed.contains('=') || trimmed.starts_with('#') {
            break;
        }
        lines[line] = format!("# {bad}");
        match toml::from_str::<FileConfig>(&lines.join("\n")) {
            Ok(_) => break,
            Err(next) => {
                errors.push(next.to_string());
                error = next;
            }
        }
    }
    ConfigError::Syntax(errors)
}

impl FileConfig {
    /// Reads and checks `path`. The error names the file, and for TOML errors the
    /// line, column and key.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|source| ConfigError::In {
            path: path.to_path_buf(),
            source: Box::new(source),
        })
    }

    /// Parses a configuration file's text (TOML). Errors: the TOML's own (with its
    /// line), or a rule it breaks (an unknown right, an invalid pattern), as text.
    /// Every bad `key = value` line is reported at once, each with its line (up to
    /// [`MAX_REPORTED_ERRORS`]), not only the first.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let config: FileConfig = match toml::from_str(text) {
            Ok(config) => config,
            Err(first) => return Err(every_error(text, first)),
        };
        config.check_listeners()?;
        config.policies().check().map_err(ConfigError::Policy)?;
        config.routing()?;
        config.security().validate()?;
        for entry in &config.authorization {
            check_pattern(&entry.destination)?;
            check_not_temporary(&entry.destination)?;
        }
        Ok(config)
    }

    /// `[virtual_topics]` and `[[composite]]` as the broker takes them. Errors
    /// ([`ConfigError::Routing`]): a name or forward that is not a destination, a
    /// selector that does not parse, a composite without forwards, named twice, or
    /// forwarding to a composite, an empty prefix.
    pub fn routing(&self) -> Result<crate::RoutingConfig, ConfigError> {
        let bad = |text: String| ConfigError::Routing(text);
        let v = &self.virtual_topics;
        let defaults = crate::VirtualTopics::default();
        let virtual_topics = crate::VirtualTopics {
            enabled: v.enabled.unwrap_or(defaults.enabled),
            topic_prefix: v.topic_prefix.clone().unwrap_or(defaults.topic_prefix),
            consumer_prefix: v
                .consumer_prefix
                .clone()
                .unwrap_or(defaults.consumer_prefix),
            transacted_send: v.transacted_send.unwrap_or(defaults.transacted_send),
        };
        for (key, prefix) in [
            ("topic_prefix", &virtual_topics.topic_prefix),
            ("consumer_prefix", &virtual_topics.consumer_prefix),
        ] {
            let segments: Vec<&str> = prefix.split('.').collect();
            let plain = segments.len() >= 2
                && segments.last() == Some(&"")
                && segments[..segments.len() - 1]
                    .iter()
                    .all(|s| !s.is_empty() && *s != "*" && *s != ">")
                && !prefix.contains(',')
                && !prefix.contains("://")
                && !prefix.chars().any(char::is_control);
            if !plain {
                return Err(bad(format!(
                    "[virtual_topics] {key} = \"{prefix}\": give whole name segments ending with a dot, without wildcards or commas (\"VirtualTopic.\", \"Consumer.\")"
                )));
            }
        }
        if virtual_topics.topic_prefix.is_empty() || virtual_topics.consumer_prefix.is_empty() {
            return Err(bad(
                "[virtual_topics]: topic_prefix and consumer_prefix cannot be empty".into(),
            ));
        }
        let mut composites: Vec<crate::CompositeDestination> = Vec::new();
        for c in &self.composite {
            let name = crate::DestinationKey::parse(&c.name)
                .map_err(|e| bad(format!("[[composite]] name: {e}")))?;
            if crate::is_advisory(&name) {
                return Err(bad(format!(
                    "[[composite]] `{}`: advisory topics are the broker's, not a composite's name",
                    c.name
                )));
            }
            if composites.iter().any(|other| other.name == name) {
                return Err(bad(format!("[[composite]] `{}` is given twice", c.name)));
            }
            if c.forward.is_empty() {
                return Err(bad(format!(
                    "[[composite]] `{}` has no [[composite.forward]]",
                    c.name
                )));
            }
            let mut forwards = Vec::new();
            for f in &c.forward {
                let destination = crate::DestinationKey::parse(&f.destination)
                    .map_err(|e| bad(format!("[[composite]] `{}` forward: {e}", c.name)))?;
                if crate::is_advisory(&destination) {
                    return Err(bad(format!(
                        "[[composite]] `{}` forwards to `{}`: advisory topics are written by the broker only",
                        c.name, f.destination
                    )));
                }
                let selector = match &f.selector {
                    Some(text) => Some(crate::Selector::parse(text).map_err(|e| {
                        bad(format!(
                            "[[composite]] `{}` forward to `{}`: selector: {e}",
                            c.name, f.destination
                        ))
                    })?),
                    None => None,
                };
                forwards.push(crate::Forward {
                    destination,
                    selector,
                });
            }
            composites.push(crate::CompositeDestination { name, forwards });
        }
        for c in &composites {
            if let Some(f) = c
                .forwards
                .iter()
                .find(|f| composites.iter().any(|o| o.name == f.destination))
            {
                return Err(bad(format!(
                    "[[composite]] `{}` forwards to `{}`, itself a composite: forwards are not followed, forward to its destinations",
                    c.name.stomp(),
                    f.destination.stomp()
                )));
            }
        }
        Ok(crate::RoutingConfig {
            virtual_topics,
            composites,
        })
    }

    /// The users and authorization entries.
    pub fn security(&self) -> crate::auth::Security {
        crate::auth::Security {
            users: self.users.clone(),
            authorization: self.authorization.clone(),
            temp_destination_authorization_entry: self.temp_destination_authorization_entry.clone(),
            login_guard: Default::default(),
        }
    }

    /// The policy map, entries in file order (the first match wins).
    pub fn policies(&self) -> PolicyMap {
        let entries = self
            .policy
            .iter()
            .map(|p| {
                let d = Policy::default();
                PolicyEntry {
                    destination: p.destination.clone(),
                    policy: Policy {
                        expire_messages_period: p
                            .expire_messages_period
                            .map_or(d.expire_messages_period, |m| m.0),
                        max_expire_page_size: p
                            .max_expire_page_size
                            .unwrap_or(d.max_expire_page_size),
                        prioritized_messages: p
                            .prioritized_messages
                            .unwrap_or(d.prioritized_messages),
                        durable_prefetch: p.durable_prefetch.unwrap_or(d.durable_prefetch),
                        topic_prefetch: p.topic_prefetch.unwrap_or(d.topic_prefetch),
                        expire_online_durable_subscriptions: p
                            .expire_online_durable_subscriptions
                            .unwrap_or(d.expire_online_durable_subscriptions),
                        max_pending_non_durable: p
                            .max_pending_non_durable
                            .unwrap_or(d.max_pending_non_durable),
                        queue_prefetch: p.queue_prefetch.unwrap_or(d.queue_prefetch),
                        max_page_size: p.max_page_size.unwrap_or(d.max_page_size),
                        max_browse_page_size: p
                            .max_browse_page_size
                            .unwrap_or(d.max_browse_page_size),
                        maximum_redeliveries: p
                            .maximum_redeliveries
                            .unwrap_or(d.maximum_redeliveries),
                        initial_redelivery_delay: p
                            .initial_redelivery_delay
                            .map_or(d.initial_redelivery_delay, |m| m.0),
                        redelivery_delay: p
                            .redelivery_delay
                            .or(p.initial_redelivery_delay)
                            .map_or(d.redelivery_delay, |m| m.0),
                        use_exponential_backoff: p
                            .use_exponential_backoff
                            .unwrap_or(d.use_exponential_backoff),
                        backoff_multiplier: p.backoff_multiplier.unwrap_or(d.backoff_multiplier),
                        maximum_redelivery_delay: p
                            .maximum_redelivery_delay
                            .map_or(d.maximum_redelivery_delay, |m| m.0),
                        dead_letter_queue: p.dead_letter_queue.clone().or(d.dead_letter_queue),
                        dead_letter_expired: p.dead_letter_expired.unwrap_or(d.dead_letter_expired),
                        memory_limit: p.memory_limit.map_or(d.memory_limit, |b| b.0),
                        cursor_memory_high_water_mark: p
                            .cursor_memory_high_water_mark
                            .unwrap_or(d.cursor_memory_high_water_mark),
                        inactive_timeout_before_sleep: p
                            .inactive_timeout_before_sleep
                            .map_or(d.inactive_timeout_before_sleep, |m| m.0),
                    },
                }
            })
            .collect();
        PolicyMap { entries }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_have_sections_of_their_own_and_the_older_keys_still_work() {
        let c = FileConfig::parse(
            "[listeners.stomp]\nlisten = \"0.0.0.0:61613\"\n\
             [listeners.stomp_tls]\nlisten = \"0.0.0.0:61614\"\n\
             [listeners.http]\nlisten = \"127.0.0.1:8161\"\n",
        )
        .unwrap();
        assert_eq!(
            c.listen_address(Listener::Stomp),
            Some(("0.0.0.0:61613", "[listeners.stomp] listen"))
        );
        assert_eq!(
            c.listen_address(Listener::StompTls),
            Some(("0.0.0.0:61614", "[listeners.stomp_tls] listen"))
        );
        assert_eq!(
            c.listen_address(Listener::Http),
            Some(("127.0.0.1:8161", "[listeners.http] listen"))
        );
        let old = FileConfig::parse(
            "[stomp]\nlisten = \"127.0.0.1:1\"\nssl_listen = \"127.0.0.1:2\"\n\
             [metrics]\nlisten = \"127.0.0.1:3\"\n",
        )
        .unwrap();
        assert_eq!(
            old.listen_address(Listener::Stomp),
            Some(("127.0.0.1:1", "[stomp] listen"))
        );
        assert_eq!(
            old.listen_address(Listener::StompTls),
            Some(("127.0.0.1:2", "[stomp] ssl_listen"))
        );
        assert_eq!(
            old.listen_address(Listener::Http),
            Some(("127.0.0.1:3", "[metrics] listen"))
        );
        assert_eq!(
            FileConfig::parse("")
                .unwrap()
                .listen_address(Listener::Http),
            None
        );
        let both = FileConfig::parse(
            "[stomp]\nlisten = \"127.0.0.1:1\"\n[listeners.stomp]\nlisten = \"127.0.0.1:2\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            both.contains("[listeners.stomp] listen and [stomp] listen both"),
            "{both}"
        );
        let unknown = FileConfig::parse("[listeners.amqp]\nlisten = \"127.0.0.1:5672\"\n")
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("amqp"), "{unknown}");
        let typo = FileConfig::parse("[listeners.stomp]\nlisen = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(typo.contains("lisen"), "{typo}");
    }

    #[test]
    fn temporary_destinations_are_bounded_under_usage() {
        let d = FileConfig::parse("").unwrap().usage.usage();
        assert_eq!(
            (
                d.max_temporary_destinations,
                d.max_temporary_destinations_per_user
            ),
            (10_000, 1_000)
        );
        let c = FileConfig::parse(
            "[usage]\nmax_temporary_destinations = 50\nmax_temporary_destinations_per_user = 0\n",
        )
        .unwrap()
        .usage
        .usage();
        assert_eq!(
            (
                c.max_temporary_destinations,
                c.max_temporary_destinations_per_user
            ),
            (50, 0)
        );
        let e = FileConfig::parse("[usage]\nmax_temporary_destinations = -1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_temporary_destinations"), "{e}");
    }

    #[test]
    fn temporary_destinations_have_an_entry_of_their_own() {
        let c = FileConfig::parse(
            "[temp_destination_authorization_entry]\nread = [\"ops\"]\nwrite = [\"*\"]\nadmin = [\"apps\"]\n",
        )
        .unwrap();
        let entry = c.security().temp_destination_authorization_entry.unwrap();
        assert_eq!(
            (entry.read, entry.write, entry.admin),
            (
                vec!["ops".to_string()],
                vec!["*".to_string()],
                vec!["apps".to_string()]
            )
        );
        assert!(FileConfig::parse("")
            .unwrap()
            .security()
            .temp_destination_authorization_entry
            .is_none());
        let e = FileConfig::parse("[temp_destination_authorization_entry]\nbrowse = [\"ops\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `browse`"), "{e}");
        // An [[authorization]] entry over temporary destinations would never be used.
        let e = FileConfig::parse(
            "[[authorization]]\ndestination = \"temp-queue://>\"\nwrite = [\"*\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("give their rights in [temp_destination_authorization_entry]"),
            "{e}"
        );
    }

    #[test]
    fn the_redelivery_policy_reads_activemqs_names() {
        let c = FileConfig::parse(
            "[[policy]]\ndestination = \"queue://jobs.>\"\ninitial_redelivery_delay = \"1s\"\n\
             use_exponential_backoff = true\nbackoff_multiplier = 2.5\nmaximum_redelivery_delay = \"1m\"\n",
        )
        .unwrap();
        let q = c
            .policies()
            .policy_for(&crate::DestinationKey::queue("jobs.eu").unwrap());
        assert_eq!(
            (
                q.initial_redelivery_delay,
                q.redelivery_delay,
                q.maximum_redelivery_delay
            ),
            (1_000, 1_000, 60_000),
            "redelivery_delay defaults to initial_redelivery_delay"
        );
        assert!(q.use_exponential_backoff);
        assert_eq!(q.backoff_multiplier, 2.5);
        for bad in ["0.5", "-1", "nan"] {
            let e = FileConfig::parse(&format!(
                "[[policy]]\ndestination = \"queue://>\"\nbackoff_multiplier = {bad}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("backoff_multiplier") || e.contains("1 or more"),
                "{bad}: {e}"
            );
        }
    }

    /// `prioritized_messages` is offered on topics only: on a queue kind it is refused
    /// (it was accepted and ignored: priorities 1, 9, 4, 7 came in send order), as is
    /// a policy whose destination is not a pattern.
    #[test]
    fn a_policy_a_destination_would_ignore_is_refused() {
        let on = |destination: &str| {
            FileConfig::parse(&format!(
                "[[policy]]\ndestination = \"{destination}\"\nprioritized_messages = true\n"
            ))
        };
        assert!(on("topic://>").is_ok());
        for queue in ["queue://>", "lvq://prices", "temp-queue://>"] {
            let e = on(queue).unwrap_err().to_string();
            assert!(
                e.contains(queue) && e.contains("prioritized_messages is offered on topics only"),
                "{queue}: {e}"
            );
        }
        let e = FileConfig::parse("[[policy]]\ndestination = \"jobs\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("jobs") && e.contains("destination"), "{e}");
    }

    #[test]
    fn the_readme_shape_parses() {
        let c = FileConfig::parse(
            r#"
[store]
url = "sqlite://ebb-data/ebb.db"

[stomp]
listen = "127.0.0.1:61613"
max_frame_size = "64kb"
pipeline_frames = 500
pipeline_bytes = "4mb"
allow_link_stealing = true
max_connections = 5000
max_connections_per_address = 50
max_subscriptions = 200
max_open_transactions = 10
max_transaction_frames = 500
max_unacked = 2000
max_transaction_size = "1mb"
max_headers = 100
max_header_size = "8kb"

[usage]
memory = "64mb"
store = "10gb"

[[policy]]
destination = "topic://>"
expire_messages_period = "30s"
max_expire_page_size = 400

[[policy]]
destination = "queue://jobs.>"
maximum_redeliveries = 2
dead_letter_queue = "ActiveMQ.DLQ"
memory_limit = "1mb"
"#,
        )
        .unwrap();
        let usage = c.usage.usage();
        assert_eq!((usage.memory, usage.store), (64 << 20, 10 << 30));
        assert!(!usage.send_fail_if_no_space);
        let q = c
            .policies()
            .policy_for(&crate::DestinationKey::queue("jobs.eu").unwrap());
        assert_eq!((q.maximum_redeliveries, q.memory_limit), (2, 1 << 20));
        assert_eq!(q.dead_letter_queue_for("jobs.eu"), "ActiveMQ.DLQ");
        assert_eq!(q.queue_prefetch, 1000);
        assert_eq!(c.store.url.as_deref(), Some("sqlite://ebb-data/ebb.db"));
        assert_eq!(c.stomp.max_frame_size, Some(ByteSize(64 * 1024)));
        assert_eq!(c.stomp.pipeline_frames, Some(500));
        assert_eq!(c.stomp.allow_link_stealing, Some(true));
        assert_eq!(c.stomp.pipeline_bytes, Some(ByteSize(4 << 20)));
        let s = &c.stomp;
        assert_eq!(
            (s.max_connections, s.max_connections_per_address),
            (Some(5000), Some(50))
        );
        assert_eq!(
            (
                s.max_subscriptions,
                s.max_open_transactions,
                s.max_transaction_frames
            ),
            (Some(200), Some(10), Some(500))
        );
        assert_eq!(s.max_transaction_size, Some(ByteSize(1 << 20)));
        assert_eq!(s.max_unacked, Some(2000));
        assert_eq!(
            (s.max_headers, s.max_header_size),
            (Some(100), Some(ByteSize(8 << 10)))
        );
        let p = c
            .policies()
            .policy_for(&crate::DestinationKey::topic("orders").unwrap());
        assert_eq!(p.max_expire_page_size, 400);
        assert_eq!(p.durable_prefetch, 100);
    }

    #[test]
    fn the_cursor_high_water_mark_is_a_percentage() {
        let c = FileConfig::parse(
            "[[policy]]\ndestination = \"queue://>\"\ncursor_memory_high_water_mark = 50\n",
        )
        .unwrap();
        let policies = c.policies();
        assert_eq!(policies.entries[0].policy.cursor_memory_high_water_mark, 50);
        for bad in ["0", "101", "-5"] {
            let e = FileConfig::parse(&format!(
                "[[policy]]\ndestination = \"queue://>\"\ncursor_memory_high_water_mark = {bad}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(e.contains("from 1 to 100") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn every_bad_line_is_reported_at_once() {
        let e = FileConfig::parse(
            "[stomp]\nmax_connections = \"many\"\nbogus = 1\nheartbeat_ms = [\"1 week\", 0]\n\
             [[policy]]\ndestination = \"queue://>\"\nmax_page_size = -3\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("4 errors:"), "{e}");
        for line in ["line 2", "line 3", "line 4", "line 7"] {
            assert!(e.contains(line), "{line} in {e}");
        }
        // One error reads as before.
        let e = FileConfig::parse("[stomp]\nbogus = 1\n")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("errors:") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn durations_take_ms_or_a_unit() {
        let c = FileConfig::parse(
            "[stomp]\nheartbeat_ms = [\"5s\", 2500]\nstall_timeout_ms = \"1m\"\n\
             [usage]\nsend_fail_if_no_space_after_timeout = \"500ms\"\n",
        )
        .unwrap();
        assert_eq!(c.stomp.heartbeat_ms, Some([Millis(5000), Millis(2500)]));
        assert_eq!(c.stomp.stall_timeout_ms, Some(Millis(60_000)));
        assert_eq!(
            c.usage.usage().send_fail_if_no_space_after_timeout,
            Some(500)
        );
        assert_eq!(parse_duration_ms("1h"), Ok(3_600_000));
        for (bad, says) in [
            ("stall_timeout_ms = \"soon\"", "invalid duration `soon`"),
            (
                "stall_timeout_ms = \"5 weeks\"",
                "invalid duration unit `weeks`",
            ),
            ("stall_timeout_ms = -5", "cannot be negative"),
            ("stall_timeout_ms = 1.5", "a duration: a whole number of ms"),
        ] {
            let e = FileConfig::parse(&format!("[stomp]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says) && e.contains("line 2"), "{bad}: {e}");
        }
        let e = FileConfig::parse("[stomp]\nmax_header_size = true\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a size: a whole number of bytes"), "{e}");
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_line_and_key() {
        let e = FileConfig::parse("[stomp]\nlisten = \"x\"\nbogus = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("bogus"), "{e}");
        let e = FileConfig::parse(
            "[[policy]]\ndestination = \"topic://>\"\nmax_expire_page_size = -1\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 3"), "{e}");
        let e = FileConfig::parse("[stomp]\nmax_frame_size = \"10 parsecs\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("parsecs"), "{e}");
        let e = FileConfig::parse("[[policy]]\ndestination = \"orders\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("topic://") && e.contains("line 2"), "{e}");
        let e = FileConfig::parse("[[policy]]\ndestination = \"topic://a.>.b\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("last segment") && e.contains("line 2"), "{e}");
        let e = FileConfig::parse(
            "[[policy]]\ndestination = \"topic://>\"\nmax_expire_page_size = 0\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("at least 1") && e.contains("line 3"), "{e}");
        for bad in ["\"a.*\"", "\"\""] {
            let text =
                format!("[[policy]]\ndestination = \"queue://>\"\ndead_letter_queue = {bad}\n");
            let e = FileConfig::parse(&text).unwrap_err().to_string();
            assert!(
                e.contains("line 3") && e.contains("invalid destination"),
                "{e}"
            );
        }
    }

    #[test]
    fn metrics_listen_is_read_and_checked() {
        let c = FileConfig::parse("[metrics]\nlisten = \"127.0.0.1:9404\"\n").unwrap();
        assert_eq!(c.metrics.listen.as_deref(), Some("127.0.0.1:9404"));
        assert_eq!(FileConfig::parse("").unwrap().metrics.listen, None);
        let e = FileConfig::parse("[metrics]\nport = 9404\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("port"), "{e}");
    }

    #[test]
    fn sizes_take_units() {
        assert_eq!(parse_size("64mb").unwrap(), 64 << 20);
        assert_eq!(parse_size("10 MiB").unwrap(), 10 << 20);
        assert_eq!(parse_size("512").unwrap(), 512);
        assert!(parse_size("mb").is_err());
        assert!(parse_size("99999999999gb").is_err());
    }

    #[test]
    fn routing_sections_are_read_and_checked() {
        let c = FileConfig::parse(
            "[virtual_topics]\ntopic_prefix = \"VT.\"\ntransacted_send = true\n\n[[composite]]\nname = \"/queue/all\"\n[[composite.forward]]\ndestination = \"/queue/eu\"\nselector = \"region = 'eu'\"\n[[composite.forward]]\ndestination = \"topic://audit\"\n",
        )
        .unwrap();
        let routing = c.routing().unwrap();
        assert_eq!(routing.virtual_topics.topic_prefix, "VT.");
        assert_eq!(routing.virtual_topics.consumer_prefix, "Consumer.");
        assert!(routing.virtual_topics.enabled && routing.virtual_topics.transacted_send);
        assert_eq!(routing.composites[0].forwards.len(), 2);
        assert_eq!(
            routing.composites[0].forwards[0]
                .selector
                .as_ref()
                .unwrap()
                .text(),
            "region = 'eu'"
        );
        for (bad, why) in [
            ("[virtual_topics]\ntopic_prefix = \">\"\n", "ending with a dot"),
            ("[virtual_topics]\nconsumer_prefix = \"*.\"\n", "ending with a dot"),
            ("[virtual_topics]\ntopic_prefix = \"VT,\"\n", "ending with a dot"),
            ("[virtual_topics]\nconsumer_prefix = \"Consumer\"\n", "ending with a dot"),
            ("[[composite]]\nname = \"/queue/x\"\nforward = []\n", "has no"),
            ("[[composite]]\nname = \"/queue/x\"\n[[composite.forward]]\ndestination = \"/topic/ActiveMQ.Advisory.Queue\"\n", "broker only"),
            ("[[composite]]\nname = \"/topic/ActiveMQ.Advisory.Queue\"\n[[composite.forward]]\ndestination = \"/queue/y\"\n", "broker's"),
            ("[[composite]]\nname = \"/queue/x\"\n[[composite.forward]]\ndestination = \"/queue/y\"\nselector = \"a =\"\n", "selector"),
        ] {
            let e = FileConfig::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
