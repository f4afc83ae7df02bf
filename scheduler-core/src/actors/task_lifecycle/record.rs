//! Step 5, record as owner: what a call did, or a final status found or decided before the
//! call; then retry or finish.

use std::sync::Arc;
use std::time::Duration;

use scheduler_client::Task;
use tracing::{debug, warn};

use super::run::{Phase, TaskRun};
use super::state::Made;
use super::status::Found;
use crate::handler::{OutputSlot, TaskError};
use crate::hooks::Halt;
use crate::outcome::ExecutionOutcome;
use crate::retry::backoff_delay;
use crate::store::{AttemptOutcome, AttemptRecord, StatusRecord, TaskStatus};

/// What follows a recorded attempt.
pub(super) enum Next {
    /// The task is final (its status recorded).
    Finished(ExecutionOutcome),
    /// The task is tried again after this backoff.
    RetryAfter(Duration),
}

impl TaskRun {
    /// Records what the call did. A first attempt that ends the task is recorded by its status
    /// alone (the usual case: one write per task less). Any other attempt follows a failure and
    /// is recorded; a later tree that may find it reads the history to continue the attempt
    /// numbers (see `TreeLease::may_have_earlier_attempts`).
    pub(super) async fn record(&mut self, task: &Task, made: Made) -> Result<Next, Halt> {
        let Made {
            result,
            hold,
            started_at,
            output,
            _begun,
        } = made;
        let (outcome, error) = match &result {
            Ok(()) => (AttemptOutcome::Succeeded, None),
            Err(TaskError::Retry { reason, .. }) => (AttemptOutcome::Failed, Some(reason.clone())),
            Err(TaskError::Invalid(reason)) => (AttemptOutcome::Invalid, Some(reason.clone())),
        };
        let limits = self.deps.settings.limits_for(&task.task_type);
        let exhausted = self.attempts > limits.max_task_retries;
        let retrying = matches!(result, Err(TaskError::Retry { .. })) && !exhausted;
        let mut phase = Phase::Recording(hold);
        if retrying || self.attempts > 1 {
            let attempt = AttemptRecord {
                attempt: self.attempts,
                started_at,
                finished_at: self.deps.clock.now(),
                outcome,
                error,
            };
            phase = self.record_attempt(phase, attempt).await?;
        }
        let (status, reason) = match result {
            Ok(()) => {
                let result = output.take_result();
                let record = self.status_record(TaskStatus::Completed, None, result);
                let outcome = self.record_final(phase, task, record, Some(&output)).await;
                return outcome.map(Next::Finished);
            }
            Err(TaskError::Invalid(reason)) => (TaskStatus::Dropped, reason),
            Err(TaskError::Retry { reason, .. }) if exhausted => {
                let (partition, key) = (self.partition, &self.key);
                let metrics = &self.deps.metrics;
                metrics.retries_exhausted(partition, key, self.attempts, &reason);
                (TaskStatus::Failed, reason)
            }
            Err(TaskError::Retry { reason, after }) => {
                let delay = after.unwrap_or_else(|| {
                    let (factor, max) = (limits.backoff_factor, limits.max_backoff);
                    backoff_delay(self.attempts, factor, max, &mut self.rng)
                });
                let (partition, key) = (self.partition, &self.key);
                let metrics = &self.deps.metrics;
                metrics.retry_scheduled(partition, key, self.attempts, &reason, delay);
                // (The retry checks again: an update meanwhile gives it its new data.)
                return Ok(Next::RetryAfter(delay));
            }
        };
        let record = self.status_record(status, Some(reason), None);
        let outcome = self.record_final(phase, task, record, Some(&output)).await;
        outcome.map(Next::Finished)
    }

    /// The final status record of the task now.
    pub(super) fn status_record(
        &self,
        status: TaskStatus,
        last_error: Option<String>,
        result: Option<serde_json::Value>,
    ) -> StatusRecord {
        StatusRecord {
            status,
            attempts: self.attempts,
            updated_at: self.deps.clock.now(),
            last_error,
            result,
        }
    }

    /// Records the final status, as owner, confirming ownership again before every retry of
    /// the write, after the hooks' writes that come before it; then takes the task out of the
    /// schedule and tells the hooks.
    pub(super) async fn record_final(
        &mut self,
        phase: Phase,
        task: &Task,
        record: StatusRecord,
        output: Option<&OutputSlot>,
    ) -> Result<ExecutionOutcome, Halt> {
        let hooks = Arc::clone(&self.deps.hooks);
        let (store, partition, key) = (self.deps.store.clone(), self.partition, self.key.clone());
        let mut steps = self.steps(phase);
        for hook in hooks.iter() {
            hook.at_final_record(&mut steps, task, &record, output)
                .await?;
        }
        // (The attempt is not repeated: only the record is retried.)
        steps
            .store_step("status write", true, || {
                store.record_status(partition, key.clone(), record.clone())
            })
            .await?;
        drop(steps);
        // Only once the status is stored, so that nothing announces an unrecorded outcome.
        for hook in hooks.iter() {
            hook.finished(&self.key, &record);
        }
        self.remove_from_schedule();
        Ok(match record.status {
            TaskStatus::Completed => ExecutionOutcome::Completed,
            TaskStatus::Failed => ExecutionOutcome::Failed,
            TaskStatus::Dropped => ExecutionOutcome::Dropped,
            // Only a hook before the call records this, never an execution.
            TaskStatus::Cancelled => ExecutionOutcome::AlreadyFinished,
        })
    }

    /// A task found finished by its status check (or that a hook said not to run): out of the
    /// schedule, not run. A final status found tells the hooks first (doing again what may
    /// have been cut off before it).
    pub(super) async fn found_finished(
        &mut self,
        task: &Task,
        found: Found,
    ) -> Result<ExecutionOutcome, Halt> {
        let partition = self.partition;
        match &found {
            Found::Final(record) => {
                let hooks = Arc::clone(&self.deps.hooks);
                let mut steps = self.steps(Phase::Checking);
                for hook in hooks.iter() {
                    hook.found_final(&mut steps, task, record).await?;
                }
                debug!(partition, task = %self.key, status = record.status.as_str(),
                    "task already finished; not running it again");
            }
            Found::NotRun { why } => debug!(partition, task = %self.key, why, "not run"),
        }
        self.remove_from_schedule();
        Ok(ExecutionOutcome::AlreadyFinished)
    }

    /// Appends the attempt to the task's history, as owner (best effort: a failed write is
    /// logged, the history is not what keeps a task from being lost).
    async fn record_attempt(
        &mut self,
        phase: Phase,
        attempt: AttemptRecord,
    ) -> Result<Phase, Halt> {
        let (store, partition, key) = (self.deps.store.clone(), self.partition, self.key.clone());
        let mut steps = self.steps(phase);
        steps.owner_of_outcome().await?;
        if let Err(e) = store.record_attempt(partition, key.clone(), attempt).await {
            warn!(partition, task = %key, error = %e, "attempt history not recorded");
        }
        Ok(steps.into_phase())
    }

    /// Deletes the finished task from the schedule (an optimisation: a row left behind is
    /// skipped by the status check when loaded again).
    fn remove_from_schedule(&self) {
        let delete = self
            .deps
            .store
            .remove_scheduled(self.partition, self.key.clone());
        let (partition, key) = (self.partition, self.key.to_string());
        tokio::spawn(async move {
            if let Err(e) = delete.await {
                warn!(partition, task = %key, error = %e, "finished task left in the schedule (it will be skipped when loaded)");
            }
        });
    }
}
