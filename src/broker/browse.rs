//! Browsing without consuming: stored pages ([`Broker::browse`], [`Broker::browse_subscription`]) and the [`QueueBrowser`] stream.

use super::destination::ToDestination;
use super::subscription::Received;
use super::Broker;
use crate::error::Error;
use ebb_actors::broker::DestinationAddr;
use ebb_actors::messages::{Browse, Delivery};
use ebb_actors::selector::Selector;
use ebb_store::SubscriptionKey;
use futures::{Stream, StreamExt};
use std::pin::Pin;
use std::task::{Context, Poll};

/// A message as browsing shows it (never acked, never expired by browsing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowsedMessage {
    /// Its store id (send order).
    pub store_id: i64,
    /// The message id the broker gave it.
    pub message_id: String,
    /// 0..=9.
    pub priority: u8,
    /// Epoch ms; 0 = never.
    pub expiration: i64,
    /// User headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: bytes::Bytes,
    /// Its failed deliveries so far, as stored (a queue message's redelivery count;
    /// 0 on topics and for a non-persistent message).
    pub redeliveries: u32,
}

/// Most rows one browse call returns.
pub const MAX_BROWSE_PAGE: u32 = 1000;

/// Messages a [`QueueBrowser`] reads from its queue at a time (one bounded store read
/// plus the queue's non-persistent messages in that range).
pub const BROWSE_PAGE: u32 = 100;

/// A browse of a queue ([`Broker::browse_queue`]): a [`Stream`] of the messages
/// waiting in it, in queue order, that ends at the end of the queue. Each item is a
/// [`Received`] that cannot be acked (browsing consumes nothing): its
/// `delivery_id` is 0 and `redelivered` false.
pub struct QueueBrowser {
    pub(super) inner: Pin<Box<dyn Stream<Item = Result<Received, Error>> + Send>>,
}

impl Stream for QueueBrowser {
    type Item = Result<Received, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl Broker {
    /// Up to `limit` (at most [`MAX_BROWSE_PAGE`]) stored messages of destination `name`
    /// (as for [`Broker::send`]) with store id `> after_id`, in id order. Browsing never
    /// acks or expires.
    pub async fn browse(
        &self,
        destination: impl ToDestination,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<BrowsedMessage>, Error> {
        self.refuse_if_shut_down()?;
        let container = destination.to_destination()?.container();
        let rows = self
            .store
            .store()
            .browse(&container, after_id, limit.min(MAX_BROWSE_PAGE))
            .await?;
        Ok(rows.iter().map(|m| browsed(m)).collect())
    }

    /// Browses queue `destination` (as for [`Broker::send`]; a topic is refused): a
    /// [`QueueBrowser`] stream of the messages waiting in it, in queue order, stored
    /// and non-persistent ones alike, without consuming, acking or expiring any (as
    /// ActiveMQ's queue browser and STOMP `browser:true`). Expired messages are left
    /// out. It reads the queue in pages of [`BROWSE_PAGE`] messages, one at a time as
    /// the stream is polled, and ends (`None`) when it reaches the end of the queue;
    /// messages sent meanwhile are shown if the browse gets to them before the end.
    ///
    /// Errors: [`Error::InvalidDestination`] for a topic or a bad name; a page that
    /// fails (a store error) is an `Err` item, after which the stream ends.
    pub async fn browse_queue(
        &self,
        destination: impl ToDestination,
    ) -> Result<QueueBrowser, Error> {
        self.browse_queue_matching(destination, None).await
    }

    /// [`Broker::browse_queue`], showing only the messages `selector` matches (all
    /// with `None`); pages are read as for a browse of everything.
    pub async fn browse_queue_matching(
        &self,
        destination: impl ToDestination,
        selector: Option<Selector>,
    ) -> Result<QueueBrowser, Error> {
        let key = destination.to_destination()?;
        if !matches!(self.destination(&key).await?, DestinationAddr::Queue(_)) {
            return Err(Error::InvalidDestination {
                name: key.container(),
                reason: "only a queue can be browsed: a topic keeps no messages for later",
            });
        }
        let broker = self.clone();
        let pages = futures::stream::unfold(Some((0i64, 0u64)), move |after| {
            let (broker, key) = (broker.clone(), key.clone());
            async move {
                let after = after?;
                // Each page asks the queue's actor of the moment: a slow browse may
                // outlive one that went to sleep.
                let make = || Browse {
                    after,
                    limit: BROWSE_PAGE,
                };
                let page = broker
                    .ask_queue_live(&key, make, |_| false)
                    .await
                    .and_then(|p| p.map_err(Error::from));
                let page = match page {
                    Ok(page) => page,
                    Err(e) => return Some((vec![Err(e)], None)),
                };
                let next = (!page.end).then_some(page.next);
                let messages = page
                    .messages
                    .into_iter()
                    .map(|(_, message)| {
                        Ok(Received {
                            delivery: Delivery {
                                subscription: 0,
                                delivery_id: 0,
                                message,
                                redelivered: false,
                                source: None,
                            },
                            serial: 0,
                        })
                    })
                    .collect();
                Some((messages, next))
            }
        });
        let shown = move |item: &Result<Received, Error>| {
            let shown = match (item, &selector) {
                (Ok(m), Some(selector)) => selector.matches(&*m.delivery.message),
                _ => true,
            };
            std::future::ready(shown)
        };
        Ok(QueueBrowser {
            inner: Box::pin(pages.map(futures::stream::iter).flatten().filter(shown)),
        })
    }

    /// Up to `limit` (at most [`MAX_BROWSE_PAGE`]) messages a durable subscription has
    /// not acked, with store id `> after_id`. Never acks or expires.
    pub async fn browse_subscription(
        &self,
        destination: impl ToDestination,
        client_id: &str,
        subscription: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<BrowsedMessage>, Error> {
        self.refuse_if_shut_down()?;
        let container = destination.to_destination()?.container();
        let key = SubscriptionKey::new(client_id, subscription);
        let rows = self
            .store
            .store()
            .read_pending(&container, &key, after_id, None, limit.min(MAX_BROWSE_PAGE))
            .await?;
        Ok(rows.iter().map(|m| browsed(m)).collect())
    }
}

pub(super) fn browsed(m: &ebb_store::StoredMessage) -> BrowsedMessage {
    BrowsedMessage {
        store_id: m.id,
        message_id: m.message_id.clone(),
        priority: m.priority,
        expiration: m.expiration,
        headers: m.payload.headers.clone(),
        body: m.payload.body.clone(),
        redeliveries: m.redeliveries,
    }
}
