//! A recurring schedule's definition, as a user writes it (the admin API's JSON) and as the
//! store keeps it: data only, a leaf that the store and [`crate::recurring`] both read. What a
//! definition means (its cadence, its fire times) is [`crate::recurring`]'s.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use scheduler_client::TaskData;

/// A recurring schedule as a user defines it (the admin API's JSON, camelCase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScheduleSpec {
    /// Names the schedule (letters, digits, `-`, `_`, `.`, `:`; at most 200 bytes). Absent
    /// (empty) in a preview's definition.
    #[serde(default)]
    pub id: String,
    /// A cron expression: five fields, or six with seconds first (`*/2 * * * * *`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The cron expression's IANA time zone (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// A fixed interval instead of a cron expression (`"2s"`, `"15m"`): fire times are the
    /// multiples of it since the Unix epoch, so every node computes the same ones.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_duration"
    )]
    #[schemars(with = "Option<String>")]
    pub every: Option<Duration>,
    /// The type of the task each fire enqueues.
    pub task_type: String,
    /// The runs' orderingId (default `schedule:<id>`): runs of one orderingId run one at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering_id: Option<String>,
    /// The runs' data.
    #[serde(default)]
    pub data: TaskData,
    /// The runs' priority.
    #[serde(default)]
    pub priority: i32,
    /// Whether a fire enqueues a run while the previous run has not finished.
    #[serde(default)]
    pub overlap: Overlap,
    /// What a tick that runs late (nodes were down) does with the fire times it missed.
    #[serde(default)]
    pub catch_up: CatchUp,
    /// With [`CatchUp::All`]: how far back missed fire times are still run (default 1h).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_duration"
    )]
    #[schemars(with = "Option<String>")]
    pub catch_up_window: Option<Duration>,
    /// Each run is due up to this much after its fire time (a fixed offset per fire time, so
    /// a run enqueued twice has one time), spreading schedules that share a fire time.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_duration"
    )]
    #[schemars(with = "Option<String>")]
    pub jitter: Option<Duration>,
    /// A tick running more than this after its fire time is late: its catch-up policy decides
    /// (default 5s).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_duration"
    )]
    #[schemars(with = "Option<String>")]
    pub misfire_threshold: Option<Duration>,
}

/// Whether a fire enqueues a run while the previous one has not finished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Overlap {
    /// Skip an on-time fire (recorded as skipped) while the previous run has no final status.
    /// A late tick's fires follow the catch-up policy alone: the outage that made the tick late
    /// most often held the previous run too.
    #[default]
    Skip,
    /// Enqueue it anyway (runs of one orderingId still run one at a time, in order).
    Allow,
}

/// What a late tick does with the fire times that passed while no node ran it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CatchUp {
    /// Run none of them; the schedule goes on from the next fire time.
    Skip,
    /// Run one, for the latest of them.
    #[default]
    Once,
    /// Run each of them within the catch-up window (at most [`MAX_CATCH_UP_RUNS`](crate::recurring::MAX_CATCH_UP_RUNS)).
    All,
}

/// Serde for an optional duration as text (`"2s"`).
mod optional_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    use crate::settings::duration_text;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&duration_text::format(*d)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| duration_text::parse(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}
