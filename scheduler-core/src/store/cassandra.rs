//! [`TaskStore`] on Cassandra (or ScyllaDB): the schema and the statements.
//!
//! The CQL stays within what Cassandra 2.1 and modern Cassandra/ScyllaDB both accept: no
//! clustering-range deletes, no unset values, and clustering slices written as tuples on both
//! bounds (`(a, b, c) > (?, ?, ?) AND (a) < (?)`), since 2.1 refuses to mix tuple and single-column
//! relations.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use scheduler_client::{Task, TaskData, TaskKey};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::deserialize::row::DeserializeRow;
use scylla::response::query_result::QueryResult;
use scylla::statement::prepared::PreparedStatement;
use tracing::warn;

use super::{
    hour_bucket, last_of_each_key, AttemptOutcome, AttemptRecord, LeaseRecord, LeaseStore,
    PartitionId, ReadCursor, RefusedTask, StatusRecord, StoreError, StoreResult, TaskStatus,
    TaskStore,
};
use crate::settings::CassandraSettings;

/// Concurrent writes while persisting one batch.
pub const WRITE_CONCURRENCY: usize = 64;

/// Cassandra-backed store. Cheap to clone; clones share the session and statements.
#[derive(Clone)]
pub struct CassandraStore {
    inner: Arc<Inner>,
}

struct Inner {
    session: Session,
    insert_task: PreparedStatement,
    load_from: PreparedStatement,
    load_after: PreparedStatement,
    delete_task: PreparedStatement,
    select_status: PreparedStatement,
    select_task: PreparedStatement,
    select_attempts: PreparedStatement,
    insert_status: PreparedStatement,
    cancel_status: PreparedStatement,
    insert_attempt: PreparedStatement,
    select_epoch: PreparedStatement,
    select_epoch_serial: PreparedStatement,
    claim_first: PreparedStatement,
    claim_next: PreparedStatement,
    insert_lease: PreparedStatement,
    delete_lease: PreparedStatement,
    select_leases: PreparedStatement,
}

/// Claims lost to a concurrent claimer in a row before giving up (each retry re-reads the epoch).
const CLAIM_ATTEMPTS: u32 = 10;

fn query_error(
    operation: &'static str,
) -> impl FnOnce(scylla::errors::ExecutionError) -> StoreError {
    use scylla::errors::{DbError, ExecutionError, RequestAttemptError};
    move |e| match &e {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(DbError::Invalid, _)) => {
            StoreError::Refused {
                operation,
                reason: e.to_string(),
            }
        }
        _ => StoreError::Query {
            operation,
            reason: e.to_string(),
        },
    }
}

