//! The workload every system gets, the same as the engine's own benchmark: a steady phase of
//! tasks scheduled `LEAD` ahead at a fixed rate (lateness), then a burst of tasks due now
//! (throughput), both spread round-robin over `queues` serial queues (the engine's
//! orderingIds). A system plugs in through [`Enqueue`]; its handler calls [`Recorder::ran`].

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// How far ahead steady-phase tasks are scheduled (the engine's `PUNCTUALITY_LEAD`).
pub const LEAD: TimeDelta = TimeDelta::seconds(2);
/// Tasks per batch when the burst is enqueued with a system's batch insert.
pub const BURST_BATCH: usize = 1_000;
/// Burst batches in flight at once: one, so that batches commit in due-time order and a run
/// before an earlier task of its queue is the library's doing (concurrent batches can commit
/// a later batch first, and its tasks then rightly run before the earlier batch's).
pub const BURST_IN_FLIGHT: usize = 1;
/// How long the steady phase waits for its last tasks (as the engine's benchmark does).
const STEADY_WAIT: Duration = Duration::from_secs(60);
/// The pacing tick of the steady phase (as in the engine's benchmark).
const TICK: Duration = Duration::from_millis(10);

/// One task's payload: its sequence number within its phase.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchTask {
    /// Sequence number within the phase (0..count).
    pub n: u64,
    /// Whether it belongs to the burst (else the steady phase).
    pub burst: bool,
}

/// A task to enqueue: payload, serial queue and due time.
#[derive(Clone, Debug)]
pub struct NewTask {
    /// The payload.
    pub task: BenchTask,
    /// The serial queue (the engine's orderingId).
    pub queue: String,
    /// When it is due.
    pub run_at: DateTime<Utc>,
}

/// How a system enqueues tasks.
pub trait Enqueue: Send + Sync + 'static {
    /// Enqueues one task (the steady phase: one call per task, as the engine's client does).
    fn add_one(&self, task: NewTask) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// Enqueues many at once with the system's batch insert, if it has one.
    fn add_many(&self, tasks: Vec<NewTask>) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// One handler run.
#[derive(Clone, Copy, Debug)]
struct Run {
    n: u64,
    burst: bool,
    lateness_us: i64,
    at: Instant,
}

/// What the handlers ran, in memory.
#[derive(Debug, Default)]
pub struct Recorder {
    runs: Mutex<Vec<Run>>,
}

impl Recorder {
    /// Records a handler run of `task`, due at `run_at`, starting now.
    pub fn ran(&self, task: &BenchTask, run_at: DateTime<Utc>) {
        let lateness_us = (Utc::now() - run_at).num_microseconds().unwrap_or(i64::MAX);
        let run = Run {
            n: task.n,
            burst: task.burst,
            lateness_us,
            at: Instant::now(),
        };
        // A poisoned lock only means a handler panicked mid-push: the data is still usable.
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.push(run);
    }

    fn phase(&self, burst: bool) -> Vec<Run> {
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.iter().filter(|r| r.burst == burst).copied().collect()
    }

    fn count(&self, burst: bool) -> usize {
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.iter().filter(|r| r.burst == burst).count()
    }
}

/// The workload's sizes.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Steady-phase tasks per second.
    pub rate: f64,
    /// If set, the steady phase runs again at this rate.
    pub rate_high: Option<f64>,
    /// Steady-phase duration.
    pub steady: Duration,
    /// Burst tasks.
    pub burst: usize,
    /// Serial queues.
    pub queues: usize,
}

fn queue_of(i: u64, queues: usize) -> String {
    format!("q-{}", i % queues.max(1) as u64)
}

/// The two phases; each runs on a clean system (a new schema and worker), so that tasks a
/// phase left behind never delay the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Tasks `LEAD` ahead at `rate` for `steady`: lateness.
    Steady,
    /// `burst` tasks due now, enqueued in batches: throughput.
    Burst,
}

/// Runs `phase` against `system` (whose handlers record into `recorder`); returns its figures.
pub async fn run(
    phase: Phase,
    system: Arc<impl Enqueue>,
    recorder: &Recorder,
    sizes: Sizes,
) -> anyhow::Result<Value> {
    match phase {
        Phase::Steady => steady(&system, recorder, sizes).await,
        Phase::Burst => burst(&system, recorder, sizes).await,
    }
}

