//! The two forms of a task's end (issue 32 asks to measure both), side by side on the stack's
//! Cassandra, same tasks, same grouping:
//!
//! - **status row and removal**, the engine's: the final status inserted in `task_status` and
//!   the schedule row deleted, both in one unlogged batch of the bucket, ends of one bucket
//!   group-committed (`FinishStore` of `CassandraStore`, the code a tree runs);
//! - **status in the schedule row**: the final status written into the task's own schedule row
//!   (an `UPDATE` of its status cells, no tombstone), in batches of the same size, on a table
//!   the scenario creates for it (the schedule's columns and the status's).
//!
//! Per end: requests and rows sent, how fast, and the CPU of every process. Then what a new
//! tree's first load of such a bucket costs: each partition's bucket of finished tasks read
//! from its start, stepping over the removals' tombstones in the first form and reading every
//! finished row back in the second. Last, the parts of the engine's end, each written alone in
//! batches of 50 ends on partitions of their own: its status row as written, without its two
//! null cells, on a table without a default TTL; the removal of schedule rows written for it;
//! and both together without the group commit. That says where the end's cost goes. Run only
//! when named (`--only ends`).

use std::time::Instant;

use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt, TryStreamExt};
use it_tests::engine::TestEnv;
use scheduler_client::{Task, TaskKey};
use scheduler_core::store::{
    hour_bucket, CassandraStore, FinishStore, ReadCursor, ScheduleStore, StatusRecord, TaskStatus,
};
use scylla::client::session::Session;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;

use crate::ceilings::bench_task;
use crate::cpu::{self, CpuSnapshot};
use crate::BenchError;

/// Partitions the tasks are spread over (one hour bucket each: eight Cassandra partitions).
pub const PARTITIONS: u32 = 8;
/// Ends in one request, as the engine's group commit sends them at most.
const ENDS_PER_BATCH: usize = 50;
/// Ends under way at once in the engine's form (a tree's calls finishing together).
const CONCURRENT_ENDS: usize = 400;
/// Rows a load reads per page, as a tree's does.
const LOAD_PAGE: usize = 1_000;

/// One form's figures.
#[derive(Debug, Clone)]
pub struct EndForm {
    /// Which form.
    pub name: &'static str,
    /// Requests per end.
    pub requests_per_end: f64,
    /// Rows written per end (a status row, a removal's tombstone, a row's update).
    pub rows_per_end: f64,
    /// Ends written per second.
    pub ends_per_s: f64,
    /// CPU milliseconds per end, by process, and their total.
    pub cpu_per_end_ms: Vec<(String, f64)>,
    /// Reading every partition's bucket of finished tasks from its start: milliseconds.
    pub reload_ms: f64,
    /// Rows that read returned to the node (finished ones, to be skipped).
    pub reload_rows: usize,
    /// CPU milliseconds of that read per finished task, by process, and their total.
    pub reload_cpu_per_task_ms: Vec<(String, f64)>,
}

/// What the scenario measured.
#[derive(Debug, Clone)]
pub struct Ends {
    /// Tasks ended in each form.
    pub tasks: usize,
    /// The two forms, the engine's first.
    pub forms: Vec<EndForm>,
    /// The parts of the engine's form, each written alone: where its cost goes.
    pub parts: Vec<EndPart>,
}

/// One part of the engine's end written alone, in batches of `ENDS_PER_BATCH`.
#[derive(Debug, Clone)]
pub struct EndPart {
    /// Which part.
    pub name: &'static str,
    /// Ends written per second.
    pub ends_per_s: f64,
    /// CPU milliseconds per end, by process, and their total.
    pub cpu_per_end_ms: Vec<(String, f64)>,
}

