//! What every destination shares, as plain parts and one set of handlers.
//!
//! A destination kind (topic, queue) is an actor of its own file that writes only its
//! dispatch and its expiry page; everything else is here:
//!
//! | part | what it keeps | file |
//! |---|---|---|
//! | [`DestinationKey`], [`DestinationPattern`] | the one name of a destination (kind and plain name), and patterns over names | `key.rs` |
//! | [`PublishOrder`] | the reorder buffer: messages released in publish order | `publish_order.rs` |
//! | [`PreparedMessages`] | messages of open transactions, renumbered at commit | `prepared.rs` |
//! | [`CommitFence`] | places reserved for rows the broker writes itself (a COMMIT, a batch of composite sends), and the destination's own row writes held until that write is queued | `fence.rs` |
//! | [`HousekeepingSchedule`] | timer, expiry runs and pages, cleanup batches, stop | `schedule.rs` |
//! | [`DestinationCounters`] | the counters every kind reports | `counters.rs` |
//! | [`Published`], [`StatsBoard`] | the counters and gauges each destination publishes as it works, and which changed since the last reading | `published.rs` |
//! | [`policy::Policy`], [`policy::PolicyMap`] | per-destination settings, matched by pattern (also `ebb_actors::policy`) | `policy.rs` |
//! | [`AckBatch`] | acks of one subscription gathered while its last ack write is in flight, written together | `ack_batch.rs` |
//! | [`Completions`] | store writes in flight, their results handed back to the actor (one future, however many writes) | `completions.rs` |
//! | [`sleep::IdleWatch`], [`sleep::Doze`], [`sleep::Sleep`] | when an idle destination stops its actor and sleeps, and how | `sleep.rs` |
//! | [`DestinationCore`], [`DestinationActor`] | the above together, and the shared handlers | `core.rs` |
//!
//! A new kind of destination adds its actor file (a [`DestinationCore`], the
//! [`DestinationActor`] methods, `destination_handlers!` and its own messages) and
//! an entry in the registry (`broker.rs`).

mod ack_batch;
mod completions;
mod core;
mod counters;
mod fence;
pub mod key;
pub mod policy;
mod prepared;
mod publish_order;
mod published;
mod schedule;
pub mod sleep;

pub use self::core::{
    abort_prepared, begin_page, commit_prepared, end_run, idle_if_done, now_ms, page_failed,
    page_finished, publish, release_scheduled, retire, schedule, stop_housekeeping, stored_row,
    AbortPrepared, CommitPrepared, CountersMut, DestinationActor, DestinationCore, DueMessage,
    ExpiryPage, Plan, Publish, PublishPrepared, PublishTicket, ReleaseScheduled, Retire,
    RunHousekeeping, StopDestination, StopHousekeeping,
};
pub use ack_batch::{AckAnswer, AckBatch, AckWrite};
pub use completions::Completions;
pub use counters::DestinationCounters;
pub use fence::{
    fence_commit, fence_sends, fenced_stored, lift_fence, CommitFence, FenceCommit, FenceSends,
    FencedCopy, FencedStored, LiftFence, WriteAnswer,
};
pub use key::{
    DestinationKey, DestinationKind, DestinationPattern, InvalidDestination, COMPOSITE_ONLY,
    MAX_COMPOSITE, MAX_NAME_BYTES,
};
pub use prepared::PreparedMessages;
pub use publish_order::PublishOrder;
pub use published::{debug_check_published, Gauges, LastRead, Published, ReadTotals, StatsBoard};
pub use schedule::{AfterPage, HousekeepingSchedule};