async fn steady(
    system: &Arc<impl Enqueue>,
    recorder: &Recorder,
    sizes: Sizes,
) -> anyhow::Result<Value> {
    let per_tick = sizes.rate * TICK.as_secs_f64();
    let mut interval = tokio::time::interval(TICK);
    let (mut owed, mut sent) = (0.0f64, 0u64);
    let mut sends = tokio::task::JoinSet::new();
    let mut failures = Vec::new();
    let until = Instant::now() + sizes.steady;
    while Instant::now() < until {
        tokio::select! {
            _ = interval.tick() => {
                owed += per_tick;
                while owed >= 1.0 {
                    owed -= 1.0;
                    let task = NewTask {
                        task: BenchTask { n: sent, burst: false },
                        queue: queue_of(sent, sizes.queues),
                        run_at: Utc::now() + LEAD,
                    };
                    let system = system.clone();
                    sends.spawn(async move { system.add_one(task).await });
                    sent += 1;
                }
            }
            Some(done) = sends.join_next(), if !sends.is_empty() => {
                if let Err(e) = done.context("an enqueue task panicked")? {
                    failures.push(e);
                }
            }
        }
    }
    while let Some(done) = sends.join_next().await {
        if let Err(e) = done.context("an enqueue task panicked")? {
            failures.push(e);
        }
    }
    // A task the library refused (its pool timed out, say) never runs: it counts as missing,
    // infinitely late, and the run goes on, as a producer would see it.
    let refused = failures.len() as u64;
    let refused_example = failures.first().map(|e| format!("{e:#}"));
    let accepted = sent.saturating_sub(refused) as usize;
    let timed_out = wait_for(recorder, false, accepted, STEADY_WAIT).await;
    let runs = recorder.phase(false);
    let (duplicates, missing) = check(&runs, sent);
    let out_of_order = out_of_order(&runs, sizes.queues);
    // A task that never ran counts as infinitely late: a percentile that falls on one is null.
    let mut lateness: Vec<f64> = runs.iter().map(|r| r.lateness_us as f64 / 1000.0).collect();
    lateness.extend(std::iter::repeat_n(f64::INFINITY, missing as usize));
    lateness.sort_by(f64::total_cmp);
    Ok(json!({
        "rate_per_s": sizes.rate,
        "seconds": sizes.steady.as_secs_f64(),
        "lead_ms": LEAD.num_milliseconds(),
        "queues": sizes.queues,
        "tasks": sent,
        "refused": refused,
        "refused_example": refused_example,
        "runs": runs.len(),
        "duplicates": duplicates,
        "missing": missing,
        "out_of_order": out_of_order,
        "timed_out": timed_out,
        "wait_limit_s": STEADY_WAIT.as_secs(),
        "p50_ms": quantile(&lateness, 0.50),
        "p99_ms": quantile(&lateness, 0.99),
        "p999_ms": quantile(&lateness, 0.999),
        "max_ms": lateness.last().copied().filter(|v| v.is_finite()),
        "min_ms": lateness.first().copied().filter(|v| v.is_finite()),
    }))
}

