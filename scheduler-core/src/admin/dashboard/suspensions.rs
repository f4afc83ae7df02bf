//! `GET /dashboard/suspensions`: the suspensions in force as the API lists them (the same
//! handler), each with a resume button, and a form suspending an orderingId, a task type or a
//! group; `POST /dashboard/suspensions/resume`, `/suspend`: the API's handlers, then back to
//! the list with what they did.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, RawForm, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::html::{escape, notice, or_dash, query, when, Page, Section};
use crate::admin::api::{SuspendRequest, SuspensionQuery, SuspensionView};
use crate::admin::state::AdminState;
use crate::admin::suspensions;

const TITLE: &str = "Suspensions";

/// The page's query: what a button just did (`resumed` or `suspended`, of `kind` and `target`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SuspensionsPageQuery {
    done: Option<String>,
    kind: Option<String>,
    target: Option<String>,
}

/// The resume and suspend forms.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SuspensionForm {
    kind: Option<String>,
    target: Option<String>,
    reason: Option<String>,
}

/// `GET /dashboard/suspensions`
pub(crate) async fn page(
    State(state): State<Arc<AdminState>>,
    page: Page,
    query: Result<Query<SuspensionsPageQuery>, QueryRejection>,
) -> Response {
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => {
            let message = e.body_text();
            return page.error(
                StatusCode::BAD_REQUEST,
                Section::Suspensions,
                TITLE,
                &message,
            );
        }
    };
    let listed = match suspensions::list(State(state)).await {
        Ok(Json(listed)) => listed.suspensions,
        Err(e) => return page.error(e.status, Section::Suspensions, TITLE, &e.message),
    };
    let mut html = String::new();
    if let (Some(done), Some(kind), Some(target)) = (&query.done, &query.kind, &query.target) {
        let what = match done.as_str() {
            "resumed" => "Resumed",
            _ => "Suspended",
        };
        html.push_str(&notice(&format!(
            "{what} {} <code>{}</code>: every node applies it from its next read of the \
             suspensions (within seconds).",
            escape(kind),
            escape(target)
        )));
    }
    html.push_str(
        "<p class=\"hint\">A suspended orderingId, task type or group's tasks wait, pending, \
         without using an attempt, until it is resumed; a call already running is not stopped.</p>\n",
    );
    table(&mut html, &page, &listed, Utc::now());
    suspend_form(&mut html, &page);
    page.render(StatusCode::OK, Section::Suspensions, TITLE, "", &html)
}

fn table(html: &mut String, page: &Page, listed: &[SuspensionView], now: DateTime<Utc>) {
    if listed.is_empty() {
        html.push_str("<p class=\"muted\" id=\"no-suspensions\">Nothing is suspended.</p>\n");
        return;
    }
    html.push_str(
        "<table id=\"suspensions\"><thead><tr><th>Kind</th><th>Target</th><th>Since</th>\
         <th>Reason</th><th></th></tr></thead><tbody>\n",
    );
    let action = escape(&page.url("/suspensions/resume"));
    for s in listed {
        let _ = writeln!(
            html,
            "<tr class=\"suspension\" data-kind=\"{k}\" data-target=\"{t}\"><td>{k}</td>\
             <td><code>{t}</code></td><td>{}</td><td>{}</td><td><form method=\"post\" \
             action=\"{action}\"><input type=\"hidden\" name=\"kind\" value=\"{k}\">\
             <input type=\"hidden\" name=\"target\" value=\"{t}\">\
             <button class=\"resume\" type=\"submit\">Resume</button></form></td></tr>",
            when(&s.since, now),
            or_dash(s.reason.as_deref()),
            k = escape(&s.kind),
            t = escape(&s.target),
        );
    }
    html.push_str("</tbody></table>\n");
}

fn suspend_form(html: &mut String, page: &Page) {
    let _ = writeln!(
        html,
        "<h2>Suspend</h2><form id=\"suspend\" class=\"filter\" method=\"post\" action=\"{}\">\
         <label>Kind <select name=\"kind\"><option value=\"orderingId\">orderingId</option>\
         <option value=\"taskType\">taskType</option><option value=\"group\">group</option>\
         </select></label><label>Target <input name=\"target\" required \
         placeholder=\"customer-7, email, or &lt;type&gt;/&lt;id&gt;\"></label>\
         <label>Reason <input name=\"reason\" placeholder=\"optional\"></label>\
         <button type=\"submit\">Suspend</button></form>",
        escape(&page.url("/suspensions/suspend")),
    );
}

/// Back to the list, saying what was `done` to which suspension.
fn back(page: &Page, done: &str, kind: &str, target: &str) -> Response {
    let q = query(&[("done", done), ("kind", kind), ("target", target)]);
    // 303: the browser follows with a GET, so a reload does not post again.
    Redirect::to(&page.url(&format!("/suspensions?{q}"))).into_response()
}

/// `POST /dashboard/suspensions/resume`
pub(crate) async fn resume(
    State(state): State<Arc<AdminState>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    let fail = |status, message: &str| page.error(status, Section::Suspensions, TITLE, message);
    let form: SuspensionForm = match page.form(&body, Section::Suspensions, TITLE) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let (kind, target) = (form.kind.clone(), form.target.clone());
    let lifted = SuspensionQuery {
        kind: form.kind,
        target: form.target,
    };
    match suspensions::resume(State(state), Ok(Query(lifted))).await {
        Ok(_) => back(
            &page,
            "resumed",
            &kind.unwrap_or_default(),
            &target.unwrap_or_default(),
        ),
        Err(e) => fail(e.status, &e.message),
    }
}

/// `POST /dashboard/suspensions/suspend`
pub(crate) async fn suspend(
    State(state): State<Arc<AdminState>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    let fail = |status, message: &str| page.error(status, Section::Suspensions, TITLE, message);
    let form: SuspensionForm = match page.form(&body, Section::Suspensions, TITLE) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let request = SuspendRequest {
        kind: form.kind,
        target: form.target.map(|t| t.trim().to_string()),
        reason: form.reason.filter(|r| !r.trim().is_empty()),
    };
    match suspensions::suspend(State(state), Ok(Json(request))).await {
        Ok((_, Json(view))) => back(&page, "suspended", &view.kind, &view.target),
        Err(e) => fail(e.status, &e.message),
    }
}
