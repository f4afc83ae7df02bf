//! [`RecurringSchedules`]: creating, pausing, resuming and deleting a queue's recurring schedules, for
//! code ([`crate::SchedulerNode::schedules`]) and the admin API alike.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use super::ticker::tick_task;
use super::{InvalidSchedule, ScheduleSpec};
use crate::clock::Clock;
use crate::enqueue::{EnqueueError, Enqueuer};
use crate::store::{FireRecord, RecurringStore, ScheduleRecord, StoreError};
use scheduler_client::{truncate_to_millis, Task};

/// A chain whose pending tick is this far overdue is overdue for a create of the same
/// definition: every node was down, or the chain stalled (its tick was dead-lettered, or its
/// first tick was never enqueued). The create enqueues that tick again.
const STALLED_AFTER: TimeDelta = TimeDelta::minutes(1);

/// A schedule could not be created or changed.
#[derive(Debug, thiserror::Error)]
pub enum RecurringError {
    /// The definition is invalid.
    #[error(transparent)]
    Invalid(#[from] InvalidSchedule),
    /// The cadence has no fire time left (a cron expression of a past date).
    #[error("schedule {0} has no fire time after now")]
    NoFireTime(String),
    /// No schedule of that id.
    #[error("no schedule {0}")]
    NotFound(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The node stopped during the call.
    #[error("the node stopped: {0}")]
    Stopped(String),
    /// A tick could not be enqueued (a new chain's first, or an overdue chain's pending one
    /// again): the schedule is recorded; creating it again (the same definition) once its
    /// pending fire time is over a minute past enqueues that tick.
    #[error("schedule {id} is recorded but its tick was not enqueued; create it again")]
    Enqueue {
        /// The schedule.
        id: String,
        /// The producer's error.
        #[source]
        source: EnqueueError,
    },
}

/// A queue's recurring schedules.
#[derive(Clone)]
pub struct RecurringSchedules {
    store: Arc<dyn RecurringStore>,
    enqueuer: Arc<dyn Enqueuer>,
    clock: Arc<dyn Clock>,
    /// The node's runtime, where its store's and producer's connections live: a call from
    /// another runtime (a user's) runs there.
    runtime: Option<tokio::runtime::Handle>,
}

impl std::fmt::Debug for RecurringSchedules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecurringSchedules").finish_non_exhaustive()
    }
}

impl RecurringSchedules {
    pub(crate) fn new(
        store: Arc<dyn RecurringStore>,
        enqueuer: Arc<dyn Enqueuer>,
        clock: Arc<dyn Clock>,
    ) -> RecurringSchedules {
        RecurringSchedules {
            store,
            enqueuer,
            clock,
            runtime: None,
        }
    }

    /// The schedules, their calls run on `runtime`.
    pub(crate) fn on(mut self, runtime: tokio::runtime::Handle) -> RecurringSchedules {
        self.runtime = Some(runtime);
        self
    }

    async fn on_runtime<T, F>(
        &self,
        call: impl FnOnce(RecurringSchedules) -> F,
    ) -> Result<T, RecurringError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, RecurringError>> + Send + 'static,
    {
        let here = RecurringSchedules {
            runtime: None,
            ..self.clone()
        };
        match &self.runtime {
            Some(runtime) => (runtime.spawn(call(here)).await)
                .map_err(|e| RecurringError::Stopped(e.to_string()))?,
            None => call(here).await,
        }
    }

    /// Creates the schedule, or redefines the one of its id. Idempotent: the same definition
    /// again changes nothing (so a service may declare its schedules at every start); if its
    /// pending fire time is over a minute past (every node was down, or its chain stalled), its
    /// tick is enqueued again, due now, and the catch-up policy decides about the fire times
    /// since, as for any late tick. A new definition starts a new chain from now (a paused
    /// schedule stays paused).
    pub async fn create(&self, spec: ScheduleSpec) -> Result<ScheduleRecord, RecurringError> {
        self.on_runtime(move |s| async move { s.create_here(spec).await })
            .await
    }

    /// Pauses the schedule: its chain ends at its next tick, no run is enqueued until it is
    /// resumed.
    pub async fn pause(&self, id: &str) -> Result<ScheduleRecord, RecurringError> {
        let id = id.to_string();
        self.on_runtime(move |s| async move { s.pause_here(&id).await })
            .await
    }

    /// Resumes a paused schedule from its next fire time after now (the fire times while it was
    /// paused are not run).
    pub async fn resume(&self, id: &str) -> Result<ScheduleRecord, RecurringError> {
        let id = id.to_string();
        self.on_runtime(move |s| async move { s.resume_here(&id).await })
            .await
    }

    /// Deletes the schedule (its pending tick ends the chain); whether it existed.
    pub async fn delete(&self, id: &str) -> Result<bool, RecurringError> {
        let id = id.to_string();
        self.on_runtime(move |s| async move { s.delete_here(&id).await })
            .await
    }

    /// The schedule `id`, if any.
    pub async fn get(&self, id: &str) -> Result<Option<ScheduleRecord>, RecurringError> {
        let id = id.to_string();
        self.on_runtime(move |s| async move { s.get_here(&id).await })
            .await
    }

    /// Every schedule, by id.
    pub async fn list(&self) -> Result<Vec<ScheduleRecord>, RecurringError> {
        self.on_runtime(move |s| async move { s.list_here().await })
            .await
    }

