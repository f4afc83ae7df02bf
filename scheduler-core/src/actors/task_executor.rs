//! TaskExecutorActor: the blueprint's short-lived TaskExecutor actor (named so to keep it apart
//! from the user's [`crate::TaskExecutor`] trait). It owns one task from dispatch to outcome:
//! it checks whether the task already finished, runs the user's executor on the pool, records
//! every attempt, retries retryable failures with exponential backoff and jitter, and records
//! the final state (completed, failed after the last retry, or dropped when the executor gives up).

use std::time::Duration;

use actix::{
    Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, Message, Recipient,
    SpawnHandle, WrapFuture,
};
use chrono::{DateTime, Utc};
use scheduler_client::{Task, TaskKey};
use tracing::{debug, info, warn};

use super::partition_ownership::{CheckOwnership, Ownership};
use super::task_status_tracker::{FetchTaskStatus, MarkTaskFinished, RecordAttempt, RemoveTask};
use super::{ExecutionLinks, PartitionDeps};
use crate::executor::TaskError;
use crate::retry::backoff_delay;
use crate::store::{AttemptOutcome, AttemptRecord, PartitionId, StatusRecord, TaskStatus};

/// First wait before retrying a store operation (status read or write) that failed.
const STORE_RETRY_BASE: Duration = Duration::from_millis(500);

/// How a task's execution ended, as reported to its OrderingExecutor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionOutcome {
    /// The executor succeeded and completion was recorded.
    Completed,
    /// Every retry failed; recorded as failed.
    Failed,
    /// The executor gave up; recorded as dropped.
    Dropped,
    /// The task had already finished (status found); it was not run.
    AlreadyFinished,
    /// The partition is draining: the task was left for the next owner to run.
    Abandoned,
    /// Another tree claimed the partition: the task was not run (or its outcome not recorded)
    /// here, and is left for the owner.
    Fenced,
}

/// Reported to the OrderingExecutor when the task is done with, whatever the outcome.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct TaskExecuted {
    /// The task.
    pub key: TaskKey,
    /// How it ended.
    pub outcome: ExecutionOutcome,
}

/// Sent while the partition drains: do not start another attempt; finish as soon as the current
/// step allows.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct AbandonRetries;

/// Runs one task to its outcome.
pub struct TaskExecutorActor {
    partition: PartitionId,
    task: Task,
    key: TaskKey,
    deps: PartitionDeps,
    links: ExecutionLinks,
    report_to: Recipient<TaskExecuted>,
    attempts: u32,
    store_failures: u32,
    executing: bool,
    abandon: bool,
    pending_retry: Option<SpawnHandle>,
    /// The outcome to record, once decided.
    final_status: Option<(TaskStatus, Option<String>)>,
    rng: fastrand::Rng,
    span: tracing::Span,
}

impl TaskExecutorActor {
    /// An actor for `task`; it starts working as soon as it is started.
    pub fn new(
        partition: PartitionId,
        task: Task,
        deps: PartitionDeps,
        links: ExecutionLinks,
        report_to: Recipient<TaskExecuted>,
    ) -> Self {
        let key = task.key();
        let span = tracing::info_span!(
            "task",
            partition,
            ordering_id = %key.ordering_id,
            uniqueness_key = %key.uniqueness_key,
            scheduled_time = %scheduler_client::wire::format_time(key.scheduled_time),
        );
        TaskExecutorActor {
            partition,
            task,
            key,
            deps,
            links,
            report_to,
            attempts: 0,
            store_failures: 0,
            executing: false,
            abandon: false,
            pending_retry: None,
            final_status: None,
            rng: fastrand::Rng::new(),
            span,
        }
    }

    fn check_status(&mut self, ctx: &mut Context<Self>) {
        let request = self.links.tracker.send(FetchTaskStatus(self.key.clone()));
        ctx.spawn(request.into_actor(self).map(|reply, act, ctx| match reply {
            Ok(Ok(Some(status))) => {
                debug!(partition = act.partition, task = %act.key, status = status.status.as_str(), "task already finished; not running it again");
                act.links.tracker.do_send(RemoveTask(act.key.clone()));
                act.finish(ExecutionOutcome::AlreadyFinished, ctx);
            }
            Ok(Ok(None)) => {
                act.store_failures = 0;
                act.attempt(ctx);
            }
            Ok(Err(e)) => act.retry_store_step(ctx, &e.to_string(), Self::check_status),
            Err(e) => act.retry_store_step(ctx, &e.to_string(), Self::check_status),
        }));
    }

