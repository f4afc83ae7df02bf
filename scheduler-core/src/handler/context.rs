//! What a handler's call is given: its [`TaskContext`] (attempt, fencing epoch, stop signal,
//! lease, and what it may set or spawn: a result, sub-tasks, a job, progress), and a join's
//! [`GroupOutcome`].

use std::sync::Arc;

use scheduler_client::Task;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::lease::LeaseState;
pub use crate::outcome::StopReason;
use crate::store::{BucketProgress, GroupKey, MemberOutcome};

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

    /// A context for calling a handler outside a node (tests, tools): never asked to stop.
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
    pub(crate) store: Arc<dyn crate::store::JobStore>,
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
