//! TaskPersistence: the schedule of one partition in Cassandra. It writes polled tasks, loads
//! due and soon-due tasks on the ThroughputController's request, and keeps the read cursor: the
//! point up to which the schedule has been loaded. A task persisted behind the cursor would never
//! be loaded, so it is pushed straight to the PartitionScheduler.
//!
//! Pushes are bounded: tasks beyond `max_in_flight_tasks` stay in Cassandra and the cursor moves
//! back to the first of them, so loading brings them in as room frees up. A task the
//! PartitionScheduler defers as it comes (its limit key holds its share there: see
//! `partition_scheduler`) needs no room and is pushed.
//!
//! Writes and loads are serialised (each waits for the previous to finish), so a task is either
//! behind the cursor when its write completes (pushed) or ahead of it (loaded later), never both
//! or neither.
//!
//! It also keeps the partition's **low-water mark** (stored with the partition's owner): every
//! task due before it has a final status but the ones listed with it, so a new tree loads from
//! there, however long ago that is, reads the listed ones by key, and never reads the tombstones
//! of the tasks finished before it. The tree's first load waits for its claim and these
//! start-up reads, each attempt bounded by `persist_timeout`. Every few seconds, when a task
//! done with lies after the mark, the mark advances to the earliest of: the read cursor, now
//! less a margin, the first task deferred to Cassandra, and the first held task past
//! [`MAX_LISTED`]; it lists the tasks in memory it passes (a head retrying for hours, a
//! suspended task, the tasks queued behind them), so none of them holds it back. Each advance
//! is a lightweight transaction on the tree's epoch (a fenced tree cannot move it) writing the
//! mark and its list together, and forgets the hour buckets that end before it and before the
//! first listed task. A polled batch holding a task due before the mark lowers the mark first,
//! before the batch is acknowledged.
//!
//! Over 500 lines: one actor, a partition's persistence: its batches, loads, cancels and low-water
//! mark; the parts that stand alone are in `task_persistence/`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AsyncContext, AtomicResponse, Context, Handler,
    Message, Recipient, ResponseActFuture, WrapFuture,
};
use chrono::{DateTime, TimeDelta, Utc};
use scheduler_client::{Task, TaskKey};
use tracing::{debug, info, warn};

mod cancels;
mod identity_deferral;
mod tables;

use self::cancels::{Canceller, Deferred};
use self::identity_deferral::{Deferral, IdentityDeferrer, WaitingRecords};
pub use self::tables::PersistenceTables;
use super::partition_executor::{key_share, StartTakeOver, TakeOverLists};
use super::partition_ownership::{CheckOwnership, Ownership, PartitionOwnership};
use super::partition_scheduler::{PartitionScheduler, ScheduleTasks, UnscheduleTasks};
use super::{PolledTasks, StopActor, TreeError, TreeResult};
use crate::cancel_gate::CancelGate;
use crate::clock::Clock;
use crate::enqueue::Enqueuer;
use crate::identity;
use crate::in_flight::{InFlight, Passed};
use crate::known_statuses::KnownStatuses;
use crate::lease::TreeLease;
use crate::metrics::{Metrics, ParkReason, Parked};
use crate::outcome::StopReason;
use crate::retry::exponential_period;
use crate::store::pages::{load_whole_ties, TieCursor};
use crate::store::{
    last_of_each_key, schedule_start, DeferredCancel, ListBehind, LowWater, PartitionId,
    ReadCursor, StoreError, StoreResult, WRITE_CONCURRENCY,
};

/// How often the low-water mark is considered for advancing.
const LOW_WATER_INTERVAL: Duration = Duration::from_secs(5);
/// The mark stays this far behind now, so that a task arriving a little after its time (a
/// producer's clock, a short consumer lag) is not behind it: only a task later than this makes
/// its batch lower the mark first.
const LOW_WATER_MARGIN: TimeDelta = TimeDelta::seconds(10);
/// The mark of a partition with nothing done since it moved still follows now this closely (so
/// the stale-task count and a new tree start near now).
const LOW_WATER_IDLE_STEP: TimeDelta = TimeDelta::hours(1);
/// The most tasks listed with the low-water mark ([`InFlight::behind`]), and the most bytes of
/// their keys: a task beyond them stops the mark. A new tree reads each listed task by its key.
const MAX_LISTED: usize = 1_000;
const MAX_LISTED_BYTES: usize = 256 * 1024;
/// First wait before the start-up reads are made again after they failed.
const START_RETRY: Duration = Duration::from_millis(500);
/// The longest wait between two attempts at the start-up reads.
const START_RETRY_MAX: Duration = Duration::from_secs(10);

/// To the ThroughputController: there is more to load than the loaded horizon suggests (this
/// actor moved its cursor back after pushing only part of a batch): load as soon as there is
/// room.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct LoadMore;

/// Write one polled batch of the partition; the reply comes once all of it is durable. Refused
/// once the tree winds down, and when the batch cannot be durable by `answer_by` (the consumer
/// stops waiting then): the records are polled again.
#[derive(Debug, Message)]
#[rtype(result = "TreeResult<()>")]
pub struct PersistTasks {
    /// The batch's records of this partition.
    pub polled: PolledTasks,
    /// When the consumer stops waiting for the answer: work not done by then is abandoned, and
    /// a batch that reaches the actor later is not begun.
    pub answer_by: tokio::time::Instant,
}

