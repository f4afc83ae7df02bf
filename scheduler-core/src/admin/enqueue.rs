//! `POST /api/v1/tasks`: enqueue over HTTP, for services that have no Kafka client. The body is
//! one task or an array of tasks in the wire format (the record a producer writes to the topic,
//! with `taskType`, `priority`, `onConflict`, `group`), decoded by the node's own decoder and
//! checked by the client's own rules, so HTTP accepts exactly what the topic would run. Every
//! task is checked before any is sent: a request with a bad task sends nothing. The answer
//! comes once the broker acknowledged every task (or refused some).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use chrono::Utc;
use opentelemetry::trace::TraceContextExt;
use scheduler_client::{partition_for, trace, wire, Task};
use serde_json::value::RawValue;
use tracing::{info, Instrument};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::api::{EnqueueFailure, EnqueueResponse, EnqueuedTask};
use super::state::AdminState;

/// Most tasks one request may carry.
pub(super) const MAX_BATCH: usize = 1000;

pub(super) async fn enqueue(
    State(state): State<Arc<AdminState>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, Json<EnqueueResponse>) {
    // The caller's trace (a W3C `traceparent` header) is this span's parent, and goes on with
    // its tasks (as this span, when traces are exported), so their runs link to the request
    // that scheduled them, as a Kafka producer's would (OpenTelemetry's messaging conventions:
    // a `send` span of kind producer).
    let caller = headers
        .get(trace::TRACEPARENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|text| trace::parse_trace_parent(text).map(|c| (text.to_string(), c)));
    let span = tracing::info_span!(
        "http_enqueue",
        otel.name = "send",
        otel.kind = "producer",
        messaging.system = "kafka",
        messaging.operation.type = "send",
        messaging.operation.name = "send",
        queue = %state.queue,
        tasks = tracing::field::Empty,
    );
    if let Some((_, parent)) = &caller {
        let parent = opentelemetry::Context::new().with_remote_span_context(parent.clone());
        // (Fails only once the span has begun: it has not.)
        let _ = span.set_parent(parent);
    }
    let this = span.context().span().span_context().clone();
    let caller_trace = match this.is_valid() {
        true => Some(trace::format_trace_parent(&this)),
        false => caller.map(|(text, _)| text),
    };
    async move {
        let tasks: Vec<Task> = match decode(&state, &body) {
            Ok(tasks) => tasks
                .into_iter()
                .map(|task| match &caller_trace {
                    Some(trace) => task.with_trace_parent(trace.clone()),
                    None => task,
                })
                .collect(),
            Err((error, failed)) => return refused(error, failed),
        };
        tracing::Span::current().record("tasks", tasks.len());
        let (code, answer) = send(&state, tasks).await;
        info!(
            enqueued = answer.enqueued.len(),
            failed = answer.failed.len(),
            "tasks enqueued over HTTP"
        );
        (code, Json(answer))
    }
    .instrument(span)
    .await
}

/// A 400 answer: nothing was sent.
fn refused(error: String, failed: Vec<EnqueueFailure>) -> (StatusCode, Json<EnqueueResponse>) {
    (
        StatusCode::BAD_REQUEST,
        Json(EnqueueResponse {
            error: Some(error),
            enqueued: Vec::new(),
            failed,
        }),
    )
}

/// The request's tasks, each decoded and checked; else why not, with each refused task.
fn decode(state: &AdminState, body: &[u8]) -> Result<Vec<Task>, (String, Vec<EnqueueFailure>)> {
    let whole = |e: serde_json::Error| {
        (
            format!("the body is not a task or an array of tasks in the wire format: {e}"),
            Vec::new(),
        )
    };
    let raw: &RawValue = serde_json::from_slice(body).map_err(whole)?;
    let records: Vec<&RawValue> = if raw.get().starts_with('[') {
        serde_json::from_str(raw.get()).map_err(whole)?
    } else {
        vec![raw]
    };
    if records.is_empty() {
        return Err(("the array holds no task".into(), Vec::new()));
    }
    if records.len() > MAX_BATCH {
        return Err((
            format!(
                "{} tasks in one request, over the limit of {MAX_BATCH}",
                records.len()
            ),
            Vec::new(),
        ));
    }
    let now = Utc::now();
    let mut tasks = Vec::with_capacity(records.len());
    let mut failed = Vec::new();
    for (index, record) in records.into_iter().enumerate() {
        match check(state, record, now) {
            Ok(task) => tasks.push(task),
            Err(error) => failed.push(EnqueueFailure { index, error }),
        }
    }
    match failed.len() {
        0 => Ok(tasks),
        n => Err((
            format!("{n} of the request's tasks refused; none was enqueued"),
            failed,
        )),
    }
}

/// One record as a task this queue takes, by the node's decoder and the client's checks.
pub(super) fn check(
    state: &AdminState,
    record: &RawValue,
    now: chrono::DateTime<Utc>,
) -> Result<Task, String> {
    let task = wire::decode(Some(record.get().as_bytes()), state.max_task_bytes)
        .map_err(|e| e.to_string())?;
    scheduler_client::validate(&task, now, state.scheduling_grace_window)
        .map_err(|e| e.to_string())?;
    if task.join_of.is_some() {
        return Err("joinOf is set by the engine on a group's join task, not by callers".into());
    }
    queue_takes(state, &task.task_type)?;
    Ok(task)
}

