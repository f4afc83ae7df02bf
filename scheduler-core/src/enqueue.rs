//! Tasks the engine enqueues itself (a group's join): produced to the scheduler's topic like any
//! producer's task, so that each reaches the owner of its orderingId's partition and is applied
//! there in partition order (a join's `IfAbsent` identity makes every trigger after the first a
//! no-op).

use std::sync::Arc;

use futures::future::BoxFuture;
#[cfg(test)]
use futures::FutureExt;
use scheduler_client::Task;

/// Enqueues a task on the scheduler's topic, resolving once it is durable there (a node's:
/// `node::kafka::KafkaEnqueuer`, the client's producer; the testing kit's: its in-memory topic).
pub trait Enqueuer: Send + Sync + 'static {
    /// Enqueues `task`.
    fn enqueue(&self, task: Task) -> BoxFuture<'static, Result<(), EnqueueError>>;
}

/// A task could not be enqueued (the broker did not acknowledge it); the caller retries.
#[derive(Debug, Clone, thiserror::Error)]
#[error("enqueueing {task} failed")]
pub struct EnqueueError {
    /// The task.
    pub task: String,
    /// The producer's error.
    #[source]
    pub source: Arc<scheduler_client::ScheduleError>,
}

/// Keeps what is enqueued for a test (the actor tests and the simulation deliver it to the
/// partition's log themselves).
#[cfg(test)]
#[derive(Clone, Default)]
pub struct Outbox(Arc<std::sync::Mutex<Vec<Task>>>);

#[cfg(test)]
impl Outbox {
    /// Everything enqueued since the last call, in order.
    pub fn take(&self) -> Vec<Task> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

#[cfg(test)]
impl Enqueuer for Outbox {
    fn enqueue(&self, task: Task) -> BoxFuture<'static, Result<(), EnqueueError>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(task);
        futures::future::ready(Ok(())).boxed()
    }
}
