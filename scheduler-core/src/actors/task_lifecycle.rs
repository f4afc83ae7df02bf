//! The life of one task, from dispatch to outcome, as one async function (the blueprint's
//! short-lived TaskExecutor actor). Every step and its invariant, in order:
//!
//! 1. **Owner and predecessors.** The tree's claim has completed (an ownership check), and no
//!    earlier tree of the partition still runs a call of this orderingId (its lease entry is
//!    gone: see [`crate::lease`]).
//! 2. **Lease.** The orderingId's entry in the tree's running-task lease is durable.
//! 3. **Ownership, read after the lease** entry was durable and after the task entered the tree.
//!    A stale tree is fenced here; a newer one waits at 1. (An entry may have been durable since
//!    an earlier task of the orderingId: a read begun before this task was loaded could predate
//!    a newer tree's claim, and that tree may hold earlier tasks of the orderingId this one
//!    never saw, persisted from the broker after the claim; they must run first.)
//! 4. **Status**, read while 2 and 3 are under way. A task with a final status (completed,
//!    failed, dropped, cancelled) is not run. Earlier trees recorded their outcomes before 1
//!    let the task on, and a newer tree's fences this one at 3. The task arms the tree's
//!    [`CancelGate`] first, so a cancel applied after the read is seen too. A task with a
//!    conflict mode also reads its identity's record: superseded, it is not run; else it runs
//!    the record's copy of itself (the newest data an update gave it). A cancelled, failed
//!    or dropped member of a group found so records its outcome in the group first. Then, in
//!    order: a task whose type has no handler here, or that is suspended (its orderingId, type
//!    or group: [`crate::suspend`]), waits without an attempt and comes back to 2; a member of
//!    a fail-fast group that failed is recorded `cancelled` (as in 7); a join reads its group.
//! 5. **Time, then slot.** The task was dispatched `dispatch_lead` before its time, so steps
//!    1-4 are done by then: it waits for its time, then for a slot of the execution pool, on
//!    the pool's runtime (a busy actor thread would make the call late). The checks still hold
//!    if the lease stayed live without a break (no newer tree can have started the task: it
//!    waits at 1 for the entry), no cancel or update of the task was applied and no suspension
//!    of it read meanwhile; otherwise they are taken again from 2.
//! 6. **Call.** The user's executor, with a [`TaskContext`]; the call keeps its slot and lease
//!    entry until it returns, even if this function is dropped with its tree. It begins in the
//!    cancel gate, which counts it as begun until its outcome is recorded: an update of the
//!    task arriving meanwhile makes a new version of it ([`crate::identity`]).
//! 7. **Record, as owner.** A retryable failure records the attempt (a later tree that may
//!    find it continues the attempt numbers), waits out its backoff and goes back to 2. A final
//!    outcome records its attempt (none for a first attempt: the status says it all), then the
//!    final status (completed, dropped, failed once retries are exhausted). A success first
//!    enqueues the sub-tasks or the job's buckets the call spawned ([`crate::groups`]); a
//!    member of a group records its outcome in the group (which may enqueue the join) before
//!    its status, unless it spawned sub-tasks (their join takes its place). Each record only
//!    after ownership is confirmed, and again before every retried write.
//!
//! Before the call, the tree's stop signal (revoke, rebuild, fence) abandons the task at once:
//! it stays in Cassandra for the next tree. After the call, the outcome is recorded if the tree
//! still owns the partition.

use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use scheduler_client::trace::parse_trace_parent;
use scheduler_client::{GroupMember, Task, TaskIdentity, TaskKey};
use tokio::sync::watch;
use tracing::{debug, warn, Instrument};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::partition_ownership::{CheckOwnership, Ownership, PartitionOwnership};
use super::{PartitionDeps, TreeError};
use crate::cancel_gate::{Armed, CancelGate};
use crate::clock::Stamp;
use crate::executor::{
    Called, ExecutionOutcome, GroupOutcome, ProgressReporter, StopReason, TaskContext, TaskError,
};
use crate::groups;
use crate::identity::Version;
use crate::in_flight::Pin;
use crate::lease::{LeaseHold, TreeLease};
use crate::retry::{backoff_delay, exponential_period};
use crate::store::{
    AttemptOutcome, AttemptRecord, DeadLetter, DeadReason, JobRecord, ParentRecord, PartitionId,
    StatusRecord, StoreResult, SuspensionTarget, TaskStatus,
};
use futures::future::OptionFuture;
use futures::{StreamExt, TryStreamExt};

/// First wait before retrying a store step (status read, lease write, record) that failed.
const STORE_RETRY_BASE: Duration = Duration::from_millis(500);

/// First wait of a task whose type has no handler on this node; the waits double up to
/// `max_backoff`.
const NO_HANDLER_RETRY_BASE: Duration = Duration::from_secs(1);

