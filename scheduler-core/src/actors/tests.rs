//! Unit tests of the actor tree: a real actix system on a paused tokio runtime (time moves only
//! when every task waits, so timings are exact and the tests take milliseconds), the in-memory
//! store, and an executor that records every call.

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
use crate::executor::{CallPool, TaskContext, TaskError, TaskExecutor};
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
    running: Mutex<HashMap<String, usize>>,
    overlaps: AtomicUsize,
    completed: AtomicUsize,
    peak_in_flight: AtomicUsize,
    /// The partition's next offset: the harness enqueues like the consumer, offsets rising.
    next_offset: AtomicI64,
}

impl Recorder {
    fn calls(&self) -> Vec<(TaskKey, DateTime<Utc>)> {
        self.calls.lock().expect("lock").clone()
    }

    fn call_times(&self, ordering_id: &str) -> Vec<DateTime<Utc>> {
        self.calls()
            .into_iter()
            .filter(|(k, _)| k.ordering_id == ordering_id)
            .map(|(_, at)| at)
            .collect()
    }
}

impl TaskExecutor for Arc<Recorder> {
    async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
        let previous_calls = {
            let mut calls = self.calls.lock().expect("lock");
            calls.push((task.key(), self.clock.now()));
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
        tokio::time::sleep(self.work).await;
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
            Behaviour::GiveUp => Err(TaskError::give_up("invalid payload")),
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
}

impl Harness {
    /// A node's actors with one executor; call inside [`run_paused`].
    fn new(
        settings: SchedulingSettings,
        work: Duration,
        behaviours: &[(&str, Behaviour)],
    ) -> Harness {
        let clock = TokioClock::starting_at(t0());
        let store = MemoryStore::new();
        let recorder = Arc::new(Recorder {
            clock: clock.clone(),
            store: store.clone(),
            work,
            behaviours: behaviours
                .iter()
                .map(|(o, b)| (o.to_string(), *b))
                .collect(),
            calls: Mutex::default(),
            running: Mutex::default(),
            overlaps: AtomicUsize::new(0),
            completed: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
            next_offset: AtomicI64::new(0),
        });
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
        let pool = CallPool::new(
            Arc::clone(&recorder),
            tokio::runtime::Handle::current(),
            settings.executor_concurrency,
            settings.execution_timeout,
        );
        let deps = PartitionDeps {
            node_id: Arc::from(node_id),
            store: Arc::new(store.clone()),
            leases: Arc::new(store.clone()),
            clock: Arc::new(recorder.clock.clone()),
            pool,
            settings: Arc::new(settings),
            in_flight: InFlightGauges::default(),
            metrics: Arc::new(crate::metrics::Metrics::new()),
            events: None,
        };
        let in_flight = deps.in_flight.clone();
        let metrics = Arc::clone(&deps.metrics);
        let topic = TopicSupervisor::new(deps).start();
        Harness {
            store,
            recorder,
            topic,
            in_flight,
            metrics,
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
            cancels: vec![],
        })
        .await;
    }

    fn enqueued(&self, task: Task) -> Task {
        task.enqueued_at(self.recorder.next_offset.fetch_add(1, Ordering::SeqCst))
    }

    async fn cancel(&self, cancels: Vec<TaskKey>) {
        self.process(PolledTasks {
            tasks: vec![],
            cancels,
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

#[test]
fn due_tasks_run_at_once_and_future_tasks_at_their_exact_time() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        h.enqueue(vec![
            task("b", t0() + ms(10_000), "1"),
            task("a", t0(), "1"),
            task("c", t0() + ms(10_500), "1"),
        ])
        .await;
        advance(Duration::from_secs(30)).await;
        let calls = h.recorder.calls();
        let got: Vec<(&str, i64)> = calls
            .iter()
            .map(|(k, at)| (k.ordering_id.as_str(), (*at - t0()).num_milliseconds()))
            .collect();
        assert_eq!(got, [("a", 0), ("b", 10_000), ("c", 10_500)]);
        for (key, _) in &calls {
            let status = h.store.status_of(P, key).expect("status recorded");
            assert_eq!((status.status, status.attempts), (TaskStatus::Completed, 1));
        }
        assert!(
            h.store.scheduled(P).is_empty(),
            "completed tasks leave the schedule"
        );
    });
}

#[test]
fn a_task_beyond_the_look_ahead_is_loaded_in_time_and_runs_on_time() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_look_ahead: Duration::from_secs(15),
            prefetch_window: Duration::from_secs(5),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::ZERO, &[]);
        h.assign().await;
        h.enqueue(vec![task("far", t0() + ms(20_000), "1")]).await;
        advance(Duration::from_secs(1)).await;
        assert_eq!(
            h.store.loaded_rows(),
            0,
            "20 s ahead is past the 15 s look-ahead: not loaded yet"
        );
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.call_times("far"), [t0() + ms(20_000)]);
    });
}

#[test]
fn tasks_enqueued_before_assignment_load_and_overdue_ones_run_at_once() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        // Persisted while no node owned the partition: one overdue by an hour, one in 3 s.
        h.store
            .persist(
                P,
                vec![
                    task("late", t0() - ms(3_600_000), "1"),
                    task("soon", t0() + ms(3_000), "1"),
                ],
            )
            .await
            .expect("persist");
        h.assign().await;
        advance(Duration::from_secs(10)).await;
        assert_eq!(h.recorder.call_times("late"), [t0()]);
        assert_eq!(h.recorder.call_times("soon"), [t0() + ms(3_000)]);
    });
}

