//! Task types against the real stack: a handler per type, a type no node handles waiting for a
//! node that does, dead letters listed, redriven and purged through the admin API and the CLI
//! (the error handler hearing of each once), and priority among tasks waiting for a slot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use it_tests::engine::{http, metric_sum, task, wait_until, TestEnv};
use scheduler_client::{Task, TaskKey};
use scheduler_core::settings::SchedulingSettings;
use scheduler_core::{DeadLetter, SchedulerNode, TaskContext, TaskError, TaskHandler};
use serde_json::json;

/// Every call, by handler: (handler, task, result ok).
type Calls = Arc<Mutex<Vec<(&'static str, Task, bool)>>>;

/// A handler recording its calls and the dead letters it hears of. Until `fixed` is set,
/// `bad…` orderingIds are invalid and `flaky…` ones always fail; the rest succeed.
#[derive(Clone)]
struct Handler {
    name: &'static str,
    calls: Calls,
    work: Duration,
    fixed: Arc<AtomicBool>,
    dead: Arc<Mutex<HashMap<TaskKey, usize>>>,
}

impl Handler {
    fn new(name: &'static str, calls: &Calls) -> Handler {
        Handler {
            name,
            calls: Arc::clone(calls),
            work: Duration::ZERO,
            fixed: Arc::default(),
            dead: Arc::default(),
        }
    }
}

impl TaskHandler for Handler {
    async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
        tokio::time::sleep(self.work).await;
        let fixed = self.fixed.load(Ordering::SeqCst);
        let result = match task.ordering_id.as_str() {
            o if o.starts_with("bad") && !fixed => Err(TaskError::invalid("no such account")),
            o if o.starts_with("flaky") && !fixed => Err(TaskError::retry("gateway down")),
            _ => Ok(()),
        };
        lock(&self.calls).push((self.name, task.clone(), result.is_ok()));
        result
    }

    async fn dead_lettered(&self, letter: &DeadLetter) {
        *lock(&self.dead).entry(letter.task.key()).or_default() += 1;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn succeeded(calls: &Calls, ordering_id: &str) -> usize {
    lock(calls)
        .iter()
        .filter(|(_, t, ok)| *ok && t.ordering_id == ordering_id)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_no_running_node_handles_waits_then_runs_once_a_node_with_its_handler_owns_it() {
    let env = TestEnv::new("it_types_wait", 4).await;
    let calls = Calls::default();
    let first = SchedulerNode::builder(env.settings(TestEnv::quick_scheduling()))
        .handler("email", Handler::new("email@1", &calls))
        .start()
        .await
        .expect("node starts");
    let first = env.owning_every_partition(first).await;
    let scheduler = env.scheduler(Duration::from_secs(10));
    let at = Utc::now() + TimeDelta::seconds(1);
    for i in 0..3 {
        let email = task(&format!("mail-{i}"), at, "e").of_type("email");
        scheduler.schedule_task(email).await.expect("scheduled");
    }
    for i in 0..2 {
        let sms = task(&format!("text-{i}"), at, "s").of_type("sms");
        scheduler.schedule_task(sms).await.expect("scheduled");
    }
    wait_until(Duration::from_secs(20), "the email tasks to run", || {
        lock(&calls).len() == 3
    })
    .await;
    let addr = first.admin_address().expect("admin API");
    wait_until(
        Duration::from_secs(20),
        "both sms tasks to wait for a handler",
        || {
            first
                .metrics()
                .contains(r#"scheduler_tasks_waiting_for_handler{task_type="sms"} 2"#)
        },
    )
    .await;
    let status = http(addr, "GET", "/api/v1/status", None, None).await.json();
    assert_eq!(status["handlers"], json!(["email"]));
    assert_eq!(status["handlesEveryType"], json!(false));
    assert_eq!(status["waitingForHandler"], json!({"sms": 2}));
    assert!(
        metric_sum(
            &first.metrics(),
            "scheduler_no_handler_waits_total",
            &[("task_type", "sms")]
        ) >= 2.0
    );
    assert!(lock(&calls).iter().all(|(_, t, _)| t.task_type == "email"));

    // A rolling deploy: the old node goes, a node with both handlers comes.
    first.shutdown().await.expect("shutdown");
    let joined = Instant::now();
    let second = SchedulerNode::builder(env.settings(TestEnv::quick_scheduling()))
        .handler("email", Handler::new("email@2", &calls))
        .handler("sms", Handler::new("sms@2", &calls))
        .start()
        .await
        .expect("node starts");
    wait_until(Duration::from_secs(30), "the sms tasks to run", || {
        succeeded(&calls, "text-0") + succeeded(&calls, "text-1") == 2
    })
    .await;
    let took = joined.elapsed();
    eprintln!("the sms tasks ran {took:?} after the node with their handler started");
    assert!(took < Duration::from_secs(15), "{took:?}");
    let by: Vec<_> = lock(&calls)
        .iter()
        .filter(|(_, t, _)| t.task_type == "sms")
        .map(|(name, _, _)| *name)
        .collect();
    assert_eq!(by, ["sms@2", "sms@2"], "run once each, by the sms handler");
    second.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_redriven_and_purged_and_their_handler_hears_of_each_once() {
    let env = TestEnv::new("it_dead_letters", 4).await;
    let scheduling = SchedulingSettings {
        max_task_retries: 1,
        backoff_factor: Duration::from_millis(200),
        max_backoff: Duration::from_millis(400),
        ..TestEnv::quick_scheduling()
    };
    let calls = Calls::default();
    let charge = Handler::new("charge", &calls);
    let (fixed, dead) = (Arc::clone(&charge.fixed), Arc::clone(&charge.dead));
    let node = SchedulerNode::builder(env.settings(scheduling))
        .handler("charge", charge)
        .fallback(Handler::new("other", &calls))
        .start()
        .await
        .expect("node starts");
    let node = env.owning_every_partition(node).await;
    let addr = node.admin_address().expect("admin API");
    let scheduler = env.scheduler(Duration::from_secs(10));
    let at = Utc::now() + TimeDelta::seconds(1);
    let data = json!({"amount": 12})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let charges: Vec<Task> = ["bad-1", "bad-2", "flaky-1", "fine-1"]
        .iter()
        .map(|o| {
            Task::new(*o, at, "c", data.clone())
                .of_type("charge")
                .with_priority(2)
        })
        .collect();
    for t in charges
        .iter()
        .cloned()
        .chain([task("bad-other", at, "x").of_type("report")])
    {
        scheduler.schedule_task(t).await.expect("scheduled");
    }
    let list = |query: &'static str| async move {
        http(
            addr,
            "GET",
            &format!("/api/v1/dead-letters{query}"),
            None,
            None,
        )
        .await
        .json()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let letters = loop {
        let page = list("?taskType=charge").await;
        if page["deadLetters"].as_array().map_or(0, Vec::len) == 3 {
            break page["deadLetters"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "three dead letters, found {page}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let summary: Vec<(String, String, u64, String)> = letters
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            (
                l["orderingId"].as_str().unwrap_or_default().to_string(),
                l["reason"].as_str().unwrap_or_default().to_string(),
                l["attempts"].as_u64().unwrap_or_default(),
                l["lastError"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let row = |o: &str, r: &str, a: u64, e: &str| (o.to_string(), r.to_string(), a, e.to_string());
    assert_eq!(
        summary,
        [
            row("bad-1", "invalid", 1, "no such account"),
            row("bad-2", "invalid", 1, "no such account"),
            row("flaky-1", "retries_exhausted", 2, "gateway down"),
        ]
    );
    assert_eq!(letters[0]["taskType"], "charge");
    assert_eq!(letters[0]["taskData"], json!({"amount": 12}));
    assert_eq!(letters[0]["priority"], 2);
    // The report task is another type's dead letter; no filter lists all four.
    assert_eq!(
        list("").await["deadLetters"].as_array().map(Vec::len),
        Some(4)
    );
    let bad_1 = http(
        addr,
        "GET",
        &format!(
            "/api/v1/task?orderingId=bad-1&scheduledTime={}&uniquenessKey=c",
            scheduler_client::wire::format_time(at)
        ),
        None,
        None,
    )
    .await
    .json();
    assert_eq!(bad_1["status"], "dropped");
    assert_eq!(succeeded(&calls, "fine-1"), 1);
    // Invalid: one call; exhausted: 1 + max_task_retries calls.
    let called = |o: &str| {
        lock(&calls)
            .iter()
            .filter(|(_, t, _)| t.ordering_id == o)
            .count()
    };
    assert_eq!((called("bad-1"), called("flaky-1")), (1, 2));

    // Redrive one by its key: it runs again, as a new task due now, and completes.
    fixed.store(true, Ordering::SeqCst);
    let one = json!({"orderingId": "bad-1", "scheduledTime": scheduler_client::wire::format_time(at), "uniquenessKey": "c"});
    let redriven = http(
        addr,
        "POST",
        "/api/v1/dead-letters/redrive",
        None,
        Some(&one.to_string()),
    )
    .await;
    assert_eq!(redriven.status, 200, "{}", redriven.body);
    assert_eq!(redriven.json()["redriven"], 1);
    wait_until(
        Duration::from_secs(20),
        "the redriven task to complete",
        || succeeded(&calls, "bad-1") == 1,
    )
    .await;
    let rerun = lock(&calls)
        .iter()
        .find(|(_, t, ok)| *ok && t.ordering_id == "bad-1")
        .map(|(_, t, _)| t.clone())
        .expect("rerun");
    assert_eq!((rerun.task_type.as_str(), rerun.priority), ("charge", 2));
    assert_eq!(rerun.task_data, data);
    assert!(rerun.scheduled_time > at);
    let pending = list("?taskType=charge").await;
    assert_eq!(
        pending["deadLetters"].as_array().map(Vec::len),
        Some(2),
        "{pending}"
    );
    let all = list("?taskType=charge&includeRedriven=true").await;
    assert_eq!(all["deadLetters"][0]["redrives"], 1, "{all}");
    assert!(all["deadLetters"][0]["redrivenAt"].is_string());

    // Redrive the rest of the type by a filter; both complete.
    let by_type = json!({"taskType": "charge"}).to_string();
    let redriven = http(
        addr,
        "POST",
        "/api/v1/dead-letters/redrive",
        None,
        Some(&by_type),
    )
    .await;
    assert_eq!(redriven.json()["redriven"], 2, "{}", redriven.body);
    wait_until(
        Duration::from_secs(20),
        "the redriven tasks to complete",
        || succeeded(&calls, "bad-2") == 1 && succeeded(&calls, "flaky-1") == 1,
    )
    .await;

    // Each dead letter's handler heard of it once (the other type's handler is another one).
    let heard = lock(&dead).clone();
    assert_eq!(heard.len(), 3, "{heard:?}");
    assert!(heard.values().all(|n| *n == 1), "{heard:?}");

    // Bad requests are refused with a reason.
    let neither = http(addr, "POST", "/api/v1/dead-letters/purge", None, Some("{}")).await;
    assert_eq!(neither.status, 400, "{}", neither.body);
    let both = json!({"orderingId": "x", "taskType": "charge"}).to_string();
    assert_eq!(
        http(
            addr,
            "POST",
            "/api/v1/dead-letters/purge",
            None,
            Some(&both)
        )
        .await
        .status,
        400
    );
    let unknown = json!({"orderingId": "nope", "scheduledTime": "2026-01-01T00:00:00Z", "uniquenessKey": "u"});
    assert_eq!(
        http(
            addr,
            "POST",
            "/api/v1/dead-letters/redrive",
            None,
            Some(&unknown.to_string())
        )
        .await
        .status,
        404
    );

    // Purge all: the redriven letters go too.
    let purged = http(
        addr,
        "POST",
        "/api/v1/dead-letters/purge",
        None,
        Some(r#"{"all":true}"#),
    )
    .await;
    assert_eq!(purged.json()["purged"], 4, "{}", purged.body);
    assert_eq!(
        list("?includeRedriven=true").await["deadLetters"],
        json!([])
    );

    let metrics = node.metrics();
    let invalid = [("task_type", "charge"), ("reason", "invalid")];
    assert_eq!(
        metric_sum(&metrics, "scheduler_dead_letters_total", &invalid),
        2.0
    );
    assert_eq!(
        metric_sum(
            &metrics,
            "scheduler_dead_letters_redriven_total",
            &[("task_type", "charge")]
        ),
        3.0
    );
    assert_eq!(
        metric_sum(&metrics, "scheduler_dead_letters_purged_total", &[]),
        4.0
    );
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_saturation_due_tasks_take_the_slot_by_priority() {
    let env = TestEnv::new("it_priority", 2).await;
    let scheduling = SchedulingSettings {
        executor_concurrency: 1,
        ..TestEnv::quick_scheduling()
    };
    let calls = Calls::default();
    let mut handler = Handler::new("any", &calls);
    handler.work = Duration::from_millis(300);
    let node = SchedulerNode::start(env.settings(scheduling), handler)
        .await
        .expect("node starts");
    let node = env.owning_every_partition(node).await;
    let scheduler = env.scheduler(Duration::from_secs(10));
    let at = Utc::now() + TimeDelta::seconds(3);
    // The blocker holds the only slot while the rest come due.
    scheduler
        .schedule_task(task("blocker", at, "0"))
        .await
        .expect("scheduled");
    let mixed = [
        ("p-low", -3),
        ("p-top", 40),
        ("p-zero", 0),
        ("p-high", 7),
        ("p-mid", 2),
    ];
    for (ordering_id, priority) in mixed {
        let t = task(ordering_id, at + TimeDelta::milliseconds(100), "p").with_priority(priority);
        scheduler.schedule_task(t).await.expect("scheduled");
    }
    wait_until(Duration::from_secs(30), "every task to run", || {
        lock(&calls).len() == 6
    })
    .await;
    let order: Vec<String> = lock(&calls)
        .iter()
        .map(|(_, t, _)| t.ordering_id.clone())
        .collect();
    assert_eq!(
        order,
        ["blocker", "p-top", "p-high", "p-mid", "p-zero", "p-low"]
    );
    node.shutdown().await.expect("shutdown");
}
