//! The listener's rules through the admin router on the in-memory store: the trial of issue 30
//! (a cross-site `text/plain` post, a foreign `Host`, a session cookie replayed from another
//! origin), the session cookie, the token's header, failed attempts, and JSON errors.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use tower::ServiceExt;

use super::AllowedHosts;
use crate::admin::test_app::state;
use crate::admin::{listener, router, AdminState};
use crate::store::memory::MemoryStore;

const TOKEN: &str = "s3cret";
/// The listener's own address, as a browser on its pages names it.
const HERE: &str = "127.0.0.1:9464";

fn open_app() -> axum::Router {
    router(vec![Arc::new(state(Arc::new(MemoryStore::new())))])
}

fn app_with_token() -> axum::Router {
    let state = AdminState {
        token: Some(TOKEN.into()),
        ..state(Arc::new(MemoryStore::new()))
    };
    router(vec![Arc::new(state)])
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: header::HeaderName) -> &str {
        (self.headers.get(name))
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    fn error(&self) -> String {
        let json: serde_json::Value = serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("{} is not JSON ({e}): {}", self.status, self.body));
        json["error"].as_str().unwrap_or_default().to_string()
    }
}

/// `method path` with `headers` (a `Host` of [`HERE`] unless given) and `body`.
async fn send(
    app: &axum::Router,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut request = Request::builder().method(method).uri(path);
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request = request.header(header::HOST, HERE);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if !body.is_empty() {
        request = request.header(header::CONTENT_LENGTH, body.len());
    }
    let request = request
        .body(Body::from(body.to_string()))
        .expect("a valid request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 22)
        .await
        .expect("a body");
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// Logs in with the token; the session cookie (`name=value`).
async fn log_in(app: &axum::Router) -> String {
    let login = send(
        app,
        Method::POST,
        "/dashboard/login",
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("origin", "http://127.0.0.1:9464"),
            ("sec-fetch-site", "same-origin"),
        ],
        "token=s3cret&next=%2Fdashboard",
    )
    .await;
    assert_eq!(login.status, StatusCode::SEE_OTHER, "{}", login.body);
    let cookie = login.header(header::SET_COOKIE);
    cookie.split(';').next().unwrap_or_default().to_string()
}

/// A form a page on another port of `localhost` auto-submits: `enctype="text/plain"`, to the
/// enqueue endpoint of a node without a token. Refused for its origin; and without an
/// `Origin` (a client that is no browser), for its type.
#[tokio::test]
async fn a_cross_site_text_plain_post_is_refused() {
    let app = open_app();
    let body = r#"{"version":1,"orderingId":"o","scheduledTime":"2026-01-01T00:00:00Z","uniquenessKey":"u","x":"="}"#;
    let from_page = send(
        &app,
        Method::POST,
        "/api/v1/tasks",
        &[
            ("content-type", "text/plain"),
            ("origin", "http://localhost:3000"),
            ("sec-fetch-site", "same-site"),
        ],
        body,
    )
    .await;
    assert_eq!(
        from_page.status,
        StatusCode::FORBIDDEN,
        "{}",
        from_page.body
    );
    assert!(
        from_page.error().contains("http://localhost:3000"),
        "{}",
        from_page.body
    );

    // Origin alone (a browser that sends no Sec-Fetch-Site: over plain HTTP to a remote host).
    let origin_only = send(
        &app,
        Method::POST,
        "/queues/default/api/v1/task/cancel",
        &[
            ("content-type", "application/json"),
            ("origin", "http://evil.example"),
        ],
        "{}",
    )
    .await;
    assert_eq!(
        origin_only.status,
        StatusCode::FORBIDDEN,
        "{}",
        origin_only.body
    );
    let null_origin = send(
        &app,
        Method::POST,
        "/api/v1/task/cancel",
        &[("content-type", "application/json"), ("origin", "null")],
        "{}",
    )
    .await;
    assert_eq!(
        null_origin.status,
        StatusCode::FORBIDDEN,
        "{}",
        null_origin.body
    );

    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let headers: Vec<_> = content_type
            .map(|t| ("content-type", t))
            .into_iter()
            .collect();
        let plain = send(&app, Method::POST, "/api/v1/tasks", &headers, body).await;
        assert_eq!(
            plain.status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type:?}: {}",
            plain.body
        );
        assert!(plain.error().contains("application/json"), "{}", plain.body);
    }

    // What passes: JSON from a client (no Origin), or from the listener's own origin.
    let client = send(
        &app,
        Method::POST,
        "/api/v1/task/cancel",
        &[("content-type", "application/json; charset=utf-8")],
        "{}",
    )
    .await;
    assert_eq!(
        (client.status, client.error().as_str()),
        (StatusCode::BAD_REQUEST, "orderingId is required")
    );
    let same_origin = send(
        &app,
        Method::POST,
        "/api/v1/task/cancel",
        &[
            ("content-type", "application/json"),
            ("origin", "http://127.0.0.1:9464"),
            ("sec-fetch-site", "same-origin"),
        ],
        "{}",
    )
    .await;
    assert_eq!(
        same_origin.status,
        StatusCode::BAD_REQUEST,
        "{}",
        same_origin.body
    );
    // A post without a body or a type (pause, resume): nothing to smuggle, passes to its handler.
    let pause = send(&app, Method::POST, "/api/v1/schedules/none/pause", &[], "").await;
    assert_eq!(pause.status, StatusCode::NOT_FOUND, "{}", pause.body);
    // Reading stays open to any page's links (what a browser cannot read back anyway).
    let read = send(
        &app,
        Method::GET,
        "/api/v1/status",
        &[("sec-fetch-site", "cross-site")],
        "",
    )
    .await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.body);
}

