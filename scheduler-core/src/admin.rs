//! The node's admin HTTP API: JSON under `/api/v1`, Prometheus metrics at `/metrics`, optionally
//! protected by a bearer token. Errors are JSON `{"error": "..."}` with a 4xx status for bad input.
//!
//! | endpoint | what |
//! | --- | --- |
//! | `GET /api/v1/status` | node id, version, owned partitions, tasks in memory per stage and Kafka lag per partition |
//! | `GET /api/v1/task?orderingId=&scheduledTime=&uniquenessKey=[&history=N]` | the task, its status, attempt count and attempt history (newest first, at most N, default 20) |
//! | `GET /api/v1/tasks?from=&to=&limit=[&fromOrderingId=&fromUniquenessKey=]` | incomplete tasks due in `[from, to)` across all partitions, in task-key order, with the cursor of the next page |
//! | `POST /api/v1/task/cancel` with `{"orderingId","scheduledTime","uniquenessKey"}` | enqueue a cancellation on the task's partition |
//! | `GET /metrics` | the node's metrics (OpenMetrics text) |

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt, TryStreamExt};
use scheduler_client::{partition_for, truncate_to_millis, wire, Scheduler, Task, TaskKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::in_flight::InFlightGauges;
use crate::metrics::Metrics;
use crate::store::{PartitionId, ReadCursor, TaskStore};

/// Most attempts one task lookup returns.
const MAX_HISTORY: usize = 100;

/// What the API reads and acts on.
pub struct AdminState {
    /// Identifies the node in responses.
    pub node_id: String,
    /// The scheduler's topic.
    pub topic: String,
    /// Its partition count.
    pub partition_count: u32,
    /// Partitions the node owns now.
    pub owned: Arc<Mutex<Vec<PartitionId>>>,
    /// The node's metrics.
    pub metrics: Arc<Metrics>,
    /// Tasks in memory per partition.
    pub in_flight: InFlightGauges,
    /// Consumer lag per partition, from the Kafka client's statistics.
    pub lag: Arc<Mutex<HashMap<PartitionId, i64>>>,
    /// Where tasks, statuses and attempts are read.
    pub store: Arc<dyn TaskStore>,
    /// Sends cancellations to the topic.
    pub canceller: Scheduler,
    /// The bearer token every request must carry, if any.
    pub token: Option<String>,
}

/// An error answered as JSON.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}

/// The API's routes over `state`.
pub fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/api/v1/status", get(status))
        .route("/api/v1/ready", get(ready))
        .route("/api/v1/task", get(task))
        .route("/api/v1/task/cancel", post(cancel))
        .route("/api/v1/tasks", get(tasks))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            ApiError {
                status: StatusCode::NOT_FOUND,
                message: "no such endpoint (see /api/v1/status, /api/v1/task, /api/v1/tasks, /api/v1/task/cancel, /metrics)"
                    .into(),
            }
        })
        .layer(middleware::from_fn_with_state(Arc::clone(&state), require_token))
        .with_state(state)
}

async fn require_token(
    State(state): State<Arc<AdminState>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(expected) = &state.token {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !presented.is_some_and(|t| constant_time_eq(t.as_bytes(), expected.as_bytes())) {
            return ApiError {
                status: StatusCode::UNAUTHORIZED,
                message: "missing or wrong bearer token (send Authorization: Bearer <token>)"
                    .into(),
            }
            .into_response();
        }
    }
    next.run(request).await
}

/// Compares without stopping at the first difference, so timing does not reveal the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusResponse {
    node_id: String,
    version: &'static str,
    topic: String,
    partition_count: u32,
    owned_partitions: Vec<PartitionId>,
    partitions: Vec<PartitionStatus>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PartitionStatus {
    partition: PartitionId,
    tasks_scheduled: usize,
    tasks_executing: usize,
    kafka_lag: Option<i64>,
}

/// 200 once the node owns partitions and has loaded each one's schedule, else 503: for load
/// balancers and deploy tooling.
async fn ready(State(state): State<Arc<AdminState>>) -> (StatusCode, Json<Value>) {
    let owned = state
        .owned
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let ready = state.in_flight.ready(&owned);
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        Json(serde_json::json!({ "ready": ready, "ownedPartitions": owned })),
    )
}

