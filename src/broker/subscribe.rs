//! Subscribing: [`Broker::subscribe`] to a destination or a wildcard pattern, durable subscriptions kept across topics and removed ([`Broker::remove_durable`]).

use super::destination::{Target, ToDestination};
use super::subscription::{
    auto_ack_batch, endpoints, AckMode, AutoAck, Endpoints, SubscribeOptions, Subscription,
    SUBSCRIPTION_SERIALS,
};
use super::Broker;
use crate::error::Error;
use ebb_actors::broker::{
    wildcard_container, ForgetWildcardDurable, Watch, WILDCARD_CONTAINER_PREFIX,
};
use ebb_actors::destination::DestinationPattern;
use ebb_actors::messages::{Detach, Handed, RemoveDurable, Subscribe};
use ebb_actors::subscription::AutoAcks;
use ebb_actors::wildcard::{Attach, Template, WildcardActor, WILDCARD_SUBSCRIPTION};
use ebb_actors::{DestinationKey, DestinationKind};
use ebb_store::SubscriptionKey;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

impl Broker {
    /// Subscribes to destination `name` (as for [`Broker::send`]). On a queue the
    /// subscription is one of its competing consumers: each message goes to one of
    /// them (prefetch default: the policy's `queue_prefetch`, 1,000).
    ///
    /// A name with a wildcard element (`orders.>`, `queue://jobs.*`; ActiveMQ's
    /// wildcards, [`Target::Pattern`]) subscribes to every destination it matches:
    /// those running, the queues with stored messages (for a queue pattern) and the
    /// topics holding the durable subscription (for a durable one), and those started
    /// later. [`Received::destination`] names each message's destination; the prefetch
    /// bounds the un-acked deliveries in all and at each destination;
    /// [`Subscription::ack_up_to`] acks, at each destination, what came from it up to
    /// that message. A durable subscription to a topic pattern is kept on every
    /// matching topic, also on one created while it is offline, across restarts.
    ///
    /// Errors: [`Error::InvalidDestination`] (also for a durable subscription on a
    /// queue or a queue pattern), [`Error::InvalidSubscription`], [`Error::DurableInUse`] when
    /// the durable subscription already has a consumer, or a store error.
    pub async fn subscribe(
        &self,
        destination: impl ToDestination,
        options: SubscribeOptions,
    ) -> Result<Subscription, Error> {
        self.refuse_if_shut_down()?;
        if options.prefetch == Some(0) {
            return Err(Error::InvalidPrefetch);
        }
        let durable = match &options.durable {
            Some((client, sub)) if client.is_empty() || sub.is_empty() || reserved(client) => {
                return Err(Error::InvalidSubscription)
            }
            Some((client, sub)) => Some(SubscriptionKey::new(client, sub)),
            None => None,
        };
        let key = match destination.to_target()? {
            Target::One(key) => key,
            Target::Pattern(pattern) if pattern.kind().capabilities().temporary => {
                return Err(Error::InvalidDestination {
                    name: pattern.to_string(),
                    reason: "a temporary destination is subscribed to by its whole name, never by a wildcard",
                })
            }
            Target::Pattern(pattern) => {
                return self.subscribe_pattern(pattern, durable, options).await
            }
        };
        self.check_temporary_consumer(&key, options.connection)?;
        if durable.is_some() && !key.capabilities().durable_subscriptions {
            return Err(no_durable_subscriptions(key.container(), key.kind()));
        }
        if durable.is_some() && super::advisory::is_advisory(&key) {
            return Err(Error::InvalidDestination {
                name: key.stomp(),
                reason: "advisory messages are not persistent, so an offline durable subscription would keep none: subscribe without activemq.subscriptionName",
            });
        }
        if let Some(durable) = &durable {
            self.replace_durable_elsewhere(&Target::One(key.clone()), durable)
                .await?;
            self.check_durable_room(&key.container(), durable).await?;
        }
        // A virtual topic's consumer group begins with its first subscription (one
        // that passed the checks above).
        self.join_virtual_group(&key).await?;
        // Credit never lets more than the prefetch be queued; the channel holds that.
        let max = ebb_actors::subscription::MAX_PREFETCH;
        let capacity = options.prefetch.unwrap_or(max).clamp(1, max) as usize;
        let (tx, rx) = mpsc::channel(capacity);
        // A non-durable topic subscription's automatic acks only give credit back: they
        // go through shared counters instead of a message each (`AutoAcks`).
        let shared = (options.ack == AckMode::Auto
            && durable.is_none()
            && key.capabilities().shared_auto_acks)
            .then(|| Arc::new(AutoAcks::default()));
        let handed = Handed::default();
        let subscribe = Subscribe {
            handed: Some(Arc::clone(&handed)),
            durable,
            prefetch: options.prefetch,
            deliver: tx,
            selector: options.selector.map(Arc::new),
            exclusive: options.exclusive,
            no_local: options.no_local,
            auto_acks: shared.clone(),
        };
        let (destination, id) = self
            .ask_live_at(&key, || subscribe.clone(), super::is_retired)
            .await?;
        let id = id?;
        let advised = self.advised(Some(&key), None, id);
        if self.advisories.events.watched() {
            let (reporting, key) = (self.clone(), key.clone());
            let selector = subscribe.selector.as_ref().map(|s| s.text().to_string());
            self.spawn_task(async move {
                reporting
                    .advise_consumer(&key, id, options.connection, selector, true)
                    .await;
            });
        }
        Ok(Subscription {
            destination: endpoints(&destination, self, options.ack),
            id,
            ack: options.ack,
            rx,
            auto_ack: AutoAck {
                batch: auto_ack_batch(capacity),
                shared,
                ..AutoAck::default()
            },
            handed,
            acks: Default::default(),
            _advised: advised,
        })
    }

