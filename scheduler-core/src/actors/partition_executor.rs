//! PartitionExecutor: routes each due task of a partition to the OrderingExecutor of its
//! orderingId (creating it on first use, stopping it when its queue empties). A task counts in
//! the partition's in-flight gauge until it is done with (a [`HeldTask`]); this actor tells the
//! ThroughputController each time one is.
//!
//! One orderingId holds at most a few tasks in memory (`max_queued_per_ordering`, at most a
//! quarter of `max_in_flight_tasks`): a due task beyond that is **deferred**, dropped from
//! memory and left in Cassandra, so an orderingId stuck on a failing head cannot fill the
//! partition's in-flight budget and stall every other orderingId. Once its queue is half empty
//! its deferred tasks are read back from the schedule, in run order (time, then enqueue order).
//! While an orderingId has deferred tasks, every later task of it is deferred too, so its order
//! holds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, Recipient,
    ResponseFuture, WrapFuture,
};
use chrono::{DateTime, TimeDelta, Utc};
use scheduler_client::{RunOrder, Task};
use tracing::{debug, warn};

use super::ordering_executor::{
    DrainOrdering, ExecuteOrderingTask, OrderingExecutor, OrderingTaskDone,
};
use super::task_lifecycle::ExecutionLinks;
use super::{PartitionDeps, StopActor};
use crate::in_flight::{HeldTask, InFlight, Pin};
use crate::store::{PartitionId, ReadCursor, ScheduleStore, StoreResult};

/// A task that is due, from the PartitionScheduler.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ExecutePartitionTask(pub HeldTask);

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

/// Wait before reading deferred tasks back again after a failed read, or while the partition
/// has no room.
const READ_BACK_RETRY: Duration = Duration::from_secs(1);

struct OrderingQueue {
    executor: Addr<OrderingExecutor>,
    outstanding: usize,
}

/// The due tasks of one orderingId left in Cassandra for want of room.
struct Deferred {
    /// The earliest of them in run order: reading back starts there.
    from: RunOrder,
    /// Pins `from`'s time: the partition's low-water mark stays at or before it.
    pin: Pin,
    /// A read-back is under way.
    reading: bool,
    /// The earliest task deferred while a read-back was under way (it may have missed it).
    missed: Option<RunOrder>,
}

/// Executes the due tasks of one partition.
pub struct PartitionExecutor {
    partition: PartitionId,
    deps: PartitionDeps,
    links: ExecutionLinks,
    capacity_listener: Recipient<CapacityFreed>,
    queues: BTreeMap<String, OrderingQueue>,
    deferred: BTreeMap<String, Deferred>,
    in_flight: Arc<InFlight>,
    draining: bool,
}

