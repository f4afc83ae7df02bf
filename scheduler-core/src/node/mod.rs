//! [`SchedulerNode`]: a running node. It owns a tokio runtime for I/O and the user's handler,
//! an actix system for the actor tree, and a thread polling Kafka.

mod admin_server;
mod consumer;
mod error;
mod kafka;
mod pending_rewinds;
mod queue;
mod thread_slice;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use actix::{Actor, Addr};
use prometheus_client::registry::Registry;
use scheduler_client::TaskKey;
use tokio::sync::oneshot;
use tracing::info;

use self::admin_server::{start_admin, AdminServer};
pub use self::error::{Cause, NodeError};
pub use self::kafka::consumer_config;
use self::queue::{start_consumer, Prepared, Served, Shared};
use crate::actors::topic_supervisor::TopicSupervisor;
use crate::actors::PartitionDeps;
use crate::admin::AdminState;
use crate::handler::{Handlers, TaskHandler};
use crate::metrics::NodeMetrics;
use crate::recurring::RecurringSchedules;
use crate::remote::{RemoteMetrics, RemoteWorkers};
use crate::settings::{Queue, Settings};
use crate::store::{PartitionId, StatusRecord};

/// Threads of the node's own tokio runtime (Cassandra I/O and the user's handler).
const RUNTIME_THREADS: usize = 2;

/// The node's runtime for I/O and the user's handlers: [`RUNTIME_THREADS`] threads, each asking
/// for `slice` as its time slice (`thread_slice.rs`); a refusal is logged once and changes
/// nothing else.
fn io_runtime(slice: Duration) -> std::io::Result<tokio::runtime::Runtime> {
    static REFUSED: std::sync::Once = std::sync::Once::new();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_THREADS)
        .thread_name("scheduler-io")
        .on_thread_start(move || {
            if let Err(error) = thread_slice::ask(slice) {
                REFUSED.call_once(|| {
                    tracing::warn!(%error, ?slice, "scheduling.thread_slice: the kernel refused the I/O threads' time slice; they keep its default")
                });
            }
        })
        .enable_all()
        .build()
}

/// A node about to start, gathering its handlers (see [`SchedulerNode::builder`]).
#[must_use = "a builder does nothing until started"]
pub struct NodeBuilder {
    settings: Settings,
    handlers: Handlers,
}

impl NodeBuilder {
    /// Runs the tasks of `task_type` through `handler`.
    pub fn handler(mut self, task_type: impl Into<String>, handler: impl TaskHandler) -> Self {
        self.handlers = self.handlers.handler(task_type, handler);
        self
    }

