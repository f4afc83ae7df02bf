//! The command line's types (clap): subcommands, their flags and the environment variables
//! that stand in for them; `schedules`' in [`schedules`].

mod schedules;

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use scheduler_client::{defaults, DEFAULT_TASK_TYPE};

pub(crate) use schedules::{
    ScheduleCreateArgs, ScheduleDefinitionArgs, ScheduleIdArgs, SchedulePreviewArgs,
    ScheduleShowArgs, SchedulesArgs, SchedulesCommand,
};

#[derive(Parser)]
#[command(
    name = "scheduler",
    version,
    about = "Schedule, inspect, reschedule and cancel tasks of the Kafka/Cassandra task scheduler, check its nodes, run a node.",
    after_help = "Examples:\n  \
        scheduler schedule --ordering-id customer-7 --in 10m --unique reminder-1 --data '{\"kind\":\"email\"}'\n  \
        scheduler schedule --ordering-id customer-7 --in 1m --unique sync --type sync --priority 5 --on-conflict debounce --max-wait 10m\n  \
        scheduler get --ordering-id customer-7 --at 2026-11-22T09:00:00.000Z --unique reminder-1\n  \
        scheduler get --ordering-id customer-7 --unique sync\n  \
        scheduler list --from 2026-11-22T09:00:00Z --to 2026-11-22T10:00:00Z --all\n  \
        scheduler reschedule --ordering-id customer-7 --unique sync --in 30m\n  \
        scheduler cancel --ordering-id customer-7 --at 2026-11-22T09:00:00.000Z --unique reminder-1\n  \
        scheduler cancel --ordering-id customer-7 --unique sync\n  \
        scheduler status --json\n  \
        scheduler dead-letters list --type send-email\n  \
        scheduler dead-letters redrive --type send-email --from 2026-11-22T00:00:00Z\n  \
        scheduler suspend --task-type send-email --reason 'SMTP provider down'\n  \
        scheduler suspensions\n  \
        scheduler resume --task-type send-email\n  \
        scheduler limits set tenant-42 --concurrency 2 --rate 10\n  \
        scheduler limits list\n  \
        scheduler jobs list\n  \
        scheduler jobs show nightly-2026-11-23\n  \
        scheduler schedules create nightly-report --cron '0 30 2 * * *' --time-zone Europe/Paris --task-type report\n  \
        scheduler schedules preview --every 15m --count 3\n  \
        scheduler schedules show nightly-report\n  \
        scheduler node scheduler.toml --exec send-email=./send-email.sh --exec ./handle-task.sh\n\n\
        Exit codes: 0 success, 1 a service failed or was unreachable, 2 bad usage or input, 3 not found."
)]
pub(crate) struct Cli {
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Schedule a task from flags, or every task of a JSON file (wire-format records, one object or an array).
    Schedule(ScheduleArgs),
    /// Show a task: its status, attempt count, data and attempt history. Without --at, the
    /// current task of an identity (--ordering-id and --unique) scheduled with --on-conflict.
    Get(GetArgs),
    /// List incomplete tasks due in a time window, in task-key order.
    List(ListArgs),
    /// Cancel a task: it never runs afterwards (a task already running is not interrupted).
    /// Without --at, the pending task of an identity (--ordering-id and --unique) scheduled
    /// with --on-conflict.
    Cancel(GetArgs),
    /// Move the pending task of an identity (--ordering-id and --unique) scheduled with
    /// --on-conflict to a new time, with its data; nothing happens if none is pending then.
    Reschedule(RescheduleArgs),
    /// Show a node: owned partitions, tasks in memory and Kafka lag per partition, its
    /// handlers' task types and the due tasks waiting for a handler.
    Status(AdminArgs),
    /// Show every partition of the queue and the node that claimed it last (its owner), with
    /// the claim's epoch and time: the whole cluster, from any node.
    Partitions(AdminArgs),
    /// List, redrive or purge dead letters: tasks given up on (invalid, or out of retries).
    DeadLetters(DeadLettersArgs),
    /// Suspend an orderingId, a task type or a group: from the nodes' next read of the
    /// suspensions (every few seconds), their tasks wait, pending, without using an attempt,
    /// until resumed (a task already running finishes). Suspending again replaces the reason.
    Suspend(SuspendArgs),
    /// Lift a suspension: its tasks run again from the nodes' next read of the suspensions
    /// (nothing happens if there is none).
    Resume(ResumeArgs),
    /// List the suspensions in force: kind, target, since when and why.
    Suspensions(AdminArgs),
    /// Override a limit key's limits at run time (calls at once across the cluster, starts a
    /// second, its share of the executor), list the overrides and this node's use of each key,
    /// or remove one: every node applies a change within a few seconds.
    Limits(LimitsArgs),
    /// List jobs or show one: a coordinator task's buckets, dealt round the partitions, with
    /// their progress and the failed buckets' errors.
    Jobs(JobsArgs),
    /// Create, list, show, pause, resume or delete recurring schedules (a cron expression or a
    /// fixed interval, and the task each fire time enqueues), or preview a definition's fire
    /// times.
    Schedules(SchedulesArgs),
    /// Run a scheduler node from a settings file (TOML; SCHEDULER__SECTION__KEY variables override it).
    Node(NodeArgs),
    /// Create or upgrade the keyspace's schema to this release's version (a no-op when current),
    /// with the node's settings file. Run it before the nodes of a new release start.
    Migrate(MigrateArgs),
}

