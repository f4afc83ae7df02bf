//! The user's side of execution: the [`TaskExecutor`] trait a service implements (one per task
//! type, see [`Handlers`]), the [`TaskContext`] each call gets, the [`TaskError`] it returns,
//! and the bounded pool that runs it.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_client::Task;
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

use crate::clock::Clock;
pub use crate::handlers::Handlers;
use crate::lease::LeaseState;
use crate::slots::{PrioritySlots, SlotPermit};
use crate::store::{BucketProgress, DeadLetter, GroupKey, MemberOutcome};

/// Runs tasks. Implement it with
/// `async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError>`.
///
/// Execution is at-least-once: a task can run again after a crash or a rebalance, so `execute`
/// must be idempotent. It is called for one task of an `orderingId` at a time, in every
/// interleaving of rebalances: while a call runs, its orderingId is leased (see [`TaskContext`]).
pub trait TaskExecutor: Send + Sync + 'static {
    /// Runs `task`. An error says whether to retry it (after backoff) or give up on it. `ctx`
    /// tells the call its attempt, its partition's fencing epoch and whether it should stop.
    fn execute(
        &self,
        task: &Task,
        ctx: &TaskContext,
    ) -> impl Future<Output = Result<(), TaskError>> + Send;

    /// Called once when a task this handler ran becomes a dead letter (it was invalid, or its
    /// retries ran out), before the dead letter is recorded: the seed's "invalid task handler",
    /// to alert or compensate. At-least-once like `execute` (a node that dies between this call
    /// and the record calls it again on the next owner). Does nothing unless implemented.
    fn dead_lettered(&self, letter: &DeadLetter) -> impl Future<Output = ()> + Send {
        let _ = letter;
        async {}
    }

    /// The join of a group of this handler's type: called once every member has a final
    /// outcome (or a member of a fail-fast group failed), with the members' outcomes and
    /// results. `task` is the join task (`join_of` names the group). It is a task like any
    /// other: at-least-once, retried on a retryable error, a dead letter when it gives up.
    /// Does nothing unless implemented.
    fn group_finished(
        &self,
        task: &Task,
        group: &GroupOutcome,
        ctx: &TaskContext,
    ) -> impl Future<Output = Result<(), TaskError>> + Send {
        let _ = (task, group, ctx);
        async { Ok(()) }
    }
}

/// A finished group, as its join sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupOutcome {
    /// The group: its members' task type and its id.
    pub group: GroupKey,
    /// How many members it has (`None` if no finished member carried the total: only a
    /// fail-fast group can finish so).
    pub total: Option<u32>,
    /// The member whose failure finished a fail-fast group early, if one did.
    pub failed_by: Option<u32>,
    /// The outcome of every member that finished, by number (under fail-fast, the members
    /// cancelled after the join was triggered may be missing).
    pub members: Vec<MemberOutcome>,
    /// For the sub-tasks of a task ([`TaskContext::spawn`]): that task, their parent.
    pub parent: Option<Task>,
}

/// The largest result a handler may set, in bytes of JSON: results are stored with the task's
/// status and read, all of a group's, by its join.
pub const MAX_RESULT_BYTES: usize = 16 * 1024;

/// A result larger than [`MAX_RESULT_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the task's result is {bytes} bytes of JSON, over the {max}-byte limit")]
pub struct ResultTooLarge {
    /// Its size.
    pub bytes: usize,
    /// The limit.
    pub max: usize,
}

/// Why a running call is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The partition is being handed over (a rebalance, or the node is shutting down): finish
    /// soon or return an error; the task then runs again on the next owner.
    Revoked,
    /// The partition's tree is being rebuilt after a failure; the task runs again on the new tree.
    Rebuilding,
    /// Another tree claimed the partition (this node lost it, e.g. while paused): the outcome of
    /// this call will not be recorded, and a fencing token older than the new epoch should be
    /// refused by the systems the call writes to.
    Fenced,
    /// The lease of this call's orderingId expired before it could be renewed: another call of
    /// the same orderingId may start elsewhere.
    LeaseLost,
}

