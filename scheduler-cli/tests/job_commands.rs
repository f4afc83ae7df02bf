//! `jobs list` and `jobs show` against a canned admin API on loopback: what they ask, what they
//! print (a table, a job with its failed buckets, `--json`), what they refuse before asking, and
//! the exit code each kind of answer gives. The it-tests run the endpoints against a real node.

mod common;

use common::{canned_api, scheduler};

/// A running job with two failed buckets, one of whose errors spans two lines.
const RUNNING: &str = r#"{"id":"nightly-2026-11-23","state":"running","coordinator":"nightly/2026-11-23T02:00:00.000Z/run","taskType":"report","group":"children:00112233445566778899aabbccddeeff","startedAt":"2026-11-23T02:00:00.012Z","buckets":64,"completed":10,"failed":2,"cancelled":1,"pending":51,"items":120000,"suspended":false,"errors":[{"bucket":3,"task":"nightly-2026-11-23/b3~4/2026-11-23T02:00:00.000Z/bucket","status":"failed","error":"timed out\nafter 5m"},{"bucket":7,"task":"nightly-2026-11-23/b7~0/2026-11-23T02:00:00.000Z/bucket","status":"dropped","error":"bucket unreadable"}]}"#;

/// A finished job without failures, suspended before it finished.
const COMPLETED: &str = r#"{"id":"backfill.1","state":"completed","coordinator":"ops/2026-11-22T09:00:00.000Z/backfill","taskType":"backfill","group":"children:ffeeddccbbaa99887766554433221100","startedAt":"2026-11-22T09:00:00.000Z","buckets":4,"completed":4,"failed":0,"cancelled":0,"pending":0,"items":4000,"suspended":true,"errors":[]}"#;

