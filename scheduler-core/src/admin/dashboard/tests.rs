//! The dashboard through the admin router on the in-memory store: the login and its cookie,
//! which the API's token check takes too, and pages that show the API's figures.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Extension;
use chrono::{TimeZone, Utc};
use scheduler_client::Task;
use tower::ServiceExt;

use super::history::Histories;
use crate::admin::test_app::state;
use crate::admin::{router, AdminState};
use crate::store::memory::MemoryStore;
use crate::store::{DeadLetter, DeadLetterStore, DeadReason};

const TOKEN: &str = "s3cret";

/// A node's admin router with a token and one dead letter, owning partitions 0 and 1.
async fn app() -> axum::Router {
    let store = Arc::new(MemoryStore::new());
    let at = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().unwrap();
    let letter = DeadLetter {
        partition: 1,
        task: Task::new("order-<7>", at, "charge", Default::default()).of_type("payments"),
        attempts: 1,
        last_error: "card <declined>".into(),
        reason: DeadReason::Invalid,
        dead_at: at,
        redriven_at: None,
        redrives: 0,
    };
    store.add_dead_letter(letter).await.expect("stored");
    let state = AdminState {
        node_id: "node-1".into(),
        topic: "dashboard-test".into(),
        partition_count: 3,
        owned: Arc::new(Mutex::new(vec![0, 1])),
        token: Some(TOKEN.into()),
        ..state(store)
    };
    let histories = Histories::new(["default".to_string()]);
    router(vec![Arc::new(state)]).layer(Extension(histories))
}

struct Answer {
    status: StatusCode,
    location: String,
    cookie: String,
    body: String,
}

async fn call(app: &axum::Router, method: Method, path: &str, cookie: &str, form: &str) -> Answer {
    let mut request = Request::builder().method(method).uri(path);
    if !cookie.is_empty() {
        request = request.header(header::COOKIE, cookie);
    }
    if !form.is_empty() {
        request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let request = request
        .body(Body::from(form.to_string()))
        .expect("a valid request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let header = |name| {
        (response.headers().get(name))
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (location, cookie) = (header(header::LOCATION), header(header::SET_COOKIE));
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 22)
        .await
        .expect("a body");
    Answer {
        status,
        location,
        cookie,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

#[tokio::test]
async fn a_login_sets_the_cookie_the_dashboard_and_the_api_take_in_place_of_the_bearer_token() {
    let app = app().await;
    let get = |path: &'static str, cookie: String| {
        let app = app.clone();
        async move { call(&app, Method::GET, path, &cookie, "").await }
    };

    // Without the token: a dashboard page sends the browser to its login; the API says 401.
    let page = get("/dashboard/dead-letters", String::new()).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(
        page.location,
        "/dashboard/login?next=%2Fdashboard%2Fdead-letters"
    );
    assert_eq!(
        get("/api/v1/status", String::new()).await.status,
        StatusCode::UNAUTHORIZED
    );
    let login = get(
        "/dashboard/login?next=%2Fdashboard%2Fdead-letters",
        String::new(),
    )
    .await;
    assert_eq!(login.status, StatusCode::OK);
    assert!(
        login.body.contains("value=\"/dashboard/dead-letters\""),
        "{}",
        login.body
    );

    // A wrong token is refused; the right one sets the cookie and goes where it was asked.
    let post = |form: &'static str| call(&app, Method::POST, "/dashboard/login", "", form);
    let wrong = post("token=secret&next=%2Fdashboard").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.cookie.is_empty() && wrong.body.contains("not this node"));
    let right = post("token=s3cret&next=%2Fdashboard%2Fdead-letters").await;
    assert_eq!(right.status, StatusCode::SEE_OTHER);
    assert_eq!(right.location, "/dashboard/dead-letters");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(right.cookie.contains(attribute), "{}", right.cookie);
    }
    // Never to another site.
    let away = post("token=s3cret&next=%2F%2Fevil.example%2F").await;
    assert_eq!(away.location, "/dashboard");
    let cookie = right
        .cookie
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string();

    // With the cookie: the pages, and the API too.
    let letters = get("/dashboard/dead-letters", cookie.clone()).await;
    assert_eq!(letters.status, StatusCode::OK);
    for expected in [
        "id=\"dead-letter-count\">1<",
        "data-ordering-id=\"order-&lt;7&gt;\"",
        "card &lt;declined&gt;",
        "<input type=\"hidden\" name=\"taskType\" value=\"payments\">",
    ] {
        assert!(
            letters.body.contains(expected),
            "{expected}: {}",
            letters.body
        );
    }
    let api = get("/api/v1/dead-letters", cookie.clone()).await;
    assert_eq!(api.status, StatusCode::OK);
    assert!(api.body.contains("order-<7>"), "{}", api.body);
    let overview = get("/dashboard", cookie.clone()).await;
    assert_eq!(overview.status, StatusCode::OK);
    for expected in [
        "id=\"owned-count\">2<",
        "id=\"partition-count\">3<",
        "id=\"dead-letter-count\">1<",
        "<tr data-partition=\"2\" class=\"elsewhere\">",
        "No sample yet",
    ] {
        assert!(
            overview.body.contains(expected),
            "{expected}: {}",
            overview.body
        );
    }
    let lookup = get(
        "/dashboard/task?orderingId=order-%3C7%3E&uniquenessKey=charge&scheduledTime=2026-03-01T12%3A00%3A00.000Z",
        cookie.clone(),
    )
    .await;
    assert_eq!(
        lookup.status,
        StatusCode::NOT_FOUND,
        "a dead letter has no status here"
    );
    assert!(
        lookup.body.contains("no task order-&lt;7&gt;/"),
        "{}",
        lookup.body
    );
    // A queue's dashboard links within its queue; the root leads to the dashboard.
    let nested = get("/queues/default/dashboard/schedules", cookie.clone()).await;
    assert_eq!(nested.status, StatusCode::OK);
    assert!(nested
        .body
        .contains("href=\"/queues/default/dashboard/task\""));
    assert_eq!(get("/", cookie.clone()).await.location, "/dashboard");

    // Logging out forgets the cookie.
    let out = call(&app, Method::POST, "/dashboard/logout", &cookie, "").await;
    assert_eq!(out.location, "/dashboard/login");
    assert!(out.cookie.contains("Max-Age=0"), "{}", out.cookie);
}

