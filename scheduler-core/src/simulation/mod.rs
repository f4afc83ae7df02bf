//! A deterministic simulation of the node core: the real actors on a paused clock, the
//! in-memory store (hour buckets, latency, unordered concurrent writes, tombstones, refused
//! oversized keys, identity records' TTL), a simulated topic and consumer group of several nodes. Each seed draws a
//! workload and faults: store errors and latency spikes, nodes joining, leaving, dropping out of
//! the group past the session timeout, and pausing their whole process past the lease TTL
//! ([`pausable_store`]; a pause may be set to spring on the node's next status or attempt
//! write, and a woken node runs on briefly before it rejoins), executor errors, panics, hangs and calls longer than the drain,
//! duplicate records, replaced records, cancels and floods, identity records aimed at a node
//! dropping out of the group, large groups, joins and schedule ticks that give up, an
//! operator who suspends orderingIds and groups and redrives dead letters ([`operator`]), and
//! a second queue every node serves beside the default one ([`queues`]), and remote workers
//! that crash, stall past their claims' expiry and complete late ([`remote`]). Then it heals
//! everything, lets the nodes finish, and checks (in every queue):
//!
//! - nothing accepted is lost: every task has the final status its plan leads to;
//! - nothing starts before its time;
//! - no two calls of one orderingId run at once, on any node, while the earlier one's lease is
//!   live (a paused process stops renewing it: its call may be taken over);
//! - per orderingId, tasks (enqueued in schedule order) first start in that order;
//! - at most `key_concurrency` (1) calls of a limit key run at once across the cluster while
//!   their node's permits are live (a third of the tasks carry one of two keys,
//!   [`workload::limit_key_of`]; a paused process's call may be joined by others once its
//!   heartbeat may have expired);
//! - nothing starts after its final status was stored, and a final status is never written
//!   again (but for a retry of the same record by its own tree);
//! - an attempt number is recorded once (a fenced tree records nothing);
//! - a call that succeeded while no fault touched its node or the store is not made again (a
//!   revoke or a rebuild lets it finish and records it);
//! - of several records of one key in one batch, the last is what runs;
//! - no tree holds more than `max_in_flight_tasks` tasks in memory;
//! - every failed or dropped task is a dead letter, its handler told of it, and no other is;
//! - tasks of a type some nodes have no handler for (a rolling deploy adding it) wait on those
//!   nodes and, once the deploy is over, run to their plan's status like any other;
//! - of an identity's chain of records (Replace, KeepTime, Debounce, a reschedule, a cancel),
//!   the last scheduled data is what its current task runs, or it is cancelled (a keepTime or
//!   debounce record arriving while its task's call runs included); of a burst of
//!   IfAbsent records, only the first one's task ever runs, a record produced once it ran
//!   included (every other seed keeps identity records with `status_ttl = "0s"`);
//! - the consumer never waits on a tree longer than `persist_timeout` for a polled batch's
//!   answer, a start-up read failing again and again included;
//! - every group's join (enqueued by the members that find it finished, consumed from the topic)
//!   runs as one task however many members triggered it, after every member's outcome, given
//!   each one's outcome and result; a fail-fast group's members may end cancelled once a member
//!   failed;
//! - each recurring schedule fires each fire time once (one run, finished) or accounts for it
//!   (an overlap skip, a late tick's catch-up), from its creation to its pause after the heal,
//!   also when the whole cluster was down for over a minute at the heal and its nodes declared
//!   the schedules again at their start, and when a tick gave up and the operator redrove it
//!   (a redriven tick runs to its end);
//! - no call of a suspended orderingId or group starts while it is suspended, and a redriven
//!   dead letter runs to its end as a new task (a group member keeping its place);
//! - remote calls ([`remote`]): no completion or heartbeat is taken after its claim's expiry,
//!   none is refused as expired before it, a claim completes once, and nothing a refused
//!   completion carried is recorded; a remote task may end failed only when each of its
//!   attempts ended with its claim (its workers crashed or stalled on it);
//! - no read steps over more than 1,000 tombstones, and the rows read per call stay bounded;
//! - at a calm end, one orderingId stuck on failing tasks does not hold up another of its
//!   partition (its tasks start within a second of their time), nor the partition's low-water
//!   mark (it passes the other's tasks while the stuck one's are still deferred).
//!
//! `cargo test -p scheduler-core simulation` runs `SIM_SEEDS` seeds (default 500) from
//! `SIM_FIRST_SEED` (default 1); a failing seed prints itself, and `SIM_SEED=n` replays it
//! exactly (`SIM_LOG=debug` adds the engine's logs, stamped with the simulated time). A long run:
//! `SIM_FIRST_SEED=501 SIM_SEEDS=20000 cargo test --release -p scheduler-core simulation`.
//!
//! Over 500 lines: the simulated world, its nodes and its steps; the workload, faults, operator and
//! checks are beside it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::{Actor, Addr};
use chrono::{DateTime, TimeDelta, Utc};
use scheduler_client::{partition_for, Task, TaskKey};
use tokio::time::Instant;

