//! Between Rust values and CQL rows: decoding results (a row that does not decode is corrupt),
//! the values of a task key, and the store's errors from the driver's.

use chrono::{DateTime, Utc};
use scheduler_client::wire::with_grouping;
use scheduler_client::{OnConflict, Task, TaskData, TaskKey};
use scylla::deserialize::row::DeserializeRow;
use scylla::response::query_result::QueryResult;
use tracing::warn;

use crate::store::{hour_bucket, PartitionId, StoreError, StoreResult};

/// A driver error as the store's: a statement Cassandra refuses as invalid is `Refused`
/// (retrying cannot help), any other failure a `Query` error naming `operation`.
pub(in crate::store) fn query_error(
    operation: &'static str,
) -> impl FnOnce(scylla::errors::ExecutionError) -> StoreError {
    use scylla::errors::{DbError, ExecutionError, RequestAttemptError};
    move |e| match e {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(DbError::Invalid, _)) => {
            StoreError::Refused {
                operation,
                reason: e.to_string(),
                source: Some(std::sync::Arc::new(e)),
            }
        }
        _ => StoreError::query(operation, e),
    }
}

/// A schedule row: the key, `task_data`, `enqueue_offset`, `task_type`, `priority`,
/// `on_conflict`, `max_wait_ms` and `grouping` (`task_type` to `max_wait_ms` null in rows written
/// before schema version 3, the conflict mode in tasks without one, `grouping` in tasks without
/// a group and in rows written before version 4).
pub(in crate::store) type TaskRow = (
    DateTime<Utc>,
    String,
    String,
    String,
    Option<i64>,
    Option<String>,
    Option<i32>,
    Option<String>,
    Option<i64>,
    Option<String>,
);

/// `task` with its stored `grouping` (null: no group); text that does not parse is a corrupt
/// `what` row.
pub(in crate::store) fn with_stored_grouping(
    task: Task,
    grouping: Option<&str>,
    what: &'static str,
) -> StoreResult<Task> {
    with_grouping(task, grouping).map_err(|e| StoreError::Corrupt {
        what,
        reason: format!("grouping: {e}"),
    })
}

/// A task's type, priority and conflict mode as stored (null: the defaults).
pub(in crate::store) fn with_stored_kind(
    task: Task,
    task_type: Option<String>,
    priority: Option<i32>,
    on_conflict: Option<String>,
    max_wait_ms: Option<i64>,
) -> Task {
    let max_wait = max_wait_ms
        .and_then(|ms| u64::try_from(ms).ok())
        .map(std::time::Duration::from_millis);
    Task {
        task_type: task_type.unwrap_or(task.task_type),
        priority: priority.unwrap_or(0),
        on_conflict: on_conflict.and_then(|name| OnConflict::from_parts(&name, max_wait)),
        ..task
    }
}

pub(in crate::store) fn task_from_row(
    partition: PartitionId,
    (
        scheduled_time,
        ordering_id,
        uniqueness_key,
        data,
        enqueue_offset,
        task_type,
        priority,
        on_conflict,
        max_wait_ms,
        grouping,
    ): TaskRow,
) -> Option<Task> {
    let read = serde_json::from_str::<TaskData>(&data)
        .map_err(|e| format!("task data: {e}"))
        .and_then(|task_data| {
            let task = Task::new(
                ordering_id.clone(),
                scheduled_time,
                uniqueness_key.clone(),
                task_data,
            );
            let task = with_stored_kind(task, task_type, priority, on_conflict, max_wait_ms);
            with_grouping(task, grouping.as_deref()).map_err(|e| format!("grouping: {e}"))
        });
    match read {
        Ok(task) => Some(Task {
            enqueue_offset,
            ..task
        }),
        Err(error) => {
            // Only this engine writes the table; a row it cannot read is skipped, not retried
            // forever (an error here would stop the partition's loading at this row).
            warn!(partition, %ordering_id, %uniqueness_key, %scheduled_time, %error, "skipping unreadable schedule row");
            None
        }
    }
}

/// Every row of `result` decoded as `R`; a result that does not decode is a corrupt `what` row.
pub(in crate::store) fn rows_of<R>(result: QueryResult, what: &'static str) -> StoreResult<Vec<R>>
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
pub(in crate::store) fn first_row_of<R>(
    result: QueryResult,
    what: &'static str,
) -> StoreResult<Option<R>>
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
pub(in crate::store) fn applied(result: QueryResult, what: &'static str) -> StoreResult<bool> {
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

pub(in crate::store) fn limit_value(limit: usize) -> i32 {
    i32::try_from(limit).unwrap_or(i32::MAX)
}

pub(in crate::store) fn epoch_value(epoch: u64) -> i64 {
    i64::try_from(epoch).unwrap_or(i64::MAX)
}

pub(in crate::store) fn key_values(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A store error kept only the driver's message (`reason: String`): the cause was lost to
    /// whoever walks the error's sources. It keeps the driver's error whole.
    #[test]
    fn a_driver_error_is_kept_as_the_store_errors_source() {
        let error = query_error("schedule load")(scylla::errors::ExecutionError::EmptyPlan);
        assert!(matches!(
            error,
            StoreError::Query {
                operation: "schedule load",
                ..
            }
        ));
        let source = std::error::Error::source(&error).expect("the driver's error is kept");
        let shared = source.downcast_ref::<crate::store::Cause>();
        let driver =
            shared.and_then(|cause| cause.downcast_ref::<scylla::errors::ExecutionError>());
        assert!(
            matches!(driver, Some(scylla::errors::ExecutionError::EmptyPlan)),
            "{source:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("Cassandra schedule load failed: "),
            "{error}"
        );
    }
}
