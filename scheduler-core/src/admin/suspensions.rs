//! Suspensions: `GET /api/v1/suspensions` lists them, `POST /api/v1/suspensions` suspends an
//! orderingId, a task type or a group (every node then holds its tasks pending, without an
//! attempt, from its next read of the suspensions), `DELETE /api/v1/suspensions?kind=&target=`
//! lifts one (idempotent).

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::Utc;
use scheduler_client::{truncate_to_millis, wire};

use super::api::{SuspendRequest, SuspensionQuery, SuspensionView, SuspensionsResponse};
use super::state::{required, store_error, AdminState, ApiError};
use crate::store::{Suspension, SuspensionTarget};

/// The longest reason, in bytes: every node reads every suspension every few seconds.
pub(super) const MAX_REASON_BYTES: usize = 1024;

fn view(suspension: &Suspension) -> SuspensionView {
    SuspensionView {
        kind: suspension.target.kind().to_string(),
        target: suspension.target.target(),
        since: wire::format_time(suspension.since),
        reason: suspension.reason.clone(),
    }
}

/// The target that `kind` and `target` name, as stored: a known kind, a target that is not
/// empty, and a group's written `<type>/<id>`.
fn named_target(
    kind: Option<String>,
    target: Option<String>,
) -> Result<SuspensionTarget, ApiError> {
    let kind = required(kind, "kind")?;
    let target = required(target, "target")?;
    SuspensionTarget::parse(&kind, &target).ok_or_else(|| {
        ApiError::bad_request(if kind == "group" {
            format!(
                "a group's target is <type>/<id> (the type that joins it, then its id), \
                 not {target:?}"
            )
        } else {
            format!("kind must be orderingId, taskType or group, not {kind:?}")
        })
    })
}

/// [`named_target`], with each part within the limits of what a task can carry (a target no
/// task can have would suspend nothing).
fn checked_target(
    kind: Option<String>,
    target: Option<String>,
) -> Result<SuspensionTarget, ApiError> {
    let target = named_target(kind, target)?;
    let bad = |e: wire::ContentError| ApiError::bad_request(e.to_string());
    let too_long = |what: &str, bytes: usize, max: usize| {
        ApiError::bad_request(format!(
            "{what} is {bytes} bytes, over the {max}-byte limit"
        ))
    };
    match &target {
        SuspensionTarget::OrderingId(id) if id.len() > wire::MAX_ORDERING_ID_BYTES => Err(
            too_long("the orderingId", id.len(), wire::MAX_ORDERING_ID_BYTES),
        ),
        SuspensionTarget::OrderingId(_) => Ok(()),
        SuspensionTarget::TaskType(task_type) => wire::check_task_type(task_type).map_err(bad),
        SuspensionTarget::Group { task_type, id } => {
            wire::check_task_type(task_type).map_err(bad)?;
            match id.len() {
                0 => Err(ApiError::bad_request(
                    "a group's target is <type>/<id>: its id is empty",
                )),
                n if n > wire::MAX_GROUP_ID_BYTES => {
                    Err(too_long("the group's id", n, wire::MAX_GROUP_ID_BYTES))
                }
                _ => Ok(()),
            }
        }
    }?;
    Ok(target)
}

pub(super) async fn list(
    State(state): State<Arc<AdminState>>,
) -> Result<Json<SuspensionsResponse>, ApiError> {
    let mut suspensions: Vec<SuspensionView> = state
        .store
        .suspensions()
        .await
        .map_err(store_error)?
        .iter()
        .map(view)
        .collect();
    suspensions.sort_by(|a, b| (&a.kind, &a.target).cmp(&(&b.kind, &b.target)));
    Ok(Json(SuspensionsResponse { suspensions }))
}

pub(super) async fn suspend(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<SuspendRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<SuspensionView>), ApiError> {
    let Json(body) = body?;
    let target = checked_target(body.kind, body.target)?;
    let reason = body.reason.filter(|r| !r.is_empty());
    if let Some(reason) = &reason {
        if reason.len() > MAX_REASON_BYTES {
            return Err(ApiError::bad_request(format!(
                "reason is {} bytes, over the {MAX_REASON_BYTES}-byte limit",
                reason.len()
            )));
        }
    }
    // To the millisecond, as stored: the answer is what a listing shows.
    let suspension = Suspension {
        target,
        since: truncate_to_millis(Utc::now()),
        reason,
    };
    state
        .store
        .suspend(suspension.clone())
        .await
        .map_err(store_error)?;
    tracing::info!(suspension = %suspension.target, reason = suspension.reason.as_deref(), "suspended");
    Ok((StatusCode::CREATED, Json(view(&suspension))))
}

/// Lifts a suspension. The target is only checked to be well formed, so that whatever a listing
/// shows can be lifted.
pub(super) async fn resume(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<SuspensionQuery>, QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let target = named_target(query.kind, query.target)?;
    state
        .store
        .resume(target.clone())
        .await
        .map_err(store_error)?;
    tracing::info!(suspension = %target, "resumed");
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(kind: &str, target: &str) -> Result<SuspensionTarget, String> {
        checked_target(Some(kind.into()), Some(target.into())).map_err(|e| {
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            e.message
        })
    }

    #[test]
    fn targets_of_each_kind_are_checked_with_a_message_naming_the_fault() {
        assert_eq!(
            checked("group", "recon/2026-05"),
            Ok(SuspensionTarget::Group {
                task_type: "recon".into(),
                id: "2026-05".into()
            })
        );
        assert_eq!(
            checked("taskType", "send-email"),
            Ok(SuspensionTarget::TaskType("send-email".into()))
        );
        assert_eq!(
            checked("orderingId", "customer 7"),
            Ok(SuspensionTarget::OrderingId("customer 7".into()))
        );
        let long = "x".repeat(wire::MAX_ORDERING_ID_BYTES + 1);
        for (kind, target, says) in [
            (
                "queue",
                "emails",
                "kind must be orderingId, taskType or group",
            ),
            ("group", "recon", "<type>/<id>"),
            ("group", "recon/", "its id is empty"),
            ("group", "/2026-05", "taskType \"\""),
            ("taskType", "send email", "not 1 to 128 ASCII"),
            ("orderingId", long.as_str(), "over the 1024-byte limit"),
            ("orderingId", "", "target is required"),
            ("", "x", "kind is required"),
        ] {
            let message = checked(kind, target).err().unwrap_or_default();
            assert!(message.contains(says), "{kind} {target:.20}: {message}");
        }
    }

    #[test]
    fn any_well_formed_target_can_be_lifted() {
        let lifted = named_target(Some("taskType".into()), Some("send email".into()));
        assert_eq!(
            lifted.ok(),
            Some(SuspensionTarget::TaskType("send email".into()))
        );
    }
}