/// What a call knows about its own run. Cheap to clone.
#[derive(Debug, Clone)]
pub struct TaskContext {
    partition: i32,
    epoch: u64,
    attempt: u32,
    tree: watch::Receiver<Option<StopReason>>,
    lease: watch::Receiver<LeaseState>,
    /// What the call sets and spawns (shared with the lifecycle).
    output: Arc<std::sync::Mutex<Output>>,
    /// The finished group, for a join's call.
    group: Option<Arc<GroupOutcome>>,
    /// Where a group member's progress goes.
    progress: Option<Arc<ProgressReporter>>,
}

impl TaskContext {
    pub(crate) fn new(
        partition: i32,
        epoch: u64,
        attempt: u32,
        tree: watch::Receiver<Option<StopReason>>,
        lease: watch::Receiver<LeaseState>,
    ) -> Self {
        TaskContext {
            partition,
            epoch,
            attempt,
            tree,
            lease,
            output: Arc::default(),
            group: None,
            progress: None,
        }
    }

    /// The context of a join's call, with its finished group.
    pub(crate) fn set_group(&mut self, group: Arc<GroupOutcome>) {
        self.group = Some(group);
    }

    /// The context of a group member's call, which may report its progress.
    pub(crate) fn set_progress(&mut self, reporter: Arc<ProgressReporter>) {
        self.progress = Some(reporter);
    }

    /// Reports how many items this task (a job's bucket, or any group member) has processed
    /// so far, for its job's progress (`scheduler jobs show`). The last report counts.
    pub async fn report_progress(&self, items: u64) -> Result<(), ProgressError> {
        let reporter = self.progress.as_ref().ok_or(ProgressError::NotInAGroup)?;
        let progress = BucketProgress {
            bucket: reporter.member,
            items,
            at: reporter.clock.now(),
        };
        reporter
            .store
            .record_progress(reporter.group.clone(), progress)
            .await
            .map_err(ProgressError::Store)
    }

    /// Starts a job: one bucket sub-task of `job.bucket_type` per item of `job.buckets` (its
    /// data), spread so that every partition of the topic (so every node) gets buckets, enqueued
    /// once this attempt succeeds. The buckets are this task's sub-tasks: its handler's
    /// `group_finished` runs once all have finished; the job's progress and errors are at
    /// `/api/v1/jobs/<id>` and `scheduler jobs show <id>`. A task starts one job and spawns no
    /// other sub-tasks.
    pub fn start_job(&self, job: JobSpec) -> Result<(), SpawnError> {
        check_job_id(&job.id)?;
        scheduler_client::wire::check_task_type(&job.bucket_type).map_err(SpawnError::Invalid)?;
        for data in &job.buckets {
            scheduler_client::wire::check_task_data(data).map_err(SpawnError::Invalid)?;
            // The bucket's record is its data and a few hundred bytes of key and fields.
            let bytes = serde_json::Value::Object(data.clone()).to_string().len() + 1024;
            if bytes > scheduler_client::defaults::MAX_TASK_BYTES {
                return Err(SpawnError::TooLarge { bytes });
            }
        }
        if job.buckets.is_empty() || job.buckets.len() > MAX_SUB_TASKS {
            return Err(SpawnError::TooMany { max: MAX_SUB_TASKS });
        }
        let mut output = self.output();
        if output.job.is_some() || !output.spawned.is_empty() {
            return Err(SpawnError::JobAndSubTasks);
        }
        output.job = Some(job);
        Ok(())
    }

    /// The finished group, when this call is a group's join.
    pub fn group(&self) -> Option<&GroupOutcome> {
        self.group.as_deref()
    }

    /// Sets the task's result: a small JSON value (at most [`MAX_RESULT_BYTES`]) stored with its
    /// final status if this attempt succeeds, and handed to its group's join. A later call
    /// replaces it.
    pub fn set_result(&self, result: serde_json::Value) -> Result<(), ResultTooLarge> {
        let bytes = result.to_string().len();
        if bytes > MAX_RESULT_BYTES {
            return Err(ResultTooLarge {
                bytes,
                max: MAX_RESULT_BYTES,
            });
        }
        self.output().result = Some(result);
        Ok(())
    }