impl CassandraStore {
    /// Connects, creates the keyspace and tables if absent, and prepares the statements.
    pub async fn connect(settings: &CassandraSettings) -> StoreResult<CassandraStore> {
        let mut builder = SessionBuilder::new()
            .known_nodes(&settings.contact_points)
            .fetch_schema_metadata(settings.fetch_schema_metadata)
            // Full schema metadata is only meaningful when schema metadata is fetched at all.
            .fetch_full_schema_metadata(settings.fetch_schema_metadata)
            .connection_timeout(std::time::Duration::from_secs(5));
        if let (Some(user), Some(password)) = (&settings.username, &settings.password) {
            builder = builder.user(user, password);
        }
        let session = builder.build().await.map_err(|e| StoreError::Connect {
            contact_points: settings.contact_points.join(","),
            reason: e.to_string(),
        })?;
        let ks = &settings.keyspace;
        for ddl in schema(ks, &settings.replication) {
            create_if_absent(&session, ddl).await?;
        }
        // Added after the first release: keyspaces created before lack it.
        add_column_if_absent(&session, ks, "scheduled_tasks", "enqueue_offset", "bigint").await?;
        let prepare = |cql: String, operation: &'static str| {
            let session = &session;
            async move {
                session.prepare(cql).await.map_err(|e| StoreError::Query {
                    operation,
                    reason: e.to_string(),
                })
            }
        };
        let key_columns = "scheduled_time, ordering_id, uniqueness_key";
        let key_match =
            "partition_id = ? AND hour_bucket = ? AND scheduled_time = ? AND ordering_id = ? \
                         AND uniqueness_key = ?";
        let inner = Inner {
            insert_task: prepare(
                format!(
                    "INSERT INTO {ks}.scheduled_tasks (partition_id, hour_bucket, {key_columns}, task_data, \
                     enqueue_offset) VALUES (?, ?, ?, ?, ?, ?, ?)"
                ),
                "prepare insert",
            )
            .await?,
            load_from: prepare(
                format!(
                    "SELECT {key_columns}, task_data, enqueue_offset FROM {ks}.scheduled_tasks \
                     WHERE partition_id = ? AND hour_bucket = ? AND (scheduled_time) >= (?) \
                     AND (scheduled_time) < (?) LIMIT ?"
                ),
                "prepare load",
            )
            .await?,
            load_after: prepare(
                format!(
                    "SELECT {key_columns}, task_data, enqueue_offset FROM {ks}.scheduled_tasks \
                     WHERE partition_id = ? AND hour_bucket = ? AND ({key_columns}) > (?, ?, ?) \
                     AND (scheduled_time) < (?) LIMIT ?"
                ),
                "prepare load",
            )
            .await?,
            delete_task: prepare(
                format!("DELETE FROM {ks}.scheduled_tasks WHERE {key_match}"),
                "prepare delete",
            )
            .await?,
            select_status: prepare(
                format!("SELECT status, attempts, updated_at, last_error FROM {ks}.task_status WHERE {key_match}"),
                "prepare status read",
            )
            .await?,
            select_task: prepare(
                format!("SELECT task_data, enqueue_offset FROM {ks}.scheduled_tasks WHERE {key_match}"),
                "prepare task read",
            )
            .await?,
            select_attempts: prepare(
                format!(
                    "SELECT attempt, started_at, finished_at, outcome, error FROM {ks}.task_attempts \
                     WHERE scheduled_time = ? AND ordering_id = ? AND uniqueness_key = ? LIMIT ?"
                ),
                "prepare attempts read",
            )
            .await?,
            insert_status: prepare(
                format!(
                    "INSERT INTO {ks}.task_status (partition_id, hour_bucket, {key_columns}, status, attempts, \
                     updated_at, last_error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                "prepare status write",
            )
            .await?,
            cancel_status: prepare(
                format!(
                    "INSERT INTO {ks}.task_status (partition_id, hour_bucket, {key_columns}, status, attempts, \
                     updated_at) VALUES (?, ?, ?, ?, ?, 'cancelled', 0, ?) IF NOT EXISTS"
                ),
                "prepare cancel",
            )
            .await?,
            insert_attempt: prepare(
                format!(
                    "INSERT INTO {ks}.task_attempts ({key_columns}, attempt, partition_id, started_at, \
                     finished_at, outcome, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                "prepare attempt write",
            )
            .await?,
            // At the session's consistency (LOCAL_QUORUM): a claim whose lightweight transaction
            // completed was committed at that level, so a read that begins after it sees it. A
            // claim still in progress may be missed, which is safe: its tree starts nothing
            // before the claim completes, and reads the running-task leases only after (see
            // crate::lease). One round trip instead of a Paxos round on every ownership check.
            select_epoch: prepare(
                format!("SELECT epoch FROM {ks}.partition_owners WHERE partition_id = ?"),
                "prepare epoch read",
            )
            .await?,
            select_epoch_serial: {
                let mut statement = prepare(
                    format!("SELECT epoch FROM {ks}.partition_owners WHERE partition_id = ?"),
                    "prepare epoch read",
                )
                .await?;
                // Serial, for a claim: sees in-progress claims too, so the compare-and-set below
                // rarely loses.
                statement.set_consistency(scylla::statement::Consistency::Serial);
                statement
            },
            claim_first: prepare(
                format!(
                    "INSERT INTO {ks}.partition_owners (partition_id, epoch, owner, claimed_at) \
                     VALUES (?, 1, ?, ?) IF NOT EXISTS"
                ),
                "prepare partition claim",
            )
            .await?,
            claim_next: prepare(
                format!(
                    "UPDATE {ks}.partition_owners SET epoch = ?, owner = ?, claimed_at = ? \
                     WHERE partition_id = ? IF epoch = ?"
                ),
                "prepare partition claim",
            )
            .await?,
            insert_lease: prepare(
                format!(
                    "INSERT INTO {ks}.task_leases (partition_id, holder, node, epoch, running) \
                     VALUES (?, ?, ?, ?, ?) USING TTL ?"
                ),
                "prepare lease write",
            )
            .await?,
            delete_lease: prepare(
                format!("DELETE FROM {ks}.task_leases WHERE partition_id = ? AND holder = ?"),
                "prepare lease delete",
            )
            .await?,
            select_leases: prepare(
                format!(
                    "SELECT holder, node, epoch, running FROM {ks}.task_leases WHERE partition_id = ?"
                ),
                "prepare lease read",
            )
            .await?,
            session,
        };
        Ok(CassandraStore {
            inner: Arc::new(inner),
        })
    }
}

/// Attempts at a schema statement: nodes starting together on a fresh keyspace race to create
/// the same tables, and Cassandra can refuse the loser ("Column family ID mismatch"); once the
/// winner's table exists, `IF NOT EXISTS` succeeds.
const SCHEMA_ATTEMPTS: u32 = 5;

async fn create_if_absent(session: &Session, ddl: String) -> StoreResult<()> {
    let mut attempt = 1;
    loop {
        match session.query_unpaged(ddl.as_str(), &[]).await {
            Ok(_) => return Ok(()),
            Err(e) if attempt < SCHEMA_ATTEMPTS => {
                warn!(error = %e, attempt, "schema statement failed (another node may be creating it); retrying");
                tokio::time::sleep(std::time::Duration::from_millis(500 * u64::from(attempt)))
                    .await;
                attempt += 1;
            }
            Err(e) => return Err(query_error("schema creation")(e)),
        }
    }
}

/// Adds `column` to `table` unless it is there: a column added in a later release, on a
/// keyspace created before it. Nodes starting together may race to add it; whichever wins, the
/// column is there when the check is repeated.
async fn add_column_if_absent(
    session: &Session,
    ks: &str,
    table: &str,
    column: &str,
    cql_type: &str,
) -> StoreResult<()> {
    let probe = format!("SELECT {column} FROM {ks}.{table} LIMIT 1");
    let alter = format!("ALTER TABLE {ks}.{table} ADD {column} {cql_type}");
    let mut attempt = 1;
    loop {
        if session.query_unpaged(probe.as_str(), &[]).await.is_ok() {
            return Ok(());
        }
        match session.query_unpaged(alter.as_str(), &[]).await {
            Ok(_) => return Ok(()),
            Err(e) if attempt < SCHEMA_ATTEMPTS => {
                warn!(error = %e, attempt, table, column, "adding a column failed (another node may be adding it); checking again");
                tokio::time::sleep(std::time::Duration::from_millis(500 * u64::from(attempt)))
                    .await;
                attempt += 1;
            }
            Err(e) => return Err(query_error("schema migration")(e)),
        }
    }
}

/// The keyspace and tables, created if absent.
fn schema(ks: &str, replication: &str) -> Vec<String> {
    let key = "scheduled_time timestamp, ordering_id text, uniqueness_key text";
    let clustering = "scheduled_time, ordering_id, uniqueness_key";
    vec![
        format!("CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {replication}"),
        // The schedule: one wide row per partition and hour, sorted by task key.
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.scheduled_tasks (partition_id int, hour_bucket timestamp, {key}, \
             task_data text, enqueue_offset bigint, PRIMARY KEY ((partition_id, hour_bucket), {clustering}))"
        ),
        // Final states, laid out like the schedule so a task's status is a single-row read.
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.task_status (partition_id int, hour_bucket timestamp, {key}, \
             status text, attempts int, updated_at timestamp, last_error text, \
             PRIMARY KEY ((partition_id, hour_bucket), {clustering}))"
        ),
        // Which tree owns each partition: the epoch rises with every claim (fencing).
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.partition_owners (partition_id int PRIMARY KEY, \
             epoch bigint, owner text, claimed_at timestamp)"
        ),
        // Attempt history per task, newest first.
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.task_attempts ({key}, attempt int, partition_id int, \
             started_at timestamp, finished_at timestamp, outcome text, error text, \
             PRIMARY KEY (({clustering}), attempt)) WITH CLUSTERING ORDER BY (attempt DESC)"
        ),
        // Running-task leases: one row per partition tree with calls running, written with a
        // TTL and renewed while they run. `running` is a JSON list of [orderingId, task key]
        // (a plain text cell: overwriting it leaves no tombstone, unlike a collection).
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.task_leases (partition_id int, holder text, node text, \
             epoch bigint, running text, PRIMARY KEY ((partition_id), holder))"
        ),
    ]
}