    /// Subscribes to every destination `pattern` matches (a wildcard destination,
    /// see [`Broker::subscribe`]) through a [`WildcardActor`]: those running now, the
    /// queues (for a queue pattern) and topics (for a durable subscription) the store
    /// holds, and those started later.
    pub(super) async fn subscribe_pattern(
        &self,
        pattern: DestinationPattern,
        durable: Option<SubscriptionKey>,
        options: SubscribeOptions,
    ) -> Result<Subscription, Error> {
        if durable.is_some() && !pattern.kind().capabilities().durable_subscriptions {
            return Err(no_durable_subscriptions(
                pattern.to_string(),
                pattern.kind(),
            ));
        }
        // Held from now on: advisories to topics it may match are sent.
        let advised = self.advised(None, Some(&pattern), 0);
        let selector = options.selector.map(Arc::new);
        let selector_text = selector.as_ref().map(|s| s.text().to_string());
        if let Some(key) = &durable {
            self.replace_durable_elsewhere(&Target::Pattern(pattern.clone()), key)
                .await?;
            self.check_durable_room(&wildcard_container(&pattern), key)
                .await?;
        }
        let max = ebb_actors::subscription::MAX_PREFETCH;
        let capacity = options.prefetch.unwrap_or(max).clamp(1, max) as usize;
        let (tx, rx) = mpsc::channel(capacity);
        let template = Template {
            durable: durable.clone(),
            prefetch: options.prefetch,
            selector,
            exclusive: options.exclusive,
            no_local: options.no_local,
        };
        let accept = options.accept.map(|a| a.0);
        let handed = Handed::default();
        let wildcard = WildcardActor::new(
            pattern.clone(),
            template.clone(),
            accept.clone(),
            tx,
            Arc::clone(&handed),
        );
        let actor = actix::Actor::start_in_arbiter(self.runtime.arbiter(), move |_| wildcard);
        let attached = async {
            // A durable one's previous consumer, just dropped, may still be stopping
            // (see `forget_wildcard_durable`): asked again for at most 1 s.
            let mut targets = while_stopping(|| {
                self.registry.send(Watch {
                    pattern: pattern.clone(),
                    watcher: actor.clone(),
                    durable: durable.clone().map(|k| (k, selector_text.clone())),
                    template: template.clone(),
                    accept: accept.clone(),
                })
            })
            .await?;
            // Only once the registry holds it for this consumer (a second consumer
            // is refused above), so a refused SUBSCRIBE changes nothing stored.
            if let Some(key) = &durable {
                self.define_wildcard_durable(&pattern, key, selector_text.clone())
                    .await?;
            }
            for key in self.stored_matches(&pattern, durable.as_ref()).await? {
                if !targets.iter().any(|(k, _)| *k == key) {
                    let addr = self.destination(&key).await?;
                    targets.push((key, addr));
                }
            }
            actor.send(Attach(targets)).await??;
            Ok::<_, Error>(())
        };
        if let Err(e) = attached.await {
            actor.do_send(Detach {
                subscription: WILDCARD_SUBSCRIPTION,
            });
            return Err(e);
        }
        Ok(Subscription {
            destination: Endpoints {
                ack: actor.clone().recipient(),
                take: actor.clone().recipient(),
                nack: actor.clone().recipient(),
                detach: actor.recipient(),
                shut_down: Arc::clone(&self.shut_down),
                arbiter: self.runtime.arbiter().clone(),
                serial: SUBSCRIPTION_SERIALS.fetch_add(1, Ordering::Relaxed),
                mode: options.ack,
            },
            id: WILDCARD_SUBSCRIPTION,
            ack: options.ack,
            rx,
            auto_ack: AutoAck {
                batch: auto_ack_batch(capacity),
                ..AutoAck::default()
            },
            handed,
            acks: Default::default(),
            _advised: advised,
        })
    }

