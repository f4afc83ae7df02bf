//! The `scheduler` command. `schedule` writes to the topic (Kafka); `get`, `list`, `cancel` and
//! `status` talk to a node's admin HTTP API; `node` runs a node from a settings file.
//!
//! Exit codes: 0 success, 1 a service failed or was unreachable, 2 bad usage or input,
//! 3 not found. `--json` prints machine-readable output.

#![warn(missing_docs)]

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use clap::{Args, Parser, Subcommand};
use scheduler_client::{wire, Scheduler, SchedulerConfig, Task, TaskData};
use scheduler_core::admin_api::{
    CancelResponse, ErrorResponse, ListQuery, ListResponse, StatusResponse, TaskKeyBody, TaskQuery,
    TaskResponse,
};
use scheduler_core::settings::duration_text;
use scheduler_core::{SchedulerNode, Settings, TaskContext, TaskError, TaskExecutor};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Sets up logging to stderr: `RUST_LOG` filters (default: warnings, and the node's info), and
/// `SCHEDULER_LOG_FORMAT=json` writes JSON lines instead of text. Task data is never logged above
/// debug level.
pub fn init_logging() {
    // The drivers' own connection warnings repeat what the engine reports with more context
    // (and would bury a failed start's one error line); RUST_LOG brings them back.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("warn,scheduler_core=info,scylla=off,rdkafka=error")
    });
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    if std::env::var("SCHEDULER_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Exit code: a service failed or could not be reached.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code: bad usage or input.
pub const EXIT_USAGE: i32 = 2;
/// Exit code: the task does not exist.
pub const EXIT_NOT_FOUND: i32 = 3;

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
struct Cli {
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
}

#[derive(Args)]
struct AdminArgs {
    /// A node's admin API.
    #[arg(
        long,
        env = "SCHEDULER_ADMIN_URL",
        default_value = "http://127.0.0.1:9464"
    )]
    admin: String,
    /// The admin API's bearer token, if it has one.
    #[arg(long, env = "SCHEDULER_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

#[derive(Args)]
struct KafkaArgs {
    /// Kafka bootstrap servers.
    #[arg(
        long,
        env = "SCHEDULER_KAFKA_BOOTSTRAP",
        default_value = "127.0.0.1:9092"
    )]
    bootstrap: String,
    /// The scheduler's topic.
    #[arg(long, env = "SCHEDULER_TOPIC", default_value = "scheduled-tasks")]
    topic: String,
}

#[derive(Args)]
struct ScheduleArgs {
    #[command(flatten)]
    kafka: KafkaArgs,
    /// The task's ordering queue.
    #[arg(long, required_unless_present = "file")]
    ordering_id: Option<String>,
    /// When it is due (RFC 3339).
    #[arg(long, value_name = "RFC3339", conflicts_with = "delay")]
    at: Option<String>,
    /// When it is due, from now (500ms, 10s, 5m, 2h).
    #[arg(long = "in", value_name = "DURATION")]
    delay: Option<String>,
    /// Tells apart tasks of one orderingId due at the same time.
    #[arg(long, required_unless_present = "file")]
    unique: Option<String>,
    /// The task's data, a JSON object.
    #[arg(long, value_name = "JSON")]
    data: Option<String>,
    /// Schedule the records of this file instead of one task from flags.
    #[arg(long, conflicts_with_all = ["ordering_id", "at", "delay", "unique", "data"])]
    file: Option<PathBuf>,
    /// How far in the past a task may be (the nodes' grace window).
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    grace: String,
}

#[derive(Args)]
struct GetArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// The task's orderingId.
    #[arg(long)]
    ordering_id: String,
    /// The task's scheduled time (RFC 3339, as scheduled).
    #[arg(long, value_name = "RFC3339")]
    at: String,
    /// The task's uniquenessKey.
    #[arg(long)]
    unique: String,
}

#[derive(Args)]
struct ListArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// Start of the window (RFC 3339, inclusive).
    #[arg(long, value_name = "RFC3339")]
    from: String,
    /// End of the window (RFC 3339, exclusive).
    #[arg(long, value_name = "RFC3339")]
    to: String,
    /// Tasks per page (1..1000).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Follow the pages to the end of the window.
    #[arg(long)]
    all: bool,
}

