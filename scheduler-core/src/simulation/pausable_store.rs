//! The store as one simulated node sees it: the shared in-memory store behind a gate that a
//! pause of the node's process closes. A request made while the process is paused never reaches
//! the store, and one under way when the pause began loses its answer (it may have been applied):
//! both fail once the pause ends, as requests cut by a long pause time out. So a paused node
//! changes nothing meanwhile: its lease expires, and after the pause it must find out that it was
//! fenced before it records anything.

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::{RunOrder, Task, TaskKey};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::store::memory::MemoryStore;
use crate::store::{
    AttemptRecord, AttemptStore, DeferredCancel, DeferredIdentityRecord, LeaseRecord, LeaseStore,
    LowWater, OwnershipStore, PartitionId, PartitionOwner, ReadCursor, RefusedTask, ScheduleStore,
    StatusRecord, StatusStore, StoreError, StoreResult, WriteStamp,
};
use crate::store::{BucketProgress, JobRecord, JobStore};
use crate::store::{DeadLetter, DeadLetterFilter, DeadLetterStore, IdentityRecord, IdentityStore};
use crate::store::{DeferralList, DeferredStore};
use crate::store::{FireRecord, RecurringStore, ScheduleRecord};
use crate::store::{
    GroupHeader, GroupKey, GroupMark, GroupState, GroupStore, MemberOutcome, ParentRecord,
    TaskStatus,
};
use crate::store::{Suspension, SuspensionStore, SuspensionTarget};

/// Whether a node's process is paused (and how many pauses began so far): shared by its store
/// and its executor. A pause may also be set to begin on the node's next request of one kind
/// (a trap), so it falls where a step is most fragile: between two writes of one task's record.
/// Waiters are woken in the order they began to wait (a `watch` channel would wake them in a
/// random order, and a replayed seed would not run the same way).
#[derive(Clone)]
pub(super) struct Pause {
    state: Arc<Mutex<(bool, u64)>>,
    changed: Arc<Notify>,
    /// The operation whose next request pauses the process, and when a trap last sprang.
    trap: Arc<Mutex<Trap>>,
}

#[derive(Default)]
struct Trap {
    armed: Option<&'static str>,
    sprung: Option<Instant>,
}

impl Pause {
    pub(super) fn new() -> Pause {
        Pause {
            state: Arc::default(),
            changed: Arc::new(Notify::new()),
            trap: Arc::default(),
        }
    }

    pub(super) fn set(&self, paused: bool) {
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if paused && !state.0 {
                state.1 += 1;
            }
            state.0 = paused;
        }
        self.changed.notify_waiters();
    }

    pub(super) fn is_paused(&self) -> bool {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).0
    }

    fn pauses_begun(&self) -> u64 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).1
    }

    /// Resolves once the process runs again.
    pub(super) async fn resumed(&self) {
        self.until(false).await;
    }

    /// Resolves once the process is paused.
    pub(super) async fn paused(&self) {
        self.until(true).await;
    }

    async fn until(&self, paused: bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.is_paused() == paused {
                return;
            }
            changed.await;
        }
    }

    /// Pauses the process as its next `operation` request is made (`None` disarms).
    pub(super) fn arm(&self, operation: Option<&'static str>) {
        self.trap().armed = operation;
    }

    /// When a trap sprang since the last call, if one did (the world then moves the node's
    /// partitions on, as for any pause).
    pub(super) fn take_sprung(&self) -> Option<Instant> {
        self.trap().sprung.take()
    }

    /// Springs the trap if `operation` is what it waits for.
    fn spring(&self, operation: &'static str) {
        let mut trap = self.trap();
        if trap.armed == Some(operation) && !self.is_paused() {
            trap.armed = None;
            trap.sprung = Some(Instant::now());
            self.set(true);
        }
    }

    fn trap(&self) -> std::sync::MutexGuard<'_, Trap> {
        self.trap.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The shared store, as seen by one node whose process may be paused.
pub(super) struct PausableStore {
    store: MemoryStore,
    pause: Pause,
}

impl PausableStore {
    pub(super) fn new(store: MemoryStore, pause: Pause) -> PausableStore {
        PausableStore { store, pause }
    }

