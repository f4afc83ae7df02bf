//! What a task's run keeps and the means its steps share: the ownership fence, store steps
//! retried with a backoff, the tree's stop signal. The steps themselves read top to bottom in
//! [`super`]; hooks reach these means through [`Steps`].

use std::time::Duration;

use actix::Addr;
use futures::future::BoxFuture;
use scheduler_client::TaskKey;
use tokio::sync::watch;
use tracing::{debug, warn};

use super::super::partition_ownership::{CheckOwnership, Ownership, PartitionOwnership};
use super::super::{RunDeps, TreeError};
use crate::cancel_gate::CancelGate;
use crate::clock::Stamp;
use crate::hooks::{Halt, StepError, Steps};
use crate::in_flight::Pin;
use crate::known_statuses::KnownStatuses;
use crate::lease::{LeaseHold, TreeLease};
use crate::outcome::StopReason;
use crate::retry::exponential_period;
use crate::store::PartitionId;

/// First wait before retrying a store step (status read, lease write, record) that failed.
const STORE_RETRY_BASE: Duration = Duration::from_millis(500);

/// What a task's lifecycle consults in its tree: the ownership fence, the running-task lease,
/// and the tree's stop signal.
#[derive(Clone)]
pub struct ExecutionLinks {
    /// Answers whether the tree still owns the partition.
    pub ownership: Addr<PartitionOwnership>,
    /// The tree's running-task lease.
    pub lease: TreeLease,
    /// Set once the tree stops (revoke, rebuild, fence): tasks that have not called the
    /// executor yet give up, and running calls see it in their context.
    pub stop: tokio::sync::watch::Receiver<Option<StopReason>>,
    /// Cancels the tree is applying, seen by tasks already checked.
    pub cancels: CancelGate,
    /// What the tree knows of its tasks' statuses: deferred tasks read back are checked in
    /// batches, and forgotten as they are deferred.
    pub known: KnownStatuses,
}

/// One task's run in its tree.
pub(super) struct TaskRun {
    pub(super) partition: PartitionId,
    pub(super) key: TaskKey,
    pub(super) deps: RunDeps,
    pub(super) links: ExecutionLinks,
    pub(super) stop: watch::Receiver<Option<StopReason>>,
    /// Attempts made in this partition (an earlier tree's included, once read).
    pub(super) attempts: u32,
    /// When the task entered the tree (loaded or persisted, then dispatched): see step 3.
    pub(super) entered: Stamp,
    /// Keeps the low-water mark at or before the task (unless the mark lists it) until the
    /// task is final.
    _pin: Option<Pin>,
    /// Store steps failed in a row (the backoff grows with them).
    store_failures: u32,
    /// Waits for a handler so far.
    pub(super) handler_waits: u32,
    /// How long the last call took (for the task's finished line), and when it began (kept with
    /// the task's final status).
    pub(super) last_call: Option<std::time::Duration>,
    pub(super) last_call_started: Option<chrono::DateTime<chrono::Utc>>,
    /// The last call's error, if it failed (for the task's span's status).
    pub(super) last_error: Option<String>,
    pub(super) rng: fastrand::Rng,
    pub(super) span: tracing::Span,
}

/// Where a run is: before the call, the tree's stop signal interrupts its steps; after it,
/// steps are let finish under the call's lease entry, so a draining tree records what its calls
/// did.
pub(super) enum Phase {
    /// Before the call (nothing of this attempt to record yet).
    Checking,
    /// Recording what the call did, under its lease entry (`None` if the call panicked).
    Recording(Option<LeaseHold>),
}

impl TaskRun {
    pub(super) fn new(
        partition: PartitionId,
        key: TaskKey,
        pin: Option<Pin>,
        deps: RunDeps,
        links: ExecutionLinks,
        span: tracing::Span,
    ) -> Self {
        TaskRun {
            partition,
            key,
            stop: links.stop.clone(),
            deps,
            links,
            attempts: 0,
            entered: Stamp::now(),
            _pin: pin,
            store_failures: 0,
            handler_waits: 0,
            last_call: None,
            last_call_started: None,
            last_error: None,
            rng: fastrand::Rng::new(),
            span,
        }
    }

    /// The run's steps in `phase`, for the lifecycle and its hooks.
    pub(super) fn steps(&mut self, phase: Phase) -> RunSteps<'_> {
        RunSteps { run: self, phase }
    }

    /// `work`, unless the tree is told to stop first.
    pub(super) async fn unless_stopped<T>(
        &self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, Halt> {
        let mut stop = self.stop.clone();
        tokio::select! {
            biased;
            _ = stop.wait_for(Option::is_some) => Err(Halt::Abandoned),
            value = work => Ok(value),
        }
    }

    /// A store step failed: waits a capped exponential backoff before it is tried again, unless
    /// the tree stops.
    pub(super) async fn store_failed(
        &mut self,
        operation: &str,
        error: &TreeError,
    ) -> Result<(), Halt> {
        if self.stop.borrow().is_some() {
            return Err(Halt::Abandoned);
        }
        self.store_failures += 1;
        let delay = exponential_period(
            self.store_failures,
            STORE_RETRY_BASE,
            self.deps.settings.max_backoff,
        );
        warn!(partition = self.partition, task = %self.key, operation, %error,
            retry_in_ms = delay.as_millis() as u64, "store step failed; retrying");
        self.unless_stopped(tokio::time::sleep(delay)).await
    }

    /// Runs a store step until it succeeds, waiting a capped exponential backoff between
    /// failures; gives up if the tree stops meanwhile (`interruptible`: the stop signal also
    /// interrupts the step under way).
    async fn retried<T, E, F, Fut>(
        &mut self,
        operation: &str,
        interruptible: bool,
        mut step: F,
    ) -> Result<T, Halt>
    where
        E: Into<TreeError>,
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        loop {
            let result = if interruptible {
                self.unless_stopped(step()).await?
            } else {
                step().await
            };
            match result {
                Ok(value) => {
                    self.store_succeeded();
                    return Ok(value);
                }
                Err(e) => self.store_failed(operation, &e.into()).await?,
            }
        }
    }

    /// A store step succeeded: the next failure waits the first backoff again.
    pub(super) fn store_succeeded(&mut self) {
        self.store_failures = 0;
    }
}

