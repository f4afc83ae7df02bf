//! Dead letters (`dead_letters`): the tasks that could not be done, kept for operators to
//! inspect, redrive or purge. A dead letter is keyed by its task's key, so recording it again (a
//! task recorded twice under at-least-once) overwrites it instead of adding a second one.
//!
//! The whole table in one place: its rows and [`DeadLetterStore`], its statements and implementation on
//! Cassandra (`cassandra`), its in-memory twin (`memory`).
//!
//! Over 500 lines: a table whole in one place: its rows and trait, its statements and Cassandra
//! implementation, its in-memory twin.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use futures::future::BoxFuture;
use scheduler_client::{Task, TaskKey};

use super::{PartitionId, StoreResult};

/// Why a task became a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeadReason {
    /// The handler refused it as invalid: it was not retried.
    Invalid,
    /// Every retry failed.
    RetriesExhausted,
}

impl DeadReason {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::Invalid => "invalid",
            DeadReason::RetriesExhausted => "retries_exhausted",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(text: &str) -> Option<DeadReason> {
        match text {
            "invalid" => Some(DeadReason::Invalid),
            "retries_exhausted" => Some(DeadReason::RetriesExhausted),
            _ => None,
        }
    }
}

/// A task that could not be done, with what is needed to run it again.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// The partition the task belonged to.
    pub partition: PartitionId,
    /// The task, with its type, data and priority.
    pub task: Task,
    /// Attempts made.
    pub attempts: u32,
    /// The last attempt's error.
    pub last_error: String,
    /// Why it is here.
    pub reason: DeadReason,
    /// When it became a dead letter.
    pub dead_at: DateTime<Utc>,
    /// When it was last redriven (run again as a new task); `None` if never.
    pub redriven_at: Option<DateTime<Utc>>,
    /// How many times it was redriven.
    pub redrives: u32,
}

impl DeadLetter {
    /// The task a redrive enqueues (the admin API's, the dashboard's, the CLI's): the dead one
    /// again, with its type, data, priority, group and identity, due `at` (a new key), with no
    /// enqueue offset. A task of an identity is made its identity's current task
    /// (`replace`): an `ifAbsent` one would be ignored, since its own dead task counts as one
    /// that finished within the status retention (a group's join is `ifAbsent`: until issue
    /// 30's simulation redrove one, a redriven join never ran).
    pub fn redriven(&self, at: DateTime<Utc>) -> Task {
        let on_conflict = match self.task.on_conflict {
            Some(scheduler_client::OnConflict::IfAbsent) => {
                Some(scheduler_client::OnConflict::Replace)
            }
            mode => mode,
        };
        Task {
            scheduled_time: at,
            enqueue_offset: None,
            on_conflict,
            ..self.task.clone()
        }
    }

    /// The final status its task has, as its tree records it with the letter: a redrive
    /// records it first if the task has none ([`super::StatusStore::record_status_if_absent`]),
    /// since a redriven identity's task supersedes the dead one, whose status write may have
    /// been cut off (its tree stopped between the letter and the status).
    pub fn failed_status(&self) -> super::StatusRecord {
        super::StatusRecord {
            status: match self.reason {
                DeadReason::Invalid => super::TaskStatus::Dropped,
                DeadReason::RetriesExhausted => super::TaskStatus::Failed,
            },
            attempts: self.attempts,
            updated_at: self.dead_at,
            last_error: Some(self.last_error.clone()),
            result: None,
            started_at: None,
        }
    }
}

/// Which dead letters an operation covers: those of a task type (all when `None`) whose task
/// was due in `[from, to)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterFilter {
    /// Only this task type.
    pub task_type: Option<String>,
    /// Tasks due at or after this time.
    pub from: DateTime<Utc>,
    /// Tasks due before this time.
    pub to: DateTime<Utc>,
    /// Whether dead letters already redriven are included.
    pub include_redriven: bool,
}

impl DeadLetterFilter {
    /// Whether `letter` passes the filter's type and redrive conditions (the window is the
    /// store's query).
    pub fn admits(&self, letter: &DeadLetter) -> bool {
        self.task_type
            .as_ref()
            .is_none_or(|t| *t == letter.task.task_type)
            && (self.include_redriven || letter.redriven_at.is_none())
    }
}

