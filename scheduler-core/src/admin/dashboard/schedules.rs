//! `GET /dashboard/schedules[?id=]`: the queue's recurring schedules as the API lists them
//! (the same handler), each with a pause or resume button (`POST /dashboard/schedules/pause`,
//! `/resume`: the API's), and one with its next fire times and last fires (`?id=`, as
//! `GET /api/v1/schedules/{id}` answers), each enqueued run linking to its task.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, RawForm, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Json;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;

use super::html::{escape, notice, or_dash, query, when, when_or_dash, Page, Section};
use crate::admin::api::{PreviewQuery, ScheduleDetail, ScheduleView};
use crate::admin::schedules;
use crate::admin::state::{AdminState, ApiError};

/// Next fire times a schedule's detail shows.
const UPCOMING: usize = 5;

/// The page's query: the schedule to show in detail, and what a button just did.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ScheduleQuery {
    id: Option<String>,
    done: Option<String>,
}

/// The pause and resume buttons' form.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ScheduleForm {
    id: String,
}

/// `POST /dashboard/schedules/pause`
pub(crate) async fn pause(
    State(state): State<Arc<AdminState>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    pause_or_resume(state, page, body, true).await
}

/// `POST /dashboard/schedules/resume`
pub(crate) async fn resume(
    State(state): State<Arc<AdminState>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    pause_or_resume(state, page, body, false).await
}

/// The API's pause or resume of the form's schedule, then back to the list.
async fn pause_or_resume(
    state: Arc<AdminState>,
    page: Page,
    body: axum::body::Bytes,
    pause: bool,
) -> Response {
    let title = "Recurring schedules";
    let ScheduleForm { id } = match page.form(&body, Section::Schedules, title) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let done = match pause {
        true => schedules::pause(State(state), Path(id))
            .await
            .map(|_| "paused"),
        false => schedules::resume(State(state), Path(id))
            .await
            .map(|_| "resumed"),
    };
    match done {
        // 303: the browser follows with a GET, so a reload does not post again.
        Ok(done) => Redirect::to(&page.url(&format!("/schedules?done={done}"))).into_response(),
        Err(e) => page.error(e.status, Section::Schedules, title, &e.message),
    }
}

/// `GET /dashboard/schedules`
pub(crate) async fn page(
    State(state): State<Arc<AdminState>>,
    page: Page,
    query: Result<Query<ScheduleQuery>, QueryRejection>,
) -> Response {
    let title = "Recurring schedules";
    let fail = |e: ApiError| page.error(e.status, Section::Schedules, title, &e.message);
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => return fail(ApiError::bad_request(e.body_text())),
    };
    let listed = match schedules::list(State(Arc::clone(&state))).await {
        Ok(Json(listed)) => listed.schedules,
        Err(e) => return fail(e),
    };
    let now = Utc::now();
    let mut html = String::new();
    match query.done.as_deref() {
        Some("paused") => html.push_str(&notice(
            "Paused: no run is enqueued until it is resumed (a tick already due may still fire once).",
        )),
        Some("resumed") => html.push_str(&notice("Resumed from its next fire time.")),
        _ => {}
    }
    html.push_str(&list(&page, &listed, now));
    if let Some(id) = query.id.filter(|id| !id.is_empty()) {
        let count = Ok(Query(PreviewQuery {
            count: Some(UPCOMING),
        }));
        match schedules::show(State(state), Path(id), count).await {
            Ok(Json(detail)) => html.push_str(&detail_section(&page, &detail, now)),
            Err(e) => return fail(e),
        }
    }
    page.render(StatusCode::OK, Section::Schedules, title, "", &html)
}

