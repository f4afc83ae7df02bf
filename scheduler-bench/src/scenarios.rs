//! The engine's figures: throughput, punctuality, handoff, cold load and backlog, each against
//! the real stack with the engine's default settings unless a scenario says otherwise.
//! (Over 400 lines: one function per scenario, each read on its own; what they share is in
//! `ceilings.rs`, `child.rs` and `report.rs`.)
//!
//! Over 500 lines: every benchmark scenario, side by side so that their workloads compare.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use futures::StreamExt;
use it_tests::engine::TestEnv;
use scheduler_client::{partition_for, Scheduler};
use scheduler_core::settings::{SchedulingSettings, Settings};
use scheduler_core::store::ScheduleStore;
use scheduler_core::SchedulerNode;

use crate::ceilings::{bench_task, PRODUCE_CONCURRENCY};
use crate::child::ChildNode;
use crate::cpu::{self, CpuSnapshot, ThreadSnapshot};
use crate::probe::Probe;
use crate::BenchError;

/// Partitions of the benchmark topics (the handoff splits them between two nodes).
pub(crate) const PARTITIONS: u32 = 8;
/// How far ahead punctuality tasks are scheduled.
const PUNCTUALITY_LEAD: TimeDelta = TimeDelta::seconds(2);
/// Gap between the due times of the handoff's probe tasks on one partition.
const HANDOFF_PROBE_GAP: TimeDelta = TimeDelta::milliseconds(50);

/// End-to-end throughput.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// Tasks scheduled.
    pub tasks: usize,
    /// Distinct orderingIds.
    pub ordering_ids: usize,
    /// Seconds to enqueue them all (acknowledged by Kafka).
    pub enqueue_s: f64,
    /// Seconds from the first enqueue to the last execution.
    pub total_s: f64,
    /// Tasks per second over `total_s`.
    pub tasks_per_s: f64,
    /// Executions beyond one per task.
    pub duplicates: u64,
    /// CQL statements the node ran per task (its own `scheduler_cql_statements_total`, over
    /// everything it did until the last task ran), by operation, most first.
    pub statements_per_task: Vec<(String, f64)>,
    /// CQL rows the node's statements wrote or read per task (its own
    /// `scheduler_cql_rows_total`), by operation, most first.
    pub rows_per_task: Vec<(String, f64)>,
    /// CPU milliseconds per task of each process, from the first enqueue to the last run (the
    /// node is the bench process, with the client producing the tasks), and their total.
    pub cpu_per_task_ms: Vec<(String, f64)>,
    /// Cassandra's CPU milliseconds per task by what its threads do, most first.
    pub cassandra_threads_ms: Vec<(String, f64)>,
}

/// Lateness at a steady rate.
#[derive(Debug, Clone)]
pub struct Punctuality {
    /// The load, as a fraction of the throughput measured before it.
    pub load: f64,
    /// Tasks per second scheduled.
    pub rate_per_s: f64,
    /// Tasks measured.
    pub tasks: usize,
    /// Lateness percentiles and maximum, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile (compared with the peers').
    pub p999_ms: f64,
    /// Maximum.
    pub max_ms: f64,
    /// Tasks run per second, from the first task's time to the last run.
    pub ran_per_s: f64,
    /// CQL statements (requests) per task over the phase, the node's own count.
    pub statements_per_task: f64,
    /// CPU milliseconds per task over the phase, by process, and their total.
    pub cpu_per_task_ms: Vec<(String, f64)>,
    /// Cassandra's CPU milliseconds per task by what its threads do, most first.
    pub cassandra_threads_ms: Vec<(String, f64)>,
}

/// How a node leaves in the handoff scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// SIGTERM: the node drains, commits and leaves the group.
    Clean,
    /// SIGKILL: the group notices after its session timeout.
    Kill,
}

