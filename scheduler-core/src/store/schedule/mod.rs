//! The schedule (`scheduled_tasks`, with its index of hour buckets `schedule_buckets`): tasks
//! waiting for their time, one wide row per partition and hour; and the records a tree keeps
//! for the next one (`deferred_cancels`, `deferred_identity_records`, and the legacy
//! `retrying_tasks`).
//!
//! The whole table in one place: its rows and [`ScheduleStore`] here, its statements and
//! implementation on Cassandra in `cassandra.rs`, its in-memory twin in `memory.rs`.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use futures::future::BoxFuture;
use scheduler_client::{Task, TaskKey};

use super::{PartitionId, StoreResult};

#[cfg(feature = "node")]
pub(in crate::store) mod cassandra;
#[cfg(feature = "node")]
mod inserts;
#[cfg(any(test, feature = "testing"))]
pub(in crate::store) mod memory;

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

/// The hour bucket of the wide row that holds a task due at `time`.
pub fn hour_bucket(time: DateTime<Utc>) -> DateTime<Utc> {
    time.duration_trunc(TimeDelta::hours(1)).unwrap_or(time)
}

/// The most keys one read naming its rows carries (a multi-column `IN` on a table laid out like
/// the schedule: [`ScheduleStore::scheduled_tasks`], `StatusStore::with_status`).
pub const KEYS_PER_READ: usize = 100;

/// `keys` in the reads that name them: by hour bucket (the table's partition), at most
/// `per_read` each.
pub(in crate::store) fn reads_by_bucket(
    keys: Vec<TaskKey>,
    per_read: usize,
) -> Vec<(DateTime<Utc>, Vec<TaskKey>)> {
    let mut by_bucket: std::collections::BTreeMap<DateTime<Utc>, Vec<TaskKey>> =
        std::collections::BTreeMap::new();
    for key in keys {
        let bucket = hour_bucket(key.scheduled_time);
        by_bucket.entry(bucket).or_default().push(key);
    }
    by_bucket
        .into_iter()
        .flat_map(|(bucket, keys)| {
            (keys.chunks(per_read.max(1)))
                .map(|chunk| (bucket, chunk.to_vec()))
                .collect::<Vec<_>>()
        })
        .collect()
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
    /// The read runs down from the key over its prefix (same time and orderingId), and
    /// Cassandra 2.1 steps over every tombstone there: for a task among its orderingId's ties,
    /// read many at once with [`ScheduleStore::scheduled_tasks`].
    fn scheduled_task(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<Task>>>;

    /// Of `keys`, the tasks in the schedule, in no particular order: one request per hour
    /// bucket and [`KEYS_PER_READ`] keys, reading only their rows (so stepping over no
    /// tombstone but theirs). A task it returns may have had its row deleted (Cassandra 2.1.0
    /// may answer a read naming a row's key with the row deleted after a flush: design.md,
    /// "Reads by key"): the status check before its call skips it then.
    fn scheduled_tasks(
        &self,
        partition: PartitionId,
        keys: Vec<TaskKey>,
    ) -> BoxFuture<'static, StoreResult<Vec<Task>>>;

    /// The partition's tasks recorded as retrying (`retrying_tasks`) by nodes of releases
    /// before schema version 8, which kept there the tasks their mark passed. Read only when the
    /// partition's mark was last written by such a node
    /// ([`LowWater::behind`](crate::store::LowWater::behind) is `None`).
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
