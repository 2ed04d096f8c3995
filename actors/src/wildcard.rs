//! The wildcard subscription actor: one per subscription to a wildcard destination
//! (ActiveMQ's wildcards: `.` separates the elements of a name, `*` matches one,
//! `>` the rest; `/topic/orders.>`, `/queue/jobs.*`).
//!
//! State it owns: one attachment per matching destination (an ordinary subscription
//! there, made with the consumer's options: durable key, selector, prefetch, exclusive,
//! noLocal), the deliveries it has handed to the consumer and not yet seen acked, and
//! those it holds back for the consumer's prefetch.
//!
//! It is a destination to the consumer: the consumer's [`Ack`], [`Nack`] and
//! [`Detach`] come here, and it sends each on to the destination the message came from.
//! It numbers the deliveries of all its destinations in one order (the consumer's
//! delivery ids), so a cumulative ack (STOMP `client` mode) acks, at each destination,
//! what the consumer was given from it up to that point.
//!
//! **Which destinations.** The registry tells it of every destination that matches
//! its pattern, running when it subscribed ([`Attach`]) and started later
//! ([`Matched`]); a destination the consumer may not read (the `accept` filter, a
//! transport's authorization) is passed over. On a new topic the registry makes a
//! non-durable attachment itself, before the topic takes its first message, so the
//! message that created the topic is not missed (a queue keeps its messages until an
//! attachment comes; a durable one's topic holds them in the store). A destination that stops (its stream
//! ends) is attached again when the registry starts it anew.
//!
//! **Prefetch.** Each attachment has the consumer's prefetch at its destination (as a
//! subscription to one destination has), and the actor hands the consumer at most
//! that many un-acked messages in all, holding the rest back in arrival order: so at
//! most `prefetch` per matching destination wait here, and a slow consumer slows
//! every destination it reads, never the broker.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use actix::prelude::*;
use ebb_store::SubscriptionKey;
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::addr::DestinationAddr;
use crate::destination::{DestinationKey, DestinationPattern};
use crate::error::ActorError;
use crate::message::Delivery;
use crate::messages::{Ack, CloseConsumers, Detach, Handed, Nack, Subscribe, TakeAck, TakenAck};
use crate::selector::Selector;
use crate::subscription::MAX_PREFETCH;

/// The subscription id a wildcard subscription's deliveries carry (it has one
/// consumer).
pub const WILDCARD_SUBSCRIPTION: u64 = 1;

/// Says whether the consumer may read a destination (a transport's authorization).
pub type Accept = Arc<dyn Fn(&DestinationKey) -> bool + Send + Sync>;

/// What each attachment is subscribed with: the consumer's options.
#[derive(Clone, Default)]
pub struct Template {
    /// A durable topic subscription: one per matching topic, under this key.
    pub durable: Option<SubscriptionKey>,
    /// Per destination, and for the consumer in all (`None`: each destination's
    /// policy, and [`MAX_PREFETCH`] in all).
    pub prefetch: Option<u32>,
    /// Each attachment's selector: only what it matches is delivered.
    pub selector: Option<Arc<Selector>>,
    /// An exclusive consumer at each matching queue (a topic refuses it).
    pub exclusive: bool,
    /// JMS `noLocal` at each matching non-durable topic subscription.
    pub no_local: Option<u64>,
}

impl Template {
    /// The [`Subscribe`] of one attachment, and what the actor reads it by.
    pub fn attachment(&self) -> (Subscribe, Incoming) {
        let capacity = self.prefetch.unwrap_or(MAX_PREFETCH).clamp(1, MAX_PREFETCH) as usize;
        let (tx, rx) = mpsc::channel(capacity);
        let handed = Handed::default();
        let subscribe = Subscribe {
            handed: Some(Arc::clone(&handed)),
            durable: self.durable.clone(),
            prefetch: self.prefetch,
            deliver: tx,
            selector: self.selector.clone(),
            exclusive: self.exclusive,
            no_local: self.no_local,
            auto_acks: None,
        };
        let incoming = Incoming {
            deliveries: rx,
            handed,
        };
        (subscribe, incoming)
    }
}

/// One attachment's side at the actor: its deliveries (as many as its prefetch), and
/// the last delivery id the actor counts as handed to the application, set when it
/// detaches ([`Subscribe::handed`]).
pub struct Incoming {
    /// The attachment's deliveries.
    pub deliveries: mpsc::Receiver<Delivery>,
    /// Its [`Subscribe::handed`], which the actor sets when it detaches.
    pub handed: Handed,
}

/// One matching destination's subscription.
struct Attachment {
    key: Arc<DestinationKey>,
    addr: DestinationAddr,
    /// Its subscription id at the destination.
    subscription: u64,
    /// False once its deliveries ended (the destination stopped or dropped it).
    live: bool,
    /// What the consumer was handed from it, set at detach ([`Incoming::handed`]).
    handed: Handed,
}

