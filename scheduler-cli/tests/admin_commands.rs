//! `get`, `list`, `cancel`, `reschedule`, `status`, `dead-letters` and `limits` against a canned admin API
//! on loopback:
//! what they ask, what they print (tables and `--json`), and the exit code each kind of answer
//! gives. The it-tests run the same commands against a real node; these pin the output to the
//! character.

mod common;

use common::{body, canned_api, query, scheduler};

const TASK: &str = r#"{"orderingId":"o 1","scheduledTime":"2026-11-22T09:00:00.000Z","uniquenessKey":"u&1","partition":2,"status":"failed","attempts":2,"lastError":"boom","updatedAt":"2026-11-22T09:00:03.000Z","taskData":null,"history":[{"attempt":2,"startedAt":"2026-11-22T09:00:02.000Z","finishedAt":"2026-11-22T09:00:03.000Z","durationMs":1000,"outcome":"failed","error":"boom"},{"attempt":1,"startedAt":"2026-11-22T09:00:00.000Z","finishedAt":"2026-11-22T09:00:01.000Z","durationMs":1000,"outcome":"failed","error":null}]}"#;

#[test]
fn get_asks_for_the_key_as_typed_and_prints_the_task_and_its_history() {
    let (url, received) = canned_api(|_| (200, TASK.to_string()));
    let key = [
        "--ordering-id",
        "o 1",
        "--at",
        "2026-11-22T10:00:00+01:00",
        "--unique",
        "u&1",
    ];
    let mut args = vec!["get", "--admin", url.as_str(), "--token", "t0ken"];
    args.extend(key);
    let (code, out) = scheduler(&args);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "task        o 1/2026-11-22T09:00:00.000Z/u&1\n\
         partition   2\n\
         status      failed\n\
         attempts    2\n\
         last error  boom\n\
         updated at  2026-11-22T09:00:03.000Z\n\
         data        -\n\
         \n\
         ATTEMPT  STARTED                   FINISHED                  OUTCOME    ERROR\n\
         2        2026-11-22T09:00:02.000Z  2026-11-22T09:00:03.000Z  failed     boom\n\
         1        2026-11-22T09:00:00.000Z  2026-11-22T09:00:01.000Z  failed     -\n"
    );
    let request = received.lock().expect("log")[0].clone();
    assert!(request.line.starts_with("GET /api/v1/task?"), "{request:?}");
    assert_eq!(
        query(&request.line),
        [
            ("orderingId".to_string(), "o 1".to_string()),
            (
                "scheduledTime".to_string(),
                "2026-11-22T09:00:00.000Z".to_string()
            ),
            ("uniquenessKey".to_string(), "u&1".to_string()),
        ]
    );
    assert!(
        request
            .headers
            .iter()
            .any(|h| h == "authorization: Bearer t0ken" || h == "Authorization: Bearer t0ken"),
        "{request:?}"
    );

    let mut args = vec!["get", "--json", "--admin", url.as_str()];
    args.extend(key);
    let (code, out) = scheduler(&args);
    assert_eq!(code, 0, "{out}");
    // The answer's keys sorted, as the command has always printed it.
    let sorted: serde_json::Value = serde_json::from_str(TASK).expect("JSON");
    assert_eq!(out, format!("{sorted}\n"));
    assert!(out
        .starts_with(r#"{"attempts":2,"history":[{"attempt":2,"durationMs":1000,"error":"boom","#));
}

#[test]
fn list_follows_the_pages_with_all_and_prints_one_row_per_task() {
    let page = |n: u32, next: &str| {
        format!(
            r#"{{"tasks":[{{"orderingId":"o{n}","scheduledTime":"2026-11-22T09:00:0{n}.000Z","uniquenessKey":"u","partition":{n},"taskType":"email","state":"waiting","retry":null,"suspendedBy":null,"taskData":{{"n":{n}}}}}],"next":{next}}}"#
        )
    };
    let first = page(
        1,
        r#"{"from":"2026-11-22T09:00:01.000Z","fromOrderingId":"o1","fromUniquenessKey":"u"}"#,
    );
    let last = page(2, "null");
    let (url, received) = canned_api(move |line| {
        if line.contains("fromOrderingId") {
            (200, last.clone())
        } else {
            (200, first.clone())
        }
    });
    let window = [
        "--from",
        "2026-11-22T09:00:00Z",
        "--to",
        "2026-11-22T10:00:00Z",
        "--limit",
        "1",
    ];
    let mut args = vec!["list", "--admin", url.as_str(), "--all"];
    args.extend(window);
    let (code, out) = scheduler(&args);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "SCHEDULED                 ORDERING ID              UNIQUENESS KEY           TYPE             STATE      PARTITION  DATA\n\
         2026-11-22T09:00:01.000Z  o1                       u                        email            waiting            1  {\"n\":1}\n\
         2026-11-22T09:00:02.000Z  o2                       u                        email            waiting            2  {\"n\":2}\n"
    );
    let requests: Vec<_> = received
        .lock()
        .expect("log")
        .iter()
        .map(|r| query(&r.line))
        .collect();
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    assert_eq!(
        requests,
        [
            vec![
                pair("from", "2026-11-22T09:00:00.000Z"),
                pair("to", "2026-11-22T10:00:00.000Z"),
                pair("limit", "1"),
            ],
            vec![
                pair("from", "2026-11-22T09:00:01.000Z"),
                pair("to", "2026-11-22T10:00:00.000Z"),
                pair("limit", "1"),
                pair("fromOrderingId", "o1"),
                pair("fromUniquenessKey", "u"),
            ],
        ]
    );

    // One page, with where the next one starts.
    let mut args = vec!["list", "--admin", url.as_str()];
    args.extend(window);
    let (code, out) = scheduler(&args);
    assert_eq!(code, 0, "{out}");
    let hint = "more: --from 2026-11-22T09:00:01.000Z --from-ordering-id o1 --from-uniqueness-key u (or --all)";
    assert!(out.ends_with(&format!("{hint}\n")), "{out}");
    // The hint's flags are the next page's command.
    let flags = hint["more: ".len()..hint.len() - " (or --all)".len()].split(' ');
    let mut args = vec![
        "list",
        "--admin",
        url.as_str(),
        "--to",
        "2026-11-22T10:00:00Z",
    ];
    args.extend(flags);
    args.extend(["--limit", "1"]);
    let (code, out) = scheduler(&args);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("o2") && !out.contains("more:"), "{out}");
    let mut args = vec!["list", "--json", "--admin", url.as_str()];
    args.extend(window);
    let (code, out) = scheduler(&args);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "{\"next\":{\"from\":\"2026-11-22T09:00:01.000Z\",\"fromOrderingId\":\"o1\",\"fromUniquenessKey\":\"u\"},\
         \"tasks\":[{\"orderingId\":\"o1\",\"partition\":1,\"retry\":null,\"scheduledTime\":\"2026-11-22T09:00:01.000Z\",\
         \"state\":\"waiting\",\"suspendedBy\":null,\"taskData\":{\"n\":1},\"taskType\":\"email\",\"uniquenessKey\":\"u\"}]}\n"
    );

    // The filters go to the node as the API's parameters.
    let mut args = vec![
        "list",
        "--admin",
        url.as_str(),
        "--type",
        "email",
        "--state",
        "retrying",
        "--ordering-id",
        "o 1",
        "--include-internal",
    ];
    args.extend(window);
    let (code, out) = scheduler(&args);
    assert_eq!(code, 0, "{out}");
    let sent = (received.lock().expect("log").last()).map(|r| query(&r.line));
    let sent = sent.unwrap_or_default();
    for expected in [
        pair("taskType", "email"),
        pair("orderingId", "o 1"),
        pair("state", "retrying"),
        pair("includeInternal", "true"),
    ] {
        assert!(sent.contains(&expected), "{expected:?} in {sent:?}");
    }
}