/// Load up to `limit` tasks due before `until`, from the read cursor on.
#[derive(Debug, Message)]
#[rtype(result = "TreeResult<TasksLoaded>")]
pub struct LoadTasks {
    /// Exclusive upper bound of the scheduled times to load.
    pub until: DateTime<Utc>,
    /// At most this many tasks.
    pub limit: usize,
}

/// What a load found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TasksLoaded {
    /// Whether everything before `until` has now been loaded.
    pub caught_up: bool,
    /// The time the read cursor has reached.
    pub cursor_at: DateTime<Utc>,
}

/// Writes and loads the schedule of one partition.
pub struct TaskPersistence {
    partition: PartitionId,
    tables: PersistenceTables,
    scheduler: Addr<PartitionScheduler>,
    /// Takes over the deferred-task lists earlier trees left.
    deferred: Recipient<TakeOverLists>,
    /// Told once the tasks listed behind the mark reached the handler.
    start_take_over: Recipient<StartTakeOver>,
    controller: Recipient<LoadMore>,
    in_flight: Arc<InFlight>,
    max_in_flight: usize,
    dispatch_lead: Duration,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    cursor: ReadCursor,
    /// Set while loading a group of ties too large for one page (the cursor is before it).
    ties: Option<TieCursor>,
    /// The earliest time and the last offset of polled batches whose persisting failed: some
    /// of their rows may be in Cassandra already. Loading stops short of that time until a
    /// batch through that offset is persisted; else a row that landed could run before an
    /// earlier task of its orderingId whose write failed (pushed when the batch comes again).
    /// The low-water mark stops short of it too, for the same reason in the next tree.
    unacknowledged: Option<(DateTime<Utc>, i64)>,
    persist_timeout: Duration,
    /// Raised when the tree winds down.
    stop: tokio::sync::watch::Receiver<Option<StopReason>>,
    /// Answers once the tree's claim completed, with its epoch.
    ownership: Addr<PartitionOwnership>,
    /// Cancels being applied, seen by tasks already checked.
    cancels: CancelGate,
    /// Statuses of the tasks entering the tree, read in batches.
    known: KnownStatuses,
    lease: TreeLease,
    /// The tree's epoch (0 until its claim completed: nothing is written or loaded before).
    epoch: u64,
    /// The low-water mark as stored, or as an advance that failed may have stored it.
    low_water: DateTime<Utc>,
    /// The mark last known stored: below `low_water` after an advance that may not have
    /// applied. A batch lowers the mark to no more than this, so that a lowering never raises
    /// a mark the advance did not move past tasks it did not list.
    low_water_stored: DateTime<Utc>,
    /// Enqueues a group's join when a cancel finishes the group.
    enqueuer: Arc<dyn Enqueuer>,
    /// Identity records waiting for an earlier tree's calls of their orderingId.
    waiting_records: WaitingRecords,
}

/// Where a partition's persistence sends tasks, and the limit on what it may hold in memory.
pub struct PersistenceLinks {
    /// Receives pushed and loaded tasks.
    pub scheduler: Addr<PartitionScheduler>,
    /// Takes over the deferred-task lists earlier trees left.
    pub deferred: Recipient<TakeOverLists>,
    /// Told once the tasks listed behind the mark reached the handler.
    pub start_take_over: Recipient<StartTakeOver>,
    /// Told when the cursor moves back (there is more to load).
    pub controller: Recipient<LoadMore>,
    /// The partition's in-flight gauge; tasks sent to the scheduler are counted into it.
    pub in_flight: Arc<InFlight>,
    /// `max_in_flight_tasks`: pushes beyond it are left for loading.
    pub max_in_flight: usize,
    /// `dispatch_lead`: a task due by then is held, whatever its key.
    pub dispatch_lead: Duration,
    /// Where persisted counts and latencies go.
    pub metrics: Arc<Metrics>,
    /// Time of recorded cancellations.
    pub clock: Arc<dyn Clock>,
    /// The tree's stop signal: batches are refused once it is raised.
    pub stop: tokio::sync::watch::Receiver<Option<StopReason>>,
    /// The tree's ownership: the first load waits for its claim.
    pub ownership: Addr<PartitionOwnership>,
    /// Tells tasks already checked that a cancel of theirs is being applied.
    pub cancels: CancelGate,
    /// What the tree knows of its tasks' statuses: the tasks pushed and loaded are checked in
    /// batches.
    pub known: KnownStatuses,
    /// The tree's running-task lease: told, at the start, what earlier trees left (their
    /// running calls) and when it started, so tasks know whether to read attempts.
    pub lease: TreeLease,
    /// Enqueues a group's join when a cancel finishes the group.
    pub enqueuer: Arc<dyn Enqueuer>,
}

impl TaskPersistence {
    /// Persistence for `partition`; its first load starts at the partition's low-water mark.
    pub fn new(
        partition: PartitionId,
        tables: PersistenceTables,
        links: PersistenceLinks,
        persist_timeout: Duration,
    ) -> Self {
        let start = schedule_start();
        TaskPersistence {
            partition,
            tables,
            scheduler: links.scheduler,
            deferred: links.deferred,
            start_take_over: links.start_take_over,
            controller: links.controller,
            in_flight: links.in_flight,
            max_in_flight: links.max_in_flight,
            dispatch_lead: links.dispatch_lead,
            metrics: links.metrics,
            clock: links.clock,
            cursor: ReadCursor::From(start),
            ties: None,
            unacknowledged: None,
            persist_timeout,
            stop: links.stop,
            ownership: links.ownership,
            cancels: links.cancels,
            known: links.known,
            lease: links.lease,
            epoch: 0,
            low_water: start,
            low_water_stored: start,
            enqueuer: links.enqueuer,
            waiting_records: WaitingRecords::default(),
        }
    }

