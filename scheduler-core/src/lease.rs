//! Running-task leases: one run at a time per orderingId across partition trees.
//!
//! A partition tree records in Cassandra which orderingIds it is running a call for (one lease
//! row per tree, [`crate::store::LeaseStore`]), renews the row while any call runs, and releases
//! it when they are done. A newer tree of the same partition, on this node or another, reads
//! the leases of earlier trees once it has claimed the partition and does not start a task of
//! an orderingId listed there until that entry is gone (released, or expired because its holder
//! died or was paused and stopped renewing).
//!
//! Why this is enough (the order of the steps is the invariant):
//! - a holder writes its entry **before** it confirms ownership with an epoch read that began
//!   after the write, and only then calls the handler;
//! - a new tree reads the leases only **after** its claim (which raises the epoch) completed.
//!
//! So either the old tree's entry was written before the new tree's read (the new tree sees it
//! and waits), or its ownership read began after the claim (it sees the new epoch, is fenced and
//! does not call). A call that outlives its tree (a drain that timed out, a rebuild) keeps its
//! entry, and the row stays renewed, until the call returns.
//!
//! One row per tree rather than per task: an entry is added with one write that many starts
//! share, and removals are coalesced (written within 200 ms, or at once when the tree stops), so
//! a lease costs about one write per batch of starts instead of two per task.
//!
//! Over 500 lines: one protocol, the running-task lease: its writer, its holds, the read of an
//! orderingId's predecessors.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::clock::Stamp;
use crate::epoch::EpochCell;
use crate::store::{LeaseRecord, LeaseStore, PartitionId, StoreResult};
use scheduler_client::TaskKey;

/// How often a tree waiting for an earlier tree's lease reads the leases again.
const PREDECESSOR_POLL: Duration = Duration::from_millis(500);
/// Waits between failed lease writes.
const WRITE_RETRY: Duration = Duration::from_millis(250);
/// How soon finished calls leave the written lease (coalescing their removals).
const REMOVAL_FLUSH: Duration = Duration::from_millis(200);

/// What a call's context sees of its tree's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseState {
    /// The newest change of the running set that is durable.
    written: u64,
    /// The lease is live at least until then (start of the last successful write plus the TTL;
    /// the holder's own monotonic clock, so a pause only makes it more conservative).
    pub valid_until: Option<Instant>,
    /// A renewal did not succeed in time: an earlier tree's call may have been taken over.
    pub lost: bool,
}

/// The running-task lease of one partition tree. Cheap to clone; clones share the lease.
#[derive(Clone)]
pub struct TreeLease {
    inner: Arc<Inner>,
}

struct Inner {
    partition: PartitionId,
    holder: String,
    node: String,
    epoch: EpochCell,
    /// Whether the tree inherited its epoch (a rebuilt tree, which follows the one it replaced)
    /// rather than claimed the partition itself.
    inherited: bool,
    store: Arc<dyn LeaseStore>,
    ttl: Duration,
    state: Mutex<Running>,
    /// Wakes the writer: the running set grew, or the tree closed.
    wake: Notify,
    written: watch::Sender<LeaseState>,
    /// Woken after each update of `written`. Holds wait on this rather than on the watch,
    /// which wakes its waiters in a random order (the simulation's replays must be exact).
    updated: Notify,
    /// Earlier trees' entries, read once after the claim.
    predecessors: tokio::sync::Mutex<Predecessors>,
    traces: Mutex<EarlierTraces>,
}

#[derive(Default)]
struct Running {
    /// orderingId → the key of the task whose call runs.
    calls: BTreeMap<String, String>,
    /// Bumped by every change of `calls`.
    version: u64,
    /// The tree stopped: release the lease once the last call returns.
    closed: bool,
    /// orderingId → when the lease row listing it first finished being written (it has been in
    /// the row continuously since).
    durable: BTreeMap<String, Stamp>,
}

#[derive(Default)]
struct Predecessors {
    read_at: Option<Instant>,
    blocked: HashSet<String>,
}

/// What earlier trees left that may have attempts recorded (see
/// [`TreeLease::may_have_earlier_attempts`]).
#[derive(Default)]
struct EarlierTraces {
    /// The orderingIds blocked at the first read of the leases, right after the claim: their
    /// calls in earlier trees may record attempts until they end.
    at_claim: Option<HashSet<String>>,
    /// When the tree's start-up reads were made (after `at_claim`).
    started_at: Option<DateTime<Utc>>,
    /// Whether the tree claimed the partition first (epoch 1, not inherited by a rebuilt tree):
    /// no tree came before it, so none recorded an attempt (every tree claims the partition, or
    /// inherits the claim of the tree it replaces, since schema version 1).
    first_claim: bool,
}