    /// The destinations `pattern` matches that the store knows and that may not be
    /// running: for a queue pattern, the queues holding messages; for a durable
    /// subscription, the topics holding it. Read a bounded page at a time
    /// ([`MessageStore::list_containers`], [`MessageStore::find_subscription_containers`]).
    pub(super) async fn stored_matches(
        &self,
        pattern: &DestinationPattern,
        durable: Option<&SubscriptionKey>,
    ) -> Result<Vec<DestinationKey>, Error> {
        let store = self.store.store();
        let mut found = Vec::new();
        let mut after = String::new();
        let (from, below) = pattern.container_range();
        loop {
            // Where messages wait for any consumer, every stored destination in the
            // range; where they wait for a durable subscription, those it has.
            let caps = pattern.kind().capabilities();
            let page = match durable {
                _ if caps.point_to_point => {
                    // Strictly after: the range's start is a key itself.
                    let start = if after.is_empty() {
                        below_key(&from)
                    } else {
                        after.clone()
                    };
                    store
                        .list_containers(&start, &below, CONTAINER_PAGE)
                        .await?
                }
                Some(key) if caps.durable_subscriptions => {
                    store
                        .find_subscription_containers(key, &after, CONTAINER_PAGE)
                        .await?
                }
                _ => Vec::new(),
            };
            let full = page.len() == CONTAINER_PAGE as usize;
            if let Some(last) = page.last() {
                after = last.clone();
            }
            found.extend(page.iter().filter_map(|c| {
                let key = DestinationKey::from_container(c).ok()?;
                pattern.matches(&key).then_some(key)
            }));
            if !full {
                return Ok(found);
            }
        }
    }

    /// Writes the definition of the durable subscription `key` to wildcard topic
    /// `pattern` (its own container, [`wildcard_container`]), so that it outlives a
    /// restart even before any topic matches; a definition with another selector is
    /// replaced (the subscription is created anew at each topic when it attaches).
    pub(super) async fn define_wildcard_durable(
        &self,
        pattern: &DestinationPattern,
        key: &SubscriptionKey,
        selector: Option<String>,
    ) -> Result<(), Error> {
        let container = wildcard_container(pattern);
        let sub = self
            .store
            .subscribe(container.clone(), key.clone(), selector.clone(), false)
            .await?;
        if sub.selector != selector {
            self.store
                .unsubscribe(container.clone(), key.clone())
                .await?;
            self.store
                .subscribe(container, key.clone(), selector, false)
                .await?;
        }
        Ok(())
    }

    /// Tells the registry that durable subscription `key` to a wildcard topic goes
    /// ([`ForgetWildcardDurable`]); a consumer just dropped (a STOMP UNSUBSCRIBE
    /// removes the subscription right after detaching it) is waited for
    /// ([`while_stopping`]).
    pub(super) async fn forget_wildcard_durable(&self, key: &SubscriptionKey) -> Result<(), Error> {
        while_stopping(|| self.registry.send(ForgetWildcardDurable(key.clone()))).await
    }

