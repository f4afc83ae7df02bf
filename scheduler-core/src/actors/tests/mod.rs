//! Unit tests of the actor tree: a real actix system on a paused tokio runtime (time moves only
//! when every task waits, so timings are exact and the tests take milliseconds), the in-memory
//! store, and an executor that records every call.

mod cancels;
mod groups;
mod identities;
mod limits;
mod low_water;
mod memory;
mod one_run_at_a_time;
mod ownership;
mod retries;
mod scheduling;
mod starts;
mod statuses;
mod suspensions;
mod task_types;
mod traces;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::{Actor, Addr};
use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use scheduler_client::{Task, TaskKey};

use super::topic_supervisor::{
    AssignPartitions, OwnedPartitions, ProcessTaskBatch, RevokePartitions, TaskBatchProcessed,
    TopicSupervisor,
};
use super::{PartitionDeps, PolledTasks};
use crate::clock::{Clock, TokioClock};
use crate::handler::{TaskContext, TaskError, TaskHandler};
use crate::in_flight::InFlightGauges;
use crate::settings::SchedulingSettings;
use crate::store::memory::MemoryStore;
use crate::store::{AttemptOutcome, OwnershipStore, ScheduleStore, TaskStatus};

const P: i32 = 0;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 12, 0, 0)
        .single()
        .expect("valid time")
}

fn ms(n: i64) -> TimeDelta {
    TimeDelta::milliseconds(n)
}

fn task(ordering_id: &str, at: DateTime<Utc>, unique: &str) -> Task {
    Task::new(ordering_id, at, unique, Default::default())
}

/// Runs `test` inside an actix system whose tokio runtime starts paused. Paused time only moves
/// when the runtime is idle, so an actor that spins would hang the test: a watchdog fails it.
fn run_paused<F: Future<Output = ()>>(test: impl FnOnce() -> F) {
    let (done, finished) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if finished.recv_timeout(Duration::from_secs(60))
            == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        {
            eprintln!("actor test still running after 60 s of real time: an actor is spinning");
            std::process::exit(101);
        }
    });
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("tokio runtime")
    });
    system.block_on(test());
    let _ = done.send(());
}

/// What the recording executor does with a call.
#[derive(Clone, Copy)]
enum Behaviour {
    Succeed,
    /// Fail (retryably) this many times, then succeed.
    FailTimes(u32),
    FailAlways,
    GiveUp,
    /// Panic on the first call, then succeed.
    PanicOnce,
    /// Never return from the first call, then succeed.
    HangOnce,
}

struct Recorder {
    clock: TokioClock,
    store: MemoryStore,
    work: Duration,
    behaviours: HashMap<String, Behaviour>,
    calls: Mutex<Vec<(TaskKey, DateTime<Utc>)>>,
    /// Each call's orderingId and its data's `v` (-1 without).
    versions: Mutex<Vec<(String, i64)>>,
    /// Each call's task key and enqueue offset.
    enqueue_offsets: Mutex<Vec<(TaskKey, Option<i64>)>>,
    running: Mutex<HashMap<String, usize>>,
    overlaps: AtomicUsize,
    /// Calls running now per limit key, and the most ever at once.
    by_limit_key: Mutex<HashMap<String, (usize, usize)>>,
    completed: AtomicUsize,
    peak_in_flight: AtomicUsize,
    /// The partition's next offset: the harness enqueues like the consumer, offsets rising.
    next_offset: AtomicI64,
}

impl Recorder {
    fn new(
        clock: TokioClock,
        store: &MemoryStore,
        work: Duration,
        behaviours: &[(&str, Behaviour)],
    ) -> Arc<Recorder> {
        Arc::new(Recorder {
            clock,
            store: store.clone(),
            work,
            behaviours: behaviours
                .iter()
                .map(|(o, b)| (o.to_string(), *b))
                .collect(),
            calls: Mutex::default(),
            versions: Mutex::default(),
            enqueue_offsets: Mutex::default(),
            running: Mutex::default(),
            overlaps: AtomicUsize::new(0),
            by_limit_key: Mutex::default(),
            completed: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
            next_offset: AtomicI64::new(0),
        })
    }

    fn calls(&self) -> Vec<(TaskKey, DateTime<Utc>)> {
        self.calls.lock().expect("lock").clone()
    }

    /// The `v` of the data of each call of `ordering_id`'s tasks.
    fn data_versions(&self, ordering_id: &str) -> Vec<i64> {
        let versions = self.versions.lock().expect("lock");
        versions
            .iter()
            .filter(|(o, _)| o == ordering_id)
            .map(|(_, v)| *v)
            .collect()
    }

