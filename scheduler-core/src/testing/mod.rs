//! Unit-testing handlers without Kafka or Cassandra: [`TestEngine`] runs the engine in
//! process, on a clock that moves only when the test moves it, and reports what ran.
//!
//! It is the real engine, not a stand-in: a node's actor tree (persistence, loading, the
//! per-orderingId executors, each task's lifecycle) on every partition of an in-memory topic,
//! with the in-memory store, the handlers you register on a node, and the settings' retry
//! policy. So retries and their backoff, dead letters and the `dead_lettered` hook, groups and
//! their joins, sub-tasks and jobs, conflict modes, cancels, suspensions and recurring schedules
//! behave as they do on a node. Tasks go in through the client's own checks
//! ([`TestEngine::schedule`] refuses what `Scheduler::schedule_task` refuses, with its error).
//!
//! Time stands still between calls. [`TestEngine::advance`] moves it on, running everything that
//! falls due on the way at its time (a retry after its backoff, each tick of a schedule), then
//! everything due at the new time until nothing more can run; [`TestEngine::run_due`] does the
//! last part without moving the clock. Both return the handler calls that ended meanwhile
//! ([`Run`]: which task, which attempt, when, and whether it completed, will be retried or became
//! a dead letter). Nothing sleeps: a test advancing hours runs in milliseconds, the same way every
//! time (the engine's jitter is seeded).
//!
//! Enable it in the crates that test with it. It needs no Kafka or Cassandra client: a crate
//! that only tests handlers leaves the default `node` feature off, and builds neither rdkafka
//! nor the Cassandra driver:
//!
//! ```toml
//! [dev-dependencies]
//! scheduler-core = { version = "...", default-features = false, features = ["testing"] }
//! ```
//!
//! ```
//! use std::time::Duration;
//!
//! use scheduler_core::settings::SchedulingSettings;
//! use scheduler_core::store::{DeadReason, TaskStatus};
//! use scheduler_core::testing::{Outcome, TestEngine};
//! use scheduler_core::{Task, TaskContext, TaskError, TaskHandler};
//!
//! struct SendEmail;
//!
//! impl TaskHandler for SendEmail {
//!     async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
//!         match task.task_data.get("to") {
//!             Some(_) => Ok(()), // send it
//!             None => Err(TaskError::invalid("no recipient")),
//!         }
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let engine = TestEngine::builder()
//!     .handler("email", SendEmail)
//!     .settings(SchedulingSettings { max_task_retries: 3, ..SchedulingSettings::default() })
//!     .start()
//!     .await
//!     .unwrap();
//! let due = engine.now() + chrono::TimeDelta::minutes(5);
//! let data = serde_json::json!({"to": "ann@example.com"}).as_object().cloned().unwrap();
//! let reminder = Task::new("customer-7", due, "reminder-1", data).of_type("email");
//! let broken = Task::new("customer-8", due, "reminder-1", Default::default()).of_type("email");
//! engine.schedule(reminder.clone()).unwrap();
//! engine.schedule(broken.clone()).unwrap();
//!
//! assert!(engine.advance(Duration::from_secs(299)).await.unwrap().is_empty()); // not yet
//! let runs = engine.advance(Duration::from_secs(1)).await.unwrap();
//!
//! assert_eq!(runs.len(), 2);
//! assert!(runs.iter().all(|run| run.at == due && run.attempt == 1));
//! assert_eq!(engine.status(&reminder.key()).unwrap().status, TaskStatus::Completed);
//! let dead = runs.iter().find(|run| run.key() == broken.key()).unwrap();
//! assert_eq!(
//!     dead.outcome,
//!     Outcome::DeadLettered { reason: DeadReason::Invalid, error: "no recipient".into() }
//! );
//! assert_eq!(engine.dead_letters().len(), 1);
//! # }
//! ```
//!
//! What it does not cover: Kafka and Cassandra themselves and everything about several nodes
//! (rebalances, fencing, leases between nodes, outages); the admin API; handlers that wait on
//! other threads or real I/O (the engine counts as settled when its own tasks wait, so such a
//! call is reported in a later drive, once it returned).

mod calls;
mod engine;
mod topic;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use scheduler_client::{partition_for, ScheduleError, Task, TaskIdentity, TaskKey};
use tokio::sync::watch;

