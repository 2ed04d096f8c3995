//! The operator's side of the embedding API: what an admin console or a health probe
//! asks a [`Broker`] (the HTTP server in `http/` is one caller; an embedder may be
//! another).
//!
//! Every call here reads bounded pages: a destination listing is at most
//! [`MAX_ADMIN_PAGE`] destinations after a cursor (keyset pagination by store key), a
//! subscription listing at most [`MAX_ADMIN_PAGE`] subscriptions after one. Nothing
//! here acks, expires or counts a delivery; listing never starts a destination's actor
//! (looking at one destination does, as sending to it would: its counters exist only
//! while it runs).

use ebb_actors::broker::{DeleteDestination, DestinationAddr, IsRunning, ListDestinations};
use ebb_actors::messages::{DurableState, DurableStates, TakeAction, TakeMessages, TakenPage};
use ebb_store::SubscriptionKey;
use serde::Serialize;

use crate::broker::{below_key, ToDestination};
use crate::stats::DestinationStats;
use crate::{Broker, DestinationKey, Error};

pub use ebb_actors::broker::DeletedDestination;

/// Most destinations or subscriptions one admin listing returns.
pub const MAX_ADMIN_PAGE: u32 = 500;

/// Messages one page of a purge or a move reads (one bounded statement) and deletes
/// (one write) or moves (one transaction per message).
pub const TAKE_PAGE: u32 = 500;

/// Most ids one [`Broker::move_messages`] call with [`Selection::Ids`] takes.
pub const MAX_MOVE_IDS: usize = 1000;

/// Which messages of a queue [`Broker::move_messages`] moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// These store ids (at most [`MAX_MOVE_IDS`]); an id not in the queue is counted
    /// `gone`.
    Ids(Vec<i64>),
    /// Every waiting message with a store id `> after`, in id order, up to the call's
    /// `max`; the report's `next` continues.
    All {
        /// Start after this store id (0: from the first).
        after: i64,
    },
}

/// What a purge or a move did ([`Broker::purge_queue`], [`Broker::move_messages`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TakeReport {
    /// Messages deleted (purge) or moved.
    pub taken: u64,
    /// Messages left alone because a consumer holds them (delivered, not acked).
    pub in_flight: u64,
    /// Messages already gone (acked, expired, moved meanwhile) or not in the queue.
    pub gone: u64,
    /// Messages a move took that their target, a last-value queue, dropped instead:
    /// a message with the same last-value key had arrived there after them (arrival
    /// at the broker, kept through every move), and an older value never replaces a
    /// newer one. They are deleted here, in the store transaction that compared them,
    /// and not counted in `taken` (see [`Broker::move_messages`]).
    pub superseded: u64,
    /// Moves that could not be made (no `originalDestination`, or a failed move):
    /// those messages stay where they were.
    pub failed: u64,
    /// Why the first of them could not move.
    pub first_failure: Option<String>,
    /// With [`Selection::All`]: the `after` to continue from, `None` when the queue's
    /// end was reached.
    pub next: Option<i64>,
}

impl TakeReport {
    fn add(&mut self, page: &TakenPage) {
        self.taken += page.taken;
        self.in_flight += page.in_flight;
        self.gone += page.gone;
        self.superseded += page.superseded;
        self.failed += page.failed;
        if self.first_failure.is_none() {
            self.first_failure.clone_from(&page.first_failure);
        }
        self.next = page.next;
    }
}

/// One destination in a listing ([`Broker::list_destinations`]) or looked at
/// ([`Broker::destination_view`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DestinationView {
    /// Its actor is running (it was used since the broker started). A destination the
    /// store holds but nothing has used yet is listed with `running: false`: its
    /// counters are then 0 and `queue_size` is its stored rows.
    pub running: bool,
    /// Its gauges and counters ([`DestinationStats`]; the destination's store key is
    /// in `destination`).
    #[serde(flatten)]
    pub stats: DestinationStats,
    /// For a virtual topic: its consumer groups' queues (STOMP form,
    /// `/queue/Consumer.A.VirtualTopic.Orders`), in name order; left out of the JSON
    /// when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub virtual_groups: Vec<String>,
}

