//! Remote workers ([`crate::remote`]): every node takes them, and a quarter of the default
//! queue's plain tasks are of a type ([`REMOTE_TYPE`]) no node has a handler of its own for.
//! A connected worker of the type runs them; while none is, they run on the handler of every
//! other type (the even nodes) or wait (the odd ones, until the heal). The node's call of such
//! a task is logged as a local call is ([`SimRemoteCall`]), so every check of calls holds for
//! remote ones: no two calls of one orderingId at once (a claim lives within its call), order,
//! limits, nothing early, a success not made again.
//!
//! Each node has its workers ([`SimWorker`], two claims at a time each), which poll, heartbeat
//! every third of the claim's time to live and complete with the task's plan (a result or error
//! naming the claim). Their faults: a worker crashes (a task planned to panic makes it crash,
//! as do rare random crashes) and comes back under a new name, its claims left to expire; a
//! worker stalls past its claims' expiry (as under SIGSTOP) and then completes; a call that
//! hangs (its heartbeats go on until the node's execution timeout ends the claim); a
//! completion sent twice; and whatever the node's faults do to the claims: a revoke or a
//! rebuild ends them with their calls while workers still run, a paused node's claims expire
//! before their heartbeats come. The checks:
//!
//! - a completion or heartbeat that comes once the claim's expiry (as the worker last heard
//!   it) has passed is refused, as is a second completion of one claim;
//! - nothing a refused completion carried is recorded: every result, final error and attempt
//!   error that names a claim names one whose completion was accepted;
//! - over the default run, each kind of fault and refusal happened ([`Coverage`]).

use scheduler_client::TaskKey;

use super::*;
use crate::handler::{TaskContext, TaskError, TaskHandler};
use crate::remote::{
    ClaimView, Completion, CompletionRefused, RemoteCall, RemoteWorkers, WorkerPoll,
};
use crate::settings::WorkersSettings;

/// The type only remote workers run (or the handler of every other type, while none is
/// connected).
pub(super) const REMOTE_TYPE: &str = "remote-type";

/// Claims live two seconds unless heartbeats come; a worker counts as connected for a second after
/// its last poll.
pub(super) fn workers_settings() -> WorkersSettings {
    WorkersSettings {
        claim_ttl: Duration::from_secs(2),
        max_wait: Duration::from_secs(2),
        worker_ttl: Duration::from_secs(1),
        ..WorkersSettings::default()
    }
}

/// How many workers each node has, and how many claims each runs at once.
const WORKERS_PER_NODE: usize = 2;
const CLAIMS_PER_WORKER: usize = 2;

/// What happened to remote calls in a seed (summed over the run: each must have happened).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Coverage {
    pub(super) claims: u64,
    pub(super) accepted: u64,
    /// Completions refused because the claim expired.
    pub(super) refused_expired: u64,
    /// Completions refused because the claim ended with its call (a revoke, a rebuild, a
    /// fence, the execution timeout).
    pub(super) refused_call_ended: u64,
    /// Second completions of one claim (refused).
    pub(super) duplicates: u64,
    pub(super) heartbeats_refused: u64,
    pub(super) crashes: u64,
    pub(super) stalls: u64,
}

impl Coverage {
    pub(super) fn add(&mut self, other: Coverage) {
        self.claims += other.claims;
        self.accepted += other.accepted;
        self.refused_expired += other.refused_expired;
        self.refused_call_ended += other.refused_call_ended;
        self.duplicates += other.duplicates;
        self.heartbeats_refused += other.heartbeats_refused;
        self.crashes += other.crashes;
        self.stalls += other.stalls;
    }

    /// The kinds of event that never happened.
    pub(super) fn missing(&self) -> Vec<&'static str> {
        let kinds = [
            ("claims", self.claims),
            ("accepted completions", self.accepted),
            ("completions refused after expiry", self.refused_expired),
            (
                "completions refused after their call ended",
                self.refused_call_ended,
            ),
            ("second completions", self.duplicates),
            ("heartbeats refused", self.heartbeats_refused),
            ("worker crashes", self.crashes),
            ("worker stalls", self.stalls),
        ];
        (kinds.into_iter())
            .filter(|(_, n)| *n == 0)
            .map(|(kind, _)| kind)
            .collect()
    }
}

/// A completion or heartbeat a worker sent, for the checks.
#[derive(Debug, Clone)]
pub(super) struct Sent {
    pub(super) claim_id: String,
    pub(super) key: TaskKey,
    /// A heartbeat (else a completion).
    pub(super) heartbeat: bool,
    /// A second completion of the claim.
    pub(super) duplicate: bool,
    pub(super) at: DateTime<Utc>,
    /// The claim's expiry as the worker last heard it.
    pub(super) known_expiry: DateTime<Utc>,
    pub(super) answer: Result<(), CompletionRefused>,
}