/// Runs the scenario with `tasks` tasks ended in each form.
pub async fn ends(tasks: usize) -> Result<Ends, BenchError> {
    let env = TestEnv::new("bench_ends", PARTITIONS).await;
    let store = env.store().await;
    let session = (env.stack.cassandra_session().await).map_err(setup)?;
    let in_row = InRow::create(&session, &env.keyspace).await?;
    // Due within the current hour, before now: one bucket per partition.
    let now = Utc::now();
    let bucket = hour_bucket(now);
    let span_ms = (now - bucket).num_milliseconds().max(1);
    let by_partition: Vec<Vec<Task>> = (0..PARTITIONS)
        .map(|p| {
            (0..tasks / PARTITIONS as usize)
                .map(|i| {
                    let n = i * PARTITIONS as usize + p as usize;
                    let at = bucket + TimeDelta::milliseconds(n as i64 * span_ms / tasks as i64);
                    bench_task(format!("order-{}", n % 1000), at, format!("end-{n}"))
                })
                .collect()
        })
        .collect();
    let tasks = by_partition.iter().map(Vec::len).sum();
    for (partition, chunk) in by_partition.iter().enumerate() {
        for part in chunk.chunks(5_000) {
            store
                .persist(partition as i32, part.to_vec())
                .await
                .map_err(setup)?;
            in_row.insert(&session, partition as i32, part).await?;
        }
    }
    let processes = cpu::stack_processes();
    let engines = engine_form(&store, &by_partition, tasks, &processes).await?;
    let in_rows = in_row
        .end_all(&session, &by_partition, tasks, &processes)
        .await?;
    let parts = parts(&store, &session, &env.keyspace, &by_partition, &processes).await?;
    Ok(Ends {
        tasks,
        forms: vec![engines, in_rows],
        parts,
    })
}

/// Waits (a minute at most) until the stack is quiet: less than 5% of a core used by all of
/// `processes` in a second, so that a phase's CPU is its own and not the flushes and compactions
/// of the writes before it.
async fn settle(processes: &[cpu::Measured]) {
    for _ in 0..60 {
        let before = CpuSnapshot::take(processes);
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        // CPU milliseconds in that second, all processes: 50 is 5% of a core.
        let spent = CpuSnapshot::take(processes).per_task_since(&before, 1);
        if (spent.iter()).any(|(name, ms)| name == "total" && *ms < 50.0) {
            return;
        }
    }
}

fn setup(e: impl std::fmt::Display) -> BenchError {
    BenchError::Setup(e.to_string())
}

fn finished(now: DateTime<Utc>) -> StatusRecord {
    StatusRecord {
        status: TaskStatus::Completed,
        attempts: 1,
        updated_at: now,
        last_error: None,
        result: None,
        started_at: None,
    }
}

