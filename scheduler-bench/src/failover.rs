//! Failover: three node processes share the partitions under a steady load; one leaves cleanly
//! (SIGTERM), and once the other two have split its partitions one of them is killed (SIGKILL).
//! Each node writes every execution to a file of its own (see
//! [`Probe::logging_calls`](crate::probe::Probe::logging_calls)); when the load has stopped and
//! every task has run, the bench reads the files and checks each task: run at least once, never
//! before its time, and, per orderingId, in schedule order. It measures how late the tasks of the
//! moved partitions ran after each leave.
//!
//! A task counts as run if any node's file has it. A node writes the line before the call
//! returns, so a task the engine counts as run has its line even on a killed node; a task whose
//! line was written but whose end was not recorded runs again on the new owner and counts as a
//! duplicate (at least once allows it). A task's lateness and order are those of its first
//! execution, the earliest start in any file.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use futures::StreamExt;
use it_tests::engine::TestEnv;
use scheduler_client::{partition_for, Scheduler};
use scheduler_core::settings::SchedulingSettings;

use crate::ceilings::bench_task;
use crate::child::{ChildNode, ExecutionFiles};
use crate::scenarios::{quantile, wait_until};
use crate::BenchError;

/// Tasks per second when the run did not measure the engine's half-load rate.
pub const DEFAULT_RATE: f64 = 500.0;
/// Tasks per second at most in the quick run.
pub const QUICK_RATE: f64 = 200.0;
/// How long the load runs in the quick run (at least; see [`failover`]).
pub const QUICK_WINDOW: Duration = Duration::from_secs(30);
/// How long the load runs in the full run (at least).
pub const FULL_WINDOW: Duration = Duration::from_secs(90);
/// Partitions of the topic, split between the three nodes.
const PARTITIONS: u32 = 8;
/// Node processes.
const NODES: usize = 3;
/// OrderingIds the load goes round.
const ORDERING_IDS: usize = 1_000;
/// How far ahead each task is scheduled.
const LEAD: TimeDelta = TimeDelta::seconds(2);
/// The moved partitions' tasks measured after a leave: those due this long after the signal.
const MOVED_WINDOW: TimeDelta = TimeDelta::seconds(10);
/// How long after the load the bench waits for every task to run before counting the rest lost.
const COMPLETION_LIMIT: Duration = Duration::from_secs(60);
/// How long nodes may take to join, split the partitions or leave.
const GROUP_LIMIT: Duration = Duration::from_secs(60);

/// The lateness of one leave's moved partitions.
#[derive(Debug, Clone)]
pub struct Moved {
    /// Partitions the leaving node owned at the signal.
    pub partitions: Vec<i32>,
    /// Seconds from the start of the load to the signal.
    pub signal_s: f64,
    /// Tasks of those partitions due in the `MOVED_WINDOW` (10 s) after the signal.
    pub tasks: usize,
    /// Their lateness (first execution), 99.9th percentile, in milliseconds.
    pub p999_ms: f64,
    /// Their lateness, maximum.
    pub max_ms: f64,
}

/// The failover scenario's figures.
#[derive(Debug, Clone)]
pub struct Failover {
    /// Tasks per second scheduled.
    pub rate_per_s: f64,
    /// Seconds the load ran.
    pub load_s: f64,
    /// Tasks scheduled (each acknowledged by Kafka).
    pub tasks: usize,
    /// OrderingIds the tasks were spread over.
    pub ordering_ids: usize,
    /// The clean leave (SIGTERM).
    pub clean: Moved,
    /// The kill (SIGKILL).
    pub kill: Moved,
    /// Lateness of every task's first execution: median, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Maximum.
    pub max_ms: f64,
    /// Tasks that never ran (within `COMPLETION_LIMIT` after the load).
    pub lost: usize,
    /// Tasks that ran before their time.
    pub early: usize,
    /// Tasks whose first execution started before that of the task scheduled before them in
    /// their orderingId.
    pub out_of_order: usize,
    /// Executions beyond one per task.
    pub duplicates: u64,
    /// Where the executions files were kept (only when a check failed).
    pub kept: Option<PathBuf>,
}

