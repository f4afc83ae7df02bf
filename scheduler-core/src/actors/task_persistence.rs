//! TaskPersistence: the schedule of one partition in Cassandra. It writes polled tasks, loads
//! due and soon-due tasks on the ThroughputController's request, and keeps the read cursor: the
//! point up to which the schedule has been loaded. A task persisted behind the cursor would never
//! be loaded, so it is pushed straight to the PartitionScheduler.
//!
//! Pushes are bounded: tasks beyond `max_in_flight_tasks` stay in Cassandra and the cursor moves
//! back to the first of them, so loading brings them in as room frees up.
//!
//! Writes and loads are serialised (each waits for the previous to finish), so a task is either
//! behind the cursor when its write completes (pushed) or ahead of it (loaded later), never both
//! or neither.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AtomicResponse, Context, Handler, Message,
    Recipient, WrapFuture,
};
use chrono::{DateTime, Utc};
use scheduler_client::{Task, TaskKey};
use tracing::{debug, info, warn};

use super::partition_scheduler::{PartitionScheduler, ScheduleTasks, UnscheduleTasks};
use super::{PolledTasks, StopActor, TreeError, TreeResult};
use crate::clock::Clock;
use crate::executor::StopReason;
use crate::in_flight::InFlight;
use crate::metrics::{Metrics, ParkReason, Parked};
use crate::store::pages::{load_whole_ties, TieCursor};
use crate::store::{
    last_of_each_key, PartitionId, ReadCursor, ScheduleStore, StoreError, StoreResult, TaskStore,
    WRITE_CONCURRENCY,
};

/// To the ThroughputController: there is more to load than the loaded horizon suggests (this
/// actor moved its cursor back after pushing only part of a batch): load as soon as there is
/// room.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct LoadMore;

/// Write one polled batch of the partition; the reply comes once all of it is durable. Refused
/// once the tree winds down: the records are polled again by the partition's next tree.
#[derive(Debug, Message)]
#[rtype(result = "TreeResult<()>")]
pub struct PersistTasks(pub PolledTasks);

/// Load up to `limit` tasks due before `until`, from the read cursor on.
#[derive(Debug, Message)]
#[rtype(result = "StoreResult<TasksLoaded>")]
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
    store: Arc<dyn TaskStore>,
    scheduler: Addr<PartitionScheduler>,
    controller: Recipient<LoadMore>,
    in_flight: Arc<InFlight>,
    max_in_flight: usize,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    cursor: ReadCursor,
    /// Set while loading a group of ties too large for one page (the cursor is before it).
    ties: Option<TieCursor>,
    /// Where the tree's first load started: the cursor never moves back before it.
    start: DateTime<Utc>,
    persist_timeout: Duration,
    /// Raised when the tree winds down.
    stop: tokio::sync::watch::Receiver<Option<StopReason>>,
}

/// Where a partition's persistence sends tasks, and the limit on what it may hold in memory.
pub struct PersistenceLinks {
    /// Receives pushed and loaded tasks.
    pub scheduler: Addr<PartitionScheduler>,
    /// Told when the cursor moves back (there is more to load).
    pub controller: Recipient<LoadMore>,
    /// The partition's in-flight gauge; tasks sent to the scheduler are counted into it.
    pub in_flight: Arc<InFlight>,
    /// `max_in_flight_tasks`: pushes beyond it are left for loading.
    pub max_in_flight: usize,
    /// Where persisted counts and latencies go.
    pub metrics: Arc<Metrics>,
    /// Time of recorded cancellations.
    pub clock: Arc<dyn Clock>,
    /// The tree's stop signal: batches are refused once it is raised.
    pub stop: tokio::sync::watch::Receiver<Option<StopReason>>,
}

impl TaskPersistence {
    /// Persistence for `partition` whose first load starts at `load_from`.
    pub fn new(
        partition: PartitionId,
        store: Arc<dyn TaskStore>,
        links: PersistenceLinks,
        load_from: DateTime<Utc>,
        persist_timeout: Duration,
    ) -> Self {
        TaskPersistence {
            partition,
            store,
            scheduler: links.scheduler,
            controller: links.controller,
            in_flight: links.in_flight,
            max_in_flight: links.max_in_flight,
            metrics: links.metrics,
            clock: links.clock,
            cursor: ReadCursor::From(load_from),
            ties: None,
            start: load_from,
            persist_timeout,
            stop: links.stop,
        }
    }

    /// Whether loading has passed `key`: a task persisted there must be pushed.
    fn has_passed(&self, key: &TaskKey) -> bool {
        match &self.ties {
            Some(ties) => ties.is_past(key),
            None => self.cursor.has_passed(key),
        }
    }

    /// Sends tasks to the scheduler, counting them in flight.
    fn send_to_scheduler(&self, tasks: Vec<Task>) {
        if !tasks.is_empty() {
            self.scheduler
                .do_send(ScheduleTasks(self.in_flight.hold(tasks)));
        }
    }
}

impl Actor for TaskPersistence {
    type Context = Context<Self>;
}

impl Handler<PersistTasks> for TaskPersistence {
    type Result = AtomicResponse<Self, TreeResult<()>>;

