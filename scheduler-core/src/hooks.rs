//! The hook points of a task's life, where features attach (design.md "Hook points").
//!
//! The lifecycle ([`crate::actors::task_lifecycle`]) runs a task through its steps (check, wait
//! for time and slot, call, record, retry or finish) and names no feature. Each feature
//! (identities, suspensions, groups with their sub-tasks and jobs, dead letters, completion
//! events) is a [`TaskHook`] in its own module, given to every partition tree by the node, and
//! called at these points, in the order the node lists the hooks:
//!
//! | point | when | e.g. |
//! |---|---|---|
//! | [`check`](TaskHook::check) | read beside the status, before every attempt | an identity's current copy of the task, or that it was superseded |
//! | [`held`](TaskHook::held) / [`free_at_call`](TaskHook::free_at_call) | before the call, and again once its time and slot came | a suspension |
//! | [`before_call`](TaskHook::before_call) | once checked and free, before the call | a fail-fast group that failed; a join's group in its context |
//! | [`at_final_record`](TaskHook::at_final_record) | before the final status is written, as owner | sub-tasks and jobs, a group's member outcome, a dead letter |
//! | [`found_final`](TaskHook::found_final) | the status check found a final status | a member's outcome in its group |
//! | [`finished`](TaskHook::finished) | after the final status is stored | a completion event |
//! | [`retrying`](TaskHook::retrying) | a retryable failure was recorded; the task waits for its next attempt | the retrying set the admin API lists |
//! | [`ended`](TaskHook::ended) | the task's run on this tree ended, however (finished, left to the next tree, fenced) | the same set, forgetting it |
//!
//! One more point is the executor's, not the lifecycle's: a [`CallGate`], which a due task passes
//! before it takes an executor slot, holding what the gate gave it until its call returns (a
//! per-key concurrency limit, `crate::limits`).
//!
//! A hook reaches the store through the [`Steps`] of the run it is called in: a step retried
//! until it succeeds (abandoned when the tree stops), a write made only as the partition's owner.

use std::future::Future;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::{Task, TaskKey};

use crate::handler::{OutputSlot, TaskContext};
use crate::store::{PartitionId, StatusRecord, StoreError, TaskStatus};

/// A step of a run could not go on: the tree stops, or it lost the partition. The task is left
/// for the next tree (its outcome, if it was called, unrecorded here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Halt {
    /// The tree stops (revoke, rebuild): the task is left in the store for the next one.
    Abandoned,
    /// A newer tree owns the partition.
    Fenced,
}

/// Why a hook's store step failed (it is retried).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StepError {
    /// A store operation failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Enqueueing a task the engine creates (a join, a sub-task) failed.
    #[error(transparent)]
    Enqueue(#[from] crate::enqueue::EnqueueError),
}

/// What the run a hook is called in offers it.
pub trait Steps: Send {
    /// The task's partition.
    fn partition(&self) -> PartitionId;
    /// The task's key.
    fn key(&self) -> &TaskKey;
    /// The attempts made in this partition so far (the one just made included).
    fn attempts(&self) -> u32;
    /// Runs `step` until it succeeds, a capped backoff between failures; before a write
    /// (`write`), confirms that the tree still owns the partition, before every try. Before the
    /// task is called, the tree's stop signal also interrupts a step under way; after, a step is
    /// let finish (a draining tree still records what its calls did).
    fn retried<'a>(
        &'a mut self,
        operation: &'static str,
        write: bool,
        step: &'a mut (dyn FnMut() -> BoxFuture<'a, Result<(), StepError>> + Send),
    ) -> BoxFuture<'a, Result<(), Halt>>;
    /// Confirms that the tree still owns the partition, before acting on the task's outcome
    /// outside the store (e.g. telling a handler).
    fn as_owner(&mut self) -> BoxFuture<'_, Result<(), Halt>>;
}

/// A read by `step` (see [`Steps::retried`]), retried until it succeeds.
pub async fn read<T, E, F, Fut>(
    steps: &mut dyn Steps,
    operation: &'static str,
    step: F,
) -> Result<T, Halt>
where
    T: Send,
    E: Into<StepError>,
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Result<T, E>> + Send,
{
    retried(steps, operation, false, step).await
}

/// A write by `step`, as the partition's owner (confirmed before every try), retried until it
/// succeeds.
pub async fn write<T, E, F, Fut>(
    steps: &mut dyn Steps,
    operation: &'static str,
    step: F,
) -> Result<T, Halt>
where
    T: Send,
    E: Into<StepError>,
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Result<T, E>> + Send,
{
    retried(steps, operation, true, step).await
}

async fn retried<T, E, F, Fut>(
    steps: &mut dyn Steps,
    operation: &'static str,
    write: bool,
    mut step: F,
) -> Result<T, Halt>
where
    T: Send,
    E: Into<StepError>,
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Result<T, E>> + Send,
{
    // (The value passes through a cell: the run's steps are object safe, so they return `()`.)
    let value = std::sync::Mutex::new(None);
    {
        let cell = &value;
        let mut boxed = || -> BoxFuture<'_, Result<(), StepError>> {
            let attempt = step();
            Box::pin(async move {
                let got = attempt.await.map_err(Into::into)?;
                *cell
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(got);
                Ok(())
            })
        };
        steps.retried(operation, write, &mut boxed).await?;
    }
    let got = value
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // (A step that succeeded set it.)
    got.ok_or(Halt::Abandoned)
}

/// What a hook's read beside the status check found.
pub enum Check {
    /// The task runs: as it was loaded (`None`), or as the hook's copy of it (the newest data
    /// an update gave it).
    Run(Option<Box<Task>>),
    /// The task is not run: `why`. It leaves the schedule as a finished one does.
    NotRun {
        /// Why, for the log.
        why: &'static str,
    },
}