    /// The enqueue offset of each call of `ordering_id`'s tasks.
    fn enqueue_offsets(&self, ordering_id: &str) -> Vec<Option<i64>> {
        let offsets = self.enqueue_offsets.lock().expect("lock");
        offsets
            .iter()
            .filter(|(k, _)| k.ordering_id == ordering_id)
            .map(|(_, offset)| *offset)
            .collect()
    }

    /// The most calls of `limit_key` that ever ran at once.
    fn peak_of_limit_key(&self, limit_key: &str) -> usize {
        let by_key = self.by_limit_key.lock().expect("lock");
        by_key.get(limit_key).map_or(0, |(_, peak)| *peak)
    }

    fn call_times(&self, ordering_id: &str) -> Vec<DateTime<Utc>> {
        self.calls()
            .into_iter()
            .filter(|(k, _)| k.ordering_id == ordering_id)
            .map(|(_, at)| at)
            .collect()
    }
}

impl TaskHandler for Arc<Recorder> {
    async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
        let previous_calls = {
            let mut calls = self.calls.lock().expect("lock");
            calls.push((task.key(), self.clock.now()));
            let version = task.task_data.get("v").and_then(|v| v.as_i64());
            self.versions
                .lock()
                .expect("lock")
                .push((task.ordering_id.clone(), version.unwrap_or(-1)));
            self.enqueue_offsets
                .lock()
                .expect("lock")
                .push((task.key(), task.enqueue_offset));
            calls.iter().filter(|(k, _)| *k == task.key()).count() - 1
        };
        // Tasks loaded but not finished: bounded by max_in_flight_tasks.
        let in_flight = self
            .store
            .loaded_tasks()
            .saturating_sub(self.completed.load(Ordering::SeqCst));
        self.peak_in_flight.fetch_max(in_flight, Ordering::SeqCst);
        {
            let mut running = self.running.lock().expect("lock");
            let n = running.entry(task.ordering_id.clone()).or_default();
            *n += 1;
            if *n > 1 {
                self.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        }
        let limit_key = task.limit_key.clone();
        if let Some(key) = &limit_key {
            let mut by_key = self.by_limit_key.lock().expect("lock");
            let (running, peak) = by_key.entry(key.clone()).or_default();
            *running += 1;
            *peak = (*peak).max(*running);
        }
        tokio::time::sleep(self.work).await;
        if let Some(key) = &limit_key {
            let mut by_key = self.by_limit_key.lock().expect("lock");
            by_key.entry(key.clone()).or_default().0 -= 1;
        }
        *self
            .running
            .lock()
            .expect("lock")
            .entry(task.ordering_id.clone())
            .or_default() -= 1;
        let result = match self
            .behaviours
            .get(&task.ordering_id)
            .copied()
            .unwrap_or(Behaviour::Succeed)
        {
            Behaviour::Succeed => Ok(()),
            Behaviour::FailTimes(n) if previous_calls as u32 >= n => Ok(()),
            Behaviour::FailTimes(_) | Behaviour::FailAlways => Err(TaskError::retry("flaky")),
            Behaviour::GiveUp => Err(TaskError::invalid("invalid payload")),
            Behaviour::PanicOnce if previous_calls == 0 => panic!("executor bug"),
            Behaviour::HangOnce if previous_calls == 0 => std::future::pending().await,
            Behaviour::PanicOnce | Behaviour::HangOnce => Ok(()),
        };
        self.completed.fetch_add(1, Ordering::SeqCst);
        result
    }
}

struct Harness {
    store: MemoryStore,
    recorder: Arc<Recorder>,
    topic: Addr<TopicSupervisor>,
    in_flight: InFlightGauges,
    metrics: Arc<crate::metrics::Metrics>,
    /// What the engine enqueued (a group's join): delivered by `deliver_enqueued`.
    outbox: crate::enqueue::Outbox,
    /// The suspensions the node's trees see (as the node's poll would set them).
    suspend: tokio::sync::watch::Sender<Arc<crate::store::Suspensions>>,
    /// The node's retrying set.
    retrying: crate::retrying::RetryingTasks,
}

impl Harness {
    /// A node's actors with one executor; call inside [`run_paused`].
    fn new(
        settings: SchedulingSettings,
        work: Duration,
        behaviours: &[(&str, Behaviour)],
    ) -> Harness {
        let store = MemoryStore::new();
        let recorder = Recorder::new(TokioClock::starting_at(t0()), &store, work, behaviours);
        Harness::node("test-node", settings, store, recorder)
    }