    /// Spawns `task` as a sub-task of this one, enqueued once this attempt succeeds (not if it
    /// fails: a retry spawns again). The sub-tasks of a task are a group joined by its handler's
    /// `group_finished`, which runs once every one of them (and their own sub-tasks, at any
    /// depth) has finished; the task itself counts as finished in its own group only then.
    /// Numbered in the order spawned, so a task run again must spawn the same sub-tasks (same
    /// keys, same order) for them to be the same ones. Any group `task` names is replaced.
    pub fn spawn(&self, task: Task) -> Result<(), SpawnError> {
        scheduler_client::wire::check_task(&task).map_err(SpawnError::Invalid)?;
        let bytes = scheduler_client::wire::encode(&task).len();
        if bytes > scheduler_client::defaults::MAX_TASK_BYTES {
            return Err(SpawnError::TooLarge { bytes });
        }
        let mut output = self.output();
        if output.job.is_some() {
            return Err(SpawnError::JobAndSubTasks);
        }
        if output.spawned.len() >= MAX_SUB_TASKS {
            return Err(SpawnError::TooMany { max: MAX_SUB_TASKS });
        }
        output.spawned.push(task);
        Ok(())
    }

    fn output(&self) -> std::sync::MutexGuard<'_, Output> {
        self.output
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A context for calling an executor outside a node (tests, tools): never asked to stop.
    pub fn detached(partition: i32, epoch: u64) -> Self {
        let (_, tree) = watch::channel(None);
        let (_, lease) = watch::channel(LeaseState::default());
        TaskContext::new(partition, epoch, 1, tree, lease)
    }

    /// The Kafka partition of the task.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The partition's ownership epoch held by the tree running this call: a fencing token.
    /// It only grows; a system that remembers the highest epoch it accepted for this partition
    /// can refuse writes from a call of an older owner.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The attempt this call is: 1 for the task's first. Numbers go on across trees: a task
    /// retried after a rebalance or a restart continues from the attempts recorded (a call
    /// whose outcome an earlier tree could not record, fenced, may be counted again).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Until when this call's orderingId lease is known to be live (renewed in the background
    /// while the call runs); `None` if it was never written.
    pub fn lease_valid_until(&self) -> Option<std::time::Instant> {
        self.lease
            .borrow()
            .valid_until
            .map(tokio::time::Instant::into_std)
    }

    /// Why the call should stop, if it should: the partition is handed over or fenced, or the
    /// lease was lost.
    pub fn stop_reason(&self) -> Option<StopReason> {
        if self.lease.borrow().lost {
            return Some(StopReason::LeaseLost);
        }
        *self.tree.borrow()
    }

    /// Resolves when the call should stop (see [`TaskContext::stop_reason`]); never, if it
    /// need not. Select on it to stop cooperatively.
    pub async fn stopped(&self) -> StopReason {
        let mut tree = self.tree.clone();
        let mut lease = self.lease.clone();
        loop {
            if let Some(reason) = self.stop_reason() {
                return reason;
            }
            tokio::select! {
                biased;
                changed = tree.changed() => if changed.is_err() { std::future::pending::<()>().await },
                changed = lease.changed() => if changed.is_err() { std::future::pending::<()>().await },
            }
        }
    }

    /// Where the call's result and sub-tasks land, for the lifecycle to take once it returns.
    pub(crate) fn output_slot(&self) -> OutputSlot {
        OutputSlot(Arc::clone(&self.output))
    }
}

/// The most sub-tasks one attempt may spawn (they are enqueued before its status is recorded):
/// the largest group ([`scheduler_client::wire::MAX_GROUP_NUMBER`]), as they are one.
pub const MAX_SUB_TASKS: usize = scheduler_client::wire::MAX_GROUP_NUMBER as usize;

/// A sub-task could not be spawned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// The task breaks the wire format's limits (the client's check).
    #[error("sub-task refused: {0}")]
    Invalid(#[from] scheduler_client::wire::ContentError),
    /// The attempt spawned [`MAX_SUB_TASKS`] already (or a job has none, or more).
    #[error("a job or an attempt has 1 to {max} sub-tasks")]
    TooMany {
        /// The limit.
        max: usize,
    },
    /// The sub-task's record would be larger than the producer takes (512 KiB).
    #[error("a sub-task of {bytes} bytes is over the {max}-byte limit", max = scheduler_client::defaults::MAX_TASK_BYTES)]
    TooLarge {
        /// Its encoded size.
        bytes: usize,
    },
    /// A task starts one job, and spawns no other sub-tasks beside it.
    #[error("a task starts one job and spawns no other sub-tasks")]
    JobAndSubTasks,
    /// The job's id is not 1 to 200 ASCII letters, digits or `-_.:`.
    #[error("job id {0:?} is not 1 to 200 ASCII letters, digits or -_.:")]
    BadJobId(String),
}

