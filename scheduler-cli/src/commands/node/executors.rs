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

/// Runs `sh -c command` per task, with the task's wire-format JSON on stdin and its key, type
/// and priority in `SCHEDULER_*` variables. Exit 0: done; [`EXIT_INVALID`]: invalid; anything
/// else: retried.
pub(super) struct CommandExecutor {
    pub(super) command: String,
}

impl TaskHandler for CommandExecutor {
    async fn execute(&self, task: &Task, _ctx: &TaskContext) -> Result<(), TaskError> {
        let command = &self.command;
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::piped())
            .env("SCHEDULER_TASK_TYPE", &task.task_type)
            .env("SCHEDULER_PRIORITY", task.priority.to_string())
            .env("SCHEDULER_ORDERING_ID", &task.ordering_id)
            .env(
                "SCHEDULER_SCHEDULED_TIME",
                wire::format_time(task.scheduled_time),
            )
            .env("SCHEDULER_UNIQUENESS_KEY", &task.uniqueness_key)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| TaskError::retry(format!("cannot start {command:?}: {e}")))?;
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
        match status.code() {
            Some(0) => Ok(()),
            Some(EXIT_INVALID) => Err(TaskError::invalid(format!(
                "{command:?} exited with {EXIT_INVALID}"
            ))),
            other => Err(TaskError::retry(format!(
                "{command:?} exited with {other:?}"
            ))),
        }
    }
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
            matches!(result, Err(TaskError::Retry { reason: r, .. }) if r.contains("exited with Some(3)"))
        );
    }

    #[tokio::test]
    async fn exit_65_makes_the_task_invalid() {
        let result = command("exit 65").execute(&big_task(), &context()).await;
        assert!(matches!(result, Err(TaskError::Invalid(r)) if r.contains("exited with 65")));
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
