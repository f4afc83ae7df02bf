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
//!
//! An update never lands on a call under way. A record that gives the current task new data
//! at its own key (keepTime, a debounce at its max wait, a replace at the same time) holds the
//! key in the tree's [`CancelGate`] until it is written, so a task already checked takes its
//! checks again and runs the record's copy of the task ([`version_of`]). But if the current
//! task's call has begun, it took the data it had: for keepTime and debounce no task is
//! pending any more, and the record is scheduled as if none were (a debounce starts a chain),
//! as a new task that runs after the call (one call at a time per orderingId); and no record
//! makes current the key of a call under way, whose outcome would finish it, or of a task that
//! already ran to its end, which counts as finished: its time moves 1 ms later (a key
//! cancelled before has its status cleared instead).
//!
//! Over 500 lines: the resolution of a batch's records against their identities ([`resolve`],
//! whose cases each need the states the ones before them left) and the hook that runs a task
//! only while it is its identity's current one ([`IdentityHook`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use scheduler_client::{OnConflict, Task, TaskIdentity, TaskKey};
use tracing::debug;

use crate::cancel_gate::{Applying, CancelGate};
use crate::hooks::{Check, TaskHook};
use crate::metrics::Metrics;
use crate::store::{
    IdentityRecord, IdentityStore, PartitionId, StatusStore, StoreError, StoreResult, TaskStatus,
    WRITE_CONCURRENCY,
};

/// A record that acts on a task's identity.
// Most records of an identity schedule a task: boxing it would cost an allocation each and
// save no memory in the lists they wait in.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum IdentityOp {
    /// Schedule a task with a conflict mode (its `enqueue_offset` is its record's offset).
    Schedule(Task),
    /// Move the identity's pending task to `to`.
    Reschedule {
        /// The identity.
        identity: scheduler_client::TaskIdentity,
        /// Its new time.
        to: chrono::DateTime<chrono::Utc>,
        /// The record's offset.
        offset: i64,
    },
    /// Cancel the identity's pending task.
    Cancel {
        /// The identity.
        identity: scheduler_client::TaskIdentity,
        /// The record's offset.
        offset: i64,
    },
}

impl IdentityOp {
    /// The identity the record acts on.
    pub fn identity(&self) -> scheduler_client::TaskIdentity {
        match self {
            IdentityOp::Schedule(task) => task.identity(),
            IdentityOp::Reschedule { identity, .. } | IdentityOp::Cancel { identity, .. } => {
                identity.clone()
            }
        }
    }

    /// The record as read at `offset` of its partition.
    #[cfg(test)]
    pub fn at_offset(&self, offset: i64) -> IdentityOp {
        match self {
            IdentityOp::Schedule(task) => IdentityOp::Schedule(task.clone().enqueued_at(offset)),
            IdentityOp::Reschedule { identity, to, .. } => IdentityOp::Reschedule {
                identity: identity.clone(),
                to: *to,
                offset,
            },
            IdentityOp::Cancel { identity, .. } => IdentityOp::Cancel {
                identity: identity.clone(),
                offset,
            },
        }
    }

    /// The record's offset in its partition.
    pub fn offset(&self) -> i64 {
        match self {
            IdentityOp::Schedule(task) => task.enqueue_offset.unwrap_or(-1),
            IdentityOp::Reschedule { offset, .. } | IdentityOp::Cancel { offset, .. } => *offset,
        }
    }
}

/// What a batch's identity records come to.
#[derive(Default)]
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
    /// The keys given new data (and the current tasks the records found), held in the cancel
    /// gate: keep it until the records and tasks are written.
    pub(crate) updating: Vec<Applying>,
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
    /// The current task's call has begun: it took its data.
    called: bool,
}

/// What resolving identity records reads: the records, and the statuses of their tasks.
pub(crate) struct IdentityTables {
    pub(crate) identities: Arc<dyn IdentityStore>,
    pub(crate) status: Arc<dyn StatusStore>,
}

