//! Recurring schedules: a cron expression (with seconds, in a time zone) or a fixed interval,
//! and the task to enqueue at each of its fire times.
//!
//! A schedule is a row of `recurring_schedules` and a chain of engine tasks, its ticks (type
//! [`TICK_TYPE`], orderingId `scheduler:tick:<id>`), one per fire time. A tick's handler
//! (`ticker`) reads the schedule, enqueues the run of that fire time, and enqueues the next
//! tick. So a schedule inherits the engine's guarantees: a tick is durable in Kafka and
//! Cassandra, survives restarts and rebalances, runs on its partition's owner only, and is
//! retried when its read or its enqueue fails. Every key is derived from the fire time (a run's
//! uniquenessKey is `schedule:<id>@<fire ms>`, enqueued `IfAbsent`), so a tick run twice, or two
//! chains racing after a resume, enqueue each run once.

#[cfg(test)]
mod chain_tests;
mod manage;
pub(crate) mod ticker;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;

use crate::settings::duration_text;
use scheduler_client::{wire, OnConflict, Task, TaskData};

pub use crate::schedule_spec::{CatchUp, Overlap, ScheduleSpec};
pub use manage::{RecurringError, RecurringSchedules};

/// The type of a schedule's ticks, run by the engine itself on every node.
pub const TICK_TYPE: &str = "scheduler:tick";

/// Most runs one late tick enqueues under [`CatchUp::All`] (the latest ones).
pub const MAX_CATCH_UP_RUNS: usize = 1000;

/// How many fire times a plan looks at past a late tick before it stops counting.
const MAX_SCAN: usize = 100_000;

/// What is wrong with a schedule's definition.
#[derive(Debug, thiserror::Error)]
pub enum InvalidSchedule {
    /// The id is empty, too long or has other characters.
    #[error("schedule id {0:?} must be 1 to 200 letters, digits, '-', '_', '.' or ':'")]
    Id(String),
    /// Neither or both of `cron` and `every`.
    #[error("a schedule needs exactly one of cron and every")]
    Cadence,
    /// The cron expression does not parse.
    #[error("cron expression {expr:?}: {source}")]
    Cron {
        /// The expression.
        expr: String,
        /// croner's reason.
        #[source]
        source: croner::errors::CronError,
    },
    /// The time zone is not an IANA name.
    #[error("time zone {0:?} is not an IANA time zone name (such as Europe/Paris)")]
    TimeZone(String),
    /// A time zone without a cron expression.
    #[error("timeZone applies to cron schedules only")]
    TimeZoneWithoutCron,
    /// The interval is shorter than a second.
    #[error("every must be at least 1s")]
    Interval,
    /// No task type.
    #[error("taskType must not be empty")]
    TaskType,
    /// A task type the engine keeps for itself.
    #[error("taskType {0:?} is the engine's own")]
    ReservedTaskType(String),
    /// An empty orderingId.
    #[error("orderingId must not be empty")]
    OrderingId,
    /// A catch-up window without the policy that uses it.
    #[error("catchUpWindow applies to catchUp \"all\" only")]
    WindowWithoutAll,
    /// Its runs would be refused (a task type, an orderingId or data no task can have).
    #[error("its runs would be refused: {0}")]
    Run(#[source] wire::ContentError),
    /// The id [`RESERVED_ID`], which a schedule cannot have.
    #[error(
        "schedule id {RESERVED_ID:?} names the admin API's preview (/api/v1/schedules/preview), \
         where such a schedule could not be shown nor deleted: choose another"
    )]
    ReservedId,
}

/// The one id a schedule cannot be created with: `/api/v1/schedules/preview` is the preview's
/// route, so `GET` and `DELETE /api/v1/schedules/preview` would not reach the schedule.
pub const RESERVED_ID: &str = "preview";

/// When a schedule fires.
#[derive(Debug, Clone)]
pub enum Cadence {
    /// On a cron expression's times in a time zone.
    Cron {
        /// The parsed expression.
        cron: Box<croner::Cron>,
        /// Its time zone.
        zone: Tz,
    },
    /// At the multiples of an interval since the Unix epoch.
    Every(TimeDelta),
}