    /// Runs `step` if the tree still owns the partition; finishes as fenced if it does not.
    fn as_owner(&mut self, ctx: &mut Context<Self>, step: fn(&mut Self, &mut Context<Self>)) {
        let request = self.links.ownership.send(CheckOwnership);
        ctx.spawn(request.into_actor(self).map(move |reply, act, ctx| {
            match reply {
                Ok(Ok(Ownership::Owner)) => step(act, ctx),
                Ok(Ok(Ownership::Fenced)) => {
                    warn!(partition = act.partition, task = %act.key, "partition owned by a newer tree: task left to it");
                    act.finish(ExecutionOutcome::Fenced, ctx);
                }
                Ok(Err(e)) => act.retry_store_step(ctx, &e.to_string(), move |act, ctx| {
                    act.as_owner(ctx, step)
                }),
                Err(e) => act.retry_store_step(ctx, &e.to_string(), move |act, ctx| {
                    act.as_owner(ctx, step)
                }),
            }
        }));
    }

    /// Starts an attempt once ownership is confirmed.
    fn attempt(&mut self, ctx: &mut Context<Self>) {
        self.pending_retry = None;
        if self.abandon {
            self.finish(ExecutionOutcome::Abandoned, ctx);
            return;
        }
        self.as_owner(ctx, Self::run_attempt);
    }

    fn run_attempt(&mut self, ctx: &mut Context<Self>) {
        if self.abandon {
            self.finish(ExecutionOutcome::Abandoned, ctx);
            return;
        }
        self.executing = true;
        self.attempts += 1;
        let started_at = self.deps.clock.now();
        let delay_ms = (started_at - self.key.scheduled_time).num_milliseconds();
        debug!(partition = self.partition, task = %self.key, attempt = self.attempts, delay_ms, "executing task");
        let run = self.deps.pool.run(self.task.clone(), self.span.clone());
        let clock_started = std::time::Instant::now();
        ctx.spawn(run.into_actor(self).map(move |result, act, ctx| {
            let first_delay = (act.attempts == 1).then(|| {
                (started_at - act.key.scheduled_time)
                    .to_std()
                    .unwrap_or_default()
            });
            act.deps
                .metrics
                .attempt(act.partition, clock_started.elapsed(), first_delay);
            act.attempt_finished(result, started_at, ctx)
        }));
    }

    fn attempt_finished(
        &mut self,
        result: Result<(), TaskError>,
        started_at: DateTime<Utc>,
        ctx: &mut Context<Self>,
    ) {
        self.executing = false;
        let (outcome, error) = match &result {
            Ok(()) => (AttemptOutcome::Succeeded, None),
            Err(TaskError::Retry(reason)) => (AttemptOutcome::Failed, Some(reason.clone())),
            Err(TaskError::GiveUp(reason)) => (AttemptOutcome::GaveUp, Some(reason.clone())),
        };
        self.links.tracker.do_send(RecordAttempt {
            key: self.key.clone(),
            attempt: AttemptRecord {
                attempt: self.attempts,
                started_at,
                finished_at: self.deps.clock.now(),
                outcome,
                error: error.clone(),
            },
        });
        match result {
            Ok(()) => self.record_final(TaskStatus::Completed, None, ctx),
            Err(TaskError::GiveUp(reason)) => {
                warn!(partition = self.partition, task = %self.key, attempt = self.attempts, %reason, "executor gave up; task dropped");
                self.record_final(TaskStatus::Dropped, Some(reason), ctx);
            }
            Err(TaskError::Retry(reason))
                if self.attempts > self.deps.settings.max_task_retries =>
            {
                warn!(partition = self.partition, task = %self.key, attempts = self.attempts, %reason, "retries exhausted; task failed");
                self.deps.metrics.retries_exhausted(self.partition);
                self.record_final(TaskStatus::Failed, Some(reason), ctx);
            }
            Err(TaskError::Retry(reason)) => {
                if self.abandon {
                    self.finish(ExecutionOutcome::Abandoned, ctx);
                    return;
                }
                let settings = &self.deps.settings;
                let delay = backoff_delay(
                    self.attempts,
                    settings.backoff_factor,
                    settings.max_backoff,
                    &mut self.rng,
                );
                info!(partition = self.partition, task = %self.key, attempt = self.attempts, %reason, retry_in_ms = delay.as_millis() as u64, "task failed; retry scheduled");
                self.deps.metrics.retry_scheduled(self.partition);
                self.pending_retry = Some(ctx.run_later(delay, |act, ctx| act.attempt(ctx)));
            }
        }
    }

