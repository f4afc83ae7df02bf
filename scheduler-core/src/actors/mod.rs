//! The per-partition actor tree (actix), as in the blueprint:
//!
//! ```text
//! TopicSupervisor
//! └── PartitionSupervisor (one per owned partition)
//!     ├── TaskPersistence       writes the schedule, loads it, pushes tasks behind its read cursor
//!     ├── PartitionScheduler    holds loaded tasks, dispatches each when due (one timer, next task)
//!     ├── ThroughputController  keeps in-flight tasks under the maximum by asking for loads
//!     ├── PartitionExecutor     routes due tasks to one OrderingExecutor per orderingId
//!     │   └── OrderingExecutor  runs its orderingId's tasks one at a time, in order, each
//!     │                         through its lifecycle (task_lifecycle: lease, ownership and
//!     │                         status before its time, then time, slot, call, record, retry)
//!     └── PartitionOwnership    claims the partition (ownership epoch) and fences a stale tree
//! ```
//!
//! Beside the actors, each tree keeps a running-task lease ([`crate::lease::TreeLease`]) that
//! outlives the tree while calls it started still run, and a cancel gate
//! ([`crate::cancel_gate::CancelGate`]) through which a cancel reaches tasks already checked.
//!
//! A request is defined beside the actor that answers it; a report sent back up (a task done,
//! room freed, a failure) beside the actor that sends it, to a `Recipient`: imports run one way,
//! from parents to children and down the pipeline. A failure that would lose a task
//! escalates to the PartitionSupervisor, which tears its tree down and has the TopicSupervisor
//! rebuild it from Cassandra.

mod deps;
pub mod ordering_executor;
pub mod partition_executor;
pub mod partition_ownership;
pub mod partition_scheduler;
pub mod partition_supervisor;
pub mod task_lifecycle;
pub mod task_persistence;
pub mod throughput_controller;
pub mod topic_supervisor;

#[cfg(test)]
mod tests;

pub use crate::identity::IdentityOp;
pub use deps::{PartitionDeps, RunDeps, RunTables};

use actix::Message;

use crate::store::{PartitionId, StoreError};
use scheduler_client::wire::Record;
use scheduler_client::{Task, TaskKey};

/// What one poll brought for one partition, in partition order: tasks to schedule (a task with
/// the key of one already scheduled replaces it), keys of tasks to cancel (a cancellation is
/// final, so its place among the tasks does not matter), and the records that act on an
/// identity (tasks with a conflict mode, reschedules and cancels by identity), applied in their
/// order. The consumer hands these to the tree.
#[derive(Debug, Default)]
pub struct PolledTasks {
    /// Tasks to schedule.
    pub tasks: Vec<Task>,
    /// Keys of tasks to cancel.
    pub cancels: Vec<TaskKey>,
    /// Records acting on an identity, in partition order.
    pub by_identity: Vec<IdentityOp>,
}

impl PolledTasks {
    /// The earliest time a record of the batch schedules a task at, and the last offset of a
    /// record that carries one: what a failed write of the batch may have left half written.
    pub(crate) fn extent(&self) -> Option<(chrono::DateTime<chrono::Utc>, i64)> {
        let mut extent: Option<(chrono::DateTime<chrono::Utc>, i64)> = None;
        let mut add = |at: chrono::DateTime<chrono::Utc>, offset: Option<i64>| {
            let offset = offset.unwrap_or(-1);
            extent = Some(match extent {
                Some((earliest, last)) => (earliest.min(at), last.max(offset)),
                None => (at, offset),
            });
        };
        for task in &self.tasks {
            add(task.scheduled_time, task.enqueue_offset);
        }
        for op in &self.by_identity {
            match op {
                IdentityOp::Schedule(task) => add(task.scheduled_time, task.enqueue_offset),
                IdentityOp::Reschedule { to, offset, .. } => add(*to, Some(*offset)),
                IdentityOp::Cancel { .. } => {}
            }
        }
        extent
    }

    /// Adds a decoded record of `partition` at `offset`, as the poll loop hands records over:
    /// a task stamped with its offset (one with a conflict mode acts on its identity), a
    /// cancellation, an identity's cancellation or reschedule.
    pub(crate) fn add(&mut self, partition: PartitionId, offset: i64, record: Record) {
        match record {
            Record::Task(task) => {
                tracing::debug!(partition, offset, task = %task.key(), "task polled");
                let task = task.enqueued_at(offset);
                if task.on_conflict.is_some() {
                    self.by_identity.push(IdentityOp::Schedule(task));
                } else {
                    self.tasks.push(task);
                }
            }
            Record::Cancel(key) => {
                tracing::debug!(partition, offset, task = %key, "cancellation polled");
                self.cancels.push(key);
            }
            Record::CancelIdentity(identity) => {
                tracing::debug!(partition, offset, %identity, "cancellation by identity polled");
                self.by_identity
                    .push(IdentityOp::Cancel { identity, offset });
            }
            Record::Reschedule(identity, to) => {
                tracing::debug!(partition, offset, %identity, "reschedule polled");
                self.by_identity.push(IdentityOp::Reschedule {
                    identity,
                    to,
                    offset,
                });
            }
        }
    }
}

/// Why a partition tree did not serve a request: the store failed, or the tree is stopping.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TreeError {
    /// A Cassandra operation failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Enqueueing a task the engine creates (a group's join) failed.
    #[error(transparent)]
    Enqueue(#[from] crate::enqueue::EnqueueError),
    /// The tree, or the actor asked, is stopping: the request is left to the next tree.
    #[error("{doing}: the partition is stopping")]
    Stopping {
        /// What was asked.
        doing: &'static str,
    },
    /// The tree has not started yet (its start-up reads have not succeeded): the request is
    /// made again later.
    #[error("{doing}: the partition's tree is still starting")]
    Starting {
        /// What was asked.
        doing: &'static str,
    },
    /// The request reached the actor after its sender stopped waiting: it is made again.
    #[error("{doing}: not begun, the request came after its sender stopped waiting")]
    Late {
        /// What was asked.
        doing: &'static str,
    },
    /// The stored ownership epoch is older than the one this tree claimed (the store lost the
    /// claim): the tree claims the partition again rather than run on an epoch another tree
    /// could also be given.
    #[error(
        "the stored ownership epoch {current} is older than this tree's {mine}; claiming again"
    )]
    EpochWentBack {
        /// The epoch this tree claimed.
        mine: u64,
        /// The epoch stored now.
        current: u64,
    },
}

impl From<crate::hooks::StepError> for TreeError {
    fn from(error: crate::hooks::StepError) -> Self {
        match error {
            crate::hooks::StepError::Store(e) => TreeError::Store(e),
            crate::hooks::StepError::Enqueue(e) => TreeError::Enqueue(e),
        }
    }
}

/// The result of a request to a partition tree.
pub type TreeResult<T> = Result<T, TreeError>;

/// Stops the receiving actor at once (partition actors reference each other, so they do not stop
/// by themselves when their supervisor goes).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopActor;
