//! Applying the cancellations a tree polls, and deferring those an earlier tree could defeat.
//!
//! Applying one records `cancelled` (never over a final status), a group member's outcome
//! (which may trigger the join), and takes the task out of the schedule.
//!
//! A tree's claim fences the earlier trees of its partition, but not a call an earlier tree
//! was already cleared to make: its lease entry for the orderingId was durable and its
//! ownership read began before the claim (see [`crate::lease`]), and its cancel gate is its
//! own. Such a call may start after this tree records a cancel of the task: the task would run
//! after it was recorded cancelled. So a cancel of an orderingId that an earlier tree still
//! lists in its lease is **deferred**: written to `deferred_cancels` before the polled batch is
//! acknowledged (so the Kafka offset past it may be committed, and nothing accepted is lost),
//! and applied once no earlier tree lists the orderingId, by this tree or, if it stops first,
//! by the next one as it starts. Meanwhile the tree's own task of that key does not call: the
//! tree's [`CancelGate`] holds the key as applying. The earlier tree's call, if it ran, ran
//! before the cancel was recorded, like a call a cancel finds running; that tree is fenced and
//! records no outcome.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use scheduler_client::TaskKey;
use tracing::{debug, info, warn};

use super::tables::PersistenceTables;
use crate::actors::{TreeError, TreeResult};
use crate::cancel_gate::{Applying, CancelGate};
use crate::enqueue::Enqueuer;
use crate::groups;
use crate::lease::TreeLease;
use crate::metrics::{Metrics, ParkReason, Parked};
use crate::retry::exponential_period;
use crate::store::DeadLetterStore;
use crate::store::{
    MemberOutcome, PartitionId, StatusRecord, StoreError, StoreResult, TaskStatus,
    WRITE_CONCURRENCY,
};

/// The first wait before a deferred cancel that failed is tried again (it doubles, to 10 s).
const DEFERRED_RETRY: Duration = Duration::from_millis(500);

/// What applying cancels needs.
#[derive(Clone)]
pub(super) struct Canceller {
    pub(super) partition: PartitionId,
    pub(super) tables: PersistenceTables,
    pub(super) enqueuer: Arc<dyn Enqueuer>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) lease: TreeLease,
    pub(super) gate: CancelGate,
}

/// A cancel waiting for an earlier tree's calls of its orderingId to end.
pub(super) struct Deferred {
    key: TaskKey,
    /// When it was polled: the time it records.
    at: DateTime<Utc>,
    /// Holds the tree's own task of the key from calling until the cancel is recorded.
    _applying: Applying,
}

impl Canceller {
    /// Splits `cancels` polled at `at` into those to apply now and those to defer (of an
    /// orderingId an earlier tree still lists in its lease), and records the latter in
    /// `deferred_cancels`. Call it once the tree's claim completed.
    pub(super) async fn defer_where_needed(
        &self,
        cancels: Vec<TaskKey>,
        at: DateTime<Utc>,
    ) -> StoreResult<(Vec<TaskKey>, Vec<Deferred>)> {
        let (mut now, mut deferred) = (Vec::new(), Vec::new());
        for key in cancels {
            if self.lease.runs_in_earlier_tree(&key.ordering_id).await? {
                deferred.push(key);
            } else {
                now.push(key);
            }
        }
        futures::stream::iter(deferred.iter().cloned())
            .map(|key| self.tables.schedule.defer_cancel(self.partition, key, at))
            .buffer_unordered(WRITE_CONCURRENCY)
            .try_collect::<()>()
            .await?;
        for key in &deferred {
            info!(partition = self.partition, task = %key, "cancel deferred: an earlier tree of the partition may still call a task of its orderingId");
        }
        Ok((
            now,
            deferred
                .into_iter()
                .map(|key| self.deferred(key, at))
                .collect(),
        ))
    }

    /// A cancel recorded in `deferred_cancels` (by this tree or an earlier one), to apply.
    pub(super) fn deferred(&self, key: TaskKey, at: DateTime<Utc>) -> Deferred {
        Deferred {
            _applying: self.gate.applying(std::slice::from_ref(&key)),
            key,
            at,
        }
    }

    /// Applies a deferred cancel once no earlier tree lists its orderingId, then forgets it;
    /// tried again while the store fails. Returns the key if it was cancelled now (not finished
    /// before).
    pub(super) async fn apply_deferred(self, deferred: Deferred) -> Option<TaskKey> {
        let (partition, key) = (self.partition, deferred.key.clone());
        let mut failures = 0;
        loop {
            let attempt = async {
                self.lease.wait_for_predecessors(&key.ordering_id).await?;
                let cancelled = self.apply(vec![key.clone()], deferred.at).await?;
                self.tables
                    .schedule
                    .forget_deferred_cancel(partition, key.clone())
                    .await?;
                Ok::<_, TreeError>(cancelled)
            };
            match attempt.await {
                Ok(cancelled) => {
                    debug!(partition, task = %key, "deferred cancel applied");
                    return cancelled.into_iter().next();
                }
                Err(e) => {
                    failures += 1;
                    warn!(partition, task = %key, error = %e, "deferred cancel not applied yet; trying again");
                    let max = Duration::from_secs(10);
                    tokio::time::sleep(exponential_period(failures, DEFERRED_RETRY, max)).await;
                }
            }
        }
    }

