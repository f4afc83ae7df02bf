//! Recurring schedules against the real stack: four schedules every 2 s on three nodes for
//! 30 s (each fire time runs exactly once; one is paused and resumed meanwhile), then every
//! node down for 10 s, and each catch-up policy (skip, once, all) does what it says when the
//! nodes are back.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use it_tests::engine::{wait_until, TestEnv};
use scheduler_core::recurring::{CatchUp, RecurringSchedules, ScheduleSpec};
use scheduler_core::store::FireOutcome;
use scheduler_core::{SchedulerNode, Task, TaskContext, TaskData, TaskError, TaskHandler};

const TYPE: &str = "report";
const EVERY: Duration = Duration::from_secs(2);

/// Every call: the schedule, the fire time (from the run's uniquenessKey) and the node.
type Calls = Arc<Mutex<Vec<(String, DateTime<Utc>, String)>>>;

#[derive(Clone)]
struct Report {
    node: String,
    calls: Calls,
}

/// `schedule:<id>@<fire ms>` → (id, fire time).
fn fire_of(task: &Task) -> Option<(String, DateTime<Utc>)> {
    let rest = task.uniqueness_key.strip_prefix("schedule:")?;
    let (id, ms) = rest.rsplit_once('@')?;
    let fire = DateTime::from_timestamp_millis(ms.parse().ok()?)?;
    Some((id.to_string(), fire))
}

impl TaskHandler for Report {
    async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
        let (id, fire) = fire_of(task).ok_or_else(|| TaskError::invalid("not a run"))?;
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls.push((id, fire, self.node.clone()));
        Ok(())
    }
}

async fn start_nodes(env: &TestEnv, calls: &Calls, round: &str) -> Vec<SchedulerNode> {
    let mut nodes = Vec::new();
    for i in 0..3 {
        let report = Report {
            node: format!("{round}-{i}"),
            calls: Arc::clone(calls),
        };
        let settings = env.settings(TestEnv::quick_scheduling());
        let node = SchedulerNode::start(settings, report)
            .await
            .expect("node starts");
        nodes.push(node);
    }
    let partitions = env.partitions as usize;
    wait_until(
        Duration::from_secs(60),
        "the three nodes to share every partition, each ready",
        || {
            let owned: usize = nodes.iter().map(|n| n.owned_partitions().len()).sum();
            owned == partitions && nodes.iter().all(SchedulerNode::is_ready)
        },
    )
    .await;
    nodes
}

async fn stop(nodes: Vec<SchedulerNode>) {
    let stops = nodes.into_iter().map(SchedulerNode::shutdown);
    for result in futures::future::join_all(stops).await {
        result.expect("node stops");
    }
}

fn spec(id: &str, catch_up: CatchUp) -> ScheduleSpec {
    ScheduleSpec::every(id, EVERY, TYPE, TaskData::new()).catch_up(catch_up, None)
}

/// The fire times each schedule ran, and how often each.
fn runs(calls: &Calls) -> BTreeMap<String, BTreeMap<DateTime<Utc>, usize>> {
    let calls = calls.lock().unwrap_or_else(PoisonError::into_inner);
    let mut runs: BTreeMap<String, BTreeMap<DateTime<Utc>, usize>> = BTreeMap::new();
    for (id, fire, _) in calls.iter() {
        *runs
            .entry(id.clone())
            .or_default()
            .entry(*fire)
            .or_default() += 1;
    }
    runs
}

/// The 2 s fire times strictly between `from` and `to`.
fn fire_times(from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let step = 2000;
    let first = (from.timestamp_millis() / step + 1) * step;
    (0..)
        .map(|k| first + k * step)
        .map_while(|ms| DateTime::from_timestamp_millis(ms).filter(|t| *t < to))
        .collect()
}

