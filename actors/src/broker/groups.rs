//! Consumer groups stored once: the registry hands each group queue the messages its
//! topic releases ([`FeedGroups`]).
//!
//! A group queue bound to a topic ([`crate::messages::BindGroup`]) reads the topic's
//! rows through the store ([`ebb_store::groups`]): a message the topic stores is one
//! row however many groups read it. What the topic releases it sends here once, for
//! all its groups; for each group:
//! - **running**: its queue actor gets the messages ([`GroupMessages`]), counts them
//!   and queues them as its own committed sends;
//! - **asleep, or not started**: the stored messages stay in the store, where the
//!   group reads them when it wakes; they are counted on its stats entry, and one with
//!   an expiration moves its expiry wake earlier, as a send written while it sleeps
//!   ([`super::PublishAsleep`]). A group that was not started is made asleep. A
//!   non-persistent message lives only in memory: it wakes the group.
//!
//! A group going to sleep or being deleted is waited for, as any request is. A group
//! deleted meanwhile was unbound first: what reaches it is dropped (its stored copies
//! are the topic's rows).

use std::sync::Arc;

use actix::prelude::*;

use super::{BrokerActor, DestinationAddr, Slot};
use crate::destination::DestinationKey;
use crate::message::TopicMessage;
use crate::messages::{FeedGroups, GroupAcked, GroupMessages};

impl Handler<FeedGroups> for BrokerActor {
    type Result = ();

    fn handle(&mut self, msg: FeedGroups, ctx: &mut Context<Self>) {
        for group in msg.groups.iter() {
            self.feed_group(group.clone(), Arc::clone(&msg.messages), ctx);
        }
    }
}

/// Consumer group `0`, bound in the store, is known to the registry: one neither
/// running nor asleep (a group with no row of its own, after a restart) is made
/// asleep, so that it is listed, counted and can be deleted as any destination (its
/// messages are its topic's rows, which no listing of containers shows).
#[derive(Message)]
#[rtype(result = "()")]
pub struct KnowGroup(pub DestinationKey);

impl Handler<KnowGroup> for BrokerActor {
    type Result = ();

    fn handle(&mut self, msg: KnowGroup, ctx: &mut Context<Self>) {
        let bound = self.store.store().group_topic(&msg.0.container()).is_some();
        if bound && !self.shutting_down && !self.destinations.contains_key(&msg.0) {
            self.make_asleep(&msg.0, ctx);
        }
    }
}

impl Handler<GroupAcked> for BrokerActor {
    type Result = ();

    /// Passed to the topic when it runs; a sleeping topic cleans up when it wakes.
    fn handle(&mut self, msg: GroupAcked, _: &mut Context<Self>) {
        if let Some(DestinationAddr::Topic(topic)) =
            self.destinations.get(&msg.0).and_then(Slot::running)
        {
            topic.do_send(msg);
        }
    }
}

impl BrokerActor {
    /// Feeds `messages` to group `key`, once a sleep or a deletion of it under way has
    /// ended.
    fn feed_group(
        &mut self,
        key: DestinationKey,
        messages: Arc<[Arc<TopicMessage>]>,
        ctx: &mut Context<Self>,
    ) {
        if self.shutting_down {
            return;
        }
        if let Some(settled) = self.settled(&key) {
            ctx.spawn(
                settled
                    .into_actor(self)
                    .map(move |(), act, ctx| act.feed_group(key, messages, ctx)),
            );
            return;
        }
        let running = self.destinations.get(&key).and_then(Slot::running).cloned();
        if running.is_none() && self.store.store().group_topic(&key.container()).is_none() {
            // Unbound meanwhile (deleted): nothing reaches it, nothing makes it again.
            return;
        }
        let wakes = messages.iter().any(|m| m.id.is_none());
        let addr = match running {
            Some(addr) => Some(addr),
            None if wakes => match self.destination(key.clone(), ctx) {
                Ok(addr) => Some(addr),
                Err(e) => {
                    tracing::warn!(group = %key, error = %e,
                        "cannot start a consumer group's queue; its non-persistent messages are dropped");
                    None
                }
            },
            None => {
                self.fed_asleep(&key, &messages, ctx);
                None
            }
        };
        match addr {
            Some(DestinationAddr::Queue(queue)) => queue.do_send(GroupMessages(messages)),
            Some(DestinationAddr::Topic(_)) => {
                tracing::warn!(group = %key, "a consumer group names a topic; not fed");
            }
            None => {}
        }
    }

    /// Stored `messages` for group `key`, which does not run: counted on its entry,
    /// its expiry wake moved; made asleep if it was not known.
    fn fed_asleep(
        &mut self,
        key: &DestinationKey,
        messages: &[Arc<TopicMessage>],
        ctx: &mut Context<Self>,
    ) {
        if !self.destinations.contains_key(key) {
            self.make_asleep(key, ctx);
        }
        let stored = messages.iter().filter(|m| m.id.is_some()).count() as u64;
        if let Some(expiration) = messages
            .iter()
            .map(|m| m.expiration)
            .filter(|e| *e > 0)
            .min()
        {
            self.wake_for_expiry(key, expiration, ctx);
        }
        self.board.entry(key).count_enqueued(stored);
    }
}
