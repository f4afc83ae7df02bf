//! `schedule`: tasks from flags or from a file of wire-format records, written to the topic.

use std::io::Write;
use std::path::PathBuf;

use chrono::Utc;
use scheduler_client::{
    wire, OnConflict, ScheduleError, Scheduler, SchedulerConfig, Task, TaskData,
};
use scheduler_core::settings::duration_text;
use serde_json::Value;

use super::{parse_delay, parse_duration, parse_time, runtime};
use crate::args::{ConflictMode, ScheduleArgs};
use crate::output::{io_failure, Failure, Outcome};

pub(crate) fn schedule(args: ScheduleArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let grace = parse_duration(&args.grace, "--grace")?;
    let timeout = parse_duration(&args.timeout, "--timeout")?;
    let tasks = match &args.file {
        Some(path) => tasks_from_file(path)?,
        None => vec![task_from_flags(&args)?],
    };
    // The client's own checks (the node decoder's), before a producer exists: bad input is
    // refused whatever Kafka's state, and a file with a bad record is refused whole, not half
    // sent. `schedule_task` checks each task again when it sends it.
    let now = Utc::now();
    for task in &tasks {
        scheduler_client::validate(task, now, grace).map_err(|e| schedule_failure(task, &e))?;
    }
    let mut config = SchedulerConfig::new(args.kafka.bootstrap.clone(), args.kafka.topic.clone());
    config.scheduling_grace_window = grace;
    config.delivery_timeout = timeout;
    let scheduler = Scheduler::new(config).map_err(|e| Failure::service(e.to_string()))?;
    let runtime = runtime()?;
    for task in &tasks {
        runtime
            .block_on(scheduler.schedule_task(task.clone()))
            .map_err(|e| match e.is_rejection() {
                true => schedule_failure(task, &e),
                false => Failure::service(format!(
                    "{}: not scheduled: {e} (the broker at {}, within {}: is it reachable? --bootstrap or SCHEDULER_KAFKA_BOOTSTRAP)",
                    task.key(),
                    args.kafka.bootstrap,
                    args.timeout
                )),
            })?;
    }
    print_scheduled(&tasks, json, out)
}

/// Why `task` was not scheduled, with the exit code of a rejection (the caller's to fix) or of
/// a failure (Kafka's).
fn schedule_failure(task: &Task, e: &ScheduleError) -> Failure {
    let message = format!("{}: {e}", task.key());
    if e.is_rejection() {
        Failure::usage(message)
    } else {
        Failure::service(message)
    }
}

/// The scheduled tasks: a line each, or with `--json` `{"scheduled": [...]}` with the wire
/// format's field names.
fn print_scheduled(tasks: &[Task], json: bool, out: &mut dyn Write) -> Outcome {
    if json {
        let scheduled: Vec<Value> = tasks
            .iter()
            .map(|t| {
                let max_wait = t.on_conflict.and_then(OnConflict::max_wait);
                serde_json::json!({
                    "orderingId": t.ordering_id,
                    "scheduledTime": wire::format_time(t.scheduled_time),
                    "uniquenessKey": t.uniqueness_key,
                    "taskType": t.task_type,
                    "priority": t.priority,
                    "onConflict": t.on_conflict.map(OnConflict::as_str),
                    "maxWaitMs": max_wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
                    "limitKey": t.limit_key,
                })
            })
            .collect();
        return writeln!(out, "{}", serde_json::json!({ "scheduled": scheduled }))
            .map_err(io_failure);
    }
    for task in tasks {
        writeln!(out, "scheduled {} ({})", task.key(), details(task)).map_err(io_failure)?;
    }
    Ok(())
}

/// A task's type, priority, limit key and conflict mode, as a table line shows them (the mode spelled as
/// `--on-conflict` takes it).
fn details(task: &Task) -> String {
    let mut text = format!("type {}, priority {}", task.task_type, task.priority);
    if let Some(key) = &task.limit_key {
        text.push_str(&format!(", limit key {key}"));
    }
    let mode = match task.on_conflict {
        None => return text,
        Some(OnConflict::Replace) => "replace".to_string(),
        Some(OnConflict::KeepTime) => "keep-time".to_string(),
        Some(OnConflict::IfAbsent) => "if-absent".to_string(),
        Some(OnConflict::Debounce { max_wait }) => {
            format!("debounce, max wait {}", duration_text::format(max_wait))
        }
    };
    text.push_str(", on conflict ");
    text.push_str(&mode);
    text
}