/// What an attachment's stream yields: a delivery, then its end.
enum Item {
    Delivery(usize, Delivery),
    Ended(usize),
}

impl Message for Item {
    type Result = ();
}

/// See the module documentation.
pub struct WildcardActor {
    pattern: DestinationPattern,
    template: Template,
    accept: Option<Accept>,
    consumer: mpsc::Sender<Delivery>,
    /// The last of its delivery ids the consumer has handed to the application.
    consumer_handed: Handed,
    /// Most un-acked messages handed to the consumer.
    prefetch: usize,
    attachments: Vec<Attachment>,
    /// The live attachment of each destination, by index.
    by_key: HashMap<DestinationKey, usize>,
    /// Destinations whose attachment is being made.
    attaching: HashSet<DestinationKey>,
    /// Handed to the consumer and not acked: consumer delivery id → (attachment,
    /// delivery id there).
    unacked: BTreeMap<u64, (usize, u64)>,
    /// Arrived and not handed over yet (the consumer's prefetch is full).
    held: VecDeque<(usize, Delivery)>,
    next_delivery: u64,
}

impl WildcardActor {
    /// A subscription to `pattern` with `template`'s options, delivering to
    /// `consumer` (its capacity at least the prefetch), which keeps `handed` up to date
    /// as [`Subscribe::handed`] says, reading only what `accept` accepts (`None`:
    /// every match).
    pub fn new(
        pattern: DestinationPattern,
        template: Template,
        accept: Option<Accept>,
        consumer: mpsc::Sender<Delivery>,
        handed: Handed,
    ) -> Self {
        let prefetch = template
            .prefetch
            .unwrap_or(MAX_PREFETCH)
            .clamp(1, MAX_PREFETCH) as usize;
        Self {
            pattern,
            template,
            accept,
            consumer,
            consumer_handed: handed,
            prefetch,
            attachments: Vec::new(),
            by_key: HashMap::new(),
            attaching: HashSet::new(),
            unacked: BTreeMap::new(),
            held: VecDeque::new(),
            next_delivery: 1,
        }
    }

    /// Whether destination `key` should get an attachment now: it matches, the
    /// consumer may read it, and it has no live one (or one being made).
    fn wants(&self, key: &DestinationKey) -> bool {
        self.pattern.matches(key)
            && self.accept.as_ref().is_none_or(|accept| accept(key))
            && !self.attaching.contains(key)
            && self
                .by_key
                .get(key)
                .is_none_or(|&i| !self.attachments[i].live)
    }

    /// Subscribes at `addr` with the template: the future answers the subscription id
    /// and the receiver of its deliveries.
    fn subscribe(
        &self,
        addr: &DestinationAddr,
    ) -> impl std::future::Future<Output = Result<(u64, Incoming), ActorError>> + 'static {
        let (subscribe, incoming) = self.template.attachment();
        let addr = addr.clone();
        async move { Ok((addr.ask(subscribe).await??, incoming)) }
    }

    /// Records the attachment of `key` and reads its deliveries.
    fn attached(
        &mut self,
        key: DestinationKey,
        addr: DestinationAddr,
        subscription: u64,
        incoming: Incoming,
        ctx: &mut Context<Self>,
    ) {
        let Incoming {
            deliveries: rx,
            handed,
        } = incoming;
        let index = self.attachments.len();
        tracing::debug!(pattern = %self.pattern, destination = %key, "wildcard subscription attached");
        self.attachments.push(Attachment {
            key: Arc::new(key.clone()),
            addr,
            subscription,
            live: true,
            handed,
        });
        self.by_key.insert(key, index);
        let deliveries =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|d| (d, rx)) })
                .map(move |d| Item::Delivery(index, d))
                .chain(futures::stream::once(async move { Item::Ended(index) }));
        ctx.add_stream(deliveries);
    }

    /// Hands held deliveries to the consumer while its prefetch has room.
    fn hand_over(&mut self) {
        while self.unacked.len() < self.prefetch {
            let Some((index, delivery)) = self.held.pop_front() else {
                return;
            };
            let id = self.next_delivery;
            let out = Delivery {
                subscription: WILDCARD_SUBSCRIPTION,
                delivery_id: id,
                message: Arc::clone(&delivery.message),
                redelivered: delivery.redelivered,
                source: Some(Arc::clone(&self.attachments[index].key)),
            };
            match self.consumer.try_send(out) {
                Ok(()) => {
                    self.next_delivery += 1;
                    self.unacked.insert(id, (index, delivery.delivery_id));
                }
                // The channel holds the prefetch; full means the consumer has not
                // taken what it was given: wait for its acks.
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.held.push_front((index, delivery));
                    return;
                }
                // The consumer is gone; its acks, then its detach (which closes this
                // subscription), are on their way: nothing is decided before them.
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.held.push_front((index, delivery));
                    return;
                }
            }
        }
    }

    /// Detaches every attachment and stops: the consumer is gone. What was held
    /// back or handed over un-acked is given back by each destination's detach; what
    /// the consumer handed to the application counts there as a failed delivery, the
    /// rest (held here, or in the consumer's prefetch unseen) does not.
    fn close(&mut self, ctx: &mut Context<Self>) {
        let handed = self
            .consumer_handed
            .load(std::sync::atomic::Ordering::Acquire);
        // Per destination, deliveries were handed over in their order there: the
        // highest handed is its mark.
        let mut marks: HashMap<usize, u64> = HashMap::new();
        for (_, &(index, delivery_id)) in self.unacked.range(..=handed) {
            let mark = marks.entry(index).or_default();
            *mark = (*mark).max(delivery_id);
        }
        for (index, a) in self.attachments.iter().enumerate() {
            let mark = marks.get(&index).copied().unwrap_or(0);
            a.handed.store(mark, std::sync::atomic::Ordering::Release);
        }
        for a in self.attachments.iter().filter(|a| a.live) {
            a.addr.recipient::<Detach>().do_send(Detach {
                subscription: a.subscription,
            });
        }
        self.attachments.iter_mut().for_each(|a| a.live = false);
        self.held.clear();
        ctx.stop();
    }
}