use crate::actors::topic_supervisor::{
    AssignPartitions, ProcessTaskBatch, RevokePartitions, TopicSupervisor,
};
use crate::actors::PartitionDeps;
use crate::actors::PolledTasks;
use crate::clock::{Clock, TokioClock};
use crate::in_flight::InFlightGauges;
use crate::settings::SchedulingSettings;
use crate::store::memory::MemoryStore;
use crate::store::{PartitionId, StatusRecord, TaskStatus};

mod checks;
mod executor;
mod faults;
mod groups;
mod operator;
mod pausable_store;
mod queues;
mod recurring;
mod remote;
mod runner;
mod workload;
use executor::{Call, Plan, Shared, SimExecutor};
use pausable_store::{PausableClock, Pause};

const PARTITIONS: u32 = 4;
const ORDERING_IDS: usize = 8;
const STEP: Duration = Duration::from_millis(100);
/// Faults happen in the first phase; then everything heals and the nodes finish the work.
const FAULT_PHASE: Duration = Duration::from_secs(60);
/// At most this long (a seed whose faults left one node with a long backlog needs minutes; the
/// phase ends as soon as every task has its final status).
const QUIET_PHASE: Duration = Duration::from_secs(900);
const POLL_BATCH: usize = 16;
/// The quiet phase's step at which the recurring schedules pause (they run healed until then).
const SCHEDULES_PAUSE_STEP: u32 = 100;
/// The calm end that checks one stuck orderingId does not hold up the others.
const PROBE_PHASE: Duration = Duration::from_secs(60);
const PROBE_MAX_LATENESS_MS: i64 = 1_000;
/// When, into the calm end, the stuck orderingId still has tasks deferred and the mark must
/// have passed the other orderingId's tasks (done 3 s in; the mark stays 10 s behind now and
/// moves every 5 s).
const PROBE_MARK_AFTER: Duration = Duration::from_secs(18);
/// How long after a store fault (failed or slow requests) its effects may still reach a call's
/// recording: the slowest request plus the backoff before its retry.
const STORE_FAULT_REACH: Duration = Duration::from_secs(6);

fn settings() -> SchedulingSettings {
    SchedulingSettings {
        max_in_flight_tasks: 16,
        fetch_batch_size: 16,
        max_queued_per_ordering: 4,
        backoff_factor: Duration::from_millis(200),
        max_backoff: Duration::from_secs(1),
        max_task_retries: 3,
        max_look_ahead: Duration::from_secs(10),
        prefetch_window: Duration::from_secs(2),
        persist_timeout: Duration::from_secs(3),
        drain_timeout: Duration::from_secs(2),
        lease_ttl: Duration::from_secs(3),
        executor_concurrency: 2,
        // Per limit key, across the cluster (`workload::limit_key_of`).
        key_concurrency: Some(1),
        key_rate: Some(4.0),
        key_burst: Some(2),
        execution_timeout: Duration::from_secs(10),
        ..SchedulingSettings::default()
    }
}

enum Record {
    Task(Task),
    Cancel(TaskKey),
    ByIdentity(crate::actors::IdentityOp),
}

/// The task type that the odd nodes have no handler for until the heal ("deployed" then).
const LATE_TYPE: &str = "late-type";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Membership {
    Member,
    /// Out of the group past the session timeout (its consumer stalled, its trees still run;
    /// or its whole process paused: see `Node::pause`): the group moved its partitions on.
    Paused {
        until: Instant,
    },
    /// Its process runs again after a pause, but its consumer has not yet found out that the
    /// group moved on: its trees go on until it rejoins `at`.
    Rejoining {
        at: Instant,
    },
    Gone,
}