    /// The schedule's last `limit` fires, newest first.
    pub async fn fires(&self, id: &str, limit: usize) -> Result<Vec<FireRecord>, RecurringError> {
        let id = id.to_string();
        self.on_runtime(move |s| async move { s.fires_here(&id, limit).await })
            .await
    }

    async fn create_here(&self, spec: ScheduleSpec) -> Result<ScheduleRecord, RecurringError> {
        let cadence = spec.validate()?;
        // (A preview's definition may have it: it is never stored.)
        if spec.id == super::RESERVED_ID {
            return Err(InvalidSchedule::ReservedId.into());
        }
        let now = self.clock.now();
        let existing = self.store.recurring_schedule(spec.id.clone()).await?;
        if let Some(existing) = existing.as_ref().filter(|e| e.spec == spec) {
            match (existing.paused, existing.next_fire) {
                (true, _) => return Ok(existing.clone()),
                (false, Some(pending)) => {
                    if pending + STALLED_AFTER < now {
                        self.enqueue_again(existing, pending, now).await?;
                    }
                    return Ok(existing.clone());
                }
                // No pending fire time (none was left): from now, if there is one now.
                (false, None) => {}
            }
        }
        let Some(next) = cadence.next_after(now) else {
            return match existing {
                Some(existing) if existing.spec == spec => Ok(existing),
                _ => Err(RecurringError::NoFireTime(spec.id.clone())),
            };
        };
        let paused = existing.as_ref().is_some_and(|e| e.paused);
        let record = ScheduleRecord {
            revision: next_revision(existing.as_ref(), now),
            paused,
            created_at: existing.as_ref().map_or(now, |e| e.created_at),
            updated_at: now,
            next_fire: (!paused).then_some(next),
            last_fire: None,
            spec,
        };
        self.store.put_recurring_schedule(record.clone()).await?;
        if !paused {
            self.start_chain(&record, next).await?;
        }
        Ok(record)
    }

    async fn pause_here(&self, id: &str) -> Result<ScheduleRecord, RecurringError> {
        let mut record = self.existing(id).await?;
        if record.paused {
            return Ok(record);
        }
        record.paused = true;
        record.updated_at = self.clock.now();
        record.next_fire = None;
        self.store.put_recurring_schedule(record.clone()).await?;
        Ok(record)
    }

    async fn resume_here(&self, id: &str) -> Result<ScheduleRecord, RecurringError> {
        let mut record = self.existing(id).await?;
        if !record.paused {
            return Ok(record);
        }
        let now = self.clock.now();
        let next = (record.spec.validate()?)
            .next_after(now)
            .ok_or_else(|| RecurringError::NoFireTime(id.to_string()))?;
        record.revision = next_revision(Some(&record), now);
        record.paused = false;
        record.updated_at = now;
        record.next_fire = Some(next);
        self.store.put_recurring_schedule(record.clone()).await?;
        self.start_chain(&record, next).await?;
        Ok(record)
    }

    async fn delete_here(&self, id: &str) -> Result<bool, RecurringError> {
        let existed = self
            .store
            .recurring_schedule(id.to_string())
            .await?
            .is_some();
        self.store.delete_recurring_schedule(id.to_string()).await?;
        Ok(existed)
    }

    async fn get_here(&self, id: &str) -> Result<Option<ScheduleRecord>, RecurringError> {
        Ok(self.store.recurring_schedule(id.to_string()).await?)
    }

    async fn list_here(&self) -> Result<Vec<ScheduleRecord>, RecurringError> {
        Ok(self.store.recurring_schedules().await?)
    }

    async fn fires_here(&self, id: &str, limit: usize) -> Result<Vec<FireRecord>, RecurringError> {
        Ok(self.store.fires(id.to_string(), limit).await?)
    }

    /// The clock's now.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    async fn existing(&self, id: &str) -> Result<ScheduleRecord, RecurringError> {
        self.store
            .recurring_schedule(id.to_string())
            .await?
            .ok_or_else(|| RecurringError::NotFound(id.to_string()))
    }

    /// Enqueues again the tick of `existing`'s overdue pending fire time, due `now` (a new task:
    /// the first may have a final status, dead-lettered), keeping the chain and its revision.
    /// If the first is still pending (every node was down), it runs first and moves the chain
    /// on, and this one then does nothing; else this one goes on with the chain: late, its
    /// catch-up policy decides about every fire time since (see `ticker`).
    async fn enqueue_again(
        &self,
        existing: &ScheduleRecord,
        pending: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<(), RecurringError> {
        let id = &existing.spec.id;
        let tick = Task {
            scheduled_time: truncate_to_millis(now),
            ..tick_task(id, existing.revision, pending)
        };
        tracing::info!(schedule = %id, %pending, "its pending fire time is overdue: its tick enqueued again");
        (self.enqueuer.enqueue(tick).await).map_err(|source| RecurringError::Enqueue {
            id: id.clone(),
            source,
        })
    }

    async fn start_chain(
        &self,
        record: &ScheduleRecord,
        next: DateTime<Utc>,
    ) -> Result<(), RecurringError> {
        let id = &record.spec.id;
        (self
            .enqueuer
            .enqueue(tick_task(id, record.revision, next))
            .await)
            .map_err(|source| RecurringError::Enqueue {
                id: id.clone(),
                source,
            })
    }
}

/// A revision after `existing`'s: the time in milliseconds, or one more than the last.
fn next_revision(existing: Option<&ScheduleRecord>, now: DateTime<Utc>) -> i64 {
    let after = existing.map_or(i64::MIN, |e| e.revision.saturating_add(1));
    now.timestamp_millis().max(after)
}
