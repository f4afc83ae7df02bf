//! Writing tasks into the schedule on Cassandra: an unlogged batch per hour bucket, that is per
//! Cassandra partition (applied as one mutation, at once), of up to [`BATCH_ROWS`] rows and
//! [`BATCH_BYTES`], instead of a request per task. A task larger than a batch may be is written
//! alone; a batch Cassandra refuses is written again a task at a time, so only the task it
//! refuses is refused.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use scheduler_client::wire::encode_grouping;
use scheduler_client::{Task, TaskKey};
use scylla::serialize::row::{RowSerializationContext, SerializeRow};
use scylla::serialize::writers::RowWriter;
use scylla::serialize::SerializationError;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;

use super::{hour_bucket, RefusedTask};
use crate::store::cassandra::{Inner, Preparing};
use crate::store::{PartitionId, StoreError, StoreResult};

/// Rows of one batch at most.
pub(super) const BATCH_ROWS: usize = 100;

/// The estimated size of one batch at most ([`Row::bytes`]). Cassandra 2.2 to 3.5 refuse a batch,
/// even of one partition, over `batch_size_fail_threshold_in_kb` (50 by default); the estimate
/// leaves room for its error.
pub(super) const BATCH_BYTES: usize = 32 * 1024;

/// Batches written at once.
const CONCURRENT_BATCHES: usize = 16;

/// The four inserts of a task into the schedule: with or without a conflict mode
/// (`on_conflict`, `max_wait_ms`), with or without a group (`grouping`).
pub(super) struct TaskInserts {
    plain: PreparedStatement,
    identity: PreparedStatement,
    grouped: PreparedStatement,
    grouped_identity: PreparedStatement,
}

impl TaskInserts {
    pub(super) async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
        let ks = on.keyspace;
        let prepare = |identity: bool, grouped: bool| {
            let mut columns = "partition_id, hour_bucket, scheduled_time, ordering_id, \
                               uniqueness_key, task_data, enqueue_offset, task_type, priority"
                .to_string();
            let mut count = 9;
            if identity {
                columns.push_str(", on_conflict, max_wait_ms");
                count += 2;
            }
            if grouped {
                columns.push_str(", grouping");
                count += 1;
            }
            let marks = vec!["?"; count].join(", ");
            let cql = format!("INSERT INTO {ks}.scheduled_tasks ({columns}) VALUES ({marks})");
            on.prepare("prepare insert", cql)
        };
        Ok(TaskInserts {
            plain: prepare(false, false).await?,
            identity: prepare(true, false).await?,
            grouped: prepare(false, true).await?,
            grouped_identity: prepare(true, true).await?,
        })
    }
}

/// The columns every task has: partition, bucket, time, orderingId, uniqueness key, data,
/// offset, type, priority.
type Columns = (
    PartitionId,
    DateTime<Utc>,
    DateTime<Utc>,
    String,
    String,
    String,
    Option<i64>,
    String,
    i32,
);

