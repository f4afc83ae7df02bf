//! [`TaskStore`] and [`LeaseStore`] on Cassandra (or ScyllaDB): one method per operation, each
//! running its prepared statement through [`Inner::run`]. The schema (created and migrated),
//! the statements and the decoding of rows are in the submodules.
//!
//! The CQL stays within what Cassandra 2.1 and modern Cassandra/ScyllaDB both accept: no
//! clustering-range deletes, no unset values, and clustering slices written as tuples on both
//! bounds (`(a, b, c) > (?, ?, ?) AND (a) < (?)`), since 2.1 refuses to mix tuple and single-column
//! relations.
//!
//! Over 500 lines: the schedule's, status', attempts', ownership's and leases' implementations,
//! which wait to move to a file per table as the suspensions, recurring schedules, jobs, identities
//! and dead letters did.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use scheduler_client::wire::encode_grouping;
use scheduler_client::{RunOrder, Task, TaskKey};
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::response::query_result::QueryResult;
use scylla::serialize::row::SerializeRow;
use scylla::statement::prepared::PreparedStatement;

use super::{
    hour_bucket, last_of_each_key, AttemptOutcome, AttemptRecord, AttemptStore, DeferralList,
    DeferredCancel, DeferredIdentityRecord, LeaseRecord, LeaseStore, ListBehind, LowWater,
    OwnershipStore, PartitionId, PartitionOwner, ReadCursor, RefusedTask, ScheduleStore,
    StatusRecord, StatusStore, StoreError, StoreResult, TaskStatus, WriteStamp,
};
use crate::settings::CassandraSettings;

mod deferred;
mod levels;
pub(in crate::store) mod rows;
mod schema;
pub(in crate::store) mod statements;
pub use levels::StoreLevels;
use rows::{
    applied, epoch_value, first_row_of, key_values, limit_value, query_error, rows_of,
    task_from_row, TaskRow,
};
pub use schema::{Migration, META_KEYSPACE, SCHEMA_VERSION};
use statements::Statements;

/// Who holds the migration lock: this process, and a random part so two stores of one process
/// differ.
fn migration_holder() -> String {
    format!("pid {} #{:08x}", std::process::id(), fastrand::u32(..))
}

/// Concurrent writes while persisting one batch.
pub const WRITE_CONCURRENCY: usize = 64;

/// Cassandra-backed store. Cheap to clone; clones share the session and statements.
#[derive(Clone)]
pub struct CassandraStore {
    pub(in crate::store) inner: Arc<Inner>,
}

/// A table's prepared statements (in the table's own module), prepared once per session, when
/// the table is first used.
pub(in crate::store) trait TableStatements: Send + Sync + Sized + 'static {
    /// Prepares them for the tables of `keyspace`.
    fn prepare(
        session: &Session,
        keyspace: &str,
    ) -> impl std::future::Future<Output = StoreResult<Self>> + Send;
}

pub(in crate::store) struct Inner {
    session: Session,
    keyspace: String,
    statements: Statements,
    /// Tables' statements prepared so far, by type ([`TableStatements`]).
    prepared: std::sync::Mutex<
        std::collections::HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>,
    >,
    /// How long statuses are kept: identities are kept as long after their task's time.
    pub(in crate::store) status_ttl: std::time::Duration,
    /// Statements run so far, by operation.
    counts: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

impl CassandraStore {
    /// The consistency levels and request timeout the driver runs this store's statements
    /// with, read back from the driver.
    pub fn levels(&self) -> StoreLevels {
        let statements = &self.inner.statements;
        StoreLevels::read(
            &self.inner.session,
            &statements.claim_next,
            &statements.select_epoch,
        )
    }

