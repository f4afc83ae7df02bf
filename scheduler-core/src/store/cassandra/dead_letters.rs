//! [`DeadLetterStore`] on Cassandra: `dead_letters`, one partition per day of the tasks' due
//! times and clustered by task key, and `dead_letter_days`, the days in use. Listing walks the
//! days of its window in order and filters by type here (Cassandra 2.1 cannot filter a
//! non-key column without `ALLOW FILTERING`, which would scan anyway).

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::wire::encode_grouping;
use scheduler_client::{Task, TaskData, TaskKey};

use super::rows::{first_row_of, limit_value, rows_of, with_stored_grouping};
use super::{CassandraStore, Inner};
use crate::store::dead_letters::{
    dead_letter_day, DeadLetter, DeadLetterFilter, DeadLetterStore, DeadReason,
};
use crate::store::{StoreError, StoreResult};

/// The one partition of `dead_letter_days`.
const DAYS_SHARD: i32 = 0;

/// Rows read per query while listing (type filtering may skip some).
const PAGE_ROWS: usize = 500;

/// A `dead_letters` row, in [`COLUMNS`] order; the columns after the key are optional so that a
/// row half-written by a redrive racing a purge reads as absent, not as corrupt.
type LetterRow = (
    DateTime<Utc>,
    String,
    String,
    Option<i32>,
    Option<String>,
    Option<i32>,
    Option<String>,
    Option<i32>,
    Option<String>,
    Option<String>,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    Option<i32>,
    Option<String>,
);

fn letter_from_row(row: LetterRow) -> StoreResult<Option<DeadLetter>> {
    let (time, ordering_id, uniqueness_key, partition, task_type, priority, data, attempts) =
        (row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7);
    let (last_error, reason, dead_at, redriven_at, redrives, grouping) =
        (row.8, row.9, row.10, row.11, row.12, row.13);
    let (Some(partition), Some(data), Some(reason), Some(dead_at)) =
        (partition, data, reason, dead_at)
    else {
        return Ok(None);
    };
    let corrupt = |reason: String| StoreError::Corrupt {
        what: "dead letter",
        reason,
    };
    let task_data: TaskData =
        serde_json::from_str(&data).map_err(|e| corrupt(format!("task data: {e}")))?;
    let mut task = Task::new(ordering_id, time, uniqueness_key, task_data)
        .with_priority(priority.unwrap_or(0));
    if let Some(task_type) = task_type {
        task = task.of_type(task_type);
    }
    // A redriven member runs in its group again, a redriven join joins its group again.
    let task = with_stored_grouping(task, grouping.as_deref(), "dead letter")?;
    Ok(Some(DeadLetter {
        partition,
        task,
        attempts: attempts.and_then(|a| u32::try_from(a).ok()).unwrap_or(0),
        last_error: last_error.unwrap_or_default(),
        reason: DeadReason::parse(&reason)
            .ok_or_else(|| corrupt(format!("unknown reason {reason:?}")))?,
        dead_at,
        redriven_at,
        redrives: redrives.and_then(|r| u32::try_from(r).ok()).unwrap_or(0),
    }))
}

fn key_of(key: &TaskKey) -> (DateTime<Utc>, DateTime<Utc>, String, String) {
    (
        dead_letter_day(key.scheduled_time),
        key.scheduled_time,
        key.ordering_id.clone(),
        key.uniqueness_key.clone(),
    )
}

