//! The broker (registry) actor: destination name → destination actor.
//!
//! State it owns: one map of the running destination actors by [`DestinationKey`],
//! each created on first use with the policy that matches its name; the policy map;
//! the shared housekeeping budget; and the shutdown sequence.
//!
//! Messages it accepts: [`GetDestination`], [`RouteDeadLetter`] (a queue's dead
//! message, handed to its dead-letter queue), [`ListDestinations`], [`ShutdownBroker`].
//! It never dispatches and never touches SQL. A new kind of destination is a variant of
//! [`DestinationAddr`] and an arm in `BrokerActor::destination`.
//!
//! Shutdown, in order: refuse new destinations; stop every destination's housekeeping
//! (each answers once its page in flight has finished, and starts none after); flush
//! the store actor (every accepted write commits); close the pool last.

use std::collections::HashMap;

use actix::prelude::*;

use crate::destination::{DestinationKey, DestinationKind};
use crate::error::ActorError;
use crate::housekeeping::HousekeepingBudget;
use crate::messages::{RouteDeadLetter, StopHousekeeping};
use crate::policy::PolicyMap;
use crate::queue::QueueActor;
use crate::store_actor::StoreHandle;
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

/// See the module documentation.
pub struct BrokerActor {
    store: StoreHandle,
    policies: PolicyMap,
    budget: HousekeepingBudget,
    destinations: HashMap<DestinationKey, DestinationAddr>,
    shutting_down: bool,
}

impl BrokerActor {
    /// The registry over `store`, giving each destination the policy of `policies`
    /// that matches its name and a share of `budget`.
    pub fn new(store: StoreHandle, policies: PolicyMap, budget: HousekeepingBudget) -> Self {
        Self {
            store,
            policies,
            budget,
            destinations: HashMap::new(),
            shutting_down: false,
        }
    }

    /// The running actor of `key`, or a new one started with its policy. During and
    /// after shutdown, existing destinations are still returned (their counters stay
    /// readable; their writes fail with `Closed`), new ones are refused.
    fn destination(
        &mut self,
        key: DestinationKey,
        ctx: &mut Context<Self>,
    ) -> Result<DestinationAddr, ActorError> {
        if let Some(addr) = self.destinations.get(&key) {
            if addr.connected() {
                return Ok(addr.clone());
            }
        }
        if self.shutting_down {
            return Err(ActorError::ShuttingDown);
        }
        let policy = self.policies.policy_for(&key);
        let (store, budget) = (self.store.clone(), self.budget.clone());
        let addr = match key.kind() {
            DestinationKind::Topic => {
                DestinationAddr::Topic(TopicActor::new(key.clone(), policy, store, budget).start())
            }
            DestinationKind::Queue => {
                let dead_letters = ctx.address().recipient();
                let queue = QueueActor::new(key.clone(), policy, store, budget, Some(dead_letters));
                DestinationAddr::Queue(queue.start())
            }
        };
        self.destinations.insert(key, addr.clone());
        Ok(addr)
    }
}

impl Actor for BrokerActor {
    type Context = Context<Self>;
}

/// The actor of destination `key`, started on first use (see [`BrokerActor`]).
#[derive(Message)]
#[rtype(result = "Result<DestinationAddr, ActorError>")]
pub struct GetDestination(pub DestinationKey);

impl Handler<GetDestination> for BrokerActor {
    type Result = Result<DestinationAddr, ActorError>;

    fn handle(&mut self, msg: GetDestination, ctx: &mut Context<Self>) -> Self::Result {
        self.destination(msg.0, ctx)
    }
}

impl Handler<RouteDeadLetter> for BrokerActor {
    type Result = ResponseFuture<Result<Option<i64>, ActorError>>;

    fn handle(&mut self, msg: RouteDeadLetter, ctx: &mut Context<Self>) -> Self::Result {
        let target = self.destination(msg.to, ctx);
        Box::pin(async move {
            match target? {
                DestinationAddr::Queue(queue) => queue.send(msg.letter).await?,
                DestinationAddr::Topic(_) => unreachable!("a queue key names a queue"),
            }
        })
    }
}

/// The keys of the running destination actors, sorted (as their store keys sort), at
/// most `limit` of them (the first ones in sort order), so that an answer
/// never grows with the number of destinations. Read-only: it starts nothing.
#[derive(Message)]
#[rtype(result = "DestinationList")]
pub struct ListDestinations {
    /// Most keys in the answer.
    pub limit: usize,
}

/// The answer to [`ListDestinations`].
#[derive(Debug, Clone, Default, PartialEq, Eq, MessageResponse)]
pub struct DestinationList {
    /// Running destinations, sorted, at most the limit asked for.
    pub keys: Vec<DestinationKey>,
    /// How many destinations are running in all (more than `keys.len()` when the limit
    /// cut the list).
    pub total: usize,
}

impl Handler<ListDestinations> for BrokerActor {
    type Result = DestinationList;

    fn handle(&mut self, msg: ListDestinations, _: &mut Context<Self>) -> DestinationList {
        let mut keys: Vec<DestinationKey> = self
            .destinations
            .iter()
            .filter(|(_, a)| a.connected())
            .map(|(k, _)| k.clone())
            .collect();
        let total = keys.len();
        keys.sort_unstable();
        keys.truncate(msg.limit);
        DestinationList { keys, total }
    }
}

/// Runs the shutdown sequence (module documentation); answered when the pool is closed.
#[derive(Message)]
#[rtype(result = "Result<(), ActorError>")]
pub struct ShutdownBroker;

impl Handler<ShutdownBroker> for BrokerActor {
    type Result = ResponseFuture<Result<(), ActorError>>;

    fn handle(&mut self, _: ShutdownBroker, _: &mut Context<Self>) -> Self::Result {
        self.shutting_down = true;
        let destinations: Vec<DestinationAddr> = self.destinations.values().cloned().collect();
        let store = self.store.clone();
        Box::pin(async move {
            // A destination that is already gone has nothing in flight.
            let stops = destinations.iter().map(|d| d.ask(StopHousekeeping));
            let _ = futures::future::join_all(stops).await;
            store.close().await?;
            tracing::info!(
                destinations = destinations.len(),
                "broker shut down; store closed"
            );
            Ok(())
        })
    }
}