    /// `request` made now: sent to the store unless the process is paused; its answer, unless
    /// a pause began before it came (then a failure, once the pause is over).
    fn send<T: Send + 'static>(
        &self,
        operation: &'static str,
        request: impl FnOnce(&MemoryStore) -> BoxFuture<'static, StoreResult<T>>,
    ) -> BoxFuture<'static, StoreResult<T>> {
        let pause = self.pause.clone();
        pause.spring(operation);
        let sent = (!pause.is_paused()).then(|| request(&self.store));
        let pauses = pause.pauses_begun();
        Box::pin(async move {
            if let Some(answer) = sent {
                let answer = answer.await;
                if pause.pauses_begun() == pauses {
                    return answer;
                }
            }
            pause.resumed().await;
            Err(StoreError::query(
                operation,
                std::io::Error::other("cut by a pause of the node's process"),
            ))
        })
    }
}

impl ScheduleStore for PausableStore {
    fn persist(
        &self,
        partition: PartitionId,
        tasks: Vec<Task>,
    ) -> BoxFuture<'static, StoreResult<Vec<RefusedTask>>> {
        self.send("task insert", |s| s.persist(partition, tasks))
    }

    fn load(
        &self,
        partition: PartitionId,
        cursor: ReadCursor,
        until: DateTime<Utc>,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<Task>>> {
        self.send("schedule load", |s| s.load(partition, cursor, until, limit))
    }

    fn remove_scheduled(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("schedule delete", |s| s.remove_scheduled(partition, key))
    }

    fn scheduled_task(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<Task>>> {
        self.send("task read", |s| s.scheduled_task(partition, key))
    }

    fn legacy_retrying(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<TaskKey>>> {
        self.send("retrying read", |s| s.legacy_retrying(partition))
    }

    fn defer_cancel(
        &self,
        partition: PartitionId,
        key: TaskKey,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("deferred cancel write", |s| {
            s.defer_cancel(partition, key, at)
        })
    }

    fn forget_deferred_cancel(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("deferred cancel delete", |s| {
            s.forget_deferred_cancel(partition, key)
        })
    }

    fn deferred_cancels(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<DeferredCancel>>> {
        self.send("deferred cancels read", |s| s.deferred_cancels(partition))
    }

    fn defer_identity_record(
        &self,
        partition: PartitionId,
        record: DeferredIdentityRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("deferred identity record write", |s| {
            s.defer_identity_record(partition, record)
        })
    }

    fn forget_deferred_identity_record(
        &self,
        partition: PartitionId,
        ordering_id: String,
        offset: i64,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("deferred identity record delete", move |s| {
            s.forget_deferred_identity_record(partition, ordering_id, offset)
        })
    }

    fn deferred_identity_records(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<DeferredIdentityRecord>>> {
        self.send("deferred identity records read", |s| {
            s.deferred_identity_records(partition)
        })
    }

    fn write_stamp(&self) -> WriteStamp {
        self.store.write_stamp()
    }

    fn forget_buckets(
        &self,
        partition: PartitionId,
        before: DateTime<Utc>,
        stamp: WriteStamp,
    ) -> BoxFuture<'static, StoreResult<usize>> {
        self.send("bucket delete", |s| {
            s.forget_buckets(partition, before, stamp)
        })
    }
}

impl DeferredStore for PausableStore {
    fn list_deferred(
        &self,
        list: DeferralList,
        tasks: Vec<RunOrder>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("deferred list write", |s| s.list_deferred(list, tasks))
    }

    fn listed_deferred(
        &self,
        list: DeferralList,
        from: RunOrder,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<RunOrder>>> {
        self.send("deferred list read", |s| {
            s.listed_deferred(list, from, limit)
        })
    }

    fn unlist_deferred(
        &self,
        list: DeferralList,
        tasks: Vec<RunOrder>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("deferred list delete", |s| s.unlist_deferred(list, tasks))
    }

    fn drop_deferral_lists(
        &self,
        partition: PartitionId,
        tree: String,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("deferred lists delete", |s| {
            s.drop_deferral_lists(partition, tree)
        })
    }
}

impl StatusStore for PausableStore {
    fn status(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>> {
        self.send("status read", |s| s.status(partition, key))
    }

    fn record_status(
        &self,
        partition: PartitionId,
        key: TaskKey,
        status: StatusRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("status write", |s| s.record_status(partition, key, status))
    }

    fn clear_status(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("status delete", |s| s.clear_status(partition, key))
    }

    fn cancel(
        &self,
        partition: PartitionId,
        key: TaskKey,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>> {
        self.send("cancel", |s| s.cancel(partition, key, at))
    }
}

impl IdentityStore for PausableStore {
    fn identity(
        &self,
        partition: PartitionId,
        identity: scheduler_client::TaskIdentity,
    ) -> BoxFuture<'static, StoreResult<Option<IdentityRecord>>> {
        self.send("identity read", |s| s.identity(partition, identity))
    }

    fn record_identity(
        &self,
        partition: PartitionId,
        record: IdentityRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("identity write", |s| s.record_identity(partition, record))
    }
}

impl GroupStore for PausableStore {
    fn record_member(
        &self,
        group: GroupKey,
        outcome: MemberOutcome,
        total: Option<u32>,
        fail_fast: bool,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("group write", |s| {
            s.record_member(group, outcome, total, fail_fast)
        })
    }

    fn group(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Option<GroupState>>> {
        self.send("group read", |s| s.group(group))
    }

    fn record_parent(
        &self,
        group: GroupKey,
        parent: ParentRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("group write", |s| s.record_parent(group, parent))
    }

    fn group_parent(
        &self,
        group: GroupKey,
    ) -> BoxFuture<'static, StoreResult<Option<ParentRecord>>> {
        self.send("group read", |s| s.group_parent(group))
    }

    fn group_header(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<GroupHeader>> {
        self.send("group read", |s| s.group_header(group))
    }

    fn finished_members(
        &self,
        group: GroupKey,
        first: u32,
        last: u32,
    ) -> BoxFuture<'static, StoreResult<Vec<(u32, TaskStatus)>>> {
        self.send("group read", move |s| {
            s.finished_members(group, first, last)
        })
    }

    fn record_group_mark(
        &self,
        group: GroupKey,
        mark: GroupMark,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("group mark write", move |s| {
            s.record_group_mark(group, mark)
        })
    }

    fn group_marks(
        &self,
        group: GroupKey,
        level: u8,
        first: u32,
        last: u32,
    ) -> BoxFuture<'static, StoreResult<Vec<GroupMark>>> {
        self.send("group read", move |s| {
            s.group_marks(group, level, first, last)
        })
    }

    fn all_group_marks(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Vec<GroupMark>>> {
        self.send("group read", |s| s.all_group_marks(group))
    }
}

impl SuspensionStore for PausableStore {
    fn suspensions(&self) -> BoxFuture<'static, StoreResult<Vec<Suspension>>> {
        self.send("suspensions read", |s| s.suspensions())
    }

    fn suspend(&self, suspension: Suspension) -> BoxFuture<'static, StoreResult<()>> {
        self.send("suspension write", |s| s.suspend(suspension))
    }

    fn resume(&self, target: SuspensionTarget) -> BoxFuture<'static, StoreResult<()>> {
        self.send("suspension write", |s| s.resume(target))
    }
}

impl RecurringStore for PausableStore {
    fn recurring_schedules(&self) -> BoxFuture<'static, StoreResult<Vec<ScheduleRecord>>> {
        self.send("schedules read", |s| s.recurring_schedules())
    }

    fn recurring_schedule(
        &self,
        id: String,
    ) -> BoxFuture<'static, StoreResult<Option<ScheduleRecord>>> {
        self.send("schedules read", |s| s.recurring_schedule(id))
    }

    fn put_recurring_schedule(
        &self,
        record: ScheduleRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("schedule write", |s| s.put_recurring_schedule(record))
    }

    fn record_tick(
        &self,
        id: String,
        last_fire: Option<DateTime<Utc>>,
        next_fire: Option<DateTime<Utc>>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("schedule write", |s| {
            s.record_tick(id, last_fire, next_fire)
        })
    }

    fn delete_recurring_schedule(&self, id: String) -> BoxFuture<'static, StoreResult<()>> {
        self.send("schedule write", |s| s.delete_recurring_schedule(id))
    }

    fn record_fires(
        &self,
        id: String,
        fires: Vec<FireRecord>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("fire write", |s| s.record_fires(id, fires))
    }

    fn fires(&self, id: String, limit: usize) -> BoxFuture<'static, StoreResult<Vec<FireRecord>>> {
        self.send("fires read", |s| s.fires(id, limit))
    }
}

