//! The scheduler node: consumes tasks from Kafka, persists them to Cassandra in time-bucketed wide
//! rows, and runs each through the user's executor when it comes due, one at a time per orderingId.
//!
//! - [`TaskExecutor`]: what a service implements to run its tasks.
//! - [`SchedulerNode`]: a running node, started with [`Settings`] and an executor.
//! - [`settings`]: node settings (TOML and environment).
//! - [`actors`]: the per-partition actor tree.
//! - [`store`]: persistence of the schedule, task status and attempts.
//! - [`clock`]: the injectable time source.
//! - [`metrics`]: the node's Prometheus metrics.
//! - [`admin`]: the node's admin HTTP API.
//!
//! See `design.md` for the architecture.

#![warn(missing_docs)]

pub mod actors;
pub mod admin;
pub mod clock;
pub mod epoch;
pub mod events;
pub mod executor;
pub mod in_flight;
pub mod lease;
pub mod metrics;
pub mod node;
pub mod retry;
pub mod settings;
pub mod store;

#[cfg(test)]
mod simulation;

pub use executor::{ExecutionPool, StopReason, TaskContext, TaskError, TaskExecutor};
pub use node::{NodeError, SchedulerNode};
pub use scheduler_client::{Task, TaskData, TaskKey};
pub use settings::Settings;
pub use store::{StatusRecord, TaskStatus};
