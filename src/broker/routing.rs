//! Routing: one send, several destinations. A send names its destinations (one, or a
//! composite: ActiveMQ's `/queue/a,/topic/b`, [`DestinationKey::parse_composite`]);
//! each is then expanded by what the broker is set up with ([`RoutingConfig`]):
//!
//! - a **configured composite** ([`CompositeDestination`], `[[composite]]` in
//!   `ebb.toml`) forwards to its destinations, each forward with an optional
//!   selector (ActiveMQ's `compositeQueue` with `filteredDestination`, `forwardOnly`:
//!   nothing stays at the composite's own name);
//! - a **virtual topic** ([`VirtualTopics`], ActiveMQ's `VirtualTopic.>`): a send to
//!   `/topic/VirtualTopic.Orders` goes to that topic's subscribers and to every
//!   consumer group's queue `/queue/Consumer.<group>.VirtualTopic.Orders` that exists
//!   (a plain queue's group reads the topic's one row; see below). A group's queue
//!   exists from its first subscription on (its definition and its binding are
//!   stored, so an offline group keeps getting its messages across restarts, as a
//!   durable subscription) until the queue is deleted.
//! - a **shared subscription** ([`super::shared`], MQTT's `$share/GROUP/FILTER`): a
//!   send to a topic the group's filter matches (a topic or a pattern) also goes to
//!   the group's queue, the copy naming its topic (`ebb-topic`); counted in the
//!   metrics as a virtual topic's copies are (`route="virtual_topic"`).
//!
//! A send that ends at one destination takes the usual path ([`Broker::start_send`]).
//! A virtual topic's copies (for groups that get copies) are sent one after another,
//! each as a send of its own
//! (pipelined; the receipt when every copy is stored), unless
//! [`VirtualTopics::transacted_send`]. A composite send (named or configured), or a
//! virtual topic's with `transacted_send`, is all or none: its copies are handed to
//! the broker's committer ([`super::composite`]), which stores waiting sends together
//! in one store transaction (every destination has the message or none has) while
//! the sender goes on; its receipt comes after that commit, and every copy has the
//! same message id. A scheduled one is a transaction of its own (a store xid under
//! [`ROUTED_XID_PREFIX`]: prepared at each destination, then committed; a crash before
//! the commit leaves prepared rows that [`Broker::rollback_abandoned`] deletes at the
//! next start).
//!
//! **What a virtual topic's message costs**: one stored row, the topic's. A consumer
//! group whose kind reads its topic's rows (a plain queue:
//! [`ebb_actors::kinds::Capabilities::group_reads_topic`]) is *bound* to the topic
//! when it is made ([`BindGroup`], a durable subscription of the topic under client
//! id [`ebb_store::GROUP_CLIENT_ID`]) and reads the topic's rows through its own mark
//! and acks, stored once however many groups there are ([`ebb_store::groups`]; as
//! Artemis keeps one copy per address with a reference per queue); the topic hands it
//! what it releases, and a sleeping group is not woken for it. The group keeps its
//! queue behaviour (prefetch, redelivery with its counts and back-off, dead letters,
//! selectors, browsing, the admin API), and rows sent to its queue directly are its
//! own. A group of another kind (a last-value queue) gets a copy per message, as
//! ActiveMQ's virtual topics do. A group stored as a queue of copies by an earlier
//! version is bound at start: its copies stay its own rows. The benchmark (`cargo
//! bench --bench virtual_topic`) shows the rows and bytes per message beside a topic
//! with as many durable subscriptions.

use super::message::{Message, PendingSend, SendReceipt};
use super::send::SendOptions;
use super::Broker;
use crate::error::Error;
use ebb_actors::broker::KnowGroup;
use ebb_actors::destination::now_ms;
use ebb_actors::messages::{BindGroup, UnbindGroup};
use ebb_actors::selector::{Fields, Selector};
use ebb_actors::DestinationKey;
use ebb_store::SubscriptionKey;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

/// The prefix of the store xids of scheduled sends routed to several destinations
/// (each a transaction of its own; [`Broker::rollback_abandoned`] with it at start
/// deletes what a crash left).
pub const ROUTED_XID_PREFIX: &str = "ebb-routed:";

