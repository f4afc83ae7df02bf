//! Recurring schedules in the simulation: two schedules created when the nodes start (one
//! allowing overlap and catching up on every missed fire time, one skipping overlaps and
//! catching up once), their ticks run by the nodes' tickers under every fault, paused ten
//! seconds after the heal. A node joining during the faults declares the schedules again
//! (unchanged), as a service does at its start; in half the seeds the whole cluster is down at
//! the heal for longer than a chain's pending tick may be overdue, and the nodes declare them
//! again when they are back. Checked: each fire time's
//! run is one task and reaches its final status; every fire time from the first to the chain's
//! pending tick at the pause is accounted for (a run, an overlap skip, or a catch-up's
//! passed-over range); nothing fires off its cadence or after the pause. During the faults a
//! schedule's next tick now and then gives up (a dead letter: its chain stalls); the operator
//! may redrive it then, and redrives every dead-lettered tick after the heal: a redriven tick
//! runs to its end, and its chain goes on by the rules above (late, by its catch-up policy).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_client::{Task, TaskData, DEFAULT_TASK_TYPE};

use super::executor::{Call, Shared};
use super::World;
use crate::handler::{TaskContext, TaskError, TaskHandler};
use crate::recurring::ticker::Ticker;
use crate::recurring::{CatchUp, Overlap, RecurringSchedules, ScheduleSpec};
use crate::store::{FireOutcome, FireRecord, RecurringStore, TaskStatus};

/// The schedules every seed runs.
pub(super) fn specs() -> Vec<ScheduleSpec> {
    vec![
        ScheduleSpec::every("sim-all", Duration::from_secs(1), DEFAULT_TASK_TYPE, data())
            .overlap(Overlap::Allow)
            .catch_up(CatchUp::All, Some(Duration::from_secs(20)))
            .misfire_threshold(Duration::from_secs(2)),
        ScheduleSpec::every(
            "sim-once",
            Duration::from_secs(3),
            DEFAULT_TASK_TYPE,
            data(),
        )
        .catch_up(CatchUp::Once, None)
        .jitter(Duration::from_millis(500)),
    ]
}

fn data() -> TaskData {
    let mut data = TaskData::new();
    data.insert("recurring".into(), true.into());
    data
}

/// The nodes' ticker, but for the next tick of a schedule marked failing, which gives up, on
/// every call of it.
pub(super) struct SimTicker {
    pub(super) ticker: Ticker,
    pub(super) shared: Arc<Shared>,
}

impl TaskHandler for SimTicker {
    async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        let schedule = task.task_data.get("schedule").and_then(|s| s.as_str());
        let failing = {
            let mut given_up =
                (self.shared.given_up_ticks.lock()).unwrap_or_else(PoisonError::into_inner);
            let failing = given_up.contains(&task.key())
                || schedule.is_some_and(|id| {
                    (self.shared.failing_ticks.lock())
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(id)
                });
            if failing {
                given_up.insert(task.key());
            }
            failing
        };
        match failing {
            true => Err(TaskError::invalid("sim: the tick gives up")),
            false => self.ticker.execute(task, ctx).await,
        }
    }

    /// Heard as the simulated executor hears of its tasks' dead letters (checked alike).
    async fn dead_lettered(&self, letter: &crate::store::DeadLetter) {
        self.shared.heard_of_dead_letter(letter.task.key());
    }
}

/// How long the whole cluster is down when it restarts: past the minute after which a create
/// of an unchanged schedule finds its pending tick overdue.
const CLUSTER_DOWN: Duration = Duration::from_secs(75);

/// What the seed did with its schedules.
#[derive(Default)]
pub(super) struct Recurring {
    pub(super) created_at: Option<DateTime<Utc>>,
    pub(super) paused_at: Option<DateTime<Utc>>,
    /// Each schedule's pending tick when it paused: every fire time before it was handled.
    pub(super) handled_until: BTreeMap<String, DateTime<Utc>>,
    /// Each schedule's fires, read at the end.
    pub(super) fires: BTreeMap<String, Vec<FireRecord>>,
}

impl World {
    fn schedules(&self) -> RecurringSchedules {
        RecurringSchedules::new(
            Arc::new(self.store.clone()),
            Arc::new(self.outbox.clone()),
            Arc::new(self.shared.clock.clone()),
        )
    }

    pub(super) async fn create_schedules(&mut self) {
        let schedules = self.schedules();
        for spec in specs() {
            if let Err(e) = schedules.create(spec).await {
                self.violations.push(format!("creating a schedule: {e}"));
            }
        }
        self.recurring.created_at = Some(self.now());
    }

    /// The whole cluster restarts: every node's partitions revoked, nothing runs for
    /// [`CLUSTER_DOWN`], then the nodes are back and declare the schedules again, unchanged:
    /// their chains go on (the pending ticks, late, catch up by their policies).
    pub(super) async fn restart_cluster(&mut self) {
        tracing::info!("sim: the whole cluster is down");
        for node in self.members() {
            self.revoke(node).await;
            self.nodes[node].owned.clear();
        }
        tokio::time::sleep(CLUSTER_DOWN).await;
        tracing::info!("sim: the cluster is back; its nodes declare the schedules again");
        self.rebalance().await;
        self.declare_schedules_again(false).await;
    }

