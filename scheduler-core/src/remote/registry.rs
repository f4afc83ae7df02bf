//! The node's remote workers: who is connected and for which types, the tasks offered to them,
//! and the live claims, with their expiries. One per node, shared by its queues and its admin
//! listener; every change is made under one lock, so a claim ends exactly once (completed,
//! expired or ended with its call) and whatever comes for it after is refused.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use scheduler_client::{Task, TaskKey};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{oneshot, Notify};

use crate::clock::Clock;
use crate::handler::GroupOutcome;
use crate::settings::WorkersSettings;

/// How many ended claims are remembered, to say why a late completion is refused.
const ENDED_REMEMBERED: usize = 10_000;

/// A worker's poll: who it is, what it runs, how many tasks it takes now, how long it waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkerPoll {
    /// The worker's name (1-100 characters), unique among the node's workers.
    pub worker: String,
    /// The task types it runs (1-50, each 1-128 characters).
    pub types: Vec<String>,
    /// How many claims it takes in this answer (1-100).
    pub capacity: u32,
    /// How long to wait for a task, in milliseconds (0 to the node's `max_wait`; default 20 s).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// A claim as the worker receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimView {
    /// The claim's id: heartbeat and complete name it.
    pub claim_id: String,
    /// When it expires unless a heartbeat comes first (RFC 3339).
    pub expires_at: String,
    /// Its time to live in milliseconds: each heartbeat moves the expiry this far on.
    pub ttl_ms: u64,
    /// The attempt this call is (1 for the task's first).
    pub attempt: u32,
    /// The task's partition.
    pub partition: i32,
    /// The partition's fencing epoch held by the tree that offered it.
    pub epoch: u64,
    /// The task.
    pub task: ClaimedTask,
    /// For a group's join: the finished group (as a local join's `GroupOutcome`); else absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<ClaimedGroup>,
}

/// The task a claim names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedTask {
    /// The task's orderingId.
    pub ordering_id: String,
    /// RFC 3339, milliseconds.
    pub scheduled_time: String,
    /// Tells apart tasks of one orderingId due at one time.
    pub uniqueness_key: String,
    /// Its type: the worker's handler of it runs it.
    pub task_type: String,
    /// Its priority.
    pub priority: i32,
    /// Its data (a JSON object).
    pub task_data: Value,
    /// The key its per-key limits count it under, if any.
    pub limit_key: Option<String>,
}

impl ClaimedTask {
    fn of(task: &Task) -> ClaimedTask {
        ClaimedTask {
            ordering_id: task.ordering_id.clone(),
            scheduled_time: task
                .scheduled_time
                .to_rfc3339_opts(SecondsFormat::Millis, true),
            uniqueness_key: task.uniqueness_key.clone(),
            task_type: task.task_type.clone(),
            priority: task.priority,
            task_data: Value::Object(task.task_data.clone()),
            limit_key: task.limit_key.clone(),
        }
    }
}

/// A finished group, as its join's claim carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedGroup {
    /// The members' task type.
    pub task_type: String,
    /// The group's id.
    pub id: String,
    /// How many members it has (null if no finished member carried the total: only a
    /// fail-fast group can finish so).
    pub total: Option<u32>,
    /// The member whose failure finished a fail-fast group early, if one did.
    pub failed_by: Option<u32>,
    /// The outcome of every member that finished, by number.
    pub members: Vec<ClaimedMember>,
    /// For the sub-tasks of a task: that task, their parent.
    pub parent: Option<ClaimedTask>,
}

/// One finished member of a join's group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedMember {
    /// Its number in the group, from 1.
    pub index: u32,
    /// Its key, as `scheduler task` prints it.
    pub task: String,
    /// `completed`, `failed`, `dropped` or `cancelled`.
    pub status: String,
    /// The last attempt's error, for failed and dropped members (or why it was cancelled).
    pub error: Option<String>,
    /// The small JSON result its handler set, if any.
    pub result: Option<Value>,
    /// When its outcome was recorded (RFC 3339).
    pub finished_at: String,
}

impl ClaimedGroup {
    pub(super) fn of(group: &GroupOutcome) -> ClaimedGroup {
        ClaimedGroup {
            task_type: group.group.task_type.clone(),
            id: group.group.id.clone(),
            total: group.total,
            failed_by: group.failed_by,
            members: (group.members.iter())
                .map(|m| ClaimedMember {
                    index: m.index,
                    task: m.key.to_string(),
                    status: m.status.as_str().to_string(),
                    error: m.error.clone(),
                    result: m.result.clone(),
                    finished_at: m.finished_at.to_rfc3339_opts(SecondsFormat::Millis, true),
                })
                .collect(),
            parent: group.parent.as_ref().map(ClaimedTask::of),
        }
    }
}

