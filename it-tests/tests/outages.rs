//! Outages of the services under a running node: Cassandra down (nothing accepted is lost,
//! offsets wait, the node recovers by itself) and the broker down (the client fails clearly
//! within its timeout, the node reconnects by itself).
//!
//! These tests stop and start the shared stack's services, so they live in their own test
//! binary (cargo runs test binaries one at a time) and run one after the other.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use it_tests::engine::{by_task, task, wait_until, Execution, Recorder, TestEnv};
use it_tests::{dev_stack, RestartStackOnDrop};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use scheduler_client::{Scheduler, SchedulerConfig};
use scheduler_core::store::{StatusStore, TaskStatus};
use scheduler_core::SchedulerNode;

/// One outage at a time: the services are shared.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The group's committed offset of each partition (`-1`: none).
fn committed(env: &TestEnv) -> Vec<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &env.stack.kafka_bootstrap)
        .set("group.id", &env.group)
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..env.partitions as i32 {
        list.add_partition(&env.topic, p);
    }
    let offsets = consumer
        .committed_offsets(list, Duration::from_secs(10))
        .expect("committed offsets");
    offsets
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => o,
            _ => -1,
        })
        .collect()
}

/// A node that owns every partition of `env`'s topic, recording its executions.
async fn recorded_node(env: &TestEnv) -> (SchedulerNode, Arc<Mutex<Vec<Execution>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = env
        .start_sole_node(
            env.settings(TestEnv::quick_scheduling()),
            Recorder::new("node", &log, Duration::ZERO),
        )
        .await;
    (node, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cassandra_down_loses_nothing_holds_offsets_and_the_node_recovers_by_itself() {
    let _serial = SERIAL.lock().await;
    let env = TestEnv::new("outage_cassandra", 2).await;
    let (node, log) = recorded_node(&env).await;
    let scheduler = env.scheduler(Duration::from_secs(10));
    // One task before the outage, so the group has committed offsets to compare with.
    let first = task("before", Utc::now(), "0");
    scheduler
        .schedule_task(first.clone())
        .await
        .expect("accepted");
    wait_until(Duration::from_secs(30), "the first task to run", || {
        by_task(&log).contains_key(&first.key())
    })
    .await;
    wait_until(
        Duration::from_secs(10),
        "its offset to be committed",
        || committed(&env).iter().any(|o| *o > 0),
    )
    .await;
    let before = committed(&env);

    let restart = RestartStackOnDrop;
    dev_stack(&["stop", "cassandra"]);
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            task(
                &format!("o-{i}"),
                Utc::now() + TimeDelta::seconds(1),
                &format!("{i}"),
            )
        })
        .collect();
    for t in &tasks {
        scheduler
            .schedule_task(t.clone())
            .await
            .expect("Kafka accepts while Cassandra is down");
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    let ran_during = tasks
        .iter()
        .filter(|t| by_task(&log).contains_key(&t.key()))
        .count();
    assert_eq!(
        ran_during, 0,
        "nothing runs while its schedule cannot be written"
    );
    assert_eq!(
        committed(&env),
        before,
        "no offset is committed for unpersisted tasks"
    );

    drop(restart); // Cassandra comes back.
    wait_until(
        Duration::from_secs(90),
        "every task to run after Cassandra returned",
        || tasks.iter().all(|t| by_task(&log).contains_key(&t.key())),
    )
    .await;
    let store = env.store().await;
    for t in &tasks {
        let partition = scheduler_client::partition_for(&t.ordering_id, env.partitions);
        let status = store
            .status(partition, t.key())
            .await
            .expect("status read")
            .map(|s| s.status);
        assert_eq!(status, Some(TaskStatus::Completed), "{}", t.key());
    }
    wait_until(Duration::from_secs(30), "the offsets to move on", || {
        committed(&env).iter().sum::<i64>() > before.iter().sum::<i64>()
    })
    .await;
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_fails_the_client_clearly_and_the_node_reconnects_by_itself() {
    let _serial = SERIAL.lock().await;
    let env = TestEnv::new("outage_broker", 2).await;
    let (node, log) = recorded_node(&env).await;
    let mut config = SchedulerConfig::new(env.stack.kafka_bootstrap.clone(), env.topic.clone());
    config.delivery_timeout = Duration::from_secs(3);
    let scheduler = Scheduler::new(config).expect("scheduler");
    scheduler
        .schedule_task(task("warm", Utc::now(), "0"))
        .await
        .expect("accepted while the broker is up");

    let restart = RestartStackOnDrop;
    dev_stack(&["stop", "kafka"]);
    let started = Instant::now();
    let refused = task("refused", Utc::now() + TimeDelta::seconds(5), "1");
    let error = scheduler
        .schedule_task(refused.clone())
        .await
        .expect_err("no success for a task the broker did not take");
    let took = started.elapsed();
    println!("schedule_task with the broker down failed after {took:?}: {error}");
    assert!(
        took < Duration::from_secs(5),
        "fails within its 3 s timeout, took {took:?}"
    );
    assert!(
        error
            .to_string()
            .contains("Kafka did not acknowledge the task"),
        "{error}"
    );
    assert!(error.is_retryable(), "{error:?}");

    drop(restart); // The broker comes back.
    let after = task("after", Utc::now() + TimeDelta::seconds(1), "2");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match scheduler.schedule_task(after.clone()).await {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "broker never came back: {e}"),
        }
    }
    wait_until(
        Duration::from_secs(60),
        "the node to run a task after the broker returned",
        || by_task(&log).contains_key(&after.key()),
    )
    .await;
    node.shutdown().await.expect("shutdown");
}