impl JobStore for PausableStore {
    fn record_job(&self, job: JobRecord) -> BoxFuture<'static, StoreResult<()>> {
        self.send("job write", |s| s.record_job(job))
    }

    fn jobs(&self) -> BoxFuture<'static, StoreResult<Vec<JobRecord>>> {
        self.send("jobs read", |s| s.jobs())
    }

    fn job(&self, id: String) -> BoxFuture<'static, StoreResult<Option<JobRecord>>> {
        self.send("jobs read", |s| s.job(id))
    }

    fn record_progress(
        &self,
        group: GroupKey,
        progress: BucketProgress,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("progress write", |s| s.record_progress(group, progress))
    }

    fn progress(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Vec<BucketProgress>>> {
        self.send("progress read", |s| s.progress(group))
    }

    fn progress_in(
        &self,
        group: GroupKey,
        first: u32,
        last: u32,
    ) -> BoxFuture<'static, StoreResult<Vec<BucketProgress>>> {
        self.send("progress read", move |s| s.progress_in(group, first, last))
    }
}

impl DeadLetterStore for PausableStore {
    fn add_dead_letter(&self, letter: DeadLetter) -> BoxFuture<'static, StoreResult<()>> {
        self.send("dead-letter write", |s| s.add_dead_letter(letter))
    }

    fn dead_letters(
        &self,
        filter: DeadLetterFilter,
        after: Option<TaskKey>,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<DeadLetter>>> {
        self.send("dead-letter list", |s| s.dead_letters(filter, after, limit))
    }

    fn dead_letter(&self, key: TaskKey) -> BoxFuture<'static, StoreResult<Option<DeadLetter>>> {
        self.send("dead-letter read", |s| s.dead_letter(key))
    }

    fn mark_redriven(
        &self,
        key: TaskKey,
        redrives: u32,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("dead-letter redrive mark", |s| {
            s.mark_redriven(key, redrives, at)
        })
    }

    fn remove_dead_letter(&self, key: TaskKey) -> BoxFuture<'static, StoreResult<()>> {
        self.send("dead-letter delete", |s| s.remove_dead_letter(key))
    }
}

