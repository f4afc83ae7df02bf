//! The bounded pool that calls the user's handlers: on a runtime of its own, at most
//! `executor_concurrency` calls at once (due tasks waiting for a slot take turns by limit key,
//! and are served by priority within a key: `slots.rs`), each cut off after its timeout.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_client::Task;
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

use crate::clock::Clock;
#[cfg(test)]
use crate::handler::TaskHandler;
use crate::handler::{Handlers, TaskContext, TaskError};
use crate::hooks::{CallGate, GatePass};
use crate::outcome::StopReason;
use crate::slots::{FairSlots, SlotPermit};
use crate::store::DeadLetter;

/// Runs the user's handlers on a tokio runtime separate from the actors, at most `concurrency`
/// calls at once (due tasks waiting for a slot take turns by limit key, and are served by
/// priority within a key), each cut off after
/// `timeout` (by the node's clock). A panic or a timeout is a retryable failure.
#[derive(Clone)]
pub struct CallPool {
    runtime: tokio::runtime::Handle,
    permits: Arc<FairSlots>,
    handlers: Arc<Handlers>,
    timeout: Duration,
    /// Types with an execution timeout of their own.
    type_timeouts: Arc<BTreeMap<String, Duration>>,
    /// What a due task passes before it takes a slot (per-key limits).
    gates: Arc<[Arc<dyn CallGate>]>,
    clock: Arc<dyn Clock>,
}

/// What became of a call handed to [`CallPool::call_when_due`].
pub(crate) enum Called<H> {
    /// The handler was called at `started_at`: its result, and `held` back to record the
    /// outcome under (`None` if the call panicked).
    Done {
        result: Result<(), TaskError>,
        held: Option<H>,
        started_at: DateTime<Utc>,
    },
    /// When its time and a slot came, the checks no longer held (`ready` said no): not called.
    NotReady(H),
    /// The tree stopped, or the caller stopped waiting, first: not called.
    Stopped,
}

impl CallPool {
    /// A pool running `handler` for every task type on `runtime`, timing calls out by `clock`.
    #[cfg(test)]
    pub fn new<E: TaskHandler>(
        executor: E,
        runtime: tokio::runtime::Handle,
        concurrency: usize,
        timeout: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self::with_handlers(
            Handlers::new().fallback(executor),
            runtime,
            concurrency,
            timeout,
            clock,
        )
    }

    /// A pool running `handlers`, each for its task type.
    pub fn with_handlers(
        handlers: Handlers,
        runtime: tokio::runtime::Handle,
        concurrency: usize,
        timeout: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        CallPool {
            runtime,
            permits: FairSlots::new(concurrency.max(1)),
            handlers: Arc::new(handlers),
            timeout,
            type_timeouts: Arc::default(),
            gates: Arc::new([]),
            clock,
        }
    }

    /// Keys with waiting tasks share the slots by `weights` (see [`FairSlots`]): before the
    /// pool's first call.
    pub(crate) fn with_weights(mut self, weights: crate::slots::Weights) -> Self {
        self.permits = FairSlots::weighted(self.permits.slots(), Some(weights));
        self
    }

    /// A due task passes `gates`, in order, before it takes a slot (see [`CallGate`]).
    pub fn with_gates(mut self, gates: Vec<Arc<dyn CallGate>>) -> Self {
        self.gates = gates.into();
        self
    }

    /// Calls of the types in `timeouts` are cut off after their own timeout.
    pub fn with_type_timeouts(mut self, timeouts: BTreeMap<String, Duration>) -> Self {
        self.type_timeouts = Arc::new(timeouts);
        self
    }

    /// How long a call of `task_type` may run.
    fn timeout_of(&self, task_type: &str) -> Duration {
        self.type_timeouts
            .get(task_type)
            .copied()
            .unwrap_or(self.timeout)
    }

    /// Whether a handler of this pool runs tasks of `task_type`.
    pub fn handles(&self, task_type: &str) -> bool {
        self.handlers.get(task_type).is_some()
    }

