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

/// Records what the call did. A first attempt that ends the task is recorded by its status
/// alone (the usual case: one write per task less). Any other attempt follows a failure and
/// is recorded; a later tree that may find it reads the history to continue the attempt
/// numbers (see `TreeLease::may_have_earlier_attempts`).
pub(super) async fn record(run: &mut TaskRun, task: &Task, made: Made) -> Result<Next, Halt> {
    let Made {
        result,
        hold,
        started_at,
        output,
        _begun,
    } = made;
    // A call that gave up because its tree is stopping (as `StopReason` asks of a long call,
    // and as a remote call whose claim ended with its tree does) did not fail on its own: it
    // is not charged an attempt (rebalances would use up a long task's retries); the task
    // stays in the schedule and the next tree calls it again.
    // Nor is one that gave up because its orderingId's lease was lost (its renewal failed in
    // time: the store or a pause, not the task): it is checked and called again, after the
    // backoff, as the same attempt.
    let stopping = *run.stop.borrow();
    let lease_lost = hold.as_ref().is_some_and(|h| h.watch().borrow().lost);
    if let Err(TaskError::Retry { reason, .. }) = &result {
        if let Some(stop) = stopping {
            debug!(partition = run.partition, task = %run.key, ?stop, %reason,
                "the call gave up as its tree stopped; not an attempt, the next tree calls it again");
            return Err(Halt::Abandoned);
        }
        if lease_lost {
            debug!(partition = run.partition, task = %run.key, %reason,
                "the call gave up as its lease was lost; not an attempt, checked and called again");
            let delay = backoff(run, task);
            run.attempts = run.attempts.saturating_sub(1);
            return Ok(Next::RetryAfter(delay));
        }
    }
    run.last_error = result.as_ref().err().map(|e| e.reason().to_string());
    let (outcome, error) = match &result {
        Ok(()) => (AttemptOutcome::Succeeded, None),
        Err(TaskError::Retry { reason, .. }) => (AttemptOutcome::Failed, Some(reason.clone())),
        Err(TaskError::Invalid(reason)) => (AttemptOutcome::Invalid, Some(reason.clone())),
    };
    let limits = run.deps.settings.limits_for(&task.task_type);
    let exhausted = run.attempts > limits.max_task_retries;
    let retrying = matches!(result, Err(TaskError::Retry { .. })) && !exhausted;
    let mut phase = Phase::Recording(hold);
    if retrying || run.attempts > 1 {
        let attempt = AttemptRecord {
            attempt: run.attempts,
            started_at,
            finished_at: run.deps.clock.now(),
            outcome,
            error,
        };
        phase = record_attempt(run, phase, attempt).await?;
    }
    let (status, reason) = match result {
        Ok(()) => {
            let result = output.take_result();
            let record = status_record(run, TaskStatus::Completed, None, result);
            let outcome = record_final(run, phase, task, record, Some(&output)).await;
            return outcome.map(Next::Finished);
        }
        Err(TaskError::Invalid(reason)) => (TaskStatus::Dropped, reason),
        Err(TaskError::Retry { reason, .. }) if exhausted => {
            let (partition, key) = (run.partition, &run.key);
            let metrics = &run.deps.metrics;
            metrics.retries_exhausted(partition, key, run.attempts, &reason);
            (TaskStatus::Failed, reason)
        }
        Err(TaskError::Retry { reason, after }) => {
            let delay = after.unwrap_or_else(|| backoff(run, task));
            let (partition, key) = (run.partition, &run.key);
            let metrics = &run.deps.metrics;
            metrics.retry_scheduled(partition, key, run.attempts, &reason, delay);
            // (The retry checks again: an update meanwhile gives it its new data.)
            return Ok(Next::RetryAfter(delay));
        }
    };
    let record = status_record(run, status, Some(reason), None);
    let outcome = record_final(run, phase, task, record, Some(&output)).await;
    outcome.map(Next::Finished)
}

