//! PartitionScheduler: holds the loaded tasks of one partition that are not yet due and
//! dispatches each to the PartitionExecutor at its time, tasks due together in run order (time,
//! then enqueue order: [`scheduler_client::Task::run_order`]). One timer is armed for the
//! next due task (not a periodic tick). A task is dispatched `dispatch_lead` before its time:
//! its lifecycle makes its checks meanwhile and calls the handler at the time itself.
//! Every task sent to it is a [`HeldTask`]: it counts in the partition's in-flight gauge until
//! it is dropped (replaced, cancelled, or done with by the executors).
//!
//! It holds at most a limit key's share of the tree's memory (a quarter of
//! `max_in_flight_tasks`) of one key's tasks not due yet. TaskPersistence marks, in what it
//! sends here, the tasks beyond it (and the later tasks of an orderingId whose tasks the
//! executor defers: [`InFlight::to_defer`]); this actor holds the others first, then hands
//! those to the PartitionExecutor to be deferred by their orderingId ([`DeferPartitionTask`]),
//! as a due task beyond its key's share is. So a key whose tasks come due together by the
//! hundred thousand (a tenant's scheduled batch) is passed over, listed by orderingId, as it is
//! persisted or loaded: it neither fills the tree's memory nor holds loading behind it, and
//! another key's later task is loaded, or pushed as it is persisted, and runs at its time. A
//! deferred task is read back once it is nearly due, and not before a task of its orderingId
//! held here, or dispatched and not yet with the executor, that runs before it
//! ([`InFlight::first_pending`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::{Actor, ActorContext, AsyncContext, Context, Handler, Message, Recipient, SpawnHandle};
use chrono::{DateTime, TimeDelta, Utc};
use scheduler_client::{Task, TaskKey};

use super::partition_executor::{DeferPartitionTask, ExecutePartitionTask};
use super::StopActor;
use crate::clock::Clock;
use crate::in_flight::{HeldTask, InFlight, Pin};
use crate::store::PartitionId;

/// Tasks to hold until due (loaded, or pushed after being persisted behind the read cursor).
/// A task whose key is already held replaces it.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ScheduleTasks {
    /// To hold until due.
    pub held: Vec<HeldTask>,
    /// Not due yet, their limit key at its share here (or their orderingId's tasks deferred):
    /// handed to the PartitionExecutor to defer, after `held` are held (see the module's doc),
    /// each pinned until it is.
    pub deferred: Vec<(Task, Pin)>,
}

/// Drop these tasks (cancelled) if they are held.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct UnscheduleTasks(pub Vec<TaskKey>);

/// Holds tasks until they are due and dispatches them in run order.
pub struct PartitionScheduler {
    partition: PartitionId,
    clock: Arc<dyn Clock>,
    executor: Recipient<ExecutePartitionTask>,
    deferrals: Recipient<DeferPartitionTask>,
    in_flight: Arc<InFlight>,
    /// How long before its time a task is dispatched.
    lead: TimeDelta,
    pending: Pending,
    timer: Option<(DateTime<Utc>, SpawnHandle)>,
}

/// The tasks held until due, each told to the tree's gauge ([`InFlight::pending`]).
struct Pending {
    tasks: BTreeMap<TaskKey, HeldTask>,
    in_flight: Arc<InFlight>,
}

impl Pending {
    fn insert(&mut self, task: HeldTask) {
        if let Some(replaced) = self.tasks.remove(&task.key()) {
            self.in_flight.pending(&replaced, false);
        }
        self.in_flight.pending(&task, true);
        self.tasks.insert(task.key(), task);
    }

    fn remove(&mut self, key: &TaskKey) -> Option<HeldTask> {
        let task = self.tasks.remove(key)?;
        self.in_flight.pending(&task, false);
        Some(task)
    }

