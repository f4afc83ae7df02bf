//! Suspensions reach every partition tree of a node through one watch: read when the node
//! starts serving a queue (so nothing suspended runs at start), then polled, so that a suspend
//! or a resume takes effect on every node within a poll without a rebalance.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::store::{StoreResult, SuspensionStore, Suspensions};

/// How often a node reads the suspensions.
pub(crate) const POLL: Duration = Duration::from_secs(2);

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

/// Reads the suspensions every [`POLL`] into `sender` until every receiver is gone; a failed
/// read keeps the last known set (and is logged).
pub(crate) async fn poll(store: Arc<dyn SuspensionStore>, sender: watch::Sender<Arc<Suspensions>>) {
    loop {
        tokio::select! {
            () = sender.closed() => return,
            () = tokio::time::sleep(POLL) => {}
        }
        match store.suspensions().await {
            Ok(read) => {
                let read = Suspensions::new(read);
                sender.send_if_modified(|known| {
                    if **known == read {
                        return false;
                    }
                    let count = read.all().count();
                    info!(suspensions = count, "suspensions changed");
                    *known = Arc::new(read);
                    true
                });
            }
            Err(e) => warn!(error = %e, "suspensions not read; the last known ones stay in force"),
        }
    }
}
