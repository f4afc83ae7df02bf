//! Errors as the API's JSON on every route: axum answers a method a path does not take (405)
//! with an empty body and a body over the limit (413) in plain text; this layer rewrites such
//! an answer, and any other error without a type or in plain text, as `{"error": "..."}`,
//! keeping its status and headers (`Allow`). A 413 always names the listener's limit (a route
//! reading its body as JSON answers one as JSON already). The dashboard's HTML errors stay
//! HTML.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::state::ApiError;

/// Most of an error's plain-text body read into its JSON (axum's are a line).
const MOST_TEXT: usize = 16 * 1024;

/// Rewrites an error answered in plain text or without a body as JSON; `limit` is the
/// listener's largest request body, named in a 413.
pub(crate) async fn as_json(State(limit): State<usize>, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let response = next.run(request).await;
    let status = response.status();
    let content_type = (response.headers().get(header::CONTENT_TYPE))
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let rewritten = status == StatusCode::PAYLOAD_TOO_LARGE
        || content_type.is_empty()
        || content_type.starts_with("text/plain");
    if !(status.is_client_error() || status.is_server_error()) || !rewritten {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MOST_TEXT)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_string())
        .unwrap_or_default();
    let message = match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = (parts.headers.get(header::ALLOW))
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            format!("{method} is not a method of this path (it takes {allowed})")
        }
        StatusCode::PAYLOAD_TOO_LARGE => {
            format!("the request body is over this listener's limit of {limit} bytes")
        }
        _ if !text.is_empty() => text,
        _ => status.canonical_reason().unwrap_or("error").to_string(),
    };
    let mut json = ApiError { status, message }.into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in &parts.headers {
        json.headers_mut().insert(name, value.clone());
    }
    json
}