    /// Records the cancellation of each of `cancels` (unless it already finished) and takes it out
    /// of the schedule; returns the keys cancelled. A cancelled member of a group records its
    /// outcome in the group first (which may trigger the join), also when the cancel was recorded
    /// by an earlier try of the batch: the task leaves the schedule only after. Applied
    /// `WRITE_CONCURRENCY` at a time, so a large batch of cancels completes within the persist
    /// timeout.
    pub(super) async fn apply(
        &self,
        cancels: Vec<TaskKey>,
        at: DateTime<Utc>,
    ) -> TreeResult<Vec<TaskKey>> {
        let (tables, enqueuer, metrics, partition) =
            (&self.tables, &self.enqueuer, &self.metrics, self.partition);
        let gate = &self.gate;
        futures::stream::iter(cancels)
        .map(|key| {
            let tables = tables.clone();
            async move {
                let cancelled = match tables.status.record_status_if_absent(partition, key.clone(), StatusRecord::cancelled(at))
                    .await {
                    Ok(None) => true,
                    Ok(Some(existing)) if existing.status == TaskStatus::Cancelled => false,
                    Ok(Some(existing)) => {
                        info!(partition, task = %key, status = existing.status.as_str(), "cancel ignored: the task already finished");
                        return Ok(None);
                    }
                    Err(StoreError::Refused { reason, .. }) => {
                        let what = Parked::Cancellation(&key);
                        metrics.parked(partition, what, ParkReason::RefusedByStore, &reason);
                        return Ok(None);
                    }
                    Err(e) => return Err(e.into()),
                };
                // A task whose dead letter was recorded had failed already: the cancel came
                // while its outcome was being recorded (a call is not interrupted by a cancel),
                // so the outcome stands, as its tree would have written it. Unless this tree's
                // call of it is under way (an earlier tree's status write was cut off, and the
                // task runs again): that call's outcome replaces the cancellation.
                if let Some(failed) = failed_status(tables.dead_letters.as_ref(), &key).await? {
                    info!(partition, task = %key, status = failed.status.as_str(), "cancel ignored: the task had failed (its dead letter is recorded)");
                    if !gate.began(&key) {
                        tables.status.record_status(partition, key.clone(), failed).await?;
                    }
                    return Ok(None);
                }
                if cancelled {
                    metrics.cancelled(partition, &key);
                }
                // A failed group step fails the batch, which is applied again (every step of it
                // is idempotent): a member's cancel reaches its group before it is unscheduled.
                finish_cancelled(&tables, enqueuer, partition, &key, at).await?;
                if let Err(e) = tables.schedule.remove_scheduled(partition, key.clone()).await {
                    debug!(partition, task = %key, error = %e, "cancelled task left in the schedule (it will be skipped)");
                }
                Ok(cancelled.then_some(key))
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .try_filter_map(|cancelled| futures::future::ready(Ok(cancelled)))
        .try_collect()
        .await
    }
}

/// The final status a task's dead letter records, if it has one.
async fn failed_status(
    dead_letters: &dyn DeadLetterStore,
    key: &TaskKey,
) -> StoreResult<Option<StatusRecord>> {
    let letter = dead_letters.dead_letter(key.clone()).await?;
    Ok(letter.map(|letter| letter.failed_status()))
}

/// A cancelled task that is a member of a group records its outcome there (which may trigger
/// the join); read from the schedule, where it still is.
async fn finish_cancelled(
    tables: &PersistenceTables,
    enqueuer: &Arc<dyn Enqueuer>,
    partition: PartitionId,
    key: &TaskKey,
    at: DateTime<Utc>,
) -> Result<(), crate::hooks::StepError> {
    let scheduled = tables
        .schedule
        .scheduled_task(partition, key.clone())
        .await?;
    let Some((task, member)) = scheduled.and_then(|t| t.group.clone().map(|m| (t, m))) else {
        return Ok(());
    };
    let outcome = MemberOutcome {
        index: member.index,
        key: key.clone(),
        status: TaskStatus::Cancelled,
        error: None,
        result: None,
        finished_at: at,
    };
    let (tables, enqueuer) = (tables.groups.clone(), Arc::clone(enqueuer));
    groups::member_finished(tables, enqueuer, task, member, outcome, at).await?;
    Ok(())
}
