//! [`SchedulerNode`]: a running node. It owns a tokio runtime for I/O and the user's executor,
//! an actix system for the actor tree, and a thread polling Kafka.

mod admin_server;
mod consumer;
mod error;
mod kafka;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use actix::{Actor, Addr};
use rdkafka::consumer::{BaseConsumer, Consumer};
use scheduler_client::TaskKey;
use tokio::sync::oneshot;
use tracing::info;

use self::admin_server::{start_admin, AdminServer};
use self::consumer::{PollLoop, RebalanceHandler};
pub use self::error::{Cause, NodeError};
pub use self::kafka::consumer_config;
use self::kafka::{canceller, ensure_topic};
use crate::actors::topic_supervisor::TopicSupervisor;
use crate::actors::PartitionDeps;
use crate::admin::AdminState;
use crate::clock::SystemClock;
use crate::events::EventPublisher;
use crate::executor::{CallPool, Handlers, TaskExecutor};
use crate::in_flight::InFlightGauges;
use crate::metrics::Metrics;
use crate::settings::Settings;
use crate::store::{CassandraStore, LeaseStore, PartitionId, StatusRecord, TaskStore};

/// Threads of the node's own tokio runtime (Cassandra I/O and the user's executor).
const RUNTIME_THREADS: usize = 2;

/// A node about to start, gathering its handlers (see [`SchedulerNode::builder`]).
#[must_use = "a builder does nothing until started"]
pub struct NodeBuilder {
    settings: Settings,
    handlers: Handlers,
}

impl NodeBuilder {
    /// Runs the tasks of `task_type` through `handler`.
    pub fn handler(mut self, task_type: impl Into<String>, handler: impl TaskExecutor) -> Self {
        self.handlers = self.handlers.handler(task_type, handler);
        self
    }

    /// Runs the tasks of every type without a handler of its own through `handler`. Without
    /// one, a task of another type waits on this node until a node with its handler owns its
    /// partition.
    pub fn fallback(mut self, handler: impl TaskExecutor) -> Self {
        self.handlers = self.handlers.fallback(handler);
        self
    }

    /// Runs `handlers` (replacing those given so far).
    pub fn handlers(mut self, handlers: Handlers) -> Self {
        self.handlers = handlers;
        self
    }

    /// Starts the node (see [`SchedulerNode::start`]).
    pub async fn start(self) -> Result<SchedulerNode, NodeError> {
        SchedulerNode::start_with(self.settings, self.handlers).await
    }
}

/// A running scheduler node. Stop it with [`SchedulerNode::shutdown`].
pub struct SchedulerNode {
    admin: Option<AdminServer>,
    stop: Arc<AtomicBool>,
    owned: Arc<Mutex<Vec<PartitionId>>>,
    observed: Observed,
    consumer_thread: Option<JoinHandle<()>>,
    actor_thread: Option<JoinHandle<()>>,
    stop_actors: Option<oneshot::Sender<()>>,
    runtime: Option<tokio::runtime::Runtime>,
    /// Where task status is read.
    store: Arc<dyn TaskStore>,
    partition_count: u32,
}

impl SchedulerNode {
    /// Validates `settings`, connects to Cassandra (creating the schema if absent) and Kafka,
    /// and joins the consumer group; tasks of every type of the partitions this node is
    /// assigned then run through `executor`. (A handler per type: [`SchedulerNode::builder`].)
    pub async fn start<E: TaskExecutor>(
        settings: Settings,
        executor: E,
    ) -> Result<SchedulerNode, NodeError> {
        Self::builder(settings).fallback(executor).start().await
    }

    /// A node to start with a handler per task type:
    /// `SchedulerNode::builder(settings).handler("send-email", SendEmail).start().await`.
    pub fn builder(settings: Settings) -> NodeBuilder {
        NodeBuilder {
            settings,
            handlers: Handlers::new(),
        }
    }

