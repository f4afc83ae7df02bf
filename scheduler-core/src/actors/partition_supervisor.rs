//! PartitionSupervisor: owns the actor tree of one partition. It builds the tree (the
//! TopicSupervisor sends polled tasks straight to its TaskPersistence) and winds the tree down the same way whatever the reason
//! (revoke, a child's unrecoverable failure, fencing): it raises the tree's stop signal, stops
//! loading and dispatching, lets running calls finish (at most `drain_timeout`), stops the
//! actors and closes the running-task lease, which stays live for calls still running. After a
//! failure the TopicSupervisor rebuilds the partition from Cassandra.

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, Recipient,
    ResponseActFuture, WrapFuture,
};
use chrono::TimeDelta;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

use super::partition_executor::{DrainPartition, PartitionExecutor};
use super::partition_ownership::{PartitionFenced, PartitionOwnership};
use super::partition_scheduler::PartitionScheduler;
use super::task_lifecycle::ExecutionLinks;
use super::task_persistence::{PersistenceLinks, PersistenceTables, TaskPersistence};
use super::throughput_controller::{EscalateFailure, ThroughputController};
use super::{PartitionDeps, StopActor};
use crate::cancel_gate::CancelGate;
use crate::epoch::EpochCell;
use crate::in_flight::InFlight;
use crate::known_statuses::KnownStatuses;
use crate::lease::TreeLease;
use crate::outcome::StopReason;
use crate::store::{PartitionId, ReadCursor};

/// How often each partition counts its stale tasks.
const STALE_SAMPLE_INTERVAL: Duration = Duration::from_secs(30);
/// Most stale tasks counted per sample (the gauge reads this many or more).
const STALE_SAMPLE_CAP: usize = 1000;

/// To the TopicSupervisor: this tree stopped on its own, because it failed
/// ([`StopReason::Rebuilding`]: rebuild it from Cassandra) or was fenced
/// ([`StopReason::Fenced`]: drop it; the partition runs here again only if the group assigns it
/// again).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct PartitionStopped {
    /// Which partition.
    pub partition: PartitionId,
    /// The supervisor that stopped (a partition may have been rebuilt since).
    pub supervisor: Addr<PartitionSupervisor>,
    /// Why it stopped.
    pub reason: StopReason,
}

/// Tear the tree down: stop scheduling and loading, let running tasks finish (at most
/// `drain_timeout`), then stop every actor. The reply comes when it is done and says whether
/// every running task finished.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct StopPartition {
    /// How long running tasks may take.
    pub drain_timeout: Duration,
}

struct Children {
    ownership: Addr<PartitionOwnership>,
    executor: Addr<PartitionExecutor>,
    scheduler: Addr<PartitionScheduler>,
    persistence: Addr<TaskPersistence>,
    controller: Addr<ThroughputController>,
}

impl Children {
    fn stop_all(&self) {
        self.controller.do_send(StopActor);
        self.persistence.do_send(StopActor);
        self.scheduler.do_send(StopActor);
        self.executor.do_send(StopActor);
        self.ownership.do_send(StopActor);
    }
}

/// Supervises the actors of one partition.
pub struct PartitionSupervisor {
    partition: PartitionId,
    deps: PartitionDeps,
    parent: Recipient<PartitionStopped>,
    children: Option<Children>,
    epoch: EpochCell,
    /// Raised when the tree winds down; running calls see it in their context.
    stop: tokio::sync::watch::Sender<Option<StopReason>>,
    lease: Option<TreeLease>,
    /// Set once the tree has wound down, to whether every call finished.
    wound_down: tokio::sync::watch::Sender<Option<bool>>,
    /// Where the next stale-task sample starts.
    stale_scan_from: Option<chrono::DateTime<chrono::Utc>>,
    /// The tree's in-flight gauge, which carries its low-water mark.
    in_flight: Option<Arc<InFlight>>,
    /// TaskPersistence's context until the tree starts: its address exists from the start, so
    /// the TopicSupervisor can send polled tasks to it directly.
    persistence_ctx: Option<Context<TaskPersistence>>,
    persistence: Addr<TaskPersistence>,
}

impl PartitionSupervisor {
    /// A supervisor for `partition`, reporting failures to `parent`. Its tree claims the
    /// partition unless `epoch` already holds one (a rebuild), which it then checks.
    pub fn new(
        partition: PartitionId,
        deps: PartitionDeps,
        parent: Recipient<PartitionStopped>,
        epoch: EpochCell,
    ) -> Self {
        let persistence_ctx = Context::<TaskPersistence>::new();
        PartitionSupervisor {
            persistence: persistence_ctx.address(),
            persistence_ctx: Some(persistence_ctx),
            partition,
            deps,
            parent,
            children: None,
            epoch,
            stop: tokio::sync::watch::channel(None).0,
            lease: None,
            wound_down: tokio::sync::watch::channel(None).0,
            stale_scan_from: None,
            in_flight: None,
        }
    }