    /// How many statements this store has run, by operation (e.g. "task insert"): what a task
    /// costs in Cassandra, counted rather than assumed.
    pub fn statements_run(&self) -> Vec<(&'static str, u64)> {
        let counts = self
            .inner
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.iter().map(|(op, n)| (*op, *n)).collect()
    }
}

impl Inner {
    /// The prepared statements of a table ([`TableStatements`]), prepared on first use.
    pub(in crate::store) async fn statements<T: TableStatements>(&self) -> StoreResult<Arc<T>> {
        let lock = || {
            self.prepared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let found = lock().get(&std::any::TypeId::of::<T>()).cloned();
        let prepared = match found {
            Some(found) => found,
            None => {
                // (Two first uses at once may both prepare: the statements are the same.)
                let prepared = Arc::new(T::prepare(&self.session, &self.keyspace).await?);
                let mut cached = lock();
                let entry = cached.entry(std::any::TypeId::of::<T>());
                Arc::clone(entry.or_insert(prepared))
            }
        };
        prepared.downcast::<T>().map_err(|_| {
            let wrong = std::io::Error::other("a table's statements cached under another type");
            StoreError::query("statement preparation", wrong)
        })
    }

    /// Runs `statement` with `values`; a failure names `operation`.
    pub(in crate::store) async fn run(
        &self,
        statement: &PreparedStatement,
        values: impl SerializeRow,
        operation: &'static str,
    ) -> StoreResult<QueryResult> {
        self.count(operation);
        self.session
            .execute_unpaged(statement, values)
            .await
            .map_err(query_error(operation))
    }

    /// Counts a statement of `operation` (see [`CassandraStore::statements_run`]).
    pub(in crate::store) fn count(&self, operation: &'static str) {
        *self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(operation)
            .or_default() += 1;
    }

    /// Runs `batch` with `values` (one row of values per statement); a failure names
    /// `operation`. Counted once in [`CassandraStore::statements_run`], whatever its statements.
    pub(in crate::store) async fn run_batch(
        &self,
        batch: &scylla::statement::batch::Batch,
        values: impl scylla::serialize::batch::BatchValues,
        operation: &'static str,
    ) -> StoreResult<QueryResult> {
        self.count(operation);
        self.session
            .batch(batch, values)
            .await
            .map_err(query_error(operation))
    }

    /// Runs `statement` with `values` a page at a time (the statement's page size), every row
    /// decoded as `R`: a read that may return more rows than one response should carry. A
    /// failure names `operation`; a row that does not decode is a corrupt `what` row. Counted
    /// once in [`CassandraStore::statements_run`], whatever its pages.
    pub(in crate::store) async fn run_paged<R>(
        &self,
        statement: &PreparedStatement,
        values: impl SerializeRow,
        operation: &'static str,
        what: &'static str,
    ) -> StoreResult<Vec<R>>
    where
        R: for<'frame, 'metadata> scylla::deserialize::row::DeserializeRow<'frame, 'metadata>,
    {
        use scylla::errors::NextRowError;
        self.count(operation);
        let corrupt = |reason: String| StoreError::Corrupt { what, reason };
        let pager = self
            .session
            .execute_iter(statement.clone(), values)
            .await
            .map_err(|e| StoreError::query(operation, e))?;
        let mut rows = pager
            .rows_stream::<R>()
            .map_err(|e| corrupt(e.to_string()))?;
        let mut decoded = Vec::new();
        loop {
            match rows.try_next().await {
                Ok(Some(row)) => decoded.push(row),
                Ok(None) => return Ok(decoded),
                Err(e @ NextRowError::RowDeserializationError(_)) => {
                    return Err(corrupt(e.to_string()))
                }
                Err(e) => return Err(StoreError::query(operation, e)),
            }
        }
    }
}

/// Claims lost to a concurrent claimer in a row before giving up (each retry re-reads the epoch).
const CLAIM_ATTEMPTS: u32 = 10;

impl CassandraStore {
    /// Connects, checks that the keyspace is at this release's schema version (migrating it
    /// first with `auto_migrate`), sets the retention and prepares the statements.
    pub async fn connect(settings: &CassandraSettings) -> StoreResult<CassandraStore> {
        let session = Self::session(settings).await?;
        schema::check_or_migrate(&session, settings, &migration_holder()).await?;
        let statements = Statements::prepare(
            &session,
            &settings.keyspace,
            settings.ownership_serial_consistency,
        )
        .await?;
        let inner = Inner {
            session,
            keyspace: settings.keyspace.clone(),
            statements,
            prepared: Default::default(),
            status_ttl: settings.status_ttl,
            counts: Default::default(),
        };
        Ok(CassandraStore {
            inner: Arc::new(inner),
        })
    }