async fn status(State(state): State<Arc<AdminState>>) -> Json<StatusResponse> {
    let owned = state
        .owned
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let lag = state
        .lag
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let gauges: HashMap<PartitionId, _> = state.in_flight.all().into_iter().collect();
    let partitions = owned
        .iter()
        .map(|&partition| {
            let (held, total) = gauges
                .get(&partition)
                .map(|g| (g.held(), g.current()))
                .unwrap_or_default();
            PartitionStatus {
                partition,
                tasks_scheduled: held,
                tasks_executing: total.saturating_sub(held),
                kafka_lag: lag.get(&partition).copied().filter(|l| *l >= 0),
            }
        })
        .collect();
    Json(StatusResponse {
        node_id: state.node_id.clone(),
        version: env!("CARGO_PKG_VERSION"),
        topic: state.topic.clone(),
        partition_count: state.partition_count,
        owned_partitions: owned,
        partitions,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskQuery {
    ordering_id: Option<String>,
    scheduled_time: Option<String>,
    uniqueness_key: Option<String>,
    history: Option<usize>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskKeyBody {
    ordering_id: Option<String>,
    scheduled_time: Option<String>,
    uniqueness_key: Option<String>,
}

fn parse_key(
    ordering_id: Option<String>,
    scheduled_time: Option<String>,
    uniqueness_key: Option<String>,
) -> Result<TaskKey, ApiError> {
    let required = |value: Option<String>, name: &str| {
        value
            .filter(|v| !v.is_empty())
            .ok_or_else(|| ApiError::bad_request(format!("{name} is required")))
    };
    let ordering_id = required(ordering_id, "orderingId")?;
    let uniqueness_key = required(uniqueness_key, "uniquenessKey")?;
    let time = required(scheduled_time, "scheduledTime")?;
    let scheduled_time = DateTime::parse_from_rfc3339(&time)
        .map_err(|_| {
            ApiError::bad_request(format!(
                "scheduledTime {time:?} is not an RFC 3339 timestamp such as 2026-11-22T06:00:00.000Z"
            ))
        })?
        .with_timezone(&Utc);
    Ok(Task::new(
        ordering_id,
        scheduled_time,
        uniqueness_key,
        Default::default(),
    )
    .key())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TaskResponse {
    ordering_id: String,
    scheduled_time: String,
    uniqueness_key: String,
    partition: PartitionId,
    /// pending, completed, failed, dropped or cancelled.
    status: &'static str,
    attempts: u32,
    last_error: Option<String>,
    updated_at: Option<String>,
    /// Present while the task is in the schedule (it leaves it once finished).
    task_data: Option<Value>,
    history: Vec<AttemptView>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AttemptView {
    attempt: u32,
    started_at: String,
    finished_at: String,
    outcome: &'static str,
    error: Option<String>,
}

fn store_error(e: crate::store::StoreError) -> ApiError {
    ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: e.to_string(),
    }
}

async fn task(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<TaskQuery>, QueryRejection>,
) -> Result<Json<TaskResponse>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let history = query.history.unwrap_or(20);
    if history > MAX_HISTORY {
        return Err(ApiError::bad_request(format!(
            "history must be at most {MAX_HISTORY}"
        )));
    }
    let key = parse_key(
        query.ordering_id,
        query.scheduled_time,
        query.uniqueness_key,
    )?;
    let partition = partition_for(&key.ordering_id, state.partition_count);
    let (task, status, attempts) = futures::try_join!(
        state.store.scheduled_task(partition, key.clone()),
        state.store.status(partition, key.clone()),
        state.store.attempts(key.clone(), history.max(1)),
    )
    .map_err(store_error)?;
    if task.is_none() && status.is_none() && attempts.is_empty() {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("no task {key} is scheduled or recorded"),
        });
    }
    let attempt_count = status
        .as_ref()
        .map(|s| s.attempts)
        .unwrap_or_else(|| attempts.first().map(|a| a.attempt).unwrap_or(0));
    Ok(Json(TaskResponse {
        ordering_id: key.ordering_id.clone(),
        scheduled_time: wire::format_time(key.scheduled_time),
        uniqueness_key: key.uniqueness_key.clone(),
        partition,
        status: status
            .as_ref()
            .map(|s| s.status.as_str())
            .unwrap_or("pending"),
        attempts: attempt_count,
        last_error: status.as_ref().and_then(|s| s.last_error.clone()),
        updated_at: status.as_ref().map(|s| wire::format_time(s.updated_at)),
        task_data: task.map(|t| Value::Object(t.task_data)),
        history: attempts
            .into_iter()
            .take(history)
            .map(|a| AttemptView {
                attempt: a.attempt,
                started_at: wire::format_time(a.started_at),
                finished_at: wire::format_time(a.finished_at),
                outcome: a.outcome.as_str(),
                error: a.error,
            })
            .collect(),
    }))
}

async fn cancel(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<TaskKeyBody>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let key = parse_key(body.ordering_id, body.scheduled_time, body.uniqueness_key)?;
    state
        .canceller
        .cancel_task(&key)
        .await
        .map_err(|e| ApiError {
            // A key the client refuses (too long, say) is the caller's to fix; Kafka failing is not.
            status: if e.is_rejection() {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::BAD_GATEWAY
            },
            message: e.to_string(),
        })?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({
            "result": "cancellation enqueued",
            "task": key.to_string(),
            "partition": partition_for(&key.ordering_id, state.partition_count),
            "note": "The owning node applies it in order with the partition's tasks: the task will not run. \
                     A task already running is not interrupted, and a task that already finished keeps its status.",
        })),
    ))
}

