//! PartitionExecutor: routes each due task of a partition to the OrderingExecutor of its
//! orderingId (creating it on first use, stopping it when its queue empties). A task counts in
//! the partition's in-flight gauge until it is done with (a [`HeldTask`]); this actor tells the
//! ThroughputController each time one is.
//!
//! One orderingId holds at most a few tasks in memory (`max_queued_per_ordering`, at most a
//! quarter of `max_in_flight_tasks`): a due task beyond that is **deferred**, dropped from
//! memory and left in Cassandra, so an orderingId stuck on a failing head cannot fill the
//! partition's in-flight budget and stall every other orderingId. A deferred task is listed in
//! the tree's list of its orderingId's deferred tasks; once the orderingId's queue is half empty
//! they are read back from that list, in run order (time, then enqueue order): see
//! [`deferred`]. While an orderingId has deferred tasks, every later task of it is deferred too,
//! so its order holds.
//!
//! Once its list holds every task deferred so far, the orderingId's deferral pins the low-water
//! mark by naming the list, so the mark passes tasks deferred behind a head that waits for
//! hours. A new tree takes over the lists its start's mark named ([`TakeOverLists`]): it copies
//! their rows due before the mark into its own lists, then reads back as usual. A row read back
//! is taken out of the list once no mark written or being written still names the list from an
//! earlier row.
//!
//! A limit key's tasks hold at most a quarter of `max_in_flight_tasks` here (`shares`), and
//! again in the PartitionScheduler: its tasks not due yet beyond that come here to be deferred
//! as they are persisted or loaded ([`DeferPartitionTask`]), and are read back once nearly due,
//! after any task of their orderingId still on its way here that runs before them.
//!
//! Over 500 lines: one actor, a partition's executors; its deferred tasks are in
//! `partition_executor/`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, Recipient,
    ResponseFuture, WrapFuture,
};
use chrono::{DateTime, Utc};
use scheduler_client::{RunOrder, Task};
use tracing::{debug, info, warn};

use super::ordering_executor::{
    DrainOrdering, ExecuteOrderingTask, OrderingExecutor, OrderingTaskDone,
};
use super::task_lifecycle::ExecutionLinks;
use super::{RunDeps, StopActor};
use crate::in_flight::{HeldTask, InFlight, Pin};
use crate::store::{DeferralList, DeferredStore, ListBehind, PartitionId, StoreError};

mod deferred;
mod shares;

use deferred::{Deferred, ReadBack, LIST_BATCH};
use shares::KeyShares;

/// A task that is due, from the PartitionScheduler.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ExecutePartitionTask(pub HeldTask);

/// From the PartitionScheduler: a task not due yet that TaskPersistence marked to defer as it
/// comes (its limit key holds its share of the scheduler's memory, or its orderingId's tasks
/// are deferred here), pinned until it is. Deferred by its orderingId at once, and read back
/// once it is nearly due, its key has room, and no task of its orderingId that runs before it
/// is still on its way here.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct DeferPartitionTask(pub Task, pub Pin);

/// The most tasks of one limit key a tree holds in the PartitionScheduler, and again queued or
/// running here: a quarter of `max_in_flight_tasks`.
pub fn key_share(max_in_flight_tasks: usize) -> usize {
    (max_in_flight_tasks / 4).max(1)
}

/// To the ThroughputController: a task is done with (or deferred), so there may be room to
/// load more.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct CapacityFreed;

/// Stop starting tasks and wait (at most `timeout`) for the running ones to finish. The reply
/// says whether they all did (`false`: some are still running, left to finish on their own).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct DrainPartition {
    /// How long running tasks may take.
    pub timeout: Duration,
}

/// From TaskPersistence at the tree's start: the deferred-task lists of earlier trees that the
/// partition's low-water mark (`until`) passed, each pinned at its first run order. This tree
/// copies their rows before the mark into its own lists and runs them in order.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct TakeOverLists {
    /// The lists, each with its pin.
    pub lists: Vec<(ListBehind, Pin)>,
    /// The mark the tree started from.
    pub until: DateTime<Utc>,
}

