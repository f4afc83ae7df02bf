//! The node's admin HTTP API: JSON under `/api/v1`, Prometheus metrics at `/metrics`, optionally
//! protected by a bearer token, safe from web pages by default ([`access`]: the `Host`, the
//! origin of state-changing requests, the token). Errors are JSON `{"error": "..."}` on every
//! path ([`json_errors`]), with a 4xx status for bad input.
//!
//! | endpoint | what |
//! | --- | --- |
//! | `GET /api/v1/status` | node id, version, owned partitions, tasks in memory per stage and Kafka lag per partition |
//! | `GET /api/v1/partitions` | every partition of the queue and the node that claimed it last, with the epoch and when (from the store: the whole cluster) |
//! | `GET /api/v1/task?orderingId=&scheduledTime=&uniquenessKey=[&history=N]` | the task, its status, attempt count and attempt history (newest first, at most N, default 20) |
//! | `GET /api/v1/tasks?from=&to=&limit=[&fromOrderingId=&fromUniquenessKey=&taskType=&orderingId=&state=&includeInternal=]` | incomplete tasks due in `[from, to)` across all partitions (or one orderingId's), in task-key order, each with its state (waiting, overdue, retrying, suspended, limited), with the cursor of the next page |
//! | `GET /api/v1/tasks/retrying` | this node's tasks waiting for their next attempt: when, after how many, why |
//! | `POST /api/v1/tasks` with a task or an array of tasks (the wire format) | enqueue them, answered once the broker acknowledged (201), with each refused task (400, none sent) |
//! | `GET /api/v1/task?orderingId=&uniquenessKey=` | the same for the current task of an identity (scheduled with a conflict mode) |
//! | `POST /api/v1/task/cancel` with `{"orderingId","scheduledTime","uniquenessKey"}` | enqueue a cancellation on the task's partition; without `scheduledTime`, of the identity's pending task |
//! | `POST /api/v1/task/reschedule` with `{"orderingId","uniquenessKey","scheduledTime"}` | enqueue moving the identity's pending task to `scheduledTime` |
//! | `GET /api/v1/dead-letters?[taskType=&from=&to=&limit=&includeRedriven=&after…]` | dead letters, in task-key order, a page at a time |
//! | `POST /api/v1/dead-letters/redrive` with a task's key, a filter (`taskType`, `from`, `to`) or `{"all":true}` | enqueue dead letters again, due now, with a fresh retry budget |
//! | `POST /api/v1/dead-letters/purge`, the same selection | delete dead letters |
//! | `GET /api/v1/suspensions` | the suspensions in force: kind, target, since, reason |
//! | `POST /api/v1/suspensions` with `{"kind","target","reason"?}` | suspend an orderingId, a task type or a group (`<type>/<id>`): its tasks wait, pending (201) |
//! | `DELETE /api/v1/suspensions?kind=&target=` | lift a suspension (204, also when there was none) |
//! | `GET /api/v1/limits` | the per-key limit overrides in force, and this node's use of each limited key: permits held, calls running, tasks held |
//! | `PUT /api/v1/limits` with `{"limitKey","taskType"?,"concurrency"?,"rate"?,"burst"?,"weight"?}` | set one key's override (every node applies it within 2 s) |
//! | `DELETE /api/v1/limits?limitKey=&taskType=` | remove an override (204, also when there was none) |
//! | `GET /api/v1/schedules` | the recurring schedules: definition, paused, next and last fire, stalled |
//! | `POST /api/v1/schedules` with a definition | create or redefine a schedule (201 new, 200 otherwise; the same definition changes nothing) |
//! | `GET /api/v1/schedules/{id}?count=` | a schedule, its next fire times and its last 20 fires |
//! | `POST /api/v1/schedules/{id}/pause`, `/resume` | pause (its chain ends at its next tick) or resume from the next fire time |
//! | `DELETE /api/v1/schedules/{id}` | delete a schedule (204; 404 if none) |
//! | `POST /api/v1/schedules/preview?count=` with a definition | its next fire times, nothing created |
//! | `GET /api/v1/jobs` | the queue's jobs with their progress: buckets done, failed, pending, items (by finished nodes of 32 buckets: no bucket's row read) |
//! | `GET /api/v1/jobs/{id}` | one job, with its failed buckets and why |
//! | `GET /api/v1/openapi.json` | this API as an OpenAPI 3.1 document |
//! | `GET /metrics` | the node's metrics (OpenMetrics text) |
//!
//! The requests and answers are in [`api`], public as `scheduler_core::admin_api` so that
//! clients (the `scheduler` command) read the types the handlers write.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use scheduler_client::{partition_for, wire, Task, TaskIdentity, TaskKey};
use serde_json::Value;