/// What a task's lifecycle consults in its tree: the ownership fence, the running-task lease,
/// and the tree's stop signal.
#[derive(Clone)]
pub struct ExecutionLinks {
    /// Answers whether the tree still owns the partition.
    pub ownership: Addr<PartitionOwnership>,
    /// The tree's running-task lease.
    pub lease: TreeLease,
    /// Set once the tree stops (revoke, rebuild, fence): tasks that have not called the
    /// executor yet give up, and running calls see it in their context.
    pub stop: tokio::sync::watch::Receiver<Option<StopReason>>,
    /// Cancels the tree is applying, seen by tasks already checked.
    pub cancels: CancelGate,
}

/// A step could not go on: the tree stops, or it lost the partition.
enum Halt {
    Abandoned,
    Fenced,
}

impl From<Halt> for ExecutionOutcome {
    fn from(halt: Halt) -> Self {
        match halt {
            Halt::Abandoned => ExecutionOutcome::Abandoned,
            Halt::Fenced => ExecutionOutcome::Fenced,
        }
    }
}

/// Runs `task` to its outcome in the tree of `links`; `pin` keeps the partition's low-water
/// mark at or before the task until it is final, unless the mark lists it.
pub(crate) async fn run_task(
    partition: PartitionId,
    task: Task,
    pin: Option<Pin>,
    deps: PartitionDeps,
    links: ExecutionLinks,
) -> ExecutionOutcome {
    let key = task.key();
    // OpenTelemetry's messaging conventions: the processing of a message, linked to the
    // context that produced it (a link, not a parent: the task may run hours later, from
    // Cassandra, on another node). Without an OpenTelemetry layer the link is a no-op.
    let span = tracing::info_span!(
        "task",
        partition,
        task_type = %task.task_type,
        ordering_id = %key.ordering_id,
        uniqueness_key = %key.uniqueness_key,
        scheduled_time = %scheduler_client::wire::format_time(key.scheduled_time),
        otel.kind = "consumer",
        messaging.system = "kafka",
        messaging.operation.type = "process",
        messaging.destination.partition.id = partition,
    );
    if let Some(producer) = task.trace_parent.as_deref().and_then(parse_trace_parent) {
        span.add_link(producer);
    }
    let mut run = TaskRun {
        partition,
        key,
        stop: links.stop.clone(),
        deps,
        links,
        attempts: 0,
        entered: Stamp::now(),
        _pin: pin,
        called: false,
        store_failures: 0,
        handler_waits: 0,
        membership_deferred: false,
        outcome_hold: None,
        rng: fastrand::Rng::new(),
        span: span.clone(),
    };
    let outcome = match run.lifecycle(task).instrument(span).await {
        Ok(outcome) => outcome,
        Err(halt) => halt.into(),
    };
    // The outcome is recorded: the orderingId leaves the lease.
    drop(run.outcome_hold.take());
    run.deps.metrics.executed(partition, outcome);
    debug!(partition, task = %run.key, ?outcome, attempts = run.attempts, "task done");
    outcome
}

struct TaskRun {
    partition: PartitionId,
    key: TaskKey,
    deps: PartitionDeps,
    links: ExecutionLinks,
    stop: watch::Receiver<Option<StopReason>>,
    attempts: u32,
    /// When the task entered the tree (loaded or persisted, then dispatched): see step 3.
    entered: Stamp,
    /// Keeps the low-water mark at or before the task (unless the mark lists it) until the
    /// task is final.
    _pin: Option<Pin>,
    /// The executor has been called in this tree (the stop signal no longer interrupts).
    called: bool,
    store_failures: u32,
    /// Waits for a handler so far (see `wait_for_handler`).
    handler_waits: u32,
    /// The task spawned sub-tasks: their join records it in its group, not its own status.
    membership_deferred: bool,
    /// The lease entry of the call whose outcome is being recorded (see `owner_of_outcome`);
    /// released once it is recorded, or when the task is to be retried.
    outcome_hold: Option<LeaseHold>,
    rng: fastrand::Rng,
    span: tracing::Span,
}

