//! A schedule's definition from `create`'s and `preview`'s flags or `--file`, checked before
//! anything is sent: as the node checks it, and its runs as the wire format checks tasks (a run
//! the node would refuse to enqueue would stall the schedule at its first fire).

use std::path::Path;

use scheduler_client::TaskData;
use scheduler_core::recurring::ScheduleSpec;

use super::super::parse_duration;
use crate::args::ScheduleDefinitionArgs;
use crate::output::Failure;

/// The id and task type of a preview's definition given by flags without them: a preview
/// names nothing and enqueues nothing.
const PREVIEW: &str = "preview";

/// What the definition is for: a preview needs no id nor task type.
#[derive(Clone, Copy)]
pub(super) enum Purpose {
    Create,
    Preview,
}

/// The definition `args` give, checked: `--file`'s (`id`, if given, must be its id), or the
/// flags' named `id`.
pub(super) fn definition(
    id: Option<&str>,
    args: &ScheduleDefinitionArgs,
    purpose: Purpose,
) -> Result<ScheduleSpec, Failure> {
    let spec = match &args.file {
        Some(path) => from_file(path, id)?,
        None => from_flags(id, args, purpose)?,
    };
    check(&spec)?;
    Ok(spec)
}

fn from_file(path: &Path, id: Option<&str>) -> Result<ScheduleSpec, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    let spec: ScheduleSpec = serde_json::from_str(&text).map_err(|e| {
        Failure::usage(format!(
            "{} is not a schedule definition (the admin API's JSON): {e}",
            path.display()
        ))
    })?;
    match id {
        Some(id) if id != spec.id => Err(Failure::usage(format!(
            "the id {id:?} is not the id of {}, {:?}",
            path.display(),
            spec.id
        ))),
        _ => Ok(spec),
    }
}

fn from_flags(
    id: Option<&str>,
    args: &ScheduleDefinitionArgs,
    purpose: Purpose,
) -> Result<ScheduleSpec, Failure> {
    // clap requires the id and the task type of a create (without --file).
    let or_default = |value: Option<&str>, what: &str| match (value, purpose) {
        (Some(value), _) => Ok(value.to_string()),
        (None, Purpose::Preview) => Ok(PREVIEW.to_string()),
        (None, Purpose::Create) => Err(Failure::usage(format!("{what} is required"))),
    };
    let duration = |text: &Option<String>, flag: &str| {
        text.as_deref()
            .map(|text| parse_duration(text, flag))
            .transpose()
    };
    let data: TaskData = match &args.data {
        Some(text) => serde_json::from_str(text)
            .map_err(|e| Failure::usage(format!("--data must be a JSON object: {e}")))?,
        None => TaskData::new(),
    };
    Ok(ScheduleSpec {
        id: or_default(id, "the schedule's id")?,
        cron: args.cron.clone(),
        time_zone: args.time_zone.clone(),
        every: duration(&args.every, "--every")?,
        task_type: or_default(args.task_type.as_deref(), "--task-type")?,
        ordering_id: args.ordering_id.clone(),
        data,
        priority: args.priority,
        overlap: args.overlap.map(Into::into).unwrap_or_default(),
        catch_up: args.catch_up.map(Into::into).unwrap_or_default(),
        catch_up_window: duration(&args.catch_up_window, "--catch-up-window")?,
        jitter: duration(&args.jitter, "--jitter")?,
        misfire_threshold: duration(&args.misfire_threshold, "--misfire-threshold")?,
    })
}

/// Refuses a definition the node would refuse (its cadence, and runs it could not enqueue).
fn check(spec: &ScheduleSpec) -> Result<(), Failure> {
    (spec.validate()).map_err(|e| Failure::usage(format!("invalid schedule: {e}")))?;
    Ok(())
}

/// [`crate::commands::check_path_id`] for a schedule (as [`ScheduleSpec::validate`] checks).
pub(super) fn check_schedule_id(id: &str) -> Result<(), Failure> {
    crate::commands::check_path_id("schedule", id)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use scheduler_core::recurring::InvalidSchedule;

    use super::*;

    /// The command's rule is the engine's: an id `validate` takes is asked for, one it
    /// refuses is refused here too.
    #[test]
    fn schedule_ids_are_checked_as_validate_checks_them() {
        let long = "s".repeat(200);
        let too_long = "s".repeat(201);
        for id in [
            "nightly-report",
            "a.b:c_D9",
            long.as_str(),
            "",
            too_long.as_str(),
            "a/b",
            "a b",
            "ä",
            "a?b",
            "a%2Fb",
        ] {
            let spec = ScheduleSpec::every(id, Duration::from_secs(2), "report", TaskData::new());
            let engine_takes = !matches!(spec.validate(), Err(InvalidSchedule::Id(_)));
            assert_eq!(check_schedule_id(id).is_ok(), engine_takes, "{id:?}");
        }
    }

    /// Definitions whose runs' enqueue would be refused.
    #[test]
    fn definitions_whose_runs_would_be_refused_are_refused() {
        let every = |task_type: &str| {
            ScheduleSpec::every("s", Duration::from_secs(2), task_type, TaskData::new())
        };
        assert!(check(&every("report")).is_ok());
        for spec in [
            every("send email"),
            every(&"t".repeat(129)),
            every("report").ordering_id("o".repeat(2000)),
        ] {
            let failure = check(&spec).expect_err("refused");
            assert!(
                failure
                    .message
                    .starts_with("invalid schedule: its runs would be refused: "),
                "{}",
                failure.message
            );
        }
    }
}
