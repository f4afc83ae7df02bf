//! Conflict modes, reschedules and cancels by identity, resolved by the tree that owns the
//! partition as it persists a polled batch, in partition order, so concurrent producers cannot
//! race.
//!
//! Each identity scheduled with a conflict mode has a record (`task_identities`) holding its
//! current task, whole. Resolving a batch reads the records of its identities (and their current
//! tasks' statuses), applies the batch's records one by one to them in memory, and says what to
//! write. The tree writes the new records first, then the current tasks, then the cancels; a
//! task that is no longer its identity's current one never runs, however it got into the
//! schedule: the task's lifecycle checks the record, as it checks the status. A record already
//! applied (at or before the identity's recorded offset: a batch polled again after a crash)
//! is not applied twice; the current task it left is persisted again instead.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use scheduler_client::{OnConflict, Task, TaskIdentity, TaskKey};
use tracing::debug;

use crate::actors::IdentityOp;
use crate::metrics::Metrics;
use crate::store::{
    IdentityRecord, PartitionId, StoreResult, TaskStatus, TaskStore, WRITE_CONCURRENCY,
};

/// What a batch's identity records come to.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Resolved {
    /// The identities' new records: written before anything else.
    pub(crate) records: Vec<IdentityRecord>,
    /// The current tasks to persist.
    pub(crate) tasks: Vec<Task>,
    /// Tasks that were current and no longer are: never run, taken out of memory.
    pub(crate) superseded: Vec<TaskKey>,
    /// Of those, the ones that may be in the schedule (current before this batch): deleted.
    pub(crate) superseded_rows: Vec<TaskKey>,
    /// Tasks cancelled by identity.
    pub(crate) cancels: Vec<TaskKey>,
    /// Current tasks whose key was cancelled before (a cancel by identity, then a new task at
    /// the same time): their status is cleared before they are persisted.
    pub(crate) revived: Vec<TaskKey>,
}

/// Where an identity's current task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Not finished: it runs when due.
    Pending,
    /// Finished (completed, failed or dropped).
    Finished,
    /// Cancelled.
    Cancelled,
}

/// An identity as the batch leaves it.
struct State {
    record: IdentityRecord,
    standing: Standing,
    changed: bool,
    /// The current task when the batch began, if pending then (it may be in the schedule).
    stored: Option<TaskKey>,
}

/// Resolves `ops` (in partition order) against the identities' records in `store`.
pub(crate) async fn resolve(
    store: &Arc<dyn TaskStore>,
    partition: PartitionId,
    ops: Vec<IdentityOp>,
    metrics: &Metrics,
) -> StoreResult<Resolved> {
    let mut resolved = Resolved::default();
    if ops.is_empty() {
        return Ok(resolved);
    }
    let mut states = read_states(store, partition, &ops).await?;
    for op in ops {
        let identity = op.identity();
        let offset = op.offset();
        let state = states.get_mut(&identity);
        if let Some(state) = &state {
            if offset <= state.record.offset {
                // Applied before this batch was polled again: its task is persisted again.
                if offset == state.record.offset && state.standing == Standing::Pending {
                    resolved.tasks.push(state.record.task.clone());
                }
                metrics.identity_record(op_name(&op), "duplicate");
                continue;
            }
        }
        let pending = state
            .as_ref()
            .filter(|s| s.standing == Standing::Pending)
            .map(|s| (&s.record.task, s.record.first_time));
        let (name, next) = match op {
            IdentityOp::Schedule(task) => {
                let mode = task.on_conflict.unwrap_or(OnConflict::Replace);
                let finished = state
                    .as_ref()
                    .is_some_and(|s| s.standing == Standing::Finished);
                let next = match (mode, pending) {
                    (OnConflict::IfAbsent, Some(_)) => None,
                    (OnConflict::IfAbsent, None) if finished => None,
                    (OnConflict::KeepTime, Some((current, first))) => {
                        Some((current.scheduled_time, first))
                    }
                    (OnConflict::Debounce { max_wait }, Some((_, first))) => {
                        // The decoder bounds the wait (`wire::MAX_DEBOUNCE_WAIT_MS`), but a row
                        // stored before it may hold any: a sum past chrono's range caps nothing.
                        let cap = chrono::TimeDelta::from_std(max_wait)
                            .ok()
                            .and_then(|wait| first.checked_add_signed(wait))
                            .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
                        Some((task.scheduled_time.min(cap), first))
                    }
                    _ => Some((task.scheduled_time, task.scheduled_time)),
                };
                let next = next.map(|(time, first)| {
                    let task = Task {
                        scheduled_time: time,
                        ..task
                    };
                    (task, first)
                });
                (mode.as_str(), next)
            }
            IdentityOp::Reschedule { to, offset, .. } => {
                let next = pending.map(|(current, _)| {
                    let task = Task {
                        scheduled_time: to,
                        enqueue_offset: Some(offset),
                        ..current.clone()
                    };
                    (task, to)
                });
                ("reschedule", next)
            }
            IdentityOp::Cancel { .. } => {
                match states.get_mut(&identity) {
                    Some(state) if state.standing == Standing::Pending => {
                        resolved.cancels.push(state.record.task.key());
                        state.standing = Standing::Cancelled;
                        state.record.offset = offset;
                        state.changed = true;
                        metrics.identity_record("cancel", "applied");
                    }
                    _ => {
                        debug!(partition, %identity, "cancel by identity ignored: no task of it is pending");
                        metrics.identity_record("cancel", "ignored");
                    }
                }
                continue;
            }
        };
        let Some((task, first_time)) = next else {
            debug!(partition, %identity, op = name, "ignored: no task of the identity is pending (or, for ifAbsent, one is pending or finished)");
            metrics.identity_record(name, "ignored");
            continue;
        };
        metrics.identity_record(name, "applied");
        let record = IdentityRecord {
            task,
            first_time,
            offset,
        };
        match states.get_mut(&identity) {
            Some(state) => {
                let previous = state.record.task.key();
                if state.standing == Standing::Pending && previous != record.task.key() {
                    resolved.superseded.push(previous.clone());
                    if state.stored.as_ref() == Some(&previous) {
                        resolved.superseded_rows.push(previous);
                    }
                }
                state.record = record;
                state.standing = Standing::Pending;
                state.changed = true;
            }
            None => {
                let state = State {
                    record,
                    standing: Standing::Pending,
                    changed: true,
                    stored: None,
                };
                states.insert(identity, state);
            }
        }
    }
    let mut current = Vec::new();
    for state in states.into_values().filter(|s| s.changed) {
        if state.standing == Standing::Pending {
            current.push(state.record.task.clone());
        }
        resolved.records.push(state.record);
    }
    resolved.revived = cancelled_before(store, partition, &current).await?;
    resolved.tasks.extend(current);
    Ok(resolved)
}