#[derive(Args)]
struct NodeArgs {
    /// The settings file.
    settings: Option<PathBuf>,
    /// Run each task through this shell command, with the task's wire-format JSON on stdin.
    /// Exit 0: done; exit 65 (EX_DATAERR): give up; anything else: retry later.
    /// Without it the node prints each task.
    #[arg(long, value_name = "COMMAND")]
    exec: Option<String>,
}

/// A failure with its exit code.
struct Failure {
    code: i32,
    message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }

    fn service(message: impl Into<String>) -> Self {
        Failure {
            code: EXIT_FAILURE,
            message: message.into(),
        }
    }
}

type Outcome = Result<(), Failure>;

/// Runs the command line `args` (the first is the program name), writing output to `out` and
/// errors to stderr; returns the exit code.
pub fn run<I, T>(args: I, out: &mut dyn Write) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = write!(out, "{}", e.render());
            return match e.exit_code() {
                0 => 0,
                _ => EXIT_USAGE,
            };
        }
    };
    let json = cli.json;
    let result = match cli.command {
        Command::Schedule(args) => schedule(args, json, out),
        Command::Get(args) => get(args, json, out),
        Command::List(args) => list(args, json, out),
        Command::Cancel(args) => cancel(args, json, out),
        Command::Status(args) => status(args, json, out),
        Command::Node(args) => node(args),
    };
    match result {
        Ok(()) => 0,
        Err(failure) => {
            eprintln!("scheduler: {}", failure.message);
            failure.code
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::service(format!("cannot start a runtime: {e}")))
}

fn parse_time(text: &str, what: &str) -> Result<DateTime<Utc>, Failure> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            Failure::usage(format!(
                "{what} {text:?} is not an RFC 3339 time such as 2026-11-22T09:00:00.000Z"
            ))
        })
}

