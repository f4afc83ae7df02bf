//! Remote workers against the real stack (design.md "Remote workers"): the Python worker
//! (`examples/python/worker.py`: the standard library and the documented protocol, no project
//! code) claims a node's due tasks of its type over HTTP and runs them with their data, in
//! order per orderingId; a claim that expired cannot commit, whether its worker died, paused
//! (SIGSTOP) or just answered late, and its task runs again; the record is the run that counted.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use it_tests::engine::{http, metric_sum, wait_until, TestEnv};
use it_tests::python::{install_python, repo};
use scheduler_client::{Scheduler, Task, TaskKey};
use scheduler_core::handler::{TaskContext, TaskError, TaskHandler};
use scheduler_core::node::SchedulerNode;
use scheduler_core::settings::SchedulingSettings;
use scheduler_core::store::TaskStatus;
use serde_json::{json, Value};

const TOKEN: &str = "remote-workers-token";

/// Records the tasks of the node's local type.
#[derive(Clone, Default)]
struct Ran(Arc<Mutex<Vec<Task>>>);

impl TaskHandler for Ran {
    async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
        (self.0.lock().unwrap_or_else(PoisonError::into_inner)).push(task.clone());
        Ok(())
    }
}

/// A node of `env` running the type `local` itself and `resize` on remote workers, whose
/// claims live `claim_ttl`; retries come quickly.
async fn node(env: &TestEnv, claim_ttl: Duration, ran: Ran) -> SchedulerNode {
    let mut settings = env.settings(SchedulingSettings {
        backoff_factor: Duration::from_millis(200),
        max_backoff: Duration::from_secs(1),
        ..TestEnv::quick_scheduling()
    });
    settings.admin.token = Some(TOKEN.into());
    settings.workers.types = vec!["resize".into()];
    settings.workers.claim_ttl = claim_ttl;
    let node = SchedulerNode::builder(settings)
        .handler("local", ran)
        .start()
        .await
        .expect("node starts");
    env.owning_every_partition(node).await
}

/// A worker.py process.
struct Worker {
    name: String,
    child: Child,
    log: PathBuf,
    stderr: PathBuf,
}