    /// The first task, if it is due by `horizon`. It counts as held here until the
    /// PartitionExecutor has it ([`ExecutePartitionTask`]): none of its orderingId's deferred
    /// tasks is read back before it meanwhile.
    fn pop_due(&mut self, horizon: DateTime<Utc>) -> Option<HeldTask> {
        let first = self.tasks.first_key_value()?.0;
        if first.scheduled_time > horizon {
            return None;
        }
        self.tasks.pop_first().map(|(_, task)| task)
    }

    fn clear(&mut self) {
        for (_, task) in std::mem::take(&mut self.tasks) {
            self.in_flight.pending(&task, false);
        }
    }
}

impl PartitionScheduler {
    /// A scheduler dispatching to `executor` `lead` before each task's time, and handing it
    /// the tasks to defer as they come (`deferrals`); its tasks count in `in_flight`.
    pub fn new(
        partition: PartitionId,
        clock: Arc<dyn Clock>,
        (executor, deferrals): (
            Recipient<ExecutePartitionTask>,
            Recipient<DeferPartitionTask>,
        ),
        in_flight: Arc<InFlight>,
        lead: std::time::Duration,
    ) -> Self {
        let pending = Pending {
            tasks: BTreeMap::new(),
            in_flight: Arc::clone(&in_flight),
        };
        PartitionScheduler {
            partition,
            clock,
            executor,
            deferrals,
            in_flight,
            lead: TimeDelta::from_std(lead).unwrap_or(TimeDelta::zero()),
            pending,
            timer: None,
        }
    }

    /// Dispatches every due task, then arms the timer for the next one.
    fn dispatch_due(&mut self, ctx: &mut Context<Self>) {
        // Tasks due before this are dispatched now.
        let horizon = self.clock.now() + self.lead;
        let mut due = Vec::new();
        while let Some(task) = self.pending.pop_due(horizon) {
            due.push(task);
        }
        // Ties (one orderingId, one time) are held whole (see TaskPersistence), so they are
        // due together and leave here in enqueue order.
        due.sort_by_cached_key(|task| task.run_order());
        for task in due {
            self.executor.do_send(ExecutePartitionTask(task));
        }
        self.in_flight.set_held(self.pending.tasks.len());
        let Some(next) = self.pending.tasks.keys().next().map(|k| k.scheduled_time) else {
            if let Some((_, handle)) = self.timer.take() {
                ctx.cancel_future(handle);
            }
            return;
        };
        if self.timer.as_ref().is_some_and(|(at, _)| *at == next) {
            return;
        }
        if let Some((_, handle)) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        let wait = (next - horizon).to_std().unwrap_or_default();
        let handle = ctx.run_later(wait, |act, ctx| {
            act.timer = None;
            act.dispatch_due(ctx);
        });
        self.timer = Some((next, handle));
    }
}

impl Actor for PartitionScheduler {
    type Context = Context<Self>;
}

impl Handler<ScheduleTasks> for PartitionScheduler {
    type Result = ();

    fn handle(&mut self, msg: ScheduleTasks, ctx: &mut Context<Self>) {
        // A key already held is replaced (the replaced task's count goes with it).
        for task in msg.held {
            self.pending.insert(task);
        }
        for (task, pin) in msg.deferred {
            self.deferrals.do_send(DeferPartitionTask(task, pin));
        }
        tracing::trace!(
            partition = self.partition,
            held = self.pending.tasks.len(),
            "tasks scheduled"
        );
        self.dispatch_due(ctx);
    }
}

impl Handler<UnscheduleTasks> for PartitionScheduler {
    type Result = ();

    fn handle(&mut self, msg: UnscheduleTasks, ctx: &mut Context<Self>) {
        for key in &msg.0 {
            self.pending.remove(key);
        }
        self.dispatch_due(ctx);
    }
}

impl Handler<StopActor> for PartitionScheduler {
    type Result = ();

    fn handle(&mut self, _: StopActor, ctx: &mut Context<Self>) {
        self.pending.clear();
        ctx.stop();
    }
}