fn task_from_flags(args: &ScheduleArgs) -> Result<Task, Failure> {
    let ordering_id = args.ordering_id.clone().unwrap_or_default();
    let unique = args.unique.clone().unwrap_or_default();
    let at = match (&args.at, &args.delay) {
        (Some(at), _) => parse_time(at, "--at")?,
        (None, Some(delay)) => parse_delay(delay, "--in")?,
        (None, None) => Utc::now(),
    };
    let data: TaskData = match &args.data {
        Some(text) => serde_json::from_str(text)
            .map_err(|e| Failure::usage(format!("--data must be a JSON object: {e}")))?,
        None => TaskData::new(),
    };
    // The wire format's check (also the client's), here to name the flag.
    wire::check_task_type(&args.task_type).map_err(|e| Failure::usage(format!("--type: {e}")))?;
    wire::check_limit_key(args.limit_key.as_deref())
        .map_err(|e| Failure::usage(format!("--limit-key: {e}")))?;
    let mut task = Task::new(ordering_id, at, unique, data)
        .of_type(args.task_type.clone())
        .with_priority(args.priority);
    task.limit_key = args.limit_key.clone();
    Ok(
        match conflict_mode(args.on_conflict, args.max_wait.as_deref())? {
            Some(mode) => task.on_conflict(mode),
            None => task,
        },
    )
}

/// `--on-conflict` and `--max-wait` as the client's mode: the wait goes with debounce, and
/// only with it.
fn conflict_mode(
    mode: Option<ConflictMode>,
    max_wait: Option<&str>,
) -> Result<Option<OnConflict>, Failure> {
    let mode =
        match (mode, max_wait) {
            (None, None) => return Ok(None),
            (Some(ConflictMode::Debounce), Some(wait)) => OnConflict::Debounce {
                max_wait: parse_duration(wait, "--max-wait")?,
            },
            (Some(ConflictMode::Debounce), None) => return Err(Failure::usage(
                "--on-conflict debounce needs --max-wait: how far the first pending time may be \
                 pushed back (500ms, 10s, 5m, 2h)",
            )),
            (_, Some(_)) => {
                return Err(Failure::usage(
                    "--max-wait goes with --on-conflict debounce only",
                ))
            }
            (Some(ConflictMode::Replace), None) => OnConflict::Replace,
            (Some(ConflictMode::KeepTime), None) => OnConflict::KeepTime,
            (Some(ConflictMode::IfAbsent), None) => OnConflict::IfAbsent,
        };
    Ok(Some(mode))
}

