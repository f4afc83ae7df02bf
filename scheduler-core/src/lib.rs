//! The scheduler node: consumes tasks from Kafka, persists them to Cassandra in time-bucketed wide
//! rows, and runs each through the user's handler when it comes due, one at a time per orderingId.
//!
//! - [`TaskHandler`]: what a service implements to run its tasks.
//! - [`SchedulerNode`]: a running node, started with [`Settings`] and a handler.
//! - [`settings`]: node settings (TOML and environment).
//! - [`store`]: the schedule, task status and attempts in Cassandra, for tools that read them.
//! - [`admin_api`]: the admin HTTP API's requests and answers, shared with its clients.
//! - `testing` (with the `testing` feature): an in-process engine on a manual clock, to
//!   unit-test handlers, retries, dead letters, groups and schedules without Kafka or Cassandra.
//!
//! The rest (the per-partition actor tree, leases, metrics, the admin API's server) is internal;
//! see `design.md` for the architecture.

#![warn(missing_docs)]

mod actors;
mod admin;
mod call_pool;
mod cancel_gate;
mod clock;
mod dead_letter;
mod enqueue;
mod epoch;
mod events;
mod groups;
pub mod handler;
mod hooks;
mod identity;
mod in_flight;
mod lease;
mod metrics;
pub mod node;
mod outcome;
pub mod recurring;
mod retry;
mod schedule_spec;
pub mod settings;
mod slots;
pub mod store;
mod suspend;
#[cfg(feature = "testing")]
pub mod testing;

/// The admin HTTP API's requests and answers, for clients such as the `scheduler` command; the
/// API itself is internal.
pub use admin::api as admin_api;

#[cfg(test)]
mod simulation;

pub use handler::{
    GroupOutcome, Handlers, JobSpec, ProgressError, SpawnError, StopReason, TaskContext, TaskError,
    TaskHandler,
};
pub use node::{NodeBuilder, NodeError, SchedulerNode};
pub use scheduler_client::{GroupMember, Task, TaskData, TaskKey};
pub use settings::Settings;
pub use store::{DeadLetter, DeadReason, GroupKey, MemberOutcome, StatusRecord, TaskStatus};
