//! The dashboard through the admin router on the in-memory store: the login and its cookie,
//! which the API's token check takes too, and pages that show the API's figures.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Extension;
use chrono::{TimeDelta, TimeZone, Utc};
use scheduler_client::{partition_for, Task};
use tower::ServiceExt;

use super::history::Histories;
use crate::admin::test_app::state;
use crate::admin::{router, AdminState};
use crate::retrying::RetryingTasks;
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

/// The admin router over `store`, without a token, with `retrying` as the node's retrying set.
fn open_app(store: Arc<MemoryStore>, retrying: Option<RetryingTasks>) -> axum::Router {
    let state = AdminState {
        retrying,
        ..state(store)
    };
    router(vec![Arc::new(state)])
}

#[tokio::test]
async fn the_pending_page_lists_tasks_by_state_type_and_ordering_id_without_the_ticks() {
    use crate::hooks::{RetryPlanned, TaskHook};
    use crate::store::{ScheduleStore, Suspension, SuspensionStore, SuspensionTarget};
    let store = Arc::new(MemoryStore::new());
    let now = Utc::now();
    let task = |o: &str, secs: i64, task_type: &str| {
        let at = now + TimeDelta::seconds(secs);
        Task::new(o, at, "u", Default::default()).of_type(task_type)
    };
    let later = task("due-later", 600, "email");
    let overdue = task("overdue-1", -60, "email");
    let held = task("held-1", -30, "sms");
    let retried = task("retry-1", -120, "email");
    let tick = task("scheduler:tick:daily", 300, crate::recurring::TICK_TYPE);
    for t in [&later, &overdue, &held, &retried, &tick] {
        let partition = partition_for(&t.ordering_id, 4);
        let refused = store.persist(partition, vec![t.clone()]).await;
        assert_eq!(refused.map(|r| r.len()).ok(), Some(0));
    }
    let suspension = Suspension {
        target: SuspensionTarget::OrderingId("held-1".into()),
        since: now,
        reason: Some("maintenance".into()),
    };
    store.suspend(suspension).await.expect("suspended");
    let retrying = RetryingTasks::default();
    let plan = RetryPlanned {
        attempt: 2,
        at: now + TimeDelta::seconds(30),
        error: Some("smtp <down>".into()),
    };
    retrying.retrying(partition_for("retry-1", 4), &retried, &plan);
    let app = open_app(store, Some(retrying));
    let rows = |body: &str| -> Vec<(String, String)> {
        (body
            .split("<tr class=\"pending\" data-ordering-id=\"")
            .skip(1))
        .filter_map(|row| {
            let (o, rest) = row.split_once('"')?;
            let state = rest.split("data-state=\"").nth(1)?.split('"').next()?;
            Some((o.to_string(), state.to_string()))
        })
        .collect()
    };
    let page = call(&app, Method::GET, "/dashboard/pending", "", "").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let mut listed = rows(&page.body);
    listed.sort();
    let expected = [
        ("due-later", "waiting"),
        ("held-1", "suspended"),
        ("overdue-1", "overdue"),
        ("retry-1", "retrying"),
    ];
    let expected: Vec<(String, String)> = (expected.iter())
        .map(|(o, s)| (o.to_string(), s.to_string()))
        .collect();
    assert_eq!(listed, expected, "{}", page.body);
    for shown in [
        "by orderingId:held-1",
        "attempt 3 next <time",
        "id=\"retrying-count\">1<",
        "<tr class=\"retrying\" data-ordering-id=\"retry-1\">",
        "smtp &lt;down&gt;",
    ] {
        assert!(page.body.contains(shown), "{shown}: {}", page.body);
    }
    // (Due in 600 s, read a moment later.)
    let ago = ["(in 9 min)", "(in 10 min)"];
    assert!(ago.iter().any(|a| page.body.contains(a)), "{}", page.body);
    assert!(!page.body.contains("scheduler:tick"), "{}", page.body);
    // The engine's ticks when asked for; one state, one type, one orderingId.
    let with_ticks = call(&app, Method::GET, "/dashboard/pending?internal=1", "", "").await;
    assert!(rows(&with_ticks.body)
        .iter()
        .any(|(o, _)| o == "scheduler:tick:daily"));
    for (query, only) in [
        ("state=suspended", "held-1"),
        ("taskType=sms", "held-1"),
        ("orderingId=overdue-1", "overdue-1"),
        ("state=retrying&taskType=email", "retry-1"),
    ] {
        let page = call(
            &app,
            Method::GET,
            &format!("/dashboard/pending?{query}"),
            "",
            "",
        )
        .await;
        let listed: Vec<String> = rows(&page.body).into_iter().map(|(o, _)| o).collect();
        assert_eq!(listed, [only], "{query}");
    }
    let bad = call(&app, Method::GET, "/dashboard/pending?state=asleep", "", "").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    // The API's answer carries the same.
    let api = call(&app, Method::GET, "/api/v1/tasks/retrying", "", "").await;
    let api: serde_json::Value = serde_json::from_str(&api.body).unwrap_or_default();
    assert_eq!(api["total"], 1);
    assert_eq!(api["tasks"][0]["retry"]["attempts"], 2);
}

