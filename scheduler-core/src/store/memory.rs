//! In-memory [`TaskStore`] for unit tests: the same semantics as the Cassandra store, plus
//! failure injection.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::{Task, TaskKey};

use super::{
    AttemptRecord, AttemptStore, LeaseRecord, LeaseStore, OwnershipStore, PartitionId, ReadCursor,
    RefusedTask, ScheduleStore, StatusRecord, StatusStore, StoreError, StoreResult,
};

/// Cassandra's limit on a clustering key, in bytes.
const CLUSTERING_KEY_LIMIT: usize = 65_535;

#[derive(Default)]
struct State {
    schedule: BTreeMap<(PartitionId, TaskKey), Task>,
    status: HashMap<(PartitionId, TaskKey), StatusRecord>,
    attempts: HashMap<(PartitionId, TaskKey), Vec<AttemptRecord>>,
    epochs: HashMap<PartitionId, u64>,
    /// Leases by partition and holder, with when they expire (tokio time, like Cassandra's TTL).
    leases: BTreeMap<(PartitionId, String), (LeaseRecord, tokio::time::Instant)>,
    /// Deleted schedule rows: Cassandra keeps a tombstone a load must step over.
    tombstones: std::collections::BTreeSet<(PartitionId, TaskKey)>,
    /// Every status write, in order, with when it was applied (the simulation checks that a
    /// final status never changes and that nothing starts after it).
    status_writes: Vec<(TaskKey, StatusRecord, tokio::time::Instant)>,
    /// When set, a multi-row write applies its rows in a random order, as concurrent inserts
    /// land in Cassandra.
    write_order: Option<fastrand::Rng>,
}

/// Tombstones a load may step over before Cassandra refuses it (`tombstone_failure_threshold`).
const TOMBSTONE_FAILURE_THRESHOLD: usize = 100_000;

/// An in-memory store. Clones share state.
#[derive(Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    failures_to_inject: Arc<AtomicUsize>,
    loaded_rows: Arc<AtomicUsize>,
    /// Each task a load returned, once (loads may read a row again).
    loaded_keys: Arc<Mutex<std::collections::BTreeSet<(PartitionId, TaskKey)>>>,
    /// Hour buckets loads have queried (Cassandra's load walks one query per bucket).
    buckets_read: Arc<AtomicUsize>,
    /// Failures to inject into one operation only, by name.
    op_failures: Arc<Mutex<HashMap<&'static str, usize>>>,
    /// Added latency per operation name (the value is read when the call is made, so a slow
    /// read answers with what was true when it began).
    latency: Arc<Mutex<HashMap<&'static str, std::time::Duration>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
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

    /// Every status write so far, in order, with when it was applied.
    pub fn status_writes(&self) -> Vec<(TaskKey, StatusRecord, tokio::time::Instant)> {
        self.lock().status_writes.clone()
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

    /// Claims `partition` as another node would: every tree holding an older epoch is fenced.
    pub fn claim_elsewhere(&self, partition: PartitionId) {
        *self.lock().epochs.entry(partition).or_default() += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run<T: Send + 'static>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&mut State) -> T,
    ) -> BoxFuture<'static, StoreResult<T>> {
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
        let injected = injected_here
            || self
                .failures_to_inject
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        let result = if injected {
            Err(StoreError::Query {
                operation,
                reason: "injected failure".into(),
            })
        } else {
            Ok(f(&mut self.lock()))
        };
        self.delayed(operation, result)
    }
}