impl Cadence {
    /// The first fire time strictly after `after`; `None` when there is none (a cron
    /// expression whose times have all passed, such as a date in a past year).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Cadence::Cron { cron, zone } => cron
                .find_next_occurrence(&after.with_timezone(zone), false)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
            Cadence::Every(interval) => {
                let step = interval.num_milliseconds().max(1);
                let ms = after.timestamp_millis();
                let next = (ms.div_euclid(step) + 1).checked_mul(step)?;
                DateTime::from_timestamp_millis(next)
            }
        }
    }

    /// The next `n` fire times after `after`.
    pub fn preview(&self, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        std::iter::successors(self.next_after(after), |t| self.next_after(*t))
            .take(n)
            .collect()
    }

    /// In words: croner's English for a cron expression, `every 2s` for an interval.
    pub fn describe(&self) -> String {
        match self {
            Cadence::Cron { cron, zone } => format!("{} ({zone})", cron.describe()),
            Cadence::Every(interval) => {
                let d = interval.to_std().unwrap_or_default();
                format!("every {}", duration_text::format(d))
            }
        }
    }
}

impl ScheduleSpec {
    /// A schedule firing on `cron` (five fields, or six with seconds first), in UTC unless
    /// [`ScheduleSpec::in_time_zone`], enqueuing a task of `task_type` with `data`.
    pub fn cron(
        id: impl Into<String>,
        cron: impl Into<String>,
        task_type: impl Into<String>,
        data: TaskData,
    ) -> ScheduleSpec {
        ScheduleSpec {
            cron: Some(cron.into()),
            ..ScheduleSpec::bare(id.into(), task_type.into(), data)
        }
    }

    /// A schedule firing every `interval` (at its multiples since the Unix epoch).
    pub fn every(
        id: impl Into<String>,
        interval: Duration,
        task_type: impl Into<String>,
        data: TaskData,
    ) -> ScheduleSpec {
        ScheduleSpec {
            every: Some(interval),
            ..ScheduleSpec::bare(id.into(), task_type.into(), data)
        }
    }

    fn bare(id: String, task_type: String, data: TaskData) -> ScheduleSpec {
        ScheduleSpec {
            id,
            cron: None,
            time_zone: None,
            every: None,
            task_type,
            ordering_id: None,
            data,
            priority: 0,
            overlap: Overlap::default(),
            catch_up: CatchUp::default(),
            catch_up_window: None,
            jitter: None,
            misfire_threshold: None,
        }
    }

    /// The cron expression read in `zone` (an IANA name such as `Europe/Paris`).
    pub fn in_time_zone(mut self, zone: impl Into<String>) -> ScheduleSpec {
        self.time_zone = Some(zone.into());
        self
    }

    /// With an overlap policy.
    pub fn overlap(mut self, overlap: Overlap) -> ScheduleSpec {
        self.overlap = overlap;
        self
    }

    /// With a catch-up policy (and, for [`CatchUp::All`], its window).
    pub fn catch_up(mut self, catch_up: CatchUp, window: Option<Duration>) -> ScheduleSpec {
        self.catch_up = catch_up;
        self.catch_up_window = window;
        self
    }

    /// With jitter: each run is due up to `jitter` after its fire time.
    pub fn jitter(mut self, jitter: Duration) -> ScheduleSpec {
        self.jitter = Some(jitter);
        self
    }

    /// With a misfire threshold (see [`ScheduleSpec::misfire_threshold`]).
    pub fn misfire_threshold(mut self, threshold: Duration) -> ScheduleSpec {
        self.misfire_threshold = Some(threshold);
        self
    }

    /// The runs in `ordering_id` (default `schedule:<id>`).
    pub fn ordering_id(mut self, ordering_id: impl Into<String>) -> ScheduleSpec {
        self.ordering_id = Some(ordering_id.into());
        self
    }

