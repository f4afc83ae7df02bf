//! TopicSupervisor: the root of a node's actor tree. It owns one PartitionSupervisor per
//! assigned partition, hands each polled batch to the partitions it belongs to and answers once
//! they are durable, tears partitions down on revoke, and rebuilds a partition that failed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, MailboxError, Message,
    MessageResult, ResponseActFuture, ResponseFuture, WrapFuture,
};
use tracing::{info, warn};

use super::partition_supervisor::{PartitionStopped, PartitionSupervisor, StopPartition};
use super::task_persistence::{PersistTasks, TaskPersistence};
use super::{PartitionDeps, PolledTasks};
use crate::epoch::EpochCell;
use crate::outcome::StopReason;
use crate::store::PartitionId;

/// Wait before rebuilding a partition that failed.
const REBUILD_DELAY: Duration = Duration::from_secs(1);

/// Start trees for these partitions (they load their schedule from the store).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct AssignPartitions(pub Vec<PartitionId>);

/// Tear down every partition tree; the reply comes when they are all stopped and says whether
/// every running task finished (`false`: a drain timed out and tasks may still be running).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct RevokePartitions;

/// One polled batch, grouped by partition.
#[derive(Debug, Message)]
#[rtype(result = "TaskBatchProcessed")]
pub struct ProcessTaskBatch(pub BTreeMap<PartitionId, PolledTasks>);

/// Which partitions of a batch are durable; only their offsets may be committed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TaskBatchProcessed {
    /// Partitions whose tasks are all persisted.
    pub persisted: Vec<PartitionId>,
    /// Partitions whose tasks are not (not owned, or the write failed), with the reason.
    pub failed: Vec<(PartitionId, String)>,
}

/// The partitions this node currently runs.
#[derive(Debug, Message)]
#[rtype(result = "Vec<PartitionId>")]
pub struct OwnedPartitions;

/// The tree of one owned partition: its supervisor, and its TaskPersistence, to which polled
/// tasks go directly.
struct PartitionTree {
    supervisor: Addr<PartitionSupervisor>,
    persistence: Addr<TaskPersistence>,
}

/// Root of the node's actors.
pub struct TopicSupervisor {
    deps: PartitionDeps,
    partitions: BTreeMap<PartitionId, PartitionTree>,
    /// The ownership epoch of each partition's tree, inherited by a rebuilt tree: only an
    /// assignment claims a partition.
    epochs: HashMap<PartitionId, EpochCell>,
    /// Failed partitions waiting to be rebuilt (still owned: a revoke clears them).
    rebuilding: HashSet<PartitionId>,
}

impl TopicSupervisor {
    /// A supervisor whose partition trees share `deps`.
    pub fn new(deps: PartitionDeps) -> Self {
        TopicSupervisor {
            deps,
            partitions: BTreeMap::new(),
            epochs: HashMap::new(),
            rebuilding: HashSet::new(),
        }
    }

    /// Starts a tree for `partition`: a fresh one claims the partition; a rebuilt one inherits
    /// the epoch of the tree it replaces.
    fn start_partition(&mut self, partition: PartitionId, ctx: &mut Context<Self>) {
        let epoch = self.epochs.entry(partition).or_default().clone();
        let supervisor = PartitionSupervisor::new(
            partition,
            self.deps.clone(),
            ctx.address().recipient(),
            epoch,
        );
        let persistence = supervisor.persistence();
        let tree = PartitionTree {
            supervisor: supervisor.start(),
            persistence,
        };
        self.partitions.insert(partition, tree);
    }
}

impl Actor for TopicSupervisor {
    type Context = Context<Self>;
}

impl Handler<AssignPartitions> for TopicSupervisor {
    type Result = ();

    fn handle(&mut self, msg: AssignPartitions, ctx: &mut Context<Self>) {
        info!(partitions = ?msg.0, "partitions assigned");
        for partition in msg.0 {
            self.rebuilding.remove(&partition);
            if !self.partitions.contains_key(&partition) {
                // An assignment: the new tree claims the partition.
                self.epochs.remove(&partition);
                self.start_partition(partition, ctx);
            }
        }
    }
}