#[test]
fn one_ordering_id_runs_its_tasks_in_schedule_order_one_at_a_time() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_millis(7), &[]);
        h.assign().await;
        let tasks: Vec<Task> = (0..200)
            .map(|i| task("serial", t0() + ms(i), &format!("{i:03}")))
            .collect();
        let expected: Vec<TaskKey> = tasks.iter().map(Task::key).collect();
        // Two batches, and other ordering ids interleaved, to show order is per ordering id.
        h.enqueue(tasks[..120].to_vec()).await;
        h.enqueue(
            (0..50)
                .map(|i| task(&format!("other-{i}"), t0() + ms(i), "x"))
                .collect(),
        )
        .await;
        h.enqueue(tasks[120..].to_vec()).await;
        advance(Duration::from_secs(10)).await;
        let serial: Vec<TaskKey> = h
            .recorder
            .calls()
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| k.ordering_id == "serial")
            .collect();
        assert_eq!(serial, expected);
        assert_eq!(
            h.recorder.overlaps.load(Ordering::SeqCst),
            0,
            "never two at once for one ordering id"
        );
        assert_eq!(h.recorder.calls().len(), 250);
    });
}

#[test]
fn failures_retry_after_jittered_exponential_backoff_then_complete() {
    run_paused(|| async {
        let h = Harness::new(
            SchedulingSettings::default(),
            Duration::ZERO,
            &[("flaky", Behaviour::FailTimes(3))],
        );
        h.assign().await;
        let flaky = task("flaky", t0(), "1");
        h.enqueue(vec![flaky.clone()]).await;
        advance(Duration::from_secs(600)).await;
        let times = h.recorder.call_times("flaky");
        assert_eq!(times.len(), 4);
        // Factor 20 s: retry n waits between half and all of 20 s * 2^(n-1).
        for (n, pair) in times.windows(2).enumerate() {
            let gap = (pair[1] - pair[0]).num_milliseconds();
            let period = 20_000 << n;
            assert!(
                (period / 2..=period).contains(&gap),
                "retry {} after {gap} ms",
                n + 1
            );
        }
        let status = h.store.status_of(P, &flaky.key()).expect("status");
        assert_eq!((status.status, status.attempts), (TaskStatus::Completed, 4));
        let outcomes: Vec<AttemptOutcome> = h
            .store
            .attempts(P, &flaky.key())
            .iter()
            .map(|a| a.outcome)
            .collect();
        assert_eq!(
            outcomes,
            [
                AttemptOutcome::Failed,
                AttemptOutcome::Failed,
                AttemptOutcome::Failed,
                AttemptOutcome::Succeeded
            ]
        );
    });
}

#[test]
fn exhausted_retries_record_failure_and_the_task_never_runs_again() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_task_retries: 2,
            backoff_factor: Duration::from_secs(1),
            max_backoff: Duration::from_secs(2),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::ZERO,
            &[
                ("doomed", Behaviour::FailAlways),
                ("bad", Behaviour::GiveUp),
            ],
        );
        h.assign().await;
        let doomed = task("doomed", t0(), "1");
        let bad = task("bad", t0(), "1");
        h.enqueue(vec![doomed.clone(), bad.clone()]).await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(
            h.recorder.call_times("doomed").len(),
            3,
            "first attempt plus 2 retries"
        );
        let failed = h.store.status_of(P, &doomed.key()).expect("status");
        assert_eq!((failed.status, failed.attempts), (TaskStatus::Failed, 3));
        assert_eq!(failed.last_error.as_deref(), Some("flaky"));
        assert_eq!(
            h.recorder.call_times("bad").len(),
            1,
            "a give-up is not retried"
        );
        assert_eq!(
            h.store.status_of(P, &bad.key()).map(|s| s.status),
            Some(TaskStatus::Dropped)
        );

        // Scheduling them again (same keys) does not run them again.
        h.enqueue(vec![doomed, bad]).await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(h.recorder.call_times("doomed").len(), 3);
        assert_eq!(h.recorder.call_times("bad").len(), 1);
    });
}

#[test]
fn the_same_task_scheduled_twice_runs_once() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let twice = task("dup", t0() + ms(2_000), "1");
        h.enqueue(vec![twice.clone()]).await;
        h.enqueue(vec![twice.clone()]).await;
        advance(Duration::from_secs(5)).await;
        h.enqueue(vec![twice]).await;
        advance(Duration::from_secs(5)).await;
        assert_eq!(h.recorder.call_times("dup"), [t0() + ms(2_000)]);
    });
}

#[test]
fn a_task_scheduled_slightly_in_the_past_after_others_ran_still_runs() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        h.enqueue(vec![task("o", t0() + ms(1_000), "first")]).await;
        advance(Duration::from_secs(5)).await;
        // Now t0 + 5 s; a task 3 s in the past (within a grace window) for the same ordering id.
        h.enqueue(vec![task("o", t0() + ms(2_000), "late")]).await;
        advance(Duration::from_secs(1)).await;
        assert_eq!(
            h.recorder.call_times("o"),
            [t0() + ms(1_000), t0() + ms(5_000)]
        );
    });
}

