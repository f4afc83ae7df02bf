//! Suspensions reach every partition tree of a node through one watch: read when the node
//! starts serving a queue (so nothing suspended runs at start), then polled, so that a suspend
//! or a resume takes effect on every node within a poll without a rebalance.

use std::sync::Arc;

use futures::future::BoxFuture;
use scheduler_client::Task;
use tokio::sync::watch;
use tracing::debug;

use crate::hooks::TaskHook;
use crate::metrics::Metrics;
use crate::store::{PartitionId, StoreResult, SuspensionStore, SuspensionTarget, Suspensions};

/// The suspensions of `store` now, and a sender to keep them current with [`poll`].
pub(crate) async fn read(
    store: &dyn SuspensionStore,
) -> StoreResult<(
    watch::Sender<Arc<Suspensions>>,
    watch::Receiver<Arc<Suspensions>>,
)> {
    let now = Suspensions::new(store.suspensions().await?);
    Ok(watch::channel(Arc::new(now)))
}

/// Reads the suspensions every [`crate::polled::POLL`] into `sender` until every receiver is
/// gone; a failed read keeps the last known set (and is logged).
pub(crate) async fn poll(store: Arc<dyn SuspensionStore>, sender: watch::Sender<Arc<Suspensions>>) {
    let read = || {
        let store = Arc::clone(&store);
        async move { store.suspensions().await.map(Suspensions::new) }
    };
    let rows = |read: &Suspensions| read.all().count();
    crate::polled::poll("suspensions", read, rows, sender).await;
}

/// Suspensions attached to a task's life ([`crate::hooks`]): a suspended task (its orderingId,
/// type or group) waits like one without a handler (pending, no attempt used, holding nothing
/// back) until the node reads that it was resumed; a task waiting for its time or a slot when
/// it is suspended does not start.
pub(crate) struct SuspensionHook {
    /// The suspensions in force, as the node last read them.
    pub(crate) suspensions: watch::Receiver<Arc<Suspensions>>,
    pub(crate) metrics: Arc<Metrics>,
}

impl TaskHook for SuspensionHook {
    fn held(&self, partition: PartitionId, task: &Task) -> Option<BoxFuture<'static, bool>> {
        let suspension = self.suspensions.borrow().of(task).cloned()?;
        debug!(partition, task = %task.key(), suspended = %suspension.target,
            "suspended; waiting to be resumed");
        let waiting = self.metrics.suspended(partition);
        let (targets, mut suspensions) = (SuspensionTarget::all_of(task), self.suspensions.clone());
        Some(Box::pin(async move {
            let _waiting = waiting;
            let resumed = suspensions.wait_for(|now| now.holding(&targets).is_none());
            resumed.await.is_ok()
        }))
    }

    fn free_at_call(&self, task: &Task) -> Option<Box<dyn Fn() -> bool + Send>> {
        // (Its targets, not the task: the data, up to 512 KiB, is not copied on the hot path.)
        let (targets, suspensions) = (SuspensionTarget::all_of(task), self.suspensions.clone());
        Some(Box::new(move || {
            suspensions.borrow().holding(&targets).is_none()
        }))
    }
}