impl Actor for WildcardActor {
    type Context = Context<Self>;
}

impl StreamHandler<Item> for WildcardActor {
    fn handle(&mut self, item: Item, _: &mut Context<Self>) {
        match item {
            Item::Delivery(index, delivery) => {
                self.held.push_back((index, delivery));
                self.hand_over();
            }
            Item::Ended(index) => {
                let a = &mut self.attachments[index];
                a.live = false;
                tracing::debug!(pattern = %self.pattern, destination = %a.key, "wildcard subscription's destination ended");
            }
        }
    }

    /// One attachment's stream ended: the others go on.
    fn finished(&mut self, _: &mut Context<Self>) {}
}

/// Attach to these destinations (those the registry had running when the subscription
/// was made, and those it found in the store). Answered when every attachment is made;
/// the first that fails is the answer (the caller then detaches the subscription).
#[derive(Message)]
#[rtype(result = "Result<(), ActorError>")]
pub struct Attach(pub Vec<(DestinationKey, DestinationAddr)>);

impl Handler<Attach> for WildcardActor {
    type Result = ResponseActFuture<Self, Result<(), ActorError>>;

    fn handle(&mut self, msg: Attach, _: &mut Context<Self>) -> Self::Result {
        let mut asked = Vec::new();
        for (key, addr) in msg.0 {
            if !self.wants(&key) {
                continue;
            }
            self.attaching.insert(key.clone());
            let subscribed = self.subscribe(&addr);
            asked.push(async move { (key, addr, subscribed.await) });
        }
        Box::pin(
            futures::future::join_all(asked)
                .into_actor(self)
                .map(|results, act, ctx| {
                    let mut failed = None;
                    for (key, addr, result) in results {
                        act.attaching.remove(&key);
                        match result {
                            Ok((subscription, rx)) => {
                                act.attached(key, addr, subscription, rx, ctx)
                            }
                            Err(e) => {
                                failed.get_or_insert(e);
                            }
                        }
                    }
                    failed.map_or(Ok(()), Err)
                }),
        )
    }
}

/// From the registry: a destination matching the pattern started. For a
/// non-durable topic subscription the registry has already attached it (`Some`: the
/// subscription id there and its deliveries), before the topic took its first
/// message, so that nothing sent to a new topic is missed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Matched(
    pub DestinationKey,
    pub DestinationAddr,
    pub Option<(u64, Incoming)>,
);

impl Handler<Matched> for WildcardActor {
    type Result = ();

    fn handle(&mut self, msg: Matched, ctx: &mut Context<Self>) {
        let Matched(key, addr, attached) = msg;
        if let Some((subscription, incoming)) = attached {
            if self.wants(&key) {
                self.attached(key, addr, subscription, incoming, ctx);
            } else {
                addr.recipient::<Detach>().do_send(Detach { subscription });
            }
            return;
        }
        if !self.wants(&key) {
            return;
        }
        self.attaching.insert(key.clone());
        let subscribed = self.subscribe(&addr);
        ctx.spawn(subscribed.into_actor(self).map(move |result, act, ctx| {
            act.attaching.remove(&key);
            match result {
                Ok((subscription, rx)) => act.attached(key, addr, subscription, rx, ctx),
                Err(e) => tracing::warn!(pattern = %act.pattern, destination = %key, error = %e,
                    "wildcard subscription cannot attach to a matching destination"),
            }
        }));
    }
}