    /// Where this tree takes polled tasks ([`super::task_persistence::PersistTasks`]).
    pub fn persistence(&self) -> Addr<TaskPersistence> {
        self.persistence.clone()
    }
}

impl PartitionSupervisor {
    /// Counts the incomplete tasks due longer ago than `stale_after` (up to a cap) for the
    /// `scheduler_stale_tasks` gauge. Each sample starts where the previous one found the first
    /// incomplete task (or ended): the rows before it are finished tasks' tombstones, and
    /// reading them again every 30 s made Cassandra run out of heap under a 1M-task backlog.
    fn sample_stale_tasks(&mut self, ctx: &mut Context<Self>) {
        let deps = &self.deps;
        let now = deps.clock.now();
        let stale_after = TimeDelta::from_std(deps.settings.stale_after).unwrap_or_default();
        let until = now - stale_after;
        // Nothing before the low-water mark is incomplete.
        let Some(low_water) = self.in_flight.as_ref().and_then(|g| g.low_water()) else {
            return;
        };
        let from = self
            .stale_scan_from
            .map_or(low_water, |from| from.max(low_water));
        let count = deps.tables.schedule.load(
            self.partition,
            ReadCursor::From(from),
            until,
            STALE_SAMPLE_CAP,
        );
        ctx.spawn(
            count
                .into_actor(self)
                .map(move |result, act, _| match result {
                    Ok(stale) => {
                        act.stale_scan_from =
                            Some(stale.first().map_or(until, |t| t.scheduled_time));
                        // Tasks held behind the sample's start (the mark passed them).
                        let held = act
                            .in_flight
                            .as_ref()
                            .map_or(0, |g| g.held_before(from.min(until)));
                        // A task its key's limit holds is not stale.
                        let limits = &act.deps.limits;
                        let stale = stale.iter().filter(|t| !limits.holds(t)).count();
                        act.deps.metrics.stale_tasks(act.partition, stale + held);
                    }
                    Err(e) => {
                        warn!(partition = act.partition, error = %e, "stale-task sample failed")
                    }
                }),
        );
    }
}

impl Actor for PartitionSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let p = self.partition;
        let deps = &self.deps;

        // The actors reference each other; their addresses exist before they start.
        let scheduler_ctx = Context::<PartitionScheduler>::new();
        let Some(persistence_ctx) = self.persistence_ctx.take() else {
            return;
        };
        let controller_ctx = Context::<ThroughputController>::new();
        let executor_ctx = Context::<PartitionExecutor>::new();
        let (scheduler, persistence, controller, executor) = (
            scheduler_ctx.address(),
            persistence_ctx.address(),
            controller_ctx.address(),
            executor_ctx.address(),
        );
        let ownership = PartitionOwnership::new(
            p,
            deps.node_id.clone(),
            deps.tables.ownership.clone(),
            deps.clock.clone(),
            deps.metrics.clone(),
            ctx.address().recipient(),
            self.epoch.clone(),
        )
        .start();
        let in_flight = deps.in_flight.start(p);
        self.in_flight = Some(in_flight.clone());
        let lease = TreeLease::start(
            p,
            &deps.node_id,
            self.epoch.clone(),
            deps.tables.leases.clone(),
            deps.settings.lease_ttl,
        );
        self.lease = Some(lease.clone());
        let cancels = CancelGate::new();
        // The tree's status reads and writes go through what it knows of its tasks' statuses.
        let known = KnownStatuses::new(
            deps.tables.status.clone(),
            deps.tables.finish.clone(),
            2 * deps.settings.max_in_flight_tasks,
        );
        let mut run_deps = deps.run_deps();
        run_deps.tables.status = Arc::new(known.clone());
        run_deps.tables.finish = Arc::new(known.clone());
        let mut persistence_tables = PersistenceTables::from(&deps.tables);
        persistence_tables.status = Arc::new(known.clone());
        executor_ctx.run(PartitionExecutor::new(
            p,
            run_deps,
            deps.tables.deferred.clone(),
            ExecutionLinks {
                ownership: ownership.clone(),
                lease: lease.clone(),
                stop: self.stop.subscribe(),
                cancels: cancels.clone(),
                known: known.clone(),
            },
            controller.clone().recipient(),
            in_flight.clone(),
        ));
        scheduler_ctx.run(PartitionScheduler::new(
            p,
            deps.clock.clone(),
            (executor.clone().recipient(), executor.clone().recipient()),
            in_flight.clone(),
            deps.settings.dispatch_lead,
        ));
        persistence_ctx.run(TaskPersistence::new(
            p,
            persistence_tables,
            PersistenceLinks {
                scheduler: scheduler.clone(),
                deferred: executor.clone().recipient(),
                start_take_over: executor.clone().recipient(),
                controller: controller.clone().recipient(),
                in_flight: in_flight.clone(),
                max_in_flight: deps.settings.max_in_flight_tasks,
                dispatch_lead: deps.settings.dispatch_lead,
                metrics: deps.metrics.clone(),
                clock: deps.clock.clone(),
                stop: self.stop.subscribe(),
                ownership: ownership.clone(),
                cancels,
                known,
                lease,
                enqueuer: deps.enqueuer.clone(),
            },
            deps.settings.persist_timeout,
        ));
        controller_ctx.run(ThroughputController::new(
            p,
            deps.clock.clone(),
            deps.settings.clone(),
            persistence.clone(),
            in_flight,
            ctx.address().recipient(),
        ));
        self.children = Some(Children {
            ownership,
            executor,
            scheduler,
            persistence,
            controller,
        });
        info!(partition = p, "partition started");
        ctx.run_interval(STALE_SAMPLE_INTERVAL, |act, ctx| {
            act.sample_stale_tasks(ctx)
        });
    }
}

