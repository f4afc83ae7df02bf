//! Steps 2 and 3, check and before the call: what must hold before a task is called, and the
//! waits of a task that may not be called yet.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use scheduler_client::Task;
use tracing::debug;

use super::record::{found_finished, record_final, status_record};
use super::run::{Phase, TaskRun};
use super::state::{Checked, Ready, Step};
use super::status;
use crate::cancel_gate::Armed;
use crate::handler::TaskContext;
use crate::hooks::{BeforeCall, Halt};
use crate::retry::exponential_period;

/// First wait of a task whose type has no handler on this node; the waits double up to
/// `max_backoff`.
const NO_HANDLER_RETRY_BASE: Duration = Duration::from_secs(1);

/// Step 2: the lease entry, then ownership read after it; meanwhile the status check.
pub(super) async fn check(run: &mut TaskRun, task: &mut Task) -> Result<Step<Checked>, Halt> {
    let armed = run.links.cancels.arm(&run.key);
    let lease = run.links.lease.clone();
    let earlier = run.attempts == 0 && lease.may_have_earlier_attempts(&run.key);
    let hooks = Arc::clone(&run.deps.hooks);
    let (tables, stop) = (run.deps.tables.clone(), run.stop.clone());
    let status_read = status::read_status(tables, &hooks, run.partition, task, earlier, stop);
    let (ordering_id, task_text) = (run.key.ordering_id.clone(), run.key.to_string());
    let entered = run.entered;
    let mut steps = run.steps(Phase::Checking);
    let lease_and_owner = async {
        let hold = steps
            .run
            .unless_stopped(lease.hold(&ordering_id, &task_text))
            .await?;
        let read_after = hold.durable_since().max(entered);
        let epoch = steps.owner(Some(read_after)).await?;
        Ok::<_, Halt>((hold, epoch))
    };
    let (held, status) = futures::future::join(lease_and_owner, status_read).await;
    let (hold, epoch) = held?;
    let ((found, current), last_attempt) = match status {
        Some(Ok(read)) => read,
        Some(Err(e)) => {
            run.store_failed("status read", &e.into()).await?;
            return Ok(Step::Again);
        }
        None => return Err(Halt::Abandoned),
    };
    run.store_succeeded();
    if let Some(last) = last_attempt {
        debug!(partition = run.partition, task = %run.key, last_attempt = last,
            "attempted by an earlier tree; attempt numbers go on");
        run.attempts = run.attempts.max(last);
    }
    if let Some(found) = found {
        drop((hold, armed));
        return found_finished(run, task, found).await.map(Step::End);
    }
    if let Some(current) = current {
        *task = *current;
    }
    if !run.deps.pool.handles(&task.task_type) {
        drop((hold, armed));
        wait_for_handler(run, &task.task_type).await?;
        return Ok(Step::Again);
    }
    if let Some(held) = hooks.iter().find_map(|h| h.held(run.partition, task)) {
        drop((hold, armed));
        wait_while_held(run, held).await?;
        return Ok(Step::Again);
    }
    Ok(Step::On(Checked { hold, armed, epoch }))
}

/// Step 3: the hooks before the call, given its context; one may finish the task instead
/// (an outcome like a call's, so it begins in the cancel gate as a call does: a cancel
/// applied since the status read is its final status instead, found by checking again).
pub(super) async fn before_call(
    run: &mut TaskRun,
    task: &Task,
    checked: Checked,
) -> Result<Step<Ready>, Halt> {
    let attempt = run.attempts + 1;
    let (stop, lease) = (run.stop.clone(), checked.hold.watch());
    let mut context = TaskContext::new(run.partition, checked.epoch, attempt, stop, lease);
    let hooks = Arc::clone(&run.deps.hooks);
    let mut steps = run.steps(Phase::Checking);
    for hook in hooks.iter() {
        let BeforeCall::Finish { status, reason } =
            hook.before_call(&mut steps, task, &mut context).await?
        else {
            continue;
        };
        let Checked { hold, armed, .. } = checked;
        drop(hold);
        if !armed.begin() {
            return cancelled_meanwhile(run, &armed).await.map(|()| Step::Again);
        }
        debug!(partition = run.partition, task = %run.key, %reason, "finished before its call");
        let record = status_record(run, status, Some(reason), None);
        let outcome = record_final(run, Phase::Checking, task, record, None).await;
        drop(armed);
        return outcome.map(Step::End);
    }
    Ok(Step::On(Ready {
        checked,
        attempt,
        context,
    }))
}

/// A cancel was applied after the status read: the task is checked again once it is
/// recorded.
pub(super) async fn cancelled_meanwhile(run: &TaskRun, armed: &Armed) -> Result<(), Halt> {
    debug!(partition = run.partition, task = %run.key, "a cancel was applied after the status read; checking again once it is recorded");
    run.unless_stopped(armed.settled()).await
}

/// No handler on this node runs the task's type (a rolling deploy that adds a type): the
/// task waits (the low-water mark lists it as it passes, so it holds nothing back and a new
/// tree loads it), and is checked again after a backoff. No attempt is used up; once a node
/// with the handler owns the partition, the task runs there.
async fn wait_for_handler(run: &mut TaskRun, task_type: &str) -> Result<(), Halt> {
    run.handler_waits += 1;
    let delay = exponential_period(
        run.handler_waits,
        NO_HANDLER_RETRY_BASE,
        run.deps.settings.max_backoff,
    );
    let _waiting = run
        .deps
        .metrics
        .no_handler(run.partition, &run.key, task_type, delay);
    run.unless_stopped(tokio::time::sleep(delay)).await
}

/// A hook holds the task back: it waits (listed by the low-water mark as it passes, so it
/// holds nothing back and a new tree loads it) until the hook lets it go, then is checked
/// again. A cancel applied meanwhile ends the wait too: the status read then finds it.
async fn wait_while_held(run: &mut TaskRun, held: BoxFuture<'static, bool>) -> Result<(), Halt> {
    let armed = run.links.cancels.arm(&run.key);
    let let_go = run
        .unless_stopped(async {
            tokio::select! {
                let_go = held => let_go,
                () = armed.cancelled() => true,
            }
        })
        .await?;
    if !let_go {
        // The node is stopping: the task is left for the next tree.
        return Err(Halt::Abandoned);
    }
    debug!(partition = run.partition, task = %run.key, "no longer held back, or cancelled; checking again");
    Ok(())
}