/// What a hook decided before the call.
pub enum BeforeCall {
    /// Call the task (the hook may have added to its context).
    Call,
    /// Do not call it: record this final status instead, as a call's outcome is recorded.
    Finish {
        /// The final status.
        status: TaskStatus,
        /// Why, recorded as the status's error.
        reason: String,
    },
}

/// A feature attached to the life of every task of a partition tree. Every point has a
/// default that does nothing: a hook implements the points it needs.
pub trait TaskHook: Send + Sync + 'static {
    /// Read beside the task's status, before every attempt (a task found with a final status is
    /// not run, whatever this says).
    fn check(
        &self,
        _partition: PartitionId,
        _task: &Task,
    ) -> Option<BoxFuture<'static, Result<Check, StoreError>>> {
        None
    }

    /// Whether the task is held back now: it then waits, pending, no attempt used and holding
    /// nothing back, until the returned future ends (`true`: it is checked again; `false`: the
    /// node stops and it is left for the next tree). A cancel of the task ends the wait too.
    fn held(&self, _partition: PartitionId, _task: &Task) -> Option<BoxFuture<'static, bool>> {
        None
    }

    /// Once the task's time and slot came: whether it is still free to be called (else it is
    /// checked again). Called on the pool's runtime, under the cancel gate's lock: cheap, no I/O.
    fn free_at_call(&self, _task: &Task) -> Option<Box<dyn Fn() -> bool + Send>> {
        None
    }

    /// Once checked and free, before the call is waited for: may add to its `context`, or
    /// finish the task instead.
    fn before_call<'a>(
        &'a self,
        _steps: &'a mut dyn Steps,
        _task: &'a Task,
        _context: &'a mut TaskContext,
    ) -> BoxFuture<'a, Result<BeforeCall, Halt>> {
        Box::pin(std::future::ready(Ok(BeforeCall::Call)))
    }

    /// Before the task's final `record` is written, as owner (a crash in between runs the task
    /// again: what this writes is written again). `output` is what the call left, when the
    /// record is a call's outcome.
    fn at_final_record<'a>(
        &'a self,
        _steps: &'a mut dyn Steps,
        _task: &'a Task,
        _record: &'a StatusRecord,
        _output: Option<&'a OutputSlot>,
    ) -> BoxFuture<'a, Result<(), Halt>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// The status check found the task's final `record` (written by an earlier tree, or a
    /// cancel): whatever had to come before it may have been cut off, and is done again.
    fn found_final<'a>(
        &'a self,
        _steps: &'a mut dyn Steps,
        _task: &'a Task,
        _record: &'a StatusRecord,
    ) -> BoxFuture<'a, Result<(), Halt>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// The task's final `record` is stored.
    fn finished(&self, _key: &TaskKey, _record: &StatusRecord) {}

    /// A retryable failure of the task was recorded: it waits for its next attempt. Called on
    /// the task's run, before the wait: cheap, no I/O.
    fn retrying(&self, _partition: PartitionId, _task: &Task, _retry: &RetryPlanned) {}

    /// The task's run on this tree ended, whatever ended it (a final status, a tree that stops
    /// or was fenced, a run dropped with its tree). Cheap, no I/O.
    fn ended(&self, _partition: PartitionId, _key: &TaskKey) {}
}

/// A retry the lifecycle planned ([`TaskHook::retrying`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPlanned {
    /// The attempts made so far (the next one is this plus one).
    pub attempt: u32,
    /// When the next attempt is due, by the node's clock (it may wait longer for a slot).
    pub at: DateTime<Utc>,
    /// The failed attempt's error (none when the call was not charged an attempt).
    pub error: Option<String>,
}

/// What a task holds from a [`CallGate`] until its call returns (e.g. a permit of its limit
/// key): dropped then, which lets the next task of the gate through. A pass may lapse (a permit
/// leased across the cluster whose lease may have expired): the call is then not made, and the
/// task is checked again and passes the gates again.
pub struct GatePass {
    held: Option<Box<dyn Send>>,
    valid: Option<Box<dyn Fn() -> bool + Send>>,
    /// What is held is given back as the call starts, not when it returns.
    until_start: bool,
}

impl GatePass {
    /// A pass holding `held` until the call returns.
    pub fn new(held: impl Send + 'static) -> GatePass {
        GatePass {
            held: Some(Box::new(held)),
            valid: None,
            until_start: false,
        }
    }

    /// The pass, giving back what it holds as the call starts (a share of a key's rate
    /// bounds the tasks between their start's turn and their call, not the calls).
    pub fn until_start(mut self) -> GatePass {
        self.until_start = true;
        self
    }

    /// The call starts now.
    pub fn started(&mut self) {
        if self.until_start {
            self.held = None;
        }
    }

    /// The pass, valid only while `valid` says so (asked just before the call).
    pub fn valid_while(mut self, valid: impl Fn() -> bool + Send + 'static) -> GatePass {
        self.valid = Some(Box::new(valid));
        self
    }

    /// Whether a call may start under this pass now.
    pub fn is_valid(&self) -> bool {
        self.valid.as_ref().is_none_or(|valid| valid())
    }
}

/// A gate a due task passes before it takes one of the executor's slots: it waits there
/// holding no slot, pending, its attempt not used, and keeps its pass until its call returns.
/// The hook point of per-key limits.
pub trait CallGate: Send + Sync + 'static {
    /// `None`: the task passes at once. Else it waits for the pass the future gives.
    fn enter(&self, task: &Task) -> Option<BoxFuture<'static, GatePass>>;
}
