//! A running destination's address, whatever its kind: what the registry keeps per
//! destination and hands out ([`DestinationAddr`]). Its own module, below both the
//! registry ([`crate::broker`]) and the wildcard subscriptions ([`crate::wildcard`]),
//! which both hold addresses: neither imports the other for it.

use actix::prelude::*;

use crate::messages::StopDestination;
use crate::queue::QueueActor;
use crate::topic::TopicActor;

/// A running destination actor, by kind: the registry's one entry per kind of
/// destination.
#[derive(Clone)]
pub enum DestinationAddr {
    Topic(Addr<TopicActor>),
    Queue(Addr<QueueActor>),
}

impl DestinationAddr {
    /// False once the actor stopped.
    pub fn connected(&self) -> bool {
        match self {
            Self::Topic(a) => a.connected(),
            Self::Queue(a) => a.connected(),
        }
    }

    /// Sends `message` to the actor and waits for its answer: for a message every kind
    /// of destination handles.
    pub async fn ask<M>(&self, message: M) -> Result<M::Result, MailboxError>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        TopicActor: Handler<M>,
        QueueActor: Handler<M>,
    {
        match self {
            Self::Topic(a) => a.send(message).await,
            Self::Queue(a) => a.send(message).await,
        }
    }

    /// Whether both are the same actor.
    pub fn same(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Topic(a), Self::Topic(b)) => a == b,
            (Self::Queue(a), Self::Queue(b)) => a == b,
            _ => false,
        }
    }

    /// Tells the actor to stop once it has handled what is in its mailbox.
    pub fn stop(&self) {
        match self {
            Self::Topic(a) => a.do_send(StopDestination),
            Self::Queue(a) => a.do_send(StopDestination),
        }
    }

    /// A recipient of `M` at the actor.
    pub fn recipient<M>(&self) -> Recipient<M>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        TopicActor: Handler<M>,
        QueueActor: Handler<M>,
    {
        match self {
            Self::Topic(a) => a.clone().recipient(),
            Self::Queue(a) => a.clone().recipient(),
        }
    }
}