use self::calls::{Journal, Recorded};
pub use self::calls::{Outcome, Run};
use self::engine::{Engine, EngineError, ManualClock, Parts};
use self::topic::{Topic, TopicEnqueuer};
use crate::clock::Clock;
use crate::handler::{Handlers, TaskHandler};
use crate::recurring::RecurringSchedules;
use crate::settings::{SchedulingSettings, Settings, SettingsError, TypeLimits};
use crate::store::memory::MemoryStore;
use crate::store::{
    AttemptRecord, DeadLetter, GroupKey, GroupState, JobRecord, JobStore, StatusRecord, StoreError,
    Suspension, SuspensionStore, SuspensionTarget, Suspensions,
};

/// Partitions of the kit's topic unless [`TestEngineBuilder::partitions`] says otherwise.
pub const DEFAULT_PARTITIONS: u32 = 4;

/// Why the kit refused a request.
#[derive(Debug, thiserror::Error)]
pub enum TestingError {
    /// The client would refuse the task (or cancel, or reschedule): its own error.
    #[error(transparent)]
    Rejected(#[from] ScheduleError),
    /// The scheduling settings are out of range (as a node would refuse them).
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// No handler was registered.
    #[error("the test engine has no handler: register one per task type, or a fallback")]
    NoHandlers,
    /// The topic needs at least one partition.
    #[error("the test engine's topic needs at least one partition")]
    NoPartitions,
    /// Time moves forward only.
    #[error("{to} is before the engine's time {now}: time moves forward only")]
    BeforeNow {
        /// The engine's time.
        now: DateTime<Utc>,
        /// The time asked for.
        to: DateTime<Utc>,
    },
    /// The in-memory store failed (it does not, unless a bug says otherwise).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine's thread or runtime could not start.
    #[error("starting the test engine's thread or runtime: {0}")]
    Start(#[source] std::io::Error),
    /// The engine's thread is gone (it panicked).
    #[error("the test engine's thread stopped (it panicked)")]
    Stopped,
}

impl From<EngineError> for TestingError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::Start(e) => TestingError::Start(e),
            EngineError::Stopped => TestingError::Stopped,
        }
    }
}

/// An engine to start: its handlers and settings (see [`TestEngine::builder`]).
#[must_use = "a builder does nothing until started"]
pub struct TestEngineBuilder {
    handlers: Handlers,
    settings: SchedulingSettings,
    partitions: u32,
    seed: u64,
    clock: Arc<ManualClock>,
    journal: Arc<Journal>,
}

impl TestEngineBuilder {
    /// Runs the tasks of `task_type` through `handler` (as `NodeBuilder::handler`).
    pub fn handler(mut self, task_type: impl Into<String>, handler: impl TaskHandler) -> Self {
        let handler = self.recorded(handler);
        self.handlers = self.handlers.handler(task_type, handler);
        self
    }

    /// Runs the tasks of every type without a handler of its own through `handler` (as
    /// `NodeBuilder::fallback`). Without one, a task of another type waits, as on a node.
    pub fn fallback(mut self, handler: impl TaskHandler) -> Self {
        let handler = self.recorded(handler);
        self.handlers = self.handlers.fallback(handler);
        self
    }