/// The store container prefix under which a virtual topic's consumer groups are
/// defined: `virtual:topic://VirtualTopic.Orders`, one definition row per group
/// queue (no message is ever stored there).
pub const VIRTUAL_CONTAINER_PREFIX: &str = "virtual:";

/// The client id of the definitions under [`VIRTUAL_CONTAINER_PREFIX`] (the
/// subscription name is the group queue's store key, `queue://Consumer.A.VirtualTopic.X`,
/// so a group of another point-to-point kind keeps its kind).
const VIRTUAL_CLIENT_ID: &str = "ebb:virtual-topic";

/// Definitions [`Broker::leave_virtual_group`] reads for one queue (its groups: one
/// per virtual topic it was made under).
const DEFINITION_PAGE: u32 = 500;

/// Most consumer groups of one virtual topic: each is stored and gets its own copy of
/// every message, so a client that subscribes to made-up group names cannot grow a
/// send's cost without bound. The next group is refused (`invalid-destination`).
pub const MAX_GROUPS_PER_VIRTUAL_TOPIC: usize = 1_000;

/// How sends are routed beyond the destination they name. `Default`: virtual topics
/// on with ActiveMQ's prefixes, no configured composite.
#[derive(Debug, Clone, Default)]
pub struct RoutingConfig {
    /// Virtual topics (ActiveMQ's `virtualDestinationInterceptor` default).
    pub virtual_topics: VirtualTopics,
    /// Configured composite destinations (`[[composite]]`).
    pub composites: Vec<CompositeDestination>,
}

/// Virtual topics, ActiveMQ's convention: a topic whose name starts with
/// `topic_prefix` is also delivered to each queue named `consumer_prefix`, one
/// segment (the group), `.`, the topic's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualTopics {
    /// On by default, as in ActiveMQ.
    pub enabled: bool,
    /// The topic name prefix: `VirtualTopic.` (ActiveMQ's `VirtualTopic.>`).
    pub topic_prefix: String,
    /// The consumer queue prefix before the group: `Consumer.` (ActiveMQ's
    /// `Consumer.*.`).
    pub consumer_prefix: String,
    /// Send to the topic and its groups that get copies (a last-value queue's) in one
    /// store transaction, all or none (ActiveMQ's `transactedSend`, default off as
    /// there): every copy is stored prepared, then committed. Groups that read the
    /// topic's rows (plain queues) share its one row, so they have a message or none
    /// has, whatever this says. Off, the copies are sent one after another as
    /// separate sends (pipelined, with the store's group commit) and the receipt comes
    /// when every copy is stored: nothing receipted is lost, but a crash before the
    /// receipt may leave the message in some groups only (the producer's retry then
    /// gives those a duplicate).
    pub transacted_send: bool,
}

impl Default for VirtualTopics {
    fn default() -> Self {
        Self {
            enabled: true,
            topic_prefix: "VirtualTopic.".into(),
            consumer_prefix: "Consumer.".into(),
            transacted_send: false,
        }
    }
}

impl VirtualTopics {
    /// The virtual topic a consumer group's queue reads (`Consumer.A.VirtualTopic.X`
    /// → `topic://VirtualTopic.X`), or `None` when `queue` is not one.
    pub fn topic_of_group(&self, queue: &DestinationKey) -> Option<DestinationKey> {
        let caps = queue.capabilities();
        if !self.enabled || !caps.point_to_point || caps.temporary {
            return None;
        }
        let rest = queue.name().strip_prefix(self.consumer_prefix.as_str())?;
        let (group, topic) = rest.split_once('.')?;
        if group.is_empty() || !self.is_virtual(topic) {
            return None;
        }
        DestinationKey::topic(topic).ok()
    }

    /// True when topic name `name` is a virtual topic's.
    fn is_virtual(&self, name: &str) -> bool {
        self.enabled && name.len() > self.topic_prefix.len() && name.starts_with(&self.topic_prefix)
    }
}

/// A configured composite destination (`[[composite]]`, ActiveMQ's `compositeQueue`
/// / `compositeTopic` with `forwardOnly`): a send to `name` goes to each forward
/// whose selector matches, none to `name` itself.
#[derive(Debug, Clone)]
pub struct CompositeDestination {
    /// The name producers send to.
    pub name: DestinationKey,
    /// Where its messages go.
    pub forwards: Vec<Forward>,
}

