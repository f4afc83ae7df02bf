//! The Kafka side of a node: one consumer in the group, polled on its own thread. Each polled
//! batch is decoded, grouped by partition and handed to the TopicSupervisor; offsets are
//! committed only for partitions whose tasks are durable, the others are sought back (see
//! `pending_rewinds.rs`). Rebalance callbacks tear the partition trees down (revoke) and build
//! fresh ones (assign).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::Addr;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use scheduler_client::wire::{self, Record};
use scheduler_client::{partition_for, trace, Task};
use tracing::{error, info, warn};

use super::pending_rewinds::PendingRewinds;
use crate::actors::topic_supervisor::{
    AssignPartitions, ProcessTaskBatch, RevokePartitions, TopicSupervisor,
};
use crate::actors::PolledTasks;
use crate::metrics::{Metrics, ParkReason, Parked, RebalanceKind};
use crate::store::PartitionId;

/// How long one poll waits for the first message of a batch.
const POLL_WAIT: Duration = Duration::from_millis(100);
/// Pause after a batch could not be persisted, before polling again.
const PERSIST_RETRY_PAUSE: Duration = Duration::from_secs(1);
/// How long a seek back to a batch not persisted may take.
const SEEK_TIMEOUT: Duration = Duration::from_secs(5);

/// Rebalance handling: runs inside `poll`, on the consumer thread.
pub struct RebalanceHandler {
    pub(crate) topic: String,
    pub(crate) supervisor: Addr<TopicSupervisor>,
    pub(crate) isolation_wait: Duration,
    pub(crate) owned: Arc<Mutex<Vec<PartitionId>>>,
    pub(crate) shutting_down: Arc<AtomicBool>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) lag: Arc<Mutex<HashMap<PartitionId, i64>>>,
    /// The poll loop's pending seeks back; those of revoked partitions are dropped.
    pub(crate) rewinds: Arc<Mutex<PendingRewinds>>,
}

impl RebalanceHandler {
    fn set_owned(&self, partitions: Vec<PartitionId>) {
        *self.owned.lock().unwrap_or_else(PoisonError::into_inner) = partitions;
    }
}

impl ClientContext for RebalanceHandler {
    /// Keeps the consumer lag of each partition (the client's statistics, every few seconds).
    fn stats(&self, statistics: Statistics) {
        if let Some(topic) = statistics.topics.get(&self.topic) {
            let mut lag = self.lag.lock().unwrap_or_else(PoisonError::into_inner);
            lag.clear();
            for (partition, stats) in &topic.partitions {
                if let Some(value) = lag_of(stats).filter(|_| *partition >= 0) {
                    lag.insert(*partition, value);
                }
            }
        }
    }
}

/// Records between what this node has consumed (or, before that, committed) and the end of the
/// partition. librdkafka reports -1 until something is consumed or committed, e.g. for an empty
/// partition; then everything from the low watermark is pending. `None` while the high
/// watermark is unknown.
fn lag_of(stats: &rdkafka::statistics::Partition) -> Option<i64> {
    if stats.hi_offset < 0 {
        return None;
    }
    if stats.consumer_lag >= 0 {
        return Some(stats.consumer_lag);
    }
    let consumed = [stats.app_offset, stats.committed_offset]
        .into_iter()
        .filter(|o| *o >= 0)
        .max()
        .unwrap_or(stats.lo_offset.max(0));
    Some((stats.hi_offset - consumed).max(0))
}

impl ConsumerContext for RebalanceHandler {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            let revoked = partitions_of(list, &self.topic);
            self.metrics.rebalanced(RebalanceKind::Revoked, &revoked);
            self.set_owned(Vec::new());
            self.rewinds
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .forget(&revoked);
            let drained = match futures::executor::block_on(self.supervisor.send(RevokePartitions))
            {
                Ok(drained) => drained,
                Err(e) => {
                    error!(error = %e, "actor system unavailable while revoking partitions");
                    false
                }
            };
            // Tasks that outlived the drain get a little more time before another node may
            // start their partition. When every running task finished there is nothing to wait
            // for, and the next owner starts at once.
            if !drained && !self.shutting_down.load(Ordering::SeqCst) {
                warn!(
                    wait_ms = self.isolation_wait.as_millis() as u64,
                    "tasks still running after the drain; waiting before releasing the partitions"
                );
                std::thread::sleep(self.isolation_wait);
            }
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => {
                let assigned = partitions_of(list, &self.topic);
                self.metrics.rebalanced(RebalanceKind::Assigned, &assigned);
                if let Err(e) = futures::executor::block_on(
                    self.supervisor.send(AssignPartitions(assigned.clone())),
                ) {
                    error!(error = %e, "actor system unavailable while assigning partitions");
                }
                self.set_owned(assigned);
            }
            Rebalance::Error(e) => warn!(error = %e, "rebalance error"),
            Rebalance::Revoke(_) => {}
        }
    }
}

