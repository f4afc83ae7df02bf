//! The remote workers' protocol (`crate::remote`, design.md "Remote workers"), on the node's
//! listener behind the same token and cross-site rules as every route:
//! - `POST /api/v1/workers/poll`: a worker's long poll; answers the claims of tasks of its
//!   types, at most its capacity, once there are some or its wait ended (then none);
//! - `POST /api/v1/claims/{claimId}/heartbeat`: moves a live claim's expiry on;
//! - `POST /api/v1/claims/{claimId}/complete`: success (with a small result), retry or invalid;
//! - `GET /api/v1/workers`: the connected workers, their claims and the tasks waiting for one.
//!
//! A heartbeat or completion of a claim that ended (expired, completed, or ended with its call:
//! the partition moved) is answered 409 with why, and nothing is recorded.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::SecondsFormat;
use scheduler_client::wire;

use super::api::{ClaimCompleted, HeartbeatResponse, PollResponse, WorkersResponse};
use super::state::{AdminState, ApiError};
use crate::handler::MAX_RESULT_BYTES;
use crate::remote::{Completion, CompletionRefused, RemoteWorkers, WorkerPoll};

/// The most types one worker announces.
pub(super) const MAX_TYPES: usize = 50;
/// The most claims one poll takes.
pub(super) const MAX_CAPACITY: u32 = 100;
/// The longest worker name.
pub(super) const MAX_NAME: usize = 100;
/// The longest error text a completion carries (longer is cut).
const MAX_ERROR: usize = 4096;

fn workers_of(state: &AdminState) -> Result<&RemoteWorkers, ApiError> {
    state.workers.as_ref().ok_or_else(|| {
        ApiError::not_found("this node takes no remote workers ([workers] enabled = false)")
    })
}

fn refused(e: CompletionRefused) -> ApiError {
    ApiError {
        status: StatusCode::CONFLICT,
        message: e.to_string(),
    }
}

/// `poll`'s fields within their bounds.
fn checked(poll: &WorkerPoll) -> Result<(), ApiError> {
    let bad = ApiError::bad_request;
    let name = poll.worker.chars().count();
    if name == 0 || name > MAX_NAME {
        return Err(bad(format!("worker must be 1 to {MAX_NAME} characters")));
    }
    if poll.types.is_empty() || poll.types.len() > MAX_TYPES {
        return Err(bad(format!("types must name 1 to {MAX_TYPES} task types")));
    }
    for task_type in &poll.types {
        wire::check_task_type(task_type).map_err(|e| bad(e.to_string()))?;
    }
    if poll.capacity == 0 || poll.capacity > MAX_CAPACITY {
        return Err(bad(format!("capacity must be 1 to {MAX_CAPACITY}")));
    }
    Ok(())
}

pub(super) async fn poll(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<WorkerPoll>, JsonRejection>,
) -> Result<Json<PollResponse>, ApiError> {
    let workers = workers_of(&state)?.clone();
    let Json(poll) = body?;
    checked(&poll)?;
    let max = workers.settings().max_wait.as_millis() as u64;
    if poll.wait_ms.is_some_and(|wait| wait > max) {
        return Err(ApiError::bad_request(format!(
            "waitMs must be at most {max} (the node's [workers] max_wait)"
        )));
    }
    let claims = workers.poll(poll).await;
    Ok(Json(PollResponse { claims }))
}

pub(super) async fn heartbeat(
    State(state): State<Arc<AdminState>>,
    Path(claim_id): Path<String>,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    let workers = workers_of(&state)?;
    let expires_at = workers.heartbeat(&claim_id).map_err(refused)?;
    Ok(Json(HeartbeatResponse {
        expires_at: expires_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        ttl_ms: workers.settings().claim_ttl.as_millis() as u64,
    }))
}

pub(super) async fn complete(
    State(state): State<Arc<AdminState>>,
    Path(claim_id): Path<String>,
    body: Result<Json<Completion>, JsonRejection>,
) -> Result<Json<ClaimCompleted>, ApiError> {
    let workers = workers_of(&state)?;
    let Json(mut completion) = body?;
    match &mut completion {
        Completion::Success {
            result: Some(result),
        } => {
            let size = serde_json::to_vec(result).map_or(usize::MAX, |b| b.len());
            if size > MAX_RESULT_BYTES {
                return Err(ApiError {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    message: format!(
                        "result is {size} bytes; at most {MAX_RESULT_BYTES} (nothing recorded, the claim is still live)"
                    ),
                });
            }
        }
        Completion::Retry { error, .. } | Completion::Invalid { error } => {
            crate::outcome::cut_error(error, MAX_ERROR)
        }
        Completion::Success { result: None } => {}
    }
    workers.complete(&claim_id, completion).map_err(refused)?;
    Ok(Json(ClaimCompleted { accepted: true }))
}

pub(crate) async fn list(
    State(state): State<Arc<AdminState>>,
) -> Result<Json<WorkersResponse>, ApiError> {
    let workers = workers_of(&state)?;
    Ok(Json(WorkersResponse {
        workers: workers.view(),
        waiting: workers.waiting(),
    }))
}
