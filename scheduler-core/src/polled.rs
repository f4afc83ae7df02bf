//! The small tables every node keeps current by polling (the suspensions, the per-key limit
//! overrides): read when the node starts serving a queue, then every [`POLL`] into a watch, so a
//! change takes effect on every node within a poll, without a rebalance.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::store::StoreResult;

/// How often a node reads them.
pub(crate) const POLL: Duration = Duration::from_secs(2);

/// Reads `what` with `read` every [`POLL`] into `sender` until every receiver is gone; a change
/// is logged with its `rows`; a failed read keeps the last known value (and is logged).
pub(crate) async fn poll<T, Fut>(
    what: &'static str,
    read: impl Fn() -> Fut,
    rows: impl Fn(&T) -> usize,
    sender: watch::Sender<Arc<T>>,
) where
    T: PartialEq,
    Fut: Future<Output = StoreResult<T>>,
{
    loop {
        tokio::select! {
            () = sender.closed() => return,
            () = tokio::time::sleep(POLL) => {}
        }
        match read().await {
            Ok(read) => {
                sender.send_if_modified(|known| {
                    if **known == read {
                        return false;
                    }
                    info!(rows = rows(&read), "{what} changed");
                    *known = Arc::new(read);
                    true
                });
            }
            Err(e) => warn!(error = %e, "{what} not read; the last known ones stay in force"),
        }
    }
}
