//! The `scheduler` command line; see `scheduler --help`. Logs go to stderr: `RUST_LOG` filters
//! them, `SCHEDULER_LOG_FORMAT=json` makes them JSON lines.

fn main() -> std::process::ExitCode {
    scheduler_cli::init_logging();
    let code = scheduler_cli::run(std::env::args_os(), &mut std::io::stdout());
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
}
