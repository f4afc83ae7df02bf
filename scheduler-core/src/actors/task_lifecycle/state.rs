//! The states a task passes between the steps of its lifecycle.

use crate::cancel_gate::Armed;
use crate::handler::{OutputSlot, TaskContext, TaskError};
use crate::lease::LeaseHold;
use crate::outcome::ExecutionOutcome;

/// The task checked (step 2), with what the checks hold until its call.
pub(super) struct Checked {
    pub(super) hold: LeaseHold,
    pub(super) armed: Armed,
    pub(super) epoch: u64,
}

/// The task ready to be called (step 3): the checks, and the context of its attempt.
pub(super) struct Ready {
    pub(super) checked: Checked,
    pub(super) attempt: u32,
    pub(super) context: TaskContext,
}

/// A call made (step 4): its result, and what its outcome is recorded under.
pub(super) struct Made {
    pub(super) result: Result<(), TaskError>,
    /// The call's lease entry, kept until the outcome is recorded (`None`: it panicked).
    pub(super) hold: Option<LeaseHold>,
    pub(super) started_at: chrono::DateTime<chrono::Utc>,
    pub(super) output: OutputSlot,
    /// The call counts as begun in the cancel gate until its outcome is recorded.
    pub(super) _begun: Armed,
}

/// Where a step leads: on to the next, back to the check (step 2), or to the task's end.
pub(super) enum Step<T> {
    On(T),
    Again,
    End(ExecutionOutcome),
}