    /// A node starting declares the schedules again, unchanged, as a service does at its
    /// start: their chains go on. During the faults (`faulty`) the store may fail the create, as
    /// it may fail a service's, which then goes on without it: nothing must come of a half-done
    /// create.
    pub(super) async fn declare_schedules_again(&mut self, faulty: bool) {
        let schedules = self.schedules();
        for spec in specs() {
            match schedules.create(spec).await {
                Ok(_) => {}
                Err(e) if faulty => tracing::info!(error = %e, "sim: a declaration failed"),
                Err(e) => self
                    .violations
                    .push(format!("declaring a schedule again: {e}")),
            }
        }
    }

    /// A schedule's next tick gives up: a dead letter, its chain stalled until it is redriven.
    pub(super) fn fail_next_tick(&mut self) {
        let specs = specs();
        let id = specs[self.rng.usize(0..specs.len())].id.clone();
        tracing::info!(schedule = %id, "sim: the schedule's next tick will give up");
        (self.shared.failing_ticks.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id);
    }

    pub(super) async fn pause_schedules(&mut self) {
        let schedules = self.schedules();
        for spec in specs() {
            match schedules.get(&spec.id).await {
                Ok(Some(record)) => {
                    if let Some(next) = record.next_fire {
                        self.recurring.handled_until.insert(spec.id.clone(), next);
                    }
                }
                Ok(None) => self
                    .violations
                    .push(format!("schedule {} is gone", spec.id)),
                Err(e) => self.violations.push(format!("reading a schedule: {e}")),
            }
            if let Err(e) = schedules.pause(&spec.id).await {
                self.violations.push(format!("pausing a schedule: {e}"));
            }
        }
        self.recurring.paused_at = Some(self.now());
    }

    pub(super) async fn read_fires(&mut self) {
        for spec in specs() {
            match self.store.fires(spec.id.clone(), usize::MAX).await {
                Ok(fires) => {
                    self.recurring.fires.insert(spec.id, fires);
                }
                Err(e) => self.violations.push(format!("reading fires: {e}")),
            }
        }
    }

    pub(super) fn check_schedules(
        &mut self,
        statuses: &BTreeMap<scheduler_client::TaskKey, TaskStatus>,
        calls: &[Call],
    ) {
        let (Some(created), Some(paused)) = (self.recurring.created_at, self.recurring.paused_at)
        else {
            return;
        };
        for spec in specs() {
            let Ok(cadence) = spec.validate() else {
                continue;
            };
            let fires = self
                .recurring
                .fires
                .get(&spec.id)
                .cloned()
                .unwrap_or_default();
            let mut enqueued = BTreeSet::new();
            let mut accounted = BTreeSet::new();
            for fire in &fires {
                match fire.outcome {
                    FireOutcome::Enqueued { .. } => {
                        enqueued.insert(fire.fire_time);
                        accounted.insert(fire.fire_time);
                    }
                    FireOutcome::SkippedOverlap => {
                        accounted.insert(fire.fire_time);
                    }
                    FireOutcome::Missed { last, .. } => {
                        let passed =
                            std::iter::successors(Some(fire.fire_time), |t| cadence.next_after(*t));
                        accounted.extend(passed.take_while(|t| *t <= last));
                    }
                }
            }
            // Every fire time from the first to the pending tick at the pause is accounted for.
            let end = self.recurring.handled_until.get(&spec.id).copied();
            let end = end.unwrap_or(created);
            let expected =
                std::iter::successors(cadence.next_after(created), |t| cadence.next_after(*t))
                    .take_while(|t| *t < end);
            for fire in expected {
                if !accounted.contains(&fire) {
                    self.violations.push(format!(
                        "schedule {}: fire time {fire} unaccounted for",
                        spec.id
                    ));
                }
            }
            // Each enqueued fire's run is one task, on its cadence, before the pause, finished.
            for fire in &enqueued {
                let key = spec.run(*fire).key();
                if cadence.next_after(*fire - TimeDelta::milliseconds(1)) != Some(*fire) {
                    self.violations.push(format!(
                        "schedule {}: fired off its cadence at {fire}",
                        spec.id
                    ));
                }
                if *fire > paused + TimeDelta::seconds(1) {
                    self.violations.push(format!(
                        "schedule {}: fired at {fire} after its pause",
                        spec.id
                    ));
                }
                if statuses.get(&key) != Some(&TaskStatus::Completed) {
                    self.violations.push(format!(
                        "schedule {}: the run of {fire} has status {:?}",
                        spec.id,
                        statuses.get(&key)
                    ));
                }
            }
            // No run of the schedule but those of its recorded fires (one key per fire time).
            let ordering = spec.run_ordering_id();
            let called: BTreeSet<_> = calls
                .iter()
                .filter(|c| c.key.ordering_id == ordering)
                .map(|c| c.key.clone())
                .collect();
            let recorded: BTreeSet<_> = enqueued.iter().map(|f| spec.run(*f).key()).collect();
            for key in called.difference(&recorded) {
                self.violations.push(format!(
                    "schedule {}: a run no fire recorded: {key}",
                    spec.id
                ));
            }
        }
        // A redriven tick runs to its end (it does nothing if its chain went on meanwhile):
        // completed, or dropped if it gave up (redriven during the faults, it may be the next
        // tick of its schedule to give up).
        let given_up = (self.shared.given_up_ticks.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for key in self.produced.redriven_ticks.keys() {
            let status = statuses.get(key);
            let gave_up = status == Some(&TaskStatus::Dropped) && given_up.contains(key);
            if status != Some(&TaskStatus::Completed) && !gave_up {
                self.violations.push(format!(
                    "the redriven tick {key} has status {:?}",
                    statuses.get(key)
                ));
            }
        }
    }
}
