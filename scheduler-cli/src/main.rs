//! The `scheduler` command line; see `scheduler --help`.

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,scheduler_core=info")),
        )
        .init();
    let code = scheduler_cli::run(std::env::args_os(), &mut std::io::stdout());
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
}
