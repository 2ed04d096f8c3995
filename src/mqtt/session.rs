//! One MQTT connection: the loop that reads packets, applies each to the broker and
//! writes the answers and deliveries (see [`super`] for what each packet does).
//!
//! The loop waits on six things at once: the next packet, the next commit of the
//! publishes in flight (answered in packet order), the wait of a publish held for
//! space (producer flow control), the next delivery of any subscription (while the
//! client's window has room), acks being committed, and a timer for the keep-alive
//! and the CONNECT timeout. What a turn queues is written and flushed at its end.
//! While a publish waits for space, later publishes wait behind it, but PUBACK,
//! PUBREC, PUBCOMP and PINGREQ are still read and applied: they are what frees space.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::{FuturesOrdered, FuturesUnordered};
use futures::{FutureExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_stream::StreamMap;

use super::topic;
use super::wire::{self, reason, ConnAck, Connect, Filter, In, Out, Publish, Version, Will, Wire};
use super::{MqttShared, PRE_CONNECT_MAX_PACKET, TOPIC_ALIASES};
use crate::auth::{AccessError, LoginFailure, Principal, Right};
use crate::broker::{
    AckMode, Acker, Broker, Message, Received, SendOptions, SessionSubscription, Space,
    SubscribeOptions, Subscription, Target, MAX_SESSION_SUBSCRIPTIONS, SHARED_TOPIC_HEADER,
    TOO_MANY_GROUPS,
};
use crate::transport::client_ids::Claim;
use crate::transport::futures_set::Lazy;
use crate::transport::link::Link;
use crate::transport::Accepted;
use crate::{DestinationKey, Error};

/// The protocol's name in the store's session rows and the login metrics.
pub(super) const PROTOCOL: &str = "mqtt";

/// Header that carries a QoS 2 publish's QoS, so its deliveries may be QoS 2.
const QOS_HEADER: &str = "mqtt-qos";

/// Header that marks a message published with the retain flag (for 5.0's retain as
/// published).
const RETAIN_HEADER: &str = "mqtt-retain";

/// The last-value queue that keeps the retained messages, one per topic (keyed by
/// the kind's last-value header, whose value is the MQTT topic name).
const RETAINED_QUEUE: &str = "ebb.mqtt.retained";

/// Most retained messages one SUBSCRIBE sends (a filter matching more gets the first
/// ones, in the queue's order, and the broker logs it).
pub const MAX_RETAINED_PER_SUBSCRIBE: usize = 1_000;

/// The queue of retained messages and its last-value header: the kind of the kind
/// table that keeps one message per key.
fn retained_queue() -> Option<(DestinationKey, &'static str)> {
    let kind =
        crate::DestinationKind::all().find(|k| k.capabilities().last_value_header.is_some())?;
    let header = kind.capabilities().last_value_header?;
    Some((DestinationKey::new(kind, RETAINED_QUEUE).ok()?, header))
}

/// Header of 5.0's payload format indicator.
const FORMAT_HEADER: &str = "mqtt-payload-format";

/// Publishes read and held behind one that waits for space: past it the connection
/// is not read until they go.
const MAX_HELD: usize = 1_000;

/// Packets queued for the client before a turn stops taking deliveries.
const WRITE_BATCH: usize = 256;

/// How long a closing connection may take to write its last packets.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

type Pending<T> = Pin<Box<dyn Future<Output = T>>>;

/// A publish whose store commit is awaited: its packet id and QoS, and the outcome.
type Sent = (Option<u16>, u8, Result<(), Error>);

/// Why the connection ends.
#[derive(Debug)]
enum End {
    /// DISCONNECT: `true` when 5.0's reason 0x04 asks for the will.
    Disconnect { will: bool },
    /// The socket closed or failed.
    Lost,
    /// The broker ends it: 5.0's reason code and why (the will is published).
    Refused(u8, String),
}

/// A delivery the client has not acknowledged yet.
struct InFlight {
    filter: String,
    message: Received,
    /// PUBREC came (QoS 2): waiting for PUBCOMP.
    released: bool,
}

/// One subscription of the session.
struct Sub {
    target: Target,
    qos: u8,
    /// 5.0's retain as published.
    retain_as_published: bool,
    acker: Acker,
    /// A `$share/GROUP/FILTER` subscription's queue (it reads `target`'s messages
    /// from there, competing with the group's other members).
    shared: Option<DestinationKey>,
}

/// Serves one MQTT connection until it ends. The session is made (and registered)
/// now, and the future holds it alone: an `async fn` would hold its arguments beside
/// it for as long as the connection lives.
pub fn serve<S>(io: S, mqtt: Arc<MqttShared>, accepted: Accepted) -> impl Future<Output = ()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let registration = mqtt.config.connections.register(
        &accepted.session_id,
        accepted.peer,
        <super::Mqtt as crate::transport::Protocol>::NAME,
        accepted.transport,
    );
    let mut s = Session {
        link: Link::new(
            io,
            Wire::new(PRE_CONNECT_MAX_PACKET.min(mqtt.config.max_packet_size)),
        ),
        mqtt,
        connection: crate::broker::next_connection_id(),
        accepted,
        registration,
        registered: (false, 0),
        connected: None,
        principal: None,
        claim: None,
        take_over: None,
        will: None,
        persistent: false,
        resumed: false,
        session_expiry: 0,
        keep_alive: None,
        opened: Instant::now(),
        last_read: Instant::now(),

        subs: StreamMap::new(),
        info: HashMap::new(),
        in_flight: HashMap::new(),
        next_packet_id: 1,
        window: 0,
        client_max_packet: None,
        sends: Lazy::default(),
        qos2: HashSet::new(),
        qos2_pending: HashSet::new(),
        qos1_pending: HashSet::new(),
        stored: false,
        held: VecDeque::new(),
        wait: None,
        disconnect: None,
        acks: Lazy::default(),
        aliases: HashMap::new(),
        producing: HashSet::new(),
        out: Vec::new(),
    };
    async move {
        let end = s.run().await;
        // Boxed: its store calls would otherwise size every idle connection's task.
        Box::pin(s.close(end)).await;
    }
}

struct Session<S> {
    link: Link<S, Wire>,
    /// The broker and the settings, shared by every connection of the listener.
    mqtt: Arc<MqttShared>,
    /// This connection's number ([`crate::broker::next_connection_id`]): no-local.
    connection: u64,
    accepted: Accepted,
    registration: crate::transport::connections::Registration,
    registered: (bool, usize),
    /// The client id, once CONNECT is accepted.
    connected: Option<String>,
    principal: Option<Principal>,
    claim: Option<Claim>,
    take_over: Option<tokio::sync::oneshot::Receiver<()>>,
    /// Boxed: most connections have none, and every connection would hold its room.
    will: Option<Box<Will>>,
    /// The session outlives the connection (durable subscriptions, stored filters).
    persistent: bool,
    /// A stored session was resumed (or may exist): a non-persistent end discards it.
    resumed: bool,
    /// 5.0's session expiry interval, s ([`u32::MAX`]: never; 3.1.1's persistent
    /// sessions): a persistent session ends this long after its connection.
    session_expiry: u32,
    /// 1.5 × the client's keep-alive.
    keep_alive: Option<Duration>,
    opened: Instant,
    last_read: Instant,

    subs: StreamMap<String, Subscription>,
    info: HashMap<String, Sub>,
    in_flight: HashMap<u16, InFlight>,
    next_packet_id: u16,
    /// QoS 1 and 2 deliveries the client takes unacknowledged.
    window: usize,
    client_max_packet: Option<u32>,
    sends: Lazy<FuturesOrdered<Pending<Sent>>>,
    /// QoS 2 packet ids received, stored and answered (PUBREC), not yet released
    /// (PUBREL).
    qos2: HashSet<u16>,
    /// QoS 2 packet ids read and not answered yet (held for space, or their store
    /// commit awaited: PUBREC not sent yet).
    qos2_pending: HashSet<u16>,
    /// QoS 1 packet ids read and not answered yet (PUBACK not sent yet).
    qos1_pending: HashSet<u16>,
    /// Something of this client id's session is stored (resumed, or a filter
    /// remembered): a session that ends without persisting discards it.
    stored: bool,
    held: VecDeque<Box<Publish>>,
    wait: Option<Pending<Result<(), Error>>>,
    /// A DISCONNECT read while publishes were held for space: it ends the connection
    /// once they have gone (nothing more is read meanwhile).
    disconnect: Option<End>,
    acks: Lazy<FuturesUnordered<Pending<Result<(), Error>>>>,
    aliases: HashMap<u16, String>,
    producing: HashSet<DestinationKey>,
    out: Vec<Out>,
}

