//! `GET /dashboard/task?orderingId=&uniquenessKey=&scheduledTime=`: a task's status, data and
//! attempt history, as the API's task lookup answers it (the same handler; without
//! `scheduledTime`, the current task of an identity scheduled with a conflict mode); a pending
//! task's cancel button (confirmed first) and, for an identity's task, a move to another time
//! (`POST /dashboard/task/cancel`, `/reschedule`: the API's handlers, then back to the task).

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, RawForm, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::html::{escape, notice, or_dash, query, when, when_or_dash, Page, Section};
use crate::admin::api::{TaskKeyBody, TaskQuery, TaskResponse};
use crate::admin::state::{AdminState, ApiError};

/// Attempts the page shows, newest first.
const HISTORY: usize = 20;

/// The page's query: the task's key (the API's lookup), and what a form just did.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskPageQuery {
    ordering_id: Option<String>,
    scheduled_time: Option<String>,
    uniqueness_key: Option<String>,
    /// `cancel` or `reschedule`: the form that brought the browser back here.
    done: Option<String>,
}

/// `GET /dashboard/task`
pub(crate) async fn page(
    State(state): State<Arc<AdminState>>,
    page: Page,
    query: Result<Query<TaskPageQuery>, QueryRejection>,
) -> Response {
    let title = "Task lookup";
    let query = match query {
        Ok(Query(query)) => query,
        Err(e) => {
            let message = e.body_text();
            return page.error(StatusCode::BAD_REQUEST, Section::Task, title, &message);
        }
    };
    let query_key = TaskQuery {
        ordering_id: query.ordering_id,
        scheduled_time: query.scheduled_time,
        uniqueness_key: query.uniqueness_key,
        history: Some(HISTORY),
    };
    let mut html = String::new();
    match query.done.as_deref() {
        Some("cancel") => html.push_str(&notice(
            "Cancellation enqueued: the owning node applies it in order with the partition's \
             tasks (a task already running is not interrupted). Reload to see its status.",
        )),
        Some("reschedule") => html.push_str(&notice(
            "Move enqueued: the owning node moves the identity's pending task to its new time. \
             Reload to see it here.",
        )),
        _ => {}
    }
    html.push_str(&lookup_form(&page, &query_key));
    let asked = [&query_key.ordering_id, &query_key.uniqueness_key]
        .iter()
        .any(|v| v.as_deref().is_some_and(|v| !v.is_empty()));
    if !asked {
        return page.render(StatusCode::OK, Section::Task, title, "", &html);
    }
    let now = Utc::now();
    let status = match crate::admin::task(State(Arc::clone(&state)), Ok(Query(query_key))).await {
        Ok(Json(task)) => {
            html.push_str(&render(&task, now));
            if task.status == "pending" {
                let identity = current_of_identity(&state, &task).await;
                html.push_str(&actions(&page, &task, identity, now));
            }
            StatusCode::OK
        }
        Err(ApiError { status, message }) => {
            let _ = writeln!(
                html,
                "<p class=\"error\" id=\"error\">{} ({})</p>",
                escape(&message),
                status.as_u16()
            );
            status
        }
    };
    page.render(status, Section::Task, title, "", &html)
}

/// Whether `task` is the pending task of its identity (scheduled with a conflict mode), which
/// the API can move to another time.
async fn current_of_identity(state: &Arc<AdminState>, task: &TaskResponse) -> bool {
    let identity = TaskQuery {
        ordering_id: Some(task.ordering_id.clone()),
        uniqueness_key: Some(task.uniqueness_key.clone()),
        history: Some(0),
        ..TaskQuery::default()
    };
    let found = crate::admin::task(State(Arc::clone(state)), Ok(Query(identity))).await;
    found.is_ok_and(|Json(current)| current.scheduled_time == task.scheduled_time)
}