    /// Scheduling settings, a node's `[scheduling]` (default: a node's defaults): the retry
    /// policy (`max_task_retries`, `backoff_factor`, `max_backoff`), `execution_timeout`,
    /// `executor_concurrency`, the grace window, per-type limits (`task_types`). Replaces the
    /// settings and the [`TestEngineBuilder::limits`] given so far.
    pub fn settings(mut self, settings: SchedulingSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The limits of one task type (`[scheduling.task_types.<type>]`): its own retry policy or
    /// execution timeout.
    pub fn limits(mut self, task_type: impl Into<String>, limits: TypeLimits) -> Self {
        self.settings.task_types.insert(task_type.into(), limits);
        self
    }

    /// The engine's time at start (default 2030-01-01T00:00:00Z; whole milliseconds).
    pub fn starting_at(self, start: DateTime<Utc>) -> Self {
        self.clock
            .start_at(scheduler_client::truncate_to_millis(start));
        self
    }

    /// How many partitions the topic has (default [`DEFAULT_PARTITIONS`]); the engine owns
    /// them all.
    pub fn partitions(mut self, partitions: u32) -> Self {
        self.partitions = partitions;
        self
    }

    /// Seeds the engine's randomness (the retries' jitter; default 0): the same seed, the same
    /// run.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Starts the engine: its tree claims every partition and loads its (empty) schedule.
    pub async fn start(self) -> Result<TestEngine, TestingError> {
        if self.handlers.is_empty() {
            return Err(TestingError::NoHandlers);
        }
        if self.partitions == 0 {
            return Err(TestingError::NoPartitions);
        }
        let settings = Settings {
            scheduling: self.settings,
            ..Settings::default()
        };
        settings.validate()?;
        let settings = settings.scheduling;
        let store = MemoryStore::new();
        let clock: Arc<dyn Clock> = self.clock.clone();
        let grace = settings.scheduling_grace_window;
        let topic = Arc::new(Topic::new(self.partitions, grace, Arc::clone(&clock)));
        let schedules = RecurringSchedules::new(
            Arc::new(store.clone()),
            Arc::new(TopicEnqueuer(Arc::clone(&topic))),
            clock,
        );
        let (suspensions, watched) = watch::channel(Arc::new(Suspensions::default()));
        let engine = Engine::start(Parts {
            handlers: self.handlers,
            settings,
            partitions: self.partitions,
            store: store.clone(),
            topic: Arc::clone(&topic),
            clock: Arc::clone(&self.clock),
            suspensions: watched,
            seed: self.seed,
        })
        .await?;
        Ok(TestEngine {
            engine,
            topic,
            store,
            clock: self.clock,
            journal: self.journal,
            partitions: self.partitions,
            schedules,
            suspensions,
        })
    }

    fn recorded<E>(&self, handler: E) -> Recorded<E> {
        Recorded {
            handler,
            journal: Arc::clone(&self.journal),
            clock: self.clock.clone(),
        }
    }
}

/// The engine in process, on a manual clock (see the [module](self)).
pub struct TestEngine {
    // (Dropped first: its thread ends before the rest goes.)
    engine: Engine,
    topic: Arc<Topic>,
    store: MemoryStore,
    clock: Arc<ManualClock>,
    journal: Arc<Journal>,
    partitions: u32,
    schedules: RecurringSchedules,
    suspensions: watch::Sender<Arc<Suspensions>>,
}

impl TestEngine {
    /// An engine to start with a handler per task type:
    /// `TestEngine::builder().handler("send-email", SendEmail).start().await?`.
    pub fn builder() -> TestEngineBuilder {
        let start = Utc
            .with_ymd_and_hms(2030, 1, 1, 0, 0, 0)
            .single()
            .unwrap_or(DateTime::UNIX_EPOCH);
        TestEngineBuilder {
            handlers: Handlers::new(),
            settings: SchedulingSettings::default(),
            partitions: DEFAULT_PARTITIONS,
            seed: 0,
            clock: Arc::new(ManualClock::new(start)),
            journal: Arc::default(),
        }
    }

    /// An engine running every task through `handler`, with a node's default settings.
    pub async fn new(executor: impl TaskHandler) -> Result<TestEngine, TestingError> {
        Self::builder().fallback(executor).start().await
    }

    /// The engine's time.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Schedules `task` as `Scheduler::schedule_task` does: checked by the client's rules (a
    /// refused task returns its error), then written to its partition; the engine takes it in
    /// when it next runs ([`TestEngine::run_due`], [`TestEngine::advance`]).
    pub fn schedule(&self, task: Task) -> Result<(), TestingError> {
        Ok(self.topic.schedule(&task)?)
    }

    /// Cancels the task with `key`, as `Scheduler::cancel_task` does.
    pub fn cancel(&self, key: &TaskKey) -> Result<(), TestingError> {
        Ok(self.topic.cancel(key)?)
    }

    /// Moves the pending task of `identity` (scheduled with a conflict mode) to `to`, as
    /// `Scheduler::reschedule` does.
    pub fn reschedule(
        &self,
        identity: &TaskIdentity,
        to: DateTime<Utc>,
    ) -> Result<(), TestingError> {
        Ok(self.topic.reschedule(identity, to)?)
    }

    /// Cancels the pending task of `identity`, as `Scheduler::cancel_identity` does.
    pub fn cancel_identity(&self, identity: &TaskIdentity) -> Result<(), TestingError> {
        Ok(self.topic.cancel_identity(identity)?)
    }