#[derive(Args)]
pub(crate) struct MigrateArgs {
    /// The settings file (its [cassandra] section).
    pub(crate) settings: Option<PathBuf>,
}

#[derive(Args)]
pub(crate) struct AdminArgs {
    /// A node's admin API (a queue's: `http://host:9464/queues/<name>`).
    #[arg(
        long,
        env = "SCHEDULER_ADMIN_URL",
        default_value = "http://127.0.0.1:9464"
    )]
    pub(crate) admin: String,
    /// The admin API's bearer token, if it has one.
    #[arg(long, env = "SCHEDULER_ADMIN_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
}

#[derive(Args)]
pub(crate) struct KafkaArgs {
    /// Kafka bootstrap servers.
    #[arg(
        long,
        env = "SCHEDULER_KAFKA_BOOTSTRAP",
        default_value = defaults::BOOTSTRAP_SERVERS
    )]
    pub(crate) bootstrap: String,
    /// The scheduler's topic.
    #[arg(long, env = "SCHEDULER_TOPIC", default_value = defaults::TOPIC)]
    pub(crate) topic: String,
}

#[derive(Args)]
pub(crate) struct ScheduleArgs {
    #[command(flatten)]
    pub(crate) kafka: KafkaArgs,
    /// The task's ordering queue.
    #[arg(long, required_unless_present = "file")]
    pub(crate) ordering_id: Option<String>,
    /// When it is due (RFC 3339).
    #[arg(long, value_name = "RFC3339", conflicts_with = "delay")]
    pub(crate) at: Option<String>,
    /// When it is due, from now (500ms, 10s, 5m, 2h).
    #[arg(long = "in", value_name = "DURATION")]
    pub(crate) delay: Option<String>,
    /// Tells apart tasks of one orderingId due at the same time.
    #[arg(long, visible_alias = "unique-key", required_unless_present = "file")]
    pub(crate) unique: Option<String>,
    /// The task's data, a JSON object.
    #[arg(long, value_name = "JSON")]
    pub(crate) data: Option<String>,
    /// The task's type: the node's handler (or `--exec TYPE=COMMAND`) for it runs it (1-128
    /// ASCII letters, digits or -_.:/).
    #[arg(long = "type", value_name = "TYPE", default_value = DEFAULT_TASK_TYPE)]
    pub(crate) task_type: String,
    /// When due tasks wait for an executor slot, higher priorities go first (never reorders
    /// the tasks of one orderingId).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub(crate) priority: i32,
    /// What the owning node does when a task of the same identity (--ordering-id and
    /// --unique, whatever its time) is pending. Without it, the task is keyed by its time too.
    #[arg(long, value_enum, value_name = "MODE")]
    pub(crate) on_conflict: Option<ConflictMode>,
    /// With --on-conflict debounce (and only then): how far the first pending time of the
    /// identity may be pushed back (500ms, 10s, 5m, 2h).
    #[arg(long, value_name = "DURATION")]
    pub(crate) max_wait: Option<String>,
    /// The key per-key limits count the task under (a tenant, an upstream API), independent
    /// of --ordering-id (1-256 bytes).
    #[arg(long, value_name = "KEY")]
    pub(crate) limit_key: Option<String>,
    /// Schedule the records of this file instead of one task from flags.
    #[arg(long, conflicts_with_all = [
        "ordering_id", "at", "delay", "unique", "data", "task_type", "priority", "on_conflict",
        "max_wait", "limit_key",
    ])]
    pub(crate) file: Option<PathBuf>,
    /// How far in the past a task may be (the nodes' grace window).
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub(crate) grace: String,
    /// How long to wait for the broker to acknowledge each task before giving up.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub(crate) timeout: String,
}

