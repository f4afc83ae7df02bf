//! The `node` command's executors: one that prints each task, and one that pipes each task
//! into a shell command whose exit status decides the task's fate.

use scheduler_client::{wire, Task};
use scheduler_core::{TaskContext, TaskError, TaskHandler};
use serde_json::Value;

/// `EX_DATAERR`: the command says the task is invalid; it is not retried.
pub(super) const EXIT_INVALID: i32 = 65;

/// Prints each task: a node without `--exec`.
pub(super) struct PrintingExecutor;

impl TaskHandler for PrintingExecutor {
    async fn execute(&self, task: &Task, _ctx: &TaskContext) -> Result<(), TaskError> {
        println!(
            "ran {} data {}",
            task.key(),
            Value::Object(task.task_data.clone())
        );
        Ok(())
    }
}

/// Runs `sh -c command` per task, with the task's wire-format JSON on stdin and its key, type,
/// priority, attempt, partition and fencing epoch in `SCHEDULER_*` variables. Exit 0: done;
/// [`EXIT_INVALID`]: invalid; anything else: retried. Each line the command writes to stderr
/// goes to the node's log with the task's key, and the last lines are in the attempt's error.
pub(super) struct CommandExecutor {
    pub(super) command: String,
}

/// How much of the end of a command's stderr an attempt's error keeps.
const STDERR_TAIL_BYTES: usize = 1_024;

impl TaskHandler for CommandExecutor {
    async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        let command = &self.command;
        let key = task.key().to_string();
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .env("SCHEDULER_TASK_KEY", &key)
            .env("SCHEDULER_TASK_TYPE", &task.task_type)
            .env("SCHEDULER_PRIORITY", task.priority.to_string())
            .env("SCHEDULER_ORDERING_ID", &task.ordering_id)
            .env(
                "SCHEDULER_SCHEDULED_TIME",
                wire::format_time(task.scheduled_time),
            )
            .env("SCHEDULER_UNIQUENESS_KEY", &task.uniqueness_key)
            .env("SCHEDULER_ATTEMPT", ctx.attempt().to_string())
            .env("SCHEDULER_PARTITION", ctx.partition().to_string())
            .env("SCHEDULER_EPOCH", ctx.epoch().to_string())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| TaskError::retry(format!("cannot start {command:?}: {e}")))?;
        let stderr = child
            .stderr
            .take()
            .map(|err| relay_stderr(err, key.clone()));
        if let Some(mut stdin) = child.stdin.take() {
            use tokio::io::AsyncWriteExt;
            match stdin.write_all(&wire::encode(task)).await {
                // A command that does not read its input closes the pipe: its exit status
                // decides, not the write.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                Err(e) => {
                    return Err(TaskError::retry(format!(
                        "cannot write the task to {command:?}: {e}"
                    )))
                }
                Ok(()) => {}
            }
        }
        let status = child
            .wait()
            .await
            .map_err(|e| TaskError::retry(format!("{command:?} failed: {e}")))?;
        let tail = match stderr {
            Some(relay) => relay.await.unwrap_or_default(),
            None => String::new(),
        };
        let ended = |how: String| match tail.trim_end() {
            "" => format!("{command:?} {how}"),
            tail => format!("{command:?} {how}; stderr ends: {tail}"),
        };
        match status.code() {
            Some(0) => Ok(()),
            Some(EXIT_INVALID) => Err(TaskError::invalid(ended(format!(
                "exited with {EXIT_INVALID} (invalid)"
            )))),
            Some(code) => Err(TaskError::retry(ended(format!("exited with {code}")))),
            None => Err(TaskError::retry(ended(killed_by(&status)))),
        }
    }
}

/// How a command that exited with no code ended.
fn killed_by(status: &std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    format!("ended with {status}")
}