impl Handler<RevokePartitions> for TopicSupervisor {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, _: RevokePartitions, _: &mut Context<Self>) -> Self::Result {
        let drain_timeout = self.deps.settings.drain_timeout;
        let partitions: Vec<PartitionId> = self.partitions.keys().copied().collect();
        info!(?partitions, "partitions revoked; draining");
        self.rebuilding.clear();
        self.epochs.clear();
        for partition in &partitions {
            self.deps.in_flight.forget(*partition);
            self.deps.metrics.forget_partition(*partition);
        }
        let stops: Vec<_> = std::mem::take(&mut self.partitions)
            .into_values()
            .map(|tree| tree.supervisor.send(StopPartition { drain_timeout }))
            .collect();
        Box::pin(async move {
            let drained = futures::future::join_all(stops).await;
            drained.into_iter().all(|d| d.unwrap_or(false))
        })
    }
}

impl Handler<ProcessTaskBatch> for TopicSupervisor {
    type Result = ResponseFuture<TaskBatchProcessed>;

    fn handle(&mut self, msg: ProcessTaskBatch, _: &mut Context<Self>) -> Self::Result {
        let mut result = TaskBatchProcessed::default();
        let mut writes = Vec::new();
        // The consumer thread waits for this answer: never longer than `persist_timeout`, even
        // for a tree whose mailbox is busy (a start-up read failing, say).
        let timeout = self.deps.settings.persist_timeout;
        let answer_by = tokio::time::Instant::now() + timeout;
        for (partition, polled) in msg.0 {
            match self.partitions.get(&partition) {
                Some(tree) => {
                    let write = tree.persistence.send(PersistTasks { polled, answer_by });
                    writes.push((partition, write.timeout(timeout)));
                }
                None => result
                    .failed
                    .push((partition, "partition not owned by this node".into())),
            }
        }
        Box::pin(async move {
            let (partitions, requests): (Vec<_>, Vec<_>) = writes.into_iter().unzip();
            let replies = futures::future::join_all(requests).await;
            for (partition, reply) in partitions.into_iter().zip(replies) {
                match reply {
                    Ok(Ok(())) => result.persisted.push(partition),
                    Ok(Err(e)) => result.failed.push((partition, e.to_string())),
                    Err(MailboxError::Timeout) => result.failed.push((
                        partition,
                        format!("persisting a polled batch: no answer within {timeout:?}"),
                    )),
                    // TaskPersistence stopped: its tree wound down.
                    Err(MailboxError::Closed) => result.failed.push((
                        partition,
                        "persisting a polled batch: the partition is stopping".into(),
                    )),
                }
            }
            result.persisted.sort_unstable();
            result
        })
    }
}

impl Handler<OwnedPartitions> for TopicSupervisor {
    type Result = MessageResult<OwnedPartitions>;

    fn handle(&mut self, _: OwnedPartitions, _: &mut Context<Self>) -> Self::Result {
        let mut owned: Vec<PartitionId> = self.partitions.keys().copied().collect();
        owned.sort_unstable();
        MessageResult(owned)
    }
}

impl Handler<PartitionStopped> for TopicSupervisor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: PartitionStopped, _: &mut Context<Self>) -> Self::Result {
        let current = self.partitions.get(&msg.partition).map(|t| &t.supervisor);
        if current != Some(&msg.supervisor) {
            return Box::pin(actix::fut::ready(()));
        }
        self.partitions.remove(&msg.partition);
        let partition = msg.partition;
        if msg.reason != StopReason::Rebuilding {
            self.epochs.remove(&partition);
            self.deps.in_flight.forget(partition);
            self.deps.metrics.forget_partition(partition);
            return Box::pin(actix::fut::ready(()));
        }
        self.rebuilding.insert(partition);
        Box::pin(
            tokio::time::sleep(REBUILD_DELAY)
                .into_actor(self)
                .map(move |_, act, ctx| {
                    if act.rebuilding.remove(&partition) {
                        warn!(partition, "rebuilding failed partition from Cassandra");
                        act.start_partition(partition, ctx);
                    }
                }),
        )
    }
}
