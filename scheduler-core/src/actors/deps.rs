//! What every partition tree needs from the node, and the one place it is wired: the node, the
//! testing kit, the simulation and the actor tests all build it with [`PartitionDeps::builder`],
//! which attaches the features to every task's life ([`crate::hooks`]) in their order.

use std::sync::Arc;

use tokio::sync::watch;

use crate::call_pool::CallPool;
use crate::clock::Clock;
use crate::dead_letter::DeadLetterHook;
use crate::enqueue::Enqueuer;
use crate::groups::{GroupTables, GroupsHook};
use crate::handler::Handlers;
use crate::hooks::TaskHook;
use crate::identity::IdentityHook;
use crate::in_flight::InFlightGauges;
use crate::limits::{self, KeyOverrides, Limits};
use crate::metrics::Metrics;
use crate::retrying::RetryingTasks;
use crate::settings::SchedulingSettings;
use crate::store::{
    AttemptStore, FinishStore, LeaseStore, ScheduleStore, StatusStore, Suspensions, Tables,
    TaskStore,
};
use crate::suspend::SuspensionHook;

/// What every partition tree needs from the node.
#[derive(Clone)]
pub struct PartitionDeps {
    /// This node's id (recorded as the owner when a tree claims its partition).
    pub node_id: Arc<str>,
    /// The store's tables: the tree's supervisor hands each part its own.
    pub tables: Tables,
    /// The time source.
    pub clock: Arc<dyn Clock>,
    /// Runs the user's handlers.
    pub pool: CallPool,
    /// Scheduling settings.
    pub settings: Arc<SchedulingSettings>,
    /// The in-flight gauge of each partition.
    pub in_flight: InFlightGauges,
    /// The node's metrics.
    pub metrics: Arc<Metrics>,
    /// Enqueues the tasks the engine creates (a group's join) on the scheduler's topic.
    pub enqueuer: Arc<dyn Enqueuer>,
    /// The features attached to every task's life, in the order they are called.
    pub hooks: Arc<[Arc<dyn TaskHook>]>,
    /// The per-key limits, whose gates the pool has.
    pub limits: Limits,
    /// The tasks waiting for a retry (a hook too), for the admin API.
    pub retrying: RetryingTasks,
    /// The topic the tasks come from (traces name it), empty when there is none.
    pub topic: Arc<str>,
}

impl PartitionDeps {
    /// The dependencies of the trees of node `node_id` over `store` (its tables and its
    /// leases), running `handlers` under `settings` by `clock`; the tasks the engine creates go
    /// to `enqueuer`, on a topic of `partitions` partitions.
    pub fn builder<S: TaskStore + LeaseStore>(
        node_id: &str,
        store: Arc<S>,
        handlers: Handlers,
        settings: SchedulingSettings,
        clock: Arc<dyn Clock>,
        enqueuer: Arc<dyn Enqueuer>,
        partitions: u32,
    ) -> DepsBuilder {
        DepsBuilder {
            node_id: Arc::from(node_id),
            tables: Tables::of(&store),
            handlers,
            settings,
            clock,
            enqueuer,
            partitions,
            runtime: None,
            metrics: None,
            topic: None,
            extra_hooks: Vec::new(),
            suspensions: None,
            overrides: None,
        }
    }
}

/// Builds a [`PartitionDeps`] (see [`PartitionDeps::builder`]).
pub struct DepsBuilder {
    node_id: Arc<str>,
    tables: Tables,
    handlers: Handlers,
    settings: SchedulingSettings,
    clock: Arc<dyn Clock>,
    enqueuer: Arc<dyn Enqueuer>,
    partitions: u32,
    runtime: Option<tokio::runtime::Handle>,
    metrics: Option<Arc<Metrics>>,
    topic: Option<Arc<str>>,
    extra_hooks: Vec<Arc<dyn TaskHook>>,
    suspensions: Option<watch::Receiver<Arc<Suspensions>>>,
    overrides: Option<watch::Receiver<Arc<KeyOverrides>>>,
}

impl DepsBuilder {
    /// Handlers are called on `runtime` (by default the runtime `build` is called on).
    pub fn runtime(mut self, runtime: tokio::runtime::Handle) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// The metrics the trees report to (by default their own).
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The topic the trees' tasks come from, named in their traces (by default none).
    pub fn topic(mut self, topic: &str) -> Self {
        self.topic = Some(Arc::from(topic));
        self
    }

    /// Attaches `hook` to every task's life after the engine's own features: the node's
    /// completion events (`crate::events`), when it publishes them.
    #[cfg(feature = "node")]
    pub fn hook(mut self, hook: Arc<dyn TaskHook>) -> Self {
        self.extra_hooks.push(hook);
        self
    }

    /// The suspensions in force, kept current by the node (by default none, ever).
    pub fn suspensions(mut self, suspensions: watch::Receiver<Arc<Suspensions>>) -> Self {
        self.suspensions = Some(suspensions);
        self
    }

