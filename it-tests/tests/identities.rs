//! Task identities against the real stack: Replace, KeepTime, Debounce (50 rapid submits),
//! IfAbsent raced by 20 producers, reschedule earlier and later, cancel by identity, through the
//! client and the admin API.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use it_tests::engine::{http, wait_until, TestEnv};
use scheduler_client::{wire, OnConflict, Task, TaskIdentity};
use scheduler_core::{TaskContext, TaskError, TaskHandler};
use serde_json::json;

/// One call: the task's orderingId, its time and its data's `v`.
type Runs = Arc<Mutex<Vec<(String, DateTime<Utc>, i64)>>>;

#[derive(Clone)]
struct Recording(Runs);

impl TaskHandler for Recording {
    async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
        let version = task
            .task_data
            .get("v")
            .and_then(|v| v.as_i64())
            .unwrap_or(-1);
        lock(&self.0).push((task.ordering_id.clone(), task.scheduled_time, version));
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn runs_of(runs: &Runs, ordering_id: &str) -> Vec<(DateTime<Utc>, i64)> {
    lock(runs)
        .iter()
        .filter(|(o, _, _)| o == ordering_id)
        .map(|(_, at, v)| (*at, *v))
        .collect()
}

fn versioned(ordering_id: &str, at: DateTime<Utc>, version: i64, mode: OnConflict) -> Task {
    let data = json!({ "v": version })
        .as_object()
        .cloned()
        .unwrap_or_default();
    Task::new(ordering_id, at, "id", data).on_conflict(mode)
}

fn identity(ordering_id: &str) -> TaskIdentity {
    TaskIdentity::new(ordering_id, "id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_keep_time_reschedule_and_cancel_by_identity() {
    let env = TestEnv::new("it_identities", 4).await;
    let runs = Runs::default();
    let node = env
        .start_sole_node(
            env.settings(TestEnv::quick_scheduling()),
            Recording(Arc::clone(&runs)),
        )
        .await;
    let addr = node.admin_address().expect("admin API");
    let scheduler = env.scheduler(Duration::from_secs(10));
    let now = scheduler_client::truncate_to_millis(Utc::now());
    let at = |ms: i64| now + TimeDelta::milliseconds(ms);
    let replace = OnConflict::Replace;
    for task in [
        versioned("replaced", at(3_000), 1, replace),
        versioned("replaced", at(5_000), 2, replace),
        versioned("kept", at(3_000), 1, OnConflict::KeepTime),
        versioned("kept", at(20_000), 2, OnConflict::KeepTime),
        versioned("earlier", at(60_000), 1, replace),
        versioned("later", at(3_000), 1, replace),
        versioned("cancelled", at(4_000), 1, replace),
        versioned("api-cancelled", at(4_000), 1, replace),
        versioned("api-moved", at(60_000), 1, replace),
    ] {
        scheduler.schedule_task(task).await.expect("scheduled");
    }
    scheduler
        .reschedule(&identity("earlier"), at(4_000))
        .await
        .expect("rescheduled");
    scheduler
        .reschedule(&identity("later"), at(7_000))
        .await
        .expect("rescheduled");
    scheduler
        .cancel_identity(&identity("cancelled"))
        .await
        .expect("cancelled");
    let cancel = json!({"orderingId": "api-cancelled", "uniquenessKey": "id"}).to_string();
    let answer = http(addr, "POST", "/api/v1/task/cancel", None, Some(&cancel)).await;
    assert_eq!(answer.status, 202, "{}", answer.body);
    let moved = json!({"orderingId": "api-moved", "uniquenessKey": "id", "scheduledTime": wire::format_time(at(5_000))});
    let answer = http(
        addr,
        "POST",
        "/api/v1/task/reschedule",
        None,
        Some(&moved.to_string()),
    )
    .await;
    assert_eq!(answer.status, 202, "{}", answer.body);

    wait_until(Duration::from_secs(30), "the tasks to run", || {
        ["replaced", "kept", "earlier", "later", "api-moved"]
            .iter()
            .all(|o| !runs_of(&runs, o).is_empty())
    })
    .await;
    // Whatever ran late, ran after its time: two more seconds for anything that should not.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(runs_of(&runs, "replaced"), [(at(5_000), 2)]);
    assert_eq!(runs_of(&runs, "kept"), [(at(3_000), 2)]);
    assert_eq!(runs_of(&runs, "earlier"), [(at(4_000), 1)]);
    assert_eq!(runs_of(&runs, "later"), [(at(7_000), 1)]);
    assert_eq!(runs_of(&runs, "api-moved"), [(at(5_000), 1)]);
    assert_eq!(runs_of(&runs, "cancelled"), []);
    assert_eq!(runs_of(&runs, "api-cancelled"), []);
    // The lookup by identity finds the current task.
    let found = http(
        addr,
        "GET",
        "/api/v1/task?orderingId=earlier&uniquenessKey=id",
        None,
        None,
    )
    .await
    .json();
    assert_eq!(found["scheduledTime"], wire::format_time(at(4_000)));
    assert_eq!(found["status"], "completed");
    let cancelled = http(
        addr,
        "GET",
        "/api/v1/task?orderingId=cancelled&uniquenessKey=id",
        None,
        None,
    )
    .await
    .json();
    assert_eq!(cancelled["status"], "cancelled");
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_rapid_debounced_submits_run_once_at_the_last_time_bounded_by_max_wait() {
    let env = TestEnv::new("it_debounce", 4).await;
    let runs = Runs::default();
    let node = env
        .start_sole_node(
            env.settings(TestEnv::quick_scheduling()),
            Recording(Arc::clone(&runs)),
        )
        .await;
    let scheduler = env.scheduler(Duration::from_secs(10));
    let roomy = OnConflict::Debounce {
        max_wait: Duration::from_secs(30),
    };
    let tight = OnConflict::Debounce {
        max_wait: Duration::from_millis(1_500),
    };
    let (mut asked, mut tight_asked) = (Vec::new(), Vec::new());
    for i in 0..50 {
        // Each submit asks for 2 s after it, as a debounced producer does.
        let at = scheduler_client::truncate_to_millis(Utc::now() + TimeDelta::seconds(2));
        scheduler
            .schedule_task(versioned("debounced", at, i, roomy))
            .await
            .expect("scheduled");
        asked.push(at);
        if i < 20 {
            scheduler
                .schedule_task(versioned("capped", at, i, tight))
                .await
                .expect("scheduled");
            tight_asked.push(at);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last = *asked.last().expect("50 submits");
    wait_until(Duration::from_secs(30), "the debounced task to run", || {
        !runs_of(&runs, "debounced").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        runs_of(&runs, "debounced"),
        [(last, 49)],
        "one run, at the last time"
    );
    // The tight chain: never later than 1.5 s after its first time.
    let capped = runs_of(&runs, "capped");
    let first = tight_asked[0];
    let bound = first + TimeDelta::milliseconds(1_500);
    assert!(!capped.is_empty());
    assert_eq!(
        capped[0].0,
        tight_asked.last().copied().unwrap_or(first).min(bound),
        "{capped:?}"
    );
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_absent_raced_by_twenty_producers_runs_exactly_once() {
    let env = TestEnv::new("it_if_absent", 4).await;
    let runs = Runs::default();
    let node = env
        .start_sole_node(
            env.settings(TestEnv::quick_scheduling()),
            Recording(Arc::clone(&runs)),
        )
        .await;
    let at = Utc::now() + TimeDelta::seconds(3);
    let producers: Vec<_> = (0..20)
        .map(|_| env.scheduler(Duration::from_secs(10)))
        .collect();
    let submits = producers.iter().enumerate().map(|(i, producer)| {
        let task = versioned(
            "singleton",
            at + TimeDelta::milliseconds(i as i64),
            i as i64,
            OnConflict::IfAbsent,
        );
        producer.schedule_task(task)
    });
    for result in futures::future::join_all(submits).await {
        result.expect("scheduled");
    }
    wait_until(Duration::from_secs(30), "the singleton to run", || {
        !runs_of(&runs, "singleton").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(runs_of(&runs, "singleton").len(), 1, "{:?}", lock(&runs));
    // Within the retention, a finished singleton still counts.
    let again = versioned("singleton", Utc::now(), 99, OnConflict::IfAbsent);
    producers[0].schedule_task(again).await.expect("scheduled");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(runs_of(&runs, "singleton").len(), 1);
    let metrics = node.metrics();
    assert!(
        metrics.contains(r#"scheduler_identity_records_total{op="ifAbsent",result="ignored"} 20"#),
        "{metrics}"
    );
    node.shutdown().await.expect("shutdown");
}