/// One forward of a [`CompositeDestination`].
#[derive(Debug, Clone)]
pub struct Forward {
    /// The destination it forwards to (not itself a composite: forwards are not
    /// followed further, so no loop can form).
    pub destination: DestinationKey,
    /// Only messages it matches are forwarded (ActiveMQ's `filteredDestination`);
    /// `None`: every message.
    pub selector: Option<Selector>,
}

/// The broker's routing state: the configuration and the virtual topics' groups.
#[derive(Default)]
pub(super) struct Routes {
    config: RoutingConfig,
    /// By virtual topic: its groups' queues.
    groups: parking_lot::RwLock<HashMap<DestinationKey, BTreeSet<DestinationKey>>>,
    /// The next routed send's xid number.
    next_xid: AtomicU64,
    /// The shared subscriptions' groups ([`super::shared`]).
    pub(super) shared: super::shared::SharedGroups,
    /// Commits composite sends ([`super::composite`]).
    pub(super) committer: super::composite::Committer,
}

impl Routes {
    pub(super) fn new(config: RoutingConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }
}

/// One destination a send goes to.
pub(super) struct Route {
    pub(super) key: DestinationKey,
    /// For a shared subscription's queue: the topic whose send reached it.
    pub(super) via: Option<DestinationKey>,
}

impl Route {
    /// `message` as this destination gets it: a shared subscription's copy names its
    /// topic ([`super::shared::SHARED_TOPIC_HEADER`]); a sender's header of that name
    /// is dropped from every copy, so only the broker sets it (a member reads it as
    /// the topic a message was published to, and a held send's copy as its mark).
    pub(super) fn copy_of(&self, message: &Message) -> Message {
        let mut copy = message.clone();
        let name = super::shared::SHARED_TOPIC_HEADER;
        copy.headers.retain(|(k, _)| k != name);
        if let Some(topic) = &self.via {
            copy.headers.push((name.to_string(), topic.container()));
        }
        copy
    }
}

/// A message about to be sent, as a forward's selector reads it.
struct Unsent<'a> {
    message: &'a Message,
    now: i64,
}

impl Fields for Unsent<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.message
            .headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    fn message_id(&self) -> &str {
        ""
    }
    fn priority(&self) -> u8 {
        self.message.priority
    }
    fn timestamp_ms(&self) -> i64 {
        self.now
    }
    fn persistent(&self) -> bool {
        self.message.persistent
    }
    fn expiration_ms(&self) -> i64 {
        match self.message.expiration {
            super::message::Expiration::Never => 0,
            super::message::Expiration::At(at) => at,
            super::message::Expiration::Ttl(ttl) => {
                self.now.saturating_add(ttl.min(i64::MAX as u64) as i64)
            }
        }
    }
}

impl Broker {
    /// The virtual topic settings this broker runs with.
    pub fn virtual_topics(&self) -> &VirtualTopics {
        &self.routes.config.virtual_topics
    }

    /// Where a send of `message` to `named` ends: each named destination expanded
    /// (a configured composite to its matching forwards, a virtual topic to itself and
    /// its groups' queues), each destination once, in order. Empty when a composite's
    /// forwards all refuse it (it is accepted and goes nowhere, as in ActiveMQ).
    pub fn routes_of(&self, named: &[DestinationKey], message: &Message) -> Vec<DestinationKey> {
        self.plan(named, message)
            .0
            .into_iter()
            .map(|route| route.key)
            .collect()
    }

