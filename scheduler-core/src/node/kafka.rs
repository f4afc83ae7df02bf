//! The node's Kafka clients: the consumer's configuration, the topic (created when configured
//! to) and its partition count, and the producer the admin API cancels tasks with (and the
//! engine enqueues its own tasks with: [`KafkaEnqueuer`]).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use scheduler_client::{Scheduler, SchedulerConfig, Task};
use tracing::info;

use super::error::NodeError;
use crate::enqueue::{EnqueueError, Enqueuer};
use crate::settings::KafkaSettings;

/// How long Kafka metadata requests at start-up may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// How far in the past a task the engine enqueues may be due: any time. A join, a sub-task or a
/// job's bucket keeps the key it was given (due at its parent's time, so that a parent run again
/// enqueues the same ones) however late its parent runs; the node takes any time it can parse.
const ENGINE_GRACE_WINDOW: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The node's producer (cancellations and redrives of the admin API, the engine's own tasks),
/// with the node's Kafka settings.
pub(super) fn canceller(kafka: &KafkaSettings) -> Result<Scheduler, NodeError> {
    let mut config = SchedulerConfig::new(kafka.bootstrap_servers.clone(), kafka.topic.clone());
    config.properties = kafka.properties.clone();
    config.scheduling_grace_window = ENGINE_GRACE_WINDOW;
    Scheduler::new(config).map_err(NodeError::Canceller)
}

/// A node's enqueuer: the client's Kafka producer, on the node's topic.
pub(super) struct KafkaEnqueuer(pub(super) Arc<Scheduler>);

impl Enqueuer for KafkaEnqueuer {
    fn enqueue(&self, task: Task) -> BoxFuture<'static, Result<(), EnqueueError>> {
        let scheduler = Arc::clone(&self.0);
        async move {
            let name = task.key().to_string();
            scheduler
                .schedule_task(task)
                .await
                .map_err(|e| EnqueueError {
                    task: name,
                    source: Arc::new(e),
                })
        }
        .boxed()
    }
}

/// The Kafka consumer configuration of a node named `node_id` (also used by the benchmarks to
/// measure the raw consume rate with the engine's own settings).
pub fn consumer_config(kafka: &KafkaSettings, node_id: &str) -> ClientConfig {
    kafka.client_config(&[
        ("group.id", &kafka.group_id),
        ("client.id", node_id),
        // Statistics carry the consumer lag per partition, shown by the admin API.
        ("statistics.interval.ms", "5000"),
        ("enable.auto.commit", "false"),
        ("auto.offset.reset", "earliest"),
        // The classic protocol with eager rebalancing: the blueprint tears every tree down on a
        // rebalance anyway (a cooperative assignor is refused by the settings' validation).
        ("partition.assignment.strategy", "range"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "1000"),
        // A scheduler is latency-sensitive: do not let the broker hold an empty fetch for 500 ms.
        ("fetch.wait.max.ms", "100"),
    ])
}

/// The topic's partition count, creating the topic first when configured to.
pub(super) async fn ensure_topic(kafka: &KafkaSettings) -> Result<u32, NodeError> {
    let count = topic_partition_count(kafka).await?;
    if count > 0 {
        return Ok(count);
    }
    let Some(partitions) = kafka.create_topic_partitions else {
        return Err(NodeError::Topic {
            topic: kafka.topic.clone(),
            bootstrap: kafka.bootstrap_servers.clone(),
            problem: "it does not exist (create it, or set kafka.create_topic_partitions)",
        });
    };
    let admin: AdminClient<DefaultClientContext> = kafka
        .client_config(&[])
        .create()
        .map_err(NodeError::kafka("creating the admin client"))?;
    let topic = NewTopic::new(&kafka.topic, partitions as i32, TopicReplication::Fixed(1));
    let results = admin
        .create_topics(
            &[topic],
            &AdminOptions::new().operation_timeout(Some(METADATA_TIMEOUT)),
        )
        .await
        .map_err(NodeError::kafka(format!("creating topic {}", kafka.topic)))?;
    for result in results {
        if let Err((name, code)) = result {
            if code != rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists {
                return Err(NodeError::kafka(format!("creating topic {name}"))(
                    KafkaError::AdminOp(code),
                ));
            }
        }
    }
    info!(topic = %kafka.topic, partitions, "topic created");
    match topic_partition_count(kafka).await? {
        0 => Err(NodeError::Topic {
            topic: kafka.topic.clone(),
            bootstrap: kafka.bootstrap_servers.clone(),
            problem: "it was created but has no partitions",
        }),
        n => Ok(n),
    }
}

async fn topic_partition_count(kafka: &KafkaSettings) -> Result<u32, NodeError> {
    let consumer: BaseConsumer = kafka
        .client_config(&[])
        .create()
        .map_err(NodeError::kafka("creating the metadata client"))?;
    let topic = kafka.topic.clone();
    let bootstrap = kafka.bootstrap_servers.clone();
    tokio::task::spawn_blocking(move || {
        let metadata = consumer
            .fetch_metadata(Some(&topic), METADATA_TIMEOUT)
            .map_err(NodeError::kafka(format!(
                "reading the metadata of {topic} at {bootstrap}"
            )))?;
        Ok(metadata
            .topics()
            .first()
            .filter(|t| t.error().is_none())
            .map(|t| t.partitions().len() as u32)
            .unwrap_or(0))
    })
    .await
    .map_err(NodeError::runtime("reading the topic's metadata"))?
}
