//! Persistence of the schedule, task status and attempt history: the [`TaskStore`] trait, with
//! the Cassandra implementation used by nodes and an in-memory one for unit tests and the
//! testing kit (`testing` feature).
//!
//! Every method takes owned arguments and returns a `'static` future so actors can run it.
//!
//! Over 500 lines: the records and traits of the schedule, status, attempts, ownership and leases,
//! until each moves to a file of its own.

mod cassandra;
pub mod dead_letters;
pub mod deferred;
pub(crate) mod group_marks;
pub mod groups;
pub mod identities;
pub mod jobs;
// The unit tests' and the simulation's store, and the testing kit's (`crate::testing`), which
// uses only part of it.
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod memory;
pub(crate) mod pages;
pub mod recurring;
pub mod suspensions;
pub(crate) mod ttl;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use futures::future::BoxFuture;
use scheduler_client::{Task, TaskKey};

pub use dead_letters::{DeadLetter, DeadLetterFilter, DeadLetterStore, DeadReason};
pub use deferred::{DeferralList, DeferredStore, ListBehind};
pub use groups::{
    GroupHeader, GroupKey, GroupMark, GroupState, GroupStore, GroupTally, MemberOutcome,
    ParentRecord,
};
pub use identities::{IdentityRecord, IdentityStore};
pub use jobs::{BucketProgress, JobRecord, JobStore};
pub use recurring::{FireOutcome, FireRecord, RecurringStore, ScheduleRecord};
pub use suspensions::{Suspension, SuspensionStore, SuspensionTarget, Suspensions};

pub use cassandra::{
    CassandraStore, Migration, StoreLevels, META_KEYSPACE, SCHEMA_VERSION, WRITE_CONCURRENCY,
};

/// A Kafka partition number, which is also the schedule's partition.
pub type PartitionId = i32;

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// A store operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Connecting to the database failed.
    #[error("cannot connect to Cassandra at {contact_points}: {source}")]
    Connect {
        /// The contact points tried.
        contact_points: String,
        /// The driver's error.
        #[source]
        source: Cause,
    },
    /// A statement failed.
    #[error("Cassandra {operation} failed: {source}")]
    Query {
        /// What the engine was doing.
        operation: &'static str,
        /// The driver's error (or the encoder's, for a value that could not be written).
        #[source]
        source: Cause,
    },
    /// A write that must win a race (a partition's claim) lost it too many times in a row.
    #[error("Cassandra {operation} failed: lost {attempts} concurrent tries in a row")]
    Contended {
        /// What the engine was doing.
        operation: &'static str,
        /// The tries lost.
        attempts: u32,
    },
    /// The store did not answer in time.
    #[error("{operation} did not finish within {after:?}")]
    Timeout {
        /// What the engine was doing.
        operation: &'static str,
        /// The time allowed.
        after: std::time::Duration,
    },
    /// Cassandra refused the statement as invalid (e.g. a clustering key over its 64 KiB limit):
    /// retrying it cannot succeed.
    #[error("Cassandra refused the {operation}: {reason}")]
    Refused {
        /// What the engine was doing.
        operation: &'static str,
        /// Why: Cassandra's message, or the range a value is beyond.
        reason: String,
        /// The driver's error, when Cassandra refused it.
        #[source]
        source: Option<Cause>,
    },
    /// The keyspace's schema is older than this node's (or absent): it must be migrated first.
    #[error(
        "keyspace `{keyspace}` is at schema version {found}, this node needs {needs}: run \
         `scheduler migrate` with the node's settings (or set [cassandra] auto_migrate = true in \
         development)"
    )]
    SchemaBehind {
        /// The keyspace.
        keyspace: String,
        /// Its version (0: no schema).
        found: u32,
        /// This release's version.
        needs: u32,
    },
    /// The keyspace's schema is newer than this node's: the node must be upgraded.
    #[error(
        "keyspace `{keyspace}` is at schema version {found}, newer than this node's {needs}: \
         upgrade the node"
    )]
    SchemaAhead {
        /// The keyspace.
        keyspace: String,
        /// Its version.
        found: u32,
        /// This release's version.
        needs: u32,
    },
    /// A stored row could not be understood.
    #[error("corrupt {what} row: {reason}")]
    Corrupt {
        /// Which table.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// What made a store operation fail (the driver's error, kept whole; shared, as one failure
/// may answer several waiters).
pub type Cause = std::sync::Arc<dyn std::error::Error + Send + Sync>;

impl StoreError {
    /// A failed `operation`, caused by `cause`.
    pub fn query(
        operation: &'static str,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Query {
            operation,
            source: std::sync::Arc::new(cause),
        }
    }

    /// A value the store would refuse (`reason`), refused before it is sent.
    pub fn refused(operation: &'static str, reason: impl Into<String>) -> Self {
        StoreError::Refused {
            operation,
            reason: reason.into(),
            source: None,
        }
    }
}

