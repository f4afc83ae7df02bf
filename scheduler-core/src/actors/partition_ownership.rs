//! PartitionOwnership: the fence of one partition tree. When the tree starts it claims the
//! partition in Cassandra, raising the partition's ownership epoch with a lightweight
//! transaction; from then on it answers whether the tree still holds the newest epoch. A node
//! that lost the partition without noticing (paused past the group session timeout, say) finds
//! a newer epoch on its next check: its tree is fenced, runs nothing more and records nothing.
//!
//! Only a tree started for a group assignment claims. A tree rebuilt after a failure inherits the
//! epoch of the tree it replaces and only checks it: a node that lost the partition while a
//! rebuild was pending (paused, say) must not take the partition back from its owner.
//!
//! A positive answer is reused for `OWNERSHIP_RECHECK` from the moment its read *began*, on the
//! monotonic clock, far below the group session timeout: a node that was paused long enough to
//! lose its partitions always reads the epoch again before it starts or records a task, and a
//! read that began before a pause answers no check made after it. A check may also ask for a
//! read that began after a given event (a task does, after writing its lease: see
//! [`crate::lease`]); that is decided by [`Stamp`]s, which order events within one clock tick.
//! The epoch is re-read in the background twice as often, so a live node's checks are usually
//! answered at once.

use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, Message, Recipient,
    ResponseFuture, WrapFuture,
};
use futures::channel::oneshot;
use tokio::time::Instant;
use tracing::{info, warn};

use super::{StopActor, TreeError, TreeResult};
use crate::clock::{Clock, Stamp};
use crate::epoch::EpochCell;
use crate::metrics::Metrics;
use crate::store::{OwnershipStore, PartitionId, StoreResult};

/// How long a verified epoch is trusted before it is read again.
pub const OWNERSHIP_RECHECK: Duration = Duration::from_secs(2);

/// Is this tree still the partition's owner? Answered from a read that began less than
/// `OWNERSHIP_RECHECK` before the check (and, if `read_after` is set, after that event), else
/// after reading the epoch (or claiming the partition, the first time).
#[derive(Debug, Message, Default)]
#[rtype(result = "TreeResult<Ownership>")]
pub struct CheckOwnership {
    /// Only a read that began after this event may answer.
    pub read_after: Option<Stamp>,
}

/// The answer to [`CheckOwnership`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// The tree holds the newest epoch, this one.
    Owner(u64),
    /// Another tree claimed the partition since: run nothing, record nothing.
    Fenced,
}

/// To the PartitionSupervisor: the tree is fenced and must stop (it is not rebuilt: the node
/// runs the partition again only if the group assigns it again).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct PartitionFenced {
    /// The epoch this tree held.
    pub epoch: u64,
    /// The newer epoch found.
    pub current: u64,
}

/// Holds the tree's epoch and answers ownership checks.
pub struct PartitionOwnership {
    partition: PartitionId,
    node_id: Arc<str>,
    store: Arc<dyn OwnershipStore>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    supervisor: Recipient<PartitionFenced>,
    /// The claimed or inherited epoch (`None` until the claim succeeds).
    epoch: Option<u64>,
    /// Where the epoch is published for a rebuild to inherit.
    cell: EpochCell,
    /// When the last read that found this tree the owner began.
    verified_at: Option<Began>,
    fenced: bool,
    /// When the claim or read under way began.
    verifying: Option<Began>,
    /// Checks waiting for a read that may answer them.
    waiters: Vec<Waiter>,
}

/// When an epoch read began: on the monotonic clock (how fresh it is) and in the order of events
/// (what it may have seen).
#[derive(Debug, Clone, Copy)]
struct Began {
    at: Instant,
    stamp: Stamp,
}

impl Began {
    fn now() -> Began {
        Began {
            at: Instant::now(),
            stamp: Stamp::now(),
        }
    }
}

struct Waiter {
    asked_at: Instant,
    read_after: Option<Stamp>,
    reply: oneshot::Sender<TreeResult<Ownership>>,
}

impl Waiter {
    /// Whether a read that began at `began` may answer this check.
    fn answered_by(&self, began: Began) -> bool {
        self.read_after.is_none_or(|after| began.stamp > after)
            && self.asked_at.saturating_duration_since(began.at) < OWNERSHIP_RECHECK
    }
}

impl PartitionOwnership {
    /// The fence of `partition` for a tree of node `node_id`. If `cell` holds an epoch (a
    /// rebuilt tree) it checks that epoch; otherwise it claims the partition as soon as it starts
    /// and publishes the new epoch in `cell`. It tells `supervisor` if it finds itself fenced.
    pub fn new(
        partition: PartitionId,
        node_id: Arc<str>,
        store: Arc<dyn OwnershipStore>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        supervisor: Recipient<PartitionFenced>,
        cell: EpochCell,
    ) -> Self {
        PartitionOwnership {
            partition,
            node_id,
            store,
            clock,
            metrics,
            supervisor,
            epoch: Some(cell.get()).filter(|e| *e > 0),
            cell,
            verified_at: None,
            fenced: false,
            verifying: None,
            waiters: Vec::new(),
        }
    }

