//! `suspend`, `resume` and `suspensions` against a canned admin API on loopback: what they ask,
//! what they print (a line, a table, `--json`), what they refuse before asking, and the exit code
//! each kind of answer gives. The it-tests run the endpoints against a real node.

mod common;

use common::{body, canned_api, query, scheduler};

const SUSPENDED: &str = r#"{"kind":"group","target":"recon/2026-05","since":"2026-11-22T09:00:00.000Z","reason":"bad input\nfile"}"#;

#[test]
fn suspend_posts_the_target_and_reason_and_prints_the_suspension() {
    let (url, received) = canned_api(|_| (201, SUSPENDED.to_string()));
    let (code, out) = scheduler(&[
        "suspend",
        "--admin",
        &url,
        "--token",
        "t0ken",
        "--group",
        "recon/2026-05",
        "--reason",
        "bad input\nfile",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "suspended group recon/2026-05 since 2026-11-22T09:00:00.000Z (reason: bad input file)\n"
    );
    let request = received.lock().expect("log")[0].clone();
    assert_eq!(request.line, "POST /api/v1/suspensions HTTP/1.1");
    assert!(
        request
            .headers
            .iter()
            .any(|h| h.eq_ignore_ascii_case("authorization: Bearer t0ken")),
        "{request:?}"
    );
    assert_eq!(
        body(&received, 0),
        serde_json::json!({"kind": "group", "target": "recon/2026-05", "reason": "bad input\nfile"})
    );

    // Each kind of target; no reason is left out of the body.
    for (flags, kind, target) in [
        (["--ordering-id", "customer 7"], "orderingId", "customer 7"),
        (["--task-type", "send-email"], "taskType", "send-email"),
        (["--type", "send-email"], "taskType", "send-email"),
    ] {
        let mut args = vec!["suspend", "--admin", url.as_str()];
        args.extend(flags);
        let (code, out) = scheduler(&args);
        assert_eq!(code, 0, "{flags:?}: {out}");
        let n = received.lock().expect("log").len() - 1;
        assert_eq!(
            body(&received, n),
            serde_json::json!({"kind": kind, "target": target}),
            "{flags:?}"
        );
    }

    // As JSON: the API's answer, keys sorted.
    let (code, out) = scheduler(&[
        "suspend",
        "--json",
        "--admin",
        &url,
        "--task-type",
        "send-email",
    ]);
    assert_eq!(code, 0, "{out}");
    let sorted: serde_json::Value = serde_json::from_str(SUSPENDED).expect("JSON");
    assert_eq!(out, format!("{sorted}\n"));
    assert!(out.starts_with(r#"{"kind":"group","reason":"#), "{out}");
}

#[test]
fn resume_deletes_by_kind_and_target_and_says_so() {
    let (url, received) = canned_api(|_| (204, String::new()));
    let (code, out) = scheduler(&["resume", "--admin", &url, "--group", "recon/2026 05&x"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, "resumed group recon/2026 05&x\n");
    let line = received.lock().expect("log")[0].line.clone();
    assert!(line.starts_with("DELETE /api/v1/suspensions?"), "{line}");
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    assert_eq!(
        query(&line),
        [pair("kind", "group"), pair("target", "recon/2026 05&x")]
    );

    let (code, out) = scheduler(&[
        "resume",
        "--json",
        "--admin",
        &url,
        "--ordering-id",
        "customer-7",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "{\"kind\":\"orderingId\",\"resumed\":true,\"target\":\"customer-7\"}\n"
    );
    assert_eq!(
        query(&received.lock().expect("log")[1].line),
        [pair("kind", "orderingId"), pair("target", "customer-7")]
    );
}

#[test]
fn suspensions_prints_a_row_per_suspension() {
    let answer = format!(
        r#"{{"suspensions":[{SUSPENDED},{{"kind":"orderingId","target":"customer-7","since":"2026-11-22T09:30:00.000Z","reason":null}}]}}"#
    );
    let listed = answer.clone();
    let (url, received) = canned_api(move |_| (200, listed.clone()));
    let (code, out) = scheduler(&["suspensions", "--admin", &url]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "KIND        TARGET                   SINCE                     REASON\n\
         group       recon/2026-05            2026-11-22T09:00:00.000Z  bad input file\n\
         orderingId  customer-7               2026-11-22T09:30:00.000Z  -\n"
    );
    assert_eq!(
        received.lock().expect("log")[0].line,
        "GET /api/v1/suspensions HTTP/1.1"
    );

    let (code, out) = scheduler(&["suspensions", "--json", "--admin", &url]);
    assert_eq!(code, 0, "{out}");
    let sorted: serde_json::Value = serde_json::from_str(&answer).expect("JSON");
    assert_eq!(out, format!("{sorted}\n"));

    let (url, _) = canned_api(|_| (200, r#"{"suspensions":[]}"#.to_string()));
    let (code, out) = scheduler(&["suspensions", "--admin", &url]);
    assert_eq!(
        (code, out.as_str()),
        (
            0,
            "KIND        TARGET                   SINCE                     REASON\n"
        )
    );
}

#[test]
fn a_target_is_one_flag_and_well_formed_or_refused_before_any_call() {
    let (url, received) = canned_api(|_| (201, SUSPENDED.to_string()));
    for command in ["suspend", "resume"] {
        for (flags, says) in [
            (&[][..], "required arguments were not provided"),
            (
                &["--task-type", "a", "--ordering-id", "o"][..],
                "cannot be used with",
            ),
            (&["--group", "recon"][..], ""),
            (&["--group", "recon/"][..], ""),
            (&["--group", "/2026-05"][..], ""),
            (&["--task-type", "send email"][..], ""),
            (&["--ordering-id", ""][..], ""),
        ] {
            let mut args = vec![command, "--admin", url.as_str()];
            args.extend(flags);
            let (code, out) = scheduler(&args);
            assert_eq!(
                code,
                scheduler_cli::EXIT_USAGE,
                "{command} {flags:?}: {out}"
            );
            // clap's errors are printed; the command's own go to stderr.
            assert!(out.contains(says), "{command} {flags:?}: {out}");
        }
    }
    assert!(received.lock().expect("log").is_empty());
}

#[test]
fn error_answers_give_the_exit_codes_of_the_other_commands() {
    let (url, _) = canned_api(|line| match line.split_whitespace().next() {
        Some("POST") => (
            400,
            r#"{"error":"a group's target is <type>/<id>, not \"x\""}"#.into(),
        ),
        Some("DELETE") => (401, r#"{"error":"missing or wrong bearer token"}"#.into()),
        _ => (503, r#"{"error":"Cassandra down"}"#.into()),
    });
    let suspend = ["suspend", "--admin", &url, "--task-type", "t"];
    assert_eq!(scheduler(&suspend).0, scheduler_cli::EXIT_USAGE);
    // A refused token is a failure, not bad usage.
    let resume = ["resume", "--admin", &url, "--task-type", "t"];
    assert_eq!(scheduler(&resume).0, scheduler_cli::EXIT_FAILURE);
    let list = ["suspensions", "--admin", &url];
    assert_eq!(scheduler(&list).0, scheduler_cli::EXIT_FAILURE);

    // The message on stderr is the API's.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .args(suspend)
        .env_remove("RUST_LOG")
        .output()
        .expect("run scheduler");
    assert_eq!(output.status.code(), Some(scheduler_cli::EXIT_USAGE));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "scheduler: 400: a group's target is <type>/<id>, not \"x\"\n"
    );
    let unreachable = ["suspensions", "--admin", "http://127.0.0.1:1"];
    assert_eq!(scheduler(&unreachable).0, scheduler_cli::EXIT_FAILURE);
}