#[test]
fn a_large_backlog_drains_with_in_flight_tasks_bounded() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_in_flight_tasks: 50,
            // Larger than the reload gap (a quarter of 50), so loads must be sized by capacity.
            fetch_batch_size: 40,
            executor_concurrency: 8,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(1), &[]);
        let backlog: Vec<Task> = (0..2_000)
            .map(|i| {
                task(
                    &format!("o{}", i % 97),
                    t0() - ms(3_000_000) + ms(i),
                    &i.to_string(),
                )
            })
            .collect();
        h.store.persist(P, backlog).await.expect("persist");
        h.assign().await;
        advance(Duration::from_secs(120)).await;
        assert_eq!(
            h.recorder.calls().len(),
            2_000,
            "every task of the backlog ran"
        );
        let peak = h.recorder.peak_in_flight.load(Ordering::SeqCst);
        assert!(
            peak <= 50,
            "at most max_in_flight_tasks loaded and unfinished, saw {peak}"
        );
        assert!(peak >= 20, "loading keeps the pipeline busy, saw {peak}");
        let gauge_peak = h.in_flight.get(P).map(|g| g.peak()).unwrap_or_default();
        assert!(gauge_peak <= 50, "in-flight gauge peaked at {gauge_peak}");
        assert!(h.store.scheduled(P).is_empty());
    });
}

#[test]
fn a_flood_of_due_tasks_while_running_stays_within_the_in_flight_bound() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_in_flight_tasks: 50,
            fetch_batch_size: 40,
            executor_concurrency: 8,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(1), &[]);
        h.assign().await;
        // Caught up: the read cursor is at the look-ahead horizon, so new due tasks are pushed.
        advance(Duration::from_secs(1)).await;
        for batch in 0..4 {
            let tasks: Vec<Task> = (0..500)
                .map(|i| {
                    let n = batch * 500 + i;
                    task(&format!("o{}", n % 97), t0() + ms(1_000), &n.to_string())
                })
                .collect();
            h.enqueue(tasks).await;
        }
        advance(Duration::from_secs(120)).await;
        let calls = h.recorder.calls();
        let distinct: std::collections::HashSet<&TaskKey> = calls.iter().map(|(k, _)| k).collect();
        assert_eq!(
            (calls.len(), distinct.len()),
            (2_000, 2_000),
            "every task ran, once"
        );
        let peak = h.in_flight.get(P).map(|g| g.peak()).unwrap_or_default();
        assert!(
            peak <= 50,
            "tasks in memory stayed within max_in_flight_tasks, saw {peak}"
        );
        assert!(h.store.scheduled(P).is_empty());
    });
}

#[test]
fn repeated_load_failures_rebuild_the_partition_and_nothing_is_lost() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.store
            .persist(P, vec![task("survivor", t0() + ms(1_000), "1")])
            .await
            .expect("persist");
        h.store.fail_next(5);
        h.assign().await;
        advance(Duration::from_secs(60)).await;
        let times = h.recorder.call_times("survivor");
        assert_eq!(times.len(), 1);
        // 5 failed loads (retries after 0.5, 1, 2, 4 s), a 1 s rebuild delay, then the task runs.
        assert!(
            times[0] > t0() + ms(8_000),
            "ran after the rebuild at {}",
            times[0]
        );
    });
}

#[test]
fn revoke_lets_running_tasks_finish_and_abandons_pending_retries() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            drain_timeout: Duration::from_secs(10),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::from_secs(3),
            &[("retrying", Behaviour::FailAlways)],
        );
        h.assign().await;
        let long = task("long", t0() + ms(1_000), "1");
        let retrying = task("retrying", t0(), "1");
        let later = task("later", t0() + ms(60_000), "1");
        h.enqueue(vec![long.clone(), retrying.clone(), later.clone()])
            .await;
        advance(Duration::from_secs(2)).await;
        // "long" is mid-run; "retrying" failed once and waits for its retry.
        let before = tokio::time::Instant::now();
        let drained = h.topic.send(RevokePartitions).await.expect("revoke");
        let drained_in = before.elapsed();
        assert!(
            drained,
            "the running task finished within the drain timeout"
        );
        assert!(
            drained_in >= Duration::from_secs(1) && drained_in < Duration::from_secs(3),
            "{drained_in:?}"
        );
        assert_eq!(
            h.store.status_of(P, &long.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
        assert_eq!(
            h.store.status_of(P, &retrying.key()),
            None,
            "left for the next owner"
        );
        advance(Duration::from_secs(120)).await;
        assert!(
            h.recorder.call_times("later").is_empty(),
            "nothing runs after revoke"
        );
        assert_eq!(h.recorder.call_times("retrying").len(), 1);
        let left: Vec<TaskKey> = h.store.scheduled(P);
        assert_eq!(
            left,
            vec![retrying.key(), later.key()],
            "unfinished tasks stay in the schedule"
        );
    });
}

#[test]
fn revoke_reports_a_drain_that_timed_out() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            drain_timeout: Duration::from_secs(1),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(5), &[]);
        h.assign().await;
        h.enqueue(vec![task("slow", t0(), "1")]).await;
        advance(Duration::from_millis(100)).await;
        let before = tokio::time::Instant::now();
        let drained = h.topic.send(RevokePartitions).await.expect("revoke");
        assert!(!drained, "the task outlives the drain timeout");
        assert!(
            before.elapsed() < Duration::from_secs(2),
            "{:?}",
            before.elapsed()
        );
    });
}

