//! Groups and their join against the real stack: a group of 200 members over 50 orderingIds on
//! two nodes joins once with every outcome and result; a fail-fast group's first failure cancels
//! the members not yet run and joins at once; and a node process killed mid-group does not stop
//! the join from running exactly once.

use std::collections::BTreeSet;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use it_tests::engine::{wait_until, TestEnv};
use it_tests::processes::{node_command, owned_partitions, process_log};
use scheduler_client::{partition_for, GroupMember, Task, TaskKey};
use scheduler_core::store::StatusStore;
use scheduler_core::{
    GroupOutcome, SchedulerNode, TaskContext, TaskError, TaskHandler, TaskStatus,
};
use serde_json::json;
use tokio::sync::Mutex as AsyncMutex;

/// Serialises the tests of this file (each runs two nodes).
static ONE_AT_A_TIME: AsyncMutex<()> = AsyncMutex::const_new(());

const TYPE: &str = "recon";

/// Every member call (node, task, end) and every join call (node, join task, group, start).
#[derive(Default, Clone)]
struct Log {
    members: Vec<(String, TaskKey, DateTime<Utc>)>,
    joins: Vec<(String, TaskKey, GroupOutcome, DateTime<Utc>)>,
}

/// A member sets `{"i": index}` as its result; one whose data says `fail` is invalid.
#[derive(Clone)]
struct Recon {
    node: String,
    log: Arc<Mutex<Log>>,
}

impl TaskHandler for Recon {
    async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        // `spawn: n` sub-tasks on orderingIds of their own; `grandchildren: m` more under
        // every tenth of them.
        let count = |field: &str| task.task_data.get(field).and_then(|v| v.as_u64());
        if let Some(n) = count("spawn") {
            for i in 0..n {
                let mut data = serde_json::Map::new();
                if i % 10 == 0 {
                    if let Some(m) = count("grandchildren") {
                        data.insert("spawn".into(), json!(m));
                    }
                }
                let at = task.scheduled_time + TimeDelta::milliseconds(500);
                let child =
                    Task::new(format!("{}.{i}", task.ordering_id), at, "sub", data).of_type(TYPE);
                ctx.spawn(child)
                    .map_err(|e| TaskError::invalid(e.to_string()))?;
            }
        }
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.members
            .push((self.node.clone(), task.key(), Utc::now()));
        if task.task_data.get("fail").is_some() {
            return Err(TaskError::invalid("record set unreadable"));
        }
        let index = task.group.as_ref().map_or(0, |g| g.index);
        ctx.set_result(json!({ "i": index }))
            .map_err(|e| TaskError::invalid(e.to_string()))
    }

    async fn group_finished(
        &self,
        task: &Task,
        group: &GroupOutcome,
        _: &TaskContext,
    ) -> Result<(), TaskError> {
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        let at = Utc::now();
        log.joins
            .push((self.node.clone(), task.key(), group.clone(), at));
        Ok(())
    }
}

async fn start(env: &TestEnv, node: &str, log: &Arc<Mutex<Log>>) -> SchedulerNode {
    let recon = Recon {
        node: node.to_string(),
        log: Arc::clone(log),
    };
    SchedulerNode::builder(env.settings(TestEnv::quick_scheduling()))
        .handler(TYPE, recon)
        .start()
        .await
        .expect("node starts")
}

/// Member `index` of group `id` on `ordering_id` at `at`; the last member carries the total.
fn member(id: &str, index: u32, total: u32, ordering_id: &str, at: DateTime<Utc>) -> Task {
    let mut group = GroupMember::new(id, index);
    if index == total {
        group = group.of(total);
    }
    Task::new(ordering_id, at, format!("m{index}"), Default::default())
        .of_type(TYPE)
        .in_group(group)
}