async fn burst(
    system: &Arc<impl Enqueue>,
    recorder: &Recorder,
    sizes: Sizes,
) -> anyhow::Result<Value> {
    let tasks: Vec<NewTask> = (0..sizes.burst as u64)
        .map(|n| NewTask {
            task: BenchTask { n, burst: true },
            queue: queue_of(n, sizes.queues),
            run_at: Utc::now(),
        })
        .collect();
    let mut batches = tasks.chunks(BURST_BATCH).map(<[NewTask]>::to_vec);
    let cpu_before = crate::cpu::CpuSnapshot::take();
    let started = Instant::now();
    let mut in_flight = tokio::task::JoinSet::new();
    loop {
        while in_flight.len() < BURST_IN_FLIGHT {
            let Some(batch) = batches.next() else { break };
            let system = system.clone();
            in_flight.spawn(async move { system.add_many(batch).await });
        }
        match in_flight.join_next().await {
            Some(done) => done
                .context("an enqueue task panicked")?
                .context("burst enqueue")?,
            None => break,
        }
    }
    let enqueue_s = started.elapsed().as_secs_f64();
    let limit = Duration::from_secs(120).max(Duration::from_millis(sizes.burst as u64 * 5));
    let timed_out = wait_for(recorder, true, sizes.burst, limit).await;
    let cpu = cpu_before.per_task_since(sizes.burst);
    let runs = recorder.phase(true);
    let (duplicates, missing) = check(&runs, sizes.burst as u64);
    let out_of_order = out_of_order(&runs, sizes.queues);
    let last = runs.iter().map(|r| r.at).max().unwrap_or(started);
    let total_s = last.saturating_duration_since(started).as_secs_f64();
    Ok(json!({
        "tasks": sizes.burst,
        "queues": sizes.queues,
        "batch": BURST_BATCH,
        "batches_in_flight": BURST_IN_FLIGHT,
        "enqueue_s": enqueue_s,
        "total_s": total_s,
        "jobs_per_s": if timed_out || total_s <= 0.0 { None } else { Some(sizes.burst as f64 / total_s) },
        "runs": runs.len(),
        "duplicates": duplicates,
        "missing": missing,
        "out_of_order": out_of_order,
        "timed_out": timed_out,
        "wait_limit_s": limit.as_secs(),
        "cpu_ms_per_task": cpu,
    }))
}

/// Waits until `expected` runs of a phase were recorded; true if `limit` passed first.
async fn wait_for(recorder: &Recorder, burst: bool, expected: usize, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while recorder.count(burst) < expected {
        if Instant::now() > deadline {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// (runs beyond one per task, tasks never run) among `runs` of tasks 0..tasks.
fn check(runs: &[Run], tasks: u64) -> (usize, u64) {
    let distinct: HashSet<u64> = runs.iter().map(|r| r.n).filter(|n| *n < tasks).collect();
    (runs.len() - distinct.len(), tasks - distinct.len() as u64)
}

/// Runs that started before an earlier task of their queue (tasks are numbered in due-time
/// order, round-robin over the queues): the engine runs each orderingId's tasks in order.
fn out_of_order(runs: &[Run], queues: usize) -> usize {
    let mut by_start: Vec<&Run> = runs.iter().collect();
    by_start.sort_by_key(|r| r.at);
    let mut highest: Vec<Option<u64>> = vec![None; queues.max(1)];
    let mut late = 0;
    for run in by_start {
        let seen = &mut highest[(run.n % queues.max(1) as u64) as usize];
        match *seen {
            Some(h) if run.n < h => late += 1,
            _ => *seen = Some(run.n),
        }
    }
    late
}

/// The value at quantile `q` of sorted `values` (the engine's benchmark's definition).
/// None if there is none or it is infinite (a task that never ran).
fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1]).filter(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_follow_the_engines_definition() {
        let values: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(quantile(&values, 0.5), Some(500.0));
        assert_eq!(quantile(&values, 0.99), Some(990.0));
        assert_eq!(quantile(&values, 0.999), Some(999.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn duplicates_and_missing_are_counted() {
        let run = |n| Run {
            n,
            burst: false,
            lateness_us: 0,
            at: Instant::now(),
        };
        let runs = [run(0), run(1), run(1), run(3)];
        assert_eq!(check(&runs, 4), (1, 1));
    }

    #[test]
    fn runs_before_an_earlier_task_of_their_queue_are_out_of_order() {
        let start = Instant::now();
        let run = |n, ms| Run {
            n,
            burst: true,
            lateness_us: 0,
            at: start + Duration::from_millis(ms),
        };
        // Two queues: 0, 2, 4 in queue 0; 1, 3 in queue 1. Task 2 starts after task 4.
        let runs = [run(0, 0), run(1, 1), run(4, 2), run(3, 3), run(2, 4)];
        assert_eq!(out_of_order(&runs, 2), 1);
        assert_eq!(quantile(&[1.0, f64::INFINITY], 0.99), None);
    }
}
