//! `GET /dashboard/limits`: the per-key limit overrides in force, each with a remove button, a
//! form setting one, and this node's use of each limited key (permits held, calls running, tasks
//! held at the limit), as `GET /api/v1/limits` answers; `POST /dashboard/limits/set` and
//! `/remove`: the forms, done by the API's own handlers, then back to the page.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, RawForm, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Json;
use serde::Deserialize;

use super::html::{escape, form, notice, or_dash, query, Page, Section};
use crate::admin::api::{KeyLimitQuery, KeyLimitRequest, KeyLimitView, KeyUseView};
use crate::admin::limits;
use crate::admin::state::{AdminState, ApiError};

const TITLE: &str = "Per-key limits";

/// The page's query: what a form just did.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LimitsPageQuery {
    set: Option<String>,
    removed: Option<String>,
}

/// The set form: every field text, as a browser sends it (empty: not given).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SetForm {
    limit_key: Option<String>,
    task_type: Option<String>,
    concurrency: Option<String>,
    rate: Option<String>,
    burst: Option<String>,
    weight: Option<String>,
}

/// `GET /dashboard/limits`
pub(crate) async fn page(
    State(state): State<Arc<AdminState>>,
    page: Page,
    query: Result<Query<LimitsPageQuery>, QueryRejection>,
) -> Response {
    let fail = |e: ApiError| page.error(e.status, Section::Limits, TITLE, &e.message);
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => return fail(ApiError::bad_request(e.body_text())),
    };
    let listed = match limits::list(State(state)).await {
        Ok(Json(listed)) => listed,
        Err(e) => return fail(e),
    };
    let mut html = String::new();
    if let Some(key) = &query.set {
        html.push_str(&notice(&format!(
            "Set the limits of <code>{}</code>: every node applies them within 2 s.",
            escape(key)
        )));
    }
    if let Some(key) = &query.removed {
        html.push_str(&notice(&format!(
            "Removed the override of <code>{}</code>.",
            escape(key)
        )));
    }
    html.push_str("<h2>On this node</h2>\n");
    keys(&mut html, &listed.keys);
    html.push_str("<h2>Overrides</h2>\n");
    overrides(&mut html, &page, &listed.overrides);
    set_form(&mut html, &page);
    page.render(StatusCode::OK, Section::Limits, TITLE, "", &html)
}

/// The limited keys this node's tasks use now: the held tasks per key.
fn keys(html: &mut String, keys: &[KeyUseView]) {
    if keys.is_empty() {
        html.push_str(
            "<p class=\"muted\" id=\"no-keys\">No task of a limited key on this node now.</p>\n",
        );
        return;
    }
    html.push_str(
        "<table id=\"keys\"><thead><tr><th>Limit key</th><th>Task type</th><th>Permits held</th>\
         <th>Running</th><th>Held by the limit</th></tr></thead><tbody>\n",
    );
    for k in keys {
        let _ = writeln!(
            html,
            "<tr class=\"key\" data-key=\"{}\"><td><code>{}</code></td><td>{}</td>\
             <td data-field=\"permits\">{}</td><td data-field=\"running\">{}</td>\
             <td data-field=\"held\">{}</td></tr>",
            escape(&k.limit_key),
            escape(&k.limit_key),
            or_dash(k.task_type.as_deref()),
            k.permits,
            k.running,
            k.held,
        );
    }
    html.push_str("</tbody></table>\n");
}

