//! The dashboard in headless Chromium (Debian's, through chromedriver; `dev/browser` installs
//! them) against a node on the real stack, behind a token: the login form; the overview's
//! figures equal the API's read at the same moment; the dead letters' page lists what the API
//! lists, and its redrive buttons (one letter, then all of a type) run the tasks again; a task
//! looked up through the form shows the API's status and attempts; the job, the group and the
//! schedule show; a key's limit override is set and removed through the Limits page; ticked dead
//! letters are purged once confirmed; the pending list shows each task's state and the retrying
//! set, finds a task by orderingId, which is then cancelled from its page; a suspension is
//! resumed by its button (its task runs); a schedule is paused and resumed. Every page is saved
//! under `target/dashboard-screenshots/`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use it_tests::engine::{http, metric_sum, wait_until, TestEnv};
use it_tests::webdriver::{require_browser, Driver, Session};
use scheduler_client::{GroupMember, Task};
use scheduler_core::{JobSpec, TaskContext, TaskError, TaskHandler};
use serde_json::{json, Value};

const TOKEN: &str = "d4shb0ard-t0ken";
const JOB: &str = "dash-job-1";

/// Runs every task, but refuses a `flaky` task as invalid on its first call (a dead letter),
/// starts a job of 4 buckets for a `coordinator`, and has each `bucket` report 25 items.
#[derive(Clone, Default)]
struct Work {
    calls: Arc<Mutex<HashMap<(String, String), usize>>>,
}

impl Work {
    fn calls_of(&self, ordering_id: &str, uniqueness_key: &str) -> usize {
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (ordering_id.to_string(), uniqueness_key.to_string());
        calls.get(&key).copied().unwrap_or(0)
    }
}