impl Failover {
    /// Whether a correctness check failed (lost, early or out of order).
    pub fn failed(&self) -> bool {
        self.lost + self.early + self.out_of_order > 0
    }
}

/// Runs the scenario at `rate_per_s` for `window` (longer if the group takes longer to settle
/// after the clean leave): the clean leave a third of the way in, the kill at two thirds or
/// once the group has settled, whichever is later, and the load on for `MOVED_WINDOW` after the
/// kill at least.
pub async fn failover(rate_per_s: f64, window: Duration) -> Result<Failover, BenchError> {
    let env = TestEnv::new("bench_failover", PARTITIONS).await;
    let settings = env.settings(SchedulingSettings::default());
    let mut files = ExecutionFiles::create("failover")?;
    // One node first, so that it alone creates the keyspace's tables.
    let mut first = ChildNode::spawn_logging(&settings, PARTITIONS, &files.path(0))?;
    first
        .wait_for(GROUP_LIMIT, "the first node to own every partition", |p| {
            p.owned.len() == PARTITIONS as usize
        })
        .await?;
    let second = ChildNode::spawn_logging(&settings, PARTITIONS, &files.path(1))?;
    let third = ChildNode::spawn_logging(&settings, PARTITIONS, &files.path(2))?;
    let nodes = [first, second, third];
    wait_until(
        GROUP_LIMIT,
        "the three nodes to split the partitions",
        || split(&nodes.iter().collect::<Vec<_>>()),
    )
    .await?;

    let scheduler = env.scheduler(Duration::from_secs(10));
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let started_at = Utc::now();
    let plan = async {
        let result = leave_then_kill(nodes, started, window).await;
        stop.store(true, Ordering::SeqCst);
        result
    };
    let (produced, plan) = tokio::join!(produce(&scheduler, rate_per_s, &stop), plan);
    let load_s = started.elapsed().as_secs_f64();
    let (scheduled, plan) = (produced?, plan?);

    // Every task, until each has run or the limit passed; then the nodes leave, and the files
    // are read to their end.
    let mut ledger = Ledger::new(scheduled);
    let deadline = Instant::now() + COMPLETION_LIMIT;
    loop {
        ledger.read(&files)?;
        if ledger.unrun == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let stayed = plan.staying.stop(GROUP_LIMIT).await?;
    let left = plan.left.wait_exit(GROUP_LIMIT).await?;
    ledger.read(&files)?;
    let unlogged = stayed.unlogged + left.unlogged + plan.killed_unlogged;
    if unlogged > 0 || ledger.unreadable > 0 {
        files.keep();
        return Err(BenchError::Child(format!(
            "{unlogged} executions not written, {} lines not understood (files in {})",
            ledger.unreadable,
            files.dir.display()
        )));
    }

    let lateness = ledger.lateness_ms(|_| true);
    let mut figures = Failover {
        rate_per_s,
        load_s,
        tasks: ledger.tasks.len(),
        ordering_ids: ORDERING_IDS,
        clean: ledger.moved(started_at, plan.left_at, plan.left_partitions),
        kill: ledger.moved(started_at, plan.killed_at, plan.killed_partitions),
        p50_ms: quantile(&lateness, 0.50),
        p99_ms: quantile(&lateness, 0.99),
        p999_ms: quantile(&lateness, 0.999),
        max_ms: lateness.last().copied().unwrap_or(f64::NAN),
        lost: ledger.unrun,
        early: ledger.early(),
        out_of_order: ledger.out_of_order(),
        duplicates: ledger.duplicates(),
        kept: None,
    };
    if figures.failed() {
        files.keep();
        figures.kept = Some(files.dir.clone());
    }
    Ok(figures)
}

/// What [`leave_then_kill`] did, and the nodes still to stop.
struct Plan {
    /// The node that left cleanly (exiting, or gone).
    left: ChildNode,
    /// When it was sent SIGTERM.
    left_at: DateTime<Utc>,
    /// The partitions it owned then.
    left_partitions: Vec<i32>,
    /// When the killed node was sent SIGKILL.
    killed_at: DateTime<Utc>,
    /// The partitions it owned then.
    killed_partitions: Vec<i32>,
    /// The node that stays to the end.
    staying: ChildNode,
    /// Executions the killed node could not write, as it last reported.
    killed_unlogged: u64,
}

/// The first node leaves (SIGTERM) a third of the way into `window`; once the other two own
/// every partition between them, and not before two thirds nor before `MOVED_WINDOW` after the
/// leave (so that the kill does not delay the tasks measured for the leave), the second is
/// killed (SIGKILL); returns when `window` is over and `MOVED_WINDOW` has passed since the kill.
async fn leave_then_kill(
    nodes: [ChildNode; NODES],
    started: Instant,
    window: Duration,
) -> Result<Plan, BenchError> {
    let [left, killed, staying] = nodes;
    tokio::time::sleep_until((started + window / 3).into()).await;
    let left_partitions = left.progress().owned;
    let left_at = Utc::now();
    let left_instant = Instant::now();
    left.begin_stop()?;
    wait_until(
        GROUP_LIMIT,
        "the two other nodes to split the partitions",
        || split(&[&killed, &staying]),
    )
    .await?;
    let moved_window = MOVED_WINDOW.to_std().unwrap_or_default();
    let kill_at = (started + window * 2 / 3).max(left_instant + moved_window);
    tokio::time::sleep_until(kill_at.into()).await;
    let before_kill = killed.progress();
    let killed_at = Utc::now();
    let kill_instant = Instant::now();
    killed.kill().await?;
    let until = (started + window).max(kill_instant + moved_window);
    tokio::time::sleep_until(until.into()).await;
    Ok(Plan {
        killed_unlogged: before_kill.unlogged,
        left,
        left_at,
        left_partitions,
        killed_at,
        killed_partitions: before_kill.owned,
        staying,
    })
}

/// Whether `nodes` each own partitions and together own each partition once.
fn split(nodes: &[&ChildNode]) -> bool {
    let owned: Vec<Vec<i32>> = nodes.iter().map(|n| n.progress().owned).collect();
    let distinct: HashSet<i32> = owned.iter().flatten().copied().collect();
    owned.iter().all(|o| !o.is_empty())
        && distinct.len() == PARTITIONS as usize
        && owned.iter().map(Vec::len).sum::<usize>() == PARTITIONS as usize
}

/// The uniqueness key of task `i`.
fn key(i: usize) -> String {
    format!("failover-{i}")
}

/// The index of task `i`'s orderingId: the load goes round `ORDERING_IDS`, so each
/// orderingId's tasks are scheduled in increasing time, `ORDERING_IDS / rate` seconds apart.
fn ordering_of(i: usize) -> usize {
    i % ORDERING_IDS
}

/// The orderingId of index `ordering`.
fn ordering_id(ordering: usize) -> String {
    format!("failover-order-{ordering}")
}

/// Schedules tasks `LEAD` ahead at `rate_per_s` until `stop`; returns each task's scheduled time
/// (milliseconds since the epoch) by index, once every one was acknowledged.
async fn produce(
    scheduler: &Scheduler,
    rate_per_s: f64,
    stop: &AtomicBool,
) -> Result<Vec<i64>, BenchError> {
    let tick = Duration::from_millis(10);
    let per_tick = rate_per_s * tick.as_secs_f64();
    let mut interval = tokio::time::interval(tick);
    let mut owed = 0.0f64;
    let mut scheduled = Vec::new();
    let mut sends = futures::stream::FuturesUnordered::new();
    let mut failures = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        tokio::select! {
            _ = interval.tick() => {
                owed += per_tick;
                while owed >= 1.0 {
                    owed -= 1.0;
                    let i = scheduled.len();
                    let task = bench_task(
                        ordering_id(ordering_of(i)),
                        Utc::now() + LEAD,
                        key(i),
                    );
                    scheduled.push(task.scheduled_time.timestamp_millis());
                    sends.push(scheduler.schedule_task(task));
                }
            }
            Some(result) = sends.next(), if !sends.is_empty() => {
                if let Err(e) = result {
                    failures.push(e.to_string());
                }
            }
        }
    }
    while let Some(result) = sends.next().await {
        if let Err(e) = result {
            failures.push(e.to_string());
        }
    }
    match failures.first() {
        None => Ok(scheduled),
        Some(first) => Err(BenchError::Insane(format!(
            "{} of {} failover tasks were not accepted, e.g. {first}",
            failures.len(),
            scheduled.len()
        ))),
    }
}