    /// Checks the definition; its cadence when it is valid.
    pub fn validate(&self) -> Result<Cadence, InvalidSchedule> {
        let id_ok = !self.id.is_empty()
            && self.id.len() <= 200
            && (self.id.chars()).all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
        if !id_ok {
            return Err(InvalidSchedule::Id(self.id.clone()));
        }
        if self.task_type.is_empty() {
            return Err(InvalidSchedule::TaskType);
        }
        if self.task_type.starts_with("scheduler:") {
            return Err(InvalidSchedule::ReservedTaskType(self.task_type.clone()));
        }
        if self.ordering_id.as_deref() == Some("") {
            return Err(InvalidSchedule::OrderingId);
        }
        if self.catch_up_window.is_some() && self.catch_up != CatchUp::All {
            return Err(InvalidSchedule::WindowWithoutAll);
        }
        wire::check_task(&self.run(DateTime::UNIX_EPOCH)).map_err(InvalidSchedule::Run)?;
        match (&self.cron, self.every) {
            (Some(expr), None) => {
                let cron = croner::parser::CronParser::builder()
                    .seconds(croner::parser::Seconds::Optional)
                    .build()
                    .parse(expr)
                    .map_err(|source| InvalidSchedule::Cron {
                        expr: expr.clone(),
                        source,
                    })?;
                let zone = match &self.time_zone {
                    Some(name) => name
                        .parse::<Tz>()
                        .map_err(|_| InvalidSchedule::TimeZone(name.clone()))?,
                    None => Tz::UTC,
                };
                Ok(Cadence::Cron {
                    cron: Box::new(cron),
                    zone,
                })
            }
            (None, Some(every)) => {
                if self.time_zone.is_some() {
                    return Err(InvalidSchedule::TimeZoneWithoutCron);
                }
                if every < Duration::from_secs(1) {
                    return Err(InvalidSchedule::Interval);
                }
                let every = TimeDelta::from_std(every).map_err(|_| InvalidSchedule::Interval)?;
                Ok(Cadence::Every(every))
            }
            _ => Err(InvalidSchedule::Cadence),
        }
    }

    /// The runs' orderingId.
    pub fn run_ordering_id(&self) -> String {
        self.ordering_id
            .clone()
            .unwrap_or_else(|| format!("schedule:{}", self.id))
    }

    /// The task `fire` enqueues: in the runs' orderingId, due at the fire time plus its jitter,
    /// keyed by the fire time and `IfAbsent`, so that it is enqueued once however often.
    pub fn run(&self, fire: DateTime<Utc>) -> Task {
        Task::new(
            self.run_ordering_id(),
            self.run_time(fire),
            self.run_key(fire),
            self.data.clone(),
        )
        .of_type(self.task_type.clone())
        .with_priority(self.priority)
        .on_conflict(OnConflict::IfAbsent)
    }

    /// The uniquenessKey of the run of `fire`.
    pub fn run_key(&self, fire: DateTime<Utc>) -> String {
        run_key(&self.id, fire)
    }

    /// When the run of `fire` is due: the fire time plus its jitter, a fixed fraction of
    /// [`ScheduleSpec::jitter`] drawn from the schedule's id and the fire time.
    pub fn run_time(&self, fire: DateTime<Utc>) -> DateTime<Utc> {
        let Some(jitter) = self.jitter.filter(|j| !j.is_zero()) else {
            return fire;
        };
        let span = u64::try_from(jitter.as_millis()).unwrap_or(u64::MAX).max(1);
        let seed = format!("{}@{}", self.id, fire.timestamp_millis());
        let offset = twox_hash::XxHash64::oneshot(0, seed.as_bytes()) % span;
        fire + TimeDelta::milliseconds(i64::try_from(offset).unwrap_or(0))
    }

    fn misfire(&self) -> TimeDelta {
        let d = self.misfire_threshold.unwrap_or(Duration::from_secs(5));
        TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
    }

    fn window(&self) -> TimeDelta {
        let d = self.catch_up_window.unwrap_or(Duration::from_secs(3600));
        TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
    }
}

/// The uniquenessKey of schedule `id`'s run of `fire`.
pub fn run_key(id: &str, fire: DateTime<Utc>) -> String {
    format!("schedule:{id}@{}", fire.timestamp_millis())
}

/// What a tick for `fire`, running at `now`, does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Whether the tick runs past the misfire threshold: the catch-up policy picked `due`.
    pub late: bool,
    /// The fire times to enqueue runs for, in order.
    pub due: Vec<DateTime<Utc>>,
    /// Fire times passed over by the catch-up policy: how many, the first and the last.
    pub missed: Option<Missed>,
    /// The next tick's fire time (`None`: the cadence has no more).
    pub next: Option<DateTime<Utc>>,
}

