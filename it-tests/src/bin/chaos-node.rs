//! A node for the chaos test, run as its own OS process so it can be killed and paused. Its
//! settings come from the environment (`SCHEDULER__SECTION__KEY`, as for any node). Every
//! execution and every change of the partitions it owns is appended as one JSON line to the
//! file named by `CHAOS_LOG` (and the node's own log to `CHAOS_TRACE`, when set). Each call of
//! the executor takes `CHAOS_WORK_MS` milliseconds, or the task's own `work_ms`. On SIGTERM it
//! shuts down cleanly and appends its count of fencing rejections. `CHAOS_SETTINGS` names a
//! settings file read first (e.g. its `[[queues]]`); `CHAOS_TYPES` (comma-separated) makes the
//! node a handler of those task types only, instead of every type. A task whose data has `job`
//! starts a job (see `execute`); a `bucket` reports its progress and fails when its data says so.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::Utc;
use scheduler_core::settings::Settings;
use scheduler_core::{
    GroupOutcome, JobSpec, SchedulerNode, Task, TaskContext, TaskError, TaskHandler,
};
use serde_json::json;

/// Appends JSON lines to the node's log, one `write` each.
#[derive(Clone)]
struct Log {
    node: String,
    file: Arc<Mutex<File>>,
}

impl Log {
    fn append(&self, mut line: serde_json::Value) {
        line["node"] = json!(self.node);
        let text = format!("{line}\n");
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = file.write_all(text.as_bytes()) {
            eprintln!("chaos-node {}: cannot write the log: {e}", self.node);
        }
    }
}

/// Records each execution after a fixed amount of work.
#[derive(Clone)]
struct Recorder {
    log: Log,
    work: Duration,
}

impl TaskHandler for Recorder {
    async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        let start = Utc::now();
        // A task may ask for more work (`"work_ms"` in its data), to be caught running by a fault.
        let work = task
            .task_data
            .get("work_ms")
            .and_then(|v| v.as_u64())
            .map_or(self.work, Duration::from_millis);
        // A job's coordinator: `job: {"id", "buckets": n, "fail": k}` starts n buckets of type
        // `bucket`, bucket k failing.
        if let Some(job) = task.task_data.get("job") {
            let buckets = job.get("buckets").and_then(|v| v.as_u64()).unwrap_or(0);
            let fail = job.get("fail").and_then(|v| v.as_u64());
            let spec = JobSpec {
                id: job
                    .get("id")
                    .and_then(|v| v.as_str())
                    .unwrap_or("job")
                    .to_string(),
                bucket_type: "bucket".into(),
                buckets: (1..=buckets)
                    .map(|i| {
                        let mut data = serde_json::Map::new();
                        data.insert("work_ms".into(), json!(work.as_millis() as u64));
                        data.insert("fail".into(), json!(Some(i) == fail));
                        data
                    })
                    .collect(),
            };
            ctx.start_job(spec)
                .map_err(|e| TaskError::invalid(e.to_string()))?;
        }
        // A bucket reports half its 100 items midway, and all at the end.
        let bucket = task.task_type == "bucket";
        if bucket {
            tokio::time::sleep(work / 2).await;
            ctx.report_progress(50)
                .await
                .map_err(|e| TaskError::retry(e.to_string()))?;
            tokio::time::sleep(work / 2).await;
            ctx.report_progress(100)
                .await
                .map_err(|e| TaskError::retry(e.to_string()))?;
        } else {
            tokio::time::sleep(work).await;
        }
        self.log.append(json!({
            "ordering_id": task.ordering_id,
            "uniqueness_key": task.uniqueness_key,
            "task_type": task.task_type,
            "scheduled_ms": task.scheduled_time.timestamp_millis(),
            "start_ms": start.timestamp_millis(),
            "end_ms": Utc::now().timestamp_millis(),
        }));
        if task.task_data.get("fail").and_then(|v| v.as_bool()) == Some(true) {
            return Err(TaskError::invalid("asked to fail"));
        }
        // A group member's result: the node that ran it.
        if task.group.is_some() {
            ctx.set_result(json!({ "node": self.log.node }))
                .map_err(|e| TaskError::invalid(e.to_string()))?;
        }
        Ok(())
    }

    /// A join: logged with what it was given.
    async fn group_finished(
        &self,
        task: &Task,
        group: &GroupOutcome,
        _ctx: &TaskContext,
    ) -> Result<(), TaskError> {
        let statuses: Vec<&str> = group.members.iter().map(|m| m.status.as_str()).collect();
        let results = group.members.iter().filter(|m| m.result.is_some()).count();
        self.log.append(json!({
            "join_of": task.join_of,
            "task_type": task.task_type,
            "total": group.total,
            "failed_by": group.failed_by,
            "members": group.members.len(),
            "statuses": statuses,
            "results": results,
            "start_ms": Utc::now().timestamp_millis(),
        }));
        Ok(())
    }
}

fn main() -> ExitCode {
    let node = std::env::var("CHAOS_NODE").unwrap_or_else(|_| "node".into());
    match run(&node) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chaos-node {node}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(node: &str) -> Result<(), String> {
    let path = std::env::var("CHAOS_LOG").map_err(|_| "CHAOS_LOG is not set".to_string())?;
    let work_ms: u64 = std::env::var("CHAOS_WORK_MS")
        .unwrap_or_else(|_| "20".into())
        .parse()
        .map_err(|e| format!("CHAOS_WORK_MS: {e}"))?;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("cannot open {path}: {e}"))?;
    let log = Log {
        node: node.to_string(),
        file: Arc::new(Mutex::new(file)),
    };
    if let Ok(trace) = std::env::var("CHAOS_TRACE") {
        let file = File::create(&trace).map_err(|e| format!("cannot create {trace}: {e}"))?;
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "info,scheduler_core=debug,scylla=off",
            ))
            .with_ansi(false)
            .with_writer(Mutex::new(file))
            .init();
    }
    let file = std::env::var_os("CHAOS_SETTINGS").map(std::path::PathBuf::from);
    let settings = Settings::load(file.as_deref()).map_err(|e| e.to_string())?;
    let types = std::env::var("CHAOS_TYPES").unwrap_or_default();
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let recorder = Recorder {
            log: log.clone(),
            work: Duration::from_millis(work_ms),
        };
        let mut builder = SchedulerNode::builder(settings);
        for task_type in types.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            builder = builder.handler(task_type, recorder.clone());
        }
        if types.trim().is_empty() {
            builder = builder.fallback(recorder);
        }
        let node = builder.start().await.map_err(|e| e.to_string())?;
        log.append(json!({
            "queues": node.queues(),
            "admin": node.admin_address().map(|a| a.to_string()),
            "at_ms": Utc::now().timestamp_millis(),
        }));
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(|e| e.to_string())?;
        let mut owned = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        loop {
            tokio::select! {
                _ = terminate.recv() => break,
                _ = tick.tick() => {}
            }
            let now = node.owned_partitions();
            if now != owned {
                log.append(json!({ "owned": now, "at_ms": Utc::now().timestamp_millis() }));
                owned = now;
            }
        }
        let rejections = it_tests::engine::metric_sum(
            &node.metrics(),
            "scheduler_fencing_rejections_total",
            &[],
        );
        node.shutdown().await.map_err(|e| e.to_string())?;
        log.append(
            json!({ "fencing_rejections": rejections, "at_ms": Utc::now().timestamp_millis() }),
        );
        Ok(())
    })
}
