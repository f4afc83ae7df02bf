//! Jobs (`jobs`, `group_progress`): a job is a coordinator task's buckets, sub-tasks spread over
//! every partition ([`crate::TaskContext::start_job`]). The job's record names its group (the
//! coordinator's sub-tasks); its progress is the group's outcomes (buckets done, failed and why)
//! and the items each bucket reported so far.
//!
//! The whole table in one place: its rows and [`JobStore`], its statements and implementation on
//! Cassandra (`cassandra`), its in-memory twin (`memory`).

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

/// [`JobStore`] on Cassandra: `jobs`, one small partition (`shard` 0) with a row per job, and
/// `group_progress`, a partition per group with a row per bucket that reported. Both kept for the
/// status retention (the tables' `default_time_to_live`), like the groups they describe.
#[cfg(feature = "node")]
mod cassandra {
    use scylla::statement::prepared::PreparedStatement;
    use std::sync::Arc;

    use chrono::{DateTime, Utc};
    use futures::future::BoxFuture;
    use futures::FutureExt;
    use scheduler_client::TaskKey;

    use crate::store::cassandra::rows::rows_of;
    use crate::store::cassandra::{CassandraStore, Preparing, TableStatements};
    use crate::store::{BucketProgress, GroupKey, JobRecord, JobStore, StoreError, StoreResult};

    /// The one partition every job is in.
    const SHARD: i32 = 0;

    type JobRow = (
        String,
        String,
        DateTime<Utc>,
        String,
        String,
        String,
        i32,
        DateTime<Utc>,
    );

    fn corrupt(reason: String) -> StoreError {
        StoreError::Corrupt {
            what: "job",
            reason,
        }
    }

    fn job_from_row(row: JobRow) -> StoreResult<JobRecord> {
        let (id, ordering_id, scheduled_time, uniqueness_key, task_type, group_id, buckets, at) =
            row;
        Ok(JobRecord {
            buckets: u32::try_from(buckets)
                .map_err(|_| corrupt(format!("{id}: {buckets} buckets")))?,
            id,
            coordinator: TaskKey {
                scheduled_time,
                ordering_id,
                uniqueness_key,
            },
            group: GroupKey {
                task_type,
                id: group_id,
            },
            started_at: at,
        })
    }

    /// A count as stored (`int` / `bigint`); one past its range is refused, not wrapped.
    fn stored<T: TryFrom<U>, U: Copy + std::fmt::Display>(
        n: U,
        what: &'static str,
    ) -> StoreResult<T> {
        T::try_from(n)
            .map_err(|_| StoreError::refused(what, format!("{n} is beyond the column's range")))
    }

