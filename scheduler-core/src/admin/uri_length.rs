//! A request whose URI (path and query) is over [`MAX_URI_BYTES`] is refused, 414 as the API's
//! JSON, before any route reads it. No request of the API needs more: the longest, a page of
//! dead letters after a key, carries two 1 KiB keys, percent-encoded at most 3 KiB each. hyper
//! itself refuses only a URI over 64 KiB (414, without a body) and a request head over about
//! 400 KiB (431); under that, a route would read a query of any length.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::state::ApiError;

/// The longest URI the listener reads, in bytes (path and query).
pub(crate) const MAX_URI_BYTES: usize = 16 * 1024;

/// Answers 414 to a request whose URI is over [`MAX_URI_BYTES`].
pub(crate) async fn refuse_long_uri(request: Request, next: Next) -> Response {
    let length = (request.uri().path_and_query()).map_or(0, |p| p.as_str().len());
    if length > MAX_URI_BYTES {
        return ApiError {
            status: StatusCode::URI_TOO_LONG,
            message: format!(
                "the request's URI is {length} bytes, over this listener's limit of {MAX_URI_BYTES}"
            ),
        }
        .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};

    use super::MAX_URI_BYTES;
    use crate::admin::test_app::{app, call};

    /// A query of any length reached the route (a lookup of a 20 KiB orderingId answered 404,
    /// and a cancellation by it was sent to the producer).
    #[tokio::test]
    async fn a_uri_over_the_limit_is_refused_414_as_json_and_one_at_it_is_read() {
        let app = app();
        let path = "/queues/default/api/v1/task?uniquenessKey=u&orderingId=";
        let fill = |length: usize| format!("{path}{}", "o".repeat(length - path.len()));
        let (status, body) = call(&app, Method::GET, None, &fill(MAX_URI_BYTES + 1)).await;
        assert_eq!(status, StatusCode::URI_TOO_LONG, "{body}");
        let error: serde_json::Value = serde_json::from_str(&body).expect("a JSON error");
        assert!(
            (error["error"].as_str()).is_some_and(|e| e.contains("limit of 16384")),
            "{body}"
        );
        let (status, body) = call(&app, Method::POST, Some("{}"), &fill(MAX_URI_BYTES * 2)).await;
        assert_eq!(status, StatusCode::URI_TOO_LONG, "{body}");
        let (status, body) = call(&app, Method::GET, None, &fill(MAX_URI_BYTES)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    }
}
