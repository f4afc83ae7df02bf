//! The Kafka broker behaves as the engine needs: keyed messages, a consumer group whose members
//! split the partitions and take over a leaver's, and committed offsets honoured on restart.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use it_tests::teardown::Teardown;
use it_tests::{unique_name, Stack};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;

const PARTITIONS: i32 = 8;
const GROUP_TIMEOUT: Duration = Duration::from_secs(30);

/// One member of the test's consumer group, with everything it received.
struct Member {
    name: &'static str,
    consumer: BaseConsumer,
    received: Vec<String>,
}

impl Member {
    fn join(stack: &Stack, group: &str, topic: &str, name: &'static str) -> Member {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &stack.kafka_bootstrap)
            .set("group.id", group)
            .set("client.id", name)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "6000")
            .set("heartbeat.interval.ms", "500")
            .set("partition.assignment.strategy", "range")
            .create()
            .expect("consumer config");
        consumer.subscribe(&[topic]).expect("subscribe");
        Member {
            name,
            consumer,
            received: Vec::new(),
        }
    }

    /// Polls once briefly, keeping the member's group session alive and collecting a message.
    fn poll(&mut self) {
        if let Some(result) = self.consumer.poll(Duration::from_millis(20)) {
            let message = result.unwrap_or_else(|e| panic!("{} poll: {e}", self.name));
            let payload = message
                .payload_view::<str>()
                .and_then(Result::ok)
                .unwrap_or_default();
            self.received.push(payload.to_string());
        }
    }

    fn partitions(&self) -> BTreeSet<i32> {
        self.consumer
            .assignment()
            .expect("assignment")
            .elements()
            .iter()
            .map(|e| e.partition())
            .collect()
    }

    /// Leaves the group cleanly.
    fn leave(self) {
        self.consumer.unsubscribe();
        for _ in 0..10 {
            self.consumer.poll(Duration::from_millis(20));
        }
        drop(self.consumer);
    }
}

/// Polls every member until `done` holds for their assignments, or panics with what it saw.
fn poll_until(members: &mut [&mut Member], what: &str, done: impl Fn(&[BTreeSet<i32>]) -> bool) {
    let deadline = Instant::now() + GROUP_TIMEOUT;
    loop {
        for member in members.iter_mut() {
            member.poll();
        }
        let assignments: Vec<BTreeSet<i32>> = members.iter().map(|m| m.partitions()).collect();
        if done(&assignments) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; assignments: {assignments:?}"
        );
    }
}

fn all_partitions() -> BTreeSet<i32> {
    (0..PARTITIONS).collect()
}

async fn produce(stack: &Stack, topic: &str, round: &str, count: usize) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()
        .expect("producer config");
    let sends = (0..count).map(|i| {
        let key = format!("key-{}", i % 50);
        let payload = format!("{round}-{i}");
        let producer = &producer;
        async move {
            producer
                .send(
                    FutureRecord::to(topic).key(&key).payload(&payload),
                    Timeout::After(Duration::from_secs(10)),
                )
                .await
                .map_err(|(e, _)| e)
        }
    });
    for result in futures::future::join_all(sends).await {
        result.expect("delivery acknowledged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_group_splits_takes_over_and_resumes_from_committed_offsets() {
    let stack = Stack::from_env();
    stack.require_kafka().await;
    let topic = unique_name("it_stack_kafka");
    let _teardown = Teardown::new(stack.clone()).topic(&topic);
    let group = unique_name("it_stack_group");

    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_bootstrap)
        .create()
        .expect("admin config");
    let created = admin
        .create_topics(
            &[NewTopic::new(
                &topic,
                PARTITIONS,
                TopicReplication::Fixed(1),
            )],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create topic request");
    for result in created {
        result.unwrap_or_else(|(name, code)| panic!("create topic {name}: {code}"));
    }

    produce(&stack, &topic, "first", 200).await;

    // Blocking consumer calls run off the async runtime's workers.
    let (stack2, topic2, group2) = (stack.clone(), topic.clone(), group.clone());
    tokio::task::spawn_blocking(move || {
        let mut a = Member::join(&stack2, &group2, &topic2, "member-a");
        poll_until(&mut [&mut a], "member-a to own every partition", |s| {
            s[0] == all_partitions()
        });

        let mut b = Member::join(&stack2, &group2, &topic2, "member-b");
        poll_until(
            &mut [&mut a, &mut b],
            "the partitions to split between two members",
            |s| {
                !s[0].is_empty()
                    && !s[1].is_empty()
                    && s[0].is_disjoint(&s[1])
                    && &s[0] | &s[1] == all_partitions()
            },
        );

        b.leave();
        poll_until(
            &mut [&mut a],
            "member-a to take over member-b's partitions",
            |s| s[0] == all_partitions(),
        );

        // Consume until every partition's position reaches its high watermark (partitions read
        // before the rebalance are fetched again from the start), commit the positions, leave.
        let deadline = Instant::now() + GROUP_TIMEOUT;
        let high: Vec<(i32, i64)> = (0..PARTITIONS)
            .map(|p| {
                let (_, high) = a
                    .consumer
                    .fetch_watermarks(&topic2, p, Duration::from_secs(5))
                    .expect("watermarks");
                (p, high)
            })
            .collect();
        assert_eq!(
            high.iter().map(|(_, h)| h).sum::<i64>(),
            200,
            "200 messages on the topic"
        );
        loop {
            let positions = a.consumer.position().expect("positions");
            let caught_up = high.iter().all(|&(p, h)| {
                positions
                    .find_partition(&topic2, p)
                    .and_then(|e| e.offset().to_raw())
                    == Some(h)
            });
            if caught_up {
                break;
            }
            a.poll();
            assert!(
                Instant::now() < deadline,
                "member-a did not catch up: {positions:?}"
            );
        }
        a.consumer
            .commit_consumer_state(CommitMode::Sync)
            .expect("commit");
        a.leave();
    })
    .await
    .expect("group phase");

    produce(&stack, &topic, "second", 40).await;

    let (stack2, topic2, group2) = (stack.clone(), topic.clone(), group.clone());
    let resumed = tokio::task::spawn_blocking(move || {
        let mut c = Member::join(&stack2, &group2, &topic2, "member-c");
        let deadline = Instant::now() + GROUP_TIMEOUT;
        while c.received.len() < 40 {
            c.poll();
            assert!(
                Instant::now() < deadline,
                "member-c received only {:?}",
                c.received
            );
        }
        // Anything committed before must not come again, even given a moment more.
        let settle = Instant::now() + Duration::from_secs(2);
        while Instant::now() < settle {
            c.poll();
        }
        let received = std::mem::take(&mut c.received);
        c.leave();
        received
    })
    .await
    .expect("resume phase");

    let expected: HashSet<String> = (0..40).map(|i| format!("second-{i}")).collect();
    let got: HashSet<String> = resumed.iter().cloned().collect();
    assert_eq!(
        resumed.len(),
        40,
        "no duplicates and nothing from before the commit: {resumed:?}"
    );
    assert_eq!(got, expected);
}
