//! OrderingExecutor: the queue of one orderingId. It runs its tasks one at a time, in the order
//! they arrive (the scheduler dispatches in schedule order), each through its lifecycle
//! ([`super::task_lifecycle`]).

use std::collections::VecDeque;

use actix::{
    Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, Message, Recipient,
    ResponseFuture, SpawnHandle, WrapFuture,
};
use tokio::sync::oneshot;

use super::task_lifecycle::{run_task, ExecutionLinks};
use super::{RunDeps, StopActor};
use crate::in_flight::HeldTask;
use crate::store::PartitionId;

/// A due task for this orderingId.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ExecuteOrderingTask(pub HeldTask);

/// To the PartitionExecutor: one of this orderingId's tasks is done with.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct OrderingTaskDone {
    /// Whose task.
    pub ordering_id: String,
    /// The task's limit key (its share of the tree's memory is freed).
    pub limit_key: Option<String>,
}

/// Stop starting tasks; the reply comes once no task of this orderingId is running. (The tree's
/// stop signal, raised before, makes a task that has not called the executor yet give up.)
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct DrainOrdering;

/// Runs the tasks of one orderingId serially.
pub struct OrderingExecutor {
    partition: PartitionId,
    ordering_id: String,
    deps: RunDeps,
    links: ExecutionLinks,
    report_to: Recipient<OrderingTaskDone>,
    queue: VecDeque<HeldTask>,
    running: Option<SpawnHandle>,
    draining: bool,
    drained: Vec<oneshot::Sender<()>>,
}

impl OrderingExecutor {
    /// An executor for `ordering_id`.
    pub fn new(
        partition: PartitionId,
        ordering_id: String,
        deps: RunDeps,
        links: ExecutionLinks,
        report_to: Recipient<OrderingTaskDone>,
    ) -> Self {
        OrderingExecutor {
            partition,
            ordering_id,
            deps,
            links,
            report_to,
            queue: VecDeque::new(),
            running: None,
            draining: false,
            drained: Vec::new(),
        }
    }

    fn start_next(&mut self, ctx: &mut Context<Self>) {
        if self.running.is_some() || self.draining {
            return;
        }
        if let Some(task) = self.queue.pop_front() {
            let (task, pin, held) = task.into_parts();
            // The key it counted under in its partition's shares as it came.
            let limit_key = task.limit_key.clone();
            let life = run_task(
                self.partition,
                task,
                pin,
                self.deps.clone(),
                self.links.clone(),
            );
            let handle = ctx.spawn(life.into_actor(self).map(move |_outcome, act, ctx| {
                // Done with: it no longer counts in flight, before the PartitionExecutor hears.
                drop(held);
                act.task_done(limit_key, ctx)
            }));
            self.running = Some(handle);
        }
    }

    fn task_done(&mut self, limit_key: Option<String>, ctx: &mut Context<Self>) {
        self.running = None;
        self.report_to.do_send(OrderingTaskDone {
            ordering_id: self.ordering_id.clone(),
            limit_key,
        });
        if self.draining {
            for waiter in self.drained.drain(..) {
                let _ = waiter.send(());
            }
        } else {
            self.start_next(ctx);
        }
    }
}

impl Actor for OrderingExecutor {
    type Context = Context<Self>;
}

impl Handler<ExecuteOrderingTask> for OrderingExecutor {
    type Result = ();

    fn handle(&mut self, msg: ExecuteOrderingTask, ctx: &mut Context<Self>) {
        self.queue.push_back(msg.0);
        self.start_next(ctx);
    }
}

impl Handler<DrainOrdering> for OrderingExecutor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: DrainOrdering, _: &mut Context<Self>) -> Self::Result {
        self.draining = true;
        if self.running.is_none() {
            return Box::pin(async {});
        }
        let (tx, rx) = oneshot::channel();
        self.drained.push(tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

impl Handler<StopActor> for OrderingExecutor {
    type Result = ();

    /// Drops the running lifecycle: a call already made goes on in the pool with its lease
    /// entry until it returns; its outcome is not recorded by this tree.
    fn handle(&mut self, _: StopActor, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