    /// Tells the handler of `letter`'s type that its task became a dead letter, on the pool's
    /// runtime and within the execution timeout; a panic or a timeout is logged, not repeated.
    pub(crate) async fn dead_lettered(&self, letter: DeadLetter) {
        let Some(handler) = self.handlers.get(&letter.task.task_type).cloned() else {
            return;
        };
        let (timeout, clock) = (
            self.timeout_of(&letter.task.task_type),
            Arc::clone(&self.clock),
        );
        let task = letter.task.key().to_string();
        let call = self.runtime.spawn(async move {
            let expired = clock
                .sleep_until(clock.now() + TimeDelta::from_std(timeout).unwrap_or(TimeDelta::MAX));
            tokio::select! {
                () = handler.dead_lettered_boxed(letter) => true,
                () = expired => false,
            }
        });
        match call.await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(%task, ?timeout, "the dead-letter handler timed out"),
            Err(e) => tracing::warn!(%task, error = %e, "the dead-letter handler panicked"),
        }
    }

    /// Calls the handler for `task` at `at` (by the pool's clock) or later, once a slot is
    /// free and if `ready(&held)` still says yes then, inside `span` (so the handler's own
    /// logs carry the task's identity). The waits, the check and the call run on the pool's
    /// runtime, not on the actors' thread: a busy actor thread would make calls late. Before
    /// the call, the tree's `stop` signal or the caller dropping the returned future ends it
    /// uncalled; once called, the call keeps its slot and `held` until it returns, even if the
    /// caller stops waiting.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn call_when_due<H: Send + 'static>(
        &self,
        at: DateTime<Utc>,
        held: H,
        ready: impl FnOnce(&H) -> bool + Send + 'static,
        task: Task,
        ctx: TaskContext,
        span: tracing::Span,
        mut stop: watch::Receiver<Option<StopReason>>,
    ) -> impl Future<Output = Called<H>> + 'static {
        let handlers = Arc::clone(&self.handlers);
        let (timeout, clock, permits, gates) = (
            self.timeout_of(&task.task_type),
            Arc::clone(&self.clock),
            Arc::clone(&self.permits),
            Arc::clone(&self.gates),
        );
        let (answer, answered) = oneshot::channel();
        self.runtime.spawn(async move {
            let mut answer = answer;
            let due_and_slot = async {
                while clock.now() < at {
                    clock.sleep_until(at).await;
                }
                // The gates first, holding no slot while they wait.
                let mut passes = Vec::new();
                for gate in gates.iter() {
                    if let Some(pass) = gate.enter(&task) {
                        passes.push(pass.await);
                    }
                }
                let slot = permits
                    .acquire(task.priority, task.limit_key.as_deref())
                    .await;
                // The time by this node's clock once more, now that the slot is had: at once
                // when it has passed, but a paused process (the simulation's clock, whose
                // waits end only when the process runs) acts on a freed slot only once it
                // runs again, as a real one would.
                clock.sleep_until(at).await;
                Slot(slot, passes)
            };
            let had = tokio::select! {
                biased;
                _ = stop.wait_for(Option::is_some) => None,
                () = answer.closed() => return,
                had = due_and_slot => Some(had),
            };
            let Some(slot) = had.filter(|_| stop.borrow().is_none()) else {
                let _ = answer.send(Called::Stopped);
                return;
            };
            // A pass that lapsed meanwhile (a permit's lease) is checked first: `ready`
            // begins the call.
            if !slot.passes_valid() || !ready(&held) {
                let _ = answer.send(Called::NotReady(held));
                return;
            }
            let done = run(&handlers, timeout, &*clock, slot, held, task, ctx, span).await;
            let _ = answer.send(done);
        });
        answer_of(answered, Arc::clone(&self.clock))
    }
}