/// A DNS-rebinding page's requests name its own host; the listener answers only its names.
#[tokio::test]
async fn a_foreign_host_is_refused() {
    let app = listener(
        vec![Arc::new(state(Arc::new(MemoryStore::new())))],
        AllowedHosts::new(&["Scheduler.Internal".to_string()]),
    );
    for host in [
        "evil.example:9464",
        "evil.example",
        "localhost.evil.example:9464",
        "127.0.0.1.evil.example",
        "scheduler.internal.evil.example",
        "",
        "::1",
    ] {
        let answer = send(&app, Method::GET, "/api/v1/status", &[("host", host)], "").await;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "{host:?}: {}",
            answer.body
        );
        assert!(answer.error().contains("Host"), "{}", answer.body);
        assert!(!answer.body.contains("nodeId"), "{}", answer.body);
    }
    for host in [
        "127.0.0.1:9464",
        "localhost:9464",
        "LOCALHOST",
        "[::1]:9464",
        "10.1.2.3:9464",
        "scheduler.internal",
        "scheduler.internal:443",
    ] {
        let answer = send(&app, Method::GET, "/api/v1/status", &[("host", host)], "").await;
        assert_eq!(answer.status, StatusCode::OK, "{host:?}: {}", answer.body);
    }
}

/// A page on another port of the same host is same-site: the browser sends it the session
/// cookie. Its posts are refused all the same; the cookie is a session id, not the token.
#[tokio::test]
async fn a_session_cookie_replayed_from_another_origin_is_refused() {
    let app = app_with_token();
    let cookie = log_in(&app).await;
    let value = cookie.split_once('=').map(|(_, v)| v).unwrap_or_default();
    assert!(!value.is_empty(), "{cookie}");
    assert!(!value.contains(TOKEN), "{cookie}");
    let hex: String = TOKEN.bytes().map(|b| format!("{b:02x}")).collect();
    assert!(!value.contains(&hex), "the token's hex: {cookie}");
    assert!(
        value.len() >= 32,
        "a session id of at least 128 bits: {cookie}"
    );

    let form = "orderingId=o&scheduledTime=2026-01-01T00%3A00%3A00.000Z&uniquenessKey=u";
    let redrive = |headers: Vec<(&'static str, String)>| {
        let app = app.clone();
        let cookie = cookie.clone();
        async move {
            let mut all = vec![
                ("cookie", cookie),
                (
                    "content-type",
                    "application/x-www-form-urlencoded".to_string(),
                ),
            ];
            all.extend(headers);
            let borrowed: Vec<(&str, &str)> = all.iter().map(|(n, v)| (*n, v.as_str())).collect();
            send(
                &app,
                Method::POST,
                "/dashboard/dead-letters/redrive",
                &borrowed,
                form,
            )
            .await
        }
    };
    for headers in [
        vec![
            ("origin", "http://127.0.0.1:3000".to_string()),
            ("sec-fetch-site", "same-site".to_string()),
        ],
        vec![("origin", "http://127.0.0.1:3000".to_string())],
        vec![("sec-fetch-site", "same-site".to_string())],
        vec![("sec-fetch-site", "cross-site".to_string())],
    ] {
        let answer = redrive(headers.clone()).await;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "{headers:?}: {}",
            answer.body
        );
    }
    // From the dashboard's own page: on to the handler (no such dead letter).
    let own = redrive(vec![
        ("origin", "http://127.0.0.1:9464".to_string()),
        ("sec-fetch-site", "same-origin".to_string()),
    ])
    .await;
    assert_eq!(own.status, StatusCode::NOT_FOUND, "{}", own.body);

    // The API takes the session too, from the same origin only when it changes anything.
    let api = |headers: Vec<(&'static str, String)>| {
        let app = app.clone();
        let cookie = cookie.clone();
        async move {
            let mut all = vec![
                ("cookie", cookie),
                ("content-type", "application/json".to_string()),
            ];
            all.extend(headers);
            let borrowed: Vec<(&str, &str)> = all.iter().map(|(n, v)| (*n, v.as_str())).collect();
            send(
                &app,
                Method::POST,
                "/api/v1/dead-letters/redrive",
                &borrowed,
                "{\"all\":true}",
            )
            .await
        }
    };
    let replayed = api(vec![("origin", "http://localhost:8080".to_string())]).await;
    assert_eq!(replayed.status, StatusCode::FORBIDDEN, "{}", replayed.body);

    // Logging out revokes the session: the same cookie is a stranger's after.
    let status = send(
        &app,
        Method::GET,
        "/api/v1/status",
        &[("cookie", cookie.as_str())],
        "",
    )
    .await;
    assert_eq!(status.status, StatusCode::OK, "{}", status.body);
    let out = send(
        &app,
        Method::POST,
        "/dashboard/logout",
        &[
            ("cookie", cookie.as_str()),
            ("origin", "http://127.0.0.1:9464"),
        ],
        "",
    )
    .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER, "{}", out.body);
    assert!(out.header(header::SET_COOKIE).contains("Max-Age=0"));
    let after = send(
        &app,
        Method::GET,
        "/api/v1/status",
        &[("cookie", cookie.as_str())],
        "",
    )
    .await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED, "{}", after.body);
    // A restart (a new router: a new process) knows no session either.
    let restarted = app_with_token();
    let other = log_in(&app).await;
    let replay = send(
        &restarted,
        Method::GET,
        "/api/v1/status",
        &[("cookie", other.as_str())],
        "",
    )
    .await;
    assert_eq!(replay.status, StatusCode::UNAUTHORIZED, "{}", replay.body);
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let app = app_with_token();
    for authorization in [
        "Bearer s3cret",
        "bearer s3cret",
        "BEARER  s3cret",
        "bEaReR s3cret ",
    ] {
        let answer = send(
            &app,
            Method::GET,
            "/api/v1/status",
            &[("authorization", authorization)],
            "",
        )
        .await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "{authorization:?}: {}",
            answer.body
        );
    }
    for authorization in ["Basic s3cret", "Bearers3cret", "s3cret", "Bearer"] {
        let answer = send(
            &app,
            Method::GET,
            "/api/v1/status",
            &[("authorization", authorization)],
            "",
        )
        .await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{authorization:?}");
    }
}

