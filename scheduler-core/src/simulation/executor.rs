//! The simulated user executor: each task's plan (succeed, fail, give up, panic, hang) and
//! the log of every call, shared by all nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_client::{Task, TaskKey};
use tokio::time::Instant;

use super::pausable_store::Pause;
use crate::clock::{Clock, TokioClock};
use crate::handler::{GroupOutcome, TaskContext, TaskError, TaskHandler};
use crate::store::TaskStatus;

/// What a task's calls do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    Succeed(Duration),
    /// Fail (retryably) this many times, then succeed.
    FailTimes(usize),
    FailAlways,
    GiveUp,
    PanicOnce,
    HangOnce,
}

impl Plan {
    pub(super) fn final_status(self) -> TaskStatus {
        match self {
            Plan::FailAlways => TaskStatus::Failed,
            Plan::GiveUp => TaskStatus::Dropped,
            _ => TaskStatus::Completed,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Call {
    pub(super) node: usize,
    pub(super) key: TaskKey,
    pub(super) version: Option<i64>,
    pub(super) started: Instant,
    pub(super) started_wall: DateTime<Utc>,
    pub(super) ended: Option<Instant>,
    /// The call returned success.
    pub(super) succeeded: bool,
    /// The task's limit key.
    pub(super) limit_key: Option<String>,
}

/// What every node's executor shares: the plans and the log of calls.
pub(super) struct Shared {
    pub(super) clock: TokioClock,
    pub(super) plans: Mutex<BTreeMap<TaskKey, Plan>>,
    pub(super) calls: Mutex<Vec<Call>>,
    /// How often each task's dead-letter hook was called.
    pub(super) dead_lettered: Mutex<BTreeMap<TaskKey, usize>>,
    /// Each successful join call: the join task and the group it was given.
    pub(super) joins: Mutex<Vec<(TaskKey, GroupOutcome)>>,
    /// Groups whose join's first call gives up (a dead letter for the operator to redrive).
    pub(super) failing_joins: Mutex<BTreeSet<String>>,
    /// Schedules whose next tick gives up (a dead letter for the operator to redrive).
    pub(super) failing_ticks: Mutex<BTreeSet<String>>,
    /// The ticks that gave up: every call of them gives up (as a `GiveUp` plan does; a call
    /// made again once its tree could not record the first gives up again).
    pub(super) given_up_ticks: Mutex<BTreeSet<TaskKey>>,
    /// What remote workers sent and met ([`super::remote`]).
    pub(super) remote: Mutex<super::remote::Log>,
}

impl Shared {
    /// A handler heard of the dead letter of `task`.
    pub(super) fn heard_of_dead_letter(&self, task: TaskKey) {
        *(self.dead_lettered.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .entry(task)
            .or_default() += 1;
    }

    /// Logs the start of a call of `task` on `node`: its index in the log, and how many calls
    /// of the task were logged before it.
    pub(super) fn log_call(&self, node: usize, task: &Task) -> (usize, usize) {
        let key = task.key();
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        let previous = calls.iter().filter(|c| c.key == key).count();
        calls.push(Call {
            node,
            key,
            version: task.task_data.get("v").and_then(serde_json::Value::as_i64),
            started: Instant::now(),
            started_wall: self.clock.now(),
            ended: None,
            succeeded: false,
            limit_key: task.limit_key.clone(),
        });
        (calls.len() - 1, previous)
    }

    /// The call logged at `index` returned success.
    pub(super) fn succeeded(&self, index: usize) {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(call) = calls.get_mut(index) {
            call.succeeded = true;
        }
    }

    /// The plan of `key`'s calls.
    pub(super) fn plan_of(&self, key: &TaskKey) -> Plan {
        (self.plans.lock().unwrap_or_else(PoisonError::into_inner))
            .get(key)
            .copied()
            .unwrap_or(Plan::Succeed(Duration::ZERO))
    }

    pub(super) fn calls(&self) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

pub(super) struct SimExecutor {
    pub(super) node: usize,
    pub(super) shared: Arc<Shared>,
    /// A paused process's call returns only once it runs again.
    pub(super) pause: Pause,
}

pub(super) struct EndOnDrop {
    pub(super) shared: Arc<Shared>,
    pub(super) index: usize,
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        let mut calls = self
            .shared
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(call) = calls.get_mut(self.index) {
            call.ended = Some(Instant::now());
        }
    }
}

impl TaskHandler for SimExecutor {
    async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        let key = task.key();
        let (index, previous) = self.shared.log_call(self.node, task);
        let _end = EndOnDrop {
            shared: Arc::clone(&self.shared),
            index,
        };
        let plan = self.shared.plan_of(&key);
        let result = match plan {
            Plan::Succeed(work) => {
                tokio::time::sleep(work).await;
                Ok(())
            }
            Plan::FailTimes(n) if previous >= n => Ok(()),
            Plan::FailTimes(_) | Plan::FailAlways => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Err(TaskError::retry("planned failure"))
            }
            Plan::GiveUp => Err(TaskError::invalid("planned give-up")),
            Plan::PanicOnce if previous == 0 => panic!("planned panic"),
            Plan::HangOnce if previous == 0 => std::future::pending().await,
            Plan::PanicOnce | Plan::HangOnce => Ok(()),
        };
        self.pause.resumed().await;
        if let (Ok(()), Some(member)) = (&result, &task.group) {
            let _ = ctx.set_result(serde_json::json!({ "index": member.index }));
        }
        if result.is_ok() {
            let spawn = task
                .task_data
                .get("spawn")
                .and_then(serde_json::Value::as_u64);
            for i in 1..=spawn.unwrap_or(0) {
                let child = super::groups::child_of(&key, i);
                ctx.spawn(super::workload::versioned(&child, 1))
                    .map_err(|e| TaskError::invalid(e.to_string()))?;
            }
        }
        if result.is_ok() {
            self.shared.succeeded(index);
        }
        result
    }

    /// A join is a call like any other (logged, checked for overlaps and runs after its final
    /// status); what it was given is kept for the group checks.
    async fn group_finished(
        &self,
        task: &Task,
        group: &GroupOutcome,
        ctx: &TaskContext,
    ) -> Result<(), TaskError> {
        let failing = (task.join_of.as_ref()).is_some_and(|id| {
            (self.shared.failing_joins.lock())
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id)
        });
        if failing {
            (self.shared.plans.lock())
                .unwrap_or_else(PoisonError::into_inner)
                .insert(task.key(), Plan::GiveUp);
        }
        self.execute(task, ctx).await?;
        self.shared
            .joins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((task.key(), group.clone()));
        Ok(())
    }

    async fn dead_lettered(&self, letter: &crate::store::DeadLetter) {
        self.shared.heard_of_dead_letter(letter.task.key());
    }
}