    /// Refuses a new durable subscription `key` on `container` when its client id has
    /// [`UsageConfig::max_durable_subscriptions_per_client`] already (one that exists
    /// is always taken up again).
    pub(super) async fn check_durable_room(
        &self,
        container: &str,
        key: &SubscriptionKey,
    ) -> Result<(), Error> {
        let max = self.usages.config.max_durable_subscriptions_per_client;
        if max == 0 {
            return Ok(());
        }
        let store = self.store.store();
        if store.find_subscription(container, key).await?.is_some() {
            return Ok(());
        }
        let has = store
            .count_client_subscriptions(&key.client_id, max)
            .await?;
        if has >= u64::from(max) {
            return Err(Error::TooManyDurableSubscriptions {
                client_id: key.client_id.clone(),
                max,
            });
        }
        Ok(())
    }

    /// A durable subscription is `(client id, name)` across the broker (JMS): before
    /// `key` subscribes to `target`, whatever it was subscribed to before, if that was
    /// another destination or wildcard destination, is deleted, as if unsubscribed
    /// (JMS 2.0 §8.3, ActiveMQ's `hasDurableSubChanged`; case DUR-11). Its backlog goes
    /// with it (its rows are cleaned up on each topic). A subscription to a wildcard
    /// topic is its definition ([`wildcard_container`]) and one subscription per
    /// matching topic it has met; those stay when `target` is the same pattern.
    /// Errors: [`Error::DurableInUse`] when what would be deleted has a consumer.
    pub(super) async fn replace_durable_elsewhere(
        &self,
        target: &Target,
        key: &SubscriptionKey,
    ) -> Result<(), Error> {
        let store = self.store.store();
        let mut containers: Vec<String> = Vec::new();
        loop {
            let after = containers.last().map(String::as_str).unwrap_or("");
            let page = store
                .find_subscription_containers(key, after, CONTAINER_PAGE)
                .await?;
            let full = page.len() == CONTAINER_PAGE as usize;
            containers.extend(page);
            if !full {
                break;
            }
        }
        let definition = match target {
            Target::Pattern(p) => Some(wildcard_container(p)),
            Target::One(_) => None,
        };
        let defined = definition.as_ref().is_some_and(|d| containers.contains(d));
        let was_wildcard = containers
            .iter()
            .any(|c| c.starts_with(WILDCARD_CONTAINER_PREFIX));
        // Definitions first: while one's consumer is online nothing is deleted, and
        // once it is forgotten no topic started meanwhile creates the old one again.
        containers.sort_by_key(|c| !c.starts_with(WILDCARD_CONTAINER_PREFIX));
        for container in &containers {
            if Some(container) == definition.as_ref() {
                continue;
            }
            if container.starts_with(WILDCARD_CONTAINER_PREFIX) {
                // Another pattern's definition: that subscription goes.
                self.forget_wildcard_durable(key).await?;
                tracing::info!(client_id = %key.client_id, subscription = %key.subscription_name,
                    from = %container, "durable subscription moved: the wildcard subscription is deleted");
                self.store
                    .unsubscribe(container.clone(), key.clone())
                    .await?;
                continue;
            }
            let old = DestinationKey::from_container(container)?;
            let keep = match target {
                // A topic of this pattern's subscription.
                Target::Pattern(p) => defined && p.matches(&old),
                // This topic's own subscription (not one a wildcard one made there).
                Target::One(k) => *k == old && !was_wildcard,
            };
            if keep {
                continue;
            }
            tracing::info!(client_id = %key.client_id, subscription = %key.subscription_name,
                from = %container, to = %target,
                "durable subscription moved to another destination: the old one is deleted with its backlog");
            self.remove_durable_from(&old, key).await?;
        }
        Ok(())
    }

    /// Removes durable subscription `key` from `topic` ([`RemoveDurable`]), from its
    /// successor if the topic went to sleep (or was deleted) on the way.
    async fn remove_durable_from(
        &self,
        topic: &DestinationKey,
        key: &SubscriptionKey,
    ) -> Result<bool, Error> {
        let make = || RemoveDurable(key.clone());
        Ok(self
            .ask_topic_live(topic, make, super::is_retired)
            .await??)
    }

