//! Loading without a look-back window, against the real stack: a new tree loads from its
//! partition's low-water mark, however far back, so no task is left behind by an outage or a
//! long retry.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use it_tests::engine::{executions, task, wait_until, Recorder, TestEnv};
use scheduler_core::settings::SchedulingSettings;
use scheduler_core::store::{AttemptStore, ScheduleStore, StatusStore, TaskStatus};
use scheduler_core::{SchedulerNode, TaskError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_written_three_hours_ago_while_no_node_ran_runs_within_ten_seconds_of_a_start() {
    let env = TestEnv::new("low_water_outage", 1).await;
    let store = env.store().await;
    // Persisted by a node that stopped before its time came; no node ran for three hours.
    let old = task("outage", Utc::now() - TimeDelta::hours(3), "1");
    store.persist(0, vec![old.clone()]).await.expect("persist");

    let log = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let node = SchedulerNode::start(
        env.settings(SchedulingSettings::default()),
        Recorder::new("n1", &log, Duration::ZERO),
    )
    .await
    .expect("node starts");
    wait_until(
        Duration::from_secs(10),
        "the three-hour-old task to run",
        || executions(&log).iter().any(|e| e.key == old.key()),
    )
    .await;
    println!(
        "a task due 3 h ago ran {:?} after the node's start",
        started.elapsed()
    );
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_still_retrying_survives_a_restart_keeps_its_attempts_and_finishes() {
    let env = TestEnv::new("low_water_retry", 1).await;
    let scheduling = SchedulingSettings {
        // Ignored now: before, a window this short lost the retrying task at the restart.
        look_back_on_restart: Some("10s".into()),
        backoff_factor: Duration::from_millis(500),
        max_backoff: Duration::from_secs(1),
        ..TestEnv::quick_scheduling()
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    // The first node's calls all fail; the second's succeed.
    let failing = Recorder::new("n1", &log, Duration::ZERO)
        .with_behaviour(Arc::new(|_, _| Err(TaskError::retry("not yet"))));
    let first = env
        .start_sole_node(env.settings(scheduling.clone()), failing)
        .await;
    let due = task("retrying", Utc::now() - TimeDelta::seconds(30), "1");
    env.scheduler(Duration::from_secs(60))
        .schedule_task(due.clone())
        .await
        .expect("enqueued");
    wait_until(Duration::from_secs(20), "two failed attempts", || {
        executions(&log).len() >= 2
    })
    .await;
    first.shutdown().await.expect("shutdown");
    let failed_attempts = executions(&log).len();

    let second = env
        .start_sole_node(
            env.settings(scheduling),
            Recorder::new("n2", &log, Duration::ZERO),
        )
        .await;
    let store = env.store().await;
    let mut status = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while status.is_none() && Instant::now() < deadline {
        status = store.status(0, due.key()).await.expect("status read");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = status.expect("the task finished in the second node");
    assert_eq!(status.status, TaskStatus::Completed);
    assert_eq!(status.attempts as usize, failed_attempts + 1);
    let attempts = store.attempts(due.key(), 100).await.expect("attempts");
    let numbers: Vec<u32> = attempts.iter().map(|a| a.attempt).collect();
    let expected: Vec<u32> = (1..=failed_attempts as u32 + 1).rev().collect();
    assert_eq!(numbers, expected, "history kept, numbers continued");
    let ran_on: Vec<String> = executions(&log).into_iter().map(|e| e.node).collect();
    assert_eq!(ran_on.last().map(String::as_str), Some("n2"));
    second.shutdown().await.expect("shutdown");
}