    /// Brings the keyspace to this release's schema version (`scheduler migrate`): creates the
    /// keyspace and tables, applies what an older keyspace lacks and records the version, under
    /// a lock so that concurrent migrations wait for each other. A no-op on a current keyspace.
    pub async fn migrate(settings: &CassandraSettings) -> StoreResult<Migration> {
        let session = Self::session(settings).await?;
        schema::migrate(&session, settings, &migration_holder()).await
    }

    async fn session(settings: &CassandraSettings) -> StoreResult<Session> {
        let mut builder = SessionBuilder::new()
            .known_nodes(&settings.contact_points)
            .fetch_schema_metadata(settings.fetch_schema_metadata)
            // Full schema metadata is only meaningful when schema metadata is fetched at all.
            .fetch_full_schema_metadata(settings.fetch_schema_metadata)
            .connection_timeout(std::time::Duration::from_secs(5))
            .default_execution_profile_handle(
                ExecutionProfile::builder()
                    .consistency(levels::consistency(settings.consistency))
                    .serial_consistency(Some(levels::serial(settings.serial_consistency)))
                    .request_timeout(Some(settings.request_timeout))
                    .build()
                    .into_handle(),
            );
        if let (Some(user), Some(password)) = (&settings.username, &settings.password) {
            builder = builder.user(user, password);
        }
        builder.build().await.map_err(|e| StoreError::Connect {
            contact_points: settings.contact_points.join(","),
            source: std::sync::Arc::new(e),
        })
    }
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
                            &inner.statements.insert_bucket,
                            values,
                            "bucket index write",
                        )
                        .await
                }
            }))
            .await?;
            // Concurrent inserts of one key land in any order: write only the last.
            futures::stream::iter(last_of_each_key(tasks))
                .map(|task| {
                    let inner = &inner;
                    async move {
                        let key = task.key();
                        let grouping = encode_grouping(&task);
                        let data = serde_json::Value::Object(task.task_data).to_string();
                        let (p, b, t, o, u, d, e, ty, pr) = (
                            partition,
                            hour_bucket(task.scheduled_time),
                            task.scheduled_time,
                            task.ordering_id,
                            task.uniqueness_key,
                            data,
                            task.enqueue_offset,
                            task.task_type,
                            task.priority,
                        );
                        let inserts = &inner.statements.insert_task;
                        let op = "task insert";
                        // Only the columns the task has a value for: no null (tombstone) per task.
                        let written = match (task.on_conflict, grouping) {
                            (None, None) => {
                                let values = (p, b, t, o, u, d, e, ty, pr);
                                inner.run(&inserts.plain, values, op).await
                            }
                            (None, Some(g)) => {
                                let values = (p, b, t, o, u, d, e, ty, pr, g);
                                inner.run(&inserts.grouped, values, op).await
                            }
                            (Some(mode), grouping) => {
                                let wait = mode
                                    .max_wait()
                                    .map(|w| i64::try_from(w.as_millis()).unwrap_or(i64::MAX));
                                let mode = mode.as_str();
                                match grouping {
                                    None => {
                                        let values = (p, b, t, o, u, d, e, ty, pr, mode, wait);
                                        inner.run(&inserts.identity, values, op).await
                                    }
                                    Some(g) => {
                                        let values = (p, b, t, o, u, d, e, ty, pr, mode, wait, g);
                                        inner.run(&inserts.grouped_identity, values, op).await
                                    }
                                }
                            }
                        };
                        match written {
                            Ok(_) => Ok(None),
                            Err(StoreError::Refused { reason, .. }) => {
                                Ok(Some(RefusedTask { key, reason }))
                            }
                            Err(e) => Err(e),
                        }
                    }
                })
                .buffer_unordered(WRITE_CONCURRENCY)
                .try_filter_map(|refused| futures::future::ready(Ok(refused)))
                .try_collect()
                .await
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
                let statements = &inner.statements;
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
                    &inner.statements.delete_task,
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
                    &inner.statements.select_task,
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

    fn legacy_retrying(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<TaskKey>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let statement = &inner.statements.select_retrying;
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
            let statement = &inner.statements.insert_deferred_cancel;
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
        let delete: fn(&Statements) -> &PreparedStatement = |s| &s.delete_deferred_cancel;
        self.run_on_key(partition, key, delete, "deferred cancel delete")
    }

    fn deferred_cancels(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<DeferredCancel>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            type Row = (DateTime<Utc>, String, String, DateTime<Utc>);
            let statement = &inner.statements.select_deferred_cancels;
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
            let statement = &inner.statements.insert_deferred_identity;
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
            let statement = &inner.statements.delete_deferred_identity;
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
            let statement = &inner.statements.select_deferred_identity;
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
                let statements = &inner.statements;
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
                    &inner.statements.select_buckets,
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

impl StatusStore for CassandraStore {
    fn status(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let result = inner
                .run(
                    &inner.statements.select_status,
                    key_values(partition, &key),
                    "status read",
                )
                .await?;
            let corrupt = |reason: String| StoreError::Corrupt {
                what: "status",
                reason,
            };
            type StatusRow = (
                String,
                String,
                i32,
                DateTime<Utc>,
                Option<String>,
                Option<String>,
            );
            // The read runs down from the key: a row of another key is a neighbour.
            let row = first_row_of::<StatusRow>(result, "status")?;
            let row = row.filter(|row| row.0 == key.uniqueness_key);
            row.map(|(_, status, attempts, updated_at, last_error, result)| {
                Ok(StatusRecord {
                    status: TaskStatus::parse(&status)
                        .ok_or_else(|| corrupt(format!("unknown status {status:?}")))?,
                    attempts: u32::try_from(attempts).unwrap_or(0),
                    updated_at,
                    last_error,
                    // Null in rows written before schema version 4, and when the handler set none.
                    result: result
                        .map(|text| serde_json::from_str(&text))
                        .transpose()
                        .map_err(|e| corrupt(format!("result: {e}")))?,
                })
            })
            .transpose()
        }
        .boxed()
    }

    fn record_status(
        &self,
        partition: PartitionId,
        key: TaskKey,
        status: StatusRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let (p, bucket, time, ordering_id, uniqueness_key) = key_values(partition, &key);
            inner
                .run(
                    &inner.statements.insert_status,
                    (
                        p,
                        bucket,
                        time,
                        ordering_id,
                        uniqueness_key,
                        status.status.as_str(),
                        i32::try_from(status.attempts).unwrap_or(i32::MAX),
                        status.updated_at,
                        status.last_error,
                        status.result.map(|value| value.to_string()),
                    ),
                    "status write",
                )
                .await
                .map(|_| ())
        }
        .boxed()
    }

    fn clear_status(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            inner
                .run(
                    &inner.statements.delete_status,
                    key_values(partition, &key),
                    "status delete",
                )
                .await?;
            Ok(())
        }
        .boxed()
    }

    fn cancel(
        &self,
        partition: PartitionId,
        key: TaskKey,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>> {
        let store = self.clone();
        async move {
            let (p, bucket, time, ordering_id, uniqueness_key) = key_values(partition, &key);
            let result = store
                .inner
                .run(
                    &store.inner.statements.cancel_status,
                    (p, bucket, time, ordering_id, uniqueness_key, at),
                    "cancel",
                )
                .await?;
            if applied(result, "status")? {
                Ok(None)
            } else {
                store.status(partition, key).await
            }
        }
        .boxed()
    }
}

