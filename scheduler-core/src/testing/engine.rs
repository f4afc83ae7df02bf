//! The kit's engine: one node's real actor tree (a `TopicSupervisor` owning every partition, as
//! `node/queue.rs` wires it, on the in-memory store) on a thread of its own, with a
//! current-thread tokio runtime whose time is paused. The runtime runs only while the kit asks
//! it to (`drive`), so between two calls nothing happens and time stands still.
//!
//! Driving to a time `t` is a sleep until `t`: tokio's paused clock jumps from one timer to the
//! next whenever every task waits, so everything falls due in order and at its time (a retry's
//! backoff, a schedule's next tick, a dispatch timer). At `t` the engine runs on until it is
//! quiescent: no task can run and no timer is due. That moment is the runtime's own: just
//! before it would park (and, with time paused, jump to the next timer), it calls
//! `on_thread_park`; the kit's hook then ends the drive instead, unless something woke the work
//! in the meantime ([`Quiescence`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

use actix::{Actor, Addr};
use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::{oneshot, watch};
use tokio::task::LocalSet;
use tracing::warn;

use super::topic::{Topic, TopicEnqueuer};
use crate::actors::topic_supervisor::{AssignPartitions, ProcessTaskBatch, TopicSupervisor};
use crate::actors::PartitionDeps;
use crate::clock::Clock;
use crate::enqueue::Enqueuer;
use crate::handler::Handlers;
use crate::metrics::Metrics;
use crate::recurring::ticker::Ticker;
use crate::recurring::TICK_TYPE;
use crate::settings::SchedulingSettings;
use crate::store::memory::MemoryStore;
use crate::store::{PartitionId, Suspensions};

/// A batch the tree could not make durable is offered again after this (the poll loop's pause).
const PERSIST_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// The engine's time: tokio's paused clock on the engine's thread, from the start time. Other
/// threads (the test, calling `RecurringSchedules` or scheduling a task) read the time the engine last
/// stopped at, which is the same while it stands still.
pub(super) struct ManualClock {
    /// Set on the engine's thread as it starts.
    origin: OnceLock<Origin>,
    /// The time the engine stopped at last (the start time before it starts).
    parked: Mutex<DateTime<Utc>>,
}

struct Origin {
    wall: DateTime<Utc>,
    instant: tokio::time::Instant,
    thread: ThreadId,
}

impl ManualClock {
    pub(super) fn new(start: DateTime<Utc>) -> ManualClock {
        ManualClock {
            origin: OnceLock::new(),
            parked: Mutex::new(start),
        }
    }

    /// Sets the start time (before the engine starts).
    pub(super) fn start_at(&self, start: DateTime<Utc>) {
        *self.parked.lock().unwrap_or_else(PoisonError::into_inner) = start;
    }

    /// On the engine's thread, in its runtime: time starts here.
    fn start_here(&self) {
        let wall = *self.parked.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = self.origin.set(Origin {
            wall,
            instant: tokio::time::Instant::now(),
            thread: std::thread::current().id(),
        });
    }

    /// On the engine's thread: the engine stops here until the next drive.
    fn park(&self) {
        let now = self.now();
        *self.parked.lock().unwrap_or_else(PoisonError::into_inner) = now;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        match self.origin.get() {
            Some(origin) if origin.thread == std::thread::current().id() => {
                let elapsed = tokio::time::Instant::now().saturating_duration_since(origin.instant);
                TimeDelta::from_std(elapsed)
                    .ok()
                    .and_then(|elapsed| origin.wall.checked_add_signed(elapsed))
                    .unwrap_or(DateTime::<Utc>::MAX_UTC)
            }
            _ => *self.parked.lock().unwrap_or_else(PoisonError::into_inner),
        }
    }
}