use crate::store::{AttemptOutcome, PartitionId, StatusRecord, TaskStatus};

mod access;
pub mod api;
pub(crate) mod dashboard;
mod dead_letters;
mod enqueue;
mod jobs;
mod json_errors;
mod limits;
mod listing;
mod openapi;
mod partitions;
mod schedules;
mod state;
mod suspensions;
#[cfg(test)]
mod test_app;
mod uri_length;
mod workers;
pub(crate) use access::AllowedHosts;
use api::{
    AttemptView, CancelResponse, PartitionStatus, ReadyResponse, StatusResponse, TaskKeyBody,
    TaskQuery, TaskResponse,
};
use listing::tasks;
use state::{parse_rfc3339, required, store_error};
pub use state::{AdminState, ApiError};

/// Most attempts one task lookup returns.
const MAX_HISTORY: usize = 100;

/// Largest request body, unless a queue's tasks need more (see [`body_limit`]): a batch of
/// 1,000 tasks of a few hundred bytes each fits many times over.
pub(crate) const REQUEST_BODY_LIMIT: usize = 2 * 1024 * 1024;

/// The listener's routes ([`router`]), answering only requests that name it in `Host`
/// (`access::hosts`).
pub(crate) fn listener(queues: Vec<Arc<AdminState>>, hosts: AllowedHosts) -> Router {
    router(queues).layer(middleware::from_fn_with_state(
        Arc::new(hosts),
        access::check_host,
    ))
}

/// [`REQUEST_BODY_LIMIT`], or the largest task a queue takes and 64 KiB more when that is
/// more: any task a queue's topic would run can be enqueued over HTTP.
fn body_limit(queues: &[Arc<AdminState>]) -> usize {
    (queues.iter())
        .map(|q| q.max_task_bytes.saturating_add(64 * 1024))
        .fold(REQUEST_BODY_LIMIT, usize::max)
}

/// The API of every queue the node serves (`queues`, the first being the one at the root: the
/// default queue when the node serves it): the first at `/api/v1/...`, each at
/// `/queues/<name>/api/v1/...`. `/metrics` has every queue's.
pub fn router(queues: Vec<Arc<AdminState>>) -> Router {
    let Some(first) = queues.first().map(Arc::clone) else {
        return Router::new();
    };
    // Sessions live as long as the router: a restart ends them all.
    let credentials = Arc::new(access::Credentials {
        token: first.token.clone(),
        sessions: Arc::new(access::Sessions::default()),
        metrics: Arc::clone(&first.node_metrics),
    });
    let limit = body_limit(&queues);
    let mut app = queue_routes().with_state(Arc::clone(&first));
    for queue in &queues {
        app = app.nest(
            &format!("/queues/{}", queue.queue),
            queue_routes().with_state(Arc::clone(queue)),
        );
    }
    app.fallback(|| async {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: "no such endpoint (see /api/v1/status, /api/v1/partitions, /api/v1/task, /api/v1/tasks, /api/v1/task/cancel, /api/v1/dead-letters, /api/v1/suspensions, /api/v1/limits, /api/v1/jobs, /api/v1/schedules, /api/v1/workers, /metrics, and the same under /queues/<name>/)"
                .into(),
        }
    })
    // Layers run outside in: errors as JSON, the URI's length, the body limit, the cross-site
    // check, the token.
    .layer(middleware::from_fn_with_state(
        Arc::clone(&credentials),
        access::require_token,
    ))
    .layer(middleware::from_fn(access::refuse_cross_site))
    .layer(Extension(Arc::clone(&credentials.sessions)))
    .layer(DefaultBodyLimit::max(limit))
    .layer(middleware::from_fn(uri_length::refuse_long_uri))
    .layer(middleware::from_fn_with_state(limit, json_errors::as_json))
}

/// The remote workers' routes (`workers.rs`): the node's workers, the same under every queue.
fn worker_routes() -> Router<Arc<AdminState>> {
    Router::new()
        .route("/api/v1/workers", get(workers::list))
        .route("/api/v1/workers/poll", post(workers::poll))
        .route(
            "/api/v1/claims/{claimId}/heartbeat",
            post(workers::heartbeat),
        )
        .route("/api/v1/claims/{claimId}/complete", post(workers::complete))
}

