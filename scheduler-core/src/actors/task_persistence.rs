//! TaskPersistence: the schedule of one partition in Cassandra. It writes polled tasks, loads
//! due and soon-due tasks on the ThroughputController's request, and keeps the read cursor: the
//! point up to which the schedule has been loaded. A task persisted behind the cursor would never
//! be loaded, so it is pushed straight to the PartitionScheduler.
//!
//! Writes and loads are serialised (each waits for the previous to finish), so a task is either
//! behind the cursor when its write completes (pushed) or ahead of it (loaded later), never both
//! or neither.

use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AtomicResponse, Context, Handler, Message,
    WrapFuture,
};
use chrono::{DateTime, Utc};
use scheduler_client::Task;
use tracing::debug;

use super::partition_scheduler::{PartitionScheduler, ScheduleTasks};
use super::StopActor;
use crate::store::{PartitionId, ReadCursor, StoreError, StoreResult, TaskStore};

/// Write these tasks to the schedule; the reply comes once they are durable.
#[derive(Debug, Message)]
#[rtype(result = "StoreResult<()>")]
pub struct PersistTasks(pub Vec<Task>);

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
    /// Tasks handed to the scheduler.
    pub count: usize,
    /// Whether everything before `until` has now been loaded.
    pub caught_up: bool,
    /// The time the read cursor has reached.
    pub checkpoint: DateTime<Utc>,
}

/// Writes and loads the schedule of one partition.
pub struct TaskPersistence {
    partition: PartitionId,
    store: Arc<dyn TaskStore>,
    scheduler: Addr<PartitionScheduler>,
    cursor: ReadCursor,
    persist_timeout: Duration,
}

impl TaskPersistence {
    /// Persistence for `partition` whose first load starts at `load_from`.
    pub fn new(
        partition: PartitionId,
        store: Arc<dyn TaskStore>,
        scheduler: Addr<PartitionScheduler>,
        load_from: DateTime<Utc>,
        persist_timeout: Duration,
    ) -> Self {
        TaskPersistence {
            partition,
            store,
            scheduler,
            cursor: ReadCursor::From(load_from),
            persist_timeout,
        }
    }
}

impl Actor for TaskPersistence {
    type Context = Context<Self>;
}

impl Handler<PersistTasks> for TaskPersistence {
    type Result = AtomicResponse<Self, StoreResult<()>>;

    fn handle(&mut self, msg: PersistTasks, _: &mut Context<Self>) -> Self::Result {
        let tasks = msg.0;
        let write = self.store.persist(self.partition, tasks.clone());
        let timeout = self.persist_timeout;
        let written = async move {
            tokio::time::timeout(timeout, write)
                .await
                .unwrap_or_else(|_| {
                    Err(StoreError::Query {
                        operation: "task insert",
                        reason: format!("timed out after {timeout:?}"),
                    })
                })
        };
        AtomicResponse::new(Box::pin(written.into_actor(self).map(
            move |result, act, _| {
                result?;
                let behind: Vec<Task> = tasks
                    .into_iter()
                    .filter(|t| act.cursor.has_passed(&t.key()))
                    .collect();
                debug!(
                    partition = act.partition,
                    pushed = behind.len(),
                    "tasks persisted"
                );
                if !behind.is_empty() {
                    act.scheduler.do_send(ScheduleTasks(behind));
                }
                Ok(())
            },
        )))
    }
}

impl Handler<LoadTasks> for TaskPersistence {
    type Result = AtomicResponse<Self, StoreResult<TasksLoaded>>;

    fn handle(&mut self, msg: LoadTasks, _: &mut Context<Self>) -> Self::Result {
        let load = self
            .store
            .load(self.partition, self.cursor.clone(), msg.until, msg.limit);
        AtomicResponse::new(Box::pin(load.into_actor(self).map(
            move |result, act, _| {
                let tasks = result?;
                let count = tasks.len();
                let caught_up = count < msg.limit;
                act.cursor = match (caught_up, tasks.last()) {
                    (false, Some(last)) => ReadCursor::After(last.key()),
                    // Everything before `until` has been read.
                    _ => ReadCursor::From(msg.until.max(act.cursor.time())),
                };
                debug!(partition = act.partition, count, caught_up, "tasks loaded");
                if count > 0 {
                    act.scheduler.do_send(ScheduleTasks(tasks));
                }
                Ok(TasksLoaded {
                    count,
                    caught_up,
                    checkpoint: act.cursor.time(),
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
