//! The node's admin HTTP API against the real stack: every endpoint's success and error cases,
//! with and without a bearer token. (Over 400 lines: one test per endpoint group, sharing only
//! the harness in `it-tests/src/engine.rs`.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Datelike, Days, NaiveDate, TimeDelta, Utc};
use it_tests::engine::{by_task, http, task, wait_until, Recorder, TestEnv};
use scheduler_client::{wire, Task};
use scheduler_core::recurring::ScheduleSpec;
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
    // The attempt that ended the task on its first try shows its start and duration (kept
    // with its status in Cassandra's task_status.started_at).
    let first = &finished["history"][0];
    let started = first["startedAt"].as_str().expect("startedAt");
    assert!(
        started <= first["finishedAt"].as_str().unwrap_or_default(),
        "{first}"
    );
    assert!(
        first["durationMs"].as_i64().is_some_and(|ms| ms >= 0),
        "{first}"
    );

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

const SCHEDULES: &str = "/api/v1/schedules";
const NIGHTLY: &str = r#"{"id":"nightly","cron":"0 30 2 * * *","timeZone":"Europe/Paris","taskType":"report","data":{"k":1}}"#;

/// An RFC 3339 time of an answer.
fn time_of(value: &serde_json::Value) -> DateTime<Utc> {
    let text = value.as_str().unwrap_or_default();
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{value} is not an RFC 3339 time: {e}"))
        .into()
}

/// 02:30 in Paris on `day`, in UTC, by the EU's summer-time rule (from 01:00 UTC on the last
/// Sunday of March to 01:00 UTC on the last Sunday of October): 00:30 in summer, 01:30 in
/// winter. On the spring-forward day 02:30 does not exist and croner fires at the first instant
/// after the gap (03:00 CEST, 01:00 UTC); on the fall-back day it exists twice and a fixed-time
/// job fires at the earlier (CEST, 00:30 UTC).
fn half_past_two_in_paris(day: NaiveDate) -> DateTime<Utc> {
    let last_sunday = |month: u32| {
        let last = NaiveDate::from_ymd_opt(day.year(), month + 1, 1)
            .and_then(|first| first.pred_opt())
            .expect("a date");
        last - Days::new(u64::from(last.weekday().num_days_from_sunday()))
    };
    let (spring_forward, fall_back) = (last_sunday(3), last_sunday(10));
    let (hour, minute) = match day {
        d if d == spring_forward => (1, 0),
        d if d > spring_forward && d <= fall_back => (0, 30),
        _ => (1, 30),
    };
    day.and_hms_opt(hour, minute, 0).expect("a time").and_utc()
}

/// The first `n` fire times of [`NIGHTLY`] after `after`, in the wire format.
fn nightly_after(after: DateTime<Utc>, n: usize) -> Vec<String> {
    (after.date_naive().iter_days())
        .map(half_past_two_in_paris)
        .filter(|t| *t > after)
        .take(n)
        .map(wire::format_time)
        .collect()
}

/// The expectation of 02:30 in Paris agrees with the engine's cadence on every day of two
/// years, their summer-time changes included (so the API test below holds on any date).
#[test]
fn half_past_two_in_paris_follows_the_summer_time_rule_on_every_day() {
    let spec: ScheduleSpec = serde_json::from_str(NIGHTLY).expect("a definition");
    let cadence = spec.validate().expect("valid");
    let first = NaiveDate::from_ymd_opt(2026, 1, 1).expect("a date");
    for day in first.iter_days().take(2 * 365) {
        let midnight = day.and_hms_opt(0, 0, 0).expect("a time").and_utc();
        assert_eq!(
            cadence.next_after(midnight),
            Some(half_past_two_in_paris(day)),
            "{day}"
        );
    }
    let at = |s: &str| time_of(&serde_json::json!(s));
    for (day, expected) in [
        ((2026, 3, 29), "2026-03-29T01:00:00Z"),
        ((2026, 7, 10), "2026-07-10T00:30:00Z"),
        ((2026, 10, 25), "2026-10-25T00:30:00Z"),
        ((2026, 10, 26), "2026-10-26T01:30:00Z"),
    ] {
        let day = NaiveDate::from_ymd_opt(day.0, day.1, day.2).expect("a date");
        assert_eq!(half_past_two_in_paris(day), at(expected), "{day}");
    }
}

