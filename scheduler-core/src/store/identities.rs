//! Task identities (`task_identities`): for each identity (orderingId, uniquenessKey) scheduled
//! with a conflict mode, its current task, whole, so that conflict modes, reschedules and
//! cancels by identity resolve against it, and a task that is no longer its identity's current
//! one never runs. Kept for the task's wait plus the status retention (`IfAbsent` looks at
//! finished tasks within it).
//!
//! The whole table in one place: its rows and [`IdentityStore`], its statements and implementation on
//! Cassandra (`cassandra`), its in-memory twin (`memory`).

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::{Task, TaskIdentity};

use super::ttl::Retention;
use super::{PartitionId, StoreResult};

/// An identity's current task.
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityRecord {
    /// The task (with its conflict mode); the one of its identity allowed to run. Its enqueue
    /// offset is the record's `offset`: the record that made a task current is that task's (the
    /// store keeps the offset once, see `IdentityRecord::read_back`).
    pub task: Task,
    /// The time of the first task of the current debounce chain.
    pub first_time: DateTime<Utc>,
    /// The partition offset of the last record applied to the identity: a record at or
    /// before it was applied already (a batch polled again).
    pub offset: i64,
}

impl IdentityRecord {
    /// A record as a store reads it back: it keeps the record's offset, not the task's enqueue
    /// offset, which is the same for a pending task (the record that made it current), so the
    /// task reads back enqueued at it. A record of no offset (-1: a task read from no
    /// partition) leaves the task without one.
    pub(crate) fn read_back(task: Task, first_time: DateTime<Utc>, offset: i64) -> IdentityRecord {
        let task = Task {
            enqueue_offset: (offset >= 0).then_some(offset),
            ..task
        };
        IdentityRecord {
            task,
            first_time,
            offset,
        }
    }
}

/// How long an identity record is kept: the status retention after its task's time, or after
/// `now` when that is later; a zero retention keeps it until it is deleted, as statuses are
/// (`IfAbsent` must see a task that ran however long ago).
pub(crate) fn identity_retention(
    task_time: DateTime<Utc>,
    now: DateTime<Utc>,
    status_ttl: std::time::Duration,
) -> Retention {
    Retention::after(task_time.max(now), status_ttl)
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

/// [`IdentityStore`] on Cassandra: `task_identities`, one row per identity in a partition per
/// (partition, orderingId), written with a TTL of the task's wait plus the status retention (none if that is 0),
/// clamped to what Cassandra keeps (`store::ttl`).
#[cfg(feature = "node")]
mod cassandra {
    use scylla::statement::prepared::PreparedStatement;
    use std::sync::Arc;

    use chrono::{DateTime, Utc};
    use futures::future::BoxFuture;
    use futures::FutureExt;
    use scheduler_client::wire::encode_grouping;
    use scheduler_client::{Task, TaskData, TaskIdentity};

    use crate::store::cassandra::rows::{first_row_of, with_stored_grouping, with_stored_kind};
    use crate::store::cassandra::{CassandraStore, Preparing, TableStatements};
    use crate::store::identities::identity_retention;
    use crate::store::{IdentityRecord, IdentityStore, PartitionId, StoreError, StoreResult};

    type IdentityRow = (
        DateTime<Utc>,
        String,
        Option<String>,
        Option<i32>,
        Option<String>,
        Option<i64>,
        DateTime<Utc>,
        i64,
        Option<String>,
    );

    impl IdentityStore for CassandraStore {
        fn identity(
            &self,
            partition: PartitionId,
            identity: TaskIdentity,
        ) -> BoxFuture<'static, StoreResult<Option<IdentityRecord>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let result = inner
                    .run(
                        &inner.statements::<IdentityStatements>().await?.select,
                        (partition, &identity.ordering_id, &identity.uniqueness_key),
                        "identity read",
                    )
                    .await?;
                let Some(row) = first_row_of::<IdentityRow>(result, "identity")? else {
                    return Ok(None);
                };
                let (
                    time,
                    data,
                    task_type,
                    priority,
                    on_conflict,
                    wait,
                    first_time,
                    offset,
                    grouping,
                ) = row;
                let task_data: TaskData =
                    serde_json::from_str(&data).map_err(|e| StoreError::Corrupt {
                        what: "identity",
                        reason: e.to_string(),
                    })?;
                let task = Task::new(
                    identity.ordering_id,
                    time,
                    identity.uniqueness_key,
                    task_data,
                );
                let task = with_stored_kind(task, task_type, priority, on_conflict, wait);
                let task = with_stored_grouping(task, grouping.as_deref(), "identity")?;
                Ok(Some(IdentityRecord::read_back(task, first_time, offset)))
            }
            .boxed()
        }

        fn record_identity(
            &self,
            partition: PartitionId,
            record: IdentityRecord,
        ) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let task = &record.task;
                let now = Utc::now();
                let ttl =
                    identity_retention(task.scheduled_time, now, inner.status_ttl).ttl_secs(now);
                let values = (
                    partition,
                    task.ordering_id.as_str(),
                    task.uniqueness_key.as_str(),
                    task.scheduled_time,
                    serde_json::Value::Object(task.task_data.clone()).to_string(),
                    task.task_type.as_str(),
                    task.priority,
                    task.on_conflict.map(|m| m.as_str()),
                    task.on_conflict
                        .and_then(|m| m.max_wait())
                        .map(|w| i64::try_from(w.as_millis()).unwrap_or(i64::MAX)),
                    record.first_time,
                    record.offset,
                    encode_grouping(task),
                    ttl,
                );
                inner
                    .run(
                        &inner.statements::<IdentityStatements>().await?.insert,
                        values,
                        "identity write",
                    )
                    .await?;
                Ok(())
            }
            .boxed()
        }
    }

    /// The statements of `task_identities`.
    struct IdentityStatements {
        select: PreparedStatement,
        insert: PreparedStatement,
    }

    impl TableStatements for IdentityStatements {
        async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
            let ks = on.keyspace;
            let prepare = |cql: String| on.prepare("prepare identity statement", cql);
            Ok(IdentityStatements {
                select: prepare(format!(
                    "SELECT scheduled_time, task_data, task_type, priority, on_conflict, max_wait_ms, \
                     first_time, record_offset, grouping FROM {ks}.task_identities \
                     WHERE partition_id = ? AND ordering_id = ? AND uniqueness_key = ?"
                ))
                .await?,
                insert: prepare(format!(
                    "INSERT INTO {ks}.task_identities (partition_id, ordering_id, uniqueness_key, \
                     scheduled_time, task_data, task_type, priority, on_conflict, max_wait_ms, \
                     first_time, record_offset, grouping) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                     USING TTL ?"
                ))
                .await?,
            })
        }
    }
}