#[test]
fn a_cancelled_task_never_runs_and_a_finished_one_keeps_its_status() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let cancelled = task("c", t0() + ms(10_000), "1");
        let finished = task("f", t0() + ms(1_000), "1");
        h.enqueue(vec![cancelled.clone(), finished.clone()]).await;
        advance(Duration::from_secs(2)).await;
        // The first is held in memory, waiting for its time; the second already ran.
        h.cancel(vec![cancelled.key(), finished.key()]).await;
        advance(Duration::from_secs(30)).await;
        assert!(
            h.recorder.call_times("c").is_empty(),
            "a cancelled task never runs"
        );
        assert_eq!(
            h.store.status_of(P, &cancelled.key()).map(|s| s.status),
            Some(TaskStatus::Cancelled)
        );
        assert_eq!(
            h.store.status_of(P, &finished.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
        assert!(h.store.scheduled(P).is_empty());
        assert_eq!(
            h.in_flight.get(P).map(|g| g.current()),
            Some(0),
            "dropped from memory"
        );

        // Cancelling is final: scheduling the same key again does not run it.
        h.enqueue(vec![cancelled.clone()]).await;
        advance(Duration::from_secs(30)).await;
        assert!(h.recorder.call_times("c").is_empty());
    });
}

#[test]
fn a_task_cancelled_in_its_own_batch_does_not_run() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        advance(Duration::from_secs(1)).await;
        let due_now = task("now", t0() + ms(1_000), "1");
        h.process(PolledTasks {
            tasks: vec![due_now.clone()],
            cancels: vec![due_now.key()],
        })
        .await;
        advance(Duration::from_secs(10)).await;
        assert!(h.recorder.call_times("now").is_empty());
        assert_eq!(
            h.store.status_of(P, &due_now.key()).map(|s| s.status),
            Some(TaskStatus::Cancelled)
        );
    });
}

#[test]
fn overdue_incomplete_tasks_show_in_the_stale_gauge() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            stale_after: Duration::from_secs(10),
            backoff_factor: Duration::from_secs(3600),
            max_backoff: Duration::from_secs(3600),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::ZERO,
            &[("stuck", Behaviour::FailAlways)],
        );
        h.assign().await;
        h.enqueue(vec![task("stuck", t0(), "1"), task("fine", t0(), "1")])
            .await;
        advance(Duration::from_secs(45)).await;
        let text = h.metrics.encode(&h.in_flight);
        assert!(
            text.contains("scheduler_stale_tasks{partition=\"0\"} 1"),
            "one task is 45 s overdue (stale after 10 s) and still incomplete:\n{text}"
        );
    });
}

#[test]
fn a_fenced_tree_starts_nothing_more_and_is_not_rebuilt() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let before = task("before", t0() + ms(1_000), "1");
        let after = task("after", t0() + ms(10_000), "1");
        h.enqueue(vec![before.clone(), after.clone()]).await;
        advance(Duration::from_secs(2)).await;
        assert_eq!(h.recorder.call_times("before").len(), 1);
        // Another node claims the partition (this one was paused and lost it without noticing).
        h.store.claim_elsewhere(P);
        advance(Duration::from_secs(30)).await;
        assert!(
            h.recorder.call_times("after").is_empty(),
            "a fenced tree starts nothing"
        );
        assert_eq!(h.store.status_of(P, &after.key()), None);
        assert_eq!(
            h.store.scheduled(P),
            vec![after.key()],
            "the task stays in the schedule for the new owner"
        );
        let text = h.metrics.encode(&h.in_flight);
        let rejections: f64 = text
            .lines()
            .filter_map(|l| l.strip_prefix("scheduler_fencing_rejections_total{partition=\"0\"} "))
            .filter_map(|v| v.parse::<f64>().ok())
            .sum();
        assert!(rejections >= 1.0, "{text}");
        let owned = h.topic.send(OwnedPartitions).await.expect("owned");
        assert!(
            owned.is_empty(),
            "a fenced partition is dropped, not rebuilt"
        );
    });
}

#[test]
fn a_task_running_when_its_tree_is_fenced_does_not_record_its_outcome() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(5), &[]);
        h.assign().await;
        let running = task("running", t0(), "1");
        h.enqueue(vec![running.clone()]).await;
        advance(Duration::from_millis(100)).await;
        h.store.claim_elsewhere(P);
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.call_times("running").len(), 1, "it ran once");
        assert_eq!(
            h.store.status_of(P, &running.key()),
            None,
            "a fenced tree records no outcome"
        );
        assert_eq!(h.store.scheduled(P), vec![running.key()]);
    });
}

#[test]
fn a_batch_polled_while_a_fenced_tree_drains_is_refused_for_the_next_owner() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(5), &[]);
        h.assign().await;
        h.enqueue(vec![
            task("running", t0(), "1"),
            task("other", t0() + ms(1_000), "1"),
        ])
        .await;
        advance(Duration::from_millis(100)).await;
        h.store.claim_elsewhere(P);
        // "other" meets the fence at 1 s; the tree drains while "running" runs until 5 s.
        advance(Duration::from_millis(1_500)).await;
        let late = task("late", t0() + ms(60_000), "1");
        let reply = h
            .offer(PolledTasks {
                tasks: vec![h.enqueued(late.clone())],
                cancels: vec![],
            })
            .await;
        assert!(reply.persisted.is_empty(), "{reply:?}");
        assert_eq!(reply.failed.len(), 1, "{reply:?}");
        assert!(
            !h.store.scheduled(P).contains(&late.key()),
            "nothing written by a fenced tree"
        );
    });
}

