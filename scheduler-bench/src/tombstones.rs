//! The tombstone wall (issue 12's baseline): `finished` tasks of one partition finish within the
//! current hour (their schedule rows deleted, as a node deletes them: tombstones); then a node
//! starts with default settings, a task due now is enqueued in that partition, and the figure is
//! how long it takes to run, beside the tombstoned cells Cassandra said it read meanwhile (its
//! log's `tombstone_warn_threshold` warnings). Run only when named (`--only tombstones`): it
//! writes and deletes hundreds of thousands of rows, and until issue 12's loading lands the
//! task does not run at all.

use std::path::Path;
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use futures::StreamExt;
use it_tests::engine::TestEnv;
use scheduler_core::settings::SchedulingSettings;
use scheduler_core::store::{hour_bucket, ScheduleStore, WRITE_CONCURRENCY};

use crate::ceilings::bench_task;
use crate::child::ChildNode;
use crate::BenchError;

/// Where `dev/stack` writes Cassandra's log (relative to the project root, where the bench
/// runs).
const CASSANDRA_LOG: &str = ".stack/logs/cassandra.log";

/// What the scenario measured.
#[derive(Debug, Clone, Copy)]
pub struct Tombstones {
    /// Tasks finished in the partition before the node started.
    pub finished: usize,
    /// From enqueueing a task due now (once the node owns the partition) to its run.
    pub new_task_ran_s: f64,
    /// Tombstoned cells Cassandra reported reading while the node ran (`None`: its log was not
    /// readable here).
    pub tombstones_read: Option<u64>,
}

/// Runs the scenario with `finished` tasks finished before the node starts.
pub async fn tombstones(finished: usize) -> Result<Tombstones, BenchError> {
    let env = TestEnv::new("bench_tombstones", 1).await;
    let store = env.store().await;
    // All within the current hour, before now: in the window the next tree loads.
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
    let deletes = futures::stream::iter(tasks.iter().map(|t| store.remove_scheduled(0, t.key())))
        .buffer_unordered(WRITE_CONCURRENCY)
        .filter(|r| futures::future::ready(r.is_err()))
        .count()
        .await;
    if deletes > 0 {
        return Err(BenchError::Setup(format!("{deletes} deletes failed")));
    }
    let log_from = log_len();
    let mut node = ChildNode::spawn(&env.settings(SchedulingSettings::default()), 1)?;
    node.wait_for(
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
            p.executed >= 1
        })
        .await?;
    node.stop(Duration::from_secs(30)).await?;
    env.drop_keyspace().await;
    let first = chrono::DateTime::from_timestamp_millis(ran.first_ms).unwrap_or(enqueued);
    Ok(Tombstones {
        finished,
        new_task_ran_s: (first - enqueued).num_milliseconds().max(0) as f64 / 1000.0,
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