/// `--on-conflict`: the client's [`scheduler_client::OnConflict`] without debounce's wait
/// (`--max-wait`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ConflictMode {
    /// The new task takes the pending one's place, with its own time and data.
    Replace,
    /// The new data, at the pending task's time.
    #[value(alias = "keepTime")]
    KeepTime,
    /// The new time and data, but never later than --max-wait after the first pending time.
    Debounce,
    /// Ignored when a task of the identity is pending or recently finished.
    #[value(alias = "ifAbsent")]
    IfAbsent,
}

/// A task named by its key, or (without `--at`) by its identity.
#[derive(Args)]
pub(crate) struct GetArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// The task's orderingId.
    #[arg(long)]
    pub(crate) ordering_id: String,
    /// The task's scheduled time (RFC 3339, as scheduled). Without it, the task is named by
    /// its identity (--ordering-id and --unique): the one scheduled with --on-conflict.
    #[arg(long, value_name = "RFC3339")]
    pub(crate) at: Option<String>,
    /// The task's uniquenessKey.
    #[arg(long, visible_alias = "unique-key")]
    pub(crate) unique: String,
}

#[derive(Args)]
#[command(group(ArgGroup::new("new_time").required(true).args(["at", "delay"])))]
pub(crate) struct RescheduleArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// The identity's orderingId.
    #[arg(long)]
    pub(crate) ordering_id: String,
    /// The new time (RFC 3339).
    #[arg(long, value_name = "RFC3339")]
    pub(crate) at: Option<String>,
    /// The new time, from now (500ms, 10s, 5m, 2h).
    #[arg(long = "in", value_name = "DURATION")]
    pub(crate) delay: Option<String>,
    /// The identity's uniquenessKey.
    #[arg(long, visible_alias = "unique-key")]
    pub(crate) unique: String,
}

#[derive(Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// Start of the window (RFC 3339, inclusive).
    #[arg(long, value_name = "RFC3339")]
    pub(crate) from: String,
    /// End of the window (RFC 3339, exclusive).
    #[arg(long, value_name = "RFC3339")]
    pub(crate) to: String,
    /// Tasks per page (1..1000).
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: usize,
    /// Follow the pages to the end of the window.
    #[arg(long)]
    pub(crate) all: bool,
    /// Start after this task of --from's time (with --from-uniqueness-key): the next page, as
    /// the last line of a page says.
    #[arg(long, requires = "from_uniqueness_key")]
    pub(crate) from_ordering_id: Option<String>,
    /// See --from-ordering-id.
    #[arg(long, requires = "from_ordering_id")]
    pub(crate) from_uniqueness_key: Option<String>,
    /// Only tasks of this type.
    #[arg(long = "type", value_name = "TYPE")]
    pub(crate) task_type: Option<String>,
    /// Only this orderingId's tasks (only its partition is read).
    #[arg(long)]
    pub(crate) ordering_id: Option<String>,
    /// Only tasks in this state, as the node sees it.
    #[arg(long, value_enum)]
    pub(crate) state: Option<StateArg>,
    /// List the engine's own tasks too (a recurring schedule's ticks).
    #[arg(long)]
    pub(crate) include_internal: bool,
}

/// A pending task's state, for `list --state`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum StateArg {
    /// Not due yet.
    Waiting,
    /// Due, not run yet.
    Overdue,
    /// Waiting for its next attempt.
    Retrying,
    /// Held by a suspension.
    Suspended,
    /// Held at its limit key's limit.
    Limited,
}

#[derive(Args)]
pub(crate) struct DeadLettersArgs {
    #[command(subcommand)]
    pub(crate) command: DeadLettersCommand,
}

