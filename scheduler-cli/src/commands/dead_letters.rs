//! `dead-letters list|redrive|purge`: the tasks given up on, through a node's admin API, printed
//! as a table or, with `--json`, as the API's answer.

use std::io::Write;

use scheduler_client::wire;
use scheduler_core::admin_api::{DeadLetterQuery, DeadLetterSelection, DeadLettersResponse};

use super::{parse_time, shell_word};
use crate::admin_client::AdminClient;
use crate::args::{DeadLetterSelectionArgs, DeadLettersCommand, DeadLettersListArgs};
use crate::output::{io_failure, one_line, or_dash, print_json, Failure, Outcome};

pub(crate) fn dead_letters(
    command: DeadLettersCommand,
    json: bool,
    out: &mut dyn Write,
) -> Outcome {
    match command {
        DeadLettersCommand::List(args) => list(args, json, out),
        DeadLettersCommand::Redrive(args) => redrive(args, json, out),
        DeadLettersCommand::Purge(args) => purge(args, json, out),
    }
}

fn list(args: DeadLettersListArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let admin = AdminClient::new(&args.admin);
    let mut query = DeadLetterQuery {
        task_type: checked_type(args.task_type)?,
        from: optional_time(args.from.as_deref(), "--from")?,
        to: optional_time(args.to.as_deref(), "--to")?,
        limit: Some(args.limit),
        include_redriven: args.include_redriven.then_some(true),
        after_ordering_id: args.after_ordering_id,
        after_scheduled_time: optional_time(
            args.after_scheduled_time.as_deref(),
            "--after-scheduled-time",
        )?,
        after_uniqueness_key: args.after_uniqueness_key,
    };
    let mut all = Vec::new();
    let next = loop {
        let page = admin.dead_letters(&query)?;
        all.extend(page.dead_letters);
        match page.next {
            Some(next) if args.all_pages => {
                query.after_ordering_id = Some(next.after_ordering_id);
                query.after_scheduled_time = Some(next.after_scheduled_time);
                query.after_uniqueness_key = Some(next.after_uniqueness_key);
            }
            last => break last,
        }
    };
    let page = DeadLettersResponse {
        dead_letters: all,
        next,
    };
    if json {
        return print_json(out, &page);
    }
    writeln!(
        out,
        "{:<16} {:<24} {:<25} {:<24} {:>8}  {:<18} {:<25} {:<25} LAST ERROR",
        "TYPE",
        "ORDERING ID",
        "SCHEDULED TIME",
        "UNIQUENESS KEY",
        "ATTEMPTS",
        "REASON",
        "DEAD AT",
        "REDRIVEN"
    )
    .map_err(io_failure)?;
    for d in &page.dead_letters {
        writeln!(
            out,
            "{:<16} {:<24} {:<25} {:<24} {:>8}  {:<18} {:<25} {:<25} {}",
            d.task_type,
            d.ordering_id,
            d.scheduled_time,
            d.uniqueness_key,
            d.attempts,
            d.reason,
            d.dead_at,
            or_dash(d.redriven_at.as_deref()),
            one_line(&d.last_error)
        )
        .map_err(io_failure)?;
    }
    // On stderr, so that the table alone can be piped.
    if let Some(next) = &page.next {
        eprintln!(
            "more: --after-ordering-id {} --after-scheduled-time {} --after-uniqueness-key {} (or --all-pages)",
            shell_word(&next.after_ordering_id),
            shell_word(&next.after_scheduled_time),
            shell_word(&next.after_uniqueness_key)
        );
    }
    Ok(())
}

fn redrive(args: DeadLetterSelectionArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let selection = selection(&args)?;
    let answer = AdminClient::new(&args.admin).redrive(&selection)?;
    if json {
        return print_json(out, &answer);
    }
    writeln!(out, "redriven {}", dead_letters_count(answer.redriven)).map_err(io_failure)?;
    for task in &answer.tasks {
        writeln!(out, "{task}").map_err(io_failure)?;
    }
    // The answer lists the first keys only.
    if answer.tasks.len() < answer.redriven {
        writeln!(out, "(and {} more)", answer.redriven - answer.tasks.len()).map_err(io_failure)?;
    }
    Ok(())
}

fn purge(args: DeadLetterSelectionArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let selection = selection(&args)?;
    let answer = AdminClient::new(&args.admin).purge(&selection)?;
    if json {
        return print_json(out, &answer);
    }
    writeln!(out, "purged {}", dead_letters_count(answer.purged)).map_err(io_failure)
}

/// The dead letters `args` name, as the API takes them: a task's key (all three parts), a
/// filter, or all; anything else is refused before the API is called.
fn selection(args: &DeadLetterSelectionArgs) -> Result<DeadLetterSelection, Failure> {
    let by_key = args.ordering_id.is_some()
        || args.scheduled_time.is_some()
        || args.uniqueness_key.is_some();
    let by_filter = args.task_type.is_some() || args.from.is_some() || args.to.is_some();
    match (by_key, by_filter, args.all) {
        (true, false, false) => {
            let missing: Vec<&str> = [
                ("--ordering-id", args.ordering_id.is_none()),
                ("--scheduled-time", args.scheduled_time.is_none()),
                ("--uniqueness-key", args.uniqueness_key.is_none()),
            ]
            .into_iter()
            .filter_map(|(flag, missing)| missing.then_some(flag))
            .collect();
            if !missing.is_empty() {
                return Err(Failure::usage(format!(
                    "a dead letter is named by its task's --ordering-id, --scheduled-time and \
                     --uniqueness-key together; missing {}",
                    missing.join(", ")
                )));
            }
            Ok(DeadLetterSelection {
                ordering_id: args.ordering_id.clone(),
                scheduled_time: optional_time(args.scheduled_time.as_deref(), "--scheduled-time")?,
                uniqueness_key: args.uniqueness_key.clone(),
                ..DeadLetterSelection::default()
            })
        }
        (false, true, false) => Ok(DeadLetterSelection {
            task_type: checked_type(args.task_type.clone())?,
            from: optional_time(args.from.as_deref(), "--from")?,
            to: optional_time(args.to.as_deref(), "--to")?,
            ..DeadLetterSelection::default()
        }),
        (false, false, true) => Ok(DeadLetterSelection {
            all: true,
            ..DeadLetterSelection::default()
        }),
        (false, false, false) => Err(Failure::usage(
            "name the dead letters: a task (--ordering-id, --scheduled-time and \
             --uniqueness-key), a filter (--type, --from, --to) or --all",
        )),
        _ => Err(Failure::usage(
            "name the dead letters one way only: a task (--ordering-id, --scheduled-time and \
             --uniqueness-key), a filter (--type, --from, --to) or --all",
        )),
    }
}

/// `--type`, checked as the wire format checks a task's type (a typo matches nothing).
fn checked_type(task_type: Option<String>) -> Result<Option<String>, Failure> {
    if let Some(t) = &task_type {
        wire::check_task_type(t).map_err(|e| Failure::usage(format!("--type: {e}")))?;
    }
    Ok(task_type)
}

/// An optional RFC 3339 flag in the wire format's form; `flag` names it in the error.
fn optional_time(text: Option<&str>, flag: &str) -> Result<Option<String>, Failure> {
    text.map(|t| parse_time(t, flag).map(wire::format_time))
        .transpose()
}

/// "1 dead letter", "2 dead letters".
fn dead_letters_count(n: usize) -> String {
    if n == 1 {
        "1 dead letter".to_string()
    } else {
        format!("{n} dead letters")
    }
}