fn partitions_of(list: &TopicPartitionList, topic: &str) -> Vec<PartitionId> {
    let mut partitions: Vec<PartitionId> = list
        .elements_for_topic(topic)
        .iter()
        .map(|e| e.partition())
        .collect();
    partitions.sort_unstable();
    partitions
}

/// What the poll loop needs.
pub struct PollLoop {
    pub(crate) consumer: BaseConsumer<RebalanceHandler>,
    pub(crate) topic: String,
    pub(crate) partition_count: u32,
    pub(crate) batch_size: usize,
    pub(crate) max_record_bytes: usize,
    pub(crate) supervisor: Addr<TopicSupervisor>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) metrics: Arc<Metrics>,
    /// The partitions assigned now (kept by the rebalance handler).
    pub(crate) owned: Arc<Mutex<Vec<PartitionId>>>,
    /// The partitions to seek back before they go on (shared with the rebalance handler).
    pub(crate) rewinds: Arc<Mutex<PendingRewinds>>,
}

/// The offsets to commit when the consumer stops: those recorded for partitions still assigned.
/// A partition revoked earlier is owned elsewhere now; committing the offset recorded here
/// would rewind its new owner.
fn final_offsets(
    committed: &BTreeMap<PartitionId, i64>,
    assigned: &[PartitionId],
) -> Vec<(PartitionId, i64)> {
    committed
        .iter()
        .filter(|(partition, _)| assigned.contains(partition))
        .map(|(partition, next)| (*partition, *next))
        .collect()
}

/// A polled batch: tasks by partition, and per partition the offsets it spans.
#[derive(Default)]
struct Batch {
    tasks: BTreeMap<PartitionId, PolledTasks>,
    /// First and last offset seen per partition.
    offsets: BTreeMap<PartitionId, (i64, i64)>,
    records: usize,
}

impl PollLoop {
    /// Polls until asked to stop; then commits synchronously, drains the partition trees and
    /// leaves the group.
    pub fn run(self) {
        let mut committed = BTreeMap::new();
        while !self.stop.load(Ordering::SeqCst) {
            self.seek_back();
            let batch = self.poll_batch();
            if !batch.offsets.is_empty() {
                self.process(batch, &mut committed);
            }
        }
        info!("consumer stopping: committing, draining partitions and leaving the group");
        let assigned = self
            .owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let offsets = final_offsets(&committed, &assigned);
        if offsets.is_empty() {
            info!("offsets committed: nothing new since the last commit");
        } else {
            let mut last = TopicPartitionList::new();
            for (partition, next) in offsets {
                if let Err(e) =
                    last.add_partition_offset(&self.topic, partition, Offset::Offset(next))
                {
                    warn!(partition, error = %e, "cannot build the final offset commit");
                }
            }
            match self.consumer.commit(&last, CommitMode::Sync) {
                Ok(()) => info!(partitions = last.count(), "offsets committed"),
                Err(e) => {
                    warn!(error = %e, "final offset commit failed; the next owner may re-read some records (harmless)");
                }
            }
        }
        match futures::executor::block_on(self.supervisor.send(RevokePartitions)) {
            Ok(true) => info!(partitions = assigned.len(), "partition trees drained"),
            Ok(false) => warn!(partitions = assigned.len(),
                "partition trees stopped; a drain timed out: tasks still running may run again on the next owner"),
            Err(e) => error!(error = %e, "actor system unavailable while draining"),
        }
        self.consumer.unsubscribe();
        let topic = self.topic.clone();
        // Dropping the consumer closes it, which leaves the group.
        drop(self);
        info!(%topic, "left the consumer group");
    }

    fn poll_batch(&self) -> Batch {
        let mut batch = Batch::default();
        let mut wait = POLL_WAIT;
        while batch.records < self.batch_size {
            match self.consumer.poll(wait) {
                None => break,
                Some(Err(e)) => {
                    warn!(error = %e, "Kafka poll error");
                    break;
                }
                Some(Ok(message)) => self.add(&mut batch, &message),
            }
            wait = Duration::ZERO;
        }
        batch
    }