impl WildcardActor {
    /// Where an ack of `delivery_id` (`cumulative`: and of every delivery handed over
    /// before it) goes: `(destination, its subscription, its delivery id, cumulative)`
    /// per ack to send. Per destination, deliveries were handed over in their order
    /// there, so a cumulative ack is one ack of the highest. Deliveries of a
    /// destination no longer attached are dropped.
    fn route_ack(
        &mut self,
        delivery_id: u64,
        cumulative: bool,
    ) -> Result<Vec<(DestinationAddr, u64, u64, bool)>, ActorError> {
        let acked: Vec<(usize, u64)> = if cumulative {
            let rest = self.unacked.split_off(&(delivery_id + 1));
            std::mem::replace(&mut self.unacked, rest)
                .into_values()
                .collect()
        } else {
            let Some(acked) = self.unacked.remove(&delivery_id) else {
                return Err(ActorError::not_awaiting_ack(delivery_id));
            };
            vec![acked]
        };
        let mut per_attachment: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for (index, delivery_id) in acked {
            per_attachment.entry(index).or_default().push(delivery_id);
        }
        let mut routed = Vec::new();
        for (index, ids) in per_attachment {
            let a = &self.attachments[index];
            if !a.live {
                continue;
            }
            if cumulative {
                let highest = *ids.iter().max().expect("not empty");
                routed.push((a.addr.clone(), a.subscription, highest, true));
            } else {
                routed.extend(
                    ids.into_iter()
                        .map(|id| (a.addr.clone(), a.subscription, id, false)),
                );
            }
        }
        self.hand_over();
        Ok(routed)
    }
}

impl Handler<Ack> for WildcardActor {
    type Result = ResponseFuture<Result<(), ActorError>>;

    /// Acks at each destination what the consumer acked from it: one delivery, or
    /// (cumulative) every delivery handed over up to this one, as one cumulative ack
    /// per destination. Answered when every destination has answered.
    fn handle(&mut self, msg: Ack, _: &mut Context<Self>) -> Self::Result {
        let routed = match self.route_ack(msg.delivery_id, msg.cumulative) {
            Ok(routed) => routed,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let acks: Vec<_> = routed
            .into_iter()
            .map(|(addr, subscription, delivery_id, cumulative)| {
                addr.recipient::<Ack>().send(Ack {
                    subscription,
                    delivery_id,
                    cumulative,
                })
            })
            .collect();
        Box::pin(async move {
            for answer in futures::future::join_all(acks).await {
                answer??;
            }
            Ok(())
        })
    }
}

impl Handler<TakeAck> for WildcardActor {
    type Result = ResponseFuture<Result<Vec<TakenAck>, ActorError>>;

    /// As [`Ack`], at each destination with [`TakeAck`]: the writes of all of them.
    fn handle(&mut self, msg: TakeAck, _: &mut Context<Self>) -> Self::Result {
        let routed = match self.route_ack(msg.delivery_id, msg.cumulative) {
            Ok(routed) => routed,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let takes: Vec<_> = routed
            .into_iter()
            .map(|(addr, subscription, delivery_id, cumulative)| {
                addr.recipient::<TakeAck>().send(TakeAck {
                    subscription,
                    delivery_id,
                    cumulative,
                })
            })
            .collect();
        Box::pin(async move {
            let mut taken = Vec::new();
            for answer in futures::future::join_all(takes).await {
                taken.extend(answer??);
            }
            Ok(taken)
        })
    }
}

impl Handler<Nack> for WildcardActor {
    type Result = Result<(), ActorError>;

    /// Sends the NACK to the destination the message came from.
    fn handle(&mut self, msg: Nack, _: &mut Context<Self>) -> Self::Result {
        let Some((index, delivery_id)) = self.unacked.remove(&msg.delivery_id) else {
            return Err(ActorError::not_awaiting_ack(msg.delivery_id));
        };
        let a = &self.attachments[index];
        if a.live {
            a.addr.recipient::<Nack>().do_send(Nack {
                subscription: a.subscription,
                delivery_id,
            });
        }
        self.hand_over();
        Ok(())
    }
}

impl Handler<Detach> for WildcardActor {
    type Result = ();

    fn handle(&mut self, _: Detach, ctx: &mut Context<Self>) {
        self.close(ctx);
    }
}

impl Handler<CloseConsumers> for WildcardActor {
    type Result = ();

    /// Shutdown: stops, so the consumer's stream ends after what it was handed (each
    /// destination closes its attachment itself).
    fn handle(&mut self, _: CloseConsumers, ctx: &mut Context<Self>) {
        self.held.clear();
        ctx.stop();
    }
}
