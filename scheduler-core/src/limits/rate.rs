//! `key_rate` and `key_burst`: at most `key_rate` starts a second per limit key across the
//! cluster, `key_burst` of them at once (a token bucket).
//!
//! - **Shares.** A key's rate is split into `units` (its burst, at most 64), leased from the
//!   store like its concurrency permits (the [`Ledger`], counting `Starts`): a node holding `n`
//!   of them starts the key's tasks at `n / units` of the rate, in bursts of `n / units` of the
//!   burst (at least `n`, as `units` is at most the burst). The holders' shares add up to the
//!   rate at most. A task holds a unit from its entry until its call starts, so at most
//!   `units` tasks of a key are between their turn and their call. Units are not used up by
//!   the tasks holding them: a node takes every free unit while its tasks need any and no
//!   other node's do, and gives them back once they needed none for `LINGER`. Nodes whose
//!   tasks want a key at once share its units evenly: a node that found none free leaves a
//!   want in the key's row, and holders read the row each second while their tasks use the
//!   rate and give back all but their share (see `permits`).
//! - **On a node,** by the generic cell rate algorithm: each key keeps one time, the
//!   theoretical arrival time of its next start, and each task that enters takes the next start
//!   its node's share allows and waits for it (by the node's clock). So the waiters of a key
//!   start in the order they came, with no timer per key and nothing to refill. A task that
//!   stops waiting leaves its start unused: the rate is a bound, and such a start is lost.
//! - **What it guarantees:** the starts taken at the gate keep to the rate plus the burst across
//!   the cluster while the holders' heartbeats live. A call starts when its slot comes, after
//!   its turn: under a saturated executor a key's calls may start closer together than their
//!   turns, by at most `units` (so within the rate plus twice the burst in any window).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, TimeDelta, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::Task;

use tokio::sync::watch;

use super::permits::{Counted, Ledger};
use super::{KeyOverrides, Scope, Scoped};
use crate::clock::Clock;
use crate::hooks::{CallGate, GatePass};
use crate::metrics::Metrics;
use crate::settings::SchedulingSettings;

/// A key's rate: starts a second, and how many may start at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Rate {
    /// Starts a second.
    pub per_second: f64,
    /// Starts at once after a quiet spell (at least 1).
    pub burst: u32,
}

impl Rate {
    /// The time between two starts once the burst is spent.
    fn interval(&self) -> TimeDelta {
        TimeDelta::nanoseconds((1e9 / self.per_second) as i64)
    }

    /// The units the rate is split into across the cluster: its burst, at most
    /// [`MAX_UNITS`].
    fn units(&self) -> usize {
        (self.burst as usize).clamp(1, MAX_UNITS)
    }

    /// The share of the rate that `held` of its `units` give.
    fn share(&self, held: usize) -> Rate {
        let units = self.units();
        let held = held.clamp(1, units);
        let part = held as f64 / units as f64;
        Rate {
            per_second: self.per_second * part,
            burst: ((f64::from(self.burst) * part) as u32).max(1),
        }
    }

    /// How far ahead of its theoretical time a start may be taken: a burst's worth. (The
    /// settings bound both numbers: `MAX_KEY_RATE`, `MAX_KEY_BURST`.)
    fn tolerance(&self) -> TimeDelta {
        let spare = i32::try_from(self.burst.max(1) - 1).unwrap_or(i32::MAX);
        self.interval()
            .checked_mul(spare)
            .unwrap_or(TimeDelta::zero())
    }
}

/// Each key's theoretical arrival time of its next start on this node.
type NextStarts = Arc<Mutex<HashMap<Scope, DateTime<Utc>>>>;

/// The most units a key's rate is split into across the cluster.
const MAX_UNITS: usize = 64;

/// The gate of `key_rate`: each key's share of its rate on this node, and the theoretical
/// arrival time of its next start.
pub struct KeyRate {
    pub(super) rates: Scoped<Rate>,
    /// This node's units of the keys' rates (shared with the concurrency permits).
    ledger: Arc<Ledger>,
    overrides: watch::Receiver<Arc<KeyOverrides>>,
    next: NextStarts,
    /// Counts the tasks waiting here (`scheduler_tasks_held_by_limit`).
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
}

/// A second's worth of `per_second`, at least 1.
fn default_burst(per_second: f64) -> u32 {
    per_second.ceil().clamp(1.0, f64::from(u32::MAX)) as u32
}

