//! The node's admin HTTP API against the real stack: every endpoint's success and error cases,
//! with and without a bearer token. (Over 400 lines: one test per endpoint group, sharing only
//! the harness in `it-tests/src/engine.rs`.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use it_tests::engine::{by_task, http, task, wait_until, Recorder, TestEnv};
use scheduler_client::{wire, Task};
use scheduler_core::settings::QueueSettings;
use scheduler_core::{NodeError, SchedulerNode};

fn task_path(t: &Task) -> String {
    format!(
        "/api/v1/task?orderingId={}&scheduledTime={}&uniquenessKey={}",
        t.ordering_id,
        wire::format_time(t.scheduled_time),
        t.uniqueness_key
    )
}

fn key_body(t: &Task) -> String {
    serde_json::json!({
        "orderingId": t.ordering_id,
        "scheduledTime": wire::format_time(t.scheduled_time),
        "uniquenessKey": t.uniqueness_key,
    })
    .to_string()
}

async fn start_node(
    env: &TestEnv,
    token: Option<&str>,
    log: &Arc<Mutex<Vec<it_tests::engine::Execution>>>,
) -> SchedulerNode {
    let mut settings = env.settings(TestEnv::quick_scheduling());
    settings.admin.token = token.map(str::to_string);
    env.start_sole_node(settings, Recorder::new("n1", log, Duration::ZERO))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_task_lookup_cancel_and_metrics_answer_and_refuse_bad_input() {
    let env = TestEnv::new("it_admin", 4).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = start_node(&env, None, &log).await;
    let addr = node.admin_address().expect("admin API enabled");

    // Status.
    let status = http(addr, "GET", "/api/v1/status", None, None).await;
    assert_eq!(status.status, 200, "{}", status.body);
    let status = status.json();
    assert_eq!(status["ownedPartitions"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(status["partitions"].as_array().map(Vec::len), Some(4));
    assert_eq!(status["topic"], env.topic.as_str());
    assert_eq!(status["version"], "0.1.0");
    assert!(status["nodeId"].as_str().is_some_and(|id| !id.is_empty()));
    // Kafka lag per owned partition arrives with the client's statistics (every 5 s): caught up, 0.
    let mut lags = serde_json::Value::Null;
    wait_until(
        Duration::from_secs(20),
        "Kafka lag for every owned partition",
        || {
            let status =
                futures::executor::block_on(http(addr, "GET", "/api/v1/status", None, None)).json();
            lags = status["partitions"].clone();
            lags.as_array()
                .is_some_and(|ps| ps.len() == 4 && ps.iter().all(|p| p["kafkaLag"].is_i64()))
        },
    )
    .await;
    assert!(
        lags.as_array()
            .into_iter()
            .flatten()
            .all(|p| p["kafkaLag"] == 0),
        "{lags}"
    );

    // A finished task and a pending one.
    let scheduler = env.scheduler(Duration::from_secs(10));
    let done = task("admin-done", Utc::now(), "1");
    let data = serde_json::json!({"n": 1})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let pending = Task::new(
        "admin-later",
        Utc::now() + TimeDelta::seconds(60),
        "1",
        data,
    );
    scheduler
        .schedule_task(done.clone())
        .await
        .expect("scheduled");
    scheduler
        .schedule_task(pending.clone())
        .await
        .expect("scheduled");
    wait_until(Duration::from_secs(20), "the due task to run", || {
        by_task(&log).contains_key(&done.key())
    })
    .await;
    let mut finished = serde_json::Value::Null;
    wait_until(
        Duration::from_secs(10),
        "the due task to read completed",
        || {
            finished =
                futures::executor::block_on(http(addr, "GET", &task_path(&done), None, None))
                    .json();
            finished["status"] == "completed"
        },
    )
    .await;
    assert_eq!(finished["attempts"], 1);
    assert_eq!(finished["history"][0]["outcome"], "succeeded");
    assert_eq!(finished["history"].as_array().map(Vec::len), Some(1));

    // Its record may come in a later poll than the due task's (a loaded machine): it is found
    // once persisted.
    let mut waiting = http(addr, "GET", &task_path(&pending), None, None).await;
    for _ in 0..100 {
        if waiting.status != 404 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        waiting = http(addr, "GET", &task_path(&pending), None, None).await;
    }
    assert_eq!(waiting.status, 200, "{}", waiting.body);
    let waiting = waiting.json();
    assert_eq!(waiting["status"], "pending");
    assert_eq!(waiting["taskData"], serde_json::json!({"n": 1}));
    assert_eq!(waiting["attempts"], 0);

    // Errors.
    let unknown = task("admin-never-scheduled", Utc::now(), "1");
    let missing = http(addr, "GET", &task_path(&unknown), None, None).await;
    assert_eq!(missing.status, 404);
    assert!(missing.json()["error"]
        .as_str()
        .is_some_and(|e| e.contains("admin-never-scheduled")));
    let bad_time = http(
        addr,
        "GET",
        "/api/v1/task?orderingId=o&scheduledTime=noon&uniquenessKey=u",
        None,
        None,
    )
    .await;
    assert_eq!(bad_time.status, 400);
    assert!(bad_time.json()["error"]
        .as_str()
        .is_some_and(|e| e.contains("RFC 3339")));
    let no_id = http(
        addr,
        "GET",
        "/api/v1/task?scheduledTime=2030-01-01T00:00:00Z&uniquenessKey=u",
        None,
        None,
    )
    .await;
    assert_eq!(
        (no_id.status, no_id.json()["error"].clone()),
        (400, serde_json::json!("orderingId is required"))
    );
    let too_much = http(
        addr,
        "GET",
        &format!("{}&history=1000", task_path(&done)),
        None,
        None,
    )
    .await;
    assert_eq!(too_much.status, 400);
    let nowhere = http(addr, "GET", "/api/v2/everything", None, None).await;
    assert_eq!(nowhere.status, 404);
    assert!(nowhere.json()["error"].is_string());

    // Cancel the pending task (held in memory), then read it cancelled.
    let cancel = http(
        addr,
        "POST",
        "/api/v1/task/cancel",
        None,
        Some(&key_body(&pending)),
    )
    .await;
    assert_eq!(cancel.status, 202, "{}", cancel.body);
    let cancel = cancel.json();
    assert_eq!(cancel["result"], "cancellation enqueued");
    assert!(cancel["note"]
        .as_str()
        .is_some_and(|n| n.contains("not interrupted")));
    wait_until(
        Duration::from_secs(20),
        "the pending task to read cancelled",
        || {
            futures::executor::block_on(http(addr, "GET", &task_path(&pending), None, None)).json()
                ["status"]
                == "cancelled"
        },
    )
    .await;
    let garbage = http(addr, "POST", "/api/v1/task/cancel", None, Some("{not json")).await;
    assert_eq!(garbage.status, 400);
    assert!(garbage.json()["error"].is_string());
    let incomplete = http(
        addr,
        "POST",
        "/api/v1/task/cancel",
        None,
        Some(r#"{"orderingId":"o"}"#),
    )
    .await;
    assert_eq!(incomplete.status, 400);

    // Metrics. A counter moves just after the status it counts is written, so it is waited for.
    let metrics = http(addr, "GET", "/metrics", None, None).await;
    assert_eq!(metrics.status, 200);
    assert!(metrics
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/openmetrics-text")));
    wait_until(
        Duration::from_secs(5),
        "the execution and the cancellation to be counted",
        || {
            let body = futures::executor::block_on(http(addr, "GET", "/metrics", None, None)).body;
            body.contains("scheduler_executions_total{")
                && body.contains("scheduler_cancellations_total{")
        },
    )
    .await;
    node.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_protects_every_endpoint() {
    let env = TestEnv::new("it_admin_auth", 2).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = start_node(&env, Some("s3cret"), &log).await;
    let addr = node.admin_address().expect("admin API enabled");
    let some_task = task("auth", Utc::now() + TimeDelta::seconds(60), "1");
    let body = key_body(&some_task);
    let requests: [(&str, String, Option<&str>); 4] = [
        ("GET", "/api/v1/status".to_string(), None),
        ("GET", task_path(&some_task), None),
        (
            "POST",
            "/api/v1/task/cancel".to_string(),
            Some(body.as_str()),
        ),
        ("GET", "/metrics".to_string(), None),
    ];
    for (method, path, body) in &requests {
        for token in [None, Some("wrong"), Some("s3cret2")] {
            let refused = http(addr, method, path, token, *body).await;
            assert_eq!(refused.status, 401, "{method} {path} with {token:?}");
            assert!(refused.json()["error"]
                .as_str()
                .is_some_and(|e| e.contains("bearer token")));
        }
    }
    assert_eq!(
        http(addr, "GET", "/api/v1/status", Some("s3cret"), None)
            .await
            .status,
        200
    );
    assert_eq!(
        http(addr, "GET", "/metrics", Some("s3cret"), None)
            .await
            .status,
        200
    );
    assert_eq!(
        http(addr, "GET", &task_path(&some_task), Some("s3cret"), None)
            .await
            .status,
        404
    );
    assert_eq!(
        http(
            addr,
            "POST",
            "/api/v1/task/cancel",
            Some("s3cret"),
            Some(&body)
        )
        .await
        .status,
        202
    );
    node.shutdown().await.expect("clean shutdown");
}

/// Reads every page of the listing, following each page's cursor; returns the keys in order and
/// the page sizes.
async fn list_all(
    addr: std::net::SocketAddr,
    from: &str,
    to: &str,
    limit: usize,
) -> (Vec<String>, Vec<usize>) {
    let (mut keys, mut pages) = (Vec::new(), Vec::new());
    let mut page_from = from.to_string();
    let mut after = String::new();
    loop {
        let path = format!("/api/v1/tasks?from={page_from}&to={to}&limit={limit}{after}");
        let page = http(addr, "GET", &path, None, None).await;
        assert_eq!(page.status, 200, "{}", page.body);
        let page = page.json();
        let tasks = page["tasks"].as_array().cloned().unwrap_or_default();
        pages.push(tasks.len());
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        keys.extend(tasks.iter().map(|t| {
            format!(
                "{}/{}/{}",
                text(&t["orderingId"]),
                text(&t["scheduledTime"]),
                text(&t["uniquenessKey"])
            )
        }));
        let next = &page["next"];
        if next.is_null() {
            return (keys, pages);
        }
        page_from = text(&next["from"]);
        after = format!(
            "&fromOrderingId={}&fromUniquenessKey={}",
            text(&next["fromOrderingId"]),
            text(&next["fromUniquenessKey"])
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_listing_pages_through_every_partition_in_key_order() {
    let env = TestEnv::new("it_admin_list", 4).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = start_node(&env, None, &log).await;
    let addr = node.admin_address().expect("admin API enabled");
    let scheduler = env.scheduler(Duration::from_secs(10));
    let base = scheduler_client::truncate_to_millis(Utc::now() + TimeDelta::minutes(10));
    // 25 tasks over 7 orderingIds (so over several partitions), five per second: ties in time.
    let tasks: Vec<Task> = (0..25)
        .map(|i| {
            task(
                &format!("list-{}", i % 7),
                base + TimeDelta::seconds(i % 5),
                &format!("u{i:02}"),
            )
        })
        .collect();
    let outside = [
        task("list-0", base - TimeDelta::seconds(1), "before"),
        task("list-0", base + TimeDelta::seconds(5), "at-the-end"),
    ];
    for t in tasks.iter().chain(&outside) {
        scheduler.schedule_task(t.clone()).await.expect("scheduled");
    }
    let mut expected: Vec<_> = tasks.iter().map(Task::key).collect();
    expected.sort();
    let expected: Vec<String> = expected.iter().map(ToString::to_string).collect();
    let (from, to) = (
        wire::format_time(base),
        wire::format_time(base + TimeDelta::seconds(5)),
    );

    let mut listed = (Vec::new(), Vec::new());
    wait_until(Duration::from_secs(20), "every task to be listed", || {
        listed = futures::executor::block_on(list_all(addr, &from, &to, 10));
        listed.0.len() >= expected.len()
    })
    .await;
    assert_eq!(
        listed.0, expected,
        "every task of the window once, in key order, none outside it"
    );
    assert_eq!(listed.1, [10, 10, 5], "three pages of at most 10");

    // Bad input.
    for path in [
        format!("/api/v1/tasks?from={to}&to={from}"),
        format!("/api/v1/tasks?from={from}&to={to}&limit=0"),
        format!("/api/v1/tasks?from={from}&to={to}&limit=5000"),
        format!("/api/v1/tasks?from=yesterday&to={to}"),
        format!("/api/v1/tasks?to={to}"),
        format!("/api/v1/tasks?from={from}&to={to}&fromOrderingId=list-1"),
        // Ten years: 87,600 hour buckets per partition.
        "/api/v1/tasks?from=2020-01-01T00:00:00Z&to=2030-01-01T00:00:00Z".to_string(),
    ] {
        let refused = http(addr, "GET", &path, None, None).await;
        assert_eq!(refused.status, 400, "{path}: {}", refused.body);
        assert!(refused.json()["error"].is_string());
    }
    node.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_admin_port_fails_the_start_cleanly() {
    let env = TestEnv::new("it_admin_port", 2).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let mut settings = env.settings(TestEnv::quick_scheduling());
    settings.admin.listen = taken.local_addr().expect("local address").to_string();
    let log = Arc::new(Mutex::new(Vec::new()));
    let refused = SchedulerNode::start(settings, Recorder::new("n1", &log, Duration::ZERO)).await;
    let error = refused.err();
    assert!(
        matches!(&error, Some(NodeError::Admin { source, .. })
            if source.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::AddrInUse)),
        "{error:?}"
    );
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.starts_with("admin API: listening on 127.0.0.1:"),
        "{message}"
    );
    // Nothing of the failed node stayed in the group: the next node gets every partition.
    let node = env
        .start_sole_node(
            env.settings(TestEnv::quick_scheduling()),
            Recorder::new("n2", &log, Duration::ZERO),
        )
        .await;
    node.shutdown().await.expect("clean shutdown");
}

/// Suspensions: none at first; each kind suspended (201, the suspension as listed), again (its
/// reason replaced), lifted (204, also when there is none); bad input refused (400, saying
/// why); every endpoint behind the token (401). A queue's API suspends in its own keyspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspensions_are_listed_suspended_and_lifted_in_each_queues_keyspace_behind_the_token() {
    let env = TestEnv::new("it_admin_susp", 2).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut settings = env.settings(TestEnv::quick_scheduling());
    settings.admin.token = Some("s3cret".into());
    settings.queues = vec![QueueSettings {
        name: "emails".into(),
        task_types: vec!["send-email".into()],
        create_topic_partitions: Some(1),
        ..QueueSettings::default()
    }];
    let node = env
        .start_sole_node(settings, Recorder::new("n1", &log, Duration::ZERO))
        .await;
    let addr = node.admin_address().expect("admin API enabled");
    let token = Some("s3cret");
    let path = "/api/v1/suspensions";
    let list = |path: &'static str| async move {
        let listed = http(addr, "GET", path, token, None).await;
        assert_eq!(listed.status, 200, "{}", listed.body);
        listed.json()["suspensions"].clone()
    };
    let suspend = |body: &'static str| http(addr, "POST", path, token, Some(body));

    // Behind the token, all three.
    let body = r#"{"kind":"taskType","target":"send-email"}"#;
    for (method, path, body) in [
        ("GET", path.to_string(), None),
        ("POST", path.to_string(), Some(body)),
        (
            "DELETE",
            format!("{path}?kind=taskType&target=send-email"),
            None,
        ),
        ("POST", format!("/queues/emails{path}"), Some(body)),
    ] {
        for wrong in [None, Some("wrong")] {
            let refused = http(addr, method, &path, wrong, body).await;
            assert_eq!(refused.status, 401, "{method} {path} with {wrong:?}");
        }
    }
    assert_eq!(list("/api/v1/suspensions").await, serde_json::json!([]));

    // One of each kind.
    let before = scheduler_client::truncate_to_millis(Utc::now());
    let created =
        suspend(r#"{"kind":"taskType","target":"send-email","reason":"SMTP down"}"#).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let created = created.json();
    assert_eq!(
        (&created["kind"], &created["target"], &created["reason"]),
        (
            &serde_json::json!("taskType"),
            &serde_json::json!("send-email"),
            &serde_json::json!("SMTP down")
        )
    );
    let since = created["since"].as_str().unwrap_or_default();
    let parsed = chrono::DateTime::parse_from_rfc3339(since).expect("since, RFC 3339");
    assert!(
        parsed >= before && parsed <= Utc::now(),
        "{since} is when it was recorded"
    );
    assert_eq!(
        since,
        wire::format_time(parsed.into()),
        "in the wire format"
    );
    for body in [
        r#"{"kind":"orderingId","target":"customer 7"}"#,
        r#"{"kind":"group","target":"recon/2026-05","reason":""}"#,
    ] {
        let created = suspend(body).await;
        assert_eq!(created.status, 201, "{body}: {}", created.body);
        assert_eq!(created.json()["reason"], serde_json::Value::Null, "{body}");
    }
    let listed = list("/api/v1/suspensions").await;
    let targets = |listed: &serde_json::Value| -> Vec<String> {
        listed
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                format!(
                    "{} {}",
                    s["kind"].as_str().unwrap_or("?"),
                    s["target"].as_str().unwrap_or("?")
                )
            })
            .collect()
    };
    assert_eq!(
        targets(&listed),
        [
            "group recon/2026-05",
            "orderingId customer 7",
            "taskType send-email"
        ],
        "by kind, then target"
    );
    assert_eq!(listed[2], created, "listed as it was answered");

    // Again: the reason is replaced.
    let again = suspend(r#"{"kind":"taskType","target":"send-email","reason":"still down"}"#).await;
    assert_eq!(again.status, 201, "{}", again.body);
    let listed = list("/api/v1/suspensions").await;
    assert_eq!(listed.as_array().map(Vec::len), Some(3));
    assert_eq!(listed[2]["reason"], "still down");

    // Lifted, twice; the target as a query parameter, encoded.
    for _ in 0..2 {
        let lifted = http(
            addr,
            "DELETE",
            "/api/v1/suspensions?kind=orderingId&target=customer%207",
            token,
            None,
        )
        .await;
        assert_eq!((lifted.status, lifted.body.as_str()), (204, ""));
    }
    assert_eq!(
        targets(&list("/api/v1/suspensions").await),
        ["group recon/2026-05", "taskType send-email"]
    );

    // Bad input: 400, saying why.
    for (body, says) in [
        (
            r#"{"kind":"queue","target":"emails"}"#,
            "kind must be orderingId, taskType or group",
        ),
        (r#"{"kind":"group","target":"recon"}"#, "<type>/<id>"),
        (r#"{"kind":"taskType","target":""}"#, "target is required"),
        (r#"{"target":"send-email"}"#, "kind is required"),
        (r#"{"kind":"taskType","target":"send email"}"#, "taskType"),
        ("{not json", ""),
    ] {
        let refused = suspend(body).await;
        assert_eq!(refused.status, 400, "{body}: {}", refused.body);
        let error = refused.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(error.contains(says), "{body}: {error}");
    }
    for query in [
        "?kind=group&target=recon",
        "?target=send-email",
        "?kind=taskType",
    ] {
        let refused = http(addr, "DELETE", &format!("{path}{query}"), token, None).await;
        assert_eq!(refused.status, 400, "{query}: {}", refused.body);
        assert!(refused.json()["error"].is_string());
    }

    // The emails queue's API: its own keyspace, apart from the default queue's.
    let created = http(
        addr,
        "POST",
        "/queues/emails/api/v1/suspensions",
        token,
        Some(r#"{"kind":"orderingId","target":"mailbox-1"}"#),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(
        targets(&list("/queues/emails/api/v1/suspensions").await),
        ["orderingId mailbox-1"]
    );
    assert_eq!(
        targets(&list("/api/v1/suspensions").await),
        ["group recon/2026-05", "taskType send-email"]
    );
    let session = env.stack.require_cassandra().await;
    let rows = session
        .query_unpaged(
            format!("SELECT target FROM {}_emails.suspensions", env.keyspace),
            &[],
        )
        .await
        .expect("read the queue's keyspace")
        .into_rows_result()
        .expect("rows");
    let stored: Vec<(String,)> = rows
        .rows::<(String,)>()
        .expect("text")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(stored, [("mailbox-1".to_string(),)]);
    node.shutdown().await.expect("clean shutdown");
}
