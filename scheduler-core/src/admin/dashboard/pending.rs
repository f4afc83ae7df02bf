//! `GET /dashboard/pending`: the tasks not done yet, a page at a time, as the API lists them
//! (`GET /api/v1/tasks`, the same handler): in a window around now, of one type, in one state
//! (waiting, overdue, retrying, suspended, limited), or of one orderingId alone; the engine's own
//! ticks left out unless asked for. Above them, this node's retrying set
//! (`GET /api/v1/tasks/retrying`): each task's next attempt, how many it made and why the last
//! failed.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use chrono::{DateTime, TimeDelta, Utc};
use scheduler_client::wire;
use serde::Deserialize;

use super::html::{escape, or_dash, query, when, Page, Section};
use crate::admin::api::{ListQuery, ListResponse, ListedTask, PendingState, RetryingResponse};
use crate::admin::listing;
use crate::admin::state::AdminState;

/// Tasks a page lists.
const PAGE: usize = 100;
/// Retrying tasks the page shows (the API's answer has their total).
const RETRYING_SHOWN: usize = 50;
/// Data shown in a row, in characters (the task's page has all of it).
const DATA_CHARS: usize = 80;

/// The windows the page offers: (value, label, how far back, how far ahead of now).
const WINDOWS: [(&str, &str, TimeDelta, TimeDelta); 5] = [
    (
        "1h",
        "the last and next hour",
        TimeDelta::hours(1),
        TimeDelta::hours(1),
    ),
    (
        "1d",
        "the last hour and next day",
        TimeDelta::hours(1),
        TimeDelta::days(1),
    ),
    (
        "7d",
        "the last hour and next 7 days",
        TimeDelta::hours(1),
        TimeDelta::days(7),
    ),
    (
        "30d",
        "the last hour and next 30 days",
        TimeDelta::hours(1),
        TimeDelta::days(30),
    ),
    (
        "overdue",
        "due in the last 30 days",
        TimeDelta::days(30),
        TimeDelta::zero(),
    ),
];

/// The page's query: the filters, and where a later page starts (`from`, `to` and the key).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PendingQuery {
    window: Option<String>,
    task_type: Option<String>,
    ordering_id: Option<String>,
    state: Option<String>,
    internal: Option<String>,
    from: Option<String>,
    to: Option<String>,
    from_ordering_id: Option<String>,
    from_uniqueness_key: Option<String>,
}

impl PendingQuery {
    fn text(value: &Option<String>) -> &str {
        value.as_deref().unwrap_or_default()
    }

    fn internal(&self) -> bool {
        self.internal.as_deref().is_some_and(|v| !v.is_empty())
    }
}

/// `GET /dashboard/pending`
pub(crate) async fn page(
    State(state): State<Arc<AdminState>>,
    page: Page,
    query: Result<Query<PendingQuery>, QueryRejection>,
) -> Response {
    let title = "Pending tasks";
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => {
            let message = e.body_text();
            return page.error(StatusCode::BAD_REQUEST, Section::Pending, title, &message);
        }
    };
    let now = Utc::now();
    let window = (WINDOWS.iter())
        .find(|(value, ..)| Some(*value) == query.window.as_deref())
        .unwrap_or(&WINDOWS[1]);
    let (_, _, back, ahead) = *window;
    let state_filter = match query.state.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => match PendingState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
        {
            Some(state) => Some(state),
            None => {
                let message =
                    format!("no state {s:?}: waiting, overdue, retrying, suspended or limited");
                return page.error(StatusCode::BAD_REQUEST, Section::Pending, title, &message);
            }
        },
    };
    let non_empty = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
    let listed = ListQuery {
        from: non_empty(&query.from).or_else(|| Some(wire::format_time(now - back))),
        to: non_empty(&query.to).or_else(|| Some(wire::format_time(now + ahead))),
        limit: Some(PAGE),
        from_ordering_id: non_empty(&query.from_ordering_id),
        from_uniqueness_key: non_empty(&query.from_uniqueness_key),
        task_type: non_empty(&query.task_type),
        ordering_id: non_empty(&query.ordering_id),
        state: state_filter,
        include_internal: Some(query.internal()),
    };
    let to = listed.to.clone().unwrap_or_default();
    let mut html = filter_form(&page, &query, window.0);
    let Json(retrying) = listing::retrying(State(Arc::clone(&state))).await;
    retrying_table(&mut html, &page, &retrying, now);
    let status = match listing::tasks(State(state), Ok(Query(listed))).await {
        Ok(Json(tasks)) => {
            tasks_table(&mut html, &page, &tasks, &query, window.0, &to, now);
            StatusCode::OK
        }
        Err(e) => {
            let _ = writeln!(
                html,
                "<p class=\"error\" id=\"error\">{} ({})</p>",
                escape(&e.message),
                e.status.as_u16()
            );
            e.status
        }
    };
    page.render(status, Section::Pending, title, "", &html)
}

