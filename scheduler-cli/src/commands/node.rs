//! `node`: runs a scheduler node from a settings file until Ctrl-C, with a shell command per
//! task type (`--exec TYPE=COMMAND`), one for every other type (`--exec COMMAND`), or an
//! executor that prints each task.

mod executors;

use std::collections::BTreeMap;

use scheduler_client::wire;
use scheduler_core::{NodeBuilder, SchedulerNode, Settings};

use super::runtime;
use crate::args::NodeArgs;
use crate::output::{Failure, Outcome};
use executors::{CommandExecutor, PrintingExecutor};

/// The commands of the `--exec` flags: one per task type, and at most one for every other type.
#[derive(Debug, Default, PartialEq)]
struct ExecCommands {
    by_type: BTreeMap<String, String>,
    other_types: Option<String>,
}

impl ExecCommands {
    /// Reads the `--exec` flags: `TYPE=COMMAND` when the part before the first `=` is a valid
    /// task type (so it holds no space: `env A=1 ./x.sh` is a command), else `COMMAND` for every
    /// other type. A type named twice, two commands for every other type, or an empty command
    /// are usage errors.
    fn parse(flags: &[String]) -> Result<ExecCommands, Failure> {
        let mut commands = ExecCommands::default();
        for flag in flags {
            let typed = flag
                .split_once('=')
                .filter(|(task_type, _)| wire::check_task_type(task_type).is_ok());
            match typed {
                Some((task_type, command)) => {
                    if command.trim().is_empty() {
                        return Err(Failure::usage(format!(
                            "--exec {flag:?}: the command for task type {task_type} is empty"
                        )));
                    }
                    if commands.by_type.contains_key(task_type) {
                        return Err(Failure::usage(format!(
                            "--exec: task type {task_type} is given two commands; give each \
                             type one"
                        )));
                    }
                    commands
                        .by_type
                        .insert(task_type.to_string(), command.to_string());
                }
                None => {
                    if flag.trim().is_empty() {
                        return Err(Failure::usage("--exec: the command is empty"));
                    }
                    if let Some(first) = &commands.other_types {
                        return Err(Failure::usage(format!(
                            "--exec: two commands for every other type, {first:?} and {flag:?}; \
                             give at most one --exec without TYPE="
                        )));
                    }
                    commands.other_types = Some(flag.clone());
                }
            }
        }
        Ok(commands)
    }

    /// `builder` with these commands as its handlers; without any, every task is printed.
    fn handlers(self, builder: NodeBuilder) -> NodeBuilder {
        if self == ExecCommands::default() {
            return builder.fallback(PrintingExecutor);
        }
        let mut builder = builder;
        for (task_type, command) in self.by_type {
            builder = builder.handler(task_type, CommandExecutor { command });
        }
        match self.other_types {
            Some(command) => builder.fallback(CommandExecutor { command }),
            None => builder,
        }
    }

    /// Which types these commands run, for the line the node prints as it starts.
    fn describe(&self) -> String {
        if *self == ExecCommands::default() {
            return "handles every task type by printing its tasks".to_string();
        }
        let parts: Vec<String> = self
            .by_type
            .iter()
            .map(|(task_type, command)| format!("type {task_type} with {command:?}"))
            .collect();
        let others = match &self.other_types {
            Some(command) => format!("every other type with {command:?}"),
            None => "no other type (its tasks wait for a node that handles them)".to_string(),
        };
        match (parts.is_empty(), &self.other_types) {
            (true, Some(command)) => format!("handles every type with {command:?}"),
            _ => format!("handles {} and {others}", parts.join(", ")),
        }
    }
}

