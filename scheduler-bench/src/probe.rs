//! The benchmarks' executor: a no-op that counts executions and, when asked, records when each
//! one started relative to its scheduled time and which partition it belongs to.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use scheduler_client::{partition_for, Task};
use scheduler_core::{TaskContext, TaskError, TaskHandler};

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
    executed: AtomicU64,
    /// Milliseconds since the epoch of the first and the latest execution (0: none yet).
    first_ms: AtomicI64,
    last_ms: AtomicI64,
    samples: Mutex<Vec<Sample>>,
}

/// A no-op executor that counts what it runs (shared by clones).
#[derive(Clone)]
pub struct Probe(Arc<ProbeState>);

impl Probe {
    /// A probe for a topic of `partitions` partitions; `record_each` keeps a [`Sample`] per call.
    pub fn new(partitions: u32, record_each: bool) -> Probe {
        Probe(Arc::new(ProbeState {
            partitions,
            record_each,
            executed: AtomicU64::new(0),
            first_ms: AtomicI64::new(0),
            last_ms: AtomicI64::new(0),
            samples: Mutex::new(Vec::new()),
        }))
    }

    /// Executions so far.
    pub fn executed(&self) -> u64 {
        self.0.executed.load(Ordering::SeqCst)
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