/// Each task's executions, as read so far from the nodes' files.
struct Ledger {
    tasks: Vec<TaskRuns>,
    /// Each orderingId's partition.
    partitions: Vec<i32>,
    /// How far each node's file was read, and the start of a line not yet complete.
    read_to: Vec<(u64, Vec<u8>)>,
    /// Tasks with no execution yet.
    unrun: usize,
    /// Lines that are not a known task's execution.
    unreadable: usize,
}

/// One task's scheduled time and executions.
#[derive(Clone, Copy)]
struct TaskRuns {
    /// Milliseconds since the epoch.
    scheduled_ms: i64,
    /// The earliest start, microseconds since the epoch (`i64::MAX`: none yet).
    first_us: i64,
    /// Executions.
    runs: u32,
}

impl Ledger {
    fn new(scheduled: Vec<i64>) -> Ledger {
        Ledger {
            unrun: scheduled.len(),
            tasks: scheduled
                .into_iter()
                .map(|scheduled_ms| TaskRuns {
                    scheduled_ms,
                    first_us: i64::MAX,
                    runs: 0,
                })
                .collect(),
            partitions: (0..ORDERING_IDS)
                .map(|o| partition_for(&ordering_id(o), PARTITIONS))
                .collect(),
            read_to: vec![(0, Vec::new()); NODES],
            unreadable: 0,
        }
    }