/// Largest page of `GET /api/v1/tasks`.
const MAX_PAGE: usize = 1000;
/// Partitions read at once when listing.
const LIST_CONCURRENCY: usize = 16;
/// The widest window `GET /api/v1/tasks` reads: a load walks one hour bucket per query.
const MAX_LIST_WINDOW_DAYS: i64 = 31;

/// `from` must be before `to`, at most `MAX_LIST_WINDOW_DAYS` before.
fn check_window(from: DateTime<Utc>, to: DateTime<Utc>) -> Result<(), ApiError> {
    if from >= to {
        return Err(ApiError::bad_request("from must be earlier than to"));
    }
    if to - from > TimeDelta::days(MAX_LIST_WINDOW_DAYS) {
        return Err(ApiError::bad_request(format!(
            "the window may span at most {MAX_LIST_WINDOW_DAYS} days ({} hour buckets); page through a longer one",
            MAX_LIST_WINDOW_DAYS * 24
        )));
    }
    Ok(())
}

/// The `limit` tasks with the smallest keys among those offered.
struct SmallestKeys {
    limit: usize,
    kept: std::collections::BTreeMap<TaskKey, (PartitionId, Task)>,
}

impl SmallestKeys {
    fn new(limit: usize) -> Self {
        SmallestKeys {
            limit,
            kept: std::collections::BTreeMap::new(),
        }
    }

    fn offer(&mut self, partition: PartitionId, task: Task) {
        self.kept.insert(task.key(), (partition, task));
        if self.kept.len() > self.limit {
            self.kept.pop_last();
        }
    }

