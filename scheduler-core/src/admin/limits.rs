//! Per-key limits: `GET /api/v1/limits` lists the overrides set at run time and this node's use
//! of each limited key (permits held, calls running, tasks held at the limit); `PUT
//! /api/v1/limits` sets one key's override (every node applies it within its next read of the
//! overrides, 2 s); `DELETE /api/v1/limits?limitKey=&taskType=` removes it (idempotent).

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::Utc;
use scheduler_client::{truncate_to_millis, wire};

use super::api::{KeyLimitQuery, KeyLimitRequest, KeyLimitView, KeyUseView, LimitsResponse};
use super::state::{required, store_error, AdminState, ApiError};
use crate::settings::{is_key_burst, is_key_rate};
use crate::store::key_limits::MAX_KEY_LIMITS;
use crate::store::{KeyLimit, LimitValues};

/// The most calls at once an override allows a key.
pub(super) const MAX_CONCURRENCY: u32 = 1_000_000;
/// The largest weight of a key's share of the executor.
pub(super) const MAX_WEIGHT: u32 = 1_000;

fn view(limit: &KeyLimit) -> KeyLimitView {
    KeyLimitView {
        limit_key: limit.limit_key.clone(),
        task_type: limit.task_type.clone(),
        concurrency: limit.values.concurrency,
        rate: limit.values.rate,
        burst: limit.values.burst,
        weight: limit.values.weight,
        updated_at: wire::format_time(limit.updated_at),
    }
}

/// The key and type an override is of: a key a task can carry, and a type name.
fn named(
    limit_key: Option<String>,
    task_type: Option<String>,
) -> Result<(String, Option<String>), ApiError> {
    let limit_key = required(limit_key, "limitKey")?;
    let bad = |e: wire::ContentError| ApiError::bad_request(e.to_string());
    wire::check_limit_key(Some(&limit_key)).map_err(bad)?;
    let task_type = task_type.filter(|t| !t.is_empty());
    if let Some(task_type) = &task_type {
        wire::check_task_type(task_type).map_err(bad)?;
    }
    Ok((limit_key, task_type))
}

/// The values of `request`, each within its bounds, at least one set.
fn values(request: &KeyLimitRequest) -> Result<LimitValues, ApiError> {
    let out_of =
        |what: &str, bounds: &str| ApiError::bad_request(format!("{what} must be {bounds}"));
    let values = LimitValues {
        concurrency: request.concurrency,
        rate: request.rate,
        burst: request.burst,
        weight: request.weight,
    };
    if values
        .concurrency
        .is_some_and(|n| !(1..=MAX_CONCURRENCY).contains(&n))
    {
        return Err(out_of("concurrency", "1 to 1000000"));
    }
    if !is_key_rate(values.rate) {
        return Err(out_of(
            "rate",
            "over 0 and at most 1000000 (starts a second)",
        ));
    }
    if !is_key_burst(values.burst) {
        return Err(out_of("burst", "1 to 1000000"));
    }
    if values
        .weight
        .is_some_and(|w| !(1..=MAX_WEIGHT).contains(&w))
    {
        return Err(out_of("weight", "1 to 1000"));
    }
    if values == LimitValues::default() {
        return Err(ApiError::bad_request(
            "set at least one of concurrency, rate, burst and weight",
        ));
    }
    Ok(values)
}

pub(super) async fn list(
    State(state): State<Arc<AdminState>>,
) -> Result<Json<LimitsResponse>, ApiError> {
    let mut overrides: Vec<KeyLimitView> = (state.store.key_limits().await)
        .map_err(store_error)?
        .iter()
        .map(view)
        .collect();
    overrides.sort_by(|a, b| (&a.limit_key, &a.task_type).cmp(&(&b.limit_key, &b.task_type)));
    let keys = (state.limits.as_ref())
        .map(|limits| limits.keys())
        .unwrap_or_default()
        .into_iter()
        .map(|k| KeyUseView {
            limit_key: k.limit_key,
            task_type: k.task_type,
            permits: k.permits,
            running: k.running,
            held: k.held,
        })
        .collect();
    Ok(Json(LimitsResponse { overrides, keys }))
}

pub(super) async fn set(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<KeyLimitRequest>, JsonRejection>,
) -> Result<Json<KeyLimitView>, ApiError> {
    let Json(body) = body?;
    let (limit_key, task_type) = named(body.limit_key.clone(), body.task_type.clone())?;
    let values = values(&body)?;
    let existing = state.store.key_limits().await.map_err(store_error)?;
    let replaces = (existing.iter()).any(|l| l.limit_key == limit_key && l.task_type == task_type);
    if !replaces && existing.len() >= MAX_KEY_LIMITS {
        return Err(ApiError::bad_request(format!(
            "there are {MAX_KEY_LIMITS} overrides already, the most a queue keeps: remove one first"
        )));
    }
    // To the millisecond, as stored: the answer is what a listing shows.
    let limit = KeyLimit {
        task_type,
        limit_key,
        values,
        updated_at: truncate_to_millis(Utc::now()),
    };
    (state.store.set_key_limit(limit.clone()).await).map_err(store_error)?;
    tracing::info!(limit_key = %limit.limit_key, task_type = limit.task_type.as_deref(),
        values = ?limit.values, "per-key limit set");
    Ok(Json(view(&limit)))
}

/// Removes an override. The key is only checked to be well formed, so that whatever a listing
/// shows can be removed.
pub(super) async fn remove(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<KeyLimitQuery>, QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let (limit_key, task_type) = named(query.limit_key, query.task_type)?;
    (state
        .store
        .remove_key_limit(task_type.clone(), limit_key.clone())
        .await)
        .map_err(store_error)?;
    tracing::info!(%limit_key, task_type = task_type.as_deref(), "per-key limit removed");
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: serde_json::Value) -> KeyLimitRequest {
        serde_json::from_value(json).expect("a request")
    }

    #[test]
    fn each_value_is_checked_against_its_bounds_with_a_message_naming_it() {
        let ok = values(&request(
            serde_json::json!({"limitKey": "k", "concurrency": 2, "weight": 3}),
        ));
        assert_eq!(ok.ok().and_then(|v| v.weight), Some(3));
        for (body, says) in [
            (
                serde_json::json!({"concurrency": 0}),
                "concurrency must be 1 to",
            ),
            (serde_json::json!({"rate": 0.0}), "rate must be over 0"),
            (serde_json::json!({"rate": 2e6}), "rate must be over 0"),
            (serde_json::json!({"burst": 0}), "burst must be 1 to"),
            (
                serde_json::json!({"weight": 1001}),
                "weight must be 1 to 1000",
            ),
            (serde_json::json!({}), "set at least one"),
        ] {
            let message = values(&request(body.clone())).err().map(|e| e.message);
            assert!(
                message.as_deref().is_some_and(|m| m.contains(says)),
                "{body}: {message:?}"
            );
        }
        for (key, task_type, says) in [
            (None, None, "limitKey is required"),
            (Some("x".repeat(257)), None, "limit"),
            (Some("k".into()), Some("a type".into()), "taskType"),
        ] {
            let message = named(key, task_type).err().map(|e| e.message);
            assert!(
                message.as_deref().is_some_and(|m| m.contains(says)),
                "{message:?}"
            );
        }
    }
}
