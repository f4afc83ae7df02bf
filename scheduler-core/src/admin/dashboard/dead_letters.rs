//! `GET /dashboard/dead-letters[?view=redriven]`: the dead letters not redriven (or those
//! already redriven), a page at a time, each with a redrive button and a checkbox, and their
//! count by type with buttons redriving or purging all of a type, once confirmed;
//! `POST /dashboard/dead-letters/redrive` (a letter, or a type), `/selected` (the ticked
//! letters, redriven or, confirmed, purged): done by the API's own handlers
//! (`POST /api/v1/dead-letters/redrive`, `/purge`), then back to the list with what they did.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, RawForm, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::html::{escape, form, notice, query, when, Page, Section};
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
    /// `redriven`: the letters already redriven, in place of those not.
    view: Option<String>,
    /// How many the redrive enqueued again.
    redriven: Option<usize>,
    /// How many the purge deleted.
    purged: Option<usize>,
    /// For one letter redriven: the new task's key.
    new_ordering_id: Option<String>,
    new_scheduled_time: Option<String>,
    new_uniqueness_key: Option<String>,
}

/// The redrive buttons' form: a task's key, or a type (confirmed).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RedriveForm {
    ordering_id: Option<String>,
    scheduled_time: Option<String>,
    uniqueness_key: Option<String>,
    task_type: Option<String>,
    confirm: Option<String>,
    /// `purge` for the type's purge button (else a redrive).
    action: Option<String>,
}

/// One field of the selection's form, which repeats `key` (one per letter ticked).
#[derive(Debug, Default, Deserialize)]
struct SelectionField {
    key: Option<String>,
    action: Option<String>,
    confirm: Option<String>,
}

