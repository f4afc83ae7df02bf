//! [`Scheduler`]: enqueues tasks on the scheduler's topic (the `producer` feature). Its checks
//! and errors are in `validate.rs`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use tokio::sync::OnceCell;
use tracing::debug;

use crate::defaults;
use crate::partitioner::partition_for;
use crate::task::{Task, TaskIdentity, TaskKey};
use crate::trace;
use crate::validate::{validate, ScheduleError, TopicError};
use crate::wire;

/// Where and how to enqueue.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Kafka bootstrap servers, `host:port[,host:port...]`.
    pub bootstrap_servers: String,
    /// The scheduler's topic.
    pub topic: String,
    /// How far in the past a task may be scheduled (the nodes' grace window; default 10 s).
    pub scheduling_grace_window: Duration,
    /// Largest encoded task accepted, in bytes (default 512 KiB; the nodes refuse larger records).
    pub max_task_bytes: usize,
    /// How long to wait for the broker to acknowledge a task (default 30 s).
    pub delivery_timeout: Duration,
    /// Extra librdkafka producer properties (e.g. security settings).
    pub properties: BTreeMap<String, String>,
    /// The topic of each task type that has a queue of its own (the nodes' `[[queues]]`);
    /// every other type goes to `topic`.
    pub routes: BTreeMap<String, String>,
}

impl SchedulerConfig {
    /// A configuration with the defaults above.
    pub fn new(bootstrap_servers: impl Into<String>, topic: impl Into<String>) -> Self {
        SchedulerConfig {
            bootstrap_servers: bootstrap_servers.into(),
            topic: topic.into(),
            scheduling_grace_window: defaults::SCHEDULING_GRACE_WINDOW,
            max_task_bytes: defaults::MAX_TASK_BYTES,
            delivery_timeout: defaults::DELIVERY_TIMEOUT,
            properties: BTreeMap::new(),
            routes: BTreeMap::new(),
        }
    }

    /// Sends tasks of `task_type` to `topic` (its queue's).
    pub fn route(mut self, task_type: impl Into<String>, topic: impl Into<String>) -> Self {
        self.routes.insert(task_type.into(), topic.into());
        self
    }

    /// The topic of tasks of `task_type`.
    pub fn topic_of(&self, task_type: &str) -> &str {
        self.routes.get(task_type).unwrap_or(&self.topic)
    }
}

/// Enqueues tasks. Cheap to share (`&self` everywhere); create one per process.
pub struct Scheduler {
    config: SchedulerConfig,
    producer: FutureProducer,
    /// Partition counts, by topic, read once each.
    partition_counts: Mutex<BTreeMap<String, Arc<OnceCell<u32>>>>,
    metrics: ClientMetrics,
}

/// The control operations of one queue: [`Scheduler::of_type`].
pub struct Routed<'a> {
    scheduler: &'a Scheduler,
    topic: &'a str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
    result: &'static str,
}

/// The client's metrics: `scheduler_client_requests_total{operation, result}` (operation:
/// schedule, cancel; result: success, rejected (bad input), failed (Kafka)) and
/// `scheduler_client_request_duration_seconds{operation}` (until Kafka acknowledged or failed).
#[derive(Debug)]
struct ClientMetrics {
    registry: Registry,
    requests: Family<OperationLabels, Counter>,
    duration: Family<OperationLabel, Histogram, fn() -> Histogram>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

fn request_durations() -> Histogram {
    // 0.5 ms .. about 16 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl ClientMetrics {
    fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::default();
        let duration = Family::new_with_constructor(request_durations as fn() -> Histogram);
        registry.register(
            "scheduler_client_requests",
            "Schedule and cancel requests, by result (success, rejected, failed)",
            requests.clone(),
        );
        registry.register(
            "scheduler_client_request_duration_seconds",
            "Time until Kafka acknowledged (or refused) a request",
            duration.clone(),
        );
        ClientMetrics {
            registry,
            requests,
            duration,
        }
    }

    fn record<T>(
        &self,
        operation: &'static str,
        result: &Result<T, ScheduleError>,
        took: Option<std::time::Duration>,
    ) {
        let result = match result {
            Ok(_) => "success",
            Err(e) if e.is_rejection() => "rejected",
            Err(_) => "failed",
        };
        self.requests
            .get_or_create(&OperationLabels { operation, result })
            .inc();
        if let Some(took) = took {
            self.duration
                .get_or_create(&OperationLabel { operation })
                .observe(took.as_secs_f64());
        }
    }
}

impl Scheduler {
    /// A scheduler for `config`: an idempotent producer with `acks=all`.
    pub fn new(config: SchedulerConfig) -> Result<Scheduler, ScheduleError> {
        let producer = Scheduler::producer_config(&config)
            .create()
            .map_err(ScheduleError::Config)?;
        Ok(Scheduler {
            config,
            producer,
            partition_counts: Mutex::default(),
            metrics: ClientMetrics::new(),
        })
    }