/// A run's steps in one phase (see [`Phase`]).
pub(super) struct RunSteps<'r> {
    pub(super) run: &'r mut TaskRun,
    phase: Phase,
}

impl RunSteps<'_> {
    /// The phase the steps end in (the call's lease entry, while recording).
    pub(super) fn into_phase(self) -> Phase {
        self.phase
    }

    /// Runs a store step until it succeeds, waiting a capped exponential backoff between
    /// failures; gives up if the tree stops meanwhile. A read before the call is interrupted by
    /// the stop signal too; a write (made as owner, confirmed before every try), or any step
    /// after the call, is let finish.
    pub(super) async fn store_step<T, E, F, Fut>(
        &mut self,
        operation: &str,
        write: bool,
        mut step: F,
    ) -> Result<T, Halt>
    where
        E: Into<TreeError>,
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        if !write {
            let interruptible = matches!(self.phase, Phase::Checking);
            return self.run.retried(operation, interruptible, step).await;
        }
        loop {
            self.owner_of_outcome().await?;
            match step().await {
                Ok(value) => {
                    self.run.store_succeeded();
                    return Ok(value);
                }
                Err(e) => self.run.store_failed(operation, &e.into()).await?,
            }
        }
    }

    /// The tree's epoch, if it still owns the partition (by a read begun after `read_after`).
    pub(super) async fn owner(&mut self, read_after: Option<Stamp>) -> Result<u64, Halt> {
        let ownership: Addr<PartitionOwnership> = self.run.links.ownership.clone();
        let interruptible = matches!(self.phase, Phase::Checking);
        let answer = self
            .run
            .retried("ownership check", interruptible, || {
                let request = ownership.send(CheckOwnership { read_after });
                async move {
                    let gone = TreeError::Stopping {
                        doing: "checking ownership",
                    };
                    request.await.unwrap_or(Err(gone))
                }
            })
            .await?;
        match answer {
            Ownership::Owner(epoch) => Ok(epoch),
            Ownership::Fenced => {
                warn!(partition = self.run.partition, task = %self.run.key, "partition owned by a newer tree: task left to it");
                Err(Halt::Fenced)
            }
        }
    }

    /// The tree's epoch, before a write of what the call did. If the call's lease entry broke
    /// since the checks before the call (a pause of the process, renewals that failed), a newer
    /// tree may have found no entry and taken the task over: ownership is read at once (a newer
    /// tree's claim fences this one there), then the entry is written again and ownership
    /// confirmed by a read begun after that. Either this tree records (a newer tree claims
    /// later, finds the entry and waits for it) or it is fenced and records nothing (the newer
    /// tree runs the task). A tree told to stop meanwhile records nothing either.
    pub(super) async fn owner_of_outcome(&mut self) -> Result<u64, Halt> {
        let held = match &mut self.phase {
            Phase::Recording(hold) => hold.take(),
            Phase::Checking => None,
        };
        let Some(mut hold) = held else {
            return self.owner(None).await;
        };
        let mut read_after = Ok(None);
        if !hold.unbroken() {
            debug!(partition = self.run.partition, task = %self.run.key,
                "the call's lease entry broke; confirming ownership before recording");
            read_after = match self.owner(Some(Stamp::now())).await {
                Ok(_) => self.run.unless_stopped(hold.renewed()).await,
                Err(halt) => Err(halt),
            };
        }
        self.phase = Phase::Recording(Some(hold));
        self.owner(read_after?).await
    }
}

impl Steps for RunSteps<'_> {
    fn partition(&self) -> PartitionId {
        self.run.partition
    }

    fn key(&self) -> &TaskKey {
        &self.run.key
    }

    fn attempts(&self) -> u32 {
        self.run.attempts
    }

    fn retried<'a>(
        &'a mut self,
        operation: &'static str,
        write: bool,
        step: &'a mut (dyn FnMut() -> BoxFuture<'a, Result<(), StepError>> + Send),
    ) -> BoxFuture<'a, Result<(), Halt>> {
        Box::pin(self.store_step(operation, write, step))
    }

    fn as_owner(&mut self) -> BoxFuture<'_, Result<(), Halt>> {
        Box::pin(async move { self.owner_of_outcome().await.map(|_epoch| ()) })
    }
}
