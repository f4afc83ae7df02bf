//! Recurring schedules: `GET /api/v1/schedules` lists them, `POST /api/v1/schedules` creates or
//! redefines one (the definition's JSON; the same definition again changes nothing),
//! `GET /api/v1/schedules/{id}` shows one with its next fire times and last fires,
//! `POST /api/v1/schedules/{id}/pause` and `/resume`, `DELETE /api/v1/schedules/{id}`, and
//! `POST /api/v1/schedules/preview` shows a definition's next fire times without creating it.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::TimeDelta;
use scheduler_client::wire;

use super::api::{
    FireView, PreviewQuery, PreviewResponse, ScheduleDetail, ScheduleView, SchedulesResponse,
};
use super::state::{store_error, AdminState, ApiError};
use crate::recurring::{run_key, RecurringError, ScheduleSpec};
use crate::store::{FireOutcome, FireRecord, ScheduleRecord};

/// Fires `GET /api/v1/schedules/{id}` shows.
const FIRES_SHOWN: usize = 20;
/// Most next fire times a preview shows.
pub(super) const MAX_PREVIEW: usize = 100;

fn view(record: &ScheduleRecord, state: &AdminState) -> ScheduleView {
    let description = match record.spec.validate() {
        Ok(cadence) => cadence.describe(),
        Err(e) => format!("invalid: {e}"),
    };
    let now = state.schedules.now();
    ScheduleView {
        definition: record.spec.clone(),
        description,
        paused: record.paused,
        revision: record.revision,
        created_at: wire::format_time(record.created_at),
        updated_at: wire::format_time(record.updated_at),
        // (A tick in flight at the pause may write its next fire time after it.)
        next_fire: (record.next_fire.filter(|_| !record.paused)).map(wire::format_time),
        last_fire: record.last_fire.map(wire::format_time),
        stalled: !record.paused
            && record
                .next_fire
                .is_some_and(|next| next + TimeDelta::minutes(1) < now),
    }
}

fn fire_view(id: &str, fire: &FireRecord) -> FireView {
    let mut view = FireView {
        fire_time: wire::format_time(fire.fire_time),
        outcome: fire.outcome.as_str().to_string(),
        run_time: None,
        missed_count: None,
        missed_last: None,
        run_key: None,
    };
    match &fire.outcome {
        FireOutcome::Enqueued { run_time } => {
            view.run_time = Some(wire::format_time(*run_time));
            view.run_key = Some(run_key(id, fire.fire_time));
        }
        FireOutcome::Missed { count, last } => {
            view.missed_count = Some(*count);
            view.missed_last = Some(wire::format_time(*last));
        }
        FireOutcome::SkippedOverlap => {}
    }
    view
}

fn schedule_error(e: RecurringError) -> ApiError {
    match e {
        RecurringError::Invalid(_) | RecurringError::NoFireTime(_) => {
            ApiError::bad_request(e.to_string())
        }
        RecurringError::NotFound(_) => ApiError::not_found(e.to_string()),
        RecurringError::Store(e) => store_error(e),
        RecurringError::Enqueue { .. } | RecurringError::Stopped(_) => ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: e.to_string(),
        },
    }
}

fn count(query: Result<Query<PreviewQuery>, QueryRejection>) -> Result<usize, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    match query.count.unwrap_or(5) {
        n @ 1..=MAX_PREVIEW => Ok(n),
        n => Err(ApiError::bad_request(format!(
            "count must be 1 to {MAX_PREVIEW}, not {n}"
        ))),
    }
}

pub(super) async fn list(
    State(state): State<Arc<AdminState>>,
) -> Result<Json<SchedulesResponse>, ApiError> {
    let records = state.schedules.list().await.map_err(schedule_error)?;
    let schedules = records.iter().map(|r| view(r, &state)).collect();
    Ok(Json(SchedulesResponse { schedules }))
}

pub(super) async fn create(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<ScheduleSpec>, JsonRejection>,
) -> Result<(StatusCode, Json<ScheduleView>), ApiError> {
    let Json(spec) = body?;
    let existed = (state.schedules.get(&spec.id).await)
        .map_err(schedule_error)?
        .is_some();
    let record = state.schedules.create(spec).await.map_err(schedule_error)?;
    let status = match existed {
        false => StatusCode::CREATED,
        true => StatusCode::OK,
    };
    Ok((status, Json(view(&record, &state))))
}

pub(super) async fn show(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    query: Result<Query<PreviewQuery>, QueryRejection>,
) -> Result<Json<ScheduleDetail>, ApiError> {
    let count = count(query)?;
    let record = (state.schedules.get(&id).await.map_err(schedule_error)?)
        .ok_or_else(|| ApiError::not_found(format!("no schedule {id}")))?;
    let fires = (state.schedules.fires(&id, FIRES_SHOWN).await).map_err(schedule_error)?;
    let upcoming = match (record.paused, record.spec.validate()) {
        (false, Ok(cadence)) => {
            let from = record.next_fire.unwrap_or_else(|| state.schedules.now());
            let first = record.next_fire.into_iter();
            first
                .chain(cadence.preview(from, count))
                .take(count)
                .map(wire::format_time)
                .collect()
        }
        _ => Vec::new(),
    };
    Ok(Json(ScheduleDetail {
        schedule: view(&record, &state),
        upcoming,
        fires: fires.iter().map(|f| fire_view(&id, f)).collect(),
    }))
}

pub(super) async fn pause(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    let record = state.schedules.pause(&id).await.map_err(schedule_error)?;
    Ok(Json(view(&record, &state)))
}

pub(super) async fn resume(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    let record = state.schedules.resume(&id).await.map_err(schedule_error)?;
    Ok(Json(view(&record, &state)))
}

pub(super) async fn delete(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    match state.schedules.delete(&id).await.map_err(schedule_error)? {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(ApiError::not_found(format!("no schedule {id}"))),
    }
}

pub(super) async fn preview(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<PreviewQuery>, QueryRejection>,
    body: Result<Json<ScheduleSpec>, JsonRejection>,
) -> Result<Json<PreviewResponse>, ApiError> {
    let count = count(query)?;
    let Json(mut spec) = body?;
    // Nothing is created: an id is not needed.
    if spec.id.is_empty() {
        spec.id = "preview".to_string();
    }
    let cadence = spec
        .validate()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let upcoming = cadence.preview(state.schedules.now(), count);
    Ok(Json(PreviewResponse {
        description: cadence.describe(),
        upcoming: upcoming.into_iter().map(wire::format_time).collect(),
    }))
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};
    use serde_json::json;

    use crate::admin::test_app::{app, call};

    /// A schedule named `preview` could be created, then neither shown nor deleted: `GET` and
    /// `DELETE /api/v1/schedules/preview` reach the preview's route, which answers 405.
    #[tokio::test]
    async fn no_schedule_takes_the_name_of_the_preview_route() {
        let app = app();
        let body = |id: &str| json!({"id": id, "every": "1m", "taskType": "t"}).to_string();
        let (status, answer) = call(
            &app,
            Method::POST,
            Some(&body("preview")),
            "/api/v1/schedules",
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(answer.contains("choose another"), "{answer}");
        let (status, answer) = call(
            &app,
            Method::POST,
            Some(&body("previews")),
            "/api/v1/schedules",
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let (status, answer) = call(&app, Method::GET, None, "/api/v1/schedules/previews").await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        // A preview's definition may name it: it is never stored.
        let (status, answer) = call(
            &app,
            Method::POST,
            Some(&body("preview")),
            "/api/v1/schedules/preview",
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
}