/// How far an earlier tree's node may have called a task ahead of this one's clock (their
/// clocks' skew): a task due later than this after the tree started was not called by an
/// earlier tree.
const EARLIER_CALL_MARGIN: TimeDelta = TimeDelta::seconds(10);

/// One orderingId's entry in the lease, held by a running call. Dropping it takes the entry out
/// (written within `REMOVAL_FLUSH`, or at once if the tree has stopped).
pub struct LeaseHold {
    inner: Arc<Inner>,
    ordering_id: String,
    state: watch::Receiver<LeaseState>,
    durable_since: Stamp,
}

impl LeaseHold {
    /// Since when the entry has been in the written lease: an ownership read that began after
    /// this may confirm the call (see the module docs).
    pub fn durable_since(&self) -> Stamp {
        self.durable_since
    }

    /// Whether the entry has been live without a break since [`Self::durable_since`]. Checks
    /// made since then hold only while it is: once the lease lapsed (a pause of the process,
    /// failed renewals), a newer tree may have taken the task over, even if the lease was
    /// written again since.
    pub fn unbroken(&self) -> bool {
        let live = self
            .state
            .borrow()
            .valid_until
            .is_some_and(|until| Instant::now() < until);
        live && self.inner.lock().durable.get(&self.ordering_id) == Some(&self.durable_since)
    }

    /// Whether a call may begin on the entry: unbroken (see [`Self::unbroken`]), with at least
    /// a renewal period left. A healthy entry always has: it is renewed a period before it
    /// would have only that much left. One closer to lapsing has missed its renewal (a pause of
    /// the process cut it, the store is failing): it would lapse during the call, and a newer
    /// tree could begin its own call of the task beside it.
    pub fn callable(&self) -> bool {
        let renew_every = self.inner.renewal_period();
        let lasting =
            self.state.borrow().valid_until.is_some_and(|until| {
                until.saturating_duration_since(Instant::now()) >= renew_every
            });
        lasting && self.unbroken()
    }

    /// Once the entry broke (see [`Self::unbroken`]), waits until it is written again and live
    /// and answers with a stamp taken then: an ownership read that begins after it confirms the
    /// tree again (a newer tree claiming later finds the entry and waits for it). `None` at
    /// once if the entry never broke: the checks made before still hold.
    pub async fn renewed(&mut self) -> Option<Stamp> {
        if self.unbroken() {
            return None;
        }
        loop {
            let updated = self.inner.updated.notified();
            let live = self
                .state
                .borrow()
                .valid_until
                .is_some_and(|until| Instant::now() < until);
            let durable = self.inner.lock().durable.get(&self.ordering_id).copied();
            if let (true, Some(since)) = (live, durable) {
                self.durable_since = since;
                return Some(Stamp::now());
            }
            updated.await;
        }
    }

    /// What the call sees of the lease.
    pub fn watch(&self) -> watch::Receiver<LeaseState> {
        self.state.clone()
    }
}

impl Drop for LeaseHold {
    fn drop(&mut self) {
        let mut running = self.inner.lock();
        if running.calls.remove(&self.ordering_id).is_some() {
            running.version += 1;
            drop(running);
            self.inner.wake.notify_one();
        }
    }
}

impl TreeLease {
    /// Starts keeping the lease of a new tree of `partition` on node `node`; `epoch` is the
    /// tree's ownership epoch (recorded with the lease for operators): already set for a
    /// rebuilt tree, which inherits it, still 0 for a tree whose claim is to come (the tree's
    /// ownership claims only once it runs, after the lease is started). The writer runs on the
    /// current tokio runtime until the tree is closed and its last call returned.
    pub fn start(
        partition: PartitionId,
        node: &str,
        epoch: EpochCell,
        store: Arc<dyn LeaseStore>,
        ttl: Duration,
    ) -> TreeLease {
        static TREES: AtomicU64 = AtomicU64::new(1);
        let holder = format!("{node}#{}", TREES.fetch_add(1, Ordering::SeqCst));
        let (written, _) = watch::channel(LeaseState {
            written: 0,
            valid_until: None,
            lost: false,
        });
        let inner = Arc::new(Inner {
            partition,
            holder,
            node: node.to_string(),
            inherited: epoch.get() > 0,
            epoch,
            store,
            ttl,
            state: Mutex::new(Running::default()),
            wake: Notify::new(),
            written,
            updated: Notify::new(),
            predecessors: tokio::sync::Mutex::new(Predecessors::default()),
            traces: Mutex::default(),
        });
        tokio::spawn(write_lease(Arc::clone(&inner)));
        TreeLease { inner }
    }

