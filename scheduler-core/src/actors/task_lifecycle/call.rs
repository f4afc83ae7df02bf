//! Step 4, time, slot and call: on the pool's runtime, if the checks still hold then.

use scheduler_client::Task;
use tracing::debug;

use super::check::cancelled_meanwhile;
use super::run::TaskRun;
use super::state::{Checked, Made, Ready, Step};
use crate::call_pool::Called;
use crate::cancel_gate::Armed;
use crate::hooks::Halt;
use crate::lease::LeaseHold;

/// Step 4: its time, then a slot, then the call, waited for on the pool's runtime (a busy
/// actor thread would make the call late), if the checks still hold then.
pub(super) async fn call(run: &mut TaskRun, task: &Task, ready: Ready) -> Result<Step<Made>, Halt> {
    let Ready {
        checked: Checked { hold, armed, epoch },
        attempt,
        context,
    } = ready;
    let output = context.output_slot();
    let begun = armed.clone();
    let (pool, span) = (&run.deps.pool, run.span.clone());
    let is_ready = ready_to_call(run, task);
    let called = pool.call_when_due(
        run.key.scheduled_time,
        (hold, armed),
        is_ready,
        task.clone(),
        context.clone(),
        span,
        run.stop.clone(),
    );
    let (result, hold, started_at) = match called.await {
        Called::Done {
            result,
            held,
            started_at,
        } => (result, held.map(|(hold, _armed)| hold), started_at),
        Called::Stopped => return Err(Halt::Abandoned),
        Called::NotReady((hold, armed)) => {
            drop(hold);
            if armed.touched() {
                cancelled_meanwhile(run, &armed).await?;
            } else {
                debug!(partition = run.partition, task = %run.key, "lease lapsed, or the task was held back, before the call; checking again");
            }
            return Ok(Step::Again);
        }
    };
    run.attempts = attempt;
    let delay = started_at - run.key.scheduled_time;
    debug!(partition = run.partition, task = %run.key, attempt, epoch,
        delay_ms = delay.num_milliseconds(), "task called");
    let first_delay = (attempt == 1).then(|| delay.to_std().unwrap_or_default());
    let took = (run.deps.clock.now() - started_at)
        .to_std()
        .unwrap_or_default();
    run.deps.metrics.attempt(run.partition, took, first_delay);
    run.last_call = Some(took);
    run.last_call_started = Some(started_at);
    Ok(Step::On(Made {
        result,
        hold,
        started_at,
        output,
        _begun: begun,
    }))
}

/// Whether the task may be called now that its time and slot came: the checks made before
/// still hold (its lease entry stayed live without a break, and has a renewal period left,
/// so it outlasts the call's start; no cancel or update reached it), and no hook holds it
/// back now. If so, its call begins in the cancel gate, last, under the gate's lock
/// ([`Armed::begin`]).
fn ready_to_call(
    run: &TaskRun,
    task: &Task,
) -> impl FnOnce(&(LeaseHold, Armed)) -> bool + Send + 'static {
    let free: Vec<_> = run
        .deps
        .hooks
        .iter()
        .filter_map(|hook| hook.free_at_call(task))
        .collect();
    move |(hold, armed)| hold.callable() && free.iter().all(|free| free()) && armed.begin()
}