    fn add(&self, batch: &mut Batch, message: &BorrowedMessage<'_>) {
        let (partition, offset) = (message.partition(), message.offset());
        batch.records += 1;
        if self.rewinds().holds(partition) {
            // Past a batch not persisted: read again once the partition is sought back.
            return;
        }
        let span = batch.offsets.entry(partition).or_insert((offset, offset));
        span.0 = span.0.min(offset);
        span.1 = span.1.max(offset);
        let decoded = wire::decode_record(message.payload(), self.max_record_bytes)
            .map_err(|e| (ParkReason::Invalid(e.reason()), e.to_string()))
            .and_then(|record| {
                let ordering_id = match &record {
                    Record::Task(task) => &task.ordering_id,
                    Record::Cancel(key) => &key.ordering_id,
                    Record::CancelIdentity(identity) | Record::Reschedule(identity, _) => {
                        &identity.ordering_id
                    }
                };
                let expected = partition_for(ordering_id, self.partition_count);
                if expected == partition {
                    Ok(record)
                } else {
                    Err((
                        ParkReason::WrongPartition,
                        format!("orderingId {ordering_id:?} belongs to partition {expected}, not {partition}"),
                    ))
                }
            });
        match decoded {
            Ok(record) => {
                let record = match record {
                    Record::Task(task) => Record::Task(with_trace_parent(task, message)),
                    other => other,
                };
                batch
                    .tasks
                    .entry(partition)
                    .or_default()
                    .add(partition, offset, record);
            }
            Err((reason, detail)) => {
                let record = Parked::Record {
                    topic: &self.topic,
                    offset,
                };
                self.metrics.parked(partition, record, reason, &detail);
            }
        }
    }

    /// Persists a batch and commits the offsets of the partitions now durable (recording them
    /// in `committed`); the others are to be sought back and polled again.
    fn process(&self, mut batch: Batch, committed: &mut BTreeMap<PartitionId, i64>) {
        let request = ProcessTaskBatch(std::mem::take(&mut batch.tasks));
        let processed = match futures::executor::block_on(self.supervisor.send(request)) {
            Ok(processed) => processed,
            Err(e) => {
                error!(error = %e, "actor system unavailable; the batch will be polled again");
                let all: Vec<PartitionId> = batch.offsets.keys().copied().collect();
                self.commit_durable(&batch, &all, committed);
                return;
            }
        };
        // Partitions with only parked records in this batch are done with, too.
        let failed: Vec<PartitionId> = processed.failed.iter().map(|(p, _)| *p).collect();
        for (partition, reason) in &processed.failed {
            warn!(partition, %reason, "tasks not persisted; they will be polled again");
        }
        self.commit_durable(&batch, &failed, committed);
        if !failed.is_empty() {
            std::thread::sleep(PERSIST_RETRY_PAUSE);
        }
    }

    /// Commits (async) what `batch` made durable, those of its partitions not `failed` nor
    /// waiting to be sought back; the failed ones are left to be sought back.
    fn commit_durable(
        &self,
        batch: &Batch,
        failed: &[PartitionId],
        committed: &mut BTreeMap<PartitionId, i64>,
    ) {
        let owned = self
            .owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let durable = self.rewinds().settle(&batch.offsets, failed, &owned);
        let mut commit = TopicPartitionList::new();
        for (partition, next) in durable {
            committed.insert(partition, next);
            if let Err(e) =
                commit.add_partition_offset(&self.topic, partition, Offset::Offset(next))
            {
                warn!(partition, error = %e, "cannot build the offset commit");
            }
        }
        if commit.count() > 0 {
            if let Err(e) = self.consumer.commit(&commit, CommitMode::Async) {
                warn!(error = %e, "offset commit failed; records may be processed again (harmless)");
            }
        }
    }

    /// Seeks each partition whose batch was not persisted back to that batch's first offset,
    /// so nothing is skipped. A partition whose seek fails stays pending: its records are left
    /// alone and nothing of it is committed until a seek succeeds, retried before every poll.
    fn seek_back(&self) {
        let mut rewinds = self.rewinds();
        for (partition, offset) in rewinds.due() {
            match self
                .consumer
                .seek(&self.topic, partition, Offset::Offset(offset), SEEK_TIMEOUT)
            {
                Ok(()) => {
                    let failed_attempts = rewinds.sought(partition);
                    if failed_attempts > 0 {
                        info!(partition, offset, failed_attempts, "sought back at last");
                    }
                }
                Err(e) => {
                    let attempts = rewinds.seek_failed(partition);
                    self.metrics
                        .seek_back_failed(partition, offset, attempts, &e);
                }
            }
        }
    }

    fn rewinds(&self) -> std::sync::MutexGuard<'_, PendingRewinds> {
        self.rewinds.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `task` with the W3C trace context its record carries (the `traceparent` header), when well
/// formed: its execution's span links to it.
fn with_trace_parent(mut task: Task, message: &BorrowedMessage<'_>) -> Task {
    task.trace_parent = message.headers().and_then(|headers| {
        headers
            .iter()
            .find(|h| h.key == trace::TRACEPARENT_HEADER)
            .and_then(|h| std::str::from_utf8(h.value?).ok())
            .filter(|text| trace::parse_trace_parent(text).is_some())
            .map(str::to_string)
    });
    task
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_commit_leaves_out_partitions_revoked_earlier() {
        let committed = BTreeMap::from([(0, 10), (1, 20), (2, 30)]);
        assert_eq!(
            final_offsets(&committed, &[0, 2, 3]),
            vec![(0, 10), (2, 30)]
        );
        assert!(final_offsets(&committed, &[]).is_empty());
    }
}
