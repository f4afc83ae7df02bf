//! The dead letters: `GET /api/v1/dead-letters` lists them a page at a time,
//! `POST /api/v1/dead-letters/redrive` enqueues them again (as new tasks due now, with their
//! type, data and priority and a fresh retry budget; the letter stays, marked redriven, with
//! its history), `POST /api/v1/dead-letters/purge` deletes them.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use scheduler_client::{truncate_to_millis, wire, TaskKey};

use super::api::{
    DeadLetterCursor, DeadLetterQuery, DeadLetterSelection, DeadLetterView, DeadLettersResponse,
    PurgeResponse, RedriveResponse,
};
use super::parse_key;
use super::state::{parse_rfc3339, store_error, AdminState, ApiError};
use crate::store::{schedule_start, DeadLetter, DeadLetterFilter};

/// Largest page of `GET /api/v1/dead-letters`.
pub(super) const MAX_PAGE: usize = 1000;
/// Dead letters read per page while redriving or purging a filtered set.
const BATCH: usize = 500;
/// Most new task keys a redrive answer lists.
const MAX_LISTED: usize = 1000;

fn parse_time(value: Option<String>, name: &str) -> Result<Option<DateTime<Utc>>, ApiError> {
    value
        .filter(|v| !v.is_empty())
        .map(|text| parse_rfc3339(&text, name))
        .transpose()
}

/// The filter of a type and a window, defaulting to every time the schedule can hold.
fn filter(
    task_type: Option<String>,
    from: Option<String>,
    to: Option<String>,
    include_redriven: bool,
) -> Result<DeadLetterFilter, ApiError> {
    let from = parse_time(from, "from")?.unwrap_or_else(schedule_start);
    let to = parse_time(to, "to")?.unwrap_or_else(wire::latest_time);
    if from >= to {
        return Err(ApiError::bad_request("from must be earlier than to"));
    }
    Ok(DeadLetterFilter {
        task_type: task_type.filter(|t| !t.is_empty()),
        from,
        to,
        include_redriven,
    })
}

fn view(letter: &DeadLetter) -> DeadLetterView {
    let task = &letter.task;
    DeadLetterView {
        ordering_id: task.ordering_id.clone(),
        scheduled_time: wire::format_time(task.scheduled_time),
        uniqueness_key: task.uniqueness_key.clone(),
        task_type: task.task_type.clone(),
        priority: task.priority,
        partition: letter.partition,
        task_data: serde_json::Value::Object(task.task_data.clone()),
        attempts: letter.attempts,
        last_error: letter.last_error.clone(),
        reason: letter.reason.as_str().to_string(),
        dead_at: wire::format_time(letter.dead_at),
        redriven_at: letter.redriven_at.map(wire::format_time),
        redrives: letter.redrives,
    }
}

pub(super) async fn list(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<DeadLetterQuery>, QueryRejection>,
) -> Result<Json<DeadLettersResponse>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    let filter = filter(
        query.task_type,
        query.from,
        query.to,
        query.include_redriven.unwrap_or(false),
    )?;
    let after = match (
        query.after_ordering_id,
        query.after_scheduled_time,
        query.after_uniqueness_key,
    ) {
        (None, None, None) => None,
        (o, t, u) => Some(parse_key(o, t, u).map_err(|e| ApiError {
            message: format!("a page cursor needs afterOrderingId, afterScheduledTime and afterUniquenessKey: {}", e.message),
            ..e
        })?),
    };
    let letters = state
        .store
        .dead_letters(filter, after, limit)
        .await
        .map_err(store_error)?;
    let next = (letters.len() == limit)
        .then(|| letters.last())
        .flatten()
        .map(|last| DeadLetterCursor {
            after_ordering_id: last.task.ordering_id.clone(),
            after_scheduled_time: wire::format_time(last.task.scheduled_time),
            after_uniqueness_key: last.task.uniqueness_key.clone(),
        });
    Ok(Json(DeadLettersResponse {
        dead_letters: letters.iter().map(view).collect(),
        next,
    }))
}

/// What a selection names: one letter, or every letter a filter admits.
enum Selected {
    One(TaskKey),
    Filtered(DeadLetterFilter),
}

