//! The handler of a schedule's ticks, which every node registers for [`TICK_TYPE`].
//!
//! A tick of fire time `T` (named by its key: a tick enqueued again later, by a create that found
//! its chain overdue or redriven from the dead letters, still stands for `T`) reads its schedule
//! and:
//! 1. ends the chain if the schedule was deleted, paused, or created or resumed again since
//!    (the tick carries the revision it was enqueued under); a tick enqueued again does nothing
//!    if its chain went on past `T`;
//! 2. plans what to fire ([`super::plan`]): `T` when on time, else the catch-up policy's pick
//!    of the fire times that passed;
//! 3. on time, skips the fire if overlap is `skip` and the previous run has no final status
//!    yet (a late tick's catch-up policy alone decides: the outage that made it late most
//!    often held the previous run too);
//! 4. records the fires (one single-partition write), then enqueues the runs
//!    (uniquenessKey `schedule:<id>@<fire ms>`, `IfAbsent`) and the next tick, then records
//!    where the chain stands.
//!
//! A failed read or write fails the attempt and the tick is retried like any task. The fires
//! are recorded before anything goes out, so a retry (or a redelivery in another tree) finds
//! its first attempt's decision and carries it out again rather than deciding anew at a later
//! time; every key is derived from the fire time, so nothing is enqueued twice. Even a tick
//! that finds its chain ended (paused meanwhile) sends the runs it recorded.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::try_join_all;
use scheduler_client::{Task, TaskData, TaskKey};
use tracing::{debug, info, Instrument};

use super::{plan, Overlap, ScheduleSpec, TICK_TYPE};
use crate::clock::Clock;
use crate::enqueue::Enqueuer;
use crate::handler::{TaskContext, TaskError, TaskHandler};
use crate::metrics::Metrics;
use crate::store::{FireOutcome, FireRecord, RecurringStore, StatusStore};

/// Runs ticks against a queue's store, enqueuing on its topic.
pub(crate) struct Ticker {
    pub(crate) schedules: Arc<dyn RecurringStore>,
    pub(crate) statuses: Arc<dyn StatusStore>,
    pub(crate) enqueuer: Arc<dyn Enqueuer>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The topic's partition count: where a previous run's status is.
    pub(crate) partitions: u32,
    pub(crate) metrics: Arc<Metrics>,
}

/// The tick of schedule `id` (under `revision`) for `fire`: due at `fire`, in the schedule's
/// own orderingId (so a long run never delays it), ahead of every other due task. Its
/// uniquenessKey names its fire time (see [`tick_of`]).
pub(crate) fn tick_task(id: &str, revision: i64, fire: DateTime<Utc>) -> Task {
    let mut data = TaskData::new();
    data.insert("schedule".into(), id.into());
    data.insert("revision".into(), revision.into());
    Task::new(
        format!("{TICK_TYPE}:{id}"),
        fire,
        format!("tick:{revision}@{}", fire.timestamp_millis()),
        data,
    )
    .of_type(TICK_TYPE)
    .with_priority(i32::MAX)
}

/// The schedule, revision and fire time a tick names. The fire time is the one its
/// uniquenessKey carries (`tick:<revision>@<fire ms>`), not its due time: a tick enqueued again
/// after its fire time (by a create that found its chain overdue, or redriven from the dead
/// letters) is due when it was enqueued and still stands for its own fire time.
fn tick_of(task: &Task) -> Option<(String, i64, DateTime<Utc>)> {
    let id = task.task_data.get("schedule")?.as_str()?;
    let revision = task.task_data.get("revision")?.as_i64()?;
    let (_, fire_ms) = task
        .uniqueness_key
        .strip_prefix("tick:")?
        .rsplit_once('@')?;
    let fire = DateTime::from_timestamp_millis(fire_ms.parse().ok()?)?;
    Some((id.to_string(), revision, fire))
}

impl Ticker {
    /// Whether the run of `fire` has no final status yet (pending, running or retrying; also
    /// while it is still on its way through Kafka).
    async fn still_running(
        &self,
        spec: &ScheduleSpec,
        fire: DateTime<Utc>,
    ) -> Result<bool, TaskError> {
        let run = spec.run(fire);
        let partition = scheduler_client::partition_for(&run.ordering_id, self.partitions);
        let key: TaskKey = run.key();
        let status = self
            .statuses
            .status(partition, key)
            .await
            .map_err(|e| TaskError::retry(format!("reading the previous run's status: {e}")))?;
        Ok(status.is_none())
    }

    /// The fires recorded from `fire` on: what an earlier attempt of this tick decided (or, for
    /// a tick delivered again after its chain moved on, what later ticks did).
    async fn recorded_from(
        &self,
        id: &str,
        fire: DateTime<Utc>,
    ) -> Result<Vec<FireRecord>, TaskError> {
        let fires = (self.schedules.fires(id.to_string(), RECORDED_READ).await)
            .map_err(|e| TaskError::retry(format!("reading the fires of {id}: {e}")))?;
        Ok(fires.into_iter().filter(|f| f.fire_time >= fire).collect())
    }

