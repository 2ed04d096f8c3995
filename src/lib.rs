//! # Ebb: a message-broker core
//!
//! Queues and topics with durable subscriptions, persistent messages in a SQL store
//! (SQLite embedded, PostgreSQL for production), built from actix actors, in the line
//! of ActiveMQ Classic, without its two expiry faults: expiry reads bounded pages, and
//! it never acks a live message. This page is the map and the design; each module's
//! own documentation says what it owns.
//!
//! ## Map of Ebb
//!
//! Three crates, layered one way: `ebb` → `ebb-actors` → `ebb-store`. The store knows
//! nothing of actors, the actors nothing of STOMP, and a protocol (STOMP, MQTT) knows
//! only [`Broker`] and the protocol-neutral [`transport`].
//!
//! | layer | where | what |
//! |---|---|---|
//! | store | [`ebb_store`] (`store/`) | the schema, every SQL statement, the async store API; each read bounded in SQL |
//! | actors | [`ebb_actors`] (`actors/`) | the registry, one actor per destination over a shared destination core, the store actor (the only writer), memory usage |
//! | embedding API | [`broker`] | [`Broker`]: send, subscribe, ack, transactions, browse, stats, shutdown |
//! | transport | [`transport`] | what every protocol shares, naming none: the [`transport::Protocol`] seam, the TCP/TLS listener, connection caps, the registry of open connections, client-id claims |
//! | STOMP | [`stomp`] | one protocol, whole: frames and their codec (no broker types), a typed [`stomp::command`] parsed from each frame, a [`stomp::session`] that applies commands to [`Broker`], the socket loop ([`stomp::connection`]) |
//! | configuration | [`config`], [`auth`], [`login_guard`] | the TOML file, users and rights by destination pattern, refused logins per client address (every protocol) |
//! | operators' views | [`stats`], [`metrics`], [`history`], [`process`], [`admin`] | snapshots ([`Broker::stats`]), Prometheus metrics (the recorder behind the `prometheus` feature), rates and depths over time in bounded memory for the console's charts, the process's memory, the admin calls (destinations and durable subscriptions in bounded pages, a store ping) |
//! | MQTT | [`mqtt`] | the second protocol, whole and beside STOMP on the same destinations: 3.1.1 and 5.0 packets through a maintained codec ([`mqtt::wire`]), topics as Ebb's ([`mqtt::topic`]: `a/b` is `topic://a.b`), one connection's session ([`mqtt::session`]: QoS 0/1/2 answered after commit, persistent sessions as durable subscriptions with 5.0's expiry ([`mqtt::expiry`]), `$share` groups as queues ([`Broker::join_shared_subscription`]), takeover, wills) |
//! | HTTP | `http` (feature `http`, part of `cli`) | one axum server: `/metrics`, `/healthz`, `/readyz`, the JSON admin API over [`admin`] and [`Broker`], the web console (a static page over that API), STOMP over WebSocket through the same [`stomp::connection`] as TCP |
//! | server | [`server`] | [`server::Server`]: a broker with its listeners (STOMP, STOMP over TLS, MQTT, MQTT over TLS, HTTP) started and stopped as one; `ebb serve`, the test harness and the benches all start theirs through it |
//! | TLS | `tls` (feature `tls`, part of `cli`) | rustls acceptors from PEM files: STOMP over TLS (a second listener) and `https`/`wss` |
//! | tools | `cli` | the `ebb` binary's commands (`serve`, `stat`, `soak`, `passwd`, `check`), behind the default `cli` feature; nothing outside it imports from it |
//!
//! An embedder who writes `ebb = { default-features = false }` compiles none of the
//! tools' dependencies (clap, plotters, indicatif, ureq, anyhow).
//!
//! ## Names
//!
//! A destination is named once, where it enters (a STOMP `destination` header, the
//! configuration file, a call to [`Broker`]), as a [`DestinationKey`] (kind and plain
//! name), and carried as one from there on. Its text forms: `queue://jobs` (the store's
//! `container` column, policies, metrics) and `/queue/jobs` (ActiveMQ's STOMP form),
//! each accepted by the API and by STOMP alike and meaning the same; a name without
//! its kind is refused in both ([`DestinationKey::parse`]). Patterns (`topic://orders.>`) select destinations for
//! policies and rights ([`actors::destination::DestinationPattern`]), and a
//! subscription may name one ([`Target`]): a wildcard destination.
//!
//! A temporary destination (`temp-queue://`, `temp-topic://`) belongs to a connection
//! (a STOMP session, or a [`TemporaryQueue`]): the connection names it in its own
//! namespace (`/temp-queue/replies`) and the broker gives it a broker-wide name
//! with 128 random bits in it, so no one guesses it ([`Broker::temporary`]); only that
//! connection consumes from it, a send to one whose
//! connection has ended is refused, and it is deleted with its messages when its
//! connection ends (and at start, what a previous run left). Connections are numbered
//! by [`next_connection_id`], one counter for every way in.
//!
//! ## Routing: one send, several destinations
//!
//! A send may reach more than the destination it names ([`Broker::routes_of`], the
//! rules in `broker/routing.rs`): a composite (ActiveMQ's `/queue/a,/topic/b`,
//! [`DestinationKey::parse_composite`], or a configured [`CompositeDestination`]
//! with a selector per [`Forward`]) is stored at all its destinations in one store
//! transaction, all or none, by the broker's committer, which writes the composite
//! sends waiting for it together while their senders go on (`broker/composite.rs`; a
//! scheduled one is a transaction of its own under an xid of [`ROUTED_XID_PREFIX`],
//! rolled back at start if a crash left it prepared); a virtual topic (`VirtualTopic.X`, on by
//! default, [`VirtualTopics`]) also delivers to each consumer group's queue
//! `Consumer.<g>.VirtualTopic.X`, a group being stored from its first subscription
//! on, each copy a send of its own unless `transacted_send`. Virtual topics and
//! composites are routing over the kinds of the table, not kinds: a group's queue is a
//! queue, the virtual topic a topic. The broker also reports what happens to
//! destinations on ActiveMQ's advisory topics ([`ADVISORY_PREFIX`], built only while
//! someone subscribes; `broker/advisory.rs`), from events the actors emit
//! ([`ebb_actors::events::Events`]).
//!
//! ## Actors and who owns what
//!
//! | actor | owns | never does |
//! |---|---|---|
//! | registry (`BrokerActor`) | one map of running destinations by key, the policies, the wildcard subscriptions' watches, the shutdown sequence | dispatch, SQL writes |
//! | wildcard subscription | one attachment per matching destination, the consumer's delivery order and prefetch | hold messages of its own in the store |
//! | topic | its subscriptions (durable and not), their cursors and prefetch, cleanup of acked rows | write to the store itself |
//! | queue | its consumers, its cursor, redelivery counts, dead letters | write to the store itself |
//! | store actor | every write, batched while a transaction is in flight (group commit); mark updates in order | decide what to expire or dispatch |
//!
//! Every actor of a broker runs on one actix system ([`runtime`]): the caller's, when
//! the broker is started on one, else a thread of the broker's own; the embedding
//! API's handles only send messages to them and await answers, so they work from any
//! async runtime.
//!
//! What every destination shares (publish order, prepared messages of open
//! transactions, the housekeeping schedule, the counters) is one set of plain parts in
//! [`actors::destination`]; a destination actor writes only its dispatch and its expiry
//! page. Reads that do not race writes (a cursor's next page, an expiry page) go to the
//! store's pool directly, each bounded in SQL (`LIMIT`, keyset pagination): no
//! statement returns a number of rows that grows with the backlog.
//!
//! ## Durable subscriptions and the high-water mark
//!
//! A durable subscription's progress is its mark (`last_acked_id`, as ActiveMQ's
//! `LAST_ACKED_ID`): every message with a lower or equal id is done for it. A new
//! subscription starts at the highest id (not retroactive). The mark only moves
//! forward, only through the store actor, and only over messages really done; acks
//! that arrive out of order are kept above it (persisted) until the gap before them
//! closes.
//!
//! **The rule that prevents ActiveMQ's data loss:** expiry may move a mark only over
//! the run of expired messages directly after it, stopping at the first message that
//! is not expired or belongs to a prepared transaction; per priority with prioritized
//! messages. A message without TTL before expired ones keeps the mark where it is.
//! A topic's expiry acks the expired messages behind such a message individually
//! (kept above the mark, as any out-of-order ack), and deletes each one that every
//! durable subscription is done with, by its mark or an individual ack, with those
//! acks: a live message at the head does not keep the expired ones behind it stored.
//!
//! ## Expiry: bounded, chunked housekeeping (Qpid's QPID-7364)
//!
//! Each destination has a housekeeping timer (`expire_messages_period`, 30,000 ms) that
//! runs only while the destination has seen a message with an expiration. A page reads
//! at most `max_expire_page_size` (400) rows in one bounded statement; a full page
//! sends the next one through the destination's own mailbox at once, behind the sends
//! and acks already waiting; a short page ends the run. Pages of all destinations share
//! a fair budget of permits, so a destination with a million expired messages delays a
//! small one by a few pages at most. Shutdown stops the timers, lets pages in flight
//! finish, flushes the store actor and closes the store last.
//!
//! Housekeeping never starves live traffic: its writes (expiry acks, deletes of
//! expired rows, cleanup batches) wait in a lane of their own in the store actor
//! (`actors::store_actor::Lane`), never share a transaction with a publish or a
//! consumer's ack, and, while live writes come, take at most 2 % of the store's
//! measured time (`HOUSEKEEPING_SHARE`); with no live write they run back to back.
//!
//! ## What a consumer receives: honoured or refused, never ignored
//!
//! A header or option that changes what a client receives is either honoured or
//! refused with an error ([`stomp::command`] lists the refused ones); an ignored
//! `browser:true` elsewhere consumed a whole queue. Honoured:
//! - **Selectors** ([`actors::selector`], JMS SQL-92) on queues and topics, durable or
//!   not. A queue never lets messages no consumer takes hide the ones a selector wants
//!   (ActiveMQ's page stops at 200 such messages; Artemis's depaging waits for the
//!   backlog ahead): a consumer that finds nothing in memory scans the store beyond the
//!   cursor in bounded pages, once, remembering its position; header equalities are
//!   tested in SQL over windows of ids ([`ebb_store::MessageStore::scan_matching`], the
//!   `hdrs` column). A durable subscription's mark passes the messages its selector
//!   does not match (they are acked for it, uncounted), so cleanup can delete them.
//! - **Browsing** a queue (STOMP `browser:true`, [`Broker::browse_queue`]): pages in
//!   queue order, nothing consumed, then an end marker.
//! - **Exclusive consumers and message groups** on queues; **noLocal** on non-durable
//!   topic subscriptions.
//! - **Wildcard subscriptions** (ActiveMQ's: `.` separates elements, `*` matches one,
//!   `>` the rest): one [`actors::wildcard::WildcardActor`] per subscription attaches
//!   an ordinary subscription to each matching destination (running ones, those the
//!   store holds, and those the registry starts later), numbers their deliveries in
//!   one order and sends each ack back where its message came from. A durable one is
//!   a definition in a container of its own (`wildcard:topic://orders.>`) plus one
//!   subscription per matching topic; the registry loads the definitions at start
//!   and hands each topic it starts the ones that match, so a topic created while the
//!   subscriber is away keeps its messages. Sending to a wildcard is refused.
//! - **Identity**: a client id is connected once (or, with link stealing, the newer
//!   connection closes the older); a durable subscription is `(client id, name)` across
//!   topics, and subscribing it to another topic or with another selector creates it
//!   anew (JMS).
//!
//! ## One active broker per store: locks, leases, standbys
//!
//! Ids are assigned by the broker that holds the store, so one broker holds it at a
//! time: a lock file on SQLite, a session advisory lock on PostgreSQL, both released
//! when the holder dies. For high availability on PostgreSQL
//! ([`ebb_store::LeaseOptions`], `ebb serve --standby`) the lock is a lease row
//! instead: the active broker renews it on a connection of its own, a standby
//! ([`Broker::start_when_free`]) takes it once it has expired by the **database's**
//! clock or was released, and the active broker fences itself one renewal period
//! before its lease could end, measured from the last renewal it sent by its own
//! monotonic clock. Every write transaction first checks the lease under a share lock
//! on its row, so a broker that noticed late commits nothing. A broker that takes
//! over reads everything as after a restart (marks, cursors, each queue message's
//! redelivery count) and rolls back the STOMP transactions the dead one left open.
//!
//! ## Deleting a destination
//!
//! [`Broker::delete_destination`] retires the destination's actor (refused while a
//! consumer or an open transaction uses it), deletes its subscriptions and messages in
//! bounded pages through the store actor, then stops the actor and cancels its
//! scheduled messages (a walk of the schedule in pages); a send or
//! subscription that reached the retired actor is refused with
//! [`actors::ActorError::Retired`] and sent again by the broker to the successor the
//! registry starts once the deletion has ended, so nothing accepted is refused or lost.
//!
//! ## Scheduled delivery and redelivery back-off
//!
//! A message with a due time (ActiveMQ's `AMQ_SCHEDULED_DELAY`, [`Message::deliver_at`])
//! is stored at once as a prepared row whose xid names its due time
//! (`sched:<due ms, 20 digits>:<message id>`, [`actors::scheduled`]): invisible, held in
//! no memory. One scheduler task ([`broker::SCHEDULER_PAGE`]) reads the due ones as
//! one range of the xid index, a page of at most 400 rows, `LIMIT` in SQL, and hands
//! each to its destination, which commits it in its publish order (a new, highest
//! id) and delivers it as if just sent: never lost, never twice, and what fell due
//! while no broker ran comes at the next start. A repeating message
//! (`AMQ_SCHEDULED_PERIOD` with `AMQ_SCHEDULED_REPEAT`, [`Message::repeat`](struct@Message))
//! is one stored job: each firing adds a copy in the transaction that moves the job on.
//! A cron job (`AMQ_SCHEDULED_CRON`, [`CronSchedule`]) is one too: each occurrence
//! stores a scheduled copy (delay, period and repeat apply per firing, as in ActiveMQ)
//! and moves the job to the next occurrence in the same store transaction.
//! The scheduler runs only while something is scheduled, sleeps until the next due
//! time, and a new message wakes it only when it is due earlier. A queue's redelivery
//! back-off (`initial_redelivery_delay` and the rest of ActiveMQ's redelivery policy)
//! holds a failed delivery the same way: one statement stores its count and its due
//! time, and the scheduler releases it to the queue's end.
//!
//! ## Flow control
//!
//! Messages held in memory count once (their body is shared) against the broker's
//! memory limit and their destination's; stored ones against the store limit. At a
//! limit a send waits (producer flow control), or fails with `send_fail_if_no_space`;
//! nothing accepted is dropped.
//!
//! ## Pipelining: what waits for a commit, and what does not
//!
//! A send has two steps ([`Broker::start_send`]): the message takes its place in its
//! destination's order (the destination reserves it and queues the store write, in
//! that order), then it is accepted (after its commit, for one that is stored). A
//! producer that awaits each first step before the next gets its messages stored and
//! delivered in the order sent, while their commits overlap and share the store
//! actor's group commit. A STOMP connection works so
//! ([`stomp::connection`]): SENDs, ACKs and NACKs go on without waiting for their
//! commits, up to a window of frames and bytes; each RECEIPT goes out in frame order,
//! after its frame and every frame before it are done; SUBSCRIBE, UNSUBSCRIBE,
//! COMMIT, ABORT and DISCONNECT wait for the frames before them; a failed frame gets
//! an ERROR in its place and nothing after it is receipted.
//!
//! Acks of one subscription that arrive while its last ack write is in flight go
//! together in the next write ([`actors::destination::AckBatch`]), each answered after
//! that write commits. [`Subscription::ack`] does not wait for that answer: it keeps
//! up to [`broker::ACK_WINDOW`] answers pending (an actix message whose answer is
//! dropped is skipped, so a dropped subscription hands its pending answers to a task
//! that waits for them), so the obvious consumer loop runs at the batched pace; a
//! durable subscription re-attached reads its mark only after its last consumer's acks
//! commit, and shutdown commits every accepted ack before it closes the store.
//!
//! Only what a consumer handed to the application counts as delivered: each consumer
//! keeps the last delivery id its stream yielded in a shared counter
//! ([`actors::messages::Subscribe::handed`]), read by its destination when it detaches,
//! so prefetched messages go back uncounted (ActiveMQ's `lastDeliveredSequenceId`). A
//! destination whose consumer's receiver is gone waits for its detach, which comes
//! after its acks. A non-durable topic subscription's automatic acks, which only
//! give credit back, go through counters shared with its topic
//! ([`actors::subscription::AutoAcks`]): a message only when the topic waits for credit. A destination's store writes in flight come back to it through
//! one channel ([`actors::destination::Completions`]), not as one future each in its
//! actix context (actix polls every such future on every wake-up of the actor). A body
//! is one shared buffer (`bytes::Bytes`) from the STOMP codec to the store and to
//! every subscriber.