    /// Another node of the same cluster: the same store, executor recorder and clock.
    fn second_node(&self, settings: SchedulingSettings) -> Harness {
        Harness::node(
            "test-node-2",
            settings,
            self.store.clone(),
            Arc::clone(&self.recorder),
        )
    }

    fn node(
        node_id: &str,
        settings: SchedulingSettings,
        store: MemoryStore,
        recorder: Arc<Recorder>,
    ) -> Harness {
        let handlers = crate::handler::Handlers::new().fallback(Arc::clone(&recorder));
        Harness::node_with(node_id, settings, store, recorder, handlers)
    }

    /// A node running `handlers` (the recorder only counts offsets then).
    fn node_with(
        node_id: &str,
        settings: SchedulingSettings,
        store: MemoryStore,
        recorder: Arc<Recorder>,
        handlers: crate::handler::Handlers,
    ) -> Harness {
        let outbox = crate::enqueue::Outbox::default();
        let (suspend, _) = tokio::sync::watch::channel(Arc::default());
        let clock = Arc::new(recorder.clock.clone());
        let deps = PartitionDeps::builder(
            node_id,
            Arc::new(store.clone()),
            handlers,
            settings,
            clock,
            Arc::new(outbox.clone()),
            1,
        )
        .suspensions(suspend.subscribe())
        .topic("harness-topic")
        .build();
        let in_flight = deps.in_flight.clone();
        let metrics = Arc::clone(&deps.metrics);
        let retrying = deps.retrying.clone();
        let topic = TopicSupervisor::new(deps).start();
        Harness {
            store,
            recorder,
            topic,
            in_flight,
            metrics,
            outbox,
            suspend,
            retrying,
        }
    }

    async fn assign(&self) {
        self.topic
            .send(AssignPartitions(vec![P]))
            .await
            .expect("assign");
    }

    /// Consumes `tasks` as the next records of the partition: each at the next offset.
    async fn enqueue(&self, tasks: Vec<Task>) {
        let tasks = tasks.into_iter().map(|t| self.enqueued(t)).collect();
        self.process(PolledTasks {
            tasks,
            ..PolledTasks::default()
        })
        .await;
    }

    fn enqueued(&self, task: Task) -> Task {
        task.enqueued_at(self.recorder.next_offset.fetch_add(1, Ordering::SeqCst))
    }

    /// Consumes `ops` as the next records of the partition, in one batch; each gets the next
    /// offset (a task's is set on it).
    async fn by_identity(&self, ops: Vec<super::IdentityOp>) -> Vec<super::IdentityOp> {
        use super::IdentityOp;
        let ops: Vec<IdentityOp> = ops
            .iter()
            .map(|op| op.at_offset(self.recorder.next_offset.fetch_add(1, Ordering::SeqCst)))
            .collect();
        self.process(PolledTasks {
            by_identity: ops.clone(),
            ..PolledTasks::default()
        })
        .await;
        ops
    }

    async fn cancel(&self, cancels: Vec<TaskKey>) {
        self.process(PolledTasks {
            cancels,
            ..PolledTasks::default()
        })
        .await;
    }

    async fn process(&self, batch: PolledTasks) {
        let reply = self.offer(batch).await;
        assert_eq!(reply.persisted, vec![P], "{:?}", reply.failed);
    }

    /// Hands the tree a polled batch, as the consumer does, and returns what became durable.
    async fn offer(&self, batch: PolledTasks) -> TaskBatchProcessed {
        self.topic
            .send(ProcessTaskBatch(std::collections::BTreeMap::from([(
                P, batch,
            )])))
            .await
            .expect("batch")
    }
}

async fn advance(d: Duration) {
    tokio::time::sleep(d).await;
}

fn overlaps(h: &Harness) -> usize {
    h.recorder.overlaps.load(Ordering::SeqCst)
}

/// Tasks of one orderingId due at one time, enqueued in the reverse of their uniqueness keys'
/// order (`z…` first): they must run in enqueue order.
fn tied(ordering_id: &str, at: DateTime<Utc>, count: usize) -> Vec<Task> {
    (0..count)
        .map(|i| {
            task(
                ordering_id,
                at,
                &format!("{}-{i:03}", (b'z' - (i % 26) as u8) as char),
            )
        })
        .collect()
}

fn ran(h: &Harness, ordering_id: &str) -> Vec<TaskKey> {
    h.recorder
        .calls()
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.ordering_id == ordering_id)
        .collect()
}
