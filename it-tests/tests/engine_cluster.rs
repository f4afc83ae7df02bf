//! The engine across node restarts and between two nodes of one group, against the real stack.
//! These tests run one at a time (they start several nodes each).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use it_tests::engine::{by_task, executions, most_at_once, task, wait_until, Recorder, TestEnv};
use scheduler_client::Task;
use scheduler_core::store::OwnershipStore;
use scheduler_core::SchedulerNode;
use tokio::sync::Mutex as AsyncMutex;

/// Serialises the tests of this file.
static ONE_AT_A_TIME: AsyncMutex<()> = AsyncMutex::const_new(());

async fn start(
    env: &TestEnv,
    name: &str,
    log: &Arc<Mutex<Vec<it_tests::engine::Execution>>>,
) -> SchedulerNode {
    SchedulerNode::start(
        env.settings(TestEnv::quick_scheduling()),
        Recorder::new(name, log, Duration::from_millis(2)),
    )
    .await
    .expect("node starts")
}

fn owned(node: &SchedulerNode) -> BTreeSet<i32> {
    node.owned_partitions().into_iter().collect()
}

async fn wait_for_split(a: &SchedulerNode, b: &SchedulerNode, partitions: u32) {
    let all: BTreeSet<i32> = (0..partitions as i32).collect();
    wait_until(
        Duration::from_secs(30),
        "the two nodes to split the partitions",
        || {
            let (x, y) = (owned(a), owned(b));
            !x.is_empty() && !y.is_empty() && x.is_disjoint(&y) && &x | &y == all
        },
    )
    .await;
}

