//! The README's demo: two nodes share a topic, tasks are scheduled across several orderingIds,
//! each node prints the partitions it owns and the tasks it runs; then one node stops and the
//! other takes over its partitions and runs its pending tasks. Run it with `dev/demo`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use it_tests::{unique_name, Stack};
use scheduler_client::{partition_for, Scheduler, SchedulerConfig, Task, TaskKey};
use scheduler_core::settings::{
    AdminSettings, CassandraSettings, KafkaSettings, SchedulingSettings, Settings,
};
use scheduler_core::{SchedulerNode, TaskContext, TaskError, TaskHandler};

const PARTITIONS: u32 = 6;
const TASKS: i64 = 24;

type RunLog = Arc<Mutex<Vec<(String, TaskKey)>>>;

struct DemoExecutor {
    node: &'static str,
    runs: RunLog,
}

impl TaskHandler for DemoExecutor {
    async fn execute(&self, task: &Task, _ctx: &TaskContext) -> Result<(), TaskError> {
        let late = (Utc::now() - task.scheduled_time).num_milliseconds();
        println!(
            "  [{}] ran {:<9} {:<6} (partition {}, due {}, late {late} ms)",
            self.node,
            task.ordering_id,
            task.uniqueness_key,
            partition_for(&task.ordering_id, PARTITIONS),
            task.scheduled_time.format("%H:%M:%S%.3f")
        );
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((self.node.to_string(), task.key()));
        Ok(())
    }
}

type DemoResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

async fn wait_for(
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> bool,
) -> DemoResult<Duration> {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > timeout {
            return Err(format!("timed out after {timeout:?} waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(started.elapsed())
}

fn owned(node: &SchedulerNode) -> BTreeSet<i32> {
    node.owned_partitions().into_iter().collect()
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> DemoResult<()> {
    let stack = Stack::from_env();
    stack.check_kafka().await?;
    drop(stack.cassandra_session().await?);
    let topic = unique_name("demo");
    let settings = Settings {
        scheduling: SchedulingSettings {
            isolation_wait: Duration::from_millis(500),
            ..SchedulingSettings::default()
        },
        kafka: KafkaSettings {
            bootstrap_servers: stack.kafka_bootstrap.clone(),
            topic: topic.clone(),
            group_id: format!("{topic}_nodes"),
            create_topic_partitions: Some(PARTITIONS),
            ..KafkaSettings::default()
        },
        cassandra: CassandraSettings {
            contact_points: vec![stack.cql_contact_point.clone()],
            keyspace: "scheduler_demo".into(),
            fetch_schema_metadata: false,
            // A development keyspace: the first node creates its schema.
            auto_migrate: true,
            ..CassandraSettings::default()
        },
        admin: AdminSettings {
            listen: "127.0.0.1:0".into(),
            ..AdminSettings::default()
        },
        ..Settings::default()
    };
    println!("topic {topic} with {PARTITIONS} partitions; keyspace scheduler_demo");
    let runs: RunLog = Arc::default();
    let executor = |node| DemoExecutor {
        node,
        runs: Arc::clone(&runs),
    };

    let node1 = SchedulerNode::start(settings.clone(), executor("node-1")).await?;
    wait_for("node-1 to own the topic", Duration::from_secs(30), || {
        owned(&node1).len() == PARTITIONS as usize
    })
    .await?;
    let node2 = SchedulerNode::start(settings.clone(), executor("node-2")).await?;
    wait_for(
        "the nodes to split the partitions",
        Duration::from_secs(30),
        || {
            let (a, b) = (owned(&node1), owned(&node2));
            !a.is_empty() && !b.is_empty() && a.len() + b.len() == PARTITIONS as usize
        },
    )
    .await?;
    let node2_partitions = owned(&node2);
    println!("node-1 owns partitions {:?}", owned(&node1));
    println!("node-2 owns partitions {node2_partitions:?}");

    let scheduler = Scheduler::new(SchedulerConfig::new(
        stack.kafka_bootstrap.clone(),
        topic.clone(),
    ))?;
    let start = Utc::now() + TimeDelta::seconds(2);
    let tasks: Vec<Task> = (0..TASKS)
        .map(|i| {
            let data = serde_json::json!({ "step": i });
            Task::new(
                format!("order-{}", i % 8),
                start + TimeDelta::milliseconds(i * 500),
                format!("task-{i}"),
                data.as_object().cloned().unwrap_or_default(),
            )
        })
        .collect();
    for task in &tasks {
        scheduler.schedule_task(task.clone()).await?;
    }
    println!(
        "scheduled {TASKS} tasks across 8 orderingIds, due every 0.5 s over the next {} s",
        TASKS / 2 + 2
    );

    tokio::time::sleep(Duration::from_secs(6)).await;
    println!("stopping node-2 (it owns {node2_partitions:?}); its pending tasks move to node-1");
    node2.shutdown().await?;
    let took = wait_for("node-1 to take over", Duration::from_secs(30), || {
        owned(&node1).len() == PARTITIONS as usize
    })
    .await?;
    println!(
        "node-1 took over node-2's partitions within {} ms: it now owns {:?}",
        took.as_millis(),
        owned(&node1)
    );

    let keys: BTreeSet<TaskKey> = tasks.iter().map(Task::key).collect();
    wait_for("every task to run", Duration::from_secs(60), || {
        let done: BTreeSet<TaskKey> = runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(_, k)| k.clone())
            .collect();
        keys.is_subset(&done)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    node1.shutdown().await?;

    let runs = runs.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut per_task: HashMap<&TaskKey, usize> = HashMap::new();
    for (_, key) in &runs {
        *per_task.entry(key).or_default() += 1;
    }
    let by = |n: &str| runs.iter().filter(|(node, _)| node == n).count();
    let taken_over = runs
        .iter()
        .filter(|(node, key)| {
            node == "node-1"
                && node2_partitions.contains(&partition_for(&key.ordering_id, PARTITIONS))
        })
        .count();
    let twice = per_task.values().filter(|n| **n > 1).count();
    println!(
        "all {TASKS} tasks ran: node-1 ran {}, node-2 ran {}; node-1 ran {taken_over} tasks of node-2's former partitions after the handover; lost 0, ran twice {twice}",
        by("node-1"),
        by("node-2"),
    );
    if twice > 0 {
        return Err(format!("{twice} tasks ran twice").into());
    }
    Ok(())
}