    /// Records that a call of `ordering_id` (task `task`) is about to run; resolves once that
    /// is durable (the writer retries failed writes until then). Hold the returned entry for as
    /// long as the call runs.
    pub async fn hold(&self, ordering_id: &str, task: &str) -> LeaseHold {
        let state = self.inner.written.subscribe();
        let version = {
            let mut running = self.inner.lock();
            running
                .calls
                .insert(ordering_id.to_string(), task.to_string());
            running.version += 1;
            running.version
        };
        // From here on a drop of the hold takes the entry out again.
        let mut hold = LeaseHold {
            inner: Arc::clone(&self.inner),
            ordering_id: ordering_id.to_string(),
            state: state.clone(),
            durable_since: Stamp::now(),
        };
        self.inner.wake.notify_one();
        loop {
            let updated = self.inner.updated.notified();
            if self.inner.written.borrow().written >= version {
                break;
            }
            updated.await;
        }
        // An orderingId already in the written row (its previous call ended moments ago) needs
        // no new write; a fresh entry was written just now.
        if let Some(since) = self.inner.lock().durable.get(ordering_id) {
            hold.durable_since = *since;
        }
        hold
    }

    /// Resolves once no earlier tree of the partition holds a live lease entry for
    /// `ordering_id`. Call it only once this tree's claim completed (see the module docs).
    pub async fn wait_for_predecessors(&self, ordering_id: &str) -> StoreResult<()> {
        while self.runs_in_earlier_tree(ordering_id).await? {
            tokio::time::sleep(PREDECESSOR_POLL).await;
        }
        Ok(())
    }

    /// Whether an earlier tree of the partition may still call a task of `ordering_id`: its
    /// entry was listed at this tree's last read of the leases (made again if it is older than
    /// the poll period). Call it only once this tree's claim completed: an earlier tree that
    /// writes an entry after the first read is fenced before it calls.
    pub async fn runs_in_earlier_tree(&self, ordering_id: &str) -> StoreResult<bool> {
        let mut predecessors = self.inner.predecessors.lock().await;
        let stale = match predecessors.read_at {
            None => true,
            Some(at) => {
                predecessors.blocked.contains(ordering_id) && at.elapsed() >= PREDECESSOR_POLL
            }
        };
        if stale {
            self.read_predecessors(&mut predecessors).await?;
        }
        Ok(predecessors.blocked.contains(ordering_id))
    }

    /// Reads earlier trees' lease entries if no read was made yet. Call it once the claim
    /// completed and before reading the retrying tasks ([`Self::started_with`]).
    pub async fn read_predecessors_once(&self) -> StoreResult<()> {
        let mut predecessors = self.inner.predecessors.lock().await;
        if predecessors.read_at.is_none() {
            self.read_predecessors(&mut predecessors).await?;
        }
        Ok(())
    }

    async fn read_predecessors(&self, predecessors: &mut Predecessors) -> StoreResult<()> {
        let leases = self.inner.store.leases(self.inner.partition).await?;
        predecessors.blocked = leases
            .into_iter()
            .filter(|(holder, _)| *holder != self.inner.holder)
            .flat_map(|(_, lease)| lease.running.into_iter().map(|(o, _)| o))
            .collect();
        predecessors.read_at = Some(Instant::now());
        let mut traces = self.inner.traces();
        if traces.at_claim.is_none() {
            traces.at_claim = Some(predecessors.blocked.clone());
            traces.first_claim = !self.inner.inherited && self.inner.epoch.get() == 1;
        }
        drop(traces);
        if !predecessors.blocked.is_empty() {
            debug!(
                partition = self.inner.partition,
                blocked = predecessors.blocked.len(),
                "orderingIds still running in an earlier tree of this partition"
            );
        }
        Ok(())
    }

    /// Records when the tree's start-up reads were made, after
    /// [`Self::read_predecessors_once`].
    pub fn started_at(&self, at: DateTime<Utc>) {
        self.inner.traces().started_at = Some(at);
    }

    /// Whether an earlier tree may have recorded attempts of `key`: none if the tree's claim
    /// was the partition's first; else a task of an orderingId still running in an earlier
    /// tree at the claim (its call may record attempts until it ends), or one due before the
    /// tree started (an earlier tree may have called it). A task due after that was not called
    /// by an earlier tree; one called by an earlier tree after the claim was fenced. (Unknown:
    /// yes.)
    pub fn may_have_earlier_attempts(&self, key: &TaskKey) -> bool {
        let traces = self.inner.traces();
        match (&traces.at_claim, traces.started_at) {
            (Some(_), Some(_)) if traces.first_claim => false,
            (Some(at_claim), Some(started_at)) => {
                at_claim.contains(&key.ordering_id)
                    || key.scheduled_time < started_at + EARLIER_CALL_MARGIN
            }
            _ => true,
        }
    }

    /// Whether an earlier tree's lease listed `ordering_id` at this tree's claim (its call of a
    /// task of it may record an outcome until it ends); yes if the leases were not read yet.
    pub fn listed_at_claim(&self, ordering_id: &str) -> bool {
        match &self.inner.traces().at_claim {
            Some(at_claim) => at_claim.contains(ordering_id),
            None => true,
        }
    }