/// The day partition a dead letter of a task due at `time` is kept in.
pub fn dead_letter_day(time: DateTime<Utc>) -> DateTime<Utc> {
    time.duration_trunc(TimeDelta::days(1)).unwrap_or(time)
}

/// The dead letters, one day partition per day of the tasks' due times, with an index of the
/// days in use.
pub trait DeadLetterStore: Send + Sync + 'static {
    /// Records a dead letter (overwriting one of the same task).
    fn add_dead_letter(&self, letter: DeadLetter) -> BoxFuture<'static, StoreResult<()>>;

    /// Up to `limit` dead letters matching `filter`, in task-key order, after `after` if given.
    fn dead_letters(
        &self,
        filter: DeadLetterFilter,
        after: Option<TaskKey>,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<DeadLetter>>>;

    /// The dead letter of the task with `key`, if there is one.
    fn dead_letter(&self, key: TaskKey) -> BoxFuture<'static, StoreResult<Option<DeadLetter>>>;

    /// Records that the dead letter of `key` was redriven at `at` (a redrive more).
    fn mark_redriven(
        &self,
        key: TaskKey,
        redrives: u32,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// Deletes the dead letter of `key`.
    fn remove_dead_letter(&self, key: TaskKey) -> BoxFuture<'static, StoreResult<()>>;
}

/// [`DeadLetterStore`] on Cassandra: `dead_letters`, one partition per day of the tasks' due
/// times and clustered by task key, and `dead_letter_days`, the days in use. Listing walks the
/// days of its window in order and filters by type here (Cassandra 2.1 cannot filter a
/// non-key column without `ALLOW FILTERING`, which would scan anyway).
#[cfg(feature = "node")]
mod cassandra {
    use scylla::statement::prepared::PreparedStatement;
    use std::sync::Arc;

    use chrono::{DateTime, TimeDelta, Utc};
    use futures::future::BoxFuture;
    use futures::FutureExt;
    use scheduler_client::wire::encode_grouping;
    use scheduler_client::{Task, TaskData, TaskKey};

    use crate::store::cassandra::rows::{first_row_of, limit_value, rows_of, with_stored_grouping};
    use crate::store::cassandra::statements::read_by_key;
    use crate::store::cassandra::{CassandraStore, Inner, Preparing, TableStatements};
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
                let statements = inner.statements::<DeadLetterStatements>().await?;
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
                        &inner.statements::<DeadLetterStatements>().await?.select_one,
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
                        &inner
                            .statements::<DeadLetterStatements>()
                            .await?
                            .mark_redriven,
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
                        &inner.statements::<DeadLetterStatements>().await?.delete,
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
        let statements = inner.statements::<DeadLetterStatements>().await?;
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

    /// The statements of the dead-letter tables.
    struct DeadLetterStatements {
        insert: PreparedStatement,
        insert_day: PreparedStatement,
        select_days: PreparedStatement,
        select_from: PreparedStatement,
        select_after: PreparedStatement,
        select_one: PreparedStatement,
        mark_redriven: PreparedStatement,
        delete: PreparedStatement,
    }

    const COLUMNS: &str = "scheduled_time, ordering_id, uniqueness_key, partition_id, task_type, \
                           priority, task_data, attempts, last_error, reason, dead_at, redriven_at, redrives, \
                           grouping";

    const KEY_MATCH: &str =
        "day_bucket = ? AND scheduled_time = ? AND ordering_id = ? AND uniqueness_key = ?";

    impl TableStatements for DeadLetterStatements {
        async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
            let ks = on.keyspace;
            let prepare = |cql: String| on.prepare("prepare dead-letter statement", cql);
            Ok(DeadLetterStatements {
                insert: prepare(format!(
                    "INSERT INTO {ks}.dead_letters (day_bucket, {COLUMNS}) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ))
                .await?,
                insert_day: prepare(format!(
                    "INSERT INTO {ks}.dead_letter_days (shard, day_bucket) VALUES (?, ?)"
                ))
                .await?,
                select_days: prepare(format!(
                    "SELECT day_bucket FROM {ks}.dead_letter_days WHERE shard = ? \
                     AND day_bucket >= ? AND day_bucket < ?"
                ))
                .await?,
                select_from: prepare(format!(
                    "SELECT {COLUMNS} FROM {ks}.dead_letters WHERE day_bucket = ? \
                     AND scheduled_time >= ? AND scheduled_time < ? LIMIT ?"
                ))
                .await?,
                select_after: prepare(format!(
                    "SELECT {COLUMNS} FROM {ks}.dead_letters WHERE day_bucket = ? \
                     AND (scheduled_time, ordering_id, uniqueness_key) > (?, ?, ?) \
                     AND (scheduled_time) < (?) LIMIT ?"
                ))
                .await?,
                select_one: prepare(format!(
                    "SELECT {COLUMNS} FROM {ks}.dead_letters WHERE {}",
                    read_by_key(
                        "day_bucket = ? AND scheduled_time = ? AND ordering_id = ?",
                        "uniqueness_key",
                        "scheduled_time, ordering_id, uniqueness_key",
                    )
                ))
                .await?,
                mark_redriven: prepare(format!(
                    "UPDATE {ks}.dead_letters SET redriven_at = ?, redrives = ? WHERE {KEY_MATCH}"
                ))
                .await?,
                delete: prepare(format!("DELETE FROM {ks}.dead_letters WHERE {KEY_MATCH}")).await?,
            })
        }
    }
}

/// `dead_letters` in memory, for unit tests, the simulation and the testing kit.
#[cfg(any(test, feature = "testing"))]
mod memory {
    use super::*;
    use crate::store::memory::MemoryStore;

    /// The table's rows, by task key.
    type Rows = std::collections::BTreeMap<TaskKey, DeadLetter>;

    // Read by the unit tests and the simulation.
    #[cfg_attr(not(test), allow(dead_code))]
    impl MemoryStore {
        /// Every dead letter, by task key.
        pub fn all_dead_letters(&self) -> Rows {
            self.lock().table::<Rows>().clone()
        }
    }

    impl DeadLetterStore for MemoryStore {
        fn add_dead_letter(&self, letter: DeadLetter) -> BoxFuture<'static, StoreResult<()>> {
            self.run("dead-letter write", move |s| {
                s.table::<Rows>().insert(letter.task.key(), letter);
            })
        }

        fn dead_letters(
            &self,
            filter: DeadLetterFilter,
            after: Option<TaskKey>,
            limit: usize,
        ) -> BoxFuture<'static, StoreResult<Vec<DeadLetter>>> {
            self.run("dead-letter list", move |s| {
                s.table::<Rows>()
                    .iter()
                    .filter(|(key, _)| after.as_ref().is_none_or(|after| *key > after))
                    .filter(|(key, _)| {
                        key.scheduled_time >= filter.from && key.scheduled_time < filter.to
                    })
                    .map(|(_, letter)| letter)
                    .filter(|letter| filter.admits(letter))
                    .take(limit)
                    .cloned()
                    .collect()
            })
        }

        fn dead_letter(&self, key: TaskKey) -> BoxFuture<'static, StoreResult<Option<DeadLetter>>> {
            self.run("dead-letter read", move |s| {
                s.table::<Rows>().get(&key).cloned()
            })
        }

        fn mark_redriven(
            &self,
            key: TaskKey,
            redrives: u32,
            at: DateTime<Utc>,
        ) -> BoxFuture<'static, StoreResult<()>> {
            self.run("dead-letter redrive mark", move |s| {
                if let Some(letter) = s.table::<Rows>().get_mut(&key) {
                    letter.redrives = redrives;
                    letter.redriven_at = Some(at);
                }
            })
        }

        fn remove_dead_letter(&self, key: TaskKey) -> BoxFuture<'static, StoreResult<()>> {
            self.run("dead-letter delete", move |s| {
                s.table::<Rows>().remove(&key);
            })
        }
    }
}
