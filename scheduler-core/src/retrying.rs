//! The retrying set: the tasks of this node that wait for their next attempt after a retryable
//! failure, with when it is due and why the last one failed. A [`TaskHook`] (it remembers a
//! task at [`retrying`](TaskHook::retrying) and forgets it when its run [`ended`](TaskHook::ended)),
//! read by the admin API (`GET /api/v1/tasks/retrying`) and the dashboard's pending list.
//!
//! Only memory: a retry waits in its task's run (see `actors::task_lifecycle`), so the set is
//! this node's, holds at most the tasks in its trees' memory, and is empty after a restart until
//! the tasks fail again. The store keeps each attempt (the task's history) either way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use scheduler_client::{Task, TaskKey};

use crate::hooks::{RetryPlanned, TaskHook};
use crate::store::PartitionId;

/// The longest error the set keeps of a task (the attempt's history has it whole).
const ERROR_BYTES: usize = 1024;

/// A task waiting for its next attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retrying {
    /// The task's partition.
    pub partition: PartitionId,
    /// The task's type.
    pub task_type: String,
    /// The attempts made so far.
    pub attempts: u32,
    /// When its next attempt is due.
    pub next_attempt_at: DateTime<Utc>,
    /// Why the last attempt failed (its first KiB).
    pub error: Option<String>,
}

/// This node's retrying tasks (cheap to clone: the clones share the set).
#[derive(Debug, Clone, Default)]
pub struct RetryingTasks {
    tasks: Arc<Mutex<HashMap<TaskKey, Retrying>>>,
}

impl RetryingTasks {
    /// The tasks waiting for a retry now, the soonest due first (then by key).
    pub fn list(&self) -> Vec<(TaskKey, Retrying)> {
        let tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        let mut listed: Vec<_> = tasks.iter().map(|(k, r)| (k.clone(), r.clone())).collect();
        drop(tasks);
        listed.sort_by(|(a, ra), (b, rb)| (ra.next_attempt_at, a).cmp(&(rb.next_attempt_at, b)));
        listed
    }

    /// The task's retry, if it waits for one.
    pub fn of(&self, key: &TaskKey) -> Option<Retrying> {
        let tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        tasks.get(key).cloned()
    }
}

impl TaskHook for RetryingTasks {
    fn retrying(&self, partition: PartitionId, task: &Task, retry: &RetryPlanned) {
        let entry = Retrying {
            partition,
            task_type: task.task_type.clone(),
            attempts: retry.attempt,
            next_attempt_at: retry.at,
            error: retry.error.clone().map(|mut e| {
                crate::outcome::cut_error(&mut e, ERROR_BYTES);
                e
            }),
        };
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        tasks.insert(task.key(), entry);
    }

    fn ended(&self, _partition: PartitionId, key: &TaskKey) {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        tasks.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    #[test]
    fn a_task_is_in_the_set_from_its_planned_retry_until_its_run_ends() {
        let set = RetryingTasks::default();
        let t0 = DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let a = Task::new("a", t0, "1", Default::default()).of_type("email");
        let b = Task::new("b", t0, "1", Default::default());
        let plan = |secs, error: &str| RetryPlanned {
            attempt: 1,
            at: t0 + TimeDelta::seconds(secs),
            error: Some(error.to_string()),
        };
        set.retrying(2, &a, &plan(30, "smtp down"));
        set.retrying(1, &b, &plan(10, &"é".repeat(2000)));
        let listed = set.list();
        assert_eq!(
            listed
                .iter()
                .map(|(k, _)| k.ordering_id.as_str())
                .collect::<Vec<_>>(),
            ["b", "a"],
            "the soonest first"
        );
        let a_retry = set.of(&a.key()).unwrap_or_else(|| panic!("a retries"));
        assert_eq!(a_retry.task_type, "email");
        assert_eq!(a_retry.partition, 2);
        assert_eq!(a_retry.error.as_deref(), Some("smtp down"));
        let long = set.of(&b.key()).and_then(|r| r.error).unwrap_or_default();
        assert!(
            long.len() == ERROR_BYTES && long.ends_with('é'),
            "{}",
            long.len()
        );
        // A second failure moves its next attempt; the end of its run forgets it.
        set.retrying(
            2,
            &a,
            &RetryPlanned {
                attempt: 2,
                ..plan(90, "again")
            },
        );
        assert_eq!(set.of(&a.key()).map(|r| r.attempts), Some(2));
        set.ended(2, &a.key());
        set.ended(1, &b.key());
        assert!(set.list().is_empty());
    }
}
