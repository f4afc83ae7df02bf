//! `key_concurrency`: at most that many calls at once per limit key across the cluster (see the
//! module above), by permits each node leases from the store ([`Ledger`]).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use scheduler_client::Task;

use tokio::sync::watch;

use super::permits::{Counted, Ledger};
use super::{KeyOverrides, Scoped};
use crate::clock::Clock;
use crate::hooks::{CallGate, GatePass};
use crate::metrics::Metrics;
use crate::settings::SchedulingSettings;
use crate::store::PermitStore;

/// The gate of `key_concurrency`: a task of a limited key takes one of the key's permits this
/// node holds, and holds it until its call returns.
pub struct KeyConcurrency {
    limits: Scoped<usize>,
    overrides: watch::Receiver<Arc<KeyOverrides>>,
    pub(super) ledger: Arc<Ledger>,
    /// Counts the tasks waiting here (`scheduler_tasks_held_by_limit`).
    pub(super) metrics: Arc<Metrics>,
}

impl KeyConcurrency {
    /// The gate of `settings`' `key_concurrency` and of the `overrides` in force: node `node`'s
    /// permits, leased from `permits` (alive for `lease_ttl` after each heartbeat) by a task on
    /// `runtime`, counting the tasks it holds in `metrics`.
    pub fn start(
        settings: &SchedulingSettings,
        overrides: watch::Receiver<Arc<KeyOverrides>>,
        node: &str,
        permits: Arc<dyn PermitStore>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
        runtime: &tokio::runtime::Handle,
    ) -> KeyConcurrency {
        let limits = Scoped::from_settings(settings, |s| s.key_concurrency, |t| t.key_concurrency);
        let ttl: Duration = settings.lease_ttl;
        let ledger = Ledger::start(node, permits, clock, Arc::clone(&metrics), ttl, runtime);
        KeyConcurrency {
            limits,
            overrides,
            ledger,
            metrics,
        }
    }

    /// The scope and limit of `task`'s key, if it has one.
    fn limit_of(&self, task: &Task) -> Option<(super::Scope, usize)> {
        let overrides = Arc::clone(&self.overrides.borrow());
        self.limits.of(task, &overrides, |limit, values| {
            (values.concurrency.map(|n| n as usize)).or(limit)
        })
    }
}

impl KeyConcurrency {
    /// Whether tasks of `task`'s key and type wait for a permit on this node now.
    pub(super) fn holds(&self, task: &Task) -> bool {
        (self.limit_of(task))
            .is_some_and(|(scope, _)| self.ledger.waiting(&(Counted::Calls, scope)))
    }
}

impl CallGate for KeyConcurrency {
    fn enter(&self, task: &Task) -> Option<BoxFuture<'static, GatePass>> {
        let (scope, limit) = self.limit_of(task)?;
        let metrics = &self.metrics;
        Some(self.ledger.permit((Counted::Calls, scope), limit, || {
            metrics.held_by_limit(&task.task_type)
        }))
    }
}
