//! `GET /dashboard/dead-letters`: the dead letters not redriven, a page at a time, each with a
//! redrive button, and their count by type with a button redriving all of a type;
//! `POST /dashboard/dead-letters/redrive`: the button's form, done by the API's own handler
//! (`POST /api/v1/dead-letters/redrive`), then back to the list with what it did.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, RawForm, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Json;
use serde::Deserialize;

use super::html::{escape, form, notice, query, Page, Section};
use crate::admin::api::{DeadLetterQuery, DeadLetterSelection, DeadLetterView};
use crate::admin::dead_letters;
use crate::admin::state::{AdminState, ApiError};

/// Dead letters a page lists.
const PAGE: usize = 50;
/// Most dead letters counted (the API's largest page).
const COUNTED: usize = 1000;

/// The page's query: a type, the key a page resumes after, and what a redrive just did.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListQuery {
    task_type: Option<String>,
    after_ordering_id: Option<String>,
    after_scheduled_time: Option<String>,
    after_uniqueness_key: Option<String>,
    /// How many the redrive enqueued again.
    redriven: Option<usize>,
    /// For one letter redriven: the new task's key.
    new_ordering_id: Option<String>,
    new_scheduled_time: Option<String>,
    new_uniqueness_key: Option<String>,
}

/// The redrive buttons' form: a task's key, or a type.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RedriveForm {
    ordering_id: Option<String>,
    scheduled_time: Option<String>,
    uniqueness_key: Option<String>,
    task_type: Option<String>,
}

/// The dead letters not redriven: how many (at most [`COUNTED`]) and whether there are more,
/// as the API lists them.
pub(crate) async fn count_dead_letters(state: &Arc<AdminState>) -> Result<(usize, bool), ApiError> {
    let letters = all_types(state).await?;
    Ok((letters.dead_letters.len(), letters.next.is_some()))
}

async fn all_types(
    state: &Arc<AdminState>,
) -> Result<crate::admin::api::DeadLettersResponse, ApiError> {
    let query = DeadLetterQuery {
        limit: Some(COUNTED),
        ..DeadLetterQuery::default()
    };
    let Json(letters) = dead_letters::list(State(Arc::clone(state)), Ok(Query(query))).await?;
    Ok(letters)
}

/// `GET /dashboard/dead-letters`
pub(crate) async fn page(
    State(state): State<Arc<AdminState>>,
    page: Page,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let title = "Dead letters";
    let fail = |e: ApiError| page.error(e.status, Section::DeadLetters, title, &e.message);
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => return fail(ApiError::bad_request(e.body_text())),
    };
    let summary = match all_types(&state).await {
        Ok(letters) => letters,
        Err(e) => return fail(e),
    };
    let listed = DeadLetterQuery {
        task_type: query.task_type.clone(),
        limit: Some(PAGE),
        after_ordering_id: query.after_ordering_id.clone(),
        after_scheduled_time: query.after_scheduled_time.clone(),
        after_uniqueness_key: query.after_uniqueness_key.clone(),
        ..DeadLetterQuery::default()
    };
    let letters = match dead_letters::list(State(Arc::clone(&state)), Ok(Query(listed))).await {
        Ok(Json(letters)) => letters,
        Err(e) => return fail(e),
    };
    let mut html = String::new();
    if let Some(n) = query.redriven {
        html.push_str(&notice(&redriven_notice(&page, n, &query)));
    }
    by_type(
        &mut html,
        &page,
        &summary.dead_letters,
        summary.next.is_some(),
    );
    let _ = writeln!(
        html,
        "<form class=\"filter\" method=\"get\" action=\"{}\"><label>Task type \
         <input name=\"taskType\" value=\"{}\"></label><button type=\"submit\">Filter</button>\
         </form>",
        escape(&page.url("/dead-letters")),
        escape(query.task_type.as_deref().unwrap_or_default())
    );
    table(&mut html, &page, &letters.dead_letters);
    if let Some(next) = &letters.next {
        let q = self::query(&[
            ("taskType", query.task_type.as_deref().unwrap_or_default()),
            ("afterOrderingId", &next.after_ordering_id),
            ("afterScheduledTime", &next.after_scheduled_time),
            ("afterUniquenessKey", &next.after_uniqueness_key),
        ]);
        let _ = writeln!(
            html,
            "<p><a id=\"next-page\" href=\"{}\">Next page</a></p>",
            escape(&page.url(&format!("/dead-letters?{q}")))
        );
    }
    page.render(StatusCode::OK, Section::DeadLetters, title, "", &html)
}

fn redriven_notice(page: &Page, n: usize, query: &ListQuery) -> String {
    let plural = if n == 1 { "" } else { "s" };
    let mut text = format!(
        "Redriven <span id=\"redriven\">{n}</span> dead letter{plural}: enqueued again, due now."
    );
    if let (Some(o), Some(t), Some(u)) = (
        &query.new_ordering_id,
        &query.new_scheduled_time,
        &query.new_uniqueness_key,
    ) {
        let _ = write!(
            text,
            " <a id=\"new-task\" data-scheduled-time=\"{}\" href=\"{}\">Look the new task up</a>.",
            escape(t),
            escape(&page.task_url(o, t, u))
        );
    }
    text
}

