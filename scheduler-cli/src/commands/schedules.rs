//! `schedules create|list|show|pause|resume|delete|preview`: a queue's recurring schedules,
//! through a node's admin API, printed as a line or a table or, with `--json`, as the API's
//! answer. [`definition`] builds and checks a definition from flags or a file.

mod definition;

use std::io::Write;

use scheduler_core::admin_api::{FireView, PreviewQuery, ScheduleView};
use scheduler_core::recurring::{CatchUp, Overlap};
use scheduler_core::settings::duration_text;

use crate::admin_client::{AdminClient, AdminError};
use crate::args::{
    AdminArgs, ScheduleCreateArgs, ScheduleIdArgs, SchedulePreviewArgs, ScheduleShowArgs,
    SchedulesCommand,
};
use crate::output::{io_failure, or_dash, print_json, Outcome};
use definition::{check_schedule_id, definition, Purpose};

pub(crate) fn schedules(command: SchedulesCommand, json: bool, out: &mut dyn Write) -> Outcome {
    match command {
        SchedulesCommand::Create(args) => create(args, json, out),
        SchedulesCommand::List(args) => list(args, json, out),
        SchedulesCommand::Show(args) => show(args, json, out),
        SchedulesCommand::Pause(args) => pause(args, json, out),
        SchedulesCommand::Resume(args) => resume(args, json, out),
        SchedulesCommand::Delete(args) => delete(args, json, out),
        SchedulesCommand::Preview(args) => preview(args, json, out),
    }
}

fn create(args: ScheduleCreateArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let spec = definition(args.id.as_deref(), &args.definition, Purpose::Create)?;
    let client = AdminClient::new(&args.admin);
    // The answer alone does not tell a new schedule from an unchanged one (the API answers 201
    // for both while the schedule was never changed): the schedule before tells.
    let before = match client.schedule(&spec.id, &PreviewQuery { count: Some(1) }) {
        Ok(detail) => Some(detail.schedule),
        Err(AdminError::NotFound(_)) => None,
        Err(e) => return Err(e.into()),
    };
    let after = client.create_schedule(&spec)?;
    if json {
        return print_json(out, &after);
    }
    let id = &after.definition.id;
    let line = match before {
        None => format!("created schedule {id}"),
        // The same definition of an overdue chain: its pending tick is enqueued again.
        Some(before) if before.revision == after.revision && before.stalled && !before.paused => {
            format!("schedule {id} unchanged, its overdue tick enqueued again")
        }
        Some(before) if before.revision == after.revision => format!("schedule {id} unchanged"),
        Some(before) if before.definition != after.definition => {
            format!("redefined schedule {id}")
        }
        // The same definition, a new chain: the one before had no pending fire time left.
        Some(_) => format!("started schedule {id} again (it had no next fire)"),
    };
    writeln!(out, "{line}: {}", summary(&after)).map_err(io_failure)
}

fn list(args: AdminArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let answer = AdminClient::new(&args).schedules()?;
    if json {
        return print_json(out, &answer);
    }
    // Ids, cron descriptions and task types vary in length: each column fits its longest.
    let width = |header: &str, cell: fn(&ScheduleView) -> &str| {
        answer
            .schedules
            .iter()
            .map(|s| cell(s).len())
            .fold(header.len(), usize::max)
    };
    let id = width("ID", |s| &s.definition.id);
    let cadence = width("CADENCE", |s| &s.description);
    let task_type = width("TASK TYPE", |s| &s.definition.task_type);
    writeln!(
        out,
        "{:<id$}  {:<cadence$}  {:<task_type$}  {:<7}  {:<24}  LAST FIRE",
        "ID", "CADENCE", "TASK TYPE", "STATE", "NEXT FIRE"
    )
    .map_err(io_failure)?;
    for s in &answer.schedules {
        writeln!(
            out,
            "{:<id$}  {:<cadence$}  {:<task_type$}  {:<7}  {:<24}  {}",
            s.definition.id,
            s.description,
            s.definition.task_type,
            state(s),
            or_dash(s.next_fire.as_deref()),
            or_dash(s.last_fire.as_deref())
        )
        .map_err(io_failure)?;
    }
    Ok(())
}