impl TaskRun {
    async fn lifecycle(&mut self, mut task: Task) -> Result<ExecutionOutcome, Halt> {
        // 1. The claim is complete, so earlier trees' leases are all visible now.
        self.owner(None).await?;
        let lease = self.links.lease.clone();
        let ordering_id = self.key.ordering_id.clone();
        self.store_step("lease read", || lease.wait_for_predecessors(&ordering_id))
            .await?;
        loop {
            // 2. The lease entry, then 3. ownership read after it; 4. meanwhile, whether the
            // task is finished or cancelled (armed first, see step 5). The status read needs
            // no lease: earlier trees recorded their outcomes before step 1 let this task on,
            // and a newer tree's outcome fences this one at 3.
            let armed = self.links.cancels.arm(&self.key);
            let earlier = self.attempts == 0 && lease.may_have_earlier_attempts(&self.key);
            let status_read = read_status(
                self.deps.store.clone(),
                self.partition,
                self.key.clone(),
                task.on_conflict.is_some(),
                earlier,
                self.stop.clone(),
            );
            let task_text = self.key.to_string();
            let lease_and_owner = async {
                let hold = self
                    .unless_stopped(lease.hold(&ordering_id, &task_text))
                    .await?;
                let read_after = hold.durable_since().max(self.entered);
                let epoch = self.owner(Some(read_after)).await?;
                Ok::<_, Halt>((hold, epoch))
            };
            let (held, status) = futures::future::join(lease_and_owner, status_read).await;
            let (hold, epoch) = held?;
            let ((status, current), last_attempt) = match status {
                Some(Ok(read)) => read,
                Some(Err(e)) => {
                    self.store_failed("status read", &e.into()).await?;
                    continue;
                }
                None => return Err(Halt::Abandoned),
            };
            self.store_failures = 0;
            let partition = self.partition;
            if let Some(last) = last_attempt {
                debug!(partition, task = %self.key, last_attempt = last,
                    "attempted by an earlier tree; attempt numbers go on");
                self.attempts = self.attempts.max(last);
            }
            if let Some(found) = status {
                drop((hold, armed));
                return self.found_finished(&task, found).await;
            }
            // A task with a conflict mode runs its identity's copy of it: a record may have
            // given it new data since it was loaded (`identity`).
            if let Some(current) = current {
                task = *current;
            }
            if !self.deps.pool.handles(&task.task_type) {
                drop((hold, armed));
                self.wait_for_handler(&task.task_type).await?;
                continue;
            }
            // A suspended task (its orderingId, type or group) waits like one without a
            // handler: pending, no attempt used, holding nothing back, until resumed.
            if self.deps.suspensions.borrow().of(&task).is_some() {
                drop((hold, armed));
                self.wait_while_suspended(&task).await?;
                continue;
            }
            // A member of a fail-fast group that failed meanwhile is cancelled, not run: an
            // outcome like a call's, so it begins as a call does. A cancel applied since the
            // status read is its final status instead (checking again finds it).
            if let Some(failed_by) = self.group_failed_by(&task).await? {
                drop(hold);
                if !armed.begin() {
                    debug!(partition, task = %self.key, "a cancel was applied after the status read; checking again once it is recorded");
                    self.unless_stopped(armed.settled()).await?;
                    continue;
                }
                let why = format!("its group failed fast: member {failed_by} failed");
                debug!(partition, task = %self.key, failed_by, "cancelled by its fail-fast group");
                let recorded =
                    (self.record_final(&task, TaskStatus::Cancelled, Some(why), None)).await;
                drop(armed);
                return recorded;
            }
            // A join is called with its group as stored now (every member's outcome is there:
            // each was written before the read that triggered the join).
            let group = self.joined_group(&task).await?;
            // 5. Its time, then a slot, then 6. the call: waited for on the pool's runtime, so
            // that a busy actor thread does not make the call late. The checks still hold if
            // the lease stayed live without a break since step 2 (else a newer tree may have
            // taken the task over: a pause of the process, a step retried past the TTL) and no
            // cancel reached the task since its status read.
            self.attempts += 1;
            let context = self.context(&task, epoch, &hold, group.clone());
            let output = context.output_slot();
            // Once begun, the call counts as begun in the cancel gate until its outcome is
            // recorded (or it is to be retried): an update of the task arriving meanwhile
            // makes a new version of it rather than being finished with this one.
            let call = armed.clone();
            let called = self
                .deps
                .pool
                .call_when_due(
                    self.key.scheduled_time,
                    (hold, armed),
                    ready_to_call(&task, &self.deps.suspensions),
                    task.clone(),
                    context.clone(),
                    self.span.clone(),
                    self.stop.clone(),
                )
                .await;
            // A slot had long after the task's time: its checks are stale (a newer owner may
            // have recorded a cancel meanwhile), so the status is read again in the slot, as
            // when the slot came first.
            let called = match called {
                Called::Stale {
                    held: (hold, armed),
                    slot,
                } => {
                    debug!(partition, task = %self.key, "the slot came late; reading the status again in it");
                    let (store, key) = (self.deps.store.clone(), self.key.clone());
                    let by_identity = task.on_conflict.is_some();
                    let found = self
                        .store_step("status read", || {
                            let (store, key) = (store.clone(), key.clone());
                            async move {
                                finished_or_superseded(store.as_ref(), partition, &key, by_identity)
                                    .await
                            }
                        })
                        .await?;
                    if let (Some(found), _) = found {
                        return self.found_finished(&task, found).await;
                    }
                    let held = (hold, armed);
                    if ready_to_call(&task, &self.deps.suspensions)(&held) {
                        // (The same context: its result lands where the lifecycle takes it.)
                        let context = context.clone();
                        let pool = &self.deps.pool;
                        pool.call_in_slot(slot, held, task.clone(), context, self.span.clone())
                            .await
                    } else {
                        Called::NotReady(held)
                    }
                }
                called => called,
            };
            // The lease entry comes back with the result and is kept until the outcome is
            // recorded: a newer tree must not start the task between the call's end and its
            // final status (it would run it again).
            let (result, hold, started_at) = match called {
                Called::Done {
                    result,
                    held,
                    started_at,
                } => (result, held.map(|(hold, _armed)| hold), started_at),
                Called::Stopped => {
                    self.attempts -= 1;
                    return Err(Halt::Abandoned);
                }
                // (A stale answer was taken care of above; checking again would do too.)
                Called::NotReady((hold, armed))
                | Called::Stale {
                    held: (hold, armed),
                    ..
                } => {
                    self.attempts -= 1;
                    drop(hold);
                    if armed.touched() {
                        debug!(partition, task = %self.key, "a cancel was applied after the status read; checking again once it is recorded");
                        self.unless_stopped(armed.settled()).await?;
                    } else {
                        debug!(partition, task = %self.key, "lease lapsed, or the task was suspended, before the call; checking again");
                    }
                    continue;
                }
            };
            self.called = true;
            self.outcome_hold = hold;
            let delay = started_at - self.key.scheduled_time;
            debug!(partition, task = %self.key, attempt = self.attempts, epoch,
                delay_ms = delay.num_milliseconds(), "task called");
            let first_delay = (self.attempts == 1).then(|| delay.to_std().unwrap_or_default());
            let took = (self.deps.clock.now() - started_at)
                .to_std()
                .unwrap_or_default();
            self.deps.metrics.attempt(self.partition, took, first_delay);
            // 7. Record, as owner. A first attempt that ends the task is recorded by its
            // status alone (the usual case: one write per task less). Any other attempt follows
            // a failure and is recorded; a later tree that may find it reads the history to
            // continue the attempt numbers (see `TreeLease::may_have_earlier_attempts`).
            let (outcome, error) = match &result {
                Ok(()) => (AttemptOutcome::Succeeded, None),
                Err(TaskError::Retry { reason, .. }) => {
                    (AttemptOutcome::Failed, Some(reason.clone()))
                }
                Err(TaskError::Invalid(reason)) => (AttemptOutcome::Invalid, Some(reason.clone())),
            };
            let limits = self.deps.settings.limits_for(&task.task_type);
            let retrying = matches!(result, Err(TaskError::Retry { .. }))
                && self.attempts <= limits.max_task_retries;
            if retrying || self.attempts > 1 {
                self.record_attempt(AttemptRecord {
                    attempt: self.attempts,
                    started_at,
                    finished_at: self.deps.clock.now(),
                    outcome,
                    error,
                })
                .await?;
            }
            let (reason, after) = match result {
                Ok(()) => {
                    let job = output.take_job();
                    let children = match &job {
                        Some(job) => groups::job_buckets(&task, job, self.deps.partitions),
                        None => output.take_spawned(),
                    };
                    let result = output.take_result();
                    if !children.is_empty() {
                        let job = job.map(|job| job.id);
                        self.spawn_children(&task, children, job, result.clone())
                            .await?;
                    }
                    return self
                        .record_final(&task, TaskStatus::Completed, None, result)
                        .await;
                }
                Err(TaskError::Invalid(reason)) => {
                    self.dead_letter(&task, DeadReason::Invalid, &reason)
                        .await?;
                    return self
                        .record_final(&task, TaskStatus::Dropped, Some(reason), None)
                        .await;
                }
                Err(TaskError::Retry { reason, after }) => (reason, after),
            };
            if self.attempts > limits.max_task_retries {
                self.deps
                    .metrics
                    .retries_exhausted(partition, &self.key, self.attempts, &reason);
                self.dead_letter(&task, DeadReason::RetriesExhausted, &reason)
                    .await?;
                return self
                    .record_final(&task, TaskStatus::Failed, Some(reason), None)
                    .await;
            }
            let delay = after.unwrap_or_else(|| {
                backoff_delay(
                    self.attempts,
                    limits.backoff_factor,
                    limits.max_backoff,
                    &mut self.rng,
                )
            });
            self.deps
                .metrics
                .retry_scheduled(partition, &self.key, self.attempts, &reason, delay);
            self.called = false;
            // (The retry checks again: an update meanwhile gives it its new data.)
            drop((self.outcome_hold.take(), call));
            self.unless_stopped(tokio::time::sleep(delay)).await?;
        }
    }

