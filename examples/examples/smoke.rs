//! Smoke check of the local stack: one task goes through Kafka and into Cassandra and back.
//!
//! Produces a task in the scheduler's JSON wire format (v1) to a fresh topic, consumes it in a consumer
//! group, writes it to a time-bucketed table through the CQL bridge, and reads it back.
//! Run it with `dev/demo` (which starts the stack first) or `cargo run -p examples --example smoke`.

use std::time::{Duration, Instant};

use chrono::{DurationRound, TimeDelta, Utc};
use it_tests::{unique_name, Stack};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use scheduler_client::{wire, Task};

type SmokeResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[tokio::main]
async fn main() -> SmokeResult<()> {
    let stack = Stack::from_env();
    let started = Instant::now();
    stack.check_kafka().await?;
    let session = stack.cassandra_session().await?;
    println!(
        "stack reachable: Kafka {}, CQL {}",
        stack.kafka_bootstrap, stack.cql_contact_point
    );

    let topic = unique_name("smoke");
    let data = serde_json::json!({"greeting": "hello from the smoke test"});
    let task = Task::new(
        "smoke-order",
        Utc::now() + TimeDelta::seconds(30),
        "smoke-1",
        data.as_object().cloned().unwrap_or_default(),
    );
    let scheduled_time = task.scheduled_time;
    let payload = String::from_utf8(wire::encode(&task))?;

    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()?;
    let rdkafka::producer::future_producer::Delivery {
        partition, offset, ..
    } = producer
        .send(
            FutureRecord::to(&topic)
                .key("smoke-order")
                .payload(&payload),
            Timeout::After(Duration::from_secs(10)),
        )
        .await
        .map_err(|(e, _)| e)?;
    println!("produced to {topic} partition {partition} offset {offset}: {payload}");

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_bootstrap)
        .set("group.id", unique_name("smoke_group"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()?;
    consumer.subscribe(&[&topic])?;
    let message = tokio::time::timeout(Duration::from_secs(30), consumer.recv()).await??;
    let consumed = message
        .payload_view::<str>()
        .transpose()?
        .unwrap_or_default()
        .to_string();
    println!(
        "consumed from partition {} offset {}",
        message.partition(),
        message.offset()
    );
    if consumed != payload {
        return Err(format!("consumed {consumed:?}, produced {payload:?}").into());
    }
    consumer.commit_message(&message, rdkafka::consumer::CommitMode::Sync)?;

    let keyspace = "scheduler_smoke";
    session
        .query_unpaged(
            format!(
                "CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = \
                 {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
            ),
            &[],
        )
        .await?;
    session
        .query_unpaged(
            format!(
                "CREATE TABLE IF NOT EXISTS {keyspace}.scheduled_tasks (partition_id int, hour_bucket timestamp, \
                 scheduled_time timestamp, ordering_id text, uniqueness_key text, task_data text, \
                 PRIMARY KEY ((partition_id, hour_bucket), scheduled_time, ordering_id, uniqueness_key))"
            ),
            &[],
        )
        .await?;
    let hour_bucket = scheduled_time.duration_trunc(TimeDelta::hours(1))?;
    let insert = session
        .prepare(format!(
            "INSERT INTO {keyspace}.scheduled_tasks (partition_id, hour_bucket, scheduled_time, ordering_id, \
             uniqueness_key, task_data) VALUES (?, ?, ?, ?, ?, ?)"
        ))
        .await?;
    let unique_key = format!("smoke-{}", topic);
    session
        .execute_unpaged(
            &insert,
            (
                partition,
                hour_bucket,
                scheduled_time,
                "smoke-order",
                &unique_key,
                &consumed,
            ),
        )
        .await?;
    let (read_back,): (String,) = session
        .query_unpaged(
            format!(
                "SELECT task_data FROM {keyspace}.scheduled_tasks WHERE partition_id = ? AND hour_bucket = ? \
                 AND scheduled_time = ? AND ordering_id = ? AND uniqueness_key = ?"
            ),
            (partition, hour_bucket, scheduled_time, "smoke-order", &unique_key),
        )
        .await?
        .into_rows_result()?
        .single_row()?;
    if read_back != consumed {
        return Err(format!("Cassandra returned {read_back:?}, wrote {consumed:?}").into());
    }
    println!(
        "stored in Cassandra row (partition {partition}, hour {hour_bucket}) and read back intact"
    );
    println!("smoke check passed in {:.1?}", started.elapsed());
    Ok(())
}
