//! Issue 33's accuracy: per-key limits across three node processes, through a rebalance.
//! Every node runs with `key_concurrency` 2 and a task type (`rated`) with `key_rate` 10 a
//! second; each call takes [`CALL`]. Keys of the first kind get six tasks each, of six
//! orderingIds, all due at one time; once they come due, one node leaves (SIGTERM) and the
//! other two take its partitions. Keys of the second get enough tasks to keep their rate busy
//! for [`RATE_SPAN`], due once the first kind's have had time to run (at 2,000 a second): a rate
//! is a bound, and a saturated executor, whose slots the keys share in turns, would start a
//! rated key's tasks slower than it (the full run's first version measured 8.1-8.6 a second
//! while 60,000 tasks of 10,000 keys took the slots). Each node writes every call (start, end, limit key) to a file; from the files
//! the bench finds the most calls of one key at once across the cluster, and each rated key's
//! starts a second after its burst.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use it_tests::engine::TestEnv;
use scheduler_core::settings::{SchedulingSettings, TypeLimits};

use crate::ceilings::bench_task;
use crate::child::{ChildNode, ExecutionFiles};
use crate::scenarios::{enqueue, wait_until};
use crate::BenchError;

/// Calls of one key at once allowed across the cluster.
pub const LIMIT: usize = 2;
/// Starts a second allowed per rated key.
pub const RATE: f64 = 10.0;
/// A rated key's burst.
const BURST: u32 = 10;
/// How long each call takes.
const CALL: Duration = Duration::from_millis(50);
/// How long each rated key's tasks keep its rate busy.
const RATE_SPAN: f64 = 20.0;
/// Tasks of each limited key, each of its own orderingId.
const TASKS_PER_KEY: usize = 6;
/// Partitions of the topic.
const PARTITIONS: u32 = 8;
/// Node processes.
const NODES: usize = 3;
/// The rated task type.
const RATED: &str = "rated";

/// The figures.
#[derive(Debug, Clone)]
pub struct Accuracy {
    /// Keys limited to [`LIMIT`] calls at once, and their tasks.
    pub keys: usize,
    pub tasks: usize,
    /// The most calls of one key at once, across the cluster, over every key.
    pub most_at_once: usize,
    /// Keys that ever ran more than [`LIMIT`] at once.
    pub keys_over: usize,
    /// Rated keys, and each one's starts a second after its burst: lowest, mean, highest.
    pub rated_keys: usize,
    pub rate_min: f64,
    pub rate_mean: f64,
    pub rate_max: f64,
    /// Calls made, of tasks enqueued (a call made again after the leave counts twice).
    pub calls: usize,
    pub enqueued: usize,
    /// Seconds from the tasks' time to the leave.
    pub leave_after_s: f64,
}