/// A pending task's buttons: cancel (confirmed first), and, for an identity's task, move.
fn actions(page: &Page, task: &TaskResponse, identity: bool, now: DateTime<Utc>) -> String {
    let key = |html: &mut String| {
        let _ = write!(
            html,
            "<input type=\"hidden\" name=\"orderingId\" value=\"{}\">\
             <input type=\"hidden\" name=\"scheduledTime\" value=\"{}\">\
             <input type=\"hidden\" name=\"uniquenessKey\" value=\"{}\">",
            escape(&task.ordering_id),
            escape(&task.scheduled_time),
            escape(&task.uniqueness_key),
        );
    };
    let mut html = String::from("<section id=\"actions\"><h3>Actions</h3>");
    let _ = write!(
        html,
        "<form id=\"cancel-task\" class=\"filter\" method=\"post\" action=\"{}\">",
        escape(&page.url("/task/cancel"))
    );
    key(&mut html);
    html.push_str(
        "<label class=\"check\"><span><input id=\"confirm-cancel\" type=\"checkbox\" \
         name=\"confirm\" value=\"yes\" required> yes, cancel it: it will not run</span></label>\
         <button id=\"cancel\" class=\"danger\" type=\"submit\">Cancel task</button></form>",
    );
    if identity {
        let _ = write!(
            html,
            "<form id=\"reschedule-task\" class=\"filter\" method=\"post\" action=\"{}\">",
            escape(&page.url("/task/reschedule"))
        );
        key(&mut html);
        let _ = write!(
            html,
            "<label>Move to <input id=\"new-time\" name=\"newTime\" required \
             placeholder=\"{}\"></label><button id=\"reschedule\" type=\"submit\">Move</button>\
             </form>",
            escape(&scheduler_client::wire::format_time(
                now + chrono::TimeDelta::hours(1)
            )),
        );
    } else {
        html.push_str(
            "<p class=\"hint\" id=\"no-move\">Only an identity's pending task (scheduled with \
             a conflict mode) can be moved to another time; to move this one, cancel it and \
             schedule it again.</p>",
        );
    }
    html.push_str("</section>\n");
    html
}

/// The cancel and move buttons' form.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ActionForm {
    ordering_id: Option<String>,
    scheduled_time: Option<String>,
    uniqueness_key: Option<String>,
    confirm: Option<String>,
    new_time: Option<String>,
}

/// `POST /dashboard/task/cancel`: the API's cancel, once confirmed, then back to the task.
pub(crate) async fn cancel(
    State(state): State<Arc<AdminState>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    let title = "Task lookup";
    let form: ActionForm = match page.form(&body, Section::Task, title) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    if form.confirm.as_deref() != Some("yes") {
        let message = "a cancel must be confirmed (the form's checkbox)";
        return page.error(StatusCode::BAD_REQUEST, Section::Task, title, message);
    }
    let key = TaskKeyBody {
        ordering_id: form.ordering_id.clone(),
        scheduled_time: form.scheduled_time.clone(),
        uniqueness_key: form.uniqueness_key.clone(),
    };
    match crate::admin::cancel(State(state), Ok(Json(key))).await {
        Ok(_) => back_to_task(&page, &form, form.scheduled_time.as_deref(), "cancel"),
        Err(e) => page.error(e.status, Section::Task, title, &e.message),
    }
}

/// `POST /dashboard/task/reschedule`: the API's move of an identity's pending task, then back
/// to the identity's task.
pub(crate) async fn reschedule(
    State(state): State<Arc<AdminState>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    let title = "Task lookup";
    let form: ActionForm = match page.form(&body, Section::Task, title) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let key = TaskKeyBody {
        ordering_id: form.ordering_id.clone(),
        scheduled_time: form.new_time.as_deref().map(|t| t.trim().to_string()),
        uniqueness_key: form.uniqueness_key.clone(),
    };
    match crate::admin::reschedule(State(state), Ok(Json(key))).await {
        // The identity's current task: the one at its new time.
        Ok(_) => back_to_task(&page, &form, None, "reschedule"),
        Err(e) => page.error(e.status, Section::Task, title, &e.message),
    }
}

