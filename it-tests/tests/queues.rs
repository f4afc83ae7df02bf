//! Queues against the real stack: nodes with different handler sets each consume only the
//! queues they have a handler for, a queue no running node serves waits for one to join, and
//! each queue's limits (and a type's own) take effect.

use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use it_tests::engine::{http, task, wait_until, TestEnv};
use it_tests::processes::{node_command, process_log};
use scheduler_client::{SchedulerConfig, Task};
use scheduler_core::settings::{QueueSettings, TypeLimits};
use scheduler_core::{SchedulerNode, Settings, TaskContext, TaskError, TaskHandler};

/// Every call: (handler, task, result ok).
type Calls = Arc<Mutex<Vec<(&'static str, Task, bool)>>>;

/// Records (handler, task, ok) and the most calls it had running at once; `fail…` orderingIds
/// always fail.
#[derive(Clone)]
struct Handler {
    name: &'static str,
    calls: Calls,
    running: Arc<AtomicUsize>,
    most_at_once: Arc<AtomicUsize>,
}

impl Handler {
    fn new(name: &'static str, calls: &Calls) -> Self {
        Handler {
            name,
            calls: Arc::clone(calls),
            running: Arc::default(),
            most_at_once: Arc::default(),
        }
    }
}

impl TaskHandler for Handler {
    async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(150)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        let ok = !task.ordering_id.starts_with("fail");
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((self.name, task.clone(), ok));
        if ok {
            Ok(())
        } else {
            Err(TaskError::retry("always fails"))
        }
    }
}

fn settings(env: &TestEnv) -> Settings {
    let mut scheduling = TestEnv::quick_scheduling();
    scheduling.backoff_factor = Duration::from_millis(200);
    scheduling.max_backoff = Duration::from_millis(400);
    scheduling.max_task_retries = 5;
    // A type's own limit, over its queue's (the default queue's 5).
    scheduling.task_types.insert(
        "charge".into(),
        TypeLimits {
            max_task_retries: Some(0),
            ..TypeLimits::default()
        },
    );
    let mut settings = env.settings(scheduling);
    settings.queues = vec![
        QueueSettings {
            name: "emails".into(),
            task_types: vec!["send-email".into()],
            create_topic_partitions: Some(3),
            executor_concurrency: Some(1),
            max_task_retries: Some(1),
            ..QueueSettings::default()
        },
        QueueSettings {
            name: "reports".into(),
            task_types: vec!["report".into()],
            create_topic_partitions: Some(2),
            ..QueueSettings::default()
        },
    ];
    settings
}