    /// [`Broker::routes_of`] with the topic each shared subscription's copy came
    /// through, and whether the send must be one store transaction: several
    /// destinations named, a configured composite, or a virtual topic or shared
    /// subscription with [`VirtualTopics::transacted_send`].
    pub(super) fn plan(&self, named: &[DestinationKey], message: &Message) -> (Vec<Route>, bool) {
        let mut atomic = named.len() > 1;
        // A group of a kind that reads its topic's rows is fed by the topic (stored
        // once); the others get a copy.
        let reads_topic = |queue: &DestinationKey| queue.capabilities().group_reads_topic;
        let mut out: Vec<Route> = Vec::new();
        let push = |key: &DestinationKey, out: &mut Vec<Route>| {
            if !out.iter().any(|r| &r.key == key) {
                out.push(Route {
                    key: key.clone(),
                    via: None,
                });
            }
        };
        // A topic's shared subscriptions' queues, each copy naming the topic.
        let shared = |topic: &DestinationKey, out: &mut Vec<Route>| {
            let queues = self.routes.shared.queues_for(topic);
            for queue in &queues {
                if !out.iter().any(|r| &r.key == queue) {
                    out.push(Route {
                        key: queue.clone(),
                        via: Some(topic.clone()),
                    });
                }
            }
            !queues.is_empty()
        };
        let transacted = self.routes.config.virtual_topics.transacted_send;
        let unsent = Unsent {
            message,
            now: now_ms(),
        };
        let groups = self.routes.groups.read();
        for key in named {
            if let Some(composite) = self
                .routes
                .config
                .composites
                .iter()
                .find(|c| &c.name == key)
            {
                atomic = true;
                for forward in &composite.forwards {
                    if forward.selector.as_ref().is_none_or(|s| s.matches(&unsent)) {
                        push(&forward.destination, &mut out);
                        shared(&forward.destination, &mut out);
                        // A forward to a virtual topic reaches its groups too (those
                        // that read the topic's rows get it from the topic).
                        for queue in groups.get(&forward.destination).into_iter().flatten() {
                            if !reads_topic(queue) {
                                push(queue, &mut out);
                            }
                        }
                    }
                }
                continue;
            }
            push(key, &mut out);
            if let Some(queues) = groups.get(key) {
                for queue in queues.iter().filter(|q| !reads_topic(q)) {
                    atomic |= transacted;
                    push(queue, &mut out);
                }
            }
            atomic |= shared(key, &mut out) && transacted;
        }
        // A group bound to a topic the send also reaches reads the topic's row: a
        // copy for it as well (a composite naming both) would deliver it twice.
        if out.len() > 1 {
            let containers: BTreeSet<String> = out.iter().map(|r| r.key.container()).collect();
            let store = self.store.store();
            out.retain(|r| {
                store
                    .group_topic(&r.key.container())
                    .is_none_or(|topic| !containers.contains(&topic))
            });
        }
        (out, atomic)
    }

    /// Sends `message` to each of `destinations` (a composite send, ActiveMQ's
    /// `/queue/a,/topic/b`): as [`Broker::send`] to each, all in one store
    /// transaction when several are named: every destination has it or none has.
    /// Configured composites and virtual topics are expanded ([`Broker::routes_of`]).
    /// Returns once every copy is accepted; every copy has the same message id.
    ///
    /// Errors: as [`Broker::send`]; on any, no destination has the message.
    pub async fn send_to_each(
        &self,
        destinations: &[DestinationKey],
        message: Message,
    ) -> Result<SendReceipt, Error> {
        self.start_send_to_each_with(destinations, message, SendOptions::default())
            .await?
            .await
    }

    /// [`Broker::send_to_each`] with `options` ([`Broker::start_send_with`]'s): a
    /// send that ends at one destination has its place when this returns; one that
    /// ends at several, all or none, has been checked and handed to the broker's
    /// committer (`broker/composite.rs`), and its [`PendingSend`] resolves once it is
    /// stored at every destination (sends started one after another keep their order
    /// at each destination, whatever their kind). At most
    /// [`crate::COMPOSITE_WINDOW`] such sends wait for their commit at a
    /// time: the next waits here for room.
    pub async fn start_send_to_each_with(
        &self,
        destinations: &[DestinationKey],
        message: Message,
        options: SendOptions,
    ) -> Result<PendingSend, Error> {
        self.refuse_if_shut_down()?;
        self.refuse_advisory_send(destinations)?;
        let (routes, atomic) = self.plan(destinations, &message);
        // Nor through a configured composite's forward.
        self.refuse_advisory_send(&keys_of(&routes))?;
        match routes.as_slice() {
            [] => Ok(PendingSend::accepted(self.next_message_id(), false)),
            [one] => {
                self.start_send_one(&one.key, one.copy_of(&message), options, None)
                    .await
            }
            _ => {
                count_routed(destinations, &keys_of(&routes));
                if atomic {
                    self.send_routed(routes, message, options).await
                } else {
                    self.send_fanned(routes, message, options).await
                }
            }
        }
    }

