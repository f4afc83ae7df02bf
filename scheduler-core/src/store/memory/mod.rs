//! In-memory [`super::TaskStore`] for unit tests, the simulation and the testing kit
//! (`crate::testing`): the same semantics as the Cassandra store,
//! plus failure injection and latency (here) and the tables' operations (`tables.rs`).
//!
//! Over 500 lines: the in-memory store's request path (gate, injected failures, latency) and the
//! helpers by which tests read its state.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::{Task, TaskKey};

use super::{AttemptRecord, LeaseRecord, PartitionId, StatusRecord, StoreError, StoreResult};

/// Cassandra's limit on a clustering key, in bytes.
pub(in crate::store) const CLUSTERING_KEY_LIMIT: usize = 65_535;

/// Every table's rows, and what the reads of them counted.
#[derive(Default)]
pub(in crate::store) struct State {
    pub(in crate::store) schedule: BTreeMap<(PartitionId, TaskKey), Task>,
    pub(in crate::store) status: HashMap<(PartitionId, TaskKey), StatusRecord>,
    pub(in crate::store) attempts: HashMap<(PartitionId, TaskKey), Vec<AttemptRecord>>,
    pub(in crate::store) epochs: HashMap<PartitionId, u64>,
    /// Each partition's last claim: by whom, when.
    pub(in crate::store) claims: HashMap<PartitionId, (String, DateTime<Utc>)>,
    /// Leases by partition and holder, with when they expire (tokio time, like Cassandra's TTL).
    pub(in crate::store) leases:
        BTreeMap<(PartitionId, String), (LeaseRecord, tokio::time::Instant)>,
    /// Released leases' rows: every read of the partition steps over them, and over the expired
    /// ones (an expired cell is a tombstone until compaction purges it, after `gc_grace_seconds`:
    /// longer than any simulated run).
    pub(in crate::store) lease_tombstones: std::collections::BTreeSet<(PartitionId, String)>,
    /// Deleted schedule rows: Cassandra keeps a tombstone a load must step over.
    pub(in crate::store) tombstones: std::collections::BTreeSet<(PartitionId, TaskKey)>,
    /// The index of hour buckets in use, with when each index row was written.
    pub(in crate::store) buckets: BTreeMap<(PartitionId, DateTime<Utc>), u64>,
    /// When each schedule row was written (Cassandra's write timestamp).
    pub(in crate::store) row_stamps: HashMap<(PartitionId, TaskKey), u64>,
    /// The clock of write timestamps: one tick per write.
    pub(in crate::store) stamp: u64,
    /// Each partition's low-water mark.
    pub(in crate::store) low_water: HashMap<PartitionId, super::LowWater>,
    /// Tasks recorded as retrying.
    pub(in crate::store) retrying: std::collections::BTreeSet<(PartitionId, TaskKey)>,
    /// Deleted rows of `retrying_tasks`: its reads step over them.
    pub(in crate::store) retrying_tombstones: std::collections::BTreeSet<(PartitionId, TaskKey)>,
    /// Cancellations deferred, with when each was polled.
    pub(in crate::store) deferred_cancels: BTreeMap<(PartitionId, TaskKey), DateTime<Utc>>,
    /// Deleted rows of `deferred_cancels`: its reads step over them.
    pub(in crate::store) deferred_cancel_tombstones:
        std::collections::BTreeSet<(PartitionId, TaskKey)>,
    /// Identity records deferred, by partition, orderingId and offset.
    pub(in crate::store) deferred_identity:
        BTreeMap<(PartitionId, String, i64), super::DeferredIdentityRecord>,
    /// Deleted rows of `deferred_identity_records`: its reads step over them.
    pub(in crate::store) deferred_identity_tombstones:
        std::collections::BTreeSet<(PartitionId, String, i64)>,
    /// Deferred-task lists' rows (`deferred_tasks`).
    pub(in crate::store) deferred:
        std::collections::BTreeSet<(super::deferred::DeferralList, scheduler_client::RunOrder)>,
    /// Their deleted rows: reads step over them.
    pub(in crate::store) deferred_tombstones:
        std::collections::BTreeSet<(super::deferred::DeferralList, scheduler_client::RunOrder)>,
    /// Cassandra's `tombstone_failure_threshold` here, when not the default.
    pub(in crate::store) tombstone_failure_threshold: Option<usize>,
    /// Tombstones reads have stepped over.
    pub(in crate::store) tombstones_read: usize,
    /// The most tombstones one read stepped over, and its operation.
    pub(in crate::store) most_tombstones_in_a_read: (usize, &'static str),
    /// Rows of the groups' tables (`group_members`, `group_marks`, `group_progress`) reads
    /// have returned, the header counted as a row.
    pub(in crate::store) group_rows_read: usize,
    /// Every status write, in order, with when it was applied (the simulation checks that a
    /// final status never changes and that nothing starts after it).
    pub(in crate::store) status_writes: Vec<(TaskKey, StatusRecord, tokio::time::Instant)>,
    /// When set, the status retention and the clock identity records expire by (as
    /// `task_identities`' TTL), with when each record expires (none: kept until deleted).
    pub(in crate::store) retention: Option<(std::time::Duration, Arc<dyn crate::clock::Clock>)>,
    /// The rows of the tables whose in-memory twin lives with the table (see [`State::table`]),
    /// by their type.
    pub(in crate::store) tables: HashMap<std::any::TypeId, Box<dyn std::any::Any + Send>>,
    /// When set, a multi-row write applies its rows in a random order, as concurrent inserts
    /// land in Cassandra.
    pub(in crate::store) write_order: Option<fastrand::Rng>,
}

/// Tombstones a read may step over before Cassandra refuses it (`tombstone_failure_threshold`).
const TOMBSTONE_FAILURE_THRESHOLD: usize = 100_000;

impl State {
    /// The rows of a table whose twin lives with the table (`store/suspensions.rs`, say), of
    /// the type that twin keeps them in: empty at first.
    pub(in crate::store) fn table<T: Default + Send + 'static>(&mut self) -> &mut T {
        let rows = self
            .tables
            .entry(std::any::TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()));
        match rows.downcast_mut::<T>() {
            Some(rows) => rows,
            // (Inserted under its own type just above.)
            None => unreachable!("a table's rows are kept under their own type"),
        }
    }

    /// Counts `stepped_over` tombstones read by `operation`, and refuses the read, as
    /// Cassandra does, past the tombstone failure threshold.
    pub(in crate::store) fn step_over_tombstones(
        &mut self,
        operation: &'static str,
        stepped_over: usize,
    ) -> StoreResult<()> {
        self.tombstones_read += stepped_over;
        if stepped_over > self.most_tombstones_in_a_read.0 {
            self.most_tombstones_in_a_read = (stepped_over, operation);
        }
        let limit = self
            .tombstone_failure_threshold
            .unwrap_or(TOMBSTONE_FAILURE_THRESHOLD);
        if stepped_over > limit {
            let aborted = format!("scanned over {stepped_over} tombstones; query aborted");
            return Err(StoreError::query(operation, std::io::Error::other(aborted)));
        }
        Ok(())
    }
}