    /// Whether loading has passed `key`: a task persisted there must be pushed. That includes
    /// every tie of the task the cursor stands after (same time and orderingId), whatever its
    /// key: loading read that group whole, and a later tie runs after all of it in enqueue
    /// order, so one sorting after the cursor must not wait for a load while one sorting before
    /// it is pushed.
    fn has_passed(&self, key: &TaskKey) -> bool {
        match &self.ties {
            Some(ties) => ties.is_past(key),
            None => self.cursor.has_passed(key) || self.in_cursor_group(key),
        }
    }

    /// Whether `key` ties with the task the cursor stands after.
    fn in_cursor_group(&self, key: &TaskKey) -> bool {
        match (&self.ties, &self.cursor) {
            (None, ReadCursor::After(k)) => {
                k.scheduled_time == key.scheduled_time && k.ordering_id == key.ordering_id
            }
            _ => false,
        }
    }

    /// Moves the cursor past the ties of its own group pushed now, so loading does not read
    /// them again (every row of the group up to the last of them is in memory: loaded, or
    /// pushed now or by an earlier batch).
    fn step_past_pushed_ties(&mut self, pushed: &[Task]) {
        let last = pushed
            .iter()
            .map(Task::key)
            .filter(|k| self.in_cursor_group(k))
            .max();
        if let (Some(last), ReadCursor::After(k)) = (last, &self.cursor) {
            if last > *k {
                self.cursor = ReadCursor::After(last);
            }
        }
    }

    /// What applying this tree's cancels needs.
    fn canceller(&self) -> Canceller {
        Canceller {
            partition: self.partition,
            tables: self.tables.clone(),
            enqueuer: Arc::clone(&self.enqueuer),
            metrics: Arc::clone(&self.metrics),
            lease: self.lease.clone(),
            gate: self.cancels.clone(),
        }
    }

    /// What deferring identity records needs.
    fn identity_deferrer(&self) -> IdentityDeferrer {
        IdentityDeferrer {
            partition: self.partition,
            tables: self.tables.clone(),
            lease: self.lease.clone(),
            gate: self.cancels.clone(),
        }
    }

    /// Queues identity records deferred (by this tree or an earlier one) behind those of their
    /// orderingId; for an orderingId that had none waiting, waits for the earlier trees' calls of
    /// it to end, then applies its records (see [`identity_deferral`]).
    fn defer_identity_records(&mut self, deferral: Deferral, ctx: &mut Context<Self>) {
        for ordering_id in self.waiting_records.add(deferral) {
            let lease = self.lease.clone();
            let partition = self.partition;
            let waited = async move {
                let mut failures = 0;
                while let Err(e) = lease.wait_for_predecessors(&ordering_id).await {
                    failures += 1;
                    let wait = exponential_period(failures, START_RETRY, START_RETRY_MAX);
                    warn!(partition, ordering_id, error = %e, retry_in = ?wait,
                        "reading earlier trees' leases failed; trying again");
                    tokio::time::sleep(wait).await;
                }
                ordering_id
            };
            ctx.spawn(waited.into_actor(self).map(|ordering_id, _, ctx| {
                ctx.notify(ApplyDeferredIdentityRecords {
                    ordering_id,
                    failures: 0,
                });
            }));
        }
    }

    /// Applies a deferred cancel once no earlier tree may call a task of its orderingId (see
    /// [`cancels`]), then takes the task out of memory.
    fn spawn_deferred(&self, deferred: Deferred, ctx: &mut Context<Self>) {
        let apply = self.canceller().apply_deferred(deferred);
        ctx.spawn(apply.into_actor(self).map(|cancelled, act, _| {
            if let Some(key) = cancelled {
                act.scheduler.do_send(UnscheduleTasks(vec![key]));
            }
        }));
    }

    /// Sends `tasks` to the PartitionScheduler: those it holds counted in flight, those to
    /// defer as they come ([`Self::held_of`]) only pinned.
    fn send_to_scheduler(&self, mut tasks: Vec<Task>) {
        if tasks.is_empty() {
            return;
        }
        let held = self.held_of(&mut tasks);
        self.send_split(tasks, held);
    }

    /// Sends `tasks` to the PartitionScheduler, each to hold or to defer as `held` says.
    fn send_split(&self, tasks: Vec<Task>, held: Vec<bool>) {
        let (mut kept, mut deferred) = (Vec::with_capacity(tasks.len()), Vec::new());
        for (task, held) in tasks.into_iter().zip(held) {
            match held {
                true => kept.push(task),
                false => {
                    let pin = self.in_flight.pin(task.scheduled_time);
                    deferred.push((task, pin));
                }
            }
        }
        self.scheduler.do_send(ScheduleTasks {
            held: self.in_flight.hold(kept),
            deferred,
        });
    }
}

impl Actor for TaskPersistence {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Nothing is written or loaded until the claim completed and the mark is read: the
        // mark read then is the newest (older trees can no longer move it).
        self.try_start(0, ctx);
        ctx.run_interval(LOW_WATER_INTERVAL, |act, ctx| act.advance_low_water(ctx));
    }
}