    /// The Kafka producer configuration a scheduler uses for `config` (also used by the
    /// benchmarks to measure the raw produce rate with the client's own settings).
    pub fn producer_config(config: &SchedulerConfig) -> ClientConfig {
        let mut client = ClientConfig::new();
        client.set("bootstrap.servers", &config.bootstrap_servers);
        for (key, value) in defaults::DURABLE_PRODUCER {
            client.set(key, value);
        }
        client.set(
            "message.timeout.ms",
            config.delivery_timeout.as_millis().to_string(),
        );
        for (key, value) in &config.properties {
            client.set(key, value);
        }
        client
    }

    /// This scheduler's metrics in the Prometheus text format, for the service to expose.
    pub fn metrics(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.metrics.registry);
        text
    }

    /// Validates `task`, writes it to its partition, and resolves once Kafka acknowledged it.
    /// Scheduling a task again with the same key replaces it (if it has not run yet).
    pub async fn schedule_task(&self, task: Task) -> Result<(), ScheduleError> {
        let started = std::time::Instant::now();
        let result = self.schedule_unmeasured(task).await;
        let sent = !matches!(&result, Err(e) if e.is_rejection());
        self.metrics
            .record("schedule", &result, sent.then(|| started.elapsed()));
        result
    }

    async fn schedule_unmeasured(&self, task: Task) -> Result<(), ScheduleError> {
        validate(&task, Utc::now(), self.config.scheduling_grace_window)?;
        let payload = wire::encode(&task);
        if payload.len() > self.config.max_task_bytes {
            return Err(ScheduleError::TooLarge {
                size: payload.len(),
                max: self.config.max_task_bytes,
            });
        }
        let topic = self.config.topic_of(&task.task_type);
        let trace = task
            .trace_parent
            .clone()
            .or_else(trace::current_trace_parent);
        let offset = self
            .send(topic, &task.ordering_id, &payload, trace.as_deref())
            .await?;
        debug!(task = %task.key(), topic, offset, "task enqueued");
        Ok(())
    }

    /// Cancels the task with `key` (of a type without a queue of its own; else
    /// [`Scheduler::of_type`]): see [`Routed::cancel_task`].
    pub async fn cancel_task(&self, key: &TaskKey) -> Result<(), ScheduleError> {
        self.default_queue().cancel_task(key).await
    }

    /// Moves the pending task of `identity` to `to` (of a type without a queue of its own;
    /// else [`Scheduler::of_type`]): see [`Routed::reschedule`].
    pub async fn reschedule(
        &self,
        identity: &TaskIdentity,
        to: DateTime<Utc>,
    ) -> Result<(), ScheduleError> {
        self.default_queue().reschedule(identity, to).await
    }

    /// Cancels the pending task of `identity` (of a type without a queue of its own; else
    /// [`Scheduler::of_type`]): see [`Routed::cancel_identity`].
    pub async fn cancel_identity(&self, identity: &TaskIdentity) -> Result<(), ScheduleError> {
        self.default_queue().cancel_identity(identity).await
    }

    /// The control operations of the default topic.
    fn default_queue(&self) -> Routed<'_> {
        Routed {
            scheduler: self,
            topic: &self.config.topic,
        }
    }

    /// Cancellations and reschedules of tasks of `task_type`, sent to its queue's topic.
    pub fn of_type<'a>(&'a self, task_type: &str) -> Routed<'a> {
        Routed {
            scheduler: self,
            topic: self.config.topic_of(task_type),
        }
    }

    /// Writes `payload` to the partition of `ordering_id`; resolves with its offset once acknowledged.
    async fn send(
        &self,
        topic: &str,
        ordering_id: &str,
        payload: &[u8],
        trace_parent: Option<&str>,
    ) -> Result<i64, ScheduleError> {
        let partitions = self.partition_count_of(topic).await?;
        let partition = partition_for(ordering_id, partitions);
        let mut record = FutureRecord::to(topic)
            .key(ordering_id)
            .partition(partition)
            .payload(payload);
        if let Some(value) = trace_parent {
            record = record.headers(OwnedHeaders::new().insert(Header {
                key: trace::TRACEPARENT_HEADER,
                value: Some(value),
            }));
        }
        // librdkafka enforces message.timeout.ms only at its next timeout scan (seconds later when
        // the broker is down); the deadline here keeps the promise of `delivery_timeout`.
        let timeout = self.config.delivery_timeout;
        let delivery =
            tokio::time::timeout(timeout, self.producer.send(record, Timeout::After(timeout)))
                .await
                .map_err(|_| ScheduleError::Unacknowledged(timeout))?
                .map_err(|(e, _)| ScheduleError::Kafka(e))?;
        Ok(delivery.offset)
    }

    /// The topic's partition count, read once.
    pub async fn partition_count(&self) -> Result<u32, ScheduleError> {
        self.partition_count_of(&self.config.topic).await
    }

    /// The partition count of `topic`, read once.
    pub async fn partition_count_of(&self, topic: &str) -> Result<u32, ScheduleError> {
        let cell = Arc::clone(
            self.partition_counts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(topic.to_string())
                .or_default(),
        );
        cell.get_or_try_init(|| async {
            let producer = self.producer.clone();
            let named = topic.to_string();
            let timeout = self.config.delivery_timeout;
            let topic_error = |source: TopicError| ScheduleError::Topic {
                topic: topic.to_string(),
                source,
            };
            let metadata = tokio::task::spawn_blocking(move || {
                producer.client().fetch_metadata(Some(&named), timeout)
            })
            .await
            .map_err(|e| topic_error(e.into()))?
            .map_err(|e| topic_error(e.into()))?;
            let count = metadata
                .topics()
                .first()
                .filter(|t| t.error().is_none())
                .map(|t| t.partitions().len() as u32)
                .unwrap_or(0);
            if count == 0 {
                return Err(topic_error(TopicError::Missing));
            }
            Ok(count)
        })
        .await
        .copied()
    }
}

