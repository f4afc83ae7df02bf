//! [`JobStore`] on Cassandra: `jobs`, one small partition (`shard` 0) with a row per job, and
//! `group_progress`, a partition per group with a row per bucket that reported. Both kept for the
//! status retention (the tables' `default_time_to_live`), like the groups they describe.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::TaskKey;

use super::rows::rows_of;
use super::CassandraStore;
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
    let (id, ordering_id, scheduled_time, uniqueness_key, task_type, group_id, buckets, at) = row;
    Ok(JobRecord {
        buckets: u32::try_from(buckets).map_err(|_| corrupt(format!("{id}: {buckets} buckets")))?,
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
fn stored<T: TryFrom<U>, U: Copy + std::fmt::Display>(n: U, what: &'static str) -> StoreResult<T> {
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
                .run(&inner.statements.jobs.insert_job, values, "job write")
                .await?;
            Ok(())
        }
        .boxed()
    }

    fn jobs(&self) -> BoxFuture<'static, StoreResult<Vec<JobRecord>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let result = inner
                .run(&inner.statements.jobs.select_jobs, (SHARD,), "jobs read")
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
                .run(&inner.statements.jobs.select_job, (SHARD, id), "jobs read")
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
                    &inner.statements.jobs.insert_progress,
                    values,
                    "progress write",
                )
                .await?;
            Ok(())
        }
        .boxed()
    }

    fn progress(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Vec<BucketProgress>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let result = inner
                .run(
                    &inner.statements.jobs.select_progress,
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
                    &inner.statements.jobs.select_progress_in,
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
                bucket: u32::try_from(member).map_err(|_| corrupt(format!("bucket {member}")))?,
                items: u64::try_from(items).map_err(|_| corrupt(format!("{items} items")))?,
                at,
            })
        })
        .collect()
}