    impl JobStore for CassandraStore {
        fn record_job(&self, job: JobRecord) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let buckets: i32 = stored(job.buckets, "job write")?;
                let values = (
                    SHARD,
                    job.id,
                    job.coordinator.ordering_id,
                    job.coordinator.scheduled_time,
                    job.coordinator.uniqueness_key,
                    job.group.task_type,
                    job.group.id,
                    buckets,
                    job.started_at,
                );
                inner
                    .run(
                        &inner.statements::<JobStatements>().await?.insert_job,
                        values,
                        "job write",
                    )
                    .await?;
                Ok(())
            }
            .boxed()
        }

        fn jobs(&self) -> BoxFuture<'static, StoreResult<Vec<JobRecord>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let result = inner
                    .run(
                        &inner.statements::<JobStatements>().await?.select_jobs,
                        (SHARD,),
                        "jobs read",
                    )
                    .await?;
                let mut jobs = rows_of::<JobRow>(result, "job")?
                    .into_iter()
                    .map(job_from_row)
                    .collect::<StoreResult<Vec<_>>>()?;
                jobs.sort_by_key(|job| std::cmp::Reverse(job.started_at));
                Ok(jobs)
            }
            .boxed()
        }

        fn job(&self, id: String) -> BoxFuture<'static, StoreResult<Option<JobRecord>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let result = inner
                    .run(
                        &inner.statements::<JobStatements>().await?.select_job,
                        (SHARD, id),
                        "jobs read",
                    )
                    .await?;
                rows_of::<JobRow>(result, "job")?
                    .into_iter()
                    .next()
                    .map(job_from_row)
                    .transpose()
            }
            .boxed()
        }

        fn record_progress(
            &self,
            group: GroupKey,
            progress: BucketProgress,
        ) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let member: i32 = stored(progress.bucket, "progress write")?;
                let items: i64 = stored(progress.items, "progress write")?;
                let values = (group.task_type, group.id, member, items, progress.at);
                inner
                    .run(
                        &inner.statements::<JobStatements>().await?.insert_progress,
                        values,
                        "progress write",
                    )
                    .await?;
                Ok(())
            }
            .boxed()
        }

        fn progress(
            &self,
            group: GroupKey,
        ) -> BoxFuture<'static, StoreResult<Vec<BucketProgress>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let result = inner
                    .run(
                        &inner.statements::<JobStatements>().await?.select_progress,
                        (group.task_type, group.id),
                        "progress read",
                    )
                    .await?;
                progress_rows(result)
            }
            .boxed()
        }

        fn progress_in(
            &self,
            group: GroupKey,
            first: u32,
            last: u32,
        ) -> BoxFuture<'static, StoreResult<Vec<BucketProgress>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                // Numbers past the column's range hold no bucket.
                let first = i32::try_from(first).unwrap_or(i32::MAX);
                let last = i32::try_from(last).unwrap_or(i32::MAX);
                let result = inner
                    .run(
                        &inner
                            .statements::<JobStatements>()
                            .await?
                            .select_progress_in,
                        (group.task_type, group.id, first, last),
                        "progress read",
                    )
                    .await?;
                progress_rows(result)
            }
            .boxed()
        }
    }

    /// The buckets' progress in `result`'s rows.
    fn progress_rows(
        result: scylla::response::query_result::QueryResult,
    ) -> StoreResult<Vec<BucketProgress>> {
        rows_of::<(i32, i64, DateTime<Utc>)>(result, "bucket progress")?
            .into_iter()
            .map(|(member, items, at)| {
                Ok(BucketProgress {
                    bucket: u32::try_from(member)
                        .map_err(|_| corrupt(format!("bucket {member}")))?,
                    items: u64::try_from(items).map_err(|_| corrupt(format!("{items} items")))?,
                    at,
                })
            })
            .collect()
    }

    /// The statements of `jobs` and `group_progress`.
    struct JobStatements {
        insert_job: PreparedStatement,
        select_jobs: PreparedStatement,
        select_job: PreparedStatement,
        insert_progress: PreparedStatement,
        select_progress: PreparedStatement,
        /// A range of buckets' progress: at most `last - first + 1` rows.
        select_progress_in: PreparedStatement,
    }

    const JOB_COLUMNS: &str = "job_id, ordering_id, scheduled_time, uniqueness_key, task_type, \
                               group_id, buckets, started_at";

    impl TableStatements for JobStatements {
        async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
            let ks = on.keyspace;
            let prepare = |cql: String| on.prepare("prepare job statement", cql);
            Ok(JobStatements {
                insert_job: prepare(format!(
                    "INSERT INTO {ks}.jobs (shard, {JOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ))
                .await?,
                select_jobs: prepare(format!(
                    "SELECT {JOB_COLUMNS} FROM {ks}.jobs WHERE shard = ?"
                ))
                .await?,
                select_job: prepare(format!(
                    "SELECT {JOB_COLUMNS} FROM {ks}.jobs WHERE shard = ? AND job_id = ?"
                ))
                .await?,
                insert_progress: prepare(format!(
                    "INSERT INTO {ks}.group_progress (task_type, group_id, member, items, updated_at) \
                     VALUES (?, ?, ?, ?, ?)"
                ))
                .await?,
                select_progress: prepare(format!(
                    "SELECT member, items, updated_at FROM {ks}.group_progress \
                     WHERE task_type = ? AND group_id = ?"
                ))
                .await?,
                select_progress_in: prepare(format!(
                    "SELECT member, items, updated_at FROM {ks}.group_progress \
                     WHERE task_type = ? AND group_id = ? AND member >= ? AND member <= ?"
                ))
                .await?,
            })
        }
    }
}

/// `jobs` in memory, for unit tests, the simulation and the testing kit.
#[cfg(any(test, feature = "testing"))]
mod memory {
    use super::*;
    use crate::store::memory::MemoryStore;

    /// The tables' rows: jobs by id, buckets' progress by group and bucket.
    #[derive(Default)]
    struct Rows {
        jobs: std::collections::BTreeMap<String, JobRecord>,
        progress: std::collections::BTreeMap<(GroupKey, u32), BucketProgress>,
    }

    impl JobStore for MemoryStore {
        fn record_job(&self, job: JobRecord) -> BoxFuture<'static, StoreResult<()>> {
            self.run("job write", move |s| {
                s.table::<Rows>().jobs.insert(job.id.clone(), job);
            })
        }

        fn jobs(&self) -> BoxFuture<'static, StoreResult<Vec<JobRecord>>> {
            self.run("jobs read", |s| {
                let mut jobs: Vec<JobRecord> = s.table::<Rows>().jobs.values().cloned().collect();
                jobs.sort_by_key(|job| std::cmp::Reverse(job.started_at));
                jobs
            })
        }

        fn job(&self, id: String) -> BoxFuture<'static, StoreResult<Option<JobRecord>>> {
            self.run("jobs read", move |s| {
                s.table::<Rows>().jobs.get(&id).cloned()
            })
        }

        fn record_progress(
            &self,
            group: GroupKey,
            progress: BucketProgress,
        ) -> BoxFuture<'static, StoreResult<()>> {
            self.run("progress write", move |s| {
                s.table::<Rows>()
                    .progress
                    .insert((group, progress.bucket), progress);
            })
        }

        fn progress(
            &self,
            group: GroupKey,
        ) -> BoxFuture<'static, StoreResult<Vec<BucketProgress>>> {
            self.run("progress read", move |s| {
                let progress: Vec<BucketProgress> = (s.table::<Rows>().progress.iter())
                    .filter(|((g, _), _)| *g == group)
                    .map(|(_, p)| p.clone())
                    .collect();
                s.group_rows_read += progress.len();
                progress
            })
        }

        fn progress_in(
            &self,
            group: GroupKey,
            first: u32,
            last: u32,
        ) -> BoxFuture<'static, StoreResult<Vec<BucketProgress>>> {
            self.run("progress read", move |s| {
                let progress: Vec<BucketProgress> = (s.table::<Rows>().progress)
                    .range((group.clone(), first)..=(group, last))
                    .map(|(_, p)| p.clone())
                    .collect();
                s.group_rows_read += progress.len();
                progress
            })
        }
    }
}
