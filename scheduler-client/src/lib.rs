//! Producer side of the scheduler: what services depend on to enqueue tasks on the scheduler's
//! Kafka topic. It stays light: no actor system and no Cassandra driver; and without its default
//! `producer` feature, no Kafka client either (the task model, the wire format and the checks:
//! what the node's testing kit uses).
//!
//! - [`Task`] and [`TaskKey`]: the task model.
//! - [`wire`]: the JSON wire format v1 on the topic, and its limits (checked by the client and
//!   the node alike).
//! - [`partition_for`]: the partition of an `orderingId`, Kafka's default keyed partitioner.
//! - [`validate()`]: the checks a task passes before it is sent, and [`ScheduleError`].
//! - `Scheduler` (the `producer` feature, on by default): validates, encodes and enqueues tasks,
//!   resolving once Kafka acknowledged them.
//! - [`defaults`]: the defaults the client and the node share.
//! - [`trace`]: the W3C `traceparent` each record carries, linking a task's run to the
//!   operation that scheduled it.

#![warn(missing_docs)]

pub mod defaults;
mod partitioner;
#[cfg(feature = "producer")]
mod scheduler;
mod task;
pub mod trace;
mod validate;
pub mod wire;

pub use partitioner::{murmur2, partition_for};
#[cfg(feature = "producer")]
pub use scheduler::{Routed, Scheduler, SchedulerConfig};
pub use task::{
    truncate_to_millis, GroupMember, OnConflict, RunOrder, Task, TaskData, TaskIdentity, TaskKey,
    DEFAULT_TASK_TYPE,
};
pub use validate::{validate, ScheduleError, TopicError};