fn selected(body: DeadLetterSelection, include_redriven: bool) -> Result<Selected, ApiError> {
    let by_key = body.ordering_id.is_some()
        || body.scheduled_time.is_some()
        || body.uniqueness_key.is_some();
    let by_filter = body.task_type.is_some() || body.from.is_some() || body.to.is_some();
    match (by_key, by_filter, body.all) {
        (true, false, false) => Ok(Selected::One(parse_key(
            body.ordering_id,
            body.scheduled_time,
            body.uniqueness_key,
        )?)),
        (false, true, false) | (false, false, true) => Ok(Selected::Filtered(filter(
            body.task_type,
            body.from,
            body.to,
            include_redriven,
        )?)),
        (false, false, false) => Err(ApiError::bad_request(
            "name the dead letters: a task (orderingId, scheduledTime, uniquenessKey), a filter \
             (taskType, from, to) or \"all\": true",
        )),
        _ => Err(ApiError::bad_request(
            "name the dead letters one way only: a task's key, a filter, or \"all\": true",
        )),
    }
}

/// What to do with each selected dead letter.
#[derive(Clone, Copy)]
enum Action {
    Redrive,
    Purge,
}

/// Applies `action` to every selected letter, a page at a time (a page is read after the
/// previous one was handled: a purge deletes what it read, so paging resumes after the last
/// key). Returns how many, and the first [`MAX_LISTED`] resulting keys.
async fn apply_to_selected(
    state: &AdminState,
    selection: Selected,
    action: Action,
) -> Result<(usize, Vec<String>), ApiError> {
    let (mut count, mut listed) = (0, Vec::new());
    let mut note = |key: TaskKey| {
        count += 1;
        if listed.len() < MAX_LISTED {
            listed.push(key.to_string());
        }
    };
    match selection {
        Selected::One(key) => {
            let letter = state
                .store
                .dead_letter(key.clone())
                .await
                .map_err(store_error)?
                .ok_or_else(|| ApiError {
                    status: StatusCode::NOT_FOUND,
                    message: format!("no dead letter of task {key}"),
                })?;
            note(apply(state, letter, action).await?);
        }
        Selected::Filtered(filter) => {
            let mut after = None;
            loop {
                let page = state
                    .store
                    .dead_letters(filter.clone(), after.clone(), BATCH)
                    .await
                    .map_err(store_error)?;
                let full = page.len() == BATCH;
                for letter in page {
                    after = Some(letter.task.key());
                    note(apply(state, letter, action).await?);
                }
                if !full {
                    break;
                }
            }
        }
    }
    Ok((count, listed))
}

/// Redrives `letter` (the new task's key) or purges it (its key).
async fn apply(
    state: &AdminState,
    letter: DeadLetter,
    action: Action,
) -> Result<TaskKey, ApiError> {
    let key = letter.task.key();
    match action {
        Action::Purge => {
            state
                .store
                .remove_dead_letter(key.clone())
                .await
                .map_err(store_error)?;
            Ok(key)
        }
        Action::Redrive => {
            let now = truncate_to_millis(Utc::now());
            let task = letter.redriven(now);
            let new_key = task.key();
            let task_type = task.task_type.clone();
            // The dead task's failure first, if its status write was cut off: a redriven
            // identity's task supersedes it, and no tree would record it after that.
            state
                .store
                .record_status_if_absent(letter.partition, key.clone(), letter.failed_status())
                .await
                .map_err(store_error)?;
            state
                .canceller
                .schedule_task(task)
                .await
                .map_err(|e| ApiError {
                    status: StatusCode::BAD_GATEWAY,
                    message: format!("redriving {key}: {e}"),
                })?;
            // Enqueued first: a letter marked redriven always was.
            state
                .store
                .mark_redriven(key.clone(), letter.redrives + 1, now)
                .await
                .map_err(store_error)?;
            state.metrics.redriven(&task_type);
            tracing::info!(task = %key, redriven_as = %new_key, "dead letter redriven");
            Ok(new_key)
        }
    }
}

pub(super) async fn redrive(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<DeadLetterSelection>, JsonRejection>,
) -> Result<Json<RedriveResponse>, ApiError> {
    let Json(body) = body?;
    let selection = selected(body, false)?;
    let (redriven, tasks) = apply_to_selected(&state, selection, Action::Redrive).await?;
    Ok(Json(RedriveResponse { redriven, tasks }))
}

pub(super) async fn purge(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<DeadLetterSelection>, JsonRejection>,
) -> Result<Json<PurgeResponse>, ApiError> {
    let Json(body) = body?;
    let selection = selected(body, true)?;
    let (purged, _) = apply_to_selected(&state, selection, Action::Purge).await?;
    state.metrics.purged(purged);
    tracing::info!(purged, "dead letters purged");
    Ok(Json(PurgeResponse { purged }))
}