/// Keys kept before the ones whose time has passed (which a new entry would equal) are dropped.
const KEYS_KEPT: usize = 4096;

impl KeyRate {
    /// The gate of `settings`' `key_rate` (with its `key_burst`, by default a second's worth)
    /// and of the `overrides` in force, its units of each key's rate leased by `ledger`.
    pub(super) fn new(
        settings: &SchedulingSettings,
        overrides: watch::Receiver<Arc<KeyOverrides>>,
        ledger: Arc<Ledger>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> KeyRate {
        let rate = |per_second: Option<f64>, burst: Option<u32>| {
            per_second.map(|per_second| Rate {
                per_second,
                burst: burst.unwrap_or(default_burst(per_second)),
            })
        };
        let rates = Scoped::from_settings(
            settings,
            |s| rate(s.key_rate, s.key_burst),
            |t| rate(t.key_rate, t.key_burst.or(settings.key_burst)),
        );
        KeyRate {
            rates,
            ledger,
            overrides,
            next: NextStarts::default(),
            metrics,
            clock,
        }
    }

    /// The scope and rate of `task`'s key, if it has one: an override's rate comes with its
    /// burst (by default a second's worth of it), an override's burst alone applies to the rate
    /// from the settings.
    fn rate_of(&self, task: &Task) -> Option<(Scope, Rate)> {
        let overrides = Arc::clone(&self.overrides.borrow());
        self.rates
            .of(task, &overrides, |rate, values| match values.rate {
                Some(per_second) => Some(Rate {
                    per_second,
                    burst: values.burst.unwrap_or(default_burst(per_second)),
                }),
                None => rate.map(|rate| Rate {
                    burst: values.burst.unwrap_or(rate.burst),
                    ..rate
                }),
            })
    }

    /// The keys' next starts, shared with the tasks waiting for theirs.
    fn next_starts(&self) -> NextStarts {
        Arc::clone(&self.next)
    }
}

/// When the next task of `scope` may start at `rate`, entering at `now`: that start is taken.
fn take_start(next: &NextStarts, scope: Scope, rate: Rate, now: DateTime<Utc>) -> DateTime<Utc> {
    let mut next = next.lock().unwrap_or_else(PoisonError::into_inner);
    if next.len() >= KEYS_KEPT {
        next.retain(|_, at| *at > now);
    }
    let arrival = next.get(&scope).copied().unwrap_or(now).max(now);
    let start = (arrival.checked_sub_signed(rate.tolerance()))
        .unwrap_or(now)
        .max(now);
    let following = arrival
        .checked_add_signed(rate.interval())
        .unwrap_or(arrival);
    next.insert(scope, following);
    start
}

impl KeyRate {
    /// Whether `task`'s key's next start is not due yet, or tasks of it wait for a unit of its
    /// rate (a task of it entering would wait).
    pub(super) fn holds(&self, task: &Task) -> bool {
        let Some((scope, rate)) = self.rate_of(task) else {
            return false;
        };
        if self.ledger.waiting(&(Counted::Starts, scope.clone())) {
            return true;
        }
        let rate = rate.share(self.ledger.usable(&(Counted::Starts, scope.clone())));
        let now = self.clock.now();
        let next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        (next.get(&scope)).is_some_and(|at| {
            at.checked_sub_signed(rate.tolerance())
                .is_some_and(|start| start > now)
        })
    }
}

impl CallGate for KeyRate {
    fn enter(&self, task: &Task) -> Option<BoxFuture<'static, GatePass>> {
        let (scope, rate) = self.rate_of(task)?;
        let counter = (Counted::Starts, scope.clone());
        let metrics = &self.metrics;
        let unit = self.ledger.permit(counter.clone(), rate.units(), || {
            metrics.held_by_limit(&task.task_type)
        });
        let (ledger, clock, metrics) = (
            Arc::clone(&self.ledger),
            Arc::clone(&self.clock),
            Arc::clone(&self.metrics),
        );
        let task_type = task.task_type.clone();
        let this = self.next_starts();
        Some(
            async move {
                let unit = unit.await;
                let share = rate.share(ledger.usable(&counter));
                let now = clock.now();
                let start = take_start(&this, scope, share, now);
                if start > now {
                    let held = metrics.held_by_limit(&task_type);
                    clock.sleep_until(start).await;
                    drop(held);
                }
                unit.until_start()
            }
            .boxed(),
        )
    }
}
