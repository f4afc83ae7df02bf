//! A job against the real stack: a coordinator splits it into 64 buckets that three node
//! processes work on; its progress shows in the admin API while it runs; one bucket fails and its
//! error is aggregated; suspended mid-way, no bucket starts until it is resumed; then it
//! completes, and the coordinator's join runs once.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use chrono::Utc;
use it_tests::engine::{http, wait_until, TestEnv};
use it_tests::processes::{node_command, owned_partitions, process_log};
use scheduler_client::Task;
use scheduler_core::admin_api::JobView;
use serde_json::json;

const NODES: [&str; 3] = ["a", "b", "c"];

fn node_process(env: &TestEnv, dir: &Path, name: &str) -> Child {
    node_command(env!("CARGO_BIN_EXE_chaos-node"), env, dir, name)
        // Each bucket takes 2 s and a node runs two at once: 64 buckets take about 20 s.
        .env("CHAOS_WORK_MS", "2000")
        .env("SCHEDULER__SCHEDULING__EXECUTOR_CONCURRENCY", "2")
        .env("CHAOS_TRACE", dir.join(format!("{name}.log")))
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"))
}

/// The buckets the processes started, with when (ms since the epoch) and where.
fn bucket_starts(dir: &Path) -> Vec<(String, i64, String)> {
    NODES
        .iter()
        .flat_map(|name| process_log(dir, name))
        .filter(|l| l["task_type"] == "bucket")
        .map(|l| {
            let ordering_id = l["ordering_id"].as_str().unwrap_or_default().to_string();
            let node = l["node"].as_str().unwrap_or_default().to_string();
            (
                ordering_id,
                l["start_ms"].as_i64().unwrap_or_default(),
                node,
            )
        })
        .collect()
}

async fn job(admin: SocketAddr) -> Option<JobView> {
    let answer = http(admin, "GET", "/api/v1/jobs/nightly-1", None, None).await;
    (answer.status == 200).then(|| serde_json::from_value(answer.json()).expect("a job view"))
}

/// Polls the job until `done` holds for it.
async fn wait_for_job(admin: SocketAddr, what: &str, done: impl Fn(&JobView) -> bool) -> JobView {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(view) = job(admin).await {
            if done(&view) {
                return view;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_64_buckets_on_three_nodes_shows_progress_suspends_resumes_and_completes() {
    let env = TestEnv::new("jobs", 6).await;
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&env.topic);
    std::fs::create_dir_all(&dir).expect("log dir");
    let mut children: Vec<Child> = NODES
        .iter()
        .map(|name| node_process(&env, &dir, name))
        .collect();
    let owned = |name: &str| owned_partitions(&dir, name);
    wait_until(
        Duration::from_secs(90),
        "the three processes to share the partitions",
        || NODES.iter().all(|n| owned(n) > 0) && NODES.iter().map(|n| owned(n)).sum::<usize>() == 6,
    )
    .await;
    let admin: SocketAddr = process_log(&dir, "a")
        .iter()
        .find_map(|l| l.get("admin").and_then(|a| a.as_str()).map(str::to_string))
        .expect("node a's admin address")
        .parse()
        .expect("an address");

    // The coordinator: 64 buckets, the 7th failing.
    let mut coordinator =
        Task::new("nightly", Utc::now(), "run-1", Default::default()).of_type("coordinator");
    coordinator.task_data.insert(
        "job".into(),
        json!({ "id": "nightly-1", "buckets": 64, "fail": 7 }),
    );
    env.scheduler(Duration::from_secs(10))
        .schedule_task(coordinator)
        .await
        .expect("scheduled");

    // Progress while it runs.
    let running = wait_for_job(admin, "a few buckets done", |j| j.completed >= 6).await;
    assert_eq!(running.state, "running");
    assert_eq!(running.buckets, 64);
    assert!(running.pending > 0 && running.items > 0, "{running:?}");

    // Suspended mid-way: the running buckets finish, no other starts.
    let target = format!("{}/{}", running.task_type, running.group);
    let body = json!({ "kind": "group", "target": target, "reason": "maintenance" }).to_string();
    let suspended = http(admin, "POST", "/api/v1/suspensions", None, Some(&body)).await;
    assert_eq!(suspended.status, 201, "{}", suspended.body);
    let suspended_at = Utc::now().timestamp_millis();
    // Every node reads the suspension within its 2 s poll; a bucket already running takes 2 s.
    let settled = suspended_at + 4_500;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let during = job(admin).await.expect("the job");
    assert_eq!(during.state, "suspended", "{during:?}");
    assert!(during.pending > 0, "suspended mid-way: {during:?}");
    let resumed_at = Utc::now().timestamp_millis();
    let started_while_suspended: Vec<_> = bucket_starts(&dir)
        .into_iter()
        .filter(|(_, at, _)| *at > settled && *at < resumed_at)
        .collect();
    assert!(
        started_while_suspended.is_empty(),
        "buckets started while the job was suspended: {started_while_suspended:?}"
    );
    let query = format!(
        "/api/v1/suspensions?kind=group&target={}",
        target.replace('/', "%2F")
    );
    let lifted = http(admin, "DELETE", &query, None, None).await;
    assert_eq!(lifted.status, 204, "{}", lifted.body);

    // Then it completes: 63 buckets done, the failed one's error aggregated.
    let done = wait_for_job(admin, "the job to finish", |j| j.pending == 0).await;
    assert_eq!(done.state, "failed", "one bucket failed: {done:?}");
    assert_eq!((done.completed, done.failed), (63, 1));
    assert_eq!(done.items, 64 * 100, "every bucket reported its 100 items");
    assert_eq!(done.errors.len(), 1);
    assert_eq!(done.errors[0].bucket, 7);
    assert_eq!(done.errors[0].error, "asked to fail");
    let starts = bucket_starts(&dir);
    let nodes: std::collections::BTreeSet<&str> =
        starts.iter().map(|(_, _, n)| n.as_str()).collect();
    assert_eq!(nodes.len(), 3, "every node ran buckets");
    // The coordinator's join, once, after every bucket.
    wait_until(Duration::from_secs(30), "the coordinator's join", || {
        NODES
            .iter()
            .flat_map(|n| process_log(&dir, n))
            .any(|l| l.get("join_of").is_some())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let joins: Vec<serde_json::Value> = NODES
        .iter()
        .flat_map(|n| process_log(&dir, n))
        .filter(|l| l.get("join_of").is_some())
        .collect();
    for child in &mut children {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
    }
    assert_eq!(joins.len(), 1, "{joins:?}");
    assert_eq!(joins[0]["members"], 64);
}