    /// A task found finished by its status check. A member of a group found cancelled, failed
    /// or dropped records that in its group first (recording it again is harmless): a cancel
    /// applied before the task was in the schedule had no row to learn its group from, and a
    /// failure's outcome may have been cut off between its dead letter and its group.
    async fn found_finished(
        &mut self,
        task: &Task,
        found: Found,
    ) -> Result<ExecutionOutcome, Halt> {
        if let Found::Final(record) = &found {
            // (Not a completed one: a task that spawned sub-tasks is recorded by their join.)
            if record.status != TaskStatus::Completed && task.group.is_some() {
                self.record_in_group(task, record).await?;
            }
        }
        Ok(self.already_finished(&found))
    }

    /// A task found finished (or cancelled, or superseded by a newer task of its identity) by
    /// its status check: out of the schedule, not run.
    fn already_finished(&self, found: &Found) -> ExecutionOutcome {
        match found {
            Found::Final(status) => debug!(partition = self.partition, task = %self.key,
                status = status.status.as_str(), "task already finished; not running it again"),
            Found::Superseded => debug!(partition = self.partition, task = %self.key,
                "superseded by a newer task of its identity; not running it"),
        }
        self.remove_from_schedule();
        ExecutionOutcome::AlreadyFinished
    }

    /// The context of the attempt about to be made, under `epoch` and `hold`'s lease (with its
    /// finished group, for a join; with where its progress goes, for a group's member).
    fn context(
        &self,
        task: &Task,
        epoch: u64,
        hold: &LeaseHold,
        group: Option<Arc<GroupOutcome>>,
    ) -> TaskContext {
        let mut context = TaskContext::new(
            self.partition,
            epoch,
            self.attempts,
            self.stop.clone(),
            hold.watch(),
        );
        if let Some(group) = group {
            context = context.with_group(group);
        }
        if let Some(member) = &task.group {
            context = context.with_progress(Arc::new(ProgressReporter {
                store: self.deps.store.clone(),
                clock: self.deps.clock.clone(),
                group: groups::group_of(task, member),
                member: member.index,
            }));
        }
        context
    }

