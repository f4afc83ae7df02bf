//! `schedule`: tasks from flags or from a file of wire-format records, written to the topic.

use std::io::Write;
use std::path::PathBuf;

use chrono::{TimeDelta, Utc};
use scheduler_client::{wire, Scheduler, SchedulerConfig, Task, TaskData};
use scheduler_core::settings::duration_text;
use serde_json::Value;

use super::{parse_time, runtime};
use crate::args::ScheduleArgs;
use crate::output::{io_failure, Failure, Outcome};

pub(crate) fn schedule(args: ScheduleArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let grace = duration_text::parse(&args.grace).map_err(|e| Failure::usage(e.to_string()))?;
    let tasks = match &args.file {
        Some(path) => tasks_from_file(path)?,
        None => vec![task_from_flags(&args)?],
    };
    let mut config = SchedulerConfig::new(args.kafka.bootstrap.clone(), args.kafka.topic.clone());
    config.scheduling_grace_window = grace;
    let scheduler = Scheduler::new(config).map_err(|e| Failure::service(e.to_string()))?;
    let runtime = runtime()?;
    let mut scheduled = Vec::new();
    for task in tasks {
        runtime
            .block_on(scheduler.schedule_task(task.clone()))
            .map_err(|e| {
                let message = format!("{}: {e}", task.key());
                if e.is_rejection() {
                    Failure::usage(message)
                } else {
                    Failure::service(message)
                }
            })?;
        scheduled.push(task.key());
    }
    if json {
        let keys: Vec<Value> = scheduled
            .iter()
            .map(|k| {
                serde_json::json!({
                    "orderingId": k.ordering_id,
                    "scheduledTime": wire::format_time(k.scheduled_time),
                    "uniquenessKey": k.uniqueness_key,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::json!({ "scheduled": keys })).map_err(io_failure)?;
    } else {
        for key in &scheduled {
            writeln!(out, "scheduled {key}").map_err(io_failure)?;
        }
    }
    Ok(())
}

fn task_from_flags(args: &ScheduleArgs) -> Result<Task, Failure> {
    let ordering_id = args.ordering_id.clone().unwrap_or_default();
    let unique = args.unique.clone().unwrap_or_default();
    let at = match (&args.at, &args.delay) {
        (Some(at), _) => parse_time(at, "--at")?,
        (None, Some(delay)) => {
            let delay = duration_text::parse(delay).map_err(|e| Failure::usage(e.to_string()))?;
            Utc::now() + TimeDelta::from_std(delay).unwrap_or_default()
        }
        (None, None) => Utc::now(),
    };
    let data: TaskData = match &args.data {
        Some(text) => serde_json::from_str(text)
            .map_err(|e| Failure::usage(format!("--data must be a JSON object: {e}")))?,
        None => TaskData::new(),
    };
    Ok(Task::new(ordering_id, at, unique, data))
}

fn tasks_from_file(path: &PathBuf) -> Result<Vec<Task>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::usage(format!("{} is not JSON: {e}", path.display())))?;
    let records = match value {
        Value::Array(items) => items,
        one => vec![one],
    };
    records
        .into_iter()
        .enumerate()
        .map(|(i, record)| {
            let bytes = record.to_string().into_bytes();
            wire::decode(Some(&bytes), usize::MAX)
                .map_err(|e| Failure::usage(format!("{} record {i}: {e}", path.display())))
        })
        .collect()
}
