//! Per-key limits (issue 33): a task may carry a limit key (`Task::limit_key`, e.g. a tenant or
//! an upstream API), independent of its orderingId, and a queue or a task type may allow at most
//! `key_concurrency` calls at once per key (`[scheduling] key_concurrency`,
//! `[scheduling.task_types.<type>] key_concurrency`).
//!
//! It attaches to the executor at its [`CallGate`] hook: a due task whose key is at its limit
//! waits at the gate, pending, holding no executor slot and using no attempt, and passes as soon
//! as a call of its key returns; the pass is held until its own call returns. A task of one
//! orderingId waits there at most, so the orderingId's order holds. A type's own limit counts
//! the calls of that type per key; the queue's counts the calls of every type without one of
//! its own per key, together.
//!
//! The count is this node's: one node runs at most the limit per key at once. Limits across
//! the cluster (a key's calls on every node together), rates per key and fair shares between
//! keys come next.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::Task;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::hooks::{CallGate, GatePass};
use crate::metrics::Metrics;
use crate::settings::SchedulingSettings;

/// Who a limit counts together: the calls of one task type (its own limit) or of every type
/// using the queue's limit, of one key.
type Scope = (Option<String>, String);

/// The gate of `key_concurrency`: one semaphore per key in use, dropped when no call of the key
/// runs or waits.
pub struct KeyConcurrency {
    /// The queue's limit, for types without their own.
    queue: Option<usize>,
    /// Types with a limit of their own.
    types: HashMap<String, usize>,
    keys: Arc<Mutex<HashMap<Scope, Arc<Semaphore>>>>,
    /// Counts the tasks waiting here (`scheduler_tasks_held_by_limit`).
    metrics: Arc<Metrics>,
}

impl KeyConcurrency {
    /// The gate of `settings`' limits, if any is set, counting the tasks it holds in `metrics`.
    pub fn from_settings(
        settings: &SchedulingSettings,
        metrics: Arc<Metrics>,
    ) -> Option<KeyConcurrency> {
        let types: HashMap<String, usize> = (settings.task_types.iter())
            .filter_map(|(task_type, limits)| Some((task_type.clone(), limits.key_concurrency?)))
            .collect();
        if settings.key_concurrency.is_none() && types.is_empty() {
            return None;
        }
        Some(KeyConcurrency {
            queue: settings.key_concurrency,
            types,
            keys: Arc::default(),
            metrics,
        })
    }

    /// The scope and limit `task` counts under, if any.
    fn limit_of(&self, task: &Task) -> Option<(Scope, usize)> {
        let key = task.limit_key.clone()?;
        match self.types.get(&task.task_type) {
            Some(&limit) => Some(((Some(task.task_type.clone()), key), limit)),
            None => Some(((None, key), self.queue?)),
        }
    }

    /// Calls of `key` (with the queue's limit) or of `task_type` and `key` running or waiting
    /// here now (for tests and the admin API).
    #[cfg(test)]
    fn in_use(&self, task_type: Option<&str>, key: &str) -> bool {
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
        let (scope, limit) = self.limit_of(task)?;
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

#[cfg(test)]
mod tests;