    async fn start_with(
        settings: Settings,
        handlers: Handlers,
    ) -> Result<SchedulerNode, NodeError> {
        settings.validate()?;
        if handlers.is_empty() {
            return Err(NodeError::NoHandlers);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("scheduler-io")
            .enable_all()
            .build()
            .map_err(NodeError::runtime("starting the I/O runtime"))?;

        match Self::start_on(settings, handlers, &runtime).await {
            Ok(parts) => Ok(parts.into_node(runtime)),
            Err(e) => {
                // Dropping a runtime inside async code panics; let it wind down in the background.
                runtime.shutdown_background();
                Err(e)
            }
        }
    }

    async fn start_on(
        settings: Settings,
        handlers: Handlers,
        runtime: &tokio::runtime::Runtime,
    ) -> Result<StartedParts, NodeError> {
        if let Some(ignored) = &settings.scheduling.look_back_on_restart {
            tracing::warn!(look_back_on_restart = %ignored,
                "[scheduling] look_back_on_restart is ignored: a partition loads from its low-water mark, however far back");
        }
        // The driver's connections live on the node's runtime, whichever runtime called start.
        let cassandra = settings.cassandra.clone();
        let store = runtime
            .spawn(async move { CassandraStore::connect(&cassandra).await })
            .await
            .map_err(NodeError::runtime("connecting to Cassandra"))??;

        let kafka = settings.kafka.clone();
        let partition_count = runtime
            .spawn(async move { ensure_topic(&kafka).await })
            .await
            .map_err(NodeError::runtime("reading the topic"))??;

        let scheduling = Arc::new(settings.scheduling.clone());
        let (handler_types, handles_every_type) = (handlers.types(), handlers.has_fallback());
        let pool = CallPool::with_handlers(
            handlers,
            runtime.handle().clone(),
            scheduling.executor_concurrency,
            scheduling.execution_timeout,
            Arc::new(SystemClock),
        );
        let metrics = Arc::new(Metrics::new());
        let counted = store.clone();
        metrics.count_statements_from(Box::new(move || counted.statements_run()));
        let leases: Arc<dyn LeaseStore> = Arc::new(store.clone());
        let store: Arc<dyn TaskStore> = Arc::new(store);
        let node_id = node_id();
        let deps = PartitionDeps {
            node_id: Arc::from(node_id.as_str()),
            store: Arc::clone(&store),
            leases,
            clock: Arc::new(SystemClock),
            pool,
            settings: Arc::clone(&scheduling),
            in_flight: InFlightGauges::default(),
            metrics,
            events: match &settings.kafka.events_topic {
                Some(topic) => Some(
                    EventPublisher::new(&settings.kafka, topic, runtime.handle().clone())
                        .map_err(NodeError::kafka("creating the events producer"))?,
                ),
                None => None,
            },
        };
        let observed = Observed {
            metrics: Arc::clone(&deps.metrics),
            in_flight: deps.in_flight.clone(),
        };

        let (ready_tx, ready_rx) = oneshot::channel::<Addr<TopicSupervisor>>();
        let (stop_actors, stop_actors_rx) = oneshot::channel::<()>();
        let actor_thread = std::thread::Builder::new()
            .name("scheduler-actors".into())
            .spawn(move || {
                let system = actix::System::new();
                system.block_on(async move {
                    let supervisor = TopicSupervisor::new(deps).start();
                    if ready_tx.send(supervisor).is_ok() {
                        let _ = stop_actors_rx.await;
                    }
                });
            })
            .map_err(NodeError::runtime("starting the actor thread"))?;
        let supervisor = ready_rx
            .await
            .map_err(NodeError::runtime("starting the actor system"))?;

        let stop = Arc::new(AtomicBool::new(false));
        let owned = Arc::new(Mutex::new(Vec::new()));
        let lag = Arc::new(Mutex::new(HashMap::new()));
        // The admin API binds before the consumer joins the group, so a taken port fails the
        // start without leaving a consumer behind.
        let admin = if settings.admin.enabled {
            let state = AdminState {
                node_id: node_id.clone(),
                topic: settings.kafka.topic.clone(),
                partition_count,
                owned: Arc::clone(&owned),
                metrics: Arc::clone(&observed.metrics),
                in_flight: observed.in_flight.clone(),
                lag: Arc::clone(&lag),
                store: Arc::clone(&store),
                canceller: canceller(&settings.kafka)?,
                handlers: handler_types.clone(),
                handles_every_type,
                token: settings.admin.token.clone(),
            };
            Some(start_admin(&settings.admin.listen, state, runtime).await?)
        } else {
            None
        };
        let handler = RebalanceHandler {
            topic: settings.kafka.topic.clone(),
            supervisor: supervisor.clone(),
            isolation_wait: scheduling.isolation_wait,
            owned: Arc::clone(&owned),
            shutting_down: Arc::clone(&stop),
            metrics: Arc::clone(&observed.metrics),
            lag: Arc::clone(&lag),
        };
        let consumer: BaseConsumer<RebalanceHandler> = consumer_config(&settings.kafka, &node_id)
            .create_with_context(handler)
            .map_err(NodeError::kafka("creating the consumer"))?;
        consumer
            .subscribe(&[&settings.kafka.topic])
            .map_err(NodeError::kafka(format!(
                "subscribing to {}",
                settings.kafka.topic
            )))?;
        let poll_loop = PollLoop {
            consumer,
            topic: settings.kafka.topic.clone(),
            partition_count,
            batch_size: scheduling.fetch_batch_size,
            max_record_bytes: scheduling.max_task_data_bytes,
            supervisor,
            stop: Arc::clone(&stop),
            metrics: Arc::clone(&observed.metrics),
            owned: Arc::clone(&owned),
        };
        let consumer_thread = std::thread::Builder::new()
            .name("scheduler-consumer".into())
            .spawn(move || poll_loop.run())
            .map_err(NodeError::runtime("starting the consumer thread"))?;
        info!(%node_id, topic = %settings.kafka.topic, group = %settings.kafka.group_id, partition_count,
            handlers = ?handler_types, handles_every_type, admin = ?admin.as_ref().map(|a| a.address), "node started");
        Ok(StartedParts {
            admin,
            stop,
            owned,
            observed,
            consumer_thread,
            actor_thread,
            stop_actors,
            store,
            partition_count,
        })
    }

    /// The node's metrics in the OpenMetrics text format (named in design.md).
    pub fn metrics(&self) -> String {
        self.observed.metrics.encode(&self.observed.in_flight)
    }

    /// Where the admin HTTP API listens (`None` when disabled).
    pub fn admin_address(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|a| a.address)
    }

