//! What the overview's charts draw: every [`PERIOD`] the node reads its own metrics (the text
//! `/metrics` serves) and keeps, per queue, what happened since the previous reading, for the
//! last [`KEPT`] periods (15 minutes): tasks completed and failed (throughput), and the
//! lateness of the tasks that started (first attempt's start minus their time), as the p50 and
//! p99 of the execution-delay histogram's bucket counts gained in the period.
//!
//! The quantiles are estimated as Prometheus's `histogram_quantile` does: the bucket holding the
//! rank, linearly interpolated between its bounds. The buckets double (1 ms, 2 ms, 4 ms, ...),
//! so an estimate is within a factor of two of the truth, the precision an operator gets from
//! `/metrics` too; the charts show trends and outliers, not benchmarks. Kept in memory only: a
//! node that restarts starts its charts again (Prometheus keeps the long history).
//!
//! Times come from the engine's [`Clock`] and the period from tokio's timer, so the tests drive
//! both (a paused runtime) without sleeping.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::MissedTickBehavior;

use super::metrics_text::{self, Line};
use crate::clock::{Clock, SystemClock};

/// How often the node samples its metrics.
pub(crate) const PERIOD: Duration = Duration::from_secs(5);
/// How many samples are kept: 15 minutes of them.
pub(crate) const KEPT: usize = 180;

/// The counters of [`crate::metrics::Metrics`] a sample is the difference of: cumulative since
/// the node started, summed over the queue's partitions.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Totals {
    /// Executions that completed.
    pub(crate) completed: u64,
    /// Executions that failed for good: failed after the last retry, or dropped as invalid.
    pub(crate) failed: u64,
    /// The execution-delay histogram: each bucket's upper bound (seconds, the last infinite)
    /// and the count of delays at or under it.
    pub(crate) delay: Vec<(f64, u64)>,
}

impl Totals {
    /// The totals of `queue` in the metrics' lines.
    pub(crate) fn of_queue(lines: &[Line], queue: &str) -> Totals {
        let outcomes = metrics_text::sum_by(lines, "scheduler_executions_total", queue, "outcome");
        let count = |wanted: &[&str]| {
            outcomes
                .iter()
                .filter(|(o, _)| wanted.contains(&o.as_str()))
                .map(|(_, n)| *n as u64)
                .sum()
        };
        let mut delay: Vec<(f64, u64)> = Vec::new();
        let buckets = metrics_text::sum_by(
            lines,
            "scheduler_execution_delay_seconds_bucket",
            queue,
            "le",
        );
        for (bound, n) in buckets {
            if let Ok(bound) = bound.parse::<f64>() {
                delay.push((bound, n as u64));
            }
        }
        delay.sort_by(|a, b| a.0.total_cmp(&b.0));
        Totals {
            completed: count(&["completed"]),
            failed: count(&["failed", "dropped"]),
            delay,
        }
    }
}

/// What happened in one period.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    /// When the period ended.
    pub(crate) at: DateTime<Utc>,
    /// Its length, seconds.
    pub(crate) seconds: f64,
    /// Executions completed in it.
    pub(crate) completed: u64,
    /// Executions failed for good in it.
    pub(crate) failed: u64,
    /// Tasks whose first attempt started in it.
    pub(crate) started: u64,
    /// Their lateness's median, seconds (none started: none).
    pub(crate) p50: Option<f64>,
    /// Their lateness's 99th percentile, seconds.
    pub(crate) p99: Option<f64>,
}

impl Sample {
    /// Completions per second.
    pub(crate) fn completed_per_second(&self) -> f64 {
        self.completed as f64 / self.seconds
    }

    /// Failures per second.
    pub(crate) fn failed_per_second(&self) -> f64 {
        self.failed as f64 / self.seconds
    }
}

/// Every queue's history, by name: the admin server's sampler writes them, the overview
/// reads its queue's (a request extension the server adds, so the API's state and its tests
/// know nothing of the dashboard's charts).
#[derive(Debug, Clone, Default)]
pub(crate) struct Histories(Arc<BTreeMap<String, History>>);

