//! Schedules tasks from the command line.
//!
//! ```text
//! cargo run -p examples --example producer -- --topic scheduled-tasks --ordering-id customer-7 \
//!     --in 10s --data '{"action":"remind"}' [--count 5] [--unique KEY] [--bootstrap 127.0.0.1:19092]
//! ```
//! `--in` accepts `500ms`, `10s`, `5m`, `2h`; with `--count N` the tasks are 1 s apart and their
//! uniqueness keys end in `-0` .. `-{N-1}`. The bootstrap address defaults to the local stack's.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use it_tests::Stack;
use scheduler_client::{Scheduler, SchedulerConfig, Task, TaskData};
use scheduler_core::settings::duration_text;

struct Args {
    bootstrap: String,
    topic: String,
    ordering_id: String,
    delay: Duration,
    data: TaskData,
    count: u32,
    unique: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        bootstrap: Stack::from_env().kafka_bootstrap,
        topic: scheduler_client::defaults::TOPIC.into(),
        ordering_id: String::new(),
        delay: Duration::ZERO,
        data: TaskData::new(),
        count: 1,
        unique: format!("cli-{}", Utc::now().timestamp_millis()),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--bootstrap" => args.bootstrap = value,
            "--topic" => args.topic = value,
            "--ordering-id" => args.ordering_id = value,
            "--in" => args.delay = duration_text::parse(&value).map_err(|e| e.to_string())?,
            "--data" => {
                args.data = serde_json::from_str(&value)
                    .map_err(|e| format!("--data must be a JSON object: {e}"))?
            }
            "--count" => args.count = value.parse().map_err(|e| format!("--count: {e}"))?,
            "--unique" => args.unique = value,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.ordering_id.is_empty() {
        return Err("--ordering-id is required".into());
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("producer: {e}\nusage: producer --ordering-id ID [--in 10s] [--data JSON] [--count N] [--unique KEY] [--topic T] [--bootstrap HOST:PORT]");
            return std::process::ExitCode::from(2);
        }
    };
    let scheduler = match Scheduler::new(SchedulerConfig::new(
        args.bootstrap.clone(),
        args.topic.clone(),
    )) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("producer: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let first = Utc::now() + TimeDelta::from_std(args.delay).unwrap_or_default();
    for i in 0..args.count {
        let unique = if args.count == 1 {
            args.unique.clone()
        } else {
            format!("{}-{i}", args.unique)
        };
        let task = Task::new(
            &args.ordering_id,
            first + TimeDelta::seconds(i64::from(i)),
            unique,
            args.data.clone(),
        );
        match scheduler.schedule_task(task.clone()).await {
            Ok(()) => println!("scheduled {}", task.key()),
            Err(e) => {
                eprintln!("producer: {} not scheduled: {e}", task.key());
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    std::process::ExitCode::SUCCESS
}