/// One of the pool's slots and the task's passes of the pool's gates, held by a call; given
/// back when dropped.
struct Slot(#[allow(dead_code)] SlotPermit, Vec<GatePass>);

impl Slot {
    /// Whether every pass of the gates still lets the call start.
    fn passes_valid(&self) -> bool {
        self.1.iter().all(GatePass::is_valid)
    }

    /// The call starts now: each pass gives back what it holds until then.
    fn started(&mut self) {
        self.1.iter_mut().for_each(GatePass::started);
    }
}

/// The call of the handler of `task`'s type in `slot`, cut off after `timeout`; `held` comes
/// back with the result (the slot is given back as soon as the call returns).
#[allow(clippy::too_many_arguments)]
async fn run<H>(
    handlers: &Handlers,
    timeout: Duration,
    clock: &dyn Clock,
    mut slot: Slot,
    held: H,
    task: Task,
    ctx: TaskContext,
    span: tracing::Span,
) -> Called<H> {
    slot.started();
    let started_at = clock.now();
    // The call's own span, from its start to its return (the task's span, its parent, also
    // covers the wait for its time and slot): ERROR when the call failed.
    let call = tracing::info_span!(
        parent: &span,
        "call",
        otel.name = %format!("execute {}", task.task_type),
        attempt = ctx.attempt(),
        otel.status_code = tracing::field::Empty,
        otel.status_message = tracing::field::Empty,
    );
    let expired =
        clock.sleep_until(started_at + TimeDelta::from_std(timeout).unwrap_or(TimeDelta::MAX));
    let result = match handlers.get(&task.task_type).map(Arc::clone) {
        // (The lifecycle calls only tasks of a type the pool handles.)
        None => Err(TaskError::retry(format!(
            "no handler for task type {:?}",
            task.task_type
        ))),
        Some(handler) => tokio::select! {
            result = handler.execute_boxed(task, ctx).instrument(call.clone()) => result,
            () = expired => Err(TaskError::retry(format!("timed out after {timeout:?}"))),
        },
    };
    if let Err(e) = &result {
        call.record("otel.status_code", "ERROR");
        call.record("otel.status_message", e.reason());
    }
    drop(call);
    drop(slot);
    Called::Done {
        result,
        held: Some(held),
        started_at,
    }
}

/// What a spawned call answered; a call that ended without answering panicked (its slot and
/// `held` were dropped with it).
async fn answer_of<H>(answered: oneshot::Receiver<Called<H>>, clock: Arc<dyn Clock>) -> Called<H> {
    match answered.await {
        Ok(called) => called,
        Err(_) => Called::Done {
            result: Err(TaskError::retry("the executor panicked")),
            held: None,
            started_at: clock.now(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Probe {
        running: AtomicUsize,
        peak: AtomicUsize,
    }

    impl TaskHandler for Arc<Probe> {
        async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            match task.ordering_id.as_str() {
                "panic" => panic!("executor bug"),
                "hang" => std::future::pending().await,
                "invalid" => Err(TaskError::invalid("invalid")),
                _ => Ok(()),
            }
        }
    }

    fn context() -> TaskContext {
        TaskContext::detached(0, 1)
    }

    fn task(ordering_id: &str) -> Task {
        Task::new(ordering_id, Utc::now(), "u", Default::default())
    }

    #[tokio::test(start_paused = true)]
    async fn bounds_concurrency_and_turns_panics_and_hangs_into_retries() {
        let probe = Arc::new(Probe {
            running: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        });
        let pool = CallPool::new(
            Arc::clone(&probe),
            tokio::runtime::Handle::current(),
            3,
            Duration::from_secs(5),
            Arc::new(crate::clock::TokioClock::starting_at(Utc::now())),
        );
        let (_stop, stop) = watch::channel(None);
        let run = |t: Task| {
            let (pool, stop) = (pool.clone(), stop.clone());
            async move {
                let called = pool.call_when_due(
                    t.scheduled_time,
                    (),
                    |_| true,
                    t,
                    context(),
                    tracing::Span::none(),
                    stop,
                );
                match called.await {
                    Called::Done { result, .. } => result,
                    Called::NotReady(()) | Called::Stopped => {
                        panic!("not called")
                    }
                }
            }
        };
        let results = futures::future::join_all((0..10).map(|_| run(task("ok")))).await;
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(probe.peak.load(Ordering::SeqCst), 3);

        assert_eq!(
            run(task("panic")).await,
            Err(TaskError::retry("the executor panicked"))
        );
        assert!(
            matches!(run(task("hang")).await, Err(TaskError::Retry { reason, .. }) if reason.starts_with("timed out"))
        );
        assert_eq!(
            run(task("invalid")).await,
            Err(TaskError::invalid("invalid"))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_waits_for_its_time_and_is_not_made_when_not_ready_or_stopped() {
        let probe = Arc::new(Probe {
            running: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        });
        let clock = crate::clock::TokioClock::starting_at(Utc::now());
        let pool = CallPool::new(
            Arc::clone(&probe),
            tokio::runtime::Handle::current(),
            1,
            Duration::from_secs(5),
            Arc::new(clock.clone()),
        );
        let (stop_tx, stop) = watch::channel(None);
        let at = clock.now() + TimeDelta::seconds(2);
        let called = pool.call_when_due(
            at,
            (),
            |_| true,
            task("ok"),
            context(),
            tracing::Span::none(),
            stop.clone(),
        );
        match called.await {
            Called::Done { started_at, .. } => assert_eq!(started_at, at),
            _ => panic!("not called"),
        }
        let not_ready = pool.call_when_due(
            at,
            7,
            |_| false,
            task("ok"),
            context(),
            tracing::Span::none(),
            stop.clone(),
        );
        assert!(matches!(not_ready.await, Called::NotReady(7)));
        let later = clock.now() + TimeDelta::seconds(2);
        let stopped = pool.call_when_due(
            later,
            (),
            |_| true,
            task("ok"),
            context(),
            tracing::Span::none(),
            stop,
        );
        let _ = stop_tx.send(Some(StopReason::Revoked));
        assert!(matches!(stopped.await, Called::Stopped));
        assert_eq!(probe.peak.load(Ordering::SeqCst), 1, "one call only");
    }
}
