//! Task identities (`task_identities`): for each identity (orderingId, uniquenessKey) scheduled
//! with a conflict mode, its current task, whole, so that conflict modes, reschedules and
//! cancels by identity resolve against it, and a task that is no longer its identity's current
//! one never runs. Kept for the task's wait plus the status retention (`IfAbsent` looks at
//! finished tasks within it).

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::{Task, TaskIdentity};

use super::{PartitionId, StoreResult};

/// An identity's current task.
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityRecord {
    /// The task (with its conflict mode); the one of its identity allowed to run.
    pub task: Task,
    /// The time of the first task of the current debounce chain.
    pub first_time: DateTime<Utc>,
    /// The partition offset of the last record applied to the identity: a record at or
    /// before it was applied already (a batch polled again).
    pub offset: i64,
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
