//! The benchmarks' executor: a no-op that counts executions and, when asked, records when each
//! one started relative to its scheduled time and which partition it belongs to, in memory or
//! as one line per execution in a file (the failover scenario's node processes).

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_client::{partition_for, Task};
use scheduler_core::{TaskContext, TaskError, TaskHandler};

use crate::BenchError;

/// One recorded execution.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The task's partition.
    pub partition: i32,
    /// The task's uniqueness key (the benchmarks make them unique per run).
    pub uniqueness_key: String,
    /// When the executor was called.
    pub started: DateTime<Utc>,
    /// Start minus scheduled time, in microseconds.
    pub lateness_us: i64,
}

struct ProbeState {
    partitions: u32,
    record_each: bool,
    /// How long each call takes (zero: it returns at once).
    call: Duration,
    executed: AtomicU64,
    /// Milliseconds since the epoch of the first and the latest execution (0: none yet).
    first_ms: AtomicI64,
    last_ms: AtomicI64,
    samples: Mutex<Vec<Sample>>,
    /// Where each execution is written, when asked.
    log: Option<Mutex<ExecutionLog>>,
    /// Executions whose line could not be written.
    unlogged: AtomicU64,
}

/// A file of executions, one line each:
/// `uniqueness key \t orderingId \t scheduled (ms since the epoch) \t started (µs since the
/// epoch) \t partition \t ended (µs since the epoch) \t limit key (`-`: none)`. The
/// benchmarks' keys and orderingIds hold no tab or newline.
///
/// Each line is written to the file (one `write`, no buffer in the process) before the call
/// returns, so before the engine can count the task as run: a node killed with SIGKILL loses no
/// line of a task the engine considers done (the kernel holds what was written). A task whose
/// line was written but whose end the engine did not record runs again elsewhere, and counts
/// as a duplicate. The start is in microseconds so that two starts of one orderingId in the
/// same millisecond still show their order.
struct ExecutionLog {
    file: File,
    /// The line being written (reused).
    line: String,
}

/// A no-op executor that counts what it runs (shared by clones).
#[derive(Clone)]
pub struct Probe(Arc<ProbeState>);

impl Probe {
    /// A probe for a topic of `partitions` partitions; `record_each` keeps a [`Sample`] per call.
    pub fn new(partitions: u32, record_each: bool) -> Probe {
        Probe::build(partitions, record_each, None, Duration::ZERO)
    }

    /// A probe that writes a line per execution to `path` (created, or truncated), and keeps
    /// no [`Sample`] in memory; each call takes `call` (zero: it returns at once), and its line
    /// is written as it ends.
    pub fn logging_calls(
        partitions: u32,
        path: &Path,
        call: Duration,
    ) -> Result<Probe, BenchError> {
        let file = File::create(path)
            .map_err(|e| BenchError::Setup(format!("cannot create {}: {e}", path.display())))?;
        let log = ExecutionLog {
            file,
            line: String::with_capacity(128),
        };
        Ok(Probe::build(partitions, false, Some(Mutex::new(log)), call))
    }

    fn build(
        partitions: u32,
        record_each: bool,
        log: Option<Mutex<ExecutionLog>>,
        call: Duration,
    ) -> Probe {
        Probe(Arc::new(ProbeState {
            partitions,
            record_each,
            call,
            executed: AtomicU64::new(0),
            first_ms: AtomicI64::new(0),
            last_ms: AtomicI64::new(0),
            samples: Mutex::new(Vec::new()),
            log,
            unlogged: AtomicU64::new(0),
        }))
    }

    /// Executions so far.
    pub fn executed(&self) -> u64 {
        self.0.executed.load(Ordering::SeqCst)
    }

    /// Executions whose line could not be written to the file (see [`Probe::logging_calls`]).
    pub fn unlogged(&self) -> u64 {
        self.0.unlogged.load(Ordering::SeqCst)
    }

    /// When the first execution started.
    pub fn first(&self) -> Option<DateTime<Utc>> {
        from_ms(self.0.first_ms.load(Ordering::SeqCst))
    }

    /// When the latest execution started.
    pub fn last(&self) -> Option<DateTime<Utc>> {
        from_ms(self.0.last_ms.load(Ordering::SeqCst))
    }

    /// The recorded samples (empty unless `record_each`).
    pub fn samples(&self) -> Vec<Sample> {
        self.0
            .samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Forgets the samples recorded so far (the counters keep counting).
    pub fn clear_samples(&self) {
        self.0
            .samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

fn from_ms(ms: i64) -> Option<DateTime<Utc>> {
    (ms != 0)
        .then(|| DateTime::from_timestamp_millis(ms))
        .flatten()
}

impl TaskHandler for Probe {
    async fn execute(&self, task: &Task, _ctx: &TaskContext) -> Result<(), TaskError> {
        let started = Utc::now();
        let state = &self.0;
        let ms = started.timestamp_millis();
        let _ = state
            .first_ms
            .compare_exchange(0, ms, Ordering::SeqCst, Ordering::SeqCst);
        state.last_ms.fetch_max(ms, Ordering::SeqCst);
        if state.record_each {
            let lateness_us = (started - task.scheduled_time)
                .num_microseconds()
                .unwrap_or(i64::MAX);
            state
                .samples
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Sample {
                    partition: partition_for(&task.ordering_id, state.partitions),
                    uniqueness_key: task.uniqueness_key.clone(),
                    started,
                    lateness_us,
                });
        }
        if !state.call.is_zero() {
            tokio::time::sleep(state.call).await;
        }
        let ended = Utc::now();
        if let Some(log) = &state.log {
            let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
            let ExecutionLog { file, line } = &mut *log;
            line.clear();
            let formatted = writeln!(
                line,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                task.uniqueness_key,
                task.ordering_id,
                task.scheduled_time.timestamp_millis(),
                started.timestamp_micros(),
                partition_for(&task.ordering_id, state.partitions),
                ended.timestamp_micros(),
                task.limit_key.as_deref().unwrap_or("-"),
            );
            if formatted.is_err() || file.write_all(line.as_bytes()).is_err() {
                state.unlogged.fetch_add(1, Ordering::SeqCst);
            }
        }
        state.executed.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// A join counts as a task run, as a member does (the big group's drain ends with it).
    async fn group_finished(
        &self,
        task: &Task,
        _group: &scheduler_core::GroupOutcome,
        ctx: &TaskContext,
    ) -> Result<(), TaskError> {
        self.execute(task, ctx).await
    }
}