/// Finds the moments the engine is quiescent. The drive's future is polled through
/// [`Watched`], which notes every wake of it (a local task of the actors scheduled, a spawned
/// task waking one, its own timer); the runtime calls [`Quiescence::on_park`] when its run
/// queue is empty and it is about to park. Parked without a wake since the drive's future was
/// last polled, nothing can run at this instant: the hook wakes the drive (so the runtime polls
/// it rather than park and jump to the next timer) and marks the moment quiescent.
struct Quiescence {
    wakes: Arc<WakeNote>,
    waker: Waker,
    /// A drive waits for quiescence now.
    armed: AtomicBool,
    /// Quiescence was found since the drive armed it.
    reached: AtomicBool,
}

/// Notes that the drive's future was woken, and passes the wake on to the runtime's waker.
#[derive(Default)]
struct WakeNote {
    woken: AtomicBool,
    outer: Mutex<Option<Waker>>,
}

impl Wake for WakeNote {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        let outer = self.outer.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(waker) = outer.as_ref() {
            waker.wake_by_ref();
        }
    }
}

impl Quiescence {
    fn new() -> Quiescence {
        let wakes = Arc::new(WakeNote::default());
        Quiescence {
            waker: Waker::from(Arc::clone(&wakes)),
            wakes,
            armed: AtomicBool::new(false),
            reached: AtomicBool::new(false),
        }
    }

    /// The runtime's `on_thread_park` hook.
    fn on_park(&self) {
        if self.armed.load(Ordering::SeqCst) && !self.wakes.woken.load(Ordering::SeqCst) {
            self.reached.store(true, Ordering::SeqCst);
            self.waker.wake_by_ref();
        }
    }

    /// Resolves once the engine is quiescent at the current instant.
    async fn settled(&self) {
        self.reached.store(false, Ordering::SeqCst);
        self.armed.store(true, Ordering::SeqCst);
        std::future::poll_fn(|_| match self.reached.swap(false, Ordering::SeqCst) {
            true => Poll::Ready(()),
            false => Poll::Pending,
        })
        .await;
        self.armed.store(false, Ordering::SeqCst);
    }
}

/// A drive's future, polled with the [`Quiescence`]'s waker.
struct Watched<'a, F> {
    quiescence: &'a Quiescence,
    drive: Pin<Box<F>>,
}

impl<F: Future> Future for Watched<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let wakes = &self.quiescence.wakes;
        {
            let mut outer = wakes.outer.lock().unwrap_or_else(PoisonError::into_inner);
            if !outer.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *outer = Some(cx.waker().clone());
            }
        }
        wakes.woken.store(false, Ordering::SeqCst);
        let waker = self.quiescence.waker.clone();
        self.drive.as_mut().poll(&mut Context::from_waker(&waker))
    }
}

/// What the engine's thread is given.
pub(super) struct Parts {
    pub(super) handlers: Handlers,
    pub(super) settings: SchedulingSettings,
    pub(super) partitions: u32,
    pub(super) store: MemoryStore,
    pub(super) topic: Arc<Topic>,
    pub(super) clock: Arc<ManualClock>,
    pub(super) suspensions: watch::Receiver<Arc<Suspensions>>,
    /// Seeds the engine thread's generator (retry jitter), so runs repeat exactly.
    pub(super) seed: u64,
}

/// The engine's thread could not start, or is gone.
#[derive(Debug, thiserror::Error)]
pub(super) enum EngineError {
    #[error("starting the engine's thread or runtime: {0}")]
    Start(#[source] std::io::Error),
    #[error("the engine's thread stopped (it panicked)")]
    Stopped,
}

/// Drive the engine `by` this long (zero: run what is due now), then until it is quiescent.
struct Drive {
    by: Duration,
    done: oneshot::Sender<()>,
}

/// The engine's thread.
pub(super) struct Engine {
    drives: Option<mpsc::Sender<Drive>>,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    /// Starts the thread, the runtime and the tree (which claims every partition and loads its
    /// schedule), and returns once the engine is quiescent at its start time.
    pub(super) async fn start(parts: Parts) -> Result<Engine, EngineError> {
        let (ready, started) = oneshot::channel();
        let (drives, received) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("scheduler-test-engine".into())
            .spawn(move || run(parts, &received, ready))
            .map_err(EngineError::Start)?;
        let engine = Engine {
            drives: Some(drives),
            thread: Some(thread),
        };
        match started.await {
            Ok(Ok(())) => Ok(engine),
            Ok(Err(e)) => Err(EngineError::Start(e)),
            Err(_) => Err(EngineError::Stopped),
        }
    }