    /// For a member of a fail-fast group: the member whose failure finished the group, unless
    /// it is this one (run again after a crash, it runs on).
    async fn group_failed_by(&mut self, task: &Task) -> Result<Option<u32>, Halt> {
        let Some(member) = task.group.as_ref().filter(|m| m.fail_fast) else {
            return Ok(None);
        };
        let (store, group) = (self.deps.store.clone(), groups::group_of(task, member));
        let header = self
            .store_step("group read", || store.group_header(group.clone()))
            .await?;
        Ok(header.failed_by.filter(|by| *by != member.index))
    }

    /// For a join: its group as stored now (empty if nothing was stored, e.g. past retention).
    async fn joined_group(&mut self, task: &Task) -> Result<Option<Arc<GroupOutcome>>, Halt> {
        let Some(id) = task.join_of.as_ref() else {
            return Ok(None);
        };
        let (store, group) = (self.deps.store.clone(), groups::key_of(&task.task_type, id));
        let state = self
            .store_step("group read", || store.group(group.clone()))
            .await?;
        let outcome = groups::outcome_of(group, state.unwrap_or_default());
        Ok(Some(Arc::new(outcome)))
    }

    /// For a join of sub-tasks that took their parent's place in a group: the parent, with the
    /// result its attempt set (both recorded before the sub-tasks were enqueued); `None` for any
    /// other task, or a group past retention (the join then records its own key).
    async fn joined_parent(
        &mut self,
        task: &Task,
        member: &GroupMember,
    ) -> Result<Option<ParentRecord>, Halt> {
        let Some(id) = task.join_of.as_ref() else {
            return Ok(None);
        };
        let (store, group) = (self.deps.store.clone(), groups::key_of(&task.task_type, id));
        let parent = self
            .store_step("group parent read", || store.group_parent(group.clone()))
            .await?;
        // (The join carries the membership it took from this parent.)
        Ok(parent.filter(|parent| parent.task.group.as_ref() == Some(member)))
    }

    /// A successful attempt's sub-tasks, as owner, before the task's status: the group of its
    /// sub-tasks records the task as their parent, with the `result` its attempt set (their
    /// join takes its place in its own group, with that result), then each is enqueued. A crash
    /// before the status runs the task again, which spawns the same sub-tasks again.
    async fn spawn_children(
        &mut self,
        task: &Task,
        children: Vec<Task>,
        job: Option<String>,
        result: Option<serde_json::Value>,
    ) -> Result<(), Halt> {
        let (group, children) = groups::as_children(task, children);
        self.owner_of_outcome().await?;
        let store = self.deps.store.clone();
        let parent = ParentRecord {
            task: task.clone(),
            result,
        };
        self.store_step("sub-task group write", || {
            store.record_parent(group.clone(), parent.clone())
        })
        .await?;
        if let Some(id) = job {
            let record = JobRecord {
                id,
                coordinator: self.key.clone(),
                group: group.clone(),
                buckets: u32::try_from(children.len()).unwrap_or(u32::MAX),
                started_at: self.deps.clock.now(),
            };
            self.store_step("job write", || store.record_job(record.clone()))
                .await?;
        }
        let enqueuer = self.deps.enqueuer.clone();
        let count = children.len();
        self.store_step("sub-task enqueue", || {
            let enqueues = children
                .iter()
                .cloned()
                .map(|child| enqueuer.enqueue(child));
            futures::stream::iter(enqueues)
                .buffer_unordered(crate::store::WRITE_CONCURRENCY)
                .try_collect::<Vec<()>>()
        })
        .await?;
        // Its own place in a group is taken by its sub-tasks' join.
        self.membership_deferred = true;
        debug!(partition = self.partition, task = %self.key, sub_tasks = count,
            group = %group, "sub-tasks enqueued");
        Ok(())
    }

