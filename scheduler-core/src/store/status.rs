//! Final states (`task_status`): what became of each task, in time-bucketed wide rows like the
//! schedule's, kept for the status retention.
//!
//! The whole table in one place: its rows and [`StatusStore`], its statements and
//! implementation on Cassandra (`cassandra`), its in-memory twin (`memory`).

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::TaskKey;

use super::{PartitionId, StoreResult};

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
    /// When the call that ended the task began (`None` for a status no call wrote: a cancel, a
    /// redriven letter's failure; and in rows written before schema version 14).
    pub started_at: Option<DateTime<Utc>>,
}

/// Final states (`task_status`): what became of each task.
pub trait StatusStore: Send + Sync + 'static {
    /// The recorded final state of a task, if any.
    fn status(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>>;

    /// Of `keys`, those with a recorded status: one request per hour bucket (the table's
    /// partition) and [`KEYS_PER_READ`](super::KEYS_PER_READ) keys, reading only their rows. A key it names may
    /// have had its status deleted (Cassandra 2.1.0 may answer a read naming a row's key with
    /// the row deleted after a flush: design.md, "Reads by key"): read such a key's status with
    /// [`StatusStore::status`] before acting on it. A key it does not name had no status.
    fn with_status(
        &self,
        partition: PartitionId,
        keys: Vec<TaskKey>,
    ) -> BoxFuture<'static, StoreResult<HashSet<TaskKey>>>;

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

    /// Records a task's final state unless it already has one (a lightweight transaction, so
    /// a task that finished meanwhile keeps its status): a cancellation, or a redriven dead
    /// letter's failure. Returns `None` when `status` was recorded, else the status the task
    /// already had.
    fn record_status_if_absent(
        &self,
        partition: PartitionId,
        key: TaskKey,
        status: StatusRecord,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>>;
}

impl StatusRecord {
    /// A task's cancellation at `at`.
    pub fn cancelled(at: DateTime<Utc>) -> StatusRecord {
        StatusRecord {
            status: TaskStatus::Cancelled,
            attempts: 0,
            updated_at: at,
            last_error: None,
            result: None,
            started_at: None,
        }
    }
}

/// `task_status` on Cassandra.
#[cfg(feature = "node")]
pub(in crate::store) mod cassandra {
    use std::sync::Arc;

    use chrono::{DateTime, Utc};
    use futures::future::BoxFuture;
    use futures::FutureExt;
    use scheduler_client::TaskKey;
    use scylla::statement::prepared::PreparedStatement;

    use std::collections::HashSet;

    use futures::{StreamExt, TryStreamExt};

    use super::{StatusRecord, StatusStore, TaskStatus};
    use crate::store::cassandra::rows::{applied, first_row_of, key_values, rows_of};
    use crate::store::cassandra::statements::read_by_key;
    use crate::store::cassandra::{CassandraStore, Inner, Preparing, TableStatements, Writes};
    use crate::store::schedule::{reads_by_bucket, KEYS_PER_READ};
    use crate::store::{PartitionId, StoreError, StoreResult};

    /// The statements of `task_status`.
    struct StatusStatements {
        select_status: PreparedStatement,
        select_with_status: PreparedStatement,
        insert_status: PreparedStatement,
        insert_status_if_absent: PreparedStatement,
        delete_status: PreparedStatement,
    }

    impl TableStatements for StatusStatements {
        async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
            let ks = on.keyspace;
            let prepare = |cql: String| on.prepare("prepare status statement", cql);
            let key_columns = "scheduled_time, ordering_id, uniqueness_key";
            let key_match =
                "partition_id = ? AND hour_bucket = ? AND scheduled_time = ? AND ordering_id = ? \
             AND uniqueness_key = ?";
            let by_key = read_by_key(
                "partition_id = ? AND hour_bucket = ? AND scheduled_time = ? AND ordering_id = ?",
                "uniqueness_key",
                key_columns,
            );
            Ok(StatusStatements {
                select_status: prepare(format!(
                    "SELECT uniqueness_key, status, attempts, updated_at, last_error, result, \
                 started_at FROM {ks}.task_status WHERE {by_key}"
                ))
                .await?,
                // Only the keys named: a read of their rows, not a slice (Cassandra 2.1 and
                // later take a multi-column IN on the clustering columns).
                select_with_status: prepare(format!(
                    "SELECT {key_columns} FROM {ks}.task_status WHERE partition_id = ? \
                     AND hour_bucket = ? AND ({key_columns}) IN ?"
                ))
                .await?,
                insert_status: prepare(format!(
                "INSERT INTO {ks}.task_status (partition_id, hour_bucket, {key_columns}, status, \
                 attempts, updated_at, last_error, result, started_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ))
                .await?,
                insert_status_if_absent: prepare(format!(
                "INSERT INTO {ks}.task_status (partition_id, hour_bucket, {key_columns}, status, \
                 attempts, updated_at, last_error, result, started_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
            ))
                .await?,
                delete_status: prepare(format!("DELETE FROM {ks}.task_status WHERE {key_match}"))
                    .await?,
            })
        }
    }

    /// The values of a status insert.
    fn insert_values(
        partition: PartitionId,
        key: &TaskKey,
        status: StatusRecord,
    ) -> impl scylla::serialize::row::SerializeRow + Send + Sync + 'static {
        let (p, bucket, time, ordering_id, uniqueness_key) = key_values(partition, key);
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
            status.started_at,
        )
    }

    /// Adds the write of a task's final status to `writes`.
    pub(in crate::store) async fn add_status(
        inner: &Inner,
        writes: &mut Writes,
        partition: PartitionId,
        key: &TaskKey,
        status: StatusRecord,
    ) -> StoreResult<()> {
        let statements = inner.statements::<StatusStatements>().await?;
        writes.add(
            &statements.insert_status,
            insert_values(partition, key, status),
        );
        Ok(())
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
                        &inner.statements::<StatusStatements>().await?.select_status,
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
                    Option<DateTime<Utc>>,
                );
                // The read runs down from the key: a row of another key is a neighbour.
                let row = first_row_of::<StatusRow>(result, "status")?;
                let row = row.filter(|row| row.0 == key.uniqueness_key);
                row.map(
                    |(_, status, attempts, updated_at, last_error, result, started_at)| {
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
                            started_at,
                        })
                    },
                )
                .transpose()
            }
            .boxed()
        }

        fn with_status(
            &self,
            partition: PartitionId,
            keys: Vec<TaskKey>,
        ) -> BoxFuture<'static, StoreResult<HashSet<TaskKey>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let statements = inner.statements::<StatusStatements>().await?;
                let inner = &inner;
                let statement = &statements.select_with_status;
                futures::stream::iter(reads_by_bucket(keys, KEYS_PER_READ))
                    .map(|(bucket, keys)| async move {
                        let named: Vec<(DateTime<Utc>, String, String)> = keys
                            .into_iter()
                            .map(|k| (k.scheduled_time, k.ordering_id, k.uniqueness_key))
                            .collect();
                        let values = (partition, bucket, named);
                        let result = inner.run(statement, values, "status batch read").await?;
                        rows_of::<(DateTime<Utc>, String, String)>(result, "status")
                    })
                    .buffer_unordered(crate::store::WRITE_CONCURRENCY)
                    .map_ok(|rows| futures::stream::iter(rows.into_iter().map(Ok)))
                    .try_flatten()
                    .map_ok(|(scheduled_time, ordering_id, uniqueness_key)| TaskKey {
                        scheduled_time,
                        ordering_id,
                        uniqueness_key,
                    })
                    .try_collect()
                    .await
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
                let statements = inner.statements::<StatusStatements>().await?;
                let values = insert_values(partition, &key, status);
                inner
                    .run(&statements.insert_status, values, "status write")
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
                        &inner.statements::<StatusStatements>().await?.delete_status,
                        key_values(partition, &key),
                        "status delete",
                    )
                    .await?;
                Ok(())
            }
            .boxed()
        }

        fn record_status_if_absent(
            &self,
            partition: PartitionId,
            key: TaskKey,
            status: StatusRecord,
        ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>> {
            let store = self.clone();
            async move {
                let statements = store.inner.statements::<StatusStatements>().await?;
                let values = insert_values(partition, &key, status);
                let result = store
                    .inner
                    .run(
                        &statements.insert_status_if_absent,
                        values,
                        "status write if absent",
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
}

/// `task_status` in memory.
#[cfg(any(test, feature = "testing"))]
pub(in crate::store) mod memory {
    use futures::future::BoxFuture;
    use scheduler_client::TaskKey;

    use std::collections::HashSet;

    use futures::FutureExt;

    use super::{StatusRecord, StatusStore};
    use crate::store::memory::{MemoryStore, State};
    use crate::store::schedule::{reads_by_bucket, KEYS_PER_READ};
    use crate::store::{PartitionId, StoreResult};

    /// Records a task's final status.
    pub(in crate::store) fn record(
        s: &mut State,
        partition: PartitionId,
        key: TaskKey,
        status: StatusRecord,
    ) {
        s.status_writes
            .push((key.clone(), status.clone(), tokio::time::Instant::now()));
        s.status.insert((partition, key), status);
    }

    impl StatusStore for MemoryStore {
        fn status(
            &self,
            partition: PartitionId,
            key: TaskKey,
        ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>> {
            self.run("status read", move |s| {
                s.status.get(&(partition, key)).cloned()
            })
        }

        fn with_status(
            &self,
            partition: PartitionId,
            keys: Vec<TaskKey>,
        ) -> BoxFuture<'static, StoreResult<HashSet<TaskKey>>> {
            let reads: Vec<_> = reads_by_bucket(keys, KEYS_PER_READ)
                .into_iter()
                .map(|(_, keys)| {
                    self.run("status batch read", move |s| {
                        keys.into_iter()
                            .filter(|key| s.status.contains_key(&(partition, key.clone())))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            async move {
                let mut found = HashSet::new();
                for read in futures::future::join_all(reads).await {
                    found.extend(read?);
                }
                Ok(found)
            }
            .boxed()
        }

        fn record_status(
            &self,
            partition: PartitionId,
            key: TaskKey,
            status: StatusRecord,
        ) -> BoxFuture<'static, StoreResult<()>> {
            self.run("status write", move |s| record(s, partition, key, status))
        }

        fn clear_status(
            &self,
            partition: PartitionId,
            key: TaskKey,
        ) -> BoxFuture<'static, StoreResult<()>> {
            self.run("status delete", move |s| {
                s.status.remove(&(partition, key));
            })
        }

        fn record_status_if_absent(
            &self,
            partition: PartitionId,
            key: TaskKey,
            status: StatusRecord,
        ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>> {
            self.run("status write if absent", move |s| {
                match s.status.get(&(partition, key.clone())) {
                    Some(existing) => Some(existing.clone()),
                    None => {
                        record(s, partition, key, status);
                        None
                    }
                }
            })
        }
    }
}