/// A task's values, for the insert that writes only the columns it has a value for (no null,
/// so no tombstone, per task).
enum Values {
    Plain(Columns),
    Grouped(Columns, String),
    Identity(Columns, &'static str, Option<i64>),
    GroupedIdentity(Columns, &'static str, Option<i64>, String),
}

impl SerializeRow for Values {
    fn serialize(
        &self,
        ctx: &RowSerializationContext<'_>,
        writer: &mut RowWriter,
    ) -> Result<(), SerializationError> {
        match self {
            Values::Plain(c) => c.serialize(ctx, writer),
            Values::Grouped((p, b, t, o, u, d, e, ty, pr), g) => {
                (p, b, t, o, u, d, e, ty, pr, g).serialize(ctx, writer)
            }
            Values::Identity((p, b, t, o, u, d, e, ty, pr), mode, wait) => {
                (p, b, t, o, u, d, e, ty, pr, mode, wait).serialize(ctx, writer)
            }
            Values::GroupedIdentity((p, b, t, o, u, d, e, ty, pr), mode, wait, g) => {
                (p, b, t, o, u, d, e, ty, pr, mode, wait, g).serialize(ctx, writer)
            }
        }
    }

    fn is_empty(&self) -> bool {
        false
    }
}

/// One task's row, ready to write.
pub(super) struct Row {
    key: TaskKey,
    bucket: DateTime<Utc>,
    values: Values,
    /// The row's estimated size in a batch ([`BATCH_BYTES`]).
    bytes: usize,
}

impl Row {
    /// The row of `task` in the schedule of `partition`.
    pub(super) fn of(partition: PartitionId, task: Task) -> Row {
        let key = task.key();
        let bucket = hour_bucket(task.scheduled_time);
        let grouping = encode_grouping(&task);
        let data = serde_json::Value::Object(task.task_data).to_string();
        // Cassandra measures a batch by its cells; before 3.0 each cell's name repeats the
        // clustering key: counted once per column written, as an upper bound.
        let key_bytes = 8 + task.ordering_id.len() + task.uniqueness_key.len();
        let bytes = data.len()
            + task.task_type.len()
            + grouping.as_ref().map_or(0, String::len)
            + 12 * (key_bytes + 16);
        let columns = (
            partition,
            bucket,
            task.scheduled_time,
            task.ordering_id,
            task.uniqueness_key,
            data,
            task.enqueue_offset,
            task.task_type,
            task.priority,
        );
        let values = match (task.on_conflict, grouping) {
            (None, None) => Values::Plain(columns),
            (None, Some(g)) => Values::Grouped(columns, g),
            (Some(mode), grouping) => {
                let wait =
                    (mode.max_wait()).map(|w| i64::try_from(w.as_millis()).unwrap_or(i64::MAX));
                match grouping {
                    None => Values::Identity(columns, mode.as_str(), wait),
                    Some(g) => Values::GroupedIdentity(columns, mode.as_str(), wait, g),
                }
            }
        };
        Row {
            key,
            bucket,
            values,
            bytes,
        }
    }

    fn statement<'a>(&self, inserts: &'a TaskInserts) -> &'a PreparedStatement {
        match self.values {
            Values::Plain(..) => &inserts.plain,
            Values::Grouped(..) => &inserts.grouped,
            Values::Identity(..) => &inserts.identity,
            Values::GroupedIdentity(..) => &inserts.grouped_identity,
        }
    }
}

/// `rows` in batches of one hour bucket each, in their order within a bucket, each of at most
/// [`BATCH_ROWS`] rows and [`BATCH_BYTES`] estimated; a row larger than that is a batch alone.
pub(super) fn batches(rows: Vec<Row>) -> Vec<Vec<Row>> {
    let mut by_bucket: BTreeMap<DateTime<Utc>, Vec<Row>> = BTreeMap::new();
    for row in rows {
        by_bucket.entry(row.bucket).or_default().push(row);
    }
    let mut batches = Vec::new();
    for rows in by_bucket.into_values() {
        let (mut batch, mut bytes): (Vec<Row>, usize) = (Vec::new(), 0);
        for row in rows {
            if !batch.is_empty() && (batch.len() == BATCH_ROWS || bytes + row.bytes > BATCH_BYTES) {
                batches.push(std::mem::take(&mut batch));
                bytes = 0;
            }
            bytes += row.bytes;
            batch.push(row);
        }
        if !batch.is_empty() {
            batches.push(batch);
        }
    }
    batches
}

/// Writes `rows` in [`batches`]. Returns the tasks Cassandra refused as invalid.
pub(super) async fn write(
    inner: &Inner,
    inserts: &TaskInserts,
    rows: Vec<Row>,
) -> StoreResult<Vec<RefusedTask>> {
    let refused: Vec<Vec<RefusedTask>> = futures::stream::iter(batches(rows))
        .map(|batch| write_batch(inner, inserts, batch))
        .buffer_unordered(CONCURRENT_BATCHES)
        .try_collect()
        .await?;
    Ok(refused.into_iter().flatten().collect())
}