/// The schedules as a table, one row each.
pub(crate) fn list(page: &Page, listed: &[ScheduleView], now: DateTime<Utc>) -> String {
    if listed.is_empty() {
        return "<p class=\"muted\" id=\"no-schedules\">No recurring schedule in this queue.</p>\n"
            .into();
    }
    let mut html = String::from(
        "<table id=\"schedules\"><thead><tr><th>Schedule</th><th>Cadence</th><th>Task type</th>\
         <th>State</th><th>Next fire</th><th>Last fire</th><th>Revision</th><th></th></tr></thead><tbody>\n",
    );
    for s in listed {
        let id = &s.definition.id;
        let state = match (s.paused, s.stalled) {
            (true, _) => "paused",
            (false, true) => "stalled",
            (false, false) => "active",
        };
        let _ = writeln!(
            html,
            "<tr class=\"schedule\" data-schedule=\"{}\"><td><a href=\"{}\"><code>{}</code></a></td>\
             <td>{}</td><td>{}</td><td data-field=\"state\"><span class=\"status {state}\">{state}</span></td>\
             <td data-field=\"nextFire\">{}</td><td data-field=\"lastFire\">{}</td>\
             <td data-field=\"revision\" title=\"revision {}\">{}</td><td><form method=\"post\" \
             action=\"{}\"><input type=\"hidden\" name=\"id\" value=\"{}\"><button class=\"{}\" \
             type=\"submit\">{}</button></form></td></tr>",
            escape(id),
            escape(&page.url(&format!("/schedules?{}", query(&[("id", id)])))),
            escape(id),
            escape(&s.description),
            escape(&s.definition.task_type),
            when_or_dash(s.next_fire.as_deref(), now),
            when_or_dash(s.last_fire.as_deref(), now),
            s.revision,
            escape(&revision_time(s.revision)),
            escape(&page.url(if s.paused { "/schedules/resume" } else { "/schedules/pause" })),
            escape(id),
            if s.paused { "resume" } else { "pause" },
            if s.paused { "Resume" } else { "Pause" },
        );
    }
    html.push_str("</tbody></table>\n");
    html
}

/// A revision as the time of the change that made it (a revision is that time in epoch
/// milliseconds, or one more than the one before it).
fn revision_time(revision: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(revision)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_else(|| revision.to_string())
}

/// One schedule: its definition, next fire times and last fires.
pub(crate) fn detail_section(page: &Page, detail: &ScheduleDetail, now: DateTime<Utc>) -> String {
    let spec = &detail.schedule.definition;
    let definition = serde_json::to_string_pretty(spec).unwrap_or_default();
    let ordering_id = spec
        .ordering_id
        .clone()
        .unwrap_or_else(|| format!("schedule:{}", spec.id));
    let mut html = format!(
        "<section id=\"schedule\"><h2><code>{}</code></h2><p>{}; created {}, updated {}.</p>\
         <h3>Definition</h3><pre>{}</pre><h3>Next fire times</h3>",
        escape(&spec.id),
        escape(&detail.schedule.description),
        escape(&detail.schedule.created_at),
        escape(&detail.schedule.updated_at),
        escape(&definition),
    );
    if detail.upcoming.is_empty() {
        html.push_str("<p class=\"muted\">None: it is paused.</p>");
    } else {
        html.push_str("<ol id=\"upcoming\">");
        for time in &detail.upcoming {
            let _ = write!(html, "<li>{}</li>", when(time, now));
        }
        html.push_str("</ol>");
    }
    html.push_str("<h3>Last fires</h3>");
    if detail.fires.is_empty() {
        html.push_str("<p class=\"muted\">None yet.</p></section>\n");
        return html;
    }
    html.push_str(
        "<table id=\"fires\"><thead><tr><th>Fire time</th><th>Outcome</th><th>Run</th></tr>\
         </thead><tbody>\n",
    );
    for fire in &detail.fires {
        let run = match (&fire.run_time, &fire.run_key, fire.missed_count) {
            (Some(time), Some(key), _) => format!(
                "<a href=\"{}\">due {}</a>",
                escape(&page.task_url(&ordering_id, time, key)),
                escape(time)
            ),
            (_, _, Some(n)) => format!(
                "{n} fire times missed, to {}",
                or_dash(fire.missed_last.as_deref())
            ),
            _ => "—".to_string(),
        };
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{run}</td></tr>",
            when(&fire.fire_time, now),
            escape(&fire.outcome),
        );
    }
    html.push_str("</tbody></table></section>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::revision_time;

    #[test]
    fn a_revision_shows_as_the_time_of_its_change() {
        assert_eq!(revision_time(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
        assert_eq!(revision_time(i64::MAX), i64::MAX.to_string());
    }
}
