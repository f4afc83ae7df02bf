//! The kit's topic: what a producer writes and a node's consumer polls, in memory. Records go
//! in through the client's own checks and wire encoding (`Scheduler::schedule_task`,
//! `cancel_task`, `reschedule`, `cancel_identity`), one log per partition (the client's
//! partitioner), and come out decoded as a node's poll loop hands them to its partition trees
//! (`node/consumer.rs`, `PollLoop::add`), stamped with their offsets. The tasks the engine
//! enqueues itself (joins, sub-tasks, ticks and runs of recurring schedules) go in the same way,
//! through [`TopicEnqueuer`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::wire::{self, Record};
use scheduler_client::{defaults, partition_for, ScheduleError, Task, TaskIdentity, TaskKey};
use tokio::sync::Notify;
use tracing::warn;

use crate::actors::PolledTasks;
use crate::clock::Clock;
use crate::enqueue::{EnqueueError, Enqueuer};
use crate::store::PartitionId;

/// One topic of `partitions` logs.
pub(super) struct Topic {
    partitions: u32,
    /// The producer's grace window for tasks due in the past.
    grace: Duration,
    /// Whose "now" the producer's checks read (the engine's).
    clock: Arc<dyn Clock>,
    logs: Mutex<Vec<Log>>,
    /// Told of every record written, so the consumer polls at once.
    appended: Notify,
}

/// A partition's records (each with its `traceparent` header, if any) and how far the
/// consumer committed.
#[derive(Default)]
struct Log {
    records: Vec<(Vec<u8>, Option<String>)>,
    committed: usize,
}

/// A poll: per partition, its records decoded for the tree and the offset after the last one.
pub(super) type Polled = BTreeMap<PartitionId, (PolledTasks, usize)>;

impl Topic {
    pub(super) fn new(partitions: u32, grace: Duration, clock: Arc<dyn Clock>) -> Topic {
        Topic {
            partitions,
            grace,
            clock,
            logs: Mutex::new((0..partitions).map(|_| Log::default()).collect()),
            appended: Notify::new(),
        }
    }

    /// `Scheduler::schedule_task`: the client's checks as of the engine's now, then the record.
    pub(super) fn schedule(&self, task: &Task) -> Result<(), ScheduleError> {
        scheduler_client::validate(task, self.clock.now(), self.grace)?;
        let record = wire::encode(task);
        if record.len() > defaults::MAX_TASK_BYTES {
            return Err(ScheduleError::TooLarge {
                size: record.len(),
                max: defaults::MAX_TASK_BYTES,
            });
        }
        let trace = task
            .trace_parent
            .clone()
            .or_else(scheduler_client::trace::current_trace_parent);
        self.append(&task.ordering_id, record, trace);
        Ok(())
    }

    /// `Scheduler::cancel_task`.
    pub(super) fn cancel(&self, key: &TaskKey) -> Result<(), ScheduleError> {
        wire::check_key(&key.ordering_id, &key.uniqueness_key)?;
        self.append(&key.ordering_id, wire::encode_cancel(key), None);
        Ok(())
    }

    /// `Scheduler::reschedule`: checked as a task of the identity due at `to` would be.
    pub(super) fn reschedule(
        &self,
        identity: &TaskIdentity,
        to: DateTime<Utc>,
    ) -> Result<(), ScheduleError> {
        let to = scheduler_client::truncate_to_millis(to);
        let as_task = Task::new(
            identity.ordering_id.clone(),
            to,
            identity.uniqueness_key.clone(),
            Default::default(),
        );
        scheduler_client::validate(&as_task, self.clock.now(), self.grace)?;
        let record = wire::encode_reschedule(identity, to);
        self.append(&identity.ordering_id, record, None);
        Ok(())
    }

    /// `Scheduler::cancel_identity`.
    pub(super) fn cancel_identity(&self, identity: &TaskIdentity) -> Result<(), ScheduleError> {
        wire::check_key(&identity.ordering_id, &identity.uniqueness_key)?;
        let record = wire::encode_cancel_identity(identity);
        self.append(&identity.ordering_id, record, None);
        Ok(())
    }

    fn append(&self, ordering_id: &str, record: Vec<u8>, trace_parent: Option<String>) {
        let partition = partition_for(ordering_id, self.partitions);
        if let Some(log) = self.logs().get_mut(partition as usize) {
            log.records.push((record, trace_parent));
        }
        self.appended.notify_one();
    }

    /// Resolves once a record was written since the last call (at once if one was meanwhile).
    pub(super) async fn appended(&self) {
        self.appended.notified().await;
    }

    /// The records after each partition's committed offset, up to `batch` per partition,
    /// decoded as the node's poll loop decodes them (records over `max_record_bytes`, or that
    /// do not decode, are parked: logged and skipped).
    pub(super) fn poll(&self, batch: usize, max_record_bytes: usize) -> Polled {
        let logs = self.logs();
        let mut polled = Polled::new();
        for (partition, log) in (0..).zip(logs.iter()) {
            let end = log.records.len().min(log.committed + batch.max(1));
            if log.committed == end {
                continue;
            }
            let mut tasks = PolledTasks::default();
            for offset in log.committed..end {
                let Some((record, trace_parent)) = log.records.get(offset) else {
                    continue;
                };
                add(
                    &mut tasks,
                    partition,
                    offset as i64,
                    (record, trace_parent.as_deref()),
                    max_record_bytes,
                );
            }
            polled.insert(partition, (tasks, end));
        }
        polled
    }

    /// Commits `partition` up to `next` (its tree made what came before durable).
    pub(super) fn commit(&self, partition: PartitionId, next: usize) {
        if let Some(log) = self.logs().get_mut(partition as usize) {
            log.committed = log.committed.max(next);
        }
    }

    fn logs(&self) -> MutexGuard<'_, Vec<Log>> {
        self.logs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One record (its bytes and `traceparent` header) into the partition's batch, as the node's
/// poll loop adds it.
fn add(
    tasks: &mut PolledTasks,
    partition: PartitionId,
    offset: i64,
    (record, trace_parent): (&[u8], Option<&str>),
    max_record_bytes: usize,
) {
    match wire::decode_record(Some(record), max_record_bytes) {
        Ok(Record::Task(mut task)) => {
            task.trace_parent = trace_parent.map(str::to_string);
            tasks.add(partition, offset, Record::Task(task));
        }
        Ok(record) => tasks.add(partition, offset, record),
        Err(e) => warn!(partition, offset, error = %e, "record parked"),
    }
}

/// The engine's producer in the kit: what a node enqueues (a group's join, sub-tasks, a
/// schedule's ticks and runs) goes to the topic like a producer's task.
pub(super) struct TopicEnqueuer(pub(super) Arc<Topic>);

impl Enqueuer for TopicEnqueuer {
    fn enqueue(&self, task: Task) -> BoxFuture<'static, Result<(), EnqueueError>> {
        let written = self.0.schedule(&task).map_err(|e| EnqueueError {
            task: task.key().to_string(),
            source: Arc::new(e),
        });
        futures::future::ready(written).boxed()
    }
}