/// Final state of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    /// The handler succeeded.
    Completed,
    /// Every retry failed (it is a dead letter).
    Failed,
    /// The handler found the task invalid (it is a dead letter).
    Dropped,
    /// Cancelled before it ran.
    Cancelled,
}

impl TaskStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Dropped => "dropped",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(text: &str) -> Option<TaskStatus> {
        match text {
            "completed" => Some(TaskStatus::Completed),
            "failed" => Some(TaskStatus::Failed),
            "dropped" => Some(TaskStatus::Dropped),
            "cancelled" => Some(TaskStatus::Cancelled),
            _ => None,
        }
    }
}

/// The recorded final state of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusRecord {
    /// The state.
    pub status: TaskStatus,
    /// Attempts made.
    pub attempts: u32,
    /// When the state was recorded.
    pub updated_at: DateTime<Utc>,
    /// The last attempt's error, for failed and dropped tasks.
    pub last_error: Option<String>,
    /// The small JSON result the handler set ([`crate::TaskContext::set_result`]), if any.
    pub result: Option<serde_json::Value>,
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The handler succeeded.
    Succeeded,
    /// The handler failed and asked for a retry.
    Failed,
    /// The handler found the task invalid: not retried.
    Invalid,
}

impl AttemptOutcome {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Invalid => "invalid",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(text: &str) -> Option<AttemptOutcome> {
        match text {
            "succeeded" => Some(AttemptOutcome::Succeeded),
            "failed" => Some(AttemptOutcome::Failed),
            // (The spelling before task types.)
            "invalid" | "gave_up" => Some(AttemptOutcome::Invalid),
            _ => None,
        }
    }
}

/// One execution attempt of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// When the handler was called.
    pub started_at: DateTime<Utc>,
    /// When it returned.
    pub finished_at: DateTime<Utc>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The handler's error message, if any.
    pub error: Option<String>,
}

/// Where a load of the schedule starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadCursor {
    /// At this time, inclusive: the first load after assignment.
    From(DateTime<Utc>),
    /// Just after this key: every key up to and including it has been read.
    After(TaskKey),
}

impl ReadCursor {
    /// The time the cursor is at.
    pub fn time(&self) -> DateTime<Utc> {
        match self {
            ReadCursor::From(t) => *t,
            ReadCursor::After(k) => k.scheduled_time,
        }
    }

    /// Whether a task with `key` lies at or before the cursor, that is, was already passed by
    /// loading (so it must be pushed to the scheduler rather than waited for).
    pub fn has_passed(&self, key: &TaskKey) -> bool {
        match self {
            ReadCursor::From(t) => key.scheduled_time < *t,
            ReadCursor::After(k) => key <= k,
        }
    }
}

/// A task the store refused to write (see [`ScheduleStore::persist`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedTask {
    /// The task.
    pub key: TaskKey,
    /// Why.
    pub reason: String,
}

