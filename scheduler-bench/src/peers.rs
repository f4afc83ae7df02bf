//! Side by side with peers (issue 13): the engine's workload on the delayed-job library a Rust
//! team would pick instead, graphile_worker on PostgreSQL (`dev/postgres`), run by the
//! separate `peer-bench` package once per profile; its JSON is read back for the report.
//!
//! The workload is the punctuality scenario's (tasks 2 s ahead at the engine's half-load rate
//! for the same time), then a burst of `BURST` tasks due now over `QUEUES` serial queues: 20
//! tasks per queue, the throughput scenario's ratio (200k tasks over 10k orderingIds).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::BenchError;

/// Tasks of the burst.
pub const BURST: usize = 20_000;
/// Serial queues (named queues standing for orderingIds).
pub const QUEUES: usize = 1_000;
/// The steady rate when this run did not measure the engine's half-load rate.
pub const DEFAULT_RATE: f64 = 500.0;
/// The systems and profiles measured, as `peer-bench` names them.
const RUNS: [(&str, &str); 2] = [
    ("graphile-worker", "defaults"),
    ("graphile-worker", "tuned"),
];

/// One peer run's headline figures (the whole document is kept for figures.json).
#[derive(Debug, Clone)]
pub struct PeerRun {
    /// Library and version, e.g. "graphile_worker 0.14.1".
    pub system: String,
    /// "defaults" or "tuned".
    pub profile: String,
    /// Steady-phase lateness percentiles, ms (None: the percentile fell on a task that never
    /// ran within the wait).
    pub p50_ms: Option<f64>,
    /// 99th percentile.
    pub p99_ms: Option<f64>,
    /// 99.9th percentile.
    pub p999_ms: Option<f64>,
    /// The steady phase again at the engine's 90% rate: p50, p99, p99.9 (if it ran).
    pub high: Option<[Option<f64>; 3]>,
    /// Burst throughput, jobs/s (None: not every burst task ran within the wait).
    pub jobs_per_s: Option<f64>,
    /// CPU milliseconds per burst task: the worker process, PostgreSQL, and the total.
    pub cpu_ms_per_task: Vec<(String, f64)>,
    /// Runs beyond one per task, both phases.
    pub duplicates: u64,
    /// Tasks that never ran within the waits, both phases.
    pub missing: u64,
    /// Runs that started before an earlier task of their queue, both phases.
    pub out_of_order: u64,
    /// `peer-bench`'s output.
    pub document: Value,
}

/// The peers' figures of one run.
#[derive(Debug, Clone)]
pub struct Peers {
    /// Steady tasks per second.
    pub rate_per_s: f64,
    /// The second steady rate (the engine's 90%), if one ran.
    pub rate_high_per_s: Option<f64>,
    /// Steady seconds.
    pub steady_s: f64,
    /// One per system and profile.
    pub runs: Vec<PeerRun>,
}

fn repo() -> PathBuf {
    let bench = Path::new(env!("CARGO_MANIFEST_DIR"));
    bench.parent().unwrap_or(bench).to_path_buf()
}

/// Runs `program args` in the repository; its stdout when it succeeds.
async fn run(program: &Path, args: &[&str], what: &str) -> Result<String, BenchError> {
    let output = Command::new(program)
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .await
        .map_err(|e| BenchError::Setup(format!("{what}: cannot run {}: {e}", program.display())))?;
    if !output.status.success() {
        return Err(BenchError::Setup(format!(
            "{what} failed ({})",
            output.status
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Brings PostgreSQL up, builds `peer-bench` and runs every system and profile with the
/// engine's steady `rate` for `steady`, and again at `rate_high` if given.
pub async fn measure(
    rate: f64,
    rate_high: Option<f64>,
    steady: Duration,
) -> Result<Peers, BenchError> {
    let repo = repo();
    let postgres = repo.join("dev/postgres");
    let up = run(&postgres, &["up"], "dev/postgres up").await?;
    eprint!("{up}");
    let env = run(&postgres, &["env"], "dev/postgres env").await?;
    let url = env
        .lines()
        .find_map(|l| l.strip_prefix("PEER_BENCH_DATABASE_URL="))
        .ok_or_else(|| BenchError::Setup("dev/postgres env printed no database URL".into()))?
        .to_string();
    let cargo = std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from);
    run(
        &cargo,
        &[
            "build",
            "--release",
            "--locked",
            "--manifest-path",
            "peer-bench/Cargo.toml",
            "--target-dir",
            "target/peer-bench",
        ],
        "building peer-bench",
    )
    .await?;
    let binary = repo.join("target/peer-bench/release/peer-bench");
    let mut runs = Vec::new();
    for (system, profile) in RUNS {
        let out = repo.join(format!("target/bench/peers/{system}-{profile}.json"));
        let out_arg = out.to_string_lossy().into_owned();
        let high = rate_high.map(|r| format!("{r:.0}"));
        let mut high_args = Vec::new();
        if let Some(high) = &high {
            high_args = vec!["--rate-high", high.as_str()];
        }
        let line = run(
            &binary,
            &[
                &high_args[..],
                &[
                    "--system",
                    system,
                    "--database-url",
                    &url,
                    "--rate",
                    &format!("{rate:.0}"),
                    "--steady-secs",
                    &steady.as_secs().to_string(),
                    "--burst",
                    &BURST.to_string(),
                    "--queues",
                    &QUEUES.to_string(),
                    "--profile",
                    profile,
                    "--out",
                    &out_arg,
                ],
            ]
            .concat(),
            &format!("peer-bench --system {system} --profile {profile}"),
        )
        .await?;
        eprint!("  {line}");
        let text = std::fs::read_to_string(&out)
            .map_err(|e| BenchError::Setup(format!("cannot read {}: {e}", out.display())))?;
        let document: Value = serde_json::from_str(&text)
            .map_err(|e| BenchError::Setup(format!("{} is not JSON: {e}", out.display())))?;
        runs.push(peer_run(document));
    }
    Ok(Peers {
        rate_per_s: rate,
        rate_high_per_s: rate_high,
        steady_s: steady.as_secs_f64(),
        runs,
    })
}

fn peer_run(document: Value) -> PeerRun {
    let (steady, burst) = (&document["steady"], &document["burst"]);
    let both = |key: &str| steady[key].as_u64().unwrap_or(0) + burst[key].as_u64().unwrap_or(0);
    PeerRun {
        system: format!(
            "{} {}",
            document["system"].as_str().unwrap_or("?"),
            document["version"].as_str().unwrap_or("?")
        ),
        profile: document["profile"].as_str().unwrap_or("?").to_string(),
        p50_ms: steady["p50_ms"].as_f64(),
        p99_ms: steady["p99_ms"].as_f64(),
        p999_ms: steady["p999_ms"].as_f64(),
        high: document
            .get("steady_high")
            .map(|high| ["p50_ms", "p99_ms", "p999_ms"].map(|key| high[key].as_f64())),
        jobs_per_s: burst["jobs_per_s"].as_f64(),
        cpu_ms_per_task: burst["cpu_ms_per_task"]
            .as_object()
            .map(|each| {
                each.iter()
                    .filter_map(|(name, ms)| Some((name.clone(), ms.as_f64()?)))
                    .collect()
            })
            .unwrap_or_default(),
        duplicates: both("duplicates"),
        missing: both("missing"),
        out_of_order: both("out_of_order"),
        document,
    }
}