    fn handle(&mut self, msg: PersistTasks, _: &mut Context<Self>) -> Self::Result {
        if self.stop.borrow().is_some() {
            return AtomicResponse::new(Box::pin(actix::fut::ready(Err(TreeError::Stopping {
                doing: "persisting a polled batch",
            }))));
        }
        let PersistTasks(PolledTasks { tasks, cancels }) = msg;
        // Of several records of one key in a batch, the last in partition order wins, in the
        // store and in memory alike.
        let tasks = last_of_each_key(tasks);
        let started = std::time::Instant::now();
        let partition = self.partition;
        let store = Arc::clone(&self.store);
        let metrics = Arc::clone(&self.metrics);
        let write = (!tasks.is_empty()).then(|| self.store.persist(partition, tasks.clone()));
        let cancelled_at = self.clock.now();
        let timeout = self.persist_timeout;
        let work = async move {
            let refused = match write {
                Some(write) => write.await?,
                None => Vec::new(),
            };
            let cancelled =
                apply_cancels(store, &metrics, partition, cancels, cancelled_at).await?;
            Ok((refused, cancelled))
        };
        let bounded = async move {
            tokio::time::timeout(timeout, work)
                .await
                .unwrap_or(Err(StoreError::Timeout {
                    operation: "persisting a polled batch",
                    after: timeout,
                }))
        };
        AtomicResponse::new(Box::pin(bounded.into_actor(self).map(
            move |result, act, _| {
                let (refused, cancelled) = result?;
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
                act.push(behind);
                if !cancelled.is_empty() {
                    // After the push above, so a task cancelled in its own batch is dropped too.
                    act.scheduler.do_send(UnscheduleTasks(cancelled));
                }
                Ok(())
            },
        )))
    }
}

/// Records the cancellation of each of `cancels` (unless it already finished) and takes it out
/// of the schedule; returns the keys cancelled. Applied `WRITE_CONCURRENCY` at a time, so a
/// large batch of cancels completes within the persist timeout.
async fn apply_cancels(
    store: Arc<dyn TaskStore>,
    metrics: &Metrics,
    partition: PartitionId,
    cancels: Vec<TaskKey>,
    at: DateTime<Utc>,
) -> StoreResult<Vec<TaskKey>> {
    futures::stream::iter(cancels)
        .map(|key| {
            let store = Arc::clone(&store);
            async move {
                match store.cancel(partition, key.clone(), at).await {
                    Ok(None) => {
                        metrics.cancelled(partition, &key);
                        if let Err(e) = store.remove_scheduled(partition, key.clone()).await {
                            debug!(partition, task = %key, error = %e, "cancelled task left in the schedule (it will be skipped)");
                        }
                        Ok(Some(key))
                    }
                    Ok(Some(existing)) => {
                        info!(partition, task = %key, status = existing.status.as_str(), "cancel ignored: the task already finished");
                        Ok(None)
                    }
                    Err(StoreError::Refused { reason, .. }) => {
                        let what = Parked::Cancellation(&key);
                        metrics.parked(partition, what, ParkReason::RefusedByStore, &reason);
                        Ok(None)
                    }
                    Err(e) => Err(e),
                }
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .try_filter_map(|cancelled| futures::future::ready(Ok(cancelled)))
        .try_collect()
        .await
}

impl TaskPersistence {
    /// Pushes tasks persisted behind the read cursor to the scheduler, as many as fit under
    /// `max_in_flight_tasks`; the cursor moves back to the first of the rest, so loading reads
    /// them once there is room. It never moves back before the tree's start (a far-past time
    /// from a foreign producer would otherwise make loading walk years of empty hour buckets):
    /// a task due before the tree started is pushed even beyond the limit.
    fn push(&mut self, behind: Vec<Task>) {
        let (mut behind, before_start): (Vec<Task>, Vec<Task>) = behind
            .into_iter()
            .partition(|t| t.scheduled_time >= self.start);
        if !before_start.is_empty() {
            warn!(
                partition = self.partition,
                count = before_start.len(),
                "tasks due before this partition's tree started: run at once, beyond the in-flight limit"
            );
        }
        let room = self.max_in_flight.saturating_sub(self.in_flight.current());
        if behind.len() > room {
            // In run order: what is left runs after what is pushed, ties included.
            behind.sort_by_cached_key(Task::run_order);
            let left = behind.split_off(room);
            let from = left[0]
                .scheduled_time
                .min(self.cursor.time())
                .max(self.start);
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
            pushed = behind.len() + before_start.len(),
            "tasks persisted"
        );
        behind.extend(before_start);
        self.send_to_scheduler(behind);
    }
}

impl Handler<LoadTasks> for TaskPersistence {
    type Result = AtomicResponse<Self, StoreResult<TasksLoaded>>;

    fn handle(&mut self, msg: LoadTasks, _: &mut Context<Self>) -> Self::Result {
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
        // Reserved while the load runs, so a read-back elsewhere in the tree cannot take it.
        let reserved = self.in_flight.reserve(limit);
        let load = load_whole_ties(
            Arc::clone(&self.store) as Arc<dyn ScheduleStore>,
            self.partition,
            self.cursor.clone(),
            self.ties.clone(),
            msg.until,
            limit,
        );
        AtomicResponse::new(Box::pin(load.into_actor(self).map(
            move |result, act, _| {
                drop(reserved);
                let page = result?;
                let (tasks, caught_up) = (page.tasks, page.next.is_none());
                let count = tasks.len();
                match page.next {
                    Some(next) => (act.cursor, act.ties) = (next.cursor, next.ties),
                    // Everything before `until` has been read.
                    None => {
                        act.cursor = ReadCursor::From(msg.until.max(act.cursor.time()));
                        act.ties = None;
                    }
                }
                debug!(partition = act.partition, count, caught_up, "tasks loaded");
                act.in_flight.mark_loaded();
                act.send_to_scheduler(tasks);
                Ok(TasksLoaded {
                    caught_up,
                    cursor_at: act.cursor.time(),
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
