//! The command line's types (clap): subcommands, their flags and the environment variables
//! that stand in for them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use scheduler_client::defaults;

#[derive(Parser)]
#[command(
    name = "scheduler",
    version,
    about = "Schedule, inspect and cancel tasks of the Kafka/Cassandra task scheduler, check its nodes, run a node.",
    after_help = "Examples:\n  \
        scheduler schedule --ordering-id customer-7 --in 10m --unique reminder-1 --data '{\"kind\":\"email\"}'\n  \
        scheduler get --ordering-id customer-7 --at 2026-11-22T09:00:00.000Z --unique reminder-1\n  \
        scheduler list --from 2026-11-22T09:00:00Z --to 2026-11-22T10:00:00Z --all\n  \
        scheduler cancel --ordering-id customer-7 --at 2026-11-22T09:00:00.000Z --unique reminder-1\n  \
        scheduler status --json\n  \
        scheduler node scheduler.toml --exec ./handle-task.sh\n\n\
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
    /// Show a task: its status, attempt count, data and attempt history.
    Get(GetArgs),
    /// List incomplete tasks due in a time window, in task-key order.
    List(ListArgs),
    /// Cancel a task: it never runs afterwards (a task already running is not interrupted).
    Cancel(GetArgs),
    /// Show a node: owned partitions, tasks in memory and Kafka lag per partition.
    Status(AdminArgs),
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
    /// A node's admin API.
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
    #[arg(long, required_unless_present = "file")]
    pub(crate) unique: Option<String>,
    /// The task's data, a JSON object.
    #[arg(long, value_name = "JSON")]
    pub(crate) data: Option<String>,
    /// Schedule the records of this file instead of one task from flags.
    #[arg(long, conflicts_with_all = ["ordering_id", "at", "delay", "unique", "data"])]
    pub(crate) file: Option<PathBuf>,
    /// How far in the past a task may be (the nodes' grace window).
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub(crate) grace: String,
}

#[derive(Args)]
pub(crate) struct GetArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// The task's orderingId.
    #[arg(long)]
    pub(crate) ordering_id: String,
    /// The task's scheduled time (RFC 3339, as scheduled).
    #[arg(long, value_name = "RFC3339")]
    pub(crate) at: String,
    /// The task's uniquenessKey.
    #[arg(long)]
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
}

#[derive(Args)]
pub(crate) struct NodeArgs {
    /// The settings file.
    pub(crate) settings: Option<PathBuf>,
    /// Run each task through this shell command, with the task's wire-format JSON on stdin.
    /// Exit 0: done; exit 65 (EX_DATAERR): give up; anything else: retry later.
    /// Without it the node prints each task.
    #[arg(long, value_name = "COMMAND")]
    pub(crate) exec: Option<String>,
}