/// How a worker completed a claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "outcome",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum Completion {
    /// The task succeeded; `result`, a small JSON value (16 KiB at most), is kept with it.
    Success {
        #[serde(default)]
        /// A small JSON value kept with the task (16 KiB at most).
        result: Option<Value>,
    },
    /// A transient failure: tried again (after `retryAfterMs` if given), within the retries.
    Retry {
        /// What went wrong.
        error: String,
        #[serde(default)]
        /// When to try again, in milliseconds (else the queue's backoff).
        retry_after_ms: Option<u64>,
    },
    /// The task can never succeed: a dead letter, not retried.
    Invalid {
        /// Why it can never succeed.
        error: String,
    },
}

/// Why a claim ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimEnd {
    /// Completed by its worker.
    Completed,
    /// No heartbeat within its time to live.
    Expired,
    /// Its call ended without it: the tree stopped (the partition moved, the node stops) or the
    /// call timed out.
    CallEnded(String),
}

impl std::fmt::Display for ClaimEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClaimEnd::Completed => f.write_str("the claim was completed already"),
            ClaimEnd::Expired => f.write_str(
                "the claim expired (no heartbeat within its time to live): the task runs again",
            ),
            ClaimEnd::CallEnded(why) => write!(f, "the claim ended: {why}; the task runs again"),
        }
    }
}

/// A heartbeat or completion the node refused: nothing was recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompletionRefused {
    /// The claim ended before it came.
    #[error("{0}")]
    Ended(ClaimEnd),
    /// No claim of this id is known here (never, or long ago, or before the node restarted).
    #[error(
        "no live claim {0} on this node (it ended, or the node restarted): the task runs again"
    )]
    Unknown(String),
}

/// What the admin API shows of a connected worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerView {
    /// The worker's name.
    pub worker: String,
    /// The task types it runs.
    pub types: Vec<String>,
    /// The capacity its last poll asked for.
    pub capacity: u32,
    /// When it last polled (RFC 3339).
    pub last_seen: String,
    /// Polls of it waiting now.
    pub polling: u32,
    /// Its live claims.
    pub claims: Vec<LiveClaimView>,
}

/// A live claim, as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveClaimView {
    /// The claim's id.
    pub claim_id: String,
    /// The task's key, as `scheduler task` prints it.
    pub task: String,
    /// The task's type.
    pub task_type: String,
    /// The attempt the call is.
    pub attempt: u32,
    /// When it was claimed (RFC 3339).
    pub claimed_at: String,
    /// When it expires unless a heartbeat comes first (RFC 3339).
    pub expires_at: String,
    /// When its worker last sent a heartbeat (RFC 3339); null if never.
    pub last_heartbeat: Option<String>,
}

/// A call's task, offered until a worker claims it.
pub(super) struct Offer {
    id: u64,
    pub(super) task: Task,
    pub(super) attempt: u32,
    pub(super) partition: i32,
    pub(super) epoch: u64,
    /// A join's finished group.
    group: Option<ClaimedGroup>,
    claimed: oneshot::Sender<Claimed>,
}

/// A claim as its call holds it: the id, and where its completion comes.
pub(super) struct Claimed {
    pub(super) claim_id: String,
    pub(super) completion: oneshot::Receiver<Completion>,
}

struct Worker {
    types: BTreeSet<String>,
    capacity: u32,
    last_seen: DateTime<Utc>,
    polling: u32,
}

struct Claim {
    worker: String,
    key: TaskKey,
    task_type: String,
    attempt: u32,
    claimed_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    last_heartbeat: Option<DateTime<Utc>>,
    completion: oneshot::Sender<Completion>,
}

#[derive(Default)]
struct State {
    workers: BTreeMap<String, Worker>,
    /// Offers waiting for a worker, by type, oldest first.
    offers: BTreeMap<String, VecDeque<Offer>>,
    next_offer: u64,
    claims: HashMap<String, Claim>,
    /// Claims ended lately, and why, oldest first (at most `ENDED_REMEMBERED`).
    ended: HashMap<String, ClaimEnd>,
    ended_order: VecDeque<String>,
    counts: Counts,
}

/// What happened to claims since the node started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Tasks claimed.
    pub claimed: u64,
    /// Claims completed (handed to their calls).
    pub completed: u64,
    /// Claims that expired without a heartbeat.
    pub expired: u64,
    /// Claims ended with their call (the tree stopped, or the call timed out).
    pub ended_with_call: u64,
    /// Heartbeats and completions refused.
    pub refused: u64,
}