impl<S> Session<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn version(&self) -> Version {
        self.link.codec().version().unwrap_or(Version::V3)
    }

    /// Whether the next packet is read. Past [`MqttConfig::receive_maximum`] publishes
    /// waiting for their commits, a 3.1.1 client is not read until one commits; a 5.0
    /// client is read one packet further, so that a publish over the receive
    /// maximum it was given is seen ([`Session::unanswered`]) and refused.
    fn reading(&self) -> bool {
        let max = self.receive_maximum();
        let pipelined = match self.version() {
            Version::V5 => self.sends.len() <= max,
            Version::V3 => self.sends.len() < max,
        };
        self.disconnect.is_none() && self.held.len() < MAX_HELD && pipelined
    }

    /// The receive maximum CONNACK gives a 5.0 client ([`MqttConfig::receive_maximum`]).
    fn receive_maximum(&self) -> usize {
        usize::from(self.mqtt.config.receive_maximum.max(1))
    }

    /// QoS 1 and 2 publishes of the client not answered yet by PUBACK or PUBCOMP: read
    /// and not yet answered, and QoS 2 ones answered by PUBREC and waiting for
    /// PUBREL. 5.0's receive maximum bounds them.
    fn unanswered(&self) -> usize {
        self.qos1_pending.len() + self.qos2_pending.len() + self.qos2.len()
    }

    fn may_deliver(&self) -> bool {
        self.connected.is_some()
            && self.in_flight.len() < self.window
            && self.out.len() < WRITE_BATCH
    }

    async fn run(&mut self) -> End {
        loop {
            let due = self.next_timeout();
            let turn = tokio::select! {
                                                packet = self.link.next(), if self.reading() => {
                    self.last_read = Instant::now();

                    self.on_read(packet).await
                }
                Some(sent) = self.sends.next(), if !self.sends.is_empty() => {
                    // The commits of one group commit are answered in one write.
                    let mut turn = self.on_sent(sent);
                    while turn.is_ok() && self.out.len() < WRITE_BATCH {
                        match self.sends.next().now_or_never() {
                            Some(Some(sent)) => turn = self.on_sent(sent),
                            _ => break,
                        }
                    }
                    turn
                }
                waited = async { self.wait.as_mut().expect("guarded").await }, if self.wait.is_some() => {
                    self.wait = None;
                    Box::pin(self.on_space(waited)).await
                }
                                Some((filter, message)) = self.subs.next(), if self.may_deliver() => {
                    // The deliveries ready now go out in one write.
                    self.deliver(filter, message);
                    while self.may_deliver() {
                        match self.subs.next().now_or_never() {
                            Some(Some((filter, message))) => self.deliver(filter, message),
                            _ => break,
                        }
                    }
                    Ok(())
                }
                Some(acked) = self.acks.next(), if !self.acks.is_empty() => {
                    if let Err(e) = acked {
                        tracing::info!(session = %self.accepted.session_id, error = %e, "an acknowledged delivery's ack failed; it is delivered again");
                    }
                    Ok(())
                }
                closed = async { self.registration.closed.as_mut().expect("guarded").await }, if self.registration.closed.is_some() => {
                    self.registration.closed = None;
                    match closed {
                        Ok(()) => Err(End::Refused(reason::ADMINISTRATIVE_ACTION, "closed by an operator (admin API)".into())),
                        Err(_) => Ok(()),
                    }
                }
                told = async { self.take_over.as_mut().expect("guarded").await }, if self.take_over.is_some() => {
                    self.take_over = None;
                    match told {
                        Ok(()) => Err(End::Refused(reason::SESSION_TAKEN_OVER, "client id taken over by a newer connection".into())),
                        Err(_) => Ok(()),
                    }
                }
                _ = tokio::time::sleep_until(due.into()) => self.on_timer(),
            };
            if let Err(end) = turn {
                return end;
            }
            if self.flush().await.is_err() {
                return End::Lost;
            }
            let now = (self.connected.is_some(), self.subs.len());
            if now != self.registered {
                let login = self.principal.as_ref().map(|p| p.login.as_str());
                self.registration
                    .update(now.0, login, self.connected.as_deref(), now.1);
                self.registered = now;
            }
        }
    }

    /// A packet read (or the end of the input, or bytes that are no packet), then the
    /// packets already read behind it, up to [`WRITE_BATCH`]: a pipelining client's
    /// packets are applied in one turn and answered in one write.
    async fn on_read(&mut self, first: Option<Result<In, wire::WireError>>) -> Result<(), End> {
        let mut next = first;
        let mut applied = 0;
        loop {
            match next {
                None => return Err(End::Lost),
                Some(Ok(packet)) => self.on_packet(packet).await?,
                Some(Err(e)) => return Err(self.on_bad_bytes(e)),
            }
            applied += 1;
            // Checked before the next packet is taken: one taken is always applied.
            if applied >= WRITE_BATCH || !self.reading() || self.out.len() >= WRITE_BATCH {
                return Ok(());
            }
            match self.link.next().now_or_never() {
                Some(more) => next = more,
                None => return Ok(()),
            }
        }
    }

    /// Writes what the turn queued; a client that reads nothing for the CONNECT
    /// timeout is dropped.
    async fn flush(&mut self) -> Result<(), ()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let stall = Duration::from_millis(self.mqtt.config.connect_timeout_ms);
        let link = &mut self.link;
        // Taken, so an idle connection keeps no room for packets.
        let out = std::mem::take(&mut self.out);
        let write = async {
            for packet in out {
                link.feed(packet)?;
            }
            link.write_out().await
        };
        match tokio::time::timeout(stall, write).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(()),
        }
    }

    fn next_timeout(&self) -> Instant {
        let mut due = Instant::now() + Duration::from_secs(3_600);

        if self.connected.is_none() {
            due = due.min(self.opened + Duration::from_millis(self.mqtt.config.connect_timeout_ms));
        }
        if let Some(keep_alive) = self.keep_alive {
            // While the broker holds publishes it does not read: no silence of the client's.
            if self.reading() {
                due = due.min(self.last_read + keep_alive);
            }
        }
        due
    }

    fn on_timer(&mut self) -> Result<(), End> {
        if self.connected.is_none()
            && self.opened.elapsed() >= Duration::from_millis(self.mqtt.config.connect_timeout_ms)
        {
            tracing::info!(session = %self.accepted.session_id, "closing: no CONNECT in time");
            return Err(End::Lost);
        }
        if !self.reading() {
            self.last_read = Instant::now();
        }
        if let Some(keep_alive) = self.keep_alive {
            if self.last_read.elapsed() >= keep_alive {
                tracing::info!(session = %self.accepted.session_id, "closing: keep-alive timeout");
                return Err(End::Refused(
                    reason::KEEP_ALIVE_TIMEOUT,
                    "keep-alive timeout".into(),
                ));
            }
        }
        Ok(())
    }

    /// Bytes that are no packet (or too large): 5.0 is told why; the connection ends.
    fn on_bad_bytes(&mut self, e: wire::WireError) -> End {
        tracing::info!(session = %self.accepted.session_id, peer = %self.accepted.peer, error = %e, "closing: bad packet");
        match e {
            wire::WireError::Io(_) => End::Lost,
            wire::WireError::UnsupportedVersion if self.connected.is_none() => {
                self.connack_refused(
                    reason::UNSUPPORTED_PROTOCOL_VERSION,
                    "unsupported protocol version",
                );
                End::Lost
            }
            wire::WireError::TooLarge { .. } => {
                End::Refused(reason::PACKET_TOO_LARGE, e.to_string())
            }
            wire::WireError::TopicAliasZero => {
                End::Refused(reason::TOPIC_ALIAS_INVALID, e.to_string())
            }
            _ => End::Refused(reason::MALFORMED_PACKET, e.to_string()),
        }
    }

    async fn on_packet(&mut self, packet: In) -> Result<(), End> {
        let protocol_error = |what: String| End::Refused(reason::PROTOCOL_ERROR, what);
        match packet {
            In::Connect(c) if self.connected.is_none() => Box::pin(self.connect(*c)).await,
            In::Connect(_) => Err(protocol_error("a second CONNECT".into())),
            _ if self.connected.is_none() => Err(protocol_error("a packet before CONNECT".into())),
            In::Publish(p) => Box::pin(self.publish(p)).await,
            In::PubAck(id) => {
                match self.in_flight.get(&id) {
                    Some(f) if !f.released => {
                        let f = self.in_flight.remove(&id).expect("found");
                        self.ack(&f.filter, &f.message);
                    }
                    _ => {
                        tracing::debug!(session = %self.accepted.session_id, id, "PUBACK of no QoS 1 delivery")
                    }
                }
                Ok(())
            }
            In::PubRec(id) => {
                if let Some(f) = self.in_flight.get_mut(&id) {
                    if !f.released {
                        f.released = true;
                        let (filter, message) = (f.filter.clone(), f.message.clone());
                        self.ack(&filter, &message);
                    }
                }
                self.out.push(Out::PubRel(id));
                Ok(())
            }
            In::PubComp(id) => {
                if matches!(self.in_flight.get(&id), Some(f) if f.released) {
                    self.in_flight.remove(&id);
                }
                Ok(())
            }
            In::PubRel(id) => {
                if self.persistent {
                    // Held until now: delivered, then PUBCOMP (a failure closes the
                    // connection unanswered, so the client sends PUBREL again).
                    if let Err(e) = Box::pin(self.release(id)).await {
                        return Err(End::Refused(
                            reason::UNSPECIFIED_ERROR,
                            format!("the message of PUBREL {id} could not be delivered: {e}"),
                        ));
                    }
                }
                self.qos2.remove(&id);
                self.out.push(Out::PubComp(id));
                Ok(())
            }
            In::Subscribe { packet_id, filters } => {
                let mut codes = Vec::with_capacity(filters.len());
                let mut retained = Vec::new();
                for f in filters {
                    let (code, found) = Box::pin(self.subscribe(f)).await;
                    codes.push(code);
                    retained.extend(found);
                }
                self.out.push(Out::SubAck(packet_id, codes));
                for (qos, message) in retained {
                    self.deliver_retained(qos, message);
                }
                Ok(())
            }
            In::Unsubscribe { packet_id, filters } => {
                let mut codes = Vec::with_capacity(filters.len());
                for f in filters {
                    codes.push(Box::pin(self.unsubscribe(&f)).await);
                }
                self.out.push(Out::UnsubAck(packet_id, codes));
                Ok(())
            }
            In::Ping => {
                self.out.push(Out::Pong);
                Ok(())
            }
            In::Disconnect {
                reason,
                session_expiry,
            } => {
                match session_expiry {
                    Some(0) => self.persistent = false,
                    Some(_) if self.session_expiry == 0 => {
                        // 5.0 (3.14.2.2.2): a session that ends with its connection
                        // cannot be made to outlive it at DISCONNECT.
                        return Err(protocol_error(
                            "a DISCONNECT gives a session expiry interval to a session whose CONNECT had none".into(),
                        ));
                    }
                    Some(secs) => self.session_expiry = secs,
                    None => {}
                }
                let end = End::Disconnect {
                    will: reason == 0x04,
                };
                if self.held.is_empty() && self.wait.is_none() {
                    return Err(end);
                }
                // The publishes before it, held for space, go first.
                self.disconnect = Some(end);
                Ok(())
            }
            In::Unexpected(what) => Err(protocol_error(format!("a client does not send {what}"))),
            In::SubscriptionIdentifier => Err(End::Refused(
                reason::SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
                "subscription identifiers are not offered (CONNACK says so): SUBSCRIBE without one"
                    .into(),
            )),
        }
    }

    fn connack_refused(&mut self, code: u8, why: &str) {
        self.out.push(Out::ConnAck(Box::new(ConnAck {
            reason: code,
            reason_string: Some(why.to_string()),
            ..ConnAck::default()
        })));
    }

    /// CONNECT: log in, claim the client id, start or resume the session, answer
    /// CONNACK. A refusal is a CONNACK with its reason, then the end.
    async fn connect(&mut self, c: Connect) -> Result<(), End> {
        let refused = |this: &mut Self, code: u8, why: String| {
            tracing::info!(session = %this.accepted.session_id, peer = %this.accepted.peer, client_id = %c.client_id, "refused MQTT connection: {why}");
            this.connack_refused(code, &why);
            Err(End::Lost)
        };
        if self.mqtt.broker.refuse_if_shut_down().is_err() {
            return refused(
                self,
                reason::SERVER_UNAVAILABLE,
                "the broker is shutting down".into(),
            );
        }
        if c.auth_method.is_some() {
            return refused(
                self,
                reason::BAD_AUTHENTICATION_METHOD,
                "no enhanced authentication (AUTH) here: log in with user name and password".into(),
            );
        }
        let mut assigned = None;
        let client_id = if c.client_id.is_empty() {
            if c.version == Version::V3 && !c.clean_start {
                return refused(
                    self,
                    reason::CLIENT_ID_NOT_VALID,
                    "an empty client id needs clean session".into(),
                );
            }
            let id = format!("ebb-mqtt-{}", self.accepted.session_id);
            assigned = Some(id.clone());
            id
        } else {
            c.client_id.clone()
        };
        if let Err((code, why)) = self.log_in(&c).await {
            return refused(self, code, why);
        }
        if let Some(will) = &c.will {
            let checked = topic::destination(&will.topic)
                .map_err(|e| (reason::TOPIC_NAME_INVALID, format!("will: {e}")))
                .and_then(|key| {
                    self.authorize(Right::Write, &key)
                        .map_err(|e| (reason::NOT_AUTHORIZED, format!("will: {e}")))
                });
            if let Err((code, why)) = checked {
                return refused(self, code, why);
            }
        }
        let claim = match self.mqtt.config.client_ids.claim(&client_id, true).await {
            Ok(claim) => claim,
            Err(e) => return refused(self, reason::SERVER_UNAVAILABLE, e.to_string()),
        };
        self.claim = Some(claim);
        self.take_over = self.claim.as_mut().and_then(Claim::take_over_signal);
        {
            let mut generations = self.mqtt.config.state.generations.lock();
            *generations.entry(client_id.clone()).or_insert(0) += 1;
        }
        // The session: a clean start discards what is stored; otherwise it resumes.
        let stored = match self
            .mqtt
            .broker
            .session_subscriptions(PROTOCOL, &client_id)
            .await
        {
            Ok(stored) => stored,
            Err(e) => {
                return refused(
                    self,
                    reason::SERVER_UNAVAILABLE,
                    format!("cannot read the stored session: {e}"),
                )
            }
        };
        self.connected = Some(client_id.clone());
        self.persistent = c.session_expiry > 0;
        self.session_expiry = c.session_expiry;
        // A persistent session is marked in the store while connected (below): a
        // mark says the session exists, even with no subscription.
        let marked = match self
            .mqtt
            .broker
            .cancel_session_expiry(PROTOCOL, &client_id)
            .await
        {
            Ok(marked) => marked,
            Err(e) => {
                return refused(
                    self,
                    reason::SERVER_UNAVAILABLE,
                    format!("cannot read the stored session: {e}"),
                )
            }
        };
        self.window = c
            .receive_max
            .unwrap_or(self.mqtt.config.delivery_window)
            .max(1) as usize;
        self.client_max_packet = c.max_packet_size;
        if c.keep_alive > 0 {
            self.keep_alive = Some(Duration::from_millis(c.keep_alive as u64 * 1_500));
        }
        let mut session_present = false;
        if c.clean_start {
            if let Err(e) = self.discard_session(&client_id, &stored).await {
                return refused(
                    self,
                    reason::SERVER_UNAVAILABLE,
                    format!("cannot discard the stored session: {e}"),
                );
            }
            self.mqtt.config.state.received.lock().remove(&client_id);
        } else {
            self.resumed = !stored.is_empty() || marked;
            self.stored = self.resumed;
            session_present = self.resumed;
            if let Some(ids) = self.mqtt.config.state.received.lock().remove(&client_id) {
                self.qos2 = ids;
            }
            for s in &stored {
                let code = self.attach(&s.filter, s.qos, (false, false), true).await;
                if code >= 0x80 {
                    tracing::warn!(session = %self.accepted.session_id, %client_id, filter = %s.filter, code, "a stored subscription could not be resumed");
                }
            }
        }
        if self.persistent {
            // Connected, the session has no deadline yet (it gets one when the
            // connection ends); its mark says so, and that it exists.
            let mark = connected(self.session_expiry);
            if let Err(e) = self
                .mqtt
                .broker
                .expire_session_at(PROTOCOL, &client_id, mark)
                .await
            {
                return refused(
                    self,
                    reason::SERVER_UNAVAILABLE,
                    format!("cannot store the session: {e}"),
                );
            }
            self.stored = true;
        }
        self.will = c.will.map(Box::new);
        self.link
            .codec_mut()
            .set_max_packet_size(self.mqtt.config.max_packet_size);
        self.out.push(Out::ConnAck(Box::new(ConnAck {
            session_present,
            reason: reason::SUCCESS,
            reason_string: None,
            assigned_client_id: assigned,
            receive_max: self.mqtt.config.receive_maximum.max(1),
            max_packet_size: self.mqtt.config.max_packet_size,
            topic_alias_max: TOPIC_ALIASES,
            retain_available: true,
            shared_available: true,
        })));
        tracing::debug!(session = %self.accepted.session_id, %client_id, persistent = self.persistent, session_present, "MQTT connected");
        Ok(())
    }

    /// Logs in by the client certificate's subject (TLS) or by user name and password.
    async fn log_in(&mut self, c: &Connect) -> Result<(), (u8, String)> {
        let security = Arc::clone(&self.mqtt.config.security);
        if let (Some(subject), true) = (
            &self.accepted.certificate_subject,
            security.requires_login(),
        ) {
            match security.authenticate_certificate(subject, c.username.as_deref()) {
                Some(Ok(principal)) => {
                    self.principal = Some(principal);
                    return Ok(());
                }
                Some(Err(e)) => return Err((reason::BAD_USER_NAME_OR_PASSWORD, e.to_string())),
                None => {}
            }
        }
        let password = match &c.password {
            None => None,
            Some(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => Some(text.to_string()),
                Err(_) => {
                    return Err((
                        reason::BAD_USER_NAME_OR_PASSWORD,
                        "the password is not UTF-8 text".into(),
                    ))
                }
            },
        };
        match security
            .log_in(
                Some(self.accepted.peer.ip()),
                PROTOCOL,
                c.username.clone(),
                password,
            )
            .await
        {
            Ok(principal) => {
                self.principal = principal;
                Ok(())
            }
            Err(LoginFailure::Throttled(why)) => Err((
                reason::SERVER_UNAVAILABLE,
                format!("authentication failed: {why}"),
            )),
            Err(failure) => Err((reason::BAD_USER_NAME_OR_PASSWORD, failure.to_string())),
        }
    }

    /// Whether this connection's user has `right` on `key` (STOMP's rights).
    /// Errors: [`AccessError`], whose text a refusal carries.
    fn authorize(&self, right: Right, key: &DestinationKey) -> Result<(), AccessError> {
        self.mqtt
            .config
            .security
            .authorize(self.principal.as_ref(), right, key)
    }

    /// A publish refused before it reached the broker: 5.0 QoS 1 and 2 are answered
    /// with `code`; otherwise (QoS 0, or 3.1.1, which has no negative
    /// acknowledgement) the connection ends with it.
    fn refuse_publish(&mut self, p: &Publish, code: u8, why: String) -> Result<(), End> {
        tracing::info!(session = %self.accepted.session_id, topic = %p.topic, code, "refused PUBLISH: {why}");
        if let Some(id) = p.packet_id {
            // Answered (or the connection ends): no longer pending.
            match p.qos {
                1 => self.qos1_pending.remove(&id),
                _ => self.qos2_pending.remove(&id),
            };
        }
        match (self.version(), p.qos, p.packet_id) {
            (Version::V5, 1, Some(id)) => self.out.push(Out::PubAck(id, code)),
            (Version::V5, 2, Some(id)) => self.out.push(Out::PubRec(id, code)),
            _ => return Err(End::Refused(code, why)),
        }
        Ok(())
    }

    async fn publish(&mut self, mut p: Box<Publish>) -> Result<(), End> {
        if p.qos > 0 && p.packet_id.is_none() {
            return Err(End::Refused(
                reason::PROTOCOL_ERROR,
                "a QoS 1 or 2 PUBLISH without a packet id".into(),
            ));
        }
        if p.qos == 2 {
            let id = p.packet_id.expect("checked");
            if self.qos2.contains(&id) {
                // A resend of one received already: answered again, not stored again.
                self.out.push(Out::PubRec(id, reason::SUCCESS));
                return Ok(());
            }
            if self.qos2_pending.contains(&id) {
                // A resend of one whose commit is awaited: its PUBREC comes with it.
                return Ok(());
            }
            if self.persistent {
                // Resent after a restart of the broker or a takeover (with DUP, or
                // without, as some clients do): held already?
                match self.mqtt.broker.is_held(&self.held_name(id)).await {
                    Ok(true) => {
                        self.qos2.insert(id);
                        self.out.push(Out::PubRec(id, reason::SUCCESS));
                        return Ok(());
                    }
                    Ok(false) => {}
                    Err(e) => {
                        return self.refuse_publish(&p, reason::UNSPECIFIED_ERROR, e.to_string())
                    }
                }
            }
        }
        if let (1 | 2, Some(id)) = (p.qos, p.packet_id) {
            let pending = match p.qos {
                1 => &self.qos1_pending,
                _ => &self.qos2_pending,
            };
            // A new one (a QoS 1 resend of one not answered yet is the same publish;
            // QoS 2 resends were answered above) past 5.0's receive maximum: 3.3.4.
            let max = self.receive_maximum();
            if self.version() == Version::V5 && !pending.contains(&id) && self.unanswered() >= max {
                return Err(End::Refused(
                    reason::RECEIVE_MAXIMUM_EXCEEDED,
                    format!("more than the receive maximum ({max}) of QoS 1 and 2 publishes not answered by PUBACK or PUBCOMP"),
                ));
            }
            match p.qos {
                1 => self.qos1_pending.insert(id),
                _ => self.qos2_pending.insert(id),
            };
        }
        if let Some(alias) = p.properties.topic_alias {
            if alias == 0 || alias > TOPIC_ALIASES {
                return Err(End::Refused(
                    reason::TOPIC_ALIAS_INVALID,
                    format!("topic alias {alias} is not between 1 and {TOPIC_ALIASES}"),
                ));
            }
            if p.topic.is_empty() {
                match self.aliases.get(&alias) {
                    Some(topic) => p.topic = topic.clone(),
                    None => {
                        return Err(End::Refused(
                            reason::PROTOCOL_ERROR,
                            format!("topic alias {alias} was never set"),
                        ))
                    }
                }
            } else {
                self.aliases.insert(alias, p.topic.clone());
            }
        }

        if !self.held.is_empty() || self.wait.is_some() {
            self.held.push_back(p);
            return Ok(());
        }
        self.start_publish(p).await
    }

    /// A publish that may go now: checked, flow-controlled, and started (its answer
    /// comes with its commit).
    async fn start_publish(&mut self, p: Box<Publish>) -> Result<(), End> {
        let key = match topic::destination(&p.topic) {
            Ok(key) => key,
            Err(e) => return self.refuse_publish(&p, reason::TOPIC_NAME_INVALID, e.to_string()),
        };
        if let Err(e) = self.authorize(Right::Write, &key) {
            return self.refuse_publish(&p, reason::NOT_AUTHORIZED, e.to_string());
        }
        let persistent = p.qos > 0;
        match self.mqtt.broker.check_space(&key, persistent) {
            Ok(Space::Free) => {}
            Ok(Space::Wait) => {
                let broker = self.mqtt.broker.clone();
                let waiting = key.clone();
                self.wait = Some(Box::pin(async move {
                    broker.wait_for_space(&waiting, persistent).await
                }));
                self.held.push_front(p);
                return Ok(());
            }
            Ok(Space::Fail(why)) => return self.refuse_publish(&p, reason::QUOTA_EXCEEDED, why),
            Err(e) => return self.refuse_publish(&p, reason::TOPIC_NAME_INVALID, e.to_string()),
        }
        let message = match self.message_of(&p) {
            Ok(m) => m,
            Err((code, why)) => return self.refuse_publish(&p, code, why),
        };
        if self.producing.insert(key.clone()) {
            self.mqtt.broker.producer_joined(&key);
        }
        let (id, qos) = (p.packet_id, p.qos);
        // A held QoS 2 message's retained copy goes at PUBREL, built from it.
        let retained = if p.retain && !(qos == 2 && self.persistent) {
            self.retained_copy(&p)
        } else {
            None
        };
        // A persistent session's QoS 2 message is held until PUBREL, in the store
        // under its packet id, so a resend after a crash is not stored twice.
        let held = (qos == 2 && self.persistent).then(|| self.held_name(id.expect("checked")));
        let sending = match &held {
            Some(name) => self.mqtt.broker.hold_send(&key, message, name).await,
            None => {
                self.mqtt
                    .broker
                    .start_send_with(&key, message, SendOptions::checked())
                    .await
            }
        };
        let sent = match sending {
            Ok(pending) => pending,
            Err(e) => {
                if let Some(name) = &held {
                    let _ = self.mqtt.broker.drop_held(&format!("{name}:")).await;
                }
                return self.on_sent((id, qos, Err(e)));
            }
        };
        let broker = self.mqtt.broker.clone();
        // A retained publish is answered once the retained queue has it too.
        let kept = match retained {
            Some((queue, copy)) => match self
                .mqtt
                .broker
                .start_send_with(&queue, copy, SendOptions::checked())
                .await
            {
                Ok(pending) => Some(pending),
                Err(e) => return self.on_sent((id, qos, Err(e))),
            },
            None => None,
        };
        self.sends.push(Box::pin(async move {
            let mut outcome = sent.await.map(drop);
            if let Some(kept) = kept {
                outcome = outcome.and(kept.await.map(drop));
            }
            if let (Err(_), Some(name)) = (&outcome, &held) {
                // Refused: none of it stays held (the client may send it again).
                let _ = broker.drop_held(&format!("{name}:")).await;
            }
            (id, qos, outcome)
        }));
        Ok(())
    }

    /// The message a PUBLISH sends (5.0's properties as headers: see [`super`]).
    fn message_of(&self, p: &Publish) -> Result<Message, (u8, String)> {
        let mut m = Message::new(p.payload.clone())
            .persistent(p.qos > 0)
            .from_connection(self.connection);
        if p.qos == 2 {
            m = m.header(QOS_HEADER, "2");
        }
        if p.retain {
            m = m.header(RETAIN_HEADER, "1");
        }
        let props = &p.properties;
        if let Some(secs) = props.message_expiry_secs {
            m = m.ttl(Duration::from_secs(secs as u64));
        }
        if let Some(ct) = &props.content_type {
            m = m.header("content-type", ct.clone());
        }
        if let Some(reply) = &props.response_topic {
            let key = topic::destination(reply)
                .map_err(|e| (reason::TOPIC_NAME_INVALID, format!("response topic: {e}")))?;
            m = m.header("reply-to", key.stomp());
        }
        if let Some(data) = &props.correlation_data {
            let text = std::str::from_utf8(data).map_err(|_| {
                (
                    reason::PAYLOAD_FORMAT_INVALID,
                    "correlation data must be UTF-8 text here (it is the correlation-id header)"
                        .to_string(),
                )
            })?;
            m = m.header("correlation-id", text);
        }
        if props.utf8_payload {
            m = m.header(FORMAT_HEADER, "utf-8");
        }
        for (name, value) in &props.user_properties {
            m = m.header(name.clone(), value.clone());
        }
        Ok(m)
    }

    /// A publish's commit came (or its send failed): QoS 1 and 2 are answered.
    fn on_sent(&mut self, (id, qos, outcome): Sent) -> Result<(), End> {
        if let (2, Some(id)) = (qos, id) {
            self.qos2_pending.remove(&id);
            if outcome.is_ok() {
                self.qos2.insert(id);
            }
        }
        if let (1, Some(id)) = (qos, id) {
            self.qos1_pending.remove(&id);
        }
        match (outcome, id) {
            (Ok(()), Some(id)) if qos == 1 => self.out.push(Out::PubAck(id, reason::SUCCESS)),
            (Ok(()), Some(id)) if qos == 2 => self.out.push(Out::PubRec(id, reason::SUCCESS)),
            (Ok(()), _) => {}
            (Err(e), id) => {
                let code = match e {
                    Error::ResourceLimit { .. } => reason::QUOTA_EXCEEDED,
                    Error::ShuttingDown => reason::SERVER_SHUTTING_DOWN,
                    _ => reason::UNSPECIFIED_ERROR,
                };
                let why = format!("message not accepted: {e}");
                tracing::info!(session = %self.accepted.session_id, code, "{why}");
                match (self.version(), id) {
                    (Version::V5, Some(id)) if qos == 1 => self.out.push(Out::PubAck(id, code)),
                    (Version::V5, Some(id)) if qos == 2 => self.out.push(Out::PubRec(id, code)),
                    _ => return Err(End::Refused(code, why)),
                }
            }
        }
        Ok(())
    }

    /// The wait for space ended: the held publishes go, up to the next that waits.
    async fn on_space(&mut self, waited: Result<(), Error>) -> Result<(), End> {
        if let Err(e) = waited {
            let p = self.held.pop_front().expect("a held publish waited");
            self.refuse_publish(&p, reason::QUOTA_EXCEEDED, e.to_string())?;
        }
        while self.wait.is_none() {
            let Some(p) = self.held.pop_front() else {
                break;
            };
            self.start_publish(p).await?;
        }
        if self.held.is_empty() && self.wait.is_none() {
            if let Some(end) = self.disconnect.take() {
                return Err(end);
            }
        }
        Ok(())
    }

    /// SUBSCRIBE of one filter: its SUBACK code, and the retained messages it gets
    /// (to go after the SUBACK) as their QoS.
    async fn subscribe(&mut self, f: Filter) -> (u8, Vec<(u8, Received)>) {
        let existed = self.info.contains_key(&f.filter);
        let code = self.subscribe_filter(&f).await;
        let wants = match f.retain_handling {
            0 => true,
            1 => !existed,
            _ => false,
        };
        // A shared subscription gets no retained messages (5.0, 4.8.2).
        if code >= 0x80 || !wants || f.filter.starts_with("$share/") {
            return (code, Vec::new());
        }
        (code, self.retained_for(&f.filter, code).await)
    }

    /// SUBSCRIBE of one filter: its SUBACK code.
    async fn subscribe_filter(&mut self, f: &Filter) -> u8 {
        if !self.info.contains_key(&f.filter)
            && self.info.len()
                >= self
                    .mqtt
                    .config
                    .max_subscriptions
                    .min(MAX_SESSION_SUBSCRIPTIONS)
        {
            tracing::info!(session = %self.accepted.session_id, max = self.mqtt.config.max_subscriptions, "refused filter: too many subscriptions (max_subscriptions)");
            return reason::QUOTA_EXCEEDED;
        }
        let qos = f.qos.min(2);
        // A second SUBSCRIBE of a filter replaces the first (its QoS).
        // (A shared one stays a member: the same filter joins the same group again.)
        self.subs.remove(&f.filter);
        self.info.remove(&f.filter);
        let options = (f.no_local, f.retain_as_published);
        let code = self.attach(&f.filter, qos, options, false).await;
        if code < 0x80 && self.persistent {
            let client = self.connected.clone().unwrap_or_default();
            let sub = SessionSubscription {
                filter: f.filter.clone(),
                qos,
            };
            self.stored = true;
            if let Err(e) = self
                .mqtt
                .broker
                .remember_session_subscription(PROTOCOL, &client, &sub)
                .await
            {
                tracing::warn!(session = %self.accepted.session_id, error = %e, "cannot store the session's subscription");
                self.subs.remove(&f.filter);
                self.info.remove(&f.filter);
                return reason::UNSPECIFIED_ERROR;
            }
        }
        code
    }

    /// The retained messages of the topics `filter` matches that this user may read,
    /// each with the QoS it goes at (the smaller of `granted` and its own), at most
    /// [`MAX_RETAINED_PER_SUBSCRIBE`]. Read by browsing the retained queue in its
    /// pages, with a selector on the filter's literal prefix when it has one.
    async fn retained_for(&self, filter: &str, granted: u8) -> Vec<(u8, Received)> {
        let (Some((queue, header)), Ok(target)) = (retained_queue(), topic::filter(filter)) else {
            return Vec::new();
        };
        let prefix: String = filter
            .chars()
            .take_while(|c| !matches!(c, '+' | '#'))
            .collect();
        let selector = if prefix.is_empty() || prefix.contains(['\'', '%', '_', '\\']) {
            None
        } else {
            crate::broker::Selector::parse(&format!("{header} LIKE '{prefix}%'")).ok()
        };
        let mut browser = match self
            .mqtt
            .broker
            .browse_queue_matching(&queue, selector)
            .await
        {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(session = %self.accepted.session_id, error = %e, "cannot read the retained messages");
                return Vec::new();
            }
        };
        let mut found = Vec::new();
        while let Some(next) = browser.next().await {
            let Ok(message) = next else { break };
            if message.body().is_empty() {
                continue; // a cleared topic
            }
            let Some(key) = message
                .header(header)
                .and_then(|t| topic::destination(t).ok())
            else {
                continue;
            };
            let matches = match &target {
                Target::One(one) => *one == key,
                Target::Pattern(p) => p.matches(&key),
            };
            if !matches || !topic::reads(filter, &key) || self.authorize(Right::Read, &key).is_err()
            {
                continue;
            }
            if found.len() == MAX_RETAINED_PER_SUBSCRIBE {
                tracing::info!(session = %self.accepted.session_id, %filter, max = MAX_RETAINED_PER_SUBSCRIBE, "more retained messages match than one SUBSCRIBE gets");
                break;
            }
            let qos = match message.header(QOS_HEADER) {
                Some("2") => 2,
                Some("1") => 1,
                _ => 0,
            };
            found.push((granted.min(qos), message));
        }
        found
    }

    /// A retained message goes out with the retain flag; nothing acks it (it stays
    /// retained).
    fn deliver_retained(&mut self, qos: u8, message: Received) {
        let Some(topic) =
            retained_queue().and_then(|(_, header)| message.header(header).map(str::to_string))
        else {
            return;
        };
        let mut publish = self.publish_of(topic, &message, qos);
        if !self.fits(&publish) {
            return;
        }
        publish.retain = true;
        publish.dup = false;
        // No subscription's: its PUBACK acks nothing.
        self.send_publish(publish, String::new(), message);
    }

    /// Sends `publish` of `message` for subscription `filter` (empty: none): at QoS 1
    /// or 2 with a packet id, waiting in flight for its acknowledgement.
    fn send_publish(&mut self, mut publish: Box<Publish>, filter: String, message: Received) {
        if publish.qos > 0 {
            let id = self.next_packet_id();
            publish.packet_id = Some(id);
            let released = false;
            self.in_flight.insert(
                id,
                InFlight {
                    filter,
                    message,
                    released,
                },
            );
        }
        self.out.push(Out::Publish(publish));
    }

    /// The copy of a retained publish `p` for the retained queue: persistent, keyed by
    /// its topic, with its QoS; an empty payload clears the topic's (it replaces the
    /// last one and is never delivered).
    fn retained_copy(&self, p: &Publish) -> Option<(DestinationKey, Message)> {
        let (queue, header) = retained_queue()?;
        let message = self
            .message_of(p)
            .ok()?
            .persistent(true)
            .header(header, p.topic.clone())
            .header(QOS_HEADER, p.qos.to_string());
        Some((queue, message))
    }

    /// Subscribes to `filter` at `qos` (durable in a persistent session): the
    /// granted QoS, or a failure reason. `resumed`: a stored subscription of the
    /// session, whose rights were checked when it was made (read is checked again).
    async fn attach(
        &mut self,
        filter: &str,
        qos: u8,
        (no_local, retain_as_published): (bool, bool),
        resumed: bool,
    ) -> u8 {
        let parsed = topic::shared(filter).and_then(|shared| match shared {
            Some((group, inner)) => Ok((
                topic::filter(inner)?,
                Some(topic::shared_queue(group, inner)?),
            )),
            None => Ok((topic::filter(filter)?, None)),
        });
        let target = match parsed {
            Ok((target, Some(queue))) => {
                return self
                    .attach_shared(
                        filter,
                        target,
                        queue,
                        qos,
                        (no_local, retain_as_published),
                        resumed,
                    )
                    .await
            }
            Ok((t, None)) => t,
            Err(e) => {
                tracing::info!(session = %self.accepted.session_id, "refused filter: {e}");
                return reason::TOPIC_FILTER_INVALID;
            }
        };
        let security = Arc::clone(&self.mqtt.config.security);
        let principal = self.principal.clone();
        let client = self.connected.clone().unwrap_or_default();
        let mut options = if self.persistent || resumed {
            if no_local {
                tracing::info!(session = %self.accepted.session_id, "refused filter: no local in a persistent session (a stored message keeps no origin)");
                return reason::IMPLEMENTATION_SPECIFIC;
            }
            let exists = match self
                .mqtt
                .broker
                .durable_subscription_exists(&target, &client, filter)
                .await
            {
                Ok(exists) => exists,
                Err(e) => {
                    tracing::warn!(session = %self.accepted.session_id, error = %e, "cannot subscribe");
                    return reason::UNSPECIFIED_ERROR;
                }
            };
            let mut rights = vec![Right::Read];
            rights.extend((!exists).then_some(Right::Admin));
            for right in rights {
                let checked = match &target {
                    Target::One(key) => security.authorize(principal.as_ref(), right, key),
                    Target::Pattern(p) => security.authorize_pattern(principal.as_ref(), right, p),
                };
                if let Err(e) = checked {
                    tracing::info!(session = %self.accepted.session_id, %filter, "refused filter: {e}");
                    return reason::NOT_AUTHORIZED;
                }
            }
            SubscribeOptions::durable(client, filter)
        } else {
            if let Target::One(key) = &target {
                if let Err(e) = security.authorize(principal.as_ref(), Right::Read, key) {
                    tracing::info!(session = %self.accepted.session_id, %filter, "refused filter: {e}");
                    return reason::NOT_AUTHORIZED;
                }
            }
            let mut options = SubscribeOptions::non_durable();
            if matches!(target, Target::Pattern(_)) {
                // Only the topics MQTT's filter reads, of those the user may read. (A
                // durable one is held on every topic its pattern matches: what the
                // filter does not read is dropped at delivery.)
                let authorizing = security.has_authorization();
                let filter = filter.to_string();
                options = options.accept(move |key| {
                    topic::reads(&filter, key)
                        && (!authorizing
                            || security
                                .authorize(principal.as_ref(), Right::Read, key)
                                .is_ok())
                });
            }
            if no_local {
                options.no_local = Some(self.connection);
            }
            options
        };
        options.connection = Some(self.connection);
        let source = target.clone();
        match self
            .consume(
                filter,
                source,
                options,
                (target, qos, retain_as_published, None),
            )
            .await
        {
            Ok(granted) => granted,
            Err(e) => refused_filter(&self.accepted, filter, e),
        }
    }

    /// Subscribes filter `filter` to `source` with `options` (acked by the client
    /// within the delivery window at QoS 1 and 2) and keeps it as `(target, qos,
    /// retain as published, shared queue)`: the granted QoS.
    async fn consume(
        &mut self,
        filter: &str,
        source: Target,
        mut options: SubscribeOptions,
        (target, qos, retain_as_published, shared): (Target, u8, bool, Option<DestinationKey>),
    ) -> Result<u8, Error> {
        if qos > 0 {
            options.ack = AckMode::Client;
            options.prefetch = Some(self.window.min(32_767) as u32);
        }
        let subscription = self.mqtt.broker.subscribe(&source, options).await?;
        let acker = subscription.acker();
        self.subs.insert(filter.to_string(), subscription);
        self.info.insert(
            filter.to_string(),
            Sub {
                target,
                qos,
                retain_as_published,
                acker,
                shared,
            },
        );
        Ok(qos)
    }

    /// [`Session::attach`] of shared subscription `filter` (`$share/GROUP/…`) to
    /// `target`, through its group's `queue`: the session joins the group (a
    /// persistent session as a durable member, which holds the group while it is
    /// offline), then consumes from the queue as one of its competing consumers. Needs
    /// read on every topic `target` covers (each member gets any of them), and admin
    /// for a persistent session that makes the group.
    async fn attach_shared(
        &mut self,
        filter: &str,
        target: Target,
        queue: DestinationKey,
        qos: u8,
        (no_local, retain_as_published): (bool, bool),
        resumed: bool,
    ) -> u8 {
        if no_local {
            // 5.0 (3.8.3.1): no local on a shared subscription is a protocol error.
            tracing::info!(session = %self.accepted.session_id, %filter, "refused filter: no local on a shared subscription");
            return reason::IMPLEMENTATION_SPECIFIC;
        }
        let durable = self.persistent || resumed;
        let bound = self
            .mqtt
            .broker
            .shared_subscriptions()
            .iter()
            .any(|(q, _)| *q == queue);
        let mut rights = vec![Right::Read];
        rights.extend((durable && !bound).then_some(Right::Admin));
        let security = &self.mqtt.config.security;
        for right in rights {
            let checked = match &target {
                Target::One(key) => security.authorize(self.principal.as_ref(), right, key),
                Target::Pattern(p) => security.authorize_pattern(self.principal.as_ref(), right, p),
            };
            if let Err(e) = checked {
                tracing::info!(session = %self.accepted.session_id, %filter, "refused filter: {e}");
                return reason::NOT_AUTHORIZED;
            }
        }
        let member = durable.then(|| self.shared_member());
        if let Err(e) = self
            .mqtt
            .broker
            .join_shared_subscription(&target, &queue, self.connection, member.as_deref())
            .await
        {
            return refused_filter(&self.accepted, filter, e);
        }
        let options = SubscribeOptions::non_durable().connection(self.connection);
        let source = Target::One(queue.clone());
        let kept = (target, qos, retain_as_published, Some(queue.clone()));
        match self.consume(filter, source, options, kept).await {
            Ok(granted) => granted,
            Err(e) => {
                self.leave_shared(&queue, false).await;
                refused_filter(&self.accepted, filter, e)
            }
        }
    }

    /// PUBREL `id` of a persistent session: what is held under it is delivered, and a
    /// retained one is kept as its topic's retained message.
    async fn release(&mut self, id: u16) -> Result<(), Error> {
        let released = self.mqtt.broker.release_held(&self.held_name(id)).await?;
        let Some((queue, header)) = retained_queue() else {
            return Ok(());
        };
        for (key, message) in released {
            let retain = message
                .headers
                .iter()
                .any(|(k, v)| k == RETAIN_HEADER && v == "1");
            if !retain || key.capabilities().point_to_point {
                continue; // the topic's copy names the retained one, not a group's
            }
            let copy = message
                .header(header, topic::topic_name(&key))
                .header(QOS_HEADER, "2");
            self.mqtt
                .broker
                .start_send_with(&queue, copy, SendOptions::checked())
                .await?
                .await?;
        }
        Ok(())
    }

    /// The name a persistent session's QoS 2 PUBLISH `id` is held under until PUBREL
    /// ([`Broker::hold_send`]).
    fn held_name(&self, id: u16) -> String {
        format!(
            "{}{id:05}",
            held_prefix(self.connected.as_deref().unwrap_or_default())
        )
    }

    /// This session's name as a durable member of a shared subscription.
    fn shared_member(&self) -> String {
        format!(
            "{PROTOCOL}:{}",
            self.connected.as_deref().unwrap_or_default()
        )
    }

    /// This connection leaves shared subscription `queue` (its consumer dropped
    /// before); `forget`: the session's durable membership ends too. The group ends
    /// with its last member.
    async fn leave_shared(&self, queue: &DestinationKey, forget: bool) {
        let member = forget.then(|| self.shared_member());
        if let Err(e) = self
            .mqtt
            .broker
            .leave_shared_subscription(queue, Some(self.connection), member.as_deref())
            .await
        {
            tracing::warn!(session = %self.accepted.session_id, queue = %queue.stomp(), error = %e, "cannot leave the shared subscription");
        }
    }

    /// UNSUBSCRIBE of one filter: its UNSUBACK code. A persistent session's durable
    /// subscription and stored filter go too.
    async fn unsubscribe(&mut self, filter: &str) -> u8 {
        self.subs.remove(filter);
        let Some(sub) = self.info.remove(filter) else {
            return reason::NO_SUBSCRIPTION_EXISTED;
        };
        let durable = self.persistent || self.resumed;
        if let Some(queue) = &sub.shared {
            self.leave_shared(queue, durable).await;
        }
        if durable {
            let client = self.connected.clone().unwrap_or_default();
            let removed = async {
                if sub.shared.is_none() {
                    self.mqtt
                        .broker
                        .remove_durable(&sub.target, &client, filter)
                        .await?;
                }
                self.mqtt
                    .broker
                    .forget_session_subscription(PROTOCOL, &client, filter)
                    .await
            };
            if let Err(e) = removed.await {
                tracing::warn!(session = %self.accepted.session_id, %filter, error = %e, "cannot remove the session's durable subscription");
                return reason::UNSPECIFIED_ERROR;
            }
        }
        reason::SUCCESS
    }

    /// Ends a stored session: its durable subscriptions (with their backlogs) and
    /// its stored filters.
    async fn discard_session(
        &mut self,
        client: &str,
        stored: &[SessionSubscription],
    ) -> Result<(), Error> {
        for s in stored {
            self.subs.remove(&s.filter);
            self.info.remove(&s.filter);
        }
        discard_stored_session(&self.mqtt.broker, client, stored, Some(self.connection)).await
    }

    fn ack(&mut self, filter: &str, message: &Received) {
        if let Some(sub) = self.info.get(filter) {
            let (acker, message) = (sub.acker.clone(), message.clone());
            self.acks
                .push(Box::pin(async move { acker.ack(&message).await }));
        }
    }

    fn next_packet_id(&mut self) -> u16 {
        loop {
            let id = self.next_packet_id;
            self.next_packet_id = self.next_packet_id.checked_add(1).unwrap_or(1);
            if !self.in_flight.contains_key(&id) {
                return id;
            }
        }
    }

    /// A message of subscription `filter` goes out as a PUBLISH at the smaller of the
    /// subscription's and the message's QoS.
    fn deliver(&mut self, filter: String, message: Received) {
        let Some(sub) = self.info.get(&filter) else {
            return;
        };
        let message_qos = match message.header(QOS_HEADER) {
            Some("2") => 2,
            _ if message.persistent() => 1,
            _ => 0,
        };
        let qos = sub.qos.min(message_qos);
        let sub_qos = sub.qos;
        let keep_retain = sub.retain_as_published && message.header(RETAIN_HEADER) == Some("1");
        // A shared subscription's copy names the topic it was published to.
        let published_to = sub.shared.as_ref().and_then(|_| {
            message
                .header(SHARED_TOPIC_HEADER)
                .and_then(|t| DestinationKey::from_container(t).ok())
        });
        let from = published_to.as_ref().or(message.destination());
        // Only what MQTT's filter reads ([`topic::reads`]); a durable or shared
        // subscription's pattern also matches the rest, which is dropped here.
        let inner = match topic::shared(&filter) {
            Ok(Some((_, inner))) => inner,
            _ => filter.as_str(),
        };
        if from.is_some_and(|key| !topic::reads(inner, key)) {
            tracing::debug!(session = %self.accepted.session_id, %filter, "a message of a topic the filter does not read (`$`, advisory) is dropped");
            if sub_qos > 0 {
                self.ack(&filter, &message);
            }
            return;
        }
        let topic = match (from, &sub.target) {
            (Some(key), _) | (None, Target::One(key)) => topic::topic_name(key),
            (None, Target::Pattern(p)) => p.stomp(),
        };
        let mut publish = self.publish_of(topic, &message, qos);
        if !self.fits(&publish) {
            if sub_qos > 0 {
                self.ack(&filter, &message);
            }
            return;
        }
        publish.retain = keep_retain;
        if qos == 0 && sub_qos > 0 {
            // A QoS 0 message on a QoS 1 or 2 subscription: acked as it goes.
            self.ack(&filter, &message);
        }
        self.send_publish(publish, filter, message);
    }

    /// Whether `publish` fits the client's maximum packet size (5.0), its size
    /// computed as it will be encoded ([`Publish::encoded_size`]). One that does not
    /// is dropped, as if delivered (5.0, 3.1.2.11.4), logged and counted
    /// ([`super::DELIVERIES_TOO_LARGE_TOTAL`]).
    fn fits(&self, publish: &Publish) -> bool {
        let Some(max) = self.client_max_packet else {
            return true;
        };
        let size = publish.encoded_size(self.version());
        if size <= max as usize {
            return true;
        }
        tracing::info!(session = %self.accepted.session_id, topic = %publish.topic, size, max, "a delivery over the client's maximum packet size is dropped");
        metrics::counter!(super::DELIVERIES_TOO_LARGE_TOTAL).increment(1);
        false
    }

    fn publish_of(&self, topic: String, message: &Received, qos: u8) -> Box<Publish> {
        let mut props = wire::Properties::default();
        if self.version() == Version::V5 {
            let expiration = message.expiration();
            if expiration > 0 {
                let left = (expiration - epoch_ms()).max(1_000);
                props.message_expiry_secs = Some(((left + 999) / 1_000) as u32);
            }
            for (name, value) in message.headers() {
                match name.as_str() {
                    "content-type" => props.content_type = Some(value.clone()),
                    "reply-to" => {
                        props.response_topic = Some(match DestinationKey::parse(value) {
                            Ok(key) => topic::topic_name(&key),
                            Err(_) => value.clone(),
                        })
                    }
                    "correlation-id" => props.correlation_data = Some(Bytes::from(value.clone())),
                    FORMAT_HEADER => props.utf8_payload = value == "utf-8",
                    QOS_HEADER | RETAIN_HEADER | SHARED_TOPIC_HEADER => {}
                    _ if retained_queue().is_some_and(|(_, h)| h == name) => {}
                    _ => props.user_properties.push((name.clone(), value.clone())),
                }
            }
        }
        Box::new(Publish {
            topic,
            qos,
            retain: false,
            dup: message.redelivered() && qos > 0,
            packet_id: None,
            payload: message.shared_body(),
            properties: props,
        })
    }

    /// Ends the connection: publishes in flight finish (stored, even if their
    /// answers cannot be written), the will goes when due, subscriptions detach (their
    /// unacknowledged deliveries go back), a non-persistent session is discarded.
    async fn close(mut self, end: End) {
        // The newer connection of the client id owns the session now.
        let taken_over =
            matches!(&end, End::Refused(code, _) if *code == reason::SESSION_TAKEN_OVER);
        let send_will = match &end {
            End::Disconnect { will } => *will,
            End::Lost | End::Refused(..) => true,
        };
        if let End::Refused(code, why) = &end {
            if self.version() == Version::V5 && self.connected.is_some() {
                self.out.push(Out::Disconnect(*code, why.clone()));
            }
        }
        while let Some(sent) = self.sends.next().await {
            let _ = self.on_sent(sent);
        }
        let _ = tokio::time::timeout(CLOSE_GRACE, self.flush()).await;
        let _ = tokio::time::timeout(CLOSE_GRACE, self.link.io_mut().shutdown()).await;
        while self.acks.next().await.is_some() {}
        let Some(client) = self.connected.take() else {
            return;
        };
        if send_will {
            if let Some(will) = self.will.take() {
                self.publish_will(&client, *will);
            }
        }
        drop(std::mem::take(&mut self.subs));
        let groups: Vec<DestinationKey> = self
            .info
            .values()
            .filter_map(|s| s.shared.clone())
            .collect();
        for queue in &groups {
            self.leave_shared(queue, false).await;
        }
        if self.persistent && !taken_over && self.session_expiry != u32::MAX {
            let deadline = epoch_ms() + i64::from(self.session_expiry) * 1_000;
            match self
                .mqtt
                .broker
                .expire_session_at(PROTOCOL, &client, deadline)
                .await
            {
                Ok(()) => self.mqtt.config.state.expiries.notify_one(),
                Err(e) => {
                    tracing::warn!(session = %self.accepted.session_id, error = %e, "cannot store the session's expiry: it stays until the client ends it")
                }
            }
        }
        if self.persistent {
            if !self.qos2.is_empty() {
                self.mqtt
                    .config
                    .state
                    .received
                    .lock()
                    .insert(client.clone(), std::mem::take(&mut self.qos2));
            }
        } else if self.stored && !taken_over {
            // Its subscriptions were durable only if stored: discard what is stored.
            match self
                .mqtt
                .broker
                .session_subscriptions(PROTOCOL, &client)
                .await
            {
                Ok(stored) => {
                    if let Err(e) = self.discard_session(&client, &stored).await {
                        tracing::warn!(session = %self.accepted.session_id, error = %e, "cannot discard the ended session");
                    }
                }
                Err(e) => {
                    tracing::warn!(session = %self.accepted.session_id, error = %e, "cannot read the ended session")
                }
            }
        }
        for key in std::mem::take(&mut self.producing) {
            self.mqtt.broker.producer_left(&key);
        }
    }

    /// Publishes `will` now, or after its delay unless `client` connects again. The
    /// delay is cut to what is left of the session (5.0, 3.1.3.2.2: the will goes when
    /// its delay passes or its session ends, whichever is first): none for a session
    /// that ends with this connection, the session expiry interval for a persistent
    /// one.
    fn publish_will(&self, client: &str, will: Will) {
        let Ok(key) = topic::destination(&will.topic) else {
            return;
        };
        let publish = Publish {
            topic: will.topic.clone(),
            qos: will.qos,
            retain: will.retain,
            dup: false,
            packet_id: None,
            payload: will.payload.clone(),
            properties: will.properties.clone(),
        };
        let Ok(message) = self.message_of(&publish) else {
            tracing::info!(session = %self.accepted.session_id, "the will's properties are refused; no will");
            return;
        };
        let retained = if will.retain {
            self.retained_copy(&publish)
        } else {
            None
        };
        let broker = self.mqtt.broker.clone();
        let state = Arc::clone(&self.mqtt.config.state);
        let client = client.to_string();
        let generation = state.generations.lock().get(&client).copied();
        let session_left = if self.persistent {
            self.session_expiry
        } else {
            0
        };
        let delay = Duration::from_secs(u64::from(will.delay_secs.min(session_left)));
        actix_rt::spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
                if state.generations.lock().get(&client).copied() != generation {
                    return;
                }
            }
            if let Err(e) = broker.send(&key, message).await {
                tracing::warn!(%client, error = %e, "the will could not be published");
            }
            if let Some((queue, copy)) = retained {
                if let Err(e) = broker.send(&queue, copy).await {
                    tracing::warn!(%client, error = %e, "the will could not be retained");
                }
            }
        });
    }
}