/// From TaskPersistence, after [`TakeOverLists`]: the tasks listed behind the mark reached this
/// actor (some of them run before the lists' tasks), so the lists may be read.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StartTakeOver;

/// How often rows read back are considered for taking out of their lists.
const UNLIST_INTERVAL: Duration = Duration::from_secs(5);

/// Wait before reading deferred tasks back again after a failed read, or while the partition
/// has no room.
const READ_BACK_RETRY: Duration = Duration::from_secs(1);

struct OrderingQueue {
    executor: Addr<OrderingExecutor>,
    outstanding: usize,
}

/// Executes the due tasks of one partition.
pub struct PartitionExecutor {
    partition: PartitionId,
    deps: RunDeps,
    /// Where it lists the tasks it defers.
    lists: Arc<dyn DeferredStore>,
    links: ExecutionLinks,
    capacity_listener: Recipient<CapacityFreed>,
    queues: BTreeMap<String, OrderingQueue>,
    deferred: BTreeMap<String, Deferred>,
    /// The id the tree lists its deferred tasks under, from its first deferral on.
    tree: Option<String>,
    /// Rows read back from each orderingId's list, not taken out of it yet.
    read_rows: BTreeMap<String, Vec<RunOrder>>,
    in_flight: Arc<InFlight>,
    /// Each limit key's share of the tree's memory.
    shares: KeyShares,
    draining: bool,
}

impl PartitionExecutor {
    /// An executor for `partition`; whenever a task is done with it tells `capacity_listener`.
    /// Deferred tasks, listed in `lists`, are counted in `in_flight` as they are read back.
    pub fn new(
        partition: PartitionId,
        deps: RunDeps,
        lists: Arc<dyn DeferredStore>,
        links: ExecutionLinks,
        capacity_listener: Recipient<CapacityFreed>,
        in_flight: Arc<InFlight>,
    ) -> Self {
        let shares = KeyShares::new(key_share(deps.settings.max_in_flight_tasks));
        PartitionExecutor {
            partition,
            deps,
            lists,
            links,
            capacity_listener,
            queues: BTreeMap::new(),
            deferred: BTreeMap::new(),
            tree: None,
            read_rows: BTreeMap::new(),
            shares,
            in_flight,
            draining: false,
        }
    }
}

impl PartitionExecutor {
    /// The most tasks one orderingId holds in memory.
    fn ordering_bound(&self) -> usize {
        let settings = &self.deps.settings;
        settings
            .max_queued_per_ordering
            .min(settings.max_in_flight_tasks / 4)
            .max(1)
    }

    /// Leaves `task` in Cassandra: dropped from memory, remembered as deferred for its
    /// orderingId and listed in its deferred-task list. An orderingId deferred with a task of
    /// a limit key reads back within the key's share, whatever it was deferred for (else the
    /// key's orderingIds, each reading back its own share, would fill the tree's memory).
    fn defer(&mut self, task: &Task, ctx: &mut Context<Self>) {
        let key = task.run_order();
        let ordering_id = task.ordering_id.clone();
        // Checked again as it is read back.
        self.links.known.forget(&task.key());
        if let Some(limit_key) = task.limit_key.as_deref() {
            self.shares.wait(limit_key, &ordering_id);
        }
        match self.deferred.get_mut(&ordering_id) {
            Some(deferred) => {
                if deferred.reading && deferred.missed.as_ref().is_none_or(|m| key < *m) {
                    deferred.missed = Some(key.clone());
                }
                if key < deferred.from {
                    deferred.from = key.clone();
                }
                deferred.unlisted.push(key);
                // Not listed yet: the mark stops at the deferral's first task.
                self.repin(&ordering_id);
            }
            None => {
                debug!(partition = self.partition, %ordering_id,
                    "orderingId holds its share of memory: later tasks wait in Cassandra");
                let pin = self.in_flight.pin(key.scheduled_time);
                self.in_flight.set_deferring(&ordering_id, true);
                self.deferred
                    .insert(ordering_id.clone(), Deferred::new(key, pin));
            }
        }
        self.capacity_listener.do_send(CapacityFreed);
        self.list(ordering_id, ctx);
    }

