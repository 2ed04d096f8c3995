//! Each destination's counters: [`Broker::topic_stats`], [`Broker::queue_stats`].

use super::destination::ToDestination;
use super::Broker;
use crate::error::Error;
use ebb_actors::broker::DestinationAddr;
use ebb_actors::messages::{GetQueueStats, GetTopicStats, QueueStats, TopicStats};
use ebb_actors::DestinationKey;

impl Broker {
    /// Starts destination `key` if it is not running (after shutdown: only one that
    /// was running is found, else [`Error::ShuttingDown`]).
    pub(crate) async fn ensure_running(&self, key: &DestinationKey) -> Result<(), Error> {
        self.lookup(key).await.map(|_| ())
    }

    /// The last stats reading ([`Broker::stats`]).
    pub(crate) fn reading(&self) -> &crate::stats::Reading {
        &self.reading
    }

    /// The counters of topic `name` (starting it if it is not running).
    ///
    /// Readable after [`Broker::shutdown`] too, for a destination that was running.
    pub async fn topic_stats(&self, destination: impl ToDestination) -> Result<TopicStats, Error> {
        let key = destination.to_destination()?;
        match self.lookup(&key).await? {
            DestinationAddr::Topic(topic) => Ok(topic.send(GetTopicStats).await?),
            DestinationAddr::Queue(_) => Err(Error::InvalidDestination {
                name: key.container(),
                reason: "this works on topics only",
            }),
        }
    }

    /// The counters of queue `name`: its plain name (`jobs`: the call names the kind),
    /// or any destination form (`queue://jobs`, `/queue/jobs`); a topic is refused.
    /// Readable after shutdown for a queue that was running.
    pub async fn queue_stats(&self, name: &str) -> Result<QueueStats, Error> {
        // Any of the destination forms, or the queue's plain name (the kind is the
        // call's).
        let key = match DestinationKey::parse(name) {
            Err(e) if e.reason == ebb_actors::destination::key::NO_KIND.as_str() => {
                DestinationKey::queue(name)?
            }
            parsed => parsed?,
        };
        match self.lookup(&key).await? {
            DestinationAddr::Queue(queue) => Ok(queue.send(GetQueueStats).await?),
            DestinationAddr::Topic(_) => Err(Error::InvalidDestination {
                name: name.to_string(),
                reason: "this works on queues only",
            }),
        }
    }
}