    /// For a member of a group, as owner: records its final outcome in the group and enqueues
    /// the join if that finishes the group (before the member's own status, so a member with a
    /// final status always has its outcome in the group; a crash in between runs it again).
    /// A task that spawned sub-tasks is recorded there by their join instead.
    async fn record_in_group(&mut self, task: &Task, record: &StatusRecord) -> Result<(), Halt> {
        let Some(member) = task.group.clone().filter(|_| !self.membership_deferred) else {
            return Ok(());
        };
        let in_place_of = self.joined_parent(task, &member).await?;
        let outcome = groups::member_outcome(&member, task, record, in_place_of);
        self.owner_of_outcome().await?;
        let (store, enqueuer, now) = (
            self.deps.store.clone(),
            self.deps.enqueuer.clone(),
            record.updated_at,
        );
        let joined = self
            .store_step("group outcome", || {
                groups::member_finished(
                    store.clone(),
                    enqueuer.clone(),
                    task.clone(),
                    member.clone(),
                    outcome.clone(),
                    now,
                )
            })
            .await?;
        debug!(partition = self.partition, task = %self.key, group = %member.id,
            index = member.index, joined, "outcome recorded in its group");
        Ok(())
    }

    /// The tree's epoch, if it still owns the partition (by a read begun after `read_after`).
    async fn owner(&mut self, read_after: Option<Stamp>) -> Result<u64, Halt> {
        let ownership: Addr<PartitionOwnership> = self.links.ownership.clone();
        let answer = self
            .store_step("ownership check", || {
                let request = ownership.send(CheckOwnership { read_after });
                async move {
                    let gone = TreeError::Stopping {
                        doing: "checking ownership",
                    };
                    request.await.unwrap_or(Err(gone))
                }
            })
            .await?;
        match answer {
            Ownership::Owner(epoch) => Ok(epoch),
            Ownership::Fenced => {
                warn!(partition = self.partition, task = %self.key, "partition owned by a newer tree: task left to it");
                Err(Halt::Fenced)
            }
        }
    }

    /// The tree's epoch, before a write of what the call did. If the call's lease entry broke
    /// since the checks before the call (a pause of the process, renewals that failed), a newer
    /// tree may have found no entry and taken the task over: ownership is read at once (a newer
    /// tree's claim fences this one there), then the entry is written again and ownership
    /// confirmed by a read begun after that. Either this tree records (a newer tree claims
    /// later, finds the entry and waits for it) or it is fenced and records nothing (the newer
    /// tree runs the task). A tree told to stop meanwhile records nothing either.
    async fn owner_of_outcome(&mut self) -> Result<u64, Halt> {
        let Some(mut hold) = self.outcome_hold.take() else {
            return self.owner(None).await;
        };
        let mut read_after = Ok(None);
        if !hold.unbroken() {
            debug!(partition = self.partition, task = %self.key,
                "the call's lease entry broke; confirming ownership before recording");
            read_after = match self.owner(Some(Stamp::now())).await {
                Ok(_) => self.unless_stopped(hold.renewed()).await,
                Err(halt) => Err(halt),
            };
        }
        self.outcome_hold = Some(hold);
        self.owner(read_after?).await
    }

    /// No handler on this node runs the task's type (a rolling deploy that adds a type): the
    /// task waits (the low-water mark lists it as it passes, so it holds nothing back and a new
    /// tree loads it), and is checked again after a backoff. No attempt is used up; once a node
    /// with the handler owns the partition, the task runs there.
    async fn wait_for_handler(&mut self, task_type: &str) -> Result<(), Halt> {
        self.handler_waits += 1;
        let delay = exponential_period(
            self.handler_waits,
            NO_HANDLER_RETRY_BASE,
            self.deps.settings.max_backoff,
        );
        let _waiting = self
            .deps
            .metrics
            .no_handler(self.partition, &self.key, task_type, delay);
        self.unless_stopped(tokio::time::sleep(delay)).await
    }