    /// Pins the low-water mark at `ordering_id`'s first deferred task: naming its list once the
    /// list holds every task deferred so far, stopping the mark until then.
    fn repin(&mut self, ordering_id: &str) {
        let list = self.list_of(ordering_id);
        let Some(deferred) = self.deferred.get_mut(ordering_id) else {
            return;
        };
        deferred.pin = if deferred.complete() {
            let from = deferred.from.clone();
            self.in_flight.pin_list(ListBehind { list, from })
        } else {
            self.in_flight.pin(deferred.from.scheduled_time)
        };
    }

    /// The list of `ordering_id`'s deferred tasks in this tree (whose id is fixed at its first
    /// deferral).
    fn list_of(&mut self, ordering_id: &str) -> DeferralList {
        let tree = match &self.tree {
            Some(tree) => tree.clone(),
            None => {
                let tree = deferred::tree_id(self.links.lease.holder(), self.deps.clock.now());
                self.tree = Some(tree.clone());
                tree
            }
        };
        DeferralList {
            partition: self.partition,
            tree,
            ordering_id: ordering_id.to_string(),
        }
    }

    /// Lists `ordering_id`'s deferred tasks not listed yet, a batch at a time (not while its
    /// tasks are read back: the read would race the write), and the rows of an earlier tree's
    /// list it takes over; then reads back if there is room.
    fn list(&mut self, ordering_id: String, ctx: &mut Context<Self>) {
        let Some(deferred) = self.deferred.get(&ordering_id) else {
            return;
        };
        if deferred.listing || deferred.reading {
            return;
        }
        if deferred.unlisted.is_empty() {
            if deferred.taking_over.as_ref().is_some_and(|t| t.started) {
                self.copy_taken_over(ordering_id, ctx);
            }
            return;
        }
        let list = self.list_of(&ordering_id);
        let Some(deferred) = self.deferred.get_mut(&ordering_id) else {
            return;
        };
        let batch: Vec<RunOrder> = if deferred.unlisted.len() > LIST_BATCH {
            deferred.unlisted.drain(..LIST_BATCH).collect()
        } else {
            std::mem::take(&mut deferred.unlisted)
        };
        deferred.listing = true;
        let write = self.lists.list_deferred(list, batch.clone());
        ctx.spawn(write.into_actor(self).map(move |result, act, ctx| {
            let Some(deferred) = act.deferred.get_mut(&ordering_id) else {
                return;
            };
            deferred.listing = false;
            if let Err(e) = result {
                warn!(partition = act.partition, %ordering_id, error = %e,
                    "deferred tasks not listed; trying again");
                deferred.unlisted.splice(..0, batch);
                ctx.run_later(READ_BACK_RETRY, move |act, ctx| act.list(ordering_id, ctx));
                return;
            }
            act.listed(ordering_id, ctx);
        }));
    }

    /// After a listing write: lists on, or, with everything listed, names the list in the pin
    /// and reads back if there is room.
    fn listed(&mut self, ordering_id: String, ctx: &mut Context<Self>) {
        let Some(deferred) = self.deferred.get(&ordering_id) else {
            return;
        };
        if deferred.complete() {
            self.repin(&ordering_id);
            self.read_back_if_half_empty(ordering_id, ctx);
        } else {
            self.list(ordering_id, ctx);
        }
    }

