//! Logging in to the dashboard. The API takes its token as `Authorization: Bearer`, which a
//! browser does not send when it follows a link or submits a form; so the login page takes
//! the token once, opens a session ([`Sessions`]) and keeps its id in a cookie, which the
//! token check accepts as well. The cookie never holds the token: a browser sends a host's
//! cookies to every port of that host, so every service there receives it; a session id is
//! worth a session only, which **Log out** (or the node's restart) ends. The cookie is
//! `HttpOnly` (no script reads it), `SameSite=Strict` (not sent with a request another site
//! starts; another port of the same host is the same site, which the origin check of
//! `access::cross_site` refuses), `Path=/` (every queue's dashboard), for the browser's
//! session. A wrong token is logged and answered after a pause, and the login page shows a
//! stranger nothing of the node.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, Query, RawForm, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use serde::Deserialize;

use super::html::{escape, form, query, Page, Section};
use crate::admin::access::sessions::is_session_id;
use crate::admin::access::{failed_attempt, token_matches, Attempt, Sessions};
use crate::admin::state::AdminState;

/// The cookie's name (not the earlier `scheduler_admin`, which held the token: a browser that
/// still has one is asked to log in again).
const COOKIE: &str = "scheduler_session";

/// What the login page is given: where to go after, and the token when posted.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct LoginForm {
    next: Option<String>,
    token: Option<String>,
}

/// The session id the request's dashboard cookie holds, if it has one.
pub(crate) fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, value)| *name == COOKIE && is_session_id(value))
        .map(|(_, value)| value.to_string())
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
    render(&page, state.token.is_none(), form.next.as_deref(), None)
}

/// `POST /dashboard/login` with the token: opens a session, sets its cookie and goes on; or
/// says, after a pause, that the token is wrong.
pub(crate) async fn submit(
    State(state): State<Arc<AdminState>>,
    Extension(sessions): Extension<Arc<Sessions>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    page: Page,
    RawForm(body): RawForm,
) -> Response {
    let form: LoginForm = form(&body).unwrap_or_default();
    let next = next_path(&page, form.next.as_deref());
    let Some(expected) = &state.token else {
        return Redirect::to(&next).into_response();
    };
    let presented = form.token.unwrap_or_default();
    if !token_matches(&presented, expected) {
        let peer = peer.map(|Extension(ConnectInfo(peer))| peer);
        let metrics = &state.node_metrics;
        failed_attempt(metrics, Attempt::LoginForm, &page.url("/login"), peer).await;
        return render(
            &page,
            false,
            form.next.as_deref(),
            Some((StatusCode::UNAUTHORIZED, "That is not this node's token.")),
        );
    }
    let id = match sessions.open() {
        Ok(id) => id,
        Err(e) => {
            tracing::error!(error = %e, "admin listener: no session opened");
            let message = "No session could be opened (the node logged why).";
            let error = Some((StatusCode::INTERNAL_SERVER_ERROR, message));
            return render(&page, false, form.next.as_deref(), error);
        }
    };
    let cookie = format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict");
    with_cookie(Redirect::to(&next).into_response(), &cookie)
}

/// `POST /dashboard/logout`: ends the session and forgets the cookie.
pub(crate) async fn logout(
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
    page: Page,
) -> Response {
    if let Some(id) = session_id(&headers) {
        sessions.close(&id);
    }
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    with_cookie(Redirect::to(&page.url("/login")).into_response(), &cookie)
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// The login page: the form, or (`open`: no token) a link to the dashboard; `error` above,
/// with its status. Nothing of the node (id, queues, version) is on it.
fn render(
    page: &Page,
    open: bool,
    next: Option<&str>,
    error: Option<(StatusCode, &str)>,
) -> Response {
    let status = error.map_or(StatusCode::OK, |(status, _)| status);
    let mut body = String::new();
    if let Some((_, error)) = error {
        body.push_str(&format!(
            "<p class=\"error\" id=\"error\">{}</p>\n",
            escape(error)
        ));
    }
    if open {
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
         API takes as <code>Authorization: Bearer</code>. The browser keeps a session for it (not \
         the token) until you log out.</p>\n",
        escape(&page.url("/login")),
        escape(next.unwrap_or_default()),
    ));
    page.render(status, Section::Login, "Log in", "", &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_holds_a_session_id_and_is_found_among_others() {
        let id = "0123456789abcdef".repeat(4);
        let mut headers = HeaderMap::new();
        let cookie = format!("other=1; {COOKIE}={id}; last=2");
        headers.insert(header::COOKIE, HeaderValue::from_str(&cookie).unwrap());
        assert_eq!(session_id(&headers).as_deref(), Some(id.as_str()));
        for bad in ["scheduler_session=zz", "scheduler_admin=733363726574"] {
            let mut headers = HeaderMap::new();
            headers.insert(header::COOKIE, HeaderValue::from_static(bad));
            assert_eq!(session_id(&headers), None, "{bad}");
        }
        assert_eq!(session_id(&HeaderMap::new()), None);
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