#[test]
fn a_tree_claims_its_partition_when_it_starts_so_a_rebuild_fences_the_old_one() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        advance(Duration::from_millis(10)).await;
        assert_eq!(h.store.partition_epoch(P).await.expect("epoch"), 1);
        h.topic.send(RevokePartitions).await.expect("revoke");
        h.assign().await;
        advance(Duration::from_millis(10)).await;
        assert_eq!(h.store.partition_epoch(P).await.expect("epoch"), 2);
        h.enqueue(vec![task("a", t0() + ms(5_000), "1")]).await;
        advance(Duration::from_secs(10)).await;
        assert_eq!(h.recorder.call_times("a").len(), 1, "the newest tree runs");
    });
}

#[test]
fn a_panicking_or_hanging_executor_is_a_failed_attempt_that_is_retried() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            execution_timeout: Duration::from_secs(5),
            backoff_factor: Duration::from_secs(1),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::ZERO,
            &[
                ("panics", Behaviour::PanicOnce),
                ("hangs", Behaviour::HangOnce),
            ],
        );
        h.assign().await;
        let panics = task("panics", t0(), "1");
        let hangs = task("hangs", t0(), "1");
        h.enqueue(vec![panics.clone(), hangs.clone()]).await;
        advance(Duration::from_secs(60)).await;
        for (t, error) in [
            (&panics, "the executor panicked"),
            (&hangs, "timed out after 5s"),
        ] {
            let status = h.store.status_of(P, &t.key()).expect("finished");
            assert_eq!((status.status, status.attempts), (TaskStatus::Completed, 2));
            let first = &h.store.attempts(P, &t.key())[0];
            assert_eq!(first.outcome, AttemptOutcome::Failed);
            let recorded = first.error.as_deref().unwrap_or_default();
            assert!(recorded.starts_with(error), "{recorded}");
        }
        let hang_calls = h.recorder.call_times("hangs");
        assert!(
            hang_calls[1] >= t0() + ms(5_500),
            "retried after the timeout and a backoff: {hang_calls:?}"
        );
    });
}

#[test]
fn a_rebuilt_tree_checks_the_epoch_it_inherits_instead_of_claiming_again() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        // Five failed loads make the tree escalate and be rebuilt about 8.5 s after it starts.
        h.store.fail_next(5);
        h.assign().await;
        advance(Duration::from_secs(1)).await;
        assert_eq!(h.store.partition_epoch(P).await.expect("epoch"), 1);
        // Meanwhile the node loses the partition without noticing.
        h.store.claim_elsewhere(P);
        advance(Duration::from_secs(30)).await;
        assert_eq!(
            h.store.partition_epoch(P).await.expect("epoch"),
            2,
            "the rebuild did not take the partition back"
        );
        let owned = h.topic.send(OwnedPartitions).await.expect("owned");
        assert!(owned.is_empty(), "the rebuilt tree found itself fenced");
    });
}

// ---- One run at a time per orderingId in every interleaving (issue 10) ----

fn overlaps(h: &Harness) -> usize {
    h.recorder.overlaps.load(Ordering::SeqCst)
}

#[test]
fn a_long_task_never_runs_twice_at_once_when_its_partition_comes_back_to_the_same_node() {
    run_paused(|| async {
        // Engine defaults: the drain gives up after 10 s; the task takes 20 s.
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(20), &[]);
        h.assign().await;
        let long = task("long", t0(), "1");
        h.enqueue(vec![long.clone()]).await;
        advance(Duration::from_secs(1)).await;
        let drained = h.topic.send(RevokePartitions).await.expect("revoke");
        assert!(!drained, "the call outlives the drain");
        h.assign().await;
        advance(Duration::from_secs(120)).await;
        assert_eq!(overlaps(&h), 0, "calls: {:?}", h.recorder.calls());
        assert_eq!(
            h.store.status_of(P, &long.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
    });
}

#[test]
fn a_long_task_never_runs_twice_at_once_when_another_node_takes_its_partition() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(20), &[]);
        let other = h.second_node(SchedulingSettings::default());
        h.assign().await;
        let long = task("long", t0(), "1");
        let next = task("long", t0() + ms(1), "2");
        let free = task("free", t0() + ms(12_000), "1");
        h.enqueue(vec![long.clone(), next.clone(), free.clone()])
            .await;
        advance(Duration::from_secs(1)).await;
        assert!(!h.topic.send(RevokePartitions).await.expect("revoke"));
        other.assign().await;
        advance(Duration::from_secs(120)).await;
        assert_eq!(overlaps(&h), 0, "calls: {:?}", h.recorder.calls());
        let calls = h.recorder.calls();
        let first_call_of = |key: &TaskKey| calls.iter().find(|(k, _)| k == key).map(|(_, at)| *at);
        assert_eq!(
            first_call_of(&free.key()),
            Some(t0() + ms(12_000)),
            "other orderingIds are not held up"
        );
        for t in [&long, &next] {
            assert_eq!(
                h.store.status_of(P, &t.key()).map(|s| s.status),
                Some(TaskStatus::Completed)
            );
        }
        let next_at = first_call_of(&next.key()).expect("ran");
        assert!(next_at >= t0() + ms(20_000), "{next_at}");
    });
}