    fn into_sorted(self) -> Vec<(PartitionId, Task)> {
        self.kept.into_values().collect()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    from: Option<String>,
    to: Option<String>,
    limit: Option<usize>,
    from_ordering_id: Option<String>,
    from_uniqueness_key: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListedTask {
    ordering_id: String,
    scheduled_time: String,
    uniqueness_key: String,
    partition: PartitionId,
    task_data: Value,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PageCursor {
    from: String,
    from_ordering_id: String,
    from_uniqueness_key: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListResponse {
    tasks: Vec<ListedTask>,
    /// Query parameters for the next page (with the same `to` and `limit`), or null at the end.
    next: Option<PageCursor>,
}

fn parse_time(value: Option<String>, name: &str) -> Result<DateTime<Utc>, ApiError> {
    let text = value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad_request(format!("{name} is required")))?;
    DateTime::parse_from_rfc3339(&text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            ApiError::bad_request(format!(
                "{name} {text:?} is not an RFC 3339 timestamp such as 2026-11-22T06:00:00.000Z"
            ))
        })
}

/// Incomplete tasks due in `[from, to)` across all partitions, in task-key order, a page at a
/// time. A page resumes after the key given by `from`, `fromOrderingId` and `fromUniquenessKey`.
async fn tasks(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<ListResponse>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let from = parse_time(query.from, "from")?;
    let to = parse_time(query.to, "to")?;
    check_window(from, to)?;
    let limit = query.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    let cursor = match (query.from_ordering_id, query.from_uniqueness_key) {
        (None, None) => ReadCursor::From(from),
        (Some(ordering_id), Some(uniqueness_key)) => ReadCursor::After(TaskKey {
            scheduled_time: truncate_to_millis(from),
            ordering_id,
            uniqueness_key,
        }),
        _ => return Err(ApiError::bad_request(
            "fromOrderingId and fromUniquenessKey go together (the key the previous page ended at)",
        )),
    };
    // Each partition's first `limit` tasks after the cursor; the page is the first `limit` of
    // all, kept as the reads come in, so memory holds `limit` rows plus the reads under way,
    // not partitions x limit.
    let reads = (0..state.partition_count as PartitionId).map(|partition| {
        let read = state.store.load(partition, cursor.clone(), to, limit);
        async move { read.await.map(|tasks| (partition, tasks)) }
    });
    let page = futures::stream::iter(reads)
        .buffer_unordered(LIST_CONCURRENCY)
        .try_fold(SmallestKeys::new(limit), |mut page, (partition, tasks)| {
            for task in tasks {
                page.offer(partition, task);
            }
            futures::future::ready(Ok(page))
        })
        .await
        .map_err(store_error)?;
    let candidates = page.into_sorted();
    let next = (candidates.len() == limit)
        .then(|| candidates.last())
        .flatten()
        .map(|(_, last)| PageCursor {
            from: wire::format_time(last.scheduled_time),
            from_ordering_id: last.ordering_id.clone(),
            from_uniqueness_key: last.uniqueness_key.clone(),
        });
    // A finished task normally leaves the schedule; one whose removal failed is filtered here.
    let statuses = futures::future::try_join_all(
        candidates
            .iter()
            .map(|(p, t)| state.store.status(*p, t.key())),
    )
    .await
    .map_err(store_error)?;
    let tasks = candidates
        .into_iter()
        .zip(statuses)
        .filter(|(_, status)| status.is_none())
        .map(|((partition, task), _)| ListedTask {
            ordering_id: task.ordering_id,
            scheduled_time: wire::format_time(task.scheduled_time),
            uniqueness_key: task.uniqueness_key,
            partition,
            task_data: Value::Object(task.task_data),
        })
        .collect();
    Ok(Json(ListResponse { tasks, next }))
}

async fn metrics(State(state): State<Arc<AdminState>>) -> Response {
    let text = state.metrics.encode(&state.in_flight);
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_window_is_bounded_and_a_page_keeps_only_its_limit() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc));
        let (from, to) = (t("2020-01-01T00:00:00Z"), t("2030-01-01T00:00:00Z"));
        let err = check_window(from.expect("time"), to.expect("time")).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(err.message.contains("at most 31 days"), "{}", err.message);
        let mut page = SmallestKeys::new(3);
        for (p, n) in [(0, 5), (1, 1), (2, 4), (0, 2), (1, 9), (2, 3)] {
            let at = Utc::now() + TimeDelta::seconds(n);
            page.offer(p, Task::new("o", at, n.to_string(), Default::default()));
        }
        let kept: Vec<String> = page
            .into_sorted()
            .into_iter()
            .map(|(_, t)| t.uniqueness_key)
            .collect();
        assert_eq!(kept, ["1", "2", "3"]);
    }

    #[test]
    fn token_comparison_needs_the_whole_token() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"secret"));
    }

    #[test]
    fn task_keys_need_every_part_and_an_rfc3339_time() {
        let key = parse_key(
            Some("o".into()),
            Some("2026-11-22T06:00:00.000Z".into()),
            Some("u".into()),
        )
        .expect("valid key");
        assert_eq!(key.to_string(), "o/2026-11-22T06:00:00.000Z/u");
        let missing =
            parse_key(None, Some("2026-11-22T06:00:00Z".into()), Some("u".into())).unwrap_err();
        assert_eq!(
            (missing.status, missing.message.as_str()),
            (StatusCode::BAD_REQUEST, "orderingId is required")
        );
        let bad_time =
            parse_key(Some("o".into()), Some("tomorrow".into()), Some("u".into())).unwrap_err();
        assert!(
            bad_time.message.contains("not an RFC 3339 timestamp"),
            "{}",
            bad_time.message
        );
    }
}
