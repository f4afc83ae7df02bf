//! `schedules create|list|show|pause|resume|delete|preview` against a canned admin API on
//! loopback: what they ask (the definition's JSON, durations as text), what they print (a line,
//! a table, a schedule with its fires, `--json`), what they refuse before asking, and the exit
//! code each kind of answer gives.

mod common;

use std::sync::Mutex;

use common::{body, canned_api, scheduler, Received};
use serde_json::{json, Value};

/// An active schedule every 2s that has not fired yet.
const HEARTBEAT: &str = r#"{"definition":{"id":"heartbeat","every":"2s","taskType":"ping","data":{},"priority":0,"overlap":"skip","catchUp":"once"},"description":"every 2s","paused":false,"revision":1795338000000,"createdAt":"2026-11-22T09:00:00.000Z","updatedAt":"2026-11-22T09:00:00.000Z","nextFire":"2026-11-22T09:00:02.000Z","lastFire":null,"stalled":false}"#;

/// A paused cron schedule with every option set.
const NIGHTLY: &str = r#"{"definition":{"id":"nightly-report","cron":"0 30 2 * * *","timeZone":"Europe/Paris","taskType":"report","orderingId":"reports","data":{"kind":"daily"},"priority":5,"overlap":"allow","catchUp":"all","catchUpWindow":"1h 30m","jitter":"500ms","misfireThreshold":"10s"},"description":"At 02:30:00 (Europe/Paris)","paused":true,"revision":1795300000000,"createdAt":"2026-11-20T10:00:00.000Z","updatedAt":"2026-11-22T08:00:00.000Z","nextFire":null,"lastFire":"2026-11-22T01:30:00.000Z","stalled":false}"#;

/// `HEARTBEAT` with `changes` (top-level fields) applied.
fn heartbeat(changes: Value) -> Value {
    let mut view: Value = serde_json::from_str(HEARTBEAT).expect("JSON");
    for (key, value) in changes.as_object().expect("an object") {
        view[key] = value.clone();
    }
    view
}

/// `answer` with its keys sorted, as `--json` prints it.
fn sorted(answer: &str) -> String {
    let value: Value = serde_json::from_str(answer).expect("JSON");
    format!("{value}\n")
}

fn lines(received: &Mutex<Vec<Received>>) -> Vec<String> {
    let log = received.lock().expect("log");
    log.iter().map(|r| r.line.clone()).collect()
}

/// Runs the binary: its exit code and what it wrote on stderr.
fn stderr_of(args: &[&str]) -> (Option<i32>, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run scheduler");
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    (output.status.code(), stderr)
}

