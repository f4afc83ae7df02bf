//! One queue a node serves: its store (the queue's keyspace), its topic, its call pool under the
//! queue's limits, and, once started, its consumer thread. Queues share the node's runtime,
//! actor system, handlers and admin listener, and nothing else.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use actix::Addr;
use prometheus_client::registry::Registry;
use rdkafka::consumer::{BaseConsumer, Consumer};
use scheduler_client::Scheduler;

use super::consumer::{PollLoop, RebalanceHandler};
use super::error::NodeError;
use super::kafka::{canceller, consumer_config, ensure_topic, KafkaEnqueuer};
use super::pending_rewinds::PendingRewinds;
use crate::actors::topic_supervisor::TopicSupervisor;
use crate::actors::PartitionDeps;
use crate::admin::api::QueueView;
use crate::clock::{Clock, SystemClock};
use crate::enqueue::Enqueuer;
use crate::events::EventPublisher;
use crate::handler::Handlers;
use crate::in_flight::InFlightGauges;
use crate::limits;
use crate::metrics::Metrics;
use crate::recurring::ticker::Ticker;
use crate::recurring::{RecurringSchedules, TICK_TYPE};
use crate::settings::Queue;
use crate::store::{CassandraStore, KeyLimitStore, PartitionId, SuspensionStore, TaskStore};
use crate::suspend;

/// A queue's parts before its tree starts.
pub(super) struct Prepared {
    pub(super) queue: Queue,
    pub(super) deps: PartitionDeps,
    pub(super) store: Arc<dyn TaskStore>,
    pub(super) partition_count: u32,
    /// The queue's producer: joins enqueued by the engine, and the admin API's cancels and
    /// redrives.
    pub(super) producer: Arc<Scheduler>,
    /// The queue's recurring schedules.
    pub(super) schedules: RecurringSchedules,
}

impl Prepared {
    /// Connects to the queue's keyspace (migrating it as the settings say), reads (or creates)
    /// its topic, and builds its call pool and metrics (in `registry`, labelled with the
    /// queue's name when `labelled`).
    pub(super) async fn connect(
        queue: Queue,
        handlers: &Handlers,
        node_id: &Arc<str>,
        registry: &mut Registry,
        labelled: bool,
        runtime: &tokio::runtime::Runtime,
    ) -> Result<Prepared, NodeError> {
        // The driver's connections live on the node's runtime, whichever runtime called start.
        let cassandra = queue.cassandra.clone();
        let store = runtime
            .spawn(async move { CassandraStore::connect(&cassandra).await })
            .await
            .map_err(NodeError::runtime("connecting to Cassandra"))??;
        let kafka = queue.kafka.clone();
        let partition_count = runtime
            .spawn(async move { ensure_topic(&kafka).await })
            .await
            .map_err(NodeError::runtime("reading the topic"))??;

        let producer = Arc::new(canceller(&queue.kafka)?);
        let enqueuer: Arc<dyn Enqueuer> = Arc::new(KafkaEnqueuer(Arc::clone(&producer)));
        let store = Arc::new(store);
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let metrics = Arc::new(Metrics::for_queue(
            registry,
            labelled.then_some(queue.name.as_str()),
        ));
        // Every node runs the ticks of the queue's recurring schedules.
        let ticker = Ticker {
            schedules: store.clone(),
            statuses: store.clone(),
            enqueuer: Arc::clone(&enqueuer),
            clock: Arc::clone(&clock),
            partitions: partition_count,
            metrics: Arc::clone(&metrics),
        };
        let schedules =
            RecurringSchedules::new(store.clone(), Arc::clone(&enqueuer), Arc::clone(&clock));
        let counted = store.clone();
        metrics.count_statements_from(Box::new(move || crate::metrics::CqlCounts {
            statements: counted.statements_run(),
            rows: counted.rows_run(),
        }));
        let cassandra = Arc::clone(&store);
        let store: Arc<dyn TaskStore> = store;
        let events = match &queue.kafka.events_topic {
            Some(topic) => Some(
                EventPublisher::new(&queue.kafka, topic, runtime.handle().clone())
                    .map_err(NodeError::kafka("creating the events producer"))?,
            ),
            None => None,
        };
        let (suspended, suspensions) = runtime
            .spawn({
                let store = Arc::clone(&store);
                async move { suspend::read(store.as_ref()).await }
            })
            .await
            .map_err(NodeError::runtime("reading the suspensions"))??;
        let watched: Arc<dyn SuspensionStore> = store.clone();
        runtime.spawn(suspend::poll(watched, suspended));
        let (overridden, overrides) = runtime
            .spawn({
                let store = Arc::clone(&store);
                async move { limits::read(store.as_ref()).await }
            })
            .await
            .map_err(NodeError::runtime("reading the per-key limit overrides"))??;
        let watched: Arc<dyn KeyLimitStore> = store.clone();
        runtime.spawn(limits::poll(watched, overridden));
        let mut deps = PartitionDeps::builder(
            node_id,
            cassandra,
            handlers.clone().handler(TICK_TYPE, ticker),
            queue.scheduling.clone(),
            clock,
            enqueuer,
            partition_count,
        )
        .runtime(runtime.handle().clone())
        .metrics(metrics)
        .topic(&queue.kafka.topic)
        .suspensions(suspensions)
        .key_overrides(overrides);
        if let Some(events) = events {
            deps = deps.hook(Arc::new(events));
        }
        let deps = deps.build();
        Ok(Prepared {
            queue,
            deps,
            store,
            partition_count,
            producer,
            schedules,
        })
    }