fn schedules_of(node: &SchedulerNode) -> RecurringSchedules {
    node.schedules().expect("the node serves its queue")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_fire_once_per_tick_on_three_nodes_pause_resume_and_catch_up() {
    let env = TestEnv::new("recurring", 6).await;
    let calls: Calls = Arc::default();
    let nodes = start_nodes(&env, &calls, "first").await;
    let schedules = schedules_of(&nodes[0]);
    let ids = ["skip", "once", "all", "paused"];
    for (id, catch_up) in [
        ("skip", CatchUp::Skip),
        ("once", CatchUp::Once),
        ("all", CatchUp::All),
        ("paused", CatchUp::Once),
    ] {
        schedules.create(spec(id, catch_up)).await.expect("created");
    }
    let created = Utc::now();
    // Declared again by another node (a service declaring its schedules at each start):
    // nothing changes.
    let again = schedules_of(&nodes[2])
        .create(spec("skip", CatchUp::Skip))
        .await;
    assert_eq!(
        again.expect("again").revision,
        schedules
            .get("skip")
            .await
            .expect("read")
            .expect("exists")
            .revision
    );

    tokio::time::sleep(Duration::from_secs(8)).await;
    let paused_at = Utc::now();
    schedules_of(&nodes[1])
        .pause("paused")
        .await
        .expect("paused");
    tokio::time::sleep(Duration::from_secs(8)).await;
    let resumed_at = Utc::now();
    schedules.resume("paused").await.expect("resumed");
    tokio::time::sleep(Duration::from_secs(14)).await;

    // Every node down for 10 s.
    stop(nodes).await;
    let down_from = Utc::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let down_until = Utc::now();
    let nodes = start_nodes(&env, &calls, "second").await;
    let back = Utc::now();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let end = Utc::now();
    let schedules = schedules_of(&nodes[0]);
    let mut fires = BTreeMap::new();
    for id in ids {
        fires.insert(id, schedules.fires(id, 100).await.expect("fires"));
    }
    let listed = schedules.list().await.expect("list");
    stop(nodes).await;

    let runs = runs(&calls);
    let nodes_used: std::collections::BTreeSet<String> = (calls.lock())
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(_, _, node)| node.clone())
        .collect();
    println!("runs on nodes {nodes_used:?}");
    // Each tick runs exactly once.
    for (id, times) in &runs {
        for (fire, n) in times {
            assert_eq!(*n, 1, "schedule {id}: fire time {fire} ran {n} times");
            assert_eq!(
                fire.timestamp_millis() % 2000,
                0,
                "{id}: {fire} is off the cadence"
            );
        }
    }
    let ran = |id: &str, t: &DateTime<Utc>| runs.get(id).is_some_and(|r| r.contains_key(t));
    // While up: every fire time from the creation until the nodes stopped ran (the last
    // second before the stop may or may not have).
    let up = fire_times(created, down_from - TimeDelta::seconds(4));
    assert!(up.len() >= 12, "{} fire times while up", up.len());
    for id in ["skip", "once", "all"] {
        for t in &up {
            assert!(ran(id, t), "schedule {id}: fire time {t} did not run");
        }
    }
    // Paused: nothing between the pause's next fire time and the resume; all else ran.
    for t in &up {
        let held = *t > paused_at + TimeDelta::seconds(2) && *t < resumed_at;
        let before_or_after = *t < paused_at || *t > resumed_at + TimeDelta::seconds(2);
        if held {
            assert!(!ran("paused", t), "paused schedule ran {t}");
        } else if before_or_after {
            assert!(
                ran("paused", t),
                "schedule paused: fire time {t} did not run"
            );
        }
    }
    // Down: the fire times no node was up for.
    let missed = fire_times(down_from, down_until);
    assert!(missed.len() >= 4, "{missed:?}");
    let (first_missed, last_missed) = (missed[0], missed[missed.len() - 1]);
    // The late tick's record of what it passed over: (first, last, count).
    let passed_over = |id: &str| {
        let ranges: Vec<_> = fires[id]
            .iter()
            .filter_map(|f| match f.outcome {
                FireOutcome::Missed { count, last } => Some((f.fire_time, last, count)),
                _ => None,
            })
            .collect();
        assert!(ranges.len() <= 1, "schedule {id}: {ranges:?}");
        ranges.first().copied()
    };
    // all: every one of them ran, once the nodes were back; nothing passed over.
    for t in &missed {
        assert!(ran("all", t), "catch-up all: {t} did not run");
    }
    assert_eq!(passed_over("all"), None);
    // skip: none of them ran (nor any other fire time the late tick passed over).
    let (first, last, count) = passed_over("skip").expect("skip recorded what it passed over");
    assert!(
        first <= first_missed && last >= last_missed,
        "skip passed over {first}..{last}"
    );
    assert_eq!(
        count as usize,
        fire_times(
            first - TimeDelta::milliseconds(1),
            last + TimeDelta::milliseconds(1)
        )
        .len()
    );
    let skipped_ran: Vec<_> = runs["skip"]
        .keys()
        .filter(|t| **t >= first && **t <= last)
        .collect();
    assert!(skipped_ran.is_empty(), "catch-up skip ran {skipped_ran:?}");
    // once: one run, for the latest of them (the fire time after the range it passed over).
    let (first, last, _) = passed_over("once").expect("once recorded what it passed over");
    let once = last + TimeDelta::seconds(2);
    assert!(
        first <= first_missed && once >= last_missed,
        "once passed over {first}..{last}"
    );
    let once_ran: Vec<_> = runs["once"]
        .keys()
        .filter(|t| **t >= first && **t <= once)
        .collect();
    assert_eq!(once_ran, vec![&once], "catch-up once");
    // And every schedule goes on, on time, once the nodes are back.
    let after = fire_times(back + TimeDelta::seconds(2), end - TimeDelta::seconds(2));
    assert!(!after.is_empty());
    for id in ids {
        for t in &after {
            assert!(
                ran(id, t),
                "schedule {id}: fire time {t} after the restart did not run"
            );
        }
    }
    assert_eq!(listed.len(), 4);
    assert!(listed
        .iter()
        .all(|s| !s.paused && s.next_fire.is_some_and(|n| n > end - TimeDelta::seconds(4))));
}