/// A ticked letter's key, as its checkbox's value encodes it (a query string).
#[derive(Debug, Default, Deserialize)]
struct LetterKey {
    o: String,
    t: String,
    u: String,
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
    let redriven_view = query.view.as_deref() == Some("redriven");
    let listed = DeadLetterQuery {
        task_type: query.task_type.clone(),
        limit: Some(PAGE),
        include_redriven: Some(redriven_view),
        after_ordering_id: query.after_ordering_id.clone(),
        after_scheduled_time: query.after_scheduled_time.clone(),
        after_uniqueness_key: query.after_uniqueness_key.clone(),
        ..DeadLetterQuery::default()
    };
    let mut letters = match dead_letters::list(State(Arc::clone(&state)), Ok(Query(listed))).await {
        Ok(Json(letters)) => letters,
        Err(e) => return fail(e),
    };
    if redriven_view {
        // (The API lists every letter then; this view keeps those redriven.)
        letters.dead_letters.retain(|l| l.redrives > 0);
    }
    let now = Utc::now();
    let mut html = String::new();
    if let Some(n) = query.redriven {
        html.push_str(&notice(&redriven_notice(&page, n, &query)));
    }
    if let Some(n) = query.purged {
        let plural = if n == 1 { "" } else { "s" };
        html.push_str(&notice(&format!(
            "Purged <span id=\"purged\">{n}</span> dead letter{plural}: deleted."
        )));
    }
    by_type(
        &mut html,
        &page,
        &summary.dead_letters,
        summary.next.is_some(),
    );
    let view_link = match redriven_view {
        true => format!(
            "<a id=\"not-redriven-view\" href=\"{}\">Show the letters not redriven</a>",
            escape(&page.url("/dead-letters"))
        ),
        false => format!(
            "<a id=\"redriven-view\" href=\"{}\">Show the letters already redriven</a>",
            escape(&page.url("/dead-letters?view=redriven"))
        ),
    };
    let _ = writeln!(
        html,
        "<form class=\"filter\" method=\"get\" action=\"{}\"><label>Task type \
         <input name=\"taskType\" value=\"{}\"></label>{}<button type=\"submit\">Filter</button>\
         </form><p>{view_link}</p>",
        escape(&page.url("/dead-letters")),
        escape(query.task_type.as_deref().unwrap_or_default()),
        match redriven_view {
            true => "<input type=\"hidden\" name=\"view\" value=\"redriven\">",
            false => "",
        },
    );
    if redriven_view {
        html.push_str("<h2 id=\"redriven-letters\">Already redriven</h2>\n");
    }
    table(&mut html, &page, &letters.dead_letters, now);
    if let Some(next) = &letters.next {
        let q = self::query(&[
            ("view", query.view.as_deref().unwrap_or_default()),
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
            "<tr data-task-type=\"{t}\"><td>{t}</td><td data-field=\"count\">{n}{more}</td><td>\
             <form class=\"confirmed\" method=\"post\" action=\"{}\"><input type=\"hidden\" \
             name=\"taskType\" value=\"{t}\"><label><input class=\"confirm\" type=\"checkbox\" \
             name=\"confirm\" value=\"yes\" required> all {n}{more} of this type</label> \
             <button class=\"redrive-type\" type=\"submit\">Redrive all of this type</button> \
             <button class=\"purge-type danger\" type=\"submit\" name=\"action\" value=\"purge\">\
             Purge all of this type</button></form></td></tr>",
            escape(&page.url("/dead-letters/redrive")),
            t = escape(task_type),
            more = if more { "+" } else { "" },
        );
    }
    html.push_str("</tbody></table>\n");
}

fn table(html: &mut String, page: &Page, letters: &[DeadLetterView], now: DateTime<Utc>) {
    if letters.is_empty() {
        html.push_str("<p class=\"muted\" id=\"no-dead-letters\">No dead letters here.</p>\n");
        return;
    }
    // The ticked letters' form: its checkboxes are in the rows (`form=`), beside each row's own
    // redrive form; purging them must be confirmed, redriving them need not.
    let _ = writeln!(
        html,
        "<form id=\"selected\" class=\"filter\" method=\"post\" action=\"{}\">\
         <button id=\"redrive-selected\" type=\"submit\" name=\"action\" value=\"redrive\" \
         formnovalidate>Redrive the ticked letters</button>\
         <label class=\"check\"><span><input id=\"confirm-purge\" type=\"checkbox\" \
         name=\"confirm\" value=\"yes\" required> yes, delete them</span></label>\
         <button id=\"purge-selected\" class=\"danger\" type=\"submit\" name=\"action\" \
         value=\"purge\">Purge the ticked letters</button></form>",
        escape(&page.url("/dead-letters/selected")),
    );
    html.push_str(
        "<table id=\"dead-letters\"><thead><tr><th></th><th>Task</th><th>Type</th><th>Partition</th>\
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
        let key = query(&[
            ("o", &l.ordering_id),
            ("t", &l.scheduled_time),
            ("u", &l.uniqueness_key),
        ]);
        let redrives = match &l.redriven_at {
            Some(at) => format!("{}, last {}", l.redrives, when(at, now)),
            None => l.redrives.to_string(),
        };
        let _ = writeln!(
            html,
            "<tr class=\"dead-letter\" data-ordering-id=\"{o}\" data-scheduled-time=\"{t}\" \
             data-uniqueness-key=\"{u}\"><td><input class=\"select\" type=\"checkbox\" \
             form=\"selected\" name=\"key\" value=\"{}\" aria-label=\"select\"></td>\
             <td><a class=\"task\" href=\"{}\">{o}<br>{t}<br>{u}</a></td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"error-text\">{}</td><td>{}</td>\
             <td data-field=\"redrives\">{}</td><td><form method=\"post\" action=\"{action}\">\
             <input type=\"hidden\" name=\"orderingId\" value=\"{o}\">\
             <input type=\"hidden\" name=\"scheduledTime\" value=\"{t}\">\
             <input type=\"hidden\" name=\"uniquenessKey\" value=\"{u}\">\
             <button class=\"redrive\" type=\"submit\">Redrive</button></form></td></tr>",
            escape(&key),
            escape(&page.task_url(&l.ordering_id, &l.scheduled_time, &l.uniqueness_key)),
            escape(&l.task_type),
            l.partition,
            l.attempts,
            escape(&l.reason),
            escape(&l.last_error),
            when(&l.dead_at, now),
            redrives,
        );
    }
    html.push_str("</tbody></table>\n");
}

/// Most letters one selection acts on (a page's).
const MAX_SELECTED: usize = PAGE;

/// `POST /dashboard/dead-letters/selected`: the ticked letters redriven or (confirmed) purged,
/// each by the API's handler with its key, then back to the list with what it did.
pub(crate) async fn selected(
    State(state): State<Arc<AdminState>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    let title = "Dead letters";
    let fail = |status, message: &str| page.error(status, Section::DeadLetters, title, message);
    // The form repeats `key`, which the query decoder does not gather: each field is decoded
    // on its own.
    let (mut keys, mut action, mut confirmed) = (Vec::new(), None, false);
    for field in body.split(|b| *b == b'&').filter(|f| !f.is_empty()) {
        let field: SelectionField = match form(field) {
            Ok(field) => field,
            Err(e) => return fail(StatusCode::BAD_REQUEST, &e),
        };
        if let Some(key) = field.key {
            match form::<LetterKey>(key.as_bytes()) {
                Ok(key) => keys.push(key),
                Err(e) => return fail(StatusCode::BAD_REQUEST, &format!("a ticked letter: {e}")),
            }
        }
        action = field.action.or(action);
        confirmed |= field.confirm.as_deref() == Some("yes");
    }
    if keys.is_empty() {
        return fail(StatusCode::BAD_REQUEST, "no letter is ticked");
    }
    if keys.len() > MAX_SELECTED {
        let message = format!("at most {MAX_SELECTED} letters at once, not {}", keys.len());
        return fail(StatusCode::BAD_REQUEST, &message);
    }
    let purge = match action.as_deref() {
        Some("purge") if !confirmed => {
            return fail(
                StatusCode::BAD_REQUEST,
                "a purge must be confirmed (the form's checkbox)",
            )
        }
        Some("purge") => true,
        Some("redrive") | None => false,
        Some(other) => {
            return fail(
                StatusCode::BAD_REQUEST,
                &format!("no action {other:?}: redrive or purge"),
            )
        }
    };
    let mut done = 0;
    for key in keys {
        let selection = DeadLetterSelection {
            ordering_id: Some(key.o),
            scheduled_time: Some(key.t),
            uniqueness_key: Some(key.u),
            ..DeadLetterSelection::default()
        };
        let state = State(Arc::clone(&state));
        let answer = match purge {
            true => dead_letters::purge(state, Ok(Json(selection)))
                .await
                .map(|a| a.0.purged),
            false => dead_letters::redrive(state, Ok(Json(selection)))
                .await
                .map(|a| a.0.redriven),
        };
        match answer {
            Ok(n) => done += n,
            Err(e) => return fail(e.status, &format!("after {done} done: {}", e.message)),
        }
    }
    let done = done.to_string();
    let pairs = [(if purge { "purged" } else { "redriven" }, done.as_str())];
    Redirect::to(&page.url(&format!("/dead-letters?{}", query(&pairs)))).into_response()
}

/// `POST /dashboard/dead-letters/redrive` with a task's key, or a type (confirmed; its purge
/// button posts `action=purge`).
pub(crate) async fn redrive(
    State(state): State<Arc<AdminState>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    let title = "Dead letters";
    let form: RedriveForm = match page.form(&body, Section::DeadLetters, title) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    // Every letter of a type is confirmed first (the form's checkbox).
    if form.task_type.is_some() && form.confirm.as_deref() != Some("yes") {
        let message = "acting on every letter of a type must be confirmed (the form's checkbox)";
        return page.error(
            StatusCode::BAD_REQUEST,
            Section::DeadLetters,
            title,
            message,
        );
    }
    let one = (form.ordering_id.clone(), form.uniqueness_key.clone());
    let purge = form.action.as_deref() == Some("purge");
    let selection = DeadLetterSelection {
        ordering_id: form.ordering_id,
        scheduled_time: form.scheduled_time,
        uniqueness_key: form.uniqueness_key,
        task_type: form.task_type,
        ..DeadLetterSelection::default()
    };
    if purge {
        return match dead_letters::purge(State(state), Ok(Json(selection))).await {
            Ok(Json(answer)) => {
                let n = answer.purged.to_string();
                let back = page.url(&format!("/dead-letters?{}", query(&[("purged", &n)])));
                Redirect::to(&back).into_response()
            }
            Err(e) => page.error(e.status, Section::DeadLetters, title, &e.message),
        };
    }
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