impl AttemptStore for CassandraStore {
    fn attempts(
        &self,
        key: TaskKey,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<AttemptRecord>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let result = inner
                .run(
                    &inner.statements.select_attempts,
                    (
                        key.scheduled_time,
                        key.ordering_id,
                        key.uniqueness_key,
                        limit_value(limit),
                    ),
                    "attempts read",
                )
                .await?;
            let corrupt = |reason: String| StoreError::Corrupt {
                what: "attempts",
                reason,
            };
            type AttemptRow = (i32, DateTime<Utc>, DateTime<Utc>, String, Option<String>);
            let mut attempts = Vec::new();
            for (attempt, started_at, finished_at, outcome, error) in
                rows_of::<AttemptRow>(result, "attempts")?
            {
                attempts.push(AttemptRecord {
                    attempt: u32::try_from(attempt).unwrap_or(0),
                    started_at,
                    finished_at,
                    outcome: AttemptOutcome::parse(&outcome)
                        .ok_or_else(|| corrupt(format!("unknown outcome {outcome:?}")))?,
                    error,
                });
            }
            Ok(attempts)
        }
        .boxed()
    }

    fn record_attempt(
        &self,
        partition: PartitionId,
        key: TaskKey,
        attempt: AttemptRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            inner
                .run(
                    &inner.statements.insert_attempt,
                    (
                        key.scheduled_time,
                        key.ordering_id,
                        key.uniqueness_key,
                        i32::try_from(attempt.attempt).unwrap_or(i32::MAX),
                        partition,
                        attempt.started_at,
                        attempt.finished_at,
                        attempt.outcome.as_str(),
                        attempt.error,
                    ),
                    "attempt write",
                )
                .await
                .map(|_| ())
        }
        .boxed()
    }
}