impl Histories {
    /// A history for each of `queues`.
    pub(crate) fn new(queues: impl IntoIterator<Item = String>) -> Histories {
        Histories(Arc::new(
            queues
                .into_iter()
                .map(|q| (q, History::default()))
                .collect(),
        ))
    }

    /// The history of `queue`.
    pub(crate) fn of(&self, queue: &str) -> Option<&History> {
        self.0.get(queue)
    }

    /// Each queue's name and history, for the sampler.
    pub(crate) fn all(&self) -> Vec<(String, History)> {
        self.0.iter().map(|(q, h)| (q.clone(), h.clone())).collect()
    }
}

/// A queue's samples, shared by the sampler (which writes) and the pages (which read).
#[derive(Clone)]
pub struct History {
    ring: Arc<Mutex<Ring>>,
    clock: Arc<dyn Clock>,
}

#[derive(Default)]
struct Ring {
    samples: VecDeque<Sample>,
    /// The previous reading, which the next sample is the difference from.
    last: Option<(DateTime<Utc>, Totals)>,
}

impl Default for History {
    fn default() -> Self {
        History::with_clock(Arc::new(SystemClock))
    }
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History").finish_non_exhaustive()
    }
}

impl History {
    /// A history timed by `clock`.
    pub(crate) fn with_clock(clock: Arc<dyn Clock>) -> Self {
        History {
            ring: Arc::default(),
            clock,
        }
    }

    /// Now, by the history's clock.
    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Records a reading taken now: the difference from the previous one becomes a sample
    /// (the first reading only sets where the next starts from).
    pub(crate) fn record(&self, totals: Totals) {
        let at = self.clock.now();
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((before, previous)) = &ring.last {
            let seconds = (at - *before).as_seconds_f64();
            if seconds > 0.0 {
                let sample = difference(at, seconds, previous, &totals);
                if ring.samples.len() == KEPT {
                    ring.samples.pop_front();
                }
                ring.samples.push_back(sample);
            }
        }
        ring.last = Some((at, totals));
    }

    /// The samples kept, oldest first.
    pub(crate) fn samples(&self) -> Vec<Sample> {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.samples.iter().cloned().collect()
    }
}

/// What happened between two readings. Counters only grow; a smaller one (none in a running
/// node) counts as nothing rather than wrapping.
fn difference(at: DateTime<Utc>, seconds: f64, before: &Totals, now: &Totals) -> Sample {
    let earlier = |bound: f64| {
        before
            .delay
            .iter()
            .find(|(b, _)| *b == bound)
            .map_or(0, |(_, n)| *n)
    };
    let delay: Vec<(f64, u64)> = now
        .delay
        .iter()
        .map(|&(bound, n)| (bound, n.saturating_sub(earlier(bound))))
        .collect();
    Sample {
        at,
        seconds,
        completed: now.completed.saturating_sub(before.completed),
        failed: now.failed.saturating_sub(before.failed),
        started: delay.last().map_or(0, |(_, n)| *n),
        p50: quantile(0.5, &delay),
        p99: quantile(0.99, &delay),
    }
}

/// The `q` quantile of a histogram given as cumulative counts by upper bound (ascending, the
/// last infinite), as Prometheus's `histogram_quantile` estimates it: linear within the bucket
/// that holds the rank; the highest finite bound when the rank is in the infinite bucket; none
/// without observations.
pub(crate) fn quantile(q: f64, cumulative: &[(f64, u64)]) -> Option<f64> {
    let total = cumulative.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let (mut lower, mut below) = (0.0, 0u64);
    for &(bound, count) in cumulative {
        if count as f64 >= rank {
            if bound.is_infinite() {
                return Some(lower);
            }
            let within = (count - below) as f64;
            let fraction = if within > 0.0 {
                (rank - below as f64) / within
            } else {
                1.0
            };
            return Some(lower + (bound - lower) * fraction);
        }
        (lower, below) = (bound, count);
    }
    Some(lower)
}

