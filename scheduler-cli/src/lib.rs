//! The `scheduler` command. `schedule` writes to the topic (Kafka); `get`, `list`, `cancel`,
//! `reschedule`, `status`, `dead-letters`, `suspend`, `resume`, `suspensions`, `jobs` and
//! `schedules` talk to a node's admin HTTP API; `node` runs a node from a settings file, with a
//! shell command per task type.
//!
//! Exit codes: 0 success, 1 a service failed or was unreachable, 2 bad usage or input,
//! 3 not found (a task, a dead letter, a job or a schedule). `--json` prints machine-readable
//! output.
//!
//! Layout: `args` holds the command line's types, `commands` one module per command group,
//! `admin_client` the calls of the admin API, `output` exit codes and printing.

#![warn(missing_docs)]

mod admin_client;
mod args;
mod commands;
mod output;

use std::io::Write;

use clap::Parser;

use args::{Cli, Command};
pub use output::{EXIT_FAILURE, EXIT_NOT_FOUND, EXIT_USAGE};

/// Sets up logging to stderr: `RUST_LOG` filters (default: warnings, and the node's info), and
/// `SCHEDULER_LOG_FORMAT=json` writes JSON lines instead of text (coloured only on a terminal). Task data is never logged above
/// debug level.
pub fn init_logging() {
    // The drivers' own connection warnings repeat what the engine reports with more context
    // (and would bury a failed start's one error line); RUST_LOG brings them back.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("warn,scheduler_core=info,scylla=off,rdkafka=error")
    });
    // Colours only on a terminal: a log file or a journal gets plain text.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(terminal)
        .with_env_filter(filter);
    if std::env::var("SCHEDULER_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
        builder.json().init();
    } else {
        builder.init();
    }
}

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
        Command::Schedule(args) => commands::schedule(args, json, out),
        Command::Get(args) => commands::get(args, json, out),
        Command::List(args) => commands::list(args, json, out),
        Command::Cancel(args) => commands::cancel(args, json, out),
        Command::Reschedule(args) => commands::reschedule(args, json, out),
        Command::Status(args) => commands::status(args, json, out),
        Command::DeadLetters(args) => commands::dead_letters(args.command, json, out),
        Command::Suspend(args) => commands::suspend(args, json, out),
        Command::Resume(args) => commands::resume(args, json, out),
        Command::Suspensions(args) => commands::suspensions(args, json, out),
        Command::Jobs(args) => commands::jobs(args.command, json, out),
        Command::Schedules(args) => commands::schedules(args.command, json, out),
        Command::Node(args) => commands::node(args),
        Command::Migrate(args) => commands::migrate(args, json, out),
    };
    match result {
        Ok(()) => 0,
        Err(failure) => {
            eprintln!("scheduler: {}", failure.message);
            failure.code
        }
    }
}