fn filter_form(page: &Page, query: &PendingQuery, window: &str) -> String {
    let mut html = format!(
        "<form class=\"filter\" id=\"pending-filter\" method=\"get\" action=\"{}\">\
         <label>Due in <select name=\"window\" id=\"window\">",
        escape(&page.url("/pending"))
    );
    for (value, label, ..) in WINDOWS {
        let selected = if value == window { " selected" } else { "" };
        let _ = write!(html, "<option value=\"{value}\"{selected}>{label}</option>");
    }
    html.push_str("</select></label><label>State <select name=\"state\" id=\"state\"><option value=\"\">any</option>");
    for name in PendingState::ALL.map(PendingState::as_str) {
        let selected = if query.state.as_deref() == Some(name) {
            " selected"
        } else {
            ""
        };
        let _ = write!(html, "<option value=\"{name}\"{selected}>{name}</option>");
    }
    let _ = write!(
        html,
        "</select></label><label>Task type <input id=\"task-type\" name=\"taskType\" value=\"{}\"></label>\
         <label>orderingId <input id=\"ordering-id\" name=\"orderingId\" value=\"{}\"></label>\
         <label class=\"check\"><span><input type=\"checkbox\" name=\"internal\" value=\"1\"{}> \
         the engine's ticks too</span></label>\
         <button id=\"filter\" type=\"submit\">Show</button></form>\n\
         <p class=\"hint\">States are this node's view: a retry or a limit of a task another node \
         runs shows here as overdue. An orderingId reads only its partition. Dead letters are on \
         <a href=\"{}\">their page</a>.</p>\n",
        escape(PendingQuery::text(&query.task_type)),
        escape(PendingQuery::text(&query.ordering_id)),
        if query.internal() { " checked" } else { "" },
        escape(&page.url("/dead-letters")),
    );
    html
}

fn retrying_table(html: &mut String, page: &Page, retrying: &RetryingResponse, now: DateTime<Utc>) {
    let _ = writeln!(
        html,
        "<h2>Retrying on this node: <span id=\"retrying-count\">{}</span></h2>",
        retrying.total
    );
    if retrying.tasks.is_empty() {
        html.push_str(
            "<p class=\"muted\" id=\"no-retrying\">No task waits for a retry here.</p>\n",
        );
        return;
    }
    html.push_str(
        "<table id=\"retrying\"><thead><tr><th>Task</th><th>Type</th><th>Attempts</th>\
         <th>Next attempt</th><th>Last error</th></tr></thead><tbody>\n",
    );
    for t in retrying.tasks.iter().take(RETRYING_SHOWN) {
        let _ = writeln!(
            html,
            "<tr class=\"retrying\" data-ordering-id=\"{}\"><td class=\"key\"><a href=\"{}\"><code>{}</code><br>\
             <code>{}</code></a></td><td>{}</td><td data-field=\"attempts\">{}</td>\
             <td data-field=\"next-attempt\">{}</td><td class=\"error-text\">{}</td></tr>",
            escape(&t.ordering_id),
            escape(&page.task_url(&t.ordering_id, &t.scheduled_time, &t.uniqueness_key)),
            escape(&t.ordering_id),
            escape(&t.uniqueness_key),
            escape(&t.task_type),
            t.retry.attempts,
            when(&t.retry.next_attempt_at, now),
            or_dash(t.retry.error.as_deref()),
        );
    }
    html.push_str("</tbody></table>\n");
}

