//! The admin API's OpenAPI document (`GET /api/v1/openapi.json`) against a node on the real
//! stack, by schemathesis: property-based requests generated from the document, valid and
//! invalid, each answer checked against it (no server error; a documented status, content type,
//! headers and schema; invalid input refused; a method a path does not take answered 405 with
//! `Allow`; a request without the token answered 401). `dev/python schemathesis` installs the
//! pinned version first (idempotent); a failed install, a service that cannot be reached, or any
//! check failing fails the test, with schemathesis' report.
//!
//! Bounded: a fixed seed and number of examples per operation, one node of 2 partitions on
//! 127.0.0.1, and a deadline past which the run is ended and the test fails. Run it alone with
//! `cargo nextest run -p it-tests --test openapi_contract` (another seed:
//! `SCHEMATHESIS_SEED=<n>`); schemathesis' whole output is in
//! `target/openapi-contract/schemathesis.log`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use it_tests::engine::{http, Recorder, TestEnv};
use it_tests::python::{install_schemathesis, repo};

/// The node's admin token: the run sends it, and checks that requests without it get 401.
const TOKEN: &str = "contract-test-token";
/// The generator's seed: the same requests every run (`SCHEMATHESIS_SEED` to try another).
const SEED: &str = "20261122";
/// Examples per operation in the generated phases.
const EXAMPLES_PER_OPERATION: &str = "10";
/// Past this the run is ended and the test fails (it takes about a minute).
const DEADLINE: Duration = Duration::from_secs(240);

/// What schemathesis checks on every answer. Not `positive_data_acceptance`: the API refuses
/// some requests the document cannot tell from good ones (a task due in the past, a window
/// over 31 days, a 10,001st limit override), with a documented 400.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
response_headers_conformance,response_schema_conformance,negative_data_rejection,\
missing_required_header,unsupported_method,allow_header_conformance,ignored_auth";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_the_node_true_to_its_openapi_document() {
    let python = install_schemathesis();
    let env = TestEnv::new("it_openapi", 2).await;
    let mut settings = env.settings(TestEnv::quick_scheduling());
    settings.admin.token = Some(TOKEN.to_string());
    // A worker's poll waits at most this (schemathesis polls as a worker).
    settings.workers.max_wait = Duration::from_millis(500);
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = env
        .start_sole_node(settings, Recorder::new("n1", &log, Duration::ZERO))
        .await;
    let addr = node.admin_address().expect("admin API enabled");
    let document = http(addr, "GET", "/api/v1/openapi.json", Some(TOKEN), None).await;
    assert_eq!(document.status, 200, "{}", document.body);

    let base = format!("http://{addr}");
    let started = Instant::now();
    let (status, report) = tokio::task::spawn_blocking(move || run_schemathesis(&python, &base))
        .await
        .expect("the run's thread");
    println!(
        "schemathesis ran for {:.1} s ({status}):\n{report}",
        started.elapsed().as_secs_f64()
    );
    node.shutdown().await.expect("node stops");
    assert!(
        status.success(),
        "schemathesis found the node untrue to its OpenAPI document ({status}); its report is above"
    );
}

/// Runs schemathesis against the node at `base` (127.0.0.1 only), ending it at [`DEADLINE`];
/// its exit status and everything it printed.
fn run_schemathesis(python: &Path, base: &str) -> (ExitStatus, String) {
    let dir = repo().join("target/openapi-contract");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let output = dir.join("schemathesis.log");
    let file = std::fs::File::create(&output)
        .unwrap_or_else(|e| panic!("creating {}: {e}", output.display()));
    let errors = file.try_clone().expect("a second handle on the log");
    let mut child = Command::new(python)
        .args(["-m", "schemathesis.cli", "run"])
        .arg(format!("{base}/api/v1/openapi.json"))
        .args(["--url", base])
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--checks", CHECKS])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        .args(["--max-examples", EXAMPLES_PER_OPERATION])
        .args([
            "--seed",
            &std::env::var("SCHEMATHESIS_SEED").unwrap_or(SEED.into()),
        ])
        // One worker: CPython 3.11 before 3.11.8 can fail parsing in two threads at once
        // ("AST constructor recursion depth mismatch", in hypothesis).
        .args(["--workers", "1"])
        .args(["--request-timeout", "10"])
        .args(["--generation-database", "none"])
        .arg("--no-color")
        // Nowhere but the node: no proxy from the environment.
        .env("NO_PROXY", "*")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(errors)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run schemathesis ({}): {e}", python.display()));
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "schemathesis ran past {DEADLINE:?} and was ended: {}",
                    read(&output)
                );
            }
            Err(e) => panic!("waiting for schemathesis: {e}"),
        }
    };
    (status, read(&output))
}

fn read(path: &PathBuf) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("({}: {e})", path.display()))
}