/// Now, epoch ms.
pub(super) fn epoch_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A refused filter's SUBACK code, logged with why.
fn refused_filter(accepted: &Accepted, filter: &str, e: Error) -> u8 {
    tracing::info!(session = %accepted.session_id, %filter, error = %e, "refused filter");
    match e {
        Error::InvalidDestination { reason: why, .. } if why == TOO_MANY_GROUPS => {
            reason::QUOTA_EXCEEDED
        }
        Error::InvalidDestination { .. } => reason::TOPIC_FILTER_INVALID,
        _ => reason::UNSPECIFIED_ERROR,
    }
}

/// The deadline stored for a connected persistent session whose expiry interval is
/// `secs` ([`super::expiry`]): past any real one (9 × 10^18 ms), so it never falls
/// due, and saying the interval, which counts from the next start if the broker
/// stops before the connection ends ([`u32::MAX`], a session that never expires,
/// keeps its mark). A mark also says the session exists when it has no
/// subscription (a publisher's, with QoS 2 messages held).
pub fn connected(secs: u32) -> i64 {
    9_000_000_000_000_000_000 + i64::from(secs)
}

/// How many times (20 ms apart) a session's end waits for its own consumers to
/// detach before a durable subscription of it counts as in use by another.
const DETACH_TRIES: u32 = 50;

