//! [`RemoteCall`]: the call of a task by a remote worker, as a handler of the task's type.

use std::time::Duration;

use scheduler_client::Task;
use tracing::{debug, info, warn};

use super::registry::{ClaimEnd, Completion, RemoteWorkers};
use crate::handler::{TaskContext, TaskError, TaskHandler};

/// Calls tasks through the node's remote workers: offers the task to the workers of its type,
/// waits until one claims it, then until the claim is completed or ends. The call returns the
/// worker's outcome; a claim that expired or ended with the call (the tree stopped) returns a
/// retryable error, and its worker's completion is refused from then on.
#[derive(Clone)]
pub struct RemoteCall {
    workers: RemoteWorkers,
}

impl RemoteCall {
    /// Calls through `workers`.
    pub fn new(workers: RemoteWorkers) -> RemoteCall {
        RemoteCall { workers }
    }
}

impl TaskHandler for RemoteCall {
    /// A join is a call like any other: `execute` offers it with its finished group
    /// (`ctx.group()`, the claim's `group`).
    async fn group_finished(
        &self,
        task: &Task,
        _group: &crate::handler::GroupOutcome,
        ctx: &TaskContext,
    ) -> Result<(), TaskError> {
        self.execute(task, ctx).await
    }

    async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        let workers = &self.workers;
        let (offer, claimed) = workers.offer(
            task.clone(),
            ctx.group(),
            ctx.attempt(),
            (ctx.partition(), ctx.epoch()),
        );
        let claimed = tokio::select! {
            claimed = claimed => claimed,
            reason = ctx.stopped() => {
                return Err(TaskError::retry(format!(
                    "no remote worker took the task before the call stopped ({reason:?})"
                )));
            }
        };
        drop(offer);
        let Ok(claimed) = claimed else {
            return Err(TaskError::retry(
                "the offer to remote workers was withdrawn",
            ));
        };
        let claim_id = claimed.claim_id;
        debug!(task = %task.key(), claim = %claim_id, "claimed by a remote worker");
        // Ends the claim if this call ends first (the pool's timeout drops it).
        let _claim = EndWithCall {
            workers: workers.clone(),
            claim_id: claim_id.clone(),
        };
        let mut completion = claimed.completion;
        loop {
            let Some(expires_at) = workers.expiry(&claim_id) else {
                // Ended under the lock: completed (its completion is waiting) or expired.
                return match completion.try_recv() {
                    Ok(done) => outcome(done, ctx, &claim_id),
                    Err(_) => Err(ended(workers.end_of(&claim_id))),
                };
            };
            tokio::select! {
                done = &mut completion => return match done {
                    Ok(done) => outcome(done, ctx, &claim_id),
                    Err(_) => Err(ended(workers.end_of(&claim_id))),
                },
                () = workers.clock().sleep_until(expires_at) => {
                    if workers.expire_if_due(&claim_id) {
                        if let Ok(done) = completion.try_recv() {
                            return outcome(done, ctx, &claim_id);
                        }
                        warn!(task = %task.key(), claim = %claim_id,
                            "remote worker's claim expired without a heartbeat; the task runs again");
                        return Err(ended(Some(ClaimEnd::Expired)));
                    }
                }
                reason = ctx.stopped() => {
                    let why = format!("the partition's tree stopped ({reason:?})");
                    workers.end_with_call(&claim_id, &why);
                    if let Ok(done) = completion.try_recv() {
                        return outcome(done, ctx, &claim_id);
                    }
                    info!(task = %task.key(), claim = %claim_id, ?reason,
                        "remote claim ended with its tree; its completion will be refused");
                    return Err(ended(Some(ClaimEnd::CallEnded(why))));
                }
            }
        }
    }
}

/// The call's result from the worker's completion.
fn outcome(done: Completion, ctx: &TaskContext, claim_id: &str) -> Result<(), TaskError> {
    match done {
        Completion::Success { result } => {
            if let Some(result) = result {
                ctx.set_result(result).map_err(|e| {
                    TaskError::invalid(format!("remote worker's result (claim {claim_id}): {e}"))
                })?;
            }
            Ok(())
        }
        Completion::Retry {
            error,
            retry_after_ms,
        } => Err(match retry_after_ms {
            Some(ms) => TaskError::retry_after(error, Duration::from_millis(ms)),
            None => TaskError::retry(error),
        }),
        Completion::Invalid { error } => Err(TaskError::invalid(error)),
    }
}

/// The retryable error of a claim that ended without a completion.
fn ended(end: Option<ClaimEnd>) -> TaskError {
    TaskError::retry(match end {
        Some(end) => format!("remote worker: {end}"),
        None => "remote worker: the claim ended".to_string(),
    })
}

/// Ends its claim when dropped, if the claim is still live (the call ended first).
struct EndWithCall {
    workers: RemoteWorkers,
    claim_id: String,
}

impl Drop for EndWithCall {
    fn drop(&mut self) {
        self.workers
            .end_with_call(&self.claim_id, "its call ended (timed out or stopped)");
    }
}