impl Worker {
    fn start(python: &Path, node: &SchedulerNode, name: &str, dir: &Path) -> Worker {
        let addr = node.admin_address().expect("admin API enabled");
        let (log, stderr) = (
            dir.join(format!("{name}.jsonl")),
            dir.join(format!("{name}.stderr")),
        );
        let child = Command::new(python)
            .arg(repo().join("examples/python/worker.py"))
            .args(["--url", &format!("http://{addr}"), "--type", "resize"])
            .args(["--name", name, "--log"])
            .arg(&log)
            .args(["--capacity", "4", "--wait-ms", "2000"])
            .env("SCHEDULER_ADMIN_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run worker.py: {e}"));
        Worker {
            name: name.into(),
            child,
            log,
            stderr,
        }
    }

    /// Its log's events (`start`, `end`), in order.
    fn events(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        (text.lines())
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    fn count(&self, event: &str) -> usize {
        (self.events().iter())
            .filter(|e| e["event"] == event)
            .count()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {}", self.name);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the node lists `name` as a connected worker of `resize`.
async fn connected(node: &SchedulerNode, name: &str) {
    let addr = node.admin_address().expect("admin API enabled");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = http(addr, "GET", "/api/v1/workers", Some(TOKEN), None).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let workers = answer.json()["workers"].clone();
        let listed = (workers.as_array().into_iter().flatten())
            .any(|w| w["worker"] == name && w["types"] == json!(["resize"]));
        if listed {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "worker {name} never connected: {workers}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn status(
    node: &SchedulerNode,
    key: &TaskKey,
) -> Option<scheduler_core::store::StatusRecord> {
    node.task_status(key).await.expect("status read")
}

/// Waits until `key` has a final status.
async fn finished(node: &SchedulerNode, key: &TaskKey) -> scheduler_core::store::StatusRecord {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(record) = status(node, key).await {
            return record;
        }
        assert!(Instant::now() < deadline, "{key} never finished");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A worker `name` connected to `node`, once it started `task`, scheduled for it.
async fn started_on(
    python: &Path,
    node: &SchedulerNode,
    name: &str,
    dir: &Path,
    (scheduler, task): (&Scheduler, &Task),
) -> Worker {
    let worker = Worker::start(python, node, name, dir);
    connected(node, name).await;
    scheduler
        .schedule_task(task.clone())
        .await
        .expect("scheduled");
    wait_until(
        Duration::from_secs(30),
        "the worker to start the task",
        || worker.count("start") == 1,
    )
    .await;
    worker
}

/// Asserts that `task`'s record is its second attempt's, run by `worker`, with its result.
async fn recorded_as_run_by(node: &SchedulerNode, task: &Task, worker: &str) {
    let record = finished(node, &task.key()).await;
    assert_eq!(record.status, TaskStatus::Completed, "{}", task.key());
    assert_eq!(record.attempts, 2, "{}", task.key());
    let data = Value::Object(task.task_data.clone());
    assert_eq!(
        record.result,
        Some(json!({"echo": data, "worker": worker})),
        "the record is the run that counted"
    );
}

fn resize(ordering_id: &str, in_ms: i64, unique: &str, data: Value) -> Task {
    let data = data.as_object().cloned().unwrap_or_default();
    Task::new(
        ordering_id,
        Utc::now() + TimeDelta::milliseconds(in_ms),
        unique,
        data,
    )
    .of_type("resize")
}

fn scratch(name: &str) -> tempdir::Dir {
    tempdir::Dir::new(name)
}

/// A scratch directory under `target/`, removed when dropped.
mod tempdir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new(name: &str) -> Dir {
            let dir = super::repo()
                .join("target/it-remote-workers")
                .join(format!("{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("scratch directory");
            Dir(dir)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_worker_runs_its_types_tasks_with_their_data_in_order_per_ordering_id() {
    let python = install_python();
    let env = TestEnv::new("it_remote_run", 4).await;
    let ran = Ran::default();
    let node = node(&env, Duration::from_secs(10), ran.clone()).await;
    let dir = scratch("run");
    let worker = Worker::start(&python, &node, "py-1", dir.path());
    connected(&node, "py-1").await;

    // 20 tasks of the remote type over 4 orderingIds, 10 ms apart; 2 of the local type.
    let scheduler = env.scheduler(Duration::from_secs(10));
    let tasks: Vec<Task> = (0..20)
        .map(|i| {
            resize(
                &format!("img-{}", i % 4),
                1_500 + 10 * i,
                &format!("{i:02}"),
                json!({"n": i, "sleepMs": 50, "name": format!("photo {i}.png")}),
            )
        })
        .collect();
    for task in &tasks {
        scheduler
            .schedule_task(task.clone())
            .await
            .expect("scheduled");
    }
    for i in 0..2 {
        let local = Task::new(
            "local-o",
            Utc::now() + TimeDelta::seconds(1),
            format!("l{i}"),
            Default::default(),
        )
        .of_type("local");
        scheduler.schedule_task(local).await.expect("scheduled");
    }
    wait_until(Duration::from_secs(60), "every remote task to end", || {
        worker.count("end") == 20
    })
    .await;

    for (i, task) in tasks.iter().enumerate() {
        let record = finished(&node, &task.key()).await;
        assert_eq!(record.status, TaskStatus::Completed, "{}", task.key());
        assert_eq!(record.attempts, 1, "{}", task.key());
        let data = Value::Object(task.task_data.clone());
        assert_eq!(
            record.result,
            Some(json!({"echo": data, "worker": "py-1"})),
            "task {i}'s result is the worker's"
        );
    }
    // Each task ran once, with its data; per orderingId one at a time, in schedule order.
    let events = worker.events();
    let starts: Vec<&Value> = events.iter().filter(|e| e["event"] == "start").collect();
    assert_eq!(starts.len(), 20, "each task once");
    for o in 0..4 {
        let ordering_id = format!("img-{o}");
        let mine: Vec<&Value> = (events.iter())
            .filter(|e| e["task"]["orderingId"] == ordering_id.as_str())
            .collect();
        let order: Vec<String> = (mine.iter())
            .filter(|e| e["event"] == "start")
            .map(|e| {
                e["task"]["uniquenessKey"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        let mut expected = order.clone();
        expected.sort();
        assert_eq!(order, expected, "{ordering_id} in schedule order");
        // start, end, start, end...: never two at once.
        let kinds: Vec<&str> = mine
            .iter()
            .map(|e| e["event"].as_str().unwrap_or_default())
            .collect();
        assert!(
            kinds.chunks(2).all(|pair| pair == ["start", "end"]),
            "{ordering_id} one at a time: {kinds:?}"
        );
        for start in mine.iter().filter(|e| e["event"] == "start") {
            let n = start["task"]["taskData"]["n"].as_i64().unwrap_or(-1);
            assert_eq!(start["task"]["taskData"]["name"], format!("photo {n}.png"));
            assert_eq!(start["task"]["taskType"], "resize");
        }
    }
    wait_until(Duration::from_secs(30), "the local tasks", || {
        ran.0.lock().unwrap_or_else(PoisonError::into_inner).len() == 2
    })
    .await;
    let listed = http(
        node.admin_address().expect("admin"),
        "GET",
        "/api/v1/workers",
        Some(TOKEN),
        None,
    )
    .await
    .json();
    let py = (listed["workers"].as_array().into_iter().flatten())
        .find(|w| w["worker"] == "py-1")
        .cloned()
        .unwrap_or_else(|| panic!("py-1 listed: {listed}"));
    assert_eq!(py["claims"], json!([]), "no claim left: {py}");
    let metrics = http(
        node.admin_address().expect("admin"),
        "GET",
        "/metrics",
        Some(TOKEN),
        None,
    )
    .await
    .body;
    let sum = |metric: &str, labels: &[(&str, &str)]| metric_sum(&metrics, metric, labels);
    assert_eq!(
        sum("scheduler_remote_workers", &[("task_type", "resize")]),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        sum("scheduler_remote_claim_ends_total", &[("end", "completed")]),
        20.0
    );
    assert_eq!(sum("scheduler_remote_claims", &[]), 0.0);
    assert!(
        !worker.stderr().contains("Traceback"),
        "{}",
        worker.stderr()
    );
    drop(worker);
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_after_the_claims_expiry_is_refused_and_the_task_runs_again() {
    let env = TestEnv::new("it_remote_late", 4).await;
    let node = node(&env, Duration::from_secs(2), Ran::default()).await;
    let addr = node.admin_address().expect("admin API enabled");
    let post = |path: String, body: Value| async move {
        http(addr, "POST", &path, Some(TOKEN), Some(&body.to_string())).await
    };
    let poll = || {
        post(
            "/api/v1/workers/poll".into(),
            json!({"worker": "raw", "types": ["resize"], "capacity": 1, "waitMs": 10_000}),
        )
    };
    let task = resize("late-1", 500, "a", json!({"k": "v"}));
    env.scheduler(Duration::from_secs(10))
        .schedule_task(task.clone())
        .await
        .expect("scheduled");

    let first = poll().await;
    assert_eq!(first.status, 200, "{}", first.body);
    let claim = first.json()["claims"][0].clone();
    assert_eq!(claim["task"]["uniquenessKey"], "a", "{claim}");
    assert_eq!(claim["attempt"], 1);
    assert_eq!(claim["ttlMs"], 2_000);
    let id = claim["claimId"].as_str().expect("an id").to_string();
    // A heartbeat keeps it live; then none for longer than its time to live.
    let beat = post(format!("/api/v1/claims/{id}/heartbeat"), json!({})).await;
    assert_eq!(beat.status, 200, "{}", beat.body);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let late = post(
        format!("/api/v1/claims/{id}/complete"),
        json!({"outcome": "success", "result": {"by": "first"}}),
    )
    .await;
    assert_eq!(late.status, 409, "{}", late.body);
    assert!(
        late.json()["error"]
            .as_str()
            .unwrap_or_default()
            .contains("expired"),
        "{}",
        late.body
    );
    assert_eq!(status(&node, &task.key()).await, None, "nothing recorded");

    // The task is offered again: its second attempt.
    let second = poll().await;
    assert_eq!(second.status, 200, "{}", second.body);
    let claim = second.json()["claims"][0].clone();
    assert_eq!(claim["task"]["uniquenessKey"], "a", "{claim}");
    assert_eq!(claim["attempt"], 2);
    let id = claim["claimId"].as_str().expect("an id").to_string();
    let done = post(
        format!("/api/v1/claims/{id}/complete"),
        json!({"outcome": "success", "result": {"by": "second"}}),
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.body);
    let again = post(
        format!("/api/v1/claims/{id}/complete"),
        json!({"outcome": "success"}),
    )
    .await;
    assert_eq!(again.status, 409, "a claim completes once: {}", again.body);
    let record = finished(&node, &task.key()).await;
    assert_eq!(record.status, TaskStatus::Completed);
    assert_eq!(record.attempts, 2);
    assert_eq!(
        record.result,
        Some(json!({"by": "second"})),
        "the run that counted"
    );

    // Bad input is refused, clearly.
    let bad = post(
        "/api/v1/workers/poll".into(),
        json!({"worker": "", "types": ["resize"], "capacity": 1}),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let unknown = post(
        "/api/v1/claims/nope/complete".into(),
        json!({"outcome": "success"}),
    )
    .await;
    assert_eq!(unknown.status, 409, "{}", unknown.body);
    let unauthorized = http(addr, "POST", "/api/v1/workers/poll", None, Some("{}")).await;
    assert_eq!(unauthorized.status, 401, "{}", unauthorized.body);
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_call_or_paused_past_its_expiry_cannot_commit_and_its_task_runs_again()
{
    let python = install_python();
    let env = TestEnv::new("it_remote_kill", 4).await;
    let node = node(&env, Duration::from_secs(2), Ran::default()).await;
    let dir = scratch("kill");
    let scheduler = env.scheduler(Duration::from_secs(10));

    // Killed mid-call: the task runs again on another worker once the dead one's claim expired.
    let task = resize("kill-1", 500, "a", json!({"sleepMs": 3_000}));
    let killed = started_on(&python, &node, "py-killed", dir.path(), (&scheduler, &task)).await;
    killed.signal("KILL");
    let rescuer = Worker::start(&python, &node, "py-rescuer", dir.path());
    wait_until(Duration::from_secs(60), "the task to run again", || {
        rescuer.count("end") == 1
    })
    .await;
    let started = |w: &Worker| {
        (w.events().iter())
            .find(|e| e["event"] == "start")
            .and_then(|e| e["at"].as_f64())
            .expect("a start")
    };
    let after = started(&rescuer) - started(&killed);
    assert!(
        after >= 1.9,
        "it ran again only once the dead worker's claim (2 s) expired: {after:.2} s after"
    );
    recorded_as_run_by(&node, &task, "py-rescuer").await;
    drop(rescuer);
    drop(killed);

    // Paused past its expiry: its completion after it resumes is refused.
    let task = resize("pause-1", 500, "b", json!({"sleepMs": 1_500}));
    let paused = started_on(&python, &node, "py-paused", dir.path(), (&scheduler, &task)).await;
    paused.signal("STOP");
    let counted = Worker::start(&python, &node, "py-counted", dir.path());
    wait_until(
        Duration::from_secs(60),
        "py-counted to run the task",
        || counted.count("end") == 1,
    )
    .await;
    recorded_as_run_by(&node, &task, "py-counted").await;
    // Resumed: it finishes its call, and its completion is refused.
    paused.signal("CONT");
    wait_until(
        Duration::from_secs(30),
        "py-paused's completion to be refused",
        || paused.count("end") == 1 && paused.stderr().contains("refused"),
    )
    .await;
    recorded_as_run_by(&node, &task, "py-counted").await;
    drop(paused);
    drop(counted);
    node.shutdown().await.expect("shutdown");
}