#[test]
fn a_task_waiting_for_an_executor_slot_does_not_run_after_revoke_or_cancel() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            executor_concurrency: 1,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(5), &[]);
        h.assign().await;
        let (a, b, c) = (
            task("a", t0(), "1"),
            task("b", t0(), "1"),
            task("c", t0(), "1"),
        );
        h.enqueue(vec![a.clone(), b.clone(), c.clone()]).await;
        advance(Duration::from_secs(1)).await;
        // "a" runs; "b" and "c" wait for the one slot.
        h.cancel(vec![c.key()]).await;
        h.topic.send(RevokePartitions).await.expect("revoke");
        advance(Duration::from_secs(60)).await;
        assert_eq!(h.recorder.call_times("a").len(), 1);
        assert!(
            h.recorder.call_times("b").is_empty(),
            "revoked while waiting"
        );
        assert!(
            h.recorder.call_times("c").is_empty(),
            "cancelled while waiting"
        );
        assert_eq!(
            h.store.scheduled(P),
            vec![b.key()],
            "left for the next owner"
        );
    });
}

#[test]
fn a_task_waiting_for_an_executor_slot_does_not_run_after_its_tree_is_fenced() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            executor_concurrency: 1,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(5), &[]);
        h.assign().await;
        h.enqueue(vec![task("a", t0(), "1"), task("b", t0(), "1")])
            .await;
        advance(Duration::from_secs(1)).await;
        h.store.claim_elsewhere(P);
        advance(Duration::from_secs(60)).await;
        assert!(
            h.recorder.call_times("b").is_empty(),
            "fenced while waiting"
        );
    });
}

#[test]
fn a_rebuild_after_repeated_failures_does_not_start_a_task_still_running() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_look_ahead: Duration::from_secs(2),
            prefetch_window: Duration::from_secs(1),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(20), &[]);
        h.assign().await;
        let long = task("long", t0(), "1");
        h.enqueue(vec![long.clone()]).await;
        advance(Duration::from_secs(1)).await;
        // Five loads fail while the call runs: the tree escalates and is rebuilt.
        h.store.fail_next(5);
        advance(Duration::from_secs(120)).await;
        assert!(h.store.fail_next_remaining() == 0, "the loads failed");
        assert_eq!(overlaps(&h), 0, "calls: {:?}", h.recorder.calls());
        assert_eq!(
            h.store.status_of(P, &long.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
    });
}

#[test]
fn a_retried_status_write_is_fenced_too() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(1), &[]);
        h.assign().await;
        let t = task("a", t0(), "1");
        h.enqueue(vec![t.clone()]).await;
        advance(Duration::from_millis(600)).await;
        // From now on epoch reads take 10 s (the background read begun at 1 s answers at 11 s),
        // and another node claims the partition at 0.7 s.
        h.store.set_latency("epoch read", Duration::from_secs(10));
        advance(Duration::from_millis(100)).await;
        h.store.claim_elsewhere(P);
        // At 1 s the attempt record and the status write fail; the write is retried at 1.5 s
        // (fails too) and 2.5 s, when no read begun in the last 2 s vouches for the tree.
        h.store.fail_next(3);
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.store.fail_next_remaining(), 0);
        assert_eq!(
            h.store.status_of(P, &t.key()),
            None,
            "a fenced tree records nothing"
        );
    });
}

#[test]
fn a_fenced_tree_records_no_attempt() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(5), &[]);
        h.assign().await;
        let t = task("a", t0(), "1");
        h.enqueue(vec![t.clone()]).await;
        advance(Duration::from_millis(100)).await;
        h.store.claim_elsewhere(P);
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.call_times("a").len(), 1);
        assert!(
            h.store.attempts(P, &t.key()).is_empty(),
            "{:?}",
            h.store.attempts(P, &t.key())
        );
    });
}

#[test]
fn an_ownership_read_begun_before_a_pause_does_not_answer_a_check_made_after_it() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let late = task("late", t0() + ms(6_000), "1");
        h.enqueue(vec![late.clone()]).await;
        advance(Duration::from_millis(500)).await;
        // From now on an epoch read takes 10 s (as if the node paused in the middle of it): the
        // background read begun at 1 s answers at 11 s with what was true at 1 s.
        h.store.set_latency("epoch read", Duration::from_secs(10));
        advance(Duration::from_secs(1)).await;
        h.store.claim_elsewhere(P);
        advance(Duration::from_secs(60)).await;
        assert!(
            h.recorder.call_times("late").is_empty(),
            "a check made at 6 s is not answered by a read begun at 1 s"
        );
    });
}

#[test]
fn counters_are_kept_across_revokes_for_the_life_of_the_node() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        let completed = |h: &Harness| -> f64 {
            h.metrics
                .encode(&h.in_flight)
                .lines()
                .filter_map(|l| {
                    l.strip_prefix(
                        "scheduler_executions_total{partition=\"0\",outcome=\"completed\"} ",
                    )
                })
                .filter_map(|v| v.parse::<f64>().ok())
                .sum()
        };
        for round in 1..=2 {
            h.assign().await;
            h.enqueue(vec![task("a", t0(), &round.to_string())]).await;
            advance(Duration::from_secs(1)).await;
            h.topic.send(RevokePartitions).await.expect("revoke");
            assert_eq!(completed(&h), f64::from(round));
        }
    });
}

