//! The schedule on Cassandra: `scheduled_tasks` (one wide row per partition and hour), its
//! index `schedule_buckets`, and the deferred records and legacy retrying list beside it.
//!
//! Over 500 lines: sixteen statements and the methods of [`ScheduleStore`] (persisting with the
//! bucket index, loading across buckets, reads by key, forgetting whole buckets, the deferred
//! records), which share the statements and row decoding.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::{Task, TaskKey};
use scylla::statement::prepared::PreparedStatement;

use super::inserts::{self, Row, TaskInserts};
use super::{
    hour_bucket, last_of_each_key, reads_by_bucket, DeferredCancel, DeferredIdentityRecord,
    ReadCursor, RefusedTask, ScheduleStore, WriteStamp, KEYS_PER_READ,
};
use crate::store::cassandra::rows::{
    first_row_of, key_values, limit_value, rows_of, task_from_row, TaskRow,
};
use crate::store::cassandra::statements::read_by_key;
use crate::store::cassandra::{CassandraStore, Inner, Preparing, TableStatements, Writes};
use crate::store::{PartitionId, StoreResult};

/// The statements of the schedule and its neighbours.
struct ScheduleStatements {
    insert_task: TaskInserts,
    insert_bucket: PreparedStatement,
    select_buckets: PreparedStatement,
    forget_bucket_rows: PreparedStatement,
    forget_bucket: PreparedStatement,
    select_retrying: PreparedStatement,
    insert_deferred_cancel: PreparedStatement,
    delete_deferred_cancel: PreparedStatement,
    select_deferred_cancels: PreparedStatement,
    insert_deferred_identity: PreparedStatement,
    delete_deferred_identity: PreparedStatement,
    select_deferred_identity: PreparedStatement,
    load_from: PreparedStatement,
    load_after: PreparedStatement,
    delete_task: PreparedStatement,
    select_task: PreparedStatement,
    select_tasks: PreparedStatement,
}

impl TableStatements for ScheduleStatements {
    async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
        let ks = on.keyspace;
        let prepare = |cql: String| on.prepare("prepare schedule statement", cql);
        let key_columns = "scheduled_time, ordering_id, uniqueness_key";
        let task_columns =
            "task_data, enqueue_offset, task_type, priority, on_conflict, max_wait_ms, grouping";
        let key_match =
            "partition_id = ? AND hour_bucket = ? AND scheduled_time = ? AND ordering_id = ? \
             AND uniqueness_key = ?";
        let by_key = read_by_key(
            "partition_id = ? AND hour_bucket = ? AND scheduled_time = ? AND ordering_id = ?",
            "uniqueness_key",
            key_columns,
        );
        Ok(ScheduleStatements {
            insert_task: TaskInserts::prepare(on).await?,
            insert_bucket: prepare(format!(
                "INSERT INTO {ks}.schedule_buckets (partition_id, hour_bucket) VALUES (?, ?)"
            ))
            .await?,
            select_buckets: prepare(format!(
                "SELECT hour_bucket FROM {ks}.schedule_buckets WHERE partition_id = ? \
                 AND hour_bucket >= ? AND hour_bucket < ? LIMIT ?"
            ))
            .await?,
            // A partition-level delete: one tombstone for the whole hour, whatever it held.
            forget_bucket_rows: prepare(format!(
                "DELETE FROM {ks}.scheduled_tasks USING TIMESTAMP ? \
                 WHERE partition_id = ? AND hour_bucket = ?"
            ))
            .await?,
            forget_bucket: prepare(format!(
                "DELETE FROM {ks}.schedule_buckets USING TIMESTAMP ? \
                 WHERE partition_id = ? AND hour_bucket = ?"
            ))
            .await?,
            select_retrying: prepare(format!(
                "SELECT {key_columns} FROM {ks}.retrying_tasks WHERE partition_id = ?"
            ))
            .await?,
            insert_deferred_cancel: prepare(format!(
                "INSERT INTO {ks}.deferred_cancels (partition_id, {key_columns}, cancelled_at) \
                 VALUES (?, ?, ?, ?, ?)"
            ))
            .await?,
            delete_deferred_cancel: prepare(format!(
                "DELETE FROM {ks}.deferred_cancels WHERE partition_id = ? \
                 AND scheduled_time = ? AND ordering_id = ? AND uniqueness_key = ?"
            ))
            .await?,
            select_deferred_cancels: prepare(format!(
                "SELECT {key_columns}, cancelled_at FROM {ks}.deferred_cancels \
                 WHERE partition_id = ?"
            ))
            .await?,
            insert_deferred_identity: prepare(format!(
                "INSERT INTO {ks}.deferred_identity_records (partition_id, ordering_id, \
                 record_offset, record, trace_parent) VALUES (?, ?, ?, ?, ?)"
            ))
            .await?,
            delete_deferred_identity: prepare(format!(
                "DELETE FROM {ks}.deferred_identity_records WHERE partition_id = ? \
                 AND ordering_id = ? AND record_offset = ?"
            ))
            .await?,
            select_deferred_identity: prepare(format!(
                "SELECT ordering_id, record_offset, record, trace_parent \
                 FROM {ks}.deferred_identity_records WHERE partition_id = ?"
            ))
            .await?,
            load_from: prepare(format!(
                "SELECT {key_columns}, {task_columns} FROM {ks}.scheduled_tasks \
                 WHERE partition_id = ? AND hour_bucket = ? AND (scheduled_time) >= (?) \
                 AND (scheduled_time) < (?) LIMIT ?"
            ))
            .await?,
            load_after: prepare(format!(
                "SELECT {key_columns}, {task_columns} FROM {ks}.scheduled_tasks \
                 WHERE partition_id = ? AND hour_bucket = ? AND ({key_columns}) > (?, ?, ?) \
                 AND (scheduled_time) < (?) LIMIT ?"
            ))
            .await?,
            delete_task: prepare(format!(
                "DELETE FROM {ks}.scheduled_tasks WHERE {key_match}"
            ))
            .await?,
            select_task: prepare(format!(
                "SELECT uniqueness_key, {task_columns} FROM {ks}.scheduled_tasks WHERE {by_key}"
            ))
            .await?,
            // Only the keys named: a read of their rows, not a slice (Cassandra 2.1 and later
            // take a multi-column IN on the clustering columns).
            select_tasks: prepare(format!(
                "SELECT {key_columns}, {task_columns} FROM {ks}.scheduled_tasks \
                 WHERE partition_id = ? AND hour_bucket = ? AND ({key_columns}) IN ?"
            ))
            .await?,
        })
    }
}