/// An in-memory store. Clones share state.
#[derive(Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    failures_to_inject: Arc<AtomicUsize>,
    pub(in crate::store) loaded_rows: Arc<AtomicUsize>,
    /// Rows found by single-task reads of the schedule.
    pub(in crate::store) task_rows_read: Arc<AtomicUsize>,
    /// Rows read from deferred-task lists.
    pub(in crate::store) deferred_rows_read: Arc<AtomicUsize>,
    /// Each task a load returned, once (loads may read a row again).
    pub(in crate::store) loaded_keys:
        Arc<Mutex<std::collections::BTreeSet<(PartitionId, TaskKey)>>>,
    /// Hour buckets loads have queried (Cassandra's load walks one query per bucket).
    pub(in crate::store) buckets_read: Arc<AtomicUsize>,
    /// Requests made so far, by operation (the Cassandra store's `statements_run`).
    requests: Arc<Mutex<BTreeMap<&'static str, usize>>>,
    /// Failures to inject into one operation only, by name.
    op_failures: Arc<Mutex<HashMap<&'static str, usize>>>,
    /// Added latency per operation name (the value is read when the call is made, so a slow
    /// read answers with what was true when it began).
    latency: Arc<Mutex<HashMap<&'static str, std::time::Duration>>>,
    /// What this handle's requests pass first, if anything (not shared with its clones made
    /// before [`MemoryStore::with_gate`]).
    gate: Option<Arc<dyn Gate>>,
}