/// The ids of `GET /api/v1/schedules` (at `prefix`, a queue's or the root).
async fn schedule_ids(
    addr: std::net::SocketAddr,
    prefix: &str,
    token: Option<&str>,
) -> Vec<String> {
    let listed = http(addr, "GET", &format!("{prefix}{SCHEDULES}"), token, None).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    (listed.json()["schedules"].as_array().into_iter().flatten())
        .map(|s| s["definition"]["id"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The fire times of an answer's enqueued fires, oldest first, each checked: its run's key and
/// due time follow from it (no jitter).
fn enqueued_fires(id: &str, detail: &serde_json::Value) -> Vec<DateTime<Utc>> {
    let mut times: Vec<DateTime<Utc>> = (detail["fires"].as_array().into_iter().flatten())
        .filter(|f| f["outcome"] == "enqueued")
        .map(|f| {
            let fire = time_of(&f["fireTime"]);
            let key = format!("schedule:{id}@{}", fire.timestamp_millis());
            assert_eq!(f["runKey"], key.as_str(), "{f}");
            assert_eq!(f["runTime"], f["fireTime"], "{f}");
            fire
        })
        .collect();
    times.sort();
    times
}

/// The fire times of the runs of schedule `id` the executor was called for.
fn runs_of(log: &Arc<Mutex<Vec<it_tests::engine::Execution>>>, id: &str) -> Vec<DateTime<Utc>> {
    let ordering_id = format!("schedule:{id}");
    let prefix = format!("schedule:{id}@");
    let mut runs: Vec<DateTime<Utc>> = by_task(log)
        .into_keys()
        .filter(|k| k.ordering_id == ordering_id)
        .map(|k| {
            let ms = k
                .uniqueness_key
                .strip_prefix(&prefix)
                .and_then(|ms| ms.parse().ok());
            let fire = ms.and_then(DateTime::from_timestamp_millis);
            assert_eq!(fire, Some(k.scheduled_time), "{k}: due at its fire time");
            k.scheduled_time
        })
        .collect();
    runs.sort();
    runs
}

/// Schedules: none at first; a cron schedule in a time zone created (201), declared again (200,
/// nothing changes), redefined (200, a new revision); listed and shown with its next fire times
/// (02:30 in Paris); bad definitions and counts refused (400, saying why), unknown ids 404;
/// deleted (204, then 404); every endpoint behind the token (401). A queue's API keeps its
/// schedules in its own keyspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_created_redefined_listed_shown_and_deleted_in_each_queue_behind_the_token() {
    let env = TestEnv::new("it_admin_sched", 2).await;
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
    let post = |path: String, body: &'static str| async move {
        http(addr, "POST", &path, token, Some(body)).await
    };
    let show = |query: &'static str| async move {
        http(
            addr,
            "GET",
            &format!("{SCHEDULES}/nightly{query}"),
            token,
            None,
        )
        .await
    };

    // Behind the token, every one.
    for (method, path, body) in [
        ("GET", SCHEDULES.to_string(), None),
        ("POST", SCHEDULES.to_string(), Some(NIGHTLY)),
        ("GET", format!("{SCHEDULES}/nightly?count=3"), None),
        ("POST", format!("{SCHEDULES}/nightly/pause"), None),
        ("POST", format!("{SCHEDULES}/nightly/resume"), None),
        ("DELETE", format!("{SCHEDULES}/nightly"), None),
        (
            "POST",
            format!("{SCHEDULES}/preview?count=2"),
            Some(NIGHTLY),
        ),
        ("POST", format!("/queues/emails{SCHEDULES}"), Some(NIGHTLY)),
    ] {
        for wrong in [None, Some("wrong")] {
            let refused = http(addr, method, &path, wrong, body).await;
            assert_eq!(refused.status, 401, "{method} {path} with {wrong:?}");
            assert!(refused.json()["error"]
                .as_str()
                .is_some_and(|e| e.contains("bearer token")));
        }
    }
    assert!(schedule_ids(addr, "", token).await.is_empty());

    // Created: its definition with the defaults, described in its time zone, its chain pending
    // at the next 02:30 in Paris.
    let before = Utc::now();
    let created = post(SCHEDULES.into(), NIGHTLY).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let created = created.json();
    assert_eq!(
        created["definition"],
        serde_json::json!({
            "id": "nightly", "cron": "0 30 2 * * *", "timeZone": "Europe/Paris",
            "taskType": "report", "data": {"k": 1}, "priority": 0, "overlap": "skip",
            "catchUp": "once",
        })
    );
    assert!(
        created["description"]
            .as_str()
            .is_some_and(|d| d.contains("Europe/Paris")),
        "{created}"
    );
    let next = nightly_after(before, 3);
    assert_eq!(created["nextFire"], next[0].as_str(), "{created}");
    assert_eq!(
        (
            &created["paused"],
            &created["stalled"],
            &created["lastFire"]
        ),
        (
            &serde_json::json!(false),
            &serde_json::json!(false),
            &serde_json::Value::Null
        )
    );
    assert_eq!(created["createdAt"], created["updatedAt"]);
    let recorded = time_of(&created["createdAt"]);
    assert!(recorded >= before - TimeDelta::milliseconds(1) && recorded <= Utc::now());
    let revision = created["revision"].as_i64().expect("a revision");

    // Declared again: nothing changes.
    let again = post(SCHEDULES.into(), NIGHTLY).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json(), created, "the same definition changes nothing");

    // Redefined: a new revision, its chain started again.
    let jittered = r#"{"id":"nightly","cron":"0 30 2 * * *","timeZone":"Europe/Paris","taskType":"report","data":{"k":1},"jitter":"5s"}"#;
    let redefined = post(SCHEDULES.into(), jittered).await;
    assert_eq!(redefined.status, 200, "{}", redefined.body);
    let redefined = redefined.json();
    assert!(
        redefined["revision"].as_i64().is_some_and(|r| r > revision),
        "{redefined} after revision {revision}"
    );
    assert_eq!(redefined["definition"]["jitter"], "5s");
    assert_eq!(redefined["createdAt"], created["createdAt"]);
    assert!(time_of(&redefined["updatedAt"]) >= recorded);
    assert_eq!(redefined["nextFire"], next[0].as_str());

    // Listed and shown as answered; its next fire times each 02:30 in Paris; no fire yet.
    let listed = http(addr, "GET", SCHEDULES, token, None).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.json()["schedules"], serde_json::json!([redefined]));
    let shown = show("?count=3").await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    let shown = shown.json();
    assert_eq!(shown["schedule"], redefined);
    assert_eq!(shown["upcoming"], serde_json::json!(next));
    assert_eq!(shown["fires"], serde_json::json!([]));
    let five = show("").await.json();
    assert_eq!(
        five["upcoming"],
        serde_json::json!(nightly_after(before, 5)),
        "5 by default"
    );

    // Bad definitions: 400, saying why, from both the create and the preview; nothing created.
    for (body, says) in [
        (
            r#"{"id":"bad","cron":"61 * * * *","taskType":"report"}"#,
            "\"61 * * * *\"",
        ),
        (
            r#"{"id":"bad","every":"1s","taskType":"report","evry":"2s"}"#,
            "evry",
        ),
        (
            r#"{"id":"bad","every":"500ms","taskType":"report"}"#,
            "at least 1s",
        ),
        (r#"{"id":"bad","every":"soon","taskType":"report"}"#, "soon"),
        (
            r#"{"id":"bad","cron":"* * * * *","timeZone":"Mars/Base","taskType":"report"}"#,
            "Mars/Base",
        ),
        (
            r#"{"id":"bad","cron":"* * * * *","every":"1s","taskType":"report"}"#,
            "exactly one of cron and every",
        ),
        (
            r#"{"id":"bad","taskType":"report"}"#,
            "exactly one of cron and every",
        ),
        (
            r#"{"id":"bad","every":"1s","taskType":"scheduler:tick"}"#,
            "engine's own",
        ),
        (
            r#"{"id":"a b","every":"1s","taskType":"report"}"#,
            "\"a b\"",
        ),
        (r#"{"id":"bad","every":"1s"}"#, "taskType"),
        ("{not json", ""),
    ] {
        for path in [SCHEDULES.to_string(), format!("{SCHEDULES}/preview")] {
            let refused = post(path.clone(), body).await;
            assert_eq!(refused.status, 400, "{path} {body}: {}", refused.body);
            let error = refused.json()["error"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            assert!(error.contains(says), "{path} {body}: {error}");
        }
    }
    // A schedule needs an id (a preview does not).
    let unnamed = post(
        SCHEDULES.to_string(),
        r#"{"every":"1s","taskType":"report"}"#,
    )
    .await;
    assert_eq!(unnamed.status, 400, "{}", unnamed.body);
    let error = unnamed.json()["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(error.starts_with("schedule id \"\" must be"), "{error}");
    // Counts out of 1 to 100.
    for (query, says) in [
        ("?count=0", "count must be 1 to 100, not 0"),
        ("?count=101", "count must be 1 to 100, not 101"),
        ("?count=many", "count"),
    ] {
        let refused = show(query).await;
        assert_eq!(refused.status, 400, "{query}: {}", refused.body);
        let refused = refused.json();
        assert!(
            refused["error"].as_str().is_some_and(|e| e.contains(says)),
            "{query}: {refused}"
        );
        let refused = post(format!("{SCHEDULES}/preview{query}"), NIGHTLY).await;
        assert_eq!(refused.status, 400, "preview {query}: {}", refused.body);
    }
    // Unknown ids: 404, naming the id.
    for (method, path) in [
        ("GET", format!("{SCHEDULES}/never")),
        ("DELETE", format!("{SCHEDULES}/never")),
        ("POST", format!("{SCHEDULES}/never/pause")),
        ("POST", format!("{SCHEDULES}/never/resume")),
    ] {
        let missing = http(addr, method, &path, token, None).await;
        assert_eq!(missing.status, 404, "{method} {path}: {}", missing.body);
        assert!(
            missing.json()["error"]
                .as_str()
                .is_some_and(|e| e.contains("never")),
            "{method} {path}: {}",
            missing.body
        );
    }
    assert_eq!(schedule_ids(addr, "", token).await, ["nightly"]);

    // The emails queue's API: its own keyspace, apart from the default queue's.
    let digest = post(
        format!("/queues/emails{SCHEDULES}"),
        r#"{"id":"digest","every":"1h","taskType":"send-email"}"#,
    )
    .await;
    assert_eq!(digest.status, 201, "{}", digest.body);
    assert_eq!(digest.json()["description"], "every 1h");
    assert_eq!(
        schedule_ids(addr, "/queues/emails", token).await,
        ["digest"]
    );
    assert_eq!(schedule_ids(addr, "", token).await, ["nightly"]);
    let elsewhere = http(addr, "GET", &format!("{SCHEDULES}/digest"), token, None).await;
    assert_eq!(elsewhere.status, 404, "{}", elsewhere.body);
    let session = env.stack.require_cassandra().await;
    let rows = session
        .query_unpaged(
            format!("SELECT id FROM {}_emails.recurring_schedules", env.keyspace),
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
    assert_eq!(stored, [("digest".to_string(),)]);

    // Deleted: 204, then gone (404), and deleting again is 404.
    for (prefix, id) in [("", "nightly"), ("/queues/emails", "digest")] {
        let path = format!("{prefix}{SCHEDULES}/{id}");
        let deleted = http(addr, "DELETE", &path, token, None).await;
        assert_eq!((deleted.status, deleted.body.as_str()), (204, ""), "{path}");
        // (A GET here once found the schedule on Cassandra 2.1.0 after a flush: see
        // `it-tests/tests/read_after_delete.rs`.)
        for method in ["GET", "DELETE"] {
            let gone = http(addr, method, &path, token, None).await;
            assert_eq!(
                gone.status, 404,
                "{method} {path} after its delete: {}",
                gone.body
            );
        }
        assert!(
            schedule_ids(addr, prefix, token).await.is_empty(),
            "{prefix}"
        );
    }
    node.shutdown().await.expect("clean shutdown");
}

/// An interval schedule through the API: a preview creates nothing; created, it fires every
/// second (each fire enqueues its run, keyed by the fire time, and the executor runs it);
/// paused, nothing fires after the tick in flight; resumed (a new revision), it fires again from
/// then, not the fire times it missed; deleted, its chain ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_schedule_fires_pauses_resumes_and_ends_and_a_preview_creates_nothing() {
    let env = TestEnv::new("it_admin_sched_fire", 2).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = start_node(&env, None, &log).await;
    let addr = node.admin_address().expect("admin API enabled");
    let id = "ticking";
    let path = format!("{SCHEDULES}/{id}");
    let show = || {
        let path = path.clone();
        async move {
            let shown = http(addr, "GET", &path, None, None).await;
            assert_eq!(shown.status, 200, "{}", shown.body);
            shown.json()
        }
    };

    // A preview: four fire times 2 s apart, on the multiples of 2 s; nothing created.
    let before = Utc::now();
    let preview = http(
        addr,
        "POST",
        &format!("{SCHEDULES}/preview?count=4"),
        None,
        // (A preview needs no id.)
        Some(r#"{"every":"2s","taskType":"report"}"#),
    )
    .await;
    assert_eq!(preview.status, 200, "{}", preview.body);
    let preview = preview.json();
    assert_eq!(preview["description"], "every 2s");
    let times: Vec<DateTime<Utc>> = (preview["upcoming"].as_array().into_iter().flatten())
        .map(time_of)
        .collect();
    assert_eq!(times.len(), 4, "{preview}");
    assert!(
        times[0] > before && times[0] <= Utc::now() + TimeDelta::seconds(2),
        "{preview}"
    );
    assert!(
        times.iter().all(|t| t.timestamp_millis() % 2000 == 0),
        "{preview}"
    );
    assert!(
        times
            .windows(2)
            .all(|w| w[1] - w[0] == TimeDelta::seconds(2)),
        "{preview}"
    );
    assert!(schedule_ids(addr, "", None).await.is_empty());
    assert_eq!(http(addr, "GET", &path, None, None).await.status, 404);

    // Created: every second, its fires enqueue runs that are run.
    let created = http(
        addr,
        "POST",
        SCHEDULES,
        None,
        Some(r#"{"id":"ticking","every":"1s","taskType":"report","data":{"n":1}}"#),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let created = created.json();
    assert_eq!(created["description"], "every 1s");
    let created_at = time_of(&created["updatedAt"]);
    let revision = created["revision"].as_i64().expect("a revision");
    let mut detail = serde_json::Value::Null;
    wait_until(Duration::from_secs(15), "three enqueued fires", || {
        detail = futures::executor::block_on(show());
        enqueued_fires(id, &detail).len() >= 3
    })
    .await;
    let fired = enqueued_fires(id, &detail);
    assert!(
        fired
            .iter()
            .all(|t| *t > created_at && t.timestamp_millis() % 1000 == 0),
        "fire times after the create, on whole seconds: {detail}"
    );
    assert!(
        fired.contains(&time_of(&detail["schedule"]["lastFire"])),
        "lastFire is a fire that enqueued its run: {detail}"
    );
    assert!(time_of(&detail["schedule"]["nextFire"]) > time_of(&detail["schedule"]["lastFire"]));
    assert_eq!(detail["schedule"]["paused"], false);
    wait_until(
        Duration::from_secs(10),
        "the first fires' runs to run",
        || {
            let runs = runs_of(&log, id);
            fired.iter().all(|t| runs.contains(t))
        },
    )
    .await;

    // Paused: no fire time after the pause fires (but the tick in flight at it, if any).
    let paused = http(addr, "POST", &format!("{path}/pause"), None, None).await;
    assert_eq!(paused.status, 200, "{}", paused.body);
    let paused = paused.json();
    assert_eq!(
        (&paused["paused"], &paused["nextFire"]),
        (&serde_json::json!(true), &serde_json::Value::Null)
    );
    assert_eq!(paused["revision"], revision);
    let paused_at = time_of(&paused["updatedAt"]);
    let in_flight = paused_at + TimeDelta::seconds(1);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let detail = show().await;
    assert_eq!(detail["schedule"]["paused"], true, "{detail}");
    assert_eq!(detail["upcoming"], serde_json::json!([]), "{detail}");
    let late: Vec<_> = (enqueued_fires(id, &detail).into_iter())
        .filter(|t| *t > paused_at)
        .collect();
    assert!(
        late.len() <= 1 && late.iter().all(|t| *t <= in_flight),
        "fired after the pause at {paused_at}: {late:?}"
    );
    let again = http(addr, "POST", &format!("{path}/pause"), None, None).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(
        again.json()["updatedAt"],
        paused["updatedAt"],
        "paused once"
    );

    // Resumed: a new revision, firing again from the next fire time after the resume.
    let resumed = http(addr, "POST", &format!("{path}/resume"), None, None).await;
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    let resumed = resumed.json();
    assert_eq!(resumed["paused"], false);
    assert!(
        resumed["revision"].as_i64().is_some_and(|r| r > revision),
        "{resumed} after revision {revision}"
    );
    let resumed_at = time_of(&resumed["updatedAt"]);
    let next = time_of(&resumed["nextFire"]);
    assert!(
        next > resumed_at && next <= resumed_at + TimeDelta::seconds(1),
        "{resumed}"
    );
    let mut detail = serde_json::Value::Null;
    wait_until(
        Duration::from_secs(15),
        "two fires after the resume",
        || {
            detail = futures::executor::block_on(show());
            let fired = enqueued_fires(id, &detail);
            fired.iter().filter(|t| **t > resumed_at).count() >= 2
        },
    )
    .await;
    let fired = enqueued_fires(id, &detail);
    assert!(
        !fired.iter().any(|t| *t > in_flight && *t <= resumed_at),
        "nothing fired while paused ({in_flight} to {resumed_at}): {fired:?}"
    );
    assert_eq!(detail["schedule"]["paused"], false);
    assert_eq!(
        detail["upcoming"].as_array().map(Vec::len),
        Some(5),
        "{detail}"
    );

    // Deleted: its chain ends (but the tick in flight at it, if any).
    let deleted = http(addr, "DELETE", &path, None, None).await;
    assert_eq!((deleted.status, deleted.body.as_str()), (204, ""));
    let deleted_at = Utc::now();
    assert_eq!(http(addr, "GET", &path, None, None).await.status, 404);
    assert!(schedule_ids(addr, "", None).await.is_empty());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let runs = runs_of(&log, id);
    assert!(
        !runs.iter().any(|t| *t > in_flight && *t <= resumed_at),
        "no run while paused: {runs:?}"
    );
    assert!(
        !runs.iter().any(|t| *t > deleted_at + TimeDelta::seconds(1)),
        "no run after the delete at {deleted_at}: {runs:?}"
    );
    assert_eq!(
        http(addr, "GET", &path, None, None).await.status,
        404,
        "not recreated by a late tick"
    );
    node.shutdown().await.expect("clean shutdown");
}

/// Per-key limits set, changed and removed at run time (issue 33): an override of a key no
/// setting limits takes effect on the node within its next read of the overrides, its held
/// tasks show per key in `GET /api/v1/limits`, a change lets more through, and once it is
/// removed the key is not limited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_limits_are_set_changed_and_removed_at_run_time_and_held_tasks_show_per_key() {
    let env = TestEnv::new("it_admin_limits", 2).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let settings = env.settings(TestEnv::quick_scheduling());
    let node = env
        .start_sole_node(settings, Recorder::new("n1", &log, Duration::from_secs(1)))
        .await;
    let addr = node.admin_address().expect("admin API enabled");
    let limits = || async move {
        let listed = http(addr, "GET", "/api/v1/limits", None, None).await;
        assert_eq!(listed.status, 200, "{}", listed.body);
        listed.json()
    };
    let put = |body: &'static str| http(addr, "PUT", "/api/v1/limits", None, Some(body));
    let scheduler = env.scheduler(Duration::from_secs(30));
    let mut round = 0;
    // Six tasks of tenant-x, each its own orderingId, due together: the most that ran at once.
    let mut six_at_once = || {
        round += 1;
        let at = Utc::now() + TimeDelta::milliseconds(500);
        let tasks: Vec<Task> = (0..6)
            .map(|i| task(&format!("x{round}-{i}"), at, "1").with_limit_key("tenant-x"))
            .collect();
        let (scheduler, log) = (&scheduler, &log);
        async move {
            for t in &tasks {
                scheduler.schedule_task(t.clone()).await.expect("scheduled");
            }
            let ran = |log: &Arc<Mutex<Vec<it_tests::engine::Execution>>>| {
                let done = by_task(log);
                tasks.iter().all(|t| done.contains_key(&t.key()))
            };
            wait_until(Duration::from_secs(60), "the six tasks to run", || ran(log)).await;
            let runs = it_tests::engine::executions(log);
            it_tests::engine::most_at_once(&runs, |_| true, &tasks)
        }
    };
    assert_eq!(
        limits().await,
        serde_json::json!({"overrides": [], "keys": []})
    );
    let refused = put(r#"{"limitKey":"tenant-x","concurrency":0}"#).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("concurrency must be 1 to"),
        "{}",
        refused.body
    );
    let refused = put(r#"{"concurrency":1}"#).await;
    assert_eq!(refused.status, 400, "{}", refused.body);

    // Set: one at a time, and the held tasks show per key meanwhile.
    let set = put(r#"{"limitKey":"tenant-x","concurrency":1}"#).await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(set.json()["concurrency"], 1);
    let listed = limits().await;
    assert_eq!(listed["overrides"][0]["limitKey"], "tenant-x", "{listed}");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let running = six_at_once();
    let mut seen_held = serde_json::Value::Null;
    let mut dashboard = String::new();
    let watch = async {
        for _ in 0..100 {
            let listed = limits().await;
            let key = &listed["keys"][0];
            // Once its first permit came (before that, all six wait for the key's first
            // transaction): one running on its one permit, the others held.
            let running = key["running"] == 1 && key["permits"] == 1;
            if running && key["held"].as_u64().is_some_and(|held| held > 1) {
                seen_held = key.clone();
                dashboard = http(addr, "GET", "/dashboard/limits", None, None)
                    .await
                    .body;
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (most, ()) = tokio::join!(running, watch);
    assert_eq!(most, 1, "at most one of tenant-x at once");
    assert_eq!(seen_held["limitKey"], "tenant-x", "{seen_held}");
    // The dashboard shows the held tasks per key too.
    assert!(
        dashboard.contains("<tr class=\"key\" data-key=\"tenant-x\">")
            && !dashboard.contains("<td data-field=\"held\">0</td>"),
        "{dashboard}"
    );
    assert_eq!(
        (&seen_held["running"], &seen_held["permits"]),
        (&serde_json::json!(1), &serde_json::json!(1)),
        "{seen_held}"
    );

    // Changed: three at a time.
    let set = put(r#"{"limitKey":"tenant-x","concurrency":3}"#).await;
    assert_eq!(set.status, 200, "{}", set.body);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(
        six_at_once().await,
        3,
        "at most three of tenant-x at once, and three did run"
    );

    // Removed: no limit.
    let removed = http(
        addr,
        "DELETE",
        "/api/v1/limits?limitKey=tenant-x",
        None,
        None,
    )
    .await;
    assert_eq!(removed.status, 204, "{}", removed.body);
    assert_eq!(limits().await["overrides"], serde_json::json!([]));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(six_at_once().await, 6, "all six of tenant-x at once");
    node.shutdown().await.expect("clean shutdown");
}