#[tokio::test]
async fn a_suspension_is_added_and_resumed_through_its_page() {
    let store = Arc::new(MemoryStore::new());
    let app = open_app(Arc::clone(&store), None);
    let empty = call(&app, Method::GET, "/dashboard/suspensions", "", "").await;
    assert!(
        empty.body.contains("id=\"no-suspensions\""),
        "{}",
        empty.body
    );
    let added = call(
        &app,
        Method::POST,
        "/dashboard/suspensions/suspend",
        "",
        "kind=taskType&target=email&reason=smtp+%3Cdown%3E",
    )
    .await;
    assert_eq!(added.status, StatusCode::SEE_OTHER, "{}", added.body);
    let page = call(&app, Method::GET, &added.location, "", "").await;
    for shown in [
        "Suspended taskType <code>email</code>",
        "<tr class=\"suspension\" data-kind=\"taskType\" data-target=\"email\">",
        "smtp &lt;down&gt;",
    ] {
        assert!(page.body.contains(shown), "{shown}: {}", page.body);
    }
    let resumed = call(
        &app,
        Method::POST,
        "/dashboard/suspensions/resume",
        "",
        "kind=taskType&target=email",
    )
    .await;
    assert_eq!(resumed.status, StatusCode::SEE_OTHER, "{}", resumed.body);
    let page = call(&app, Method::GET, &resumed.location, "", "").await;
    assert!(page.body.contains("Resumed taskType"), "{}", page.body);
    assert!(page.body.contains("id=\"no-suspensions\""), "{}", page.body);
    let bad = call(
        &app,
        Method::POST,
        "/dashboard/suspensions/suspend",
        "",
        "kind=tenant&target=x",
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn ticked_dead_letters_are_purged_only_once_confirmed() {
    let store = Arc::new(MemoryStore::new());
    let at = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().unwrap();
    for o in ["a", "b", "c"] {
        let letter = DeadLetter {
            partition: 0,
            task: Task::new(o, at, "u&1", Default::default()).of_type("payments"),
            attempts: 1,
            last_error: "declined".into(),
            reason: DeadReason::Invalid,
            dead_at: at,
            redriven_at: None,
            redrives: 0,
        };
        store.add_dead_letter(letter).await.expect("stored");
    }
    let app = open_app(store, None);
    let page = call(&app, Method::GET, "/dashboard/dead-letters", "", "").await;
    // Each row's checkbox carries its key, encoded.
    let value = "o%3Da%26t%3D2026-03-01T12%253A00%253A00.000Z%26u%3Du%25261";
    assert!(
        page.body
            .contains("value=\"o=a&amp;t=2026-03-01T12%3A00%3A00.000Z&amp;u=u%261\""),
        "{}",
        page.body
    );
    let b = value.replace("o%3Da", "o%3Db");
    let unconfirmed = format!("key={value}&key={b}&action=purge");
    let refused = call(
        &app,
        Method::POST,
        "/dashboard/dead-letters/selected",
        "",
        &unconfirmed,
    )
    .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused.body.contains("must be confirmed"),
        "{}",
        refused.body
    );
    let confirmed = format!("{unconfirmed}&confirm=yes");
    let purged = call(
        &app,
        Method::POST,
        "/dashboard/dead-letters/selected",
        "",
        &confirmed,
    )
    .await;
    assert_eq!(purged.status, StatusCode::SEE_OTHER, "{}", purged.body);
    let page = call(&app, Method::GET, &purged.location, "", "").await;
    assert!(page.body.contains("id=\"purged\">2<"), "{}", page.body);
    assert!(
        page.body.contains("id=\"dead-letter-count\">1<"),
        "{}",
        page.body
    );
    // All of a type: confirmed first too.
    let type_form = "taskType=payments&action=purge";
    let refused = call(
        &app,
        Method::POST,
        "/dashboard/dead-letters/redrive",
        "",
        type_form,
    )
    .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    let confirmed = format!("{type_form}&confirm=yes");
    let purged = call(
        &app,
        Method::POST,
        "/dashboard/dead-letters/redrive",
        "",
        &confirmed,
    )
    .await;
    assert_eq!(purged.status, StatusCode::SEE_OTHER, "{}", purged.body);
    let page = call(&app, Method::GET, &purged.location, "", "").await;
    assert!(
        page.body.contains("id=\"no-dead-letters\""),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn a_schedule_is_paused_and_resumed_by_its_button_and_a_cancel_needs_its_checkbox() {
    let store = Arc::new(MemoryStore::new());
    let state = state(Arc::clone(&store));
    let spec = crate::recurring::ScheduleSpec::every(
        "nightly",
        std::time::Duration::from_secs(60),
        "report",
        Default::default(),
    );
    state.schedules.create(spec).await.expect("created");
    let app = router(vec![Arc::new(state)]);
    let page = call(&app, Method::GET, "/dashboard/schedules", "", "").await;
    assert!(page.body.contains(">Pause</button>"), "{}", page.body);
    let paused = call(
        &app,
        Method::POST,
        "/dashboard/schedules/pause",
        "",
        "id=nightly",
    )
    .await;
    assert_eq!(paused.status, StatusCode::SEE_OTHER, "{}", paused.body);
    let page = call(&app, Method::GET, &paused.location, "", "").await;
    assert!(
        page.body.contains("class=\"status paused\""),
        "{}",
        page.body
    );
    assert!(page.body.contains(">Resume</button>"), "{}", page.body);
    let resumed = call(
        &app,
        Method::POST,
        "/dashboard/schedules/resume",
        "",
        "id=nightly",
    )
    .await;
    let page = call(&app, Method::GET, &resumed.location, "", "").await;
    assert!(
        page.body.contains("class=\"status active\""),
        "{}",
        page.body
    );
    let missing = call(
        &app,
        Method::POST,
        "/dashboard/schedules/pause",
        "",
        "id=none",
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    // A cancel without its checkbox ticked is refused before anything is sent.
    let form = "orderingId=o&scheduledTime=2030-01-01T00%3A00%3A00.000Z&uniquenessKey=u";
    let refused = call(&app, Method::POST, "/dashboard/task/cancel", "", form).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused.body.contains("must be confirmed"),
        "{}",
        refused.body
    );
}