/// Checks a job id: it names the job in URLs and its buckets' orderingIds.
fn check_job_id(id: &str) -> Result<(), SpawnError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.:".contains(c);
    if id.is_empty() || id.len() > 200 || !id.chars().all(allowed) {
        return Err(SpawnError::BadJobId(id.chars().take(200).collect()));
    }
    Ok(())
}

/// A job to start ([`TaskContext::start_job`]).
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// The job's id: 1 to 200 ASCII letters, digits or `-_.:`, unique among the queue's jobs.
    pub id: String,
    /// The task type of its buckets.
    pub bucket_type: String,
    /// Each bucket's data (a range, a list of items: the handler's to interpret), in order.
    pub buckets: Vec<scheduler_client::TaskData>,
}

/// A report of progress could not be recorded.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProgressError {
    /// Only a member of a group (a job's bucket) reports progress.
    #[error("only a job's bucket (a member of a group) reports progress")]
    NotInAGroup,
    /// The store failed.
    #[error(transparent)]
    Store(crate::store::StoreError),
}

/// Where a group member's progress is recorded.
pub(crate) struct ProgressReporter {
    pub(crate) store: Arc<dyn crate::store::TaskStore>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) group: GroupKey,
    pub(crate) member: u32,
}

impl std::fmt::Debug for ProgressReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressReporter")
            .field("group", &self.group)
            .field("member", &self.member)
            .finish()
    }
}

/// What a call set and spawned.
#[derive(Debug, Default)]
struct Output {
    result: Option<serde_json::Value>,
    spawned: Vec<Task>,
    job: Option<JobSpec>,
}

/// A call's output, taken by the lifecycle after the call.
pub(crate) struct OutputSlot(Arc<std::sync::Mutex<Output>>);

impl OutputSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Output> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The result set, if any.
    pub(crate) fn take_result(&self) -> Option<serde_json::Value> {
        self.lock().result.take()
    }

    /// The sub-tasks spawned, in order.
    pub(crate) fn take_spawned(&self) -> Vec<Task> {
        std::mem::take(&mut self.lock().spawned)
    }

    /// The job started, if any.
    pub(crate) fn take_job(&self) -> Option<JobSpec> {
        self.lock().job.take()
    }
}

/// Why an execution failed, and whether it is worth retrying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// A transient failure: the task is retried after `after` if given, else after the
    /// settings' backoff, up to the retry limit; then it becomes a dead letter.
    #[error("retryable: {reason}")]
    Retry {
        /// What went wrong.
        reason: String,
        /// When to try again (the handler knows best, e.g. from a rate limit's answer).
        after: Option<Duration>,
    },
    /// The task can never succeed (bad data, say): it is not retried, is recorded as dropped
    /// and becomes a dead letter.
    #[error("invalid: {0}")]
    Invalid(String),
}

impl TaskError {
    /// A transient failure, retried after the settings' backoff.
    pub fn retry(reason: impl Into<String>) -> Self {
        TaskError::Retry {
            reason: reason.into(),
            after: None,
        }
    }

    /// A transient failure, retried after `after`.
    pub fn retry_after(reason: impl Into<String>, after: Duration) -> Self {
        TaskError::Retry {
            reason: reason.into(),
            after: Some(after),
        }
    }

    /// A task that can never succeed: not retried, a dead letter at once.
    pub fn invalid(reason: impl Into<String>) -> Self {
        TaskError::Invalid(reason.into())
    }

    /// What went wrong.
    pub fn reason(&self) -> &str {
        match self {
            TaskError::Retry { reason, .. } | TaskError::Invalid(reason) => reason,
        }
    }
}

/// How a task's life in this tree ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionOutcome {
    /// The executor succeeded and completion was recorded.
    Completed,
    /// Every retry failed; recorded as failed, and a dead letter.
    Failed,
    /// The handler found the task invalid; recorded as dropped, and a dead letter.
    Dropped,
    /// The task had already finished or was cancelled (status found); it was not run.
    AlreadyFinished,
    /// The tree is stopping: the task was left for the next tree to run.
    Abandoned,
    /// Another tree claimed the partition: the task was not run (or its outcome not recorded)
    /// here, and is left for the owner.
    Fenced,
}