/// A page of destinations, in store-key order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DestinationPage {
    /// At most the limit asked for.
    pub destinations: Vec<DestinationView>,
    /// The store key to pass as `after` for the next page; `None` when this page
    /// reached the end.
    pub next: Option<String>,
}

/// A durable subscription as an operator sees it ([`Broker::list_durables`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DurableView {
    /// The JMS client id.
    pub client_id: String,
    /// The subscription name.
    pub name: String,
    /// Its selector, as given when it was created.
    pub selector: Option<String>,
    /// Its high-water mark (`LAST_ACKED_ID`): every message with a lower or equal id
    /// is done for it. With one mark per priority, the lowest of them.
    pub last_acked_id: i64,
    /// A consumer is attached now.
    pub online: bool,
    /// Deliveries to that consumer not acked yet.
    pub in_flight: u64,
}

/// A page of a topic's durable subscriptions, in `(client id, name)` order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DurablePage {
    /// At most the limit asked for.
    pub subscriptions: Vec<DurableView>,
    /// Where the next page starts (after this subscription); `None` at the end.
    pub next: Option<DurableCursor>,
}

/// A position in a subscription listing: the last subscription of a page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DurableCursor {
    /// Its client id (the API's `after_client`).
    pub after_client: String,
    /// Its name (the API's `after_name`).
    pub after_name: String,
}

impl Broker {
    /// Whether the broker has been shut down ([`Broker::shutdown`] was called).
    pub fn is_shut_down(&self) -> bool {
        self.refuse_if_shut_down().is_err()
    }

    /// Whether the store answers now (one `SELECT 1`, no table read): what a readiness
    /// probe asks. Errors: [`Error::ShuttingDown`] after shutdown, or the store's
    /// error (unreachable database, closed pool).
    pub async fn ping_store(&self) -> Result<(), Error> {
        self.refuse_if_shut_down()?;
        Ok(self.store().ping().await?)
    }

