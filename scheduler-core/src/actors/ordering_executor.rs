//! OrderingExecutor: the queue of one orderingId. It runs its tasks one at a time, in the order
//! they arrive (the scheduler dispatches in schedule order), each through a TaskExecutorActor.

use std::collections::VecDeque;

use actix::{
    Actor, ActorContext, Addr, AsyncContext, Context, Handler, Message, Recipient, ResponseFuture,
};
use scheduler_client::Task;
use tokio::sync::oneshot;

use super::partition_executor::OrderingTaskDone;
use super::task_executor::{AbandonRetries, TaskExecuted, TaskExecutorActor};
use super::{ExecutionLinks, PartitionDeps, StopActor};
use crate::store::PartitionId;

/// A due task for this orderingId.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ExecuteOrderingTask(pub Task);

/// Stop starting tasks; the reply comes once no task of this orderingId is running.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct DrainOrdering;

/// Runs the tasks of one orderingId serially.
pub struct OrderingExecutor {
    partition: PartitionId,
    ordering_id: String,
    deps: PartitionDeps,
    links: ExecutionLinks,
    report_to: Recipient<OrderingTaskDone>,
    queue: VecDeque<Task>,
    running: Option<Addr<TaskExecutorActor>>,
    draining: bool,
    drained: Vec<oneshot::Sender<()>>,
}

impl OrderingExecutor {
    /// An executor for `ordering_id`.
    pub fn new(
        partition: PartitionId,
        ordering_id: String,
        deps: PartitionDeps,
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
            let actor = TaskExecutorActor::new(
                self.partition,
                task,
                self.deps.clone(),
                self.links.clone(),
                ctx.address().recipient(),
            );
            self.running = Some(actor.start());
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

impl Handler<TaskExecuted> for OrderingExecutor {
    type Result = ();

    fn handle(&mut self, msg: TaskExecuted, ctx: &mut Context<Self>) {
        self.running = None;
        self.report_to.do_send(OrderingTaskDone {
            ordering_id: self.ordering_id.clone(),
            outcome: msg.outcome,
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

impl Handler<DrainOrdering> for OrderingExecutor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: DrainOrdering, _: &mut Context<Self>) -> Self::Result {
        self.draining = true;
        match &self.running {
            None => Box::pin(async {}),
            Some(running) => {
                running.do_send(AbandonRetries);
                let (tx, rx) = oneshot::channel();
                self.drained.push(tx);
                Box::pin(async move {
                    let _ = rx.await;
                })
            }
        }
    }
}

impl Handler<StopActor> for OrderingExecutor {
    type Result = ();

    fn handle(&mut self, _: StopActor, ctx: &mut Context<Self>) {
        if let Some(running) = self.running.take() {
            running.do_send(AbandonRetries);
        }
        ctx.stop();
    }
}