/// Runs the user's handlers on a tokio runtime separate from the actors, at most `concurrency`
/// calls at once (due tasks waiting for a slot are served by priority), each cut off after
/// `timeout` (by the node's clock). A panic or a timeout is a retryable failure.
#[derive(Clone)]
pub struct CallPool {
    runtime: tokio::runtime::Handle,
    permits: Arc<PrioritySlots>,
    handlers: Arc<Handlers>,
    timeout: Duration,
    /// Types with an execution timeout of their own.
    type_timeouts: Arc<BTreeMap<String, Duration>>,
    clock: Arc<dyn Clock>,
}

/// What became of a call handed to [`CallPool::call_when_due`].
pub(crate) enum Called<H> {
    /// The executor was called at `started_at`: its result, and `held` back to record the
    /// outcome under (`None` if the call panicked).
    Done {
        result: Result<(), TaskError>,
        held: Option<H>,
        started_at: DateTime<Utc>,
    },
    /// When its time and a slot came, the checks no longer held (`ready` said no): not called.
    NotReady(H),
    /// The slot came more than [`STALE_AFTER`] after the task's time: not called yet. The
    /// caller checks again in `slot` (as a call that waited for a slot always did) and calls
    /// with [`CallPool::call_in_slot`].
    Stale { held: H, slot: Slot },
    /// The tree stopped, or the caller stopped waiting, first: not called.
    Stopped,
}

impl CallPool {
    /// A pool running `executor` for every task type on `runtime`, timing calls out by `clock`.
    pub fn new<E: TaskExecutor>(
        executor: E,
        runtime: tokio::runtime::Handle,
        concurrency: usize,
        timeout: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self::with_handlers(
            Handlers::new().fallback(executor),
            runtime,
            concurrency,
            timeout,
            clock,
        )
    }

    /// A pool running `handlers`, each for its task type.
    pub fn with_handlers(
        handlers: Handlers,
        runtime: tokio::runtime::Handle,
        concurrency: usize,
        timeout: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        CallPool {
            runtime,
            permits: PrioritySlots::new(concurrency.max(1)),
            handlers: Arc::new(handlers),
            timeout,
            type_timeouts: Arc::default(),
            clock,
        }
    }

    /// Calls of the types in `timeouts` are cut off after their own timeout.
    pub fn with_type_timeouts(mut self, timeouts: BTreeMap<String, Duration>) -> Self {
        self.type_timeouts = Arc::new(timeouts);
        self
    }

    /// How long a call of `task_type` may run.
    fn timeout_of(&self, task_type: &str) -> Duration {
        self.type_timeouts
            .get(task_type)
            .copied()
            .unwrap_or(self.timeout)
    }

    /// Whether a handler of this pool runs tasks of `task_type`.
    pub fn handles(&self, task_type: &str) -> bool {
        self.handlers.get(task_type).is_some()
    }

    /// The handlers this pool runs.
    pub fn handlers(&self) -> &Handlers {
        &self.handlers
    }