#[test]
fn cancel_posts_the_key_and_prints_the_answer() {
    let answer = r#"{"note":"It will not run.","partition":3,"result":"cancellation enqueued","task":"o/2026-11-22T09:00:00.000Z/u"}"#;
    let (url, received) = canned_api(move |_| (202, answer.to_string()));
    let key = [
        "--ordering-id",
        "o",
        "--at",
        "2026-11-22T09:00:00Z",
        "--unique",
        "u",
    ];
    let mut args = vec!["cancel", "--admin", url.as_str()];
    args.extend(key);
    let (code, out) = scheduler(&args);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "cancellation enqueued: o/2026-11-22T09:00:00.000Z/u\nIt will not run.\n"
    );
    let request = received.lock().expect("log")[0].clone();
    assert_eq!(request.line, "POST /api/v1/task/cancel HTTP/1.1");
    let body: serde_json::Value = serde_json::from_str(&request.body).expect("a JSON body");
    assert_eq!(
        body,
        serde_json::json!({
            "orderingId": "o",
            "scheduledTime": "2026-11-22T09:00:00.000Z",
            "uniquenessKey": "u",
        })
    );
    let mut args = vec!["cancel", "--json", "--admin", url.as_str()];
    args.extend(key);
    assert_eq!(scheduler(&args), (0, format!("{answer}\n")));
}

