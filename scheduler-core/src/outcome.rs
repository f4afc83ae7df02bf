//! How a task's life in a tree ended, and why a running call is asked to stop: read by the
//! lifecycle, the call pool, the handler's context and the metrics.

/// Why a running call is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The partition is being handed over (a rebalance, or the node is shutting down): finish
    /// soon or return a retryable error; the task then runs again on the next owner (an error
    /// returned while the tree stops is not counted as an attempt).
    Revoked,
    /// The partition's tree is being rebuilt after a failure; the task runs again on the new tree.
    Rebuilding,
    /// Another tree claimed the partition (this node lost it, e.g. while paused): the outcome of
    /// this call will not be recorded, and a fencing token older than the new epoch should be
    /// refused by the systems the call writes to.
    Fenced,
    /// The lease of this call's orderingId expired before it could be renewed: another call of
    /// the same orderingId may start elsewhere.
    LeaseLost,
}

/// How a task's life in this tree ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionOutcome {
    /// The handler succeeded and completion was recorded.
    Completed,
    /// Every retry failed; recorded as failed, and a dead letter.
    Failed,
    /// The handler found the task invalid; recorded as dropped, and a dead letter.
    Dropped,
    /// The task had already finished or was cancelled (status found); it was not run.
    AlreadyFinished,
    /// The tree is stopping: the task was left for the next tree to run.
    Abandoned,
    /// Another tree claimed the partition: the task was not run (or its outcome not recorded)
    /// here, and is left for the owner.
    Fenced,
}

/// `error` cut to its first `max` bytes, on a character's boundary (an error a handler or a
/// worker returned, kept where its size must be bounded).
pub(crate) fn cut_error(error: &mut String, max: usize) {
    if error.len() > max {
        let end = (0..=max)
            .rev()
            .find(|&i| error.is_char_boundary(i))
            .unwrap_or(0);
        error.truncate(end);
    }
}