    /// The epoch, if a read that may answer a check made now (with `read_after`) found it ours.
    fn verified(&self, read_after: Option<Stamp>) -> Option<u64> {
        let probe = Waiter {
            asked_at: Instant::now(),
            read_after,
            reply: oneshot::channel().0,
        };
        self.verified_at
            .filter(|at| probe.answered_by(*at))
            .and(self.epoch)
    }

    /// Claims the partition (first time) or reads its epoch, then answers the waiters that read
    /// may answer; the others wait for the next read, started at once.
    fn verify(&mut self, ctx: &mut Context<Self>) {
        if self.verifying.is_some() {
            return;
        }
        let started = Began::now();
        self.verifying = Some(started);
        let partition = self.partition;
        let claimed_at = self.clock.now();
        let check = match self.epoch {
            None => {
                let claim =
                    self.store
                        .claim_partition(partition, self.node_id.to_string(), claimed_at);
                Box::pin(async move { claim.await.map(|epoch| (epoch, epoch)) })
                    as futures::future::BoxFuture<'static, StoreResult<(u64, u64)>>
            }
            Some(mine) => {
                let read = self.store.partition_epoch(partition);
                Box::pin(async move { read.await.map(|current| (mine, current)) })
            }
        };
        ctx.spawn(check.into_actor(self).map(move |result, act, ctx| {
            act.verifying = None;
            let answer = match result {
                Ok((mine, current)) if mine == current => {
                    if act.epoch.is_none() {
                        info!(partition, epoch = mine, "partition claimed");
                        act.cell.set(mine);
                    }
                    act.epoch = Some(mine);
                    act.verified_at = Some(started);
                    Ok(Ownership::Owner(mine))
                }
                Ok((mine, current)) if current < mine => {
                    // The store lost our claim (e.g. a restart dropped unsynced writes): claim
                    // again rather than run on an epoch another tree could also be given.
                    warn!(
                        partition,
                        epoch = mine,
                        current,
                        "the stored ownership epoch went back; claiming the partition again"
                    );
                    act.epoch = None;
                    act.verified_at = None;
                    Err(TreeError::EpochWentBack { mine, current })
                }
                Ok((mine, current)) => {
                    warn!(
                        partition,
                        epoch = mine,
                        current,
                        "partition claimed by a newer tree: this one is fenced"
                    );
                    act.fenced = true;
                    // The tree's pending work is refused as a whole; each later check counts too.
                    act.metrics.fencing_rejection(partition);
                    act.supervisor.do_send(PartitionFenced {
                        epoch: mine,
                        current,
                    });
                    Ok(Ownership::Fenced)
                }
                Err(e) => Err(TreeError::Store(e)),
            };
            // A fenced answer or a failure holds for every waiter; "owner" only for those
            // this read may answer.
            let (answered, waiting): (Vec<Waiter>, Vec<Waiter>) =
                act.waiters.drain(..).partition(|w| {
                    !matches!(answer, Ok(Ownership::Owner(_))) || w.answered_by(started)
                });
            for waiter in answered {
                let _ = waiter.reply.send(answer.clone());
            }
            act.waiters = waiting;
            if !act.waiters.is_empty() {
                act.verify(ctx);
            }
        }));
    }

    fn answer(&mut self, ownership: Ownership) -> ResponseFuture<TreeResult<Ownership>> {
        if ownership == Ownership::Fenced {
            self.metrics.fencing_rejection(self.partition);
        }
        Box::pin(async move { Ok(ownership) })
    }
}

impl Actor for PartitionOwnership {
    type Context = Context<Self>;

    /// Claims the partition at once, so an older tree elsewhere is fenced from now on, then
    /// re-reads the epoch every half `OWNERSHIP_RECHECK`, so that a task due now rarely waits
    /// for that read.
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.verify(ctx);
        ctx.run_interval(OWNERSHIP_RECHECK / 2, |act, ctx| {
            if !act.fenced && act.epoch.is_some() {
                act.verify(ctx);
            }
        });
    }
}

impl Handler<CheckOwnership> for PartitionOwnership {
    type Result = ResponseFuture<TreeResult<Ownership>>;

    fn handle(&mut self, msg: CheckOwnership, ctx: &mut Context<Self>) -> Self::Result {
        if self.fenced {
            return self.answer(Ownership::Fenced);
        }
        if let Some(epoch) = self.verified(msg.read_after) {
            return self.answer(Ownership::Owner(epoch));
        }
        let (reply, receiver) = oneshot::channel();
        self.waiters.push(Waiter {
            asked_at: Instant::now(),
            read_after: msg.read_after,
            reply,
        });
        self.verify(ctx);
        let metrics = Arc::clone(&self.metrics);
        let partition = self.partition;
        Box::pin(async move {
            let answer = receiver.await.unwrap_or(Err(TreeError::Stopping {
                doing: "checking ownership",
            }));
            if matches!(answer, Ok(Ownership::Fenced)) {
                metrics.fencing_rejection(partition);
            }
            answer
        })
    }
}

impl Handler<StopActor> for PartitionOwnership {
    type Result = ();

    fn handle(&mut self, _: StopActor, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