/// Fire times a late tick passed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Missed {
    /// How many (counting stops at a large bound).
    pub count: usize,
    /// The first.
    pub first: DateTime<Utc>,
    /// The last.
    pub last: DateTime<Utc>,
}

/// Plans the tick of `fire` running at `now`. On time (within the misfire threshold) it fires
/// `fire` and the chain goes on from it, so ticks slightly behind catch up one by one. Late, the
/// catch-up policy picks among `fire` and every fire time since, and the chain goes on from
/// `now`.
pub fn plan(
    spec: &ScheduleSpec,
    cadence: &Cadence,
    fire: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Plan {
    if now - fire <= spec.misfire() {
        return Plan {
            late: false,
            due: vec![fire],
            missed: None,
            next: cadence.next_after(fire),
        };
    }
    let passed: Vec<DateTime<Utc>> = std::iter::successors(Some(fire), |t| cadence.next_after(*t))
        .take_while(|t| *t <= now)
        .take(MAX_SCAN)
        .collect();
    let (due, missed): (Vec<_>, Vec<_>) = match spec.catch_up {
        CatchUp::Skip => (Vec::new(), passed),
        CatchUp::Once => {
            let mut missed = passed;
            let last = missed.pop();
            (last.into_iter().collect(), missed)
        }
        CatchUp::All => {
            let since = now - spec.window();
            let (mut due, mut missed): (Vec<_>, Vec<_>) =
                passed.into_iter().partition(|t| *t >= since);
            if due.len() > MAX_CATCH_UP_RUNS {
                let keep = due.split_off(due.len() - MAX_CATCH_UP_RUNS);
                missed.append(&mut due);
                due = keep;
            }
            (due, missed)
        }
    };
    let missed = match (missed.first(), missed.last()) {
        (Some(first), Some(last)) => Some(Missed {
            count: missed.len(),
            first: *first,
            last: *last,
        }),
        _ => None,
    };
    Plan {
        late: true,
        due,
        missed,
        next: cadence.next_after(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    fn every_2s() -> ScheduleSpec {
        ScheduleSpec::every("s", Duration::from_secs(2), "report", TaskData::new())
    }

    #[test]
    fn intervals_fire_at_their_multiples_since_the_epoch() {
        let cadence = every_2s().validate().expect("valid");
        let from = at("2026-01-01T00:00:01.500Z");
        assert_eq!(
            cadence.preview(from, 3),
            vec![
                at("2026-01-01T00:00:02Z"),
                at("2026-01-01T00:00:04Z"),
                at("2026-01-01T00:00:06Z")
            ]
        );
        assert_eq!(
            cadence.next_after(at("2026-01-01T00:00:02Z")),
            Some(at("2026-01-01T00:00:04Z"))
        );
    }

    #[test]
    fn cron_with_seconds_in_a_time_zone_follows_its_offset() {
        let spec = ScheduleSpec::cron("c", "0 30 9 * * *", "report", TaskData::new())
            .in_time_zone("Europe/Paris");
        let cadence = spec.validate().expect("valid");
        // 09:30 in Paris is 08:30 UTC in winter, 07:30 UTC in summer.
        assert_eq!(
            cadence.next_after(at("2026-01-10T00:00:00Z")),
            Some(at("2026-01-10T08:30:00Z"))
        );
        assert_eq!(
            cadence.next_after(at("2026-07-10T00:00:00Z")),
            Some(at("2026-07-10T07:30:00Z"))
        );
        let five = ScheduleSpec::cron("f", "*/15 * * * *", "report", TaskData::new());
        assert_eq!(
            five.validate()
                .expect("valid")
                .preview(at("2026-01-01T00:07:00Z"), 2),
            vec![at("2026-01-01T00:15:00Z"), at("2026-01-01T00:30:00Z")]
        );
    }

    #[test]
    fn invalid_definitions_say_what_is_wrong() {
        let data = TaskData::new();
        let bad = [
            ScheduleSpec::cron("a b", "* * * * *", "t", data.clone()),
            ScheduleSpec::cron("a", "61 * * * *", "t", data.clone()),
            ScheduleSpec::cron("a", "* * * * *", "t", data.clone()).in_time_zone("Mars/Base"),
            ScheduleSpec::every("a", Duration::from_millis(500), "t", data.clone()),
            ScheduleSpec::every("a", Duration::from_secs(1), "", data.clone()),
            ScheduleSpec::every("a", Duration::from_secs(1), TICK_TYPE, data.clone()),
            ScheduleSpec::every("a", Duration::from_secs(1), "send email", data.clone()),
            ScheduleSpec::every("a", Duration::from_secs(1), "t", data.clone())
                .ordering_id("o".repeat(5000)),
            ScheduleSpec::every("a", Duration::from_secs(1), "t", data.clone())
                .catch_up(CatchUp::Once, Some(Duration::from_secs(1))),
            ScheduleSpec {
                every: Some(Duration::from_secs(1)),
                ..ScheduleSpec::cron("a", "* * * * *", "t", data)
            },
        ];
        for spec in bad {
            assert!(spec.validate().is_err(), "{spec:?}");
        }
    }

    #[test]
    fn the_json_form_round_trips_with_durations_as_text() {
        let spec = every_2s()
            .jitter(Duration::from_millis(500))
            .catch_up(CatchUp::All, Some(Duration::from_secs(60)));
        let json = serde_json::to_value(&spec).expect("json");
        assert_eq!(json["every"], "2s");
        assert_eq!(json["jitter"], "500ms");
        assert_eq!(json["catchUp"], "all");
        assert_eq!(json["catchUpWindow"], "1m");
        let back: ScheduleSpec = serde_json::from_value(json).expect("back");
        assert_eq!(back, spec);
        let unknown = serde_json::json!({"id": "x", "every": "1s", "taskType": "t", "evry": 1});
        assert!(serde_json::from_value::<ScheduleSpec>(unknown).is_err());
    }

    #[test]
    fn an_on_time_tick_fires_its_time_and_chains_from_it() {
        let spec = every_2s();
        let cadence = spec.validate().expect("valid");
        let fire = at("2026-01-01T00:00:10Z");
        let plan = plan(&spec, &cadence, fire, at("2026-01-01T00:00:13Z"));
        assert_eq!(plan.due, vec![fire]);
        assert_eq!(plan.missed, None);
        assert_eq!(plan.next, Some(at("2026-01-01T00:00:12Z")));
    }

    #[test]
    fn a_late_tick_applies_its_catch_up_policy_to_every_passed_fire_time() {
        let fire = at("2026-01-01T00:00:10Z");
        let now = at("2026-01-01T00:00:21Z"); // 10, 12, ..., 20 passed
        let next = Some(at("2026-01-01T00:00:22Z"));
        let passed: Vec<_> = (0..6).map(|i| fire + TimeDelta::seconds(2 * i)).collect();
        for (catch_up, window, due) in [
            (CatchUp::Skip, None, vec![]),
            (CatchUp::Once, None, vec![passed[5]]),
            (CatchUp::All, None, passed.clone()),
            (CatchUp::All, Some(5), passed[3..].to_vec()),
        ] {
            let spec = every_2s().catch_up(catch_up, window.map(Duration::from_secs));
            let cadence = spec.validate().expect("valid");
            let plan = plan(&spec, &cadence, fire, now);
            assert_eq!(plan.due, due, "{catch_up:?} {window:?}");
            assert_eq!(plan.next, next);
            let missed = plan.missed.map(|m| m.count).unwrap_or(0);
            assert_eq!(missed + plan.due.len(), 6, "{catch_up:?} {window:?}");
        }
    }

    #[test]
    fn jitter_is_a_fixed_offset_within_its_bound() {
        let spec = every_2s().jitter(Duration::from_millis(800));
        let fire = at("2026-01-01T00:00:10Z");
        let time = spec.run_time(fire);
        assert_eq!(spec.run_time(fire), time);
        assert!(time >= fire && time < fire + TimeDelta::milliseconds(800));
        let offsets: std::collections::BTreeSet<_> = (0..20)
            .map(|i| {
                let f = fire + TimeDelta::seconds(2 * i);
                spec.run_time(f) - f
            })
            .collect();
        assert!(offsets.len() > 1, "the offset varies with the fire time");
        assert_eq!(every_2s().run_time(fire), fire);
    }
}
