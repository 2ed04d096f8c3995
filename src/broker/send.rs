//! Sending, one path: [`Broker::start_send_with`] (a message gets its place in its
//! destination's order, and a [`PendingSend`] answers after its commit), with
//! [`Broker::send`], [`Broker::start_send`] and [`Broker::send_all`] built on it.
//! [`SendOptions`] says how a send meets producer flow control. Sends in a
//! transaction go through [`Transaction`] only.

use super::destination::ToDestination;
use super::message::{Expiration, Message, PendingSend, SendReceipt};
use super::Broker;
use crate::error::Error;
use ebb_actors::broker::{AsleepPublish, PublishAsleep};
use ebb_actors::destination::{now_ms, PublishTicket};
use ebb_actors::messages::{Publish, TopicMessage};
use ebb_actors::DestinationKey;
use ebb_store::Payload;
use futures::StreamExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Most sends of one [`Broker::send_all`] waiting for their commit at a time.
pub const SEND_WINDOW: usize = 256;

/// How a send meets producer flow control ([`Broker::start_send_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpaceCheck {
    /// Wait for space first, or fail, as [`UsageConfig`] says
    /// ([`Broker::wait_for_space`]). The default.
    #[default]
    Wait,
    /// The caller has checked already ([`Broker::check_space`] or
    /// [`Broker::wait_for_space`]), as a transport that must not block does: send at
    /// once (a send that races others for the last space may go over a limit by its
    /// own size).
    Checked,
}

/// Options of one send ([`Broker::start_send_with`]). `Default`: as [`Broker::send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendOptions {
    /// How the send meets producer flow control.
    pub space: SpaceCheck,
}

impl SendOptions {
    /// A send whose space the caller has checked ([`SpaceCheck::Checked`]).
    pub fn checked() -> Self {
        Self {
            space: SpaceCheck::Checked,
        }
    }
}

/// When `message` is due if it must wait on the scheduler: a cron's next occurrence,
/// a due time in the future, or a repetition (its first firing at once when it has no
/// due time).
pub(super) fn scheduled_due(message: &Message) -> Option<i64> {
    let now = now_ms();
    if let Some(cron) = &message.cron {
        // No occurrence chrono can represent: as far as an xid can say.
        return Some(cron.next_after(now).unwrap_or(i64::MAX));
    }
    match (message.deliver_at, message.repeat) {
        (Some(due), _) if due > now => Some(due),
        (due, Some(repeat)) if repeat.count > 0 => Some(due.unwrap_or(now).max(now)),
        _ => None,
    }
}