/// `tasks` with only the last of each key, in the order of those last occurrences: what a
/// sequential write of all of them would leave.
pub fn last_of_each_key(tasks: Vec<Task>) -> Vec<Task> {
    let mut last = std::collections::HashMap::new();
    for (i, task) in tasks.iter().enumerate() {
        last.insert(task.key(), i);
    }
    tasks
        .into_iter()
        .enumerate()
        .filter(|(i, task)| last.get(&task.key()) == Some(i))
        .map(|(_, task)| task)
        .collect()
}

/// The running-task lease of one partition tree (its holder): the orderingIds whose calls it is
/// running now. A newer tree of the partition starts none of them while the lease is live.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    /// The node the tree runs on.
    pub node: String,
    /// The tree's ownership epoch (0: not claimed yet).
    pub epoch: u64,
    /// `(orderingId, task key)` of each call running, by orderingId.
    pub running: Vec<(String, String)>,
}

/// The running-task leases of partition trees (the `task_leases` table). A lease expires on
/// its own `ttl` after its last write: a dead or paused holder stops renewing it.
pub trait LeaseStore: Send + Sync + 'static {
    /// Writes (or renews) `holder`'s lease on `partition` for `ttl`.
    fn write_lease(
        &self,
        partition: PartitionId,
        holder: String,
        lease: LeaseRecord,
        ttl: std::time::Duration,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// Releases `holder`'s lease on `partition`.
    fn delete_lease(
        &self,
        partition: PartitionId,
        holder: String,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// The live leases on `partition`, by holder.
    fn leases(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<(String, LeaseRecord)>>>;
}

/// The hour bucket of the wide row that holds a task due at `time`.
pub fn hour_bucket(time: DateTime<Utc>) -> DateTime<Utc> {
    time.duration_trunc(TimeDelta::hours(1)).unwrap_or(time)
}

/// The earliest time a schedule can hold: where loading starts when a partition has no low-water
/// mark (the index of hour buckets makes it jump straight to the first bucket in use).
pub fn schedule_start() -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH - TimeDelta::days(365 * 100)
}

/// When a store was written to, for [`ScheduleStore::forget_buckets`]: a forget removes only
/// what was written before its stamp (Cassandra's `USING TIMESTAMP`, in microseconds), so a task
/// written into a forgotten bucket by a newer tree meanwhile survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WriteStamp(pub i64);

/// The schedule (`scheduled_tasks`): tasks waiting for their time, one wide row per partition
/// and hour, and the index of the hour buckets in use (`schedule_buckets`), so that loading
/// jumps from one bucket in use to the next instead of walking every hour.
pub trait ScheduleStore: Send + Sync + 'static {
    /// Writes tasks to the schedule of `partition`, overwriting tasks with the same key; of
    /// several tasks with one key in `tasks`, the last wins. Each task's hour bucket is indexed
    /// before the task is written. Tasks the database refuses as invalid (retrying cannot help)
    /// are not written and are returned with the reason.
    fn persist(
        &self,
        partition: PartitionId,
        tasks: Vec<Task>,
    ) -> BoxFuture<'static, StoreResult<Vec<RefusedTask>>>;

    /// Reads up to `limit` tasks of `partition` after `cursor` and before `until`, in key order,
    /// from the indexed hour buckets.
    fn load(
        &self,
        partition: PartitionId,
        cursor: ReadCursor,
        until: DateTime<Utc>,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<Task>>>;

    /// Deletes a task from the schedule (an optimisation after completion).
    fn remove_scheduled(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// The task with `key` if it is in the schedule (pending, or finished but not yet removed).
    fn scheduled_task(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<Task>>>;

    /// The partition's tasks recorded as retrying (`retrying_tasks`) by nodes of releases
    /// before schema version 8, which kept there the tasks their mark passed. Read only when the
    /// partition's mark was last written by such a node ([`LowWater::behind`] is `None`).
    fn legacy_retrying(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<TaskKey>>>;

    /// Records a cancellation polled at `at` that waits for an earlier tree's call of its
    /// orderingId to end (`deferred_cancels`; see `actors::cancels`): it is applied then, by
    /// this tree or, if this one stops first, by the next, which reads them as it starts.
    fn defer_cancel(
        &self,
        partition: PartitionId,
        key: TaskKey,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// Forgets a deferred cancellation once it is applied.
    fn forget_deferred_cancel(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// The partition's deferred cancellations, each with when it was polled.
    fn deferred_cancels(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<DeferredCancel>>>;

    /// Records an identity record (a task with a conflict mode, a reschedule or a cancel by
    /// identity) that waits for an earlier tree's call of its orderingId to end
    /// (`deferred_identity_records`; see `actors::task_persistence::identity_deferral`): it is
    /// applied then, by this tree or, if this one stops first, by the next, which reads them as
    /// it starts.
    fn defer_identity_record(
        &self,
        partition: PartitionId,
        record: DeferredIdentityRecord,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// Forgets a deferred identity record once it is applied.
    fn forget_deferred_identity_record(
        &self,
        partition: PartitionId,
        ordering_id: String,
        offset: i64,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// The partition's deferred identity records, by orderingId and offset.
    fn deferred_identity_records(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<DeferredIdentityRecord>>>;

    /// A stamp of now, for [`ScheduleStore::forget_buckets`].
    fn write_stamp(&self) -> WriteStamp;

    /// Removes the hour buckets of `partition` that end at or before `before` (every task in
    /// them is final): each bucket's rows with one partition-level delete, and its index row.
    /// Only what was written before `stamp` is removed. Returns how many buckets were removed.
    fn forget_buckets(
        &self,
        partition: PartitionId,
        before: DateTime<Utc>,
        stamp: WriteStamp,
    ) -> BoxFuture<'static, StoreResult<usize>>;
}

/// Final states (`task_status`): what became of each task.
pub trait StatusStore: Send + Sync + 'static {
    /// The recorded final state of a task, if any.
    fn status(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>>;

    /// Records a task's final state.
    fn record_status(
        &self,
        partition: PartitionId,
        key: TaskKey,
        status: StatusRecord,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// Forgets a task's status: a task scheduled again, by identity, under a key cancelled
    /// before.
    fn clear_status(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// Records that a task is cancelled, unless it already has a final status (a lightweight
    /// transaction, so a task that finished meanwhile keeps its status). Returns `None` when the
    /// cancellation was recorded, else the status the task already had.
    fn cancel(
        &self,
        partition: PartitionId,
        key: TaskKey,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>>;
}

/// Attempt history (`task_attempts`), newest first.
pub trait AttemptStore: Send + Sync + 'static {
    /// The last `limit` attempts of a task, newest first.
    fn attempts(
        &self,
        key: TaskKey,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<AttemptRecord>>>;

    /// Appends one attempt to a task's history.
    fn record_attempt(
        &self,
        partition: PartitionId,
        key: TaskKey,
        attempt: AttemptRecord,
    ) -> BoxFuture<'static, StoreResult<()>>;
}

/// Partition ownership (`partition_owners`): the epoch every claim raises, which fences older
/// trees.
pub trait OwnershipStore: Send + Sync + 'static {
    /// Claims `partition` for a new actor tree of node `owner`: raises the partition's
    /// ownership epoch by one with a lightweight transaction and returns the new epoch. Any tree
    /// holding an older epoch is fenced from then on.
    fn claim_partition(
        &self,
        partition: PartitionId,
        owner: String,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<u64>>;

    /// The partition's current ownership epoch (0: never claimed), read serially so that every
    /// completed claim is seen.
    fn partition_epoch(&self, partition: PartitionId) -> BoxFuture<'static, StoreResult<u64>>;

    /// The partition's low-water mark: every task of it due before this time has a final
    /// status, but the ones listed with it. `None` when none was recorded (loading starts at
    /// the first indexed bucket).
    fn low_water(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Option<LowWater>>>;

    /// Lowers the low-water mark to `at` (its list kept) if the partition's epoch is still
    /// `epoch` (a lightweight transaction, so a fenced tree cannot move it). Returns whether it
    /// was recorded.
    fn set_low_water(
        &self,
        partition: PartitionId,
        epoch: u64,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<bool>>;

    /// Moves the low-water mark to `at` with the tasks due before it that are not final
    /// (`behind`, and the deferred tasks in `lists`), in one lightweight transaction on
    /// `epoch`. Returns whether it was recorded.
    fn advance_low_water(
        &self,
        partition: PartitionId,
        epoch: u64,
        at: DateTime<Utc>,
        behind: Vec<TaskKey>,
        lists: Vec<ListBehind>,
    ) -> BoxFuture<'static, StoreResult<bool>>;

    /// Every partition ever claimed, in partition order: who claimed it last and when, and its
    /// epoch. The last claimer owns the partition until another claims it, also after it left
    /// (what operators see: the dashboard's and `GET /api/v1/partitions`' owners).
    fn owners(&self) -> BoxFuture<'static, StoreResult<Vec<PartitionOwner>>>;
}

/// A partition's low-water mark as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LowWater {
    /// Every task due before it is final, but the ones in `behind`.
    pub at: DateTime<Utc>,
    /// The tasks due before the mark that were not final when it was written (retrying,
    /// suspended, waiting for a handler or behind another task of their orderingId): a new
    /// tree reads each by its key. `None` for a mark written by a release before schema
    /// version 8, which kept such tasks in `retrying_tasks`.
    pub behind: Option<Vec<TaskKey>>,
    /// The deferred-task lists the mark passed: a new tree takes over their rows due before
    /// the mark.
    pub lists: Vec<ListBehind>,
}

/// A cancellation waiting for an earlier tree's calls ([`ScheduleStore::defer_cancel`]): the
/// task's key and when the cancel was polled.
pub type DeferredCancel = (TaskKey, DateTime<Utc>);

/// An identity record deferred while an earlier tree of its partition may still call a task of
/// its orderingId: the record as it was polled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeferredIdentityRecord {
    /// The orderingId it acts on.
    pub ordering_id: String,
    /// Its offset in the partition.
    pub offset: i64,
    /// Its value, as the wire format encodes it (`scheduler_client::wire`).
    pub record: String,
    /// The W3C `traceparent` it carried, if any.
    pub trace_parent: Option<String>,
}

/// A partition's row of `partition_owners`: its last claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOwner {
    /// The partition.
    pub partition: PartitionId,
    /// The epoch of the last claim.
    pub epoch: u64,
    /// The node that claimed it last (`None` only in a row no claim wrote).
    pub owner: Option<String>,
    /// When it was claimed.
    pub claimed_at: Option<DateTime<Utc>>,
}

/// Every table of the store but the leases ([`LeaseStore`]): what a node's partition trees are
/// given. A part of the tree that needs one table only holds that one (ownership checks, loads
/// and read-backs).
pub trait TaskStore:
    ScheduleStore
    + DeferredStore
    + StatusStore
    + AttemptStore
    + OwnershipStore
    + DeadLetterStore
    + IdentityStore
    + GroupStore
    + SuspensionStore
    + JobStore
    + RecurringStore
{
}

impl<T> TaskStore for T where
    T: ScheduleStore
        + DeferredStore
        + StatusStore
        + AttemptStore
        + OwnershipStore
        + DeadLetterStore
        + IdentityStore
        + GroupStore
        + SuspensionStore
        + JobStore
        + RecurringStore
{
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn cursor_passing_is_exclusive_of_from_and_inclusive_of_after() {
        let t = |s| Utc.timestamp_opt(s, 0).single().unwrap();
        let key = |s, o: &str| TaskKey {
            scheduled_time: t(s),
            ordering_id: o.into(),
            uniqueness_key: "u".into(),
        };
        let from = ReadCursor::From(t(10));
        assert!(from.has_passed(&key(9, "a")));
        assert!(!from.has_passed(&key(10, "a")));
        let after = ReadCursor::After(key(10, "m"));
        assert!(after.has_passed(&key(10, "a")));
        assert!(after.has_passed(&key(10, "m")));
        assert!(!after.has_passed(&key(10, "z")));
        assert_eq!(hour_bucket(t(7300)), t(7200));
    }
}