#[test]
fn jobs_list_prints_a_row_per_job() {
    let answer = format!(r#"{{"jobs":[{RUNNING},{COMPLETED}]}}"#);
    let listed = answer.clone();
    let (url, received) = canned_api(move |_| (200, listed.clone()));
    let (code, out) = scheduler(&["jobs", "list", "--admin", &url]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "ID                       STATE         BUCKETS  FAILED        ITEMS  STARTED\n\
         nightly-2026-11-23       running         13/64       2       120000  2026-11-23T02:00:00.012Z\n\
         backfill.1               completed         4/4       0         4000  2026-11-22T09:00:00.000Z\n"
    );
    assert_eq!(
        received.lock().expect("log")[0].line,
        "GET /api/v1/jobs HTTP/1.1"
    );

    // As JSON: the API's answer, keys sorted.
    let (code, out) = scheduler(&["jobs", "list", "--json", "--admin", &url]);
    assert_eq!(code, 0, "{out}");
    let sorted: serde_json::Value = serde_json::from_str(&answer).expect("JSON");
    assert_eq!(out, format!("{sorted}\n"));

    let (url, _) = canned_api(|_| (200, r#"{"jobs":[]}"#.to_string()));
    let (code, out) = scheduler(&["jobs", "list", "--admin", &url]);
    assert_eq!(
        (code, out.as_str()),
        (
            0,
            "ID                       STATE         BUCKETS  FAILED        ITEMS  STARTED\n"
        )
    );
}

#[test]
fn jobs_show_prints_the_job_and_its_failed_buckets() {
    let (url, received) = canned_api(|line| {
        if line.contains("/backfill.1 ") {
            (200, COMPLETED.to_string())
        } else {
            (200, RUNNING.to_string())
        }
    });
    let (code, out) = scheduler(&[
        "jobs",
        "show",
        "nightly-2026-11-23",
        "--admin",
        &url,
        "--token",
        "t0ken",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "job         nightly-2026-11-23\n\
         state       running\n\
         coordinator nightly/2026-11-23T02:00:00.000Z/run\n\
         group       report/children:00112233445566778899aabbccddeeff\n\
         buckets     10 completed, 2 failed, 1 cancelled, 51 pending (of 64)\n\
         items       120000\n\
         suspended   no\n\
         started     2026-11-23T02:00:00.012Z\n\
         \n\
         BUCKET  STATUS   TASK                                                    ERROR\n\
         3       failed   nightly-2026-11-23/b3~4/2026-11-23T02:00:00.000Z/bucket timed out after 5m\n\
         7       dropped  nightly-2026-11-23/b7~0/2026-11-23T02:00:00.000Z/bucket bucket unreadable\n"
    );
    let request = received.lock().expect("log")[0].clone();
    assert_eq!(request.line, "GET /api/v1/jobs/nightly-2026-11-23 HTTP/1.1");
    assert!(
        request
            .headers
            .iter()
            .any(|h| h.eq_ignore_ascii_case("authorization: Bearer t0ken")),
        "{request:?}"
    );

    // No failed bucket: no table.
    let (code, out) = scheduler(&["jobs", "show", "backfill.1", "--admin", &url]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "job         backfill.1\n\
         state       completed\n\
         coordinator ops/2026-11-22T09:00:00.000Z/backfill\n\
         group       backfill/children:ffeeddccbbaa99887766554433221100\n\
         buckets     4 completed, 0 failed, 0 cancelled, 0 pending (of 4)\n\
         items       4000\n\
         suspended   yes\n\
         started     2026-11-22T09:00:00.000Z\n"
    );

    // As JSON: the API's answer, keys sorted.
    let (code, out) = scheduler(&[
        "jobs",
        "show",
        "nightly-2026-11-23",
        "--json",
        "--admin",
        &url,
    ]);
    assert_eq!(code, 0, "{out}");
    let sorted: serde_json::Value = serde_json::from_str(RUNNING).expect("JSON");
    assert_eq!(out, format!("{sorted}\n"));
}

#[test]
fn a_job_with_more_failed_buckets_than_listed_says_how_many_more() {
    let mut job: serde_json::Value = serde_json::from_str(RUNNING).expect("JSON");
    job["failed"] = serde_json::json!(102);
    job["pending"] = serde_json::json!(0);
    let answer = job.to_string();
    let (url, _) = canned_api(move |_| (200, answer.clone()));
    let (code, out) = scheduler(&["jobs", "show", "nightly-2026-11-23", "--admin", &url]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.ends_with("bucket unreadable\n(and 100 more)\n"),
        "{out}"
    );
}

#[test]
fn an_unknown_job_is_not_found_with_the_apis_message_on_one_line() {
    let (url, _) = canned_api(|_| (404, r#"{"error":"no job \"nope\""}"#.to_string()));
    let show = ["jobs", "show", "nope", "--admin", &url];
    let (code, out) = scheduler(&show);
    assert_eq!((code, out.as_str()), (scheduler_cli::EXIT_NOT_FOUND, ""));

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .args(show)
        .env_remove("RUST_LOG")
        .output()
        .expect("run scheduler");
    assert_eq!(output.status.code(), Some(scheduler_cli::EXIT_NOT_FOUND));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "scheduler: no job \"nope\"\n"
    );
}

#[test]
fn what_no_job_can_be_named_is_refused_before_any_call() {
    let (url, received) = canned_api(|_| (200, RUNNING.to_string()));
    let too_long = "j".repeat(201);
    for id in ["", "a/b", "a b", "job?x=1", "ä", too_long.as_str()] {
        let (code, out) = scheduler(&["jobs", "show", id, "--admin", &url]);
        assert_eq!(code, scheduler_cli::EXIT_USAGE, "{id:?}: {out}");
    }
    // An id is required.
    let (code, out) = scheduler(&["jobs", "show", "--admin", &url]);
    assert_eq!(code, scheduler_cli::EXIT_USAGE, "{out}");
    assert!(
        out.contains("required arguments were not provided"),
        "{out}"
    );
    assert!(received.lock().expect("log").is_empty());

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .args(["jobs", "show", "a/b", "--admin", &url])
        .env_remove("RUST_LOG")
        .output()
        .expect("run scheduler");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "scheduler: \"a/b\" is not a job id (1 to 200 ASCII letters, digits or -_.:)\n"
    );
}

#[test]
fn error_answers_give_the_exit_codes_of_the_other_commands() {
    let (url, _) = canned_api(|line| {
        if line.starts_with("GET /api/v1/jobs ") {
            (503, r#"{"error":"Cassandra down"}"#.into())
        } else {
            (401, r#"{"error":"missing or wrong bearer token"}"#.into())
        }
    });
    let list = ["jobs", "list", "--admin", &url];
    assert_eq!(scheduler(&list).0, scheduler_cli::EXIT_FAILURE);
    // A refused token is a failure, not bad usage.
    let show = ["jobs", "show", "j", "--admin", &url];
    assert_eq!(scheduler(&show).0, scheduler_cli::EXIT_FAILURE);
    let unreachable = ["jobs", "list", "--admin", "http://127.0.0.1:1"];
    assert_eq!(scheduler(&unreachable).0, scheduler_cli::EXIT_FAILURE);
    // A node that answers something else (another version).
    let (url, _) = canned_api(|_| (200, r#"{"jobs":"?"}"#.into()));
    assert_eq!(
        scheduler(&["jobs", "list", "--admin", &url]).0,
        scheduler_cli::EXIT_FAILURE
    );
}
