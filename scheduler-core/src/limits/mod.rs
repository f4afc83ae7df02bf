//! Per-key limits (issue 33): a task may carry a limit key (`Task::limit_key`, e.g. a tenant or
//! an upstream API), independent of its orderingId, and a queue or a task type may allow at most
//! `key_concurrency` calls at once per key and at most `key_rate` starts a second per key, in
//! bursts of `key_burst` (`[scheduling]`, a queue's, `[scheduling.task_types.<type>]`).
//!
//! They attach to the executor at its [`CallGate`](crate::hooks::CallGate) hook, concurrency
//! first: a due task whose key is at a limit waits at the gate, pending, holding no executor slot
//! and using no attempt, and passes as soon as the limit allows; a concurrency pass is held until
//! its own call returns. A task of one orderingId waits there at most, so the orderingId's order
//! holds. A type's own limit counts that type's tasks per key; the queue's counts the tasks of
//! every type without one of its own per key, together.
//!
//! `key_concurrency` holds across the cluster: each node leases permits of a key from the store
//! while its tasks of the key need them (`permits`: what it guarantees when a node dies or is
//! cut off, and what it costs); so does `key_rate`, each node starting a key's tasks at its share
//! of the key's rate, leased the same way (`rate`).
//!
//! An operator may override them per key at run time (`overrides`): every node reads the
//! overrides every 2 s, and the next task of the key counts under the new limit.

use std::collections::HashMap;
use std::sync::Arc;

use scheduler_client::Task;

use crate::clock::Clock;
use crate::hooks::CallGate;
use crate::metrics::Metrics;
use crate::settings::{SchedulingSettings, TypeLimits};
use tokio::sync::watch;

use crate::store::{LimitValues, PermitStore};

mod concurrency;
mod overrides;
mod permits;
mod rate;

pub use concurrency::KeyConcurrency;
pub(crate) use overrides::none;
pub use overrides::KeyOverrides;
#[cfg(feature = "node")]
pub(crate) use overrides::{poll, read};
pub use rate::KeyRate;

/// Who a limit counts together: the tasks of one task type (its own limit) or of every type
/// using the queue's limit, of one key.
type Scope = (Option<String>, String);

/// A limit of the queue's, and the types' own, from the settings.
#[derive(Debug, Clone)]
struct Scoped<T> {
    /// The queue's limit, for types without their own.
    queue: Option<T>,
    /// Types with a limit of their own.
    types: HashMap<String, T>,
}

impl<T: Clone> Scoped<T> {
    /// The limit `queue` and `of_type` read from `settings` (none may be set: the overrides
    /// may still set one for a key).
    fn from_settings(
        settings: &SchedulingSettings,
        queue: impl Fn(&SchedulingSettings) -> Option<T>,
        of_type: impl Fn(&TypeLimits) -> Option<T>,
    ) -> Scoped<T> {
        let types: HashMap<String, T> = (settings.task_types.iter())
            .filter_map(|(task_type, limits)| Some((task_type.clone(), of_type(limits)?)))
            .collect();
        Scoped {
            queue: queue(settings),
            types,
        }
    }

    /// The scope and limit `task` counts under, if any: an override of its key for its type
    /// counts the type's tasks of the key apart, over the type's limit (or the queue's); else a
    /// type's own limit; else the queue's, under the queue's override of the key. `merge` puts
    /// an override's values over a limit from the settings (if any).
    fn of(
        &self,
        task: &Task,
        overrides: &KeyOverrides,
        merge: impl Fn(Option<T>, &LimitValues) -> Option<T>,
    ) -> Option<(Scope, T)> {
        let key = task.limit_key.as_deref()?;
        let task_type = task.task_type.as_str();
        let of_type = self.types.get(task_type).cloned();
        if let Some(values) = overrides.get(Some(task_type), key) {
            let limit = merge(of_type.or_else(|| self.queue.clone()), values)?;
            return Some(((Some(task_type.to_string()), key.to_string()), limit));
        }
        match of_type {
            Some(limit) => Some(((Some(task_type.to_string()), key.to_string()), limit)),
            None => {
                let queue = self.queue.clone();
                let limit = match overrides.get(None, key) {
                    Some(values) => merge(queue, values),
                    None => queue,
                }?;
                Some(((None, key.to_string()), limit))
            }
        }
    }
}

/// A limited key this node's tasks use now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyUse {
    /// The task type whose own limit it counts under (`None`: the queue's).
    pub task_type: Option<String>,
    /// The limit key.
    pub limit_key: String,
    /// Of its concurrency permits across the cluster, those this node holds.
    pub permits: usize,
    /// Its calls running on this node.
    pub running: usize,
    /// Its tasks waiting at the limit on this node.
    pub held: usize,
}

/// A queue's per-key limits on this node: the gates a due task passes (concurrency, then rate:
/// a task takes its start in the rate once it may run, so a start is never spent by a task still
/// waiting for a call of its key to return), and what they hold now.
#[derive(Clone)]
pub struct Limits {
    concurrency: Arc<KeyConcurrency>,
    rate: Arc<KeyRate>,
    overrides: watch::Receiver<Arc<KeyOverrides>>,
}

impl Limits {
    /// The limits of `settings` and of the `overrides` in force; node `node`'s concurrency
    /// permits are leased from `permits` by a task on `runtime` (from the first task that needs
    /// one).
    pub fn start(
        settings: &SchedulingSettings,
        overrides: watch::Receiver<Arc<KeyOverrides>>,
        node: &str,
        permits: Arc<dyn PermitStore>,
        metrics: &Arc<Metrics>,
        clock: &Arc<dyn Clock>,
        runtime: &tokio::runtime::Handle,
    ) -> Limits {
        let concurrency = KeyConcurrency::start(
            settings,
            overrides.clone(),
            node,
            permits,
            Arc::clone(metrics),
            Arc::clone(clock),
            runtime,
        );
        let rate = KeyRate::new(
            settings,
            overrides.clone(),
            Arc::clone(&concurrency.ledger),
            Arc::clone(metrics),
            Arc::clone(clock),
        );
        Limits {
            concurrency: Arc::new(concurrency),
            rate: Arc::new(rate),
            overrides,
        }
    }

    /// The gates, in the order a task passes them.
    pub fn gates(&self) -> Vec<Arc<dyn CallGate>> {
        vec![self.concurrency.clone(), self.rate.clone()]
    }

    /// Each key's weight in the executor's fair shares: its queue-level override's, else 1.
    pub(crate) fn weights(&self) -> crate::slots::Weights {
        let overrides = self.overrides.clone();
        Arc::new(move |key: &str| {
            let weight = overrides.borrow().get(None, key).and_then(|v| v.weight);
            weight.unwrap_or(1)
        })
    }

    /// The limited keys this node's tasks use now, by scope: their permits and calls, and the
    /// tasks held at either limit (waiting for a permit or for a unit of the key's rate).
    pub fn keys(&self) -> Vec<KeyUse> {
        (self.concurrency.ledger.by_scope().into_iter())
            .map(|((task_type, limit_key), permits, running, held)| KeyUse {
                task_type,
                limit_key,
                permits,
                running,
                held,
            })
            .collect()
    }

    /// Whether a task of `task`'s key and type would wait at a gate now: its key has tasks
    /// waiting for a permit, or its next start is not due yet (such a task is held by a limit,
    /// not stale).
    pub fn holds(&self, task: &Task) -> bool {
        self.concurrency.holds(task) || self.rate.holds(task)
    }
}

#[cfg(test)]
mod tests;