    /// A send to several destinations one after another (a virtual topic without
    /// [`VirtualTopics::transacted_send`]): each copy takes its place in its
    /// destination's order as a send of its own; the [`PendingSend`] resolves once
    /// every copy is accepted. A copy refused before its place leaves the earlier
    /// copies sent.
    async fn send_fanned(
        &self,
        routes: Vec<Route>,
        message: Message,
        options: SendOptions,
    ) -> Result<PendingSend, Error> {
        let message_id = self.next_message_id();
        let mut copies = Vec::with_capacity(routes.len());
        for route in &routes {
            copies.push(
                self.start_send_one(
                    &route.key,
                    route.copy_of(&message),
                    options,
                    Some(&message_id),
                )
                .await?,
            );
        }
        Ok(PendingSend::all(copies))
    }

    /// A send that ends at several destinations, all or none: checked and charged
    /// here, then stored in one store transaction by the broker's committer
    /// ([`super::composite`]) while the sender goes on; the [`PendingSend`] resolves
    /// once it is stored and released. A scheduled one is a transaction of its own
    /// ([`Broker::send_routed_scheduled`]).
    async fn send_routed(
        &self,
        routes: Vec<Route>,
        message: Message,
        options: SendOptions,
    ) -> Result<PendingSend, Error> {
        if options.space == super::send::SpaceCheck::Wait {
            for route in &routes {
                self.wait_for_space(&route.key, message.persistent).await?;
            }
        }
        if super::send::scheduled_due(&message).is_some() {
            return self.send_routed_scheduled(routes, message).await;
        }
        // Taken after space (a shutdown waits for the sends that hold room).
        let room = self.routes.committer.room().await?;
        let message_id = self.next_message_id();
        let mut copies = Vec::with_capacity(routes.len());
        for route in &routes {
            let copy = route.copy_of(&message);
            let outgoing = self.outgoing_as(&route.key, copy, false, Some(&message_id))?;
            copies.push((route.key.clone(), outgoing));
        }
        let send = super::composite::CompositeSend {
            copies,
            _room: room,
        };
        Ok(self.commit_later(message_id, send))
    }

    /// A scheduled send that ends at several destinations: one transaction of its own
    /// (prepared at each destination, stored scheduled by its commit), committed before
    /// this returns.
    async fn send_routed_scheduled(
        &self,
        routes: Vec<Route>,
        message: Message,
    ) -> Result<PendingSend, Error> {
        let n = self.routes.next_xid.fetch_add(1, Ordering::Relaxed);
        let xid = format!("{ROUTED_XID_PREFIX}{}:{n}", self.ids.prefix);
        let mut tx = self.transaction(xid.clone());
        let message_id = self.next_message_id();
        let mut pending = Vec::with_capacity(routes.len());
        for route in &routes {
            match tx
                .start_send_as(&route.key, route.copy_of(&message), Some(&message_id))
                .await
            {
                Ok(p) => pending.push(p),
                Err(e) => {
                    let _ = tx.rollback().await;
                    return Err(e);
                }
            }
        }
        let mut expired = false;
        for p in pending {
            match p.await {
                Ok(receipt) => expired |= receipt.expired_on_arrival,
                Err(e) => {
                    let _ = tx.rollback().await;
                    return Err(e);
                }
            }
        }
        if let Err(e) = tx.commit().await {
            // Nothing was committed: what is prepared goes now (or, if the store
            // cannot, at the next start).
            let _ = self.rollback_transaction(&xid, &keys_of(&routes)).await;
            return Err(e);
        }
        Ok(PendingSend::accepted(message_id, expired))
    }

