//! [`Completions`]: work an actor waits for outside its mailbox (a store write), whose
//! result comes back to the actor when it is done.
//!
//! actix polls every future spawned into an actor's context (`ctx.spawn`, a
//! `ResponseActFuture`) on every wake-up of the actor: its own docs say the number of
//! such futures "should be small". A destination has a store write in flight for every
//! publish and ack it has not answered yet, a thousand per pipelined connection, so
//! spawning one future per write made each wake-up cost as much as the writes in
//! flight, and a busy destination slowed down tenfold. Here each write is a task of
//! its own (tokio wakes only the one that is ready), and the results reach the actor
//! through one channel, drained by one spawned future: a wake-up costs what is ready.

use std::future::Future;

use actix::prelude::*;
use tokio::sync::mpsc;

/// What runs on the actor once a piece of work is done.
type Done<A> = Box<dyn FnOnce(&mut A, &mut Context<A>)>;

/// See the module documentation. One per actor; created on first use.
pub struct Completions<A: Actor<Context = Context<A>>> {
    tx: Option<mpsc::UnboundedSender<Done<A>>>,
    /// Work begun whose `then` has not run yet (shared with each piece's answer,
    /// which counts itself done on the actor).
    in_flight: std::rc::Rc<std::cell::Cell<usize>>,
}

impl<A: Actor<Context = Context<A>>> Default for Completions<A> {
    fn default() -> Self {
        Self {
            tx: None,
            in_flight: std::rc::Rc::default(),
        }
    }
}

impl<A: Actor<Context = Context<A>>> Completions<A> {
    /// Runs `work` on the actor's arbiter, then `then` with its output on the actor, in
    /// its context, as `ctx.spawn(work.into_actor(act).map(then))` would, without
    /// adding a future to the context per call. Results come back in the order the
    /// work finishes. If the actor stops first, `then` does not run.
    ///
    /// The channel is unbounded: what bounds it is what bounds the work in flight
    /// (each call is one store write a producer or consumer waits for, within its
    /// pipeline window and producer flow control).
    pub fn when_done<T: 'static>(
        &mut self,
        ctx: &mut Context<A>,
        work: impl Future<Output = T> + 'static,
        then: impl FnOnce(T, &mut A, &mut Context<A>) + 'static,
    ) {
        let tx = self
            .tx
            .get_or_insert_with(|| {
                let (tx, mut rx) = mpsc::unbounded_channel::<Done<A>>();
                let results = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
                ctx.spawn(
                    actix::fut::wrap_stream(results)
                        .map(|done: Done<A>, act, ctx| done(act, ctx))
                        .finish(),
                );
                tx
            })
            .clone();
        let in_flight = std::rc::Rc::clone(&self.in_flight);
        in_flight.set(in_flight.get() + 1);
        actix_rt::spawn(async move {
            let output = work.await;
            let _ = tx.send(Box::new(move |act, ctx| {
                in_flight.set(in_flight.get() - 1);
                then(output, act, ctx)
            }));
        });
    }

    /// Pieces of work begun whose `then` has not run yet: 0 when the actor waits for
    /// nothing (a queue may sleep only then).
    pub fn in_flight(&self) -> usize {
        self.in_flight.get()
    }
}