    /// Runs everything due now, and what that brings about now (a retry due at once, a group's
    /// join, sub-tasks due now), until nothing more can run without time moving. The calls
    /// that ended, in order.
    pub async fn run_due(&self) -> Result<Vec<Run>, TestingError> {
        self.advance(Duration::ZERO).await
    }

    /// Moves the clock on by `by` as time would pass on a running node: everything that falls
    /// due on the way runs at its time, in order (a retry after its backoff, each tick of a
    /// recurring schedule), then everything due at the new time, as [`TestEngine::run_due`].
    /// The calls that ended, in order (a call still running, its handler waiting on the
    /// clock, is reported once it ends).
    pub async fn advance(&self, by: Duration) -> Result<Vec<Run>, TestingError> {
        self.engine.drive(by).await?;
        let letters = self.store.all_dead_letters();
        Ok(calls::runs(self.journal.take(), &letters, |key| {
            self.attempts(key)
        }))
    }

    /// [`TestEngine::advance`] to the time `to`.
    pub async fn advance_to(&self, to: DateTime<Utc>) -> Result<Vec<Run>, TestingError> {
        let now = self.now();
        let by = (to - now)
            .to_std()
            .map_err(|_| TestingError::BeforeNow { now, to })?;
        self.advance(by).await
    }

    /// The recorded final state of the task with `key` (`None`: not finished).
    pub fn status(&self, key: &TaskKey) -> Option<StatusRecord> {
        self.store.status_of(self.partition_of(key), key)
    }

    /// The attempts recorded for the task with `key`, in the order made. (A task that ends at
    /// its first attempt has none: its status says it all, as on a node.)
    pub fn attempts(&self, key: &TaskKey) -> Vec<AttemptRecord> {
        self.store.attempts(self.partition_of(key), key)
    }

    /// Every dead letter, by task key.
    pub fn dead_letters(&self) -> Vec<DeadLetter> {
        self.store.all_dead_letters().into_values().collect()
    }

    /// The tasks the engine took in that have no final status yet (waiting for their time,
    /// retrying, waiting for a handler or a resume), by key. A task scheduled since the last
    /// drive is not among them yet.
    pub fn pending(&self) -> Vec<TaskKey> {
        let partitions = (0..).take(self.partitions as usize);
        let mut keys: Vec<TaskKey> = (partitions.flat_map(|p| self.store.scheduled(p)))
            .filter(|key| self.status(key).is_none())
            .collect();
        keys.sort();
        keys
    }

    /// What the store holds of a group: its members' outcomes, its total, its failure.
    pub fn group(&self, group: &GroupKey) -> Option<GroupState> {
        self.store.groups().remove(group)
    }

    /// The job `id`, as its coordinator started it.
    pub async fn job(&self, id: &str) -> Result<Option<JobRecord>, TestingError> {
        Ok(JobStore::job(&self.store, id.to_string()).await?)
    }

    /// The recurring schedules: the node's own API (`SchedulerNode::schedules`), on the
    /// engine's store and clock. A schedule created or resumed fires from the next drive on.
    pub fn schedules(&self) -> RecurringSchedules {
        self.schedules.clone()
    }

    /// Suspends `target` as an operator does (`scheduler suspend`): its tasks wait, pending and
    /// without an attempt, until [`TestEngine::resume`]. In force at once (a node reads the
    /// suspensions every 2 s).
    pub async fn suspend(
        &self,
        target: SuspensionTarget,
        reason: Option<String>,
    ) -> Result<(), TestingError> {
        let since = self.now();
        let suspension = Suspension {
            target,
            since,
            reason,
        };
        self.store.suspend(suspension).await?;
        self.read_suspensions().await
    }

    /// Lifts the suspension of `target`.
    pub async fn resume(&self, target: SuspensionTarget) -> Result<(), TestingError> {
        SuspensionStore::resume(&self.store, target).await?;
        self.read_suspensions().await
    }

    /// Hands the suspensions in the store to the partition trees (a node's poll, at once).
    async fn read_suspensions(&self) -> Result<(), TestingError> {
        let now = Suspensions::new(self.store.suspensions().await?);
        self.suspensions.send_replace(Arc::new(now));
        Ok(())
    }

    fn partition_of(&self, key: &TaskKey) -> i32 {
        partition_for(&key.ordering_id, self.partitions)
    }
}