/// Whether this queue's topic is where tasks of `task_type` go: a queue listing types takes
/// those; the default queue takes every type no other queue of the node lists.
fn queue_takes(state: &AdminState, task_type: &str) -> Result<(), String> {
    let Some(own) = state.queues.iter().find(|q| q.name == state.queue) else {
        return Ok(());
    };
    if !own.task_types.is_empty() {
        if own.task_types.iter().any(|t| t == task_type) {
            return Ok(());
        }
        return Err(format!(
            "queue {} takes the task types {:?}, not {task_type:?}",
            own.name, own.task_types
        ));
    }
    match state
        .queues
        .iter()
        .find(|q| q.task_types.iter().any(|t| t == task_type))
    {
        Some(other) => Err(format!(
            "tasks of type {task_type:?} go to queue {}: POST them to {}/api/v1/tasks",
            other.name, other.path
        )),
        None => Ok(()),
    }
}

/// Sends every task at once and waits for each acknowledgement.
async fn send(state: &AdminState, tasks: Vec<Task>) -> (StatusCode, EnqueueResponse) {
    let sent = futures::future::join_all(tasks.into_iter().map(|task| async move {
        let view = EnqueuedTask {
            task: task.key().to_string(),
            task_type: task.task_type.clone(),
            partition: partition_for(&task.ordering_id, state.partition_count),
        };
        state.canceller.schedule_task(task).await.map(|()| view)
    }))
    .await;
    let mut answer = EnqueueResponse::default();
    for (index, result) in sent.into_iter().enumerate() {
        match result {
            Ok(view) => answer.enqueued.push(view),
            Err(e) => answer.failed.push(EnqueueFailure {
                index,
                error: e.to_string(),
            }),
        }
    }
    if answer.failed.is_empty() {
        return (StatusCode::CREATED, answer);
    }
    answer.error = Some(format!(
        "the broker did not acknowledge {} of the request's tasks (those in `failed`); send them again",
        answer.failed.len()
    ));
    (StatusCode::BAD_GATEWAY, answer)
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};
    use serde_json::{json, Value};

    use super::super::test_app::{app, call};

    fn task(ordering_id: &str) -> Value {
        json!({
            "version": 1,
            "orderingId": ordering_id,
            "scheduledTime": scheduler_client::wire::format_time(chrono::Utc::now() + chrono::TimeDelta::minutes(5)),
            "uniquenessKey": "u",
            "taskData": {"n": 1},
        })
    }

    async fn post(body: &str) -> (StatusCode, Value) {
        let (status, text) = call(&app(), Method::POST, Some(body), "/api/v1/tasks").await;
        (status, serde_json::from_str(&text).expect("a JSON answer"))
    }

    #[tokio::test]
    async fn a_batch_with_a_bad_task_sends_none_and_names_each_bad_one() {
        let mut late = task("late");
        late["scheduledTime"] = json!("2020-01-01T00:00:00.000Z");
        let mut typed = task("typed");
        typed["taskType"] = json!("no spaces allowed");
        let body = json!([task("fine"), late, {"version": 1}, typed, {"version": 1, "type": "cancel", "orderingId": "o", "uniquenessKey": "u"}]);
        let (status, answer) = post(&body.to_string()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["enqueued"], json!([]));
        let failed = answer["failed"].as_array().expect("failed");
        let indexes: Vec<u64> = failed.iter().filter_map(|f| f["index"].as_u64()).collect();
        assert_eq!(indexes, [1, 2, 3, 4], "{answer}");
        let errors: Vec<&str> = failed.iter().filter_map(|f| f["error"].as_str()).collect();
        assert!(errors[0].contains("in the past"), "{}", errors[0]);
        assert!(
            errors[1].contains("missing field `orderingId`"),
            "{}",
            errors[1]
        );
        assert!(errors[2].contains("taskType"), "{}", errors[2]);
        assert!(errors[3].contains("cancel"), "{}", errors[3]);
        assert!(answer["error"]
            .as_str()
            .expect("error")
            .contains("4 of the request's tasks refused"));
    }

    /// The rules every producer applies (`scheduler-client/tests/producer_rules.json`).
    mod rules {
        include!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scheduler-client/tests/producer_rules/cases.rs"
        ));
    }

    /// HTTP enqueue takes exactly the tasks every other producer takes.
    #[test]
    fn http_enqueue_refuses_exactly_the_producer_rules_invalid_tasks() {
        let now = chrono::Utc::now();
        let (grace, cases) = rules::producer_rule_cases(now);
        let state = super::super::test_app::state(std::sync::Arc::new(
            crate::store::memory::MemoryStore::new(),
        ));
        assert_eq!(state.scheduling_grace_window, grace);
        let mut wrong = Vec::new();
        for case in &cases {
            let record: Box<serde_json::value::RawValue> =
                serde_json::from_str(&case.record).expect("a JSON record");
            match (super::check(&state, &record, now), case.producers_accept) {
                (Ok(_), true) | (Err(_), false) => {}
                (Ok(task), false) => wrong.push(format!("{}: enqueued {task:?}", case.name)),
                (Err(e), true) => wrong.push(format!("{}: refused: {e}", case.name)),
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[tokio::test]
    async fn a_body_that_is_no_task_is_refused_whole() {
        for (body, expected) in [
            ("", "not a task or an array of tasks"),
            ("{\"version\":1", "not a task or an array of tasks"),
            ("[]", "holds no task"),
            ("42", "not a JSON task record"),
        ] {
            let (status, answer) = post(body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
            let error = answer["error"].as_str().unwrap_or_default();
            let first = answer["failed"][0]["error"].as_str().unwrap_or_default();
            assert!(
                error.contains(expected) || first.contains(expected),
                "{body}: {answer}"
            );
        }
        let many = Value::Array(
            (0..=super::MAX_BATCH)
                .map(|i| task(&format!("o{i}")))
                .collect(),
        );
        let (status, answer) = post(&many.to_string()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(answer["error"]
            .as_str()
            .unwrap_or_default()
            .contains("over the limit of 1000"));
    }
}
