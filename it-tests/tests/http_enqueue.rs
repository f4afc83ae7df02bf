//! `POST /api/v1/tasks` against the real stack: tasks enqueued over HTTP (one, a batch, with a
//! type, a priority and a conflict mode) run as the topic's would; a batch with a bad task sends
//! nothing; the OpenAPI document is served behind the same token.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use it_tests::engine::{http, wait_until, TestEnv};
use scheduler_client::{partition_for, wire, Task};
use scheduler_core::handler::{TaskContext, TaskError, TaskHandler};
use serde_json::{json, Value};

/// Records every task it runs, whole.
#[derive(Clone, Default)]
struct Ran(Arc<Mutex<Vec<Task>>>);

impl Ran {
    fn tasks(&self) -> Vec<Task> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl TaskHandler for Ran {
    async fn execute(&self, task: &Task, _ctx: &TaskContext) -> Result<(), TaskError> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task.clone());
        Ok(())
    }
}

const TOKEN: &str = "http-enqueue-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_enqueued_over_http_run_with_their_type_priority_and_conflict_mode() {
    let env = TestEnv::new("it_http_enqueue", 4).await;
    let ran = Ran::default();
    let mut settings = env.settings(TestEnv::quick_scheduling());
    settings.admin.token = Some(TOKEN.into());
    let node = env.start_sole_node(settings, ran.clone()).await;
    let addr = node.admin_address().expect("admin API enabled");
    let post = |body: Value| async move {
        http(
            addr,
            "POST",
            "/api/v1/tasks",
            Some(TOKEN),
            Some(&body.to_string()),
        )
        .await
    };
    let at = |ms: i64| wire::format_time(Utc::now() + TimeDelta::milliseconds(ms));

    let unauthorized = http(addr, "POST", "/api/v1/tasks", None, Some("{}")).await;
    assert_eq!(unauthorized.status, 401, "{}", unauthorized.body);

    // One task, with a type, a priority and nested data.
    let single = json!({"version": 1, "orderingId": "http-one", "scheduledTime": at(1500),
        "uniquenessKey": "a", "taskType": "send-email", "priority": 7,
        "taskData": {"to": "zoë@example.com", "nested": {"list": [1, 2.5, "x"]}}});
    let answer = post(single.clone()).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let answer = answer.json();
    assert_eq!(
        answer["enqueued"][0]["partition"],
        partition_for("http-one", env.partitions),
        "{answer}"
    );
    assert_eq!(answer["enqueued"][0]["taskType"], "send-email");

    // A batch: three of one orderingId in order, and an identity replaced by a later record.
    let batch = json!([
        {"version": 1, "orderingId": "http-seq", "scheduledTime": at(2000), "uniquenessKey": "1"},
        {"version": 1, "orderingId": "http-seq", "scheduledTime": at(2100), "uniquenessKey": "2"},
        {"version": 1, "orderingId": "http-seq", "scheduledTime": at(2200), "uniquenessKey": "3"},
        {"version": 1, "orderingId": "http-id", "scheduledTime": at(60_000), "uniquenessKey": "job",
            "onConflict": "replace", "taskData": {"v": "first"}},
    ]);
    let answer = post(batch).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    assert_eq!(answer.json()["enqueued"].as_array().map(Vec::len), Some(4));
    let replaced = json!({"version": 1, "orderingId": "http-id", "scheduledTime": at(2500),
        "uniquenessKey": "job", "onConflict": "replace", "taskData": {"v": "second"}});
    assert_eq!(post(replaced).await.status, 201);

    // A batch with a bad task: nothing of it is sent, its good task never runs.
    let refused = json!([
        {"version": 1, "orderingId": "http-refused", "scheduledTime": at(1000), "uniquenessKey": "ok"},
        {"version": 1, "orderingId": "http-refused", "uniquenessKey": "no-time"},
    ]);
    let answer = post(refused).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let answer = answer.json();
    assert_eq!(answer["failed"][0]["index"], 1, "{answer}");
    assert_eq!(answer["enqueued"], json!([]));

    wait_until(
        Duration::from_secs(30),
        "every enqueued task to run",
        || ran.tasks().len() >= 5,
    )
    .await;
    // The refused batch's good task was due before all these: it would have run by now.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tasks = ran.tasks();
    let ids: Vec<(&str, &str)> = tasks
        .iter()
        .map(|t| (t.ordering_id.as_str(), t.uniqueness_key.as_str()))
        .collect();
    assert_eq!(tasks.len(), 5, "{ids:?}");
    assert!(!ids.iter().any(|(o, _)| *o == "http-refused"), "{ids:?}");
    let one = tasks
        .iter()
        .find(|t| t.ordering_id == "http-one")
        .expect("ran");
    assert_eq!(one.task_type, "send-email");
    assert_eq!(one.priority, 7);
    assert_eq!(Value::Object(one.task_data.clone()), single["taskData"]);
    let seq: Vec<&str> = tasks
        .iter()
        .filter(|t| t.ordering_id == "http-seq")
        .map(|t| t.uniqueness_key.as_str())
        .collect();
    assert_eq!(seq, ["1", "2", "3"]);
    let job: Vec<&Task> = tasks
        .iter()
        .filter(|t| t.ordering_id == "http-id")
        .collect();
    assert_eq!(job.len(), 1, "the replaced record runs once");
    assert_eq!(
        Value::Object(job[0].task_data.clone()),
        json!({"v": "second"})
    );

    // The document, behind the token, lists this operation.
    let doc = http(addr, "GET", "/api/v1/openapi.json", Some(TOKEN), None).await;
    assert_eq!(doc.status, 200, "{}", doc.body);
    let doc = doc.json();
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["paths"]["/api/v1/tasks"]["post"]["requestBody"].is_object());
    node.shutdown().await.expect("stops");
}