/// Back to the form's task at `scheduled_time` (without it, its identity's current task),
/// saying what was `done`. 303: the browser follows with a GET, so a reload does not post
/// again.
fn back_to_task(
    page: &Page,
    form: &ActionForm,
    scheduled_time: Option<&str>,
    done: &str,
) -> Response {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let q = query(&[
        ("orderingId", &text(&form.ordering_id)),
        ("scheduledTime", scheduled_time.unwrap_or_default()),
        ("uniquenessKey", &text(&form.uniqueness_key)),
        ("done", done),
    ]);
    Redirect::to(&page.url(&format!("/task?{q}"))).into_response()
}

fn lookup_form(page: &Page, query: &TaskQuery) -> String {
    let value = |v: &Option<String>| escape(v.as_deref().unwrap_or_default());
    format!(
        "<form class=\"lookup\" method=\"get\" action=\"{}\">\
         <label>orderingId <input id=\"ordering-id\" name=\"orderingId\" value=\"{}\" required></label>\
         <label>uniquenessKey <input id=\"uniqueness-key\" name=\"uniquenessKey\" value=\"{}\" required></label>\
         <label>scheduledTime <input id=\"scheduled-time\" name=\"scheduledTime\" value=\"{}\" \
         placeholder=\"2026-11-22T06:00:00.000Z (empty: the identity's current task)\"></label>\
         <button id=\"look-up\" type=\"submit\">Look up</button></form>\n",
        escape(&page.url("/task")),
        value(&query.ordering_id),
        value(&query.uniqueness_key),
        value(&query.scheduled_time),
    )
}

/// Task data longer than this (pretty-printed) is folded on the task's page.
const FOLD_DATA_BYTES: usize = 4 * 1024;