/// Samples every queue's metrics every [`PERIOD`], forever (the admin server aborts it when it
/// stops). `read` gives the metrics text; `queues` names each queue and its history.
pub(crate) async fn sample(queues: Vec<(String, History)>, read: impl Fn() -> String) {
    let mut tick = tokio::time::interval(PERIOD);
    // A late tick (a busy runtime) is a longer period, not a burst of short ones.
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let lines = metrics_text::parse(&read());
        for (queue, history) in &queues {
            history.record(Totals::of_queue(&lines, queue));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TokioClock;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().unwrap()
    }

    fn close(estimate: Option<f64>, expected: f64) {
        let estimate = estimate.unwrap_or(f64::NAN);
        assert!(
            (estimate - expected).abs() < 1e-12,
            "{estimate} is not {expected}"
        );
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket_that_holds_the_rank() {
        let inf = f64::INFINITY;
        // 10 under 1 ms, 80 in (1, 2] ms, 10 in (2, 4] ms.
        let h = [(0.001, 10), (0.002, 90), (0.004, 100), (inf, 100)];
        // Rank 50: 40 of the bucket's 80 → halfway from 1 to 2 ms.
        close(quantile(0.5, &h), 0.0015);
        // Rank 99: 9 of the last bucket's 10 → 90% of the way from 2 to 4 ms.
        close(quantile(0.99, &h), 0.0038);
        // In the first bucket, from zero.
        close(quantile(0.05, &h), 0.0005);
        // A rank past the last finite bound: that bound.
        assert_eq!(quantile(0.99, &[(0.001, 1), (inf, 10)]), Some(0.001));
        assert_eq!(quantile(0.5, &[(0.001, 0), (inf, 0)]), None);
        assert_eq!(quantile(0.5, &[]), None);
    }

    #[test]
    fn totals_sum_the_partitions_and_count_dropped_as_failed() {
        let text = "scheduler_executions_total{partition=\"0\",outcome=\"completed\"} 4\n\
            scheduler_executions_total{partition=\"1\",outcome=\"completed\"} 6\n\
            scheduler_executions_total{partition=\"1\",outcome=\"failed\"} 1\n\
            scheduler_executions_total{partition=\"1\",outcome=\"dropped\"} 2\n\
            scheduler_executions_total{partition=\"1\",outcome=\"fenced\"} 9\n\
            scheduler_execution_delay_seconds_bucket{le=\"0.001\",partition=\"0\"} 1\n\
            scheduler_execution_delay_seconds_bucket{le=\"+Inf\",partition=\"0\"} 3\n\
            scheduler_execution_delay_seconds_bucket{le=\"0.001\",partition=\"1\"} 2\n\
            scheduler_execution_delay_seconds_bucket{le=\"+Inf\",partition=\"1\"} 2\n";
        let totals = Totals::of_queue(&metrics_text::parse(text), "default");
        assert_eq!(
            totals,
            Totals {
                completed: 10,
                failed: 3,
                delay: vec![(0.001, 3), (f64::INFINITY, 5)],
            }
        );
    }

    /// The names and labels are those the node's registry writes, with and without queues.
    #[test]
    fn totals_read_what_the_nodes_metrics_write() {
        use crate::metrics::{Metrics, NodeMetrics};
        use crate::outcome::ExecutionOutcome;
        use prometheus_client::registry::Registry;
        for queue in [None, Some("emails")] {
            let mut registry = Registry::default();
            let metrics = Arc::new(Metrics::for_queue(&mut registry, queue));
            let node = NodeMetrics::new(registry, vec![(Arc::clone(&metrics), Default::default())]);
            for partition in [0, 3] {
                metrics.executed(partition, ExecutionOutcome::Completed);
                let delay = Some(Duration::from_micros(1500));
                metrics.attempt(partition, Duration::from_millis(1), delay);
            }
            metrics.executed(3, ExecutionOutcome::Dropped);
            metrics.executed(3, ExecutionOutcome::AlreadyFinished);
            let lines = metrics_text::parse(&node.encode());
            let totals = Totals::of_queue(&lines, queue.unwrap_or("default"));
            assert_eq!((totals.completed, totals.failed), (2, 1), "{queue:?}");
            assert_eq!(totals.delay.len(), 21, "20 buckets and +Inf: {totals:?}");
            assert_eq!(totals.delay[0], (0.001, 0));
            assert_eq!(totals.delay[1], (0.002, 2));
            assert_eq!(totals.delay[20], (f64::INFINITY, 2));
            let other = Totals::of_queue(&lines, "other");
            let expected = if queue.is_some() { 0 } else { 2 };
            assert_eq!(
                other.completed, expected,
                "another queue's lines are not counted"
            );
        }
    }

    /// The sampler under a paused runtime: a reading every 5 s of the clock, each sample the
    /// difference from the one before, the oldest dropped after 15 minutes.
    #[tokio::test(start_paused = true)]
    async fn the_sampler_keeps_each_periods_differences_for_fifteen_minutes() {
        let clock = Arc::new(TokioClock::starting_at(t0()));
        let history = History::with_clock(clock);
        let readings = Arc::new(Mutex::new(0u64));
        let read = {
            let readings = Arc::clone(&readings);
            move || {
                let mut n = readings.lock().unwrap_or_else(PoisonError::into_inner);
                *n += 1;
                // Reading n: 10 completions and 1 failure per period so far; each period
                // 8 tasks started within 1 ms and 2 within (1, 2] ms.
                let k = *n - 1;
                format!(
                    "scheduler_executions_total{{partition=\"0\",outcome=\"completed\"}} {}\n\
                     scheduler_executions_total{{partition=\"0\",outcome=\"failed\"}} {}\n\
                     scheduler_execution_delay_seconds_bucket{{le=\"0.001\",partition=\"0\"}} {}\n\
                     scheduler_execution_delay_seconds_bucket{{le=\"0.002\",partition=\"0\"}} {}\n\
                     scheduler_execution_delay_seconds_bucket{{le=\"+Inf\",partition=\"0\"}} {}\n",
                    10 * k,
                    k,
                    8 * k,
                    10 * k,
                    10 * k
                )
            }
        };
        let sampler = tokio::spawn(sample(vec![("default".into(), history.clone())], read));
        // The first reading at once, then one every 5 s: after 12 s, three readings, two samples.
        tokio::time::sleep(Duration::from_secs(12)).await;
        let samples = history.samples();
        assert_eq!(samples.len(), 2, "{samples:?}");
        let first = &samples[0];
        assert_eq!(first.at, t0() + chrono::TimeDelta::seconds(5));
        assert_eq!(first.seconds, 5.0);
        assert_eq!((first.completed, first.failed, first.started), (10, 1, 10));
        assert_eq!(first.completed_per_second(), 2.0);
        assert_eq!(first.failed_per_second(), 0.2);
        // Rank 5 of 8 under 1 ms; rank 9.9 is 1.9 of the 2 in (1, 2] ms.
        close(first.p50, 0.000625);
        close(first.p99, 0.00195);
        assert_eq!(samples[1].at, t0() + chrono::TimeDelta::seconds(10));

        // After 20 minutes, 15 minutes' worth, the newest last.
        tokio::time::sleep(Duration::from_secs(20 * 60)).await;
        let samples = history.samples();
        assert_eq!(samples.len(), KEPT);
        let newest = samples.last().map(|s| s.at);
        assert_eq!(newest, Some(t0() + chrono::TimeDelta::seconds(5 * 242)));
        assert!(samples
            .iter()
            .all(|s| s.completed == 10 && s.seconds == 5.0));
        sampler.abort();
    }
}