    /// Moves the engine's time on `by`, running what falls due on the way at its time, then
    /// runs it until it is quiescent.
    pub(super) async fn drive(&self, by: Duration) -> Result<(), EngineError> {
        let (done, finished) = oneshot::channel();
        let drives = self.drives.as_ref().ok_or(EngineError::Stopped)?;
        drives
            .send(Drive { by, done })
            .map_err(|_| EngineError::Stopped)?;
        finished.await.map_err(|_| EngineError::Stopped)
    }
}

impl Drop for Engine {
    /// Ends the thread: its runtime drops the tree and whatever still waits in it.
    fn drop(&mut self) {
        drop(self.drives.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The engine's thread: builds the runtime and the tree, then drives it on request until the
/// kit is dropped.
fn run(parts: Parts, drives: &mpsc::Receiver<Drive>, ready: oneshot::Sender<std::io::Result<()>>) {
    let quiescence = Arc::new(Quiescence::new());
    let hook = Arc::clone(&quiescence);
    let built = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .on_thread_park(move || hook.on_park())
        .build();
    let runtime = match built {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // Retry jitter draws from this thread's generator.
    fastrand::seed(parts.seed);
    // The actors are actix actors: local tasks of this set.
    let local = LocalSet::new();
    let clock = Arc::clone(&parts.clock);
    let drive = |work: Pin<Box<dyn Future<Output = ()> + '_>>| {
        runtime.block_on(Watched {
            quiescence: &quiescence,
            drive: Box::pin(local.run_until(async {
                work.await;
                quiescence.settled().await;
                clock.park();
            })),
        });
    };
    let handle = runtime.handle().clone();
    drive(Box::pin(start_tree(parts, handle)));
    if ready.send(Ok(())).is_err() {
        return;
    }
    while let Ok(Drive { by, done }) = drives.recv() {
        drive(Box::pin(async move {
            if !by.is_zero() {
                tokio::time::sleep(by).await;
            }
        }));
        let _ = done.send(());
    }
}

/// Starts the tree on every partition, and the consumer that feeds it the topic.
async fn start_tree(parts: Parts, runtime: tokio::runtime::Handle) {
    let Parts {
        handlers,
        settings,
        partitions,
        store,
        topic,
        clock,
        suspensions,
        ..
    } = parts;
    clock.start_here();
    let clock: Arc<dyn Clock> = clock;
    let store = Arc::new(store);
    let enqueuer: Arc<dyn Enqueuer> = Arc::new(TopicEnqueuer(Arc::clone(&topic)));
    let metrics = Arc::new(Metrics::new());
    // As a node wires a queue: its handlers, and the ticks of its recurring schedules.
    let ticker = Ticker {
        schedules: store.clone(),
        statuses: store.clone(),
        enqueuer: Arc::clone(&enqueuer),
        clock: Arc::clone(&clock),
        partitions,
        metrics: Arc::clone(&metrics),
    };
    let (batch, max_record_bytes) = (settings.fetch_batch_size, settings.max_task_data_bytes);
    let deps = PartitionDeps::builder(
        "test-engine",
        store,
        handlers.handler(TICK_TYPE, ticker),
        settings,
        clock,
        enqueuer,
        partitions,
    )
    .runtime(runtime)
    .metrics(metrics)
    .suspensions(suspensions)
    .build();
    let supervisor = TopicSupervisor::new(deps).start();
    let all: Vec<PartitionId> = (0..).take(partitions as usize).collect();
    if supervisor.send(AssignPartitions(all)).await.is_err() {
        warn!("the test engine's tree did not take its partitions");
    }
    tokio::task::spawn_local(consume(topic, supervisor, batch, max_record_bytes));
}

/// The consumer: hands each poll of the topic to the tree and commits what became durable; a
/// partition whose batch was not is offered again after a pause (as the node's poll loop does).
async fn consume(
    topic: Arc<Topic>,
    supervisor: Addr<TopicSupervisor>,
    batch: usize,
    max_record_bytes: usize,
) {
    loop {
        let polled = topic.poll(batch, max_record_bytes);
        if polled.is_empty() {
            topic.appended().await;
            continue;
        }
        let mut ends = Vec::with_capacity(polled.len());
        let batch = polled
            .into_iter()
            .map(|(partition, (tasks, end))| {
                ends.push((partition, end));
                (partition, tasks)
            })
            .collect();
        let Ok(processed) = supervisor.send(ProcessTaskBatch(batch)).await else {
            return; // the tree is gone: the engine is stopping
        };
        for (partition, end) in ends {
            if processed.persisted.contains(&partition) {
                topic.commit(partition, end);
            }
        }
        for (partition, reason) in &processed.failed {
            warn!(partition, %reason, "tasks not persisted; they will be polled again");
        }
        if !processed.failed.is_empty() {
            tokio::time::sleep(PERSIST_RETRY_PAUSE).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::TimeDelta;
    use scheduler_client::{Task, TaskData};

    use crate::handler::{TaskContext, TaskError, TaskHandler};
    use crate::settings::SchedulingSettings;
    use crate::store::DeadReason;
    use crate::testing::{Outcome, Run, TestEngine, TestingError};

    /// Fails until the task's data says how many calls to fail is reached; hangs on "hang".
    struct Flaky;

    impl TaskHandler for Flaky {
        async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
            if task.uniqueness_key == "hang" {
                std::future::pending::<()>().await;
            }
            let fail = task.task_data.get("fail").and_then(|f| f.as_u64());
            match fail.is_some_and(|fail| u64::from(ctx.attempt()) <= fail) {
                true => Err(TaskError::retry("flaky")),
                false => Ok(()),
            }
        }
    }

    fn failing(engine: &TestEngine, key: &str, times: u64) -> Task {
        let mut data = TaskData::new();
        data.insert("fail".into(), times.into());
        Task::new("o", engine.now(), key, data)
    }

    fn retries(max_task_retries: u32) -> SchedulingSettings {
        SchedulingSettings {
            backoff_factor: Duration::from_secs(2),
            max_backoff: Duration::from_secs(30),
            max_task_retries,
            execution_timeout: Duration::from_secs(1),
            ..SchedulingSettings::default()
        }
    }

    #[tokio::test]
    async fn time_stands_still_between_drives_and_a_drive_stops_exactly_at_its_time() {
        let engine = TestEngine::new(Flaky).await.expect("engine");
        let start = engine.now();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(engine.now(), start, "no drive, no time");
        let due = start + TimeDelta::milliseconds(1_500);
        engine
            .schedule(Task::new("o", due, "u", TaskData::new()))
            .expect("scheduled");
        assert!(engine
            .advance(Duration::from_millis(1_499))
            .await
            .expect("ran")
            .is_empty());
        assert_eq!(engine.now(), due - TimeDelta::milliseconds(1));
        let runs = engine.advance(Duration::from_millis(1)).await.expect("ran");
        assert_eq!(runs.iter().map(|r| r.at).collect::<Vec<_>>(), [due]);
        assert_eq!(engine.now(), due);
        assert!(engine
            .advance_to(start)
            .await
            .is_err_and(|e| matches!(e, TestingError::BeforeNow { .. })));
    }

    #[tokio::test]
    async fn a_call_cut_off_by_its_timeout_is_reported_with_the_engines_error() {
        let engine = TestEngine::builder()
            .fallback(Flaky)
            .settings(retries(1))
            .start()
            .await
            .expect("engine");
        let task = failing(&engine, "hang", 0);
        engine.schedule(task.clone()).expect("scheduled");
        let outcomes = |runs: Vec<Run>| -> Vec<(u32, Outcome)> {
            runs.into_iter().map(|r| (r.attempt, r.outcome)).collect()
        };
        let timed_out = "timed out after 1s".to_string();
        let first = engine.advance(Duration::from_secs(1)).await.expect("ran");
        assert_eq!(
            outcomes(first),
            [(
                1,
                Outcome::Retrying {
                    error: timed_out.clone()
                }
            )]
        );
        let last = engine.advance(Duration::from_secs(10)).await.expect("ran");
        let dead = Outcome::DeadLettered {
            reason: DeadReason::RetriesExhausted,
            error: timed_out,
        };
        assert_eq!(outcomes(last), [(2, dead)]);
    }

    #[tokio::test]
    async fn the_same_seed_runs_the_same_way() {
        let mut runs = Vec::new();
        for seed in [7, 7, 8] {
            let engine = TestEngine::builder()
                .fallback(Flaky)
                .settings(retries(5))
                .seed(seed)
                .start()
                .await
                .expect("engine");
            for key in ["a", "b", "c"] {
                engine
                    .schedule(failing(&engine, key, 4))
                    .expect("scheduled");
            }
            let ran = engine.advance(Duration::from_secs(120)).await.expect("ran");
            assert_eq!(ran.len(), 15, "five attempts each");
            runs.push(
                ran.into_iter()
                    .map(|r| (r.key(), r.attempt, r.at))
                    .collect::<Vec<_>>(),
            );
        }
        assert_eq!(runs[0], runs[1]);
        assert_ne!(runs[0], runs[2], "another seed, other backoffs");
    }

    #[test]
    fn the_engine_runs_the_same_from_any_runtime_or_none() {
        let outside = futures::executor::block_on(async {
            let engine = TestEngine::new(Flaky).await.expect("engine");
            engine
                .schedule(failing(&engine, "u", 1))
                .expect("scheduled");
            let runs = engine.advance(Duration::from_secs(60)).await.expect("ran");
            runs.into_iter()
                .map(|r| (r.attempt, r.at - engine.now()))
                .collect::<Vec<_>>()
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("runtime");
        let inside = runtime.block_on(async {
            let engine = TestEngine::new(Flaky).await.expect("engine");
            engine
                .schedule(failing(&engine, "u", 1))
                .expect("scheduled");
            let runs = engine.advance(Duration::from_secs(60)).await.expect("ran");
            runs.into_iter()
                .map(|r| (r.attempt, r.at - engine.now()))
                .collect::<Vec<_>>()
        });
        assert_eq!(outside.len(), 2);
        assert_eq!(outside, inside);
    }

    #[tokio::test]
    async fn what_a_node_would_refuse_the_kit_refuses() {
        let no_handler = TestEngine::builder().start().await;
        assert!(matches!(no_handler, Err(TestingError::NoHandlers)));
        let bad = SchedulingSettings {
            max_backoff: Duration::from_secs(1),
            backoff_factor: Duration::from_secs(2),
            ..SchedulingSettings::default()
        };
        let refused = TestEngine::builder()
            .fallback(Flaky)
            .settings(bad)
            .start()
            .await;
        assert!(matches!(refused, Err(TestingError::Settings(_))));
        let none = TestEngine::builder()
            .fallback(Flaky)
            .partitions(0)
            .start()
            .await;
        assert!(matches!(none, Err(TestingError::NoPartitions)));
    }
}
