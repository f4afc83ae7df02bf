//! The PartitionExecutor's deferred tasks: the due tasks of an orderingId beyond its share of
//! memory, left in the schedule and listed in the tree's deferred-task list of the orderingId
//! ([`crate::store::deferred`]), then read back from that list in run order, a few at a time:
//! a read-back reads that orderingId's rows only, never the partition's schedule.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use scheduler_client::{RunOrder, Task, TaskKey};
use tracing::{debug, warn};

use crate::in_flight::Pin;
use crate::store::{
    DeferralList, DeferredStore, ListBehind, PartitionId, ScheduleStore, StoreResult,
};

/// The most run orders one listing write carries.
pub(super) const LIST_BATCH: usize = 500;

/// The due tasks of one orderingId left in Cassandra for want of room.
pub(super) struct Deferred {
    /// The earliest of them in run order: reading back starts there.
    pub(super) from: RunOrder,
    /// Pins `from`'s time: the partition's low-water mark stays at or before it.
    pub(super) pin: Pin,
    /// A read-back is under way.
    pub(super) reading: bool,
    /// The earliest task deferred while a read-back was under way (it may have missed it).
    pub(super) missed: Option<RunOrder>,
    /// Deferred but not listed yet: listed a batch at a time, never while a read-back is
    /// under way, and a read-back waits until none is left.
    pub(super) unlisted: Vec<RunOrder>,
    /// A listing write is under way.
    pub(super) listing: bool,
    /// An earlier tree's list whose rows this tree copies into its own before reading back.
    pub(super) taking_over: Option<TakeOver>,
    /// A read-back is to come after a wait (its first task not nearly due yet, or an earlier
    /// task of the orderingId still held by the PartitionScheduler).
    pub(super) read_back_armed: bool,
}

/// An earlier tree's deferred-task list of the orderingId that the partition's low-water mark
/// passed ([`ListBehind`]): its rows due before the mark are copied into this tree's list, a
/// batch at a time (the later ones are loaded from the schedule). Its rows are left as they are
/// (the mark still names it until this tree writes one): they expire.
pub(super) struct TakeOver {
    /// The earlier tree's list.
    pub(super) list: DeferralList,
    /// Where the next batch is read from.
    pub(super) next: RunOrder,
    /// The low-water mark the tree started from: rows from there on are not copied.
    pub(super) until: DateTime<Utc>,
    /// Whether the tasks that run before the list's reached the PartitionExecutor (copying
    /// waits until they did, and reading back until copying is done).
    pub(super) started: bool,
}

impl Deferred {
    pub(super) fn new(from: RunOrder, pin: Pin) -> Self {
        Deferred {
            unlisted: vec![from.clone()],
            from,
            pin,
            reading: false,
            missed: None,
            listing: false,
            taking_over: None,
            read_back_armed: false,
        }
    }

    /// The deferred tasks an earlier tree listed in `passed`, which the mark passed up to
    /// `until`: this tree takes them over.
    pub(super) fn taken_over(passed: ListBehind, until: DateTime<Utc>, pin: Pin) -> Self {
        Deferred {
            unlisted: Vec::new(),
            from: passed.from.clone(),
            pin,
            reading: false,
            missed: None,
            listing: false,
            taking_over: Some(TakeOver {
                list: passed.list,
                next: passed.from,
                until,
                started: false,
            }),
            read_back_armed: false,
        }
    }

    /// Whether its list holds every task deferred so far (the mark may pass them, naming it).
    pub(super) fn complete(&self) -> bool {
        !self.listing && self.unlisted.is_empty() && self.taking_over.is_none()
    }

    /// Whether its list holds every task deferred so far and nothing reads or writes it.
    pub(super) fn settled(&self) -> bool {
        !self.reading && self.complete()
    }
}

/// The id a tree lists its deferrals under: its lease holder (unique in the process) and when
/// it started (unique across restarts of a node).
pub(super) fn tree_id(holder: &str, started: DateTime<Utc>) -> String {
    format!("{holder}-{}", started.timestamp_micros())
}

/// Drops the lists of the tree `tree` of `partition`, as it stops (it reads them no more). A
/// failure is logged: the rows expire.
pub(super) async fn drop_lists(
    lists: Arc<dyn DeferredStore>,
    partition: PartitionId,
    tree: String,
) {
    match lists.drop_deferral_lists(partition, tree.clone()).await {
        Ok(()) => debug!(partition, %tree, "the tree's deferred-task lists dropped"),
        Err(e) => {
            warn!(partition, %tree, error = %e, "the tree's deferred-task lists not dropped; their rows expire")
        }
    }
}

/// Copies a batch of the rows of `take.list` from `take.next`, the ones before `take.until`,
/// into `own`. Returns where the next batch starts (`None`: every row is copied).
pub(super) async fn copy_taken_over(
    lists: Arc<dyn DeferredStore>,
    take: (DeferralList, RunOrder, DateTime<Utc>),
    own: DeferralList,
) -> StoreResult<Option<RunOrder>> {
    let (list, next, until) = take;
    let rows = lists.listed_deferred(list, next, LIST_BATCH).await?;
    let last_batch = rows.len() < LIST_BATCH;
    let before: Vec<RunOrder> = (rows.iter())
        .take_while(|run| run.scheduled_time < until)
        .cloned()
        .collect();
    let done = last_batch || before.len() < rows.len();
    let next = before.last().map(RunOrder::successor);
    if !before.is_empty() {
        lists.list_deferred(own, before).await?;
    }
    Ok(if done { None } else { next })
}

/// What one read-back found: the rows it read from the list (in run order) and the tasks they
/// name that are still in the schedule (a task cancelled or finished meanwhile is not), each
/// as the schedule holds it now.
pub(super) struct ReadBack {
    pub(super) rows: Vec<RunOrder>,
    pub(super) tasks: Vec<Task>,
    /// The first row read and left in the list, at or after `before`.
    pub(super) rest: Option<RunOrder>,
}

/// Reads up to `limit` rows of `list` (in `lists`) from `from` and before `before`, then the
/// tasks they name, in reads naming only their rows ([`ScheduleStore::scheduled_tasks`]): a
/// read by key would step over the tombstones of its orderingId's ties already run.
pub(super) async fn read_back(
    (lists, schedule): (Arc<dyn DeferredStore>, Arc<dyn ScheduleStore>),
    list: DeferralList,
    (from, before): (RunOrder, Option<RunOrder>),
    limit: usize,
) -> StoreResult<ReadBack> {
    let mut rows = lists.listed_deferred(list.clone(), from, limit).await?;
    let cut = (before.as_ref()).and_then(|before| rows.iter().position(|row| row >= before));
    let rest = cut.map(|at| rows.split_off(at).swap_remove(0));
    // A task listed twice (deferred again under a new run order: a record delivered again) is
    // named once; the schedule holds its current version (an identity's update included).
    let mut keys: Vec<TaskKey> = (rows.iter())
        .map(|run| TaskKey {
            scheduled_time: run.scheduled_time,
            ordering_id: list.ordering_id.clone(),
            uniqueness_key: run.uniqueness_key.clone(),
        })
        .collect();
    keys.sort();
    keys.dedup();
    let mut tasks = schedule.scheduled_tasks(list.partition, keys).await?;
    tasks.sort_by_cached_key(Task::run_order);
    Ok(ReadBack { rows, tasks, rest })
}