#![warn(missing_docs)]

pub mod admin;
pub mod auth;
pub mod broker;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod error;
pub mod history;
#[cfg(feature = "http")]
pub mod http;
pub mod login_guard;
pub mod metrics;
pub mod mqtt;
pub mod process;
pub mod runtime;
pub mod server;
pub mod stats;
pub mod stomp;
#[cfg(feature = "test-util")]
pub mod test_util;
#[cfg(feature = "tls")]
pub mod tls;
pub mod transport;

pub use broker::{
    is_advisory, next_connection_id, AckMode, Acker, Broker, BrokerConfig, BrowsedMessage,
    CompositeDestination, CronSchedule, DestinationFlow, Expiration, Forward, Message, PendingSend,
    QueueBrowser, Received, Repeat, RoutingConfig, ScheduleBacklog, ScheduledMessage,
    ScheduledPage, Selector, SelectorError, SendOptions, SendReceipt, Space, SpaceCheck,
    SubscribeOptions, Subscription, Target, TemporaryQueue, ToDestination, Transaction,
    UsageConfig, UsageSnapshot, VirtualTopics, ACK_WINDOW, ADVISORY_PREFIX, COMMIT_BATCH,
    COMPOSITE_WINDOW, MAX_GROUPS_PER_VIRTUAL_TOPIC, MAX_TEMPORARIES_PER_CONNECTION,
    MIN_SCHEDULED_PERIOD_MS, ROUTED_XID_PREFIX, SCHEDULER_PAGE, SCHEDULE_COUNT_LIMIT, SEND_WINDOW,
};
pub use ebb_actors::destination::{
    now_ms, DestinationKey, DestinationKind, DestinationPattern, InvalidDestination,
};
pub use ebb_actors::kinds::{Capabilities, KindSpec};
pub use ebb_actors::messages::{QueueStats, TopicStats};
pub use ebb_actors::policy::{Policy, PolicyEntry, PolicyMap};
pub use error::{Error, ErrorCode, TemporaryLimit};

// What the broker hands out of its store, re-exported so that nothing outside the
// facade names the store crate: how to open it, its errors, and the lease of an active
// broker (high availability). `tests/it/layering.rs` checks every folder of `src/`
// but the facade for it.
pub use ebb_store::proxy::DatabaseProxy;
pub use ebb_store::sqlite::memory_used as sqlite_memory_used;
pub use ebb_store::{
    redact_url, LeaseOptions, LeaseRenewals, LeaseState, StoreError, StoreOptions,
    DEFAULT_SQLITE_CACHE_KIB, DEFAULT_SQLITE_MEMORY_LIMIT_KIB,
};

/// The README's code blocks, run as doc tests so its example stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The embedding chapter's code blocks (`docs/embedding.md`), run as doc tests so its
/// example stays true.
#[doc = include_str!("../docs/embedding.md")]
#[cfg(doctest)]
pub struct EmbeddingDoctests;