    /// Deletes an offline durable subscription (its marks and pending acks); its
    /// messages are then deleted by cleanup. `Ok(false)` if it did not exist.
    ///
    /// On a wildcard topic (`orders.>`), it removes the subscription from every topic
    /// it holds and its definition; `Ok(false)` if it had no definition.
    pub async fn remove_durable(
        &self,
        destination: impl ToDestination,
        client_id: &str,
        subscription: &str,
    ) -> Result<bool, Error> {
        self.refuse_if_shut_down()?;
        if reserved(client_id) {
            return Err(Error::InvalidSubscription);
        }
        let key = SubscriptionKey::new(client_id, subscription);
        let pattern = match destination.to_target()? {
            Target::One(one) => return self.remove_durable_from(&one, &key).await,
            Target::Pattern(pattern) => pattern,
        };
        self.forget_wildcard_durable(&key).await?;
        for topic in self.stored_matches(&pattern, Some(&key)).await? {
            self.remove_durable_from(&topic, &key).await?;
        }
        Ok(self
            .store
            .unsubscribe(wildcard_container(&pattern), key)
            .await?)
    }

    /// Whether the durable subscription `subscription` of client `client_id` exists on
    /// topic `name` (as for [`Broker::send`]), attached or not: a transport asks before
    /// [`Broker::subscribe`] creates one, since creating needs a right that
    /// re-attaching does not (ActiveMQ's admin right). Reads the store; starts nothing.
    ///
    /// Errors: [`Error::InvalidDestination`], or a store error.
    pub async fn durable_subscription_exists(
        &self,
        destination: impl ToDestination,
        client_id: &str,
        subscription: &str,
    ) -> Result<bool, Error> {
        self.refuse_if_shut_down()?;
        let container = match destination.to_target()? {
            Target::One(key) => key.container(),
            Target::Pattern(pattern) => wildcard_container(&pattern),
        };
        let key = SubscriptionKey::new(client_id, subscription);
        let found = self
            .store
            .store()
            .find_subscription(&container, &key)
            .await?;
        Ok(found.is_some())
    }
}

/// Asks `ask` again while it answers `DurableInUse`, every 10 ms for at most 1 s:
/// a wildcard consumer just dropped detaches through its actor's mailbox, and the
/// registry sees it in use until that actor has stopped. After 1 s the error is the
/// answer (a consumer really holds the subscription).
pub(super) async fn while_stopping<T, F, Fut>(mut ask: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<
        Output = Result<Result<T, ebb_actors::ActorError>, actix::MailboxError>,
    >,
{
    for _ in 0..100 {
        match ask().await? {
            Err(ebb_actors::ActorError::DurableInUse(_)) => {
                actix_rt::time::sleep(Duration::from_millis(10)).await;
            }
            answer => return Ok(answer?),
        }
    }
    Ok(ask().await??)
}

/// Containers the wildcard reads list per store page.
pub(super) const CONTAINER_PAGE: u32 = 500;

/// A text just below `key`, so that a listing strictly after it starts with `key`
/// itself: its last character one lower, then DEL (a control character, which no
/// destination name holds): `queue://jobs` gives `queue://jobr\x7f`, below which no
/// name starting `queue://jobr` in ASCII sorts. Only names with a non-ASCII character
/// right there lie between, and the caller filters what it lists.
pub(crate) fn below_key(key: &str) -> String {
    let mut below = key.to_string();
    match below.pop() {
        Some(c) if c.is_ascii_graphic() => {
            below.push((c as u8 - 1) as char);
            below.push('\u{7f}');
        }
        _ => {}
    }
    below
}

/// The refusal of a durable subscription to `name`, whose kind keeps none.
pub(super) fn no_durable_subscriptions(name: String, kind: DestinationKind) -> Error {
    let reason = match kind.capabilities().point_to_point {
        true => "a queue has no durable subscriptions: subscribe without one",
        false => "this kind of destination has no durable subscriptions: subscribe without one",
    };
    Error::InvalidDestination { name, reason }
}

/// Client ids the broker keeps for its own durable subscriptions (`ebb:group`, the
/// binding of a consumer group to its topic, [`ebb_store::GROUP_CLIENT_ID`]): a
/// client's durable subscription under one could take a group's place.
fn reserved(client_id: &str) -> bool {
    client_id.starts_with("ebb:")
}