    /// Up to `limit` (at most [`MAX_ADMIN_PAGE`]) destinations whose store key sorts
    /// after `after` (`None`: from the first), in store-key order: the running ones
    /// with their counters, and the ones the store holds messages or durable
    /// subscriptions for that are not running (not started by this call). Cost: one
    /// registry message, two bounded store listings, then per running destination
    /// what [`Broker::stats`] costs for it; per stored one a `COUNT` of its rows.
    ///
    /// Errors: [`Error::ShuttingDown`], or a store error.
    pub async fn list_destinations(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<DestinationPage, Error> {
        self.refuse_if_shut_down()?;
        let limit = limit.clamp(1, MAX_ADMIN_PAGE) as usize;
        let after = after.unwrap_or("");
        // Keys sort as their store keys do, so a listing after `after` is one after
        // its key (a cursor that is no key lists from the first one above it).
        let after_key = DestinationKey::from_container(after).ok();
        let running: Vec<String> = self
            .registry()
            .send(ListDestinations {
                limit,
                after: after_key,
            })
            .await?
            .keys
            .iter()
            .map(DestinationKey::container)
            .filter(|c| c.as_str() > after)
            .collect();
        let store = self.store();
        let with_messages = store.list_containers(after, "\u{7f}", limit as u32).await?;
        // Topics holding durable subscriptions, from the first container after
        // `after` (no destination name holds a control character, so `after` + U+0001
        // sorts below every longer name that starts with `after`).
        let topics_from = std::cmp::max(below_key("topic://"), format!("{after}\u{1}"));
        let subscriptions = store
            .list_subscriptions_between(&topics_from, "topic:/\u{7f}", None, limit as u32)
            .await?;
        // Each stored listing is complete only up to its last key when it came back
        // full: the page ends at the lowest such horizon.
        let horizon = [
            (running.len() == limit)
                .then(|| running.last().cloned())
                .flatten(),
            (with_messages.len() == limit)
                .then(|| with_messages.last().cloned())
                .flatten(),
            (subscriptions.len() == limit)
                .then(|| subscriptions.last().map(|s| s.container.clone()))
                .flatten(),
        ]
        .into_iter()
        .flatten()
        .min();
        let mut keys: Vec<String> = running
            .iter()
            .cloned()
            .chain(with_messages)
            .chain(
                subscriptions
                    .into_iter()
                    .map(|s| s.container)
                    .filter(|c| c.as_str() > after),
            )
            .filter(|c| DestinationKey::from_container(c).is_ok())
            .filter(|c| horizon.as_ref().is_none_or(|h| c <= h))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let more = keys.len() > limit || horizon.is_some();
        keys.truncate(limit);
        let mut destinations = Vec::with_capacity(keys.len());
        for container in &keys {
            let key = DestinationKey::from_container(container)?;
            let view = if running.binary_search(container).is_ok() {
                match self.running_view(&key).await {
                    Ok(view) => view,
                    Err(Error::ShuttingDown) => continue,
                    // A temporary destination deleted since it was listed (its
                    // connection ended): gone, and not started again to be shown.
                    Err(Error::InvalidDestination { .. }) if self.is_ended_temporary(&key) => {
                        continue
                    }
                    Err(e) => return Err(e),
                }
            } else {
                self.stored_view(&key).await?
            };
            destinations.push(view);
        }
        let next = if more { keys.last().cloned() } else { None };
        Ok(DestinationPage { destinations, next })
    }

    /// One destination with its counters, started if the store holds messages or
    /// durable subscriptions for it (as a send would start it), so that its counters
    /// and consumers are real. `Ok(None)` when it is neither running nor stored: it
    /// does not exist, and nothing is started.
    ///
    /// Errors: [`Error::InvalidDestination`], [`Error::ShuttingDown`], a store error.
    pub async fn destination_view(
        &self,
        destination: impl ToDestination,
    ) -> Result<Option<DestinationView>, Error> {
        self.refuse_if_shut_down()?;
        let key = destination.to_destination()?;
        if !self.destination_exists(&key).await? {
            return Ok(None);
        }
        self.running_view(&key).await.map(Some)
    }

    /// Whether `key` is running or the store holds messages (scheduled ones and those
    /// of open transactions included, as the destination listing counts them) or
    /// durable subscriptions for it: at most one message row and one count of its
    /// subscriptions are read.
    ///
    /// Errors: [`Error::Actor`] when the registry is gone, a store error.
    pub async fn destination_exists(&self, key: &DestinationKey) -> Result<bool, Error> {
        let container = key.container();
        if self.registry().send(IsRunning(key.clone())).await? || self.is_virtual_group(key) {
            return Ok(true);
        }
        let store = self.store();
        Ok(store.has_rows(&container).await? || store.count_subscriptions(&container).await? > 0)
    }

    /// Up to `limit` (at most [`MAX_ADMIN_PAGE`]) durable subscriptions of topic
    /// `destination` after `after` (`(client id, name)`; `None`: from the first), with
    /// their marks from the store and, when the topic is running, whether a consumer
    /// is attached. Reads one bounded page of subscriptions; starts nothing.
    ///
    /// Errors: [`Error::InvalidDestination`] (also for a queue), a store error.
    pub async fn list_durables(
        &self,
        destination: impl ToDestination,
        after: Option<(&str, &str)>,
        limit: u32,
    ) -> Result<DurablePage, Error> {
        self.refuse_if_shut_down()?;
        let key = destination.to_destination()?;
        if !key.capabilities().durable_subscriptions {
            return Err(Error::InvalidDestination {
                name: key.container(),
                reason: "only a topic has durable subscriptions",
            });
        }
        let limit = limit.clamp(1, MAX_ADMIN_PAGE);
        let after = after.map(|(client, name)| SubscriptionKey::new(client, name));
        let rows = self
            .store()
            .list_subscriptions(&key.container(), after.as_ref(), limit)
            .await?;
        let keys: Vec<SubscriptionKey> = rows.iter().map(|s| s.key.clone()).collect();
        // A sleeping topic has no consumer: not woken to say so.
        let asleep = self
            .stats_board()
            .get(&key)
            .is_some_and(|entry| entry.is_asleep());
        let states = if !asleep && self.registry().send(IsRunning(key.clone())).await? {
            let make = || DurableStates(keys.clone());
            self.ask_topic_live(&key, make, |_| false).await?
        } else {
            vec![DurableState::default(); rows.len()]
        };
        let next = (rows.len() == limit as usize).then(|| {
            let last = &rows[rows.len() - 1].key;
            DurableCursor {
                after_client: last.client_id.clone(),
                after_name: last.subscription_name.clone(),
            }
        });
        let subscriptions = rows
            .into_iter()
            .zip(states)
            .map(|(s, state)| DurableView {
                last_acked_id: s.marks.iter().map(|(_, m)| *m).min().unwrap_or(0),
                client_id: s.key.client_id,
                name: s.key.subscription_name,
                selector: s.selector,
                online: state.online,
                in_flight: state.in_flight,
            })
            .collect();
        Ok(DurablePage {
            subscriptions,
            next,
        })
    }

    /// Deletes every message waiting in queue `destination`: its stored messages in
    /// pages of [`TAKE_PAGE`] (one bounded read and one delete each, sent through the
    /// queue's mailbox, so sends, deliveries and acks go on between pages) and its
    /// non-persistent ones; as ActiveMQ's `purge()`, except that messages delivered to
    /// a consumer and not acked are left to it (counted `in_flight`). Messages sent
    /// while it runs may be deleted too, up to the page it reaches last. Deletes are
    /// not counted as dequeued.
    ///
    /// Errors: [`Error::InvalidDestination`] (also for a topic), a store error: the
    /// pages deleted before it stay deleted, the page that failed is kept whole.
    pub async fn purge_queue(&self, destination: impl ToDestination) -> Result<TakeReport, Error> {
        let key = self.queue_key(destination).await?;
        let mut report = TakeReport::default();
        let mut after = 0;
        loop {
            let page = self
                .take_page(&key, || TakeMessages {
                    after,
                    only: None,
                    limit: TAKE_PAGE,
                    action: TakeAction::Delete,
                })
                .await?;
            report.add(&page);
            match page.next {
                Some(next) => after = next,
                None => return Ok(report),
            }
        }
    }

    /// Moves messages of queue `from` to queue `to`, or with `to` `None` each to the
    /// queue its `originalDestination` header names (retrying a dead-letter queue's
    /// messages, as ActiveMQ's console "retry"). Each message moves in one store
    /// transaction (deleted in `from`, added in its target with a new, highest id):
    /// it is never in both queues nor in neither, also when the broker dies in the
    /// middle of a call. The copy drops the headers the dead-letter queue added, and
    /// keeps the message's arrival at the broker: into a last-value queue, a message
    /// that arrived before the value waiting there for its key is deleted instead of
    /// replacing it (counted `superseded`; [`ebb_store::WriteOp::DeadLetter`]). A
    /// message a consumer holds is left alone (`in_flight`). With [`Selection::All`]
    /// at most `max` messages are looked at (in pages of [`TAKE_PAGE`]); `next` says
    /// where to go on.
    ///
    /// Errors: [`Error::InvalidDestination`] (a topic, a bad name), [`Error::Actor`]
    /// for more than [`MAX_MOVE_IDS`] ids, a store error.
    pub async fn move_messages(
        &self,
        from: impl ToDestination,
        to: Option<DestinationKey>,
        selection: Selection,
        max: u32,
    ) -> Result<TakeReport, Error> {
        let from = from.to_destination()?;
        if let Some(to) = &to {
            if !to.capabilities().move_target || *to == from {
                return Err(Error::InvalidDestination {
                    name: to.container(),
                    reason: "messages move to another queue",
                });
            }
        }
        let key = self.queue_key(&from).await?;
        let action = TakeAction::Move(to);
        let mut report = TakeReport::default();
        match selection {
            Selection::Ids(ids) => {
                if ids.len() > MAX_MOVE_IDS {
                    return Err(Error::Actor(ebb_actors::ActorError::Invalid(format!(
                        "{} ids: at most {MAX_MOVE_IDS} are moved in one call",
                        ids.len()
                    ))));
                }
                for chunk in ids.chunks(TAKE_PAGE as usize) {
                    let page = self
                        .take_page(&key, || TakeMessages {
                            after: 0,
                            only: Some(chunk.to_vec()),
                            limit: TAKE_PAGE,
                            action: action.clone(),
                        })
                        .await?;
                    report.add(&page);
                }
                report.next = None;
            }
            Selection::All { mut after } => {
                let mut left = max.max(1);
                while left > 0 {
                    let limit = left.min(TAKE_PAGE);
                    let page = self
                        .take_page(&key, || TakeMessages {
                            after,
                            only: None,
                            limit,
                            action: action.clone(),
                        })
                        .await?;
                    report.add(&page);
                    left -= limit;
                    match page.next {
                        Some(next) => after = next,
                        None => break,
                    }
                }
            }
        }
        Ok(report)
    }

    /// Deletes destination `destination`, as ActiveMQ's `removeQueue` / `removeTopic`:
    /// its stored messages and, on a topic, its durable subscriptions (with their
    /// marks and individual acks) are deleted in pages of
    /// [`ebb_actors::broker::DELETE_PAGE`] rows, each one store transaction; messages
    /// held only in memory go with its actor; then its scheduled messages (and the
    /// redeliveries held back for it) are cancelled ([`Broker::cancel_scheduled_to`]),
    /// so none of them brings it back later: the scheduler releases nothing meanwhile
    /// (a page being released finishes first, and what it released is deleted). Sends and subscriptions that arrive
    /// meanwhile wait, and then go to a new, empty destination of the same name (a
    /// destination is created on first use). A destination only the store holds is
    /// deleted the same way. Answers what was deleted. A virtual topic's consumer
    /// group queue, or a shared subscription's queue, stops being one: no topic sends
    /// to it any more.
    ///
    /// Errors: [`Error::Actor`] with `InUse` while a consumer is attached (also a
    /// subscription to a wildcard destination that matches it) or a transaction holds
    /// messages for it: nothing is deleted; [`Error::InvalidDestination`], a store
    /// error (the pages deleted before it stay deleted; deleting again goes on).
    pub async fn delete_destination(
        &self,
        destination: impl ToDestination,
    ) -> Result<DeletedDestination, Error> {
        self.refuse_if_shut_down()?;
        let key = destination.to_destination()?;
        // No scheduled message is released to it between its deletion and the
        // cancelling of the rest: such a release would make it again.
        let _releases = self.hold_releases().await;
        let upto = self.store().last_assigned_id();
        let deleted = self.registry().send(DeleteDestination(key.clone())).await?;
        self.forget_address(&key);
        let mut deleted = deleted?;
        self.forget_usage(&key);
        // A virtual topic's consumer group ends with its queue; a virtual topic's
        // groups outlive it (the deletion keeps their bindings).
        let _ = self.leave_virtual_group(&key).await?;
        // So does a shared subscription's.
        let _ = self.unbind_shared(&key).await?;
        deleted.scheduled = self.cancel_scheduled_upto(&key, upto).await?;
        Ok(deleted)
    }

    /// The key of queue `destination`, its actor started if it is not running. Errors:
    /// [`Error::InvalidDestination`] for a topic or a bad name, [`Error::ShuttingDown`].
    async fn queue_key(&self, destination: impl ToDestination) -> Result<DestinationKey, Error> {
        self.refuse_if_shut_down()?;
        let key = destination.to_destination()?;
        match self.destination_for_admin(&key).await? {
            DestinationAddr::Queue(_) => Ok(key),
            DestinationAddr::Topic(_) => Err(Error::InvalidDestination {
                name: key.container(),
                reason: "only a queue's messages can be purged or moved",
            }),
        }
    }

    /// One page of a purge or move of queue `key`: asked of its actor of the moment
    /// (the queue may have gone to sleep between two pages).
    async fn take_page(
        &self,
        key: &DestinationKey,
        make: impl Fn() -> TakeMessages,
    ) -> Result<TakenPage, Error> {
        let retired = crate::broker::is_retired;
        Ok(self.ask_queue_live(key, make, retired).await??)
    }

    /// A running destination's view (started if it is not running).
    async fn running_view(&self, key: &DestinationKey) -> Result<DestinationView, Error> {
        let stats = self.destination_stats(key).await?;
        Ok(DestinationView {
            running: true,
            stats,
            virtual_groups: self.virtual_group_names(key),
        })
    }

    /// [`Broker::virtual_groups`] of `key`, in STOMP form.
    fn virtual_group_names(&self, key: &DestinationKey) -> Vec<String> {
        self.virtual_groups(key)
            .iter()
            .map(DestinationKey::stomp)
            .collect()
    }

    /// A destination that is not running: its stored rows, no counters.
    async fn stored_view(&self, key: &DestinationKey) -> Result<DestinationView, Error> {
        let container = key.container();
        let stored = self.store().count_committed(&container).await?;
        let stats = DestinationStats::stored_only(container, key.kind(), stored);
        Ok(DestinationView {
            running: false,
            stats,
            virtual_groups: self.virtual_group_names(key),
        })
    }
}

/// What [`inspect_store`] found in a store, read without a broker (`ebb check`).
#[derive(Debug, Clone, Serialize)]
pub struct StoreReport {
    /// `Sqlite` or `Postgres`.
    pub backend: String,
    /// The highest message id the store has assigned (0 when empty).
    pub last_assigned_id: i64,
    /// A broker holds the store's lock now (its counts move).
    pub locked_by_another: bool,
    /// One entry per destination asked for, in the order asked.
    pub destinations: Vec<StoreDestinationReport>,
}

/// One destination's rows in a [`StoreReport`].
#[derive(Debug, Clone, Serialize)]
pub struct StoreDestinationReport {
    /// Its store key (`topic://orders`).
    pub destination: String,
    /// Message rows (one bounded `COUNT`).
    pub messages: u64,
    /// Durable subscriptions.
    pub durable_subscriptions: u64,
    /// Whether any of its messages can expire.
    pub expiring: bool,
}

/// Opens the store at `url` with `options` (creating and migrating it only with
/// `options.create`), reports what it holds for each of `destinations` (store keys),
/// and closes it. It does not take the store's lock, so it may run beside a broker.
/// Errors: the store is missing or at an older schema version (without `create`),
/// cannot be opened, or a count fails.
pub async fn inspect_store(
    url: &str,
    options: &crate::StoreOptions,
    destinations: &[String],
) -> Result<StoreReport, Error> {
    let store = ebb_store::open(url, options).await?;
    let report = async {
        let mut report = StoreReport {
            backend: format!("{:?}", store.backend()),
            last_assigned_id: store.last_assigned_id(),
            locked_by_another: store.locked_by_another().await?,
            destinations: Vec::with_capacity(destinations.len()),
        };
        for destination in destinations {
            report.destinations.push(StoreDestinationReport {
                destination: destination.clone(),
                messages: store.count_messages(destination).await?,
                durable_subscriptions: store.count_subscriptions(destination).await?,
                expiring: store.has_expiring(destination).await?,
            });
        }
        Ok::<_, Error>(report)
    }
    .await;
    store.close().await;
    report
}