/// Adds the delete of a task's row to `writes`.
pub(in crate::store) async fn add_removal(
    inner: &Inner,
    writes: &mut Writes,
    partition: PartitionId,
    key: &TaskKey,
) -> StoreResult<()> {
    let statements = inner.statements::<ScheduleStatements>().await?;
    writes.add(&statements.delete_task, key_values(partition, key));
    Ok(())
}

impl ScheduleStore for CassandraStore {
    fn persist(
        &self,
        partition: PartitionId,
        tasks: Vec<Task>,
    ) -> BoxFuture<'static, StoreResult<Vec<RefusedTask>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            // Each bucket is indexed before its first task is written, so a load that sees the
            // task finds its bucket (one write per bucket of the batch, usually one or two).
            let buckets: std::collections::BTreeSet<_> = tasks
                .iter()
                .map(|t| hour_bucket(t.scheduled_time))
                .collect();
            futures::future::try_join_all(buckets.into_iter().map(|bucket| {
                let inner = &inner;
                async move {
                    let values = (partition, bucket);
                    inner
                        .run(
                            &inner
                                .statements::<ScheduleStatements>()
                                .await?
                                .insert_bucket,
                            values,
                            "bucket index write",
                        )
                        .await
                }
            }))
            .await?;
            // Concurrent inserts of one key land in any order: write only the last.
            let rows = last_of_each_key(tasks).into_iter();
            let rows = rows.map(|task| Row::of(partition, task)).collect();
            let statements = inner.statements::<ScheduleStatements>().await?;
            inserts::write(&inner, &statements.insert_task, rows).await
        }
        .boxed()
    }

    fn load(
        &self,
        partition: PartitionId,
        cursor: ReadCursor,
        until: DateTime<Utc>,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<Task>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let mut tasks = Vec::new();
            let mut cursor = cursor;
            let mut buckets = IndexedBuckets::new(partition, hour_bucket(cursor.time()), until);
            while tasks.len() < limit {
                let Some(bucket) = buckets.next(&inner).await? else {
                    break;
                };
                if bucket > hour_bucket(cursor.time()) {
                    cursor = ReadCursor::From(bucket);
                }
                let remaining = limit_value(limit - tasks.len());
                let statements = inner.statements::<ScheduleStatements>().await?;
                let result = match &cursor {
                    ReadCursor::From(from) => {
                        let values = (partition, bucket, *from, until, remaining);
                        inner
                            .run(&statements.load_from, values, "schedule load")
                            .await
                    }
                    ReadCursor::After(key) => {
                        let values = (
                            partition,
                            bucket,
                            key.scheduled_time,
                            &key.ordering_id,
                            &key.uniqueness_key,
                            until,
                            remaining,
                        );
                        inner
                            .run(&statements.load_after, values, "schedule load")
                            .await
                    }
                }?;
                for row in rows_of::<TaskRow>(result, "schedule")? {
                    tasks.extend(task_from_row(partition, row));
                }
            }
            Ok(tasks)
        }
        .boxed()
    }

    fn remove_scheduled(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            inner
                .run(
                    &inner.statements::<ScheduleStatements>().await?.delete_task,
                    key_values(partition, &key),
                    "schedule delete",
                )
                .await
                .map(|_| ())
        }
        .boxed()
    }

    fn scheduled_task(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<Task>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let result = inner
                .run(
                    &inner.statements::<ScheduleStatements>().await?.select_task,
                    key_values(partition, &key),
                    "task read",
                )
                .await?;
            type Row = (
                String,
                String,
                Option<i64>,
                Option<String>,
                Option<i32>,
                Option<String>,
                Option<i64>,
                Option<String>,
            );
            // The read runs down from the key: a row of another key is a neighbour.
            let row = first_row_of::<Row>(result, "schedule")?;
            let row = row.filter(|row| row.0 == key.uniqueness_key);
            Ok(row.and_then(
                |(_, data, offset, task_type, priority, on_conflict, wait, grouping)| {
                    task_from_row(
                        partition,
                        (
                            key.scheduled_time,
                            key.ordering_id,
                            key.uniqueness_key,
                            data,
                            offset,
                            task_type,
                            priority,
                            on_conflict,
                            wait,
                            grouping,
                        ),
                    )
                },
            ))
        }
        .boxed()
    }

    fn scheduled_tasks(
        &self,
        partition: PartitionId,
        keys: Vec<TaskKey>,
    ) -> BoxFuture<'static, StoreResult<Vec<Task>>> {
        use futures::{StreamExt, TryStreamExt};
        let inner = Arc::clone(&self.inner);
        async move {
            let statements = inner.statements::<ScheduleStatements>().await?;
            let (inner, statement) = (&inner, &statements.select_tasks);
            futures::stream::iter(reads_by_bucket(keys, KEYS_PER_READ))
                .map(|(bucket, keys)| async move {
                    let named: Vec<(DateTime<Utc>, String, String)> = (keys.into_iter())
                        .map(|k| (k.scheduled_time, k.ordering_id, k.uniqueness_key))
                        .collect();
                    let values = (partition, bucket, named);
                    let result = inner.run(statement, values, "task batch read").await?;
                    rows_of::<TaskRow>(result, "schedule")
                })
                .buffer_unordered(crate::store::WRITE_CONCURRENCY)
                .map_ok(|rows| futures::stream::iter(rows.into_iter().map(Ok)))
                .try_flatten()
                .try_filter_map(|row| async move { Ok(task_from_row(partition, row)) })
                .try_collect()
                .await
        }
        .boxed()
    }

    fn legacy_retrying(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<TaskKey>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let statements = inner.statements::<ScheduleStatements>().await?;
            let statement = &statements.select_retrying;
            let rows: Vec<(DateTime<Utc>, String, String)> = inner
                .run_paged(statement, (partition,), "retrying read", "retrying")
                .await?;
            Ok(rows
                .into_iter()
                .map(|(scheduled_time, ordering_id, uniqueness_key)| TaskKey {
                    scheduled_time,
                    ordering_id,
                    uniqueness_key,
                })
                .collect())
        }
        .boxed()
    }

    fn defer_cancel(
        &self,
        partition: PartitionId,
        key: TaskKey,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let values = (
                partition,
                key.scheduled_time,
                &key.ordering_id,
                &key.uniqueness_key,
                at,
            );
            let statements = inner.statements::<ScheduleStatements>().await?;
            let statement = &statements.insert_deferred_cancel;
            inner
                .run(statement, values, "deferred cancel write")
                .await?;
            Ok(())
        }
        .boxed()
    }

    fn forget_deferred_cancel(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let TaskKey {
                scheduled_time,
                ordering_id,
                uniqueness_key,
            } = key;
            let values = (partition, scheduled_time, ordering_id, uniqueness_key);
            let statements = inner.statements::<ScheduleStatements>().await?;
            let delete = &statements.delete_deferred_cancel;
            let operation = "deferred cancel delete";
            inner.run(delete, values, operation).await.map(|_| ())
        }
        .boxed()
    }

    fn deferred_cancels(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<DeferredCancel>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            type Row = (DateTime<Utc>, String, String, DateTime<Utc>);
            let statements = inner.statements::<ScheduleStatements>().await?;
            let statement = &statements.select_deferred_cancels;
            let rows: Vec<Row> = inner
                .run_paged(
                    statement,
                    (partition,),
                    "deferred cancels read",
                    "deferred cancel",
                )
                .await?;
            Ok((rows.into_iter())
                .map(|(scheduled_time, ordering_id, uniqueness_key, at)| {
                    let key = TaskKey {
                        scheduled_time,
                        ordering_id,
                        uniqueness_key,
                    };
                    (key, at)
                })
                .collect())
        }
        .boxed()
    }

    fn defer_identity_record(
        &self,
        partition: PartitionId,
        record: DeferredIdentityRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let values = (
                partition,
                &record.ordering_id,
                record.offset,
                &record.record,
                &record.trace_parent,
            );
            let statements = inner.statements::<ScheduleStatements>().await?;
            let statement = &statements.insert_deferred_identity;
            inner
                .run(statement, values, "deferred identity record write")
                .await?;
            Ok(())
        }
        .boxed()
    }

    fn forget_deferred_identity_record(
        &self,
        partition: PartitionId,
        ordering_id: String,
        offset: i64,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let statements = inner.statements::<ScheduleStatements>().await?;
            let statement = &statements.delete_deferred_identity;
            inner
                .run(
                    statement,
                    (partition, &ordering_id, offset),
                    "deferred identity record delete",
                )
                .await?;
            Ok(())
        }
        .boxed()
    }

    fn deferred_identity_records(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<DeferredIdentityRecord>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            type Row = (String, i64, String, Option<String>);
            let statements = inner.statements::<ScheduleStatements>().await?;
            let statement = &statements.select_deferred_identity;
            let rows: Vec<Row> = inner
                .run_paged(
                    statement,
                    (partition,),
                    "deferred identity records read",
                    "deferred identity record",
                )
                .await?;
            Ok((rows.into_iter())
                .map(
                    |(ordering_id, offset, record, trace_parent)| DeferredIdentityRecord {
                        ordering_id,
                        offset,
                        record,
                        trace_parent,
                    },
                )
                .collect())
        }
        .boxed()
    }

    fn write_stamp(&self) -> WriteStamp {
        WriteStamp(Utc::now().timestamp_micros())
    }

    fn forget_buckets(
        &self,
        partition: PartitionId,
        before: DateTime<Utc>,
        stamp: WriteStamp,
    ) -> BoxFuture<'static, StoreResult<usize>> {
        let inner = Arc::clone(&self.inner);
        async move {
            // Buckets that end at or before `before`.
            let until = hour_bucket(before) - TimeDelta::hours(1) + TimeDelta::milliseconds(1);
            let mut buckets = IndexedBuckets::new(partition, super::schedule_start(), until);
            let mut forgotten = 0;
            while let Some(bucket) = buckets.next(&inner).await? {
                // The rows first: a bucket whose rows are gone but not its index row is only
                // read once more; the other way round would hide live rows from loading.
                let values = (stamp.0, partition, bucket);
                let statements = inner.statements::<ScheduleStatements>().await?;
                inner
                    .run(&statements.forget_bucket_rows, values, "bucket delete")
                    .await?;
                inner
                    .run(&statements.forget_bucket, values, "bucket delete")
                    .await?;
                forgotten += 1;
            }
            Ok(forgotten)
        }
        .boxed()
    }
}