fn snapshot(log: &Arc<Mutex<Log>>) -> Log {
    log.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

async fn schedule_all(env: &TestEnv, tasks: &[Task]) {
    let producer = env.scheduler(Duration::from_secs(10));
    for task in tasks {
        producer
            .schedule_task(task.clone())
            .await
            .expect("scheduled");
    }
}

fn joins_of(log: &Arc<Mutex<Log>>) -> usize {
    log.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .joins
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_200_over_50_ordering_ids_on_two_nodes_joins_once_with_every_outcome() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new("groups_200", 4).await;
    let log = Arc::new(Mutex::new(Log::default()));
    let a = start(&env, "a", &log).await;
    let b = start(&env, "b", &log).await;
    wait_until(
        Duration::from_secs(40),
        "the nodes to split the partitions",
        || {
            let (x, y) = (a.owned_partitions(), b.owned_partitions());
            !x.is_empty() && !y.is_empty() && x.len() + y.len() == 4
        },
    )
    .await;
    // 200 members over 50 orderingIds, due over four seconds; only the last knows the total.
    let first = Utc::now() + TimeDelta::seconds(2);
    let members: Vec<Task> = (1..=200u32)
        .map(|i| {
            let at = first + TimeDelta::milliseconds(20 * i64::from(i));
            member("recon-200", i, 200, &format!("acct-{}", i % 50), at)
        })
        .collect();
    schedule_all(&env, &members).await;
    wait_until(Duration::from_secs(60), "the join to run", || {
        joins_of(&log) >= 1
    })
    .await;
    // Time for a second join to show, were one triggered and admitted.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let log = snapshot(&log);
    assert_eq!(
        log.joins.len(),
        1,
        "one join: {:?}",
        log.joins.iter().map(|j| &j.1).collect::<Vec<_>>()
    );
    let (_, join, group, joined_at) = &log.joins[0];
    assert_eq!(join.ordering_id, "recon-200");
    assert_eq!(group.total, Some(200));
    assert_eq!(group.failed_by, None);
    assert_eq!(group.members.len(), 200, "every member's outcome");
    for outcome in &group.members {
        assert_eq!(outcome.status, TaskStatus::Completed, "{outcome:?}");
        assert_eq!(outcome.result, Some(json!({ "i": outcome.index })));
        assert_eq!(outcome.key, members[outcome.index as usize - 1].key());
    }
    let ran: BTreeSet<&TaskKey> = log.members.iter().map(|(_, k, _)| k).collect();
    assert_eq!(ran.len(), 200);
    let last_member = log
        .members
        .iter()
        .map(|(_, _, at)| *at)
        .max()
        .expect("members ran");
    assert!(*joined_at >= last_member, "the join ran after every member");
    let nodes: BTreeSet<&str> = log.members.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(nodes.len(), 2, "both nodes ran members");
    // The result is stored with each member's status too.
    let store = env.store().await;
    let key = members[41].key();
    let partition = partition_for(&key.ordering_id, env.partitions);
    let status = store
        .status(partition, key)
        .await
        .expect("status read")
        .expect("status");
    assert_eq!(status.result, Some(json!({ "i": 42 })));
    a.shutdown().await.expect("shutdown a");
    b.shutdown().await.expect("shutdown b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_fast_groups_first_failure_cancels_the_pending_rest_and_joins_at_once() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new("groups_ff", 2).await;
    let log = Arc::new(Mutex::new(Log::default()));
    let node = env
        .owning_every_partition(start(&env, "solo", &log).await)
        .await;
    // Members 1 to 3 are due soon and member 3 fails; 4 to 20 are due 8 s later.
    let soon = Utc::now() + TimeDelta::seconds(2);
    let later = soon + TimeDelta::seconds(8);
    let members: Vec<Task> = (1..=20u32)
        .map(|i| {
            let at = if i <= 3 { soon } else { later };
            let mut task = member("ff", i, 20, &format!("acct-{i}"), at);
            task.group = task.group.map(GroupMember::fail_fast);
            if i == 3 {
                task.task_data.insert("fail".into(), json!(true));
            }
            task
        })
        .collect();
    schedule_all(&env, &members).await;
    wait_until(Duration::from_secs(30), "the join to run", || {
        joins_of(&log) >= 1
    })
    .await;
    let joined_at = log.lock().unwrap_or_else(PoisonError::into_inner).joins[0].3;
    assert!(
        joined_at < later,
        "joined at once, not when the rest came due"
    );
    // Past the rest's time: they are cancelled, not run.
    let store = env.store().await;
    let pending: Vec<TaskKey> = members[3..].iter().map(Task::key).collect();
    let partitions = env.partitions;
    let status_of = |key: TaskKey| {
        let store = store.clone();
        async move {
            let partition = partition_for(&key.ordering_id, partitions);
            store.status(partition, key).await.expect("status read")
        }
    };
    let deadline = later + TimeDelta::seconds(10);
    loop {
        let mut cancelled = 0;
        for key in &pending {
            if status_of(key.clone()).await.map(|s| s.status) == Some(TaskStatus::Cancelled) {
                cancelled += 1;
            }
        }
        if cancelled == pending.len() {
            break;
        }
        assert!(
            Utc::now() < deadline,
            "{cancelled} of {} cancelled",
            pending.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let cancelled = status_of(pending[0].clone()).await.expect("status");
    assert!(cancelled
        .last_error
        .as_deref()
        .unwrap_or_default()
        .contains("member 3 failed"));
    let log = snapshot(&log);
    let ran: BTreeSet<&TaskKey> = log.members.iter().map(|(_, k, _)| k).collect();
    let expected: BTreeSet<TaskKey> = members[..3].iter().map(Task::key).collect();
    assert_eq!(ran, expected.iter().collect(), "only members 1 to 3 ran");
    assert_eq!(log.joins.len(), 1, "one join");
    let group = &log.joins[0].2;
    assert_eq!(group.failed_by, Some(3));
    let failed = group
        .members
        .iter()
        .find(|m| m.index == 3)
        .expect("member 3");
    assert_eq!(failed.status, TaskStatus::Dropped);
    assert_eq!(failed.error.as_deref(), Some("record set unreadable"));
    node.shutdown().await.expect("shutdown");
}

fn node_process(env: &TestEnv, dir: &std::path::Path, name: &str) -> Child {
    node_command(env!("CARGO_BIN_EXE_chaos-node"), env, dir, name)
        .env("CHAOS_WORK_MS", "40")
        .env("CHAOS_TRACE", dir.join(format!("{name}.log")))
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"))
}

/// The join lines of both node processes.
fn join_lines(dir: &std::path::Path) -> Vec<serde_json::Value> {
    ["a", "b"]
        .iter()
        .flat_map(|name| process_log(dir, name))
        .filter(|line| line.get("join_of").is_some())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_process_killed_mid_group_does_not_stop_the_join_from_running_exactly_once() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new("groups_kill", 4).await;
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&env.topic);
    std::fs::create_dir_all(&dir).expect("log dir");
    let mut a = node_process(&env, &dir, "a");
    let mut b = node_process(&env, &dir, "b");
    let owned = |name: &str| owned_partitions(&dir, name);
    // Their start includes migrating a fresh keyspace, which took over a minute on the dev
    // stack's Cassandra 2.1 while other tests changed schemas.
    wait_until(
        Duration::from_secs(150),
        "the two processes to split the partitions",
        || owned("a") > 0 && owned("b") > 0 && owned("a") + owned("b") == 4,
    )
    .await;
    // 200 members over 50 orderingIds, due over eight seconds.
    let first = Utc::now() + TimeDelta::seconds(2);
    let producer = env.scheduler(Duration::from_secs(10));
    for i in 1..=200u32 {
        let at = first + TimeDelta::milliseconds(40 * i64::from(i));
        let task = member("recon-kill", i, 200, &format!("acct-{}", i % 50), at);
        producer.schedule_task(task).await.expect("scheduled");
    }
    // Mid-group: some members ran, many are still due.
    let ran_members = |dir: &std::path::Path| {
        ["a", "b"]
            .iter()
            .flat_map(|name| process_log(dir, name))
            .filter(|l| l.get("uniqueness_key").is_some())
            .count()
    };
    wait_until(
        Duration::from_secs(30),
        "a fifth of the members to run",
        || ran_members(&dir) >= 40,
    )
    .await;
    let status = Command::new("kill")
        .args(["-KILL", &a.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let _ = a.wait();
    assert!(ran_members(&dir) < 200, "killed mid-group");
    wait_until(
        Duration::from_secs(90),
        "the join to run on the surviving node",
        || !join_lines(&dir).is_empty(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let joins = join_lines(&dir);
    let _ = Command::new("kill")
        .args(["-TERM", &b.id().to_string()])
        .status();
    let _ = b.wait();
    assert_eq!(joins.len(), 1, "exactly one join: {joins:?}");
    let join = &joins[0];
    assert_eq!(join["node"], "b");
    assert_eq!(join["members"], 200);
    assert_eq!(join["total"], 200);
    assert_eq!(join["results"], 200, "every member's result");
    let statuses = join["statuses"].as_array().expect("statuses");
    assert!(statuses.iter().all(|s| s == "completed"), "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_spawning_100_children_two_levels_deep_is_joined_once_after_them() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new("groups_sub", 4).await;
    let log = Arc::new(Mutex::new(Log::default()));
    let node = env
        .owning_every_partition(start(&env, "solo", &log).await)
        .await;
    // 100 children over 100 orderingIds (every partition); every tenth spawns 5 of its own.
    let mut parent = Task::new(
        "recon-system-x",
        Utc::now() + TimeDelta::seconds(1),
        "parent",
        Default::default(),
    )
    .of_type(TYPE);
    parent.task_data.insert("spawn".into(), json!(100));
    parent.task_data.insert("grandchildren".into(), json!(5));
    env.scheduler(Duration::from_secs(10))
        .schedule_task(parent.clone())
        .await
        .expect("scheduled");
    wait_until(Duration::from_secs(90), "the parent's join", || {
        snapshot(&log)
            .joins
            .iter()
            .any(|(_, _, g, _)| g.parent.as_ref().map(Task::key) == Some(parent.key()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let log = snapshot(&log);
    // The parent, 100 children, 10 x 5 grandchildren, each run once.
    let ran: Vec<&TaskKey> = log.members.iter().map(|(_, k, _)| k).collect();
    let distinct: BTreeSet<&TaskKey> = ran.iter().copied().collect();
    assert_eq!(distinct.len(), 1 + 100 + 50);
    let partitions: BTreeSet<i32> = (distinct.iter())
        .map(|k| partition_for(&k.ordering_id, env.partitions))
        .collect();
    assert_eq!(partitions.len(), 4, "children on every partition");
    // A join per task with sub-tasks (10 children, the parent), each once.
    assert_eq!(
        log.joins.len(),
        11,
        "{:?}",
        log.joins.iter().map(|j| &j.1).collect::<Vec<_>>()
    );
    let parents: BTreeSet<TaskKey> = (log.joins.iter())
        .filter_map(|(_, _, g, _)| g.parent.as_ref().map(Task::key))
        .collect();
    assert_eq!(parents.len(), 11, "one join per parent");
    // Each join after its children: their last execution, and their own joins.
    for (_, join, group, joined_at) in &log.joins {
        let parent = group.parent.as_ref().expect("a parent");
        let prefix = format!("{}.", parent.ordering_id);
        let children_done = (log.members.iter())
            .filter(|(_, k, _)| k.ordering_id.starts_with(&prefix))
            .map(|(_, _, at)| *at)
            .max()
            .expect("children ran");
        assert!(
            *joined_at >= children_done,
            "{join:?} joined before its children finished"
        );
        let expected = if parent.ordering_id == "recon-system-x" {
            100
        } else {
            5
        };
        assert_eq!(group.members.len(), expected);
        assert!(group
            .members
            .iter()
            .all(|m| m.status == TaskStatus::Completed));
    }
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_tasks_of_a_parent_run_long_after_its_time_are_enqueued_and_joined() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new("groups_late", 2).await;
    let log = Arc::new(Mutex::new(Log::default()));
    let node = env
        .owning_every_partition(start(&env, "solo", &log).await)
        .await;
    // A parent a minute overdue (a backlog, a resumed suspension): its sub-tasks are due at its
    // time, far beyond a producer's grace window; the engine enqueues them all the same.
    let mut parent = Task::new(
        "late-parent",
        Utc::now() - TimeDelta::seconds(60),
        "parent",
        Default::default(),
    )
    .of_type(TYPE);
    parent.task_data.insert("spawn".into(), json!(3));
    env.scheduler(Duration::from_secs(120))
        .schedule_task(parent.clone())
        .await
        .expect("scheduled");
    wait_until(Duration::from_secs(30), "the parent's join", || {
        snapshot(&log)
            .joins
            .iter()
            .any(|(_, _, g, _)| g.parent.as_ref().map(Task::key) == Some(parent.key()))
    })
    .await;
    let log = snapshot(&log);
    assert_eq!(
        log.members.len(),
        1 + 3,
        "the parent and its 3 sub-tasks ran"
    );
    node.shutdown().await.expect("shutdown");
}
