//! `scheduler-bench`: measures the engine against the real stack (`dev/stack up`) and reports
//! each figure beside the raw ceiling of the same services measured in the same run.
//!
//! ```text
//! scheduler-bench run [--quick] [--out FILE] [--only ceilings,throughput,handoff,cold,backlog,busy,group,tombstones,scale,ends,limits,noisy,accuracy,peers,failover,remote]
//! ```
//!
//! Prints a table and writes the figures as JSON. `--quick` runs every scenario small (under
//! two minutes) and fails only if a figure is not sane, never on a timing threshold.

mod accuracy;
mod ceilings;
mod child;
mod cpu;
mod ends;
mod failover;
mod limits;
mod noisy;
mod peers;
mod probe;
mod remote;
mod report;
mod scale;
mod scenarios;
mod tombstones;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};

use report::Figures;
use scenarios::Leave;

/// A benchmark could not run or measured nonsense.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Setting a scenario up failed.
    #[error("setup failed: {0}")]
    Setup(String),
    /// Something did not happen in time.
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// A node process misbehaved.
    #[error("node process: {0}")]
    Child(String),
    /// A figure is not sane (e.g. tasks were not accepted).
    #[error("insane result: {0}")]
    Insane(String),
}

#[derive(Parser)]
#[command(version, about = "Benchmarks of the scheduler against the real stack")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the benchmarks.
    Run(RunArgs),
    /// Runs one node in this process (used by `run` for the scenarios that need a process).
    #[command(hide = true)]
    Node {
        /// The node's settings, as JSON.
        #[arg(long)]
        settings: String,
        /// Partitions of the topic.
        #[arg(long)]
        partitions: u32,
        /// Writes a line per execution to this file (the failover scenario's check).
        #[arg(long)]
        executions: Option<PathBuf>,
        /// How long each call takes, in milliseconds.
        #[arg(long, default_value_t = 0)]
        call_ms: u64,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Small sizes: a smoke check that finishes in under two minutes.
    #[arg(long)]
    quick: bool,
    /// Where to write the figures as JSON.
    #[arg(long, default_value = "target/bench/figures.json")]
    out: PathBuf,
    /// Only these scenarios (comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<Scenario>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Ceilings,
    Throughput,
    Handoff,
    Cold,
    Backlog,
    /// One busy partition: its orderingIds' due tasks deferred and read back.
    Busy,
    /// One group of the largest size, every member due now, then its join.
    Group,
    /// Issue 12's baseline: a restart after many tasks finished in one partition (run only
    /// when named in `--only`).
    Tombstones,
    /// Millions of pending tasks written straight to Cassandra, then a takeover at each size
    /// (run only when named in `--only`; with `--quick`, at a tenth of the full sizes).
    Scale,
    /// The two forms of a task's end (status row and removal, status in the schedule row),
    /// side by side on Cassandra (run only when named in `--only`).
    Ends,
    /// The throughput burst with per-key limits on (keys not saturated) and off, alternating
    /// (run only when named in `--only`).
    Limits,
    /// Tenant b's steady tasks alone, then beside tenant a's flood of tasks due together
    /// (run only when named in `--only`).
    Noisy,
    /// Per-key limits on three node processes through a rebalance: the most calls of a key at
    /// once, and rated keys' starts a second (run only when named in `--only`).
    Accuracy,
    /// The same workload on peer libraries (graphile_worker on PostgreSQL), side by side.
    Peers,
    /// Three node processes under a steady load; one leaves (SIGTERM), then one is killed
    /// (SIGKILL); every execution checked.
    Failover,
    /// Remote calls through one Python worker: a burst's tasks a second and CPU a task, and
    /// the long poll's latency from a task's time to the worker's start.
    Remote,
}

