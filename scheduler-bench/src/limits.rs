//! Issue 33's cost: the throughput burst with per-key limits on, keys not saturated, beside the
//! same burst with them off, in the same run. Every task carries one of `keys` limit keys in both
//! (the records are the same size); with limits on, `key_concurrency` is the executor's slots, so
//! no key is ever held at its limit on the one node and what is measured is the limits' own
//! cost: the gate on every task, and the permits taken and given back across the cluster
//! (`scheduler_key_permit_writes_total`). Off and on alternate, twice, each on a fresh topic and
//! keyspace, so neither always runs on a warmer or busier Cassandra.

use std::time::Duration;

use chrono::Utc;
use it_tests::engine::TestEnv;
use scheduler_core::settings::SchedulingSettings;

use crate::ceilings::bench_task;
use crate::cpu::{self, CpuSnapshot};
use crate::probe::Probe;
use crate::scenarios::{
    enqueue, node_error, per_task, seconds_between, wait_until, PARTITIONS, STATEMENTS,
};
use crate::BenchError;

/// One burst's figures.
#[derive(Debug, Clone)]
pub struct LimitsRun {
    /// Whether `key_concurrency` was set.
    pub limits_on: bool,
    /// Tasks per second, first enqueue to last run.
    pub tasks_per_s: f64,
    /// Changes of a key's permits (lightweight transactions) per task, by outcome.
    pub permit_writes_per_task: Vec<(String, f64)>,
    /// CPU milliseconds per task of each process, and their total.
    pub cpu_per_task_ms: Vec<(String, f64)>,
    /// CQL statements the node ran per task, by operation, most first.
    pub statements_per_task: Vec<(String, f64)>,
}

/// The bursts, in the order they ran.
#[derive(Debug, Clone)]
pub struct LimitsCost {
    /// Tasks of each burst.
    pub tasks: usize,
    /// Limit keys the tasks carry (round robin).
    pub keys: usize,
    /// `key_concurrency` when on.
    pub limit: usize,
    /// Every burst.
    pub runs: Vec<LimitsRun>,
}

impl LimitsCost {
    /// The mean throughput with limits on over the mean with them off.
    pub fn ratio(&self) -> f64 {
        let mean = |on: bool| {
            let rates: Vec<f64> = (self.runs.iter())
                .filter(|r| r.limits_on == on)
                .map(|r| r.tasks_per_s)
                .collect();
            rates.iter().sum::<f64>() / rates.len().max(1) as f64
        };
        mean(true) / mean(false)
    }
}

/// Alternates bursts of `tasks` tasks over `ordering_ids` orderingIds and `keys` limit keys,
/// limits off then on, twice.
pub async fn cost(
    tasks: usize,
    ordering_ids: usize,
    keys: usize,
) -> Result<LimitsCost, BenchError> {
    let limit = SchedulingSettings::default().executor_concurrency;
    let mut runs = Vec::new();
    for limits_on in [false, true, false, true] {
        runs.push(burst(limits_on.then_some(limit), tasks, ordering_ids, keys).await?);
    }
    Ok(LimitsCost {
        tasks,
        keys,
        limit,
        runs,
    })
}

async fn burst(
    limit: Option<usize>,
    tasks: usize,
    ordering_ids: usize,
    keys: usize,
) -> Result<LimitsRun, BenchError> {
    let env = TestEnv::new("bench_limits", PARTITIONS).await;
    let probe = Probe::new(PARTITIONS, false);
    let scheduling = SchedulingSettings {
        key_concurrency: limit,
        ..SchedulingSettings::default()
    };
    let node = env
        .start_sole_node(env.settings(scheduling), probe.clone())
        .await;
    let scheduler = env.scheduler(Duration::from_secs(10));
    let processes = cpu::stack_processes();
    let cpu_before = CpuSnapshot::take(&processes);
    let started = Utc::now();
    enqueue(&scheduler, tasks, |i| {
        let task = bench_task(
            format!("order-{}", i % ordering_ids),
            Utc::now(),
            format!("lim-{i}"),
        );
        task.with_limit_key(format!("tenant-{}", i % keys))
    })
    .await?;
    let wait = Duration::from_secs(120).max(Duration::from_millis(tasks as u64 * 5));
    wait_until(wait, "every task of the limits burst to run", || {
        probe.executed() >= tasks as u64
    })
    .await?;
    let cpu_per_task_ms = CpuSnapshot::take(&processes).per_task_since(&cpu_before, tasks);
    let total_s = seconds_between(started, probe.last().unwrap_or(started));
    // The permits given back after the burst are part of its cost: wait for them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let metrics = node.metrics();
    let permit_writes_per_task = permit_writes(&metrics, tasks);
    let statements_per_task = per_task(&metrics, STATEMENTS, tasks);
    node.shutdown().await.map_err(node_error)?;
    Ok(LimitsRun {
        limits_on: limit.is_some(),
        tasks_per_s: tasks as f64 / total_s,
        permit_writes_per_task,
        cpu_per_task_ms,
        statements_per_task,
    })
}

/// `scheduler_key_permit_writes_total` by outcome, per task of `tasks`.
fn permit_writes(metrics: &str, tasks: usize) -> Vec<(String, f64)> {
    let prefix = "scheduler_key_permit_writes_total{outcome=\"";
    metrics
        .lines()
        .filter_map(|line| {
            let (outcome, value) = line.strip_prefix(prefix)?.split_once("\"}")?;
            let count = value.trim().parse::<f64>().ok()?;
            Some((outcome.to_string(), count / tasks.max(1) as f64))
        })
        .collect()
}