/// Implements, for destination actor `$actor` (a [`DestinationActor`]), the handlers
/// every destination shares: [`Publish`](crate::destination::Publish),
/// [`PublishPrepared`](crate::destination::PublishPrepared),
/// [`CommitPrepared`](crate::destination::CommitPrepared),
/// [`AbortPrepared`](crate::destination::AbortPrepared),
/// [`FenceSends`](crate::destination::FenceSends),
/// [`FenceCommit`](crate::destination::FenceCommit),
/// [`LiftFence`](crate::destination::LiftFence),
/// [`FencedStored`](crate::destination::FencedStored),
/// [`RunHousekeeping`](crate::destination::RunHousekeeping),
/// [`StopHousekeeping`](crate::destination::StopHousekeeping), [`ExpiryPage`],
/// [`Retire`](crate::destination::Retire) and
/// [`StopDestination`](crate::destination::StopDestination).
macro_rules! destination_handlers {
    ($actor:ty) => {
        impl actix::Handler<$crate::destination::Publish> for $actor {
            type Result = $crate::destination::PublishTicket;

            fn handle(
                &mut self,
                msg: $crate::destination::Publish,
                ctx: &mut actix::Context<Self>,
            ) -> Self::Result {
                $crate::destination::publish(self, msg.0, None, ctx)
            }
        }

        impl actix::Handler<$crate::destination::PublishPrepared> for $actor {
            type Result = $crate::destination::PublishTicket;

            fn handle(
                &mut self,
                msg: $crate::destination::PublishPrepared,
                ctx: &mut actix::Context<Self>,
            ) -> Self::Result {
                $crate::destination::publish(self, msg.message, Some(msg.xid), ctx)
            }
        }

        impl actix::Handler<$crate::destination::CommitPrepared> for $actor {
            type Result = ();

            fn handle(
                &mut self,
                msg: $crate::destination::CommitPrepared,
                ctx: &mut actix::Context<Self>,
            ) {
                $crate::destination::commit_prepared(self, &msg.xid, &msg.renumbered, ctx);
            }
        }

        impl actix::Handler<$crate::destination::ReleaseScheduled> for $actor {
            type Result = actix::ResponseFuture<Result<usize, $crate::error::ActorError>>;

            fn handle(
                &mut self,
                msg: $crate::destination::ReleaseScheduled,
                ctx: &mut actix::Context<Self>,
            ) -> Self::Result {
                $crate::destination::release_scheduled(self, msg.releases, ctx)
            }
        }

        impl actix::Handler<$crate::destination::AbortPrepared> for $actor {
            type Result = ();

            fn handle(
                &mut self,
                msg: $crate::destination::AbortPrepared,
                ctx: &mut actix::Context<Self>,
            ) {
                $crate::destination::abort_prepared(self, &msg.xid, ctx);
            }
        }

        impl actix::Handler<$crate::destination::FenceCommit> for $actor {
            type Result = u64;

            fn handle(
                &mut self,
                msg: $crate::destination::FenceCommit,
                _: &mut actix::Context<Self>,
            ) -> u64 {
                $crate::destination::fence_commit(self, msg.xid)
            }
        }

        impl actix::Handler<$crate::destination::FenceSends> for $actor {
            type Result =
                Result<(u64, Vec<$crate::destination::FencedCopy>), $crate::error::ActorError>;

            fn handle(
                &mut self,
                msg: $crate::destination::FenceSends,
                ctx: &mut actix::Context<Self>,
            ) -> Self::Result {
                $crate::destination::fence_sends(self, msg.messages, ctx)
            }
        }

        impl actix::Handler<$crate::destination::FencedStored> for $actor {
            type Result = ();

            fn handle(
                &mut self,
                msg: $crate::destination::FencedStored,
                ctx: &mut actix::Context<Self>,
            ) {
                $crate::destination::fenced_stored(self, msg.fence, msg.ids, ctx);
            }
        }

        impl actix::Handler<$crate::destination::LiftFence> for $actor {
            type Result = ();

            fn handle(
                &mut self,
                msg: $crate::destination::LiftFence,
                _: &mut actix::Context<Self>,
            ) {
                $crate::destination::lift_fence(self, msg.fence);
            }
        }

        impl actix::Handler<$crate::destination::RunHousekeeping> for $actor {
            type Result = ();

            fn handle(
                &mut self,
                _: $crate::destination::RunHousekeeping,
                ctx: &mut actix::Context<Self>,
            ) {
                // Retired (asleep or deleted), it counts and starts nothing: its
                // successor runs its housekeeping, and the registry may be counting
                // its sends on its stats entry meanwhile.
                if $crate::destination::DestinationActor::core(self).retired {
                    return;
                }
                $crate::destination::DestinationActor::tick(self, ctx);
            }
        }

        impl actix::Handler<$crate::destination::StopHousekeeping> for $actor {
            type Result = actix::ResponseFuture<()>;

            fn handle(
                &mut self,
                _: $crate::destination::StopHousekeeping,
                ctx: &mut actix::Context<Self>,
            ) -> Self::Result {
                $crate::destination::stop_housekeeping(self, ctx)
            }
        }

        impl actix::Handler<$crate::destination::Retire> for $actor {
            type Result = actix::ResponseFuture<Result<(), $crate::error::ActorError>>;

            fn handle(
                &mut self,
                _: $crate::destination::Retire,
                ctx: &mut actix::Context<Self>,
            ) -> Self::Result {
                $crate::destination::retire(self, ctx)
            }
        }

        impl actix::Handler<$crate::destination::StopDestination> for $actor {
            type Result = ();

            fn handle(
                &mut self,
                _: $crate::destination::StopDestination,
                ctx: &mut actix::Context<Self>,
            ) {
                actix::ActorContext::stop(ctx);
            }
        }

        impl actix::Handler<$crate::destination::ExpiryPage> for $actor {
            type Result = ();

            fn handle(
                &mut self,
                _: $crate::destination::ExpiryPage,
                ctx: &mut actix::Context<Self>,
            ) {
                $crate::destination::DestinationActor::expiry_page(self, ctx);
            }
        }
    };
}
pub(crate) use destination_handlers;
