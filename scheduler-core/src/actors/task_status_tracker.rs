//! TaskStatusTracker: the completion tracker of one partition. It owns no state; it answers
//! whether a task already finished, records outcomes and attempts in the store, and publishes a
//! completion event once an outcome is stored (when events are enabled).

use std::sync::Arc;

use actix::{Actor, Context, Handler, Message, ResponseFuture};
use scheduler_client::TaskKey;
use tracing::warn;

use super::StopActor;
use crate::events::EventPublisher;
use crate::store::{AttemptRecord, PartitionId, StatusRecord, StoreResult, TaskStore};

/// Reads and writes the status and attempt history of one partition's tasks.
pub struct TaskStatusTracker {
    partition: PartitionId,
    store: Arc<dyn TaskStore>,
    events: Option<EventPublisher>,
}

impl TaskStatusTracker {
    /// A tracker for `partition`.
    pub fn new(
        partition: PartitionId,
        store: Arc<dyn TaskStore>,
        events: Option<EventPublisher>,
    ) -> Self {
        TaskStatusTracker {
            partition,
            store,
            events,
        }
    }
}

impl Actor for TaskStatusTracker {
    type Context = Context<Self>;
}

/// Asks for a task's recorded final state (`None`: it has not finished).
#[derive(Debug, Message)]
#[rtype(result = "StoreResult<Option<StatusRecord>>")]
pub struct FetchTaskStatus(pub TaskKey);

/// Records a task's final state; the reply says whether it was stored.
#[derive(Debug, Message)]
#[rtype(result = "StoreResult<()>")]
pub struct MarkTaskFinished {
    /// The task.
    pub key: TaskKey,
    /// Its final state.
    pub record: StatusRecord,
}

/// Appends an attempt to a task's history (best effort: failures are logged).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RecordAttempt {
    /// The task.
    pub key: TaskKey,
    /// The attempt.
    pub attempt: AttemptRecord,
}

/// Deletes a finished task from the schedule (an optimisation: failures are logged).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RemoveTask(pub TaskKey);

impl Handler<FetchTaskStatus> for TaskStatusTracker {
    type Result = ResponseFuture<StoreResult<Option<StatusRecord>>>;

    fn handle(&mut self, msg: FetchTaskStatus, _: &mut Context<Self>) -> Self::Result {
        self.store.status(self.partition, msg.0)
    }
}

impl Handler<MarkTaskFinished> for TaskStatusTracker {
    type Result = ResponseFuture<StoreResult<()>>;

    fn handle(&mut self, msg: MarkTaskFinished, _: &mut Context<Self>) -> Self::Result {
        let write = self
            .store
            .record_status(self.partition, msg.key.clone(), msg.record.clone());
        let events = self.events.clone();
        Box::pin(async move {
            write.await?;
            // Only once the status is stored, so an event never announces an unrecorded outcome.
            if let Some(events) = events {
                events.task_finished(&msg.key, &msg.record);
            }
            Ok(())
        })
    }
}

impl Handler<RecordAttempt> for TaskStatusTracker {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: RecordAttempt, _: &mut Context<Self>) -> Self::Result {
        let partition = self.partition;
        let key = msg.key.to_string();
        let write = self.store.record_attempt(partition, msg.key, msg.attempt);
        Box::pin(async move {
            if let Err(e) = write.await {
                warn!(partition, task = %key, error = %e, "attempt history not recorded");
            }
        })
    }
}

impl Handler<RemoveTask> for TaskStatusTracker {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: RemoveTask, _: &mut Context<Self>) -> Self::Result {
        let partition = self.partition;
        let key = msg.0.to_string();
        let delete = self.store.remove_scheduled(partition, msg.0);
        Box::pin(async move {
            if let Err(e) = delete.await {
                warn!(partition, task = %key, error = %e, "finished task left in the schedule (it will be skipped when loaded)");
            }
        })
    }
}

impl Handler<StopActor> for TaskStatusTracker {
    type Result = ();

    fn handle(&mut self, _: StopActor, ctx: &mut Context<Self>) {
        actix::ActorContext::stop(ctx);
    }
}
