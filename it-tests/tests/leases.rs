//! One run at a time per orderingId across rebalances, against the real stack: a 20 s call that
//! outlives its partition's drain keeps its orderingId leased, so no other tree (on this node or
//! the next) starts that orderingId's tasks until the call is over.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use it_tests::engine::{task, wait_until, TestEnv};
use scheduler_core::settings::SchedulingSettings;
use scheduler_core::store::StatusStore;
use scheduler_core::{SchedulerNode, Task, TaskContext, TaskError, TaskHandler};

/// One call: which node, which task, when it started and when it returned or was dropped.
#[derive(Debug, Clone)]
struct Call {
    node: &'static str,
    task: String,
    ordering_id: String,
    started: DateTime<Utc>,
    ended: Option<DateTime<Utc>>,
}

type Calls = Arc<Mutex<Vec<Call>>>;

/// Records each call's start at once and its end when it returns or is dropped (a node that
/// shuts down drops the calls still running).
#[derive(Clone)]
struct Tracker {
    node: &'static str,
    calls: Calls,
}

struct EndOnDrop {
    calls: Calls,
    index: usize,
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(call) = calls.get_mut(self.index) {
            call.ended = Some(Utc::now());
        }
    }
}

impl TaskHandler for Tracker {
    async fn execute(&self, task: &Task, _ctx: &TaskContext) -> Result<(), TaskError> {
        let index = {
            let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
            calls.push(Call {
                node: self.node,
                task: task.uniqueness_key.clone(),
                ordering_id: task.ordering_id.clone(),
                started: Utc::now(),
                ended: None,
            });
            calls.len() - 1
        };
        let _end = EndOnDrop {
            calls: Arc::clone(&self.calls),
            index,
        };
        let work = if task.ordering_id == "long" && task.uniqueness_key == "1" {
            Duration::from_secs(20)
        } else {
            Duration::from_millis(50)
        };
        tokio::time::sleep(work).await;
        Ok(())
    }
}

fn calls(calls: &Calls) -> Vec<Call> {
    calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Pairs of calls of one orderingId that ran at the same time (a call still running counts as
/// running until now).
fn overlaps(calls: &[Call]) -> Vec<(Call, Call)> {
    let now = Utc::now();
    let mut found = Vec::new();
    for (i, a) in calls.iter().enumerate() {
        for b in &calls[i + 1..] {
            let (a_end, b_end) = (a.ended.unwrap_or(now), b.ended.unwrap_or(now));
            if a.ordering_id == b.ordering_id && a.started < b_end && b.started < a_end {
                found.push((a.clone(), b.clone()));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20s_task_never_overlaps_itself_while_its_node_rebalances_and_then_leaves() {
    let env = TestEnv::new("it_leases", 4).await;
    let log: Calls = Arc::new(Mutex::new(Vec::new()));
    // Engine defaults: the drain gives up after 10 s, leases live 10 s without renewal.
    let settings = || env.settings(SchedulingSettings::default());
    let first = env
        .start_sole_node(
            settings(),
            Tracker {
                node: "first",
                calls: Arc::clone(&log),
            },
        )
        .await;
    let now = Utc::now();
    let tasks = [
        task("long", now, "1"),
        task("long", now + TimeDelta::milliseconds(500), "2"),
        task("other", now + TimeDelta::seconds(2), "1"),
    ];
    let scheduler = env.scheduler(Duration::from_secs(10));
    for t in &tasks {
        scheduler.schedule_task(t.clone()).await.expect("enqueue");
    }
    wait_until(Duration::from_secs(20), "the long call to start", || {
        calls(&log)
            .iter()
            .any(|c| c.task == "1" && c.ordering_id == "long")
    })
    .await;

    // A second node joins: the first node's drain times out with the long call still running.
    let second = SchedulerNode::start(
        settings(),
        Tracker {
            node: "second",
            calls: Arc::clone(&log),
        },
    )
    .await
    .expect("second node starts");
    wait_until(
        Duration::from_secs(60),
        "the partitions to be split",
        || !first.owned_partitions().is_empty() && !second.owned_partitions().is_empty(),
    )
    .await;
    // Then the first node leaves, while the long call may still be running.
    first.shutdown().await.expect("first node stops");

    let store = env.store().await;
    for t in &tasks {
        let key = t.key();
        let partition = scheduler
            .partition_count()
            .await
            .map(|n| scheduler_client::partition_for(&key.ordering_id, n))
            .expect("partition count");
        let mut done = false;
        for _ in 0..1200 {
            if store
                .status(partition, key.clone())
                .await
                .expect("status read")
                .is_some()
            {
                done = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(done, "{key} finished; calls: {:#?}", calls(&log));
    }
    second.shutdown().await.expect("second node stops");
    let all = calls(&log);
    let overlapping = overlaps(&all);
    assert!(
        overlapping.is_empty(),
        "calls of one orderingId ran at the same time: {overlapping:#?}"
    );
    for c in all.iter().filter(|c| c.ordering_id == "long") {
        println!(
            "long/{} on {}: {} → {:?}",
            c.task, c.node, c.started, c.ended
        );
    }
}