    /// How the admin API shows the queue.
    pub(super) fn view(&self) -> QueueView {
        QueueView {
            name: self.queue.name.clone(),
            topic: self.queue.kafka.topic.clone(),
            group_id: self.queue.kafka.group_id.clone(),
            task_types: self.queue.task_types.clone(),
            path: format!("/queues/{}", self.queue.name),
        }
    }
}

/// A queue the node serves, its consumer polling.
pub(super) struct Served {
    pub(super) name: String,
    pub(super) owned: Arc<Mutex<Vec<PartitionId>>>,
    pub(super) in_flight: InFlightGauges,
    pub(super) store: Arc<dyn TaskStore>,
    pub(super) partition_count: u32,
    pub(super) schedules: RecurringSchedules,
    pub(super) consumer_thread: Option<JoinHandle<()>>,
}

impl Served {
    /// The partitions of the queue the node owns now.
    pub(super) fn owned(&self) -> Vec<PartitionId> {
        self.owned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// What the queue's consumer shares with the node and its admin API.
pub(super) struct Shared {
    pub(super) owned: Arc<Mutex<Vec<PartitionId>>>,
    pub(super) lag: Arc<Mutex<HashMap<PartitionId, i64>>>,
}

impl Shared {
    pub(super) fn new() -> Shared {
        Shared {
            owned: Arc::new(Mutex::new(Vec::new())),
            lag: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

/// Joins the queue's consumer group and starts polling its topic into `supervisor`.
pub(super) fn start_consumer(
    prepared: Prepared,
    shared: Shared,
    supervisor: Addr<TopicSupervisor>,
    node_id: &str,
    stop: &Arc<AtomicBool>,
) -> Result<Served, NodeError> {
    let Prepared {
        queue,
        deps,
        store,
        partition_count,
        schedules,
        ..
    } = prepared;
    let scheduling = &deps.settings;
    let topic = queue.kafka.topic.clone();
    let rewinds = Arc::new(Mutex::new(PendingRewinds::default()));
    let handler = RebalanceHandler {
        topic: topic.clone(),
        supervisor: supervisor.clone(),
        isolation_wait: scheduling.isolation_wait,
        owned: Arc::clone(&shared.owned),
        shutting_down: Arc::clone(stop),
        metrics: Arc::clone(&deps.metrics),
        lag: shared.lag,
        rewinds: Arc::clone(&rewinds),
    };
    let consumer: BaseConsumer<RebalanceHandler> = consumer_config(&queue.kafka, node_id)
        .create_with_context(handler)
        .map_err(NodeError::kafka("creating the consumer"))?;
    consumer
        .subscribe(&[&topic])
        .map_err(NodeError::kafka(format!("subscribing to {topic}")))?;
    let poll_loop = PollLoop {
        consumer,
        topic: topic.clone(),
        partition_count,
        batch_size: scheduling.fetch_batch_size,
        max_record_bytes: scheduling.max_task_data_bytes,
        supervisor,
        stop: Arc::clone(stop),
        metrics: Arc::clone(&deps.metrics),
        owned: Arc::clone(&shared.owned),
        rewinds,
    };
    let consumer_thread = std::thread::Builder::new()
        .name(format!("scheduler-consumer-{}", queue.name))
        .spawn(move || poll_loop.run())
        .map_err(NodeError::runtime("starting the consumer thread"))?;
    tracing::info!(queue = %queue.name, %topic, group = %queue.kafka.group_id, partition_count,
        task_types = ?queue.task_types, "serving queue");
    Ok(Served {
        name: queue.name,
        owned: shared.owned,
        in_flight: deps.in_flight,
        store,
        partition_count,
        schedules,
        consumer_thread: Some(consumer_thread),
    })
}