fn overrides(html: &mut String, page: &Page, overrides: &[KeyLimitView]) {
    if overrides.is_empty() {
        html.push_str("<p class=\"muted\" id=\"no-overrides\">No override: every key has the settings' limits.</p>\n");
        return;
    }
    html.push_str(
        "<table id=\"overrides\"><thead><tr><th>Limit key</th><th>Task type</th><th>At once</th>\
         <th>Starts/s</th><th>Burst</th><th>Weight</th><th>Set</th><th></th></tr></thead><tbody>\n",
    );
    let number = |n: Option<String>| or_dash(n.as_deref());
    let action = escape(&page.url("/limits/remove"));
    for o in overrides {
        let _ = writeln!(
            html,
            "<tr class=\"override\" data-key=\"{key}\"><td><code>{key}</code></td><td>{}</td>\
             <td data-field=\"concurrency\">{}</td><td data-field=\"rate\">{}</td><td>{}</td>\
             <td data-field=\"weight\">{}</td><td>{}</td><td><form method=\"post\" action=\"{action}\">\
             <input type=\"hidden\" name=\"limitKey\" value=\"{key}\">\
             <input type=\"hidden\" name=\"taskType\" value=\"{}\">\
             <button type=\"submit\">Remove</button></form></td></tr>",
            or_dash(o.task_type.as_deref()),
            number(o.concurrency.map(|n| n.to_string())),
            number(o.rate.map(|n| n.to_string())),
            number(o.burst.map(|n| n.to_string())),
            number(o.weight.map(|n| n.to_string())),
            escape(&o.updated_at),
            escape(o.task_type.as_deref().unwrap_or_default()),
            key = escape(&o.limit_key),
        );
    }
    html.push_str("</tbody></table>\n");
}

fn set_form(html: &mut String, page: &Page) {
    let _ = writeln!(
        html,
        "<h2>Set a key's limits</h2><form id=\"set-limit\" class=\"limits\" method=\"post\" action=\"{}\">\
         <label>Limit key <input name=\"limitKey\" required></label> \
         <label>Task type <input name=\"taskType\" placeholder=\"every type\"></label> \
         <label>At once <input name=\"concurrency\" inputmode=\"numeric\"></label> \
         <label>Starts/s <input name=\"rate\" inputmode=\"decimal\"></label> \
         <label>Burst <input name=\"burst\" inputmode=\"numeric\"></label> \
         <label>Weight <input name=\"weight\" inputmode=\"numeric\"></label> \
         <button type=\"submit\">Set</button></form>\
         <p class=\"muted\">A value left empty keeps the settings' value for the key.</p>",
        escape(&page.url("/limits/set")),
    );
}

/// A form's number: empty is none; anything else must parse.
fn number<T: std::str::FromStr>(text: Option<String>, name: &str) -> Result<Option<T>, String> {
    match text.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(text) => {
            (text.parse().map(Some)).map_err(|_| format!("{name} must be a number, not {text:?}"))
        }
    }
}

/// `POST /dashboard/limits/set`
pub(crate) async fn set(
    State(state): State<Arc<AdminState>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    let fail = |status, message: &str| page.error(status, Section::Limits, TITLE, message);
    let parsed = form::<SetForm>(&body).and_then(|f| {
        Ok(KeyLimitRequest {
            limit_key: f.limit_key,
            task_type: f.task_type.filter(|t| !t.trim().is_empty()),
            concurrency: number(f.concurrency, "At once")?,
            rate: number(f.rate, "Starts/s")?,
            burst: number(f.burst, "Burst")?,
            weight: number(f.weight, "Weight")?,
        })
    });
    let request = match parsed {
        Ok(request) => request,
        Err(e) => return fail(StatusCode::BAD_REQUEST, &e),
    };
    match limits::set(State(state), Ok(Json(request))).await {
        Ok(Json(set)) => {
            let back = page.url(&format!("/limits?{}", query(&[("set", &set.limit_key)])));
            // 303: the browser follows with a GET, so a reload does not post again.
            Redirect::to(&back).into_response()
        }
        Err(e) => fail(e.status, &e.message),
    }
}

/// `POST /dashboard/limits/remove`
pub(crate) async fn remove(
    State(state): State<Arc<AdminState>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    let fail = |status, message: &str| page.error(status, Section::Limits, TITLE, message);
    let key: KeyLimitQuery = match page.form(&body, Section::Limits, TITLE) {
        Ok(key) => key,
        Err(refused) => return *refused,
    };
    let removed = key.limit_key.clone().unwrap_or_default();
    let key = KeyLimitQuery {
        task_type: key.task_type.filter(|t| !t.is_empty()),
        ..key
    };
    match limits::remove(State(state), Ok(Query(key))).await {
        Ok(_) => {
            let back = page.url(&format!("/limits?{}", query(&[("removed", &removed)])));
            Redirect::to(&back).into_response()
        }
        Err(e) => fail(e.status, &e.message),
    }
}
