//! `key_concurrency`: at most that many calls at once per limit key (see the module above).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::Task;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Scope, Scoped};
use crate::hooks::{CallGate, GatePass};
use crate::metrics::Metrics;
use crate::settings::SchedulingSettings;

/// The gate of `key_concurrency`: one semaphore per key in use, dropped when no call of the key
/// runs or waits.
pub struct KeyConcurrency {
    limits: Scoped<usize>,
    keys: Arc<Mutex<HashMap<Scope, Arc<Semaphore>>>>,
    /// Counts the tasks waiting here (`scheduler_tasks_held_by_limit`).
    pub(super) metrics: Arc<Metrics>,
}

impl KeyConcurrency {
    /// The gate of `settings`' `key_concurrency`, if any is set, counting the tasks it holds
    /// in `metrics`.
    pub fn from_settings(
        settings: &SchedulingSettings,
        metrics: Arc<Metrics>,
    ) -> Option<KeyConcurrency> {
        let limits = Scoped::from_settings(settings, |s| s.key_concurrency, |t| t.key_concurrency)?;
        Some(KeyConcurrency {
            limits,
            keys: Arc::default(),
            metrics,
        })
    }

    /// Calls of `key` (with the queue's limit) or of `task_type` and `key` running or waiting
    /// here now (for tests and the admin API).
    #[cfg(test)]
    pub(super) fn in_use(&self, task_type: Option<&str>, key: &str) -> bool {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.contains_key(&(task_type.map(String::from), key.to_string()))
    }
}

/// A task's use of its key's semaphore, waiting or holding a permit: the semaphore is forgotten
/// when its last user goes, whether it passed or stopped waiting.
struct KeyUse {
    semaphore: Option<Arc<Semaphore>>,
    scope: Scope,
    keys: Arc<Mutex<HashMap<Scope, Arc<Semaphore>>>>,
}

impl Drop for KeyUse {
    fn drop(&mut self) {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        // Let go under the lock: a task entering meanwhile finds the key's semaphore, or none
        // and makes a new one, never one about to be forgotten.
        drop(self.semaphore.take());
        let unused = (keys.get(&self.scope)).is_some_and(|s| Arc::strong_count(s) == 1);
        if unused {
            keys.remove(&self.scope);
        }
    }
}

/// A call's permit of its key (dropped first), then its use of the key's semaphore.
struct KeyPermit {
    _permit: Option<OwnedSemaphorePermit>,
    _use: KeyUse,
}

impl CallGate for KeyConcurrency {
    fn enter(&self, task: &Task) -> Option<BoxFuture<'static, GatePass>> {
        let (scope, limit) = self.limits.of(task)?;
        let semaphore = {
            let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(
                keys.entry(scope.clone())
                    .or_insert_with(|| Arc::new(Semaphore::new(limit))),
            )
        };
        // A task that has to wait is counted as held while it does.
        let held = (semaphore.available_permits() == 0)
            .then(|| self.metrics.held_by_limit(&task.task_type));
        let key_use = KeyUse {
            semaphore: Some(semaphore),
            scope,
            keys: Arc::clone(&self.keys),
        };
        Some(
            async move {
                // (Only `key_use` is captured: dropped unpolled, it alone holds the semaphore.)
                let semaphore = key_use.semaphore.clone();
                // The semaphore is never closed: `acquire_owned` fails only on a closed one.
                let permit = match semaphore {
                    Some(semaphore) => semaphore.acquire_owned().await.ok(),
                    None => None,
                };
                drop(held);
                GatePass::new(KeyPermit {
                    _permit: permit,
                    _use: key_use,
                })
            }
            .boxed(),
        )
    }
}
