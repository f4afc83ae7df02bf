//! The user's side of execution: the [`TaskExecutor`] trait a service implements, the
//! [`TaskError`] it returns, and the bounded pool that runs it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::Task;
use tokio::sync::Semaphore;
use tracing::Instrument;

/// Runs tasks. Implement it with `async fn execute(&self, task: &Task) -> Result<(), TaskError>`.
///
/// Execution is at-least-once: a task can run again after a crash or a rebalance, so `execute`
/// must be idempotent. It is called for one task of an `orderingId` at a time.
pub trait TaskExecutor: Send + Sync + 'static {
    /// Runs `task`. An error says whether to retry it (after backoff) or give up on it.
    fn execute(&self, task: &Task) -> impl Future<Output = Result<(), TaskError>> + Send;
}

/// Why an execution failed, and whether it is worth retrying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// A transient failure: the task is retried after backoff, up to the retry limit.
    #[error("retryable: {0}")]
    Retry(String),
    /// A permanent failure: the task is recorded as dropped and not run again.
    #[error("gave up: {0}")]
    GiveUp(String),
}

impl TaskError {
    /// A transient failure.
    pub fn retry(reason: impl Into<String>) -> Self {
        TaskError::Retry(reason.into())
    }

    /// A permanent failure.
    pub fn give_up(reason: impl Into<String>) -> Self {
        TaskError::GiveUp(reason.into())
    }
}

/// Object-safe form of [`TaskExecutor`], so the engine can hold any executor behind an `Arc`.
trait DynTaskExecutor: Send + Sync + 'static {
    fn execute_boxed(&self, task: Task) -> BoxFuture<'_, Result<(), TaskError>>;
}

impl<E: TaskExecutor> DynTaskExecutor for E {
    fn execute_boxed(&self, task: Task) -> BoxFuture<'_, Result<(), TaskError>> {
        async move { self.execute(&task).await }.boxed()
    }
}

/// Runs the user's executor on a tokio runtime separate from the actors, at most `concurrency`
/// calls at once, each cut off after `timeout`. A panic or a timeout is a retryable failure.
#[derive(Clone)]
pub struct ExecutionPool {
    runtime: tokio::runtime::Handle,
    permits: Arc<Semaphore>,
    executor: Arc<dyn DynTaskExecutor>,
    timeout: Duration,
}

impl ExecutionPool {
    /// A pool running `executor` on `runtime`.
    pub fn new<E: TaskExecutor>(
        executor: E,
        runtime: tokio::runtime::Handle,
        concurrency: usize,
        timeout: Duration,
    ) -> Self {
        ExecutionPool {
            runtime,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            executor: Arc::new(executor),
            timeout,
        }
    }

    /// Runs `task` when a slot is free, inside `span` (so the executor's own logs carry the
    /// task's identity); resolves with the executor's result.
    pub fn run(
        &self,
        task: Task,
        span: tracing::Span,
    ) -> impl Future<Output = Result<(), TaskError>> + 'static {
        let permits = Arc::clone(&self.permits);
        let executor = Arc::clone(&self.executor);
        let timeout = self.timeout;
        let handle = self.runtime.spawn(async move {
            let _slot = permits.acquire_owned().await;
            match tokio::time::timeout(timeout, executor.execute_boxed(task).instrument(span)).await
            {
                Ok(result) => result,
                Err(_) => Err(TaskError::retry(format!("timed out after {timeout:?}"))),
            }
        });
        async move {
            match handle.await {
                Ok(result) => result,
                Err(e) if e.is_panic() => Err(TaskError::retry("the executor panicked")),
                Err(e) => Err(TaskError::retry(format!(
                    "the execution was cancelled: {e}"
                ))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Probe {
        running: AtomicUsize,
        peak: AtomicUsize,
    }

    impl TaskExecutor for Arc<Probe> {
        async fn execute(&self, task: &Task) -> Result<(), TaskError> {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            match task.ordering_id.as_str() {
                "panic" => panic!("executor bug"),
                "hang" => std::future::pending().await,
                "invalid" => Err(TaskError::give_up("invalid")),
                _ => Ok(()),
            }
        }
    }

    fn task(ordering_id: &str) -> Task {
        Task::new(ordering_id, Utc::now(), "u", Default::default())
    }

    #[tokio::test(start_paused = true)]
    async fn bounds_concurrency_and_turns_panics_and_hangs_into_retries() {
        let probe = Arc::new(Probe {
            running: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        });
        let pool = ExecutionPool::new(
            Arc::clone(&probe),
            tokio::runtime::Handle::current(),
            3,
            Duration::from_secs(5),
        );
        let results =
            futures::future::join_all((0..10).map(|_| pool.run(task("ok"), tracing::Span::none())))
                .await;
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(probe.peak.load(Ordering::SeqCst), 3);

        assert_eq!(
            pool.run(task("panic"), tracing::Span::none()).await,
            Err(TaskError::retry("the executor panicked"))
        );
        assert!(
            matches!(pool.run(task("hang"), tracing::Span::none()).await, Err(TaskError::Retry(r)) if r.starts_with("timed out"))
        );
        assert_eq!(
            pool.run(task("invalid"), tracing::Span::none()).await,
            Err(TaskError::give_up("invalid"))
        );
    }
}