/// `identities` in memory, for unit tests, the simulation and the testing kit.
#[cfg(any(test, feature = "testing"))]
mod memory {
    use super::*;
    use crate::store::memory::MemoryStore;

    /// The table's rows: each identity's record, when it expires (with a retention), and every
    /// write of one in order, with when it was applied.
    #[derive(Default)]
    struct Rows {
        records: std::collections::HashMap<(PartitionId, TaskIdentity), IdentityRecord>,
        expiry: std::collections::HashMap<(PartitionId, TaskIdentity), DateTime<Utc>>,
        writes: Vec<(IdentityRecord, tokio::time::Instant)>,
    }

    // Read by the unit tests and the simulation.
    #[cfg_attr(not(test), allow(dead_code))]
    impl MemoryStore {
        /// Every identity's record, with its partition.
        pub fn identity_records(&self) -> Vec<(PartitionId, IdentityRecord)> {
            let mut state = self.lock();
            let records = state.table::<Rows>().records.iter();
            records
                .map(|((p, _), r)| {
                    let record = IdentityRecord::read_back(r.task.clone(), r.first_time, r.offset);
                    (*p, record)
                })
                .collect()
        }

        /// Every identity write, in order, with when it was applied (the simulation checks that
        /// a task superseded then never starts afterwards).
        pub fn identity_writes(&self) -> Vec<(IdentityRecord, tokio::time::Instant)> {
            self.lock().table::<Rows>().writes.clone()
        }
    }

    impl IdentityStore for MemoryStore {
        fn identity(
            &self,
            partition: PartitionId,
            identity: TaskIdentity,
        ) -> BoxFuture<'static, StoreResult<Option<IdentityRecord>>> {
            self.run("identity read", move |s| {
                let key = (partition, identity);
                let clock = s
                    .retention
                    .as_ref()
                    .map(|(_, clock)| std::sync::Arc::clone(clock));
                let rows = s.table::<Rows>();
                let expired = match (clock, rows.expiry.get(&key)) {
                    (Some(clock), Some(expiry)) => clock.now() >= *expiry,
                    _ => false,
                };
                (rows.records.get(&key).filter(|_| !expired))
                    .map(|r| IdentityRecord::read_back(r.task.clone(), r.first_time, r.offset))
            })
        }

        fn record_identity(
            &self,
            partition: PartitionId,
            record: IdentityRecord,
        ) -> BoxFuture<'static, StoreResult<()>> {
            self.run("identity write", move |s| {
                let retention = s.retention.clone();
                let rows = s.table::<Rows>();
                rows.writes
                    .push((record.clone(), tokio::time::Instant::now()));
                // As `task_identities` does: the record's offset, not the task's field, is kept.
                let mut record = record;
                record.task.enqueue_offset = None;
                let key = (partition, record.task.identity());
                if let Some((status_ttl, clock)) = &retention {
                    let now = clock.now();
                    let retention =
                        identity_retention(record.task.scheduled_time, now, *status_ttl);
                    match retention.ttl_secs(now) {
                        0 => rows.expiry.remove(&key),
                        secs => rows
                            .expiry
                            .insert(key.clone(), now + chrono::TimeDelta::seconds(secs.into())),
                    };
                }
                rows.records.insert(key, record);
            })
        }
    }
}
