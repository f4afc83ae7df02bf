//! `suspend`, `resume` and `suspensions`: holding back the tasks of an orderingId, a task type or
//! a group, through a node's admin API, printed as a line or a table or, with `--json`, as the
//! API's answer.

use std::io::Write;

use scheduler_client::wire;
use scheduler_core::admin_api::{SuspendRequest, SuspensionQuery};

use crate::admin_client::AdminClient;
use crate::args::{AdminArgs, ResumeArgs, SuspendArgs, SuspensionTargetArgs};
use crate::output::{io_failure, one_line, or_dash, print_json, Failure, Outcome};

/// The kind and target `args` name, as the API takes them, checked as the API checks them (a
/// target no task can have would suspend nothing).
fn target(args: &SuspensionTargetArgs) -> Result<(&'static str, String), Failure> {
    let checked_type = |flag: &str, task_type: &str| {
        wire::check_task_type(task_type).map_err(|e| Failure::usage(format!("{flag}: {e}")))
    };
    match (&args.ordering_id, &args.task_type, &args.group) {
        (Some(id), None, None) if id.is_empty() => Err(Failure::usage("--ordering-id is empty")),
        (Some(id), None, None) => Ok(("orderingId", id.clone())),
        (None, Some(task_type), None) => {
            checked_type("--task-type", task_type)?;
            Ok(("taskType", task_type.clone()))
        }
        (None, None, Some(group)) => {
            let (task_type, id) = group.split_once('/').ok_or_else(|| {
                Failure::usage(format!(
                    "--group takes TYPE/ID (the type that joins the group, then its id), \
                     not {group:?}"
                ))
            })?;
            checked_type("--group's TYPE", task_type)?;
            if id.is_empty() {
                return Err(Failure::usage(format!("--group {group:?} has an empty ID")));
            }
            Ok(("group", group.clone()))
        }
        // clap requires exactly one.
        _ => Err(Failure::usage(
            "name one target: --ordering-id, --task-type or --group",
        )),
    }
}

pub(crate) fn suspend(args: SuspendArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let (kind, target) = target(&args.target)?;
    let request = SuspendRequest {
        kind: Some(kind.to_string()),
        target: Some(target),
        reason: args.reason.filter(|r| !r.is_empty()),
    };
    let answer = AdminClient::new(&args.admin).suspend(&request)?;
    if json {
        return print_json(out, &answer);
    }
    let reason = answer
        .reason
        .as_deref()
        .map(|r| format!(" (reason: {})", one_line(r)))
        .unwrap_or_default();
    writeln!(
        out,
        "suspended {} {} since {}{reason}",
        answer.kind, answer.target, answer.since
    )
    .map_err(io_failure)
}

pub(crate) fn resume(args: ResumeArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let (kind, target) = target(&args.target)?;
    let query = SuspensionQuery {
        kind: Some(kind.to_string()),
        target: Some(target.clone()),
    };
    AdminClient::new(&args.admin).resume(&query)?;
    if json {
        let answer = serde_json::json!({ "kind": kind, "target": target, "resumed": true });
        return print_json(out, &answer);
    }
    writeln!(out, "resumed {kind} {target}").map_err(io_failure)
}

pub(crate) fn suspensions(args: AdminArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let answer = AdminClient::new(&args).suspensions()?;
    if json {
        return print_json(out, &answer);
    }
    writeln!(
        out,
        "{:<11} {:<24} {:<25} REASON",
        "KIND", "TARGET", "SINCE"
    )
    .map_err(io_failure)?;
    for s in &answer.suspensions {
        writeln!(
            out,
            "{:<11} {:<24} {:<25} {}",
            s.kind,
            s.target,
            s.since,
            or_dash(s.reason.as_deref().map(one_line))
        )
        .map_err(io_failure)?;
    }
    Ok(())
}