impl AttemptStore for PausableStore {
    fn attempts(
        &self,
        key: TaskKey,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<AttemptRecord>>> {
        self.send("attempts read", |s| AttemptStore::attempts(s, key, limit))
    }

    fn record_attempt(
        &self,
        partition: PartitionId,
        key: TaskKey,
        attempt: AttemptRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("attempt write", |s| {
            s.record_attempt(partition, key, attempt)
        })
    }
}

impl OwnershipStore for PausableStore {
    fn claim_partition(
        &self,
        partition: PartitionId,
        owner: String,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<u64>> {
        self.send("partition claim", |s| {
            s.claim_partition(partition, owner, at)
        })
    }

    fn partition_epoch(&self, partition: PartitionId) -> BoxFuture<'static, StoreResult<u64>> {
        self.send("epoch read", |s| s.partition_epoch(partition))
    }

    fn low_water(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Option<LowWater>>> {
        self.send("low-water read", |s| s.low_water(partition))
    }

    fn advance_low_water(
        &self,
        partition: PartitionId,
        epoch: u64,
        at: DateTime<Utc>,
        behind: Vec<TaskKey>,
        lists: Vec<crate::store::ListBehind>,
    ) -> BoxFuture<'static, StoreResult<bool>> {
        self.send("low-water write", |s| {
            s.advance_low_water(partition, epoch, at, behind, lists)
        })
    }

    fn set_low_water(
        &self,
        partition: PartitionId,
        epoch: u64,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<bool>> {
        self.send("low-water write", |s| s.set_low_water(partition, epoch, at))
    }

    fn owners(&self) -> BoxFuture<'static, StoreResult<Vec<PartitionOwner>>> {
        self.send("owners read", |s| s.owners())
    }
}

impl LeaseStore for PausableStore {
    fn write_lease(
        &self,
        partition: PartitionId,
        holder: String,
        lease: LeaseRecord,
        ttl: std::time::Duration,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("lease write", |s| {
            s.write_lease(partition, holder, lease, ttl)
        })
    }

    fn delete_lease(
        &self,
        partition: PartitionId,
        holder: String,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.send("lease delete", |s| s.delete_lease(partition, holder))
    }

    fn leases(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<(String, LeaseRecord)>>> {
        self.send("lease read", |s| s.leases(partition))
    }
}

/// The clock as one simulated node sees it: a timer that falls due while the node's process is
/// paused fires once the process runs again (as a real process's timers do), so a node never
/// acts on a timer during its pause.
pub(super) struct PausableClock {
    pub(super) clock: crate::clock::TokioClock,
    pub(super) pause: Pause,
}

impl crate::clock::Clock for PausableClock {
    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    fn sleep_until(&self, at: DateTime<Utc>) -> BoxFuture<'static, ()> {
        let sleep = self.clock.sleep_until(at);
        let pause = self.pause.clone();
        Box::pin(async move {
            sleep.await;
            pause.resumed().await;
        })
    }
}
