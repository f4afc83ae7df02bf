//! [`IdentityStore`] on Cassandra: `task_identities`, one row per identity in a partition per
//! (partition, orderingId), written with a TTL of the task's wait plus the status retention (none if that is 0),
//! clamped to what Cassandra keeps (`store::ttl`).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::wire::encode_grouping;
use scheduler_client::{Task, TaskData, TaskIdentity};

use super::rows::{first_row_of, with_stored_grouping, with_stored_kind};
use super::CassandraStore;
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
                    &inner.statements.identities.select,
                    (partition, &identity.ordering_id, &identity.uniqueness_key),
                    "identity read",
                )
                .await?;
            let Some(row) = first_row_of::<IdentityRow>(result, "identity")? else {
                return Ok(None);
            };
            let (time, data, task_type, priority, on_conflict, wait, first_time, offset, grouping) =
                row;
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
            let ttl = identity_retention(task.scheduled_time, now, inner.status_ttl).ttl_secs(now);
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
                    &inner.statements.identities.insert,
                    values,
                    "identity write",
                )
                .await?;
            Ok(())
        }
        .boxed()
    }
}