    /// The partitions this node currently owns.
    pub fn owned_partitions(&self) -> Vec<PartitionId> {
        self.owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether the node is ready: it owns partitions and has loaded each one's schedule once
    /// (also `GET /api/v1/ready` on the admin API).
    pub fn is_ready(&self) -> bool {
        self.observed.in_flight.ready(&self.owned_partitions())
    }

    /// The recorded final state of a task (`None`: it has not finished, or is unknown).
    pub async fn task_status(&self, key: &TaskKey) -> Result<Option<StatusRecord>, NodeError> {
        let partition = scheduler_client::partition_for(&key.ordering_id, self.partition_count);
        let read = self.store.status(partition, key.clone());
        match &self.runtime {
            // The driver's connections live on the node's runtime.
            Some(runtime) => runtime
                .spawn(read)
                .await
                .map_err(NodeError::runtime("reading a task's status"))?
                .map_err(NodeError::from),
            None => Err(NodeError::Stopping),
        }
    }

    /// Stops polling, lets running tasks finish (up to the drain timeout), commits, leaves the
    /// group, and stops the node's threads.
    pub async fn shutdown(mut self) -> Result<(), NodeError> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(admin) = self.admin.take() {
            let _ = admin.stop.send(());
        }
        let consumer_thread = self.consumer_thread.take();
        let actor_thread = self.actor_thread.take();
        let stop_actors = self.stop_actors.take();
        let runtime = self.runtime.take();
        tokio::task::spawn_blocking(move || {
            let consumer_result = consumer_thread.map(JoinHandle::join);
            if let Some(stop) = stop_actors {
                let _ = stop.send(());
            }
            let actor_result = actor_thread.map(JoinHandle::join);
            if let Some(runtime) = runtime {
                runtime.shutdown_timeout(Duration::from_secs(5));
            }
            match (consumer_result, actor_result) {
                (Some(Err(_)), _) => Err(NodeError::Panicked { thread: "consumer" }),
                (_, Some(Err(_))) => Err(NodeError::Panicked { thread: "actor" }),
                _ => Ok(()),
            }
        })
        .await
        .map_err(NodeError::runtime("shutting down"))?
    }
}

/// `<hostname>-<pid>-<n>`: unique per node, also with several nodes in one process.
fn node_id() -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into());
    format!(
        "{host}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// What the node exposes about its partitions.
struct Observed {
    metrics: Arc<Metrics>,
    in_flight: InFlightGauges,
}

/// A node's threads, before the runtime joins them.
struct StartedParts {
    admin: Option<AdminServer>,
    stop: Arc<AtomicBool>,
    owned: Arc<Mutex<Vec<PartitionId>>>,
    observed: Observed,
    consumer_thread: JoinHandle<()>,
    actor_thread: JoinHandle<()>,
    stop_actors: oneshot::Sender<()>,
    store: Arc<dyn TaskStore>,
    partition_count: u32,
}

impl StartedParts {
    fn into_node(self, runtime: tokio::runtime::Runtime) -> SchedulerNode {
        SchedulerNode {
            admin: self.admin,
            stop: self.stop,
            owned: self.owned,
            observed: self.observed,
            consumer_thread: Some(self.consumer_thread),
            actor_thread: Some(self.actor_thread),
            stop_actors: Some(self.stop_actors),
            runtime: Some(runtime),
            store: self.store,
            partition_count: self.partition_count,
        }
    }
}

impl Drop for SchedulerNode {
    /// A node dropped without [`SchedulerNode::shutdown`] shuts down the same way, in the
    /// background: the consumer stops polling, drains and leaves the group, and only then do the
    /// actors and the runtime stop (stopping them first would fail the drain). Nothing waits
    /// for it: call `shutdown()` to know when the node is gone.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(admin) = self.admin.take() {
            let _ = admin.stop.send(());
        }
        let consumer_thread = self.consumer_thread.take();
        let stop_actors = self.stop_actors.take();
        let runtime = BackgroundShutdown(self.runtime.take());
        if consumer_thread.is_none() && stop_actors.is_none() && runtime.0.is_none() {
            return; // shut down already
        }
        let wind_down = move || {
            if let Some(consumer) = consumer_thread {
                let _ = consumer.join();
            }
            if let Some(stop) = stop_actors {
                let _ = stop.send(());
            }
            drop(runtime);
        };
        // Should the thread not start, the closure is dropped: the actors see their stop signal
        // dropped and stop, and the runtime shuts down in the background.
        let _ = std::thread::Builder::new()
            .name("scheduler-drop".into())
            .spawn(wind_down);
    }
}

/// A runtime that shuts down in the background when dropped (dropping a runtime inside async
/// code would panic).
struct BackgroundShutdown(Option<tokio::runtime::Runtime>);

impl Drop for BackgroundShutdown {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}