/// The task's answer as HTML.
pub(crate) fn render(task: &TaskResponse, now: DateTime<Utc>) -> String {
    let mut html = String::new();
    let _ = writeln!(
        html,
        "<section id=\"task\"><h2><code>{}</code> / <code>{}</code> / <code>{}</code></h2>\
         <dl class=\"facts\"><dt>Status</dt><dd><span id=\"task-status\" class=\"status {}\">{}</span></dd>\
         <dt>Attempts</dt><dd id=\"task-attempts\">{}</dd><dt>Partition</dt><dd id=\"task-partition\">{}</dd>\
         <dt>Last error</dt><dd id=\"task-last-error\" class=\"error-text\">{}</dd>\
         <dt>Due</dt><dd>{}</dd><dt>Finished at</dt><dd>{}</dd></dl>",
        escape(&task.ordering_id),
        escape(&task.scheduled_time),
        escape(&task.uniqueness_key),
        escape(&task.status),
        escape(&task.status),
        task.attempts,
        task.partition,
        or_dash(task.last_error.as_deref()),
        when(&task.scheduled_time, now),
        when_or_dash(task.updated_at.as_deref(), now),
    );
    match &task.task_data {
        // Large data is folded: the page opens on the task's facts, not on a wall of JSON.
        Some(data) => {
            let pretty = serde_json::to_string_pretty(data).unwrap_or_default();
            let _ = match pretty.len() > FOLD_DATA_BYTES {
                true => writeln!(
                    html,
                    "<h3>Data</h3><details id=\"task-data-folded\"><summary>{:.1} KiB of JSON: \
                     show</summary><pre id=\"task-data\">{}</pre></details>",
                    pretty.len() as f64 / 1024.0,
                    escape(&pretty)
                ),
                false => writeln!(
                    html,
                    "<h3>Data</h3><pre id=\"task-data\">{}</pre>",
                    escape(&pretty)
                ),
            };
        }
        None => {
            html.push_str("<p class=\"muted\">Its data left the schedule when it finished.</p>\n")
        }
    }
    html.push_str("<h3>Attempt history</h3>\n");
    if task.history.is_empty() {
        html.push_str("<p class=\"muted\" id=\"no-attempts\">No attempt yet.</p>\n");
    } else {
        html.push_str(
            "<table id=\"attempt-history\"><thead><tr><th>Attempt</th><th>Started</th>\
             <th>Finished</th><th>Took</th><th>Outcome</th><th>Error</th></tr></thead><tbody>\n",
        );
        for a in &task.history {
            let _ = writeln!(
                html,
                "<tr class=\"attempt\"><td data-field=\"attempt\">{}</td><td>{}</td><td>{}</td>\
                 <td data-field=\"took\">{}</td>\
                 <td data-field=\"outcome\"><span class=\"status {o}\">{o}</span></td>\
                 <td class=\"error-text\">{}</td></tr>",
                a.attempt,
                when_or_dash(a.started_at.as_deref(), now),
                when(&a.finished_at, now),
                or_dash(a.duration_ms.map(|ms| format!("{ms} ms")).as_deref()),
                or_dash(a.error.as_deref()),
                o = escape(&a.outcome),
            );
        }
        html.push_str("</tbody></table>\n");
    }
    html.push_str("</section>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::api::AttemptView;

    #[test]
    fn a_task_shows_its_status_data_and_every_attempt_escaped() {
        let task = TaskResponse {
            ordering_id: "o<1>".into(),
            scheduled_time: "2026-03-01T12:00:00.000Z".into(),
            uniqueness_key: "u".into(),
            partition: 3,
            status: "dropped".into(),
            attempts: 2,
            last_error: Some("bad <input>".into()),
            updated_at: Some("2026-03-01T12:00:01.000Z".into()),
            task_data: Some(serde_json::json!({"html": "<b>"})),
            history: vec![
                AttemptView {
                    attempt: 2,
                    started_at: Some("2026-03-01T12:00:00.900Z".into()),
                    finished_at: "2026-03-01T12:00:01.000Z".into(),
                    duration_ms: Some(100),
                    outcome: "invalid".into(),
                    error: Some("bad <input>".into()),
                },
                AttemptView {
                    attempt: 1,
                    started_at: None,
                    finished_at: "2026-03-01T12:00:00.500Z".into(),
                    duration_ms: None,
                    outcome: "failed".into(),
                    error: None,
                },
            ],
        };
        let now = DateTime::parse_from_rfc3339("2026-03-01T12:00:01Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let html = render(&task, now);
        for expected in [
            "<code>o&lt;1&gt;</code>",
            "id=\"task-status\" class=\"status dropped\">dropped<",
            "id=\"task-attempts\">2<",
            "id=\"task-partition\">3<",
            "bad &lt;input&gt;",
            "&quot;html&quot;: &quot;&lt;b&gt;&quot;",
            "<td data-field=\"attempt\">2</td><td><time datetime=\"2026-03-01T12:00:00.900Z\">\
             2026-03-01T12:00:00.900Z</time> <span class=\"ago\">(now)</span></td>",
            "<dt>Due</dt><dd><time datetime=\"2026-03-01T12:00:00.000Z\">2026-03-01T12:00:00.000Z\
             </time> <span class=\"ago\">(1 s ago)</span></dd>",
            "<td data-field=\"attempt\">1</td><td><span class=\"none\">—</span></td>",
            "class=\"status invalid\">invalid<",
            "<td data-field=\"took\">100 ms</td>",
        ] {
            assert!(html.contains(expected), "{expected} missing from {html}");
        }
        assert!(!html.contains("<b>") && !html.contains("<input>"), "{html}");
        assert!(
            !html.contains("task-data-folded"),
            "small data is shown: {html}"
        );
    }

    #[test]
    fn large_task_data_is_folded() {
        let task = TaskResponse {
            ordering_id: "o".into(),
            scheduled_time: "2026-03-01T12:00:00.000Z".into(),
            uniqueness_key: "u".into(),
            partition: 0,
            status: "pending".into(),
            attempts: 0,
            last_error: None,
            updated_at: None,
            task_data: Some(serde_json::json!({"blob": "x".repeat(500 * 1024)})),
            history: Vec::new(),
        };
        let html = render(&task, Utc::now());
        assert!(
            html.contains(
                "<details id=\"task-data-folded\"><summary>500.0 KiB of JSON: show</summary>"
            ),
            "{}",
            &html[..html.len().min(600)]
        );
    }
}
