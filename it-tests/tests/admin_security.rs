//! Issue 30's security trial of the admin listener, repeated against a node on the real stack:
//! with the default settings (no token), a page on another port of `localhost` auto-submits a
//! `text/plain` form to the enqueue endpoint, and a DNS-rebinding page asks with its own `Host`;
//! with a token, the login cookie is replayed by a page on another port of the same host. All
//! refused, and the task never runs. A node told to listen beyond loopback without a token
//! refuses to start. Errors are JSON (405, 413).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use it_tests::engine::{executions, http, Recorder, TestEnv};
use scheduler_client::wire;
use scheduler_core::{NodeError, SchedulerNode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "s3curity-t0ken";

/// A raw answer: status, head (lower-case header names) and body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head
            .lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    fn error(&self) -> String {
        let json: serde_json::Value = serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("{} is not JSON ({e}): {}", self.status, self.body));
        json["error"].as_str().unwrap_or_default().to_string()
    }
}

/// `method path` to `addr` with exactly the header lines given (a browser's, or an
/// attacker's) and `body`.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[String],
    body: &str,
) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the admin listener");
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for line in headers {
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("an answer within 30 s")
        .expect("read the answer");
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = (head.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

async fn start(
    env: &TestEnv,
    token: Option<&str>,
    log: &Arc<Mutex<Vec<it_tests::engine::Execution>>>,
) -> SchedulerNode {
    let mut settings = env.settings(TestEnv::quick_scheduling());
    settings.admin.token = token.map(str::to_string);
    env.start_sole_node(settings, Recorder::new("n1", log, Duration::ZERO))
        .await
}

/// With the default settings (no token): the cross-site `text/plain` form and the rebinding
/// page are refused, and the task they posted never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_a_cross_site_form_and_a_foreign_host_are_refused() {
    let env = TestEnv::new("it_admin_sec", 2).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = start(&env, None, &log).await;
    let addr = node.admin_address().expect("admin listener enabled");
    let here = format!("Host: {addr}");

    // The form of issue 30: `<form enctype="text/plain" action="http://127.0.0.1:<port>/api/v1/tasks">`
    // with an input named `{"version":1,...,"x":"` and the value `"}`, auto-submitted by a page
    // on localhost:3000. Chromium sends these headers with it.
    let due = wire::format_time(Utc::now() + TimeDelta::seconds(1));
    let form_body = format!(
        r#"{{"version":1,"orderingId":"forged","scheduledTime":"{due}","uniquenessKey":"u","x":"="}}"#
    );
    let from_page = send(
        addr,
        "POST",
        "/api/v1/tasks",
        &[
            here.clone(),
            "Content-Type: text/plain".into(),
            "Origin: http://localhost:3000".into(),
            "Sec-Fetch-Site: same-site".into(),
            "Sec-Fetch-Mode: navigate".into(),
        ],
        &form_body,
    )
    .await;
    assert_eq!(from_page.status, 403, "{}", from_page.body);
    assert!(
        from_page.error().contains("localhost:3000"),
        "{}",
        from_page.body
    );
    // The same without Origin (a browser that sends none): refused for its type.
    let typeless = send(
        addr,
        "POST",
        "/api/v1/tasks",
        &[here.clone(), "Content-Type: text/plain".into()],
        &form_body,
    )
    .await;
    assert_eq!(typeless.status, 415, "{}", typeless.body);

    // A DNS-rebinding page: its own name in Host. Refused before anything is read.
    for host in [
        "evil.example:9464",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
    ] {
        let rebound = send(
            addr,
            "GET",
            "/api/v1/status",
            &[format!("Host: {host}")],
            "",
        )
        .await;
        assert_eq!(rebound.status, 403, "{host}: {}", rebound.body);
        assert!(!rebound.body.contains("nodeId"), "{}", rebound.body);
    }
    // The listener's own names answer.
    for host in [addr.to_string(), format!("localhost:{}", addr.port())] {
        let own = send(
            addr,
            "GET",
            "/api/v1/status",
            &[format!("Host: {host}")],
            "",
        )
        .await;
        assert_eq!(own.status, 200, "{host}: {}", own.body);
    }

    // Errors are JSON: a method the path does not take, a body over the limit.
    let method = send(
        addr,
        "DELETE",
        "/api/v1/status",
        std::slice::from_ref(&here),
        "",
    )
    .await;
    assert_eq!(method.status, 405);
    assert!(method.error().contains("DELETE"), "{}", method.body);
    let big = format!("[{}1]", "1,".repeat(1024 * 1024 + 1));
    let json = "Content-Type: application/json".to_string();
    let too_big = send(addr, "POST", "/api/v1/tasks", &[here.clone(), json], &big).await;
    assert_eq!(too_big.status, 413);
    assert!(too_big.error().contains("limit"), "{}", too_big.body);

    // The forged task was never enqueued: nothing ran, the API knows no such task.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(executions(&log).is_empty(), "{:?}", executions(&log));
    let lookup = format!("/api/v1/task?orderingId=forged&scheduledTime={due}&uniquenessKey=u");
    assert_eq!(http(addr, "GET", &lookup, None, None).await.status, 404);
    node.shutdown().await.expect("clean shutdown");
}

/// With a token: the cookie the login sets is a session id, not the token; a page on another
/// port of the same host (the same site: the browser sends it the cookie) posts a redrive and
/// a cancel with it, refused; the node's own page's post goes through; logout ends the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_cookie_is_a_session_and_replayed_from_another_port_is_refused() {
    let env = TestEnv::new("it_admin_sec_tok", 2).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = start(&env, Some(TOKEN), &log).await;
    let addr = node.admin_address().expect("admin listener enabled");
    let here = format!("Host: {addr}");
    let own_origin = format!("Origin: http://{addr}");
    let form_type = "Content-Type: application/x-www-form-urlencoded".to_string();

    let login = send(
        addr,
        "POST",
        "/dashboard/login",
        &[
            here.clone(),
            own_origin.clone(),
            "Sec-Fetch-Site: same-origin".into(),
            form_type.clone(),
        ],
        &format!("token={TOKEN}&next=%2Fdashboard"),
    )
    .await;
    assert_eq!(login.status, 303, "{}", login.body);
    let set_cookie = login.header("set-cookie").unwrap_or_default().to_string();
    let cookie = set_cookie.split(';').next().unwrap_or_default().to_string();
    let value = cookie.split_once('=').map(|(_, v)| v).unwrap_or_default();
    let hex: String = TOKEN.bytes().map(|b| format!("{b:02x}")).collect();
    assert!(value.len() >= 32, "{set_cookie}");
    assert!(
        !value.contains(TOKEN) && !value.contains(&hex),
        "the token: {set_cookie}"
    );
    let with_cookie = format!("Cookie: {cookie}");

    // Replayed by a page on another port of the same host.
    let other_port = addr.port().wrapping_add(1);
    let replays = [
        (
            "/dashboard/dead-letters/redrive",
            form_type.clone(),
            "taskType=any&confirm=yes",
        ),
        (
            "/api/v1/dead-letters/redrive",
            "Content-Type: text/plain".to_string(),
            r#"{"all":true}"#,
        ),
        (
            "/api/v1/task/cancel",
            "Content-Type: text/plain".to_string(),
            r#"{"orderingId":"o","uniquenessKey":"u"}"#,
        ),
    ];
    for (path, content_type, body) in replays {
        for fetch_site in ["Sec-Fetch-Site: same-site", "Sec-Fetch-Site: cross-site"] {
            let headers = [
                here.clone(),
                with_cookie.clone(),
                format!("Origin: http://127.0.0.1:{other_port}"),
                fetch_site.to_string(),
                content_type.clone(),
            ];
            let replayed = send(addr, "POST", path, &headers, body).await;
            assert_eq!(
                replayed.status, 403,
                "{path} {fetch_site}: {}",
                replayed.body
            );
        }
    }
    // From the node's own page the same form goes through (nothing of that type to redrive).
    let own = send(
        addr,
        "POST",
        "/dashboard/dead-letters/redrive",
        &[
            here.clone(),
            with_cookie.clone(),
            own_origin.clone(),
            "Sec-Fetch-Site: same-origin".into(),
            form_type.clone(),
        ],
        "taskType=any&confirm=yes",
    )
    .await;
    assert_eq!(own.status, 303, "{}", own.body);
    assert!(
        own.header("location")
            .is_some_and(|l| l.contains("redriven=0")),
        "{}",
        own.head
    );

    // The cookie reads the API until logout, then no more.
    let read = |cookie: String| async move {
        send(
            addr,
            "GET",
            "/api/v1/status",
            &[format!("Host: {addr}"), cookie],
            "",
        )
        .await
    };
    assert_eq!(read(with_cookie.clone()).await.status, 200);
    let out = send(
        addr,
        "POST",
        "/dashboard/logout",
        &[here.clone(), with_cookie.clone(), own_origin.clone()],
        "",
    )
    .await;
    assert_eq!(out.status, 303, "{}", out.body);
    assert_eq!(read(with_cookie.clone()).await.status, 401);
    // The bearer scheme in any case.
    let lower = http(addr, "GET", "/api/v1/status", None, None).await;
    assert_eq!(lower.status, 401);
    let bearer = send(
        addr,
        "GET",
        "/api/v1/status",
        &[here.clone(), format!("Authorization: bearer {TOKEN}")],
        "",
    )
    .await;
    assert_eq!(bearer.status, 200, "{}", bearer.body);
    // The login page tells a stranger nothing of the node.
    let page = send(
        addr,
        "GET",
        "/dashboard/login",
        std::slice::from_ref(&here),
        "",
    )
    .await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains(node.id()), "{}", page.body);
    assert!(executions(&log).is_empty(), "{:?}", executions(&log));
    node.shutdown().await.expect("clean shutdown");
}

/// Beyond loopback without a token, the node does not start unless told to, in so many words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_beyond_loopback_without_a_token_refuses_to_start_unless_told() {
    let env = TestEnv::new("it_admin_sec_remote", 2).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut settings = env.settings(TestEnv::quick_scheduling());
    settings.admin.listen = "0.0.0.0:0".into();
    let refused =
        SchedulerNode::start(settings.clone(), Recorder::new("n1", &log, Duration::ZERO)).await;
    let error = refused.err();
    assert!(matches!(&error, Some(NodeError::Settings(_))), "{error:?}");
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("admin.token") && message.contains("allow_unauthenticated_remote"),
        "{message}"
    );

    settings.admin.allow_unauthenticated_remote = true;
    let node = env
        .start_sole_node(settings, Recorder::new("n1", &log, Duration::ZERO))
        .await;
    let addr = node.admin_address().expect("admin listener enabled");
    let local = SocketAddr::from(([127, 0, 0, 1], addr.port()));
    assert_eq!(
        http(local, "GET", "/api/v1/status", None, None)
            .await
            .status,
        200
    );
    node.shutdown().await.expect("clean shutdown");
}