impl OwnershipStore for CassandraStore {
    fn claim_partition(
        &self,
        partition: PartitionId,
        owner: String,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<u64>> {
        let store = self.clone();
        async move {
            for _ in 0..CLAIM_ATTEMPTS {
                let current = store.read_epoch(partition, true).await?;
                let (inner, claim) = (&store.inner, "partition claim");
                let result = if current == 0 {
                    let values = (partition, &owner, at);
                    inner
                        .run(&inner.statements.claim_first, values, claim)
                        .await?
                } else {
                    let (next, current) = (epoch_value(current + 1), epoch_value(current));
                    let values = (next, &owner, at, partition, current);
                    inner
                        .run(&inner.statements.claim_next, values, claim)
                        .await?
                };
                if applied(result, "partition owner")? {
                    return Ok(current + 1);
                }
            }
            Err(StoreError::Contended {
                operation: "partition claim",
                attempts: CLAIM_ATTEMPTS,
            })
        }
        .boxed()
    }

    fn partition_epoch(&self, partition: PartitionId) -> BoxFuture<'static, StoreResult<u64>> {
        self.read_epoch(partition, false)
    }

    fn low_water(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Option<LowWater>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let statement = &inner.statements.select_low_water;
            let result = inner.run(statement, (partition,), "low-water read").await?;
            let row =
                first_row_of::<(Option<DateTime<Utc>>, Option<String>)>(result, "partition owner")?;
            let Some((Some(at), behind)) = row else {
                return Ok(None);
            };
            let Some(listed) = behind
                .as_deref()
                .map(|t| decode_behind(t, partition))
                .transpose()?
            else {
                let lists = Vec::new();
                return Ok(Some(LowWater {
                    at,
                    behind: None,
                    lists,
                }));
            };
            let (keys, lists) = listed;
            Ok(Some(LowWater {
                at,
                behind: Some(keys),
                lists,
            }))
        }
        .boxed()
    }

    fn set_low_water(
        &self,
        partition: PartitionId,
        epoch: u64,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<bool>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let values = (at, partition, epoch_value(epoch));
            let statement = &inner.statements.set_low_water;
            let result = inner.run(statement, values, "low-water write").await?;
            applied(result, "partition owner")
        }
        .boxed()
    }

    fn advance_low_water(
        &self,
        partition: PartitionId,
        epoch: u64,
        at: DateTime<Utc>,
        behind: Vec<TaskKey>,
        lists: Vec<ListBehind>,
    ) -> BoxFuture<'static, StoreResult<bool>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let listed = encode_behind(&behind, &lists)?;
            let values = (at, listed, partition, epoch_value(epoch));
            let statement = &inner.statements.advance_low_water;
            let result = inner.run(statement, values, "low-water write").await?;
            applied(result, "partition owner")
        }
        .boxed()
    }

    fn owners(&self) -> BoxFuture<'static, StoreResult<Vec<PartitionOwner>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            type Row = (
                PartitionId,
                Option<i64>,
                Option<String>,
                Option<DateTime<Utc>>,
            );
            let statement = &inner.statements.select_owners;
            let rows: Vec<Row> = inner
                .run_paged(statement, (), "owners read", "partition owner")
                .await?;
            let mut owners = (rows.into_iter())
                .map(|(partition, epoch, owner, claimed_at)| {
                    let epoch = epoch.unwrap_or(0);
                    Ok(PartitionOwner {
                        partition,
                        epoch: u64::try_from(epoch).map_err(|_| StoreError::Corrupt {
                            what: "partition owner",
                            reason: format!("negative epoch {epoch} of partition {partition}"),
                        })?,
                        owner,
                        claimed_at,
                    })
                })
                .collect::<StoreResult<Vec<_>>>()?;
            // Rows come in token order.
            owners.sort_by_key(|o| o.partition);
            Ok(owners)
        }
        .boxed()
    }
}

