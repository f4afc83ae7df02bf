//! The `scheduler` command end to end against a real node: schedule → get → list → cancel → get,
//! with the exit codes scripts rely on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use it_tests::engine::{Recorder, TestEnv};
use serde_json::Value;

/// Runs the CLI with `args` on its own thread (it starts its own runtime); returns the exit code
/// and what it printed.
async fn scheduler(args: &[&str]) -> (i32, String) {
    let mut argv = vec!["scheduler".to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    tokio::task::spawn_blocking(move || {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let code = scheduler_cli::run(argv, &mut out);
            (code, String::from_utf8_lossy(&out).to_string())
        })
        .join()
        .expect("the CLI does not panic")
    })
    .await
    .expect("CLI thread")
}

fn json(output: &str) -> Value {
    serde_json::from_str(output.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {output}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_get_list_cancel_get_through_the_cli() {
    let env = TestEnv::new("it_cli", 4).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = env
        .start_sole_node(
            env.settings(TestEnv::quick_scheduling()),
            Recorder::new("n1", &log, Duration::ZERO),
        )
        .await;
    let admin = format!("http://{}", node.admin_address().expect("admin API"));
    let kafka = [
        "--bootstrap",
        env.stack.kafka_bootstrap.as_str(),
        "--topic",
        env.topic.as_str(),
    ];

    // schedule
    let mut args = vec!["schedule", "--json"];
    args.extend(kafka);
    args.extend([
        "--ordering-id",
        "cli-order",
        "--in",
        "60s",
        "--unique",
        "u1",
        "--data",
        r#"{"a":1}"#,
    ]);
    let (code, out) = scheduler(&args).await;
    assert_eq!(code, 0, "{out}");
    let at = json(&out)["scheduled"][0]["scheduledTime"]
        .as_str()
        .expect("scheduled time")
        .to_string();
    let key = [
        "--ordering-id",
        "cli-order",
        "--at",
        at.as_str(),
        "--unique",
        "u1",
    ];

    // get (pending), once the node has persisted it
    let mut got = (0, String::new());
    for _ in 0..100 {
        let mut args = vec!["get", "--admin", admin.as_str()];
        args.extend(key);
        got = scheduler(&args).await;
        if got.0 == 0 {
            break;
        }
        assert_eq!(got.0, 3, "not found until persisted: {}", got.1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(got.0, 0, "{}", got.1);
    assert!(got.1.contains("status      pending"), "{}", got.1);
    assert!(got.1.contains(r#"{"a":1}"#), "{}", got.1);

    // list
    let from = (chrono::DateTime::parse_from_rfc3339(&at).expect("time")
        - chrono::TimeDelta::seconds(1))
    .to_rfc3339();
    let to = (chrono::DateTime::parse_from_rfc3339(&at).expect("time")
        + chrono::TimeDelta::seconds(1))
    .to_rfc3339();
    let (code, out) = scheduler(&[
        "list", "--admin", &admin, "--from", &from, "--to", &to, "--all", "--json",
    ])
    .await;
    assert_eq!(code, 0, "{out}");
    let listed = json(&out);
    assert_eq!(listed["tasks"].as_array().map(Vec::len), Some(1), "{out}");
    assert_eq!(listed["tasks"][0]["uniquenessKey"], "u1");
    let (code, table) = scheduler(&["list", "--admin", &admin, "--from", &from, "--to", &to]).await;
    assert_eq!(code, 0);
    assert!(
        table.starts_with("SCHEDULED") && table.contains("cli-order"),
        "{table}"
    );

    // cancel, then get reads cancelled
    let mut args = vec!["cancel", "--admin", admin.as_str()];
    args.extend(key);
    let (code, out) = scheduler(&args).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("cancellation enqueued"), "{out}");
    let mut status = String::new();
    for _ in 0..100 {
        let mut args = vec!["get", "--json", "--admin", admin.as_str()];
        args.extend(key);
        let (code, out) = scheduler(&args).await;
        assert_eq!(code, 0, "{out}");
        status = json(&out)["status"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if status == "cancelled" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, "cancelled");

    // status, not found, bad input
    let (code, out) = scheduler(&["status", "--json", "--admin", &admin]).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        json(&out)["ownedPartitions"],
        serde_json::json!([0, 1, 2, 3])
    );
    let node_id = json(&out)["nodeId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (code, out) = scheduler(&["partitions", "--admin", &admin]).await;
    assert_eq!(code, 0, "{out}");
    let rows: Vec<Vec<&str>> = (out.lines().skip(1).take(4))
        .map(|l| l.split_whitespace().take(3).collect())
        .collect();
    let expected: Vec<Vec<&str>> = (0..4)
        .map(|p| vec![["0", "1", "2", "3"][p], node_id.as_str(), "*"])
        .collect();
    assert_eq!(rows, expected, "every partition run by the node: {out}");
    let (code, _) = scheduler(&[
        "get",
        "--admin",
        &admin,
        "--ordering-id",
        "nobody",
        "--at",
        &at,
        "--unique",
        "u1",
    ])
    .await;
    assert_eq!(code, scheduler_cli::EXIT_NOT_FOUND);
    let (code, _) = scheduler(&[
        "get",
        "--admin",
        &admin,
        "--ordering-id",
        "x",
        "--at",
        "noon",
        "--unique",
        "u",
    ])
    .await;
    assert_eq!(code, scheduler_cli::EXIT_USAGE);
    let (code, _) = scheduler(&["schedule", "--ordering-id", "x"]).await;
    assert_eq!(code, scheduler_cli::EXIT_USAGE, "--unique is required");

    // schedule from a file of wire-format records
    let file = std::env::temp_dir().join(format!("{}.json", env.topic));
    let records = serde_json::json!([
        {"version": 1, "orderingId": "cli-file", "scheduledTime": at, "uniquenessKey": "f1", "taskData": {}},
        {"version": 1, "orderingId": "cli-file", "scheduledTime": at, "uniquenessKey": "f2"}
    ]);
    std::fs::write(&file, records.to_string()).expect("write the file");
    let mut args = vec!["schedule", "--file", file.to_str().expect("utf-8 path")];
    args.extend(kafka);
    let (code, out) = scheduler(&args).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("scheduled cli-file/"))
            .count(),
        2,
        "{out}"
    );
    let _ = std::fs::remove_file(file);
    node.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_redriven_and_purged_through_the_cli() {
    let env = TestEnv::new("it_cli_dead", 2).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let fixed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fixed_in = Arc::clone(&fixed);
    let recorder = Recorder::new("n1", &log, Duration::ZERO).with_behaviour(Arc::new(
        move |task, _| match task.ordering_id.starts_with("bad") {
            true if !fixed_in.load(std::sync::atomic::Ordering::SeqCst) => {
                Err(scheduler_core::TaskError::invalid("bad payload"))
            }
            _ => Ok(()),
        },
    ));
    let node = env
        .start_sole_node(env.settings(TestEnv::quick_scheduling()), recorder)
        .await;
    let admin = format!("http://{}", node.admin_address().expect("admin API"));
    let producer = env.scheduler(Duration::from_secs(10));
    for o in ["bad-1", "bad-2"] {
        let task = it_tests::engine::task(o, chrono::Utc::now(), "u").of_type("charge");
        producer.schedule_task(task).await.expect("scheduled");
    }
    let mut listed = Value::Null;
    for _ in 0..100 {
        let (code, out) = scheduler(&[
            "dead-letters",
            "list",
            "--admin",
            &admin,
            "--type",
            "charge",
            "--json",
        ])
        .await;
        assert_eq!(code, 0, "{out}");
        listed = json(&out);
        if listed["deadLetters"].as_array().map(Vec::len) == Some(2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        listed["deadLetters"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    assert_eq!(listed["deadLetters"][0]["reason"], "invalid");
    let (code, table) = scheduler(&["dead-letters", "list", "--admin", &admin]).await;
    assert_eq!(code, 0, "{table}");
    assert!(
        table.contains("bad-1") && table.contains("bad payload"),
        "{table}"
    );

    fixed.store(true, std::sync::atomic::Ordering::SeqCst);
    let (code, out) = scheduler(&["dead-letters", "redrive", "--admin", &admin, "--all"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("redriven 2 dead letters"), "{out}");
    it_tests::engine::wait_until(Duration::from_secs(20), "the redriven tasks to run", || {
        it_tests::engine::executions(&log).len() == 4
    })
    .await;
    let (code, out) = scheduler(&[
        "dead-letters",
        "purge",
        "--admin",
        &admin,
        "--all",
        "--json",
    ])
    .await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(json(&out)["purged"], 2);
    let (code, out) = scheduler(&[
        "dead-letters",
        "list",
        "--admin",
        &admin,
        "--include-redriven",
        "--json",
    ])
    .await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(json(&out)["deadLetters"], serde_json::json!([]));
    node.shutdown().await.expect("shutdown");
}