impl TaskPersistence {
    /// One attempt at the tree's start-up reads ([`start_reads`]), holding the mailbox for at
    /// most `persist_timeout`: a batch or a load arriving meanwhile waits for it. A failed
    /// attempt is made again later with the mailbox free in between, so a store failing for
    /// good never holds a batch longer than that (it is refused as `Starting`, polled again).
    fn try_start(&mut self, failures: u32, ctx: &mut Context<Self>) {
        let reads = start_reads(
            self.ownership.clone(),
            self.identity_deferrer(),
            self.clock.now(),
        );
        let timeout = self.persist_timeout;
        let bounded = async move {
            tokio::time::timeout(timeout, reads)
                .await
                .unwrap_or(Err(StoreError::Timeout {
                    operation: "reading where the partition's tree starts",
                    after: timeout,
                }))
        };
        ctx.wait(bounded.into_actor(self).map(move |result, act, ctx| {
            match result {
                Ok(Some(start)) => act.begin(start, ctx),
                // Fenced before it began: the tree is stopping.
                Ok(None) => {}
                Err(e) => {
                    let failures = failures.saturating_add(1);
                    let wait = exponential_period(failures, START_RETRY, START_RETRY_MAX);
                    warn!(partition = act.partition, error = %e, failures, retry_in = ?wait,
                        "the partition's start-up reads failed; trying again");
                    ctx.run_later(wait, move |act, ctx| {
                        if act.stop.borrow().is_none() {
                            act.try_start(failures, ctx);
                        }
                    });
                }
            }
        }));
    }

    /// Starts loading from where the start-up reads say.
    fn begin(&mut self, start: Start, ctx: &mut Context<Self>) {
        let Start {
            epoch,
            low_water,
            mut behind,
            lists,
            deferred_cancels,
            deferred_identity,
        } = start;
        let from = low_water.unwrap_or_else(schedule_start);
        self.epoch = epoch;
        (self.low_water, self.cursor) = (from, ReadCursor::From(from));
        self.low_water_stored = from;
        self.in_flight.set_low_water(from);
        info!(partition = self.partition, epoch, low_water = ?low_water,
            behind = behind.len(), lists = lists.len(), "loading from the low-water mark");
        // Tasks not final from before the mark: as many as memory takes now; for the rest,
        // loading starts back at the first of them.
        behind.sort_by_cached_key(Task::run_order);
        if behind.len() > self.max_in_flight {
            let left = behind.split_off(self.max_in_flight);
            self.cursor = ReadCursor::From(left[0].scheduled_time);
        }
        // Deferred tasks an earlier tree listed, due before where loading starts: taken over
        // now (pinned before any mark this tree writes; later tasks of their orderingIds, loaded
        // or pushed, wait behind them), and read once the tasks listed behind the mark reached
        // the handler (due, they are dispatched at once), since some of them run first.
        let until = self.cursor.time();
        let lists: Vec<_> = (lists.into_iter())
            .filter(|l| l.from.scheduled_time < until)
            .map(|l| {
                let pin = self.in_flight.pin(l.from.scheduled_time);
                (l, pin)
            })
            .collect();
        if lists.is_empty() {
            self.send_to_scheduler(behind);
        } else {
            self.deferred.do_send(TakeOverLists { lists, until });
            let scheduled = (self.scheduler).send(ScheduleTasks {
                held: self.in_flight.hold(behind),
                deferred: Vec::new(),
            });
            let start = self.start_take_over.clone();
            ctx.spawn(
                async move {
                    // A scheduler gone is a tree stopping: nothing to take over then.
                    if scheduled.await.is_ok() {
                        start.do_send(StartTakeOver);
                    }
                }
                .into_actor(self),
            );
        }
        // Cancels an earlier tree deferred: applied once its calls of their orderingIds end.
        for (key, at) in deferred_cancels {
            let deferred = self.canceller().deferred(key, at);
            self.spawn_deferred(deferred, ctx);
        }
        // Identity records an earlier tree deferred: applied, in partition order, once its
        // calls of their orderingIds end; any this tree polls of those orderingIds wait behind.
        self.defer_identity_records(deferred_identity, ctx);
    }
}

/// Where a tree starts: its epoch, the partition's low-water mark, the tasks not final that are
/// due before the mark, and the cancels and identity records earlier trees deferred.
struct Start {
    epoch: u64,
    low_water: Option<DateTime<Utc>>,
    behind: Vec<Task>,
    lists: Vec<ListBehind>,
    deferred_cancels: Vec<DeferredCancel>,
    deferred_identity: Deferral,
}

/// Waits for the tree's claim, then reads earlier trees' leases, the partition's low-water mark
/// and the tasks listed behind it (the leases first, see [`TreeLease::may_have_earlier_attempts`]);
/// `None` if the tree is fenced first.
async fn start_reads(
    ownership: Addr<PartitionOwnership>,
    deferrer: IdentityDeferrer,
    started_at: DateTime<Utc>,
) -> StoreResult<Option<Start>> {
    let (partition, tables, lease) = (
        deferrer.partition,
        deferrer.tables.clone(),
        deferrer.lease.clone(),
    );
    let epoch = match ownership.send(CheckOwnership { read_after: None }).await {
        Ok(Ok(Ownership::Owner(epoch))) => epoch,
        Ok(Ok(Ownership::Fenced)) | Ok(Err(_)) | Err(_) => return Ok(None),
    };
    lease.read_predecessors_once().await?;
    let (low_water, behind, lists) = read_start(partition, &tables).await?;
    let deferred_cancels = tables.schedule.deferred_cancels(partition).await?;
    let deferred_identity = deferrer
        .restore(tables.schedule.deferred_identity_records(partition).await?)
        .await?;
    lease.started_at(started_at);
    Ok(Some(Start {
        epoch,
        low_water,
        behind,
        lists,
        deferred_cancels,
        deferred_identity,
    }))
}

