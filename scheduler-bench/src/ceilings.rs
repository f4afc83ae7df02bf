//! The raw ceilings of the services, measured with the engine's own client settings: how fast the
//! broker takes and gives records, and how fast Cassandra takes the schedule's inserts at the
//! engine's write concurrency.

use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use futures::StreamExt;
use it_tests::engine::TestEnv;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};
use scheduler_client::{partition_for, wire, Scheduler, SchedulerConfig, Task};
use scheduler_core::settings::SchedulingSettings;
use scheduler_core::store::{hour_bucket, CassandraStore, WRITE_CONCURRENCY};

use crate::BenchError;

/// CQL writes the engine makes for a task that runs once and succeeds: the schedule insert
/// (TaskPersistence), the final status insert and the schedule delete (the task's lifecycle;
/// a first attempt that ends the task has no attempt row). It also reads the task's status
/// once before running it, and reads the schedule in pages of `fetch_batch_size` tasks. Issue
/// 13's throughput target is one third of the raw insert rate: this ceiling.
pub const CQL_WRITES_PER_TASK: u32 = 3;

/// Records kept in flight by the producer benchmarks.
pub const PRODUCE_CONCURRENCY: usize = 10_000;

/// Raw rates of the services.
#[derive(Debug, Clone, Copy)]
pub struct Ceilings {
    /// Records per second produced (acks=all, idempotent: the client's settings).
    pub kafka_produce_per_s: f64,
    /// Records per second consumed (the node's consumer settings).
    pub kafka_consume_per_s: f64,
    /// Prepared inserts into the schedule table per second at the engine's write concurrency.
    pub cassandra_insert_per_s: f64,
}

impl Ceilings {
    /// The engine's ceiling in tasks per second: the slowest of the three, with Cassandra's
    /// insert rate divided by the writes the engine makes per task.
    pub fn tasks_per_s(&self) -> f64 {
        (self.cassandra_insert_per_s / f64::from(CQL_WRITES_PER_TASK))
            .min(self.kafka_produce_per_s)
            .min(self.kafka_consume_per_s)
    }
}

/// A task like the ones the benchmarks schedule: a small JSON payload.
pub fn bench_task(ordering_id: String, at: chrono::DateTime<Utc>, unique: String) -> Task {
    let mut data = serde_json::Map::new();
    data.insert("payload".into(), serde_json::json!("x".repeat(64)));
    Task::new(ordering_id, at, unique, data)
}

/// Measures the three raw rates with `records` Kafka records and `inserts` Cassandra rows.
pub async fn measure(records: usize, inserts: usize) -> Result<Ceilings, BenchError> {
    let env = TestEnv::new("bench_raw", 8).await;
    let kafka_produce_per_s = produce_rate(&env, records).await?;
    let kafka_consume_per_s = consume_rate(&env, records).await?;
    let cassandra_insert_per_s = insert_rate(&env, inserts).await?;
    Ok(Ceilings {
        kafka_produce_per_s,
        kafka_consume_per_s,
        cassandra_insert_per_s,
    })
}

async fn produce_rate(env: &TestEnv, records: usize) -> Result<f64, BenchError> {
    let config = SchedulerConfig::new(env.stack.kafka_bootstrap.clone(), env.topic.clone());
    let producer: FutureProducer = Scheduler::producer_config(&config)
        .create()
        .map_err(|e| BenchError::Setup(format!("producer: {e}")))?;
    let now = Utc::now();
    let payloads: Vec<(String, i32, Vec<u8>)> = (0..records)
        .map(|i| {
            let ordering_id = format!("raw-{}", i % 10_000);
            let partition = partition_for(&ordering_id, env.partitions);
            let task = bench_task(ordering_id.clone(), now, format!("raw-{i}"));
            (ordering_id, partition, wire::encode(&task))
        })
        .collect();
    let started = Instant::now();
    let failures = futures::stream::iter(&payloads)
        .map(|(key, partition, payload)| {
            let record = FutureRecord::to(&env.topic)
                .key(key.as_str())
                .partition(*partition)
                .payload(payload.as_slice());
            producer.send(record, Timeout::Never)
        })
        .buffer_unordered(PRODUCE_CONCURRENCY)
        .filter(|r| futures::future::ready(r.is_err()))
        .count()
        .await;
    let took = started.elapsed();
    if failures > 0 {
        return Err(BenchError::Insane(format!(
            "{failures} of {records} raw records were not acknowledged"
        )));
    }
    Ok(records as f64 / took.as_secs_f64())
}

async fn consume_rate(env: &TestEnv, records: usize) -> Result<f64, BenchError> {
    let settings = env.settings(SchedulingSettings::default());
    let consumer: BaseConsumer =
        scheduler_core::node::consumer_config(&settings.kafka, "bench-raw-consumer")
            .create()
            .map_err(|e| BenchError::Setup(format!("consumer: {e}")))?;
    let mut assignment = TopicPartitionList::new();
    for partition in 0..env.partitions as i32 {
        assignment
            .add_partition_offset(&env.topic, partition, Offset::Beginning)
            .map_err(|e| BenchError::Setup(format!("assignment: {e}")))?;
    }
    consumer
        .assign(&assignment)
        .map_err(|e| BenchError::Setup(format!("assign: {e}")))?;
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(120);
        let mut seen = 0usize;
        while seen < records {
            if Instant::now() > deadline {
                return Err(BenchError::Timeout(format!(
                    "consuming {records} raw records (got {seen})"
                )));
            }
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(_)) => seen += 1,
                Some(Err(e)) => return Err(BenchError::Setup(format!("consume: {e}"))),
                None => {}
            }
        }
        Ok(records as f64 / started.elapsed().as_secs_f64())
    })
    .await
    .map_err(|e| BenchError::Setup(format!("consumer thread: {e}")))?
}

async fn insert_rate(env: &TestEnv, inserts: usize) -> Result<f64, BenchError> {
    // The store creates the engine's schema; the inserts bypass the engine.
    let settings = env.settings(SchedulingSettings::default());
    CassandraStore::connect(&settings.cassandra)
        .await
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let session = env
        .stack
        .cassandra_session()
        .await
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let insert = session
        .prepare(format!(
            "INSERT INTO {}.scheduled_tasks (partition_id, hour_bucket, scheduled_time, ordering_id, \
             uniqueness_key, task_data) VALUES (?, ?, ?, ?, ?, ?)",
            env.keyspace
        ))
        .await
        .map_err(|e| BenchError::Setup(format!("prepare: {e}")))?;
    let base = Utc::now();
    let data = serde_json::json!({ "payload": "x".repeat(64) }).to_string();
    let started = Instant::now();
    let failures = futures::stream::iter(0..inserts)
        .map(|i| {
            let at = base + TimeDelta::milliseconds((i / 8) as i64);
            let ordering_id = format!("raw-{}", i % 10_000);
            let values = (
                (i % 8) as i32,
                hour_bucket(at),
                at,
                ordering_id,
                format!("raw-{i}"),
                data.clone(),
            );
            let (session, insert) = (&session, &insert);
            async move { session.execute_unpaged(insert, values).await }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .filter(|r| futures::future::ready(r.is_err()))
        .count()
        .await;
    let took = started.elapsed();
    if failures > 0 {
        return Err(BenchError::Insane(format!(
            "{failures} of {inserts} raw inserts failed"
        )));
    }
    Ok(inserts as f64 / took.as_secs_f64())
}