fn op_name(op: &IdentityOp) -> &'static str {
    match op {
        IdentityOp::Schedule(task) => task.on_conflict.map_or("replace", OnConflict::as_str),
        IdentityOp::Reschedule { .. } => "reschedule",
        IdentityOp::Cancel { .. } => "cancel",
    }
}

/// The records of the identities `ops` act on, with where each current task stands.
async fn read_states(
    store: &Arc<dyn TaskStore>,
    partition: PartitionId,
    ops: &[IdentityOp],
) -> StoreResult<BTreeMap<TaskIdentity, State>> {
    let mut identities: Vec<TaskIdentity> = ops.iter().map(IdentityOp::identity).collect();
    identities.sort();
    identities.dedup();
    futures::stream::iter(identities)
        .map(|identity| {
            let store = Arc::clone(store);
            async move {
                let Some(record) = store.identity(partition, identity.clone()).await? else {
                    return Ok(None);
                };
                let key = record.task.key();
                let standing = match store.status(partition, key.clone()).await? {
                    None => Standing::Pending,
                    Some(status) if status.status == TaskStatus::Cancelled => Standing::Cancelled,
                    Some(_) => Standing::Finished,
                };
                let stored = (standing == Standing::Pending).then_some(key);
                let state = State {
                    record,
                    standing,
                    changed: false,
                    stored,
                };
                Ok(Some((identity, state)))
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .try_filter_map(|state| futures::future::ready(Ok(state)))
        .try_collect()
        .await
}

/// Of `tasks`, the keys recorded as cancelled: a task scheduled again under a key its identity
/// cancelled before runs, so their statuses are cleared.
async fn cancelled_before(
    store: &Arc<dyn TaskStore>,
    partition: PartitionId,
    tasks: &[Task],
) -> StoreResult<Vec<TaskKey>> {
    futures::stream::iter(tasks.iter().map(Task::key))
        .map(|key| {
            let store = Arc::clone(store);
            async move {
                let status = store.status(partition, key.clone()).await?;
                Ok(status
                    .filter(|s| s.status == TaskStatus::Cancelled)
                    .map(|_| key))
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .try_filter_map(|key| futures::future::ready(Ok(key)))
        .try_collect()
        .await
}

/// Whether the task with `key` is no longer its identity's current task (`record` is the
/// identity's record; none yet means the batch that scheduled it is still being written).
pub(crate) fn superseded(key: &TaskKey, record: Option<&IdentityRecord>) -> bool {
    record.is_some_and(|r| r.task.key() != *key)
}
