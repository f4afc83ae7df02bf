//! Steps 2 and 3, check and before the call: what must hold before a task is called, and the
//! waits of a task that may not be called yet.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use scheduler_client::Task;
use tracing::debug;

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

impl TaskRun {
    /// Step 2: the lease entry, then ownership read after it; meanwhile the status check.
    pub(super) async fn check(&mut self, task: &mut Task) -> Result<Step<Checked>, Halt> {
        let armed = self.links.cancels.arm(&self.key);
        let lease = self.links.lease.clone();
        let earlier = self.attempts == 0 && lease.may_have_earlier_attempts(&self.key);
        let hooks = Arc::clone(&self.deps.hooks);
        let (store, stop) = (self.deps.store.clone(), self.stop.clone());
        let status_read = status::read_status(store, &hooks, self.partition, task, earlier, stop);
        let (ordering_id, task_text) = (self.key.ordering_id.clone(), self.key.to_string());
        let entered = self.entered;
        let mut steps = self.steps(Phase::Checking);
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
                self.store_failed("status read", &e.into()).await?;
                return Ok(Step::Again);
            }
            None => return Err(Halt::Abandoned),
        };
        self.store_succeeded();
        if let Some(last) = last_attempt {
            debug!(partition = self.partition, task = %self.key, last_attempt = last,
                "attempted by an earlier tree; attempt numbers go on");
            self.attempts = self.attempts.max(last);
        }
        if let Some(found) = found {
            drop((hold, armed));
            return self.found_finished(task, found).await.map(Step::End);
        }
        if let Some(current) = current {
            *task = *current;
        }
        if !self.deps.pool.handles(&task.task_type) {
            drop((hold, armed));
            self.wait_for_handler(&task.task_type).await?;
            return Ok(Step::Again);
        }
        if let Some(held) = hooks.iter().find_map(|h| h.held(self.partition, task)) {
            drop((hold, armed));
            self.wait_while_held(held).await?;
            return Ok(Step::Again);
        }
        Ok(Step::On(Checked { hold, armed, epoch }))
    }

    /// Step 3: the hooks before the call, given its context; one may finish the task instead
    /// (an outcome like a call's, so it begins in the cancel gate as a call does: a cancel
    /// applied since the status read is its final status instead, found by checking again).
    pub(super) async fn before_call(
        &mut self,
        task: &Task,
        checked: Checked,
    ) -> Result<Step<Ready>, Halt> {
        let attempt = self.attempts + 1;
        let (stop, lease) = (self.stop.clone(), checked.hold.watch());
        let mut context = TaskContext::new(self.partition, checked.epoch, attempt, stop, lease);
        let hooks = Arc::clone(&self.deps.hooks);
        let mut steps = self.steps(Phase::Checking);
        for hook in hooks.iter() {
            let BeforeCall::Finish { status, reason } =
                hook.before_call(&mut steps, task, &mut context).await?
            else {
                continue;
            };
            let Checked { hold, armed, .. } = checked;
            drop(hold);
            if !armed.begin() {
                return self.cancelled_meanwhile(&armed).await.map(|()| Step::Again);
            }
            debug!(partition = self.partition, task = %self.key, %reason, "finished before its call");
            let record = self.status_record(status, Some(reason), None);
            let outcome = self.record_final(Phase::Checking, task, record, None).await;
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
    pub(super) async fn cancelled_meanwhile(&self, armed: &Armed) -> Result<(), Halt> {
        debug!(partition = self.partition, task = %self.key, "a cancel was applied after the status read; checking again once it is recorded");
        self.unless_stopped(armed.settled()).await
    }

    /// No handler on this node runs the task's type (a rolling deploy that adds a type): the
    /// task waits (the low-water mark lists it as it passes, so it holds nothing back and a new
    /// tree loads it), and is checked again after a backoff. No attempt is used up; once a node
    /// with the handler owns the partition, the task runs there.
    async fn wait_for_handler(&mut self, task_type: &str) -> Result<(), Halt> {
        self.handler_waits += 1;
        let delay = exponential_period(
            self.handler_waits,
            NO_HANDLER_RETRY_BASE,
            self.deps.settings.max_backoff,
        );
        let _waiting = self
            .deps
            .metrics
            .no_handler(self.partition, &self.key, task_type, delay);
        self.unless_stopped(tokio::time::sleep(delay)).await
    }

    /// A hook holds the task back: it waits (listed by the low-water mark as it passes, so it
    /// holds nothing back and a new tree loads it) until the hook lets it go, then is checked
    /// again. A cancel applied meanwhile ends the wait too: the status read then finds it.
    async fn wait_while_held(&mut self, held: BoxFuture<'static, bool>) -> Result<(), Halt> {
        let armed = self.links.cancels.arm(&self.key);
        let let_go = self
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
        debug!(partition = self.partition, task = %self.key, "no longer held back, or cancelled; checking again");
        Ok(())
    }
}