    /// The per-key limit overrides in force, kept current by the node (by default none, ever).
    pub fn key_overrides(mut self, overrides: watch::Receiver<Arc<KeyOverrides>>) -> Self {
        self.overrides = Some(overrides);
        self
    }

    /// The dependencies, with the call pool of the settings' limits (per-type timeouts, per-key
    /// concurrency) and every feature attached: identities, suspensions, dead letters, groups (with
    /// sub-tasks and jobs), the retrying set, then the hooks given ([`DepsBuilder::hook`]: completion events).
    pub fn build(self) -> PartitionDeps {
        let settings = self.settings;
        let runtime = self.runtime.unwrap_or_else(tokio::runtime::Handle::current);
        let pool = CallPool::with_handlers(
            self.handlers,
            runtime.clone(),
            settings.executor_concurrency,
            settings.execution_timeout,
            Arc::clone(&self.clock),
        )
        .with_type_timeouts(settings.type_timeouts());
        let metrics = self.metrics.unwrap_or_default();
        let limits = Limits::start(
            &settings,
            self.overrides.unwrap_or_else(limits::none),
            &self.node_id,
            Arc::clone(&self.tables.permits),
            &metrics,
            &self.clock,
            &runtime,
        );
        let pool = pool
            .with_gates(limits.gates())
            .with_weights(limits.weights());
        let suspensions = self
            .suspensions
            .unwrap_or_else(|| watch::channel(Arc::default()).1);
        let mut hooks: Vec<Arc<dyn TaskHook>> = vec![
            Arc::new(IdentityHook {
                store: self.tables.identities.clone(),
            }),
            Arc::new(SuspensionHook {
                suspensions,
                metrics: Arc::clone(&metrics),
            }),
            Arc::new(DeadLetterHook {
                store: self.tables.dead_letters.clone(),
                pool: pool.clone(),
                clock: Arc::clone(&self.clock),
                metrics: Arc::clone(&metrics),
            }),
            Arc::new(GroupsHook {
                tables: GroupTables::from(&self.tables),
                enqueuer: Arc::clone(&self.enqueuer),
                clock: Arc::clone(&self.clock),
                partitions: self.partitions,
            }),
        ];
        let retrying = RetryingTasks::default();
        hooks.push(Arc::new(retrying.clone()));
        hooks.extend(self.extra_hooks);
        PartitionDeps {
            node_id: self.node_id,
            tables: self.tables,
            clock: self.clock,
            pool,
            settings: Arc::new(settings),
            in_flight: InFlightGauges::default(),
            metrics,
            enqueuer: self.enqueuer,
            hooks: hooks.into(),
            limits,
            retrying,
            topic: self.topic.unwrap_or_else(|| Arc::from("")),
        }
    }
}

/// What a partition's executors and each task's run are given: the call pool and the features'
/// hooks, and of the tables only those a run reads and writes itself.
#[derive(Clone)]
pub struct RunDeps {
    /// The tables a run reads and writes itself (the hooks hold their own).
    pub tables: RunTables,
    /// The time source.
    pub clock: Arc<dyn Clock>,
    /// Runs the user's handlers.
    pub pool: CallPool,
    /// Scheduling settings.
    pub settings: Arc<SchedulingSettings>,
    /// The node's metrics.
    pub metrics: Arc<Metrics>,
    /// The features attached to every task's life, in the order they are called.
    pub hooks: Arc<[Arc<dyn TaskHook>]>,
    /// The topic the tasks come from (traces name it).
    pub topic: Arc<str>,
}

/// The tables a task's run reads and writes itself.
#[derive(Clone)]
pub struct RunTables {
    /// Its status: read before every attempt.
    pub status: Arc<dyn StatusStore>,
    /// Its final status, written with its removal from the schedule.
    pub finish: Arc<dyn FinishStore>,
    /// Its attempts' history.
    pub attempts: Arc<dyn AttemptStore>,
    /// The schedule it leaves once final (and the executor reads deferred tasks back from).
    pub schedule: Arc<dyn ScheduleStore>,
}

impl PartitionDeps {
    /// What the partition's executors and task runs are given.
    pub fn run_deps(&self) -> RunDeps {
        let tables = &self.tables;
        RunDeps {
            tables: RunTables {
                status: Arc::clone(&tables.status),
                finish: Arc::clone(&tables.finish),
                attempts: Arc::clone(&tables.attempts),
                schedule: Arc::clone(&tables.schedule),
            },
            clock: Arc::clone(&self.clock),
            pool: self.pool.clone(),
            settings: Arc::clone(&self.settings),
            metrics: Arc::clone(&self.metrics),
            hooks: Arc::clone(&self.hooks),
            topic: Arc::clone(&self.topic),
        }
    }
}
