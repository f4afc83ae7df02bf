//! PartitionScheduler: holds the loaded tasks of one partition that are not yet due and
//! dispatches each to the PartitionExecutor at its time, tasks due together in run order (time,
//! then enqueue order: [`scheduler_client::Task::run_order`]). One timer is armed for the
//! next due task (not a periodic tick). A task is dispatched `dispatch_lead` before its time:
//! its lifecycle makes its checks meanwhile and calls the handler at the time itself.
//! Every task sent to it is a [`HeldTask`]: it counts in the partition's in-flight gauge until
//! it is dropped (replaced, cancelled, or done with by the executors).

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::{Actor, ActorContext, AsyncContext, Context, Handler, Message, Recipient, SpawnHandle};
use chrono::{DateTime, TimeDelta, Utc};
use scheduler_client::TaskKey;

use super::partition_executor::ExecutePartitionTask;
use super::StopActor;
use crate::clock::Clock;
use crate::in_flight::{HeldTask, InFlight};
use crate::store::PartitionId;

/// Tasks to hold until due (loaded, or pushed after being persisted behind the read cursor).
/// A task whose key is already held replaces it.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ScheduleTasks(pub Vec<HeldTask>);

/// Drop these tasks (cancelled) if they are held.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct UnscheduleTasks(pub Vec<TaskKey>);

/// Holds tasks until they are due and dispatches them in run order.
pub struct PartitionScheduler {
    partition: PartitionId,
    clock: Arc<dyn Clock>,
    executor: Recipient<ExecutePartitionTask>,
    in_flight: Arc<InFlight>,
    /// How long before its time a task is dispatched.
    lead: TimeDelta,
    pending: BTreeMap<TaskKey, HeldTask>,
    timer: Option<(DateTime<Utc>, SpawnHandle)>,
}

impl PartitionScheduler {
    /// A scheduler dispatching to `executor` `lead` before each task's time; its tasks count in
    /// `in_flight`.
    pub fn new(
        partition: PartitionId,
        clock: Arc<dyn Clock>,
        executor: Recipient<ExecutePartitionTask>,
        in_flight: Arc<InFlight>,
        lead: std::time::Duration,
    ) -> Self {
        PartitionScheduler {
            partition,
            clock,
            executor,
            in_flight,
            lead: TimeDelta::from_std(lead).unwrap_or(TimeDelta::zero()),
            pending: BTreeMap::new(),
            timer: None,
        }
    }

    /// Dispatches every due task, then arms the timer for the next one.
    fn dispatch_due(&mut self, ctx: &mut Context<Self>) {
        // Tasks due before this are dispatched now.
        let horizon = self.clock.now() + self.lead;
        let mut due = Vec::new();
        while let Some(entry) = self.pending.first_entry() {
            if entry.key().scheduled_time > horizon {
                break;
            }
            due.push(entry.remove());
        }
        // Ties (one orderingId, one time) are held whole (see TaskPersistence), so they are
        // due together and leave here in enqueue order.
        due.sort_by_cached_key(|task| task.run_order());
        for task in due {
            self.executor.do_send(ExecutePartitionTask(task));
        }
        self.in_flight.set_held(self.pending.len());
        let Some(next) = self.pending.keys().next().map(|k| k.scheduled_time) else {
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
        for task in msg.0 {
            self.pending.insert(task.key(), task);
        }
        tracing::trace!(
            partition = self.partition,
            held = self.pending.len(),
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