#[tokio::test]
async fn the_limits_page_sets_lists_and_removes_a_keys_override() {
    let app = app().await;
    let login = call(
        &app,
        Method::POST,
        "/dashboard/login",
        "",
        "token=s3cret&next=%2Fdashboard",
    )
    .await;
    let cookie = login
        .cookie
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string();
    let page = call(&app, Method::GET, "/dashboard/limits", &cookie, "").await;
    assert_eq!(page.status, StatusCode::OK);
    for expected in ["id=\"no-keys\"", "id=\"no-overrides\"", "id=\"set-limit\""] {
        assert!(page.body.contains(expected), "{expected}: {}", page.body);
    }
    let set = call(
        &app,
        Method::POST,
        "/dashboard/limits/set",
        &cookie,
        "limitKey=tenant-%3Cx%3E&taskType=&concurrency=2&rate=&burst=&weight=3",
    )
    .await;
    assert_eq!(set.status, StatusCode::SEE_OTHER, "{}", set.body);
    assert_eq!(set.location, "/dashboard/limits?set=tenant-%3Cx%3E");
    let page = call(&app, Method::GET, &set.location, &cookie, "").await;
    for expected in [
        "Set the limits of <code>tenant-&lt;x&gt;</code>",
        "<tr class=\"override\" data-key=\"tenant-&lt;x&gt;\">",
        "<td data-field=\"concurrency\">2</td>",
        "<td data-field=\"weight\">3</td>",
    ] {
        assert!(page.body.contains(expected), "{expected}: {}", page.body);
    }
    let api = call(&app, Method::GET, "/api/v1/limits", &cookie, "").await;
    assert!(
        api.body.contains("\"limitKey\":\"tenant-<x>\""),
        "{}",
        api.body
    );
    // Bad input is answered with the reason, and nothing is set.
    for (form, says) in [
        ("limitKey=k&concurrency=two", "At once must be a number"),
        ("limitKey=k&concurrency=0", "concurrency must be 1 to"),
        ("limitKey=k", "set at least one"),
    ] {
        let refused = call(&app, Method::POST, "/dashboard/limits/set", &cookie, form).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{form}");
        assert!(refused.body.contains(says), "{form}: {}", refused.body);
    }
    let removed = call(
        &app,
        Method::POST,
        "/dashboard/limits/remove",
        &cookie,
        "limitKey=tenant-%3Cx%3E&taskType=",
    )
    .await;
    assert_eq!(removed.status, StatusCode::SEE_OTHER, "{}", removed.body);
    let page = call(&app, Method::GET, &removed.location, &cookie, "").await;
    assert!(page.body.contains("id=\"no-overrides\""), "{}", page.body);
}

#[tokio::test]
async fn the_workers_page_shows_connected_workers_their_claims_and_waiting_tasks() {
    use crate::clock::SystemClock;
    use crate::remote::{RemoteWorkers, WorkerPoll};
    use crate::settings::WorkersSettings;
    let workers = RemoteWorkers::new(WorkersSettings::default(), Arc::new(SystemClock));
    let state = AdminState {
        workers: Some(workers.clone()),
        ..state(Arc::new(MemoryStore::new()))
    };
    let app = router(vec![Arc::new(state)]);
    let empty = call(&app, Method::GET, "/dashboard/workers", "", "").await;
    assert_eq!(empty.status, StatusCode::OK);
    assert!(empty.body.contains("id=\"no-workers\""), "{}", empty.body);
    // A worker of `resize <x>` polls once (no task offered: its wait ends at once).
    let poll = WorkerPoll {
        worker: "py-<1>".into(),
        types: vec!["resize".into()],
        capacity: 4,
        wait_ms: Some(0),
    };
    assert!(workers.poll(poll).await.is_empty());
    let page = call(&app, Method::GET, "/dashboard/workers", "", "").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("data-worker=\"py-&lt;1&gt;\""),
        "the worker, escaped: {}",
        page.body
    );
    assert!(page.body.contains("<td>resize</td>"), "{}", page.body);
    assert!(page.body.contains("id=\"no-claims\""));
    assert!(
        page.body.contains("href=\"/dashboard/workers\""),
        "in the navigation"
    );
}
