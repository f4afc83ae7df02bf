//! A scheduler node whose executor prints every task it runs.
//!
//! ```text
//! cargo run -p examples --example printing_node -- [settings.toml]
//! ```
//! Settings come from the file (if given) and `SCHEDULER__SECTION__KEY` environment variables;
//! without either, the node uses the local stack's addresses, topic `scheduled-tasks` (created
//! with 8 partitions if absent) and keyspace `scheduler`. Stop it with Ctrl-C (a graceful
//! shutdown: running tasks finish, offsets are committed, the node leaves the group).

use std::path::PathBuf;

use chrono::Utc;
use it_tests::Stack;
use scheduler_core::{SchedulerNode, Settings, Task, TaskContext, TaskError, TaskHandler};

struct PrintingExecutor;

impl TaskHandler for PrintingExecutor {
    async fn execute(&self, task: &Task, _ctx: &TaskContext) -> Result<(), TaskError> {
        let late = Utc::now() - task.scheduled_time;
        println!(
            "ran {} (late by {} ms) data {}",
            task.key(),
            late.num_milliseconds(),
            serde_json::Value::Object(task.task_data.clone())
        );
        Ok(())
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let path = std::env::args().nth(1).map(PathBuf::from);
    let mut settings = match Settings::load(path.as_deref()) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("printing_node: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if path.is_none() && std::env::vars().all(|(k, _)| !k.starts_with("SCHEDULER__")) {
        let stack = Stack::from_env();
        settings.kafka.bootstrap_servers = stack.kafka_bootstrap;
        settings.kafka.create_topic_partitions = Some(8);
        settings.cassandra.contact_points = vec![stack.cql_contact_point];
        settings.cassandra.fetch_schema_metadata = false;
        settings.cassandra.auto_migrate = true;
    }
    let node = match SchedulerNode::start(settings, PrintingExecutor).await {
        Ok(node) => node,
        Err(e) => {
            eprintln!("printing_node: cannot start: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match node.admin_address() {
        Some(addr) => {
            println!("node running; admin API at http://{addr}/api/v1/status; Ctrl-C to stop")
        }
        None => println!("node running; Ctrl-C to stop"),
    }
    if let Err(e) = tokio::signal::ctrl_c().await {
        eprintln!("printing_node: cannot wait for Ctrl-C: {e}");
    }
    println!("stopping: owned partitions {:?}", node.owned_partitions());
    match node.shutdown().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("printing_node: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