/// What a state's badge says beside it: a retry's next attempt, a suspension's target.
fn detail(task: &ListedTask, now: DateTime<Utc>) -> String {
    match (&task.retry, &task.suspended_by) {
        (Some(retry), _) => format!(
            "<br><span class=\"muted\">attempt {} next {}</span>",
            retry.attempts + 1,
            when(&retry.next_attempt_at, now)
        ),
        (None, Some(by)) => format!("<br><span class=\"muted\">by {}</span>", escape(by)),
        (None, None) => String::new(),
    }
}

/// The first [`DATA_CHARS`] characters of a task's data, as JSON.
fn data_preview(task: &ListedTask) -> String {
    let text = task.task_data.to_string();
    match text.char_indices().nth(DATA_CHARS) {
        Some((cut, _)) => format!("{}…", escape(&text[..cut])),
        None => escape(&text),
    }
}

fn tasks_table(
    html: &mut String,
    page: &Page,
    tasks: &ListResponse,
    query: &PendingQuery,
    window: &str,
    to: &str,
    now: DateTime<Utc>,
) {
    html.push_str("<h2>Pending</h2>\n");
    if tasks.tasks.is_empty() {
        html.push_str("<p class=\"muted\" id=\"no-pending\">No pending task on this page.</p>\n");
    } else {
        html.push_str(
            "<table id=\"pending\"><thead><tr><th>Task</th><th>Type</th><th>Due</th><th>State</th>\
             <th>Partition</th><th>Data</th></tr></thead><tbody>\n",
        );
        for t in &tasks.tasks {
            let state = t.state.as_str();
            let _ = writeln!(
                html,
                "<tr class=\"pending\" data-ordering-id=\"{o}\" data-uniqueness-key=\"{u}\" \
                 data-state=\"{s}\"><td class=\"key\"><a href=\"{}\"><code>{o}</code><br><code>{u}</code></a></td>\
                 <td data-field=\"type\">{}</td><td data-field=\"due\">{}</td>\
                 <td data-field=\"state\"><span class=\"status {s}\">{s}</span>{}</td>\
                 <td>{}</td><td><code>{}</code></td></tr>",
                escape(&page.task_url(&t.ordering_id, &t.scheduled_time, &t.uniqueness_key)),
                escape(&t.task_type),
                when(&t.scheduled_time, now),
                detail(t, now),
                t.partition,
                data_preview(t),
                o = escape(&t.ordering_id),
                u = escape(&t.uniqueness_key),
                s = state,
            );
        }
        html.push_str("</tbody></table>\n");
    }
    if let Some(next) = &tasks.next {
        let q = self::query(&[
            ("window", window),
            ("taskType", PendingQuery::text(&query.task_type)),
            ("orderingId", PendingQuery::text(&query.ordering_id)),
            ("state", PendingQuery::text(&query.state)),
            ("internal", if query.internal() { "1" } else { "" }),
            ("from", &next.from),
            ("to", to),
            ("fromOrderingId", &next.from_ordering_id),
            ("fromUniquenessKey", &next.from_uniqueness_key),
        ]);
        let _ = writeln!(
            html,
            "<p><a id=\"next-page\" href=\"{}\">Next page</a> <span class=\"muted\">(a page reads \
             {PAGE} tasks; the filters may leave fewer)</span></p>",
            escape(&page.url(&format!("/pending?{q}")))
        );
    }
}
