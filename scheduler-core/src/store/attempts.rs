//! Attempt history (`task_attempts`): each call of a task, newest first, in a partition of
//! its own per task.
//!
//! The whole table in one place: its rows and [`AttemptStore`], its statements and
//! implementation on Cassandra (`cassandra`), its in-memory twin (`memory`).

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::TaskKey;

use super::{PartitionId, StoreResult};

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The handler succeeded.
    Succeeded,
    /// The handler failed and asked for a retry.
    Failed,
    /// The handler found the task invalid: not retried.
    Invalid,
}

impl AttemptOutcome {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Invalid => "invalid",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(text: &str) -> Option<AttemptOutcome> {
        match text {
            "succeeded" => Some(AttemptOutcome::Succeeded),
            "failed" => Some(AttemptOutcome::Failed),
            // (The spelling before task types.)
            "invalid" | "gave_up" => Some(AttemptOutcome::Invalid),
            _ => None,
        }
    }
}

/// One execution attempt of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// When the handler was called.
    pub started_at: DateTime<Utc>,
    /// When it returned.
    pub finished_at: DateTime<Utc>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The handler's error message, if any.
    pub error: Option<String>,
}

/// Attempt history (`task_attempts`), newest first.
pub trait AttemptStore: Send + Sync + 'static {
    /// The last `limit` attempts of a task, newest first.
    fn attempts(
        &self,
        key: TaskKey,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<AttemptRecord>>>;

    /// Appends one attempt to a task's history.
    fn record_attempt(
        &self,
        partition: PartitionId,
        key: TaskKey,
        attempt: AttemptRecord,
    ) -> BoxFuture<'static, StoreResult<()>>;
}

/// `task_attempts` on Cassandra.
#[cfg(feature = "node")]
mod cassandra {
    use std::sync::Arc;

    use chrono::{DateTime, Utc};
    use futures::future::BoxFuture;
    use futures::FutureExt;
    use scheduler_client::TaskKey;
    use scylla::statement::prepared::PreparedStatement;

    use super::{AttemptOutcome, AttemptRecord, AttemptStore};
    use crate::store::cassandra::rows::{limit_value, rows_of};
    use crate::store::cassandra::{CassandraStore, Preparing, TableStatements};
    use crate::store::{PartitionId, StoreError, StoreResult};

    /// The statements of `task_attempts`.
    struct AttemptStatements {
        select_attempts: PreparedStatement,
        insert_attempt: PreparedStatement,
    }

    impl TableStatements for AttemptStatements {
        async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
            let ks = on.keyspace;
            let prepare = |cql: String| on.prepare("prepare attempt statement", cql);
            let key_columns = "scheduled_time, ordering_id, uniqueness_key";
            Ok(AttemptStatements {
                select_attempts: prepare(format!(
                "SELECT attempt, started_at, finished_at, outcome, error FROM {ks}.task_attempts \
                 WHERE scheduled_time = ? AND ordering_id = ? AND uniqueness_key = ? LIMIT ?"
            ))
                .await?,
                insert_attempt: prepare(format!(
                "INSERT INTO {ks}.task_attempts ({key_columns}, attempt, partition_id, started_at, \
                 finished_at, outcome, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ))
                .await?,
            })
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
                        &inner
                            .statements::<AttemptStatements>()
                            .await?
                            .select_attempts,
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
                        &inner
                            .statements::<AttemptStatements>()
                            .await?
                            .insert_attempt,
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
}

/// `task_attempts` in memory.
#[cfg(any(test, feature = "testing"))]
mod memory {
    use futures::future::BoxFuture;

    use super::{AttemptRecord, AttemptStore};
    use crate::store::memory::MemoryStore;
    use crate::store::{PartitionId, StoreResult};
    use scheduler_client::TaskKey;

    impl AttemptStore for MemoryStore {
        fn attempts(
            &self,
            key: TaskKey,
            limit: usize,
        ) -> BoxFuture<'static, StoreResult<Vec<AttemptRecord>>> {
            self.run("attempts read", move |s| {
                let mut found: Vec<AttemptRecord> = s
                    .attempts
                    .iter()
                    .filter(|((_, k), _)| *k == key)
                    .flat_map(|(_, a)| a.iter().cloned())
                    .collect();
                found.sort_by_key(|a| std::cmp::Reverse(a.attempt));
                found.truncate(limit);
                found
            })
        }

        fn record_attempt(
            &self,
            partition: PartitionId,
            key: TaskKey,
            attempt: AttemptRecord,
        ) -> BoxFuture<'static, StoreResult<()>> {
            self.run("attempt write", move |s| {
                s.attempts
                    .entry((partition, key))
                    .or_default()
                    .push(attempt);
            })
        }
    }
}
