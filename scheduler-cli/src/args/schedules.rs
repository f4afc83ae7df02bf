//! `schedules`' command line: its subcommands, and a schedule's definition from flags or a file.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use scheduler_core::recurring::{CatchUp, Overlap};

use super::AdminArgs;

#[derive(Args)]
pub(crate) struct SchedulesArgs {
    #[command(subcommand)]
    pub(crate) command: SchedulesCommand,
}

#[derive(Subcommand)]
pub(crate) enum SchedulesCommand {
    /// Create a schedule, or redefine the one of its id: a new definition starts again from
    /// its next fire time after now (a paused schedule stays paused); the same definition
    /// changes nothing.
    ///
    /// Each fire time enqueues one task (its run) of --task-type, in --ordering-id, with
    /// --data. Define it with flags, or with --file and the admin API's JSON.
    Create(ScheduleCreateArgs),
    /// List the schedules: cadence, task type, state (active, paused, or stalled: no node ran
    /// its pending fire for over a minute), next and last fire.
    List(AdminArgs),
    /// Show a schedule: its definition, state, next fire times and last fires.
    Show(ScheduleShowArgs),
    /// Pause a schedule: no run is enqueued until it is resumed.
    Pause(ScheduleIdArgs),
    /// Resume a paused schedule from its next fire time after now (the fire times while it was
    /// paused are not run).
    Resume(ScheduleIdArgs),
    /// Delete a schedule (runs already enqueued still run).
    Delete(ScheduleIdArgs),
    /// Show a definition's cadence in words and its next fire times, creating nothing.
    Preview(SchedulePreviewArgs),
}

#[derive(Args)]
// Required here, not in `ScheduleDefinitionArgs`: a preview needs no task type.
#[command(mut_arg("task_type", |arg| arg.required_unless_present("file")))]
pub(crate) struct ScheduleCreateArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// The schedule's id (1 to 200 ASCII letters, digits or -_.:). With --file, the file's:
    /// given too, it must be the same.
    #[arg(required_unless_present = "file")]
    pub(crate) id: Option<String>,
    #[command(flatten)]
    pub(crate) definition: ScheduleDefinitionArgs,
}

#[derive(Args)]
pub(crate) struct SchedulePreviewArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// An id for the definition (it names nothing; default `preview`). With --file, the
    /// file's: given too, it must be the same.
    pub(crate) id: Option<String>,
    #[command(flatten)]
    pub(crate) definition: ScheduleDefinitionArgs,
    /// How many fire times (1 to 100; default 5).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=100))]
    pub(crate) count: Option<u8>,
}

#[derive(Args)]
pub(crate) struct ScheduleShowArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// The schedule's id.
    pub(crate) id: String,
    /// How many next fire times (1 to 100; default 5).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=100))]
    pub(crate) count: Option<u8>,
}

#[derive(Args)]
pub(crate) struct ScheduleIdArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// The schedule's id.
    pub(crate) id: String,
}

/// A schedule's definition, from flags or from `--file`, as `create` and `preview` take it
/// (`commands::schedules` builds the engine's `ScheduleSpec` from it).
#[derive(Args)]
pub(crate) struct ScheduleDefinitionArgs {
    /// Fire on a cron expression: five fields, or six with seconds first ('*/2 * * * * *').
    #[arg(
        long,
        value_name = "EXPR",
        required_unless_present_any = ["every", "file"],
        conflicts_with = "every"
    )]
    pub(crate) cron: Option<String>,
    /// The cron expression's IANA time zone, such as Europe/Paris (default UTC).
    #[arg(long, value_name = "TZ")]
    pub(crate) time_zone: Option<String>,
    /// Fire at the multiples of this interval since the Unix epoch (at least 1s: 30s, 15m, 2h).
    #[arg(long, value_name = "DURATION")]
    pub(crate) every: Option<String>,
    /// The type of the task each fire time enqueues.
    #[arg(long, value_name = "TYPE", alias = "type")]
    pub(crate) task_type: Option<String>,
    /// The runs' orderingId (default schedule:<ID>): runs of one orderingId run one at a time.
    #[arg(long, value_name = "ID")]
    pub(crate) ordering_id: Option<String>,
    /// The runs' data, a JSON object.
    #[arg(long, value_name = "JSON")]
    pub(crate) data: Option<String>,
    /// The runs' priority.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub(crate) priority: i32,
    /// Whether a fire time enqueues a run while the previous run has not finished (default
    /// skip).
    #[arg(long, value_enum, value_name = "POLICY")]
    pub(crate) overlap: Option<OverlapPolicy>,
    /// What a late tick (no node ran it on time) does with the fire times it missed (default
    /// once).
    #[arg(long, value_enum, value_name = "POLICY")]
    pub(crate) catch_up: Option<CatchUpPolicy>,
    /// With --catch-up all: how far back missed fire times still run (default 1h).
    #[arg(long, value_name = "DURATION")]
    pub(crate) catch_up_window: Option<String>,
    /// Each run is due up to this much after its fire time (a fixed offset per fire time),
    /// spreading schedules that share fire times.
    #[arg(long, value_name = "DURATION")]
    pub(crate) jitter: Option<String>,
    /// A tick running this long after its fire time is late: --catch-up decides (default 5s).
    #[arg(long, value_name = "DURATION")]
    pub(crate) misfire_threshold: Option<String>,
    /// The definition as the admin API takes it, a JSON object (id, cron or every, taskType,
    /// ...; durations as text such as "2s"), instead of flags.
    #[arg(long, value_name = "PATH", conflicts_with_all = [
        "cron", "time_zone", "every", "task_type", "ordering_id", "data", "priority", "overlap",
        "catch_up", "catch_up_window", "jitter", "misfire_threshold",
    ])]
    pub(crate) file: Option<PathBuf>,
}

/// `--overlap`: the engine's [`Overlap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OverlapPolicy {
    /// Skip an on-time fire time (recorded as skipped) while the previous run has not finished.
    Skip,
    /// Enqueue it anyway (runs of one orderingId still run one at a time, in order).
    Allow,
}

impl From<OverlapPolicy> for Overlap {
    fn from(policy: OverlapPolicy) -> Overlap {
        match policy {
            OverlapPolicy::Skip => Overlap::Skip,
            OverlapPolicy::Allow => Overlap::Allow,
        }
    }
}

/// `--catch-up`: the engine's [`CatchUp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum CatchUpPolicy {
    /// Run none of them; go on from the next fire time.
    Skip,
    /// Run one, for the latest of them.
    Once,
    /// Run each of them within --catch-up-window.
    All,
}

impl From<CatchUpPolicy> for CatchUp {
    fn from(policy: CatchUpPolicy) -> CatchUp {
        match policy {
            CatchUpPolicy::Skip => CatchUp::Skip,
            CatchUpPolicy::Once => CatchUp::Once,
            CatchUpPolicy::All => CatchUp::All,
        }
    }
}