    /// Makes `queue` a consumer group of its virtual topic when it is one
    /// ([`VirtualTopics::topic_of_group`]) and not one yet: its definition is
    /// stored first, so that from now on (also across restarts) every message sent
    /// to the topic is delivered to it too.
    pub(super) async fn join_virtual_group(&self, queue: &DestinationKey) -> Result<(), Error> {
        let Some(topic) = self.routes.config.virtual_topics.topic_of_group(queue) else {
            return Ok(());
        };
        if self
            .routes
            .groups
            .read()
            .get(&topic)
            .is_some_and(|g| g.contains(queue))
        {
            return Ok(());
        }
        let groups = self
            .routes
            .groups
            .read()
            .get(&topic)
            .map_or(0, BTreeSet::len);
        if groups >= MAX_GROUPS_PER_VIRTUAL_TOPIC {
            return Err(Error::InvalidDestination {
                name: queue.stomp(),
                reason: "the virtual topic has 1,000 consumer groups already (MAX_GROUPS_PER_VIRTUAL_TOPIC): delete one, or use an existing group",
            });
        }
        self.store
            .subscribe(
                format!("{VIRTUAL_CONTAINER_PREFIX}{topic}"),
                SubscriptionKey::new(VIRTUAL_CLIENT_ID, queue.container()),
                None,
                false,
            )
            .await?;
        self.bind_group(&topic, queue).await?;
        self.routes
            .groups
            .write()
            .entry(topic)
            .or_default()
            .insert(queue.clone());
        Ok(())
    }

    /// A deleted queue is no longer a consumer group: its definitions go (whatever
    /// the settings now, so a group made under other prefixes ends too), and no
    /// virtual topic sends to it. Returns whether it was one.
    pub(crate) async fn leave_virtual_group(&self, queue: &DestinationKey) -> Result<bool, Error> {
        let mut was = false;
        for groups in self.routes.groups.write().values_mut() {
            was |= groups.remove(queue);
        }
        let key = SubscriptionKey::new(VIRTUAL_CLIENT_ID, queue.container());
        let containers = self
            .store
            .store()
            .find_subscription_containers(&key, VIRTUAL_CONTAINER_PREFIX, DEFINITION_PAGE)
            .await?;
        for container in containers {
            if let Some(topic) = container.strip_prefix(VIRTUAL_CONTAINER_PREFIX) {
                was |= self
                    .store
                    .unsubscribe(container.clone(), key.clone())
                    .await?;
                if let Ok(topic) = DestinationKey::from_container(topic) {
                    self.unbind_group(&topic, queue).await?;
                }
            }
        }
        Ok(was)
    }

    /// Binds group `queue` to `topic` when its kind reads its topic's rows (stored
    /// once, [`ebb_store::groups`]): through the topic's actor, in its write order
    /// ([`BindGroup`]), so that from the answer on every message the topic stores
    /// reaches the group. A bound group is left as it is (one lookup of its binding).
    pub(super) async fn bind_group(
        &self,
        topic: &DestinationKey,
        queue: &DestinationKey,
    ) -> Result<(), Error> {
        if !queue.capabilities().group_reads_topic
            || self
                .store
                .store()
                .group_topic(&queue.container())
                .as_deref()
                == Some(topic.container().as_str())
        {
            return Ok(());
        }
        let make = || BindGroup(queue.clone());
        Ok(self
            .ask_topic_live(topic, make, super::is_retired)
            .await??)
    }

    /// Unbinds group `queue` from `topic` ([`UnbindGroup`]): its acks of the topic's
    /// rows go, and the rows only it needed are cleaned up by the topic.
    pub(super) async fn unbind_group(
        &self,
        topic: &DestinationKey,
        queue: &DestinationKey,
    ) -> Result<(), Error> {
        if !queue.capabilities().group_reads_topic {
            return Ok(());
        }
        // Told even when the store has unbound it already (a deletion does, first):
        // the topic stops storing and feeding for it.
        let make = || UnbindGroup(queue.clone());
        self.ask_topic_live(topic, make, super::is_retired)
            .await??;
        Ok(())
    }

    /// True when `queue` is a consumer group of a virtual topic now.
    pub(crate) fn is_virtual_group(&self, queue: &DestinationKey) -> bool {
        self.routes
            .groups
            .read()
            .values()
            .any(|groups| groups.contains(queue))
    }