/// The partition's low-water mark and the tasks due before it that were not final when it was
/// written: those listed with it (at most [`MAX_LISTED`]), each read by its key (one whose row is
/// gone has finished since), and the earlier trees' deferred-task lists it names (taken over by
/// the PartitionExecutor). A mark an older release wrote lists none: its tasks are in
/// `retrying_tasks`.
async fn read_start(
    partition: PartitionId,
    tables: &PersistenceTables,
) -> StoreResult<(Option<DateTime<Utc>>, Vec<Task>, Vec<ListBehind>)> {
    let Some(LowWater {
        at: mark,
        behind,
        lists,
    }) = tables.ownership.low_water(partition).await?
    else {
        // Loading starts at the first bucket: it finds every task.
        return Ok((None, Vec::new(), Vec::new()));
    };
    let keys = match behind {
        Some(keys) => keys,
        None => tables.schedule.legacy_retrying(partition).await?,
    };
    // A mark lowered since it was written loads the later ones itself.
    let keys = keys.into_iter().filter(|k| k.scheduled_time < mark);
    let tasks = futures::stream::iter(keys)
        .map(|key| tables.schedule.scheduled_task(partition, key))
        .buffer_unordered(WRITE_CONCURRENCY)
        .try_filter_map(|task| futures::future::ready(Ok(task)))
        .try_collect()
        .await?;
    Ok((Some(mark), tasks, lists))
}

impl TaskPersistence {
    /// Moves the low-water mark up to the earliest task that may still be incomplete (see the
    /// module's doc), when a task done with lies after it (or once an hour).
    fn advance_low_water(&mut self, ctx: &mut Context<Self>) {
        if self.epoch == 0 || self.stop.borrow().is_some() {
            return;
        }
        let now = self.clock.now();
        // The tasks held in memory do not stop the mark: it lists those it passes (a head
        // retrying for hours, a suspended task, the tasks queued behind them), up to a bound.
        let mut up_to = self.cursor.time().min(now - LOW_WATER_MARGIN);
        // Nor past a batch whose persisting failed (see `unacknowledged`): some of its rows may
        // be in Cassandra, and a new tree loading from the mark must find them all, its earliest
        // first, not a later task of an orderingId while the earlier one comes again from Kafka.
        if let Some((earliest, _)) = self.unacknowledged {
            up_to = up_to.min(earliest);
        }
        let passed = self.in_flight.behind(up_to, MAX_LISTED, MAX_LISTED_BYTES);
        let mark = passed.at;
        // Worth a write when a task done with lies at or after the mark (a new tree would read
        // its tombstone), or the mark lags far behind.
        let done_after_mark = self
            .in_flight
            .latest_released()
            .is_some_and(|at| at >= self.low_water);
        let worth_it = done_after_mark || mark - self.low_water >= LOW_WATER_IDLE_STEP;
        if mark <= self.low_water || !worth_it {
            return;
        }
        let (partition, epoch) = (self.partition, self.epoch);
        // Buckets are forgotten with writes stamped before this mark was recorded: a task a
        // newer tree writes into one of them afterwards survives.
        let stamp = self.tables.schedule.write_stamp();
        // Buckets of the tasks listed are kept: their rows are read by key.
        let keep_from = (passed.keys.first().map(|k| k.scheduled_time))
            .into_iter()
            .chain(passed.lists.iter().map(|l| l.from.scheduled_time))
            .fold(mark, DateTime::min);
        let seq = self.in_flight.writing(&passed.lists);
        let Passed { keys, lists, .. } = passed;
        let write = tokio::time::timeout(
            self.persist_timeout,
            self.tables
                .ownership
                .advance_low_water(partition, epoch, mark, keys, lists),
        );
        // Waited for: a batch persisted meanwhile compares its tasks with the new mark.
        ctx.wait(write.into_actor(self).map(move |result, act, ctx| {
            match result {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => {
                    debug!(
                        partition,
                        "low-water mark not moved: a newer tree claimed the partition"
                    );
                    act.in_flight.refused(seq);
                    return;
                }
                // The write may still apply: later batches compare with the higher mark (a
                // needless lowering costs one transaction), but nothing is forgotten.
                Ok(Err(e)) => {
                    debug!(partition, error = %e, "low-water mark may not have moved");
                    act.low_water = mark;
                    return;
                }
                Err(_) => {
                    debug!(
                        partition,
                        "low-water mark may not have moved: the write timed out"
                    );
                    act.low_water = mark;
                    return;
                }
            }
            (act.low_water, act.low_water_stored) = (mark, mark);
            act.in_flight.recorded(seq, mark);
            debug!(partition, %mark, "low-water mark advanced");
            let forget = act
                .tables
                .schedule
                .forget_buckets(partition, keep_from, stamp);
            ctx.spawn(
                forget
                    .into_actor(act)
                    .map(move |result, _, _| match result {
                        Ok(0) => {}
                        Ok(buckets) => debug!(partition, buckets, "finished hour buckets removed"),
                        Err(e) => {
                            debug!(partition, error = %e, "finished hour buckets not removed yet")
                        }
                    }),
            );
        }));
    }
}

impl Handler<PersistTasks> for TaskPersistence {
    type Result = AtomicResponse<Self, TreeResult<()>>;

