//! Node metrics, exposed in the Prometheus text format by [`crate::SchedulerNode::metrics`].
//!
//! design.md's "Metrics" table lists every metric, its labels and what it counts.
//!
//! Over 500 lines: every metric a node exports, each emitted with its log line, so that the
//! exported set reads as one list.

use std::fmt::Display;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::in_flight::InFlightGauges;
use crate::outcome::ExecutionOutcome;
use crate::store::PartitionId;
use scheduler_client::TaskKey;
use tracing::{debug, info, warn};

/// Why a record was parked (skipped, so the partition goes on): the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkReason {
    /// Not a valid task record; the wire format's reason (`json`, `too_large`, ...).
    Invalid(&'static str),
    /// A valid record in the partition of another orderingId.
    WrongPartition,
    /// A task or cancellation Cassandra refuses to store (retrying cannot help).
    RefusedByStore,
}

impl ParkReason {
    fn label(self) -> &'static str {
        match self {
            ParkReason::Invalid(reason) => reason,
            ParkReason::WrongPartition => "wrong_partition",
            ParkReason::RefusedByStore => "refused_by_store",
        }
    }
}

/// What was parked.
#[derive(Debug, Clone, Copy)]
pub enum Parked<'a> {
    /// A record polled from `topic` at `offset`.
    Record {
        /// The tasks topic.
        topic: &'a str,
        /// The record's offset in its partition.
        offset: i64,
    },
    /// A task the store refused.
    Task(&'a TaskKey),
    /// A cancellation the store refused.
    Cancellation(&'a TaskKey),
}

/// A rebalance callback: the `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceKind {
    /// Partitions were taken from this node.
    Revoked,
    /// Partitions were given to this node.
    Assigned,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabel {
    partition: PartitionId,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    partition: PartitionId,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ParkedLabels {
    partition: PartitionId,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    partition: PartitionId,
    stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabel {
    task_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IdentityLabels {
    op: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeadLabels {
    task_type: String,
    reason: &'static str,
}

fn short_durations() -> Histogram {
    // 0.5 ms .. about 16 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

fn long_durations() -> Histogram {
    // 1 ms .. about 9 min
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// What the store has run on Cassandra so far, by operation: statements (requests; a batch is
/// one) and rows (written, or returned by reads).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CqlCounts {
    /// Statements run, by operation.
    pub statements: Vec<(&'static str, u64)>,
    /// Rows written or read, by operation.
    pub rows: Vec<(&'static str, u64)>,
}

/// Reads what the store has run so far ([`CqlCounts`]).
pub type StatementSource = Box<dyn Fn() -> CqlCounts + Send + Sync>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

/// The node's metrics. Shared by the actors and the consumer; cheap to update.
pub struct Metrics {
    /// The registry these metrics are in, when they have one of their own ([`Metrics::new`]);
    /// a node serving queues keeps one for all ([`NodeMetrics`]).
    registry: Option<Registry>,
    persisted: Family<PartitionLabel, Counter>,
    persist_duration: Family<PartitionLabel, Histogram, fn() -> Histogram>,
    executions: Family<OutcomeLabels, Counter>,
    execution_duration: Family<PartitionLabel, Histogram, fn() -> Histogram>,
    execution_delay: Family<PartitionLabel, Histogram, fn() -> Histogram>,
    retries: Family<PartitionLabel, Counter>,
    retries_exhausted: Family<PartitionLabel, Counter>,
    parked: Family<ParkedLabels, Counter>,
    rebalances: Family<KindLabel, Counter>,
    seek_back_failures: Family<PartitionLabel, Counter>,
    cancellations: Family<PartitionLabel, Counter>,
    fencing_rejections: Family<PartitionLabel, Counter>,
    in_memory: Family<StageLabels, Gauge>,
    stale: Family<PartitionLabel, Gauge>,
    statements: Family<OperationLabel, Counter>,
    rows: Family<OperationLabel, Counter>,
    dead_letters: Family<DeadLabels, Counter>,
    identity_records: Family<IdentityLabels, Counter>,
    schedule_fires: Family<OutcomeLabel, Counter>,
    redriven: Family<TypeLabel, Counter>,
    purged: Counter,
    no_handler: Family<TypeLabel, Counter>,
    waiting_for_handler: Family<TypeLabel, Gauge>,
    suspended: Family<PartitionLabel, Gauge>,
    held_by_limit: Family<TypeLabel, Gauge>,
    key_permit_writes: Family<OutcomeLabel, Counter>,
    /// The task types that have waited for a handler (the family cannot list its labels).
    waiting_types: Arc<Mutex<std::collections::BTreeSet<String>>>,
    statement_source: std::sync::OnceLock<StatementSource>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric of the node, all at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let mut metrics = Self::register(&mut registry);
        metrics.registry = Some(registry);
        metrics
    }

    /// Every metric of one queue, registered in `registry`, with the label `queue="<queue>"`
    /// when named (a node of the default queue alone labels nothing, as before queues).
    pub fn for_queue(registry: &mut Registry, queue: Option<&str>) -> Self {
        match queue {
            Some(queue) => Self::register(
                registry.sub_registry_with_label(("queue".into(), queue.to_string().into())),
            ),
            None => Self::register(registry),
        }
    }

    fn register(registry: &mut Registry) -> Self {
        let persisted = Family::default();
        let persist_duration = Family::new_with_constructor(short_durations as fn() -> Histogram);
        let executions = Family::default();
        let execution_duration = Family::new_with_constructor(short_durations as fn() -> Histogram);
        let execution_delay = Family::new_with_constructor(long_durations as fn() -> Histogram);
        let retries = Family::default();
        let retries_exhausted = Family::default();
        let parked = Family::default();
        let rebalances = Family::default();
        let seek_back_failures = Family::default();
        let cancellations = Family::default();
        let fencing_rejections = Family::default();
        let in_memory = Family::default();
        let stale = Family::default();
        let statements = Family::default();
        let rows = Family::default();
        let (dead_letters, redriven, purged) =
            (Family::default(), Family::default(), Counter::default());
        let (no_handler, waiting_for_handler) = (Family::default(), Family::default());
        let identity_records = Family::default();
        let schedule_fires = Family::default();
        let suspended = Family::default();
        let held_by_limit = Family::default();
        let key_permit_writes = Family::default();
        registry.register(
            "scheduler_key_permit_writes",
            "Changes of a limit key's permits across the cluster (lightweight transactions), by outcome (applied, lost: another holder changed the key first, failed), and lapses (this node's permits given up: its heartbeat may have expired)",
            key_permit_writes.clone(),
        );
        registry.register(
            "scheduler_tasks_held_by_limit",
            "Due tasks waiting because their limit key is at its limit (key_concurrency) now, by task type",
            held_by_limit.clone(),
        );
        registry.register(
            "scheduler_schedule_fires",
            "Fire times of recurring schedules handled by this node's ticks, by outcome (enqueued, skippedOverlap, missed)",
            schedule_fires.clone(),
        );
        registry.register(
            "scheduler_suspended_tasks",
            "Due tasks waiting at a suspension (of their orderingId, type or group) now, by partition: the first of each orderingId held (the later ones wait behind it, uncounted; GET /api/v1/tasks?state=suspended lists them all)",
            suspended.clone(),
        );
        registry.register(
            "scheduler_identity_records",
            "Records acting on a task identity, by op (replace, keepTime, debounce, ifAbsent, reschedule, cancel) and result (applied, ignored, duplicate)",
            identity_records.clone(),
        );
        registry.register(
            "scheduler_dead_letters",
            "Tasks recorded as dead letters, by task type and reason (invalid, retries_exhausted)",
            dead_letters.clone(),
        );
        registry.register(
            "scheduler_dead_letters_redriven",
            "Dead letters redriven (enqueued again) through this node's admin API, by task type",
            redriven.clone(),
        );
        registry.register(
            "scheduler_dead_letters_purged",
            "Dead letters purged through this node's admin API",
            purged.clone(),
        );
        registry.register(
            "scheduler_no_handler_waits",
            "Waits of a due task whose type has no handler on this node, by task type",
            no_handler.clone(),
        );
        registry.register(
            "scheduler_tasks_waiting_for_handler",
            "Due tasks waiting because their type has no handler on this node, by task type",
            waiting_for_handler.clone(),
        );
        registry.register(
            "scheduler_tasks_persisted",
            "Tasks written to the schedule",
            persisted.clone(),
        );
        registry.register(
            "scheduler_persist_duration_seconds",
            "Time to persist one polled batch of a partition",
            persist_duration.clone(),
        );
        registry.register(
            "scheduler_executions",
            "Tasks done with, by outcome (completed, failed, dropped, already_finished, abandoned)",
            executions.clone(),
        );
        registry.register(
            "scheduler_execution_duration_seconds",
            "Duration of one call of the user's executor",
            execution_duration.clone(),
        );
        registry.register(
            "scheduler_execution_delay_seconds",
            "First attempt's start minus the task's scheduled time",
            execution_delay.clone(),
        );
        registry.register(
            "scheduler_retries",
            "Retries scheduled after a failed attempt",
            retries.clone(),
        );
        registry.register(
            "scheduler_retries_exhausted",
            "Tasks recorded failed after their last retry",
            retries_exhausted.clone(),
        );
        registry.register(
            "scheduler_parked_records",
            "Records skipped because they are not valid tasks, by reason",
            parked.clone(),
        );
        registry.register(
            "scheduler_rebalances",
            "Rebalance callbacks, by kind",
            rebalances.clone(),
        );
        registry.register(
            "scheduler_seek_back_failures",
            "Failed seeks back to a batch that was not persisted (the partition is held, nothing of it committed, until one succeeds), by partition",
            seek_back_failures.clone(),
        );
        registry.register(
            "scheduler_cancellations",
            "Tasks cancelled before they ran",
            cancellations.clone(),
        );
        registry.register(
            "scheduler_fencing_rejections",
            "Task starts or outcome records refused because another tree claimed the partition",
            fencing_rejections.clone(),
        );
        registry.register(
            "scheduler_tasks_in_memory",
            "Tasks held in memory, by stage (scheduled: waiting to be due; executing: queued or running)",
            in_memory.clone(),
        );
        registry.register(
            "scheduler_stale_tasks",
            "Incomplete tasks due longer ago than stale_after (sampled every 30 s, at most 1000 counted)",
            stale.clone(),
        );
        registry.register(
            "scheduler_cql_statements",
            "Statements the node ran on Cassandra, by operation (a batch is one; read when scraped)",
            statements.clone(),
        );
        registry.register(
            "scheduler_cql_rows",
            "Rows the node's statements wrote or read on Cassandra, by operation (read when scraped)",
            rows.clone(),
        );
        Metrics {
            registry: None,
            statements,
            rows,
            dead_letters,
            identity_records,
            schedule_fires,
            redriven,
            purged,
            no_handler,
            waiting_for_handler,
            suspended,
            held_by_limit,
            key_permit_writes,
            waiting_types: Default::default(),
            statement_source: std::sync::OnceLock::new(),
            persisted,
            persist_duration,
            executions,
            execution_duration,
            execution_delay,
            retries,
            retries_exhausted,
            parked,
            rebalances,
            seek_back_failures,
            cancellations,
            fencing_rejections,
            in_memory,
            stale,
        }
    }

    /// `count` tasks of `partition` persisted in `took`.
    pub fn persisted(&self, partition: PartitionId, count: usize, took: Duration) {
        self.persisted
            .get_or_create(&PartitionLabel { partition })
            .inc_by(count as u64);
        self.persist_duration
            .get_or_create(&PartitionLabel { partition })
            .observe(took.as_secs_f64());
    }

    /// A task is done with.
    pub fn executed(&self, partition: PartitionId, outcome: ExecutionOutcome) {
        let outcome = match outcome {
            ExecutionOutcome::Completed => "completed",
            ExecutionOutcome::Failed => "failed",
            ExecutionOutcome::Dropped => "dropped",
            ExecutionOutcome::AlreadyFinished => "already_finished",
            ExecutionOutcome::Abandoned => "abandoned",
            ExecutionOutcome::Fenced => "fenced",
        };
        self.executions
            .get_or_create(&OutcomeLabels { partition, outcome })
            .inc();
    }

    /// One handler call took `took`; `delay` is set for a task's first attempt.
    pub fn attempt(&self, partition: PartitionId, took: Duration, delay: Option<Duration>) {
        self.execution_duration
            .get_or_create(&PartitionLabel { partition })
            .observe(took.as_secs_f64());
        if let Some(delay) = delay {
            self.execution_delay
                .get_or_create(&PartitionLabel { partition })
                .observe(delay.as_secs_f64());
        }
    }

    // The observations below each write their log line and move their metric together, so
    // neither is forgotten where the other is.

    /// A failed attempt of `task` (the `attempt`-th) is retried in `delay`.
    pub fn retry_scheduled(
        &self,
        partition: PartitionId,
        task: &TaskKey,
        attempt: u32,
        reason: &str,
        delay: Duration,
    ) {
        info!(partition, %task, attempt, %reason, retry_in_ms = delay.as_millis() as u64,
            "task failed; retry scheduled");
        self.retries
            .get_or_create(&PartitionLabel { partition })
            .inc();
    }

    /// `task` failed its last retry (`attempts` in all) and is recorded failed.
    pub fn retries_exhausted(
        &self,
        partition: PartitionId,
        task: &TaskKey,
        attempts: u32,
        reason: &str,
    ) {
        warn!(partition, %task, attempts, %reason, "retries exhausted; task failed");
        self.retries_exhausted
            .get_or_create(&PartitionLabel { partition })
            .inc();
    }

    /// `task` became a dead letter after `attempts` attempts.
    pub fn dead_lettered(
        &self,
        partition: PartitionId,
        task: &TaskKey,
        task_type: &str,
        reason: crate::store::DeadReason,
        attempts: u32,
        error: &str,
    ) {
        warn!(partition, %task, task_type, reason = reason.as_str(), attempts, %error,
            "task recorded as a dead letter");
        self.dead_letters
            .get_or_create(&DeadLabels {
                task_type: task_type.to_string(),
                reason: reason.as_str(),
            })
            .inc();
    }

    /// A record acting on an identity was applied, ignored, or found applied before.
    pub fn identity_record(&self, op: &'static str, result: &'static str) {
        self.identity_records
            .get_or_create(&IdentityLabels { op, result })
            .inc();
    }

    /// A tick handled `count` fire times of a recurring schedule with `outcome`.
    pub fn schedule_fires(&self, outcome: &'static str, count: u64) {
        self.schedule_fires
            .get_or_create(&OutcomeLabel { outcome })
            .inc_by(count);
    }

    /// A dead letter of `task_type` was redriven.
    pub fn redriven(&self, task_type: &str) {
        self.redriven
            .get_or_create(&TypeLabel {
                task_type: task_type.to_string(),
            })
            .inc();
    }

    /// `count` dead letters were purged.
    pub fn purged(&self, count: usize) {
        self.purged.inc_by(count as u64);
    }

    /// A due task of `task_type` waits `delay` because no handler on this node runs its type;
    /// the returned guard counts it as waiting until dropped.
    pub fn no_handler(
        &self,
        partition: PartitionId,
        task: &TaskKey,
        task_type: &str,
        delay: Duration,
    ) -> WaitingForHandler {
        info!(partition, %task, task_type, retry_in_ms = delay.as_millis() as u64,
            "no handler for the task's type on this node; it waits (it runs once a node with the handler owns the partition)");
        let label = TypeLabel {
            task_type: task_type.to_string(),
        };
        self.no_handler.get_or_create(&label).inc();
        self.waiting_types
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(label.task_type.clone());
        let gauge = self.waiting_for_handler.get_or_create(&label).clone();
        gauge.inc();
        WaitingForHandler(gauge)
    }

    /// A due task held back by a suspension: counted until the returned guard drops.
    pub fn suspended(&self, partition: PartitionId) -> WaitingForHandler {
        let gauge = self
            .suspended
            .get_or_create(&PartitionLabel { partition })
            .clone();
        gauge.inc();
        WaitingForHandler(gauge)
    }

    /// A due task held back because its limit key is at its limit: counted until the returned
    /// guard drops.
    pub fn held_by_limit(&self, task_type: &str) -> WaitingForHandler {
        let label = TypeLabel {
            task_type: task_type.to_string(),
        };
        let gauge = self.held_by_limit.get_or_create(&label).clone();
        gauge.inc();
        WaitingForHandler(gauge)
    }

    /// A change of a limit key's permits with `outcome` (applied, lost, failed), or a lapse of
    /// this node's permits (`lapsed`).
    pub fn key_permit_write(&self, outcome: &'static str) {
        self.key_permit_writes
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// Due tasks waiting for a handler now, by task type (for the admin API).
    pub fn waiting_for_handler(&self) -> Vec<(String, i64)> {
        let types = self
            .waiting_types
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        types
            .into_iter()
            .map(|task_type| {
                let label = TypeLabel { task_type };
                let count = self.waiting_for_handler.get_or_create(&label).get();
                (label.task_type, count)
            })
            .filter(|(_, count)| *count > 0)
            .collect()
    }

    /// `what` was parked: skipped so the partition goes on; `detail` says what is wrong.
    pub fn parked(
        &self,
        partition: PartitionId,
        what: Parked<'_>,
        reason: ParkReason,
        detail: &dyn Display,
    ) {
        let label = reason.label();
        match what {
            Parked::Record { topic, offset } => warn!(%topic, partition, offset, reason = label,
                %detail, "parked a record that is not a valid task (skipped)"),
            Parked::Task(task) => warn!(partition, %task, reason = label, %detail,
                "parked a task Cassandra refuses to store (skipped)"),
            Parked::Cancellation(task) => warn!(partition, %task, reason = label, %detail,
                "parked a cancellation Cassandra refuses to store (skipped)"),
        }
        self.parked
            .get_or_create(&ParkedLabels {
                partition,
                reason: label,
            })
            .inc();
    }

    /// `task` was cancelled before it ran.
    pub fn cancelled(&self, partition: PartitionId, task: &TaskKey) {
        info!(partition, %task, "task cancelled");
        self.cancellations
            .get_or_create(&PartitionLabel { partition })
            .inc();
    }

    /// A fenced tree refused to start a task or record its outcome.
    pub fn fencing_rejection(&self, partition: PartitionId) {
        self.fencing_rejections
            .get_or_create(&PartitionLabel { partition })
            .inc();
    }

    /// The sampled number of stale tasks of `partition`.
    pub fn stale_tasks(&self, partition: PartitionId, count: usize) {
        self.stale
            .get_or_create(&PartitionLabel { partition })
            .set(count as i64);
    }

    /// Drops the per-partition gauges of a partition this node no longer owns.
    pub fn forget_partition(&self, partition: PartitionId) {
        self.stale.remove(&PartitionLabel { partition });
    }

    /// A rebalance callback ran for `partitions`.
    pub fn rebalanced(&self, kind: RebalanceKind, partitions: &[PartitionId]) {
        let kind = match kind {
            RebalanceKind::Revoked => {
                info!(revoked = ?partitions, "partitions revoked: stopping their trees");
                "revoked"
            }
            RebalanceKind::Assigned => {
                info!(assigned = ?partitions, "partitions assigned: loading their schedules");
                "assigned"
            }
        };
        self.rebalances.get_or_create(&KindLabel { kind }).inc();
    }

    /// The consumer failed, for the `attempts`th time in a row, to seek `partition` back to
    /// `offset`, the first offset of a batch that was not persisted: until a seek succeeds, the
    /// partition's records are left alone and nothing of it is committed. Logged at warn the
    /// first time and every 50th (it is retried at every poll), at debug otherwise.
    pub fn seek_back_failed(
        &self,
        partition: PartitionId,
        offset: i64,
        attempts: u32,
        error: &dyn Display,
    ) {
        if attempts == 1 || attempts.is_multiple_of(50) {
            warn!(partition, offset, attempts, %error,
                "seek back to a batch not persisted failed: the partition is held, nothing of it is committed, the seek is retried at every poll");
        } else {
            debug!(partition, offset, attempts, %error, "seek back failed again");
        }
        self.seek_back_failures
            .get_or_create(&PartitionLabel { partition })
            .inc();
    }

    /// Where the statement and row counts come from (the node's store); set once.
    pub fn count_statements_from(&self, source: StatementSource) {
        let _ = self.statement_source.set(source);
    }

    /// The metrics in the Prometheus text format, with the in-memory gauges read from `in_flight`
    /// (empty for metrics in a node's registry: [`NodeMetrics::encode`] has them).
    #[cfg(test)]
    pub fn encode(&self, in_flight: &InFlightGauges) -> String {
        self.refresh(in_flight);
        let mut text = String::new();
        if let Some(registry) = &self.registry {
            // Writing into a String cannot fail.
            let _ = prometheus_client::encoding::text::encode(&mut text, registry);
        }
        text
    }

    /// Reads what is sampled when scraped: statement counts and tasks in memory.
    fn refresh(&self, in_flight: &InFlightGauges) {
        if let Some(source) = self.statement_source.get() {
            let counts = source();
            for (family, counts) in [
                (&self.statements, counts.statements),
                (&self.rows, counts.rows),
            ] {
                for (operation, count) in counts {
                    let counter = family.get_or_create(&OperationLabel { operation });
                    // The store's counts only grow: the counter catches up with them.
                    counter.inc_by(count.saturating_sub(counter.get()));
                }
            }
        }
        self.in_memory.clear();
        for (partition, gauge) in in_flight.all() {
            let held = gauge.held();
            self.in_memory
                .get_or_create(&StageLabels {
                    partition,
                    stage: "scheduled",
                })
                .set(held as i64);
            self.in_memory
                .get_or_create(&StageLabels {
                    partition,
                    stage: "executing",
                })
                .set(gauge.current().saturating_sub(held) as i64);
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ByLabel {
    by: &'static str,
}

/// The metrics of a node serving queues: one registry, each queue's metrics labelled with it,
/// and the node's own (its admin listener's).
#[derive(Debug)]
pub struct NodeMetrics {
    registry: Registry,
    queues: Vec<(Arc<Metrics>, InFlightGauges)>,
    failed_logins: Family<ByLabel, Counter>,
    /// The remote workers' metrics, read at each scrape.
    remote: Option<crate::remote::RemoteMetrics>,
}

impl NodeMetrics {
    /// The metrics of `queues`, all in `registry`.
    pub fn new(mut registry: Registry, queues: Vec<(Arc<Metrics>, InFlightGauges)>) -> Self {
        let failed_logins = Family::<ByLabel, Counter>::default();
        registry.register(
            "scheduler_admin_failed_logins",
            "Wrong tokens presented to the admin listener, by where (authorization header, login form)",
            failed_logins.clone(),
        );
        NodeMetrics {
            registry,
            queues,
            failed_logins,
            remote: None,
        }
    }

    /// With the remote workers' metrics (registered in the registry given to `new`).
    pub fn with_remote(mut self, remote: Option<crate::remote::RemoteMetrics>) -> Self {
        self.remote = remote;
        self
    }

    /// Counts a wrong token presented to the admin listener `by` a header or the login form.
    pub fn failed_login(&self, by: &'static str) {
        self.failed_logins.get_or_create(&ByLabel { by }).inc();
    }

    /// Every queue's metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        for (metrics, in_flight) in &self.queues {
            metrics.refresh(in_flight);
        }
        if let Some(remote) = &self.remote {
            remote.refresh();
        }
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// A task counted as waiting for a handler until dropped.
#[derive(Debug)]
pub struct WaitingForHandler(Gauge);

impl Drop for WaitingForHandler {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests;
