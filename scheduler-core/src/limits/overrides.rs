//! Per-key overrides set at run time (`key_limits`, the admin API, `scheduler limits`), read by
//! every node when it starts serving a queue and polled like the suspensions (`crate::polled`),
//! so a limit set, changed or removed takes effect on every node within a poll, without a
//! restart.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use crate::store::{KeyLimit, KeyLimitStore, LimitValues, StoreResult};

/// The overrides in force, by limit key, then task type (`None`: the queue's). Looked up by
/// borrowed names on every keyed task's way to its call, so nothing is allocated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyOverrides(BTreeMap<String, Vec<(Option<String>, LimitValues)>>);

impl KeyOverrides {
    /// The overrides of `rows`.
    pub fn new(rows: Vec<KeyLimit>) -> KeyOverrides {
        let mut by_key: BTreeMap<String, Vec<(Option<String>, LimitValues)>> = BTreeMap::new();
        for row in rows {
            let of_key = by_key.entry(row.limit_key).or_default();
            of_key.push((row.task_type, row.values));
        }
        KeyOverrides(by_key)
    }

    /// The override of `key` for `task_type` (`None`: the queue's), if any.
    pub fn get(&self, task_type: Option<&str>, key: &str) -> Option<&LimitValues> {
        let of_key = self.0.get(key)?;
        (of_key.iter())
            .find(|(of_type, _)| of_type.as_deref() == task_type)
            .map(|(_, values)| values)
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.values().map(Vec::len).sum()
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

/// Reads the overrides every [`crate::polled::POLL`] into `sender` until every receiver is
/// gone; a failed read keeps the last known ones (and is logged).
pub(crate) async fn poll(store: Arc<dyn KeyLimitStore>, sender: watch::Sender<Arc<KeyOverrides>>) {
    let read = || {
        let store = Arc::clone(&store);
        async move { store.key_limits().await.map(KeyOverrides::new) }
    };
    crate::polled::poll("per-key limit overrides", read, KeyOverrides::len, sender).await;
}