#[test]
fn status_prints_the_node_and_a_row_per_partition() {
    let answer = r#"{"nodeId":"n1","version":"0.1.0","topic":"t","partitionCount":4,"ownedPartitions":[0,3],"partitions":[{"partition":0,"tasksScheduled":5,"tasksExecuting":1,"kafkaLag":0},{"partition":3,"tasksScheduled":0,"tasksExecuting":0,"kafkaLag":null}],"handlers":["send-email"],"handlesEveryType":false,"waitingForHandler":{"sms":2}}"#;
    let (url, _) = canned_api(move |_| (200, answer.to_string()));
    let (code, out) = scheduler(&["status", "--admin", &url]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "node n1 (version 0.1.0), topic t with 4 partitions\n\
         handlers: send-email\n\
         waiting for a handler: sms 2\n\
         PARTITION  SCHEDULED  EXECUTING  KAFKA LAG\n\
         \x20       0          5          1          0\n\
         \x20       3          0          0          -\n"
    );
    let (code, out) = scheduler(&["status", "--json", "--admin", &url]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "{\"handlers\":[\"send-email\"],\"handlesEveryType\":false,\
         \"nodeId\":\"n1\",\"ownedPartitions\":[0,3],\"partitionCount\":4,\"partitions\":[\
         {\"kafkaLag\":0,\"partition\":0,\"tasksExecuting\":1,\"tasksScheduled\":5},\
         {\"kafkaLag\":null,\"partition\":3,\"tasksExecuting\":0,\"tasksScheduled\":0}],\
         \"topic\":\"t\",\"version\":\"0.1.0\",\"waitingForHandler\":{\"sms\":2}}\n"
    );
}

#[test]
fn status_says_when_a_handler_runs_every_other_type_and_when_nothing_waits() {
    let node = r#""nodeId":"n1","version":"0.1.0","topic":"t","partitionCount":1,"ownedPartitions":[],"partitions":[]"#;
    let answers = [
        (
            r#""handlers":["charge","email"],"handlesEveryType":true,"waitingForHandler":{"push":1,"sms":12}"#,
            "handlers: charge, email (and every other type)\n\
             waiting for a handler: push 1, sms 12\n",
        ),
        (
            r#""handlers":[],"handlesEveryType":true,"waitingForHandler":{}"#,
            "handlers: every type\n",
        ),
        // A node of a release before handlers: nothing to say.
        ("", ""),
    ];
    for (handlers, lines) in answers {
        let answer = format!(
            "{{{node}{}{handlers}}}",
            if handlers.is_empty() { "" } else { "," }
        );
        let (url, _) = canned_api(move |_| (200, answer.clone()));
        let (code, out) = scheduler(&["status", "--admin", &url]);
        assert_eq!(code, 0, "{out}");
        assert_eq!(
            out,
            format!(
                "node n1 (version 0.1.0), topic t with 1 partitions\n\
                 {lines}\
                 PARTITION  SCHEDULED  EXECUTING  KAFKA LAG\n"
            )
        );
    }
}

#[test]
fn get_without_at_asks_for_the_identity_and_prints_its_current_task() {
    let (url, received) = canned_api(|_| (200, TASK.to_string()));
    let (code, out) = scheduler(&[
        "get",
        "--admin",
        &url,
        "--ordering-id",
        "o 1",
        "--unique",
        "u&1",
    ]);
    assert_eq!(code, 0, "{out}");
    // The answer names the task the identity resolved to.
    assert!(
        out.starts_with("task        o 1/2026-11-22T09:00:00.000Z/u&1\npartition   2\n"),
        "{out}"
    );
    let request = received.lock().expect("log")[0].clone();
    assert!(request.line.starts_with("GET /api/v1/task?"), "{request:?}");
    assert_eq!(
        query(&request.line),
        [
            ("orderingId".to_string(), "o 1".to_string()),
            ("uniquenessKey".to_string(), "u&1".to_string()),
        ]
    );
    let (code, out) = scheduler(&[
        "get",
        "--json",
        "--admin",
        &url,
        "--ordering-id",
        "o 1",
        "--unique",
        "u&1",
    ]);
    assert_eq!(code, 0, "{out}");
    let sorted: serde_json::Value = serde_json::from_str(TASK).expect("JSON");
    assert_eq!(out, format!("{sorted}\n"));
    assert_eq!(received.lock().expect("log").len(), 2);
}

