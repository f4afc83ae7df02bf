//! Issue 33's noisy neighbour: tenant b's steady tasks alone (its baseline lateness), then
//! beside tenant a's flood of tasks that all come due at one time, on one node. Each task
//! carries its tenant as its limit key; no limit is set, so what is measured is the fair
//! shares alone: the executor's slots taken in turns by key, and each key's share of a
//! tree's memory. The flood is enqueued ahead of its time (its records are in Cassandra when
//! it comes due, as a tenant's scheduled batch would be) by a producer of its own, so b's
//! records never wait behind a's in the producer.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures::StreamExt;
use it_tests::engine::{metric_sum, TestEnv};
use scheduler_client::Scheduler;
use scheduler_core::settings::SchedulingSettings;
use tokio::time::Instant;

use crate::ceilings::bench_task;
use crate::cpu::{self, CpuSnapshot};
use crate::probe::Probe;
use crate::scenarios::{
    enqueue, node_error, per_task_since, quantile, wait_until, PARTITIONS, STATEMENTS,
};
use crate::BenchError;

/// Tenant b's tasks a second, each its own due time a second after it is sent.
pub const B_PER_S: f64 = 100.0;
/// How long b's baseline runs...
const BASELINE: Duration = Duration::from_secs(20);
/// ...after this long of b's tasks, not measured.
const WARM_UP: Duration = Duration::from_secs(5);
/// How far ahead of its send b's task is due.
const B_LEAD: TimeDelta = TimeDelta::seconds(1);

