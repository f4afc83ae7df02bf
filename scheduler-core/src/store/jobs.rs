//! Jobs (`jobs`, `group_progress`): a job is a coordinator task's buckets, sub-tasks spread over
//! every partition ([`crate::TaskContext::start_job`]). The job's record names its group (the
//! coordinator's sub-tasks); its progress is the group's outcomes (buckets done, failed and why)
//! and the items each bucket reported so far.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::TaskKey;

use super::{GroupKey, StoreResult};

/// A job, as recorded when its coordinator started it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// The job's id, as its coordinator named it.
    pub id: String,
    /// The coordinator task.
    pub coordinator: TaskKey,
    /// The group of its buckets (joined by the coordinator's handler).
    pub group: GroupKey,
    /// How many buckets it has.
    pub buckets: u32,
    /// When it was started.
    pub started_at: DateTime<Utc>,
}

/// What a bucket reported of its progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketProgress {
    /// The bucket's number, from 1.
    pub bucket: u32,
    /// Items it processed so far.
    pub items: u64,
    /// When it last reported.
    pub at: DateTime<Utc>,
}

/// Jobs and their buckets' progress.
pub trait JobStore: Send + Sync + 'static {
    /// Records a job (again: overwritten).
    fn record_job(&self, job: JobRecord) -> BoxFuture<'static, StoreResult<()>>;

    /// Every job recorded (within the status retention), newest first.
    fn jobs(&self) -> BoxFuture<'static, StoreResult<Vec<JobRecord>>>;

    /// The job with `id`.
    fn job(&self, id: String) -> BoxFuture<'static, StoreResult<Option<JobRecord>>>;

    /// Records a bucket's progress (the last report wins).
    fn record_progress(
        &self,
        group: GroupKey,
        progress: BucketProgress,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// The progress every bucket of `group` reported, by number.
    fn progress(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Vec<BucketProgress>>>;

    /// The progress the buckets numbered `first` to `last` reported: at most
    /// `last - first + 1` rows.
    fn progress_in(
        &self,
        group: GroupKey,
        first: u32,
        last: u32,
    ) -> BoxFuture<'static, StoreResult<Vec<BucketProgress>>>;
}