fn calls_of(calls: &Calls, ordering_id: &str) -> Vec<(&'static str, bool)> {
    calls
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|(_, t, _)| t.ordering_id == ordering_id)
        .map(|(h, _, ok)| (*h, *ok))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_node_consumes_only_the_queues_it_has_handlers_for() {
    let env = TestEnv::new("queues", 3).await;
    let settings = settings(&env);
    let queues = settings.queues();
    let topic_of = |name: &str| {
        queues
            .iter()
            .find(|q| q.name == name)
            .map(|q| q.kafka.topic.clone())
            .expect("queue")
    };
    let calls = Arc::default();
    let (email, charge, report) = (
        Handler::new("send-email", &calls),
        Handler::new("charge", &calls),
        Handler::new("report", &calls),
    );

    // Two nodes with different handler sets: one serves the emails queue alone, the other
    // the default queue alone (charge is a type no queue lists).
    let mailer = SchedulerNode::builder(settings.clone())
        .handler("send-email", email.clone())
        .start()
        .await
        .expect("the mailer starts");
    let biller = SchedulerNode::builder(settings.clone())
        .handler("charge", charge.clone())
        .start()
        .await
        .expect("the biller starts");
    assert_eq!(mailer.queues(), ["emails"]);
    assert_eq!(biller.queues(), ["default"]);
    assert_eq!(mailer.owned_partitions_of("default"), None);
    assert_eq!(biller.owned_partitions_of("emails"), None);
    wait_until(
        Duration::from_secs(30),
        "each node to own every partition of its queue",
        || {
            mailer.owned_partitions_of("emails").map(|p| p.len()) == Some(3)
                && biller.owned_partitions().len() == 3
        },
    )
    .await;

    let config = SchedulerConfig::new(env.stack.kafka_bootstrap.clone(), env.topic.clone())
        .route("send-email", topic_of("emails"))
        .route("report", topic_of("reports"));
    let producer = scheduler_client::Scheduler::new(config).expect("producer");
    let soon = Utc::now() + TimeDelta::seconds(1);
    // Five emails due at once: the queue runs one call at a time.
    for i in 0..5 {
        let t = task(&format!("mail-{i}"), soon, "m").of_type("send-email");
        producer.schedule_task(t).await.expect("scheduled");
    }
    producer
        .schedule_task(task("fail-mail", soon, "m").of_type("send-email"))
        .await
        .expect("scheduled");
    for i in 0..3 {
        let t = task(&format!("bill-{i}"), soon, "c").of_type("charge");
        producer.schedule_task(t).await.expect("scheduled");
    }
    producer
        .schedule_task(task("fail-bill", soon, "c").of_type("charge"))
        .await
        .expect("scheduled");
    // A type of a queue no running node serves.
    producer
        .schedule_task(task("monthly", soon, "r").of_type("report"))
        .await
        .expect("scheduled");

    wait_until(Duration::from_secs(30), "emails and charges to run", || {
        (0..5).all(|i| calls_of(&calls, &format!("mail-{i}")) == [("send-email", true)])
            && (0..3).all(|i| calls_of(&calls, &format!("bill-{i}")) == [("charge", true)])
    })
    .await;
    assert_eq!(
        email.most_at_once.load(Ordering::SeqCst),
        1,
        "the emails queue's executor_concurrency = 1"
    );
    // Limits: the emails queue retries once (2 attempts), charge's own limit never retries.
    wait_until(
        Duration::from_secs(30),
        "the failing tasks to give up",
        || calls_of(&calls, "fail-mail").len() == 2 && calls_of(&calls, "fail-bill").len() == 1,
    )
    .await;
    // The report waits: nobody consumes its queue.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(calls_of(&calls, "monthly").is_empty());
    assert_eq!(calls_of(&calls, "fail-mail").len(), 2, "no third attempt");
    assert_eq!(calls_of(&calls, "fail-bill").len(), 1, "no retry of charge");

    // Each queue's admin API: the mailer's root is its emails queue.
    let admin = mailer.admin_address().expect("admin");
    let status = http(admin, "GET", "/api/v1/status", None, None)
        .await
        .json();
    assert_eq!(status["queue"], "emails");
    assert_eq!(status["topic"], topic_of("emails").as_str());
    let nested = http(admin, "GET", "/queues/emails/api/v1/status", None, None)
        .await
        .json();
    assert_eq!(nested["queue"], "emails");
    let dead = http(
        admin,
        "GET",
        "/queues/emails/api/v1/dead-letters",
        None,
        None,
    )
    .await
    .json();
    assert_eq!(
        dead["deadLetters"].as_array().map(Vec::len),
        Some(1),
        "{dead}"
    );
    let metrics = http(admin, "GET", "/metrics", None, None).await.body;
    assert!(
        metrics.contains("queue=\"emails\""),
        "metrics carry the queue label"
    );
    assert!(!metrics.contains("queue=\"default\""), "{metrics}");

    // A node with the report handler joins: the report runs within seconds.
    let joined = std::time::Instant::now();
    let reporter = SchedulerNode::builder(settings.clone())
        .handler("report", report.clone())
        .start()
        .await
        .expect("the reporter starts");
    assert_eq!(reporter.queues(), ["reports"]);
    // (Starting includes creating the queue's keyspace: nobody served it before.)
    let started = joined.elapsed();
    wait_until(Duration::from_secs(30), "the report to run", || {
        calls_of(&calls, "monthly") == [("report", true)]
    })
    .await;
    println!(
        "the report ran {:?} after its node began starting ({started:?} to start)",
        joined.elapsed()
    );
    // Promptly once the node is up. (Its start creates the queue's keyspace: on Cassandra 2.1
    // about 2 s a table, longer while other tests change schemas; not what is measured here.)
    assert!(joined.elapsed() - started < Duration::from_secs(20));
    // Nothing ran on a node without its handler.
    for (handler, task, _) in calls.lock().unwrap_or_else(PoisonError::into_inner).iter() {
        assert_eq!(*handler, task.task_type, "{task:?}");
    }
    for node in [mailer, biller, reporter] {
        node.shutdown().await.expect("shutdown");
    }
}

