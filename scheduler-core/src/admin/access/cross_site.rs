//! Cross-site request forgery: a page elsewhere (another site, or another port of this host,
//! which a browser calls the same *site* and sends this listener's cookie from) makes the
//! browser post to the listener. A request that may change anything (any method but `GET`,
//! `HEAD`, `OPTIONS`) is refused (403) when the browser says it comes from another origin:
//!
//! - `Sec-Fetch-Site` other than `same-origin` (or `none`: typed by the user);
//! - `Origin` other than the listener's own (`http://` or `https://` and the request's
//!   `Host`), or `null` (a sandboxed frame, a `data:` page).
//!
//! Every browser sends `Origin` with a `POST` (and `Sec-Fetch-Site` to `localhost` and over
//! HTTPS), including from the dashboard's own forms, which therefore pass; the `scheduler`
//! command, `curl` and services send neither and pass too (what they send is their caller's
//! choice, not a page's).
//!
//! The API's such requests must moreover be JSON (`Content-Type: application/json`, 415
//! otherwise) when they have a body or a type: a form (`text/plain`, URL-encoded, multipart)
//! or a `fetch` without CORS cannot send that type, and a page's request with it needs a CORS
//! preflight, which the listener does not answer. A request with neither body nor type (a
//! schedule's pause or resume, a `DELETE`) carries nothing a page could choose beyond its URL,
//! and the origin check above covers it.

use axum::extract::Request;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::admin::state::ApiError;

/// Refuses a state-changing request from another origin, or a non-JSON one to the API.
pub(crate) async fn refuse_cross_site(request: Request, next: Next) -> Response {
    match check(request.method(), request.uri().path(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

/// The rules of the module's documentation, for one request.
pub(crate) fn check(method: &Method, path: &str, headers: &HeaderMap) -> Result<(), ApiError> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let text = |name| headers.get(name).map(|v| v.to_str().unwrap_or("?"));
    let host = text(header::HOST.as_str()).unwrap_or_default();
    let origin = text(header::ORIGIN.as_str());
    let site = text("sec-fetch-site");
    let other_site = site
        .is_some_and(|s| !s.eq_ignore_ascii_case("same-origin") && !s.eq_ignore_ascii_case("none"));
    let other_origin = origin.is_some_and(|o| !is_same_origin(o, host));
    if other_site || other_origin {
        return Err(forbidden(format!(
            "a request from {} (Sec-Fetch-Site: {}) may not change anything here: only the \
             pages of this listener (http://{host}), and clients that are not browsers, may",
            origin.unwrap_or("another origin"),
            site.unwrap_or("not sent"),
        )));
    }
    if is_api(path) && (has_body(headers) || headers.contains_key(header::CONTENT_TYPE)) {
        let media_type = text(header::CONTENT_TYPE.as_str())
            .and_then(|t| t.split(';').next())
            .map(str::trim);
        if !media_type.is_some_and(|t| t.eq_ignore_ascii_case("application/json")) {
            return Err(ApiError {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                message: format!(
                    "the API takes JSON: send Content-Type: application/json (not {}; a web \
                     page cannot send that type, so it cannot post to the API)",
                    media_type.unwrap_or("no type")
                ),
            });
        }
    }
    Ok(())
}

fn forbidden(message: String) -> ApiError {
    ApiError {
        status: StatusCode::FORBIDDEN,
        message,
    }
}

/// Whether `origin` (`scheme://host[:port]`, as a browser serializes it) is the listener
/// `host` (the request's `Host`) names: another port of the same host is another origin.
fn is_same_origin(origin: &str, host: &str) -> bool {
    let authority = ["http://", "https://"]
        .iter()
        .find_map(|scheme| origin.strip_prefix(scheme));
    authority.is_some_and(|a| !host.is_empty() && a.eq_ignore_ascii_case(host))
}

/// Whether the request says it has a body (a length above 0, or chunks).
fn has_body(headers: &HeaderMap) -> bool {
    let length = headers.get(header::CONTENT_LENGTH).map(|v| v.to_str());
    headers.contains_key(header::TRANSFER_ENCODING)
        || length.is_some_and(|length| !matches!(length, Ok(l) if l.trim() == "0"))
}

/// Whether `path` is one of the API's (`/api/...`, at the root or under `/queues/<name>`).
fn is_api(path: &str) -> bool {
    let rest = match path.strip_prefix("/queues/") {
        Some(after) => after.find('/').map_or("", |slash| &after[slash..]),
        None => path,
    };
    rest.starts_with("/api/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_is_the_same_only_with_the_same_host_and_port() {
        assert!(is_same_origin("http://127.0.0.1:9464", "127.0.0.1:9464"));
        assert!(is_same_origin("https://Admin.Example", "admin.example"));
        assert!(!is_same_origin("http://127.0.0.1:3000", "127.0.0.1:9464"));
        assert!(!is_same_origin("http://localhost:9464", "127.0.0.1:9464"));
        assert!(!is_same_origin("null", "127.0.0.1:9464"));
        assert!(!is_same_origin("http://127.0.0.1:9464", ""));
        assert!(!is_same_origin("ftp://127.0.0.1:9464", "127.0.0.1:9464"));
    }

    #[test]
    fn api_paths_are_found_under_their_queue() {
        assert!(is_api("/api/v1/tasks"));
        assert!(is_api("/queues/emails/api/v1/tasks"));
        assert!(!is_api("/dashboard/dead-letters/redrive"));
        assert!(!is_api("/queues/emails/dashboard/login"));
        assert!(!is_api("/queues/api/"));
        assert!(!is_api("/metrics"));
    }

    #[test]
    fn a_body_is_announced_by_its_length_or_chunks() {
        let mut headers = HeaderMap::new();
        assert!(!has_body(&headers));
        headers.insert(header::CONTENT_LENGTH, "0".parse().expect("a value"));
        assert!(!has_body(&headers));
        headers.insert(header::CONTENT_LENGTH, "12".parse().expect("a value"));
        assert!(has_body(&headers));
        let mut chunked = HeaderMap::new();
        chunked.insert(
            header::TRANSFER_ENCODING,
            "chunked".parse().expect("a value"),
        );
        assert!(has_body(&chunked));
    }
}