#[test]
fn one_stuck_ordering_id_does_not_hold_up_the_others() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_in_flight_tasks: 10,
            backoff_factor: Duration::from_secs(1),
            max_backoff: Duration::from_secs(2),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::ZERO,
            &[("stuck", Behaviour::FailAlways)],
        );
        h.assign().await;
        let stuck: Vec<Task> = (0..20)
            .map(|i| task("stuck", t0(), &format!("{i:02}")))
            .collect();
        h.enqueue(stuck).await;
        advance(Duration::from_secs(1)).await;
        let other = task("other", t0() + ms(2_000), "1");
        h.enqueue(vec![other.clone()]).await;
        advance(Duration::from_secs(5)).await;
        assert_eq!(
            h.recorder.call_times("other"),
            [t0() + ms(2_000)],
            "another orderingId of the partition runs on time"
        );
        let held = h.in_flight.get(P).map(|g| g.current()).unwrap_or_default();
        assert!(held <= 10, "{held} tasks in memory");
    });
}

#[test]
fn a_deep_ordering_id_runs_every_task_in_order_through_its_bounded_queue() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_in_flight_tasks: 40,
            max_queued_per_ordering: 4,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(5), &[]);
        h.assign().await;
        let deep: Vec<Task> = (0..300)
            .map(|i| task("deep", t0() + ms(i / 10), &format!("{i:03}")))
            .collect();
        let expected: Vec<TaskKey> = deep.iter().map(Task::key).collect();
        for chunk in deep.chunks(50) {
            h.enqueue(chunk.to_vec()).await;
            advance(Duration::from_millis(20)).await;
        }
        advance(Duration::from_secs(30)).await;
        let ran: Vec<TaskKey> = h.recorder.calls().into_iter().map(|(k, _)| k).collect();
        assert_eq!(ran, expected, "each once, in order");
        assert_eq!(overlaps(&h), 0);
    });
}

#[test]
fn a_task_cassandra_refuses_is_parked_and_the_partition_goes_on() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let poison = task(&"x".repeat(70_000), t0(), "1");
        let fine = task("fine", t0(), "1");
        // `process` asserts that the batch counts as persisted (its offsets are committed).
        h.enqueue(vec![poison, fine.clone()]).await;
        advance(Duration::from_secs(1)).await;
        assert_eq!(h.recorder.call_times("fine"), [t0()]);
        let text = h.metrics.encode(&h.in_flight);
        assert!(
            text.contains(
                "scheduler_parked_records_total{partition=\"0\",reason=\"refused_by_store\"} 1"
            ),
            "{text}"
        );
    });
}

#[test]
fn a_batch_of_5000_cancels_completes_within_the_persist_timeout() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let tasks: Vec<Task> = (0..5_000)
            .map(|i| task(&format!("o{}", i % 50), t0() + ms(600_000), &i.to_string()))
            .collect();
        h.enqueue(tasks.clone()).await;
        // Each cancellation is a lightweight transaction of a few ms.
        h.store.set_latency("cancel", Duration::from_millis(5));
        h.store
            .set_latency("status write", Duration::from_millis(5));
        h.cancel(tasks.iter().map(Task::key).collect()).await;
        advance(Duration::from_secs(700)).await;
        assert!(h.recorder.calls().is_empty(), "every task was cancelled");
    });
}

#[test]
fn a_far_past_task_does_not_send_loading_back_years() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_in_flight_tasks: 4,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::ZERO, &[]);
        h.assign().await;
        // Memory full of tasks not due yet; then a foreign producer's task due five years ago.
        let future: Vec<Task> = (0..4)
            .map(|i| task(&format!("f{i}"), t0() + ms(60_000), "1"))
            .collect();
        h.enqueue(future).await;
        advance(Duration::from_secs(1)).await;
        let before = h.store.buckets_read();
        let ancient = task("ancient", t0() - TimeDelta::days(5 * 365), "1");
        h.enqueue(vec![ancient]).await;
        advance(Duration::from_secs(120)).await;
        assert_eq!(h.recorder.call_times("ancient").len(), 1, "it runs");
        let walked = h.store.buckets_read() - before;
        assert!(walked < 1_000, "loading walked {walked} hour buckets");
    });
}

#[test]
fn a_node_is_ready_once_it_owns_partitions_and_loaded_each() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        assert!(!h.in_flight.ready(&[]), "owning nothing is not ready");
        h.store.set_latency("schedule load", Duration::from_secs(1));
        h.assign().await;
        advance(Duration::from_millis(500)).await;
        assert!(!h.in_flight.ready(&[P]), "the first load is under way");
        advance(Duration::from_secs(1)).await;
        assert!(h.in_flight.ready(&[P]));
    });
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

#[test]
fn tasks_due_at_one_time_run_in_enqueue_order_when_pushed() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_millis(3), &[]);
        h.assign().await;
        // Due now (run as they come) and due in 2 s (held, then dispatched together).
        let now = tied("now", t0(), 10);
        let soon = tied("soon", t0() + ms(2_000), 10);
        for (a, b) in now.chunks(3).zip(soon.chunks(3)) {
            h.enqueue(a.iter().chain(b).cloned().collect()).await;
        }
        advance(Duration::from_secs(5)).await;
        assert_eq!(
            ran(&h, "now"),
            now.iter().map(Task::key).collect::<Vec<_>>()
        );
        assert_eq!(
            ran(&h, "soon"),
            soon.iter().map(Task::key).collect::<Vec<_>>()
        );
    });
}

