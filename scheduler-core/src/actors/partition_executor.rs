//! PartitionExecutor: routes each due task of a partition to the OrderingExecutor of its
//! orderingId (creating it on first use, stopping it when its queue empties), and takes each
//! finished task off the partition's in-flight gauge.

use std::collections::HashMap;
use std::time::Duration;

use actix::{
    Actor, ActorContext, Addr, AsyncContext, Context, Handler, Message, Recipient, ResponseFuture,
};
use scheduler_client::Task;
use tracing::{debug, warn};

use super::ordering_executor::{DrainOrdering, ExecuteOrderingTask, OrderingExecutor};
use super::task_lifecycle::ExecutionOutcome;
use super::throughput_controller::CapacityFreed;
use super::{ExecutionLinks, InFlight, PartitionDeps, StopActor};
use crate::store::PartitionId;

/// A task that is due, from the PartitionScheduler.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ExecutePartitionTask(pub Task);

/// From an OrderingExecutor: one of its tasks is done with.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct OrderingTaskDone {
    /// Whose task.
    pub ordering_id: String,
    /// How it ended.
    pub outcome: ExecutionOutcome,
}

/// Stop starting tasks and wait (at most `timeout`) for the running ones to finish. The reply
/// says whether they all did (`false`: some are still running, left to finish on their own).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct DrainPartition {
    /// How long running tasks may take.
    pub timeout: Duration,
}

struct OrderingQueue {
    executor: Addr<OrderingExecutor>,
    outstanding: usize,
}

/// Executes the due tasks of one partition.
pub struct PartitionExecutor {
    partition: PartitionId,
    deps: PartitionDeps,
    links: ExecutionLinks,
    capacity_listener: Recipient<CapacityFreed>,
    queues: HashMap<String, OrderingQueue>,
    in_flight: std::sync::Arc<InFlight>,
    draining: bool,
}

impl PartitionExecutor {
    /// An executor for `partition`; whenever a task is done it takes it off `in_flight` and
    /// tells `capacity_listener`.
    pub fn new(
        partition: PartitionId,
        deps: PartitionDeps,
        links: ExecutionLinks,
        capacity_listener: Recipient<CapacityFreed>,
        in_flight: std::sync::Arc<InFlight>,
    ) -> Self {
        PartitionExecutor {
            partition,
            deps,
            links,
            capacity_listener,
            queues: HashMap::new(),
            in_flight,
            draining: false,
        }
    }
}

impl Actor for PartitionExecutor {
    type Context = Context<Self>;
}

impl Handler<ExecutePartitionTask> for PartitionExecutor {
    type Result = ();

    fn handle(&mut self, msg: ExecutePartitionTask, ctx: &mut Context<Self>) {
        if self.draining {
            // The partition is being torn down; the task stays in Cassandra for the next owner.
            self.in_flight.remove(1);
            return;
        }
        let task = msg.0;
        debug!(partition = self.partition, task = %task.key(), "task dispatched");
        let queue = self
            .queues
            .entry(task.ordering_id.clone())
            .or_insert_with(|| OrderingQueue {
                executor: OrderingExecutor::new(
                    self.partition,
                    task.ordering_id.clone(),
                    self.deps.clone(),
                    self.links.clone(),
                    ctx.address().recipient(),
                )
                .start(),
                outstanding: 0,
            });
        queue.outstanding += 1;
        queue.executor.do_send(ExecuteOrderingTask(task));
    }
}

impl Handler<OrderingTaskDone> for PartitionExecutor {
    type Result = ();

    fn handle(&mut self, msg: OrderingTaskDone, _: &mut Context<Self>) {
        self.in_flight.remove(1);
        if let Some(queue) = self.queues.get_mut(&msg.ordering_id) {
            queue.outstanding = queue.outstanding.saturating_sub(1);
            if queue.outstanding == 0 && !self.draining {
                if let Some(idle) = self.queues.remove(&msg.ordering_id) {
                    idle.executor.do_send(StopActor);
                }
            }
        }
        self.capacity_listener.do_send(CapacityFreed);
    }
}

impl Handler<DrainPartition> for PartitionExecutor {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, msg: DrainPartition, _: &mut Context<Self>) -> Self::Result {
        self.draining = true;
        let drains: Vec<_> = self
            .queues
            .values()
            .map(|q| q.executor.send(DrainOrdering))
            .collect();
        let partition = self.partition;
        Box::pin(async move {
            let drained = tokio::time::timeout(msg.timeout, futures::future::join_all(drains))
                .await
                .is_ok();
            if !drained {
                warn!(
                    partition,
                    "drain timed out; running tasks are left to finish on their own"
                );
            }
            drained
        })
    }
}

impl Handler<StopActor> for PartitionExecutor {
    type Result = ();

    fn handle(&mut self, _: StopActor, ctx: &mut Context<Self>) {
        for (_, queue) in self.queues.drain() {
            queue.executor.do_send(StopActor);
        }
        ctx.stop();
    }
}
