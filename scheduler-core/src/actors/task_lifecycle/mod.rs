//! The life of one task, from dispatch to outcome (the blueprint's short-lived TaskExecutor
//! actor), as steps that read top to bottom; features attach at the hook points of
//! [`crate::hooks`] and are named nowhere here. Every step and its invariant, in order:
//!
//! 1. **Owner and predecessors.** The tree's claim has completed (an ownership check), and no
//!    earlier tree of the partition still runs a call of this orderingId (its lease entry is
//!    gone: see [`crate::lease`]).
//! 2. **Check** (`check::check`). The orderingId's entry in the tree's running-task lease
//!    is made durable, then ownership is read after it and after the task entered the tree (a
//!    stale tree is fenced here; a newer one waits at 1). Meanwhile the status is read with what
//!    the hooks read beside it: a task with a final status, or one a hook says not to run, is
//!    not run (earlier trees recorded their outcomes before 1 let the task on, and a newer
//!    tree's fences this one). The task arms the tree's [`CancelGate`] first, so a cancel
//!    applied after the read is seen too. A task whose type has no handler here, or that a hook
//!    holds back, waits without an attempt and is checked again.
//! 3. **Before the call** (`check::before_call`): the hooks may add to the call's context,
//!    or finish the task instead (its status recorded as a call's outcome is).
//! 4. **Time, slot and call** (`call::call`). The task was dispatched `dispatch_lead`
//!    before its time, so 1-3 are done by then: on the pool's runtime it waits for its time,
//!    then a slot, then is called, if the checks still hold: its lease entry stayed live
//!    without a break (no newer tree can have started the task), no cancel or update reached
//!    it, and no hook holds it back now; else it is checked again. A slot had long after the
//!    task's time reads the status again first. The call keeps its slot and lease entry until
//!    it returns, even if this function is dropped with its tree, and counts as begun in the
//!    cancel gate until its outcome is recorded.
//! 5. **Record, as owner** (`record::record`). A retryable failure records the attempt (a
//!    later tree continues the attempt numbers) and is retried from 2 after its backoff; one
//!    returned while the tree stops is abandoned instead, and one returned once the lease was
//!    lost is retried as the same attempt (neither failed on its own). A
//!    final outcome records its attempt (none for a first attempt: the status says it all),
//!    then, after the hooks' [`at_final_record`](crate::hooks::TaskHook::at_final_record), its
//!    final status; each write only after ownership is confirmed, and again before every retry.
//!
//! Before the call, the tree's stop signal (revoke, rebuild, fence) abandons the task at once:
//! it stays in Cassandra for the next tree. After the call, the outcome is recorded if the tree
//! still owns the partition.

mod call;
mod check;
mod record;
mod run;
mod state;
mod status;

use scheduler_client::trace::parse_trace_parent;
use scheduler_client::Task;
use tracing::{debug, info, Instrument};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::RunDeps;
use crate::hooks::{Halt, RetryPlanned, TaskHook};
use crate::in_flight::Pin;
use crate::outcome::ExecutionOutcome;
use crate::store::PartitionId;
use record::Next;
pub use run::ExecutionLinks;
use run::{Phase, TaskRun};
use state::Step;

impl From<Halt> for ExecutionOutcome {
    fn from(halt: Halt) -> Self {
        match halt {
            Halt::Abandoned => ExecutionOutcome::Abandoned,
            Halt::Fenced => ExecutionOutcome::Fenced,
        }
    }
}

