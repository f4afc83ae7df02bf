//! Issue 34's remote calls: Python workers (`examples/python/worker.py`, 16 calls at once each;
//! one in the quick run, two in the full one) run every task of their type on one node. A burst of tasks due now (tasks a second from their
//! time to the worker's last start, and the CPU a task of the node and of the worker: the HTTP
//! protocol's cost), then steady tasks a second ahead (the long poll's latency: from a task's
//! time to the worker's start, p50 and p99).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use it_tests::engine::{http, TestEnv};
use it_tests::python::{install_python, repo};
use scheduler_core::node::SchedulerNode;
use scheduler_core::settings::SchedulingSettings;
use serde_json::Value;
use tokio::time::Instant;

use crate::ceilings::bench_task;
use crate::cpu::{CpuSnapshot, Measured};
use crate::scenarios::{enqueue, node_error, quantile, wait_until, PARTITIONS};
use crate::BenchError;

/// The remote type.
const TYPE: &str = "remote-bench";
/// The worker's calls at once.
const CAPACITY: &str = "16";
/// Steady tasks a second, and for how long.
const STEADY_PER_S: u64 = 50;
const STEADY: Duration = Duration::from_secs(10);

/// The scenario's figures.
#[derive(Debug, Clone)]
pub struct RemoteCalls {
    /// Worker processes.
    pub workers: usize,
    /// Tasks in the burst.
    pub burst: usize,
    /// Burst tasks a second, from their time to the worker's last start.
    pub burst_per_s: f64,
    /// CPU milliseconds a burst task: the node's process (the bench's), the workers' (all).
    pub node_cpu_ms: f64,
    pub worker_cpu_ms: f64,
    /// Steady tasks measured, and their lateness at the worker's start (ms).
    pub steady: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

struct Worker {
    child: Child,
    log: PathBuf,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Each task's start on any of `workers`: (uniquenessKey, scheduled time, start time).
fn starts(workers: &[Worker]) -> Vec<(String, DateTime<Utc>, DateTime<Utc>)> {
    workers.iter().flat_map(Worker::starts).collect()
}

impl Worker {
    /// Each task's start: (uniquenessKey, scheduled time, start time).
    fn starts(&self) -> Vec<(String, DateTime<Utc>, DateTime<Utc>)> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        (text.lines())
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|e| e["event"] == "start")
            .filter_map(|e| {
                let unique = e["task"]["uniquenessKey"].as_str()?.to_string();
                let due = e["task"]["scheduledTime"].as_str()?.parse().ok()?;
                let at = DateTime::from_timestamp_micros((e["at"].as_f64()? * 1e6) as i64)?;
                Some((unique, due, at))
            })
            .collect()
    }
}

pub async fn remote(burst: usize, worker_count: usize) -> Result<RemoteCalls, BenchError> {
    let python = install_python();
    let env = TestEnv::new("bench_remote", PARTITIONS).await;
    let mut settings = env.settings(SchedulingSettings::default());
    settings.workers.types = vec![TYPE.into()];
    let node = SchedulerNode::builder(settings)
        .start()
        .await
        .map_err(node_error)?;
    let node = env.owning_every_partition(node).await;
    let addr = node
        .admin_address()
        .ok_or_else(|| BenchError::Setup("the node's listener".into()))?;
    let _ = std::fs::create_dir_all(repo().join("target/bench"));
    let mut workers = Vec::new();
    for n in 0..worker_count {
        let log = repo().join(format!(
            "target/bench/remote-worker-{}-{n}.jsonl",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&log);
        let child = Command::new(&python)
            .arg(repo().join("examples/python/worker.py"))
            .args(["--url", &format!("http://{addr}"), "--type", TYPE])
            .args(["--name", &format!("bench-{n}"), "--capacity", CAPACITY])
            .args(["--wait-ms", "5000", "--log"])
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| BenchError::Setup(format!("worker.py: {e}")))?;
        workers.push(Worker { child, log });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = http(addr, "GET", "/api/v1/workers", None, None).await;
        if (0..worker_count).all(|n| answer.body.contains(&format!("\"bench-{n}\""))) {
            break;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Setup(
                "the Python workers never connected".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut processes = vec![Measured {
        name: "node",
        pid: Some(std::process::id()),
    }];
    processes.extend(workers.iter().map(|w| Measured {
        name: "worker",
        pid: Some(w.child.id()),
    }));

    // The burst, due now.
    let scheduler = env.scheduler(Duration::from_secs(10));
    let due = Utc::now();
    let cpu_before = CpuSnapshot::take(&processes);
    enqueue(&scheduler, burst, |i| {
        bench_task(format!("r-{}", i % 100), due, format!("burst-{i}")).of_type(TYPE)
    })
    .await?;
    let wait = Duration::from_secs(120).max(Duration::from_millis(burst as u64 * 20));
    wait_until(wait, "the burst to start on the workers", || {
        starts(&workers).len() >= burst
    })
    .await?;
    let cpu = CpuSnapshot::take(&processes).per_task_since(&cpu_before, burst);
    // (The workers' processes summed.)
    let of = |name: &str| -> f64 {
        (cpu.iter())
            .filter(|(n, _)| n == name)
            .map(|(_, ms)| *ms)
            .sum()
    };
    let last = (starts(&workers).iter())
        .map(|(_, _, at)| *at)
        .max()
        .unwrap_or(due);
    let burst_per_s = burst as f64 / ((last - due).num_milliseconds().max(1) as f64 / 1000.0);

    // Steady, a second ahead.
    let sent = (STEADY.as_secs() * STEADY_PER_S) as usize;
    let started = Instant::now();
    for i in 0..sent {
        let at = started + Duration::from_millis(i as u64 * 1000 / STEADY_PER_S);
        tokio::time::sleep_until(at).await;
        let task = bench_task(
            format!("s-{}", i % 100),
            Utc::now() + TimeDelta::seconds(1),
            format!("steady-{i}"),
        )
        .of_type(TYPE);
        scheduler
            .schedule_task(task)
            .await
            .map_err(|e| BenchError::Setup(format!("enqueue: {e}")))?;
    }
    wait_until(Duration::from_secs(60), "the steady tasks to start", || {
        starts(&workers).len() >= burst + sent
    })
    .await?;
    let mut late: Vec<f64> = (starts(&workers).into_iter())
        .filter(|(unique, _, _)| unique.starts_with("steady-"))
        .map(|(_, due, at)| (at - due).num_microseconds().unwrap_or(0) as f64 / 1000.0)
        .collect();
    late.sort_by(f64::total_cmp);
    drop(workers);
    node.shutdown().await.map_err(node_error)?;
    Ok(RemoteCalls {
        workers: worker_count,
        burst,
        burst_per_s,
        node_cpu_ms: of("node"),
        worker_cpu_ms: of("worker"),
        steady: late.len(),
        p50_ms: quantile(&late, 0.50),
        p99_ms: quantile(&late, 0.99),
        max_ms: late.last().copied().unwrap_or(f64::NAN),
    })
}