pub(crate) fn node(args: NodeArgs) -> Outcome {
    let commands = ExecCommands::parse(&args.exec)?;
    let settings =
        Settings::load(args.settings.as_deref()).map_err(|e| Failure::usage(e.to_string()))?;
    let runtime = runtime()?;
    runtime.block_on(async move {
        let description = commands.describe();
        let node = commands
            .handlers(SchedulerNode::builder(settings))
            .start()
            .await
            .map_err(|e| Failure::service(format!("cannot start the node: {e}")))?;
        // After the start: a failed start prints its one error line alone.
        eprintln!("scheduler: this node {description}");
        if let Some(addr) = node.admin_address() {
            eprintln!(
                "scheduler: node running; admin API at http://{addr}; Ctrl-C or SIGTERM to stop"
            );
        }
        let signal = stop_signal()
            .await
            .map_err(|e| Failure::service(format!("cannot wait for a stop signal: {e}")))?;
        eprintln!(
            "scheduler: {signal}: stopping (no more polling; running tasks finish, offsets are \
             committed, the node leaves its group)"
        );
        let started = std::time::Instant::now();
        node.shutdown()
            .await
            .map_err(|e| Failure::service(e.to_string()))?;
        eprintln!(
            "scheduler: stopped in {:.1} s: drained, committed, left the group",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    })
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM (what service managers send); which one came.
async fn stop_signal() -> std::io::Result<&'static str> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted.map(|()| "SIGINT"),
        _ = terminate.recv() => Ok("SIGTERM"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(flags: &[&str]) -> Result<ExecCommands, String> {
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        ExecCommands::parse(&flags).map_err(|f| {
            assert_eq!(f.code, crate::output::EXIT_USAGE);
            f.message
        })
    }

    fn commands(by_type: &[(&str, &str)], other_types: Option<&str>) -> ExecCommands {
        ExecCommands {
            by_type: by_type
                .iter()
                .map(|(t, c)| (t.to_string(), c.to_string()))
                .collect(),
            other_types: other_types.map(str::to_string),
        }
    }

    #[test]
    fn typed_commands_and_one_for_every_other_type() {
        assert_eq!(
            parse(&[
                "send-email=./send.sh --to=$TO",
                "charge=./charge.sh",
                "./default.sh"
            ]),
            Ok(commands(
                &[
                    ("send-email", "./send.sh --to=$TO"),
                    ("charge", "./charge.sh")
                ],
                Some("./default.sh")
            ))
        );
        // Every character a type may hold, and a command that is only typed.
        assert_eq!(
            parse(&["billing.v2:eu/refund_1=./refund.sh"]),
            Ok(commands(&[("billing.v2:eu/refund_1", "./refund.sh")], None))
        );
        assert_eq!(parse(&[]), Ok(ExecCommands::default()));
    }

    #[test]
    fn an_equals_sign_after_a_space_or_after_no_valid_type_is_part_of_the_default_command() {
        assert_eq!(
            parse(&["env A=1 ./x.sh"]),
            Ok(commands(&[], Some("env A=1 ./x.sh")))
        );
        assert_eq!(
            parse(&["./x.sh --mode=fast"]),
            Ok(commands(&[], Some("./x.sh --mode=fast")))
        );
        let too_long = format!("{}=./x.sh", "t".repeat(129));
        assert_eq!(
            parse(&[too_long.as_str()]),
            Ok(commands(&[], Some(too_long.as_str())))
        );
    }

    #[test]
    fn a_type_given_twice_or_two_defaults_are_usage_errors() {
        let twice = parse(&["charge=./a.sh", "charge=./b.sh"]);
        assert!(
            matches!(&twice, Err(m) if m.contains("task type charge is given two commands")),
            "{twice:?}"
        );
        let two_defaults = parse(&["./a.sh", "send-email=./s.sh", "./b.sh"]);
        assert!(
            matches!(&two_defaults, Err(m) if m.contains(r#""./a.sh" and "./b.sh""#)),
            "{two_defaults:?}"
        );
    }

    #[test]
    fn an_empty_command_is_a_usage_error() {
        let typed = parse(&["charge= "]);
        assert!(
            matches!(&typed, Err(m) if m.contains("the command for task type charge is empty")),
            "{typed:?}"
        );
        assert!(parse(&[""]).is_err());
    }

    #[test]
    fn the_start_line_says_which_types_the_node_runs() {
        assert_eq!(
            ExecCommands::default().describe(),
            "handles every task type by printing its tasks"
        );
        assert_eq!(
            commands(&[("charge", "./c.sh")], Some("./d.sh")).describe(),
            r#"handles type charge with "./c.sh" and every other type with "./d.sh""#
        );
        assert_eq!(
            commands(&[("charge", "./c.sh")], None).describe(),
            r#"handles type charge with "./c.sh" and no other type (its tasks wait for a node that handles them)"#
        );
    }
}
