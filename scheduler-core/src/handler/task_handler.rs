//! The trait a service implements to run its tasks.

use std::future::Future;

use scheduler_client::Task;

use super::context::{GroupOutcome, TaskContext};
use super::error::TaskError;
use crate::store::DeadLetter;

/// Runs tasks. Implement it with
/// `async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError>`.
///
/// Execution is at-least-once: a task can run again after a crash or a rebalance, so `execute`
/// must be idempotent. It is called for one task of an `orderingId` at a time, in every
/// interleaving of rebalances: while a call runs, its orderingId is leased (see [`TaskContext`]).
pub trait TaskHandler: Send + Sync + 'static {
    /// Runs `task`. An error says whether to retry it (after backoff) or give up on it. `ctx`
    /// tells the call its attempt, its partition's fencing epoch and whether it should stop.
    fn execute(
        &self,
        task: &Task,
        ctx: &TaskContext,
    ) -> impl Future<Output = Result<(), TaskError>> + Send;

    /// Called once when a task this handler ran becomes a dead letter (it was invalid, or its
    /// retries ran out), before the dead letter is recorded: the seed's "invalid task handler",
    /// to alert or compensate. At-least-once like `execute` (a node that dies between this call
    /// and the record calls it again on the next owner). Does nothing unless implemented.
    fn dead_lettered(&self, letter: &DeadLetter) -> impl Future<Output = ()> + Send {
        let _ = letter;
        async {}
    }

    /// The join of a group of this handler's type: called once every member has a final
    /// outcome (or a member of a fail-fast group failed), with the members' outcomes and
    /// results. `task` is the join task (`join_of` names the group). It is a task like any
    /// other: at-least-once, retried on a retryable error, a dead letter when it gives up.
    /// Does nothing unless implemented.
    fn group_finished(
        &self,
        task: &Task,
        group: &GroupOutcome,
        ctx: &TaskContext,
    ) -> impl Future<Output = Result<(), TaskError>> + Send {
        let _ = (task, group, ctx);
        async { Ok(()) }
    }
}
