//! Completion events: with an events topic configured, the topic receives one event per
//! finished task, keyed by orderingId, with the outcome and attempt count.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use it_tests::engine::{by_task, task, wait_until, Recorder, TestEnv};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use scheduler_core::TaskError;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_topic_receives_one_event_per_finished_task() {
    let env = TestEnv::new("it_events", 4).await;
    let events_topic = format!("{}_events", env.topic);
    env.create_topic(&events_topic, 2).await;
    let mut settings = env.settings(TestEnv::quick_scheduling());
    settings.kafka.events_topic = Some(events_topic.clone());
    let log = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder::new("n1", &log, Duration::ZERO).with_behaviour(Arc::new(|task, _| {
        if task.ordering_id == "invalid" {
            Err(TaskError::invalid("bad payload"))
        } else {
            Ok(())
        }
    }));
    let node = env.start_sole_node(settings, recorder).await;

    let scheduler = env.scheduler(Duration::from_secs(10));
    let mut tasks: Vec<_> = (0..5)
        .map(|i| task(&format!("evt-{i}"), Utc::now(), "1"))
        .collect();
    tasks.push(task("invalid", Utc::now(), "1"));
    for t in &tasks {
        scheduler.schedule_task(t.clone()).await.expect("scheduled");
    }
    wait_until(Duration::from_secs(20), "every task to run", || {
        by_task(&log).len() == tasks.len()
    })
    .await;

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &env.stack.kafka_bootstrap)
        .set("group.id", format!("{}_reader", env.group))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[&events_topic]).expect("subscribe");
    let mut events: HashMap<String, Vec<Value>> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while events.values().map(Vec::len).sum::<usize>() < tasks.len() {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let message = tokio::time::timeout(remaining, consumer.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} events arrived: {events:?}", events.len()))
            .expect("event");
        let key = message
            .key_view::<str>()
            .and_then(Result::ok)
            .unwrap_or_default()
            .to_string();
        let event: Value =
            serde_json::from_slice(message.payload().unwrap_or_default()).expect("event JSON");
        assert_eq!(event["orderingId"], key.as_str(), "keyed by orderingId");
        events.entry(key).or_default().push(event);
    }
    // Nothing more arrives: one event per task.
    assert!(
        tokio::time::timeout(Duration::from_secs(2), consumer.recv())
            .await
            .is_err(),
        "an extra event"
    );
    for t in &tasks {
        let got = &events[&t.ordering_id];
        assert_eq!(got.len(), 1, "{}: {got:?}", t.ordering_id);
        let expected = if t.ordering_id == "invalid" {
            "dropped"
        } else {
            "completed"
        };
        assert_eq!(got[0]["outcome"], expected);
        assert_eq!(got[0]["attempts"], 1);
        assert_eq!(got[0]["type"], "task-finished");
        assert_eq!(got[0]["uniquenessKey"], "1");
    }
    node.shutdown().await.expect("clean shutdown");
}
