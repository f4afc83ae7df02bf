//! `get`, `list`, `cancel`, `reschedule`, `status` and `partitions`: the commands that ask a node's admin API,
//! printing its answer as a table or, with `--json`, as JSON.

use std::io::Write;

use scheduler_client::wire;
use scheduler_core::admin_api::{
    CancelResponse, ListQuery, ListResponse, PartitionsResponse, PendingState, StatusResponse,
    TaskKeyBody, TaskQuery,
};

use super::{parse_delay, parse_time, shell_word};
use crate::admin_client::AdminClient;
use crate::args::{AdminArgs, GetArgs, ListArgs, RescheduleArgs, StateArg};
use crate::output::{io_failure, or_dash, print_json, Failure, Outcome};

/// The key of `args` as the API takes it; without `--at`, the identity alone (no
/// `scheduledTime`), which the API resolves to the identity's task.
fn key_body(args: &GetArgs) -> Result<TaskKeyBody, Failure> {
    let at = args
        .at
        .as_deref()
        .map(|at| parse_time(at, "--at").map(wire::format_time))
        .transpose()?;
    Ok(TaskKeyBody {
        ordering_id: Some(args.ordering_id.clone()),
        scheduled_time: at,
        uniqueness_key: Some(args.unique.clone()),
    })
}

pub(crate) fn get(args: GetArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let key = key_body(&args)?;
    let query = TaskQuery {
        ordering_id: key.ordering_id,
        scheduled_time: key.scheduled_time,
        uniqueness_key: key.uniqueness_key,
        history: None,
    };
    let task = AdminClient::new(&args.admin).task(&query)?;
    if json {
        return print_json(out, &task);
    }
    let rows = [
        (
            "task",
            format!(
                "{}/{}/{}",
                task.ordering_id, task.scheduled_time, task.uniqueness_key
            ),
        ),
        ("partition", task.partition.to_string()),
        ("status", task.status),
        ("attempts", task.attempts.to_string()),
        ("last error", or_dash(task.last_error)),
        ("updated at", or_dash(task.updated_at)),
        ("data", or_dash(task.task_data)),
    ];
    for (name, value) in rows {
        writeln!(out, "{name:<11} {value}").map_err(io_failure)?;
    }
    if !task.history.is_empty() {
        writeln!(
            out,
            "\n{:<8} {:<25} {:<25} {:<10} ERROR",
            "ATTEMPT", "STARTED", "FINISHED", "OUTCOME"
        )
        .map_err(io_failure)?;
        for a in task.history {
            writeln!(
                out,
                "{:<8} {:<25} {:<25} {:<10} {}",
                a.attempt,
                or_dash(a.started_at),
                a.finished_at,
                a.outcome,
                or_dash(a.error)
            )
            .map_err(io_failure)?;
        }
    }
    Ok(())
}

pub(crate) fn list(args: ListArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let admin = AdminClient::new(&args.admin);
    let mut query = ListQuery {
        from: Some(wire::format_time(parse_time(&args.from, "--from")?)),
        to: Some(wire::format_time(parse_time(&args.to, "--to")?)),
        limit: Some(args.limit),
        from_ordering_id: args.from_ordering_id.clone(),
        from_uniqueness_key: args.from_uniqueness_key.clone(),
        task_type: args.task_type.clone(),
        ordering_id: args.ordering_id.clone(),
        state: args.state.map(|s| match s {
            StateArg::Waiting => PendingState::Waiting,
            StateArg::Overdue => PendingState::Overdue,
            StateArg::Retrying => PendingState::Retrying,
            StateArg::Suspended => PendingState::Suspended,
            StateArg::Limited => PendingState::Limited,
        }),
        include_internal: args.include_internal.then_some(true),
    };
    let mut all = Vec::new();
    let next = loop {
        let page = admin.tasks(&query)?;
        all.extend(page.tasks);
        match page.next {
            Some(next) if args.all => {
                query.from = Some(next.from);
                query.from_ordering_id = Some(next.from_ordering_id);
                query.from_uniqueness_key = Some(next.from_uniqueness_key);
            }
            last => break last,
        }
    };
    let page = ListResponse { tasks: all, next };
    if json {
        return print_json(out, &page);
    }
    writeln!(
        out,
        "{:<25} {:<24} {:<24} {:<16} {:<10} {:>9}  DATA",
        "SCHEDULED", "ORDERING ID", "UNIQUENESS KEY", "TYPE", "STATE", "PARTITION"
    )
    .map_err(io_failure)?;
    for t in &page.tasks {
        writeln!(
            out,
            "{:<25} {:<24} {:<24} {:<16} {:<10} {:>9}  {}",
            t.scheduled_time,
            t.ordering_id,
            t.uniqueness_key,
            t.task_type,
            t.state.as_str(),
            t.partition,
            cut_data(&t.task_data.to_string())
        )
        .map_err(io_failure)?;
    }
    if let Some(next) = &page.next {
        writeln!(
            out,
            "more: --from {} --from-ordering-id {} --from-uniqueness-key {} (or --all)",
            shell_word(&next.from),
            shell_word(&next.from_ordering_id),
            shell_word(&next.from_uniqueness_key)
        )
        .map_err(io_failure)?;
    }
    Ok(())
}