/// One entry of a low-water mark's list (`behind_mark`, a JSON list): a task, as
/// `[scheduled time in ms, orderingId, uniquenessKey]`, or a deferred-task list the mark passed,
/// as `[from's time in ms, orderingId, from's uniquenessKey, from's enqueue offset, tree]`. A
/// release that knows only tasks refuses a mark naming a list (its tree start fails and is
/// tried again) rather than lose the list's tasks.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum Listed {
    Task(i64, String, String),
    List(i64, String, String, i64, String),
}

/// The tasks and deferred-task lists behind a low-water mark, as stored.
fn encode_behind(keys: &[TaskKey], lists: &[ListBehind]) -> StoreResult<String> {
    let tasks = keys.iter().map(|k| {
        let millis = k.scheduled_time.timestamp_millis();
        Listed::Task(millis, k.ordering_id.clone(), k.uniqueness_key.clone())
    });
    let lists = lists.iter().map(|l| {
        let from = &l.from;
        Listed::List(
            from.scheduled_time.timestamp_millis(),
            l.list.ordering_id.clone(),
            from.uniqueness_key.clone(),
            from.enqueue_offset,
            l.list.tree.clone(),
        )
    });
    let listed: Vec<Listed> = tasks.chain(lists).collect();
    serde_json::to_string(&listed).map_err(|e| StoreError::query("low-water write", e))
}

fn decode_behind(
    text: &str,
    partition: PartitionId,
) -> StoreResult<(Vec<TaskKey>, Vec<ListBehind>)> {
    let corrupt = |reason: String| StoreError::Corrupt {
        what: "low-water mark",
        reason,
    };
    let time = |millis: i64| {
        DateTime::<Utc>::from_timestamp_millis(millis)
            .ok_or_else(|| corrupt(format!("time {millis} ms out of range")))
    };
    let listed: Vec<Listed> = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
    let (mut keys, mut lists) = (Vec::new(), Vec::new());
    for entry in listed {
        match entry {
            Listed::Task(millis, ordering_id, uniqueness_key) => keys.push(TaskKey {
                scheduled_time: time(millis)?,
                ordering_id,
                uniqueness_key,
            }),
            Listed::List(millis, ordering_id, uniqueness_key, enqueue_offset, tree) => {
                lists.push(ListBehind {
                    from: RunOrder {
                        scheduled_time: time(millis)?,
                        enqueue_offset,
                        uniqueness_key,
                    },
                    list: DeferralList {
                        partition,
                        tree,
                        ordering_id,
                    },
                })
            }
        }
    }
    Ok((keys, lists))
}