/// What the workers of every node share with the checks.
#[derive(Default)]
pub(super) struct Log {
    pub(super) sent: Vec<Sent>,
    pub(super) coverage: Coverage,
}

impl Shared {
    fn remote_log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.remote.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The node's call of a remote task, logged as a local call is: from the offer until the
/// claim's end (the call holds the orderingId's turn, its lease and its slot meanwhile).
pub(super) struct SimRemoteCall {
    pub(super) node: usize,
    pub(super) shared: Arc<Shared>,
    pub(super) call: RemoteCall,
}

impl TaskHandler for SimRemoteCall {
    async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        let (index, _) = self.shared.log_call(self.node, task);
        let _end = executor::EndOnDrop {
            shared: Arc::clone(&self.shared),
            index,
        };
        let result = self.call.execute(task, ctx).await;
        if result.is_ok() {
            self.shared.succeeded(index);
        }
        result
    }

    async fn dead_lettered(&self, letter: &crate::store::DeadLetter) {
        self.shared.heard_of_dead_letter(letter.task.key());
    }
}

/// A worker process of one node: it polls for remote tasks, two claims at a time, and runs
/// each to its plan; at times it crashes (and comes back under a new name) or stalls.
pub(super) struct SimWorker {
    pub(super) node: usize,
    pub(super) index: usize,
    pub(super) workers: RemoteWorkers,
    pub(super) shared: Arc<Shared>,
    /// The node's process: a paused node answers nothing until it runs again.
    pub(super) pause: Pause,
    pub(super) rng: fastrand::Rng,
}

/// One generation of a worker process: crashed (its claims die with it), and stalled until.
#[derive(Clone)]
struct Process {
    crashed: tokio::sync::watch::Sender<bool>,
    stalled_until: Arc<Mutex<Instant>>,
}

impl Process {
    fn new() -> Process {
        Process {
            crashed: tokio::sync::watch::channel(false).0,
            stalled_until: Arc::new(Mutex::new(Instant::now())),
        }
    }

    async fn crashed(&self) {
        let mut crashed = self.crashed.subscribe();
        let _ = crashed.wait_for(|c| *c).await;
    }

    /// Waits while the process is stalled.
    async fn running(&self) {
        let until = *self
            .stalled_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        tokio::time::sleep_until(until).await;
    }
}

impl SimWorker {
    /// Polls and runs claims until the seed ends.
    pub(super) async fn run(mut self) {
        let mut generation = 0u32;
        loop {
            let process = Process::new();
            let slots = Arc::new(tokio::sync::Semaphore::new(CLAIMS_PER_WORKER));
            let name = format!("w{}.{}-{generation}", self.node, self.index);
            loop {
                let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
                    return;
                };
                process.running().await;
                self.pause.resumed().await;
                let poll = WorkerPoll {
                    worker: name.clone(),
                    types: vec![REMOTE_TYPE.to_string()],
                    capacity: 1,
                    wait_ms: Some(2_000),
                };
                let claims = self.workers.poll(poll).await;
                if let Some(claim) = claims.into_iter().next() {
                    self.shared.remote_log().coverage.claims += 1;
                    let run = ClaimRun {
                        claim,
                        workers: self.workers.clone(),
                        shared: Arc::clone(&self.shared),
                        pause: self.pause.clone(),
                        process: process.clone(),
                        rng: fastrand::Rng::with_seed(self.rng.u64(..)),
                    };
                    tokio::spawn(async move {
                        run.run().await;
                        drop(slot);
                    });
                }
                match self.rng.u32(0..1000) {
                    // A random crash: every claim of this process is left to expire.
                    0..=4 => {
                        let _ = process.crashed.send(true);
                        self.shared.remote_log().coverage.crashes += 1;
                    }
                    // A stall past the claims' expiry (SIGSTOP, a long GC pause).
                    5..=14 => {
                        let ttl = workers_settings().claim_ttl;
                        let stall = ttl.mul_f64(1.2 + self.rng.f64() * 2.0);
                        *(process.stalled_until.lock()).unwrap_or_else(PoisonError::into_inner) =
                            Instant::now() + stall;
                        self.shared.remote_log().coverage.stalls += 1;
                    }
                    _ => {}
                }
                if *process.crashed.borrow() {
                    break;
                }
            }
            // Back after a while, under a new name (a new process).
            tokio::time::sleep(Duration::from_millis(self.rng.u64(300..3_000))).await;
            generation += 1;
        }
    }
}

/// One claim, run by its worker process to the task's plan.
struct ClaimRun {
    claim: ClaimView,
    workers: RemoteWorkers,
    shared: Arc<Shared>,
    pause: Pause,
    process: Process,
    rng: fastrand::Rng,
}