    /// The task is suspended: it waits (listed by the low-water mark as it passes, so it holds
    /// nothing back and a new tree loads it) until the node reads that its suspension was
    /// lifted (the steps before the call are taken again then).
    async fn wait_while_suspended(&mut self, task: &Task) -> Result<(), Halt> {
        let suspension = self.deps.suspensions.borrow().of(task).cloned();
        if let Some(suspension) = &suspension {
            debug!(partition = self.partition, task = %self.key, suspended = %suspension.target,
                "suspended; waiting to be resumed");
        }
        let _waiting = self.deps.metrics.suspended(self.partition);
        let mut suspensions = self.deps.suspensions.clone();
        // A cancel applied meanwhile ends the wait too: the status read then finds it.
        let armed = self.links.cancels.arm(&self.key);
        let resumed = self
            .unless_stopped(async {
                tokio::select! {
                    resumed = suspensions.wait_for(|now| now.of(task).is_none()) => resumed.is_ok(),
                    () = armed.cancelled() => true,
                }
            })
            .await?;
        if !resumed {
            // The node is stopping: the task is left for the next tree.
            return Err(Halt::Abandoned);
        }
        debug!(partition = self.partition, task = %self.key, "resumed, or cancelled; checking again");
        Ok(())
    }

    /// The task becomes a dead letter: its handler hears of it once, then the letter is
    /// recorded, as owner, before the task's final status (so a task with a final status of
    /// failed or dropped always has its letter, until an operator purges it).
    async fn dead_letter(
        &mut self,
        task: &Task,
        reason: DeadReason,
        error: &str,
    ) -> Result<(), Halt> {
        let letter = DeadLetter {
            partition: self.partition,
            // (Where it was enqueued matters no more: a redrive enqueues it anew.)
            task: Task {
                enqueue_offset: None,
                ..task.clone()
            },
            attempts: self.attempts,
            last_error: error.to_string(),
            reason,
            dead_at: self.deps.clock.now(),
            redriven_at: None,
            redrives: 0,
        };
        self.owner_of_outcome().await?;
        self.deps.pool.dead_lettered(letter.clone()).await;
        loop {
            self.owner_of_outcome().await?;
            match self.deps.store.add_dead_letter(letter.clone()).await {
                Ok(()) => break,
                Err(e) => self.store_failed("dead-letter write", &e.into()).await?,
            }
        }
        self.store_failures = 0;
        self.deps.metrics.dead_lettered(
            self.partition,
            &self.key,
            &task.task_type,
            reason,
            self.attempts,
            error,
        );
        Ok(())
    }

    /// Appends the attempt to the task's history, as owner (best effort: a failed write is
    /// logged, the history is not what keeps a task from being lost).
    async fn record_attempt(&mut self, attempt: AttemptRecord) -> Result<(), Halt> {
        self.owner_of_outcome().await?;
        if let Err(e) = self
            .deps
            .store
            .record_attempt(self.partition, self.key.clone(), attempt)
            .await
        {
            warn!(partition = self.partition, task = %self.key, error = %e, "attempt history not recorded");
        }
        Ok(())
    }

    /// Records the final status (and, for a group's member, first its outcome in the group), as
    /// owner, confirming ownership again before every retry of the write; then takes the task
    /// out of the schedule and announces the outcome.
    async fn record_final(
        &mut self,
        task: &Task,
        status: TaskStatus,
        last_error: Option<String>,
        result: Option<serde_json::Value>,
    ) -> Result<ExecutionOutcome, Halt> {
        let record = StatusRecord {
            status,
            attempts: self.attempts,
            updated_at: self.deps.clock.now(),
            last_error,
            result,
        };
        self.record_in_group(task, &record).await?;
        loop {
            self.owner_of_outcome().await?;
            match self
                .deps
                .store
                .record_status(self.partition, self.key.clone(), record.clone())
                .await
            {
                Ok(()) => break,
                // The attempt is not repeated: only the record is retried.
                Err(e) => self.store_failed("status write", &e.into()).await?,
            }
        }
        self.store_failures = 0;
        // Only once the status is stored, so an event never announces an unrecorded outcome.
        if let Some(events) = &self.deps.events {
            events.task_finished(&self.key, &record);
        }
        self.remove_from_schedule();
        Ok(match status {
            TaskStatus::Completed => ExecutionOutcome::Completed,
            TaskStatus::Failed => ExecutionOutcome::Failed,
            TaskStatus::Dropped => ExecutionOutcome::Dropped,
            // Only a cancellation records this, never an execution.
            TaskStatus::Cancelled => ExecutionOutcome::AlreadyFinished,
        })
    }

    /// Deletes the finished task from the schedule (an optimisation: a row left behind is
    /// skipped by the status check when loaded again).
    fn remove_from_schedule(&self) {
        let delete = self
            .deps
            .store
            .remove_scheduled(self.partition, self.key.clone());
        let (partition, key) = (self.partition, self.key.to_string());
        tokio::spawn(async move {
            if let Err(e) = delete.await {
                warn!(partition, task = %key, error = %e, "finished task left in the schedule (it will be skipped when loaded)");
            }
        });
    }