    /// Records the final state (only as the partition's owner), then finishes.
    fn record_final(
        &mut self,
        status: TaskStatus,
        last_error: Option<String>,
        ctx: &mut Context<Self>,
    ) {
        self.final_status = Some((status, last_error));
        self.as_owner(ctx, Self::write_final);
    }

    fn write_final(&mut self, ctx: &mut Context<Self>) {
        let Some((status, last_error)) = self.final_status.clone() else {
            return;
        };
        let record = StatusRecord {
            status,
            attempts: self.attempts,
            updated_at: self.deps.clock.now(),
            last_error: last_error.clone(),
        };
        let request = self.links.tracker.send(MarkTaskFinished {
            key: self.key.clone(),
            record,
        });
        ctx.spawn(request.into_actor(self).map(move |reply, act, ctx| {
            let failure = match reply {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(e) => Some(e.to_string()),
            };
            match failure {
                None => {
                    act.links.tracker.do_send(RemoveTask(act.key.clone()));
                    let outcome = match status {
                        TaskStatus::Completed => ExecutionOutcome::Completed,
                        TaskStatus::Failed => ExecutionOutcome::Failed,
                        TaskStatus::Dropped => ExecutionOutcome::Dropped,
                        // Only a cancellation records this, never an execution.
                        TaskStatus::Cancelled => ExecutionOutcome::AlreadyFinished,
                    };
                    act.finish(outcome, ctx);
                }
                // The attempt is not repeated: only the record is retried.
                Some(reason) => act.retry_store_step(ctx, &reason, Self::write_final),
            }
        }));
    }

    /// Retries a store step after a capped exponential wait, unless the partition is draining.
    fn retry_store_step(
        &mut self,
        ctx: &mut Context<Self>,
        reason: &str,
        step: impl FnOnce(&mut Self, &mut Context<Self>) + 'static,
    ) {
        if self.abandon {
            self.finish(ExecutionOutcome::Abandoned, ctx);
            return;
        }
        self.store_failures += 1;
        let delay = crate::retry::exponential_period(
            self.store_failures,
            STORE_RETRY_BASE,
            self.deps.settings.max_backoff,
        );
        warn!(partition = self.partition, task = %self.key, %reason, retry_in_ms = delay.as_millis() as u64, "task status store unavailable; retrying");
        self.pending_retry = Some(ctx.run_later(delay, step));
    }

    fn finish(&mut self, outcome: ExecutionOutcome, ctx: &mut Context<Self>) {
        self.deps.metrics.executed(self.partition, outcome);
        debug!(partition = self.partition, task = %self.key, ?outcome, attempts = self.attempts, "task done");
        self.report_to.do_send(TaskExecuted {
            key: self.key.clone(),
            outcome,
        });
        ctx.stop();
    }
}

impl Actor for TaskExecutorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.check_status(ctx);
    }
}

impl Handler<AbandonRetries> for TaskExecutorActor {
    type Result = ();

    fn handle(&mut self, _: AbandonRetries, ctx: &mut Context<Self>) {
        self.abandon = true;
        if !self.executing {
            if let Some(handle) = self.pending_retry.take() {
                ctx.cancel_future(handle);
                self.finish(ExecutionOutcome::Abandoned, ctx);
            }
        }
    }
}