impl PartitionSupervisor {
    /// Winds the tree down: raises the stop signal (tasks that have not called the handler
    /// give up; running calls see `reason` in their context), stops loading and dispatching,
    /// lets running calls finish for at most `drain_timeout`, then stops every actor and closes
    /// the lease (kept live for calls still running). Resolves with whether every call finished.
    fn wind_down(
        &mut self,
        reason: StopReason,
        drain_timeout: Duration,
    ) -> ResponseActFuture<Self, bool> {
        let Some(children) = self.children.take() else {
            // A wind-down already under way (a rebuild, a fence) is waited for: a revoke must
            // not answer before the calls it drains have recorded their outcomes, or the next
            // owner's claim would fence them and run their tasks again.
            let winding = self.stop.borrow().is_some();
            let mut done = self.wound_down.subscribe();
            return Box::pin(
                async move {
                    if !winding {
                        return true;
                    }
                    done.wait_for(Option::is_some)
                        .await
                        .is_ok_and(|drained| drained.unwrap_or(false))
                }
                .into_actor(self),
            );
        };
        self.stop.send_replace(Some(reason));
        children.controller.do_send(StopActor);
        children.scheduler.do_send(StopActor);
        let drain = children.executor.send(DrainPartition {
            timeout: drain_timeout,
        });
        let partition = self.partition;
        Box::pin(drain.into_actor(self).map(move |drained, act, _| {
            children.stop_all();
            if let Some(lease) = act.lease.take() {
                lease.close();
            }
            info!(partition, ?reason, "partition stopped");
            let drained = drained.unwrap_or(false);
            act.wound_down.send_replace(Some(drained));
            drained
        }))
    }
}

impl Handler<StopPartition> for PartitionSupervisor {
    type Result = ResponseActFuture<Self, bool>;

    fn handle(&mut self, msg: StopPartition, _: &mut Context<Self>) -> Self::Result {
        Box::pin(
            self.wind_down(StopReason::Revoked, msg.drain_timeout)
                .map(|drained, _, ctx| {
                    ctx.stop();
                    drained
                }),
        )
    }
}

impl PartitionSupervisor {
    /// Winds the tree down for `reason`, then tells the TopicSupervisor it stopped on its own
    /// (to be rebuilt, or dropped when fenced).
    fn stop_and_report(&mut self, reason: StopReason) -> ResponseActFuture<Self, ()> {
        if self.children.is_none() {
            return Box::pin(actix::fut::ready(()));
        }
        let drain_timeout = self.deps.settings.drain_timeout;
        Box::pin(
            self.wind_down(reason, drain_timeout)
                .map(move |_, act, ctx| {
                    act.parent.do_send(PartitionStopped {
                        partition: act.partition,
                        supervisor: ctx.address(),
                        reason,
                    });
                    ctx.stop();
                }),
        )
    }
}

impl Handler<EscalateFailure> for PartitionSupervisor {
    type Result = ResponseActFuture<Self, ()>;

    /// Winds the tree down like a revoke, so its rebuild does not start beside calls it still
    /// runs (their lease entries hold the rebuilt tree back if they outlive the drain), then
    /// asks for the rebuild.
    fn handle(&mut self, msg: EscalateFailure, _: &mut Context<Self>) -> Self::Result {
        if self.children.is_some() {
            warn!(partition = self.partition, reason = %msg.reason, "partition failed; rebuilding it from Cassandra");
        }
        self.stop_and_report(StopReason::Rebuilding)
    }
}

impl Handler<PartitionFenced> for PartitionSupervisor {
    type Result = ResponseActFuture<Self, ()>;

    /// Winds the tree down like a revoke (running calls finish; their outcomes meet the fence and
    /// are not recorded), then reports the partition as not to be rebuilt.
    fn handle(&mut self, msg: PartitionFenced, _: &mut Context<Self>) -> Self::Result {
        if self.children.is_some() {
            warn!(
                partition = self.partition,
                epoch = msg.epoch,
                current = msg.current,
                "partition fenced: another node owns it now; stopping this tree"
            );
        }
        self.stop_and_report(StopReason::Fenced)
    }
}