impl Routed<'_> {
    /// Cancels the task with `key`: a control record goes to the task's partition, so the node
    /// that owns it applies it in order with the tasks, without a rebalance. Resolves once Kafka
    /// acknowledged it. The task then never runs, unless it already finished (its status stays)
    /// or is running at that moment (it is not interrupted). Cancelling is final: scheduling the
    /// same key again does not run it.
    pub async fn cancel_task(&self, key: &TaskKey) -> Result<(), ScheduleError> {
        let started = std::time::Instant::now();
        let result = self.cancel_unmeasured(key).await;
        let sent = !matches!(&result, Err(e) if e.is_rejection());
        self.scheduler
            .metrics
            .record("cancel", &result, sent.then(|| started.elapsed()));
        result
    }

    async fn cancel_unmeasured(&self, key: &TaskKey) -> Result<(), ScheduleError> {
        wire::check_key(&key.ordering_id, &key.uniqueness_key)?;
        self.scheduler
            .send(
                self.topic,
                &key.ordering_id,
                &wire::encode_cancel(key),
                None,
            )
            .await?;
        debug!(task = %key, "cancellation enqueued");
        Ok(())
    }

    /// Moves the pending task of `identity` (scheduled with a conflict mode) to `to`, with its
    /// data: a control record on its partition, applied by the owning node in order with the
    /// tasks. Nothing happens if no task of the identity is pending then. Resolves once Kafka
    /// acknowledged it.
    pub async fn reschedule(
        &self,
        identity: &TaskIdentity,
        to: DateTime<Utc>,
    ) -> Result<(), ScheduleError> {
        let started = std::time::Instant::now();
        let to = crate::truncate_to_millis(to);
        // The time and key rules of a task of that identity due then.
        let as_task = Task::new(
            identity.ordering_id.clone(),
            to,
            identity.uniqueness_key.clone(),
            Default::default(),
        );
        let result = match validate(
            &as_task,
            Utc::now(),
            self.scheduler.config.scheduling_grace_window,
        ) {
            Ok(()) => self
                .scheduler
                .send(
                    self.topic,
                    &identity.ordering_id,
                    &wire::encode_reschedule(identity, to),
                    None,
                )
                .await
                .map(|_| debug!(%identity, to = %wire::format_time(to), "reschedule enqueued")),
            Err(e) => Err(e),
        };
        let sent = !matches!(&result, Err(e) if e.is_rejection());
        self.scheduler
            .metrics
            .record("reschedule", &result, sent.then(|| started.elapsed()));
        result
    }

    /// Cancels the pending task of `identity` (scheduled with a conflict mode), whatever its
    /// time, as [`Routed::cancel_task`] cancels one task.
    pub async fn cancel_identity(&self, identity: &TaskIdentity) -> Result<(), ScheduleError> {
        let started = std::time::Instant::now();
        let result = match wire::check_key(&identity.ordering_id, &identity.uniqueness_key) {
            Ok(()) => self
                .scheduler
                .send(
                    self.topic,
                    &identity.ordering_id,
                    &wire::encode_cancel_identity(identity),
                    None,
                )
                .await
                .map(|_| debug!(%identity, "cancellation by identity enqueued")),
            Err(e) => Err(e.into()),
        };
        let sent = !matches!(&result, Err(e) if e.is_rejection());
        self.scheduler
            .metrics
            .record("cancel", &result, sent.then(|| started.elapsed()));
        result
    }
}

#[cfg(test)]
mod tests;