impl TaskHandler for Work {
    async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        let before = {
            let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
            let key = (task.ordering_id.clone(), task.uniqueness_key.clone());
            let n = calls.entry(key).or_default();
            *n += 1;
            *n - 1
        };
        match task.task_type.as_str() {
            "flaky" if before == 0 => Err(TaskError::invalid("refused on its first call <b>")),
            // Waits an hour for its next attempt: in the retrying set for the whole test.
            "retrier" => Err(TaskError::retry_after(
                "upstream <busy>",
                Duration::from_secs(3600),
            )),
            "coordinator" => {
                let bucket = json!({"items": 25})
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                let job = JobSpec {
                    id: JOB.into(),
                    bucket_type: "bucket".into(),
                    buckets: vec![bucket; 4],
                };
                ctx.start_job(job)
                    .map_err(|e| TaskError::invalid(e.to_string()))
            }
            "bucket" => {
                ctx.report_progress(25)
                    .await
                    .map_err(|e| TaskError::retry(e.to_string()))?;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

fn screenshots() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    target
        .parent()
        .map(|t| t.join("dashboard-screenshots"))
        .unwrap_or_else(|| target.join("dashboard-screenshots"))
}

fn task_query(o: &str, t: &str, u: &str) -> String {
    format!("orderingId={o}&scheduledTime={t}&uniquenessKey={u}")
}

/// What the API answers now, with the token.
async fn api(addr: std::net::SocketAddr, path: &str) -> Value {
    let answer = http(addr, "GET", path, Some(TOKEN), None).await;
    assert_eq!(answer.status, 200, "GET {path}: {}", answer.body);
    answer.json()
}

/// The API's dead letters (not redriven).
async fn dead_letters(addr: std::net::SocketAddr) -> Vec<Value> {
    let listed = api(addr, "/api/v1/dead-letters?limit=1000").await;
    listed["deadLetters"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The overview's figures as the page shows them: the cards, and each owned partition's row.
async fn overview_figures(browser: &Session) -> Value {
    let mut partitions = Vec::new();
    for row in browser.find_all("#partitions tr.owned").await {
        let partition = browser.attribute(&row, "data-partition").await;
        partitions.push(partition.unwrap_or_default());
    }
    let mut rows = Vec::new();
    for p in &partitions {
        let cell = |field: &str| {
            format!("#partitions tr[data-partition=\"{p}\"] td[data-field=\"{field}\"]")
        };
        rows.push(json!({
            "partition": p.parse::<i64>().unwrap_or(-1),
            "tasksScheduled": browser.text_of(&cell("tasksScheduled")).await,
            "tasksExecuting": browser.text_of(&cell("tasksExecuting")).await,
            "kafkaLag": browser.text_of(&cell("kafkaLag")).await,
            "staleTasks": browser.text_of(&cell("staleTasks")).await,
        }));
    }
    // Every partition's owner, owned here or not.
    let mut owners = Vec::new();
    for row in browser.find_all("#partitions tbody tr").await {
        let partition = browser.attribute(&row, "data-partition").await;
        let partition = partition.unwrap_or_default();
        let cell =
            format!("#partitions tr[data-partition=\"{partition}\"] td[data-field=\"owner\"]");
        owners.push(json!([partition, browser.text_of(&cell).await]));
    }
    json!({
        "nodeId": browser.text_of("#node-id").await,
        "owners": owners,
        "owned": browser.text_of("#owned-count").await,
        "partitionCount": browser.text_of("#partition-count").await,
        "deadLetters": browser.text_of("#dead-letter-count").await,
        "partitions": rows,
    })
}

/// The same figures from the API (status, dead letters) and `/metrics` (stale tasks).
async fn api_figures(addr: std::net::SocketAddr) -> Value {
    let status = api(addr, "/api/v1/status").await;
    let metrics = http(addr, "GET", "/metrics", Some(TOKEN), None).await.body;
    let rows: Vec<Value> = (status["partitions"].as_array().into_iter().flatten())
        .map(|p| {
            let partition = p["partition"].as_i64().unwrap_or(-1);
            let label = partition.to_string();
            let stale = metric_sum(&metrics, "scheduler_stale_tasks", &[("partition", &label)]);
            let lag = p["kafkaLag"]
                .as_i64()
                .map_or("—".to_string(), |l| l.to_string());
            json!({
                "partition": partition,
                "tasksScheduled": p["tasksScheduled"].to_string(),
                "tasksExecuting": p["tasksExecuting"].to_string(),
                "kafkaLag": lag,
                "staleTasks": (stale as i64).to_string(),
            })
        })
        .collect();
    let claims = api(addr, "/api/v1/partitions").await;
    let owners: Vec<Value> = (claims["partitions"].as_array().into_iter().flatten())
        .map(|p| {
            let owner = p["owner"].as_str().unwrap_or("—");
            json!([p["partition"].to_string(), owner])
        })
        .collect();
    json!({
        "nodeId": status["nodeId"],
        "owners": owners,
        "owned": status["ownedPartitions"].as_array().map_or(0, Vec::len).to_string(),
        "partitionCount": status["partitionCount"].to_string(),
        "deadLetters": dead_letters(addr).await.len().to_string(),
        "partitions": rows,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_apis_figures_looks_tasks_up_and_redrives_by_clicking() {
    let started = Instant::now();
    require_browser();
    let env = TestEnv::new("it_dashboard", 4).await;
    let work = Work::default();
    let mut settings = env.settings(TestEnv::quick_scheduling());
    settings.admin.token = Some(TOKEN.into());
    let node = env.start_sole_node(settings, work.clone()).await;
    let addr = node.admin_address().expect("admin API enabled");
    let base = format!("http://{addr}");

    // The work: tasks that run, three that become dead letters, a group of three, a job of four
    // buckets, one task due in an hour, and a recurring schedule.
    let scheduler = env.scheduler(Duration::from_secs(10));
    let now = Utc::now();
    let mut tasks: Vec<Task> = (1..=6)
        .map(|i| Task::new(format!("dash-ok-{i}"), now, "run", Default::default()))
        .collect();
    tasks.extend((1..=3).map(|i| {
        Task::new(format!("dash-flaky-{i}"), now, "charge", Default::default()).of_type("flaky")
    }));
    tasks.extend((1..=3).map(|i| {
        Task::new(format!("dash-member-{i}"), now, "m", Default::default())
            .of_type("member")
            .in_group(GroupMember::new("dash-group", i).of(3))
    }));
    tasks.push(Task::new("dash-job", now, "run-1", Default::default()).of_type("coordinator"));
    let later = Task::new(
        "dash-later",
        now + TimeDelta::hours(1),
        "1",
        Default::default(),
    );
    tasks.push(later.clone());
    // One task held by a suspension of its orderingId (suspended before it is enqueued), and
    // one that waits for its retry.
    let suspend = json!({"kind": "orderingId", "target": "dash-held", "reason": "maintenance"});
    let suspended = http(
        addr,
        "POST",
        "/api/v1/suspensions",
        Some(TOKEN),
        Some(&suspend.to_string()),
    )
    .await;
    assert_eq!(suspended.status, 201, "{}", suspended.body);
    tokio::time::sleep(Duration::from_secs(3)).await; // every node reads suspensions every 2 s
    tasks.push(Task::new("dash-held", now, "1", Default::default()));
    tasks.push(Task::new("dash-retry", now, "1", Default::default()).of_type("retrier"));
    for task in tasks {
        scheduler.schedule_task(task).await.expect("scheduled");
    }
    let schedule = json!({"id": "dash-tick", "every": "30s", "taskType": "tick"}).to_string();
    let created = http(
        addr,
        "POST",
        "/api/v1/schedules",
        Some(TOKEN),
        Some(&schedule),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let letters = dead_letters(addr).await.len();
        let job = http(
            addr,
            "GET",
            &format!("/api/v1/jobs/{JOB}"),
            Some(TOKEN),
            None,
        )
        .await;
        let done = job.status == 200 && job.json()["state"] == "completed";
        if letters == 3 && done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "3 dead letters ({letters}) and the job done ({})",
            job.body
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let prepared = started.elapsed();

    // The browser, and the login: any page leads to the login form first.
    let driver = Driver::start().await;
    let browser = driver.session().await;
    let shots = screenshots();
    let _ = std::fs::remove_dir_all(&shots);
    browser.navigate(&format!("{base}/dashboard")).await;
    assert!(
        browser.url().await.contains("/dashboard/login?next="),
        "{}",
        browser.url().await
    );
    let token_field = browser.find("#token").await;
    browser.type_into(&token_field, "wrong").await;
    browser.click(&browser.find("#log-in").await).await;
    assert!(browser
        .text_of("#error")
        .await
        .contains("not this node's token"));
    let token_field = browser.find("#token").await;
    browser.type_into(&token_field, TOKEN).await;
    browser.screenshot(&shots.join("01-login.png")).await;
    browser.click(&browser.find("#log-in").await).await;
    browser.wait_for_url(&format!("{base}/dashboard")).await;

    // The overview's figures are the API's, read just before and just after the page (equal
    // reads on both sides: the page saw that moment too).
    let mut compared = 0;
    for attempt in 0.. {
        let before = api_figures(addr).await;
        browser.navigate(&format!("{base}/dashboard")).await;
        let shown = overview_figures(&browser).await;
        let after = api_figures(addr).await;
        if before == after {
            assert_eq!(shown, before, "the overview shows the API's figures");
            compared += 1;
            if compared == 2 {
                break;
            }
        }
        assert!(
            attempt < 40,
            "the API's figures never held still: {before} / {after}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let shown = overview_figures(&browser).await;
    assert_eq!(shown["owned"], "4");
    let node_id = shown["nodeId"].as_str().unwrap_or_default();
    let owners: Vec<Value> = (0..4).map(|p| json!([p.to_string(), node_id])).collect();
    assert_eq!(
        shown["owners"],
        json!(owners),
        "the sole node owns every partition"
    );
    assert_eq!(shown["deadLetters"], "3");
    // The charts have samples by now (one every 5 s since the node started).
    let mut lines = 0;
    for _ in 0..40 {
        browser.navigate(&format!("{base}/dashboard")).await;
        lines = browser.find_all("#throughput-chart polyline").await.len();
        if lines > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(lines > 0, "the throughput chart draws its samples");
    assert!(browser
        .text_of("#completed-rate")
        .await
        .parse::<f64>()
        .is_ok());
    browser.screenshot(&shots.join("02-overview.png")).await;

    // Dead letters: the API's, each with its button; one redriven by clicking runs again.
    browser
        .navigate(&format!("{base}/dashboard/dead-letters"))
        .await;
    let listed = dead_letters(addr).await;
    assert_eq!(browser.find_all("tr.dead-letter").await.len(), listed.len());
    assert_eq!(browser.text_of("#dead-letter-count").await, "3");
    let first = &listed[0];
    let (o, t, u) = (
        first["orderingId"].as_str().unwrap_or_default().to_string(),
        first["scheduledTime"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        first["uniquenessKey"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    );
    assert!(browser
        .text_of(&format!("tr.dead-letter[data-ordering-id=\"{o}\"]"))
        .await
        .contains("refused on its first call <b>"));
    browser.screenshot(&shots.join("03-dead-letters.png")).await;
    let button = format!("tr.dead-letter[data-ordering-id=\"{o}\"] button.redrive");
    browser.click(&browser.find(&button).await).await;
    assert_eq!(browser.text_of("#redriven").await, "1");
    let new_time = browser
        .attribute(&browser.find("#new-task").await, "data-scheduled-time")
        .await
        .expect("the new task's time");
    assert_ne!(new_time, t, "a new task, due now");
    let path = format!("/api/v1/task?{}", task_query(&o, &new_time, &u));
    let mut redriven = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(30);
    while redriven["status"] != "completed" {
        assert!(
            Instant::now() < deadline,
            "the redriven task ran: {redriven}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let answer = http(addr, "GET", &path, Some(TOKEN), None).await;
        redriven = if answer.status == 200 {
            answer.json()
        } else {
            Value::Null
        };
    }
    assert_eq!(work.calls_of(&o, &u), 2, "called again after the redrive");
    assert_eq!(dead_letters(addr).await.len(), 2);
    browser
        .screenshot(&shots.join("04-dead-letter-redriven.png"))
        .await;
    // Its new task, by following the notice's link.
    browser.click(&browser.find("#new-task").await).await;
    assert_eq!(browser.text_of("#task-status").await, "completed");

    // A task looked up through the form: the first dead letter's original, as the API has it.
    browser.navigate(&format!("{base}/dashboard/task")).await;
    for (field, value) in [
        ("#ordering-id", &o),
        ("#uniqueness-key", &u),
        ("#scheduled-time", &t),
    ] {
        let input = browser.find(field).await;
        browser.type_into(&input, value).await;
    }
    browser.click(&browser.find("#look-up").await).await;
    let original = api(addr, &format!("/api/v1/task?{}", task_query(&o, &t, &u))).await;
    assert_eq!(
        browser.text_of("#task-status").await,
        original["status"].as_str().unwrap_or("?")
    );
    assert_eq!(original["status"], "dropped");
    assert_eq!(
        browser.text_of("#task-attempts").await,
        original["attempts"].to_string()
    );
    let history = original["history"].as_array().cloned().unwrap_or_default();
    let rows = browser.find_all("#attempt-history tr.attempt").await;
    assert_eq!(rows.len(), history.len());
    assert!(!history.is_empty());
    for (row, attempt) in rows.iter().zip(&history) {
        let text = browser.text(row).await;
        assert!(
            text.contains(attempt["outcome"].as_str().unwrap_or("?")),
            "{text}"
        );
        assert!(text.starts_with(&attempt["attempt"].to_string()), "{text}");
    }
    browser.screenshot(&shots.join("05-task-lookup.png")).await;

    // Redrive all of the type: the other two run again too.
    browser
        .navigate(&format!("{base}/dashboard/dead-letters"))
        .await;
    // "Redrive all" asks for its checkbox first: without it the browser does not post.
    let redrive_type = "tr[data-task-type=\"flaky\"] button.redrive-type";
    browser.click(&browser.find(redrive_type).await).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        browser.find_all("#redriven").await.is_empty(),
        "posted unconfirmed"
    );
    assert_eq!(dead_letters(addr).await.len(), 2);
    browser
        .click(
            &browser
                .find("tr[data-task-type=\"flaky\"] input.confirm")
                .await,
        )
        .await;
    browser.click(&browser.find(redrive_type).await).await;
    assert_eq!(browser.text_of("#redriven").await, "2");
    assert!(dead_letters(addr).await.is_empty());
    let flaky: Vec<String> = (1..=3).map(|i| format!("dash-flaky-{i}")).collect();
    wait_until(
        Duration::from_secs(30),
        "every flaky task called twice",
        || flaky.iter().all(|o| work.calls_of(o, "charge") == 2),
    )
    .await;
    browser.find("#no-dead-letters").await;

    // The letters already redriven: two ticked and purged, once confirmed.
    browser.click(&browser.find("#redriven-view").await).await;
    browser.find("#redriven-letters").await;
    assert_eq!(browser.find_all("tr.dead-letter").await.len(), 3);
    browser
        .screenshot(&shots.join("10-dead-letters-redriven.png"))
        .await;
    let boxes = browser.find_all("tr.dead-letter input.select").await;
    for tick in &boxes[..2] {
        browser.click(tick).await;
    }
    browser.click(&browser.find("#purge-selected").await).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        browser.find_all("#purged").await.is_empty(),
        "purged unconfirmed"
    );
    browser.click(&browser.find("#confirm-purge").await).await;
    browser.click(&browser.find("#purge-selected").await).await;
    assert_eq!(browser.text_of("#purged").await, "2");
    let left = api(addr, "/api/v1/dead-letters?includeRedriven=true").await;
    assert_eq!(
        left["deadLetters"].as_array().map(Vec::len),
        Some(1),
        "{left}"
    );
    browser
        .screenshot(&shots.join("11-dead-letters-purged.png"))
        .await;

    // The pending list: the held task, the retrying one and the one due in an hour, each in
    // its state; the retrying set with its next attempt.
    browser.navigate(&format!("{base}/dashboard/pending")).await;
    let state_of = |o: &str| format!("tr.pending[data-ordering-id=\"{o}\"]");
    for (o, state) in [
        ("dash-held", "suspended"),
        ("dash-retry", "retrying"),
        ("dash-later", "waiting"),
    ] {
        let row = browser.find(&state_of(o)).await;
        assert_eq!(
            browser.attribute(&row, "data-state").await.as_deref(),
            Some(state),
            "{o}"
        );
    }
    let retrying = browser
        .text_of("tr.retrying[data-ordering-id=\"dash-retry\"]")
        .await;
    assert!(
        retrying.contains("upstream <busy>") && retrying.contains(" min)"),
        "{retrying}"
    );
    browser.screenshot(&shots.join("12-pending.png")).await;
    // Searched by orderingId alone.
    let field = browser.find("#ordering-id").await;
    browser.type_into(&field, "dash-later").await;
    browser.click(&browser.find("#filter").await).await;
    browser.find("#pending").await;
    let rows = browser.find_all("tr.pending").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        browser
            .attribute(&rows[0], "data-ordering-id")
            .await
            .as_deref(),
        Some("dash-later")
    );
    browser
        .screenshot(&shots.join("13-pending-by-ordering-id.png"))
        .await;

    // Cancelled from its page, once confirmed: it never runs.
    browser.click(&browser.find("tr.pending a").await).await;
    assert_eq!(browser.text_of("#task-status").await, "pending");
    browser.find("#no-move").await;
    browser.click(&browser.find("#cancel").await).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        browser.find_all("#notice").await.is_empty(),
        "cancelled unconfirmed"
    );
    browser.click(&browser.find("#confirm-cancel").await).await;
    browser.click(&browser.find("#cancel").await).await;
    browser.find("#notice").await;
    let page = browser.url().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while browser.text_of("#task-status").await != "cancelled" {
        assert!(Instant::now() < deadline, "the cancel was applied");
        tokio::time::sleep(Duration::from_millis(300)).await;
        browser.navigate(&page).await;
    }
    browser
        .screenshot(&shots.join("14-task-cancelled.png"))
        .await;

    // Suspensions: the held task runs once its suspension is resumed by its button.
    browser
        .navigate(&format!("{base}/dashboard/suspensions"))
        .await;
    let row = "tr.suspension[data-kind=\"orderingId\"][data-target=\"dash-held\"]";
    assert!(browser.text_of(row).await.contains("maintenance"));
    assert_eq!(work.calls_of("dash-held", "1"), 0, "held while suspended");
    browser.screenshot(&shots.join("15-suspensions.png")).await;
    browser
        .click(&browser.find(&format!("{row} button.resume")).await)
        .await;
    browser.find("#no-suspensions").await;
    wait_until(Duration::from_secs(30), "the resumed task ran", || {
        work.calls_of("dash-held", "1") == 1
    })
    .await;

    // The job and the group.
    browser
        .navigate(&format!("{base}/dashboard/groups-jobs"))
        .await;
    let job = api(addr, &format!("/api/v1/jobs/{JOB}")).await;
    let cell = |field: &str| format!("tr.job[data-job=\"{JOB}\"] td[data-field=\"{field}\"]");
    assert_eq!(browser.text_of(&cell("state")).await, "completed");
    for field in ["buckets", "completed", "failed", "items"] {
        assert_eq!(
            browser.text_of(&cell(field)).await,
            job[field].to_string(),
            "{field}"
        );
    }
    let group_type = browser.find("#group-type").await;
    browser.type_into(&group_type, "member").await;
    let group_id = browser.find("#group-id").await;
    browser.type_into(&group_id, "dash-group").await;
    browser.click(&browser.find("#show-group").await).await;
    assert_eq!(browser.text_of("#group-finished").await, "3");
    assert_eq!(browser.text_of("#group-total").await, "3");
    browser.screenshot(&shots.join("06-groups-jobs.png")).await;

    // The schedule, and its detail by clicking it.
    browser
        .navigate(&format!("{base}/dashboard/schedules"))
        .await;
    let listed = api(addr, "/api/v1/schedules").await;
    assert_eq!(listed["schedules"].as_array().map(Vec::len), Some(1));
    let row = "tr.schedule[data-schedule=\"dash-tick\"]";
    assert_eq!(
        browser
            .text_of(&format!("{row} td[data-field=\"state\"]"))
            .await,
        "active"
    );
    browser
        .click(&browser.find(&format!("{row} a")).await)
        .await;
    browser.find("#upcoming li").await;
    browser.screenshot(&shots.join("07-schedules.png")).await;
    // Paused, then resumed, by its button.
    browser
        .click(&browser.find(&format!("{row} button.pause")).await)
        .await;
    browser.find("#notice").await;
    let state = format!("{row} td[data-field=\"state\"]");
    assert_eq!(browser.text_of(&state).await, "paused");
    let listed = api(addr, "/api/v1/schedules").await;
    assert_eq!(listed["schedules"][0]["paused"], true, "{listed}");
    browser
        .screenshot(&shots.join("16-schedule-paused.png"))
        .await;
    browser
        .click(&browser.find(&format!("{row} button.resume")).await)
        .await;
    browser.find("#notice").await;
    assert_eq!(browser.text_of(&state).await, "active");

    // Per-key limits: a key's override set through the form shows in the list and the API,
    // and its remove button takes it away.
    browser.navigate(&format!("{base}/dashboard/limits")).await;
    browser.find("#no-overrides").await;
    let field = |name: &str| format!("#set-limit input[name=\"{name}\"]");
    browser
        .type_into(&browser.find(&field("limitKey")).await, "tenant-dash")
        .await;
    browser
        .type_into(&browser.find(&field("concurrency")).await, "2")
        .await;
    browser
        .type_into(&browser.find(&field("weight")).await, "3")
        .await;
    browser
        .click(&browser.find("#set-limit button").await)
        .await;
    let row = "tr.override[data-key=\"tenant-dash\"]";
    assert_eq!(
        browser
            .text_of(&format!("{row} td[data-field=\"concurrency\"]"))
            .await,
        "2"
    );
    let listed = api(addr, "/api/v1/limits").await;
    assert_eq!(listed["overrides"][0]["weight"], 3, "{listed}");
    browser.screenshot(&shots.join("08-limits.png")).await;
    browser
        .click(&browser.find(&format!("{row} button")).await)
        .await;
    browser.find("#no-overrides").await;
    assert_eq!(api(addr, "/api/v1/limits").await["overrides"], json!([]));

    // Remote workers: one that polled shows on the Workers page.
    let poll = json!({"worker": "dash-worker", "types": ["resize"], "capacity": 2, "waitMs": 0});
    let polled = http(
        addr,
        "POST",
        "/api/v1/workers/poll",
        Some(TOKEN),
        Some(&poll.to_string()),
    )
    .await;
    assert_eq!(polled.status, 200, "{}", polled.body);
    browser.navigate(&format!("{base}/dashboard/workers")).await;
    browser.find("tr.worker[data-worker=\"dash-worker\"]").await;
    browser.find("#no-claims").await;
    browser.screenshot(&shots.join("09-workers.png")).await;

    drop(browser);
    drop(driver);
    node.shutdown().await.expect("clean shutdown");
    println!(
        "dashboard it-test: work prepared in {:.1} s, browser part {:.1} s; screenshots in {}",
        prepared.as_secs_f64(),
        (started.elapsed() - prepared).as_secs_f64(),
        shots.display()
    );
}
