//! [`AckBatch`]: acks of one subscription (or one queue) written together.
//!
//! A consumer that acks each message on its own, over a pipelined connection, sends
//! acks faster than one store write each could be committed. While one ack write is in
//! flight, the acks that arrive gather here and go together in the next write (one
//! statement for many ids, in one transaction of the store actor's group commit);
//! each ack is answered only after the write that holds it commits, with that write's
//! result. So acks cost a write per commit instead of a write per ack, and an
//! answered ack is as durable as before.

use tokio::sync::oneshot;

use crate::error::ActorError;

/// The answer to one ack: after the write that holds it commits.
pub type AckAnswer = oneshot::Receiver<Result<(), ActorError>>;

/// See the module documentation. `T` is what one write takes per acked message (an
/// id, or an id and its priority).
#[derive(Debug)]
pub struct AckBatch<T> {
    waiting: Vec<T>,
    answers: Vec<oneshot::Sender<Result<(), ActorError>>>,
    writing: bool,
}

impl<T> Default for AckBatch<T> {
    fn default() -> Self {
        Self {
            waiting: Vec::new(),
            answers: Vec::new(),
            writing: false,
        }
    }
}

/// One write of a batch ([`AckBatch::take`]): what to write, and whom to answer.
#[derive(Debug)]
pub struct AckWrite<T> {
    pub items: Vec<T>,
    answers: Vec<oneshot::Sender<Result<(), ActorError>>>,
}

impl<T> AckWrite<T> {
    /// Answers every ack of the write with `result` (its commit, or its error).
    pub fn answer(self, result: &Result<(), ActorError>) {
        for answer in self.answers {
            let _ = answer.send(result.clone());
        }
    }
}

impl<T> AckBatch<T> {
    /// Adds one ack of `items` (every message it acks); the receiver resolves after
    /// the write that holds them commits.
    pub fn add(&mut self, items: impl IntoIterator<Item = T>) -> AckAnswer {
        let (tx, rx) = oneshot::channel();
        self.waiting.extend(items);
        self.answers.push(tx);
        rx
    }

    /// The next write, if acks wait and no write is in flight; the batch is then in
    /// flight until [`AckBatch::finished`].
    pub fn take(&mut self) -> Option<AckWrite<T>> {
        if self.writing || self.answers.is_empty() {
            return None;
        }
        self.writing = true;
        Some(AckWrite {
            items: std::mem::take(&mut self.waiting),
            answers: std::mem::take(&mut self.answers),
        })
    }

    /// The write in flight finished (call [`AckWrite::answer`] too); the next
    /// [`AckBatch::take`] gives what gathered meanwhile.
    pub fn finished(&mut self) {
        self.writing = false;
    }

    /// True when no ack waits and no write is in flight.
    pub fn is_idle(&self) -> bool {
        !self.writing && self.answers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_during_a_write_go_together_in_the_next() {
        let mut batch = AckBatch::default();
        let mut first = batch.add([1]);
        let write = batch.take().expect("a write");
        assert_eq!(write.items, vec![1]);
        // While it is in flight, acks gather.
        let mut second = batch.add([2, 3]);
        let mut third = batch.add([4]);
        assert!(batch.take().is_none(), "one write at a time");
        assert!(first.try_recv().is_err(), "answered only after the commit");
        write.answer(&Ok(()));
        batch.finished();
        assert!(matches!(first.try_recv(), Ok(Ok(()))));
        let next = batch.take().expect("the gathered acks");
        assert_eq!(next.items, vec![2, 3, 4]);
        assert!(second.try_recv().is_err());
        next.answer(&Err(ActorError::Closed));
        batch.finished();
        assert!(matches!(second.try_recv(), Ok(Err(ActorError::Closed))));
        assert!(matches!(third.try_recv(), Ok(Err(ActorError::Closed))));
        assert!(batch.is_idle());
        assert!(batch.take().is_none());
    }

    #[test]
    fn an_ack_of_nothing_stored_is_still_answered_in_turn() {
        let mut batch: AckBatch<i64> = AckBatch::default();
        let mut answer = batch.add([]);
        let write = batch.take().expect("a write with no items");
        assert!(write.items.is_empty());
        write.answer(&Ok(()));
        batch.finished();
        assert!(matches!(answer.try_recv(), Ok(Ok(()))));
    }
}