/// Resolves `ops` (in partition order) against the identities' records in `tables`; `gate` is
/// the tree's cancel gate (see the module docs).
pub(crate) async fn resolve(
    tables: &IdentityTables,
    partition: PartitionId,
    ops: Vec<IdentityOp>,
    gate: &CancelGate,
    metrics: &Metrics,
) -> StoreResult<Resolved> {
    let mut resolved = Resolved::default();
    if ops.is_empty() {
        return Ok(resolved);
    }
    let mut states = read_states(tables, partition, &ops).await?;
    // Whether each current task that a record may give new data to has begun its call: asked
    // with its key held, so none begins before the record is written.
    let updated: BTreeSet<TaskIdentity> = ops
        .iter()
        .filter_map(|op| match op {
            IdentityOp::Schedule(task) if task.on_conflict != Some(OnConflict::IfAbsent) => {
                Some(op.identity())
            }
            _ => None,
        })
        .collect();
    for identity in updated {
        if let Some(state) = states
            .get_mut(&identity)
            .filter(|s| s.standing == Standing::Pending)
        {
            let key = state.record.task.key();
            resolved
                .updating
                .push(gate.applying(std::slice::from_ref(&key)));
            state.called = gate.began(&key);
        }
    }
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
        let called = state.as_ref().is_some_and(|s| s.called);
        let (name, next) = match op {
            IdentityOp::Schedule(task) => {
                let mode = task.on_conflict.unwrap_or(OnConflict::Replace);
                let finished = state
                    .as_ref()
                    .is_some_and(|s| s.standing == Standing::Finished);
                let next = match (mode, pending) {
                    (OnConflict::IfAbsent, Some(_)) => None,
                    (OnConflict::IfAbsent, None) if finished => None,
                    // A task whose call began took its data: none is pending for new data.
                    (OnConflict::KeepTime | OnConflict::Debounce { .. }, Some(_)) if called => {
                        Some((task.scheduled_time, task.scheduled_time))
                    }
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
        let (task, first_time) = clear_of_calls(gate, &mut resolved.updating, task, first_time);
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
                state.called = false;
            }
            None => {
                let state = State {
                    record,
                    standing: Standing::Pending,
                    changed: true,
                    stored: None,
                    called: false,
                };
                states.insert(identity, state);
            }
        }
    }
    // A current task at the key of a task that ended: cancelled, its status is cleared; run
    // to its end, the new one moves 1 ms later (at that key it would count as finished).
    let made_current = |s: &&mut State| s.changed && s.standing == Standing::Pending;
    let keys = states.values_mut().filter(made_current);
    let keys: Vec<TaskKey> = keys.map(|s| s.record.task.key()).collect();
    let mut ended = ended_at(&tables.status, partition, keys).await?;
    for state in states.values_mut().filter(made_current) {
        loop {
            let key = state.record.task.key();
            match ended.remove(&key) {
                None => break,
                Some(TaskStatus::Cancelled) => {
                    resolved.revived.push(key);
                    break;
                }
                Some(_) => {
                    let record = &mut state.record;
                    let Some((task, first)) = a_millisecond_later(&record.task, record.first_time)
                    else {
                        break;
                    };
                    let updating = &mut resolved.updating;
                    (record.task, record.first_time) = clear_of_calls(gate, updating, task, first);
                    ended.extend(
                        ended_at(&tables.status, partition, vec![record.task.key()]).await?,
                    );
                }
            }
        }
    }
    // A task moved onto the key of the one it superseded (that one itself moved 1 ms after a
    // finished task) is at that key now: its row and its copy are the current task's.
    let current: BTreeSet<TaskKey> = (states.values())
        .filter(|s| s.standing == Standing::Pending)
        .map(|s| s.record.task.key())
        .collect();
    resolved.superseded.retain(|key| !current.contains(key));
    resolved
        .superseded_rows
        .retain(|key| !current.contains(key));
    for state in states.into_values().filter(|s| s.changed) {
        if state.standing == Standing::Pending {
            resolved.tasks.push(state.record.task.clone());
        }
        resolved.records.push(state.record);
    }
    Ok(resolved)
}