#[derive(Subcommand)]
pub(crate) enum DeadLettersCommand {
    /// List dead letters in task-key order, a page at a time.
    ///
    /// Dead letters already redriven are listed only with --include-redriven. When there are
    /// more, a line on stderr gives the flags of the next page.
    List(DeadLettersListArgs),
    /// Enqueue dead letters again, as new tasks due now.
    ///
    /// Each new task keeps the letter's type, data and priority and gets a fresh retry budget;
    /// the letter stays, marked redriven (a filter or --all skips letters already redriven).
    /// Name the dead letters one way: a task (--ordering-id, --scheduled-time and
    /// --uniqueness-key), a filter (--type, --from, --to, any of them) or --all.
    Redrive(DeadLetterSelectionArgs),
    /// Delete dead letters, redriven or not.
    ///
    /// Name them one way: a task (--ordering-id, --scheduled-time and --uniqueness-key), a
    /// filter (--type, --from, --to, any of them) or --all.
    Purge(DeadLetterSelectionArgs),
}

#[derive(Args)]
pub(crate) struct DeadLettersListArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// Only dead letters of this task type.
    #[arg(long = "type", value_name = "TYPE")]
    pub(crate) task_type: Option<String>,
    /// Only tasks due at or after this time (RFC 3339).
    #[arg(long, value_name = "RFC3339")]
    pub(crate) from: Option<String>,
    /// Only tasks due before this time (RFC 3339).
    #[arg(long, value_name = "RFC3339")]
    pub(crate) to: Option<String>,
    /// Dead letters per page (1..1000).
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: usize,
    /// List dead letters already redriven too.
    #[arg(long)]
    pub(crate) include_redriven: bool,
    /// Follow the pages to the end.
    #[arg(long)]
    pub(crate) all_pages: bool,
    /// Start after this task (with --after-scheduled-time and --after-uniqueness-key): where
    /// the previous page ended, as its hint says.
    #[arg(long, requires_all = ["after_scheduled_time", "after_uniqueness_key"])]
    pub(crate) after_ordering_id: Option<String>,
    /// See --after-ordering-id.
    #[arg(
        long,
        value_name = "RFC3339",
        requires_all = ["after_ordering_id", "after_uniqueness_key"]
    )]
    pub(crate) after_scheduled_time: Option<String>,
    /// See --after-ordering-id.
    #[arg(long, requires_all = ["after_ordering_id", "after_scheduled_time"])]
    pub(crate) after_uniqueness_key: Option<String>,
}

/// Which dead letters `redrive` or `purge` acts on; `commands::dead_letters` checks that they
/// are named one way only.
#[derive(Args)]
pub(crate) struct DeadLetterSelectionArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// The task's orderingId (with --scheduled-time and --uniqueness-key).
    #[arg(long)]
    pub(crate) ordering_id: Option<String>,
    /// The task's scheduled time (RFC 3339, as scheduled).
    #[arg(long, value_name = "RFC3339")]
    pub(crate) scheduled_time: Option<String>,
    /// The task's uniquenessKey.
    #[arg(long)]
    pub(crate) uniqueness_key: Option<String>,
    /// Dead letters of this task type.
    #[arg(long = "type", value_name = "TYPE")]
    pub(crate) task_type: Option<String>,
    /// Dead letters of tasks due at or after this time (RFC 3339).
    #[arg(long, value_name = "RFC3339")]
    pub(crate) from: Option<String>,
    /// Dead letters of tasks due before this time (RFC 3339).
    #[arg(long, value_name = "RFC3339")]
    pub(crate) to: Option<String>,
    /// Every dead letter.
    #[arg(long)]
    pub(crate) all: bool,
}

/// What `suspend` and `resume` act on: exactly one of an orderingId, a task type or a group.
#[derive(Args)]
#[command(group(
    ArgGroup::new("target")
        .required(true)
        .args(["ordering_id", "task_type", "group"])
))]
pub(crate) struct SuspensionTargetArgs {
    /// Every task of this orderingId.
    #[arg(long, value_name = "ID")]
    pub(crate) ordering_id: Option<String>,
    /// Every task of this type.
    #[arg(long, value_name = "TYPE", alias = "type")]
    pub(crate) task_type: Option<String>,
    /// Every member of this group: the type that joins it and its id.
    #[arg(long, value_name = "TYPE/ID")]
    pub(crate) group: Option<String>,
}