fn show(args: ScheduleShowArgs, json: bool, out: &mut dyn Write) -> Outcome {
    check_schedule_id(&args.id)?;
    let query = PreviewQuery {
        count: args.count.map(usize::from),
    };
    let detail = AdminClient::new(&args.admin).schedule(&args.id, &query)?;
    if json {
        return print_json(out, &detail);
    }
    let s = &detail.schedule;
    let spec = &s.definition;
    let mut rows = vec![
        ("schedule", spec.id.clone()),
        ("cadence", s.description.clone()),
    ];
    if let Some(cron) = &spec.cron {
        let zone = spec.time_zone.as_deref().unwrap_or("UTC");
        rows.push(("cron", format!("{cron} in {zone}")));
    }
    rows.extend([
        ("task type", spec.task_type.clone()),
        ("ordering id", spec.run_ordering_id()),
        ("priority", spec.priority.to_string()),
        (
            "data",
            serde_json::Value::Object(spec.data.clone()).to_string(),
        ),
        ("overlap", overlap(spec.overlap).to_string()),
        ("catch up", catch_up(spec.catch_up, spec.catch_up_window)),
    ]);
    for (name, value) in [("jitter", spec.jitter), ("misfire", spec.misfire_threshold)] {
        if let Some(value) = value {
            rows.push((name, duration_text::format(value)));
        }
    }
    rows.extend([
        ("state", state(s).to_string()),
        ("next fire", or_dash(s.next_fire.as_deref())),
        ("last fire", or_dash(s.last_fire.as_deref())),
        ("created", s.created_at.clone()),
        ("updated", s.updated_at.clone()),
    ]);
    for (n, time) in detail.upcoming.iter().enumerate() {
        rows.push((if n == 0 { "upcoming" } else { "" }, time.clone()));
    }
    for (name, value) in rows {
        writeln!(out, "{name:<11} {value}").map_err(io_failure)?;
    }
    if detail.fires.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\n{:<24}  {:<14}  {:<24}  MISSED",
        "FIRE TIME", "OUTCOME", "RUN TIME"
    )
    .map_err(io_failure)?;
    for fire in &detail.fires {
        writeln!(
            out,
            "{:<24}  {:<14}  {:<24}  {}",
            fire.fire_time,
            fire.outcome,
            or_dash(fire.run_time.as_deref()),
            missed(fire)
        )
        .map_err(io_failure)?;
    }
    Ok(())
}

fn pause(args: ScheduleIdArgs, json: bool, out: &mut dyn Write) -> Outcome {
    check_schedule_id(&args.id)?;
    let answer = AdminClient::new(&args.admin).pause_schedule(&args.id)?;
    if json {
        return print_json(out, &answer);
    }
    writeln!(out, "paused schedule {}: {}", args.id, summary(&answer)).map_err(io_failure)
}

fn resume(args: ScheduleIdArgs, json: bool, out: &mut dyn Write) -> Outcome {
    check_schedule_id(&args.id)?;
    let answer = AdminClient::new(&args.admin).resume_schedule(&args.id)?;
    if json {
        return print_json(out, &answer);
    }
    writeln!(out, "resumed schedule {}: {}", args.id, summary(&answer)).map_err(io_failure)
}

fn delete(args: ScheduleIdArgs, json: bool, out: &mut dyn Write) -> Outcome {
    check_schedule_id(&args.id)?;
    AdminClient::new(&args.admin).delete_schedule(&args.id)?;
    if json {
        return print_json(out, &serde_json::json!({ "id": args.id, "deleted": true }));
    }
    writeln!(out, "deleted schedule {}", args.id).map_err(io_failure)
}

fn preview(args: SchedulePreviewArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let spec = definition(args.id.as_deref(), &args.definition, Purpose::Preview)?;
    let query = PreviewQuery {
        count: args.count.map(usize::from),
    };
    let answer = AdminClient::new(&args.admin).preview_schedule(&spec, &query)?;
    if json {
        return print_json(out, &answer);
    }
    writeln!(out, "{}", answer.description).map_err(io_failure)?;
    for time in &answer.upcoming {
        writeln!(out, "{time}").map_err(io_failure)?;
    }
    Ok(())
}

/// A schedule's cadence and where it stands, after the line that names it.
fn summary(s: &ScheduleView) -> String {
    match (s.paused, &s.next_fire) {
        (true, _) => format!("{}, paused", s.description),
        (false, Some(next)) if s.stalled => format!("{}, stalled since {next}", s.description),
        (false, Some(next)) => format!("{}, next fire {next}", s.description),
        (false, None) => format!("{}, no next fire", s.description),
    }
}

/// active, paused, or stalled (its pending tick is over a minute overdue).
fn state(s: &ScheduleView) -> &'static str {
    match (s.paused, s.stalled) {
        (true, _) => "paused",
        (false, true) => "stalled",
        (false, false) => "active",
    }
}

/// `--overlap`'s word for it.
fn overlap(overlap: Overlap) -> &'static str {
    match overlap {
        Overlap::Skip => "skip",
        Overlap::Allow => "allow",
    }
}

/// `--catch-up`'s word for it, and its window when set.
fn catch_up(catch_up: CatchUp, window: Option<std::time::Duration>) -> String {
    let policy = match catch_up {
        CatchUp::Skip => "skip",
        CatchUp::Once => "once",
        CatchUp::All => "all",
    };
    match window {
        Some(window) => format!("{policy} (window {})", duration_text::format(window)),
        None => policy.to_string(),
    }
}

/// A missed fire's count and last fire time; `-` for other outcomes.
fn missed(fire: &FireView) -> String {
    match (fire.missed_count, &fire.missed_last) {
        (Some(count), Some(last)) => format!("{count}, the last {last}"),
        (Some(count), None) => count.to_string(),
        _ => "-".to_string(),
    }
}