/// The store's ownership table (what `GET /api/v1/partitions` and the dashboard show) names,
/// for each partition, the node that runs it.
async fn owners_are(env: &TestEnv, nodes: &[&SchedulerNode]) {
    let store = env.store().await;
    let expected: BTreeMap<i32, String> = (nodes.iter())
        .flat_map(|n| owned(n).into_iter().map(|p| (p, n.id().to_string())))
        .collect();
    let mut claims = BTreeMap::new();
    // A tree records its claim as it starts: the table may trail the assignment a moment.
    for _ in 0..50 {
        claims = (store.owners().await.expect("owners read").into_iter())
            .filter_map(|o| Some((o.partition, o.owner?)))
            .collect();
        if claims == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        claims, expected,
        "the owners' table names each partition's node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_task_survives_shutdown_and_runs_at_once_on_the_next_node() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new("it_survive", 4).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let first = start(&env, "first", &log).await;
    wait_until(
        Duration::from_secs(30),
        "the first node to own every partition",
        || owned(&first).len() == 4,
    )
    .await;
    let pending = task("survivor", Utc::now() + TimeDelta::seconds(5), "1");
    env.scheduler(Duration::from_secs(10))
        .schedule_task(pending.clone())
        .await
        .expect("scheduled");
    // Persisted and committed within a poll; then the node goes away before the task is due.
    tokio::time::sleep(Duration::from_secs(2)).await;
    first.shutdown().await.expect("clean shutdown");
    let now = Utc::now();
    assert!(
        now < pending.scheduled_time,
        "the node stopped before the task was due"
    );

    // Start the next node once the task is overdue.
    tokio::time::sleep(
        (pending.scheduled_time - now).to_std().unwrap_or_default() + Duration::from_secs(2),
    )
    .await;
    let started = Utc::now();
    let second = start(&env, "second", &log).await;
    wait_until(Duration::from_secs(30), "the overdue task to run", || {
        !executions(&log).is_empty()
    })
    .await;
    let runs = executions(&log);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].node, "second");
    let after_start = runs[0].started - started;
    assert!(
        after_start < TimeDelta::seconds(10),
        "overdue task ran {after_start} after the node started"
    );
    second.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_node_hands_its_tasks_over_and_a_returning_one_takes_its_share_back() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new("it_handoff", 8).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let a = start(&env, "a", &log).await;
    let b = start(&env, "b", &log).await;
    wait_for_split(&a, &b, 8).await;
    owners_are(&env, &[&a, &b]).await;

    let scheduler = env.scheduler(Duration::from_secs(10));
    let base = Utc::now() + TimeDelta::seconds(2);
    let first_wave: Vec<Task> = (0..60)
        .map(|i| {
            task(
                &format!("order-{}", i % 30),
                base + TimeDelta::milliseconds(i * 150),
                &format!("w1-{i}"),
            )
        })
        .collect();
    for t in &first_wave {
        scheduler.schedule_task(t.clone()).await.expect("scheduled");
    }
    // Stop b midway through the wave: its pending tasks must run on a.
    wait_until(
        Duration::from_secs(30),
        "part of the first wave to run",
        || executions(&log).len() >= 15,
    )
    .await;
    let b_partitions = owned(&b);
    b.shutdown().await.expect("b shuts down cleanly");
    wait_until(
        Duration::from_secs(30),
        "a to take over every partition",
        || owned(&a).len() == 8,
    )
    .await;
    wait_until(
        Duration::from_secs(60),
        "the whole first wave to run",
        || {
            let runs = by_task(&log);
            first_wave.iter().all(|t| runs.contains_key(&t.key()))
        },
    )
    .await;
    let taken_over = executions(&log)
        .iter()
        .filter(|e| {
            e.node == "a"
                && b_partitions.contains(&scheduler_client::partition_for(&e.key.ordering_id, 8))
        })
        .count();
    assert!(taken_over > 0, "a ran tasks of b's former partitions");

    // b comes back: the partitions split again and new tasks run on both.
    let b_again = start(&env, "b-again", &log).await;
    wait_for_split(&a, &b_again, 8).await;
    owners_are(&env, &[&a, &b_again]).await;
    let base = Utc::now() + TimeDelta::seconds(1);
    let second_wave: Vec<Task> = (0..60)
        .map(|i| {
            task(
                &format!("order-{}", i % 30),
                base + TimeDelta::milliseconds(i * 20),
                &format!("w2-{i}"),
            )
        })
        .collect();
    for t in &second_wave {
        scheduler.schedule_task(t.clone()).await.expect("scheduled");
    }
    wait_until(
        Duration::from_secs(60),
        "the whole second wave to run",
        || {
            let runs = by_task(&log);
            second_wave.iter().all(|t| runs.contains_key(&t.key()))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = by_task(&log);
    for t in first_wave.iter().chain(&second_wave) {
        assert_eq!(
            runs[&t.key()].len(),
            1,
            "{} ran exactly once: {:?}",
            t.key(),
            runs[&t.key()]
        );
    }
    let nodes: BTreeSet<String> = second_wave
        .iter()
        .map(|t| runs[&t.key()][0].node.clone())
        .collect();
    assert_eq!(
        nodes,
        BTreeSet::from(["a".to_string(), "b-again".to_string()])
    );
    a.shutdown().await.expect("clean shutdown");
    b_again.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_tasks_over_five_hundred_ordering_ids_all_run_on_two_nodes() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new("it_volume", 8).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let a = start(&env, "a", &log).await;
    let b = start(&env, "b", &log).await;
    wait_for_split(&a, &b, 8).await;

    let scheduler = env.scheduler(Duration::from_secs(30));
    let base = Utc::now();
    let tasks: Vec<Task> = (0..10_000)
        .map(|i| {
            task(
                &format!("o{}", i % 500),
                base + TimeDelta::milliseconds(i / 2),
                &format!("t{i}"),
            )
        })
        .collect();
    let enqueue_started = Instant::now();
    for chunk in tasks.chunks(500) {
        let sends = chunk.iter().map(|t| scheduler.schedule_task(t.clone()));
        for result in futures::future::join_all(sends).await {
            result.expect("scheduled");
        }
    }
    let enqueued_in = enqueue_started.elapsed();
    wait_until(Duration::from_secs(240), "all 10,000 tasks to run", || {
        by_task(&log).len() == 10_000
    })
    .await;
    let total_in = enqueue_started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = executions(&log);
    let distinct = by_task(&log).len();
    let duplicates = runs.len() - distinct;
    let per_node = |n: &str| runs.iter().filter(|e| e.node == n).count();
    println!(
        "10,000 tasks: enqueued in {enqueued_in:.1?}, all run {total_in:.1?} after the first enqueue; \
         executions {} (a {}, b {}), distinct {distinct}, lost {}, duplicates {duplicates}",
        runs.len(),
        per_node("a"),
        per_node("b"),
        10_000 - distinct
    );
    assert_eq!(distinct, 10_000, "none lost");
    assert_eq!(duplicates, 0, "no task ran twice in a stable group");
    assert!(
        per_node("a") > 0 && per_node("b") > 0,
        "both nodes ran tasks"
    );
    a.shutdown().await.expect("clean shutdown");
    b.shutdown().await.expect("clean shutdown");
}

/// `key_concurrency` counts a key's calls on every node together (issue 33): forty tasks of
/// one tenant over forty orderingIds, spread over both nodes' partitions, never run more than
/// two at once between them, and another tenant's tasks run at their time meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_calls_on_both_nodes_together_stay_within_its_limit() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new("it_key_limit", 4).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let scheduling = scheduler_core::settings::SchedulingSettings {
        key_concurrency: Some(2),
        ..TestEnv::quick_scheduling()
    };
    let start_limited = |name: &'static str| {
        SchedulerNode::start(
            env.settings(scheduling.clone()),
            Recorder::new(name, &log, Duration::from_millis(300)),
        )
    };
    let a = start_limited("a").await.expect("node starts");
    let b = start_limited("b").await.expect("node starts");
    wait_for_split(&a, &b, 4).await;

    let scheduler = env.scheduler(Duration::from_secs(30));
    let at = Utc::now() + TimeDelta::seconds(2);
    let flood: Vec<Task> = (0..40)
        .map(|i| task(&format!("k{i}"), at, &format!("k{i}")).with_limit_key("tenant-k"))
        .collect();
    let other: Vec<Task> = (0..6)
        .map(|i| {
            let due = at + TimeDelta::milliseconds(500 * i);
            task(&format!("o{i}"), due, &format!("o{i}")).with_limit_key("tenant-o")
        })
        .collect();
    let all: Vec<Task> = flood.iter().chain(&other).cloned().collect();
    for result in
        futures::future::join_all(all.iter().map(|t| scheduler.schedule_task(t.clone()))).await
    {
        result.expect("scheduled");
    }
    wait_until(Duration::from_secs(60), "all 46 tasks to run", || {
        by_task(&log).len() == all.len()
    })
    .await;
    let runs = executions(&log);
    let by_node = |n: &str| {
        let keys: BTreeSet<_> = flood.iter().map(Task::key).collect();
        runs.iter()
            .filter(|r| r.node == n && keys.contains(&r.key))
            .count()
    };
    let k_most = most_at_once(&runs, |t| t.limit_key.as_deref() == Some("tenant-k"), &all);
    let lateness: Vec<i64> = (other.iter())
        .filter_map(|t| {
            let run = runs.iter().find(|r| r.key == t.key())?;
            Some((run.started - t.scheduled_time).num_milliseconds())
        })
        .collect();
    println!(
        "tenant-k: at most {k_most} at once (a ran {}, b {}); tenant-o lateness {lateness:?} ms",
        by_node("a"),
        by_node("b")
    );
    assert_eq!(
        k_most, 2,
        "two of k's calls at once across the nodes, never more"
    );
    assert!(
        lateness.iter().all(|ms| *ms < 2_000),
        "tenant-o's tasks are not held up by k's backlog: {lateness:?}"
    );
    a.shutdown().await.expect("clean shutdown");
    b.shutdown().await.expect("clean shutdown");
}
