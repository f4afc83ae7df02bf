//! `node`: runs a scheduler node from a settings file until Ctrl-C, with an executor that
//! prints each task or pipes it into a shell command.

use scheduler_client::{wire, Task};
use scheduler_core::{SchedulerNode, Settings, TaskContext, TaskError, TaskExecutor};
use serde_json::Value;

use super::runtime;
use crate::args::NodeArgs;
use crate::output::{Failure, Outcome};

/// The `node` command's executor: prints each task, or runs a shell command per task.
struct CommandExecutor {
    command: Option<String>,
}

/// `EX_DATAERR`: the command says the task is invalid; it is not retried.
const EXIT_GIVE_UP: i32 = 65;

impl TaskExecutor for CommandExecutor {
    async fn execute(&self, task: &Task, _ctx: &TaskContext) -> Result<(), TaskError> {
        let Some(command) = &self.command else {
            println!(
                "ran {} data {}",
                task.key(),
                Value::Object(task.task_data.clone())
            );
            return Ok(());
        };
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::piped())
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
            Some(EXIT_GIVE_UP) => Err(TaskError::invalid(format!(
                "{command:?} exited with {EXIT_GIVE_UP}"
            ))),
            other => Err(TaskError::retry(format!(
                "{command:?} exited with {other:?}"
            ))),
        }
    }
}

pub(crate) fn node(args: NodeArgs) -> Outcome {
    let settings =
        Settings::load(args.settings.as_deref()).map_err(|e| Failure::usage(e.to_string()))?;
    let runtime = runtime()?;
    runtime.block_on(async move {
        let node = SchedulerNode::start(settings, CommandExecutor { command: args.exec })
            .await
            .map_err(|e| Failure::service(format!("cannot start the node: {e}")))?;
        if let Some(addr) = node.admin_address() {
            eprintln!("scheduler: node running; admin API at http://{addr}; Ctrl-C to stop");
        }
        tokio::signal::ctrl_c()
            .await
            .map_err(|e| Failure::service(format!("cannot wait for Ctrl-C: {e}")))?;
        eprintln!("scheduler: stopping (running tasks finish, offsets are committed)");
        node.shutdown()
            .await
            .map_err(|e| Failure::service(e.to_string()))
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

    #[tokio::test]
    async fn a_command_that_ignores_its_input_and_exits_0_succeeds() {
        let executor = CommandExecutor {
            command: Some("exit 0".into()),
        };
        assert_eq!(executor.execute(&big_task(), &context()).await, Ok(()));
    }

    #[tokio::test]
    async fn a_command_that_ignores_its_input_and_fails_is_retried() {
        let executor = CommandExecutor {
            command: Some("exit 3".into()),
        };
        let result = executor.execute(&big_task(), &context()).await;
        assert!(
            matches!(result, Err(TaskError::Retry { reason: r, .. }) if r.contains("exited with Some(3)"))
        );
    }
}