/// How big each scenario is.
struct Sizes {
    kafka_records: usize,
    cassandra_inserts: usize,
    throughput_tasks: usize,
    ordering_ids: usize,
    punctual_for: Duration,
    handoff_window: Duration,
    cold_tasks: usize,
    backlog_tasks: usize,
    busy_tasks: usize,
    busy_ordering_ids: usize,
    group_members: u32,
    /// The remote calls' burst, and their Python worker processes.
    remote_burst: usize,
    remote_workers: usize,
    finished_tasks: usize,
    /// Tasks ended in each form of the ends scenario.
    ended_tasks: usize,
    /// Tasks of each burst of the limits scenario, and the limit keys they carry.
    limits_tasks: usize,
    limit_keys: usize,
    /// Tenant a's flood in the noisy-neighbour scenario.
    noisy_flood: usize,
    /// Keys limited to two calls at once, and rated keys, in the accuracy scenario.
    accuracy_keys: usize,
    rated_keys: usize,
    /// Pending tasks at each step of the scale scenario, ascending.
    scale_pending: [usize; 2],
    failover_window: Duration,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            // Half of what it ran until issue 30: a smoke run in every CI run (dev/test), each
            // scenario still in the shape the full run measures.
            Sizes {
                kafka_records: 10_000,
                cassandra_inserts: 5_000,
                throughput_tasks: 5_000,
                ordering_ids: 500,
                punctual_for: Duration::from_secs(5),
                handoff_window: Duration::from_secs(20),
                cold_tasks: 5_000,
                backlog_tasks: 10_000,
                busy_tasks: 6_000,
                busy_ordering_ids: 50,
                group_members: 2_000,
                remote_burst: 1_000,
                remote_workers: 1,
                finished_tasks: 20_000,
                ended_tasks: 10_000,
                limits_tasks: 5_000,
                limit_keys: 1_000,
                noisy_flood: 20_000,
                accuracy_keys: 500,
                rated_keys: 4,
                scale_pending: [100_000, 1_000_000],
                failover_window: failover::QUICK_WINDOW,
            }
        } else {
            Sizes {
                kafka_records: 200_000,
                cassandra_inserts: 100_000,
                throughput_tasks: 200_000,
                ordering_ids: 10_000,
                punctual_for: Duration::from_secs(30),
                handoff_window: Duration::from_secs(20),
                cold_tasks: 100_000,
                backlog_tasks: 1_000_000,
                busy_tasks: 120_000,
                busy_ordering_ids: 500,
                group_members: scheduler_client::wire::MAX_GROUP_NUMBER,
                remote_burst: 5_000,
                remote_workers: 2,
                finished_tasks: 300_000,
                ended_tasks: 100_000,
                limits_tasks: 100_000,
                limit_keys: 1_000,
                noisy_flood: 1_000_000,
                accuracy_keys: 10_000,
                rated_keys: 20,
                scale_pending: [1_000_000, 10_000_000],
                failover_window: failover::FULL_WINDOW,
            }
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("scheduler-bench: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The bench and its node processes log to stderr only when asked (RUST_LOG), to keep
    // runs quiet.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let result = match cli.command {
        Command::Node {
            settings,
            partitions,
            executions,
            call_ms,
        } => runtime.block_on(child::run_child(
            &settings,
            partitions,
            executions.as_deref(),
            Duration::from_millis(call_ms),
        )),
        Command::Run(args) => runtime.block_on(run(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scheduler-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: RunArgs) -> Result<(), BenchError> {
    let sizes = Sizes::new(args.quick);
    let wanted = |s: Scenario| args.only.is_empty() || args.only.contains(&s);
    let started = Instant::now();
    let step = |name: &str| eprintln!("[bench {:>5.1}s] {name}", started.elapsed().as_secs_f64());
    let mut figures = Figures::default();
    if wanted(Scenario::Ceilings) {
        step("raw ceilings: Kafka produce and consume, Cassandra inserts");
        figures.ceilings =
            Some(ceilings::measure(sizes.kafka_records, sizes.cassandra_inserts).await?);
    }
    if wanted(Scenario::Throughput) {
        step("throughput, then punctuality at half of it and at 90%");
        let (throughput, punctuality) = scenarios::throughput_and_punctuality(
            sizes.throughput_tasks,
            sizes.ordering_ids,
            sizes.punctual_for,
        )
        .await?;
        figures.throughput = Some(throughput);
        figures.punctuality = punctuality;
    }
    if wanted(Scenario::Handoff) {
        for leave in [Leave::Clean, Leave::Kill] {
            step(&format!("handoff ({leave:?})"));
            figures
                .handoffs
                .push(scenarios::handoff(leave, sizes.handoff_window).await?);
        }
    }
    if wanted(Scenario::Failover) {
        // At the engine's half-load rate when this run measured it (at most the quick rate in
        // the quick run, where it takes about 40 s).
        let measured = figures.punctuality.first().map(|p| p.rate_per_s);
        let rate = match (args.quick, measured) {
            (true, m) => m.map_or(failover::QUICK_RATE, |m| m.min(failover::QUICK_RATE)),
            (false, m) => m.unwrap_or(failover::DEFAULT_RATE),
        };
        step(&format!(
            "failover: three nodes at {rate:.0} tasks/s, one leaves, one is killed"
        ));
        figures.failover = Some(failover::failover(rate, sizes.failover_window).await?);
    }
    if wanted(Scenario::Cold) {
        step("cold load");
        figures.cold_load = Some(scenarios::cold_load(sizes.cold_tasks).await?);
    }
    if wanted(Scenario::Backlog) {
        step("backlog");
        figures.backlog = Some(scenarios::backlog(sizes.backlog_tasks).await?);
    }
    if wanted(Scenario::Busy) {
        step("busy partition");
        figures.busy =
            Some(scenarios::busy_partition(sizes.busy_tasks, sizes.busy_ordering_ids).await?);
    }
    if wanted(Scenario::Group) {
        step("one group of every member due now, then its join");
        figures.group = Some(scenarios::big_group(sizes.group_members).await?);
    }
    if wanted(Scenario::Remote) {
        step(&format!(
            "remote: {} tasks due now, then steady ones, through {} Python worker(s)",
            sizes.remote_burst, sizes.remote_workers
        ));
        figures.remote = Some(remote::remote(sizes.remote_burst, sizes.remote_workers).await?);
    }
    if args.only.contains(&Scenario::Tombstones) {
        step("tombstones: a restart after many tasks finished in one partition");
        figures.tombstones = Some(tombstones::tombstones(sizes.finished_tasks).await?);
    }
    if args.only.contains(&Scenario::Scale) {
        let [first, last] = sizes.scale_pending;
        step(&format!(
            "scale: {first}, then {last} pending tasks in Cassandra, a takeover at each"
        ));
        figures.scale = Some(scale::scale(&sizes.scale_pending).await?);
    }
    if args.only.contains(&Scenario::Ends) {
        step(&format!(
            "ends: {} tasks ended in each of two forms, then read back",
            sizes.ended_tasks
        ));
        figures.ends = Some(ends::ends(sizes.ended_tasks).await?);
    }
    if args.only.contains(&Scenario::Limits) {
        step(&format!(
            "limits: bursts of {} tasks over {} limit keys, limits off and on, twice",
            sizes.limits_tasks, sizes.limit_keys
        ));
        figures.limits =
            Some(limits::cost(sizes.limits_tasks, sizes.ordering_ids, sizes.limit_keys).await?);
    }
    if args.only.contains(&Scenario::Noisy) {
        step(&format!(
            "noisy: tenant b at {} tasks a second alone, then beside tenant a's {} tasks due together",
            noisy::B_PER_S,
            sizes.noisy_flood
        ));
        figures.noisy = Some(noisy::noisy(sizes.noisy_flood, sizes.ordering_ids).await?);
    }
    if args.only.contains(&Scenario::Accuracy) {
        step(&format!(
            "accuracy: {} keys at {} calls at once and {} keys at {} starts a second, on three node processes, one leaving",
            sizes.accuracy_keys,
            accuracy::LIMIT,
            sizes.rated_keys,
            accuracy::RATE
        ));
        figures.accuracy = Some(accuracy::accuracy(sizes.accuracy_keys, sizes.rated_keys).await?);
    }
    if wanted(Scenario::Peers) && args.quick {
        eprintln!(
            "peers: skipped in the quick run (a comparison, not a check of the engine); \
             run dev/bench --only throughput,peers"
        );
    } else if wanted(Scenario::Peers) {
        // At the engine's half-load rate when this run measured it.
        let rate = figures
            .punctuality
            .first()
            .map_or(peers::DEFAULT_RATE, |p| p.rate_per_s);
        step(&format!(
            "peers: the same workload on graphile_worker (dev/postgres), {rate:.0} tasks/s"
        ));
        let rate_high = figures.high_load().map(|p| p.rate_per_s);
        let measured = peers::measure(rate, rate_high, sizes.punctual_for).await;
        figures.peers = Some(measured.map_err(|e| e.to_string()));
    }
    step("done");

    let mode = if args.quick { "quick" } else { "full" };
    println!("\nscheduler-bench ({mode}) {}", report::machine());
    print!("{}", figures.table());
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| BenchError::Setup(format!("cannot create {}: {e}", dir.display())))?;
    }
    let json = serde_json::to_string_pretty(&figures.to_json(mode))
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    std::fs::write(&args.out, json)
        .map_err(|e| BenchError::Setup(format!("cannot write {}: {e}", args.out.display())))?;
    println!("figures written to {}", args.out.display());
    let problems = figures.insanities();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Insane(problems.join("; ")))
    }
}
