//! The broker (registry) actor: destination name → destination actor.
//!
//! State it owns: the destination actors by store key (`topic://NAME`,
//! `queue://NAME`), created on first use with the policy that matches their name; the
//! policy map; the shared housekeeping budget; and the shutdown sequence.
//!
//! Messages it accepts: [`GetTopic`], [`GetQueue`], [`ListDestinations`], [`ShutdownBroker`]. It
//! never dispatches and never touches SQL.
//!
//! Shutdown, in order: refuse new destinations; stop every destination's housekeeping
//! (each answers once its page in flight has finished, and starts none after); flush
//! the store actor (every accepted write commits); close the pool last.

use std::collections::HashMap;

use actix::prelude::*;

use crate::error::ActorError;
use crate::housekeeping::HousekeepingBudget;
use crate::messages::StopHousekeeping;
use crate::policy::PolicyMap;
use crate::queue::QueueActor;
use crate::store_actor::StoreHandle;
use crate::topic::TopicActor;

/// See the module documentation.
pub struct BrokerActor {
    store: StoreHandle,
    policies: PolicyMap,
    budget: HousekeepingBudget,
    topics: HashMap<String, Addr<TopicActor>>,
    queues: HashMap<String, Addr<QueueActor>>,
    shutting_down: bool,
}

impl BrokerActor {
    pub fn new(store: StoreHandle, policies: PolicyMap, budget: HousekeepingBudget) -> Self {
        Self {
            store,
            policies,
            budget,
            topics: HashMap::new(),
            queues: HashMap::new(),
            shutting_down: false,
        }
    }
}

impl Actor for BrokerActor {
    type Context = Context<Self>;
}

/// The topic actor for `topic://NAME` (the store key), started on first use. During
/// and after shutdown, existing topics are still returned (their counters stay
/// readable; their writes fail with `Closed`), new ones are refused.
#[derive(Message)]
#[rtype(result = "Result<Addr<TopicActor>, ActorError>")]
pub struct GetTopic(pub String);

impl Handler<GetTopic> for BrokerActor {
    type Result = Result<Addr<TopicActor>, ActorError>;

    fn handle(&mut self, msg: GetTopic, _: &mut Context<Self>) -> Self::Result {
        if let Some(addr) = self.topics.get(&msg.0) {
            if addr.connected() {
                return Ok(addr.clone());
            }
        }
        if self.shutting_down {
            return Err(ActorError::ShuttingDown);
        }
        let policy = self.policies.policy_for(&msg.0);
        let topic = TopicActor::new(
            msg.0.clone(),
            policy,
            self.store.clone(),
            self.budget.clone(),
        );
        let addr = topic.start();
        self.topics.insert(msg.0, addr.clone());
        Ok(addr)
    }
}

/// The queue actor for `queue://NAME` (the store key), started on first use; as
/// [`GetTopic`] during shutdown.
#[derive(Message)]
#[rtype(result = "Result<Addr<QueueActor>, ActorError>")]
pub struct GetQueue(pub String);

impl Handler<GetQueue> for BrokerActor {
    type Result = Result<Addr<QueueActor>, ActorError>;

    fn handle(&mut self, msg: GetQueue, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(addr) = self.queues.get(&msg.0) {
            if addr.connected() {
                return Ok(addr.clone());
            }
        }
        if self.shutting_down {
            return Err(ActorError::ShuttingDown);
        }
        let policy = self.policies.policy_for(&msg.0);
        let queue = QueueActor::new(
            msg.0.clone(),
            policy,
            self.store.clone(),
            self.budget.clone(),
            Some(ctx.address()),
        );
        let addr = queue.start();
        self.queues.insert(msg.0, addr.clone());
        Ok(addr)
    }
}

/// The store keys (`topic://NAME`, `queue://NAME`) of the running destination actors,
/// sorted, at most `limit` of them (the first ones in sort order), so that an answer
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
    /// Store keys of running destinations, sorted, at most the limit asked for.
    pub keys: Vec<String>,
    /// How many destinations are running in all (more than `keys.len()` when the limit
    /// cut the list).
    pub total: usize,
}

impl Handler<ListDestinations> for BrokerActor {
    type Result = DestinationList;

    fn handle(&mut self, msg: ListDestinations, _: &mut Context<Self>) -> DestinationList {
        let topics = self
            .topics
            .iter()
            .filter(|(_, a)| a.connected())
            .map(|(k, _)| k);
        let queues = self
            .queues
            .iter()
            .filter(|(_, a)| a.connected())
            .map(|(k, _)| k);
        let mut keys: Vec<&String> = topics.chain(queues).collect();
        let total = keys.len();
        keys.sort_unstable();
        DestinationList {
            keys: keys.into_iter().take(msg.limit).cloned().collect(),
            total,
        }
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
        let topics: Vec<Addr<TopicActor>> = self.topics.values().cloned().collect();
        let queues: Vec<Addr<QueueActor>> = self.queues.values().cloned().collect();
        let store = self.store.clone();
        Box::pin(async move {
            let stops = topics.iter().map(|t| t.send(StopHousekeeping));
            // A destination that is already gone has nothing in flight.
            let _ = futures::future::join_all(stops).await;
            let stops = queues.iter().map(|q| q.send(StopHousekeeping));
            let _ = futures::future::join_all(stops).await;
            store.close().await?;
            tracing::info!(
                topics = topics.len(),
                queues = queues.len(),
                "broker shut down; store closed"
            );
            Ok(())
        })
    }
}
