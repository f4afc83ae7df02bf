//! A node dropped without `shutdown()` shuts down quietly: its consumer still drains and leaves
//! the group before its actors stop, so nothing is logged as an error, and its tasks run on the
//! next node. (A test file of its own: it installs the process's log subscriber.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use it_tests::engine::{executions, task, wait_until, Recorder, TestEnv};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_dropped_without_shutdown_stops_quietly_and_its_tasks_run_on_the_next() {
    let captured = it_tests::logs::captured();
    let env = TestEnv::new("drop", 2).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let settings = env.settings(TestEnv::quick_scheduling());
    let first = env
        .start_sole_node(
            settings.clone(),
            Recorder::new("first", &log, Duration::ZERO),
        )
        .await;
    let later = task("dropped", Utc::now() + TimeDelta::seconds(8), "1");
    env.scheduler(Duration::from_secs(10))
        .schedule_task(later.clone())
        .await
        .expect("scheduled");
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(first);
    // Time for the dropped node to drain, leave the group and stop its actors.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let errors = captured.errors();
    assert!(
        errors.is_empty(),
        "errors logged after the drop: {errors:#?}"
    );

    let second = env
        .start_sole_node(settings, Recorder::new("second", &log, Duration::ZERO))
        .await;
    wait_until(
        Duration::from_secs(30),
        "the task to run on the next node",
        || executions(&log).iter().any(|e| e.key == later.key()),
    )
    .await;
    second.shutdown().await.expect("shutdown");
}
