//! Dead letters attached to a task's life ([`crate::hooks`]): a task whose final status is
//! failed (retries exhausted) or dropped (invalid) becomes a dead letter. Its handler hears of
//! it once, then the letter is recorded, as owner, before the task's final status: a task with
//! a final status of failed or dropped always has its letter, until an operator purges it.

use std::sync::Arc;

use futures::future::BoxFuture;
use scheduler_client::Task;

use crate::call_pool::CallPool;
use crate::clock::Clock;
use crate::handler::OutputSlot;
use crate::hooks::{self, Halt, Steps, TaskHook};
use crate::metrics::Metrics;
use crate::store::{DeadLetter, DeadLetterStore, DeadReason, StatusRecord, TaskStatus};

/// The dead letters of a partition tree.
pub(crate) struct DeadLetterHook {
    /// The dead letters' table.
    pub(crate) store: Arc<dyn DeadLetterStore>,
    /// Whose handlers hear of their dead letters.
    pub(crate) pool: CallPool,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) metrics: Arc<Metrics>,
}

impl TaskHook for DeadLetterHook {
    fn at_final_record<'a>(
        &'a self,
        steps: &'a mut dyn Steps,
        task: &'a Task,
        record: &'a StatusRecord,
        _output: Option<&'a OutputSlot>,
    ) -> BoxFuture<'a, Result<(), Halt>> {
        Box::pin(async move {
            let reason = match record.status {
                TaskStatus::Failed => DeadReason::RetriesExhausted,
                TaskStatus::Dropped => DeadReason::Invalid,
                TaskStatus::Completed | TaskStatus::Cancelled => return Ok(()),
            };
            let error = record.last_error.clone().unwrap_or_default();
            let letter = DeadLetter {
                partition: steps.partition(),
                // (Where it was enqueued matters no more: a redrive enqueues it anew.)
                task: Task {
                    enqueue_offset: None,
                    ..task.clone()
                },
                attempts: steps.attempts(),
                last_error: error.clone(),
                reason,
                dead_at: self.clock.now(),
                redriven_at: None,
                redrives: 0,
            };
            steps.as_owner().await?;
            self.pool.dead_lettered(letter.clone()).await;
            let store = &self.store;
            hooks::write(steps, "dead-letter write", || {
                store.add_dead_letter(letter.clone())
            })
            .await?;
            let (partition, key, attempts) = (steps.partition(), steps.key(), steps.attempts());
            let metrics = &self.metrics;
            metrics.dead_lettered(partition, key, &task.task_type, reason, attempts, &error);
            Ok(())
        })
    }
}
