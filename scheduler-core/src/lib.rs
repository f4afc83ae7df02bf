//! The scheduler node: consumes tasks from Kafka, persists them to Cassandra in time-bucketed wide
//! rows, and runs each through the user's handler when it comes due, one at a time per orderingId.
//!
//! What a service uses:
//! - [`TaskHandler`] (in [`handler`], with [`TaskContext`], [`TaskError`], [`Handlers`]): what a
//!   service implements to run its tasks.
//! - [`SchedulerNode`]: a running node, started with [`Settings`] and its handlers.
//! - [`settings`]: node settings (TOML and environment).
//! - [`recurring`]: recurring schedules, managed from a node or its admin API.
//! - [`store`]: the schedule, task status and attempts in Cassandra, for tools that read them.
//! - [`admin_api`]: the admin HTTP API's requests and answers, shared with its clients.
//! - `testing` (with the `testing` feature): an in-process engine on a manual clock, to
//!   unit-test handlers, retries, dead letters, groups and schedules without Kafka or Cassandra.
//!
//! Features: `node` (on by default) is the node itself: the node and its Kafka consumer, the
//! admin API and dashboard, completion events, the Cassandra store (`store::CassandraStore`)
//! and the client's producer; it brings rdkafka (librdkafka, built from C), scylla and axum.
//! `testing` adds the kit. A crate that only unit-tests its handlers needs no node:
//! `default-features = false, features = ["testing"]` builds the handler API, the settings, the
//! store's traits and rows, and the kit, without those clients.
//!
//! A map of the rest, from the top down (each imports only what is below it; design.md has
//! the architecture in chapters):
//! - `node/` (with `admin/`, `events.rs` and `store/cassandra/`, the `node` feature): a running
//!   node: its consumer thread, its queues, its admin server.
//! - `admin/`: the admin API's server and the dashboard.
//! - `actors/`: a partition's actor tree (supervisors, persistence, scheduler, throughput
//!   controller, executors, ownership), `PartitionDeps::builder` that wires it, and
//!   `actors/task_lifecycle/`: a task's life as steps (check, before the call, call, record).
//! - Features attached to a task's life at the hook points of `hooks.rs`: `identity.rs`,
//!   `suspend.rs`, `groups/` (groups, sub-tasks, jobs), `dead_letter.rs`, `events.rs`,
//!   `limits/` (per-key limits, at the call pool's gate), `retrying.rs` (the tasks waiting for
//!   a retry, for the admin API); and `recurring/`, a handler of an
//!   engine task type.
//! - The engine's parts: `call_pool.rs` (where handlers are called), `lease.rs` (one run at a
//!   time per orderingId across trees), `cancel_gate.rs`, `in_flight.rs`, `metrics.rs`,
//!   `enqueue.rs`, `outcome.rs`, `clock.rs`, `retry.rs`, `slots.rs`, `epoch.rs`, `polled.rs`
//!   (the small tables every node polls: suspensions, per-key overrides).
//! - `store/`: a trait per table, on Cassandra (`store/cassandra/`) and in memory
//!   (`store/memory/`); the tables moved so far keep all three in `store/<table>.rs` (or
//!   `store/groups/`).
//! - `simulation/` (tests only): the deterministic simulation of several nodes under faults.

#![warn(missing_docs)]
// Without the `node` feature (the handler API and the testing kit), what only a node or its
// admin API reads goes unused: its metrics and views, the polling of the shared tables, the
// Cassandra rows' helpers. Dead code is judged on the full build, which uses all of it.
#![cfg_attr(not(feature = "node"), allow(dead_code))]

mod actors;
#[cfg(feature = "node")]
mod admin;
mod call_pool;
mod cancel_gate;
mod clock;
mod dead_letter;
mod enqueue;
mod epoch;
#[cfg(feature = "node")]
mod events;
mod groups;
pub mod handler;
mod hooks;
mod identity;
mod in_flight;
mod known_statuses;
mod lease;
mod limits;
mod metrics;
#[cfg(feature = "node")]
pub mod node;
mod outcome;
mod polled;
pub mod recurring;
pub mod remote;
mod retry;
mod retrying;
mod schedule_spec;
pub mod settings;
mod slots;
pub mod store;
mod suspend;
#[cfg(feature = "testing")]
pub mod testing;

/// The admin HTTP API's requests and answers, for clients such as the `scheduler` command; the
/// API itself is internal.
#[cfg(feature = "node")]
pub use admin::api as admin_api;

#[cfg(test)]
mod simulation;

pub use handler::{
    GroupOutcome, Handlers, JobSpec, ProgressError, SpawnError, StopReason, TaskContext, TaskError,
    TaskHandler,
};
#[cfg(feature = "node")]
pub use node::{NodeBuilder, NodeError, SchedulerNode};
pub use scheduler_client::{GroupMember, Task, TaskData, TaskKey};
pub use settings::Settings;
pub use store::{DeadLetter, DeadReason, GroupKey, MemberOutcome, StatusRecord, TaskStatus};