    /// Copies a batch of the rows of the earlier tree's list `ordering_id`'s deferral takes
    /// over into this tree's list.
    fn copy_taken_over(&mut self, ordering_id: String, ctx: &mut Context<Self>) {
        let own = self.list_of(&ordering_id);
        let Some(deferred) = self.deferred.get_mut(&ordering_id) else {
            return;
        };
        let Some(take) = &deferred.taking_over else {
            return;
        };
        let take = (take.list.clone(), take.next.clone(), take.until);
        deferred.listing = true;
        let copy = deferred::copy_taken_over(Arc::clone(&self.lists), take, own);
        ctx.spawn(copy.into_actor(self).map(move |result, act, ctx| {
            let Some(deferred) = act.deferred.get_mut(&ordering_id) else {
                return;
            };
            deferred.listing = false;
            match result {
                Ok(Some(next)) => {
                    if let Some(take) = deferred.taking_over.as_mut() {
                        take.next = next;
                    }
                }
                Ok(None) => {
                    debug!(partition = act.partition, %ordering_id,
                        "an earlier tree's deferred tasks taken over");
                    deferred.taking_over = None;
                }
                Err(e) => {
                    warn!(partition = act.partition, %ordering_id, error = %e,
                        "an earlier tree's deferred tasks not taken over; trying again");
                    ctx.run_later(READ_BACK_RETRY, move |act, ctx| act.list(ordering_id, ctx));
                    return;
                }
            }
            act.listed(ordering_id, ctx);
        }));
    }

    /// Takes out of their lists the rows read back that no mark written or being written
    /// names (see the module's doc); the others wait for a later mark.
    fn unlist_read_rows(&mut self, ctx: &mut Context<Self>) {
        let ordering_ids: Vec<String> = self.read_rows.keys().cloned().collect();
        for ordering_id in ordering_ids {
            let list = self.list_of(&ordering_id);
            let keep_from = self.in_flight.keep_listed_from(&list);
            let Some(rows) = self.read_rows.get_mut(&ordering_id) else {
                continue;
            };
            let (done, kept): (Vec<RunOrder>, Vec<RunOrder>) = std::mem::take(rows)
                .into_iter()
                .partition(|row| keep_from.as_ref().is_none_or(|from| row < from));
            if kept.is_empty() {
                self.read_rows.remove(&ordering_id);
            } else {
                *rows = kept;
            }
            if done.is_empty() {
                continue;
            }
            // The rows lie before where the next read starts: deleting them leaves tombstones
            // no read steps over. A failed delete leaves rows that expire.
            let unlist = self.lists.unlist_deferred(list, done);
            ctx.spawn(unlist.into_actor(self).map(|result, act, _| {
                if let Err(e) = result {
                    debug!(partition = act.partition, error = %e, "deferred tasks read back not unlisted");
                }
            }));
        }
    }

    /// Reads back `ordering_id`'s deferred tasks once its queue is half empty (until then, a
    /// task's end calls this again).
    fn read_back_if_half_empty(&mut self, ordering_id: String, ctx: &mut Context<Self>) {
        let outstanding = self.queues.get(&ordering_id).map_or(0, |q| q.outstanding);
        if outstanding <= self.ordering_bound() / 2 {
            self.read_back(ordering_id, ctx);
        }
    }