/// `task` (with its chain's first time), moved 1 ms later for as long as its key is that of a
/// call under way (whose outcome would finish it), its key held in `gate` (the guards added to
/// `updating`) so that no call of it begins before it is written: a task already checked
/// checks again and runs this copy.
fn clear_of_calls(
    gate: &CancelGate,
    updating: &mut Vec<Applying>,
    mut task: Task,
    mut first_time: DateTime<Utc>,
) -> (Task, DateTime<Utc>) {
    loop {
        let key = task.key();
        updating.push(gate.applying(std::slice::from_ref(&key)));
        if !gate.began(&key) {
            return (task, first_time);
        }
        match a_millisecond_later(&task, first_time) {
            Some(later) => (task, first_time) = later,
            None => return (task, first_time),
        }
    }
}

/// `task` 1 ms later, with its chain's first time (moved along when it is the task's).
fn a_millisecond_later(task: &Task, first_time: DateTime<Utc>) -> Option<(Task, DateTime<Utc>)> {
    // (Within the wire format's range a millisecond more always fits.)
    let later = (task.scheduled_time).checked_add_signed(TimeDelta::milliseconds(1))?;
    let first_time = match first_time == task.scheduled_time {
        true => later,
        false => first_time,
    };
    let task = Task {
        scheduled_time: later,
        ..task.clone()
    };
    Some((task, first_time))
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
    tables: &IdentityTables,
    partition: PartitionId,
    ops: &[IdentityOp],
) -> StoreResult<BTreeMap<TaskIdentity, State>> {
    let mut identities: Vec<TaskIdentity> = ops.iter().map(IdentityOp::identity).collect();
    identities.sort();
    identities.dedup();
    futures::stream::iter(identities)
        .map(|identity| {
            let (identities, status) = (Arc::clone(&tables.identities), Arc::clone(&tables.status));
            async move {
                let Some(record) = identities.identity(partition, identity.clone()).await? else {
                    return Ok(None);
                };
                let key = record.task.key();
                let standing = match status.status(partition, key.clone()).await? {
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
                    called: false,
                };
                Ok(Some((identity, state)))
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .try_filter_map(|state| futures::future::ready(Ok(state)))
        .try_collect()
        .await
}

/// The final statuses of the tasks with `keys` that have one.
async fn ended_at(
    store: &Arc<dyn StatusStore>,
    partition: PartitionId,
    keys: Vec<TaskKey>,
) -> StoreResult<BTreeMap<TaskKey, TaskStatus>> {
    futures::stream::iter(keys)
        .map(|key| {
            let store = Arc::clone(store);
            async move {
                let status = store.status(partition, key.clone()).await?;
                Ok(status.map(|s| (key, s.status)))
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .try_filter_map(|ended| futures::future::ready(Ok(ended)))
        .try_collect()
        .await
}

/// What the task with `key` is to its identity, by the identity's `record` (none yet means the
/// batch that scheduled it is still being written).
pub(crate) enum Version {
    /// No longer the identity's current task: it never runs.
    Superseded,
    /// The current task, as the record holds it (the newest data a record gave it), if there
    /// is a record: it runs that.
    Current(Option<Box<Task>>),
}

/// Identities attached to a task's life ([`crate::hooks`]): beside the status check, a task
/// with a conflict mode reads its identity's record; superseded, it is not run, else it runs
/// the record's copy of itself (the newest data an update gave it).
pub(crate) struct IdentityHook {
    /// The identities' table.
    pub(crate) store: Arc<dyn crate::store::IdentityStore>,
}

impl TaskHook for IdentityHook {
    fn check(
        &self,
        partition: PartitionId,
        task: &Task,
    ) -> Option<BoxFuture<'static, Result<Check, StoreError>>> {
        task.on_conflict?;
        let key = task.key();
        let read = self.store.identity(partition, task.identity());
        Some(Box::pin(async move {
            Ok(match version_of(&key, read.await?) {
                Version::Superseded => Check::NotRun {
                    why: "superseded by a newer task of its identity",
                },
                Version::Current(copy) => Check::Run(copy),
            })
        }))
    }
}

/// See [`Version`].
pub(crate) fn version_of(key: &TaskKey, record: Option<IdentityRecord>) -> Version {
    match record {
        Some(record) if record.task.key() != *key => Version::Superseded,
        record => Version::Current(record.map(|r| Box::new(r.task))),
    }
}