#[test]
fn cancel_without_at_posts_the_identity_alone() {
    let answer = r#"{"note":"Without scheduledTime, it cancels the pending task of the identity.","partition":3,"result":"cancellation enqueued","task":"o/u"}"#;
    let (url, received) = canned_api(move |_| (202, answer.to_string()));
    let identity = ["--ordering-id", "o", "--unique", "u"];
    let mut args = vec!["cancel", "--admin", url.as_str()];
    args.extend(identity);
    let (code, out) = scheduler(&args);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "cancellation enqueued: o/u\n\
         Without scheduledTime, it cancels the pending task of the identity.\n"
    );
    let request = received.lock().expect("log")[0].clone();
    assert_eq!(request.line, "POST /api/v1/task/cancel HTTP/1.1");
    assert_eq!(
        body(&received, 0),
        serde_json::json!({
            "orderingId": "o",
            "scheduledTime": null,
            "uniquenessKey": "u",
        })
    );
    let mut args = vec!["cancel", "--json", "--admin", url.as_str()];
    args.extend(identity);
    assert_eq!(scheduler(&args), (0, format!("{answer}\n")));
}

/// The reschedule answer the canned API gives, as the node words it.
const RESCHEDULED: &str = r#"{"note":"The pending task of the identity moves to the new time.","partition":1,"result":"reschedule enqueued","task":"o/u to 2026-11-22T09:30:00.000Z"}"#;