struct Node {
    /// Each queue's topic supervisor, the default queue's first.
    topics: Vec<Addr<TopicSupervisor>>,
    /// Set while the whole process is paused (not only its consumer).
    pause: Pause,
    /// When its process paused (each pause lasts past the lease TTL).
    pauses: Vec<Instant>,
    /// Each queue's trees' in-memory counts.
    gauges: Vec<InFlightGauges>,
    membership: Membership,
    /// The log slots it owns (every queue's partitions: [`queues::slot`]).
    owned: Vec<usize>,
    positions: BTreeMap<usize, usize>,
}

/// What the workload produced, for the checks.
#[derive(Default)]
struct Produced {
    /// Each task key, its plan and the version of its last record.
    tasks: BTreeMap<TaskKey, (Plan, i64)>,
    /// Keys produced twice in one step with versions 1 and 2: every call must see 2.
    double_versions: BTreeSet<TaskKey>,
    cancelled: BTreeSet<TaskKey>,
    /// The order keys were first produced in.
    sequence: BTreeMap<TaskKey, u64>,
    /// Keys delivered again later (their last record, which wins, moved them in enqueue order).
    redelivered: BTreeSet<TaskKey>,
    /// Identities given a chain of records: the data version of the last task scheduled, and
    /// whether a cancel ended the chain.
    chains: BTreeMap<scheduler_client::TaskIdentity, (i64, bool)>,
    /// Identities given a burst of IfAbsent records: the first record's key.
    singletons: BTreeMap<scheduler_client::TaskIdentity, TaskKey>,
    /// Groups by id: their members' keys by number and whether they fail fast.
    groups: BTreeMap<String, (BTreeMap<u32, TaskKey>, bool)>,
    /// Tasks that spawn sub-tasks, and how many (a duplicate delivery says so too).
    spawns: BTreeMap<TaskKey, u32>,
    /// Each sub-task's parent, and each sub-task group's (a cancelled parent spawns nothing).
    parents: BTreeMap<TaskKey, TaskKey>,
    group_parents: BTreeMap<String, TaskKey>,
    /// Each group member's place in its group (a duplicate delivery carries it too).
    members: BTreeMap<TaskKey, scheduler_client::GroupMember>,
    /// The join tasks the nodes enqueued, by group id.
    joins: BTreeMap<String, BTreeSet<TaskKey>>,
    /// Dead letters redriven: the new task's key, and the dead one's.
    redriven: BTreeMap<TaskKey, TaskKey>,
    /// Groups whose join's first call gives up.
    failing_joins: BTreeSet<String>,
    /// Dead-lettered ticks redriven: the new tick's key, and the dead one's.
    redriven_ticks: BTreeMap<TaskKey, TaskKey>,
    /// Tasks of the type remote workers run ([`remote::REMOTE_TYPE`]).
    remote: BTreeSet<TaskKey>,
}

/// A time when a node (or, with no node, the store for every node) was disturbed by a fault:
/// a call made then may lose its recorded outcome and run again, legitimately.
struct Disturbance {
    node: Option<usize>,
    from: Instant,
    /// `None` while it lasts (a node out of the group).
    until: Option<Instant>,
}

struct World {
    rng: fastrand::Rng,
    store: MemoryStore,
    /// The second queue's keyspace ([`queues`]).
    queue_store: MemoryStore,
    shared: Arc<Shared>,
    /// Every queue's topic's partitions, by log slot ([`queues::slot`]).
    logs: Vec<Vec<Record>>,
    committed: Vec<usize>,
    nodes: Vec<Node>,
    produced: Produced,
    next_unique: u64,
    last_time: BTreeMap<String, DateTime<Utc>>,
    latency_until: Option<Instant>,
    peak_in_flight: usize,
    violations: Vec<String>,
    /// Tasks that must start on time beside a stuck orderingId.
    probes: Vec<TaskKey>,
    disturbances: Vec<Disturbance>,
    /// When the seed began: violations name times as seconds since (as the replayed logs do).
    origin: Instant,
    /// Whether the faults are over (every node added since handles every type).
    healed: bool,
    /// What the nodes enqueued (groups' joins), appended to the topic at each step.
    outbox: crate::enqueue::Outbox,
    /// The recurring schedules' story.
    recurring: recurring::Recurring,
    /// Records to produce once the clock reaches their time.
    later: Vec<(DateTime<Utc>, Record)>,
    /// The suspensions the operator made, and the watch every node's trees read them from.
    suspended: Vec<operator::Suspended>,
    suspensions: tokio::sync::watch::Sender<Arc<crate::store::Suspensions>>,
}