type TaskRow = (DateTime<Utc>, String, String, String, Option<i64>);

fn task_from_row(
    partition: PartitionId,
    (scheduled_time, ordering_id, uniqueness_key, data, enqueue_offset): TaskRow,
) -> Option<Task> {
    match serde_json::from_str::<TaskData>(&data) {
        Ok(task_data) => {
            let task = Task::new(ordering_id, scheduled_time, uniqueness_key, task_data);
            Some(Task {
                enqueue_offset,
                ..task
            })
        }
        Err(e) => {
            // Only this engine writes the table; a row it cannot read is skipped, not retried forever.
            warn!(partition, %ordering_id, %uniqueness_key, %scheduled_time, error = %e, "skipping schedule row with unreadable task data");
            None
        }
    }
}

/// Every row of `result` decoded as `R`; a result that does not decode is a corrupt `what` row.
fn rows_of<R>(result: QueryResult, what: &'static str) -> StoreResult<Vec<R>>
where
    R: for<'frame, 'metadata> DeserializeRow<'frame, 'metadata>,
{
    let corrupt = |reason: String| StoreError::Corrupt { what, reason };
    let rows = result
        .into_rows_result()
        .map_err(|e| corrupt(e.to_string()))?;
    let decoded = rows.rows::<R>().map_err(|e| corrupt(e.to_string()))?;
    decoded
        .map(|row| row.map_err(|e| corrupt(e.to_string())))
        .collect()
}

/// The first row of `result`, if any, decoded as `R`.
fn first_row_of<R>(result: QueryResult, what: &'static str) -> StoreResult<Option<R>>
where
    R: for<'frame, 'metadata> DeserializeRow<'frame, 'metadata>,
{
    let corrupt = |reason: String| StoreError::Corrupt { what, reason };
    result
        .into_rows_result()
        .map_err(|e| corrupt(e.to_string()))?
        .maybe_first_row::<R>()
        .map_err(|e| corrupt(e.to_string()))
}

/// Whether a lightweight transaction applied (its first column, `[applied]`).
fn applied(result: QueryResult, what: &'static str) -> StoreResult<bool> {
    let corrupt = |reason: &str| StoreError::Corrupt {
        what,
        reason: reason.to_string(),
    };
    let row = first_row_of::<scylla::value::Row>(result, what)?
        .ok_or_else(|| corrupt("the lightweight transaction returned no row"))?;
    row.columns
        .first()
        .and_then(|c| c.as_ref())
        .and_then(|v| v.as_boolean())
        .ok_or_else(|| corrupt("the lightweight transaction returned no [applied] column"))
}

fn limit_value(limit: usize) -> i32 {
    i32::try_from(limit).unwrap_or(i32::MAX)
}

impl TaskStore for CassandraStore {
    fn persist(
        &self,
        partition: PartitionId,
        tasks: Vec<Task>,
    ) -> BoxFuture<'static, StoreResult<Vec<RefusedTask>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            // Concurrent inserts of one key land in any order: write only the last.
            futures::stream::iter(last_of_each_key(tasks))
                .map(|task| {
                    let inner = &inner;
                    async move {
                        let key = task.key();
                        let data = serde_json::Value::Object(task.task_data).to_string();
                        let written = inner
                            .session
                            .execute_unpaged(
                                &inner.insert_task,
                                (
                                    partition,
                                    hour_bucket(task.scheduled_time),
                                    task.scheduled_time,
                                    task.ordering_id,
                                    task.uniqueness_key,
                                    data,
                                    task.enqueue_offset,
                                ),
                            )
                            .await
                            .map_err(query_error("task insert"));
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
            let mut bucket = hour_bucket(cursor.time());
            while bucket < until && tasks.len() < limit {
                let remaining = limit_value(limit - tasks.len());
                let result = match &cursor {
                    ReadCursor::From(from) => {
                        inner
                            .session
                            .execute_unpaged(
                                &inner.load_from,
                                (partition, bucket, *from, until, remaining),
                            )
                            .await
                    }
                    ReadCursor::After(key) => {
                        inner
                            .session
                            .execute_unpaged(
                                &inner.load_after,
                                (
                                    partition,
                                    bucket,
                                    key.scheduled_time,
                                    &key.ordering_id,
                                    &key.uniqueness_key,
                                    until,
                                    remaining,
                                ),
                            )
                            .await
                    }
                }
                .map_err(query_error("schedule load"))?;
                for row in rows_of::<TaskRow>(result, "schedule")? {
                    tasks.extend(task_from_row(partition, row));
                }
                bucket += TimeDelta::hours(1);
                cursor = ReadCursor::From(bucket);
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
                .session
                .execute_unpaged(&inner.delete_task, key_values(partition, &key))
                .await
                .map(|_| ())
                .map_err(query_error("schedule delete"))
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
                .session
                .execute_unpaged(&inner.select_task, key_values(partition, &key))
                .await
                .map_err(query_error("task read"))?;
            let row = first_row_of::<(String, Option<i64>)>(result, "schedule")?;
            Ok(row.and_then(|(data, enqueue_offset)| {
                task_from_row(
                    partition,
                    (
                        key.scheduled_time,
                        key.ordering_id,
                        key.uniqueness_key,
                        data,
                        enqueue_offset,
                    ),
                )
            }))
        }
        .boxed()
    }

    fn attempts(
        &self,
        key: TaskKey,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<AttemptRecord>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let result = inner
                .session
                .execute_unpaged(
                    &inner.select_attempts,
                    (
                        key.scheduled_time,
                        key.ordering_id,
                        key.uniqueness_key,
                        limit_value(limit),
                    ),
                )
                .await
                .map_err(query_error("attempts read"))?;
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

    fn status(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let result = inner
                .session
                .execute_unpaged(&inner.select_status, key_values(partition, &key))
                .await
                .map_err(query_error("status read"))?;
            let corrupt = |reason: String| StoreError::Corrupt {
                what: "status",
                reason,
            };
            let row =
                first_row_of::<(String, i32, DateTime<Utc>, Option<String>)>(result, "status")?;
            row.map(|(status, attempts, updated_at, last_error)| {
                Ok(StatusRecord {
                    status: TaskStatus::parse(&status)
                        .ok_or_else(|| corrupt(format!("unknown status {status:?}")))?,
                    attempts: u32::try_from(attempts).unwrap_or(0),
                    updated_at,
                    last_error,
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
                .session
                .execute_unpaged(
                    &inner.insert_status,
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
                    ),
                )
                .await
                .map(|_| ())
                .map_err(query_error("status write"))
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
                .session
                .execute_unpaged(
                    &store.inner.cancel_status,
                    (p, bucket, time, ordering_id, uniqueness_key, at),
                )
                .await
                .map_err(query_error("cancel"))?;
            if applied(result, "status")? {
                Ok(None)
            } else {
                store.status(partition, key).await
            }
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
                .session
                .execute_unpaged(
                    &inner.insert_attempt,
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
                )
                .await
                .map(|_| ())
                .map_err(query_error("attempt write"))
        }
        .boxed()
    }

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
                let session = &store.inner.session;
                let result = if current == 0 {
                    session
                        .execute_unpaged(&store.inner.claim_first, (partition, &owner, at))
                        .await
                } else {
                    let (next, current) = (epoch_value(current + 1), epoch_value(current));
                    session
                        .execute_unpaged(
                            &store.inner.claim_next,
                            (next, &owner, at, partition, current),
                        )
                        .await
                }
                .map_err(query_error("partition claim"))?;
                if applied(result, "partition owner")? {
                    return Ok(current + 1);
                }
            }
            Err(StoreError::Query {
                operation: "partition claim",
                reason: format!("lost {CLAIM_ATTEMPTS} concurrent claims in a row"),
            })
        }
        .boxed()
    }

    fn partition_epoch(&self, partition: PartitionId) -> BoxFuture<'static, StoreResult<u64>> {
        self.read_epoch(partition, false)
    }
}

impl CassandraStore {
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
                &inner.select_epoch_serial
            } else {
                &inner.select_epoch
            };
            let result = inner
                .session
                .execute_unpaged(statement, (partition,))
                .await
                .map_err(query_error("ownership read"))?;
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
            let running = serde_json::to_string(&lease.running).map_err(|e| StoreError::Query {
                operation: "lease write",
                reason: e.to_string(),
            })?;
            // Cassandra's TTL counts whole seconds: round up, never down to "no TTL".
            let ttl = i32::try_from(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0))
                .unwrap_or(i32::MAX)
                .max(1);
            inner
                .session
                .execute_unpaged(
                    &inner.insert_lease,
                    (
                        partition,
                        holder,
                        lease.node,
                        epoch_value(lease.epoch),
                        running,
                        ttl,
                    ),
                )
                .await
                .map(|_| ())
                .map_err(query_error("lease write"))
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
                .session
                .execute_unpaged(&inner.delete_lease, (partition, holder))
                .await
                .map(|_| ())
                .map_err(query_error("lease delete"))
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
                .session
                .execute_unpaged(&inner.select_leases, (partition,))
                .await
                .map_err(query_error("lease read"))?;
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

fn epoch_value(epoch: u64) -> i64 {
    i64::try_from(epoch).unwrap_or(i64::MAX)
}

fn key_values(
    partition: PartitionId,
    key: &TaskKey,
) -> (PartitionId, DateTime<Utc>, DateTime<Utc>, String, String) {
    (
        partition,
        hour_bucket(key.scheduled_time),
        key.scheduled_time,
        key.ordering_id.clone(),
        key.uniqueness_key.clone(),
    )
}