/// Logs each line of a command's stderr with the task's key; answers the stream's last
/// [`STDERR_TAIL_BYTES`] once it closes.
fn relay_stderr(
    stderr: tokio::process::ChildStderr,
    key: String,
) -> tokio::task::JoinHandle<String> {
    tokio::spawn(async move {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        let mut tail = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::warn!(task = %key, stream = "stderr", "{line}");
            tail.push_str(&line);
            tail.push('\n');
            if tail.len() > STDERR_TAIL_BYTES {
                let mut cut = tail.len() - STDERR_TAIL_BYTES;
                while !tail.is_char_boundary(cut) {
                    cut += 1;
                }
                tail.drain(..cut);
            }
        }
        tail
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn context() -> TaskContext {
        TaskContext::detached(0, 1)
    }

    fn big_task() -> Task {
        // Far more than a pipe buffer holds, so a command that does not read its input
        // closes the pipe before the write ends.
        let mut data = scheduler_core::TaskData::new();
        data.insert("blob".into(), Value::String("x".repeat(1 << 20)));
        Task::new("o", Utc::now(), "u", data)
    }

    fn command(command: &str) -> CommandExecutor {
        CommandExecutor {
            command: command.into(),
        }
    }

    #[tokio::test]
    async fn a_command_that_ignores_its_input_and_exits_0_succeeds() {
        let result = command("exit 0").execute(&big_task(), &context()).await;
        assert_eq!(result, Ok(()));
    }

    #[tokio::test]
    async fn a_command_that_ignores_its_input_and_fails_is_retried() {
        let result = command("exit 3").execute(&big_task(), &context()).await;
        assert!(
            matches!(result, Err(TaskError::Retry { reason: r, .. }) if r.ends_with("exited with 3"))
        );
    }

    #[tokio::test]
    async fn exit_65_makes_the_task_invalid() {
        let result = command("exit 65").execute(&big_task(), &context()).await;
        assert!(
            matches!(result, Err(TaskError::Invalid(r)) if r.contains("exited with 65 (invalid)"))
        );
    }

    #[tokio::test]
    async fn a_failed_commands_error_ends_with_the_tail_of_its_stderr() {
        let script = "for i in $(seq 1 500); do echo \"line $i\" >&2; done; exit 4";
        let result = command(script).execute(&big_task(), &context()).await;
        let Err(TaskError::Retry { reason, .. }) = result else {
            panic!("{result:?}");
        };
        assert!(reason.contains("exited with 4; stderr ends: "), "{reason}");
        assert!(reason.ends_with("line 499\nline 500"), "{reason}");
        assert!(!reason.contains("line 1\n"), "only the tail: {reason}");
        assert!(reason.len() < STDERR_TAIL_BYTES + 200, "{}", reason.len());
    }

    #[tokio::test]
    async fn a_killed_command_says_by_which_signal() {
        let result = command("kill -9 $$").execute(&big_task(), &context()).await;
        assert!(
            matches!(&result, Err(TaskError::Retry { reason: r, .. }) if r.ends_with("was killed by signal 9")),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn the_command_gets_the_tasks_key_and_attempt_in_its_environment() {
        let task = Task::new("o", Utc::now(), "u", Default::default());
        let check = format!(
            r#"test "$SCHEDULER_TASK_KEY $SCHEDULER_ATTEMPT $SCHEDULER_PARTITION $SCHEDULER_EPOCH" = "{} 1 0 1""#,
            task.key()
        );
        assert_eq!(command(&check).execute(&task, &context()).await, Ok(()));
    }

    #[tokio::test]
    async fn the_command_gets_the_tasks_type_priority_and_key_in_its_environment() {
        let task = Task::new("o", Utc::now(), "u", Default::default())
            .of_type("send-email")
            .with_priority(-3);
        let expected = format!(
            "send-email -3 o {} u",
            wire::format_time(task.scheduled_time)
        );
        let check = format!(
            r#"test "$SCHEDULER_TASK_TYPE $SCHEDULER_PRIORITY $SCHEDULER_ORDERING_ID $SCHEDULER_SCHEDULED_TIME $SCHEDULER_UNIQUENESS_KEY" = "{expected}""#
        );
        assert_eq!(command(&check).execute(&task, &context()).await, Ok(()));
        let wrong = check.replace("send-email", "charge");
        assert!(command(&wrong).execute(&task, &context()).await.is_err());
    }
}