/// Writes one batch: a single row as a plain insert; a batch refused, a row at a time.
async fn write_batch(
    inner: &Inner,
    inserts: &TaskInserts,
    rows: Vec<Row>,
) -> StoreResult<Vec<RefusedTask>> {
    if let [row] = rows.as_slice() {
        return write_one(inner, inserts, row)
            .await
            .map(|r| r.into_iter().collect());
    }
    let mut batch = Batch::new(BatchType::Unlogged);
    for row in &rows {
        batch.append_statement(row.statement(inserts).clone());
    }
    let values: Vec<&Values> = rows.iter().map(|row| &row.values).collect();
    match inner.run_batch(&batch, values, "task insert batch").await {
        Ok(_) => Ok(Vec::new()),
        Err(StoreError::Refused { .. }) => {
            let mut refused = Vec::new();
            for row in &rows {
                refused.extend(write_one(inner, inserts, row).await?);
            }
            Ok(refused)
        }
        Err(e) => Err(e),
    }
}

/// Writes one row; `Some` if Cassandra refused it as invalid.
async fn write_one(
    inner: &Inner,
    inserts: &TaskInserts,
    row: &Row,
) -> StoreResult<Option<RefusedTask>> {
    match inner
        .run(row.statement(inserts), &row.values, "task insert")
        .await
    {
        Ok(_) => Ok(None),
        Err(StoreError::Refused { reason, .. }) => Ok(Some(RefusedTask {
            key: row.key.clone(),
            reason,
        })),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn task(minute: u32, n: usize, data_bytes: usize) -> Task {
        let at = Utc
            .with_ymd_and_hms(2030, 1, 1, 10, 0, 0)
            .single()
            .map(|t| t + chrono::TimeDelta::minutes(minute.into()))
            .unwrap_or_default();
        let data = serde_json::json!({ "pad": "x".repeat(data_bytes) });
        Task::new(
            format!("o{}", n % 7),
            at,
            format!("u{n}"),
            data.as_object().cloned().unwrap_or_default(),
        )
    }

    #[test]
    fn batches_hold_one_bucket_each_within_the_row_and_byte_limits_and_lose_no_row() {
        // 250 small tasks over three hours, 40 of 4 KiB in the first, one of 40 KiB.
        let mut tasks: Vec<Task> = (0..250)
            .map(|n| task((n * 3) as u32 % 180, n, 10))
            .collect();
        tasks.extend((250..290).map(|n| task(5, n, 4096)));
        tasks.push(task(7, 290, 40 * 1024));
        let keys: Vec<TaskKey> = tasks.iter().map(Task::key).collect();
        let rows: Vec<Row> = tasks.into_iter().map(|t| Row::of(4, t)).collect();
        let batches = batches(rows);

        let mut written: Vec<TaskKey> = Vec::new();
        for batch in &batches {
            assert!(!batch.is_empty());
            assert!(
                batch.iter().all(|r| r.bucket == batch[0].bucket),
                "one bucket a batch"
            );
            assert!(batch.len() <= BATCH_ROWS);
            let bytes: usize = batch.iter().map(|r| r.bytes).sum();
            assert!(
                bytes <= BATCH_BYTES || batch.len() == 1,
                "{bytes} bytes in {}",
                batch.len()
            );
            written.extend(batch.iter().map(|r| r.key.clone()));
        }
        let (mut sorted, mut expected) = (written.clone(), keys.clone());
        sorted.sort();
        expected.sort();
        assert_eq!(sorted, expected, "every row once");
        // The large task alone; the rest in far fewer batches than tasks.
        let large = batches
            .iter()
            .find(|b| b.iter().any(|r| r.bytes > BATCH_BYTES));
        assert_eq!(large.map(Vec::len), Some(1));
        assert!(
            batches.len() <= 20,
            "{} batches for 291 tasks",
            batches.len()
        );
        // Within a bucket, rows keep their order.
        let first_hour: Vec<&TaskKey> = written
            .iter()
            .filter(|k| hour_bucket(k.scheduled_time) == hour_bucket(keys[0].scheduled_time))
            .collect();
        let in_order: Vec<&TaskKey> = keys
            .iter()
            .filter(|k| hour_bucket(k.scheduled_time) == hour_bucket(keys[0].scheduled_time))
            .collect();
        assert_eq!(first_hour, in_order);
    }

    #[test]
    fn a_row_counts_its_data_and_its_key_once_per_column() {
        let small = Row::of(0, task(0, 1, 10));
        let large = Row::of(0, task(0, 1, 10_000));
        assert!(small.bytes < 1024, "{}", small.bytes);
        assert!(
            large.bytes >= 10_000 && large.bytes < 11_000,
            "{}",
            large.bytes
        );
    }
}