    /// Reads back up to the free room of `ordering_id`'s deferred tasks from its list.
    fn read_back(&mut self, ordering_id: String, ctx: &mut Context<Self>) {
        // Within the orderingId's share and the partition's in-flight budget.
        let partition_room = self
            .deps
            .settings
            .max_in_flight_tasks
            .saturating_sub(self.in_flight.current());
        // Within the share of the key it was deferred for, if any: a task of the key's end
        // reads it back once there is room (`OrderingTaskDone`). Not a few at a time while the
        // key is near its share (its read-backs under way count in it): its turns come as it
        // is down to half ([`KeyShares::release`]).
        let key_room = self.shares.room_of(&ordering_id);
        if key_room < (self.ordering_bound() / 2).max(1) {
            return;
        }
        let room = self
            .ordering_bound()
            .saturating_sub(self.queues.get(&ordering_id).map_or(0, |q| q.outstanding))
            .min(partition_room)
            .min(key_room);
        let from = match self.deferred.get(&ordering_id) {
            Some(deferred) if deferred.settled() => deferred.from.clone(),
            // Listed first; the listing's end reads back.
            _ => return,
        };
        // Not a task after one of the orderingId held by the PartitionScheduler (that one is
        // dispatched first; its coming here reads on), nor before the first is nearly due
        // (deferred early: [`DeferPartitionTask`]).
        let before = self.in_flight.first_pending(&ordering_id);
        if before.as_ref().is_some_and(|first| *first <= from) {
            self.read_back_later(ordering_id, READ_BACK_RETRY, ctx);
            return;
        }
        let lead =
            chrono::TimeDelta::from_std(self.deps.settings.dispatch_lead).unwrap_or_default();
        let early = from.scheduled_time - lead - self.deps.clock.now();
        if let Some(wait) = early.to_std().ok().filter(|w| !w.is_zero()) {
            self.read_back_later(ordering_id, wait, ctx);
            return;
        }
        if room == 0 {
            if partition_room == 0 && !self.draining {
                ctx.run_later(READ_BACK_RETRY, move |act, ctx| {
                    act.read_back(ordering_id, ctx)
                });
            }
            return;
        }
        let list = self.list_of(&ordering_id);
        let Some(deferred) = self.deferred.get_mut(&ordering_id) else {
            return;
        };
        deferred.reading = true;
        deferred.missed = None;
        // Reserved now, so loads and pushes meanwhile cannot take the room, nor the key's other
        // read-backs its share.
        let reserved = self.in_flight.reserve(room);
        let reserved_of_key = self.shares.reading(&ordering_id, room);
        let tables = (
            Arc::clone(&self.lists),
            Arc::clone(&self.deps.tables.schedule),
        );
        let read = deferred::read_back(tables, list, (deferred.from.clone(), before), room);
        // Their statuses are read in batches, as a loaded page's are (`known_statuses`).
        // Not an orderingId an earlier tree listed at the claim (see `known_statuses`).
        let check = !self.links.lease.listed_at_claim(&ordering_id);
        let (known, partition) = (self.links.known.clone(), self.partition);
        let read = async move {
            let read = read.await?;
            if check {
                let keys = read.tasks.iter().map(Task::key).collect();
                if let Err(e) = known.check(partition, keys).await {
                    debug!(partition, error = %e, "statuses not read in a batch: each task reads its own");
                }
            }
            Ok::<_, StoreError>(read)
        };
        ctx.spawn(read.into_actor(self).map(move |result, act, ctx| {
            // Its tasks are counted in the key's share as they are enqueued, below.
            let per_ordering = act.ordering_bound();
            let turn = (act.shares).release(reserved_of_key.as_deref(), room, per_ordering);
            let Some(deferred) = act.deferred.get_mut(&ordering_id) else {
                return;
            };
            deferred.reading = false;
            let ReadBack { rows, tasks, rest } = match result {
                Ok(read) => read,
                Err(e) => {
                    warn!(partition = act.partition, %ordering_id, error = %e,
                        "deferred tasks not read back; trying again");
                    ctx.run_later(READ_BACK_RETRY, move |act, ctx| {
                        act.read_back(ordering_id, ctx)
                    });
                    return;
                }
            };
            let missed = deferred.missed.take();
            let next = if let Some(rest) = rest {
                // Left for after a task the PartitionScheduler holds.
                Some(rest).into_iter().chain(missed).min()
            } else if rows.len() < room {
                missed
            } else {
                // Right after the last row read: more may follow.
                let after_last = rows.last().map(RunOrder::successor);
                after_last.into_iter().chain(missed).min()
            };
            // The reservation becomes the tasks read, pinned before the deferred pin moves
            // past them.
            drop(reserved);
            let held = act.in_flight.hold(tasks);
            match next {
                Some(from) => {
                    deferred.from = from;
                    act.repin(&ordering_id);
                }
                None => {
                    act.deferred.remove(&ordering_id);
                    act.in_flight.set_deferring(&ordering_id, false);
                    act.shares.read_back_all(&ordering_id);
                }
            }
            (act.read_rows.entry(ordering_id.clone()).or_default()).extend(rows);
            act.unlist_read_rows(ctx);
            if act.draining {
                return;
            }
            for task in held {
                act.enqueue(task, ctx);
            }
            // The key's other orderingIds, if the read found fewer than it reserved.
            for waiting in turn.into_iter().filter(|o| *o != ordering_id) {
                act.read_back_if_half_empty(waiting, ctx);
            }
            // Tasks deferred during the read are listed now; with no task of the orderingId
            // left whose end would read them back, the listing's end or this reads on.
            if act.deferred.contains_key(&ordering_id) {
                act.list(ordering_id.clone(), ctx);
                act.read_back_if_half_empty(ordering_id, ctx);
            }
        }));
    }