/// The prefix of the names `client`'s QoS 2 publishes are held under: its length
/// first, so no client id's prefix is another's.
fn held_prefix(client: &str) -> String {
    format!("{PROTOCOL}:{}:{client}:", client.len())
}

/// Ends `client`'s stored session: its durable subscriptions (with their backlogs), its
/// shared subscription memberships, its stored filters and its deadline.
/// `connection`: the connection discarding it, if one is.
pub(super) async fn discard_stored_session(
    broker: &Broker,
    client: &str,
    stored: &[SessionSubscription],
    connection: Option<u64>,
) -> Result<(), Error> {
    for s in stored {
        if let Ok(Some((group, inner))) = topic::shared(&s.filter) {
            if let Ok(queue) = topic::shared_queue(group, inner) {
                let member = format!("{PROTOCOL}:{client}");
                broker
                    .leave_shared_subscription(&queue, connection, Some(&member))
                    .await?;
            }
        } else if let Ok(target) = topic::filter(&s.filter) {
            // The closing connection's consumer detaches as its subscription drops:
            // until it has, the durable subscription is in use.
            let mut tries = 0;
            loop {
                match broker.remove_durable(&target, client, &s.filter).await {
                    Err(Error::DurableInUse(_)) if tries < DETACH_TRIES => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    other => {
                        other?;
                        break;
                    }
                }
            }
        }
        broker
            .forget_session_subscription(PROTOCOL, client, &s.filter)
            .await?;
    }
    broker.cancel_session_expiry(PROTOCOL, client).await?;
    broker.drop_held(&held_prefix(client)).await?;
    Ok(())
}