    /// The consumer groups' queues of virtual topic `topic`, in name order.
    pub fn virtual_groups(&self, topic: &DestinationKey) -> Vec<DestinationKey> {
        self.routes
            .groups
            .read()
            .get(topic)
            .map(|g| g.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// At start: rolls back the routed sends a previous run left prepared (none of
    /// their destinations has them), then reads the virtual topics' groups.
    pub(super) async fn recover_routing(&self) -> Result<(), Error> {
        let dropped = self.rollback_abandoned(ROUTED_XID_PREFIX).await?;
        if dropped > 0 {
            tracing::info!(
                messages = dropped,
                "rolled back routed sends a previous run left uncommitted"
            );
        }
        self.load_virtual_groups().await?;
        self.load_shared_groups().await
    }

    /// Reads every stored consumer group definition (bounded pages,
    /// [`ebb_actors::broker::read_definitions_under`]): called at start, before the
    /// broker serves.
    async fn load_virtual_groups(&self) -> Result<(), Error> {
        let definitions = ebb_actors::broker::read_definitions_under(
            self.store.store().as_ref(),
            VIRTUAL_CONTAINER_PREFIX,
        )
        .await?;
        let mut bind = Vec::new();
        {
            let mut groups = self.routes.groups.write();
            for sub in definitions {
                let text = &sub.container[VIRTUAL_CONTAINER_PREFIX.len()..];
                match (
                    DestinationKey::from_container(text),
                    DestinationKey::from_container(&sub.key.subscription_name),
                ) {
                    // Only what the settings make a group now: one made under other
                    // prefixes, or with virtual topics off, waits (stored) until they do
                    // again, or its queue is deleted.
                    (Ok(topic), Ok(queue))
                        if self
                            .routes
                            .config
                            .virtual_topics
                            .topic_of_group(&queue)
                            .as_ref()
                            == Some(&topic) =>
                    {
                        bind.push((topic.clone(), queue.clone()));
                        groups.entry(topic).or_default().insert(queue);
                    }
                    (Ok(_), Ok(_)) => {
                        tracing::info!(container = %sub.container, group = %sub.key.subscription_name,
                        "a stored virtual topic group is not one under the settings now ([virtual_topics]): it stays bound to its topic (it reads what the topic stores) until its queue is deleted, and no SUBSCRIBE makes it")
                    }
                    _ => {
                        tracing::warn!(container = %sub.container, group = %sub.key.subscription_name,
                        "a stored virtual topic group does not parse; it is left alone")
                    }
                }
            }
        }
        // A group stored as a queue of copies (before groups were stored once) is
        // bound to its topic now: its copies stay its own rows, and it reads the
        // topic's rows from here on.
        for (topic, queue) in bind {
            if queue.capabilities().group_reads_topic
                && self.store.store().group_topic(&queue.container()).is_none()
            {
                tracing::info!(group = %queue, topic = %topic,
                    "consumer group bound to its topic: it reads the topic's rows, stored once");
                self.bind_group(&topic, &queue).await?;
            }
            self.know_group(&queue).await?;
        }
        Ok(())
    }

    /// Group `queue`, when it reads its topic's rows, is known to the registry from
    /// now on ([`KnowGroup`]): listed, counted and deletable even with no row of its
    /// own and no actor (as after a restart).
    pub(super) async fn know_group(&self, queue: &DestinationKey) -> Result<(), Error> {
        if queue.capabilities().group_reads_topic {
            self.registry().send(KnowGroup(queue.clone())).await?;
        }
        Ok(())
    }
}

/// The destinations of `routes`, in order.
pub(super) fn keys_of(routes: &[Route]) -> Vec<DestinationKey> {
    routes.iter().map(|r| r.key.clone()).collect()
}

/// Counts a send that `named` routed to `routes` (several) in the metrics: a virtual
/// topic's, unless several destinations were named or a configured composite
/// expanded.
pub(super) fn count_routed(named: &[DestinationKey], routes: &[DestinationKey]) {
    let route = if named.len() == 1 && routes.first() == named.first() {
        "virtual_topic"
    } else {
        "composite"
    };
    let labels = [("route", route)];
    metrics::counter!(crate::metrics::names::ROUTED_SENDS_TOTAL, &labels).increment(1);
    metrics::counter!(crate::metrics::names::ROUTED_COPIES_TOTAL, &labels)
        .increment(routes.len() as u64);
}
