//! Logging in to the dashboard. The API takes its token as `Authorization: Bearer`, which a
//! browser does not send when it follows a link or submits a form; so the login page takes
//! the token once and keeps it in a cookie, which the API's token check accepts as well:
//! `HttpOnly` (no script reads it), `SameSite=Strict` (the browser sends it only with requests
//! this node's own pages start: a form on another site that posts to the redrive endpoint, or
//! to any of the API's, arrives without it and is refused), `Path=/` (every queue's
//! dashboard). It holds the token itself, hex-encoded so that any token is a valid cookie value,
//! and lasts as long as the browser's session.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, RawForm, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::html::{escape, form, query, Page, Section};
use crate::admin::state::AdminState;

/// The cookie's name.
const COOKIE: &str = "scheduler_admin";

/// What the login page is given: where to go after, and the token when posted.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct LoginForm {
    next: Option<String>,
    token: Option<String>,
}

/// The token the request's dashboard cookie holds, if it has one.
pub(crate) fn session_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .and_then(|(_, value)| from_hex(value))
}

/// Whether `path` is a login page, which needs no token.
pub(crate) fn is_login(path: &str) -> bool {
    dashboard_prefix(path).is_some_and(|(_, rest)| rest == "/dashboard/login")
}

/// For a request without the token to a dashboard page: a redirect to its login page, which
/// comes back to it after. `None` for the API's paths (answered 401 as before).
pub(crate) fn to_login(path: &str, path_and_query: &str) -> Option<Response> {
    let (prefix, _) = dashboard_prefix(path)?;
    let login = format!(
        "{prefix}/dashboard/login?{}",
        query(&[("next", path_and_query)])
    );
    Some(Redirect::to(&login).into_response())
}

/// A dashboard path split into the queue's prefix (`""` or `/queues/<name>`) and the rest
/// (`/dashboard...`, or `""` for the queue's root, which redirects to its dashboard).
fn dashboard_prefix(path: &str) -> Option<(&str, &str)> {
    let split = match path.strip_prefix("/queues/") {
        Some(after) => "/queues/".len() + after.find('/').unwrap_or(after.len()),
        None => 0,
    };
    let (prefix, rest) = path.split_at(split);
    let dashboard =
        rest.is_empty() || rest == "/" || rest == "/dashboard" || rest.starts_with("/dashboard/");
    dashboard.then_some((prefix, rest))
}

/// Where to go after logging in: a path of this node only (no `//host`, no scheme).
fn next_path(page: &Page, next: Option<&str>) -> String {
    match next {
        Some(next) if next.starts_with('/') && !next.starts_with("//") && !next.contains('\\') => {
            next.to_string()
        }
        _ => page.url(""),
    }
}

/// `GET /dashboard/login`
pub(crate) async fn page(
    State(state): State<Arc<AdminState>>,
    page: Page,
    form: Result<Query<LoginForm>, QueryRejection>,
) -> Response {
    let form = form.map(|Query(f)| f).unwrap_or_default();
    render(&state, &page, form.next.as_deref(), None)
}

/// `POST /dashboard/login` with the token: sets the cookie and goes on, or says it is wrong.
pub(crate) async fn submit(
    State(state): State<Arc<AdminState>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    let form: LoginForm = form(&body).unwrap_or_default();
    let next = next_path(&page, form.next.as_deref());
    let Some(expected) = &state.token else {
        return Redirect::to(&next).into_response();
    };
    let presented = form.token.unwrap_or_default();
    if !crate::admin::token_matches(&presented, expected) {
        return render(
            &state,
            &page,
            form.next.as_deref(),
            Some("That is not this node's token."),
        );
    }
    let cookie = format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
        to_hex(presented.as_bytes())
    );
    with_cookie(Redirect::to(&next).into_response(), &cookie)
}

/// `POST /dashboard/logout`: forgets the cookie.
pub(crate) async fn logout(page: Page) -> Response {
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    with_cookie(Redirect::to(&page.url("/login")).into_response(), &cookie)
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

fn render(state: &AdminState, page: &Page, next: Option<&str>, error: Option<&str>) -> Response {
    let status = match error {
        Some(_) => StatusCode::UNAUTHORIZED,
        None => StatusCode::OK,
    };
    let mut body = String::new();
    if let Some(error) = error {
        body.push_str(&format!(
            "<p class=\"error\" id=\"error\">{}</p>\n",
            escape(error)
        ));
    }
    if state.token.is_none() {
        body.push_str(&format!(
            "<p>This node has no token: its dashboard is open. <a href=\"{}\">Go to it</a>.</p>\n",
            escape(&page.url(""))
        ));
        return page.render(status, Section::Login, "Log in", "", &body);
    }
    body.push_str(&format!(
        "<form class=\"login\" method=\"post\" action=\"{}\">\
         <input type=\"hidden\" name=\"next\" value=\"{}\">\
         <label>Admin token <input id=\"token\" type=\"password\" name=\"token\" \
         autocomplete=\"current-password\" autofocus required></label>\
         <button id=\"log-in\" type=\"submit\">Log in</button></form>\n\
         <p class=\"hint\">The token of the node's <code>[admin] token</code> setting, the one the \
         API takes as <code>Authorization: Bearer</code>. It is kept in a cookie for this browser \
         session.</p>\n",
        escape(&page.url("/login")),
        escape(next.unwrap_or_default()),
    ));
    page.render(status, Section::Login, "Log in", "", &body)
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_holds_any_token_and_is_found_among_others() {
        let token = "s3cret; with=odd \"chars\" é";
        let mut headers = HeaderMap::new();
        let cookie = format!("other=1; {COOKIE}={}; last=2", to_hex(token.as_bytes()));
        headers.insert(header::COOKIE, HeaderValue::from_str(&cookie).unwrap());
        assert_eq!(session_token(&headers).as_deref(), Some(token));
        let mut bad = HeaderMap::new();
        bad.insert(
            header::COOKIE,
            HeaderValue::from_static("scheduler_admin=zz"),
        );
        assert_eq!(session_token(&bad), None);
        assert_eq!(session_token(&HeaderMap::new()), None);
    }

    #[test]
    fn dashboard_paths_go_to_their_login_and_api_paths_do_not() {
        assert!(is_login("/dashboard/login"));
        assert!(is_login("/queues/emails/dashboard/login"));
        assert!(!is_login("/api/v1/dashboard/login"));
        assert!(!is_login("/dashboard/login/x"));
        let location = |path: &str| {
            to_login(path, path).and_then(|r| {
                r.headers()
                    .get(header::LOCATION)
                    .and_then(|l| l.to_str().ok().map(str::to_string))
            })
        };
        assert_eq!(
            location("/dashboard/dead-letters").as_deref(),
            Some("/dashboard/login?next=%2Fdashboard%2Fdead-letters")
        );
        assert_eq!(
            location("/queues/emails/dashboard").as_deref(),
            Some("/queues/emails/dashboard/login?next=%2Fqueues%2Femails%2Fdashboard")
        );
        assert_eq!(location("/").as_deref(), Some("/dashboard/login?next=%2F"));
        assert_eq!(location("/api/v1/status"), None);
        assert_eq!(location("/metrics"), None);
        assert_eq!(location("/queues/emails/api/v1/status"), None);
        assert_eq!(location("/dashboards"), None);
    }
}