impl DeadLetterStore for CassandraStore {
    fn add_dead_letter(&self, letter: DeadLetter) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let statements = &inner.statements.dead_letters;
            let task = &letter.task;
            let day = dead_letter_day(task.scheduled_time);
            // The day first, so a listing that finds the letter's row finds its day too.
            inner
                .run(
                    &statements.insert_day,
                    (DAYS_SHARD, day),
                    "dead-letter day write",
                )
                .await?;
            let data = serde_json::Value::Object(task.task_data.clone()).to_string();
            let values = (
                day,
                task.scheduled_time,
                task.ordering_id.as_str(),
                task.uniqueness_key.as_str(),
                letter.partition,
                task.task_type.as_str(),
                task.priority,
                data,
                i32::try_from(letter.attempts).unwrap_or(i32::MAX),
                letter.last_error.as_str(),
                letter.reason.as_str(),
                letter.dead_at,
                letter.redriven_at,
                i32::try_from(letter.redrives).unwrap_or(i32::MAX),
                encode_grouping(task),
            );
            inner
                .run(&statements.insert, values, "dead-letter write")
                .await?;
            Ok(())
        }
        .boxed()
    }

    fn dead_letters(
        &self,
        filter: DeadLetterFilter,
        after: Option<TaskKey>,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<DeadLetter>>> {
        let inner = Arc::clone(&self.inner);
        async move { list(&inner, filter, after, limit).await }.boxed()
    }

    fn dead_letter(&self, key: TaskKey) -> BoxFuture<'static, StoreResult<Option<DeadLetter>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let result = inner
                .run(
                    &inner.statements.dead_letters.select_one,
                    key_of(&key),
                    "dead-letter read",
                )
                .await?;
            // The read runs down from the key: a row of another key is a neighbour.
            match first_row_of::<LetterRow>(result, "dead letter")? {
                Some(row) if row.2 == key.uniqueness_key => letter_from_row(row),
                _ => Ok(None),
            }
        }
        .boxed()
    }

    fn mark_redriven(
        &self,
        key: TaskKey,
        redrives: u32,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let (day, time, ordering_id, uniqueness_key) = key_of(&key);
            let redrives = i32::try_from(redrives).unwrap_or(i32::MAX);
            inner
                .run(
                    &inner.statements.dead_letters.mark_redriven,
                    (at, redrives, day, time, ordering_id, uniqueness_key),
                    "dead-letter redrive mark",
                )
                .await?;
            Ok(())
        }
        .boxed()
    }

    fn remove_dead_letter(&self, key: TaskKey) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            inner
                .run(
                    &inner.statements.dead_letters.delete,
                    key_of(&key),
                    "dead-letter delete",
                )
                .await?;
            Ok(())
        }
        .boxed()
    }
}

/// Up to `limit` letters matching `filter` after `after`: the days of the window in order, each
/// read in pages from the cursor on.
async fn list(
    inner: &Inner,
    filter: DeadLetterFilter,
    after: Option<TaskKey>,
    limit: usize,
) -> StoreResult<Vec<DeadLetter>> {
    let statements = &inner.statements.dead_letters;
    let mut found = Vec::new();
    if limit == 0 || filter.from >= filter.to {
        return Ok(found);
    }
    let first_day = dead_letter_day(match &after {
        Some(key) => key.scheduled_time.max(filter.from),
        None => filter.from,
    });
    let result = inner
        .run(
            &statements.select_days,
            (DAYS_SHARD, first_day, filter.to),
            "dead-letter days read",
        )
        .await?;
    let days: Vec<(DateTime<Utc>,)> = rows_of(result, "dead-letter days")?;
    let mut cursor = after.filter(|key| key.scheduled_time >= filter.from);
    for (day,) in days {
        let until = filter.to.min(day + TimeDelta::days(1));
        loop {
            let page = limit_value(PAGE_ROWS);
            let result = match &cursor {
                Some(key) if dead_letter_day(key.scheduled_time) == day => {
                    let values = (
                        day,
                        key.scheduled_time,
                        key.ordering_id.as_str(),
                        key.uniqueness_key.as_str(),
                        until,
                        page,
                    );
                    inner
                        .run(&statements.select_after, values, "dead-letter list")
                        .await?
                }
                _ => {
                    let values = (day, filter.from.max(day), until, page);
                    inner
                        .run(&statements.select_from, values, "dead-letter list")
                        .await?
                }
            };
            let rows: Vec<LetterRow> = rows_of(result, "dead letter")?;
            let full = rows.len() >= PAGE_ROWS;
            for row in rows {
                let key = TaskKey {
                    scheduled_time: row.0,
                    ordering_id: row.1.clone(),
                    uniqueness_key: row.2.clone(),
                };
                cursor = Some(key);
                let Some(letter) = letter_from_row(row)? else {
                    continue;
                };
                if filter.admits(&letter) {
                    found.push(letter);
                    if found.len() >= limit {
                        return Ok(found);
                    }
                }
            }
            if !full {
                break;
            }
        }
    }
    Ok(found)
}
