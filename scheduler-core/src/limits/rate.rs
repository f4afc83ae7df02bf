//! `key_rate` and `key_burst`: at most `key_rate` starts a second per limit key, `key_burst` of
//! them at once (a token bucket), by the generic cell rate algorithm: each key keeps one time,
//! the theoretical arrival time of its next start, and each task that enters takes the next
//! start the rate allows and waits for it (by the node's clock). So the waiters of a key start in
//! the order they came, one every `1 / key_rate` seconds once its burst is spent, with no timer
//! per key and nothing to refill. A task that stops waiting leaves its start unused: the rate is
//! a bound, never exceeded, and such a start is lost, not given to another.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, TimeDelta, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::Task;

use tokio::sync::watch;

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

    /// How far ahead of its theoretical time a start may be taken: a burst's worth. (The
    /// settings bound both numbers: `MAX_KEY_RATE`, `MAX_KEY_BURST`.)
    fn tolerance(&self) -> TimeDelta {
        let spare = i32::try_from(self.burst.max(1) - 1).unwrap_or(i32::MAX);
        self.interval()
            .checked_mul(spare)
            .unwrap_or(TimeDelta::zero())
    }
}

/// The gate of `key_rate`: each key's theoretical arrival time of its next start.
pub struct KeyRate {
    pub(super) rates: Scoped<Rate>,
    overrides: watch::Receiver<Arc<KeyOverrides>>,
    next: Mutex<HashMap<Scope, DateTime<Utc>>>,
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
    /// and of the `overrides` in force.
    pub fn new(
        settings: &SchedulingSettings,
        overrides: watch::Receiver<Arc<KeyOverrides>>,
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
            overrides,
            next: Mutex::default(),
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

    /// When the next task of `scope` may start, entering at `now`: that start is taken.
    fn take_start(&self, scope: Scope, rate: Rate, now: DateTime<Utc>) -> DateTime<Utc> {
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
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
}

impl KeyRate {
    /// Whether `task`'s key's next start is not due yet (a task of it entering would wait).
    pub(super) fn holds(&self, task: &Task) -> bool {
        let Some((scope, rate)) = self.rate_of(task) else {
            return false;
        };
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
        let now = self.clock.now();
        let start = self.take_start(scope, rate, now);
        if start <= now {
            return None;
        }
        let held = self.metrics.held_by_limit(&task.task_type);
        let wait = self.clock.sleep_until(start);
        Some(
            async move {
                wait.await;
                drop(held);
                GatePass::new(())
            }
            .boxed(),
        )
    }
}
