//! `scheduler node` with bad settings or unreachable services: it exits with one clear error
//! line on stderr, never a panic and never a hang.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The stack's CQL contact point (for the case where only Kafka is unreachable).
fn cql_contact_point() -> String {
    std::env::var("SCHEDULER_CQL_CONTACT_POINT").unwrap_or_else(|_| "127.0.0.1:19042".into())
}

/// Runs `scheduler node` with `env`; returns its output and how long it took.
fn node(env: &[(&str, &str)]) -> (Output, Duration) {
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .arg("node")
        .env_clear()
        .env("SCHEDULER__ADMIN__LISTEN", "127.0.0.1:0")
        .env("SCHEDULER__CASSANDRA__FETCH_SCHEMA_METADATA", "false")
        .env("SCHEDULER__CASSANDRA__AUTO_MIGRATE", "true")
        .envs(env.iter().copied())
        .output()
        .expect("run scheduler");
    (output, started.elapsed())
}

/// Drops the keyspace `0` names when dropped: the test ends, passed or failed.
struct DropKeyspace(String);

impl Drop for DropKeyspace {
    fn drop(&mut self) {
        let dropped = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
            .and_then(|runtime| {
                runtime.block_on(async {
                    let session = scylla::client::session_builder::SessionBuilder::new()
                        .known_node(cql_contact_point())
                        .fetch_schema_metadata(false)
                        .build()
                        .await
                        .map_err(|e| e.to_string())?;
                    session
                        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", self.0), &[])
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })
            });
        if let Err(e) = dropped {
            eprintln!("keyspace {} not dropped: {e}", self.0);
        }
    }
}

/// The one line the node printed, after checking it printed exactly one and did not panic.
fn one_line(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Progress lines (INFO, such as a schema migration) may come first; one error line ends it.
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("INFO"))
        .collect();
    assert_eq!(lines.len(), 1, "one error line, got: {stderr}");
    lines[0].to_string()
}

#[test]
fn bad_settings_name_the_key_and_exit_with_the_usage_code() {
    let (output, _) = node(&[("SCHEDULER__SCHEDULING__MAX_IN_FLIGHT_TASKS", "0")]);
    assert_eq!(output.status.code(), Some(2));
    let line = one_line(&output);
    assert!(line.contains("max_in_flight_tasks"), "{line}");
}

#[test]
fn an_unreachable_cassandra_fails_the_start_with_one_line() {
    let (output, took) = node(&[("SCHEDULER__CASSANDRA__CONTACT_POINTS", "127.0.0.1:1")]);
    assert_eq!(output.status.code(), Some(1));
    let line = one_line(&output);
    assert!(
        line.contains("cannot connect to Cassandra at 127.0.0.1:1"),
        "{line}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn an_unreachable_broker_fails_the_start_with_one_line() {
    let cql = cql_contact_point();
    let (output, took) = node(&[
        ("SCHEDULER__CASSANDRA__CONTACT_POINTS", cql.as_str()),
        ("SCHEDULER__KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1"),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let line = one_line(&output);
    assert!(line.contains("127.0.0.1:1"), "{line}");
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

/// Runs `scheduler migrate` with `env`.
fn migrate(env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .arg("migrate")
        .env_clear()
        .env("SCHEDULER__CASSANDRA__FETCH_SCHEMA_METADATA", "false")
        .envs(env.iter().copied())
        .output()
        .expect("run scheduler migrate")
}

#[test]
fn a_keyspace_without_the_schema_fails_the_start_with_one_line_until_migrate_runs() {
    let cql = cql_contact_point();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let keyspace = format!("cli_migrate_{nanos}");
    let _drop = DropKeyspace(keyspace.clone());
    let env = [
        ("SCHEDULER__CASSANDRA__CONTACT_POINTS", cql.as_str()),
        ("SCHEDULER__CASSANDRA__KEYSPACE", keyspace.as_str()),
    ];
    let (output, _) = node(&[
        env[0],
        env[1],
        ("SCHEDULER__CASSANDRA__AUTO_MIGRATE", "false"),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let line = one_line(&output);
    assert!(line.contains("run `scheduler migrate`"), "{line}");

    let first = migrate(&env);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let said = String::from_utf8_lossy(&first.stdout);
    assert!(said.contains("migrated from schema version 0 to"), "{said}");
    let again = migrate(&env);
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(said.contains("nothing to do"), "{said}");
}

#[test]
fn two_commands_for_one_task_type_are_refused_before_the_settings_are_read() {
    let output = Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .args(["node", "no-such-settings.toml"])
        .args(["--exec", "charge=./a.sh", "--exec", "charge=./b.sh"])
        .env_clear()
        .output()
        .expect("run scheduler node");
    assert_eq!(output.status.code(), Some(2));
    let line = one_line(&output);
    assert!(
        line.contains("--exec: task type charge is given two commands"),
        "{line}"
    );
}