/// A 401 names the scheme the listener takes (RFC 9110: it had no `WWW-Authenticate`), and is
/// the API's JSON.
#[tokio::test]
async fn a_refused_request_is_told_the_bearer_scheme() {
    let app = app_with_token();
    for path in ["/api/v1/status", "/queues/default/api/v1/openapi.json"] {
        let answer = send(&app, Method::GET, path, &[], "").await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(answer.header(header::WWW_AUTHENTICATE), "Bearer", "{path}");
        assert!(answer.error().contains("bearer token"), "{}", answer.body);
    }
}

/// A wrong token, by header or through the login form, is answered after a pause (tokio's
/// timer, here paused) and counted where it was presented; a right one at once.
#[tokio::test(start_paused = true)]
async fn failed_logins_are_slowed_and_counted() {
    let app = app_with_token();
    let started = tokio::time::Instant::now();
    let wrong = send(
        &app,
        Method::GET,
        "/api/v1/status",
        &[("authorization", "Bearer guess")],
        "",
    )
    .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(
        started.elapsed() >= super::FAILED_ATTEMPT_DELAY,
        "{:?}",
        started.elapsed()
    );

    let started = tokio::time::Instant::now();
    let form = send(
        &app,
        Method::POST,
        "/dashboard/login",
        &[("content-type", "application/x-www-form-urlencoded")],
        "token=guess",
    )
    .await;
    assert_eq!(form.status, StatusCode::UNAUTHORIZED);
    assert!(
        started.elapsed() >= super::FAILED_ATTEMPT_DELAY,
        "{:?}",
        started.elapsed()
    );

    let started = tokio::time::Instant::now();
    let right = send(
        &app,
        Method::GET,
        "/api/v1/status",
        &[("authorization", "Bearer s3cret")],
        "",
    )
    .await;
    assert_eq!(right.status, StatusCode::OK);
    assert!(started.elapsed() < super::FAILED_ATTEMPT_DELAY);

    let metrics = send(
        &app,
        Method::GET,
        "/metrics",
        &[("authorization", "Bearer s3cret")],
        "",
    )
    .await;
    assert_eq!(metrics.status, StatusCode::OK);
    for by in ["authorization header", "login form"] {
        let line = format!("scheduler_admin_failed_logins_total{{by=\"{by}\"}} 1");
        assert!(metrics.body.contains(&line), "{line} in:\n{}", metrics.body);
    }
}