    /// Tells the handler of `letter`'s type that its task became a dead letter, on the pool's
    /// runtime and within the execution timeout; a panic or a timeout is logged, not repeated.
    pub(crate) async fn dead_lettered(&self, letter: DeadLetter) {
        let Some(handler) = self.handlers.get(&letter.task.task_type).cloned() else {
            return;
        };
        let (timeout, clock) = (
            self.timeout_of(&letter.task.task_type),
            Arc::clone(&self.clock),
        );
        let task = letter.task.key().to_string();
        let call = self.runtime.spawn(async move {
            let expired = clock
                .sleep_until(clock.now() + TimeDelta::from_std(timeout).unwrap_or(TimeDelta::MAX));
            tokio::select! {
                () = handler.dead_lettered_boxed(letter) => true,
                () = expired => false,
            }
        });
        match call.await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(%task, ?timeout, "the dead-letter handler timed out"),
            Err(e) => tracing::warn!(%task, error = %e, "the dead-letter handler panicked"),
        }
    }

    /// Calls the executor for `task` at `at` (by the pool's clock) or later, once a slot is
    /// free and if `ready(&held)` still says yes then, inside `span` (so the executor's own
    /// logs carry the task's identity). The waits, the check and the call run on the pool's
    /// runtime, not on the actors' thread: a busy actor thread would make calls late. Before
    /// the call, the tree's `stop` signal or the caller dropping the returned future ends it
    /// uncalled; once called, the call keeps its slot and `held` until it returns, even if the
    /// caller stops waiting.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn call_when_due<H: Send + 'static>(
        &self,
        at: DateTime<Utc>,
        held: H,
        ready: impl FnOnce(&H) -> bool + Send + 'static,
        task: Task,
        ctx: TaskContext,
        span: tracing::Span,
        mut stop: watch::Receiver<Option<StopReason>>,
    ) -> impl Future<Output = Called<H>> + 'static {
        let handlers = Arc::clone(&self.handlers);
        let (timeout, clock, permits) = (
            self.timeout_of(&task.task_type),
            Arc::clone(&self.clock),
            Arc::clone(&self.permits),
        );
        let (answer, answered) = oneshot::channel();
        self.runtime.spawn(async move {
            let mut answer = answer;
            let due_and_slot = async {
                while clock.now() < at {
                    clock.sleep_until(at).await;
                }
                let asked = tokio::time::Instant::now();
                let slot = permits.acquire(task.priority).await;
                let waited = asked.elapsed();
                // The time by this node's clock once more, now that the slot is had: at once
                // when it has passed, but a paused process (the simulation's clock, whose
                // waits end only when the process runs) acts on a freed slot only once it
                // runs again, as a real one would.
                clock.sleep_until(at).await;
                (slot, waited)
            };
            let had = tokio::select! {
                biased;
                _ = stop.wait_for(Option::is_some) => None,
                () = answer.closed() => return,
                had = due_and_slot => Some(had),
            };
            let Some((slot, waited)) = had.filter(|_| stop.borrow().is_none()) else {
                let _ = answer.send(Called::Stopped);
                return;
            };
            if !ready(&held) {
                let _ = answer.send(Called::NotReady(held));
                return;
            }
            let slot = Slot(slot);
            if waited > STALE_AFTER {
                let _ = answer.send(Called::Stale { held, slot });
                return;
            }
            let done = run(&handlers, timeout, &*clock, slot, held, task, ctx, span).await;
            let _ = answer.send(done);
        });
        answer_of(answered, Arc::clone(&self.clock))
    }
}

/// How long after a task's time its slot may come before its checks count as stale: other
/// trees (a newer owner of the partition, which may record a cancel meanwhile) act on the
/// store while a task waits for a slot.
pub(crate) const STALE_AFTER: Duration = Duration::from_millis(100);

/// One of the pool's slots, had by a call that was not made yet ([`Called::Stale`]); given
/// back when dropped.
pub(crate) struct Slot(#[allow(dead_code)] SlotPermit);

impl CallPool {
    /// Calls the executor for `task` in `slot` at once (see [`Called::Stale`]), on the pool's
    /// runtime; the call keeps its slot and `held` until it returns, even if the caller stops
    /// waiting.
    pub(crate) fn call_in_slot<H: Send + 'static>(
        &self,
        slot: Slot,
        held: H,
        task: Task,
        ctx: TaskContext,
        span: tracing::Span,
    ) -> impl Future<Output = Called<H>> + 'static {
        let handlers = Arc::clone(&self.handlers);
        let (timeout, clock) = (self.timeout_of(&task.task_type), Arc::clone(&self.clock));
        let (answer, answered) = oneshot::channel();
        self.runtime.spawn(async move {
            let done = run(&handlers, timeout, &*clock, slot, held, task, ctx, span).await;
            let _ = answer.send(done);
        });
        answer_of(answered, Arc::clone(&self.clock))
    }
}

/// The call of the handler of `task`'s type in `slot`, cut off after `timeout`; `held` comes
/// back with the result (the slot is given back as soon as the call returns).
#[allow(clippy::too_many_arguments)]
async fn run<H>(
    handlers: &Handlers,
    timeout: Duration,
    clock: &dyn Clock,
    slot: Slot,
    held: H,
    task: Task,
    ctx: TaskContext,
    span: tracing::Span,
) -> Called<H> {
    let started_at = clock.now();
    let expired =
        clock.sleep_until(started_at + TimeDelta::from_std(timeout).unwrap_or(TimeDelta::MAX));
    let result = match handlers.get(&task.task_type).map(Arc::clone) {
        // (The lifecycle calls only tasks of a type the pool handles.)
        None => Err(TaskError::retry(format!(
            "no handler for task type {:?}",
            task.task_type
        ))),
        Some(handler) => tokio::select! {
            result = handler.execute_boxed(task, ctx).instrument(span) => result,
            () = expired => Err(TaskError::retry(format!("timed out after {timeout:?}"))),
        },
    };
    drop(slot);
    Called::Done {
        result,
        held: Some(held),
        started_at,
    }
}