/// The wait before `task` is called again after its attempt `run.attempts` (its type's
/// backoff, with jitter).
fn backoff(run: &mut TaskRun, task: &Task) -> Duration {
    let limits = run.deps.settings.limits_for(&task.task_type);
    let (factor, max) = (limits.backoff_factor, limits.max_backoff);
    backoff_delay(run.attempts, factor, max, &mut run.rng)
}

/// The final status record of the task now.
pub(super) fn status_record(
    run: &TaskRun,
    status: TaskStatus,
    last_error: Option<String>,
    result: Option<serde_json::Value>,
) -> StatusRecord {
    StatusRecord {
        status,
        attempts: run.attempts,
        updated_at: run.deps.clock.now(),
        last_error,
        result,
        started_at: run.last_call_started,
    }
}

/// Records the final status, as owner, confirming ownership again before every retry of
/// the write, after the hooks' writes that come before it, and takes the task out of the
/// schedule in the same request; then tells the hooks.
pub(super) async fn record_final(
    run: &mut TaskRun,
    phase: Phase,
    task: &Task,
    record: StatusRecord,
    output: Option<&OutputSlot>,
) -> Result<ExecutionOutcome, Halt> {
    let hooks = Arc::clone(&run.deps.hooks);
    let (store, partition, key) = (
        run.deps.tables.finish.clone(),
        run.partition,
        run.key.clone(),
    );
    let mut steps = run.steps(phase);
    for hook in hooks.iter() {
        hook.at_final_record(&mut steps, task, &record, output)
            .await?;
    }
    // (The attempt is not repeated: only the record is retried.)
    steps
        .store_step("status write", true, || {
            store.finish(partition, key.clone(), record.clone())
        })
        .await?;
    drop(steps);
    // Only once the status is stored, so that nothing announces an unrecorded outcome.
    for hook in hooks.iter() {
        hook.finished(&run.key, &record);
    }
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
    run: &mut TaskRun,
    task: &Task,
    found: Found,
) -> Result<ExecutionOutcome, Halt> {
    let partition = run.partition;
    match &found {
        Found::Final(record) => {
            let hooks = Arc::clone(&run.deps.hooks);
            let mut steps = run.steps(Phase::Checking);
            for hook in hooks.iter() {
                hook.found_final(&mut steps, task, record).await?;
            }
            debug!(partition, task = %run.key, status = record.status.as_str(),
                "task already finished; not running it again");
        }
        Found::NotRun { why } => debug!(partition, task = %run.key, why, "not run"),
    }
    remove_from_schedule(run);
    Ok(ExecutionOutcome::AlreadyFinished)
}

/// Appends the attempt to the task's history, as owner (best effort: a failed write is
/// logged, the history is not what keeps a task from being lost).
async fn record_attempt(
    run: &mut TaskRun,
    phase: Phase,
    attempt: AttemptRecord,
) -> Result<Phase, Halt> {
    let (store, partition, key) = (
        run.deps.tables.attempts.clone(),
        run.partition,
        run.key.clone(),
    );
    let mut steps = run.steps(phase);
    steps.owner_of_outcome().await?;
    if let Err(e) = store.record_attempt(partition, key.clone(), attempt).await {
        warn!(partition, task = %key, error = %e, "attempt history not recorded");
    }
    Ok(steps.into_phase())
}

/// Deletes the finished task from the schedule (an optimisation: a row left behind is
/// skipped by the status check when loaded again).
fn remove_from_schedule(run: &TaskRun) {
    let delete = (run.deps.tables.schedule).remove_scheduled(run.partition, run.key.clone());
    let (partition, key) = (run.partition, run.key.to_string());
    tokio::spawn(async move {
        if let Err(e) = delete.await {
            warn!(partition, task = %key, error = %e, "finished task left in the schedule (it will be skipped when loaded)");
        }
    });
}