    fn handle(&mut self, msg: PersistTasks, _: &mut Context<Self>) -> Self::Result {
        AtomicResponse::new(self.persist(msg.polled, msg.answer_by, Polled::FromKafka))
    }
}

/// To itself: the records of an orderingId deferred while an earlier tree could call a task of
/// it may be applied now (no earlier tree lists it any more; see [`identity_deferral`]).
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct ApplyDeferredIdentityRecords {
    ordering_id: String,
    /// Failed attempts so far: the next waits longer.
    failures: u32,
}

impl Handler<ApplyDeferredIdentityRecords> for TaskPersistence {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: ApplyDeferredIdentityRecords, _: &mut Context<Self>) -> Self::Result {
        let ApplyDeferredIdentityRecords {
            ordering_id,
            failures,
        } = msg;
        let (ops, holds) = self.waiting_records.take(&ordering_id);
        if ops.is_empty() || self.stop.borrow().is_some() {
            return AtomicResponse::new(Box::pin(actix::fut::ready(())));
        }
        let polled = PolledTasks {
            by_identity: ops.clone(),
            ..PolledTasks::default()
        };
        let answer_by = tokio::time::Instant::now() + self.persist_timeout;
        let applied = self.persist(polled, answer_by, Polled::Deferred);
        AtomicResponse::new(Box::pin(applied.map(move |result, act, ctx| {
            let Err(e) = result else {
                // Applied: the tasks they held may take their checks again.
                drop(holds);
                debug!(
                    partition = act.partition,
                    ordering_id, "deferred identity records applied"
                );
                return;
            };
            let failures = failures.saturating_add(1);
            let wait = exponential_period(failures, START_RETRY, START_RETRY_MAX);
            warn!(partition = act.partition, ordering_id, error = %e, retry_in = ?wait,
                "deferred identity records not applied yet; trying again");
            act.waiting_records
                .put_back(ordering_id.clone(), ops, holds);
            ctx.run_later(wait, move |act, ctx| {
                if act.stop.borrow().is_none() {
                    ctx.notify(ApplyDeferredIdentityRecords {
                        ordering_id,
                        failures,
                    });
                }
            });
        })))
    }
}

/// Where records being persisted come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Polled {
    /// A batch just polled from Kafka: its acknowledgement lets the offset past it be committed.
    FromKafka,
    /// Identity records deferred before (written to `deferred_identity_records`): forgotten
    /// there once applied.
    Deferred,
}

