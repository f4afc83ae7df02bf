//! Dead letters (`dead_letters`): the tasks that could not be done, kept for operators to
//! inspect, redrive or purge. A dead letter is keyed by its task's key, so recording it again (a
//! task recorded twice under at-least-once) overwrites it instead of adding a second one.

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