fn tasks_from_file(path: &PathBuf) -> Result<Vec<Task>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::usage(format!("{} is not JSON: {e}", path.display())))?;
    let records = match value {
        Value::Array(items) => items,
        one => vec![one],
    };
    records
        .into_iter()
        .enumerate()
        .map(|(i, record)| {
            let bytes = record.to_string().into_bytes();
            wire::decode(Some(&bytes), usize::MAX)
                .map_err(|e| Failure::usage(format!("{} record {i}: {e}", path.display())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::*;
    use crate::args::{Cli, Command};
    use crate::output::EXIT_USAGE;

    /// The task `schedule` would send for `flags` (after `--ordering-id o --unique u --at ...`).
    fn task(flags: &[&str]) -> Result<Task, Failure> {
        let mut argv = vec![
            "scheduler",
            "schedule",
            "--ordering-id",
            "o",
            "--unique",
            "u",
            "--at",
            "2026-11-22T09:00:00Z",
        ];
        argv.extend(flags);
        let cli = Cli::try_parse_from(argv).map_err(|e| Failure::usage(e.to_string()))?;
        match cli.command {
            Command::Schedule(args) => task_from_flags(&args),
            _ => Err(Failure::usage("not schedule")),
        }
    }

    fn sent(flags: &[&str]) -> Task {
        match task(flags) {
            Ok(task) => task,
            Err(f) => panic!("{flags:?} refused: {}", f.message),
        }
    }

    fn refusal(flags: &[&str]) -> String {
        match task(flags) {
            Ok(task) => panic!("{flags:?} accepted: {task:?}"),
            Err(f) => {
                assert_eq!(f.code, EXIT_USAGE, "{flags:?}: {}", f.message);
                f.message
            }
        }
    }

    #[test]
    fn the_python_producers_flag_names_are_read_too() {
        let argv = [
            "scheduler",
            "schedule",
            "--ordering-id",
            "o",
            "--unique-key",
            "k",
            "--in",
            "1m",
        ];
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string());
        match cli.map(|c| c.command) {
            Ok(Command::Schedule(args)) => assert_eq!(args.unique.as_deref(), Some("k")),
            Ok(_) => panic!("not schedule"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn type_priority_and_conflict_flags_make_the_task() {
        let plain = sent(&[]);
        assert_eq!(
            (plain.task_type.as_str(), plain.priority, plain.on_conflict),
            ("default", 0, None)
        );
        let typed = sent(&["--type", "send-email", "--priority", "-3"]);
        assert_eq!(
            (typed.task_type.as_str(), typed.priority),
            ("send-email", -3)
        );
        assert_eq!(plain.limit_key, None);
        let limited = sent(&["--limit-key", "tenant-7"]);
        assert_eq!(limited.limit_key.as_deref(), Some("tenant-7"));
        for (flag, mode) in [
            ("replace", OnConflict::Replace),
            ("keep-time", OnConflict::KeepTime),
            ("if-absent", OnConflict::IfAbsent),
            // The wire's spellings (the Python producer's and HTTP's) are read too.
            ("keepTime", OnConflict::KeepTime),
            ("ifAbsent", OnConflict::IfAbsent),
        ] {
            assert_eq!(sent(&["--on-conflict", flag]).on_conflict, Some(mode));
        }
        let debounced = sent(&["--on-conflict", "debounce", "--max-wait", "5m"]);
        assert_eq!(
            debounced.on_conflict,
            Some(OnConflict::Debounce {
                max_wait: Duration::from_secs(300)
            })
        );
    }

    #[test]
    fn bad_type_priority_and_conflict_flags_are_refused() {
        assert!(refusal(&["--type", "send email"]).starts_with("--type: taskType"));
        assert!(refusal(&["--type", ""]).starts_with("--type: taskType"));
        let long = "k".repeat(257);
        assert_eq!(
            refusal(&["--limit-key", &long]),
            "--limit-key: limitKey is 257 bytes, not 1 to 256"
        );
        assert!(refusal(&["--on-conflict", "debounce"]).contains("needs --max-wait"));
        for flags in [
            &["--max-wait", "5m"][..],
            &["--on-conflict", "replace", "--max-wait", "5m"],
            &["--on-conflict", "if-absent", "--max-wait", "5m"],
        ] {
            assert!(refusal(flags).contains("debounce only"), "{flags:?}");
        }
        assert!(
            refusal(&["--on-conflict", "debounce", "--max-wait", "soon"])
                .starts_with("--max-wait: duration \"soon\"")
        );
        // clap's own refusals.
        refusal(&["--on-conflict", "keep_time"]);
        refusal(&["--priority", "2147483648"]);
        refusal(&["--priority", "high"]);
    }

    #[test]
    fn scheduled_tasks_print_with_their_type_priority_and_conflict_mode() {
        let tasks = [
            sent(&[]),
            sent(&[
                "--type",
                "sync",
                "--priority",
                "5",
                "--on-conflict",
                "debounce",
                "--max-wait",
                "90s",
            ]),
            sent(&["--on-conflict", "keep-time", "--limit-key", "tenant-7"]),
        ];
        let mut out = Vec::new();
        assert!(print_scheduled(&tasks, false, &mut out).is_ok());
        assert_eq!(
            String::from_utf8_lossy(&out),
            "scheduled o/2026-11-22T09:00:00.000Z/u (type default, priority 0)\n\
             scheduled o/2026-11-22T09:00:00.000Z/u (type sync, priority 5, on conflict debounce, max wait 1m 30s)\n\
             scheduled o/2026-11-22T09:00:00.000Z/u (type default, priority 0, limit key tenant-7, on conflict keep-time)\n"
        );
        let mut out = Vec::new();
        assert!(print_scheduled(&tasks[..2], true, &mut out).is_ok());
        assert_eq!(
            String::from_utf8_lossy(&out),
            "{\"scheduled\":[\
             {\"limitKey\":null,\"maxWaitMs\":null,\"onConflict\":null,\"orderingId\":\"o\",\"priority\":0,\
             \"scheduledTime\":\"2026-11-22T09:00:00.000Z\",\"taskType\":\"default\",\"uniquenessKey\":\"u\"},\
             {\"limitKey\":null,\"maxWaitMs\":90000,\"onConflict\":\"debounce\",\"orderingId\":\"o\",\"priority\":5,\
             \"scheduledTime\":\"2026-11-22T09:00:00.000Z\",\"taskType\":\"sync\",\"uniquenessKey\":\"u\"}]}\n"
        );
    }
}