#[derive(Args)]
pub(crate) struct SuspendArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    #[command(flatten)]
    pub(crate) target: SuspensionTargetArgs,
    /// Why, shown by `scheduler suspensions`.
    #[arg(long, value_name = "TEXT")]
    pub(crate) reason: Option<String>,
}

#[derive(Args)]
pub(crate) struct ResumeArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    #[command(flatten)]
    pub(crate) target: SuspensionTargetArgs,
}

#[derive(Args)]
pub(crate) struct LimitsArgs {
    #[command(subcommand)]
    pub(crate) command: LimitsCommand,
}

#[derive(Subcommand)]
pub(crate) enum LimitsCommand {
    /// List the overrides, and this node's use of each limited key: permits held (of the
    /// key's across the cluster), calls running, tasks held at the limit.
    List(AdminArgs),
    /// Set a key's override (replacing its earlier one): each value given replaces the
    /// settings' for the key.
    Set(LimitSetArgs),
    /// Remove a key's override: the settings' limits apply to it again.
    Remove(LimitKeyArgs),
}

/// A limit key, and the task type whose override it is (none: the queue's).
#[derive(Args)]
pub(crate) struct LimitKeyArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// The limit key (a task's limitKey).
    pub(crate) limit_key: String,
    /// Only this task type's tasks of the key (they then count apart from the queue's).
    #[arg(long, value_name = "TYPE", alias = "type")]
    pub(crate) task_type: Option<String>,
}

#[derive(Args)]
#[command(group(
    ArgGroup::new("values")
        .required(true)
        .multiple(true)
        .args(["concurrency", "rate", "burst", "weight"])
))]
pub(crate) struct LimitSetArgs {
    #[command(flatten)]
    pub(crate) key: LimitKeyArgs,
    /// Calls at once across the cluster.
    #[arg(long, value_name = "N")]
    pub(crate) concurrency: Option<u32>,
    /// Starts a second.
    #[arg(long, value_name = "PER_SECOND")]
    pub(crate) rate: Option<f64>,
    /// Starts at once after a quiet spell (default: a second's worth of the rate).
    #[arg(long, value_name = "N")]
    pub(crate) burst: Option<u32>,
    /// Its share of the executor's slots when tasks wait for them (a key without one: 1).
    #[arg(long, value_name = "N")]
    pub(crate) weight: Option<u32>,
}

#[derive(Args)]
pub(crate) struct JobsArgs {
    #[command(subcommand)]
    pub(crate) command: JobsCommand,
}

#[derive(Subcommand)]
pub(crate) enum JobsCommand {
    /// List the queue's jobs, newest first: state, buckets finished of all, failed buckets,
    /// items processed, when started.
    List(AdminArgs),
    /// Show a job: its state, coordinator, group (what `suspend --group` takes), buckets by
    /// outcome, items processed, and the failed buckets with their errors.
    Show(JobShowArgs),
}

#[derive(Args)]
pub(crate) struct JobShowArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// The job's id, as its coordinator named it.
    pub(crate) id: String,
}

#[derive(Args)]
pub(crate) struct NodeArgs {
    /// The settings file.
    pub(crate) settings: Option<PathBuf>,
    /// Run tasks through a shell command, with the task's wire-format JSON on stdin and
    /// SCHEDULER_TASK_TYPE, SCHEDULER_PRIORITY, SCHEDULER_ORDERING_ID, SCHEDULER_SCHEDULED_TIME
    /// and SCHEDULER_UNIQUENESS_KEY in its environment. Exit 0: done; exit 65 (EX_DATAERR):
    /// invalid, a dead letter at once; anything else: retry later.
    ///
    /// Repeatable. TYPE=COMMAND runs the tasks of TYPE (1-128 ASCII letters, digits or -_.:/,
    /// before the first `=` and any space); a COMMAND without a type runs every other type
    /// (at most one). With typed commands only, tasks of other types wait for a node that
    /// handles them. Write `env A=1 ./x.sh`, not `A=1 ./x.sh`, for a command that starts with
    /// a variable. Without --exec the node prints each task.
    #[arg(long, value_name = "[TYPE=]COMMAND")]
    pub(crate) exec: Vec<String>,
}