/// What every request of a store handle passes first. The simulation pauses a node's process
/// with one: a request made while it is paused is not sent, and one whose answer comes after a
/// pause began loses it (it may have been applied); both fail once the process runs again, as
/// requests cut by a long pause time out.
pub(crate) trait Gate: Send + Sync + 'static {
    /// `operation` is about to be sent: a token of the moment, or `None` if it is not sent.
    fn send(&self, operation: &'static str) -> Option<u64>;
    /// Whether the answer of a request sent at `sent` comes back; if not, resolves (to false)
    /// once the process runs again.
    fn answer(&self, sent: Option<u64>) -> BoxFuture<'static, bool>;
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets Cassandra's tombstone failure threshold (100,000 by default): a read stepping over
    /// more tombstones fails.
    pub fn set_tombstone_failure_threshold(&self, limit: usize) {
        self.lock().tombstone_failure_threshold = Some(limit);
    }

    /// A handle on the same tables whose every request passes `gate` first.
    pub(crate) fn with_gate(&self, gate: Arc<dyn Gate>) -> MemoryStore {
        MemoryStore {
            gate: Some(gate),
            ..self.clone()
        }
    }

    /// Makes the next `n` operations fail.
    pub fn fail_next(&self, n: usize) {
        self.failures_to_inject.store(n, Ordering::SeqCst);
    }

    /// From now on, applies the rows of one write in an order drawn from `seed`, like
    /// Cassandra applying concurrent inserts (of one key, any of them may win).
    pub fn with_unordered_writes(self, seed: u64) -> Self {
        self.lock().write_order = Some(fastrand::Rng::with_seed(seed));
        self
    }

    /// From now on, keeps identity records for `status_ttl` after their task's time, as the
    /// Cassandra store's TTL does (`store::identities::identity_retention`, 0: until deleted),
    /// by `clock`: a record past its expiry reads as none.
    pub fn with_status_ttl(
        self,
        status_ttl: std::time::Duration,
        clock: Arc<dyn crate::clock::Clock>,
    ) -> Self {
        self.lock().retention = Some((status_ttl, clock));
        self
    }

    /// Every status write so far, in order, with when it was applied.
    pub fn status_writes(&self) -> Vec<(TaskKey, StatusRecord, tokio::time::Instant)> {
        self.lock().status_writes.clone()
    }

    /// Every task's attempt history as written (a write of an attempt number already there
    /// is kept beside it: Cassandra would overwrite it, the simulation wants to see it).
    pub fn attempt_histories(&self) -> Vec<(TaskKey, Vec<AttemptRecord>)> {
        self.lock()
            .attempts
            .iter()
            .map(|((_, k), a)| (k.clone(), a.clone()))
            .collect()
    }

    /// Every task's recorded final state.
    pub fn statuses(&self) -> Vec<((PartitionId, TaskKey), StatusRecord)> {
        self.lock()
            .status
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Makes the next `n` calls of `operation` (e.g. "schedule load") fail.
    pub fn fail_op(&self, operation: &'static str, n: usize) {
        self.op_failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(operation, n);
    }

    /// Injected failures not yet consumed.
    pub fn fail_next_remaining(&self) -> usize {
        self.failures_to_inject.load(Ordering::SeqCst)
    }

    /// Delays every later `operation` (e.g. "epoch read") by `latency`.
    pub fn set_latency(&self, operation: &'static str, latency: std::time::Duration) {
        self.latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(operation, latency);
    }

    fn delayed<T: Send + 'static>(
        &self,
        operation: &'static str,
        result: StoreResult<T>,
    ) -> BoxFuture<'static, StoreResult<T>> {
        let latency = self
            .latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(operation)
            .copied();
        match latency {
            None => futures::future::ready(result).boxed(),
            Some(latency) => async move {
                tokio::time::sleep(latency).await;
                result
            }
            .boxed(),
        }
    }

    /// Hour buckets every load so far would have queried in Cassandra.
    pub fn buckets_read(&self) -> usize {
        self.buckets_read.load(Ordering::SeqCst)
    }

    /// Rows returned by every load so far.
    pub fn loaded_rows(&self) -> usize {
        self.loaded_rows.load(Ordering::SeqCst)
    }

    /// Rows of the schedule read so far: every row loads returned and every single-task read
    /// ([`crate::store::ScheduleStore::scheduled_task`]) that found its row.
    pub fn schedule_rows_read(&self) -> usize {
        self.loaded_rows() + self.task_rows_read.load(Ordering::SeqCst)
    }

    /// Rows read from deferred-task lists so far.
    pub fn deferred_rows_read(&self) -> usize {
        self.deferred_rows_read.load(Ordering::SeqCst)
    }

    /// The rows of the deferred-task lists of `partition`'s trees.
    pub fn deferred_listed(&self, partition: PartitionId) -> usize {
        (self.lock().deferred.iter())
            .filter(|(l, _)| l.partition == partition)
            .count()
    }

    /// How many distinct tasks loads have returned.
    pub fn loaded_tasks(&self) -> usize {
        self.loaded_keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The recorded final state of a task.
    pub fn status_of(&self, partition: PartitionId, key: &TaskKey) -> Option<StatusRecord> {
        self.lock().status.get(&(partition, key.clone())).cloned()
    }

    /// How many requests of `operation` were made so far.
    pub fn requests_of(&self, operation: &str) -> usize {
        let requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        requests.get(operation).copied().unwrap_or(0)
    }

    /// Rows of the groups' tables read so far (members, marks, and each header read as one).
    pub fn group_rows_read(&self) -> usize {
        self.lock().group_rows_read
    }

    /// Records a task as retrying in `retrying_tasks`, as a node of a release before schema
    /// version 8 did (`forget` deletes the row, leaving a tombstone).
    pub fn record_legacy_retrying(&self, partition: PartitionId, key: TaskKey, forget: bool) {
        let mut state = self.lock();
        if forget {
            state.retrying.remove(&(partition, key.clone()));
            state.retrying_tombstones.insert((partition, key));
        } else {
            state.retrying_tombstones.remove(&(partition, key.clone()));
            state.retrying.insert((partition, key));
        }
    }

    /// Writes `partition`'s low-water mark as a node of a release before schema version 8 did
    /// (no list of the tasks behind it).
    pub fn set_legacy_low_water(&self, partition: PartitionId, at: DateTime<Utc>) {
        let mark = super::LowWater {
            at,
            behind: None,
            lists: Vec::new(),
        };
        self.lock().low_water.insert(partition, mark);
    }

    /// Tasks currently in the schedule of `partition`, in key order.
    pub fn scheduled(&self, partition: PartitionId) -> Vec<TaskKey> {
        self.lock()
            .schedule
            .keys()
            .filter(|(p, _)| *p == partition)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// The attempts recorded for a task.
    pub fn attempts(&self, partition: PartitionId, key: &TaskKey) -> Vec<AttemptRecord> {
        self.lock()
            .attempts
            .get(&(partition, key.clone()))
            .cloned()
            .unwrap_or_default()
    }

    /// Tombstones every read so far stepped over (what Cassandra would count).
    pub fn tombstones_read(&self) -> usize {
        self.lock().tombstones_read
    }

    /// The most tombstones one read stepped over so far, and the read's operation.
    pub fn most_tombstones_in_a_read(&self) -> (usize, &'static str) {
        self.lock().most_tombstones_in_a_read
    }

    /// The low-water mark recorded for `partition`.
    pub fn low_water_of(&self, partition: PartitionId) -> Option<DateTime<Utc>> {
        self.lock().low_water.get(&partition).map(|m| m.at)
    }

    /// The tasks listed behind `partition`'s low-water mark.
    pub fn behind_low_water(&self, partition: PartitionId) -> Vec<TaskKey> {
        let state = self.lock();
        let mark = state.low_water.get(&partition);
        mark.and_then(|m| m.behind.clone()).unwrap_or_default()
    }

    /// The deferred-task lists named by `partition`'s low-water mark.
    pub fn lists_behind_low_water(&self, partition: PartitionId) -> Vec<super::ListBehind> {
        let state = self.lock();
        let mark = state.low_water.get(&partition);
        mark.map(|m| m.lists.clone()).unwrap_or_default()
    }

    /// Indexed hour buckets of `partition`.
    pub fn indexed_buckets(&self, partition: PartitionId) -> Vec<DateTime<Utc>> {
        self.lock()
            .buckets
            .keys()
            .filter(|(p, _)| *p == partition)
            .map(|(_, b)| *b)
            .collect()
    }

    /// Claims `partition` as another node would: every tree holding an older epoch is fenced.
    pub fn claim_elsewhere(&self, partition: PartitionId) {
        *self.lock().epochs.entry(partition).or_default() += 1;
    }

    pub(in crate::store) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `f` applied to the tables as `operation`, unless an injected failure of it fails it first.
    pub(in crate::store) fn run<T: Send + 'static>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&mut State) -> T,
    ) -> BoxFuture<'static, StoreResult<T>> {
        self.request(operation, true, move |state| Ok(f(state)))
    }

    /// `f` applied to the tables as `operation` (never an injected failure: those are meant for
    /// the schedule and status, not ownership and leases).
    pub(in crate::store) fn apply<T: Send + 'static>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&mut State) -> StoreResult<T>,
    ) -> BoxFuture<'static, StoreResult<T>> {
        self.request(operation, false, f)
    }

    /// Every request: through the gate, if any; an injected failure (if `injectable`); `f`
    /// applied at once; its answer after the operation's latency.
    fn request<T: Send + 'static>(
        &self,
        operation: &'static str,
        injectable: bool,
        f: impl FnOnce(&mut State) -> StoreResult<T>,
    ) -> BoxFuture<'static, StoreResult<T>> {
        *(self.requests.lock().unwrap_or_else(PoisonError::into_inner))
            .entry(operation)
            .or_default() += 1;
        let cut = move || {
            let cut = std::io::Error::other("cut off by a pause of the process");
            Err(StoreError::query(operation, cut))
        };
        let sent = match &self.gate {
            Some(gate) => gate.send(operation),
            None => Some(0),
        };
        let Some(sent) = sent else {
            let gate = self.gate.clone();
            return Box::pin(async move {
                if let Some(gate) = gate {
                    gate.answer(None).await;
                }
                cut()
            });
        };
        let result = if injectable && self.injected(operation) {
            let injected = std::io::Error::other("injected failure");
            Err(StoreError::query(operation, injected))
        } else {
            f(&mut self.lock())
        };
        let answer = self.delayed(operation, result);
        let Some(gate) = self.gate.clone() else {
            return answer;
        };
        Box::pin(async move {
            let answer = answer.await;
            match gate.answer(Some(sent)).await {
                true => answer,
                false => cut(),
            }
        })
    }

    /// Whether an injected failure fails this call of `operation` (and is used up).
    fn injected(&self, operation: &'static str) -> bool {
        let injected_here = {
            let mut by_op = self
                .op_failures
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match by_op.get_mut(operation) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    true
                }
                _ => false,
            }
        };
        injected_here
            || self
                .failures_to_inject
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
    }
}

#[cfg(test)]
mod tests;