    /// Reads what the nodes wrote since the last read (a file not yet created is empty). A line
    /// is counted once complete; a killed node's last line may stay incomplete, and its task's
    /// call did not return then, so the task runs again elsewhere.
    fn read(&mut self, files: &ExecutionFiles) -> Result<(), BenchError> {
        for node in 0..self.read_to.len() {
            let path = files.path(node);
            let mut bytes = std::mem::take(&mut self.read_to[node].1);
            let offset = self.read_to[node].0;
            let added = read_from(&path, offset, &mut bytes)?;
            self.read_to[node].0 = offset + added;
            let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |n| n + 1);
            let rest = bytes.split_off(complete);
            for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                self.record(line);
            }
            self.read_to[node].1 = rest;
        }
        Ok(())
    }

    /// One line: `key \t orderingId \t scheduled ms \t started µs \t partition`.
    fn record(&mut self, line: &[u8]) {
        let parsed = std::str::from_utf8(line).ok().and_then(|line| {
            let mut fields = line.split('\t');
            let index: usize = fields.next()?.strip_prefix("failover-")?.parse().ok()?;
            let _ordering = fields.next()?;
            let scheduled_ms: i64 = fields.next()?.parse().ok()?;
            let started_us: i64 = fields.next()?.parse().ok()?;
            Some((index, scheduled_ms, started_us))
        });
        let task = parsed.and_then(|(index, scheduled_ms, started_us)| {
            let task = self.tasks.get_mut(index)?;
            (task.scheduled_ms == scheduled_ms).then_some((task, started_us))
        });
        match task {
            None => self.unreadable += 1,
            Some((task, started_us)) => {
                if task.runs == 0 {
                    self.unrun -= 1;
                }
                task.runs += 1;
                task.first_us = task.first_us.min(started_us);
            }
        }
    }

    /// Tasks whose first execution started before their time.
    fn early(&self) -> usize {
        self.tasks
            .iter()
            .filter(|t| t.runs > 0 && t.first_us < t.scheduled_ms * 1000)
            .count()
    }

    /// Tasks whose first execution started before the first execution of the task scheduled
    /// before them in their orderingId (tasks that never ran are left out; they are lost).
    fn out_of_order(&self) -> usize {
        let mut count = 0;
        for ordering in 0..ORDERING_IDS {
            let mut previous: Option<TaskRuns> = None;
            for task in self.tasks.iter().skip(ordering).step_by(ORDERING_IDS) {
                if task.runs == 0 {
                    continue;
                }
                if let Some(p) = previous {
                    if p.scheduled_ms < task.scheduled_ms && task.first_us < p.first_us {
                        count += 1;
                    }
                }
                previous = Some(*task);
            }
        }
        count
    }

    /// Executions beyond one per task.
    fn duplicates(&self) -> u64 {
        self.tasks
            .iter()
            .map(|t| u64::from(t.runs.saturating_sub(1)))
            .sum()
    }

    /// Sorted lateness of the first execution, in milliseconds, of the tasks that ran and for
    /// which `wanted(index)` holds.
    fn lateness_ms(&self, wanted: impl Fn(usize) -> bool) -> Vec<f64> {
        let mut lateness: Vec<f64> = (self.tasks.iter().enumerate())
            .filter(|(i, t)| t.runs > 0 && wanted(*i))
            .map(|(_, t)| (t.first_us - t.scheduled_ms * 1000) as f64 / 1000.0)
            .collect();
        lateness.sort_by(f64::total_cmp);
        lateness
    }

    /// The lateness of the tasks of `partitions` due in the `MOVED_WINDOW` after `signal`
    /// (sent that long after the load `started`).
    fn moved(&self, started: DateTime<Utc>, signal: DateTime<Utc>, partitions: Vec<i32>) -> Moved {
        let from = signal.timestamp_millis();
        let to = (signal + MOVED_WINDOW).timestamp_millis();
        let lateness = self.lateness_ms(|i| {
            let t = &self.tasks[i];
            (from..=to).contains(&t.scheduled_ms)
                && partitions.contains(&self.partitions[ordering_of(i)])
        });
        Moved {
            partitions,
            signal_s: (signal - started).num_milliseconds() as f64 / 1000.0,
            tasks: lateness.len(),
            p999_ms: quantile(&lateness, 0.999),
            max_ms: lateness.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Appends what `path` holds past `offset` to `bytes`; returns how many bytes were added.
fn read_from(path: &Path, offset: u64, bytes: &mut Vec<u8>) -> Result<u64, BenchError> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(BenchError::Child(format!("{}: {e}", path.display()))),
    };
    let failed = |e: std::io::Error| BenchError::Child(format!("{}: {e}", path.display()));
    file.seek(SeekFrom::Start(offset)).map_err(failed)?;
    let before = bytes.len();
    file.read_to_end(bytes).map_err(failed)?;
    Ok((bytes.len() - before) as u64)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn line(i: usize, scheduled_ms: i64, started_us: i64) -> String {
        format!(
            "{}\t{}\t{scheduled_ms}\t{started_us}\t0\n",
            key(i),
            ordering_id(ordering_of(i))
        )
    }

    fn append(path: &Path, text: &str) {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        file.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn the_ledger_counts_lost_early_out_of_order_and_duplicate_runs() {
        // Two tasks per orderingId, the second 1,000 ms after the first.
        let scheduled: Vec<i64> = (0..2 * ORDERING_IDS).map(|i| 1_000 + i as i64).collect();
        let files = ExecutionFiles::create("failover").unwrap();
        let mut first = String::new();
        for (i, at) in scheduled.iter().enumerate() {
            let started = match i {
                3 => continue,               // never runs: lost
                0 => at * 1000 - 1,          // a microsecond early
                1 => at * 1000 + 10_000_000, // after the next task of its orderingId
                _ => at * 1000 + 5_000,
            };
            first.push_str(&line(i, *at, started));
        }
        let (complete, partial) = first.split_at(first.len() - 10);
        append(&files.path(0), complete);
        append(
            &files.path(1),
            &line(2, scheduled[2], scheduled[2] * 1000 + 7_000),
        );
        append(&files.path(1), "failover-x\tgarbage\n");
        let mut ledger = Ledger::new(scheduled.clone());
        ledger.read(&files).unwrap();
        assert_eq!(
            ledger.unrun, 2,
            "task 3, and the last task's line is not complete"
        );
        append(&files.path(0), partial);
        ledger.read(&files).unwrap();
        assert_eq!(ledger.unrun, 1);
        assert_eq!(ledger.unreadable, 1);
        assert_eq!(ledger.early(), 1);
        assert_eq!(ledger.out_of_order(), 1);
        assert_eq!(ledger.duplicates(), 1);
        let lateness = ledger.lateness_ms(|i| i == 2);
        assert_eq!(lateness, vec![5.0]);
    }
}
