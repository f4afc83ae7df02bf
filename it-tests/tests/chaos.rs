//! The chaos test: three node processes under a steady stream of tasks while a node is killed
//! and restarted, the broker and Cassandra are restarted, and a node is paused past the group
//! session timeout. Afterwards every accepted task must have run, none before its time, no two
//! executions of one orderingId may overlap while both nodes owned the partition, every
//! duplicate must be explained by a fault, and the paused node's late work must be fenced.
//!
//! It restarts the shared stack's services, so it lives in its own test binary (cargo runs test
//! binaries one at a time) and is the only test in it.
//!
//! (Over 400 lines: the run and its checks are one scenario, read top to bottom; the node
//! process it drives is `src/bin/chaos-node.rs`.)

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use it_tests::engine::TestEnv;
use it_tests::processes::node_command;
use it_tests::{dev_stack, RestartStackOnDrop};
use scheduler_client::{partition_for, Task, TaskKey};

const PARTITIONS: u32 = 6;
const ORDERING_IDS: usize = 150;
/// Tasks scheduled per producer tick (every 50 ms).
const PER_TICK: usize = 2;
const PRODUCE_FOR: Duration = Duration::from_secs(70);
/// How long after a fault ends its consequences may still play out: the rebalance it causes
/// follows within the group session timeout (6 s).
const FAULT_AFTERMATH_MS: i64 = 10_000;

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .unwrap_or_else(|e| panic!("kill -{name}: {e}"));
    assert!(status.success(), "kill -{name} failed");
}

/// A fault and when it lasted (ms since the epoch).
#[derive(Debug, Clone)]
struct Fault {
    what: &'static str,
    from_ms: i64,
    to_ms: i64,
}

struct Nodes {
    env: TestEnv,
    dir: PathBuf,
    children: HashMap<String, Child>,
}

impl Nodes {
    fn start(&mut self, name: &str) {
        let child = node_command(env!("CARGO_BIN_EXE_chaos-node"), &self.env, &self.dir, name)
            .env("CHAOS_TRACE", self.dir.join(format!("{name}.log")))
            .env("CHAOS_WORK_MS", "20")
            .env("SCHEDULER__SCHEDULING__DRAIN_TIMEOUT", "5s")
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.children.insert(name.to_string(), child);
    }