impl TaskPersistence {
    /// Writes `polled` (see [`PersistTasks`]), serialised with loads and other writes.
    fn persist(
        &mut self,
        polled: PolledTasks,
        answer_by: tokio::time::Instant,
        source: Polled,
    ) -> ResponseActFuture<Self, TreeResult<()>> {
        if self.stop.borrow().is_some() {
            return Box::pin(actix::fut::ready(Err(TreeError::Stopping {
                doing: "persisting a polled batch",
            })));
        }
        if self.epoch == 0 {
            return Box::pin(actix::fut::ready(Err(TreeError::Starting {
                doing: "persisting a polled batch",
            })));
        }
        if tokio::time::Instant::now() >= answer_by {
            return Box::pin(actix::fut::ready(Err(TreeError::Late {
                doing: "persisting a polled batch",
            })));
        }
        let extent = match source {
            Polled::FromKafka => polled.extent(),
            Polled::Deferred => None,
        };
        let PolledTasks {
            tasks,
            cancels,
            by_identity,
        } = polled;
        // Of several records of one key in a batch, the last in partition order wins, in the
        // store and in memory alike.
        let tasks = last_of_each_key(tasks);
        // The statuses of the tasks pushed now are read in batches as they are written, but for
        // those of an orderingId an earlier tree was calling at the claim (`known_statuses`).
        let checking: Vec<TaskKey> = tasks
            .iter()
            .map(Task::key)
            .filter(|key| self.has_passed(key) && !self.lease.listed_at_claim(&key.ordering_id))
            .collect();
        let known = self.known.clone();
        let started = std::time::Instant::now();
        let (partition, epoch) = (self.partition, self.epoch);
        let tables = self.tables.clone();
        let metrics = Arc::clone(&self.metrics);
        let gate = self.cancels.clone();
        let cancelled_at = self.clock.now();
        let timeout = self.persist_timeout;
        let canceller = self.canceller();
        let deferrer = self.identity_deferrer();
        let waiting = self.waiting_records.ordering_ids();
        // Given the low-water mark as the work starts, not as the message arrives: a mark
        // advance queued meanwhile runs first (the context runs its latest wait first), and a
        // task due before the mark it wrote must still lower it.
        let work = move |low_water: DateTime<Utc>, stored: DateTime<Utc>| async move {
            // A record acting on an identity that an earlier tree's call could defeat waits for
            // that call, and later ones of its orderingId behind it (`identity_deferral`).
            let (by_identity, deferred_records) =
                deferrer.defer_where_needed(by_identity, &waiting).await?;
            let applied: Vec<(String, i64)> = match source {
                Polled::Deferred => by_identity
                    .iter()
                    .map(|op| (op.identity().ordering_id, op.offset()))
                    .collect(),
                Polled::FromKafka => Vec::new(),
            };
            // Records acting on identities come to tasks, superseded tasks and cancels.
            let resolved = identity::resolve(
                &tables.identity_tables(),
                partition,
                by_identity,
                &gate,
                &metrics,
            )
            .await?;
            // The keys given new data stay held until the batch is written (see `identity`).
            let _updating = resolved.updating;
            let mut tasks = tasks;
            tasks.extend(resolved.tasks);
            let tasks = last_of_each_key(tasks);
            let mut cancels = cancels;
            cancels.extend(resolved.cancels);
            // Until the cancels are recorded (or failed), a task already checked does not call;
            // nor does a superseded one until its identity's new record is written.
            let gated: Vec<TaskKey> = cancels
                .iter()
                .chain(&resolved.superseded)
                .cloned()
                .collect();
            let _applying = gate.applying(&gated);
            // A cancel an earlier tree's call could defeat waits for that call (`cancels`).
            let (cancels, deferred) = canceller.defer_where_needed(cancels, cancelled_at).await?;
            // A task due before the low-water mark lowers it first: were the tree to stop
            // before running it, the next tree must load it. Never above the mark last known
            // stored: after an advance that may not have applied, the stored mark may be lower
            // than the task, with tasks between them it does not list.
            let lower = tasks
                .iter()
                .map(|t| t.scheduled_time)
                .min()
                .filter(|earliest| *earliest < low_water)
                .map(|earliest| earliest.min(stored));
            if let Some(at) = lower {
                if !tables.ownership.set_low_water(partition, epoch, at).await? {
                    return Err(TreeError::Stopping {
                        doing: "lowering the low-water mark (a newer tree claimed the partition)",
                    });
                }
            }
            write_all(resolved.records, |record| {
                tables.identities.record_identity(partition, record)
            })
            .await?;
            write_all(resolved.revived, |key| {
                tables.status.clear_status(partition, key)
            })
            .await?;
            let refused = match tasks.is_empty() {
                true => Vec::new(),
                false => {
                    let written = tables.schedule.persist(partition, tasks.clone());
                    let checked = known.check(partition, checking);
                    let (refused, checked) = futures::future::join(written, checked).await;
                    if let Err(e) = checked {
                        debug!(partition, error = %e, "statuses not read in a batch: each task reads its own");
                    }
                    refused?
                }
            };
            let mut cancelled = canceller.apply(cancels, cancelled_at).await?;
            for key in resolved.superseded_rows {
                // An optimisation: a superseded row left behind is skipped when loaded.
                let _ = tables.schedule.remove_scheduled(partition, key).await;
            }
            cancelled.extend(resolved.superseded);
            // Deferred records applied are forgotten last: applied again after a failure, each
            // is a duplicate of its identity's record (at or before its offset).
            write_all(applied, |(ordering_id, offset)| {
                tables
                    .schedule
                    .forget_deferred_identity_record(partition, ordering_id, offset)
            })
            .await?;
            Ok((tasks, refused, cancelled, lower, deferred, deferred_records))
        };
        let bounded = move |low_water, stored| async move {
            tokio::time::timeout_at(answer_by, work(low_water, stored))
                .await
                .unwrap_or(Err(TreeError::Store(StoreError::Timeout {
                    operation: "persisting a polled batch",
                    after: timeout,
                })))
        };
        let started_work = actix::fut::ready(()).then(move |(), act: &mut Self, _| {
            bounded(act.low_water, act.low_water_stored).into_actor(act)
        });
        Box::pin(started_work.map(move |result, act, ctx| {
            let (tasks, refused, cancelled, lower, deferred, deferred_records) = match result {
                Ok(done) => done,
                Err(e) => {
                    if let Some((earliest, last)) = extent {
                        act.unacknowledged = Some(match act.unacknowledged {
                            Some((at, offset)) => (at.min(earliest), offset.max(last)),
                            None => (earliest, last),
                        });
                    }
                    return Err(e);
                }
            };
            if let (Some((_, failed)), Some((_, last))) = (act.unacknowledged, extent) {
                if last >= failed {
                    act.unacknowledged = None;
                    act.controller.do_send(LoadMore);
                }
            }
            if let Some(at) = lower {
                (act.low_water, act.low_water_stored) = (at, at);
                act.in_flight.set_low_water(at);
            }
            if !tasks.is_empty() {
                act.metrics
                    .persisted(act.partition, tasks.len(), started.elapsed());
            }
            for task in &refused {
                // Retrying cannot help, and holding the batch back would stall the partition.
                act.metrics.parked(
                    act.partition,
                    Parked::Task(&task.key),
                    ParkReason::RefusedByStore,
                    &task.reason,
                );
            }
            let refused: HashSet<TaskKey> = refused.into_iter().map(|r| r.key).collect();
            let behind: Vec<Task> = tasks
                .into_iter()
                .filter(|t| act.has_passed(&t.key()) && !refused.contains(&t.key()))
                .collect();
            act.step_past_pushed_ties(&behind);
            act.push(behind);
            if !cancelled.is_empty() {
                // After the push above, so a task cancelled in its own batch is dropped too.
                act.scheduler.do_send(UnscheduleTasks(cancelled));
            }
            for deferred in deferred {
                act.spawn_deferred(deferred, ctx);
            }
            act.defer_identity_records(deferred_records, ctx);
            Ok(())
        }))
    }
}

/// Runs `write` for each of `items`, `WRITE_CONCURRENCY` at a time.
async fn write_all<T, F>(items: Vec<T>, write: impl Fn(T) -> F) -> StoreResult<()>
where
    F: std::future::Future<Output = StoreResult<()>>,
{
    futures::stream::iter(items)
        .map(write)
        .buffer_unordered(WRITE_CONCURRENCY)
        .try_collect()
        .await
}