#[test]
fn create_posts_the_definition_with_durations_as_text_and_its_data_object() {
    let (url, received) = canned_api(|line| match line.split_whitespace().next() {
        Some("GET") => (404, r#"{"error":"no schedule nightly-report"}"#.into()),
        _ => (201, NIGHTLY.into()),
    });
    let (code, out) = scheduler(&[
        "schedules",
        "create",
        "nightly-report",
        "--admin",
        &url,
        "--token",
        "t0ken",
        "--cron",
        "0 30 2 * * *",
        "--time-zone",
        "Europe/Paris",
        "--task-type",
        "report",
        "--ordering-id",
        "reports",
        "--data",
        r#"{"kind":"daily","sizes":[1,2.5],"to":{"team":"ops"}}"#,
        "--priority",
        "-3",
        "--overlap",
        "allow",
        "--catch-up",
        "all",
        "--catch-up-window",
        "90m",
        "--jitter",
        "500ms",
        "--misfire-threshold",
        "10s",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "created schedule nightly-report: At 02:30:00 (Europe/Paris), paused\n"
    );
    assert_eq!(
        lines(&received),
        [
            "GET /api/v1/schedules/nightly-report?count=1 HTTP/1.1",
            "POST /api/v1/schedules HTTP/1.1"
        ]
    );
    let post = received.lock().expect("log")[1].clone();
    assert!(
        post.headers
            .iter()
            .any(|h| h.eq_ignore_ascii_case("authorization: Bearer t0ken")),
        "{post:?}"
    );
    assert_eq!(
        body(&received, 1),
        json!({
            "id": "nightly-report",
            "cron": "0 30 2 * * *",
            "timeZone": "Europe/Paris",
            "taskType": "report",
            "orderingId": "reports",
            "data": {"kind": "daily", "sizes": [1, 2.5], "to": {"team": "ops"}},
            "priority": -3,
            "overlap": "allow",
            "catchUp": "all",
            "catchUpWindow": "1h 30m",
            "jitter": "500ms",
            "misfireThreshold": "10s",
        })
    );

    // An interval with no options: the engine's defaults, spelled out.
    let (code, out) = scheduler(&[
        "schedules",
        "create",
        "heartbeat",
        "--admin",
        &url,
        "--every",
        "2s",
        "--type",
        "ping",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        body(&received, 3),
        json!({
            "id": "heartbeat",
            "every": "2s",
            "taskType": "ping",
            "data": {},
            "priority": 0,
            "overlap": "skip",
            "catchUp": "once",
        })
    );
}

#[test]
fn create_says_whether_the_schedule_is_new_unchanged_redefined_or_restarted() {
    let every_5s = heartbeat(json!({
        "definition": {"id": "heartbeat", "every": "5s", "taskType": "ping", "data": {},
                       "priority": 0, "overlap": "skip", "catchUp": "once"},
        "revision": 1795337000000_i64,
    }));
    // Overdue: the node enqueues its tick again and keeps the chain (the same revision).
    let stalled = heartbeat(json!({"stalled": true}));
    let ended = heartbeat(json!({"revision": 1795337000000_i64, "nextFire": null}));
    let paused = heartbeat(json!({"paused": true, "nextFire": null}));
    for (before, after, says) in [
        (
            None,
            heartbeat(json!({})),
            "created schedule heartbeat: every 2s, next fire 2026-11-22T09:00:02.000Z",
        ),
        // The API answers 201 for an unchanged schedule too (it was never changed).
        (
            Some(heartbeat(json!({}))),
            heartbeat(json!({})),
            "schedule heartbeat unchanged: every 2s, next fire 2026-11-22T09:00:02.000Z",
        ),
        (
            Some(every_5s),
            heartbeat(json!({})),
            "redefined schedule heartbeat: every 2s, next fire 2026-11-22T09:00:02.000Z",
        ),
        (
            Some(stalled.clone()),
            stalled,
            "schedule heartbeat unchanged, its overdue tick enqueued again: every 2s, stalled \
             since 2026-11-22T09:00:02.000Z",
        ),
        (
            Some(ended),
            heartbeat(json!({})),
            "started schedule heartbeat again (it had no next fire): every 2s, next fire \
             2026-11-22T09:00:02.000Z",
        ),
        (
            Some(paused.clone()),
            paused,
            "schedule heartbeat unchanged: every 2s, paused",
        ),
    ] {
        let detail = before.map(|s| json!({"schedule": s, "upcoming": [], "fires": []}));
        let after = after.to_string();
        let (url, _) = canned_api(
            move |line| match (line.split_whitespace().next(), &detail) {
                (Some("GET"), Some(detail)) => (200, detail.to_string()),
                (Some("GET"), None) => (404, r#"{"error":"no schedule heartbeat"}"#.into()),
                _ => (201, after.clone()),
            },
        );
        let create = [
            "schedules",
            "create",
            "heartbeat",
            "--admin",
            &url,
            "--every",
            "2s",
            "--task-type",
            "ping",
        ];
        let (code, out) = scheduler(&create);
        assert_eq!((code, out.as_str()), (0, format!("{says}\n").as_str()));
    }

    // As JSON: the API's answer, keys sorted.
    let (url, _) = canned_api(|line| match line.split_whitespace().next() {
        Some("GET") => (404, r#"{"error":"no schedule heartbeat"}"#.into()),
        _ => (201, HEARTBEAT.into()),
    });
    let (code, out) = scheduler(&[
        "schedules",
        "create",
        "heartbeat",
        "--json",
        "--admin",
        &url,
        "--every",
        "2s",
        "--task-type",
        "ping",
    ]);
    assert_eq!((code, out), (0, sorted(HEARTBEAT)));
}

#[test]
fn create_from_a_file_sends_its_definition_whose_id_a_given_id_must_be() {
    let (url, received) = canned_api(|line| match line.split_whitespace().next() {
        Some("GET") => (404, r#"{"error":"no schedule nightly-report"}"#.into()),
        _ => (201, NIGHTLY.into()),
    });
    let definition = json!({
        "id": "nightly-report",
        "cron": "0 30 2 * * *",
        "timeZone": "Europe/Paris",
        "taskType": "report",
        "data": {"kind": "daily"},
        "jitter": "1000ms",
    });
    let dir = std::env::temp_dir().join(format!("schedule-commands-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("nightly.json");
    std::fs::write(&file, definition.to_string()).expect("write the definition");
    let path = file.to_str().expect("a UTF-8 path");

    for id in [None, Some("nightly-report")] {
        let mut args = vec!["schedules", "create", "--admin", &url, "--file", path];
        args.extend(id);
        let (code, out) = scheduler(&args);
        assert_eq!(code, 0, "{id:?}: {out}");
        let n = received.lock().expect("log").len() - 1;
        // Read as the node reads it: the defaults spelled out, durations as the API writes them.
        assert_eq!(
            body(&received, n),
            json!({
                "id": "nightly-report",
                "cron": "0 30 2 * * *",
                "timeZone": "Europe/Paris",
                "taskType": "report",
                "data": {"kind": "daily"},
                "priority": 0,
                "overlap": "skip",
                "catchUp": "once",
                "jitter": "1s",
            })
        );
    }
    let asked = received.lock().expect("log").len();

    let (code, stderr) = stderr_of(&[
        "schedules",
        "create",
        "other",
        "--admin",
        &url,
        "--file",
        path,
    ]);
    assert_eq!(code, Some(scheduler_cli::EXIT_USAGE));
    assert_eq!(
        stderr,
        format!("scheduler: the id \"other\" is not the id of {path}, \"nightly-report\"\n")
    );
    // Not a definition: a misspelt field, a missing one, a bad one, or no file.
    for (text, says) in [
        (
            r#"{"id":"x","every":"2s","taskType":"t","evry":1}"#,
            "unknown field `evry`",
        ),
        (r#"{"id":"x","every":"2s"}"#, "missing field `taskType`"),
        (
            r#"{"id":"x","every":"2 days?","taskType":"t"}"#,
            "duration \"2 days?\"",
        ),
        (
            r#"{"id":"x","every":"500ms","taskType":"t"}"#,
            "every must be at least 1s",
        ),
    ] {
        std::fs::write(&file, text).expect("write the definition");
        let (code, stderr) = stderr_of(&["schedules", "create", "--admin", &url, "--file", path]);
        assert_eq!(code, Some(scheduler_cli::EXIT_USAGE), "{text}: {stderr}");
        assert!(stderr.contains(says), "{text}: {stderr}");
    }
    let missing = dir.join("missing.json");
    let (code, stderr) = stderr_of(&[
        "schedules",
        "create",
        "--admin",
        &url,
        "--file",
        missing.to_str().expect("a UTF-8 path"),
    ]);
    assert_eq!(code, Some(scheduler_cli::EXIT_USAGE));
    assert!(stderr.starts_with("scheduler: cannot read "), "{stderr}");
    assert_eq!(received.lock().expect("log").len(), asked);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn list_prints_a_row_per_schedule() {
    let stalled = heartbeat(json!({
        "definition": {"id": "sync", "every": "1m", "taskType": "sync.accounts", "data": {},
                       "priority": 0, "overlap": "skip", "catchUp": "once"},
        "description": "every 1m",
        "nextFire": "2026-11-22T08:50:00.000Z",
        "lastFire": "2026-11-22T08:49:00.000Z",
        "stalled": true,
    }));
    let answer = format!(r#"{{"schedules":[{HEARTBEAT},{NIGHTLY},{stalled}]}}"#);
    let listed = answer.clone();
    let (url, received) = canned_api(move |_| (200, listed.clone()));
    let (code, out) = scheduler(&["schedules", "list", "--admin", &url]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "ID              CADENCE                     TASK TYPE      STATE    NEXT FIRE                 LAST FIRE\n\
         heartbeat       every 2s                    ping           active   2026-11-22T09:00:02.000Z  -\n\
         nightly-report  At 02:30:00 (Europe/Paris)  report         paused   -                         2026-11-22T01:30:00.000Z\n\
         sync            every 1m                    sync.accounts  stalled  2026-11-22T08:50:00.000Z  2026-11-22T08:49:00.000Z\n"
    );
    assert_eq!(lines(&received), ["GET /api/v1/schedules HTTP/1.1"]);

    let (code, out) = scheduler(&["schedules", "list", "--json", "--admin", &url]);
    assert_eq!((code, out), (0, sorted(&answer)));

    let (url, _) = canned_api(|_| (200, r#"{"schedules":[]}"#.to_string()));
    let (code, out) = scheduler(&["schedules", "list", "--admin", &url]);
    assert_eq!(
        (code, out.as_str()),
        (
            0,
            "ID  CADENCE  TASK TYPE  STATE    NEXT FIRE                 LAST FIRE\n"
        )
    );
}

#[test]
fn show_prints_the_schedule_its_next_fire_times_and_its_fires() {
    let detail = json!({
        "schedule": heartbeat(json!({"lastFire": "2026-11-22T09:00:00.000Z"})),
        "upcoming": ["2026-11-22T09:00:02.000Z", "2026-11-22T09:00:04.000Z", "2026-11-22T09:00:06.000Z"],
        "fires": [
            {"fireTime": "2026-11-22T09:00:00.000Z", "outcome": "enqueued",
             "runTime": "2026-11-22T09:00:00.412Z", "runKey": "schedule:heartbeat@1795338000000"},
            {"fireTime": "2026-11-22T08:59:58.000Z", "outcome": "skippedOverlap"},
            {"fireTime": "2026-11-22T08:50:00.000Z", "outcome": "missed",
             "missedCount": 299, "missedLast": "2026-11-22T08:59:56.000Z"},
        ],
    })
    .to_string();
    let nightly = format!(r#"{{"schedule":{NIGHTLY},"upcoming":[],"fires":[]}}"#);
    let (answer, paused) = (detail.clone(), nightly.clone());
    let (url, received) = canned_api(move |line| {
        if line.contains("/nightly-report") {
            (200, paused.clone())
        } else {
            (200, answer.clone())
        }
    });
    let (code, out) = scheduler(&[
        "schedules",
        "show",
        "heartbeat",
        "--count",
        "3",
        "--admin",
        &url,
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "schedule    heartbeat\n\
         cadence     every 2s\n\
         task type   ping\n\
         ordering id schedule:heartbeat\n\
         priority    0\n\
         data        {}\n\
         overlap     skip\n\
         catch up    once\n\
         state       active\n\
         next fire   2026-11-22T09:00:02.000Z\n\
         last fire   2026-11-22T09:00:00.000Z\n\
         created     2026-11-22T09:00:00.000Z\n\
         updated     2026-11-22T09:00:00.000Z\n\
         upcoming    2026-11-22T09:00:02.000Z\n            \
         2026-11-22T09:00:04.000Z\n            \
         2026-11-22T09:00:06.000Z\n\
         \n\
         FIRE TIME                 OUTCOME         RUN TIME                  MISSED\n\
         2026-11-22T09:00:00.000Z  enqueued        2026-11-22T09:00:00.412Z  -\n\
         2026-11-22T08:59:58.000Z  skippedOverlap  -                         -\n\
         2026-11-22T08:50:00.000Z  missed          -                         299, the last 2026-11-22T08:59:56.000Z\n"
    );
    assert_eq!(
        lines(&received),
        ["GET /api/v1/schedules/heartbeat?count=3 HTTP/1.1"]
    );

    // Paused, with every option, no fire yet: no next fire times, no table.
    let (code, out) = scheduler(&["schedules", "show", "nightly-report", "--admin", &url]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "schedule    nightly-report\n\
         cadence     At 02:30:00 (Europe/Paris)\n\
         cron        0 30 2 * * * in Europe/Paris\n\
         task type   report\n\
         ordering id reports\n\
         priority    5\n\
         data        {\"kind\":\"daily\"}\n\
         overlap     allow\n\
         catch up    all (window 1h 30m)\n\
         jitter      500ms\n\
         misfire     10s\n\
         state       paused\n\
         next fire   -\n\
         last fire   2026-11-22T01:30:00.000Z\n\
         created     2026-11-20T10:00:00.000Z\n\
         updated     2026-11-22T08:00:00.000Z\n"
    );
    // Without --count, the API's default.
    assert_eq!(
        lines(&received)[1],
        "GET /api/v1/schedules/nightly-report HTTP/1.1"
    );

    let (code, out) = scheduler(&["schedules", "show", "heartbeat", "--json", "--admin", &url]);
    assert_eq!((code, out), (0, sorted(&detail)));
}

#[test]
fn pause_resume_and_delete_say_what_they_did() {
    let paused = heartbeat(json!({"paused": true, "nextFire": null})).to_string();
    let (url, received) = canned_api(move |line| match line {
        l if l.contains("/pause ") => (200, paused.clone()),
        l if l.contains("/resume ") => (200, HEARTBEAT.to_string()),
        _ => (204, String::new()),
    });
    let (code, out) = scheduler(&["schedules", "pause", "heartbeat", "--admin", &url]);
    assert_eq!(
        (code, out.as_str()),
        (0, "paused schedule heartbeat: every 2s, paused\n")
    );
    let (code, out) = scheduler(&["schedules", "resume", "heartbeat", "--admin", &url]);
    assert_eq!(
        (code, out.as_str()),
        (
            0,
            "resumed schedule heartbeat: every 2s, next fire 2026-11-22T09:00:02.000Z\n"
        )
    );
    let (code, out) = scheduler(&["schedules", "delete", "heartbeat", "--admin", &url]);
    assert_eq!((code, out.as_str()), (0, "deleted schedule heartbeat\n"));
    assert_eq!(
        lines(&received),
        [
            "POST /api/v1/schedules/heartbeat/pause HTTP/1.1",
            "POST /api/v1/schedules/heartbeat/resume HTTP/1.1",
            "DELETE /api/v1/schedules/heartbeat HTTP/1.1",
        ]
    );
    assert_eq!(received.lock().expect("log")[0].body, "");

    // As JSON: the API's answer; a delete's (204, no body) says what was deleted.
    let (code, out) = scheduler(&[
        "schedules",
        "resume",
        "heartbeat",
        "--json",
        "--admin",
        &url,
    ]);
    assert_eq!((code, out), (0, sorted(HEARTBEAT)));
    let (code, out) = scheduler(&[
        "schedules",
        "delete",
        "heartbeat",
        "--json",
        "--admin",
        &url,
    ]);
    assert_eq!(
        (code, out.as_str()),
        (0, "{\"deleted\":true,\"id\":\"heartbeat\"}\n")
    );
}

#[test]
fn preview_shows_the_cadence_and_next_fire_times_creating_nothing() {
    let answer = r#"{"description":"Every 15 minutes (UTC)","upcoming":["2026-11-22T09:15:00.000Z","2026-11-22T09:30:00.000Z","2026-11-22T09:45:00.000Z"]}"#;
    let (url, received) = canned_api(move |_| (200, answer.to_string()));
    let (code, out) = scheduler(&[
        "schedules",
        "preview",
        "--cron",
        "*/15 * * * *",
        "--count",
        "3",
        "--admin",
        &url,
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "Every 15 minutes (UTC)\n\
         2026-11-22T09:15:00.000Z\n\
         2026-11-22T09:30:00.000Z\n\
         2026-11-22T09:45:00.000Z\n"
    );
    assert_eq!(
        lines(&received),
        ["POST /api/v1/schedules/preview?count=3 HTTP/1.1"]
    );
    // Without an id and a task type, placeholders: a preview names and enqueues nothing.
    assert_eq!(
        body(&received, 0),
        json!({
            "id": "preview", "cron": "*/15 * * * *", "taskType": "preview", "data": {},
            "priority": 0, "overlap": "skip", "catchUp": "once",
        })
    );

    let (code, out) = scheduler(&[
        "schedules",
        "preview",
        "heartbeat",
        "--json",
        "--every",
        "2s",
        "--task-type",
        "ping",
        "--admin",
        &url,
    ]);
    assert_eq!((code, out), (0, sorted(answer)));
    assert_eq!(
        lines(&received)[1],
        "POST /api/v1/schedules/preview HTTP/1.1"
    );
    assert_eq!(body(&received, 1)["id"], "heartbeat");
    assert_eq!(body(&received, 1)["every"], "2s");
}

#[test]
fn an_unknown_schedule_is_not_found_with_the_apis_message() {
    let (url, received) = canned_api(|_| (404, r#"{"error":"no schedule nope"}"#.to_string()));
    for command in ["show", "pause", "resume", "delete"] {
        let args = ["schedules", command, "nope", "--admin", &url];
        let (code, out) = scheduler(&args);
        assert_eq!(
            (code, out.as_str()),
            (scheduler_cli::EXIT_NOT_FOUND, ""),
            "{command}"
        );
    }
    assert_eq!(received.lock().expect("log").len(), 4);
    let (code, stderr) = stderr_of(&["schedules", "show", "nope", "--admin", &url]);
    assert_eq!(code, Some(scheduler_cli::EXIT_NOT_FOUND));
    assert_eq!(stderr, "scheduler: no schedule nope\n");
}

#[test]
fn bad_definitions_and_ids_are_refused_before_any_call() {
    let (url, received) = canned_api(|_| (201, HEARTBEAT.to_string()));
    let create = |flags: &[&str]| {
        let mut args = vec!["schedules", "create", "s", "--admin", url.as_str()];
        args.extend(flags);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    // clap's refusals, printed on stdout.
    for (flags, says) in [
        (
            &["--cron", "* * * * *", "--every", "2s", "--task-type", "t"][..],
            "cannot be used with '--every <DURATION>'",
        ),
        (
            &["--task-type", "t"][..],
            "required arguments were not provided",
        ),
        (
            &["--every", "2s"][..],
            "required arguments were not provided",
        ),
        (
            &["--every", "2s", "--task-type", "t", "--overlap", "never"][..],
            "invalid value 'never'",
        ),
        (
            &["--every", "2s", "--task-type", "t", "--file", "x.json"][..],
            "cannot be used with",
        ),
    ] {
        let args = create(flags);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out) = scheduler(&args);
        assert_eq!(code, scheduler_cli::EXIT_USAGE, "{flags:?}: {out}");
        assert!(out.contains(says), "{flags:?}: {out}");
    }
    // The command's own, on stderr, naming the problem.
    for (flags, says) in [
        (
            &["--cron", "61 * * * *", "--task-type", "t"][..],
            "invalid schedule: cron expression \"61 * * * *\": ",
        ),
        (
            &[
                "--cron",
                "* * * * *",
                "--time-zone",
                "Mars/Base",
                "--task-type",
                "t",
            ][..],
            "invalid schedule: time zone \"Mars/Base\" is not an IANA time zone name",
        ),
        (
            &[
                "--every",
                "2s",
                "--time-zone",
                "Europe/Paris",
                "--task-type",
                "t",
            ][..],
            "invalid schedule: timeZone applies to cron schedules only",
        ),
        (
            &["--every", "500ms", "--task-type", "t"][..],
            "invalid schedule: every must be at least 1s",
        ),
        (
            &["--every", "2 fortnights", "--task-type", "t"][..],
            "--every: duration \"2 fortnights\"",
        ),
        (
            &["--every", "2s", "--task-type", "t", "--jitter", "5M"][..],
            "--jitter: duration \"5M\": months and years are not accepted",
        ),
        (
            &[
                "--every",
                "2s",
                "--task-type",
                "t",
                "--catch-up-window",
                "1h",
            ][..],
            "invalid schedule: catchUpWindow applies to catchUp \"all\" only",
        ),
        (
            &["--every", "2s", "--task-type", "t", "--data", "[1]"][..],
            "--data must be a JSON object",
        ),
        (
            &["--every", "2s", "--task-type", "scheduler:tick"][..],
            "invalid schedule: taskType \"scheduler:tick\" is the engine's own",
        ),
        (
            &["--every", "2s", "--task-type", "send email"][..],
            "invalid schedule: its runs would be refused: taskType \"send email\"",
        ),
        (
            &["--every", "2s", "--task-type", "t", "--ordering-id", ""][..],
            "invalid schedule: orderingId must not be empty",
        ),
    ] {
        let args = create(flags);
        let (code, stderr) = stderr_of(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, Some(scheduler_cli::EXIT_USAGE), "{flags:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("scheduler: {says}")),
            "{flags:?}: {stderr}"
        );
    }
    // Ids no schedule can have: the same message for each command.
    let (code, stderr) = stderr_of(&[
        "schedules",
        "create",
        "a/b",
        "--admin",
        &url,
        "--every",
        "2s",
        "--task-type",
        "t",
    ]);
    assert_eq!(code, Some(scheduler_cli::EXIT_USAGE));
    assert!(
        stderr.starts_with("scheduler: invalid schedule: schedule id \"a/b\""),
        "{stderr}"
    );
    for command in ["show", "pause", "resume", "delete"] {
        let (code, stderr) = stderr_of(&["schedules", command, "a/b", "--admin", &url]);
        assert_eq!(code, Some(scheduler_cli::EXIT_USAGE), "{command}");
        assert_eq!(
            stderr,
            "scheduler: \"a/b\" is not a schedule id (1 to 200 ASCII letters, digits or -_.:)\n",
            "{command}"
        );
    }
    for count in ["0", "101"] {
        let (code, out) = scheduler(&["schedules", "show", "s", "--count", count, "--admin", &url]);
        assert_eq!(code, scheduler_cli::EXIT_USAGE, "{count}: {out}");
        let preview = [
            "schedules",
            "preview",
            "--every",
            "2s",
            "--count",
            count,
            "--admin",
            &url,
        ];
        assert_eq!(scheduler(&preview).0, scheduler_cli::EXIT_USAGE, "{count}");
    }
    // A preview checks its definition too.
    let (code, _) = scheduler(&[
        "schedules",
        "preview",
        "--cron",
        "61 * * * *",
        "--admin",
        &url,
    ]);
    assert_eq!(code, scheduler_cli::EXIT_USAGE);
    assert!(received.lock().expect("log").is_empty());
}

#[test]
fn error_answers_give_the_exit_codes_of_the_other_commands() {
    let (url, _) = canned_api(|line| match line.split_whitespace().next() {
        Some("POST") => (
            400,
            r#"{"error":"schedule s has no fire time after now"}"#.into(),
        ),
        Some("GET") if line.contains("/schedules/") => (404, r#"{"error":"no schedule s"}"#.into()),
        _ => (503, r#"{"error":"Cassandra down"}"#.into()),
    });
    let create = [
        "schedules",
        "create",
        "s",
        "--admin",
        &url,
        "--cron",
        "0 0 1 1 *",
        "--task-type",
        "t",
    ];
    let (code, stderr) = stderr_of(&create);
    assert_eq!(code, Some(scheduler_cli::EXIT_USAGE));
    assert_eq!(
        stderr,
        "scheduler: 400: schedule s has no fire time after now\n"
    );
    assert_eq!(
        scheduler(&["schedules", "list", "--admin", &url]).0,
        scheduler_cli::EXIT_FAILURE
    );
    let unreachable = ["schedules", "list", "--admin", "http://127.0.0.1:1"];
    assert_eq!(scheduler(&unreachable).0, scheduler_cli::EXIT_FAILURE);
    // A node that answers something else (another version).
    let (url, _) = canned_api(|_| (200, r#"{"schedules":[{"id":"s"}]}"#.into()));
    assert_eq!(
        scheduler(&["schedules", "list", "--admin", &url]).0,
        scheduler_cli::EXIT_FAILURE
    );
}
