//! Nodes in their own OS process, for the figures that need one: peak RSS of a node, and a node
//! that is killed. The parent runs `scheduler-bench node --settings <json>`; the child starts a
//! node with a counting [`Probe`] and reports its progress as one JSON line on stdout every few
//! milliseconds until SIGTERM, which shuts the node down cleanly. With `--executions FILE` the
//! probe also writes a line per execution to `FILE` (see [`Probe::logging_calls`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::Utc;
use scheduler_core::settings::Settings;
use scheduler_core::SchedulerNode;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::probe::Probe;
use crate::BenchError;

/// How often the child looks at its node.
const CHILD_TICK: Duration = Duration::from_millis(10);
/// Every how many ticks it reports, unless something changed.
const REPORT_EVERY: u32 = 5;

/// What a child node last reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Partitions the node owns.
    pub owned: Vec<i32>,
    /// Executions so far.
    pub executed: u64,
    /// When the node first owned a partition (ms since the epoch; 0: not yet).
    pub assigned_ms: i64,
    /// When the node was first ready: it owned partitions and each one's tree had loaded its
    /// schedule once (ms since the epoch; 0: not yet).
    pub ready_ms: i64,
    /// When the first execution started (ms since the epoch; 0: none yet).
    pub first_ms: i64,
    /// When the latest execution started (ms since the epoch; 0: none yet).
    pub last_ms: i64,
    /// Tasks held in memory (the `scheduler_tasks_in_memory` gauge).
    pub in_memory: u64,
    /// Executions whose line could not be written to the executions file.
    pub unlogged: u64,
    /// The node has shut down.
    pub stopped: bool,
}

impl Progress {
    fn from_json(value: &serde_json::Value) -> Progress {
        let int = |key: &str| value.get(key).and_then(|v| v.as_i64()).unwrap_or(0);
        Progress {
            owned: value
                .get("owned")
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p.as_i64())
                        .map(|p| p as i32)
                        .collect()
                })
                .unwrap_or_default(),
            executed: int("executed").max(0) as u64,
            assigned_ms: int("assigned_ms"),
            ready_ms: int("ready_ms"),
            first_ms: int("first_ms"),
            last_ms: int("last_ms"),
            in_memory: int("in_memory").max(0) as u64,
            unlogged: int("unlogged").max(0) as u64,
            stopped: value.get("stopped").and_then(|v| v.as_bool()) == Some(true),
        }
    }

    fn to_json(&self) -> serde_json::Value {
        json!({
            "owned": self.owned,
            "executed": self.executed,
            "assigned_ms": self.assigned_ms,
            "ready_ms": self.ready_ms,
            "first_ms": self.first_ms,
            "last_ms": self.last_ms,
            "in_memory": self.in_memory,
            "unlogged": self.unlogged,
            "stopped": self.stopped,
        })
    }
}

/// The child's side: runs a node until SIGTERM, reporting progress on stdout; writes each
/// execution to `executions` when given.
pub async fn run_child(
    settings_json: &str,
    partitions: u32,
    executions: Option<&Path>,
    call: Duration,
) -> Result<(), BenchError> {
    let settings: Settings = serde_json::from_str(settings_json)
        .map_err(|e| BenchError::Setup(format!("child settings: {e}")))?;
    let probe = match executions {
        Some(path) => Probe::logging_calls(partitions, path, call)?,
        None => Probe::new(partitions, false),
    };
    let node = SchedulerNode::start(settings, probe.clone())
        .await
        .map_err(|e| BenchError::Setup(format!("child node: {e}")))?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| BenchError::Setup(format!("SIGTERM handler: {e}")))?;
    let mut progress = Progress::default();
    let mut tick = tokio::time::interval(CHILD_TICK);
    let mut ticks = 0u32;
    loop {
        tokio::select! {
            _ = terminate.recv() => break,
            _ = tick.tick() => {}
        }
        ticks += 1;
        let owned = node.owned_partitions();
        let changed = owned != progress.owned;
        if progress.assigned_ms == 0 && !owned.is_empty() {
            progress.assigned_ms = Utc::now().timestamp_millis();
        }
        let became_ready = progress.ready_ms == 0 && node.is_ready();
        if became_ready {
            progress.ready_ms = Utc::now().timestamp_millis();
        }
        let changed = changed || became_ready;
        progress.owned = owned;
        progress.executed = probe.executed();
        progress.first_ms = probe.first().map_or(0, |t| t.timestamp_millis());
        progress.last_ms = probe.last().map_or(0, |t| t.timestamp_millis());
        progress.unlogged = probe.unlogged();
        if changed || ticks.is_multiple_of(REPORT_EVERY) {
            progress.in_memory =
                it_tests::engine::metric_sum(&node.metrics(), "scheduler_tasks_in_memory", &[])
                    as u64;
            report(&progress);
        }
    }
    node.shutdown()
        .await
        .map_err(|e| BenchError::Setup(format!("child shutdown: {e}")))?;
    progress.stopped = true;
    progress.executed = probe.executed();
    progress.unlogged = probe.unlogged();
    report(&progress);
    Ok(())
}