impl Broker {
    /// A new message id: this broker's prefix and the next number.
    pub(super) fn next_message_id(&self) -> String {
        format!(
            "{}:{}",
            self.ids.prefix,
            self.ids.next.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// The topic message for `message`: checks the priority, turns a TTL into an
    /// absolute expiration, gives it a message id.
    pub(super) fn outgoing(
        &self,
        key: &DestinationKey,
        message: Message,
        in_transaction: bool,
    ) -> Result<TopicMessage, Error> {
        self.outgoing_as(key, message, in_transaction, None)
    }

    /// [`Broker::outgoing`] with the message id `message_id` when given (the copies
    /// of a routed send share one), else a new one.
    pub(super) fn outgoing_as(
        &self,
        key: &DestinationKey,
        message: Message,
        in_transaction: bool,
        message_id: Option<&str>,
    ) -> Result<TopicMessage, Error> {
        if message.priority > ebb_store::MAX_PRIORITY {
            return Err(Error::InvalidPriority(message.priority));
        }
        self.check_temporary_send(key)?;
        let now = now_ms();
        let expiration = match message.expiration {
            Expiration::Never => 0,
            Expiration::At(at) => at.max(0),
            Expiration::Ttl(ttl) => now.saturating_add(ttl.min(i64::MAX as u64) as i64),
        };
        let message_id = message_id.map_or_else(|| self.next_message_id(), str::to_string);
        let bytes = message.charged_bytes();
        let payload = Payload {
            timestamp_ms: now,
            headers: message.headers,
            body: message.body,
        };
        let charge = if in_transaction {
            // Held by the transaction until its COMMIT moves it to the destination.
            let mut at_commit = vec![self.usages.of(key)];
            if !message.persistent {
                at_commit.push(Arc::clone(&self.usages.temp));
            }
            self.usages
                .transactions
                .charge_until_commit(bytes as u64, at_commit)
        } else {
            let charge = self.usages.of(key).charge(bytes as u64);
            if message.persistent {
                charge
            } else {
                charge.and(&self.usages.temp)
            }
        };
        Ok(TopicMessage {
            id: None,
            message_id,
            persistent: message.persistent,
            priority: message.priority,
            expiration,
            payload: Arc::new(payload),
            charge: Some(Arc::new(charge)),
            origin: message.origin,
            redeliveries: 0,
        })
    }

    /// Sends `message` to `destination` (`queue://NAME`, `/queue/NAME`, `topic://NAME`,
    /// `/topic/NAME`: [`ToDestination`]). Returns once it is accepted: a persistent message sent to a
    /// queue, or to a topic that a durable subscription needs it for, is committed to
    /// the store first. When a usage limit is reached it first waits for space
    /// (producer flow control, [`Broker::wait_for_space`]).
    ///
    /// Errors: [`Error::InvalidDestination`], [`Error::InvalidPriority`],
    /// [`Error::ResourceLimit`] (flow control set to fail), [`Error::Actor`] when the
    /// store write failed (nothing was stored; the send may be retried),
    /// [`Error::ShuttingDown`] after [`Broker::shutdown`].
    pub async fn send(
        &self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<SendReceipt, Error> {
        self.start_send_with(destination, message, SendOptions::default())
            .await?
            .await
    }

    /// Sends every message of `messages` to `destination`, in that order, pipelined:
    /// each send starts when the one before has its place (as [`Broker::start_send`],
    /// flow control included), at most [`SEND_WINDOW`] await their commit at a time,
    /// and their commits share the store's group commit. A producer with a batch in
    /// hand gets the store's batched pace instead of one commit per message.
    ///
    /// Returns one outcome per message, in order, once every one is known: a
    /// [`SendReceipt`] (accepted, as by [`Broker::send`]: committed when stored) or the
    /// error of that message alone (as [`Broker::send`]'s; nothing of it was stored).
    /// Messages after a failed one are still sent.
    pub async fn send_all(
        &self,
        destination: impl ToDestination,
        messages: impl IntoIterator<Item = Message>,
    ) -> Vec<Result<SendReceipt, Error>> {
        let key = match destination.to_destination() {
            Ok(key) => key,
            // The same refusal for each message.
            Err(e) => {
                let text = e.to_string();
                return messages
                    .into_iter()
                    .map(|_| match &e {
                        Error::InvalidDestination { name, reason } => {
                            Err(Error::InvalidDestination {
                                name: name.clone(),
                                reason,
                            })
                        }
                        _ => Err(Error::Runtime(text.clone())),
                    })
                    .collect();
            }
        };
        let mut outcomes: Vec<Option<Result<SendReceipt, Error>>> = Vec::new();
        let mut waiting = futures::stream::FuturesOrdered::new();
        for message in messages {
            let index = outcomes.len();
            outcomes.push(None);
            match self.start_send(&key, message).await {
                Ok(pending) => waiting.push_back(async move { (index, pending.await) }),
                Err(e) => outcomes[index] = Some(Err(e)),
            }
            while waiting.len() >= SEND_WINDOW {
                if let Some((i, outcome)) = waiting.next().await {
                    outcomes[i] = Some(outcome);
                }
            }
        }
        while let Some((i, outcome)) = waiting.next().await {
            outcomes[i] = Some(outcome);
        }
        outcomes
            .into_iter()
            .map(|o| o.expect("every send has its outcome"))
            .collect()
    }

    /// Sends as [`Broker::send`] without waiting for space.
    #[deprecated(
        note = "use `start_send_with(.., SendOptions::checked())` and await its PendingSend"
    )]
    pub async fn send_now(
        &self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<SendReceipt, Error> {
        self.start_send_with(destination, message, SendOptions::checked())
            .await?
            .await
    }

    /// Starts a send and returns once the message has its place in its destination's
    /// order, without waiting for its commit: await the [`PendingSend`] for the
    /// [`SendReceipt`] (after the commit, for a message that is stored). Waits for
    /// space first, as [`Broker::send`].
    ///
    /// This is how a producer pipelines: sends started one after another (each
    /// `start_send` awaited before the next) are stored and delivered in that order,
    /// while their commits overlap and share the store's group commit. A transport uses
    /// it to keep reading while earlier frames are in the store.
    ///
    /// Errors: as [`Broker::send`]; those of the store write come from the
    /// [`PendingSend`] (nothing was stored).
    pub async fn start_send(
        &self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<PendingSend, Error> {
        self.start_send_with(destination, message, SendOptions::default())
            .await
    }

    /// [`Broker::start_send`] without waiting for space.
    #[deprecated(note = "use `start_send_with(.., SendOptions::checked())`")]
    pub async fn start_send_now(
        &self,
        destination: impl ToDestination,
        message: Message,
    ) -> Result<PendingSend, Error> {
        self.start_send_with(destination, message, SendOptions::checked())
            .await
    }

    /// The one way a message is sent outside a transaction: as [`Broker::start_send`],
    /// with `options` ([`SendOptions`]: whether to wait for space first). Returns once
    /// the message has its place in its destination's order; the [`PendingSend`]
    /// resolves after its commit (at once for one that is not stored). A send that
    /// routing takes to several destinations ([`Broker::routes_of`]) goes to each: a
    /// configured composite's (or a virtual topic's with
    /// [`crate::VirtualTopics::transacted_send`]) is stored at all of them in one
    /// store transaction by the broker's committer, and the [`PendingSend`] resolves
    /// after that commit ([`Broker::start_send_to_each_with`]); a virtual topic's copies are otherwise
    /// sends of their own, and the [`PendingSend`] resolves once every one is
    /// accepted ([`Broker::send_to_each`]).
    ///
    /// Errors: as [`Broker::send`]; those of the store write come from the
    /// [`PendingSend`].
    pub async fn start_send_with(
        &self,
        destination: impl ToDestination,
        message: Message,
        options: SendOptions,
    ) -> Result<PendingSend, Error> {
        let key = destination.to_destination()?;
        self.start_send_to_each_with(std::slice::from_ref(&key), message, options)
            .await
    }

    /// A send to exactly `key` (routing done): its place in `key`'s order, with the
    /// message id `message_id` when given (the copies of a routed send share one).
    pub(super) async fn start_send_one(
        &self,
        key: &DestinationKey,
        message: Message,
        options: SendOptions,
        message_id: Option<&str>,
    ) -> Result<PendingSend, Error> {
        let key = key.clone();
        if options.space == SpaceCheck::Wait {
            self.wait_for_space(&key, message.persistent).await?;
        }
        if let Some(due) = scheduled_due(&message) {
            return self.send_scheduled(&key, message, due).await;
        }
        // After the composite sends to `key` handed to the committer before it.
        self.routes.committer.before_send_to(&key).await;
        let outgoing = self.outgoing_as(&key, message, false, message_id)?;
        let message_id = outgoing.message_id.clone();
        let ticket = self.publish(&key, outgoing).await?;
        Ok(PendingSend::new(message_id, ticket))
    }

    /// Publishes `outgoing` to `key`: to its actor, or, for a persistent message to a
    /// sleeping destination of a kind stored while asleep (a queue), through the
    /// registry, which writes it without waking the destination
    /// ([`ebb_actors::broker::PublishAsleep`]). A destination with a cached address runs
    /// (or has just gone to sleep: its actor answers retired, and the send asks the
    /// registry again).
    async fn publish(
        &self,
        key: &DestinationKey,
        outgoing: TopicMessage,
    ) -> Result<PublishTicket, Error> {
        if !(outgoing.persistent && key.capabilities().stored_while_asleep) {
            return self
                .ask_live(key, || Publish(outgoing.clone()), PublishTicket::is_retired)
                .await;
        }
        // Each retry follows a sleep or deletion that ended after the attempt before.
        const ATTEMPTS: usize = 8;
        for attempt in 1..=ATTEMPTS {
            // As every request to a destination: refused after shutdown, or once the
            // lease ran out (`Broker::destination`).
            self.refuse_if_shut_down()?;
            let cached = self
                .addresses
                .read()
                .get(key)
                .filter(|addr| addr.connected())
                .cloned();
            let addr = match cached {
                Some(addr) => addr,
                None => {
                    let asked = PublishAsleep {
                        key: key.clone(),
                        message: outgoing.clone(),
                    };
                    match self.registry.send(asked).await?? {
                        AsleepPublish::Stored(ticket) => return Ok(ticket),
                        AsleepPublish::Awake(addr) => {
                            self.addresses.write().insert(key.clone(), addr.clone());
                            addr
                        }
                    }
                }
            };
            match addr.ask(Publish(outgoing.clone())).await {
                Ok(ticket) if !ticket.is_retired() || attempt == ATTEMPTS => return Ok(ticket),
                Err(e @ actix::MailboxError::Timeout) => return Err(e.into()),
                Err(e) if attempt == ATTEMPTS => return Err(e.into()),
                _ => self.forget(key, &addr),
            }
        }
        unreachable!("the last attempt answers")
    }
}