/// What a spawned call answered; a call that ended without answering panicked (its slot and
/// `held` were dropped with it).
async fn answer_of<H>(answered: oneshot::Receiver<Called<H>>, clock: Arc<dyn Clock>) -> Called<H> {
    match answered.await {
        Ok(called) => called,
        Err(_) => Called::Done {
            result: Err(TaskError::retry("the executor panicked")),
            held: None,
            started_at: clock.now(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Probe {
        running: AtomicUsize,
        peak: AtomicUsize,
    }

    impl TaskExecutor for Arc<Probe> {
        async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            match task.ordering_id.as_str() {
                "panic" => panic!("executor bug"),
                "hang" => std::future::pending().await,
                "invalid" => Err(TaskError::invalid("invalid")),
                _ => Ok(()),
            }
        }
    }

    fn context() -> TaskContext {
        TaskContext::detached(0, 1)
    }

    fn task(ordering_id: &str) -> Task {
        Task::new(ordering_id, Utc::now(), "u", Default::default())
    }

    #[tokio::test(start_paused = true)]
    async fn bounds_concurrency_and_turns_panics_and_hangs_into_retries() {
        let probe = Arc::new(Probe {
            running: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        });
        let pool = CallPool::new(
            Arc::clone(&probe),
            tokio::runtime::Handle::current(),
            3,
            Duration::from_secs(5),
            Arc::new(crate::clock::TokioClock::starting_at(Utc::now())),
        );
        let (_stop, stop) = watch::channel(None);
        let run = |t: Task| {
            let (pool, stop) = (pool.clone(), stop.clone());
            async move {
                let called = pool.call_when_due(
                    t.scheduled_time,
                    (),
                    |_| true,
                    t,
                    context(),
                    tracing::Span::none(),
                    stop,
                );
                match called.await {
                    Called::Done { result, .. } => result,
                    Called::NotReady(()) | Called::Stale { .. } | Called::Stopped => {
                        panic!("not called")
                    }
                }
            }
        };
        let results = futures::future::join_all((0..10).map(|_| run(task("ok")))).await;
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(probe.peak.load(Ordering::SeqCst), 3);

        assert_eq!(
            run(task("panic")).await,
            Err(TaskError::retry("the executor panicked"))
        );
        assert!(
            matches!(run(task("hang")).await, Err(TaskError::Retry { reason, .. }) if reason.starts_with("timed out"))
        );
        assert_eq!(
            run(task("invalid")).await,
            Err(TaskError::invalid("invalid"))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_waits_for_its_time_and_is_not_made_when_not_ready_or_stopped() {
        let probe = Arc::new(Probe {
            running: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        });
        let clock = crate::clock::TokioClock::starting_at(Utc::now());
        let pool = CallPool::new(
            Arc::clone(&probe),
            tokio::runtime::Handle::current(),
            1,
            Duration::from_secs(5),
            Arc::new(clock.clone()),
        );
        let (stop_tx, stop) = watch::channel(None);
        let at = clock.now() + TimeDelta::seconds(2);
        let called = pool.call_when_due(
            at,
            (),
            |_| true,
            task("ok"),
            context(),
            tracing::Span::none(),
            stop.clone(),
        );
        match called.await {
            Called::Done { started_at, .. } => assert_eq!(started_at, at),
            _ => panic!("not called"),
        }
        let not_ready = pool.call_when_due(
            at,
            7,
            |_| false,
            task("ok"),
            context(),
            tracing::Span::none(),
            stop.clone(),
        );
        assert!(matches!(not_ready.await, Called::NotReady(7)));
        let later = clock.now() + TimeDelta::seconds(2);
        let stopped = pool.call_when_due(
            later,
            (),
            |_| true,
            task("ok"),
            context(),
            tracing::Span::none(),
            stop,
        );
        let _ = stop_tx.send(Some(StopReason::Revoked));
        assert!(matches!(stopped.await, Called::Stopped));
        assert_eq!(probe.peak.load(Ordering::SeqCst), 1, "one call only");
    }
}