#[test]
fn reschedule_posts_the_identity_and_the_new_time_and_prints_the_answer() {
    let (url, received) = canned_api(|_| (202, RESCHEDULED.to_string()));
    let (code, out) = scheduler(&[
        "reschedule",
        "--admin",
        &url,
        "--token",
        "t0ken",
        "--ordering-id",
        "o",
        "--unique",
        "u",
        "--at",
        "2026-11-22T10:30:00+01:00",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "reschedule enqueued: o/u to 2026-11-22T09:30:00.000Z\n\
         The pending task of the identity moves to the new time.\n"
    );
    let request = received.lock().expect("log")[0].clone();
    assert_eq!(request.line, "POST /api/v1/task/reschedule HTTP/1.1");
    assert!(
        request
            .headers
            .iter()
            .any(|h| h.eq_ignore_ascii_case("authorization: Bearer t0ken")),
        "{request:?}"
    );
    assert_eq!(
        body(&received, 0),
        serde_json::json!({
            "orderingId": "o",
            "scheduledTime": "2026-11-22T09:30:00.000Z",
            "uniquenessKey": "u",
        })
    );

    // --in: from now, in the wire format's form.
    let before = chrono::Utc::now();
    let (code, out) = scheduler(&[
        "reschedule",
        "--json",
        "--admin",
        &url,
        "--ordering-id",
        "o",
        "--in",
        "30m",
        "--unique",
        "u",
    ]);
    let after = chrono::Utc::now();
    assert_eq!((code, out), (0, format!("{RESCHEDULED}\n")));
    let sent = body(&received, 1);
    let time = sent["scheduledTime"].as_str().expect("a time");
    assert_eq!(time.len(), "2026-11-22T09:30:00.000Z".len(), "{time}");
    let time = chrono::DateTime::parse_from_rfc3339(time).expect("RFC 3339");
    let thirty = chrono::TimeDelta::minutes(30);
    assert!(
        time >= before + thirty - chrono::TimeDelta::milliseconds(1) && time <= after + thirty,
        "{time} not 30m after {before}..{after}"
    );
    assert_eq!(
        (sent["orderingId"].as_str(), sent["uniquenessKey"].as_str()),
        (Some("o"), Some("u"))
    );
}

#[test]
fn reschedule_refuses_no_time_two_times_and_bad_ones_before_any_call() {
    let (url, received) = canned_api(|_| (202, RESCHEDULED.to_string()));
    let identity = [
        "reschedule",
        "--admin",
        url.as_str(),
        "--ordering-id",
        "o",
        "--unique",
        "u",
    ];
    for refused in [
        &[][..],
        &["--at", "2026-11-22T09:30:00Z", "--in", "30m"],
        &["--at", "half past nine"],
        &["--in", "soon"],
        &["--in", "5M"],
        &["--in", "100000000000h"],
    ] {
        let mut args = identity.to_vec();
        args.extend(refused);
        let (code, out) = scheduler(&args);
        assert_eq!(code, scheduler_cli::EXIT_USAGE, "{refused:?}: {out}");
    }
    // The identity is both flags.
    let (code, _) = scheduler(&[
        "reschedule",
        "--admin",
        &url,
        "--ordering-id",
        "o",
        "--in",
        "1m",
    ]);
    assert_eq!(code, scheduler_cli::EXIT_USAGE);
    // get and cancel name a task by its time, not by a delay.
    for command in ["get", "cancel"] {
        let (code, _) = scheduler(&[
            command,
            "--admin",
            &url,
            "--ordering-id",
            "o",
            "--unique",
            "u",
            "--in",
            "1m",
        ]);
        assert_eq!(code, scheduler_cli::EXIT_USAGE, "{command}");
    }
    assert!(received.lock().expect("log").is_empty());
}

#[test]
fn reschedule_gives_the_exit_codes_of_cancel() {
    for (status, code) in [
        (404, scheduler_cli::EXIT_NOT_FOUND),
        (400, scheduler_cli::EXIT_USAGE),
        (502, scheduler_cli::EXIT_FAILURE),
    ] {
        let (url, _) = canned_api(move |_| (status, r#"{"error":"no"}"#.to_string()));
        let args = [
            "reschedule",
            "--admin",
            &url,
            "--ordering-id",
            "o",
            "--unique",
            "u",
            "--in",
            "1m",
        ];
        assert_eq!(scheduler(&args).0, code, "{status}");
        let args = [
            "cancel",
            "--admin",
            &url,
            "--ordering-id",
            "o",
            "--unique",
            "u",
        ];
        assert_eq!(scheduler(&args).0, code, "{status}");
    }
}

#[test]
fn error_answers_give_the_exit_code_scripts_rely_on() {
    let (url, _) = canned_api(|line| match line.split_whitespace().nth(1) {
        Some(p) if p.starts_with("/api/v1/task?") => (404, r#"{"error":"no task"}"#.into()),
        Some(p) if p.starts_with("/api/v1/tasks?") => (400, r#"{"error":"bad limit"}"#.into()),
        Some(p) if p.starts_with("/api/v1/status") => (503, "<html>down</html>".into()),
        _ => (401, r#"{"error":"missing or wrong bearer token"}"#.into()),
    });
    let key = [
        "--ordering-id",
        "o",
        "--at",
        "2026-11-22T09:00:00Z",
        "--unique",
        "u",
    ];
    let mut get = vec!["get", "--admin", url.as_str()];
    get.extend(key);
    assert_eq!(scheduler(&get).0, scheduler_cli::EXIT_NOT_FOUND);
    let list = [
        "list",
        "--admin",
        &url,
        "--from",
        "2026-11-22T09:00:00Z",
        "--to",
        "2026-11-22T10:00:00Z",
    ];
    assert_eq!(scheduler(&list).0, scheduler_cli::EXIT_USAGE);
    assert_eq!(
        scheduler(&["status", "--admin", &url]).0,
        scheduler_cli::EXIT_FAILURE
    );
    // A refused token is a failure to reach the service, not bad usage.
    let mut cancel = vec!["cancel", "--admin", url.as_str()];
    cancel.extend(key);
    assert_eq!(scheduler(&cancel).0, scheduler_cli::EXIT_FAILURE);
    // Nothing listens on port 1.
    assert_eq!(
        scheduler(&["status", "--admin", "http://127.0.0.1:1"]).0,
        scheduler_cli::EXIT_FAILURE
    );
    let mut bad_time = vec!["get", "--admin", url.as_str()];
    bad_time.extend(["--ordering-id", "o", "--at", "noon", "--unique", "u"]);
    assert_eq!(scheduler(&bad_time).0, scheduler_cli::EXIT_USAGE);
}

/// A dead letter as the API lists it; `n` tells them apart.
fn dead_letter(n: u32, ordering_id: &str, last_error: &str, redriven_at: &str) -> String {
    format!(
        r#"{{"orderingId":"{ordering_id}","scheduledTime":"2026-11-22T09:00:0{n}.000Z","uniquenessKey":"u'{n}","taskType":"send-email","priority":0,"partition":{n},"taskData":{{"n":{n}}},"attempts":{n},"lastError":"{last_error}","reason":"retries_exhausted","deadAt":"2026-11-22T09:05:0{n}.000Z","redrivenAt":{redriven_at},"redrives":{n}}}"#
    )
}

#[test]
fn dead_letters_list_asks_with_the_filter_and_prints_a_row_per_dead_letter() {
    let first = format!(
        r#"{{"deadLetters":[{}],"next":{{"afterOrderingId":"o 1","afterScheduledTime":"2026-11-22T09:00:01.000Z","afterUniquenessKey":"u'1"}}}}"#,
        dead_letter(1, "o 1", r"smtp\ntimeout", "null")
    );
    let last = format!(
        r#"{{"deadLetters":[{}],"next":null}}"#,
        dead_letter(2, "o2", "invalid address", r#""2026-11-22T09:10:00.000Z""#)
    );
    let first_page = first.clone();
    let (url, received) = canned_api(move |line| {
        if line.contains("afterOrderingId") {
            (200, last.clone())
        } else {
            (200, first_page.clone())
        }
    });
    let filter = [
        "--type",
        "send-email",
        "--from",
        "2026-11-22T10:00:00+01:00",
        "--to",
        "2026-11-22T10:00:00Z",
        "--limit",
        "1",
        "--include-redriven",
    ];
    let mut args = vec![
        "dead-letters",
        "list",
        "--admin",
        url.as_str(),
        "--all-pages",
    ];
    args.extend(filter);
    let (code, out) = scheduler(&args);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "TYPE             ORDERING ID              SCHEDULED TIME            UNIQUENESS KEY           ATTEMPTS  REASON             DEAD AT                   REDRIVEN                  LAST ERROR\n\
         send-email       o 1                      2026-11-22T09:00:01.000Z  u'1                             1  retries_exhausted  2026-11-22T09:05:01.000Z  -                         smtp timeout\n\
         send-email       o2                       2026-11-22T09:00:02.000Z  u'2                             2  retries_exhausted  2026-11-22T09:05:02.000Z  2026-11-22T09:10:00.000Z  invalid address\n"
    );
    let requests: Vec<_> = received
        .lock()
        .expect("log")
        .iter()
        .map(|r| {
            assert!(r.line.starts_with("GET /api/v1/dead-letters?"), "{r:?}");
            query(&r.line)
        })
        .collect();
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    let asked = vec![
        pair("taskType", "send-email"),
        pair("from", "2026-11-22T09:00:00.000Z"),
        pair("to", "2026-11-22T10:00:00.000Z"),
        pair("limit", "1"),
        pair("includeRedriven", "true"),
    ];
    let mut then = asked.clone();
    then.extend([
        pair("afterOrderingId", "o 1"),
        pair("afterScheduledTime", "2026-11-22T09:00:01.000Z"),
        pair("afterUniquenessKey", "u'1"),
    ]);
    assert_eq!(requests, [asked, then]);

    // One page as JSON: the API's answer, keys sorted.
    let (code, out) = scheduler(&["dead-letters", "list", "--json", "--admin", &url]);
    assert_eq!(code, 0, "{out}");
    let sorted: serde_json::Value = serde_json::from_str(&first).expect("JSON");
    assert_eq!(out, format!("{sorted}\n"));
    assert_eq!(
        query(&received.lock().expect("log")[2].line),
        [pair("limit", "100")]
    );

    // One page as a table, and on stderr (apart from the table) where the next one starts.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .args(["dead-letters", "list", "--admin", &url])
        .env_remove("RUST_LOG")
        .output()
        .expect("run scheduler");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "more: --after-ordering-id 'o 1' --after-scheduled-time 2026-11-22T09:00:01.000Z \
         --after-uniqueness-key 'u'\\''1' (or --all-pages)\n"
    );
    // The hint's flags ask for the next page.
    let (code, out) = scheduler(&[
        "dead-letters",
        "list",
        "--admin",
        &url,
        "--after-ordering-id",
        "o 1",
        "--after-scheduled-time",
        "2026-11-22T09:00:01.000Z",
        "--after-uniqueness-key",
        "u'1",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("invalid address"), "{out}");
    // A cursor is all three flags.
    let (code, _) = scheduler(&[
        "dead-letters",
        "list",
        "--admin",
        &url,
        "--after-ordering-id",
        "o 1",
    ]);
    assert_eq!(code, scheduler_cli::EXIT_USAGE);
    assert_eq!(received.lock().expect("log").len(), 5);
}

#[test]
fn dead_letters_redrive_posts_a_task_a_filter_or_all_and_prints_the_new_tasks() {
    let (url, received) = canned_api(|line| {
        let answer = if line.starts_with("POST /api/v1/dead-letters/redrive ") {
            r#"{"redriven":1500,"tasks":["o/2026-11-22T10:00:00.000Z/u","p/2026-11-22T10:00:00.000Z/v"]}"#
        } else {
            r#"{"error":"no such endpoint"}"#
        };
        (200, answer.to_string())
    });
    let admin = ["dead-letters", "redrive", "--admin", url.as_str()];
    let with = |flags: &[&'static str]| {
        let mut args = admin.to_vec();
        args.extend(flags);
        scheduler(&args)
    };

    let (code, out) = with(&[
        "--ordering-id",
        "o",
        "--scheduled-time",
        "2026-11-22T10:00:00+01:00",
        "--uniqueness-key",
        "u",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "redriven 1500 dead letters\n\
         o/2026-11-22T10:00:00.000Z/u\n\
         p/2026-11-22T10:00:00.000Z/v\n\
         (and 1498 more)\n"
    );
    assert_eq!(
        received.lock().expect("log")[0].line,
        "POST /api/v1/dead-letters/redrive HTTP/1.1"
    );
    assert_eq!(
        body(&received, 0),
        serde_json::json!({
            "orderingId": "o",
            "scheduledTime": "2026-11-22T09:00:00.000Z",
            "uniquenessKey": "u",
            "taskType": null,
            "from": null,
            "to": null,
            "all": false,
        })
    );

    let (code, out) = with(&["--type", "send-email", "--to", "2026-11-23T00:00:00Z"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        body(&received, 1),
        serde_json::json!({
            "orderingId": null,
            "scheduledTime": null,
            "uniquenessKey": null,
            "taskType": "send-email",
            "from": null,
            "to": "2026-11-23T00:00:00.000Z",
            "all": false,
        })
    );

    let (code, out) = with(&["--all", "--json"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "{\"redriven\":1500,\"tasks\":[\"o/2026-11-22T10:00:00.000Z/u\",\"p/2026-11-22T10:00:00.000Z/v\"]}\n"
    );
    assert_eq!(body(&received, 2)["all"], serde_json::json!(true));
    assert_eq!(body(&received, 2)["taskType"], serde_json::Value::Null);

    // Named no way, two ways, or by part of a key: refused before any call.
    for refused in [
        &[][..],
        &["--all", "--type", "send-email"],
        &[
            "--ordering-id",
            "o",
            "--scheduled-time",
            "2026-11-22T09:00:00Z",
            "--uniqueness-key",
            "u",
            "--from",
            "2026-11-22T09:00:00Z",
        ],
        &["--ordering-id", "o", "--uniqueness-key", "u"],
        &["--type", "send email"],
        &["--from", "noon"],
    ] {
        let (code, out) = with(refused);
        assert_eq!(code, scheduler_cli::EXIT_USAGE, "{refused:?}: {out}");
    }
    assert_eq!(received.lock().expect("log").len(), 3);
}

#[test]
fn dead_letters_purge_posts_the_selection_and_prints_how_many() {
    let (url, received) = canned_api(|_| (200, r#"{"purged":3}"#.to_string()));
    let (code, out) = scheduler(&[
        "dead-letters",
        "purge",
        "--admin",
        &url,
        "--type",
        "send-email",
        "--from",
        "2026-11-22T09:00:00Z",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, "purged 3 dead letters\n");
    assert_eq!(
        received.lock().expect("log")[0].line,
        "POST /api/v1/dead-letters/purge HTTP/1.1"
    );
    assert_eq!(
        body(&received, 0),
        serde_json::json!({
            "orderingId": null,
            "scheduledTime": null,
            "uniquenessKey": null,
            "taskType": "send-email",
            "from": "2026-11-22T09:00:00.000Z",
            "to": null,
            "all": false,
        })
    );
    let (code, out) = scheduler(&["dead-letters", "purge", "--json", "--all", "--admin", &url]);
    assert_eq!((code, out.as_str()), (0, "{\"purged\":3}\n"));
    assert_eq!(body(&received, 1)["all"], serde_json::json!(true));
    let (code, _) = scheduler(&["dead-letters", "purge", "--admin", &url]);
    assert_eq!(code, scheduler_cli::EXIT_USAGE);
}

#[test]
fn dead_letter_error_answers_give_the_exit_codes_of_the_other_commands() {
    let (url, _) = canned_api(|line| match line.split_whitespace().nth(1) {
        Some("/api/v1/dead-letters/redrive") => (
            404,
            r#"{"error":"no dead letter of task o/2026-11-22T09:00:00.000Z/u"}"#.into(),
        ),
        Some("/api/v1/dead-letters/purge") => (502, r#"{"error":"Cassandra down"}"#.into()),
        _ => (
            400,
            r#"{"error":"limit must be between 1 and 1000"}"#.into(),
        ),
    });
    let key = [
        "--ordering-id",
        "o",
        "--scheduled-time",
        "2026-11-22T09:00:00Z",
        "--uniqueness-key",
        "u",
    ];
    let mut redrive = vec!["dead-letters", "redrive", "--admin", url.as_str()];
    redrive.extend(key);
    assert_eq!(scheduler(&redrive).0, scheduler_cli::EXIT_NOT_FOUND);
    let mut purge = vec!["dead-letters", "purge", "--admin", url.as_str()];
    purge.extend(key);
    assert_eq!(scheduler(&purge).0, scheduler_cli::EXIT_FAILURE);
    let list = ["dead-letters", "list", "--admin", &url, "--limit", "0"];
    assert_eq!(scheduler(&list).0, scheduler_cli::EXIT_USAGE);
}

#[test]
fn limits_set_puts_the_values_given_list_prints_both_tables_and_remove_deletes() {
    let view = r#"{"limitKey":"tenant-42","taskType":null,"concurrency":2,"rate":10.0,"burst":null,"weight":null,"updatedAt":"2026-11-28T10:00:00.000Z"}"#;
    let listed = format!(
        r#"{{"overrides":[{view}],"keys":[{{"limitKey":"tenant-42","taskType":null,"permits":2,"running":2,"held":5}}]}}"#
    );
    let (url, received) = canned_api(move |line| match line {
        l if l.starts_with("PUT ") => (200, view.to_string()),
        l if l.starts_with("DELETE ") => (204, String::new()),
        _ => (200, listed.clone()),
    });
    let set = [
        "limits",
        "set",
        "tenant-42",
        "--concurrency",
        "2",
        "--rate",
        "10",
        "--admin",
    ];
    let mut args = set.to_vec();
    args.push(url.as_str());
    let (code, out) = scheduler(&args);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, "limit key tenant-42: 2 at once, 10/s\n");
    let request = received.lock().expect("log")[0].clone();
    assert_eq!(request.line, "PUT /api/v1/limits HTTP/1.1");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&request.body).expect("JSON"),
        serde_json::json!({"limitKey": "tenant-42", "concurrency": 2, "rate": 10.0})
    );
    let (code, out) = scheduler(&["limits", "list", "--admin", url.as_str()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("tenant-42                -                2 at once, 10/s (set 2026-11-28T10:00:00.000Z)"),
        "{out}"
    );
    assert!(
        out.contains("tenant-42                -                      2       2     5"),
        "{out}"
    );
    let (code, out) = scheduler(&[
        "limits",
        "remove",
        "tenant-42",
        "--task-type",
        "mail",
        "--admin",
        url.as_str(),
    ]);
    assert_eq!(
        (code, out.as_str()),
        (0, "removed the override of limit key tenant-42\n")
    );
    let request = received.lock().expect("log")[2].clone();
    assert_eq!(
        request.line,
        "DELETE /api/v1/limits?limitKey=tenant-42&taskType=mail HTTP/1.1"
    );
    // Nothing to set, or a key no task can carry: refused before any call.
    let (code, _) = scheduler(&["limits", "set", "tenant-42", "--admin", url.as_str()]);
    assert_eq!(code, 2);
    let long = "k".repeat(257);
    let (code, out) = scheduler(&[
        "limits",
        "set",
        &long,
        "--weight",
        "2",
        "--admin",
        url.as_str(),
    ]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(received.lock().expect("log").len(), 3);
}