impl PartitionExecutor {
    /// An executor for `partition`; whenever a task is done with it tells `capacity_listener`.
    /// Deferred tasks read back are counted in `in_flight`.
    pub fn new(
        partition: PartitionId,
        deps: PartitionDeps,
        links: ExecutionLinks,
        capacity_listener: Recipient<CapacityFreed>,
        in_flight: Arc<InFlight>,
    ) -> Self {
        PartitionExecutor {
            partition,
            deps,
            links,
            capacity_listener,
            queues: BTreeMap::new(),
            deferred: BTreeMap::new(),
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
    /// orderingId.
    fn defer(&mut self, task: HeldTask) {
        let key = task.run_order();
        match self.deferred.get_mut(&task.ordering_id) {
            Some(deferred) => {
                if deferred.reading && deferred.missed.as_ref().is_none_or(|m| key < *m) {
                    deferred.missed = Some(key.clone());
                }
                if key < deferred.from {
                    deferred.pin = self.in_flight.pin(key.scheduled_time);
                    deferred.from = key;
                }
            }
            None => {
                debug!(partition = self.partition, ordering_id = %task.ordering_id,
                    "orderingId holds its share of memory: later tasks wait in Cassandra");
                self.deferred.insert(
                    task.ordering_id.clone(),
                    Deferred {
                        pin: self.in_flight.pin(key.scheduled_time),
                        from: key,
                        reading: false,
                        missed: None,
                    },
                );
            }
        }
        drop(task);
        self.capacity_listener.do_send(CapacityFreed);
    }

    /// Reads back `ordering_id`'s deferred tasks once its queue is half empty (until then, a
    /// task's end calls this again).
    fn read_back_if_half_empty(&mut self, ordering_id: String, ctx: &mut Context<Self>) {
        let outstanding = self.queues.get(&ordering_id).map_or(0, |q| q.outstanding);
        if outstanding <= self.ordering_bound() / 2 {
            self.read_back(ordering_id, ctx);
        }
    }

    /// Reads back up to the free room of `ordering_id`'s deferred tasks that are due.
    fn read_back(&mut self, ordering_id: String, ctx: &mut Context<Self>) {
        // Within the orderingId's share and the partition's in-flight budget.
        let partition_room = self
            .deps
            .settings
            .max_in_flight_tasks
            .saturating_sub(self.in_flight.current());
        let room = self
            .ordering_bound()
            .saturating_sub(self.queues.get(&ordering_id).map_or(0, |q| q.outstanding))
            .min(partition_room);
        let Some(deferred) = self.deferred.get_mut(&ordering_id) else {
            return;
        };
        if deferred.reading {
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
        deferred.reading = true;
        deferred.missed = None;
        let lead =
            TimeDelta::from_std(self.deps.settings.dispatch_lead).unwrap_or(TimeDelta::zero());
        // Reserved now, so loads and pushes meanwhile cannot take the room.
        let reserved = self.in_flight.reserve(room);
        let read = load_ordering(
            Arc::clone(&self.deps.store) as Arc<dyn ScheduleStore>,
            self.partition,
            ordering_id.clone(),
            deferred.from.clone(),
            // Deferred tasks were dispatched up to `dispatch_lead` before their time.
            self.deps.clock.now() + lead,
            room,
            self.deps.settings.fetch_batch_size,
        );
        ctx.spawn(read.into_actor(self).map(move |result, act, ctx| {
            let Some(deferred) = act.deferred.get_mut(&ordering_id) else {
                return;
            };
            deferred.reading = false;
            let tasks = match result {
                Ok(tasks) => tasks,
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
            let next = if tasks.len() < room {
                missed
            } else {
                // Right after the last read: more may follow.
                let after_last = tasks.last().map(|t| t.run_order().successor());
                after_last.into_iter().chain(missed).min()
            };
            // The reservation becomes the tasks read, pinned before the deferred pin moves
            // past them.
            drop(reserved);
            let held = act.in_flight.hold(tasks);
            match next {
                Some(from) => {
                    deferred.pin = act.in_flight.pin(from.scheduled_time);
                    deferred.from = from;
                }
                None => {
                    act.deferred.remove(&ordering_id);
                }
            }
            if act.draining {
                return;
            }
            for task in held {
                act.enqueue(task, ctx);
            }
            // Tasks deferred during the read, or more after it, with no task of the
            // orderingId left whose end would read them back: read on now.
            if act.deferred.contains_key(&ordering_id) {
                act.read_back_if_half_empty(ordering_id, ctx);
            }
        }));
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
        queue.executor.do_send(ExecuteOrderingTask(task));
    }
}

impl Actor for PartitionExecutor {
    type Context = Context<Self>;
}

impl Handler<ExecutePartitionTask> for PartitionExecutor {
    type Result = ();

    fn handle(&mut self, msg: ExecutePartitionTask, ctx: &mut Context<Self>) {
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
        if behind_deferred || full {
            let ordering_id = task.ordering_id.clone();
            self.defer(task);
            self.read_back_if_half_empty(ordering_id, ctx);
            return;
        }
        self.enqueue(task, ctx);
    }
}

impl Handler<OrderingTaskDone> for PartitionExecutor {
    type Result = ();

    fn handle(&mut self, msg: OrderingTaskDone, ctx: &mut Context<Self>) {
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

/// Up to `limit` tasks of `ordering_id` in `partition`'s schedule, in run order from `from`
/// (inclusive) to `until` (inclusive). The schedule is read in pages of `page` rows (key order)
/// and filtered; reading goes on past the time of the `limit`-th task found, because its ties
/// may run before it.
async fn load_ordering(
    store: Arc<dyn ScheduleStore>,
    partition: PartitionId,
    ordering_id: String,
    from: RunOrder,
    until: DateTime<Utc>,
    limit: usize,
    page: usize,
) -> StoreResult<Vec<Task>> {
    let until = until + TimeDelta::milliseconds(1);
    let mut cursor = ReadCursor::From(from.scheduled_time);
    let mut found: Vec<Task> = Vec::new();
    loop {
        let rows = store.load(partition, cursor, until, page.max(1)).await?;
        let last = rows.last().map(Task::key);
        let full_page = rows.len() >= page.max(1);
        found.extend(
            rows.into_iter()
                .filter(|t| t.ordering_id == ordering_id && t.run_order() >= from),
        );
        // Found in time order: the limit-th's ties end once a row is later than it.
        let past_ties = |last_time| {
            found
                .get(limit.saturating_sub(1))
                .is_some_and(|t| t.scheduled_time < last_time)
        };
        match last {
            Some(last) if full_page && !past_ties(last.scheduled_time) => {
                cursor = ReadCursor::After(last)
            }
            _ => break,
        }
    }
    found.sort_by_cached_key(Task::run_order);
    found.truncate(limit);
    Ok(found)
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
        ctx.stop();
    }
}