impl World {
    fn new(seed: u64) -> World {
        let clock = TokioClock::starting_at(
            DateTime::from_timestamp(1_900_000_000, 0).unwrap_or(DateTime::<Utc>::MIN_UTC),
        );
        // Every other seed keeps statuses and identity records forever (`status_ttl = "0s"`),
        // the others for the default week.
        let status_ttl = match seed % 2 {
            0 => Duration::ZERO,
            _ => crate::settings::CassandraSettings::default().status_ttl,
        };
        let store = (MemoryStore::new().with_unordered_writes(seed))
            .with_status_ttl(status_ttl, Arc::new(clock.clone()));
        let queue_store = (MemoryStore::new().with_unordered_writes(seed + 1))
            .with_status_ttl(status_ttl, Arc::new(clock.clone()));
        let shared = Arc::new(Shared {
            clock,
            plans: Mutex::default(),
            calls: Mutex::default(),
            dead_lettered: Mutex::default(),
            joins: Mutex::default(),
            failing_joins: Mutex::default(),
            failing_ticks: Mutex::default(),
            given_up_ticks: Mutex::default(),
            remote: Mutex::default(),
        });
        let mut world = World {
            rng: fastrand::Rng::with_seed(seed),
            store,
            queue_store,
            shared,
            logs: (0..queues::QUEUES * PARTITIONS as usize)
                .map(|_| Vec::new())
                .collect(),
            committed: vec![0; queues::QUEUES * PARTITIONS as usize],
            nodes: Vec::new(),
            produced: Produced::default(),
            next_unique: 0,
            last_time: BTreeMap::new(),
            latency_until: None,
            peak_in_flight: 0,
            violations: Vec::new(),
            probes: Vec::new(),
            disturbances: Vec::new(),
            origin: Instant::now(),
            healed: false,
            outbox: crate::enqueue::Outbox::default(),
            recurring: recurring::Recurring::default(),
            later: Vec::new(),
            suspended: Vec::new(),
            suspensions: tokio::sync::watch::channel(Arc::default()).0,
        };
        world.add_node();
        world.add_node();
        world
    }

    fn now(&self) -> DateTime<Utc> {
        self.shared.clock.now()
    }

    fn add_node(&mut self) {
        let id = self.nodes.len();
        let settings = settings();
        let pause = Pause::new();
        let store = Arc::new(self.store.with_gate(Arc::new(pause.clone())));
        let clock = Arc::new(PausableClock {
            clock: self.shared.clock.clone(),
            pause: pause.clone(),
        });
        let queue_clock = Arc::clone(&clock);
        let executor = SimExecutor {
            node: id,
            shared: Arc::clone(&self.shared),
            pause: pause.clone(),
        };
        // Until the heal, odd nodes run an older release without the late type's handler.
        let handlers = match id % 2 == 1 && !self.healed {
            true => crate::handler::Handlers::new()
                .handler(scheduler_client::DEFAULT_TASK_TYPE, executor),
            false => crate::handler::Handlers::new().fallback(executor),
        };
        let workers = self.start_remote_workers(id, &pause, Arc::clone(&clock));
        let remote = remote::SimRemoteCall {
            node: id,
            shared: Arc::clone(&self.shared),
            call: crate::remote::RemoteCall::new(workers.clone()),
        };
        let handlers = handlers.remote_through(workers, remote);
        let ticker = crate::recurring::ticker::Ticker {
            schedules: store.clone(),
            statuses: store.clone(),
            enqueuer: Arc::new(self.outbox.clone()),
            clock: clock.clone(),
            partitions: PARTITIONS,
            metrics: Arc::new(crate::metrics::Metrics::new()),
        };
        let ticker = recurring::SimTicker {
            ticker,
            shared: Arc::clone(&self.shared),
        };
        let handlers = handlers.handler(crate::recurring::TICK_TYPE, ticker);
        let (topic, gauges) = self.start_tree(id, store, handlers, clock, settings);
        let (queue_topic, queue_gauges) = self.start_queue_tree(id, &pause, queue_clock);
        self.nodes.push(Node {
            topics: vec![topic, queue_topic],
            pause,
            pauses: Vec::new(),
            gauges: vec![gauges, queue_gauges],
            membership: Membership::Member,
            owned: Vec::new(),
            positions: BTreeMap::new(),
        });
    }

