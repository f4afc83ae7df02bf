//! ThroughputController: decides when one partition loads more of its schedule. It keeps the
//! tasks in flight (the partition's in-flight gauge: held by the PartitionScheduler, queued or
//! running in the PartitionExecutor) under `max_in_flight_tasks`, loads in batches while a
//! backlog remains, and, once caught up, loads again `prefetch_window` before the loaded horizon
//! (`now + max_look_ahead`) runs out. Repeated load failures escalate to the PartitionSupervisor.

use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, Recipient,
    SpawnHandle, WrapFuture,
};
use tracing::warn;

use super::partition_executor::CapacityFreed;
use super::task_persistence::{LoadMore, LoadTasks, TaskPersistence, TasksLoaded};
use super::StopActor;
use crate::clock::Clock;
use crate::in_flight::InFlight;
use crate::retry::exponential_period;
use crate::settings::SchedulingSettings;
use crate::store::PartitionId;

/// Consecutive failed loads after which the partition is rebuilt.
const MAX_LOAD_FAILURES: u32 = 5;
/// First wait after a failed load.
const LOAD_RETRY_BASE: Duration = Duration::from_millis(500);

/// To the PartitionSupervisor: loading failed past recovery here; rebuild the partition.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct EscalateFailure {
    /// What failed.
    pub reason: String,
}

/// Paces the loading of one partition's schedule.
pub struct ThroughputController {
    partition: PartitionId,
    clock: Arc<dyn Clock>,
    settings: Arc<SchedulingSettings>,
    persistence: Addr<TaskPersistence>,
    in_flight: Arc<InFlight>,
    supervisor: Recipient<EscalateFailure>,
    loading: bool,
    /// A `LoadMore` came while a load was under way: load again when it returns.
    reload_requested: bool,
    awaiting_capacity: bool,
    next_load: Option<SpawnHandle>,
    failures: u32,
}

impl ThroughputController {
    /// A controller for `partition`; it starts loading as soon as it is started.
    pub fn new(
        partition: PartitionId,
        clock: Arc<dyn Clock>,
        settings: Arc<SchedulingSettings>,
        persistence: Addr<TaskPersistence>,
        in_flight: Arc<InFlight>,
        supervisor: Recipient<EscalateFailure>,
    ) -> Self {
        ThroughputController {
            partition,
            clock,
            settings,
            persistence,
            in_flight,
            supervisor,
            loading: false,
            reload_requested: false,
            awaiting_capacity: false,
            next_load: None,
            failures: 0,
        }
    }

    /// Loads are skipped until in-flight tasks fall to this many, so a drained backlog is loaded
    /// in sizeable batches rather than one task per completion.
    fn load_threshold(&self) -> usize {
        let max = self.settings.max_in_flight_tasks;
        max - (max / 4).max(1)
    }

    fn consider_loading(&mut self, ctx: &mut Context<Self>) {
        if self.loading {
            return;
        }
        if let Some(handle) = self.next_load.take() {
            ctx.cancel_future(handle);
        }
        let in_flight = self.in_flight.current();
        let capacity = self.settings.max_in_flight_tasks.saturating_sub(in_flight);
        let limit = capacity.min(self.settings.fetch_batch_size);
        if in_flight > self.load_threshold() || limit == 0 {
            self.awaiting_capacity = true;
            return;
        }
        self.awaiting_capacity = false;
        self.loading = true;
        let until = self.clock.now()
            + chrono::TimeDelta::from_std(self.settings.max_look_ahead).unwrap_or_default();
        let request = self.persistence.send(LoadTasks { until, limit });
        ctx.spawn(request.into_actor(self).map(|reply, act, ctx| {
            act.loading = false;
            match reply {
                Ok(Ok(loaded)) => act.loaded(loaded, ctx),
                Ok(Err(e)) => act.load_failed(e.to_string(), ctx),
                Err(e) => act.load_failed(e.to_string(), ctx),
            }
        }));
    }

    fn loaded(&mut self, loaded: TasksLoaded, ctx: &mut Context<Self>) {
        self.failures = 0;
        if !loaded.caught_up || std::mem::take(&mut self.reload_requested) {
            // A backlog remains (or the cursor moved back meanwhile): load more when there is room.
            ctx.notify(LoadMore);
            return;
        }
        // Caught up to the horizon: load again shortly before the loaded schedule runs out.
        let prefetch =
            chrono::TimeDelta::from_std(self.settings.prefetch_window).unwrap_or_default();
        let wait = (loaded.cursor_at - prefetch - self.clock.now())
            .to_std()
            .unwrap_or_default();
        self.next_load = Some(ctx.run_later(wait, |act, ctx| {
            act.next_load = None;
            act.consider_loading(ctx);
        }));
    }

    fn load_failed(&mut self, reason: String, ctx: &mut Context<Self>) {
        self.failures += 1;
        if self.failures >= MAX_LOAD_FAILURES {
            self.supervisor.do_send(EscalateFailure {
                reason: format!(
                    "{} consecutive schedule loads failed, the last with: {reason}",
                    self.failures
                ),
            });
            return;
        }
        let wait = exponential_period(self.failures, LOAD_RETRY_BASE, self.settings.max_backoff);
        warn!(partition = self.partition, %reason, retry_in_ms = wait.as_millis() as u64, "schedule load failed; retrying");
        self.next_load = Some(ctx.run_later(wait, |act, ctx| {
            act.next_load = None;
            act.consider_loading(ctx);
        }));
    }
}

impl Actor for ThroughputController {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.consider_loading(ctx);
    }
}

impl Handler<LoadMore> for ThroughputController {
    type Result = ();

    fn handle(&mut self, _: LoadMore, ctx: &mut Context<Self>) {
        if self.loading {
            self.reload_requested = true;
        } else {
            self.consider_loading(ctx);
        }
    }
}

impl Handler<CapacityFreed> for ThroughputController {
    type Result = ();

    fn handle(&mut self, _: CapacityFreed, ctx: &mut Context<Self>) {
        if self.awaiting_capacity {
            self.consider_loading(ctx);
        }
    }
}

impl Handler<StopActor> for ThroughputController {
    type Result = ();

    fn handle(&mut self, _: StopActor, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
