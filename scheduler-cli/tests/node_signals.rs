//! `scheduler node` against the dev stack, stopped as a service manager stops it (SIGTERM): it
//! drains, commits and leaves its group, says so line by line, exits 0, and writes plain text
//! (no colour escapes) when its stderr is not a terminal.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The stack's address for `key` (`SCHEDULER_KAFKA_BOOTSTRAP`, `SCHEDULER_CQL_CONTACT_POINT`),
/// as the it-tests read it, else the dev stack's default.
fn stack(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

/// A name of its own for this run's topic, group and keyspace.
fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}_{}_{nanos}", std::process::id())
}

/// Waits until `path`'s text contains `what` (or the process exited, or 90 s passed).
fn wait_for(path: &std::path::Path, what: &str, child: &mut std::process::Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(what) {
            return text;
        }
        let exited = child.try_wait().ok().flatten();
        assert!(
            exited.is_none() && Instant::now() < deadline,
            "no {what:?} (exited: {exited:?}); stderr:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn sigterm_drains_commits_leaves_the_group_and_says_so_in_plain_text() {
    let dir = std::env::temp_dir().join(unique("scheduler_node_signals"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let stderr_path = dir.join("stderr.log");
    let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .args(["node", "--exec", "true"])
        .env("SCHEDULER__ADMIN__LISTEN", "127.0.0.1:0")
        .env(
            "SCHEDULER__KAFKA__BOOTSTRAP_SERVERS",
            stack("SCHEDULER_KAFKA_BOOTSTRAP", "127.0.0.1:19092"),
        )
        .env(
            "SCHEDULER__CASSANDRA__CONTACT_POINTS",
            stack("SCHEDULER_CQL_CONTACT_POINT", "127.0.0.1:19042"),
        )
        .env("SCHEDULER__CASSANDRA__FETCH_SCHEMA_METADATA", "false")
        .env("SCHEDULER__CASSANDRA__AUTO_MIGRATE", "true")
        .env("SCHEDULER__CASSANDRA__KEYSPACE", unique("signals"))
        .env("SCHEDULER__KAFKA__TOPIC", unique("signals_topic"))
        .env("SCHEDULER__KAFKA__GROUP_ID", unique("signals_group"))
        .env("SCHEDULER__KAFKA__CREATE_TOPIC_PARTITIONS", "2")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("scheduler node starts");
    wait_for(&stderr_path, "node running", &mut child);
    // Owning its partitions: the drain has trees to stop.
    wait_for(&stderr_path, "partition claimed", &mut child);
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running 60 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{status:?}; stderr:\n{text}");
    for said in [
        "SIGTERM",
        "offsets committed",
        "partition trees drained",
        "left the consumer group",
        "scheduler: stopped",
    ] {
        assert!(text.contains(said), "no {said:?} in:\n{text}");
    }
    assert!(
        !text.contains('\u{1b}'),
        "colour escapes in a file:\n{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