/// A counter of `counts` (`statements_run`, `rows_run`) for `operation`.
fn count(counts: &[(&'static str, u64)], operation: &str) -> u64 {
    (counts.iter().find(|(op, _)| *op == operation)).map_or(0, |(_, n)| *n)
}

/// The engine's form: every task ended through `FinishStore`, `CONCURRENT_ENDS` at once.
async fn engine_form(
    store: &CassandraStore,
    by_partition: &[Vec<Task>],
    tasks: usize,
    processes: &[cpu::Measured],
) -> Result<EndForm, BenchError> {
    settle(processes).await;
    let (statements, rows) = (store.statements_run(), store.rows_run());
    let cpu_before = CpuSnapshot::take(processes);
    let began = Instant::now();
    // Round robin over the partitions, as a tree's calls of several partitions end.
    let longest = by_partition.iter().map(Vec::len).max().unwrap_or(0);
    let ends = (0..longest).flat_map(|i| {
        (by_partition.iter().enumerate())
            .filter_map(move |(p, tasks)| tasks.get(i).map(|t| (p as i32, t.key())))
    });
    futures::stream::iter(ends)
        .map(|(partition, key)| store.finish(partition, key, finished(Utc::now())))
        .buffer_unordered(CONCURRENT_ENDS)
        .try_collect::<Vec<()>>()
        .await
        .map_err(setup)?;
    let seconds = began.elapsed().as_secs_f64();
    let cpu_per_end_ms = CpuSnapshot::take(processes).per_task_since(&cpu_before, tasks);
    let operation = "status write";
    let requests = count(&store.statements_run(), operation) - count(&statements, operation);
    let written = count(&store.rows_run(), operation) - count(&rows, operation);

    settle(processes).await;
    let cpu_before = CpuSnapshot::take(processes);
    let began = Instant::now();
    let mut reload_rows = 0;
    for (partition, tasks) in by_partition.iter().enumerate() {
        let Some(first) = tasks.first() else { continue };
        let from = hour_bucket(first.scheduled_time);
        let mut cursor = ReadCursor::From(from);
        loop {
            let page = store
                .load(
                    partition as i32,
                    cursor.clone(),
                    from + TimeDelta::hours(1),
                    LOAD_PAGE,
                )
                .await
                .map_err(setup)?;
            reload_rows += page.len();
            match page.last() {
                Some(last) if page.len() == LOAD_PAGE => cursor = ReadCursor::After(last.key()),
                _ => break,
            }
        }
    }
    Ok(EndForm {
        name: "status row and removal, one batch (the engine's)",
        requests_per_end: requests as f64 / tasks as f64,
        rows_per_end: written as f64 / tasks as f64,
        ends_per_s: tasks as f64 / seconds,
        cpu_per_end_ms,
        reload_ms: began.elapsed().as_secs_f64() * 1000.0,
        reload_rows,
        reload_cpu_per_task_ms: CpuSnapshot::take(processes).per_task_since(&cpu_before, tasks),
    })
}

/// The other form: a table with the schedule's columns and the final status's, the status
/// written into the task's row.
struct InRow {
    insert: PreparedStatement,
    end: PreparedStatement,
    read: PreparedStatement,
}

/// A row of the table, as the scenario writes it.
type InsertValues = (
    i32,
    DateTime<Utc>,
    DateTime<Utc>,
    String,
    String,
    String,
    i64,
);

/// A task's end in its row: status, attempts, when, and the row's key.
type EndValues = (
    String,
    i32,
    DateTime<Utc>,
    i32,
    DateTime<Utc>,
    DateTime<Utc>,
    String,
    String,
);

impl InRow {
    async fn create(session: &Session, ks: &str) -> Result<InRow, BenchError> {
        let key = "scheduled_time timestamp, ordering_id text, uniqueness_key text";
        let clustering = "scheduled_time, ordering_id, uniqueness_key";
        session
            .query_unpaged(
                format!(
                    "CREATE TABLE IF NOT EXISTS {ks}.ends_in_row (partition_id int, \
                     hour_bucket timestamp, {key}, task_data text, enqueue_offset bigint, \
                     status text, attempts int, updated_at timestamp, \
                     PRIMARY KEY ((partition_id, hour_bucket), {clustering}))"
                ),
                &[],
            )
            .await
            .map_err(setup)?;
        let prepare = |cql: String| async move { session.prepare(cql).await.map_err(setup) };
        let where_key = "partition_id = ? AND hour_bucket = ? AND scheduled_time = ? \
                         AND ordering_id = ? AND uniqueness_key = ?";
        Ok(InRow {
            insert: prepare(format!(
                "INSERT INTO {ks}.ends_in_row (partition_id, hour_bucket, {clustering}, \
                 task_data, enqueue_offset) VALUES (?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            end: prepare(format!(
                "UPDATE {ks}.ends_in_row SET status = ?, attempts = ?, updated_at = ? \
                 WHERE {where_key}"
            ))
            .await?,
            read: prepare(format!(
                "SELECT uniqueness_key, status FROM {ks}.ends_in_row \
                 WHERE partition_id = ? AND hour_bucket = ?"
            ))
            .await?,
        })
    }

    /// Writes `tasks` of `partition` as the schedule does, in batches of one bucket.
    async fn insert(
        &self,
        session: &Session,
        partition: i32,
        tasks: &[Task],
    ) -> Result<(), BenchError> {
        for chunk in tasks.chunks(ENDS_PER_BATCH) {
            let values: Vec<InsertValues> = chunk
                .iter()
                .map(|t| {
                    let data = serde_json::to_string(&t.task_data).unwrap_or_default();
                    let key = t.key();
                    (
                        partition,
                        hour_bucket(key.scheduled_time),
                        key.scheduled_time,
                        key.ordering_id,
                        key.uniqueness_key,
                        data,
                        0,
                    )
                })
                .collect();
            self.batch(session, &self.insert, values).await?;
        }
        Ok(())
    }

    async fn batch<V: scylla::serialize::row::SerializeRow>(
        &self,
        session: &Session,
        statement: &PreparedStatement,
        values: Vec<V>,
    ) -> Result<(), BenchError> {
        let mut batch = Batch::new(BatchType::Unlogged);
        for _ in &values {
            batch.append_statement(statement.clone());
        }
        session.batch(&batch, values).await.map_err(setup)?;
        Ok(())
    }

    /// Ends every task, each partition's in batches of `ENDS_PER_BATCH` one after the other,
    /// the partitions at once (as the engine's group commit sends a busy bucket's), then reads
    /// every partition's bucket back.
    async fn end_all(
        &self,
        session: &Session,
        by_partition: &[Vec<Task>],
        tasks: usize,
        processes: &[cpu::Measured],
    ) -> Result<EndForm, BenchError> {
        settle(processes).await;
        let cpu_before = CpuSnapshot::take(processes);
        let began = Instant::now();
        let requests: usize = futures::future::try_join_all(by_partition.iter().enumerate().map(
            |(partition, tasks)| async move {
                let mut requests = 0;
                for chunk in tasks.chunks(ENDS_PER_BATCH) {
                    let now = Utc::now();
                    let values: Vec<EndValues> = chunk
                        .iter()
                        .map(|t| {
                            let TaskKey {
                                scheduled_time,
                                ordering_id,
                                uniqueness_key,
                            } = t.key();
                            (
                                "completed".to_string(),
                                1,
                                now,
                                partition as i32,
                                hour_bucket(scheduled_time),
                                scheduled_time,
                                ordering_id,
                                uniqueness_key,
                            )
                        })
                        .collect();
                    self.batch(session, &self.end, values).await?;
                    requests += 1;
                }
                Ok::<_, BenchError>(requests)
            },
        ))
        .await?
        .into_iter()
        .sum();
        let seconds = began.elapsed().as_secs_f64();
        let cpu_per_end_ms = CpuSnapshot::take(processes).per_task_since(&cpu_before, tasks);

        settle(processes).await;
        let cpu_before = CpuSnapshot::take(processes);
        let began = Instant::now();
        let mut reload_rows = 0;
        for (partition, tasks) in by_partition.iter().enumerate() {
            let Some(first) = tasks.first() else { continue };
            let mut read = self.read.clone();
            read.set_page_size(LOAD_PAGE as i32);
            let rows = session
                .execute_iter(read, (partition as i32, hour_bucket(first.scheduled_time)))
                .await
                .map_err(setup)?
                .rows_stream::<(String, Option<String>)>()
                .map_err(setup)?;
            let read: Vec<_> = rows.try_collect().await.map_err(setup)?;
            let pending = read.iter().filter(|(_, status)| status.is_none()).count();
            if pending != 0 {
                return Err(BenchError::Insane(format!(
                    "{pending} rows of partition {partition} have no status after their end"
                )));
            }
            reload_rows += read.len();
        }
        Ok(EndForm {
            name: "status in the schedule row",
            requests_per_end: requests as f64 / tasks as f64,
            rows_per_end: 1.0,
            ends_per_s: tasks as f64 / seconds,
            cpu_per_end_ms,
            reload_ms: began.elapsed().as_secs_f64() * 1000.0,
            reload_rows,
            reload_cpu_per_task_ms: CpuSnapshot::take(processes).per_task_since(&cpu_before, tasks),
        })
    }
}

/// Values of one statement of a batch.
type BoxedValues = Box<dyn scylla::serialize::row::SerializeRow + Send + Sync>;

/// The engine's end in parts, each written alone (see the module's doc).
async fn parts(
    store: &CassandraStore,
    session: &Session,
    ks: &str,
    by_partition: &[Vec<Task>],
    processes: &[cpu::Measured],
) -> Result<Vec<EndPart>, BenchError> {
    let tasks = by_partition.iter().map(Vec::len).sum();
    let key = "scheduled_time, ordering_id, uniqueness_key";
    // The status table's shape without a retention.
    session
        .query_unpaged(
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.ends_status_kept (partition_id int, \
                 hour_bucket timestamp, scheduled_time timestamp, ordering_id text, \
                 uniqueness_key text, status text, attempts int, updated_at timestamp, \
                 last_error text, result text, PRIMARY KEY ((partition_id, hour_bucket), {key})) \
                 WITH default_time_to_live = 0"
            ),
            &[],
        )
        .await
        .map_err(setup)?;
    let prepare = |cql: String| async move { session.prepare(cql).await.map_err(setup) };
    let status = |table: &str, nulls: bool| {
        let (columns, marks) = if nulls {
            (", last_error, result", ", ?, ?")
        } else {
            ("", "")
        };
        format!(
            "INSERT INTO {ks}.{table} (partition_id, hour_bucket, {key}, status, attempts, \
             updated_at{columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?{marks})"
        )
    };
    let with_nulls = prepare(status("task_status", true)).await?;
    let without_nulls = prepare(status("task_status", false)).await?;
    let kept = prepare(status("ends_status_kept", false)).await?;
    let removal = prepare(format!(
        "DELETE FROM {ks}.scheduled_tasks WHERE partition_id = ? AND hour_bucket = ? \
         AND scheduled_time = ? AND ordering_id = ? AND uniqueness_key = ?"
    ))
    .await?;
    type Values = fn(i32, TaskKey, DateTime<Utc>) -> BoxedValues;
    let status_values: Values = |p, k, now| {
        let b = hour_bucket(k.scheduled_time);
        let key = (p, b, k.scheduled_time, k.ordering_id, k.uniqueness_key);
        Box::new((key.0, key.1, key.2, key.3, key.4, "completed", 1, now))
    };
    let engine_status: Values = |p, k, now| {
        let b = hour_bucket(k.scheduled_time);
        let (t, o, u) = (k.scheduled_time, k.ordering_id, k.uniqueness_key);
        let none = None::<String>;
        Box::new((p, b, t, o, u, "completed", 1, now, none.clone(), none))
    };
    let removal_values: Values = |p, k, _| {
        let b = hour_bucket(k.scheduled_time);
        Box::new((p, b, k.scheduled_time, k.ordering_id, k.uniqueness_key))
    };
    let parts: [(&'static str, Vec<(&PreparedStatement, Values)>); 5] = [
        (
            "status row as the engine writes it (two null cells, the retention's TTL)",
            vec![(&with_nulls, engine_status)],
        ),
        (
            "status row without its null cells",
            vec![(&without_nulls, status_values)],
        ),
        (
            "status row without null cells or TTL",
            vec![(&kept, status_values)],
        ),
        (
            "the schedule row's removal",
            vec![(&removal, removal_values)],
        ),
        (
            "both, in batches of 50 ends (no group commit)",
            vec![(&with_nulls, engine_status), (&removal, removal_values)],
        ),
    ];
    let mut measured = Vec::new();
    for (index, (name, statements)) in parts.into_iter().enumerate() {
        // Partitions of their own; the removals remove rows that are there.
        let partition = |p: usize| (100 * (index + 1) + p) as i32;
        if statements.iter().any(|(s, _)| std::ptr::eq(*s, &removal)) {
            for (p, tasks) in by_partition.iter().enumerate() {
                for chunk in tasks.chunks(5_000) {
                    (store.persist(partition(p), chunk.to_vec()).await).map_err(setup)?;
                }
            }
        }
        settle(processes).await;
        let cpu_before = CpuSnapshot::take(processes);
        let began = Instant::now();
        futures::future::try_join_all(by_partition.iter().enumerate().map(|(p, tasks)| {
            let partition = partition(p);
            let statements = &statements;
            async move {
                for chunk in tasks.chunks(ENDS_PER_BATCH) {
                    let now = Utc::now();
                    let mut batch = Batch::new(BatchType::Unlogged);
                    let mut rows: Vec<BoxedValues> = Vec::new();
                    for task in chunk {
                        for (statement, values) in statements {
                            batch.append_statement((*statement).clone());
                            rows.push(values(partition, task.key(), now));
                        }
                    }
                    session.batch(&batch, rows).await.map_err(setup)?;
                }
                Ok::<_, BenchError>(())
            }
        }))
        .await?;
        measured.push(EndPart {
            name,
            ends_per_s: tasks as f64 / began.elapsed().as_secs_f64(),
            cpu_per_end_ms: CpuSnapshot::take(processes).per_task_since(&cpu_before, tasks),
        });
    }
    Ok(measured)
}
