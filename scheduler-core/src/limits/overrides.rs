//! Per-key overrides set at run time (`key_limits`, the admin API, `scheduler limits`), read by
//! every node when it starts serving a queue and polled like the suspensions, so a limit set,
//! changed or removed takes effect on every node within a poll, without a restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::store::{KeyLimit, KeyLimitStore, LimitValues, StoreResult};

/// How often a node reads the overrides.
pub(crate) const POLL: Duration = Duration::from_secs(2);

/// The overrides in force, by task type (`None`: the queue's) and limit key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyOverrides(BTreeMap<(Option<String>, String), LimitValues>);

impl KeyOverrides {
    /// The overrides of `rows`.
    pub fn new(rows: Vec<KeyLimit>) -> KeyOverrides {
        KeyOverrides(
            (rows.into_iter())
                .map(|row| ((row.task_type, row.limit_key), row.values))
                .collect(),
        )
    }

    /// The override of `key` for `task_type` (`None`: the queue's), if any.
    pub fn get(&self, task_type: Option<&str>, key: &str) -> Option<&LimitValues> {
        if self.0.is_empty() {
            return None;
        }
        self.0.get(&(task_type.map(String::from), key.to_string()))
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// No overrides, ever (the testing kit's and the tests' default).
pub fn none() -> watch::Receiver<Arc<KeyOverrides>> {
    watch::channel(Arc::default()).1
}

/// The overrides of `store` now, and a sender to keep them current with [`poll`].
pub(crate) async fn read(
    store: &dyn KeyLimitStore,
) -> StoreResult<(
    watch::Sender<Arc<KeyOverrides>>,
    watch::Receiver<Arc<KeyOverrides>>,
)> {
    let now = KeyOverrides::new(store.key_limits().await?);
    Ok(watch::channel(Arc::new(now)))
}

/// Reads the overrides every [`POLL`] into `sender` until every receiver is gone; a failed read
/// keeps the last known ones (and is logged).
pub(crate) async fn poll(store: Arc<dyn KeyLimitStore>, sender: watch::Sender<Arc<KeyOverrides>>) {
    loop {
        tokio::select! {
            () = sender.closed() => return,
            () = tokio::time::sleep(POLL) => {}
        }
        match store.key_limits().await {
            Ok(read) => {
                let read = KeyOverrides::new(read);
                sender.send_if_modified(|known| {
                    if **known == read {
                        return false;
                    }
                    info!(overrides = read.len(), "per-key limit overrides changed");
                    *known = Arc::new(read);
                    true
                });
            }
            Err(e) => {
                warn!(error = %e, "per-key limit overrides not read; the last known ones stay in force")
            }
        }
    }
}