/// One queue's routes.
fn queue_routes() -> Router<Arc<AdminState>> {
    Router::new()
        .route("/api/v1/status", get(status))
        .route("/api/v1/ready", get(ready))
        .route("/api/v1/partitions", get(partitions::list))
        .route("/api/v1/task", get(task))
        .route("/api/v1/task/cancel", post(cancel))
        .route("/api/v1/task/reschedule", post(reschedule))
        .route("/api/v1/tasks", get(tasks).post(enqueue::enqueue))
        .route("/api/v1/tasks/retrying", get(listing::retrying))
        .route("/api/v1/dead-letters", get(dead_letters::list))
        .route("/api/v1/dead-letters/redrive", post(dead_letters::redrive))
        .route("/api/v1/dead-letters/purge", post(dead_letters::purge))
        .route("/api/v1/jobs", get(jobs::list))
        .route("/api/v1/jobs/{id}", get(jobs::show))
        .route(
            "/api/v1/suspensions",
            get(suspensions::list)
                .post(suspensions::suspend)
                .delete(suspensions::resume),
        )
        .route(
            "/api/v1/limits",
            get(limits::list).put(limits::set).delete(limits::remove),
        )
        .route(
            "/api/v1/schedules",
            get(schedules::list).post(schedules::create),
        )
        .route("/api/v1/schedules/preview", post(schedules::preview))
        .route(
            "/api/v1/schedules/{id}",
            get(schedules::show).delete(schedules::delete),
        )
        .route("/api/v1/schedules/{id}/pause", post(schedules::pause))
        .route("/api/v1/schedules/{id}/resume", post(schedules::resume))
        .route("/api/v1/openapi.json", get(openapi::serve))
        .route("/metrics", get(metrics))
        .merge(worker_routes())
        .merge(dashboard::routes())
}

/// 200 once the node owns partitions and has loaded each one's schedule, else 503: for load
/// balancers and deploy tooling.
async fn ready(State(state): State<Arc<AdminState>>) -> (StatusCode, Json<ReadyResponse>) {
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
        Json(ReadyResponse {
            owned_partitions: owned,
            ready,
        }),
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
        version: env!("CARGO_PKG_VERSION").to_string(),
        topic: state.topic.clone(),
        partition_count: state.partition_count,
        owned_partitions: owned,
        partitions,
        handlers: state.handlers.clone(),
        handles_every_type: state.handles_every_type,
        waiting_for_handler: state.metrics.waiting_for_handler().into_iter().collect(),
        queue: state.queue.clone(),
        queues: state.queues.clone(),
    })
}

/// An identity's parts, both required.
fn parse_identity(
    ordering_id: Option<String>,
    uniqueness_key: Option<String>,
) -> Result<TaskIdentity, ApiError> {
    Ok(TaskIdentity::new(
        required(ordering_id, "orderingId")?,
        required(uniqueness_key, "uniquenessKey")?,
    ))
}

fn parse_key(
    ordering_id: Option<String>,
    scheduled_time: Option<String>,
    uniqueness_key: Option<String>,
) -> Result<TaskKey, ApiError> {
    let ordering_id = required(ordering_id, "orderingId")?;
    let uniqueness_key = required(uniqueness_key, "uniquenessKey")?;
    let time = required(scheduled_time, "scheduledTime")?;
    let scheduled_time = parse_rfc3339(&time, "scheduledTime")?;
    Ok(Task::new(
        ordering_id,
        scheduled_time,
        uniqueness_key,
        Default::default(),
    )
    .key())
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
    let key = match query.scheduled_time.filter(|t| !t.is_empty()) {
        Some(time) => parse_key(query.ordering_id, Some(time), query.uniqueness_key)?,
        // By identity: its current task (scheduled with a conflict mode).
        None => {
            let identity = parse_identity(query.ordering_id, query.uniqueness_key)?;
            let partition = partition_for(&identity.ordering_id, state.partition_count);
            let record = state
                .store
                .identity(partition, identity.clone())
                .await
                .map_err(store_error)?;
            match record {
                Some(record) => record.task.key(),
                None => {
                    return Err(ApiError {
                        status: StatusCode::NOT_FOUND,
                        message: format!(
                            "no task of identity {identity} was scheduled with a conflict mode \
                             (or its record expired); give scheduledTime to look a task up by its key"
                        ),
                    })
                }
            }
        }
    };
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
            .map_or("pending", |s| s.status.as_str())
            .to_string(),
        attempts: attempt_count,
        last_error: status.as_ref().and_then(|s| s.last_error.clone()),
        updated_at: status.as_ref().map(|s| wire::format_time(s.updated_at)),
        task_data: task.map(|t| Value::Object(t.task_data)),
        history: if attempts.is_empty() {
            status
                .as_ref()
                .and_then(first_and_final)
                .into_iter()
                .collect()
        } else {
            attempts
                .into_iter()
                .take(history)
                .map(|a| AttemptView {
                    attempt: a.attempt,
                    started_at: Some(wire::format_time(a.started_at)),
                    finished_at: wire::format_time(a.finished_at),
                    duration_ms: Some((a.finished_at - a.started_at).num_milliseconds()),
                    outcome: a.outcome.as_str().to_string(),
                    error: a.error,
                })
                .collect()
        },
    }))
}