/// Runs `task` to its outcome in the tree of `links`; `pin` keeps the partition's low-water
/// mark at or before the task until it is final, unless the mark lists it.
pub(crate) async fn run_task(
    partition: PartitionId,
    task: Task,
    pin: Option<Pin>,
    deps: RunDeps,
    links: ExecutionLinks,
) -> ExecutionOutcome {
    let key = task.key();
    // OpenTelemetry's messaging conventions: the processing of a message, linked to the
    // context that produced it (a link, not a parent: the task may run hours later, from
    // Cassandra, on another node). Without an OpenTelemetry layer the link is a no-op.
    let span = tracing::info_span!(
        "task",
        otel.name = "process",
        partition,
        task_type = %task.task_type,
        ordering_id = %key.ordering_id,
        uniqueness_key = %key.uniqueness_key,
        scheduled_time = %scheduler_client::wire::format_time(key.scheduled_time),
        otel.kind = "consumer",
        messaging.system = "kafka",
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.destination.name = %deps.topic,
        messaging.destination.partition.id = partition,
        messaging.kafka.message.key = %key.ordering_id,
        outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_message = tracing::field::Empty,
    );
    if let Some(producer) = task.trace_parent.as_deref().and_then(parse_trace_parent) {
        span.add_link(producer);
    }
    let task_type = task.task_type.clone();
    // The hooks hear that the run ended however it ends, dropped with its tree included.
    let _ended = Ended {
        hooks: std::sync::Arc::clone(&deps.hooks),
        partition,
        key: key.clone(),
    };
    let mut run = TaskRun::new(partition, key, pin, deps, links, span.clone());
    let outcome = match lifecycle(&mut run, task).instrument(span.clone()).await {
        Ok(outcome) => outcome,
        Err(halt) => halt.into(),
    };
    run.deps.metrics.executed(partition, outcome);
    span.record("outcome", tracing::field::debug(outcome));
    // A task that ended failed or dropped (a dead letter) is an error in its trace.
    if matches!(
        outcome,
        ExecutionOutcome::Failed | ExecutionOutcome::Dropped
    ) {
        span.record("otel.status_code", "ERROR");
        if let Some(error) = &run.last_error {
            span.record("otel.status_message", error.as_str());
        }
    }
    finished_line(&run, &task_type, outcome);
    outcome
}

/// Tells the hooks that a task's run ended ([`TaskHook::ended`]) when dropped.
struct Ended {
    hooks: std::sync::Arc<[std::sync::Arc<dyn TaskHook>]>,
    partition: PartitionId,
    key: scheduler_client::TaskKey,
}

impl Drop for Ended {
    fn drop(&mut self) {
        for hook in self.hooks.iter() {
            hook.ended(self.partition, &self.key);
        }
    }
}

/// One INFO line per task that ended here with an outcome of its own (its key, type, outcome,
/// attempt and how long its last call took); a DEBUG line for one left to another tree or found
/// finished.
fn finished_line(run: &TaskRun, task_type: &str, outcome: ExecutionOutcome) {
    let (partition, task) = (run.partition, &run.key);
    let duration_ms = run.last_call.map(|d| d.as_millis() as u64);
    match outcome {
        ExecutionOutcome::Completed | ExecutionOutcome::Failed | ExecutionOutcome::Dropped => {
            info!(partition, %task, task_type, ?outcome, attempt = run.attempts,
                duration_ms, "task finished");
        }
        _ => debug!(partition, %task, ?outcome, attempts = run.attempts, "task done here"),
    }
}

/// The steps, in order (see the module's doc): a step leads on to the next, back to the
/// check, or to the task's end.
async fn lifecycle(run: &mut TaskRun, mut task: Task) -> Result<ExecutionOutcome, Halt> {
    wait_for_predecessors(run).await?;
    loop {
        let checked = match check::check(run, &mut task).await? {
            Step::On(checked) => checked,
            Step::Again => continue,
            Step::End(outcome) => return Ok(outcome),
        };
        let ready = match check::before_call(run, &task, checked).await? {
            Step::On(ready) => ready,
            Step::Again => continue,
            Step::End(outcome) => return Ok(outcome),
        };
        let made = match call::call(run, &task, ready).await? {
            Step::On(made) => made,
            Step::Again => continue,
            Step::End(outcome) => return Ok(outcome),
        };
        match record::record(run, &task, made).await? {
            Next::Finished(outcome) => return Ok(outcome),
            Next::RetryAfter(delay) => {
                let retry = RetryPlanned {
                    attempt: run.attempts,
                    at: run.deps.clock.now() + delay,
                    error: run.last_error.clone(),
                };
                for hook in run.deps.hooks.iter() {
                    hook.retrying(run.partition, &task, &retry);
                }
                run.unless_stopped(tokio::time::sleep(delay)).await?
            }
        }
    }
}

/// Step 1: the claim is complete, so earlier trees' leases are all visible now.
async fn wait_for_predecessors(run: &mut TaskRun) -> Result<(), Halt> {
    let (lease, ordering_id) = (run.links.lease.clone(), run.key.ordering_id.clone());
    let mut steps = run.steps(Phase::Checking);
    steps.owner(None).await?;
    steps
        .store_step("lease read", false, || {
            lease.wait_for_predecessors(&ordering_id)
        })
        .await
}
