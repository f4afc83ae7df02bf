//! The `scheduler` command line; see `scheduler --help`. Logs go to stderr: `RUST_LOG` filters
//! them, `SCHEDULER_LOG_FORMAT=json` makes them JSON lines. `scheduler node` exports its spans
//! when its settings' `[telemetry] otlp_endpoint` is set.

fn main() -> std::process::ExitCode {
    let args: Vec<_> = std::env::args_os().collect();
    let telemetry = scheduler_cli::telemetry_of(&args);
    let node = scheduler_cli::runs_a_node(&args);
    let exporting = scheduler_cli::init_logging(telemetry.as_ref(), node);
    let code = scheduler_cli::run(args, &mut std::io::stdout());
    // Flushes the spans still buffered before the process ends.
    drop(exporting);
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
}