impl ClaimRun {
    async fn run(mut self) {
        let Some(key) = self.key() else {
            tracing::warn!(claim = ?self.claim, "sim: a claim of a task never produced");
            return;
        };
        let id = self.claim.claim_id.clone();
        let plan = self.shared.plan_of(&key);
        // The node logged its call of this claim before the offer: the calls before it.
        let previous = (self.shared.calls().iter())
            .filter(|c| c.key == key)
            .count()
            .saturating_sub(1);
        let ttl = Duration::from_millis(self.claim.ttl_ms);
        let mut expiry = parse_time(&self.claim.expires_at);
        let work = match plan {
            Plan::Succeed(work) => Some(work),
            Plan::FailTimes(_) | Plan::FailAlways => Some(Duration::from_millis(20)),
            Plan::HangOnce if previous == 0 => None,
            _ => Some(Duration::ZERO),
        };
        let done_at = work.map(|w| Instant::now() + w);
        // Work, with a heartbeat every third of the time to live.
        loop {
            let beat = Instant::now() + ttl / 3;
            let wake = done_at.map_or(beat, |d| d.min(beat));
            tokio::select! {
                () = self.process.crashed() => return,
                () = tokio::time::sleep_until(wake) => {}
            }
            if done_at.is_some_and(|d| d <= Instant::now()) {
                break;
            }
            tokio::select! {
                () = self.process.crashed() => return,
                () = self.process.running() => {}
            }
            self.pause.resumed().await;
            let at = self.shared.clock.now();
            let answer = self.workers.heartbeat(&id);
            let ended = answer.is_err();
            self.log(
                &key,
                true,
                false,
                at,
                expiry,
                answer.map(|next| expiry = next),
            );
            // Its claim ended: the worker gives the task up.
            if ended {
                self.shared.remote_log().coverage.heartbeats_refused += 1;
                return;
            }
        }
        // A task planned to panic crashes the worker, the first time.
        if plan == Plan::PanicOnce && previous == 0 {
            let _ = self.process.crashed.send(true);
            self.shared.remote_log().coverage.crashes += 1;
            return;
        }
        let completion = match plan {
            Plan::FailTimes(n) if previous < n => self.retry(&id),
            Plan::FailAlways => self.retry(&id),
            Plan::GiveUp => Completion::Invalid {
                error: format!("planned give-up (claim {id})"),
            },
            _ => Completion::Success {
                result: Some(serde_json::json!({ "claim": id })),
            },
        };
        tokio::select! {
            () = self.process.crashed() => return,
            () = self.process.running() => {}
        }
        self.pause.resumed().await;
        let at = self.shared.clock.now();
        let answer = self.workers.complete(&id, completion.clone());
        {
            let mut log = self.shared.remote_log();
            match &answer {
                Ok(()) => log.coverage.accepted += 1,
                Err(CompletionRefused::Ended(crate::remote::ClaimEnd::Expired)) => {
                    log.coverage.refused_expired += 1;
                }
                Err(_) => log.coverage.refused_call_ended += 1,
            }
        }
        let accepted = answer.is_ok();
        self.log(&key, false, false, at, expiry, answer);
        // At times the completion is sent again (a client's retry after a lost answer).
        if accepted && self.rng.u32(0..20) == 0 {
            let at = self.shared.clock.now();
            let again = self.workers.complete(&id, completion);
            self.shared.remote_log().coverage.duplicates += 1;
            self.log(&key, false, true, at, expiry, again);
        }
    }

    fn retry(&mut self, id: &str) -> Completion {
        Completion::Retry {
            error: format!("planned failure (claim {id})"),
            retry_after_ms: self.rng.bool().then(|| self.rng.u64(50..500)),
        }
    }

    /// The produced task the claim names (the scheduled time the worker reads is rounded to
    /// milliseconds; a redriven dead letter keeps its uniqueness key at a new time).
    fn key(&self) -> Option<TaskKey> {
        let task = &self.claim.task;
        let at = parse_time(&task.scheduled_time);
        let plans = self
            .shared
            .plans
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        plans
            .keys()
            .find(|k| {
                k.ordering_id == task.ordering_id
                    && k.uniqueness_key == task.uniqueness_key
                    && (k.scheduled_time - at).abs() < TimeDelta::milliseconds(1)
            })
            .cloned()
    }

    fn log(
        &self,
        key: &TaskKey,
        heartbeat: bool,
        duplicate: bool,
        at: DateTime<Utc>,
        known_expiry: DateTime<Utc>,
        answer: Result<(), CompletionRefused>,
    ) {
        self.shared.remote_log().sent.push(Sent {
            claim_id: self.claim.claim_id.clone(),
            key: key.clone(),
            heartbeat,
            duplicate,
            at,
            known_expiry,
            answer,
        });
    }
}