/// The longest task data a table row shows (the rest is cut, with its size; `--json` has all).
const DATA_SHOWN: usize = 200;

/// `data` as a table cell: whole if short, else its start and how long it is.
fn cut_data(data: &str) -> String {
    if data.len() <= DATA_SHOWN {
        return data.to_string();
    }
    let mut end = DATA_SHOWN;
    while !data.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes; --json for all)", &data[..end], data.len())
}

pub(crate) fn cancel(args: GetArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let answer = AdminClient::new(&args.admin).cancel(&key_body(&args)?)?;
    print_enqueued(&answer, json, out)
}

pub(crate) fn reschedule(args: RescheduleArgs, json: bool, out: &mut dyn Write) -> Outcome {
    // clap requires one of the two.
    let to = match (&args.at, &args.delay) {
        (Some(at), _) => parse_time(at, "--at")?,
        (None, Some(delay)) => parse_delay(delay, "--in")?,
        (None, None) => return Err(Failure::usage("give the new time: --at or --in")),
    };
    let body = TaskKeyBody {
        ordering_id: Some(args.ordering_id.clone()),
        scheduled_time: Some(wire::format_time(to)),
        uniqueness_key: Some(args.unique.clone()),
    };
    let answer = AdminClient::new(&args.admin).reschedule(&body)?;
    print_enqueued(&answer, json, out)
}

/// The answer of `cancel` or `reschedule`: what was enqueued, and what that does.
fn print_enqueued(answer: &CancelResponse, json: bool, out: &mut dyn Write) -> Outcome {
    if json {
        return print_json(out, answer);
    }
    writeln!(out, "{}: {}\n{}", answer.result, answer.task, answer.note).map_err(io_failure)
}

pub(crate) fn status(args: AdminArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let status = AdminClient::new(&args).status()?;
    if json {
        return print_json(out, &status);
    }
    writeln!(
        out,
        "node {} (version {}), topic {} with {} partitions",
        status.node_id, status.version, status.topic, status.partition_count
    )
    .map_err(io_failure)?;
    for line in handler_lines(&status) {
        writeln!(out, "{line}").map_err(io_failure)?;
    }
    writeln!(
        out,
        "{:>9} {:>10} {:>10} {:>10}",
        "PARTITION", "SCHEDULED", "EXECUTING", "KAFKA LAG"
    )
    .map_err(io_failure)?;
    for p in &status.partitions {
        writeln!(
            out,
            "{:>9} {:>10} {:>10} {:>10}",
            p.partition,
            p.tasks_scheduled,
            p.tasks_executing,
            or_dash(p.kafka_lag)
        )
        .map_err(io_failure)?;
    }
    Ok(())
}

/// `scheduler partitions`: every partition's owner, `*` marking the node asked.
pub(crate) fn partitions(args: AdminArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let answer = AdminClient::new(&args).partitions()?;
    if json {
        return print_json(out, &answer);
    }
    write!(out, "{}", partitions_table(&answer)).map_err(io_failure)
}

fn partitions_table(answer: &PartitionsResponse) -> String {
    let mut table = format!(
        "{:>9}  {:<32} {:>6}  {}\n",
        "PARTITION", "OWNER", "EPOCH", "CLAIMED"
    );
    for p in &answer.partitions {
        let here = if p.owned_here { " *" } else { "" };
        let owner = format!("{}{here}", or_dash(p.owner.as_deref()));
        table.push_str(&format!(
            "{:>9}  {:<32} {:>6}  {}\n",
            p.partition,
            owner,
            p.epoch,
            or_dash(p.claimed_at.as_deref())
        ));
    }
    table.push_str(&format!(
        "* run now by the node asked, {}\n",
        answer.node_id
    ));
    table
}

/// The node's handlers and the due tasks waiting for one, a line each: none for a node that
/// does not report its handlers (an older one; every node has at least one), and no waiting
/// line when nothing waits.
fn handler_lines(status: &StatusResponse) -> Vec<String> {
    let mut lines = Vec::new();
    let types = status.handlers.join(", ");
    match (types.is_empty(), status.handles_every_type) {
        (true, true) => lines.push("handlers: every type".to_string()),
        (false, true) => lines.push(format!("handlers: {types} (and every other type)")),
        (false, false) => lines.push(format!("handlers: {types}")),
        (true, false) => {}
    }
    if !status.waiting_for_handler.is_empty() {
        let waiting: Vec<String> = status
            .waiting_for_handler
            .iter()
            .map(|(task_type, count)| format!("{task_type} {count}"))
            .collect();
        lines.push(format!("waiting for a handler: {}", waiting.join(", ")));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::cut_data;

    #[test]
    fn long_task_data_is_cut_in_a_table_row() {
        assert_eq!(cut_data(r#"{"a":1}"#), r#"{"a":1}"#);
        let long = format!(r#"{{"blob":"{}"}}"#, "é".repeat(300));
        let cut = cut_data(&long);
        assert!(
            cut.ends_with(&format!("… ({} bytes; --json for all)", long.len())),
            "{cut}"
        );
        assert!(cut.len() < 260, "{}", cut.len());
    }
}