/// One progress line on stdout; a parent that stopped reading is not the node's problem.
fn report(progress: &Progress) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{}", progress.to_json());
}

/// The parent's handle on a child node.
pub struct ChildNode {
    child: Child,
    pid: u32,
    progress: watch::Receiver<Progress>,
}

impl ChildNode {
    /// Starts a node process with `settings` for a topic of `partitions` partitions.
    pub fn spawn(settings: &Settings, partitions: u32) -> Result<ChildNode, BenchError> {
        ChildNode::start(settings, partitions, None, Duration::ZERO)
    }

    /// Starts a node process like [`ChildNode::spawn`] that also writes a line per execution to
    /// `executions` (see [`Probe::logging_calls`]).
    pub fn spawn_logging(
        settings: &Settings,
        partitions: u32,
        executions: &Path,
    ) -> Result<ChildNode, BenchError> {
        ChildNode::start(settings, partitions, Some(executions), Duration::ZERO)
    }

    /// Starts a node process like [`ChildNode::spawn_logging`] whose calls each take `call`.
    pub fn spawn_calling(
        settings: &Settings,
        partitions: u32,
        executions: &Path,
        call: Duration,
    ) -> Result<ChildNode, BenchError> {
        ChildNode::start(settings, partitions, Some(executions), call)
    }