impl CassandraStore {
    /// Runs the statement `pick` chooses on the row of `key` in a table keyed by partition and
    /// task key (`deferred_cancels`).
    fn run_on_key(
        &self,
        partition: PartitionId,
        key: TaskKey,
        pick: fn(&Statements) -> &PreparedStatement,
        operation: &'static str,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let TaskKey {
                scheduled_time,
                ordering_id,
                uniqueness_key,
            } = key;
            let values = (partition, scheduled_time, ordering_id, uniqueness_key);
            let statement = pick(&inner.statements);
            inner.run(statement, values, operation).await.map(|_| ())
        }
        .boxed()
    }

    /// The partition's epoch, read serially (`serial`, for a claim) or at the session's
    /// consistency (for ownership checks).
    fn read_epoch(
        &self,
        partition: PartitionId,
        serial: bool,
    ) -> BoxFuture<'static, StoreResult<u64>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let statement = if serial {
                &inner.statements.select_epoch_serial
            } else {
                &inner.statements.select_epoch
            };
            let result = inner.run(statement, (partition,), "ownership read").await?;
            let epoch = first_row_of::<(Option<i64>,)>(result, "partition owner")?
                .and_then(|(epoch,)| epoch)
                .unwrap_or(0);
            u64::try_from(epoch).map_err(|_| StoreError::Corrupt {
                what: "partition owner",
                reason: format!("negative epoch {epoch}"),
            })
        }
        .boxed()
    }
}

impl LeaseStore for CassandraStore {
    fn write_lease(
        &self,
        partition: PartitionId,
        holder: String,
        lease: LeaseRecord,
        ttl: std::time::Duration,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let running = serde_json::to_string(&lease.running)
                .map_err(|e| StoreError::query("lease write", e))?;
            // Cassandra's TTL counts whole seconds: round up, never down to "no TTL".
            let ttl = i32::try_from(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0))
                .unwrap_or(i32::MAX)
                .max(1);
            inner
                .run(
                    &inner.statements.insert_lease,
                    (
                        partition,
                        holder,
                        lease.node,
                        epoch_value(lease.epoch),
                        running,
                        ttl,
                    ),
                    "lease write",
                )
                .await
                .map(|_| ())
        }
        .boxed()
    }

    fn delete_lease(
        &self,
        partition: PartitionId,
        holder: String,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            inner
                .run(
                    &inner.statements.delete_lease,
                    (partition, holder),
                    "lease delete",
                )
                .await
                .map(|_| ())
        }
        .boxed()
    }

    fn leases(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<(String, LeaseRecord)>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let result = inner
                .run(&inner.statements.select_leases, (partition,), "lease read")
                .await?;
            let rows =
                rows_of::<(String, Option<String>, Option<i64>, Option<String>)>(result, "lease")?;
            rows.into_iter()
                .map(|(holder, node, epoch, running)| {
                    let running = match running.as_deref() {
                        None | Some("") => Vec::new(),
                        Some(text) => {
                            serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
                                what: "lease",
                                reason: e.to_string(),
                            })?
                        }
                    };
                    let lease = LeaseRecord {
                        node: node.unwrap_or_default(),
                        epoch: u64::try_from(epoch.unwrap_or(0)).unwrap_or(0),
                        running,
                    };
                    Ok((holder, lease))
                })
                .collect()
        }
        .boxed()
    }
}