    /// The tick of `fire`; `again`: enqueued again after its fire time (by a create that found
    /// its chain overdue, or redriven from the dead letters).
    async fn tick(
        &self,
        id: String,
        revision: i64,
        fire: DateTime<Utc>,
        again: bool,
    ) -> Result<(), TaskError> {
        let record = (self.schedules.recurring_schedule(id.clone()).await)
            .map_err(|e| TaskError::retry(format!("reading schedule {id}: {e}")))?;
        let Some(record) = record else {
            debug!("the schedule was deleted: this chain ends");
            return Ok(());
        };
        let spec = &record.spec;
        let recorded = self.recorded_from(&id, fire).await?;
        if record.revision != revision || record.paused {
            // An earlier attempt's recorded runs still go out (enqueued once however often).
            self.enqueue_runs(spec, &enqueued(&recorded)).await?;
            debug!("the schedule was paused or redefined: this chain ends");
            return Ok(());
        }
        if again && record.next_fire.is_some_and(|next| next > fire) {
            // Its chain went on past it (it was alive: every node had been down): the tick that
            // moved it on sent the runs from this fire time on before recording where it stands.
            debug!("a tick enqueued again after its chain went on: nothing to do");
            return Ok(());
        }
        let cadence = spec
            .validate()
            .map_err(|e| TaskError::invalid(format!("schedule {id}: {e}")))?;
        let (due, next) = match recorded.iter().map(reach).max() {
            // Decided by an earlier attempt: done again, the same way.
            Some(last) => (enqueued(&recorded), cadence.next_after(last)),
            None => self.decide(&id, &record, &cadence, fire).await?,
        };
        self.enqueue_runs(spec, &due).await?;
        if let Some(next) = next {
            (self.enqueuer.enqueue(tick_task(&id, revision, next)).await)
                .map_err(|e| TaskError::retry(format!("enqueueing the next tick: {e}")))?;
        }
        let last_fire = due.iter().copied().chain(record.last_fire).max();
        (self
            .schedules
            .record_tick(id.clone(), last_fire, next)
            .await)
            .map_err(|e| TaskError::retry(format!("recording the tick: {e}")))?;
        debug!(runs = due.len(), ?next, "tick done");
        Ok(())
    }

    /// Plans the tick, applies the overlap policy, and records the fires (in one write, before
    /// any run goes out, so that a retry does the same): the fire times to run and the next
    /// tick's.
    async fn decide(
        &self,
        id: &str,
        record: &crate::store::ScheduleRecord,
        cadence: &super::Cadence,
        fire: DateTime<Utc>,
    ) -> Result<(Vec<DateTime<Utc>>, Option<DateTime<Utc>>), TaskError> {
        let spec = &record.spec;
        let now = self.clock.now();
        let plan = plan(spec, cadence, fire, now);
        // The overlap policy holds back an on-time fire; a late tick's catch-up policy alone
        // decides, since the outage that made it late most often held the previous run too.
        let overlapping = match record.last_fire {
            Some(previous) if spec.overlap == Overlap::Skip && !plan.late && previous < fire => {
                self.still_running(spec, previous).await?
            }
            _ => false,
        };
        let mut fires: Vec<FireRecord> = plan
            .due
            .iter()
            .map(|t| FireRecord {
                fire_time: *t,
                outcome: match overlapping {
                    true => FireOutcome::SkippedOverlap,
                    false => FireOutcome::Enqueued {
                        run_time: spec.run_time(*t),
                    },
                },
                recorded_at: now,
            })
            .collect();
        if let Some(missed) = plan.missed {
            info!(count = missed.count, first = %missed.first, last = %missed.last,
                catch_up = ?spec.catch_up, "late tick: fire times passed over");
            fires.push(FireRecord {
                fire_time: missed.first,
                outcome: FireOutcome::Missed {
                    count: u64::try_from(missed.count).unwrap_or(u64::MAX),
                    last: missed.last,
                },
                recorded_at: now,
            });
        }
        if overlapping {
            info!(previous = ?record.last_fire, "the previous run is unfinished: fire skipped");
        }
        let due = enqueued(&fires);
        (self
            .schedules
            .record_fires(id.to_string(), fires.clone())
            .await)
            .map_err(|e| TaskError::retry(format!("recording the fires: {e}")))?;
        for fire in &fires {
            let count = match fire.outcome {
                FireOutcome::Missed { count, .. } => count,
                _ => 1,
            };
            self.metrics.schedule_fires(fire.outcome.as_str(), count);
        }
        Ok((due, plan.next))
    }

    async fn enqueue_runs(
        &self,
        spec: &ScheduleSpec,
        fires: &[DateTime<Utc>],
    ) -> Result<(), TaskError> {
        let runs = fires.iter().map(|t| self.enqueuer.enqueue(spec.run(*t)));
        try_join_all(runs)
            .await
            .map(|_| ())
            .map_err(|e| TaskError::retry(format!("enqueueing a run: {e}")))
    }
}

/// Most fires a tick reads back: a late tick's catch-up runs and its passed-over range.
const RECORDED_READ: usize = super::MAX_CATCH_UP_RUNS + 2;

/// The fire times of `fires` that enqueue a run, in order.
fn enqueued(fires: &[FireRecord]) -> Vec<DateTime<Utc>> {
    let mut times: Vec<_> = fires
        .iter()
        .filter(|f| matches!(f.outcome, FireOutcome::Enqueued { .. }))
        .map(|f| f.fire_time)
        .collect();
    times.sort();
    times
}

/// The last fire time a record covers (a passed-over range's last).
fn reach(fire: &FireRecord) -> DateTime<Utc> {
    match fire.outcome {
        FireOutcome::Missed { last, .. } => last,
        _ => fire.fire_time,
    }
}

impl TaskHandler for Ticker {
    async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
        let Some((id, revision, fire)) = tick_of(task) else {
            return Err(TaskError::invalid(
                "a tick's data names its schedule and revision, its key its fire time",
            ));
        };
        let again = task.scheduled_time.timestamp_millis() != fire.timestamp_millis();
        let span = tracing::info_span!("tick", schedule = %id, revision, %fire, again);
        self.tick(id, revision, fire, again).instrument(span).await
    }
}
