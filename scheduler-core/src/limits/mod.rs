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
//! cut off, and what it costs). `key_rate` counts this node's starts.

use std::collections::HashMap;
use std::sync::Arc;

use scheduler_client::Task;

use crate::clock::Clock;
use crate::hooks::CallGate;
use crate::metrics::Metrics;
use crate::settings::{SchedulingSettings, TypeLimits};
use crate::store::PermitStore;

mod concurrency;
mod permits;
mod rate;

pub use concurrency::KeyConcurrency;
pub use rate::KeyRate;

/// Who a limit counts together: the tasks of one task type (its own limit) or of every type
/// using the queue's limit, of one key.
type Scope = (Option<String>, String);

/// A limit of the queue's, and the types' own.
#[derive(Debug, Clone)]
struct Scoped<T> {
    /// The queue's limit, for types without their own.
    queue: Option<T>,
    /// Types with a limit of their own.
    types: HashMap<String, T>,
}

impl<T: Clone> Scoped<T> {
    /// The limit `queue` and `of_type` read from `settings`; `None` if neither sets one.
    fn from_settings(
        settings: &SchedulingSettings,
        queue: impl Fn(&SchedulingSettings) -> Option<T>,
        of_type: impl Fn(&TypeLimits) -> Option<T>,
    ) -> Option<Scoped<T>> {
        let types: HashMap<String, T> = (settings.task_types.iter())
            .filter_map(|(task_type, limits)| Some((task_type.clone(), of_type(limits)?)))
            .collect();
        let queue = queue(settings);
        (queue.is_some() || !types.is_empty()).then_some(Scoped { queue, types })
    }

    /// The scope and limit `task` counts under, if any.
    fn of(&self, task: &Task) -> Option<(Scope, T)> {
        let key = task.limit_key.clone()?;
        match self.types.get(&task.task_type) {
            Some(limit) => Some(((Some(task.task_type.clone()), key), limit.clone())),
            None => Some(((None, key), self.queue.clone()?)),
        }
    }
}

/// A queue's per-key limits on this node: the gates a due task passes (concurrency, then rate:
/// a task takes its start in the rate once it may run, so a start is never spent by a task still
/// waiting for a call of its key to return), and what they hold now.
#[derive(Clone, Default)]
pub struct Limits {
    concurrency: Option<Arc<KeyConcurrency>>,
    rate: Option<Arc<KeyRate>>,
}

impl Limits {
    /// The limits of `settings`; node `node`'s concurrency permits are leased from `permits` by
    /// a task on `runtime`.
    pub fn start(
        settings: &SchedulingSettings,
        node: &str,
        permits: Arc<dyn PermitStore>,
        metrics: &Arc<Metrics>,
        clock: &Arc<dyn Clock>,
        runtime: &tokio::runtime::Handle,
    ) -> Limits {
        let concurrency = KeyConcurrency::start(
            settings,
            node,
            permits,
            Arc::clone(metrics),
            Arc::clone(clock),
            runtime,
        );
        let rate = KeyRate::from_settings(settings, Arc::clone(metrics), Arc::clone(clock));
        Limits {
            concurrency: concurrency.map(Arc::new),
            rate: rate.map(Arc::new),
        }
    }

    /// The gates, in the order a task passes them.
    pub fn gates(&self) -> Vec<Arc<dyn CallGate>> {
        let concurrency = (self.concurrency.clone()).map(|g| g as Arc<dyn CallGate>);
        let rate = (self.rate.clone()).map(|g| g as Arc<dyn CallGate>);
        concurrency.into_iter().chain(rate).collect()
    }

    /// Whether a task of `task`'s key and type would wait at a gate now: its key has tasks
    /// waiting for a permit, or its next start is not due yet (such a task is held by a limit,
    /// not stale).
    pub fn holds(&self, task: &Task) -> bool {
        (self.concurrency.as_ref()).is_some_and(|g| g.holds(task))
            || (self.rate.as_ref()).is_some_and(|g| g.holds(task))
    }
}

#[cfg(test)]
mod tests;