    /// Runs the tasks of every type without a handler of its own through `handler`. Without
    /// one, a task of another type waits on this node until a node with its handler owns its
    /// partition.
    pub fn fallback(mut self, handler: impl TaskHandler) -> Self {
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
    /// The node's id: its Kafka client id, and the owner its partition claims name.
    id: Arc<str>,
    admin: Option<AdminServer>,
    stop: Arc<AtomicBool>,
    /// The queues the node serves, each with its consumer thread.
    queues: Vec<Served>,
    node_metrics: Arc<NodeMetrics>,
    actor_thread: Option<JoinHandle<()>>,
    stop_actors: Option<oneshot::Sender<()>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl SchedulerNode {
    /// Validates `settings`, connects to Cassandra (creating the schema if absent) and Kafka,
    /// and joins the consumer group; tasks of every type of the partitions this node is
    /// assigned then run through `handler`. (A handler per type: [`SchedulerNode::builder`].)
    pub async fn start<E: TaskHandler>(
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
        let remote_types = settings.workers.enabled && !settings.workers.types.is_empty();
        if handlers.is_empty() && !remote_types {
            return Err(NodeError::NoHandlers);
        }
        let runtime = io_runtime(settings.scheduling.thread_slice)
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
        // Remote workers run types with no handler here while one of the type is connected;
        // the types named in `[workers] types` make their queues served.
        let workers = (settings.workers.enabled).then(|| {
            RemoteWorkers::new(
                settings.workers.clone(),
                Arc::new(crate::clock::SystemClock),
            )
        });
        let handlers = match &workers {
            Some(workers) => handlers.remote(workers.clone()),
            None => handlers,
        };
        let (mut handler_types, handles_every_type) = (handlers.types(), handlers.has_fallback());
        if workers.is_some() {
            for remote in &settings.workers.types {
                if !handler_types.contains(remote) {
                    handler_types.push(remote.clone());
                }
            }
            handler_types.sort();
        }
        let listed = settings.listed_types();
        // The queues this node has a handler for; the default queue first when served (its API
        // is at the root). Never none: a type no queue lists is the default queue's.
        let served: Vec<Queue> = settings
            .queues()
            .into_iter()
            .filter(|q| q.served_by(&handler_types, handles_every_type, &listed))
            .collect();
        let node_id: Arc<str> = Arc::from(node_id().as_str());
        let mut registry = Registry::default();
        let mut prepared = Vec::with_capacity(served.len());
        for queue in served {
            let labelled = !settings.queues.is_empty();
            prepared.push(
                Prepared::connect(queue, &handlers, &node_id, &mut registry, labelled, runtime)
                    .await?,
            );
        }
        let remote_metrics = (workers.clone()).map(|w| RemoteMetrics::register(w, &mut registry));
        let node_metrics = Arc::new(
            NodeMetrics::new(
                registry,
                prepared
                    .iter()
                    .map(|p| (Arc::clone(&p.deps.metrics), p.deps.in_flight.clone()))
                    .collect(),
            )
            .with_remote(remote_metrics),
        );

        let trees: Vec<PartitionDeps> = prepared.iter().map(|p| p.deps.clone()).collect();
        let (ready_tx, ready_rx) = oneshot::channel::<Vec<Addr<TopicSupervisor>>>();
        let (stop_actors, stop_actors_rx) = oneshot::channel::<()>();
        let actor_thread = std::thread::Builder::new()
            .name("scheduler-actors".into())
            .spawn(move || {
                let system = actix::System::new();
                system.block_on(async move {
                    let supervisors = trees
                        .into_iter()
                        .map(|deps| TopicSupervisor::new(deps).start())
                        .collect();
                    if ready_tx.send(supervisors).is_ok() {
                        let _ = stop_actors_rx.await;
                    }
                });
            })
            .map_err(NodeError::runtime("starting the actor thread"))?;
        let supervisors = ready_rx
            .await
            .map_err(NodeError::runtime("starting the actor system"))?;

        let stop = Arc::new(AtomicBool::new(false));
        let shared: Vec<Shared> = prepared.iter().map(|_| Shared::new()).collect();
        // The admin API binds before the consumers join their groups, so a taken port fails
        // the start without leaving a consumer behind.
        let admin = if settings.admin.enabled {
            let views: Vec<_> = prepared.iter().map(Prepared::view).collect();
            let mut states = Vec::with_capacity(prepared.len());
            for (p, shared) in prepared.iter().zip(&shared) {
                states.push(Arc::new(AdminState {
                    node_id: node_id.to_string(),
                    queue: p.queue.name.clone(),
                    queues: views.clone(),
                    topic: p.queue.kafka.topic.clone(),
                    partition_count: p.partition_count,
                    owned: Arc::clone(&shared.owned),
                    metrics: Arc::clone(&p.deps.metrics),
                    node_metrics: Arc::clone(&node_metrics),
                    in_flight: p.deps.in_flight.clone(),
                    lag: Arc::clone(&shared.lag),
                    store: Arc::clone(&p.store),
                    canceller: Arc::clone(&p.producer),
                    schedules: p.schedules.clone(),
                    handlers: handler_types.clone(),
                    handles_every_type,
                    token: settings.admin.token.clone(),
                    scheduling_grace_window: p.queue.scheduling.scheduling_grace_window,
                    max_task_bytes: p.queue.scheduling.max_task_data_bytes,
                    limits: Some(p.deps.limits.clone()),
                    workers: workers.clone(),
                    retrying: Some(p.deps.retrying.clone()),
                }));
            }
            Some(start_admin(&settings.admin, states, runtime).await?)
        } else {
            None
        };
        let mut queues = Vec::with_capacity(prepared.len());
        for ((prepared, shared), supervisor) in prepared.into_iter().zip(shared).zip(supervisors) {
            queues.push(start_consumer(
                prepared, shared, supervisor, &node_id, &stop,
            )?);
        }
        info!(%node_id, queues = ?queues.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(),
            handlers = ?handler_types, handles_every_type, admin = ?admin.as_ref().map(|a| a.address), "node started");
        Ok(StartedParts {
            id: node_id,
            admin,
            stop,
            queues,
            node_metrics,
            actor_thread,
            stop_actors,
        })
    }

    /// The node's metrics in the OpenMetrics text format (named in design.md), every queue's.
    pub fn metrics(&self) -> String {
        self.node_metrics.encode()
    }

    /// Where the admin HTTP API listens (`None` when disabled).
    pub fn admin_address(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|a| a.address)
    }

    /// The node's id (`<hostname>-<pid>-<n>`): its Kafka client id, the owner its partition
    /// claims name, the `nodeId` of its admin API.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The queues this node serves (those it has a handler for), the default queue first.
    pub fn queues(&self) -> Vec<String> {
        self.queues.iter().map(|q| q.name.clone()).collect()
    }

    /// The partitions this node currently owns of its first queue (the default queue when it
    /// serves it; see [`SchedulerNode::owned_partitions_of`]).
    pub fn owned_partitions(&self) -> Vec<PartitionId> {
        self.queues.first().map(|q| q.owned()).unwrap_or_default()
    }

    /// The partitions this node currently owns of `queue` (`None`: it does not serve it).
    pub fn owned_partitions_of(&self, queue: &str) -> Option<Vec<PartitionId>> {
        self.queues
            .iter()
            .find(|q| q.name == queue)
            .map(Served::owned)
    }

    /// The recurring schedules of its first queue (the default queue when it serves it; see
    /// [`SchedulerNode::schedules_of`]): create, pause, resume, delete, list. `None` once the
    /// node is stopping.
    pub fn schedules(&self) -> Option<RecurringSchedules> {
        self.queues.first().and_then(|q| self.schedules_in(q))
    }

    /// The recurring schedules of `queue` (`None`: the node does not serve it, or is stopping).
    pub fn schedules_of(&self, queue: &str) -> Option<RecurringSchedules> {
        let served = self.queues.iter().find(|q| q.name == queue)?;
        self.schedules_in(served)
    }

    fn schedules_in(&self, queue: &Served) -> Option<RecurringSchedules> {
        let runtime = self.runtime.as_ref()?;
        Some(queue.schedules.clone().on(runtime.handle().clone()))
    }

    /// Whether the node is ready: in every queue it serves, it owns partitions and has loaded
    /// each one's schedule once (also `GET /api/v1/ready` on the admin API, per queue).
    pub fn is_ready(&self) -> bool {
        self.queues.iter().all(|q| q.in_flight.ready(&q.owned()))
    }

    /// The recorded final state of a task (`None`: it has not finished, or is unknown), looked
    /// up in each queue the node serves. A status is readable once it is written, which comes
    /// after the handler returned (and after the dead letter, for a failed task): a read made
    /// as the handler returns may answer `None` for a moment; poll until it answers.
    pub async fn task_status(&self, key: &TaskKey) -> Result<Option<StatusRecord>, NodeError> {
        let Some(runtime) = &self.runtime else {
            return Err(NodeError::Stopping);
        };
        for queue in &self.queues {
            let partition =
                scheduler_client::partition_for(&key.ordering_id, queue.partition_count);
            // The driver's connections live on the node's runtime.
            let found = runtime
                .spawn(queue.store.status(partition, key.clone()))
                .await
                .map_err(NodeError::runtime("reading a task's status"))??;
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Stops polling, lets running tasks finish (up to the drain timeout), commits, leaves the
    /// group, and stops the node's threads.
    pub async fn shutdown(mut self) -> Result<(), NodeError> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(admin) = self.admin.take() {
            let _ = admin.stop.send(());
        }
        let consumer_threads = self.take_consumer_threads();
        let actor_thread = self.actor_thread.take();
        let stop_actors = self.stop_actors.take();
        let runtime = self.runtime.take();
        tokio::task::spawn_blocking(move || {
            // Every queue's consumer drains and leaves its group before the actors stop.
            let consumer_result = consumer_threads
                .into_iter()
                .map(JoinHandle::join)
                .find(Result::is_err);
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

/// A node's threads, before the runtime joins them.
struct StartedParts {
    id: Arc<str>,
    admin: Option<AdminServer>,
    stop: Arc<AtomicBool>,
    queues: Vec<Served>,
    node_metrics: Arc<NodeMetrics>,
    actor_thread: JoinHandle<()>,
    stop_actors: oneshot::Sender<()>,
}

impl StartedParts {
    fn into_node(self, runtime: tokio::runtime::Runtime) -> SchedulerNode {
        SchedulerNode {
            id: self.id,
            admin: self.admin,
            stop: self.stop,
            queues: self.queues,
            node_metrics: self.node_metrics,
            actor_thread: Some(self.actor_thread),
            stop_actors: Some(self.stop_actors),
            runtime: Some(runtime),
        }
    }
}

impl SchedulerNode {
    fn take_consumer_threads(&mut self) -> Vec<JoinHandle<()>> {
        self.queues
            .iter_mut()
            .filter_map(|q| q.consumer_thread.take())
            .collect()
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
        let consumer_threads = self.take_consumer_threads();
        let stop_actors = self.stop_actors.take();
        let runtime = BackgroundShutdown(self.runtime.take());
        if consumer_threads.is_empty() && stop_actors.is_none() && runtime.0.is_none() {
            return; // shut down already
        }
        let wind_down = move || {
            for consumer in consumer_threads {
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Every thread of the I/O runtime (where a task's call waits for its time and runs) has
    /// the slice of `scheduling.thread_slice`, on a kernel that takes slices.
    #[test]
    fn the_io_runtimes_threads_run_with_the_settings_slice() {
        let slice = crate::settings::SchedulingSettings::default().thread_slice;
        let runtime = io_runtime(slice).expect("the runtime starts");
        // One task on each thread at once: every thread has started (and asked for its slice).
        let all = Arc::new(std::sync::Barrier::new(RUNTIME_THREADS));
        runtime.block_on(futures::future::join_all((0..RUNTIME_THREADS).map(|_| {
            let all = Arc::clone(&all);
            runtime.spawn(async move {
                all.wait();
            })
        })));
        let tasks = std::fs::read_dir("/proc/self/task").expect("the process's threads");
        let slices: Vec<Duration> = tasks
            .filter_map(|task| {
                let path = task.expect("a thread").path();
                let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
                let tid = path.file_name()?.to_str()?.parse().ok()?;
                (name.trim() == "scheduler-io")
                    .then(|| thread_slice::of(tid).expect("the kernel answers"))
            })
            .collect();
        assert_eq!(slices.len(), RUNTIME_THREADS);
        if thread_slice::kernel_takes_slices() {
            assert!(slices.iter().all(|s| *s == slice), "{slices:?}");
        }
    }
}