    /// Reads `ordering_id`'s deferred tasks back after `wait` (one wait at a time).
    fn read_back_later(&mut self, ordering_id: String, wait: Duration, ctx: &mut Context<Self>) {
        let Some(deferred) = self.deferred.get_mut(&ordering_id) else {
            return;
        };
        if self.draining || std::mem::replace(&mut deferred.read_back_armed, true) {
            return;
        }
        ctx.run_later(wait, move |act, ctx| {
            if let Some(deferred) = act.deferred.get_mut(&ordering_id) {
                deferred.read_back_armed = false;
            }
            act.read_back_if_half_empty(ordering_id, ctx)
        });
    }

    /// Hands `task` to its orderingId's queue, creating it on first use.
    fn enqueue(&mut self, task: HeldTask, ctx: &mut Context<Self>) {
        let queue = self
            .queues
            .entry(task.ordering_id.clone())
            .or_insert_with(|| OrderingQueue {
                executor: OrderingExecutor::new(
                    self.partition,
                    task.ordering_id.clone(),
                    self.deps.clone(),
                    self.links.clone(),
                    ctx.address().recipient(),
                )
                .start(),
                outstanding: 0,
            });
        queue.outstanding += 1;
        self.shares.add(task.limit_key.as_deref());
        queue.executor.do_send(ExecuteOrderingTask(task));
    }
}

impl Actor for PartitionExecutor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(UNLIST_INTERVAL, |act, ctx| {
            if !act.read_rows.is_empty() {
                act.unlist_read_rows(ctx);
            }
        });
    }
}

impl Handler<StartTakeOver> for PartitionExecutor {
    type Result = ();

    fn handle(&mut self, _: StartTakeOver, ctx: &mut Context<Self>) {
        let taking_over: Vec<String> = (self.deferred.iter_mut())
            .filter_map(|(ordering_id, deferred)| {
                let take = deferred.taking_over.as_mut()?;
                take.started = true;
                Some(ordering_id.clone())
            })
            .collect();
        for ordering_id in taking_over {
            self.list(ordering_id, ctx);
        }
    }
}

impl Handler<TakeOverLists> for PartitionExecutor {
    type Result = ();

    fn handle(&mut self, msg: TakeOverLists, ctx: &mut Context<Self>) {
        for (passed, pin) in msg.lists {
            let ordering_id = passed.list.ordering_id.clone();
            info!(partition = self.partition, %ordering_id, tree = %passed.list.tree,
                "taking over an earlier tree's deferred tasks");
            let deferred = Deferred::taken_over(passed, msg.until, pin);
            self.in_flight.set_deferring(&ordering_id, true);
            self.deferred.insert(ordering_id.clone(), deferred);
            self.list(ordering_id, ctx);
        }
    }
}

impl Handler<ExecutePartitionTask> for PartitionExecutor {
    type Result = ();

