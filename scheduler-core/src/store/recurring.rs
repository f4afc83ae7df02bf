//! Recurring schedules (`recurring_schedules`): each schedule's definition, whether it is
//! paused, the revision its tick chain carries, and where the chain stands; and what each fire
//! did (`schedule_fires`, kept for the status retention). The definitions live in one small
//! partition, like the suspensions, so a listing is one single-partition query.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

use super::StoreResult;
use crate::schedule_spec::ScheduleSpec;

/// A recurring schedule as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRecord {
    /// The definition.
    pub spec: ScheduleSpec,
    /// Paused: its chain stops at its next tick; a resume starts a new one.
    pub paused: bool,
    /// Changes on every create and resume; a tick of another revision is of a superseded chain
    /// and ends it.
    pub revision: i64,
    /// When it was first created.
    pub created_at: DateTime<Utc>,
    /// When it was last created, paused or resumed.
    pub updated_at: DateTime<Utc>,
    /// The fire time of the chain's pending tick.
    pub next_fire: Option<DateTime<Utc>>,
    /// The fire time of the last run enqueued.
    pub last_fire: Option<DateTime<Utc>>,
}

/// What one fire (or one late tick's passed-over fire times) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FireOutcome {
    /// A run was enqueued, due at `run_time`.
    Enqueued {
        /// When the run is due (the fire time plus its jitter).
        run_time: DateTime<Utc>,
    },
    /// Skipped: the previous run had not finished (overlap `skip`).
    SkippedOverlap,
    /// Passed over by the catch-up policy: `count` fire times from this one to `last`.
    Missed {
        /// How many.
        count: u64,
        /// The last of them.
        last: DateTime<Utc>,
    },
}

impl FireOutcome {
    /// The stored spelling of the outcome.
    pub fn as_str(&self) -> &'static str {
        match self {
            FireOutcome::Enqueued { .. } => "enqueued",
            FireOutcome::SkippedOverlap => "skippedOverlap",
            FireOutcome::Missed { .. } => "missed",
        }
    }
}

/// A fire, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireRecord {
    /// The fire time.
    pub fire_time: DateTime<Utc>,
    /// What it did.
    pub outcome: FireOutcome,
    /// When the tick recorded it.
    pub recorded_at: DateTime<Utc>,
}

/// The recurring schedules of a keyspace.
pub trait RecurringStore: Send + Sync + 'static {
    /// Every schedule, by id.
    fn recurring_schedules(&self) -> BoxFuture<'static, StoreResult<Vec<ScheduleRecord>>>;

    /// The schedule `id`, if it exists.
    fn recurring_schedule(
        &self,
        id: String,
    ) -> BoxFuture<'static, StoreResult<Option<ScheduleRecord>>>;

    /// Writes the whole schedule (created again: overwritten).
    fn put_recurring_schedule(&self, record: ScheduleRecord)
        -> BoxFuture<'static, StoreResult<()>>;

    /// Records where the schedule's chain stands: the last run enqueued and the pending tick.
    fn record_tick(
        &self,
        id: String,
        last_fire: Option<DateTime<Utc>>,
        next_fire: Option<DateTime<Utc>>,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// Deletes the schedule (its chain ends at its next tick) and its fires.
    fn delete_recurring_schedule(&self, id: String) -> BoxFuture<'static, StoreResult<()>>;

    /// Records what a tick's fires did, all or none (one single-partition batch; a fire
    /// recorded again is overwritten).
    fn record_fires(
        &self,
        id: String,
        fires: Vec<FireRecord>,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// The schedule's last `limit` fires, newest first.
    fn fires(&self, id: String, limit: usize) -> BoxFuture<'static, StoreResult<Vec<FireRecord>>>;
}
