//! `peer-bench`: runs the engine's benchmark workload (tasks scheduled 2 s ahead at a steady
//! rate, then a burst due now, over serial queues standing for orderingIds) on a peer
//! delayed-job library, so that `scheduler-bench` can put the figures side by side.
//!
//! ```text
//! peer-bench --system graphile-worker --database-url postgres://postgres@127.0.0.1:15432/peer_bench \
//!     --rate 500 --steady-secs 30 --burst 20000 --queues 1000 --profile defaults --out peer.json
//! ```
//!
//! A separate package (not in the engine's workspace) so that the engine's builds and tests
//! never compile a database driver they do not use.

mod cpu;
mod graphile;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};

/// The libraries compared with the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum System {
    /// graphile_worker on PostgreSQL.
    GraphileWorker,
}

/// How the library is configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Profile {
    /// The library's defaults, PostgreSQL's session defaults.
    Defaults,
    /// As the library's docs advise for latency and throughput (see each system's module).
    Tuned,
}

impl Profile {
    /// The name in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Defaults => "defaults",
            Profile::Tuned => "tuned",
        }
    }
}

#[derive(Parser)]
#[command(
    version,
    about = "The engine's benchmark workload on a peer delayed-job library"
)]
struct Args {
    /// The library to measure.
    #[arg(long)]
    system: System,
    /// Its database.
    #[arg(long)]
    database_url: String,
    /// Steady-phase tasks per second.
    #[arg(long, default_value_t = 500.0)]
    rate: f64,
    /// If set, the steady phase runs again at this rate (the engine's 90% load).
    #[arg(long)]
    rate_high: Option<f64>,
    /// Steady-phase seconds.
    #[arg(long, default_value_t = 30)]
    steady_secs: u64,
    /// Burst tasks (due now, enqueued in batches).
    #[arg(long, default_value_t = 20_000)]
    burst: usize,
    /// Serial queues (the engine's orderingIds); tasks go round-robin over them.
    #[arg(long, default_value_t = 1_000)]
    queues: usize,
    /// The library's configuration.
    #[arg(long, value_enum, default_value_t = Profile::Defaults)]
    profile: Profile,
    /// Where to write the figures as JSON.
    #[arg(long)]
    out: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peer-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.rate > 0.0 && args.queues > 0,
        "--rate and --queues must be positive"
    );
    let sizes = workload::Sizes {
        rate: args.rate,
        rate_high: args.rate_high,
        steady: Duration::from_secs(args.steady_secs),
        burst: args.burst,
        queues: args.queues,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting a runtime")?;
    let figures = runtime.block_on(async {
        match args.system {
            System::GraphileWorker => graphile::run(&args.database_url, args.profile, sizes).await,
        }
    })?;
    let text = serde_json::to_string_pretty(&figures).context("encoding the figures")?;
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&args.out, text).with_context(|| format!("writing {}", args.out.display()))?;
    let steady = &figures["steady"];
    let burst = &figures["burst"];
    println!(
        "{} ({}): lateness p50 {} ms, p99 {} ms, p99.9 {} ms, max {} ms at {}/s; burst {} jobs/s; \
         duplicates {}+{}, missing {}+{}",
        figures["system"].as_str().unwrap_or("?"),
        args.profile.name(),
        ms(&steady["p50_ms"]),
        ms(&steady["p99_ms"]),
        ms(&steady["p999_ms"]),
        ms(&steady["max_ms"]),
        args.rate,
        ms(&burst["jobs_per_s"]),
        steady["duplicates"],
        burst["duplicates"],
        steady["missing"],
        burst["missing"],
    );
    Ok(())
}

fn ms(value: &serde_json::Value) -> String {
    value
        .as_f64()
        .map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}