fn schedule(args: ScheduleArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let grace = duration_text::parse(&args.grace).map_err(Failure::usage)?;
    let tasks = match &args.file {
        Some(path) => tasks_from_file(path)?,
        None => vec![task_from_flags(&args)?],
    };
    let mut config = SchedulerConfig::new(args.kafka.bootstrap.clone(), args.kafka.topic.clone());
    config.scheduling_grace_window = grace;
    let scheduler = Scheduler::new(config).map_err(|e| Failure::service(e.to_string()))?;
    let runtime = runtime()?;
    let mut scheduled = Vec::new();
    for task in tasks {
        runtime
            .block_on(scheduler.schedule_task(task.clone()))
            .map_err(|e| {
                let message = format!("{}: {e}", task.key());
                if e.is_rejection() {
                    Failure::usage(message)
                } else {
                    Failure::service(message)
                }
            })?;
        scheduled.push(task.key());
    }
    if json {
        let keys: Vec<Value> = scheduled
            .iter()
            .map(|k| {
                serde_json::json!({
                    "orderingId": k.ordering_id,
                    "scheduledTime": wire::format_time(k.scheduled_time),
                    "uniquenessKey": k.uniqueness_key,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::json!({ "scheduled": keys })).map_err(io_failure)?;
    } else {
        for key in &scheduled {
            writeln!(out, "scheduled {key}").map_err(io_failure)?;
        }
    }
    Ok(())
}

fn task_from_flags(args: &ScheduleArgs) -> Result<Task, Failure> {
    let ordering_id = args.ordering_id.clone().unwrap_or_default();
    let unique = args.unique.clone().unwrap_or_default();
    let at = match (&args.at, &args.delay) {
        (Some(at), _) => parse_time(at, "--at")?,
        (None, Some(delay)) => {
            let delay = duration_text::parse(delay).map_err(Failure::usage)?;
            Utc::now() + TimeDelta::from_std(delay).unwrap_or_default()
        }
        (None, None) => Utc::now(),
    };
    let data: TaskData = match &args.data {
        Some(text) => serde_json::from_str(text)
            .map_err(|e| Failure::usage(format!("--data must be a JSON object: {e}")))?,
        None => TaskData::new(),
    };
    Ok(Task::new(ordering_id, at, unique, data))
}

fn tasks_from_file(path: &PathBuf) -> Result<Vec<Task>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::usage(format!("{} is not JSON: {e}", path.display())))?;
    let records = match value {
        Value::Array(items) => items,
        one => vec![one],
    };
    records
        .into_iter()
        .enumerate()
        .map(|(i, record)| {
            let bytes = record.to_string().into_bytes();
            wire::decode(Some(&bytes), usize::MAX)
                .map_err(|e| Failure::usage(format!("{} record {i}: {e}", path.display())))
        })
        .collect()
}

/// Why a call of the admin API failed.
#[derive(Debug, thiserror::Error)]
enum AdminError {
    /// No answer: the node is down, or the address is wrong.
    #[error("admin API at {admin} unreachable: {source}")]
    Unreachable {
        /// The admin API's address.
        admin: String,
        /// What the HTTP client saw.
        #[source]
        source: ureq::Error,
    },
    /// The answer broke off.
    #[error("reading the admin API's answer: {0}")]
    Read(#[source] ureq::Error),
    /// 404: no such task (or endpoint); the API's error message.
    #[error("{0}")]
    NotFound(String),
    /// Another 4xx: the request is at fault.
    #[error("{status}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The API's error message.
        message: String,
    },
    /// Any other status: the node or a service behind it failed.
    #[error("{status}: {message}")]
    Failed {
        /// The HTTP status.
        status: u16,
        /// The API's error message.
        message: String,
    },
    /// A success whose body is not the answer this command knows (a node of another version).
    #[error("the admin API's answer is not what this command expects: {0}")]
    Unexpected(#[source] serde_json::Error),
    /// The query could not be encoded.
    #[error("cannot encode the query: {0}")]
    Query(#[source] serde_urlencoded::ser::Error),
}

impl From<AdminError> for Failure {
    fn from(error: AdminError) -> Self {
        let code = match &error {
            AdminError::NotFound(_) => EXIT_NOT_FOUND,
            AdminError::Refused { .. } => EXIT_USAGE,
            AdminError::Unreachable { .. }
            | AdminError::Read(_)
            | AdminError::Failed { .. }
            | AdminError::Unexpected(_)
            | AdminError::Query(_) => EXIT_FAILURE,
        };
        Failure {
            code,
            message: error.to_string(),
        }
    }
}

/// One node's admin API, with the request and answer types the node itself uses.
struct AdminClient<'a> {
    args: &'a AdminArgs,
    agent: ureq::Agent,
}

impl<'a> AdminClient<'a> {
    fn new(args: &'a AdminArgs) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            // Error statuses carry the API's message, read by `answer`.
            .http_status_as_error(false)
            .build()
            .into();
        AdminClient { args, agent }
    }

    fn status(&self) -> Result<StatusResponse, AdminError> {
        self.get("/api/v1/status", &())
    }

    fn task(&self, query: &TaskQuery) -> Result<TaskResponse, AdminError> {
        self.get("/api/v1/task", query)
    }

    fn tasks(&self, query: &ListQuery) -> Result<ListResponse, AdminError> {
        self.get("/api/v1/tasks", query)
    }

    fn cancel(&self, key: &TaskKeyBody) -> Result<CancelResponse, AdminError> {
        let mut request = self.agent.post(self.url("/api/v1/task/cancel"));
        if let Some(auth) = self.authorization() {
            request = request.header("Authorization", auth);
        }
        self.answer(request.send_json(key))
    }

    fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &impl Serialize,
    ) -> Result<T, AdminError> {
        let query = serde_urlencoded::to_string(query).map_err(AdminError::Query)?;
        let mut url = self.url(path);
        if !query.is_empty() {
            url = format!("{url}?{query}");
        }
        let mut request = self.agent.get(url);
        if let Some(auth) = self.authorization() {
            request = request.header("Authorization", auth);
        }
        self.answer(request.call())
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.args.admin.trim_end_matches('/'))
    }

    fn authorization(&self) -> Option<String> {
        self.args.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    /// The answer's body as `T`, or the API's error message with what its status means.
    fn answer<T: DeserializeOwned>(
        &self,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T, AdminError> {
        let mut response = response.map_err(|source| AdminError::Unreachable {
            admin: self.args.admin.clone(),
            source,
        })?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(AdminError::Read)?;
        if (200..300).contains(&status) {
            return serde_json::from_str(&text).map_err(AdminError::Unexpected);
        }
        // An error answer that is not the API's JSON (a proxy's page, say) has no message.
        let message = serde_json::from_str::<ErrorResponse>(&text)
            .map(|e| e.error)
            .unwrap_or_default();
        Err(match status {
            404 => AdminError::NotFound(message),
            400..=499 => AdminError::Refused { status, message },
            _ => AdminError::Failed { status, message },
        })
    }
}

/// The key of `args` as the API takes it.
fn key_body(args: &GetArgs) -> Result<TaskKeyBody, Failure> {
    let at = parse_time(&args.at, "--at")?;
    Ok(TaskKeyBody {
        ordering_id: Some(args.ordering_id.clone()),
        scheduled_time: Some(wire::format_time(at)),
        uniqueness_key: Some(args.unique.clone()),
    })
}

/// An optional value as a table prints it: `-` when absent.
fn or_dash<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Prints `answer` as one line of JSON with its keys sorted, as this command always printed
/// the API's answers (through a `serde_json::Value`, whose keys are sorted).
fn print_json(out: &mut dyn Write, answer: &impl Serialize) -> Outcome {
    let value = serde_json::to_value(answer)
        .map_err(|e| Failure::service(format!("cannot print the answer as JSON: {e}")))?;
    writeln!(out, "{value}").map_err(io_failure)
}

fn io_failure(e: std::io::Error) -> Failure {
    Failure::service(format!("cannot write output: {e}"))
}

fn get(args: GetArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let key = key_body(&args)?;
    let query = TaskQuery {
        ordering_id: key.ordering_id,
        scheduled_time: key.scheduled_time,
        uniqueness_key: key.uniqueness_key,
        history: None,
    };
    let task = AdminClient::new(&args.admin).task(&query)?;
    if json {
        return print_json(out, &task);
    }
    let rows = [
        (
            "task",
            format!(
                "{}/{}/{}",
                task.ordering_id, task.scheduled_time, task.uniqueness_key
            ),
        ),
        ("partition", task.partition.to_string()),
        ("status", task.status),
        ("attempts", task.attempts.to_string()),
        ("last error", or_dash(task.last_error)),
        ("updated at", or_dash(task.updated_at)),
        ("data", or_dash(task.task_data)),
    ];
    for (name, value) in rows {
        writeln!(out, "{name:<11} {value}").map_err(io_failure)?;
    }
    if !task.history.is_empty() {
        writeln!(
            out,
            "\n{:<8} {:<25} {:<25} {:<10} ERROR",
            "ATTEMPT", "STARTED", "FINISHED", "OUTCOME"
        )
        .map_err(io_failure)?;
        for a in task.history {
            writeln!(
                out,
                "{:<8} {:<25} {:<25} {:<10} {}",
                a.attempt,
                a.started_at,
                a.finished_at,
                a.outcome,
                or_dash(a.error)
            )
            .map_err(io_failure)?;
        }
    }
    Ok(())
}

fn list(args: ListArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let admin = AdminClient::new(&args.admin);
    let mut query = ListQuery {
        from: Some(wire::format_time(parse_time(&args.from, "--from")?)),
        to: Some(wire::format_time(parse_time(&args.to, "--to")?)),
        limit: Some(args.limit),
        from_ordering_id: None,
        from_uniqueness_key: None,
    };
    let mut all = Vec::new();
    let next = loop {
        let page = admin.tasks(&query)?;
        all.extend(page.tasks);
        match page.next {
            Some(next) if args.all => {
                query.from = Some(next.from);
                query.from_ordering_id = Some(next.from_ordering_id);
                query.from_uniqueness_key = Some(next.from_uniqueness_key);
            }
            last => break last,
        }
    };
    let page = ListResponse { tasks: all, next };
    if json {
        return print_json(out, &page);
    }
    writeln!(
        out,
        "{:<25} {:<24} {:<24} {:>9}  DATA",
        "SCHEDULED", "ORDERING ID", "UNIQUENESS KEY", "PARTITION"
    )
    .map_err(io_failure)?;
    for t in &page.tasks {
        writeln!(
            out,
            "{:<25} {:<24} {:<24} {:>9}  {}",
            t.scheduled_time, t.ordering_id, t.uniqueness_key, t.partition, t.task_data
        )
        .map_err(io_failure)?;
    }
    if let Some(next) = &page.next {
        writeln!(
            out,
            "more: --from {} and fromOrderingId={} fromUniquenessKey={} (or --all)",
            next.from, next.from_ordering_id, next.from_uniqueness_key
        )
        .map_err(io_failure)?;
    }
    Ok(())
}

fn cancel(args: GetArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let answer = AdminClient::new(&args.admin).cancel(&key_body(&args)?)?;
    if json {
        return print_json(out, &answer);
    }
    writeln!(out, "{}: {}\n{}", answer.result, answer.task, answer.note).map_err(io_failure)
}

fn status(args: AdminArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let status = AdminClient::new(&args).status()?;
    if json {
        return print_json(out, &status);
    }
    writeln!(
        out,
        "node {} (version {}), topic {} with {} partitions",
        status.node_id, status.version, status.topic, status.partition_count
    )
    .map_err(io_failure)?;
    writeln!(
        out,
        "{:>9} {:>10} {:>10} {:>10}",
        "PARTITION", "SCHEDULED", "EXECUTING", "KAFKA LAG"
    )
    .map_err(io_failure)?;
    for p in &status.partitions {
        writeln!(
            out,
            "{:>9} {:>10} {:>10} {:>10}",
            p.partition,
            p.tasks_scheduled,
            p.tasks_executing,
            or_dash(p.kafka_lag)
        )
        .map_err(io_failure)?;
    }
    Ok(())
}

/// The `node` command's executor: prints each task, or runs a shell command per task.
struct CommandExecutor {
    command: Option<String>,
}

/// `EX_DATAERR`: the command says the task is invalid; it is not retried.
const EXIT_GIVE_UP: i32 = 65;

impl TaskExecutor for CommandExecutor {
    async fn execute(&self, task: &Task, _ctx: &TaskContext) -> Result<(), TaskError> {
        let Some(command) = &self.command else {
            println!(
                "ran {} data {}",
                task.key(),
                Value::Object(task.task_data.clone())
            );
            return Ok(());
        };
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::piped())
            .env("SCHEDULER_ORDERING_ID", &task.ordering_id)
            .env(
                "SCHEDULER_SCHEDULED_TIME",
                wire::format_time(task.scheduled_time),
            )
            .env("SCHEDULER_UNIQUENESS_KEY", &task.uniqueness_key)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| TaskError::retry(format!("cannot start {command:?}: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            use tokio::io::AsyncWriteExt;
            match stdin.write_all(&wire::encode(task)).await {
                // A command that does not read its input closes the pipe: its exit status
                // decides, not the write.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                Err(e) => {
                    return Err(TaskError::retry(format!(
                        "cannot write the task to {command:?}: {e}"
                    )))
                }
                Ok(()) => {}
            }
        }
        let status = child
            .wait()
            .await
            .map_err(|e| TaskError::retry(format!("{command:?} failed: {e}")))?;
        match status.code() {
            Some(0) => Ok(()),
            Some(EXIT_GIVE_UP) => Err(TaskError::give_up(format!(
                "{command:?} exited with {EXIT_GIVE_UP}"
            ))),
            other => Err(TaskError::retry(format!(
                "{command:?} exited with {other:?}"
            ))),
        }
    }
}

fn node(args: NodeArgs) -> Outcome {
    let settings =
        Settings::load(args.settings.as_deref()).map_err(|e| Failure::usage(e.to_string()))?;
    let runtime = runtime()?;
    runtime.block_on(async move {
        let node = SchedulerNode::start(settings, CommandExecutor { command: args.exec })
            .await
            .map_err(|e| Failure::service(format!("cannot start the node: {e}")))?;
        if let Some(addr) = node.admin_address() {
            eprintln!("scheduler: node running; admin API at http://{addr}; Ctrl-C to stop");
        }
        tokio::signal::ctrl_c()
            .await
            .map_err(|e| Failure::service(format!("cannot wait for Ctrl-C: {e}")))?;
        eprintln!("scheduler: stopping (running tasks finish, offsets are committed)");
        node.shutdown()
            .await
            .map_err(|e| Failure::service(e.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn context() -> TaskContext {
        TaskContext::detached(0, 1)
    }

    fn big_task() -> Task {
        // Far more than a pipe buffer holds, so a command that does not read its input
        // closes the pipe before the write ends.
        let mut data = scheduler_core::TaskData::new();
        data.insert("blob".into(), Value::String("x".repeat(1 << 20)));
        Task::new("o", Utc::now(), "u", data)
    }

    #[tokio::test]
    async fn a_command_that_ignores_its_input_and_exits_0_succeeds() {
        let executor = CommandExecutor {
            command: Some("exit 0".into()),
        };
        assert_eq!(executor.execute(&big_task(), &context()).await, Ok(()));
    }

    #[tokio::test]
    async fn a_command_that_ignores_its_input_and_fails_is_retried() {
        let executor = CommandExecutor {
            command: Some("exit 3".into()),
        };
        let result = executor.execute(&big_task(), &context()).await;
        assert!(matches!(result, Err(TaskError::Retry(r)) if r.contains("exited with Some(3)")));
    }
}
