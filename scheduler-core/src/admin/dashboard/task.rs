//! `GET /dashboard/task?orderingId=&uniquenessKey=&scheduledTime=`: a task's status, data and
//! attempt history, as the API's task lookup answers it (the same handler; without
//! `scheduledTime`, the current task of an identity scheduled with a conflict mode).

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;

use super::html::{escape, or_dash, Page, Section};
use crate::admin::api::{TaskQuery, TaskResponse};
use crate::admin::state::{AdminState, ApiError};

/// Attempts the page shows, newest first.
const HISTORY: usize = 20;

/// `GET /dashboard/task`
pub(crate) async fn page(
    State(state): State<Arc<AdminState>>,
    page: Page,
    query: Result<Query<TaskQuery>, QueryRejection>,
) -> Response {
    let title = "Task lookup";
    let query = match query {
        Ok(Query(query)) => query,
        Err(e) => {
            let message = e.body_text();
            return page.error(StatusCode::BAD_REQUEST, Section::Task, title, &message);
        }
    };
    let mut html = lookup_form(&page, &query);
    let asked = [&query.ordering_id, &query.uniqueness_key]
        .iter()
        .any(|v| v.as_deref().is_some_and(|v| !v.is_empty()));
    if !asked {
        return page.render(StatusCode::OK, Section::Task, title, "", &html);
    }
    let lookup = TaskQuery {
        history: Some(HISTORY),
        ..query
    };
    let status = match crate::admin::task(State(state), Ok(Query(lookup))).await {
        Ok(Json(task)) => {
            html.push_str(&render(&task));
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
pub(crate) fn render(task: &TaskResponse) -> String {
    let mut html = String::new();
    let _ = writeln!(
        html,
        "<section id=\"task\"><h2><code>{}</code> / <code>{}</code> / <code>{}</code></h2>\
         <dl class=\"facts\"><dt>Status</dt><dd><span id=\"task-status\" class=\"status {}\">{}</span></dd>\
         <dt>Attempts</dt><dd id=\"task-attempts\">{}</dd><dt>Partition</dt><dd id=\"task-partition\">{}</dd>\
         <dt>Last error</dt><dd id=\"task-last-error\" class=\"error-text\">{}</dd>\
         <dt>Finished at</dt><dd>{}</dd></dl>",
        escape(&task.ordering_id),
        escape(&task.scheduled_time),
        escape(&task.uniqueness_key),
        escape(&task.status),
        escape(&task.status),
        task.attempts,
        task.partition,
        or_dash(task.last_error.as_deref()),
        or_dash(task.updated_at.as_deref()),
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
                or_dash(a.started_at.as_deref()),
                escape(&a.finished_at),
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
        let html = render(&task);
        for expected in [
            "<code>o&lt;1&gt;</code>",
            "id=\"task-status\" class=\"status dropped\">dropped<",
            "id=\"task-attempts\">2<",
            "id=\"task-partition\">3<",
            "bad &lt;input&gt;",
            "&quot;html&quot;: &quot;&lt;b&gt;&quot;",
            "<td data-field=\"attempt\">2</td><td>2026-03-01T12:00:00.900Z</td>",
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
        let html = render(&task);
        assert!(
            html.contains(
                "<details id=\"task-data-folded\"><summary>500.0 KiB of JSON: show</summary>"
            ),
            "{}",
            &html[..html.len().min(600)]
        );
    }
}
