//! `limits list|set|remove`: per-key limit overrides set at run time, through a node's admin
//! API, printed as a line or a table or, with `--json`, as the API's answer.

use std::io::Write;

use scheduler_client::wire;
use scheduler_core::admin_api::{KeyLimitQuery, KeyLimitRequest, KeyLimitView};

use crate::admin_client::AdminClient;
use crate::args::{LimitKeyArgs, LimitsCommand};
use crate::output::{io_failure, or_dash, print_json, Failure, Outcome};

pub(crate) fn limits(command: LimitsCommand, json: bool, out: &mut dyn Write) -> Outcome {
    match command {
        LimitsCommand::List(args) => {
            let answer = AdminClient::new(&args).limits()?;
            if json {
                return print_json(out, &answer);
            }
            writeln!(
                out,
                "OVERRIDES\n{:<24} {:<16} LIMITS",
                "LIMIT KEY", "TASK TYPE"
            )
            .map_err(io_failure)?;
            for o in &answer.overrides {
                let line = format!(
                    "{:<24} {:<16} {} (set {})",
                    o.limit_key,
                    or_dash(o.task_type.as_deref()),
                    values(o),
                    o.updated_at
                );
                writeln!(out, "{line}").map_err(io_failure)?;
            }
            writeln!(
                out,
                "\nON THIS NODE\n{:<24} {:<16} {:>7} {:>7} {:>5}",
                "LIMIT KEY", "TASK TYPE", "PERMITS", "RUNNING", "HELD"
            )
            .map_err(io_failure)?;
            for k in &answer.keys {
                writeln!(
                    out,
                    "{:<24} {:<16} {:>7} {:>7} {:>5}",
                    k.limit_key,
                    or_dash(k.task_type.as_deref()),
                    k.permits,
                    k.running,
                    k.held
                )
                .map_err(io_failure)?;
            }
            Ok(())
        }
        LimitsCommand::Set(args) => {
            let (limit_key, task_type) = checked(&args.key)?;
            let request = KeyLimitRequest {
                limit_key: Some(limit_key),
                task_type,
                concurrency: args.concurrency,
                rate: args.rate,
                burst: args.burst,
                weight: args.weight,
            };
            let answer = AdminClient::new(&args.key.admin).set_limit(&request)?;
            if json {
                return print_json(out, &answer);
            }
            let scope = (answer.task_type.as_deref()).map_or(String::new(), |t| format!(" ({t})"));
            writeln!(
                out,
                "limit key {}{scope}: {}",
                answer.limit_key,
                values(&answer)
            )
            .map_err(io_failure)
        }
        LimitsCommand::Remove(args) => {
            let (limit_key, task_type) = checked(&args)?;
            let query = KeyLimitQuery {
                limit_key: Some(limit_key.clone()),
                task_type: task_type.clone(),
            };
            AdminClient::new(&args.admin).remove_limit(&query)?;
            if json {
                let answer = serde_json::json!({
                    "limitKey": limit_key, "taskType": task_type, "removed": true
                });
                return print_json(out, &answer);
            }
            writeln!(out, "removed the override of limit key {limit_key}").map_err(io_failure)
        }
    }
}

/// The key and type `args` name, checked as the API checks them.
fn checked(args: &LimitKeyArgs) -> Result<(String, Option<String>), Failure> {
    wire::check_limit_key(Some(&args.limit_key)).map_err(|e| Failure::usage(e.to_string()))?;
    if let Some(task_type) = &args.task_type {
        wire::check_task_type(task_type)
            .map_err(|e| Failure::usage(format!("--task-type: {e}")))?;
    }
    Ok((args.limit_key.clone(), args.task_type.clone()))
}

/// An override's values in words.
fn values(o: &KeyLimitView) -> String {
    let mut parts = Vec::new();
    if let Some(n) = o.concurrency {
        parts.push(format!("{n} at once"));
    }
    if let Some(r) = o.rate {
        parts.push(format!("{r}/s"));
    }
    if let Some(b) = o.burst {
        parts.push(format!("burst {b}"));
    }
    if let Some(w) = o.weight {
        parts.push(format!("weight {w}"));
    }
    parts.join(", ")
}
