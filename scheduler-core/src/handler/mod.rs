//! The user's API: the [`TaskHandler`] trait a service implements (one per task type, see
//! [`Handlers`]), the [`TaskContext`] each call gets and the [`TaskError`] it returns. The
//! engine calls handlers through its call pool (`call_pool.rs`).

mod context;
mod error;
mod registry;
mod task_handler;

pub use context::{
    GroupOutcome, JobSpec, ProgressError, ResultTooLarge, SpawnError, StopReason, TaskContext,
    MAX_RESULT_BYTES, MAX_SUB_TASKS,
};
pub(crate) use context::{OutputSlot, ProgressReporter};
pub use error::TaskError;
#[cfg(test)]
pub(crate) use registry::DynTaskHandler;
pub use registry::Handlers;
pub use task_handler::TaskHandler;