#[test]
fn tasks_due_at_one_time_run_in_enqueue_order_when_loaded_in_small_pages() {
    run_paused(|| async {
        // Pages of 4 rows split each group of ties; an orderingId may hold 2 tasks, so most
        // of them are deferred and read back.
        let settings = SchedulingSettings {
            fetch_batch_size: 4,
            max_in_flight_tasks: 8,
            max_queued_per_ordering: 2,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(3), &[]);
        let mut expected = Vec::new();
        let mut all = Vec::new();
        for (i, o) in ["a", "b", "c"].into_iter().enumerate() {
            for step in 0..3 {
                let group = tied(o, t0() + ms(100 * step + i as i64), 7);
                expected.extend(group.iter().filter(|t| t.ordering_id == "b").map(Task::key));
                all.extend(group);
            }
        }
        // Persisted in this order while no node owned the partition, then loaded.
        let all: Vec<Task> = all.into_iter().map(|t| h.enqueued(t)).collect();
        h.store.persist(P, all).await.expect("persist");
        h.assign().await;
        advance(Duration::from_secs(10)).await;
        assert_eq!(ran(&h, "b"), expected);
        for o in ["a", "c"] {
            assert_eq!(ran(&h, o).len(), 21);
        }
    });
}

#[test]
fn tasks_due_at_one_time_beyond_the_in_flight_room_run_in_enqueue_order() {
    run_paused(|| async {
        // A push beyond the room leaves the rest for loading.
        let settings = SchedulingSettings {
            fetch_batch_size: 5,
            max_in_flight_tasks: 6,
            max_queued_per_ordering: 6,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(3), &[]);
        h.assign().await;
        let ties = tied("deep", t0() + ms(1_000), 26);
        h.enqueue(ties.clone()).await;
        advance(Duration::from_secs(10)).await;
        assert_eq!(
            ran(&h, "deep"),
            ties.iter().map(Task::key).collect::<Vec<_>>()
        );
    });
}

#[test]
fn a_task_deferred_while_a_read_back_finds_nothing_is_read_back_once_it_ends() {
    run_paused(|| async {
        // An orderingId may hold 4 tasks. a..f are due at once: e and f wait in the store and
        // are read back whole, so more may follow them. The next read-back (slow) finds
        // nothing; g falls due and is deferred during it, and the orderingId's last tasks
        // finish during it too: nothing is left to start another read but its end.
        let settings = SchedulingSettings {
            max_in_flight_tasks: 16,
            max_queued_per_ordering: 4,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(100), &[]);
        h.assign().await;
        let mut tasks: Vec<Task> = ["a", "b", "c", "d", "e", "f"]
            .into_iter()
            .map(|u| task("o", t0(), u))
            .collect();
        tasks.push(task("o", t0() + ms(1_350), "g"));
        h.enqueue(tasks.clone()).await;
        h.store.set_latency("schedule load", Duration::from_secs(1));
        advance(Duration::from_secs(10)).await;
        assert_eq!(
            ran(&h, "o"),
            tasks.iter().map(Task::key).collect::<Vec<_>>()
        );
    });
}

/// Takes a fenced tree's notice (the tests below drive the ownership actor alone).
struct FenceSink;

impl Actor for FenceSink {
    type Context = actix::Context<Self>;
}

impl actix::Handler<super::partition_ownership::PartitionFenced> for FenceSink {
    type Result = ();

    fn handle(&mut self, _: super::partition_ownership::PartitionFenced, _: &mut Self::Context) {}
}

#[test]
fn an_ownership_read_begun_before_a_lease_entry_was_written_does_not_confirm_its_call_within_one_clock_tick(
) {
    use super::partition_ownership::{CheckOwnership, Ownership, PartitionOwnership};
    use crate::epoch::EpochCell;
    run_paused(|| async {
        let store = MemoryStore::new();
        let cell = EpochCell::default();
        let ownership = PartitionOwnership::new(
            P,
            Arc::from("node-a"),
            Arc::new(store.clone()),
            Arc::new(TokioClock::starting_at(t0())),
            Arc::new(crate::metrics::Metrics::new()),
            FenceSink.start().recipient(),
            cell.clone(),
        )
        .start();
        let claimed = ownership.send(CheckOwnership::default()).await;
        assert!(
            matches!(claimed, Ok(Ok(Ownership::Owner(_)))),
            "{claimed:?}"
        );
        let lease = crate::lease::TreeLease::start(
            P,
            "node-a",
            cell,
            Arc::new(store.clone()),
            Duration::from_secs(3),
        );
        // All at one instant of the clock: the read above began, a newer tree claimed the
        // partition (and read no entry of this tree), then a call wrote its entry.
        store.claim_elsewhere(P);
        let hold = lease.hold("o", "o/task").await.expect("lease entry");
        let answer = ownership
            .send(CheckOwnership {
                read_after: Some(hold.durable_since()),
            })
            .await;
        assert!(
            matches!(answer, Ok(Ok(Ownership::Fenced))),
            "a read begun before the entry was written confirmed the call: {answer:?}"
        );
    });
}
