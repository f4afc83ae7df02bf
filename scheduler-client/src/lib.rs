//! Producer side of the scheduler: what services depend on to enqueue tasks on the scheduler's
//! Kafka topic. It stays light: no actor system and no Cassandra driver.
//!
//! The task model, the JSON wire format, the partitioner and `Scheduler::schedule_task` are built
//! in the engine milestone (issue 3); this crate is the workspace member they land in.
