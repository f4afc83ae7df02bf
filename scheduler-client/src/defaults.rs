//! Defaults shared by the client and the node (the node's settings start from these), kept here
//! because the client is the lower layer: a changed default reaches both sides at once.

use std::time::Duration;

/// Kafka bootstrap servers when none are given.
pub const BOOTSTRAP_SERVERS: &str = "127.0.0.1:9092";

/// The scheduler's topic when none is given.
pub const TOPIC: &str = "scheduled-tasks";

/// How far in the past a task may be scheduled and still be accepted: the client's check and
/// the nodes' `scheduling.scheduling_grace_window`.
pub const SCHEDULING_GRACE_WINDOW: Duration = Duration::from_secs(10);

/// Largest encoded task, in bytes: the client refuses larger tasks, the nodes
/// (`scheduling.max_task_data_bytes`) park larger records.
pub const MAX_TASK_BYTES: usize = 512 * 1024;

/// How long the client waits for the broker to acknowledge a task.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// Producer properties for writes that are durable once acknowledged (all in-sync replicas)
/// and not duplicated by the producer's own retries: the client's tasks and cancellations, and
/// the node's completion events.
pub const DURABLE_PRODUCER: [(&str, &str); 2] = [("acks", "all"), ("enable.idempotence", "true")];