/// Time until the leaving node's partitions run tasks again on the other node.
#[derive(Debug, Clone)]
pub struct Handoff {
    /// How the node left.
    pub leave: Leave,
    /// Partitions moved.
    pub partitions_moved: usize,
    /// Seconds from the leave until every moved partition ran a task on the other node.
    pub seconds: f64,
    /// The quickest moved partition.
    pub first_partition_s: f64,
}

/// Loading a large pending schedule after assignment.
#[derive(Debug, Clone)]
pub struct ColdLoad {
    /// Pending tasks in the partition.
    pub tasks: usize,
    /// Milliseconds from assignment until the task already due ran.
    pub first_due_ms: f64,
    /// Seconds from assignment until every pending task was held in memory.
    pub all_loaded_s: f64,
    /// The node's peak resident set, bytes.
    pub peak_rss_bytes: u64,
}

/// Draining a backlog of due tasks.
#[derive(Debug, Clone)]
pub struct Backlog {
    /// Tasks due when the node started.
    pub tasks: usize,
    /// Seconds to enqueue them (no node running).
    pub enqueue_s: f64,
    /// Seconds from assignment until the last ran.
    pub drain_s: f64,
    /// Tasks per second over `drain_s`.
    pub tasks_per_s: f64,
    /// Executions beyond one per task (at least).
    pub duplicates: u64,
    /// The node's peak resident set, bytes.
    pub peak_rss_bytes: u64,
}

/// Draining one busy partition whose orderingIds each hold more due tasks than they may keep in
/// memory, so that most are deferred and read back.
#[derive(Debug, Clone)]
pub struct BusyPartition {
    /// Tasks due when the node started, all in one partition.
    pub tasks: usize,
    /// Their orderingIds.
    pub ordering_ids: usize,
    /// Seconds from assignment until the last ran.
    pub drain_s: f64,
    /// Tasks per second over `drain_s`.
    pub tasks_per_s: f64,
    /// Executions beyond one per task (at least).
    pub duplicates: u64,
}

/// One group finishing: every member due at once, then its join.
#[derive(Debug, Clone)]
pub struct BigGroup {
    /// Members (each with the total).
    pub members: u32,
    /// Seconds from assignment until the join ran.
    pub drain_s: f64,
    /// Members per second over `drain_s`.
    pub members_per_s: f64,
    /// Executions beyond one per member and one join (at least).
    pub duplicates: u64,
}

/// Schedules `tasks` with `make(i)`, `PRODUCE_CONCURRENCY` at a time; fails on any error.
pub(crate) async fn enqueue(
    scheduler: &Scheduler,
    tasks: usize,
    make: impl Fn(usize) -> scheduler_client::Task,
) -> Result<(), BenchError> {
    let failures: Vec<String> = futures::stream::iter(0..tasks)
        .map(|i| scheduler.schedule_task(make(i)))
        .buffer_unordered(PRODUCE_CONCURRENCY)
        .filter_map(|r| futures::future::ready(r.err().map(|e| e.to_string())))
        .collect()
        .await;
    match failures.first() {
        None => Ok(()),
        Some(first) => Err(BenchError::Insane(format!(
            "{} of {tasks} tasks were not accepted, e.g. {first}",
            failures.len()
        ))),
    }
}

