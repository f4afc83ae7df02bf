//! The tombstone wall (issue 12): `finished` tasks of one partition, due within the current hour,
//! are run to completion by a first node (each leaves its schedule row's tombstone); the node
//! stops; a second node with default settings starts, a task due now is enqueued in that
//! partition, and the figures are how long its first load takes and how long until the new task
//! runs, beside the tombstoned cells Cassandra said it read meanwhile (its log's
//! `tombstone_warn_threshold` warnings). Run only when named (`--only tombstones`): it writes
//! and runs hundreds of thousands of tasks.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use it_tests::engine::TestEnv;
use scheduler_core::settings::SchedulingSettings;
use scheduler_core::store::{hour_bucket, ScheduleStore};

use crate::ceilings::bench_task;
use crate::child::ChildNode;
use crate::BenchError;

/// Where `dev/stack` writes Cassandra's log (relative to the project root, where the bench
/// runs).
const CASSANDRA_LOG: &str = ".stack/logs/cassandra.log";

/// What the scenario measured.
#[derive(Debug, Clone, Copy)]
pub struct Tombstones {
    /// Tasks the first node finished in the partition.
    pub finished: usize,
    /// How long the first node took to run them.
    pub first_node_s: f64,
    /// The second node's first load: from owning the partition to having loaded it.
    pub load_s: f64,
    /// From enqueueing a task due now (once the second node owns the partition) to its run.
    pub new_task_ran_s: f64,
    /// Tombstoned cells Cassandra reported reading while the second node ran (`None`: its log
    /// was not readable here).
    pub tombstones_read: Option<u64>,
}

/// Runs the scenario with `finished` tasks finished before the second node starts.
pub async fn tombstones(finished: usize) -> Result<Tombstones, BenchError> {
    let env = TestEnv::new("bench_tombstones", 1).await;
    let store = env.store().await;
    // All within the current hour, before now, as if enqueued earlier and persisted.
    let now = Utc::now();
    let from = hour_bucket(now);
    let span_ms = (now - from).num_milliseconds().max(1);
    let tasks: Vec<_> = (0..finished)
        .map(|i| {
            let at = from + TimeDelta::milliseconds(i as i64 * span_ms / finished.max(1) as i64);
            bench_task(format!("done-{}", i % 1000), at, format!("done-{i}"))
        })
        .collect();
    for chunk in tasks.chunks(10_000) {
        store
            .persist(0, chunk.to_vec())
            .await
            .map_err(|e| BenchError::Setup(e.to_string()))?;
    }
    drop(tasks);
    let settings = env.settings(SchedulingSettings::default());
    let mut first = ChildNode::spawn(&settings, 1)?;
    let began = Instant::now();
    first
        .wait_for(
            Duration::from_secs(1800),
            "the first node to finish the tasks",
            |p| p.executed >= finished as u64,
        )
        .await?;
    let first_node_s = began.elapsed().as_secs_f64();
    // Long enough for its low-water mark to pass them (it advances every 5 s).
    tokio::time::sleep(Duration::from_secs(12)).await;
    first.stop(Duration::from_secs(60)).await?;

    let log_from = log_len();
    let mut node = ChildNode::spawn(&settings, 1)?;
    let assigned = node
        .wait_for(
            Duration::from_secs(60),
            "the partition to be assigned",
            |p| p.assigned_ms != 0,
        )
        .await?;
    let scheduler = env.scheduler(Duration::from_secs(10));
    let enqueued = Utc::now();
    scheduler
        .schedule_task(bench_task("new".into(), enqueued, "new-1".into()))
        .await
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let ran = node
        .wait_for(Duration::from_secs(300), "the new task to run", |p| {
            p.executed >= 1 && p.ready_ms != 0
        })
        .await?;
    node.stop(Duration::from_secs(30)).await?;
    let first_run = chrono::DateTime::from_timestamp_millis(ran.first_ms).unwrap_or(enqueued);
    Ok(Tombstones {
        finished,
        first_node_s,
        load_s: (ran.ready_ms - assigned.assigned_ms).max(0) as f64 / 1000.0,
        new_task_ran_s: (first_run - enqueued).num_milliseconds().max(0) as f64 / 1000.0,
        tombstones_read: log_from.map(tombstones_logged_since),
    })
}

fn log_len() -> Option<u64> {
    std::fs::metadata(Path::new(CASSANDRA_LOG))
        .ok()
        .map(|m| m.len())
}

/// Sums the tombstoned cells of the warnings Cassandra logged after byte `from` of its log
/// ("Read 12 live and 30000 tombstone cells in ..." / "tombstoned cells").
fn tombstones_logged_since(from: u64) -> u64 {
    let Ok(text) = std::fs::read(CASSANDRA_LOG) else {
        return 0;
    };
    let tail = String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default());
    tail.lines()
        .filter_map(|line| {
            let (_, after) = line.split_once(" live and ")?;
            after.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}
