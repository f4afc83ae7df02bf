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
mod telemetry;

use std::io::Write;

use clap::Parser;

use args::{Cli, Command};
pub use output::{EXIT_FAILURE, EXIT_NOT_FOUND, EXIT_USAGE};
pub use telemetry::{init_logging, runs_a_node, telemetry_of, Exporting};

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
        Command::Partitions(args) => commands::partitions(args, json, out),
        Command::DeadLetters(args) => commands::dead_letters(args.command, json, out),
        Command::Suspend(args) => commands::suspend(args, json, out),
        Command::Resume(args) => commands::resume(args, json, out),
        Command::Suspensions(args) => commands::suspensions(args, json, out),
        Command::Limits(args) => commands::limits(args.command, json, out),
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