impl TaskPersistence {
    /// Pushes tasks persisted behind the read cursor to the scheduler, as many as fit under
    /// `max_in_flight_tasks`; the cursor moves back to the first of the rest, so loading reads
    /// them once there is room (however far back: loading jumps between the indexed hour
    /// buckets, so a far-past time does not make it walk years of empty hours).
    fn push(&mut self, mut behind: Vec<Task>) {
        let room = self.max_in_flight.saturating_sub(self.in_flight.current());
        let held = self.held_of(&mut behind);
        // In run order: what is left runs after what is pushed, ties included.
        let (mut kept, mut left, mut flags) = (0, Vec::new(), Vec::new());
        for (task, held) in std::mem::take(&mut behind).into_iter().zip(held) {
            if held && kept == room {
                left.push(task);
                continue;
            }
            kept += usize::from(held);
            behind.push(task);
            flags.push(held);
        }
        if let Some(first) = left.first() {
            let from = first.scheduled_time.min(self.cursor.time());
            self.cursor = ReadCursor::From(from);
            self.ties = None;
            self.controller.do_send(LoadMore);
            debug!(
                partition = self.partition,
                left = left.len(),
                "in-flight limit reached; tasks left for loading"
            );
        }
        debug!(
            partition = self.partition,
            pushed = behind.len(),
            "tasks persisted"
        );
        self.send_split(behind, flags);
    }

    /// Sorts `tasks` in run order and says of each whether the PartitionScheduler is to hold
    /// it, or defer it as it comes (not due yet, its key at its share there).
    fn held_of(&self, tasks: &mut [Task]) -> Vec<bool> {
        tasks.sort_by_cached_key(Task::run_order);
        let share = key_share(self.max_in_flight);
        let horizon =
            self.clock.now() + chrono::TimeDelta::from_std(self.dispatch_lead).unwrap_or_default();
        let mut more: HashMap<&str, usize> = HashMap::new();
        let mut held = Vec::new();
        for task in tasks.iter() {
            let more_of_key =
                (task.limit_key.as_deref()).map_or(0, |k| more.get(k).copied().unwrap_or(0));
            if task.scheduled_time > horizon && self.in_flight.to_defer(task, share, more_of_key) {
                held.push(false);
                continue;
            }
            if let Some(key) = task.limit_key.as_deref() {
                *more.entry(key).or_default() += 1;
            }
            held.push(true);
        }
        held
    }
}

impl Handler<LoadTasks> for TaskPersistence {
    type Result = AtomicResponse<Self, TreeResult<TasksLoaded>>;

    fn handle(&mut self, msg: LoadTasks, _: &mut Context<Self>) -> Self::Result {
        if self.epoch == 0 {
            let starting = TreeError::Starting {
                doing: "loading the schedule",
            };
            return AtomicResponse::new(Box::pin(actix::fut::ready(Err(starting))));
        }
        // The room may have shrunk since the controller asked (a push came first).
        let limit = msg
            .limit
            .min(self.max_in_flight.saturating_sub(self.in_flight.current()));
        if limit == 0 {
            let cursor_at = self.cursor.time();
            return AtomicResponse::new(Box::pin(actix::fut::ready(Ok(TasksLoaded {
                caught_up: false,
                cursor_at,
            }))));
        }
        // Not past a batch that may be half written (see `unacknowledged`).
        let until = match self.unacknowledged {
            Some((earliest, _)) => msg.until.min(earliest),
            None => msg.until,
        };
        // Reserved while the load runs, so a read-back elsewhere in the tree cannot take it.
        let reserved = self.in_flight.reserve(limit);
        let load = load_whole_ties(
            Arc::clone(&self.tables.schedule),
            self.partition,
            self.cursor.clone(),
            self.ties.clone(),
            until,
            limit,
        );
        // The loaded tasks' statuses are read in batches (`known_statuses`).
        let (known, lease, partition) = (self.known.clone(), self.lease.clone(), self.partition);
        let load = async move {
            let page = load.await?;
            let keys: Vec<TaskKey> = (page.tasks.iter().map(Task::key))
                .filter(|key| !lease.listed_at_claim(&key.ordering_id))
                .collect();
            if let Err(e) = known.check(partition, keys).await {
                debug!(partition, error = %e, "statuses not read in a batch: each task reads its own");
            }
            Ok(page)
        };
        AtomicResponse::new(Box::pin(load.into_actor(self).map(
            move |result, act, _| {
                drop(reserved);
                let page = result.map_err(TreeError::Store)?;
                let (tasks, caught_up) = (page.tasks, page.next.is_none());
                let count = tasks.len();
                match page.next {
                    Some(next) => (act.cursor, act.ties) = (next.cursor, next.ties),
                    // Everything before `until` has been read.
                    None => {
                        act.cursor = ReadCursor::From(until.max(act.cursor.time()));
                        act.ties = None;
                    }
                }
                debug!(partition = act.partition, count, caught_up, "tasks loaded");
                act.in_flight.mark_loaded();
                act.send_to_scheduler(tasks);
                // Held short of the horizon by a half-written batch: the controller is told
                // when that batch is persisted, and meanwhile asks again as if caught up.
                let cursor_at = match caught_up && until < msg.until {
                    true => msg.until,
                    false => act.cursor.time(),
                };
                Ok(TasksLoaded {
                    caught_up,
                    cursor_at,
                })
            },
        )))
    }
}

impl Handler<StopActor> for TaskPersistence {
    type Result = ();

    fn handle(&mut self, _: StopActor, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