/// The node's remote workers. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct RemoteWorkers {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Told whenever a task is offered.
    offered: Notify,
    clock: Arc<dyn Clock>,
    settings: WorkersSettings,
}

impl RemoteWorkers {
    /// No worker yet; claims live `settings.claim_ttl`, by `clock`.
    pub fn new(settings: WorkersSettings, clock: Arc<dyn Clock>) -> RemoteWorkers {
        RemoteWorkers {
            shared: Arc::new(Shared {
                state: Mutex::default(),
                offered: Notify::new(),
                clock,
                settings,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> DateTime<Utc> {
        self.shared.clock.now()
    }

    fn ttl(&self) -> TimeDelta {
        TimeDelta::from_std(self.shared.settings.claim_ttl).unwrap_or(TimeDelta::MAX)
    }

    pub(super) fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    /// The protocol's timings.
    pub fn settings(&self) -> &WorkersSettings {
        &self.shared.settings
    }

    /// Whether a worker of `task_type` is connected: polling now, or polled within the
    /// worker's time to live.
    pub fn serves(&self, task_type: &str) -> bool {
        let now = self.now();
        let fresh = TimeDelta::from_std(self.shared.settings.worker_ttl).unwrap_or(TimeDelta::MAX);
        self.lock()
            .workers
            .values()
            .any(|w| w.types.contains(task_type) && (w.polling > 0 || now - w.last_seen <= fresh))
    }

    /// Offers `task` (a join's with its finished `group`) to the workers of its type; the
    /// returned guard withdraws it when dropped, if no worker claimed it by then.
    pub(super) fn offer(
        &self,
        task: Task,
        group: Option<&GroupOutcome>,
        attempt: u32,
        (partition, epoch): (i32, u64),
    ) -> (OfferGuard, oneshot::Receiver<Claimed>) {
        let group = group.map(ClaimedGroup::of);
        let (claimed, receiver) = oneshot::channel();
        let task_type = task.task_type.clone();
        let id = {
            let mut state = self.lock();
            state.next_offer += 1;
            let id = state.next_offer;
            let offer = Offer {
                id,
                task,
                attempt,
                partition,
                epoch,
                group,
                claimed,
            };
            (state.offers.entry(task_type.clone()).or_default()).push_back(offer);
            id
        };
        self.shared.offered.notify_waiters();
        let guard = OfferGuard {
            workers: self.clone(),
            task_type,
            id,
        };
        (guard, receiver)
    }

    /// A worker's poll: the claims of tasks of its types offered now or within its wait, at
    /// most its capacity (none if the wait ends first).
    pub async fn poll(&self, poll: WorkerPoll) -> Vec<ClaimView> {
        let settings = &self.shared.settings;
        let wait = (poll.wait_ms.map(Duration::from_millis))
            .unwrap_or(Duration::from_secs(20))
            .min(settings.max_wait);
        let deadline = self.now() + TimeDelta::from_std(wait).unwrap_or(TimeDelta::MAX);
        let types: BTreeSet<String> = poll.types.iter().cloned().collect();
        let _polling = Polling::begin(self.clone(), &poll.worker, &types, poll.capacity);
        loop {
            let offered = self.shared.offered.notified();
            tokio::pin!(offered);
            offered.as_mut().enable();
            let claims = self.claim(&poll.worker, &types, poll.capacity);
            if !claims.is_empty() || self.now() >= deadline {
                return claims;
            }
            tokio::select! {
                () = offered => {}
                () = self.shared.clock.sleep_until(deadline) => {}
            }
        }
    }

    /// Claims for `worker` up to `capacity` of the oldest offers of `types`.
    fn claim(&self, worker: &str, types: &BTreeSet<String>, capacity: u32) -> Vec<ClaimView> {
        let now = self.now();
        let ttl = self.ttl();
        let mut state = self.lock();
        if let Some(w) = state.workers.get_mut(worker) {
            w.last_seen = now;
        }
        let mut claims = Vec::new();
        while claims.len() < capacity as usize {
            // The oldest offer of any of its types.
            let oldest = (types.iter())
                .filter_map(|t| {
                    state
                        .offers
                        .get(t)
                        .and_then(|q| q.front())
                        .map(|o| (o.id, t))
                })
                .min()
                .map(|(_, t)| t.clone());
            let Some(task_type) = oldest else {
                break;
            };
            let Some(offer) = state
                .offers
                .get_mut(&task_type)
                .and_then(VecDeque::pop_front)
            else {
                break;
            };
            if state.offers.get(&task_type).is_some_and(VecDeque::is_empty) {
                state.offers.remove(&task_type);
            }
            let claim_id = new_claim_id();
            let (completion, receiver) = oneshot::channel();
            let claimed = Claimed {
                claim_id: claim_id.clone(),
                completion: receiver,
            };
            // Its call ended meanwhile (the guard withdraws it just after): not claimed.
            if offer.claimed.send(claimed).is_err() {
                continue;
            }
            let expires_at = now + ttl;
            state.claims.insert(
                claim_id.clone(),
                Claim {
                    worker: worker.to_string(),
                    key: offer.task.key(),
                    task_type: task_type.clone(),
                    attempt: offer.attempt,
                    claimed_at: now,
                    expires_at,
                    last_heartbeat: None,
                    completion,
                },
            );
            state.counts.claimed += 1;
            claims.push(ClaimView {
                claim_id,
                expires_at: expires_at.to_rfc3339_opts(SecondsFormat::Millis, true),
                ttl_ms: self.shared.settings.claim_ttl.as_millis() as u64,
                attempt: offer.attempt,
                partition: offer.partition,
                epoch: offer.epoch,
                task: ClaimedTask::of(&offer.task),
                group: offer.group,
            });
        }
        claims
    }

    /// A heartbeat of `claim_id`: its new expiry, or why it is refused.
    pub fn heartbeat(&self, claim_id: &str) -> Result<DateTime<Utc>, CompletionRefused> {
        let now = self.now();
        let ttl = self.ttl();
        let mut state = self.lock();
        let live = state.live(claim_id, now)?;
        live.expires_at = now + ttl;
        live.last_heartbeat = Some(now);
        let expires_at = live.expires_at;
        let worker = live.worker.clone();
        if let Some(w) = state.workers.get_mut(&worker) {
            w.last_seen = now;
        }
        Ok(expires_at)
    }

    /// `claim_id` completed: handed to its call, which records it as it records a local call's
    /// outcome; or refused, and nothing is recorded.
    pub fn complete(
        &self,
        claim_id: &str,
        completion: Completion,
    ) -> Result<(), CompletionRefused> {
        let now = self.now();
        let mut state = self.lock();
        state.live(claim_id, now)?;
        let Some(claim) = state.end(claim_id, ClaimEnd::Completed) else {
            return Err(CompletionRefused::Unknown(claim_id.to_string()));
        };
        if claim.completion.send(completion).is_err() {
            // Its call ended in the same moment: it runs again.
            state.counts.refused += 1;
            state.remember(claim_id, ClaimEnd::CallEnded("its call ended".into()));
            return Err(CompletionRefused::Ended(ClaimEnd::CallEnded(
                "its call ended".into(),
            )));
        }
        state.counts.completed += 1;
        Ok(())
    }

    /// When `claim_id` expires (`None`: it ended).
    pub(super) fn expiry(&self, claim_id: &str) -> Option<DateTime<Utc>> {
        self.lock().claims.get(claim_id).map(|c| c.expires_at)
    }

    /// Ends `claim_id` as expired if its time is up; whether it ended (now or before).
    pub(super) fn expire_if_due(&self, claim_id: &str) -> bool {
        let now = self.now();
        let mut state = self.lock();
        match state.claims.get(claim_id) {
            Some(claim) if claim.expires_at <= now => {
                state.end(claim_id, ClaimEnd::Expired);
                state.counts.expired += 1;
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// Ends `claim_id` with its call (`why`), if it is still live.
    pub(super) fn end_with_call(&self, claim_id: &str, why: &str) {
        let mut state = self.lock();
        if state
            .end(claim_id, ClaimEnd::CallEnded(why.to_string()))
            .is_some()
        {
            state.counts.ended_with_call += 1;
        }
    }

    /// Why `claim_id` ended, if it did lately.
    pub(super) fn end_of(&self, claim_id: &str) -> Option<ClaimEnd> {
        self.lock().ended.get(claim_id).cloned()
    }

    /// The connected workers (polled within their time to live, or polling) and their claims.
    pub fn view(&self) -> Vec<WorkerView> {
        let now = self.now();
        let fresh = TimeDelta::from_std(self.shared.settings.worker_ttl).unwrap_or(TimeDelta::MAX);
        let mut state = self.lock();
        state
            .workers
            .retain(|_, w| w.polling > 0 || now - w.last_seen <= fresh * 10);
        let time = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
        let mut claims: BTreeMap<&str, Vec<LiveClaimView>> = BTreeMap::new();
        for (id, claim) in &state.claims {
            (claims.entry(claim.worker.as_str()).or_default()).push(LiveClaimView {
                claim_id: id.clone(),
                task: claim.key.to_string(),
                task_type: claim.task_type.clone(),
                attempt: claim.attempt,
                claimed_at: time(claim.claimed_at),
                expires_at: time(claim.expires_at),
                last_heartbeat: claim.last_heartbeat.map(time),
            });
        }
        (state.workers.iter())
            .map(|(name, w)| WorkerView {
                worker: name.clone(),
                types: w.types.iter().cloned().collect(),
                capacity: w.capacity,
                last_seen: time(w.last_seen),
                polling: w.polling,
                claims: claims.remove(name.as_str()).unwrap_or_default(),
            })
            .collect()
    }

    /// Tasks offered and not claimed yet, by type.
    pub fn waiting(&self) -> BTreeMap<String, usize> {
        (self.lock().offers.iter())
            .map(|(t, q)| (t.clone(), q.len()))
            .collect()
    }

    /// What happened to claims since the node started.
    pub fn counts(&self) -> Counts {
        self.lock().counts
    }
}

impl State {
    /// The live claim `claim_id`, or why a heartbeat or completion of it is refused (ending it
    /// as expired if its time is up).
    fn live(
        &mut self,
        claim_id: &str,
        now: DateTime<Utc>,
    ) -> Result<&mut Claim, CompletionRefused> {
        let expired = match self.claims.get(claim_id) {
            None => {
                self.counts.refused += 1;
                return Err(match self.ended.get(claim_id) {
                    Some(end) => CompletionRefused::Ended(end.clone()),
                    None => CompletionRefused::Unknown(claim_id.to_string()),
                });
            }
            Some(claim) => claim.expires_at <= now,
        };
        if expired {
            self.end(claim_id, ClaimEnd::Expired);
            self.counts.expired += 1;
            self.counts.refused += 1;
            return Err(CompletionRefused::Ended(ClaimEnd::Expired));
        }
        self.claims
            .get_mut(claim_id)
            .ok_or_else(|| CompletionRefused::Unknown(claim_id.to_string()))
    }

    /// Ends the live claim `claim_id` (dropping its completion's sender ends its call's wait
    /// unless it is sent first), remembering why.
    fn end(&mut self, claim_id: &str, why: ClaimEnd) -> Option<Claim> {
        let claim = self.claims.remove(claim_id)?;
        self.remember(claim_id, why);
        Some(claim)
    }

    fn remember(&mut self, claim_id: &str, why: ClaimEnd) {
        if self.ended.insert(claim_id.to_string(), why).is_none() {
            self.ended_order.push_back(claim_id.to_string());
        }
        while self.ended_order.len() > ENDED_REMEMBERED {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }
}

/// An offer withdrawn when dropped (its call ended) unless a worker claimed it.
pub(super) struct OfferGuard {
    workers: RemoteWorkers,
    task_type: String,
    id: u64,
}

impl Drop for OfferGuard {
    fn drop(&mut self) {
        let mut state = self.workers.lock();
        if let Some(queue) = state.offers.get_mut(&self.task_type) {
            queue.retain(|o| o.id != self.id);
            if queue.is_empty() {
                state.offers.remove(&self.task_type);
            }
        }
    }
}

/// A worker's poll under way: counted while it waits, so the worker is connected meanwhile.
struct Polling {
    workers: RemoteWorkers,
    worker: String,
}

impl Polling {
    fn begin(
        workers: RemoteWorkers,
        worker: &str,
        types: &BTreeSet<String>,
        capacity: u32,
    ) -> Polling {
        let now = workers.now();
        {
            let mut state = workers.lock();
            let w = state.workers.entry(worker.to_string()).or_insert(Worker {
                types: BTreeSet::new(),
                capacity,
                last_seen: now,
                polling: 0,
            });
            w.types = types.clone();
            w.capacity = capacity;
            w.last_seen = now;
            w.polling += 1;
        }
        Polling {
            workers,
            worker: worker.to_string(),
        }
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        let now = self.workers.now();
        let mut state = self.workers.lock();
        if let Some(w) = state.workers.get_mut(&self.worker) {
            w.polling = w.polling.saturating_sub(1);
            w.last_seen = now;
        }
    }
}

/// A claim id: 16 bytes from the operating system's generator, in hex (the claim is the
/// worker's right to record the task's outcome: not guessable). Falls back to the process's
/// generator if the system's fails.
fn new_claim_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        bytes = fastrand::u128(..).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