/// A `chaos-node` process handling `types` only, with `queues_file`'s queues over `env`.
fn node_process(env: &TestEnv, dir: &std::path::Path, name: &str, types: &str) -> Child {
    node_command(env!("CARGO_BIN_EXE_chaos-node"), env, dir, name)
        .env("CHAOS_WORK_MS", "10")
        .env("CHAOS_TYPES", types)
        .env("CHAOS_SETTINGS", dir.join("scheduler.toml"))
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"))
}

/// The (orderingId, type) of each task a node process ran.
fn ran(dir: &std::path::Path, name: &str) -> Vec<(String, String)> {
    process_log(dir, name)
        .iter()
        .filter_map(|l| {
            Some((
                l["ordering_id"].as_str()?.to_string(),
                l["task_type"].as_str()?.to_string(),
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_processes_with_different_handlers_consume_only_their_queues() {
    let env = TestEnv::new("queue_procs", 2).await;
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&env.topic);
    std::fs::create_dir_all(&dir).expect("log dir");
    std::fs::write(
        dir.join("scheduler.toml"),
        "[[queues]]\nname = \"emails\"\ntask_types = [\"send-email\"]\ncreate_topic_partitions = 2\n\
         [[queues]]\nname = \"reports\"\ntask_types = [\"report\"]\ncreate_topic_partitions = 2\n",
    )
    .expect("settings file");
    let mut children = vec![
        node_process(&env, &dir, "mailer", "send-email"),
        node_process(&env, &dir, "biller", "charge"),
    ];
    let queues_of = |name: &str| {
        process_log(&dir, name)
            .iter()
            .find_map(|l| l.get("queues").cloned())
    };
    // (Each creates keyspaces of its own: slow on Cassandra 2.1 while other tests do too.)
    wait_until(Duration::from_secs(150), "both processes to start", || {
        queues_of("mailer").is_some() && queues_of("biller").is_some()
    })
    .await;
    assert_eq!(queues_of("mailer"), Some(serde_json::json!(["emails"])));
    assert_eq!(queues_of("biller"), Some(serde_json::json!(["default"])));

    let config = SchedulerConfig::new(env.stack.kafka_bootstrap.clone(), env.topic.clone())
        .route("send-email", format!("{}-emails", env.topic))
        .route("report", format!("{}-reports", env.topic));
    let producer = scheduler_client::Scheduler::new(config).expect("producer");
    let soon = Utc::now() + TimeDelta::seconds(1);
    for i in 0..10 {
        for (prefix, task_type) in [("mail", "send-email"), ("bill", "charge")] {
            let t = task(&format!("{prefix}-{i}"), soon, "u").of_type(task_type);
            producer.schedule_task(t).await.expect("scheduled");
        }
    }
    producer
        .schedule_task(task("monthly", soon, "r").of_type("report"))
        .await
        .expect("scheduled");
    wait_until(
        Duration::from_secs(60),
        "every email and charge to run",
        || ran(&dir, "mailer").len() >= 10 && ran(&dir, "biller").len() >= 10,
    )
    .await;
    assert!(ran(&dir, "mailer")
        .iter()
        .all(|(o, t)| o.starts_with("mail") && t == "send-email"));
    assert!(ran(&dir, "biller")
        .iter()
        .all(|(o, t)| o.starts_with("bill") && t == "charge"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !ran(&dir, "mailer")
            .iter()
            .chain(&ran(&dir, "biller"))
            .any(|(o, _)| o == "monthly"),
        "no running node handles reports"
    );

    let joined = std::time::Instant::now();
    children.push(node_process(&env, &dir, "reporter", "report"));
    wait_until(
        Duration::from_secs(150),
        "the report to run on the new node",
        || ran(&dir, "reporter") == [("monthly".to_string(), "report".to_string())],
    )
    .await;
    println!(
        "the report ran {:?} after its node process started",
        joined.elapsed()
    );
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}