fn parse_time(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The claim a stored text names (`(claim <id>)` in an error), if any.
fn claim_named(text: &str) -> Option<&str> {
    let from = text.find("(claim ")? + "(claim ".len();
    let rest = &text[from..];
    Some(&rest[..rest.find(')')?])
}

impl World {
    /// Node `node`'s remote workers: the registry its handlers call through, and its worker
    /// processes.
    pub(super) fn start_remote_workers(
        &mut self,
        node: usize,
        pause: &Pause,
        clock: Arc<PausableClock>,
    ) -> RemoteWorkers {
        let workers = RemoteWorkers::new(workers_settings(), clock);
        for index in 0..WORKERS_PER_NODE {
            let worker = SimWorker {
                node,
                index,
                workers: workers.clone(),
                shared: Arc::clone(&self.shared),
                pause: pause.clone(),
                rng: fastrand::Rng::with_seed(self.rng.u64(..)),
            };
            tokio::spawn(worker.run());
        }
        workers
    }

    /// The remote calls' checks (see the module's doc).
    pub(super) fn check_remote(&mut self) {
        let log = self.shared.remote_log();
        let v = &mut self.violations;
        let mut accepted = BTreeSet::new();
        for sent in &log.sent {
            let what = if sent.heartbeat {
                "heartbeat"
            } else {
                "completion"
            };
            match &sent.answer {
                Ok(()) if sent.duplicate => v.push(format!(
                    "remote: claim {} of {} completed twice",
                    sent.claim_id, sent.key
                )),
                Ok(()) if sent.at >= sent.known_expiry => v.push(format!(
                    "remote: a {what} of claim {} of {} at {} accepted after its expiry {}",
                    sent.claim_id, sent.key, sent.at, sent.known_expiry
                )),
                Ok(()) if !sent.heartbeat => {
                    accepted.insert(sent.claim_id.clone());
                }
                Err(CompletionRefused::Ended(crate::remote::ClaimEnd::Expired))
                    if sent.at < sent.known_expiry =>
                {
                    v.push(format!(
                        "remote: a {what} of claim {} of {} at {} refused as expired before its expiry {}",
                        sent.claim_id, sent.key, sent.at, sent.known_expiry
                    ));
                }
                _ => {}
            }
        }
        drop(log);
        let mut named = Vec::new();
        for ((_, key), status) in self.store.statuses() {
            if let Some(claim) = (status.result.as_ref())
                .and_then(|r| r.get("claim"))
                .and_then(serde_json::Value::as_str)
            {
                named.push((key.clone(), "result", claim.to_string()));
            }
            if let Some(claim) = status.last_error.as_deref().and_then(claim_named) {
                named.push((key, "final error", claim.to_string()));
            }
        }
        for (key, history) in self.store.attempt_histories() {
            for attempt in history {
                if let Some(claim) = attempt.error.as_deref().and_then(claim_named) {
                    named.push((key.clone(), "attempt", claim.to_string()));
                }
            }
        }
        for (key, what, claim) in named {
            if !accepted.contains(&claim) {
                self.violations.push(format!(
                    "remote: {key}'s {what} recorded claim {claim}'s outcome, whose completion was refused"
                ));
            }
        }
    }

    /// Whether remote task `key` may have failed though its plan succeeds: its attempts ran out,
    /// each ended with its claim (a worker that crashed or stalled on it, or whose node paused:
    /// a task that keeps killing its workers is dead-lettered), failed as its plan says, or
    /// succeeded (its final status cut off by a fault), and not all failed as planned. (A
    /// task planned to fail twice of three attempts fails if its workers' faults take the
    /// third: seed 323 once the rate's units were shared.) A claim refused before its expiry
    /// is a violation of its own ([`World::check_remote`]).
    pub(super) fn failed_by_its_workers(&self, key: &TaskKey) -> bool {
        if !self.produced.remote.contains(key) {
            return false;
        }
        let histories = self.store.attempt_histories();
        let Some((_, history)) = histories.iter().find(|(k, _)| k == key) else {
            return false;
        };
        let retries = settings().max_task_retries as usize;
        // (An attempt that succeeded but whose final status a fault cut off counts too.)
        let error = |a: &crate::store::AttemptRecord, start: &str| {
            (a.error.as_deref()).is_some_and(|e| e.starts_with(start))
        };
        let claim_ended = |a| error(a, "remote worker: the claim");
        let planned = |a| error(a, "planned failure");
        let succeeded =
            |a: &crate::store::AttemptRecord| a.outcome == crate::store::AttemptOutcome::Succeeded;
        history.len() > retries
            && (history.iter()).all(|a| succeeded(a) || claim_ended(a) || planned(a))
            && (history.iter()).any(|a| !planned(a))
    }

    /// What happened to remote calls in this seed.
    pub(super) fn remote_coverage(&self) -> Coverage {
        self.shared.remote_log().coverage
    }
}
