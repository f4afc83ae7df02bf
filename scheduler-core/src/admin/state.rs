//! What every handler of the admin API takes (the node's state) and answers on failure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use scheduler_client::Scheduler;

use super::api::ErrorResponse;
use super::api::QueueView;
use crate::in_flight::InFlightGauges;
use crate::metrics::{Metrics, NodeMetrics};
use crate::recurring::RecurringSchedules;
use crate::store::{PartitionId, StoreError, TaskStore};

/// What the API reads and acts on.
pub struct AdminState {
    /// Identifies the node in responses.
    pub node_id: String,
    /// The queue this state is of.
    pub queue: String,
    /// Every queue the node serves (the root's first).
    pub queues: Vec<QueueView>,
    /// The scheduler's topic.
    pub topic: String,
    /// Its partition count.
    pub partition_count: u32,
    /// Partitions the node owns now.
    pub owned: Arc<Mutex<Vec<PartitionId>>>,
    /// The queue's metrics.
    pub metrics: Arc<Metrics>,
    /// Every queue's, for `/metrics`.
    pub node_metrics: Arc<NodeMetrics>,
    /// Tasks in memory per partition.
    pub in_flight: InFlightGauges,
    /// Consumer lag per partition, from the Kafka client's statistics.
    pub lag: Arc<Mutex<HashMap<PartitionId, i64>>>,
    /// Where tasks, statuses and attempts are read.
    pub store: Arc<dyn TaskStore>,
    /// Sends cancellations and redriven dead letters to the topic.
    pub canceller: Arc<Scheduler>,
    /// The queue's recurring schedules.
    pub schedules: RecurringSchedules,
    /// The task types the node has a handler for.
    pub handlers: Vec<String>,
    /// Whether a handler of the node runs every other type too.
    pub handles_every_type: bool,
    /// The bearer token every request must carry, if any.
    pub token: Option<String>,
    /// How far in the past a task enqueued over HTTP may be due (the queue's grace window).
    pub scheduling_grace_window: std::time::Duration,
    /// Largest encoded task enqueued over HTTP (the queue's `max_task_data_bytes`).
    pub max_task_bytes: usize,
    /// The queue's per-key limits on this node (none in tests without a node).
    pub limits: Option<crate::limits::Limits>,
    /// The node's remote workers (none if it takes none).
    pub workers: Option<crate::remote::RemoteWorkers>,
    /// The queue's tasks waiting for a retry on this node (none in tests without a node).
    pub retrying: Option<crate::retrying::RetryingTasks>,
}

/// An error answered as JSON.
#[derive(Debug)]
pub struct ApiError {
    pub(super) status: StatusCode,
    pub(super) message: String,
}

impl ApiError {
    pub(super) fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    pub(super) fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }
}

/// A JSON body a route could not take: over the listener's limit, 413 (the JSON errors layer
/// names the limit); else 400, saying what was wrong with it.
impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError {
            status,
            message: rejection.body_text(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorResponse {
                error: self.message,
            }),
        )
            .into_response()
    }
}

/// A store failure, answered as 503 (the caller may try again).
pub(super) fn store_error(e: StoreError) -> ApiError {
    ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: e.to_string(),
    }
}

/// `value`, answered 400 "`name` is required" when absent or empty.
pub(super) fn required(value: Option<String>, name: &str) -> Result<String, ApiError> {
    value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad_request(format!("{name} is required")))
}

/// `text` as an RFC 3339 time, answered 400 naming `name` when it is not one.
pub(super) fn parse_rfc3339(
    text: &str,
    name: &str,
) -> Result<chrono::DateTime<chrono::Utc>, ApiError> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|_| {
            ApiError::bad_request(format!(
                "{name} {text:?} is not an RFC 3339 timestamp such as 2026-11-22T06:00:00.000Z"
            ))
        })
}