    fn handle(&mut self, msg: ExecutePartitionTask, ctx: &mut Context<Self>) {
        // Held by the PartitionScheduler until now.
        self.in_flight.pending(&msg.0, false);
        if self.draining {
            // The partition is being torn down; the task stays in Cassandra for the next owner.
            return;
        }
        let task = msg.0;
        debug!(partition = self.partition, task = %task.key(), "task dispatched");
        let behind_deferred = self
            .deferred
            .get(&task.ordering_id)
            .is_some_and(|d| task.run_order() >= d.from || d.reading);
        let full = self
            .queues
            .get(&task.ordering_id)
            .is_some_and(|q| q.outstanding >= self.ordering_bound());
        let key_full = self.shares.full(task.limit_key.as_deref());
        if behind_deferred || full || key_full {
            let ordering_id = task.ordering_id.clone();
            self.defer(&task, ctx);
            drop(task);
            self.read_back_if_half_empty(ordering_id, ctx);
            return;
        }
        let ordering_id = task.ordering_id.clone();
        self.enqueue(task, ctx);
        if self.deferred.contains_key(&ordering_id) {
            // It ran before the orderingId's deferred tasks (deferred early, while it was held
            // by the PartitionScheduler): they may be read back now.
            self.read_back_if_half_empty(ordering_id, ctx);
        }
    }
}

impl Handler<DeferPartitionTask> for PartitionExecutor {
    type Result = ();

    fn handle(&mut self, msg: DeferPartitionTask, ctx: &mut Context<Self>) {
        if self.draining {
            return;
        }
        let DeferPartitionTask(task, _pinned_until_deferred) = msg;
        debug!(partition = self.partition, task = %task.key(), "task deferred before it is due");
        let ordering_id = task.ordering_id.clone();
        self.defer(&task, ctx);
        self.read_back_if_half_empty(ordering_id, ctx);
    }
}

impl Handler<OrderingTaskDone> for PartitionExecutor {
    type Result = ();

    fn handle(&mut self, msg: OrderingTaskDone, ctx: &mut Context<Self>) {
        let turn = (self.shares).done(msg.limit_key.as_deref(), self.ordering_bound());
        if !self.draining {
            for ordering_id in turn {
                self.read_back_if_half_empty(ordering_id, ctx);
            }
        }
        let mut outstanding = 0;
        if let Some(queue) = self.queues.get_mut(&msg.ordering_id) {
            queue.outstanding = queue.outstanding.saturating_sub(1);
            outstanding = queue.outstanding;
        }
        if !self.draining {
            if self.deferred.contains_key(&msg.ordering_id) {
                self.read_back_if_half_empty(msg.ordering_id.clone(), ctx);
            } else if outstanding == 0 {
                if let Some(idle) = self.queues.remove(&msg.ordering_id) {
                    idle.executor.do_send(StopActor);
                }
            }
        }
        self.capacity_listener.do_send(CapacityFreed);
    }
}

impl Handler<DrainPartition> for PartitionExecutor {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, msg: DrainPartition, _: &mut Context<Self>) -> Self::Result {
        self.draining = true;
        let drains: Vec<_> = self
            .queues
            .values()
            .map(|q| q.executor.send(DrainOrdering))
            .collect();
        let partition = self.partition;
        Box::pin(async move {
            let drained = tokio::time::timeout(msg.timeout, futures::future::join_all(drains))
                .await
                .is_ok();
            if !drained {
                warn!(
                    partition,
                    "drain timed out; running tasks are left to finish on their own"
                );
            }
            drained
        })
    }
}

impl Handler<StopActor> for PartitionExecutor {
    type Result = ();

    fn handle(&mut self, _: StopActor, ctx: &mut Context<Self>) {
        for (_, queue) in std::mem::take(&mut self.queues) {
            queue.executor.do_send(StopActor);
        }
        // Its deferred tasks stay in the schedule for the next tree, which loads them from the
        // low-water mark they pinned, or takes over the lists a mark named (those are kept).
        if let Some(tree) = self.tree.take() {
            if self.in_flight.named_a_list() {
                debug!(partition = self.partition, %tree,
                    "the tree's deferred-task lists kept for the next tree; their rows expire");
            } else {
                let lists = Arc::clone(&self.lists);
                actix::spawn(deferred::drop_lists(lists, self.partition, tree));
            }
        }
        ctx.stop();
    }
}