/// The count by type, each with its "redrive all" button.
fn by_type(html: &mut String, page: &Page, letters: &[DeadLetterView], more: bool) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for letter in letters {
        *counts.entry(letter.task_type.as_str()).or_default() += 1;
    }
    let _ = writeln!(
        html,
        "<p>Not redriven: <strong id=\"dead-letter-count\">{}{}</strong> dead letters. A redrive \
         enqueues the task again, due now, with its type, data and priority and a fresh retry \
         budget; the letter stays, marked redriven.</p>",
        letters.len(),
        if more { "+" } else { "" }
    );
    if counts.is_empty() {
        return;
    }
    html.push_str(
        "<table id=\"dead-letter-types\"><thead><tr><th>Task type</th><th>Dead letters</th>\
         <th></th></tr></thead><tbody>\n",
    );
    for (task_type, n) in counts {
        let _ = writeln!(
            html,
            "<tr data-task-type=\"{t}\"><td>{t}</td><td data-field=\"count\">{n}{}</td><td>\
             <form method=\"post\" action=\"{}\"><input type=\"hidden\" name=\"taskType\" \
             value=\"{t}\"><button class=\"redrive-type\" type=\"submit\">Redrive all of this \
             type</button></form></td></tr>",
            if more { "+" } else { "" },
            escape(&page.url("/dead-letters/redrive")),
            t = escape(task_type),
        );
    }
    html.push_str("</tbody></table>\n");
}

fn table(html: &mut String, page: &Page, letters: &[DeadLetterView]) {
    if letters.is_empty() {
        html.push_str("<p class=\"muted\" id=\"no-dead-letters\">No dead letters here.</p>\n");
        return;
    }
    html.push_str(
        "<table id=\"dead-letters\"><thead><tr><th>Task</th><th>Type</th><th>Partition</th>\
         <th>Attempts</th><th>Reason</th><th>Last error</th><th>Dead at</th><th>Redrives</th>\
         <th></th></tr></thead><tbody>\n",
    );
    let action = escape(&page.url("/dead-letters/redrive"));
    for l in letters {
        let (o, t, u) = (
            escape(&l.ordering_id),
            escape(&l.scheduled_time),
            escape(&l.uniqueness_key),
        );
        let _ = writeln!(
            html,
            "<tr class=\"dead-letter\" data-ordering-id=\"{o}\" data-scheduled-time=\"{t}\" \
             data-uniqueness-key=\"{u}\"><td><a class=\"task\" href=\"{}\">{o}<br>{t}<br>{u}</a></td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"error-text\">{}</td><td>{}</td>\
             <td>{}</td><td><form method=\"post\" action=\"{action}\">\
             <input type=\"hidden\" name=\"orderingId\" value=\"{o}\">\
             <input type=\"hidden\" name=\"scheduledTime\" value=\"{t}\">\
             <input type=\"hidden\" name=\"uniquenessKey\" value=\"{u}\">\
             <button class=\"redrive\" type=\"submit\">Redrive</button></form></td></tr>",
            escape(&page.task_url(&l.ordering_id, &l.scheduled_time, &l.uniqueness_key)),
            escape(&l.task_type),
            l.partition,
            l.attempts,
            escape(&l.reason),
            escape(&l.last_error),
            escape(&l.dead_at),
            l.redrives,
        );
    }
    html.push_str("</tbody></table>\n");
}

/// `POST /dashboard/dead-letters/redrive` with a task's key or a type.
pub(crate) async fn redrive(
    State(state): State<Arc<AdminState>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    let title = "Dead letters";
    let form: RedriveForm = match form(&body) {
        Ok(form) => form,
        Err(e) => return page.error(StatusCode::BAD_REQUEST, Section::DeadLetters, title, &e),
    };
    let one = (form.ordering_id.clone(), form.uniqueness_key.clone());
    let selection = DeadLetterSelection {
        ordering_id: form.ordering_id,
        scheduled_time: form.scheduled_time,
        uniqueness_key: form.uniqueness_key,
        task_type: form.task_type,
        ..DeadLetterSelection::default()
    };
    let answer = dead_letters::redrive(State(state), Ok(Json(selection))).await;
    let Json(answer) = match answer {
        Ok(answer) => answer,
        Err(e) => return page.error(e.status, Section::DeadLetters, title, &e.message),
    };
    let redriven = answer.redriven.to_string();
    let mut pairs = vec![("redriven", redriven.as_str())];
    // One letter: the new task's time is in its key, between the identity's two parts.
    let new_time = match (&one, answer.tasks.as_slice()) {
        ((Some(o), Some(u)), [key]) => key
            .strip_prefix(&format!("{o}/"))
            .and_then(|rest| rest.strip_suffix(&format!("/{u}")))
            .map(str::to_string),
        _ => None,
    };
    if let (Some(time), (Some(o), Some(u))) = (&new_time, &one) {
        pairs.extend([
            ("newOrderingId", o.as_str()),
            ("newScheduledTime", time.as_str()),
            ("newUniquenessKey", u.as_str()),
        ]);
    }
    let back = page.url(&format!("/dead-letters?{}", query(&pairs)));
    // 303: the browser follows with a GET, so reloading the list does not redrive again.
    Redirect::to(&back).into_response()
}
