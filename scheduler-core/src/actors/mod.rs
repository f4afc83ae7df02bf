//! The per-partition actor tree (actix), as in the blueprint:
//!
//! ```text
//! TopicSupervisor
//! └── PartitionSupervisor (one per owned partition)
//!     ├── TaskPersistence       writes the schedule, loads it, pushes tasks behind its read cursor
//!     ├── PartitionScheduler    holds loaded tasks, dispatches each when due (one timer, next task)
//!     ├── ThroughputController  keeps in-flight tasks under the maximum by asking for loads
//!     ├── PartitionExecutor     routes due tasks to one OrderingExecutor per orderingId
//!     │   └── OrderingExecutor  runs its orderingId's tasks one at a time, in order
//!     │       └── TaskExecutorActor  one task: completion check, attempts, retries, outcome
//!     └── TaskStatusTracker     reads and writes task status and attempt history
//! ```
//!
//! Messages are defined beside the actor that handles them. A failure that would lose a task
//! escalates to the PartitionSupervisor, which tears its tree down and has the TopicSupervisor
//! rebuild it from Cassandra.

pub mod ordering_executor;
pub mod partition_executor;
pub mod partition_scheduler;
pub mod partition_supervisor;
pub mod task_executor;
pub mod task_persistence;
pub mod task_status_tracker;
pub mod throughput_controller;
pub mod topic_supervisor;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use actix::Message;

use crate::clock::Clock;
use crate::executor::ExecutionPool;
use crate::settings::SchedulingSettings;
use crate::store::TaskStore;

/// What every partition tree needs from the node.
#[derive(Clone)]
pub struct PartitionDeps {
    /// Where the schedule and task status live.
    pub store: Arc<dyn TaskStore>,
    /// The time source.
    pub clock: Arc<dyn Clock>,
    /// Runs the user's executor.
    pub pool: ExecutionPool,
    /// Scheduling settings.
    pub settings: Arc<SchedulingSettings>,
}

/// Stops the receiving actor at once (partition actors reference each other, so they do not stop
/// by themselves when their supervisor goes).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopActor;