/// `keys` keys of [`TASKS_PER_KEY`] tasks and `rated_keys` rated keys on three node processes.
pub async fn accuracy(keys: usize, rated_keys: usize) -> Result<Accuracy, BenchError> {
    let env = TestEnv::new("bench_accuracy", PARTITIONS).await;
    let rated = TypeLimits {
        key_rate: Some(RATE),
        key_burst: Some(BURST),
        ..TypeLimits::default()
    };
    let scheduling = SchedulingSettings {
        key_concurrency: Some(LIMIT),
        task_types: [(RATED.to_string(), rated)].into_iter().collect(),
        ..SchedulingSettings::default()
    };
    let settings = env.settings(scheduling);
    let files = ExecutionFiles::create("accuracy")?;
    let mut nodes = Vec::new();
    for n in 0..NODES {
        nodes.push(ChildNode::spawn_calling(
            &settings,
            PARTITIONS,
            &files.path(n),
            CALL,
        )?);
    }
    wait_until(
        Duration::from_secs(60),
        "three nodes to split the partitions",
        || {
            let owned: usize = nodes.iter().map(|n| n.progress().owned.len()).sum();
            owned == PARTITIONS as usize && nodes.iter().all(|n| !n.progress().owned.is_empty())
        },
    )
    .await?;
    let scheduler = env.scheduler(Duration::from_secs(10));
    let tasks = keys * TASKS_PER_KEY;
    let per_rated = (RATE * RATE_SPAN) as usize + BURST as usize;
    let enqueued = tasks + rated_keys * per_rated;
    // Due once they are all in (about 10,000 tasks a second go in), at least 5 s on.
    let lead = Duration::from_secs(5).max(Duration::from_millis(enqueued as u64 / 10));
    let due = Utc::now() + TimeDelta::from_std(lead).unwrap_or(TimeDelta::MAX);
    let rated_due = due + TimeDelta::milliseconds(tasks as i64 / 2);
    enqueue(&scheduler, enqueued, |i| {
        if i < tasks {
            let (key, n) = (i / TASKS_PER_KEY, i % TASKS_PER_KEY);
            bench_task(format!("acc-{key}-{n}"), due, format!("acc-{i}"))
                .with_limit_key(format!("k{key}"))
        } else {
            let j = i - tasks;
            let (key, n) = (j / per_rated, j % per_rated);
            bench_task(format!("rated-{key}-{n}"), rated_due, format!("rated-{j}"))
                .of_type(RATED)
                .with_limit_key(format!("r{key}"))
        }
    })
    .await?;
    // The leave, once the calls are under way.
    if let Ok(wait) = (due + TimeDelta::seconds(3) - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
    let leave_after_s = (Utc::now() - due).num_milliseconds() as f64 / 1000.0;
    let leaving = nodes.remove(0);
    let left_with = leaving.stop(Duration::from_secs(60)).await?.executed;
    let executed =
        |nodes: &[ChildNode]| -> u64 { nodes.iter().map(|n| n.progress().executed).sum() };
    let wait = Duration::from_secs(120).max(Duration::from_millis(enqueued as u64 * 2));
    wait_until(wait, "every task of the accuracy run to be called", || {
        left_with + executed(&nodes) >= enqueued as u64
    })
    .await?;
    for node in nodes {
        node.stop(Duration::from_secs(60)).await?;
    }
    let calls = read_calls(&files)?;
    let figures = measure(&calls, keys, tasks, rated_keys, enqueued, leave_after_s);
    Ok(figures)
}

/// One call from a node's file.
#[derive(Debug, Clone)]
struct Call {
    started_us: i64,
    ended_us: i64,
    limit_key: String,
}

fn measure(
    calls: &[Call],
    keys: usize,
    tasks: usize,
    rated_keys: usize,
    enqueued: usize,
    leave_after_s: f64,
) -> Accuracy {
    let mut by_key: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
    for call in calls {
        by_key.entry(&call.limit_key).or_default().push(call);
    }
    let (mut most_at_once, mut keys_over) = (0, 0);
    let mut rates = Vec::new();
    for (key, of_key) in &by_key {
        if key.starts_with('k') {
            let most = most_at_once_of(of_key);
            most_at_once = most_at_once.max(most);
            keys_over += usize::from(most > LIMIT);
        } else if key.starts_with('r') {
            let mut starts: Vec<i64> = of_key.iter().map(|c| c.started_us).collect();
            starts.sort_unstable();
            if let Some(rate) = rate_after_burst(&starts) {
                rates.push(rate);
            }
        }
    }
    let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
    Accuracy {
        keys,
        tasks,
        most_at_once,
        keys_over,
        rated_keys,
        rate_min: rates.iter().copied().fold(f64::INFINITY, f64::min),
        rate_mean: mean,
        rate_max: rates.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        calls: calls.len(),
        enqueued,
        leave_after_s,
    }
}

/// The most of `calls` running at once (a call that ended as another started is not).
fn most_at_once_of(calls: &[&Call]) -> usize {
    let mut events: Vec<(i64, i32)> = Vec::with_capacity(calls.len() * 2);
    for call in calls {
        events.push((call.started_us, 1));
        events.push((call.ended_us, -1));
    }
    // Ends before starts at the same instant.
    events.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, change) in events {
        now += change;
        most = most.max(now);
    }
    most.max(0) as usize
}

/// Starts a second after the burst: the starts after the first [`BURST`] over the time from the
/// first start to the last.
fn rate_after_burst(starts: &[i64]) -> Option<f64> {
    let (first, last) = (*starts.first()?, *starts.last()?);
    let after = starts.len().checked_sub(BURST as usize)?;
    let seconds = (last - first) as f64 / 1e6;
    (seconds > 0.0).then(|| after as f64 / seconds)
}

/// Every call in the nodes' files: `key \t orderingId \t scheduled ms \t started µs \t
/// partition \t ended µs \t limit key`.
fn read_calls(files: &ExecutionFiles) -> Result<Vec<Call>, BenchError> {
    let mut calls = Vec::new();
    for node in 0..NODES {
        let path = files.path(node);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| BenchError::Setup(format!("cannot read {}: {e}", path.display())))?;
        calls.extend(text.lines().filter_map(parse));
    }
    Ok(calls)
}

fn parse(line: &str) -> Option<Call> {
    let fields: Vec<&str> = line.split('\t').collect();
    Some(Call {
        started_us: fields.get(3)?.parse().ok()?,
        ended_us: fields.get(5)?.parse().ok()?,
        limit_key: fields.get(6)?.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(started_us: i64, ended_us: i64) -> Call {
        Call {
            started_us,
            ended_us,
            limit_key: "k".into(),
        }
    }

    #[test]
    fn the_most_at_once_counts_overlaps_and_not_a_call_that_ended_as_another_started() {
        let calls = [call(0, 10), call(5, 15), call(10, 20), call(12, 13)];
        let refs: Vec<&Call> = calls.iter().collect();
        // At 12: the second, the third and the fourth (the first ended at 10).
        assert_eq!(most_at_once_of(&refs), 3);
        assert_eq!(most_at_once_of(&refs[..1]), 1);
    }

    #[test]
    fn the_rate_is_the_starts_after_the_burst_over_the_span() {
        // A burst of 10 at 0, then one every 100 ms: 20 more over 2 s.
        let starts: Vec<i64> = (0..10)
            .map(|_| 0)
            .chain((1..=20).map(|n| n * 100_000))
            .collect();
        let rate = rate_after_burst(&starts).expect("a rate");
        assert!((rate - 10.0).abs() < 1e-9, "{rate}");
    }
}