    /// Runs a store step until it succeeds, waiting a capped exponential backoff between
    /// failures; gives up if the tree stops meanwhile. Before the call (`before_call`) the stop
    /// signal also interrupts the step itself; after it, a step in progress is let finish, so a
    /// draining tree still records what its calls did.
    async fn store_step<T, E, F, Fut>(&mut self, operation: &str, mut step: F) -> Result<T, Halt>
    where
        E: Into<TreeError>,
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        loop {
            let result = if self.called {
                step().await
            } else {
                self.unless_stopped(step()).await?
            };
            match result {
                Ok(value) => {
                    self.store_failures = 0;
                    return Ok(value);
                }
                Err(e) => self.store_failed(operation, &e.into()).await?,
            }
        }
    }

    async fn store_failed(&mut self, operation: &str, error: &TreeError) -> Result<(), Halt> {
        if self.stop.borrow().is_some() {
            return Err(Halt::Abandoned);
        }
        self.store_failures += 1;
        let delay = exponential_period(
            self.store_failures,
            STORE_RETRY_BASE,
            self.deps.settings.max_backoff,
        );
        warn!(partition = self.partition, task = %self.key, operation, %error,
            retry_in_ms = delay.as_millis() as u64, "store step failed; retrying");
        self.unless_stopped(tokio::time::sleep(delay)).await
    }

    /// `work`, unless the tree is told to stop first.
    async fn unless_stopped<T>(
        &mut self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, Halt> {
        let mut stop = self.stop.clone();
        tokio::select! {
            biased;
            _ = stop.wait_for(Option::is_some) => Err(Halt::Abandoned),
            value = work => Ok(value),
        }
    }
}

/// What the status read found: the task's final status, or that it is no longer its
/// identity's current task (both: not run).
enum Found {
    Final(StatusRecord),
    Superseded,
}

/// Whether the task is finished (its final status) or superseded (for a task with a conflict
/// mode, `by_identity`: its identity's record names another task), else its identity's copy of
/// it, and, if an earlier tree may have attempted it (`earlier`), its last attempt number, read
/// concurrently; `None` if the tree stops first.
async fn read_status(
    store: std::sync::Arc<dyn crate::store::TaskStore>,
    partition: PartitionId,
    key: TaskKey,
    by_identity: bool,
    earlier: bool,
    mut stop: watch::Receiver<Option<StopReason>>,
) -> Option<StoreResult<(Checked, Option<u32>)>> {
    let found = finished_or_superseded(store.as_ref(), partition, &key, by_identity);
    let last = async {
        if !earlier {
            return Ok(None);
        }
        let attempts = store.attempts(key.clone(), 1).await?;
        Ok(attempts.first().map(|a| a.attempt))
    };
    let read = async {
        let (found, last) = futures::future::join(found, last).await;
        Ok((found?, last?))
    };
    tokio::select! {
        biased;
        _ = stop.wait_for(Option::is_some) => None,
        read = read => Some(read),
    }
}

/// What the status check found: why the task is not run, else (for a task with a conflict
/// mode) its identity's copy of it, to run.
type Checked = (Option<Found>, Option<Box<Task>>);

/// The task's final status, or whether it was superseded, else its identity's copy of it (see
/// [`read_status`]).
async fn finished_or_superseded(
    store: &dyn crate::store::TaskStore,
    partition: PartitionId,
    key: &TaskKey,
    by_identity: bool,
) -> StoreResult<Checked> {
    let status = store.status(partition, key.clone());
    let record = OptionFuture::from(by_identity.then(|| {
        let identity = TaskIdentity::new(key.ordering_id.clone(), key.uniqueness_key.clone());
        store.identity(partition, identity)
    }));
    let (status, record) = futures::future::join(status, record).await;
    if let Some(status) = status? {
        return Ok((Some(Found::Final(status)), None));
    }
    let record = record.transpose()?.flatten();
    Ok(match crate::identity::version_of(key, record) {
        Version::Superseded => (Some(Found::Superseded), None),
        Version::Current(current) => (None, current),
    })
}

/// Whether the task may be called now that its time and slot came: the checks made before
/// still hold (its lease entry stayed live without a break, and has a renewal period left, so
/// it outlasts the call's start; no cancel or update reached it), and no suspension of it was
/// read meanwhile (a task waiting for a slot when its job is
/// suspended does not start). If so, its call begins in the cancel gate, last, under the
/// gate's lock ([`Armed::begin`]).
fn ready_to_call(
    task: &Task,
    suspensions: &watch::Receiver<Arc<crate::store::Suspensions>>,
) -> impl FnOnce(&(LeaseHold, Armed)) -> bool + Send + 'static {
    // (Its targets, not the task: the data, up to 512 KiB, is not copied again on the hot path.)
    let (targets, suspensions) = (SuspensionTarget::all_of(task), suspensions.clone());
    move |(hold, armed)| {
        hold.callable() && suspensions.borrow().holding(&targets).is_none() && armed.begin()
    }
}