/// The login page shows a stranger the form and nothing of the node: no id, no queue, no
/// version.
#[tokio::test]
async fn the_login_page_names_nothing_of_the_node() {
    let app = app_with_token();
    for path in ["/dashboard/login", "/queues/default/dashboard/login"] {
        let page = send(&app, Method::GET, path, &[], "").await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body.contains("name=\"token\""), "{}", page.body);
        for secret in [
            "node-id",
            "id=\"queue\"",
            ">n<",
            "openapi-test",
            env!("CARGO_PKG_VERSION"),
        ] {
            assert!(!page.body.contains(secret), "{secret}: {}", page.body);
        }
    }
}

/// Every error is the API's JSON: a method a path does not take (405, with `Allow`), a body
/// over the limit (413), an unknown path (404).
#[tokio::test]
async fn errors_are_json_on_every_route() {
    let app = open_app();
    let method = send(&app, Method::DELETE, "/api/v1/status", &[], "").await;
    assert_eq!(method.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(method.error().contains("DELETE"), "{}", method.body);
    assert!(
        method.header(header::ALLOW).contains("GET"),
        "{:?}",
        method.headers
    );
    assert_eq!(method.header(header::CONTENT_TYPE), "application/json");
    let nested = send(&app, Method::PUT, "/queues/default/api/v1/tasks", &[], "").await;
    assert_eq!(nested.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(nested.error().contains("PUT"), "{}", nested.body);

    let big = format!(
        "[{}]",
        "1,".repeat(super::super::REQUEST_BODY_LIMIT / 2) + "1"
    );
    let too_big = send(
        &app,
        Method::POST,
        "/api/v1/tasks",
        &[("content-type", "application/json")],
        &big,
    )
    .await;
    assert_eq!(too_big.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(too_big.error().contains("bytes"), "{}", too_big.body);
    // The routes whose body is read as JSON answer the same (they answered 400, "Failed to
    // buffer the request body").
    for path in [
        "/api/v1/task/cancel",
        "/api/v1/task/reschedule",
        "/api/v1/dead-letters/redrive",
        "/api/v1/dead-letters/purge",
        "/api/v1/suspensions",
        "/api/v1/schedules",
        "/api/v1/schedules/preview",
    ] {
        let too_big = send(
            &app,
            Method::POST,
            path,
            &[("content-type", "application/json")],
            &big,
        )
        .await;
        assert_eq!(too_big.status, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
        assert!(
            too_big.error().contains("limit of"),
            "{path}: {}",
            too_big.body
        );
        assert_eq!(too_big.header(header::CONTENT_TYPE), "application/json");
    }
    let unknown = send(&app, Method::GET, "/api/v2/nothing", &[], "").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(!unknown.error().is_empty());
}
