//! `scheduler schedule` refuses bad `--type`, `--priority`, `--on-conflict`, `--max-wait` and
//! `--limit-key` flags with the usage exit code and one line saying why, before it talks to
//! Kafka (none listens at the bootstrap address these tests give). What good flags send is
//! tested beside the command (`commands::schedule`), and end to end by the it-tests.

use std::process::Command;

/// Runs `scheduler schedule` for a task with `flags`, against a Kafka that is not there;
/// returns the exit code and what it printed (clap's refusals go to stdout, the command's to
/// stderr).
fn schedule(flags: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .args([
            "schedule",
            "--bootstrap",
            "127.0.0.1:1",
            "--ordering-id",
            "o",
            "--unique",
            "u",
        ])
        .args(flags)
        .env_remove("RUST_LOG")
        .output()
        .expect("run scheduler");
    let printed = [output.stdout, output.stderr].concat();
    (
        output.status.code(),
        String::from_utf8_lossy(&printed).to_string(),
    )
}

#[test]
fn bad_type_priority_and_conflict_flags_exit_with_the_usage_code_and_say_why() {
    for (flags, says) in [
        (
            &["--type", "send email"][..],
            "--type: taskType \"send email\"",
        ),
        (
            &["--on-conflict", "debounce"],
            "--on-conflict debounce needs --max-wait",
        ),
        (
            &["--max-wait", "5m"],
            "--max-wait goes with --on-conflict debounce only",
        ),
        (
            &["--on-conflict", "replace", "--max-wait", "5m"],
            "--max-wait goes with --on-conflict debounce only",
        ),
        (
            &["--on-conflict", "debounce", "--max-wait", "5M"],
            "--max-wait: duration \"5M\": months and years",
        ),
        (&["--on-conflict", "sometimes"], "invalid value 'sometimes'"),
        (&["--priority", "1e3"], "invalid value '1e3'"),
        (&["--in", "soon"], "--in: duration \"soon\""),
        (
            &["--limit-key", ""],
            "--limit-key: limitKey is 0 bytes, not 1 to 256",
        ),
    ] {
        let (code, printed) = schedule(flags);
        assert_eq!(
            code,
            Some(scheduler_cli::EXIT_USAGE),
            "{flags:?}: {printed}"
        );
        assert!(printed.contains(says), "{flags:?}: {printed}");
        assert!(!printed.contains("panicked"), "{printed}");
    }
}

#[test]
fn a_file_brings_its_own_type_priority_and_conflict_mode() {
    for flags in [
        &["--type", "sync"][..],
        &["--priority", "1"],
        &["--on-conflict", "replace"],
        &["--max-wait", "1m"],
        &["--limit-key", "tenant"],
    ] {
        let mut args = vec!["--bootstrap", "127.0.0.1:1", "--file", "tasks.json"];
        args.extend(flags);
        let output = Command::new(env!("CARGO_BIN_EXE_scheduler"))
            .arg("schedule")
            .args(&args)
            .output()
            .expect("run scheduler");
        assert_eq!(
            output.status.code(),
            Some(scheduler_cli::EXIT_USAGE),
            "{flags:?}: {output:?}"
        );
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("cannot be used with"),
            "{output:?}"
        );
    }
    // The flags' defaults do not count as given.
    let output = Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .args([
            "schedule",
            "--bootstrap",
            "127.0.0.1:1",
            "--file",
            "no-such-tasks.json",
        ])
        .output()
        .expect("run scheduler");
    assert_eq!(output.status.code(), Some(scheduler_cli::EXIT_USAGE));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("cannot read no-such-tasks.json"),
        "{output:?}"
    );
}

#[test]
fn schedule_with_the_broker_down_prints_one_line_that_names_the_broker() {
    // Nothing listens on port 9 (discard) here: the broker is down.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .args([
            "schedule",
            "--bootstrap",
            "127.0.0.1:9",
            "--ordering-id",
            "o1",
            "--in",
            "1m",
            "--unique",
            "u1",
            "--timeout",
            "2s",
        ])
        .env_remove("RUST_LOG")
        .env_remove("SCHEDULER_KAFKA_BOOTSTRAP")
        .output()
        .expect("run scheduler");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(scheduler_cli::EXIT_FAILURE),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("not scheduled") && stderr.contains("the broker at 127.0.0.1:9, within 2s"),
        "{stderr}"
    );
}