/// The attempt a task finished on its first try, which has no attempt record: its status
/// holds its end and outcome.
fn first_and_final(status: &StatusRecord) -> Option<AttemptView> {
    let outcome = match status.status {
        TaskStatus::Completed => AttemptOutcome::Succeeded,
        TaskStatus::Dropped => AttemptOutcome::Invalid,
        TaskStatus::Failed => AttemptOutcome::Failed,
        TaskStatus::Cancelled => return None,
    };
    (status.attempts == 1).then(|| AttemptView {
        attempt: 1,
        started_at: status.started_at.map(wire::format_time),
        finished_at: wire::format_time(status.updated_at),
        duration_ms: (status.started_at).map(|s| (status.updated_at - s).num_milliseconds()),
        outcome: outcome.as_str().to_string(),
        error: status.last_error.clone(),
    })
}

async fn cancel(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<TaskKeyBody>, JsonRejection>,
) -> Result<(StatusCode, Json<CancelResponse>), ApiError> {
    let Json(body) = body?;
    let (sent, task, ordering_id) = match body.scheduled_time.filter(|t| !t.is_empty()) {
        Some(time) => {
            let key = parse_key(body.ordering_id, Some(time), body.uniqueness_key)?;
            let sent = state.canceller.cancel_task(&key).await;
            (sent, key.to_string(), key.ordering_id)
        }
        None => {
            let identity = parse_identity(body.ordering_id, body.uniqueness_key)?;
            let sent = state.canceller.cancel_identity(&identity).await;
            (sent, identity.to_string(), identity.ordering_id)
        }
    };
    sent.map_err(enqueue_error)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(CancelResponse {
            note: "The owning node applies it in order with the partition's tasks: the task will not run. \
                   A task already running is not interrupted, and a task that already finished keeps its status. \
                   Without scheduledTime, it cancels the pending task of the identity (scheduled with a conflict mode)."
                .to_string(),
            partition: partition_for(&ordering_id, state.partition_count),
            result: "cancellation enqueued".to_string(),
            task,
        }),
    ))
}

/// A record the client refuses (too long a key, say) is the caller's to fix; Kafka failing is
/// not.
fn enqueue_error(e: scheduler_client::ScheduleError) -> ApiError {
    ApiError {
        status: if e.is_rejection() {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::BAD_GATEWAY
        },
        message: e.to_string(),
    }
}

/// `POST /api/v1/task/reschedule`: moves the pending task of an identity to `scheduledTime`.
async fn reschedule(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<TaskKeyBody>, JsonRejection>,
) -> Result<(StatusCode, Json<CancelResponse>), ApiError> {
    let Json(body) = body?;
    let key = parse_key(body.ordering_id, body.scheduled_time, body.uniqueness_key)?;
    let identity = TaskIdentity::new(key.ordering_id.clone(), key.uniqueness_key.clone());
    state
        .canceller
        .reschedule(&identity, key.scheduled_time)
        .await
        .map_err(enqueue_error)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(CancelResponse {
            note: "The owning node applies it in order with the partition's tasks: the pending task \
                   of the identity (scheduled with a conflict mode) moves to the new time, with its data. \
                   Nothing happens if none is pending then."
                .to_string(),
            partition: partition_for(&key.ordering_id, state.partition_count),
            result: "reschedule enqueued".to_string(),
            task: format!("{identity} to {}", wire::format_time(key.scheduled_time)),
        }),
    ))
}

async fn metrics(State(state): State<Arc<AdminState>>) -> Response {
    let text = state.node_metrics.encode();
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
