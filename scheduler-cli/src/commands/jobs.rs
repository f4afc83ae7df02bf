//! `jobs list` and `jobs show`: the jobs coordinators started (`TaskContext::start_job`) and
//! their progress, through a node's admin API, printed as a table or, with `--json`, as the
//! API's answer.

use std::io::Write;

use scheduler_core::admin_api::JobView;

use crate::admin_client::AdminClient;
use crate::args::{AdminArgs, JobShowArgs, JobsCommand};
use crate::output::{io_failure, one_line, print_json, Failure, Outcome};

pub(crate) fn jobs(command: JobsCommand, json: bool, out: &mut dyn Write) -> Outcome {
    match command {
        JobsCommand::List(args) => list(args, json, out),
        JobsCommand::Show(args) => show(args, json, out),
    }
}

fn list(args: AdminArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let answer = AdminClient::new(&args).jobs()?;
    if json {
        return print_json(out, &answer);
    }
    writeln!(
        out,
        "{:<24} {:<9} {:>11} {:>7} {:>12}  STARTED",
        "ID", "STATE", "BUCKETS", "FAILED", "ITEMS"
    )
    .map_err(io_failure)?;
    for job in &answer.jobs {
        writeln!(
            out,
            "{:<24} {:<9} {:>11} {:>7} {:>12}  {}",
            job.id,
            job.state,
            format!("{}/{}", finished(job), job.buckets),
            job.failed,
            job.items,
            job.started_at
        )
        .map_err(io_failure)?;
    }
    Ok(())
}

fn show(args: JobShowArgs, json: bool, out: &mut dyn Write) -> Outcome {
    check_job_id(&args.id)?;
    let job = AdminClient::new(&args.admin).job(&args.id)?;
    if json {
        return print_json(out, &job);
    }
    let rows = [
        ("job", job.id.clone()),
        ("state", job.state.clone()),
        ("coordinator", job.coordinator.clone()),
        // What `scheduler suspend --group` takes to suspend the job's buckets.
        ("group", format!("{}/{}", job.task_type, job.group)),
        (
            "buckets",
            format!(
                "{} completed, {} failed, {} cancelled, {} pending (of {})",
                job.completed, job.failed, job.cancelled, job.pending, job.buckets
            ),
        ),
        ("items", job.items.to_string()),
        (
            "suspended",
            if job.suspended { "yes" } else { "no" }.to_string(),
        ),
        ("started", job.started_at.clone()),
    ];
    for (name, value) in rows {
        writeln!(out, "{name:<11} {value}").map_err(io_failure)?;
    }
    if job.errors.is_empty() {
        return Ok(());
    }
    // Bucket tasks' keys are long (the job's id, the time): the column fits the longest.
    let width = job.errors.iter().map(|e| e.task.len()).max().unwrap_or(0);
    writeln!(
        out,
        "\n{:<7} {:<8} {:<width$} ERROR",
        "BUCKET", "STATUS", "TASK"
    )
    .map_err(io_failure)?;
    for e in &job.errors {
        writeln!(
            out,
            "{:<7} {:<8} {:<width$} {}",
            e.bucket,
            e.status,
            e.task,
            one_line(&e.error)
        )
        .map_err(io_failure)?;
    }
    // The answer lists the first failed buckets only.
    if job.errors.len() < job.failed {
        writeln!(out, "(and {} more)", job.failed - job.errors.len()).map_err(io_failure)?;
    }
    Ok(())
}

/// The buckets with a final outcome.
fn finished(job: &JobView) -> usize {
    job.completed + job.failed + job.cancelled
}

/// [`super::check_path_id`] for a job.
fn check_job_id(id: &str) -> Result<(), Failure> {
    super::check_path_id("job", id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use scheduler_core::{JobSpec, SpawnError, TaskContext, TaskData};

    /// The command's rule is the engine's: an id `start_job` takes is asked for, one it
    /// refuses is refused here too.
    #[test]
    fn job_ids_are_checked_as_start_job_checks_them() {
        let long = "j".repeat(200);
        let too_long = "j".repeat(201);
        for id in [
            "nightly-2026-11-23",
            "a.b:c_d",
            long.as_str(),
            "",
            too_long.as_str(),
            "a/b",
            "a b",
            "ä",
            "a?b",
            "..",
        ] {
            let job = JobSpec {
                id: id.to_string(),
                bucket_type: "bucket".into(),
                buckets: vec![TaskData::new()],
            };
            let engine = TaskContext::detached(0, 1).start_job(job);
            let engine_takes = !matches!(engine, Err(SpawnError::BadJobId(_)));
            assert_eq!(check_job_id(id).is_ok(), engine_takes, "{id:?}");
        }
    }
}
