//! The token check (`[admin] token`): every request carries `Authorization: Bearer <token>`
//! (the scheme in any case, as RFC 9110 has it) or the cookie of a dashboard session. A wrong
//! token, by header or through the login form, is logged (at warn, with the path and the
//! peer's address, never what was sent), counted (`scheduler_admin_failed_logins_total`, by
//! where it was presented) and answered after [`FAILED_ATTEMPT_DELAY`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::sessions::Sessions;
use crate::admin::dashboard::login;
use crate::admin::state::ApiError;
use crate::metrics::NodeMetrics;

/// How long the answer to a wrong token waits: guesses come one a second per connection, not
/// as fast as the network carries them, and each leaves a line in the log.
pub(crate) const FAILED_ATTEMPT_DELAY: Duration = Duration::from_secs(1);

/// What a request may prove itself with.
#[derive(Debug)]
pub(crate) struct Credentials {
    /// `[admin] token`; none: the listener is open.
    pub(crate) token: Option<String>,
    /// The dashboard's sessions.
    pub(crate) sessions: Arc<Sessions>,
    /// Where wrong tokens are counted.
    pub(crate) metrics: Arc<NodeMetrics>,
}

/// Where a wrong token was presented.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attempt {
    /// `Authorization: Bearer`.
    Header,
    /// The dashboard's login form.
    LoginForm,
}

impl Attempt {
    fn as_str(self) -> &'static str {
        match self {
            Attempt::Header => "authorization header",
            Attempt::LoginForm => "login form",
        }
    }
}

/// Logs and counts (`scheduler_admin_failed_logins_total`) a wrong token and waits
/// [`FAILED_ATTEMPT_DELAY`] (tokio's timer: a waiting answer holds no thread).
pub(crate) async fn failed_attempt(
    metrics: &NodeMetrics,
    attempt: Attempt,
    path: &str,
    peer: Option<SocketAddr>,
) {
    metrics.failed_login(attempt.as_str());
    tracing::warn!(
        by = attempt.as_str(),
        path,
        peer = ?peer,
        delay = ?FAILED_ATTEMPT_DELAY,
        "admin listener: wrong token"
    );
    tokio::time::sleep(FAILED_ATTEMPT_DELAY).await;
}

/// The peer's address, when the server recorded it.
pub(crate) fn peer(request: &Request) -> Option<SocketAddr> {
    (request.extensions().get::<ConnectInfo<SocketAddr>>()).map(|ConnectInfo(peer)| *peer)
}

/// Lets a request with the token or a session through; else a dashboard page goes to its
/// login, the API answers 401.
pub(crate) async fn require_token(
    State(credentials): State<Arc<Credentials>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(expected) = &credentials.token else {
        return next.run(request).await;
    };
    let presented = bearer(request.headers());
    let session = login::session_id(request.headers());
    let guessed = presented.is_some();
    let accepted = presented.is_some_and(|t| token_matches(t, expected))
        || session.is_some_and(|id| credentials.sessions.is_open(&id));
    if accepted {
        return next.run(request).await;
    }
    let path = request.uri().path().to_string();
    if guessed {
        let metrics = &credentials.metrics;
        failed_attempt(metrics, Attempt::Header, &path, peer(&request)).await;
    }
    if login::is_login(&path) {
        return next.run(request).await;
    }
    let path_and_query = request
        .uri()
        .path_and_query()
        .map_or(path.as_str(), |p| p.as_str());
    if let Some(to_login) = login::to_login(&path, path_and_query) {
        return to_login;
    }
    let mut refused = ApiError {
        status: StatusCode::UNAUTHORIZED,
        message: "missing or wrong bearer token (send Authorization: Bearer <token>)".into(),
    }
    .into_response();
    // RFC 9110: a 401 names the scheme that would be accepted.
    (refused.headers_mut()).insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    refused
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether `presented` is the token. Compared in constant time (`subtle`), so how long the
/// answer takes does not reveal how much of a guess was right (only its length shows).
pub(crate) fn token_matches(presented: &str, expected: &str) -> bool {
    presented.as_bytes().ct_eq(expected.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison_needs_the_whole_token() {
        assert!(token_matches("secret", "secret"));
        assert!(!token_matches("secreT", "secret"), "last byte differs");
        assert!(!token_matches("Secret", "secret"), "first byte differs");
        assert!(!token_matches("secret2", "secret"), "a longer guess");
        assert!(!token_matches("secre", "secret"), "a prefix");
        assert!(!token_matches("", "secret"));
    }

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        let token = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::AUTHORIZATION,
                header::HeaderValue::from_static(value),
            );
            bearer(&headers).map(str::to_string)
        };
        assert_eq!(token("Bearer a b").as_deref(), Some("a b"));
        assert_eq!(token("bearer x").as_deref(), Some("x"));
        assert_eq!(token("BEARER   x ").as_deref(), Some("x"));
        assert_eq!(token("Basic x"), None);
        assert_eq!(token("Bearer "), None);
        assert_eq!(token("Bearerx"), None);
    }
}
