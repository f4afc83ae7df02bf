//! Task identities (`task_identities`): for each identity (orderingId, uniquenessKey) scheduled
//! with a conflict mode, its current task, whole, so that conflict modes, reschedules and
//! cancels by identity resolve against it, and a task that is no longer its identity's current
//! one never runs. Kept for the task's wait plus the status retention (`IfAbsent` looks at
//! finished tasks within it).

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::{Task, TaskIdentity};

use super::ttl::Retention;
use super::{PartitionId, StoreResult};

/// An identity's current task.
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityRecord {
    /// The task (with its conflict mode); the one of its identity allowed to run. Its enqueue
    /// offset is the record's `offset`: the record that made a task current is that task's (the
    /// store keeps the offset once, see [`IdentityRecord::read_back`]).
    pub task: Task,
    /// The time of the first task of the current debounce chain.
    pub first_time: DateTime<Utc>,
    /// The partition offset of the last record applied to the identity: a record at or
    /// before it was applied already (a batch polled again).
    pub offset: i64,
}

impl IdentityRecord {
    /// A record as a store reads it back: it keeps the record's offset, not the task's enqueue
    /// offset, which is the same for a pending task (the record that made it current), so the
    /// task reads back enqueued at it. A record of no offset (-1: a task read from no
    /// partition) leaves the task without one.
    pub(crate) fn read_back(task: Task, first_time: DateTime<Utc>, offset: i64) -> IdentityRecord {
        let task = Task {
            enqueue_offset: (offset >= 0).then_some(offset),
            ..task
        };
        IdentityRecord {
            task,
            first_time,
            offset,
        }
    }
}

/// How long an identity record is kept: the status retention after its task's time, or after
/// `now` when that is later; a zero retention keeps it until it is deleted, as statuses are
/// (`IfAbsent` must see a task that ran however long ago).
pub(crate) fn identity_retention(
    task_time: DateTime<Utc>,
    now: DateTime<Utc>,
    status_ttl: std::time::Duration,
) -> Retention {
    Retention::after(task_time.max(now), status_ttl)
}

/// The current task of each identity.
pub trait IdentityStore: Send + Sync + 'static {
    /// The identity's record, if any.
    fn identity(
        &self,
        partition: PartitionId,
        identity: TaskIdentity,
    ) -> BoxFuture<'static, StoreResult<Option<IdentityRecord>>>;

    /// Records an identity's current task.
    fn record_identity(
        &self,
        partition: PartitionId,
        record: IdentityRecord,
    ) -> BoxFuture<'static, StoreResult<()>>;
}