    /// A queue's topic supervisor on node `id`: its store (through the node's pause), its
    /// handlers in a call pool of its limits, the node's clock; and its trees' in-memory counts.
    fn start_tree(
        &self,
        id: usize,
        store: Arc<MemoryStore>,
        handlers: crate::handler::Handlers,
        clock: Arc<PausableClock>,
        settings: SchedulingSettings,
    ) -> (Addr<TopicSupervisor>, InFlightGauges) {
        let node = format!("sim-node-{id}");
        let enqueuer = Arc::new(self.outbox.clone());
        let deps = PartitionDeps::builder(
            &node, store, handlers, settings, clock, enqueuer, PARTITIONS,
        )
        .suspensions(self.suspensions.subscribe())
        .key_overrides(tokio::sync::watch::channel(workload::rate_only_overrides()).1)
        .build();
        let gauges = deps.in_flight.clone();
        (TopicSupervisor::new(deps).start(), gauges)
    }

    fn members(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|n| self.nodes[*n].membership == Membership::Member)
            .collect()
    }

    /// Sends `message` to `node` and waits for the answer, unless the node's process pauses
    /// meanwhile (a trap sprang while it handled the message): the group does not wait for a
    /// paused member, it moves on once the session times out.
    async fn ask<M>(&self, node: usize, queue: usize, message: M) -> Option<M::Result>
    where
        M: actix::Message + Send + 'static,
        M::Result: Send,
        TopicSupervisor: actix::Handler<M>,
    {
        let pause = self.nodes[node].pause.clone();
        let reply = self.nodes[node].topics[queue].send(message);
        tokio::select! {
            biased;
            reply = reply => reply.ok(),
            _ = pause.paused() => None,
        }
    }

    /// Revokes every partition of every queue `node` serves (its trees drain).
    async fn revoke(&self, node: usize) {
        for queue in 0..queues::QUEUES {
            self.ask(node, queue, RevokePartitions).await;
        }
    }

    /// An eager rebalance of each queue's group (the same members): every member's trees are
    /// revoked (drained), then the range assignor splits the partitions among the members,
    /// which start from the committed offsets.
    async fn rebalance(&mut self) {
        for node in self.members() {
            if !self.nodes[node].owned.is_empty() {
                self.revoke(node).await;
                self.nodes[node].owned.clear();
            }
        }
        // A node whose process paused while it drained is out of the group, like any paused one.
        self.absorb_sprung_traps();
        let members = self.members();
        if members.is_empty() {
            return;
        }
        let per = (PARTITIONS as usize).div_ceil(members.len());
        for (i, node) in members.into_iter().enumerate() {
            let assigned: Vec<PartitionId> = (0..PARTITIONS as PartitionId)
                .filter(|p| *p as usize / per == i)
                .collect();
            let mut owned = Vec::new();
            for queue in 0..queues::QUEUES {
                self.ask(node, queue, AssignPartitions(assigned.clone()))
                    .await;
                owned.extend(assigned.iter().map(|p| queues::slot(queue, *p)));
            }
            self.nodes[node].positions = (owned.iter()).map(|s| (*s, self.committed[*s])).collect();
            self.nodes[node].owned = owned;
        }
    }

    /// Each member polls each of its partitions once and commits what became durable (after
    /// the joins and sub-tasks the nodes enqueued are appended to the topic).
    async fn poll(&mut self) {
        self.release_later();
        for task in self.outbox.take() {
            if let Some(group) = &task.join_of {
                let keys = self.produced.joins.entry(group.clone()).or_default();
                keys.insert(task.key());
            }
            // A join acts on its identity; a sub-task is a task like any producer's.
            let record = match task.on_conflict {
                Some(_) => Record::ByIdentity(crate::actors::IdentityOp::Schedule(task)),
                None => Record::Task(task),
            };
            self.append(record);
        }
        for node in self.members() {
            let owned = self.nodes[node].owned.clone();
            for p in owned {
                let (queue, partition) = queues::of_slot(p);
                let from = self.nodes[node].positions.get(&p).copied().unwrap_or(0);
                let to = (from + POLL_BATCH).min(self.logs[p].len());
                if from == to {
                    continue;
                }
                let mut batch = PolledTasks::default();
                for (offset, record) in (from..to).zip(&self.logs[p][from..to]) {
                    let offset = offset as i64;
                    match record {
                        Record::Task(t) => batch.tasks.push(t.clone().enqueued_at(offset)),
                        Record::Cancel(k) => batch.cancels.push(k.clone()),
                        Record::ByIdentity(op) => batch.by_identity.push(op.at_offset(offset)),
                    }
                }
                let asked = Instant::now();
                let batch = ProcessTaskBatch(BTreeMap::from([(partition, batch)]));
                let reply = self.ask(node, queue, batch).await;
                self.check_consumer_wait(node, partition, asked, reply.is_some());
                let durable = reply.is_some_and(|r| r.persisted.contains(&partition));
                if durable {
                    self.committed[p] = self.committed[p].max(to);
                    self.nodes[node].positions.insert(p, to);
                } else {
                    let committed = self.committed[p];
                    self.nodes[node].positions.insert(p, committed);
                }
            }
        }
    }

    async fn run(&mut self) {
        self.rebalance().await;
        self.create_schedules().await;
        let faults_end = Instant::now() + FAULT_PHASE;
        while Instant::now() < faults_end {
            self.produce();
            self.inject_fault().await;
            if self.latency_until.is_some_and(|t| t <= Instant::now()) {
                self.clear_latency();
            }
            self.notice_sprung_traps().await;
            self.wake_paused(false).await;
            self.resume_due(false);
            let failing = self.keyspaces().iter().any(|s| s.fail_next_remaining() > 0);
            if failing || self.latency_until.is_some() {
                self.disturb(None, Instant::now(), Some(STORE_FAULT_REACH));
            }
            self.poll().await;
            self.sample_memory();
            tokio::time::sleep(STEP).await;
        }
        // Heal: no more faults, every paused node wakes, and the nodes finish the work (the
        // schedules run on for a while, then pause, so that the work has an end).
        for store in self.keyspaces() {
            store.fail_next(0);
        }
        self.store.fail_op("schedule load", 0);
        (self.shared.failing_ticks.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.clear_latency();
        self.disarm_traps();
        self.notice_sprung_traps().await;
        self.wake_paused(true).await;
        self.resume_due(true);
        // The rolling deploy completes: nodes without the late type's handler leave.
        self.healed = true;
        for node in self.members().into_iter().filter(|n| n % 2 == 1) {
            tracing::info!(node, "sim: a node of the older release leaves");
            self.disturb(Some(node), Instant::now(), None);
            self.revoke(node).await;
            self.nodes[node].membership = Membership::Gone;
            self.nodes[node].owned.clear();
        }
        if self.members().is_empty() {
            self.add_node();
        }
        self.rebalance().await;
        if self.rng.bool() {
            self.restart_cluster().await;
        }
        let quiet_end = Instant::now() + QUIET_PHASE;
        let mut steps = 0u32;
        while Instant::now() < quiet_end {
            self.poll().await;
            self.sample_memory();
            tokio::time::sleep(STEP).await;
            steps += 1;
            if steps == SCHEDULES_PAUSE_STEP {
                self.pause_schedules().await;
            }
            if steps == SCHEDULES_PAUSE_STEP / 2 {
                self.redrive_dead_joins_and_ticks().await;
            }
            // Done early once every task has its final status and every record is consumed
            // (then a few more seconds, so a wrong late run would still show).
            let paused = steps >= SCHEDULES_PAUSE_STEP;
            if paused && steps.is_multiple_of(10) && self.all_done() {
                for _ in 0..30 {
                    self.poll().await;
                    tokio::time::sleep(STEP).await;
                }
                break;
            }
        }
        // Only once the backlog is done: a slot busy with its long calls would delay the probe
        // for a reason other than the stuck orderingId (and a seed not done fails anyway).
        if self.all_done() {
            self.check_nothing_left_in_memory();
            self.probe_a_stuck_ordering_id().await;
        }
        for node in self.members() {
            self.revoke(node).await;
        }
        self.read_fires().await;
    }

    fn all_done(&self) -> bool {
        let consumed = self.later.is_empty()
            && (0..self.logs.len()).all(|p| self.committed[p] == self.logs[p].len());
        let statuses: BTreeSet<TaskKey> = (self.all_statuses().into_iter())
            .map(|((_, k), _)| k)
            .collect();
        consumed
            && (self.produced.tasks.keys())
                .all(|k| statuses.contains(k) || self.never_spawned(k, &statuses))
            && self.identities_done(&statuses)
            && self.joins_done(&statuses)
            && (self.produced.redriven_ticks.keys()).all(|k| statuses.contains(k))
    }
}