impl ScheduleStore for MemoryStore {
    fn persist(
        &self,
        partition: PartitionId,
        tasks: Vec<Task>,
    ) -> BoxFuture<'static, StoreResult<Vec<RefusedTask>>> {
        self.run("task insert", move |s| {
            let mut refused = Vec::new();
            let mut tasks = tasks;
            if let Some(rng) = &mut s.write_order {
                rng.shuffle(&mut tasks);
            }
            for task in tasks {
                let key = task.key();
                // Like Cassandra, which refuses a clustering key over 64 KiB.
                if key.ordering_id.len() + key.uniqueness_key.len() + 8 > CLUSTERING_KEY_LIMIT {
                    refused.push(RefusedTask {
                        key,
                        reason: format!("clustering key longer than {CLUSTERING_KEY_LIMIT} bytes"),
                    });
                    continue;
                }
                s.tombstones.remove(&(partition, key.clone()));
                s.schedule.insert((partition, key), task);
            }
            refused
        })
    }

    fn load(
        &self,
        partition: PartitionId,
        cursor: ReadCursor,
        until: DateTime<Utc>,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<Task>>> {
        let loaded_rows = Arc::clone(&self.loaded_rows);
        let loaded_keys = Arc::clone(&self.loaded_keys);
        let from_bucket = super::hour_bucket(cursor.time());
        let buckets = (super::hour_bucket(until) - from_bucket).num_hours().max(0) as usize + 1;
        self.buckets_read.fetch_add(buckets, Ordering::SeqCst);
        self.run("schedule load", move |s| {
            let lower = match cursor {
                ReadCursor::From(t) => Bound::Included((
                    partition,
                    TaskKey {
                        scheduled_time: t,
                        ordering_id: String::new(),
                        uniqueness_key: String::new(),
                    },
                )),
                ReadCursor::After(k) => Bound::Excluded((partition, k)),
            };
            let tasks = s
                .schedule
                .range((lower.clone(), Bound::Unbounded))
                .take_while(|((p, k), _)| *p == partition && k.scheduled_time < until)
                .take(limit)
                .map(|(_, t)| t.clone())
                .collect::<Vec<Task>>();
            // Like Cassandra, the read steps over the tombstones up to where it stopped.
            let stopped_at = match tasks.last() {
                Some(last) if tasks.len() == limit => Some(last.key()),
                _ => None,
            };
            let stepped_over = s
                .tombstones
                .range((lower, Bound::Unbounded))
                .take_while(|(p, k)| {
                    *p == partition
                        && k.scheduled_time < until
                        && stopped_at.as_ref().is_none_or(|at| k < at)
                })
                .count();
            if stepped_over > TOMBSTONE_FAILURE_THRESHOLD {
                return Err(StoreError::Query {
                    operation: "schedule load",
                    reason: format!("scanned over {stepped_over} tombstones; query aborted"),
                });
            }
            Ok(tasks)
        })
        .map(move |result| {
            let result = result.and_then(|tasks| tasks);
            if let Ok(tasks) = &result {
                loaded_rows.fetch_add(tasks.len(), Ordering::SeqCst);
                let mut keys = loaded_keys.lock().unwrap_or_else(PoisonError::into_inner);
                keys.extend(tasks.iter().map(|t| (partition, t.key())));
            }
            result
        })
        .boxed()
    }

    fn remove_scheduled(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("schedule delete", move |s| {
            if s.schedule.remove(&(partition, key.clone())).is_some() {
                s.tombstones.insert((partition, key));
            }
        })
    }

    fn scheduled_task(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<Task>>> {
        self.run("task read", move |s| {
            s.schedule.get(&(partition, key)).cloned()
        })
    }
}

impl StatusStore for MemoryStore {
    fn status(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>> {
        self.run("status read", move |s| {
            s.status.get(&(partition, key)).cloned()
        })
    }

    fn record_status(
        &self,
        partition: PartitionId,
        key: TaskKey,
        status: StatusRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("status write", move |s| {
            s.status_writes
                .push((key.clone(), status.clone(), tokio::time::Instant::now()));
            s.status.insert((partition, key), status);
        })
    }

    fn cancel(
        &self,
        partition: PartitionId,
        key: TaskKey,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>> {
        self.run("cancel", move |s| {
            match s.status.get(&(partition, key.clone())) {
                Some(existing) => Some(existing.clone()),
                None => {
                    let cancelled = StatusRecord {
                        status: super::TaskStatus::Cancelled,
                        attempts: 0,
                        updated_at: at,
                        last_error: None,
                    };
                    s.status_writes.push((
                        key.clone(),
                        cancelled.clone(),
                        tokio::time::Instant::now(),
                    ));
                    s.status.insert((partition, key), cancelled);
                    None
                }
            }
        })
    }
}

impl AttemptStore for MemoryStore {
    fn attempts(
        &self,
        key: TaskKey,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<AttemptRecord>>> {
        self.run("attempts read", move |s| {
            let mut found: Vec<AttemptRecord> = s
                .attempts
                .iter()
                .filter(|((_, k), _)| *k == key)
                .flat_map(|(_, a)| a.iter().cloned())
                .collect();
            found.sort_by_key(|a| std::cmp::Reverse(a.attempt));
            found.truncate(limit);
            found
        })
    }

    fn record_attempt(
        &self,
        partition: PartitionId,
        key: TaskKey,
        attempt: AttemptRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("attempt write", move |s| {
            s.attempts
                .entry((partition, key))
                .or_default()
                .push(attempt);
        })
    }
}

impl OwnershipStore for MemoryStore {
    // Ownership never takes an injected failure: those are meant for the schedule and status.
    fn claim_partition(
        &self,
        partition: PartitionId,
        _owner: String,
        _at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<u64>> {
        let mut state = self.lock();
        let epoch = state.epochs.entry(partition).or_default();
        *epoch += 1;
        let epoch = *epoch;
        drop(state);
        self.delayed("partition claim", Ok(epoch))
    }

    fn partition_epoch(&self, partition: PartitionId) -> BoxFuture<'static, StoreResult<u64>> {
        let epoch = self.lock().epochs.get(&partition).copied().unwrap_or(0);
        self.delayed("epoch read", Ok(epoch))
    }
}

impl LeaseStore for MemoryStore {
    fn write_lease(
        &self,
        partition: PartitionId,
        holder: String,
        lease: LeaseRecord,
        ttl: std::time::Duration,
    ) -> BoxFuture<'static, StoreResult<()>> {
        // Leases never take an injected failure: those are meant for the schedule and status.
        let expires = tokio::time::Instant::now() + ttl;
        self.lock()
            .leases
            .insert((partition, holder), (lease, expires));
        self.delayed("lease write", Ok(()))
    }

    fn delete_lease(
        &self,
        partition: PartitionId,
        holder: String,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.lock().leases.remove(&(partition, holder));
        self.delayed("lease delete", Ok(()))
    }

    fn leases(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<(String, LeaseRecord)>>> {
        let now = tokio::time::Instant::now();
        let live = self
            .lock()
            .leases
            .iter()
            .filter(|((p, _), (_, expires))| *p == partition && *expires > now)
            .map(|((_, holder), (lease, _))| (holder.clone(), lease.clone()))
            .collect();
        self.delayed("lease read", Ok(live))
    }
}
