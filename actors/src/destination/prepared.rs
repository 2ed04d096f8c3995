//! [`PreparedMessages`]: messages of open transactions, until commit or rollback.
//!
//! A transactional publish is stored *prepared* (its row carries the transaction's
//! `xid`, invisible to every cursor and holding no high-water mark back) and kept here
//! in send order. At commit the store renumbers the transaction's rows to new,
//! highest ids, so they follow everything already released; the messages are then
//! released under their new ids. A message that is not stored (non-persistent, or a
//! topic without durable subscriptions) is kept here too and released with the rest.
//!
//! What the messages here hold in memory is charged to the broker's transactions
//! budget, not to memory, until their commit moves it to their destination
//! ([`crate::usage::MemoryCharge::commit`]): an open transaction never makes another
//! producer wait, nor waits for space its own COMMIT would free.

use std::collections::HashMap;

use crate::message::TopicMessage;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct PreparedMessages {
    by_xid: HashMap<String, Vec<TopicMessage>>,
}

impl PreparedMessages {
    /// Keeps `message` (its `id` is its prepared row's, if stored) for transaction `xid`.
    pub fn add(&mut self, xid: String, message: TopicMessage) {
        self.by_xid.entry(xid).or_default().push(message);
    }

    /// Transaction `xid` committed; `renumbered` maps each stored row's prepared id to
    /// its new id. Returns its messages in send order under their new ids; a stored
    /// message the store did not renumber (its row is gone) is left out.
    pub fn commit(&mut self, xid: &str, renumbered: &[(i64, i64)]) -> Vec<TopicMessage> {
        let new_ids: HashMap<i64, i64> = renumbered.iter().copied().collect();
        let messages = self.by_xid.remove(xid).unwrap_or_default();
        // Their memory moves from the transactions' budget to the destination's.
        for message in &messages {
            if let Some(charge) = &message.charge {
                charge.commit();
            }
        }
        messages
            .into_iter()
            .filter_map(|message| match message.id {
                Some(old) => new_ids.get(&old).map(|&new| TopicMessage {
                    id: Some(new),
                    ..message
                }),
                None => Some(message),
            })
            .collect()
    }

    /// Transaction `xid` rolled back: forgets its messages and returns how many.
    pub fn abort(&mut self, xid: &str) -> usize {
        self.by_xid.remove(xid).map_or(0, |m| m.len())
    }

    /// How many messages transaction `xid` holds here.
    pub fn count(&self, xid: &str) -> usize {
        self.by_xid.get(xid).map_or(0, Vec::len)
    }

    /// Open transactions with messages here.
    pub fn transactions(&self) -> usize {
        self.by_xid.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn message(id: Option<i64>, text: &str) -> TopicMessage {
        TopicMessage {
            id,
            message_id: text.into(),
            persistent: id.is_some(),
            priority: 4,
            expiration: 0,
            payload: Arc::new(ebb_store::Payload {
                timestamp_ms: 0,
                headers: Vec::new(),
                body: text.as_bytes().to_vec().into(),
            }),
            charge: None,
            origin: None,
            redeliveries: 0,
        }
    }

    fn shown(messages: &[TopicMessage]) -> Vec<(Option<i64>, &str)> {
        messages
            .iter()
            .map(|m| (m.id, m.message_id.as_str()))
            .collect()
    }

    #[test]
    fn commit_releases_in_send_order_under_the_new_ids() {
        let mut prepared = PreparedMessages::default();
        prepared.add("tx1".into(), message(Some(5), "a"));
        prepared.add("tx1".into(), message(None, "b"));
        prepared.add("tx2".into(), message(Some(6), "other"));
        prepared.add("tx1".into(), message(Some(7), "c"));
        let released = prepared.commit("tx1", &[(7, 21), (5, 20)]);
        assert_eq!(
            shown(&released),
            [(Some(20), "a"), (None, "b"), (Some(21), "c")]
        );
        assert_eq!(prepared.transactions(), 1);
        assert!(prepared.commit("tx1", &[]).is_empty(), "committed twice");
    }

    #[test]
    fn a_row_the_store_did_not_renumber_is_left_out() {
        let mut prepared = PreparedMessages::default();
        prepared.add("tx".into(), message(Some(1), "gone"));
        prepared.add("tx".into(), message(Some(2), "kept"));
        assert_eq!(
            shown(&prepared.commit("tx", &[(2, 9)])),
            [(Some(9), "kept")]
        );
    }

    #[test]
    fn abort_forgets_and_counts() {
        let mut prepared = PreparedMessages::default();
        prepared.add("tx".into(), message(Some(1), "a"));
        prepared.add("tx".into(), message(None, "b"));
        assert_eq!(prepared.abort("tx"), 2);
        assert_eq!(prepared.abort("tx"), 0);
        assert!(prepared.commit("tx", &[(1, 2)]).is_empty());
    }
}