    fn start(
        settings: &Settings,
        partitions: u32,
        executions: Option<&Path>,
        call: Duration,
    ) -> Result<ChildNode, BenchError> {
        let exe = std::env::current_exe()
            .map_err(|e| BenchError::Setup(format!("cannot find the bench binary: {e}")))?;
        let settings_json = serde_json::to_string(settings)
            .map_err(|e| BenchError::Setup(format!("settings: {e}")))?;
        let mut command = Command::new(exe);
        command
            .args(["node", "--partitions", &partitions.to_string()])
            .args(["--settings", &settings_json]);
        if let Some(path) = executions {
            command.arg("--executions").arg(path);
        }
        if !call.is_zero() {
            command.args(["--call-ms", &call.as_millis().to_string()]);
        }
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| BenchError::Setup(format!("cannot start a node process: {e}")))?;
        let pid = child
            .id()
            .ok_or_else(|| BenchError::Setup("node process exited at once".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| BenchError::Setup("node process has no stdout".into()))?;
        let (sender, progress) = watch::channel(Progress::default());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) {
                    sender.send_replace(Progress::from_json(&value));
                }
            }
        });
        Ok(ChildNode {
            child,
            pid,
            progress,
        })
    }

    /// The latest report.
    pub fn progress(&self) -> Progress {
        self.progress.borrow().clone()
    }

    /// Waits until a report satisfies `condition`; fails after `timeout` saying `what`.
    pub async fn wait_for(
        &mut self,
        timeout: Duration,
        what: &str,
        mut condition: impl FnMut(&Progress) -> bool,
    ) -> Result<Progress, BenchError> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let current = self.progress.borrow_and_update();
                if condition(&current) {
                    return Ok(current.clone());
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.progress.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return Err(BenchError::Child(format!(
                        "node process {} ended while waiting for {what}",
                        self.pid
                    )))
                }
                Err(_) => {
                    return Err(BenchError::Timeout(format!(
                        "{what} (after {timeout:?}; last report {:?})",
                        self.progress()
                    )))
                }
            }
        }
    }

    /// The process's peak resident set size so far, in bytes (Linux `VmHWM`).
    pub fn peak_rss_bytes(&self) -> Result<u64, BenchError> {
        self.status_bytes("VmHWM")
    }

    /// The process's resident set size now, in bytes (Linux `VmRSS`).
    pub fn rss_bytes(&self) -> Result<u64, BenchError> {
        self.status_bytes("VmRSS")
    }

    /// The size `field` of the process's `/proc` status, in bytes.
    fn status_bytes(&self, field: &str) -> Result<u64, BenchError> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .map_err(|e| BenchError::Child(format!("cannot read the node's status: {e}")))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .ok_or_else(|| BenchError::Child(format!("no {field} in /proc status")))
    }

    /// Asks the node to shut down cleanly (SIGTERM) and waits until it has left the group;
    /// returns its last report.
    pub async fn stop(mut self, timeout: Duration) -> Result<Progress, BenchError> {
        self.signal("TERM")?;
        let last = self
            .wait_for(timeout, "the node to shut down", |p| p.stopped)
            .await?;
        self.child
            .wait()
            .await
            .map_err(|e| BenchError::Child(format!("node process: {e}")))?;
        Ok(last)
    }

    /// Sends SIGTERM without waiting: the node starts leaving the group.
    pub fn begin_stop(&self) -> Result<(), BenchError> {
        self.signal("TERM")
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub async fn kill(mut self) -> Result<(), BenchError> {
        self.child
            .kill()
            .await
            .map_err(|e| BenchError::Child(format!("cannot kill the node: {e}")))
    }

    /// Waits for the process to exit; returns its last report (each line it wrote read).
    pub async fn wait_exit(mut self, timeout: Duration) -> Result<Progress, BenchError> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .map_err(|_| BenchError::Timeout("the node process to exit".into()))?
            .map_err(|e| BenchError::Child(format!("node process: {e}")))?;
        // The reader sees the end of the output once the process is gone.
        let drained = async { while self.progress.changed().await.is_ok() {} };
        let _ = tokio::time::timeout(Duration::from_secs(1), drained).await;
        Ok(self.progress())
    }

    fn signal(&self, name: &str) -> Result<(), BenchError> {
        let status = std::process::Command::new("kill")
            .args([&format!("-{name}"), &self.pid.to_string()])
            .status()
            .map_err(|e| BenchError::Child(format!("kill -{name}: {e}")))?;
        if status.success() {
            Ok(())
        } else {
            Err(BenchError::Child(format!(
                "kill -{name} {} failed: {status}",
                self.pid
            )))
        }
    }
}

/// The nodes' executions files, in a directory of their own, removed at the end unless kept.
pub(crate) struct ExecutionFiles {
    /// The directory.
    pub(crate) dir: PathBuf,
    keep: bool,
}

impl ExecutionFiles {
    /// A new directory for the files of the scenario `name` (left in place, and named on
    /// stderr, with `BENCH_KEEP_FILES` set).
    pub(crate) fn create(name: &str) -> Result<ExecutionFiles, BenchError> {
        let dir = std::env::temp_dir().join(format!(
            "scheduler-bench-{name}-{}-{}",
            std::process::id(),
            Utc::now().timestamp_millis()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| BenchError::Setup(format!("cannot create {}: {e}", dir.display())))?;
        let keep = std::env::var_os("BENCH_KEEP_FILES").is_some();
        if keep {
            eprintln!("{name}: the nodes' call files are in {}", dir.display());
        }
        Ok(ExecutionFiles { dir, keep })
    }

    /// Node `node`'s file.
    pub(crate) fn path(&self, node: usize) -> PathBuf {
        self.dir.join(format!("node-{node}.tsv"))
    }

    /// Leaves the files in place, to look into.
    pub(crate) fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for ExecutionFiles {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