    /// The lease holder's name: the tree's, unique in the process.
    pub fn holder(&self) -> &str {
        &self.inner.holder
    }

    /// The tree stopped: release the lease once the calls still running return.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.inner.wake.notify_one();
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Running> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn traces(&self) -> MutexGuard<'_, EarlierTraces> {
        self.traces.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    /// How often the writer renews the lease while calls run: a third of the TTL. A call begins
    /// only on an entry with at least this much left ([`LeaseHold::callable`]).
    fn renewal_period(&self) -> Duration {
        self.ttl / 3
    }
}

/// The writer of one tree's lease: writes the running set at once when it grows (a call waits for
/// that), within `REMOVAL_FLUSH` when it only shrinks (so a node that dies leaves few finished
/// calls listed), renews it every third of the TTL while calls run, and releases it when the tree
/// has closed and no call runs.
async fn write_lease(inner: Arc<Inner>) {
    let renew_every = inner.renewal_period();
    let mut written_version = 0;
    let mut written: BTreeMap<String, String> = BTreeMap::new();
    let mut written_any = false;
    let mut last_write: Option<Instant> = None;
    let mut valid_until: Option<Instant> = None;
    let mut lost = false;
    loop {
        let (calls, version, closed) = {
            let running = inner.lock();
            (running.calls.clone(), running.version, running.closed)
        };
        if closed && calls.is_empty() {
            if written_any {
                if let Err(e) = inner
                    .store
                    .delete_lease(inner.partition, inner.holder.clone())
                    .await
                {
                    // It expires on its own within the TTL.
                    debug!(partition = inner.partition, error = %e, "lease not released; it will expire");
                }
            }
            return;
        }
        let now = Instant::now();
        // Only the orderingIds matter to a newer tree; the task keys are for operators.
        let grew = calls.keys().any(|o| !written.contains_key(o));
        let shrank = written.keys().any(|o| !calls.contains_key(o));
        let flush_removals_at = last_write.map_or(now, |at| at + REMOVAL_FLUSH);
        let renewal_due =
            !calls.is_empty() && valid_until.is_none_or(|v| v - inner.ttl + renew_every <= now);
        let write_now = grew || renewal_due || (shrank && (closed || flush_removals_at <= now));
        let mut retry_soon = false;
        if write_now {
            let lease = LeaseRecord {
                node: inner.node.clone(),
                epoch: inner.epoch.get(),
                running: calls.clone().into_iter().collect(),
            };
            let started = Instant::now();
            match inner
                .store
                .write_lease(inner.partition, inner.holder.clone(), lease, inner.ttl)
                .await
            {
                Ok(()) => {
                    let completed = Stamp::now();
                    {
                        let mut running = inner.lock();
                        // A row that expired before this write began held nothing meanwhile.
                        if valid_until.is_some_and(|v| started >= v) {
                            running.durable.clear();
                        }
                        running.durable.retain(|o, _| calls.contains_key(o));
                        for ordering_id in calls.keys() {
                            running
                                .durable
                                .entry(ordering_id.clone())
                                .or_insert(completed);
                        }
                    }
                    written_version = version;
                    written_any = true;
                    last_write = Some(started);
                    valid_until = Some(started + inner.ttl);
                    if calls.is_empty() {
                        lost = false;
                    }
                    written = calls;
                }
                Err(e) => {
                    warn!(partition = inner.partition, error = %e, "running-task lease not written; retrying");
                    retry_soon = true;
                }
            }
        } else if !grew && !shrank {
            // Nothing to write: what is durable is what runs.
            written_version = version;
        }
        if !lost && valid_until.is_some_and(|v| Instant::now() >= v) && !written.is_empty() {
            warn!(
                partition = inner.partition,
                "running-task lease expired before it could be renewed: its calls may run elsewhere too"
            );
            lost = true;
        }
        inner.written.send_replace(LeaseState {
            written: written_version,
            valid_until,
            lost,
        });
        inner.updated.notify_waiters();
        let now = Instant::now();
        let next = if retry_soon {
            now + WRITE_RETRY
        } else {
            let renewal = (!written.is_empty())
                .then(|| valid_until.map_or(now, |v| v - inner.ttl + renew_every));
            let removal = written
                .keys()
                .any(|o| !inner.lock().calls.contains_key(o))
                .then(|| last_write.map_or(now, |at| at + REMOVAL_FLUSH));
            renewal
                .into_iter()
                .chain(removal)
                .min()
                .unwrap_or(now + inner.ttl)
        };
        tokio::select! {
            biased;
            _ = inner.wake.notified() => {}
            _ = tokio::time::sleep_until(next) => {}
        }
    }
}