/// Lateness of a set of tasks, in milliseconds.
#[derive(Debug, Clone)]
pub struct Lateness {
    /// Tasks measured.
    pub tasks: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// The scenario's figures.
#[derive(Debug, Clone)]
pub struct NoisyNeighbour {
    /// Tenant a's tasks, all due at one time.
    pub flood: usize,
    /// The orderingIds they are spread over.
    pub flood_ordering_ids: usize,
    /// Tenant b's lateness alone.
    pub baseline: Lateness,
    /// Tenant b's lateness while a's flood runs.
    pub flooded: Lateness,
    /// Tenant a's tasks a second, from their due time to the last one's start.
    pub flood_per_s: f64,
}

impl NoisyNeighbour {
    /// b's p99 lateness beside the flood over its p99 alone.
    pub fn ratio(&self) -> f64 {
        self.flooded.p99_ms / self.baseline.p99_ms
    }
}

/// b alone, then beside `flood` tasks of a over `ordering_ids` orderingIds due together.
pub async fn noisy(flood: usize, ordering_ids: usize) -> Result<NoisyNeighbour, BenchError> {
    let env = TestEnv::new("bench_noisy", PARTITIONS).await;
    let probe = Probe::new(PARTITIONS, true);
    let node = env
        .start_sole_node(env.settings(SchedulingSettings::default()), probe.clone())
        .await;
    let (for_a, for_b) = (
        env.scheduler(Duration::from_secs(10)),
        env.scheduler(Duration::from_secs(10)),
    );
    // b's first tasks, not measured: the node's first statements of each kind are prepared as
    // they are first used, and its connections open (a full run's baseline p99 was 317 ms once,
    // with b's first tasks in it).
    let until = Instant::now() + WARM_UP;
    let warm = steady(&for_b, "warm", |_| Instant::now() >= until).await?;
    let until = Instant::now() + BASELINE;
    let sent = warm + steady(&for_b, "base", |_| Instant::now() >= until).await?;
    wait_until(
        Duration::from_secs(60),
        "every baseline task to run",
        || probe.executed() >= sent as u64,
    )
    .await?;
    let baseline = lateness(&probe, "base-", None);
    // The flood, due once it is all in, at least 20 s on: its producer sends about 7,000 tasks
    // a second while the node persists them (the first full run, at a guessed 20,000, had more
    // than half refused as already past due).
    let ingest = Duration::from_secs(20).max(Duration::from_millis(flood as u64 / 4));
    let due = Utc::now() + TimeDelta::from_std(ingest).unwrap_or(TimeDelta::MAX);
    enqueue(&for_a, flood, |i| {
        bench_task(format!("a-{}", i % ordering_ids), due, format!("flood-{i}"))
            .with_limit_key("tenant-a")
    })
    .await?;
    let before = probe.executed();
    let (metrics_before, processes) = (node.metrics(), cpu::stack_processes());
    let cpu_before = CpuSnapshot::take(&processes);
    // b from a few seconds before the flood's time until the flood has run.
    let b_from = due - TimeDelta::seconds(3);
    if let Ok(wait) = (b_from - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
    // The trees' memory, sampled each 500 ms for the timeline.
    let mut memory = Vec::new();
    let sampling = async {
        loop {
            let metrics = node.metrics();
            let of = |stage| metric_sum(&metrics, "scheduler_tasks_in_memory", &[("stage", stage)]);
            memory.push(NodeSample {
                at: Utc::now(),
                scheduled: of("scheduled"),
                executing: of("executing"),
            });
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    let flooded_sent = tokio::select! {
        // Until the whole flood ran: b's tasks sent over a second ago have run (each is due a
        // second after it is sent), so the count lacks a's only once a's last ones are running.
        // (Until the count of b's too was added, b stopped as many tasks short of a's end as it
        // had sent.)
        sent = steady(&for_b, "beside", |sent| {
            probe.executed() + B_PER_S as u64 >= before + (flood + sent) as u64
        }) => sent?,
        never = sampling => never,
    };
    let wait = Duration::from_secs(300).max(Duration::from_millis(flood as u64));
    wait_until(
        wait,
        "the flood and every task of b beside it to run",
        || probe.executed() >= before + (flood + flooded_sent) as u64,
    )
    .await?;
    let flooded = lateness(&probe, "beside-", Some(due));
    if std::env::var_os("BENCH_TIMELINE").is_some() {
        timeline(&probe, due, &memory);
        let tasks = flood + flooded_sent;
        let cpu = CpuSnapshot::take(&processes).per_task_since(&cpu_before, tasks);
        eprintln!("CPU a task (ms): {cpu:?}");
        let statements = per_task_since(&node.metrics(), &metrics_before, STATEMENTS, tasks);
        eprintln!("statements a task: {statements:?}");
    }
    let last_a = (probe.samples().iter())
        .filter(|s| s.uniqueness_key.starts_with("flood-"))
        .map(|s| s.started)
        .max()
        .unwrap_or(due);
    let drained_s = ((last_a - due).num_milliseconds() as f64 / 1000.0).max(0.001);
    node.shutdown().await.map_err(node_error)?;
    Ok(NoisyNeighbour {
        flood,
        flood_ordering_ids: ordering_ids,
        baseline,
        flooded,
        flood_per_s: flood as f64 / drained_s,
    })
}

/// Sends tenant b's tasks at [`B_PER_S`] (orderingIds `b-0`..`b-99`, keys `<prefix>-<n>`),
/// each due [`B_LEAD`] after it is sent, until `stop` (given how many were sent) says so: how
/// many were sent.
async fn steady(
    scheduler: &Scheduler,
    prefix: &str,
    mut stop: impl FnMut(usize) -> bool,
) -> Result<usize, BenchError> {
    let tick = Duration::from_millis(10);
    let mut interval = tokio::time::interval(tick);
    let (mut owed, mut sent, mut failures) = (0.0f64, 0usize, 0usize);
    let mut sends = futures::stream::FuturesUnordered::new();
    while !stop(sent) {
        tokio::select! {
            _ = interval.tick() => {
                owed += B_PER_S * tick.as_secs_f64();
                while owed >= 1.0 {
                    owed -= 1.0;
                    let task = bench_task(
                        format!("b-{}", sent % 100),
                        Utc::now() + B_LEAD,
                        format!("{prefix}-{sent}"),
                    )
                    .with_limit_key("tenant-b");
                    sends.push(scheduler.schedule_task(task));
                    sent += 1;
                }
            }
            Some(result) = sends.next(), if !sends.is_empty() => failures += usize::from(result.is_err()),
        }
    }
    while let Some(result) = sends.next().await {
        failures += usize::from(result.is_err());
    }
    match failures {
        0 => Ok(sent),
        n => Err(BenchError::Insane(format!(
            "{n} of tenant b's tasks were not accepted"
        ))),
    }
}

/// The lateness of the tasks whose uniqueness key starts with `prefix` (due at or after
/// `from`, if given).
fn lateness(probe: &Probe, prefix: &str, from: Option<DateTime<Utc>>) -> Lateness {
    let mut ms: Vec<f64> = (probe.samples().iter())
        .filter(|s| s.uniqueness_key.starts_with(prefix))
        .filter(|s| {
            let due = s.started - TimeDelta::microseconds(s.lateness_us);
            from.is_none_or(|from| due >= from)
        })
        .map(|s| s.lateness_us as f64 / 1000.0)
        .collect();
    ms.sort_by(f64::total_cmp);
    Lateness {
        tasks: ms.len(),
        p50_ms: quantile(&ms, 0.50),
        p99_ms: quantile(&ms, 0.99),
        max_ms: ms.last().copied().unwrap_or(f64::NAN),
    }
}

/// The node as the timeline samples it.
struct NodeSample {
    at: DateTime<Utc>,
    /// Tasks in the trees' memory, scheduled and executing.
    scheduled: f64,
    executing: f64,
}

/// One bucket of the timeline.
#[derive(Default)]
struct Bucket {
    a_started: usize,
    b_due: usize,
    b_over_9ms: usize,
    b_worst_ms: f64,
    scheduled: f64,
    executing: f64,
}

/// Prints, per 5 s from the flood's time, how many of a's tasks started, how late b's tasks due
/// then ran (the worst, and how many over 9 ms) and the trees' memory (a diagnosis, asked for
/// with `BENCH_TIMELINE`).
fn timeline(probe: &Probe, due: DateTime<Utc>, samples: &[NodeSample]) {
    use std::collections::BTreeMap;
    let step_ms = 5_000;
    let mut buckets: BTreeMap<i64, Bucket> = BTreeMap::new();
    for sample in samples {
        let bucket = buckets
            .entry((sample.at - due).num_milliseconds().div_euclid(step_ms))
            .or_default();
        bucket.scheduled = bucket.scheduled.max(sample.scheduled);
        bucket.executing = bucket.executing.max(sample.executing);
    }
    for s in probe.samples().iter() {
        let scheduled = s.started - TimeDelta::microseconds(s.lateness_us);
        if s.uniqueness_key.starts_with("flood-") {
            let at = (s.started - due).num_milliseconds().div_euclid(step_ms);
            buckets.entry(at).or_default().a_started += 1;
        } else if s.uniqueness_key.starts_with("beside-") {
            let at = (scheduled - due).num_milliseconds().div_euclid(step_ms);
            let bucket = buckets.entry(at).or_default();
            let late_ms = s.lateness_us as f64 / 1000.0;
            bucket.b_due += 1;
            bucket.b_over_9ms += usize::from(late_ms > 9.0);
            bucket.b_worst_ms = bucket.b_worst_ms.max(late_ms);
        }
    }
    eprintln!(
        "from the flood's time (s) | a started | b due | b > 9 ms | b's worst (ms) | most in memory: scheduled, executing"
    );
    for (at, b) in buckets {
        eprintln!(
            "{:>6} | {:>7} | {:>5} | {:>4} | {:>9.1} | {:>6} {:>6}",
            at * step_ms / 1000,
            b.a_started,
            b.b_due,
            b.b_over_9ms,
            b.b_worst_ms,
            b.scheduled,
            b.executing,
        );
    }
}