/// Polls `condition` every 20 ms until it holds; fails after `timeout` saying `what`.
pub(crate) async fn wait_until(
    timeout: Duration,
    what: &str,
    mut condition: impl FnMut() -> bool,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + timeout;
    while !condition() {
        if Instant::now() > deadline {
            return Err(BenchError::Timeout(format!("{what} (after {timeout:?})")));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

pub(crate) fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

pub(crate) fn node_error(e: scheduler_core::NodeError) -> BenchError {
    BenchError::Setup(format!("node: {e}"))
}

/// The value at quantile `q` of sorted `values`.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The loads lateness is measured at, as fractions of the measured throughput: issue 32's
/// half and 90%, and 70% between them, to say where a steady load starts to fall behind.
pub const PUNCTUALITY_LOADS: [f64; 3] = [0.5, 0.7, 0.9];

/// Runs `tasks` tasks due now over `ordering_ids` orderingIds through one node, then, on the
/// same node, tasks `PUNCTUALITY_LEAD` ahead at each of [`PUNCTUALITY_LOADS`] of the measured
/// rate for `punctual_for`.
pub async fn throughput_and_punctuality(
    tasks: usize,
    ordering_ids: usize,
    punctual_for: Duration,
) -> Result<(Throughput, Vec<Punctuality>), BenchError> {
    let env = TestEnv::new("bench_tput", PARTITIONS).await;
    let probe = Probe::new(PARTITIONS, true);
    let node = env
        .start_sole_node(env.settings(SchedulingSettings::default()), probe.clone())
        .await;
    let scheduler = env.scheduler(Duration::from_secs(10));

    let processes = cpu::stack_processes();
    let cassandra = cpu::pid_of(&processes, cpu::CASSANDRA);
    let cpu_before = CpuSnapshot::take(&processes);
    let threads_before = ThreadSnapshot::take(cassandra);
    let started = Utc::now();
    enqueue(&scheduler, tasks, |i| {
        bench_task(
            format!("order-{}", i % ordering_ids),
            Utc::now(),
            format!("tput-{i}"),
        )
    })
    .await?;
    let enqueue_s = seconds_between(started, Utc::now());
    let limit = Duration::from_secs(120).max(Duration::from_millis(tasks as u64 * 5));
    wait_until(limit, "every throughput task to run", || {
        probe.executed() >= tasks as u64
    })
    .await?;
    let cpu_per_task_ms = CpuSnapshot::take(&processes).per_task_since(&cpu_before, tasks);
    let cassandra_threads_ms =
        ThreadSnapshot::take(cassandra).per_task_since(&threads_before, tasks);
    let last = probe.last().unwrap_or(started);
    let total_s = seconds_between(started, last);
    let samples = probe.samples();
    let distinct: HashSet<&str> = samples.iter().map(|s| s.uniqueness_key.as_str()).collect();
    let metrics = node.metrics();
    let throughput = Throughput {
        tasks,
        ordering_ids,
        enqueue_s,
        total_s,
        tasks_per_s: tasks as f64 / total_s,
        duplicates: (samples.len() - distinct.len()) as u64,
        statements_per_task: per_task(&metrics, STATEMENTS, tasks),
        rows_per_task: per_task(&metrics, "scheduler_cql_rows_total", tasks),
        cpu_per_task_ms,
        cassandra_threads_ms,
    };

    let mut lateness = Vec::new();
    for load in PUNCTUALITY_LOADS {
        let rate = throughput.tasks_per_s * load;
        let phase = Phase {
            scheduler: &scheduler,
            probe: &probe,
            node: &node,
            processes: &processes,
        };
        let measured = punctuality(phase, rate, ordering_ids, punctual_for).await?;
        lateness.push(Punctuality { load, ..measured });
    }
    node.shutdown().await.map_err(node_error)?;
    Ok((throughput, lateness))
}

/// What a punctuality phase runs on and measures.
struct Phase<'a> {
    scheduler: &'a Scheduler,
    probe: &'a Probe,
    node: &'a SchedulerNode,
    processes: &'a [cpu::Measured],
}

async fn punctuality(
    phase: Phase<'_>,
    rate_per_s: f64,
    ordering_ids: usize,
    duration: Duration,
) -> Result<Punctuality, BenchError> {
    let Phase {
        scheduler,
        probe,
        node,
        processes,
    } = phase;
    probe.clear_samples();
    let before = probe.executed();
    let statements_before = total(&by_operation(&node.metrics(), STATEMENTS));
    let cassandra = cpu::pid_of(processes, cpu::CASSANDRA);
    let cpu_before = CpuSnapshot::take(processes);
    let threads_before = ThreadSnapshot::take(cassandra);
    let started = Utc::now();
    let tick = Duration::from_millis(10);
    let per_tick = rate_per_s * tick.as_secs_f64();
    let mut interval = tokio::time::interval(tick);
    let (mut owed, mut sent) = (0.0f64, 0usize);
    let mut sends = futures::stream::FuturesUnordered::new();
    let mut failures = 0usize;
    let until = Instant::now() + duration;
    while Instant::now() < until {
        tokio::select! {
            _ = interval.tick() => {
                owed += per_tick;
                while owed >= 1.0 {
                    owed -= 1.0;
                    let task = bench_task(
                        format!("order-{}", sent % ordering_ids),
                        Utc::now() + PUNCTUALITY_LEAD,
                        format!("punct-{sent}"),
                    );
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
    if failures > 0 {
        return Err(BenchError::Insane(format!(
            "{failures} punctuality tasks were not accepted"
        )));
    }
    wait_until(
        Duration::from_secs(60),
        "every punctuality task to run",
        || probe.executed() >= before + sent as u64,
    )
    .await?;
    let cpu_per_task_ms = CpuSnapshot::take(processes).per_task_since(&cpu_before, sent);
    let cassandra_threads_ms =
        ThreadSnapshot::take(cassandra).per_task_since(&threads_before, sent);
    let statements = total(&by_operation(&node.metrics(), STATEMENTS)) - statements_before;
    // From the first task's time (`PUNCTUALITY_LEAD` after the first send) to the last run.
    let first_due = started + PUNCTUALITY_LEAD;
    let ran_s = seconds_between(first_due, probe.last().unwrap_or(first_due));
    let mut lateness: Vec<f64> = probe
        .samples()
        .iter()
        .filter(|s| s.uniqueness_key.starts_with("punct-"))
        .map(|s| s.lateness_us as f64 / 1000.0)
        .collect();
    lateness.sort_by(f64::total_cmp);
    Ok(Punctuality {
        load: 0.5,
        rate_per_s,
        tasks: lateness.len(),
        p50_ms: quantile(&lateness, 0.50),
        p99_ms: quantile(&lateness, 0.99),
        p999_ms: quantile(&lateness, 0.999),
        max_ms: lateness.last().copied().unwrap_or(f64::NAN),
        ran_per_s: sent as f64 / ran_s,
        statements_per_task: statements as f64 / sent.max(1) as f64,
        cpu_per_task_ms,
        cassandra_threads_ms,
    })
}

/// One orderingId per partition of a `partitions`-partition topic.
fn ordering_id_per_partition(prefix: &str, partitions: u32) -> BTreeMap<i32, String> {
    let mut ids = BTreeMap::new();
    let mut n = 0;
    while ids.len() < partitions as usize {
        let id = format!("{prefix}-{n}");
        ids.entry(partition_for(&id, partitions)).or_insert(id);
        n += 1;
    }
    ids
}

/// Two nodes split the partitions; tasks come due every 50 ms on every partition; one node
/// leaves (`leave`); measures until the other has run a task of each of its partitions.
pub async fn handoff(leave: Leave, window: Duration) -> Result<Handoff, BenchError> {
    let env = TestEnv::new("bench_handoff", PARTITIONS).await;
    let settings = env.settings(SchedulingSettings::default());
    let mut leaving = ChildNode::spawn(&settings, PARTITIONS)?;
    leaving
        .wait_for(
            Duration::from_secs(60),
            "the first node to own every partition",
            |p| p.owned.len() == PARTITIONS as usize,
        )
        .await?;
    let probe = Probe::new(PARTITIONS, true);
    let staying = SchedulerNode::start(settings, probe.clone())
        .await
        .map_err(node_error)?;
    let split = |theirs: &[i32], ours: &[i32]| {
        !theirs.is_empty() && !ours.is_empty() && theirs.len() + ours.len() == PARTITIONS as usize
    };
    wait_until(
        Duration::from_secs(60),
        "the two nodes to split the partitions",
        || split(&leaving.progress().owned, &staying.owned_partitions()),
    )
    .await?;
    let moved: Vec<i32> = leaving.progress().owned;

    let scheduler = env.scheduler(Duration::from_secs(10));
    let ids = ordering_id_per_partition("handoff", PARTITIONS);
    let first_due = Utc::now() + TimeDelta::seconds(1);
    let per_partition =
        (window.as_millis() / HANDOFF_PROBE_GAP.num_milliseconds() as u128) as usize;
    let probes: Vec<_> = ids
        .values()
        .flat_map(|id| {
            (0..per_partition).map(move |i| {
                bench_task(
                    id.clone(),
                    first_due + HANDOFF_PROBE_GAP * i as i32,
                    format!("handoff-{i}"),
                )
            })
        })
        .collect();
    enqueue(&scheduler, probes.len(), |i| probes[i].clone()).await?;
    // Let both nodes run their partitions' tasks for a while, then take one away.
    tokio::time::sleep((first_due - Utc::now()).to_std().unwrap_or_default() + window / 4).await;
    let left_at = Utc::now();
    let leaving_exit = match leave {
        Leave::Clean => {
            leaving.begin_stop()?;
            Some(leaving)
        }
        Leave::Kill => {
            leaving.kill().await?;
            None
        }
    };
    let back_on = |partition: i32| {
        probe
            .samples()
            .iter()
            .filter(|s| s.partition == partition && s.started > left_at)
            .map(|s| s.started)
            .min()
    };
    wait_until(
        window / 2,
        "every moved partition to run tasks on the other node",
        || moved.iter().all(|p| back_on(*p).is_some()),
    )
    .await?;
    let resumed: Vec<f64> = moved
        .iter()
        .filter_map(|p| back_on(*p))
        .map(|t| seconds_between(left_at, t))
        .collect();
    if let Some(node) = leaving_exit {
        node.wait_exit(Duration::from_secs(30)).await?;
    }
    staying.shutdown().await.map_err(node_error)?;
    Ok(Handoff {
        leave,
        partitions_moved: moved.len(),
        seconds: resumed.iter().copied().fold(0.0, f64::max),
        first_partition_s: resumed.iter().copied().fold(f64::INFINITY, f64::min),
    })
}

/// `tasks` pending tasks in one partition (one already due, the rest 100-200 s ahead) are
/// written straight to Cassandra; a node process is then assigned the partition.
/// `max_in_flight_tasks` is raised well above `tasks` so that the whole schedule can be held,
/// and its load timed.
pub async fn cold_load(tasks: usize) -> Result<ColdLoad, BenchError> {
    let env = TestEnv::new("bench_cold", 1).await;
    let store = env.store().await;
    let now = Utc::now();
    let spread_ms = 100_000 / tasks.max(1) as i64;
    let schedule: Vec<_> = (0..tasks)
        .map(|i| {
            let at = if i == 0 {
                now
            } else {
                now + TimeDelta::seconds(100) + TimeDelta::microseconds(i as i64 * spread_ms * 1000)
            };
            bench_task(format!("cold-{}", i % 1000), at, format!("cold-{i}"))
        })
        .collect();
    for chunk in schedule.chunks(10_000) {
        store
            .persist(0, chunk.to_vec())
            .await
            .map_err(|e| BenchError::Setup(e.to_string()))?;
    }
    let settings = Settings {
        scheduling: SchedulingSettings {
            // Loads wait until in-flight tasks fall below 3/4 of the bound: keep it out of reach.
            max_in_flight_tasks: tasks * 2,
            ..SchedulingSettings::default()
        },
        ..env.settings(SchedulingSettings::default())
    };
    let mut node = ChildNode::spawn(&settings, 1)?;
    let loaded = node
        .wait_for(
            Duration::from_secs(120),
            "every pending task to be loaded",
            |p| p.in_memory + p.executed >= tasks as u64 && p.first_ms != 0,
        )
        .await?;
    let peak_rss_bytes = node.peak_rss_bytes()?;
    let loaded_at = Utc::now();
    node.stop(Duration::from_secs(30)).await?;
    let assigned = DateTime::from_timestamp_millis(loaded.assigned_ms).unwrap_or(loaded_at);
    let first = DateTime::from_timestamp_millis(loaded.first_ms).unwrap_or(loaded_at);
    Ok(ColdLoad {
        tasks,
        first_due_ms: seconds_between(assigned, first) * 1000.0,
        all_loaded_s: seconds_between(assigned, loaded_at),
        peak_rss_bytes,
    })
}

/// `tasks` tasks due now are enqueued while no node runs; then a node process drains them.
pub async fn backlog(tasks: usize) -> Result<Backlog, BenchError> {
    let env = TestEnv::new("bench_backlog", PARTITIONS).await;
    let scheduler = Arc::new(env.scheduler(Duration::from_secs(10)));
    let started = Utc::now();
    enqueue(&scheduler, tasks, |i| {
        bench_task(
            format!("order-{}", i % 10_000),
            Utc::now(),
            format!("backlog-{i}"),
        )
    })
    .await?;
    let enqueue_s = seconds_between(started, Utc::now());
    let mut node = ChildNode::spawn(&env.settings(SchedulingSettings::default()), PARTITIONS)?;
    let limit = Duration::from_secs(120).max(Duration::from_millis(tasks as u64 * 2));
    let done = node
        .wait_for(limit, "the backlog to drain", |p| {
            p.executed >= tasks as u64
        })
        .await?;
    let peak_rss_bytes = node.peak_rss_bytes()?;
    node.stop(Duration::from_secs(30)).await?;
    let assigned = DateTime::from_timestamp_millis(done.assigned_ms).unwrap_or(started);
    let last = DateTime::from_timestamp_millis(done.last_ms).unwrap_or(started);
    let drain_s = seconds_between(assigned, last);
    Ok(Backlog {
        tasks,
        enqueue_s,
        drain_s,
        tasks_per_s: tasks as f64 / drain_s,
        duplicates: done.executed.saturating_sub(tasks as u64),
        peak_rss_bytes,
    })
}

/// `tasks` tasks due now in one partition over `ordering_ids` orderingIds, each orderingId's
/// tasks together in the schedule (due at one millisecond of their own, in the last minute), are
/// written straight to Cassandra; a node process with the default settings then drains them. An
/// orderingId keeps at most `max_queued_per_ordering` (32) in memory: the rest are deferred and
/// read back, so this measures the read-back (issue 30, defect 10: reading the partition's
/// schedule from each deferred task on had run 47,518 of 120,000 after 25 minutes).
pub async fn busy_partition(
    tasks: usize,
    ordering_ids: usize,
) -> Result<BusyPartition, BenchError> {
    let env = TestEnv::new("bench_busy", 1).await;
    let store = env.store().await;
    let start = Utc::now() - TimeDelta::seconds(60);
    let ordering_ids = ordering_ids.max(1);
    let schedule: Vec<_> = (0..tasks)
        .map(|i| {
            let ordering = i % ordering_ids;
            let at = start + TimeDelta::milliseconds(ordering as i64);
            bench_task(format!("busy-{ordering}"), at, format!("busy-{i}"))
        })
        .collect();
    for chunk in schedule.chunks(10_000) {
        store
            .persist(0, chunk.to_vec())
            .await
            .map_err(|e| BenchError::Setup(e.to_string()))?;
    }
    let mut node = ChildNode::spawn(&env.settings(SchedulingSettings::default()), 1)?;
    let limit = Duration::from_secs(120).max(Duration::from_millis(tasks as u64 * 10));
    let done = node
        .wait_for(limit, "the busy partition to drain", |p| {
            p.executed >= tasks as u64
        })
        .await?;
    node.stop(Duration::from_secs(30)).await?;
    let now = Utc::now();
    let assigned = DateTime::from_timestamp_millis(done.assigned_ms).unwrap_or(now);
    let last = DateTime::from_timestamp_millis(done.last_ms).unwrap_or(now);
    let drain_s = seconds_between(assigned, last);
    Ok(BusyPartition {
        tasks,
        ordering_ids,
        drain_s,
        tasks_per_s: tasks as f64 / drain_s,
        duplicates: done.executed.saturating_sub(tasks as u64),
    })
}

/// One group of `members` tasks (each carrying the total, each its own orderingId), all due
/// now, enqueued while no node runs; a node process then runs them and the join. Each member's
/// final step finds out whether the group finished (issue 30, defect 9: it read the whole group,
/// so a group's members read O(N²) rows; they climb the completion tree now).
pub async fn big_group(members: u32) -> Result<BigGroup, BenchError> {
    let env = TestEnv::new("bench_group", PARTITIONS).await;
    let scheduler = Arc::new(env.scheduler(Duration::from_secs(10)));
    let now = Utc::now();
    enqueue(&scheduler, members as usize, |i| {
        let index = u32::try_from(i).unwrap_or(u32::MAX).saturating_add(1);
        bench_task(format!("member-{index}"), now, "m".into())
            .in_group(scheduler_client::GroupMember::new("bench-group", index).of(members))
    })
    .await?;
    let mut node = ChildNode::spawn(&env.settings(SchedulingSettings::default()), PARTITIONS)?;
    let runs = u64::from(members) + 1;
    let limit = Duration::from_secs(600);
    let done = node
        .wait_for(limit, "the group's members and its join", |p| {
            p.executed >= runs
        })
        .await?;
    node.stop(Duration::from_secs(30)).await?;
    let assigned = DateTime::from_timestamp_millis(done.assigned_ms).unwrap_or(now);
    let last = DateTime::from_timestamp_millis(done.last_ms).unwrap_or(now);
    let drain_s = seconds_between(assigned, last);
    Ok(BigGroup {
        members,
        drain_s,
        members_per_s: f64::from(members) / drain_s,
        duplicates: done.executed.saturating_sub(runs),
    })
}

/// The node's counter `name` (`scheduler_cql_statements_total`, `scheduler_cql_rows_total`)
/// by operation, per task of `tasks`, most first.
pub(crate) fn per_task(metrics: &str, name: &str, tasks: usize) -> Vec<(String, f64)> {
    by_operation(metrics, name)
        .into_iter()
        .map(|(operation, n)| (operation, n as f64 / tasks.max(1) as f64))
        .collect()
}

/// [`per_task`] of what the node ran since `before` (an earlier scrape of its metrics).
pub(crate) fn per_task_since(
    metrics: &str,
    before: &str,
    name: &str,
    tasks: usize,
) -> Vec<(String, f64)> {
    let earlier: std::collections::HashMap<String, u64> =
        by_operation(before, name).into_iter().collect();
    let mut counts: Vec<(String, f64)> = by_operation(metrics, name)
        .into_iter()
        .map(|(operation, n)| {
            let since = n.saturating_sub(earlier.get(&operation).copied().unwrap_or(0));
            (operation, since as f64 / tasks.max(1) as f64)
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    counts.sort_by(|a, b| b.1.total_cmp(&a.1));
    counts
}

/// The node's count of CQL statements (requests), by operation.
pub(crate) const STATEMENTS: &str = "scheduler_cql_statements_total";

/// The sum of a count by operation.
fn total(counts: &[(String, u64)]) -> u64 {
    counts.iter().map(|(_, n)| n).sum()
}

/// The node's counter `name` by operation, most first.
fn by_operation(metrics: &str, name: &str) -> Vec<(String, u64)> {
    let prefix = format!("{name}{{operation=\"");
    let mut counts: Vec<(String, u64)> = metrics
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(prefix.as_str())?;
            let (operation, value) = rest.split_once("\"}")?;
            Some((
                operation.to_string(),
                value.trim().parse::<f64>().ok()? as u64,
            ))
        })
        .collect();
    counts.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    counts
}
