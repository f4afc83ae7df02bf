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
//!     │                         through its lifecycle (task_lifecycle: slot, status, lease,
//!     │                         ownership, call, record, retry)
//!     └── PartitionOwnership    claims the partition (ownership epoch) and fences a stale tree
//! ```
//!
//! Beside the actors, each tree keeps a running-task lease ([`crate::lease::TreeLease`]) that
//! outlives the tree while calls it started still run.
//!
//! Messages are defined beside the actor that handles them. A failure that would lose a task
//! escalates to the PartitionSupervisor, which tears its tree down and has the TopicSupervisor
//! rebuild it from Cassandra.

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

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use actix::{Addr, Message};

use crate::clock::Clock;
use crate::events::EventPublisher;
use crate::executor::ExecutionPool;
use crate::executor::StopReason;
use crate::lease::TreeLease;
use crate::metrics::Metrics;
use crate::settings::SchedulingSettings;
use crate::store::{LeaseStore, PartitionId, TaskStore};
use partition_ownership::PartitionOwnership;

/// What every partition tree needs from the node.
#[derive(Clone)]
pub struct PartitionDeps {
    /// This node's id (recorded as the owner when a tree claims its partition).
    pub node_id: Arc<str>,
    /// Where the schedule and task status live.
    pub store: Arc<dyn TaskStore>,
    /// Where running-task leases live.
    pub leases: Arc<dyn LeaseStore>,
    /// The time source.
    pub clock: Arc<dyn Clock>,
    /// Runs the user's executor.
    pub pool: ExecutionPool,
    /// Scheduling settings.
    pub settings: Arc<SchedulingSettings>,
    /// The in-flight gauge of each partition.
    pub in_flight: InFlightGauges,
    /// The node's metrics.
    pub metrics: Arc<Metrics>,
    /// Where completion events go, when enabled.
    pub events: Option<EventPublisher>,
}

/// What a task's lifecycle consults in its tree: the ownership fence, the running-task lease,
/// and the tree's stop signal.
#[derive(Clone)]
pub struct ExecutionLinks {
    /// Answers whether the tree still owns the partition.
    pub ownership: Addr<PartitionOwnership>,
    /// The tree's running-task lease.
    pub lease: TreeLease,
    /// Set once the tree stops (revoke, rebuild, fence): tasks that have not called the
    /// executor yet give up, and running calls see it in their context.
    pub stop: tokio::sync::watch::Receiver<Option<StopReason>>,
}

/// The tasks of one partition held in memory: waiting in the PartitionScheduler, or queued or
/// running in the PartitionExecutor. The scheduler adds, the executor removes; the
/// ThroughputController and TaskPersistence read it to keep memory under `max_in_flight_tasks`.
#[derive(Debug, Default)]
pub struct InFlight {
    current: AtomicUsize,
    peak: AtomicUsize,
    held: AtomicUsize,
    loaded: std::sync::atomic::AtomicBool,
}

impl InFlight {
    /// Counts `n` more tasks in memory.
    pub fn add(&self, n: usize) {
        let now = self.current.fetch_add(n, Ordering::SeqCst) + n;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }

    /// Counts `n` tasks fewer.
    pub fn remove(&self, n: usize) {
        let _ = self
            .current
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                Some(c.saturating_sub(n))
            });
    }

    /// Tasks in memory now.
    pub fn current(&self) -> usize {
        self.current.load(Ordering::SeqCst)
    }

    /// The most tasks in memory at once since the partition started.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    /// Records how many of them the PartitionScheduler holds (not yet due).
    pub fn set_held(&self, n: usize) {
        self.held.store(n, Ordering::SeqCst);
    }

    /// How many the PartitionScheduler holds; the rest are queued or running.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Records that the tree's first load of its schedule completed.
    pub fn mark_loaded(&self) {
        self.loaded.store(true, Ordering::SeqCst);
    }

    /// Whether the tree's first load of its schedule completed.
    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::SeqCst)
    }
}

/// The in-flight gauges of the partitions this node runs (a partition's tree gets a fresh one
/// each time it starts).
#[derive(Debug, Default, Clone)]
pub struct InFlightGauges(Arc<Mutex<HashMap<PartitionId, Arc<InFlight>>>>);

impl InFlightGauges {
    /// A fresh gauge for a partition tree that is starting.
    pub fn start(&self, partition: PartitionId) -> Arc<InFlight> {
        let gauge = Arc::new(InFlight::default());
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(partition, Arc::clone(&gauge));
        gauge
    }

    /// The gauge of a partition's current (or last) tree.
    pub fn get(&self, partition: PartitionId) -> Option<Arc<InFlight>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&partition)
            .cloned()
    }

    /// Forgets the gauge of a partition no longer run here.
    pub fn forget(&self, partition: PartitionId) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&partition);
    }

    /// Whether the node is ready: it owns partitions and each one's tree has loaded its
    /// schedule once.
    pub fn ready(&self, owned: &[PartitionId]) -> bool {
        !owned.is_empty()
            && owned
                .iter()
                .all(|p| self.get(*p).is_some_and(|g| g.is_loaded()))
    }

    /// Every partition's gauge, by partition.
    pub fn all(&self) -> Vec<(PartitionId, Arc<InFlight>)> {
        let mut all: Vec<_> = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(p, g)| (*p, Arc::clone(g)))
            .collect();
        all.sort_by_key(|(p, _)| *p);
        all
    }
}

/// Stops the receiving actor at once (partition actors reference each other, so they do not stop
/// by themselves when their supervisor goes).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopActor;