    fn child(&self, name: &str) -> &Child {
        self.children
            .get(name)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    fn kill(&mut self, name: &str) {
        if let Some(mut child) = self.children.remove(name) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn stop_all(&mut self) {
        for (name, child) in &mut self.children {
            signal(child, "TERM");
            let deadline = Instant::now() + Duration::from_secs(30);
            while child.try_wait().ok().flatten().is_none() {
                assert!(Instant::now() < deadline, "{name} did not stop");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.children.clear();
    }

    /// Every line of every node's log.
    fn lines(&self) -> Vec<serde_json::Value> {
        let mut lines = Vec::new();
        let logs = std::fs::read_dir(&self.dir).into_iter().flatten().flatten();
        for entry in logs.filter(|e| e.path().extension().is_some_and(|x| x == "jsonl")) {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            lines.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
        }
        lines
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in self.children.values_mut() {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[derive(Debug, Clone)]
struct Execution {
    node: String,
    key: TaskKey,
    partition: i32,
    start_ms: i64,
    end_ms: i64,
}

fn executions(lines: &[serde_json::Value]) -> Vec<Execution> {
    lines
        .iter()
        .filter(|l| l.get("start_ms").is_some())
        .map(|l| {
            let text = |k: &str| l[k].as_str().unwrap_or_default().to_string();
            let int = |k: &str| l[k].as_i64().unwrap_or_default();
            let ordering_id = text("ordering_id");
            Execution {
                node: text("node"),
                partition: partition_for(&ordering_id, PARTITIONS),
                key: TaskKey {
                    scheduled_time: chrono::DateTime::from_timestamp_millis(int("scheduled_ms"))
                        .unwrap_or_default(),
                    ordering_id,
                    uniqueness_key: text("uniqueness_key"),
                },
                start_ms: int("start_ms"),
                end_ms: int("end_ms"),
            }
        })
        .collect()
}

/// How late a node may log a partition it gained (it polls its own view every 10 ms).
const OWNERSHIP_LOG_SLACK_MS: i64 = 200;

/// Per partition, when each node gained it, in time order (from the nodes' logged views). The
/// owner at a moment is the node that gained it last: a node paused past the session timeout
/// still believes it owns its partitions, but another node gained them meanwhile.
fn gains(lines: &[serde_json::Value]) -> HashMap<i32, Vec<(i64, String)>> {
    let mut events: Vec<(i64, String, HashSet<i32>)> = lines
        .iter()
        .filter_map(|l| {
            let owned = l.get("owned")?.as_array()?;
            Some((
                l["at_ms"].as_i64()?,
                l["node"].as_str()?.to_string(),
                owned
                    .iter()
                    .filter_map(|p| p.as_i64())
                    .map(|p| p as i32)
                    .collect(),
            ))
        })
        .collect();
    events.sort_by_key(|e| e.0);
    let mut current: HashMap<String, HashSet<i32>> = HashMap::new();
    let mut gains: HashMap<i32, Vec<(i64, String)>> = HashMap::new();
    for (at, node, owned) in events {
        let before = current
            .insert(node.clone(), owned.clone())
            .unwrap_or_default();
        for p in owned.difference(&before) {
            gains.entry(*p).or_default().push((at, node.clone()));
        }
    }
    gains
}

/// The node that owned `partition` at `at`.
fn owner_at(gains: &HashMap<i32, Vec<(i64, String)>>, partition: i32, at: i64) -> Option<&str> {
    gains
        .get(&partition)?
        .iter()
        .take_while(|(t, _)| *t <= at)
        .last()
        .map(|(_, n)| n.as_str())
}

/// Whether `node` owned `partition` at `at`, allowing for the delay of its own log line.
fn owned_by(gains: &HashMap<i32, Vec<(i64, String)>>, partition: i32, node: &str, at: i64) -> bool {
    owner_at(gains, partition, at) == Some(node)
        || gains.get(&partition).is_some_and(|list| {
            list.iter()
                .any(|(t, n)| n == node && *t > at && *t <= at + OWNERSHIP_LOG_SLACK_MS)
        })
}

#[test]
fn no_accepted_task_is_lost_through_kills_restarts_and_pauses() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let env = runtime.block_on(TestEnv::new("chaos", PARTITIONS));
    let dir = std::env::temp_dir().join(it_tests::unique_name("chaos_logs"));
    std::fs::create_dir_all(&dir).expect("log dir");
    let mut nodes = Nodes {
        env: env.clone(),
        dir,
        children: HashMap::new(),
    };
    // Create the schema before the nodes start, as an operator would: Cassandra can give two
    // nodes creating the same table at once different table ids, and then drops the loser's
    // writes when it restarts (see design.md, "Guarantees and failure modes").
    drop(runtime.block_on(env.store()));
    for name in ["node-1", "node-2", "node-3"] {
        nodes.start(name);
    }
    // Wait until the three nodes split the partitions.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let gains = gains(&nodes.lines());
        let now = Utc::now().timestamp_millis();
        let owners: Vec<Option<&str>> = (0..PARTITIONS as i32)
            .map(|p| owner_at(&gains, p, now))
            .collect();
        let distinct: HashSet<&str> = owners.iter().flatten().copied().collect();
        if distinct.len() == 3 && owners.iter().all(Option::is_some) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the three nodes never split the partitions"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The producer: a steady stream over many orderingIds, some due now, some seconds ahead.
    let accepted: Arc<Mutex<Vec<TaskKey>>> = Arc::default();
    let rejected = Arc::new(Mutex::new(0usize));
    let scheduler = Arc::new(env.scheduler(Duration::from_secs(10)));
    // The 2-second tasks: (due, partition), so a pause can be timed to catch one running.
    let slow: Arc<Mutex<Vec<(i64, i32)>>> = Arc::default();
    let producer = {
        let (accepted, rejected, scheduler, slow) = (
            accepted.clone(),
            rejected.clone(),
            scheduler.clone(),
            slow.clone(),
        );
        runtime.spawn(async move {
            let started = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            let mut sends = tokio::task::JoinSet::new();
            let mut n = 0usize;
            while started.elapsed() < PRODUCE_FOR {
                tick.tick().await;
                for _ in 0..PER_TICK {
                    let ahead =
                        TimeDelta::milliseconds(((n * 7919) % 5000) as i64 * (n % 2) as i64);
                    // Every tenth task works for 2 s, so a pause catches some mid-run.
                    let mut data = serde_json::Map::new();
                    let due = Utc::now() + ahead;
                    if n.is_multiple_of(10) {
                        data.insert("work_ms".into(), serde_json::json!(2000));
                        let ordering_id = format!("o-{}", n % ORDERING_IDS);
                        slow.lock().unwrap_or_else(PoisonError::into_inner).push((
                            due.timestamp_millis(),
                            partition_for(&ordering_id, PARTITIONS),
                        ));
                    }
                    let task = Task::new(
                        format!("o-{}", n % ORDERING_IDS),
                        due,
                        format!("t-{n}"),
                        data,
                    );
                    let (scheduler, accepted, rejected) =
                        (scheduler.clone(), accepted.clone(), rejected.clone());
                    sends.spawn(async move {
                        let key = task.key();
                        match scheduler.schedule_task(task).await {
                            Ok(()) => accepted
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .push(key),
                            Err(_) => *rejected.lock().unwrap_or_else(PoisonError::into_inner) += 1,
                        }
                    });
                    n += 1;
                }
            }
            while sends.join_next().await.is_some() {}
        })
    };

    // The faults, while the stream runs.
    let run_started = Instant::now();
    let at = |secs: u64| {
        let target = run_started + Duration::from_secs(secs);
        std::thread::sleep(target.saturating_duration_since(Instant::now()));
    };
    let now_ms = || Utc::now().timestamp_millis();
    let mut faults = Vec::new();

    // Whatever happens below, the broker and Cassandra run again afterwards.
    let _restart = RestartStackOnDrop;
    at(8);
    let from_ms = now_ms();
    nodes.kill("node-1");
    at(12);
    nodes.start("node-1r");
    faults.push(Fault {
        what: "kill -9 node-1, restart",
        from_ms,
        to_ms: now_ms(),
    });

    // Pause node-2 while one of its 2-second tasks runs, so that it wakes with late work.
    at(20);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let gains = gains(&nodes.lines());
        let now = now_ms();
        let running_on_node_2 = slow
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|(due, p)| {
                (now - 1200..now - 300).contains(due) && owner_at(&gains, *p, now) == Some("node-2")
            });
        if running_on_node_2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let from_ms = now_ms();
    signal(nodes.child("node-2"), "STOP");
    std::thread::sleep(Duration::from_secs(9));
    signal(nodes.child("node-2"), "CONT");
    faults.push(Fault {
        what: "SIGSTOP node-2 for 9 s",
        from_ms,
        to_ms: now_ms(),
    });

    at(36);
    let from_ms = now_ms();
    dev_stack(&["stop", "kafka"]);
    std::thread::sleep(Duration::from_secs(2));
    dev_stack(&["up"]);
    faults.push(Fault {
        what: "broker restart",
        from_ms,
        to_ms: now_ms(),
    });

    at(48);
    let from_ms = now_ms();
    dev_stack(&["stop", "cassandra"]);
    dev_stack(&["up"]);
    faults.push(Fault {
        what: "Cassandra restart",
        from_ms,
        to_ms: now_ms(),
    });

    runtime.block_on(producer).expect("producer");
    let accepted: Vec<TaskKey> = accepted
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let accepted_set: HashSet<&TaskKey> = accepted.iter().collect();

    // Wait until every accepted task has run.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut missing;
    loop {
        let ran: HashSet<TaskKey> = executions(&nodes.lines())
            .into_iter()
            .map(|e| e.key)
            .collect();
        missing = accepted_set.iter().filter(|k| !ran.contains(**k)).count();
        if missing == 0 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    nodes.stop_all();

    let lines = nodes.lines();
    let all = executions(&lines);
    let gains = gains(&lines);
    let mut by_task: HashMap<&TaskKey, Vec<&Execution>> = HashMap::new();
    for e in &all {
        by_task.entry(&e.key).or_default().push(e);
    }
    let duplicates: Vec<&Vec<&Execution>> = by_task.values().filter(|v| v.len() > 1).collect();
    let duplicate_runs: usize = duplicates.iter().map(|v| v.len() - 1).sum();
    let unexplained: Vec<_> = duplicates
        .iter()
        .filter(|runs| {
            let first = runs.iter().map(|e| e.start_ms).min().unwrap_or_default();
            let last = runs.iter().map(|e| e.start_ms).max().unwrap_or_default();
            !faults
                .iter()
                .any(|f| first <= f.to_ms + FAULT_AFTERMATH_MS && last >= f.from_ms)
        })
        .collect();
    let early: Vec<&Execution> = all
        .iter()
        .filter(|e| e.start_ms < e.key.scheduled_time.timestamp_millis())
        .collect();
    let max_lateness_ms = all
        .iter()
        .map(|e| e.start_ms - e.key.scheduled_time.timestamp_millis())
        .max()
        .unwrap_or_default();
    // A start on a node that did not own the partition then (per the group) is stale work.
    let stale_starts: Vec<&Execution> = all
        .iter()
        .filter(|e| !owned_by(&gains, e.partition, &e.node, e.start_ms))
        .collect();
    // Overlaps within one orderingId while both nodes owned the partition.
    let mut by_ordering: BTreeMap<&str, Vec<&Execution>> = BTreeMap::new();
    for e in &all {
        by_ordering.entry(&e.key.ordering_id).or_default().push(e);
    }
    let mut overlaps = Vec::new();
    for runs in by_ordering.values_mut() {
        runs.sort_by_key(|e| e.start_ms);
        for (i, a) in runs.iter().enumerate() {
            for b in &runs[i + 1..] {
                if b.start_ms >= a.end_ms {
                    break;
                }
                let a_still_owner =
                    owner_at(&gains, a.partition, b.start_ms) == Some(a.node.as_str());
                if a.node == b.node || a_still_owner {
                    overlaps.push((a.key.clone(), a.node.clone(), b.node.clone()));
                }
            }
        }
    }
    let fencing_rejections: f64 = lines
        .iter()
        .filter(|l| l["node"] == "node-2")
        .filter_map(|l| l.get("fencing_rejections")?.as_f64())
        .sum();

    println!("chaos: faults (duplicates they explain; executions running when they hit):");
    for f in &faults {
        let explained = duplicates
            .iter()
            .filter(|runs| {
                let first = runs.iter().map(|e| e.start_ms).min().unwrap_or_default();
                let last = runs.iter().map(|e| e.start_ms).max().unwrap_or_default();
                first <= f.to_ms + FAULT_AFTERMATH_MS && last >= f.from_ms
            })
            .count();
        let running = all
            .iter()
            .filter(|e| e.start_ms <= f.from_ms && e.end_ms >= f.from_ms)
            .count();
        println!(
            "  {:<28} {:>6} ms  duplicates {explained:>3}  running {running:>3}",
            f.what,
            f.to_ms - f.from_ms
        );
    }
    println!(
        "chaos: accepted {}, not accepted (client error) {}, executions {}, lost {missing}, \
         duplicate runs {duplicate_runs} (tasks {}; unexplained by a fault {}), ran early {}, \
         max lateness {max_lateness_ms} ms, stale starts {}, overlaps {}, fencing rejections {fencing_rejections}",
        accepted.len(),
        rejected.lock().unwrap_or_else(PoisonError::into_inner),
        all.len(),
        duplicates.len(),
        unexplained.len(),
        early.len(),
        stale_starts.len(),
        overlaps.len(),
    );
    if missing > 0 {
        let ran: HashSet<&TaskKey> = all.iter().map(|e| &e.key).collect();
        let store = runtime.block_on(env.store());
        let started_ms = faults
            .first()
            .map(|f| f.from_ms - 8_000)
            .unwrap_or_default();
        for key in accepted.iter().filter(|k| !ran.contains(k)).take(15) {
            let partition = partition_for(&key.ordering_id, PARTITIONS);
            let (scheduled, status) = runtime.block_on(async {
                use scheduler_core::store::{ScheduleStore, StatusStore};
                (
                    store
                        .scheduled_task(partition, key.clone())
                        .await
                        .map(|t| t.is_some()),
                    store
                        .status(partition, key.clone())
                        .await
                        .map(|s| s.map(|s| s.status)),
                )
            });
            println!(
                "chaos: lost {key} (partition {partition}, due at +{} ms): in schedule {scheduled:?}, status {status:?}",
                key.scheduled_time.timestamp_millis() - started_ms
            );
        }
        println!("chaos: node logs in {}", nodes.dir.display());
    }
    assert!(
        accepted.len() > 1000,
        "the stream ran: {} accepted",
        accepted.len()
    );
    assert_eq!(missing, 0, "accepted tasks never executed");
    assert!(
        unexplained.is_empty(),
        "duplicates without a fault: {unexplained:?}"
    );
    assert!(early.is_empty(), "ran before their time: {early:?}");
    assert!(
        stale_starts.is_empty(),
        "started by a node that did not own the partition: {stale_starts:?}"
    );
    assert!(
        overlaps.is_empty(),
        "overlapping executions of one orderingId: {overlaps:?}"
    );
    assert!(
        fencing_rejections >= 1.0,
        "the paused node's late work was not fenced (no rejection recorded)"
    );
}