/// Index rows read per query while loading.
const BUCKET_PAGE: usize = 100;

/// The indexed hour buckets of a partition from `from` (inclusive) to `until` (exclusive), read
/// from `schedule_buckets` a page at a time.
struct IndexedBuckets {
    partition: PartitionId,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
    page: std::collections::VecDeque<DateTime<Utc>>,
    exhausted: bool,
}

impl IndexedBuckets {
    fn new(partition: PartitionId, from: DateTime<Utc>, until: DateTime<Utc>) -> Self {
        IndexedBuckets {
            partition,
            from,
            until,
            page: Default::default(),
            exhausted: false,
        }
    }

    async fn next(&mut self, inner: &Inner) -> StoreResult<Option<DateTime<Utc>>> {
        if self.page.is_empty() && !self.exhausted && self.from < self.until {
            let values = (
                self.partition,
                self.from,
                self.until,
                limit_value(BUCKET_PAGE),
            );
            let result = inner
                .run(
                    &inner
                        .statements::<ScheduleStatements>()
                        .await?
                        .select_buckets,
                    values,
                    "bucket index read",
                )
                .await?;
            self.page = rows_of::<(DateTime<Utc>,)>(result, "bucket index")?
                .into_iter()
                .map(|(bucket,)| bucket)
                .collect();
            self.exhausted = self.page.len() < BUCKET_PAGE;
            if let Some(last) = self.page.back() {
                self.from = *last + TimeDelta::hours(1);
            }
        }
        Ok(self.page.pop_front())
    }
}
