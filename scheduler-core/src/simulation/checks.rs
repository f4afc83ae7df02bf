//! What the simulation checks once a seed has run (and samples while it runs).
//!
//! Over 500 lines: every promise the simulation checks, one after another.

use super::*;

/// The rows of the schedule and of the deferred lists a seed may read per call it makes, at
/// most: every tree start loads its partition's pending tasks again, and a task deferred
/// behind its orderingId is read back once. Measured over seeds 1-500: 3.8 per call, 7.2 at
/// worst (seed 359). Reading deferred tasks back by paging the partition's schedule (issue 30,
/// defect 10) read 166 per task in the actor test
/// `reading_deferred_tasks_back_reads_only_their_ordering_ids_rows`.
pub(super) const ROWS_READ_PER_CALL: f64 = 12.0;

/// The tombstones one read may step over, at most: Cassandra's `tombstone_warn_threshold`. A
/// fresh tree's first load steps over the tasks finished since the partition's low-water mark,
/// a lease read over every tree's released lease, the start-up reads over their tables' deleted
/// rows: each must stay bounded whatever the seed did.
pub(super) const TOMBSTONES_IN_A_READ: usize = 1_000;

/// How much longer than `persist_timeout` the consumer may wait for a polled batch's answer
/// (the actors' messages take no simulated time; the slack is for timers firing in turn).
const CONSUMER_WAIT_SLACK: Duration = Duration::from_millis(100);

/// What a seed read from the store, beside the calls it made.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Reads {
    /// Executor calls made.
    pub(super) calls: usize,
    /// Rows of the schedule (loads and single-task reads) and of the deferred lists read.
    pub(super) rows: usize,
    /// Tombstones the reads stepped over.
    pub(super) tombstones: usize,
    /// The most one read stepped over, and its operation.
    pub(super) most_tombstones: (usize, &'static str),
}

impl Reads {
    /// Rows read per call made (per row read, with no call).
    pub(super) fn rows_per_call(&self) -> f64 {
        self.rows as f64 / self.calls.max(1) as f64
    }
}

impl World {
    /// What the seed read so far, beside the calls it made.
    pub(super) fn reads(&self) -> Reads {
        Reads {
            calls: self.shared.calls().len(),
            rows: (self.keyspaces().iter())
                .map(|s| s.schedule_rows_read() + s.deferred_rows_read())
                .sum(),
            tombstones: self.keyspaces().iter().map(|s| s.tombstones_read()).sum(),
            most_tombstones: (self.keyspaces().iter())
                .map(|s| s.most_tombstones_in_a_read())
                .max_by_key(|(n, _)| *n)
                .unwrap_or((0, "")),
        }
    }

    /// Reads cost what they cost in Cassandra: the rows read per call made stay within
    /// [`ROWS_READ_PER_CALL`], whatever the faults (a read that scales with the partition,
    /// not with the task, fails it on the first seed whose orderingIds run deep).
    fn check_reads(&mut self) {
        let reads = self.reads();
        // A seed of a few calls reads its partitions' first loads: nothing to measure.
        if reads.calls >= 50 && reads.rows_per_call() > ROWS_READ_PER_CALL {
            self.violations.push(format!(
                "reads: {} rows of the schedule and the deferred lists read for {} calls ({:.1} per call, at most {ROWS_READ_PER_CALL})",
                reads.rows,
                reads.calls,
                reads.rows_per_call()
            ));
        }
        let (most, operation) = reads.most_tombstones;
        if most > TOMBSTONES_IN_A_READ {
            self.violations.push(format!(
                "tombstones: a {operation} stepped over {most} tombstones (at most {TOMBSTONES_IN_A_READ})"
            ));
        }
    }

    /// The consumer keeps polling: a polled batch is answered within `persist_timeout` (plus
    /// [`CONSUMER_WAIT_SLACK`]), whatever its tree is doing (a start-up read failing for good
    /// held the consumer thread forever: issue 30, defect 1). `answered`: the node's process
    /// did not pause meanwhile.
    pub(super) fn check_consumer_wait(
        &mut self,
        node: usize,
        partition: i32,
        asked: Instant,
        answered: bool,
    ) {
        let waited = asked.elapsed();
        let bound = settings().persist_timeout + CONSUMER_WAIT_SLACK;
        if answered && waited > bound {
            self.violations.push(format!(
                "consumer: at {:.1}s node {node}'s consumer waited {waited:?} for partition {partition}'s batch (at most {bound:?})",
                asked.duration_since(self.origin).as_secs_f64()
            ));
        }
    }

    /// Long-run low water: `partition`'s mark has passed `finished_before` (tasks that finished
    /// there), whatever is still held or deferred behind a stuck head.
    pub(super) fn check_low_water(&mut self, partition: i32, finished_before: DateTime<Utc>) {
        let mark = self.store.low_water_of(partition);
        if mark.is_none_or(|mark| mark < finished_before) {
            self.violations.push(format!(
                "low water: {PROBE_MARK_AFTER:?} into the calm end, partition {partition}'s mark is at {mark:?}, before {finished_before}, where its free orderingId's tasks finished: the stuck orderingId holds it back"
            ));
        }
    }

    pub(super) fn sample_memory(&mut self) {
        for node in &self.nodes {
            for (queue, gauges) in node.gauges.iter().enumerate() {
                let max = queues::max_in_flight(queue);
                for (partition, gauge) in gauges.all() {
                    self.peak_in_flight = self.peak_in_flight.max(gauge.peak());
                    if gauge.peak() > max {
                        self.violations.push(format!(
                            "memory: a tree of queue {queue}'s partition {partition} held {} tasks (max {max})",
                            gauge.peak()
                        ));
                    }
                }
            }
        }
    }

    /// With every task done, no tree counts a task in memory: every way a task leaves memory
    /// gave its count back.
    pub(super) fn check_nothing_left_in_memory(&mut self) {
        for node in self.members() {
            let all = (self.nodes[node].gauges.iter().enumerate())
                .flat_map(|(queue, gauges)| gauges.all().into_iter().map(move |g| (queue, g)));
            for (queue, (partition, gauge)) in all.collect::<Vec<_>>() {
                if gauge.current() != 0 {
                    self.violations.push(format!(
                        "memory: with every task done, node {node}'s tree of queue {queue}'s partition {partition} counts {} tasks in memory",
                        gauge.current()
                    ));
                }
            }
        }
    }

    pub(super) fn check(&mut self) {
        let calls = self.shared.calls();
        let records: BTreeMap<TaskKey, StatusRecord> = (self.all_statuses().into_iter())
            .map(|((_, k), s)| (k, s))
            .collect();
        let statuses: BTreeMap<TaskKey, TaskStatus> = (records.iter())
            .map(|(k, s)| (k.clone(), s.status))
            .collect();
        let group_cancellable: BTreeSet<TaskKey> = (self.produced.tasks.keys())
            .filter(|k| self.cancelled_by_its_group(k))
            .cloned()
            .collect();
        let keys_with_status: BTreeSet<TaskKey> = statuses.keys().cloned().collect();
        let never_spawned: BTreeSet<TaskKey> = (self.produced.tasks.keys())
            .filter(|k| self.never_spawned(k, &keys_with_status))
            .cloned()
            .collect();
        let failed_by_workers: BTreeSet<TaskKey> = (self.produced.remote.iter())
            .filter(|k| statuses.get(*k) == Some(&TaskStatus::Failed))
            .filter(|k| self.failed_by_its_workers(k))
            .cloned()
            .collect();
        let v = &mut self.violations;
        // Nothing lost: each task has the status its plan leads to (or cancelled, or, for a
        // remote task, failed by its workers: `failed_by_its_workers`).
        for (key, (plan, _)) in &self.produced.tasks {
            if never_spawned.contains(key) {
                continue;
            }
            let status = statuses.get(key).copied();
            let expected = plan.final_status();
            let fine = match status {
                Some(s) if s == expected => true,
                Some(TaskStatus::Cancelled) => {
                    self.produced.cancelled.contains(key) || group_cancellable.contains(key)
                }
                Some(TaskStatus::Failed) => failed_by_workers.contains(key),
                _ => false,
            };
            if !fine {
                let error = records.get(key).and_then(|r| r.last_error.as_deref());
                v.push(format!(
                    "lost: {key} ({plan:?}) has status {status:?}, expected {expected:?} (last error: {error:?})"
                ));
            }
        }
        // One stuck orderingId does not hold up another of its partition.
        for key in &self.probes {
            let first = calls.iter().find(|c| c.key == *key);
            let late = first.map(|c| c.started_wall - key.scheduled_time);
            if late.is_none_or(|late| late > TimeDelta::milliseconds(PROBE_MAX_LATENESS_MS)) {
                v.push(format!(
                    "held up: {key} started {late:?} after its time, behind a stuck orderingId"
                ));
            }
        }
        // Nothing early.
        for call in &calls {
            if call.started_wall < call.key.scheduled_time {
                v.push(format!(
                    "early: {} started at {}",
                    call.key, call.started_wall
                ));
            }
        }
        // No two calls of one orderingId at once.
        let end = Instant::now();
        let mut by_ordering: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
        for call in &calls {
            by_ordering
                .entry(&call.key.ordering_id)
                .or_default()
                .push(call);
        }
        for (ordering_id, calls) in &by_ordering {
            for (i, a) in calls.iter().enumerate() {
                for b in &calls[i + 1..] {
                    let (a_end, b_end) = (a.ended.unwrap_or(end), b.ended.unwrap_or(end));
                    if a.started < b_end && b.started < a_end && !lease_lost(&self.nodes, a, b) {
                        v.push(format!(
                            "overlap: {} (node {}, {}) and {} (node {}, {}) of {ordering_id}",
                            a.key,
                            a.node,
                            span(self.origin, a),
                            b.key,
                            b.node,
                            span(self.origin, b)
                        ));
                    }
                }
            }
        }
        // At most `key_concurrency` calls of a limit key at once across the cluster (each
        // queue's calls counted apart), among the calls that returned (a killed node's never
        // do), while their permits are live: a paused process stops renewing its heartbeat,
        // so its running call may be joined by others once that may have expired.
        let limit = settings().key_concurrency.unwrap_or(usize::MAX);
        let mut by_limit_key: BTreeMap<(usize, &str), Vec<&Call>> = BTreeMap::new();
        for call in &calls {
            if let (Some(key), Some(_)) = (&call.limit_key, call.ended) {
                if key.starts_with(workload::RATE_ONLY) {
                    continue;
                }
                let queue = queues::queue_of(&call.key.ordering_id);
                by_limit_key.entry((queue, key)).or_default().push(call);
            }
        }
        for ((queue, key), mut of_key) in by_limit_key {
            of_key.sort_by_key(|c| c.started);
            // The calls running as each starts (a call that ended as another started is not).
            let mut running: Vec<&Call> = Vec::new();
            for call in of_key {
                running.retain(|r| {
                    r.ended.is_some_and(|e| e > call.started) && !lease_lost(&self.nodes, r, call)
                });
                running.push(call);
                if running.len() > limit {
                    let spans: Vec<String> = (running.iter())
                        .map(|c| format!("{} (node {}, {})", c.key, c.node, span(self.origin, c)))
                        .collect();
                    v.push(format!(
                        "limit: {} calls of limit key {key} at once (queue {queue}), over {limit}: {}",
                        running.len(),
                        spans.join(", ")
                    ));
                    break;
                }
            }
        }
        // At most `key_rate` starts a second of a limit key across the cluster, plus its burst,
        // plus (for calls whose turn came before a window and whose slot came in it) as many as
        // the rate has units, its burst: in every window between two starts.
        if let Some(rate) = settings().key_rate {
            let burst = f64::from(settings().key_burst.unwrap_or(1));
            let mut starts: BTreeMap<(usize, &str), Vec<Instant>> = BTreeMap::new();
            for call in &calls {
                if let Some(key) = &call.limit_key {
                    let queue = queues::queue_of(&call.key.ordering_id);
                    starts.entry((queue, key)).or_default().push(call.started);
                }
            }
            'keys: for ((queue, key), mut at) in starts {
                at.sort();
                for (i, first) in at.iter().enumerate() {
                    for (j, last) in at.iter().enumerate().skip(i + 1) {
                        let allowed = rate * (*last - *first).as_secs_f64() + 2.0 * burst;
                        if (j - i + 1) as f64 > allowed + 1e-9 {
                            v.push(format!(
                                "rate: {} starts of limit key {key} (queue {queue}) within {:?}, over {rate} a second with a burst of {burst}",
                                j - i + 1,
                                *last - *first
                            ));
                            continue 'keys;
                        }
                    }
                }
            }
        }
        // Per orderingId, first starts in schedule (= enqueue) order, ties in enqueue order.
        let mut first_start: BTreeMap<&TaskKey, Instant> = BTreeMap::new();
        for call in &calls {
            first_start.entry(&call.key).or_insert(call.started);
        }
        let produced = &self.produced;
        for calls in by_ordering.values() {
            let mut keys: Vec<&TaskKey> = calls.iter().map(|c| &c.key).collect();
            keys.sort_by_key(|k| (k.scheduled_time, produced.sequence.get(*k)));
            keys.dedup();
            for pair in keys.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                let tie = a.scheduled_time == b.scheduled_time;
                if tie && (produced.redelivered.contains(a) || produced.redelivered.contains(b)) {
                    continue;
                }
                // A redriven task is due when it was redriven, not enqueued in schedule order.
                if produced.redriven.contains_key(a) || produced.redriven.contains_key(b) {
                    continue;
                }
                if let (Some(ta), Some(tb)) = (first_start.get(a), first_start.get(b)) {
                    if tb < ta {
                        v.push(format!("order: {b} first started before {a}"));
                    }
                }
            }
        }
        // Nothing starts after its final status was stored; a final status is never written
        // again, except as the same record (a write retried by its own tree).
        let mut first_final: BTreeMap<TaskKey, (StatusRecord, Instant)> = BTreeMap::new();
        // (The stores named field by field: `v` borrows the violations.)
        let writes = [&self.store, &self.queue_store].map(MemoryStore::status_writes);
        for (key, record, at) in writes.into_iter().flatten() {
            match first_final.get(&key) {
                // A cancel does not interrupt a call already running: its outcome replaces the
                // cancellation.
                Some((first, cancelled_at))
                    if first.status == TaskStatus::Cancelled
                        && calls
                            .iter()
                            .any(|c| c.key == key && c.started <= *cancelled_at) =>
                {
                    first_final.insert(key, (record, at));
                }
                Some((first, _)) if *first != record => v.push(format!(
                    "final status rewritten: {key} from {first:?} to {record:?}"
                )),
                Some(_) => {}
                None => {
                    first_final.insert(key, (record, at));
                }
            }
        }
        for call in &calls {
            if let Some((first, at)) = first_final.get(&call.key) {
                if call.started > *at {
                    v.push(format!(
                        "after final: {} started on node {} ({}) after it was {:?} at {:.3}s",
                        call.key,
                        call.node,
                        span(self.origin, call),
                        first.status,
                        (*at - self.origin).as_secs_f64()
                    ));
                }
            }
        }
        // An attempt number is recorded once: a fenced tree records nothing (it would overwrite
        // the history of the call that took its place).
        let histories = [&self.store, &self.queue_store].map(MemoryStore::attempt_histories);
        for (key, history) in histories.into_iter().flatten() {
            let mut seen = BTreeSet::new();
            for attempt in &history {
                if !seen.insert(attempt.attempt) {
                    v.push(format!(
                        "attempt rewritten: {key} attempt {} recorded twice: {history:?}",
                        attempt.attempt
                    ));
                }
            }
        }
        // A call that succeeded while no fault touched its node or the store is not made again:
        // its outcome is recorded before its tree lets the task go (a revoke or a rebuild
        // drains its running calls).
        let drain = settings().drain_timeout;
        for (i, call) in calls.iter().enumerate().filter(|(_, c)| c.succeeded) {
            let Some(ended) = call.ended else { continue };
            if ended - call.started >= drain {
                continue;
            }
            let window_end = ended + Duration::from_secs(3);
            let disturbed = self.disturbances.iter().any(|d| {
                d.node.is_none_or(|n| n == call.node)
                    && d.from <= window_end
                    && d.until.is_none_or(|until| until >= call.started)
            });
            if disturbed {
                continue;
            }
            // Calls are logged as they start: a later call of the key is a later entry.
            if let Some(again) = calls[i + 1..]
                .iter()
                .find(|c| c.key == call.key && c.started >= ended)
            {
                v.push(format!(
                    "ran again: {} succeeded on node {} ({}) and ran again on node {} ({}), though no fault touched the first",
                    call.key,
                    call.node,
                    span(self.origin, call),
                    again.node,
                    span(self.origin, again)
                ));
            }
        }
        self.check_dead_letters(&statuses);
        self.check_reads();
        self.check_identities(&statuses, &calls);
        self.check_schedules(&statuses, &calls);
        self.check_groups(&statuses, &calls);
        self.check_suspensions(&calls);
        self.check_remote();
        let v = &mut self.violations;
        // The last record of a key in one batch is what runs.
        for call in &calls {
            if self.produced.double_versions.contains(&call.key) && call.version != Some(2) {
                v.push(format!(
                    "stale record: {} ran version {:?}",
                    call.key, call.version
                ));
            }
        }
    }
}

/// When `call` ran, in seconds since the seed began (as replayed logs stamp their lines).
pub(super) fn span(origin: Instant, call: &Call) -> String {
    let at = |t: Instant| format!("{:.3}s", (t - origin).as_secs_f64());
    match call.ended {
        Some(ended) => format!("{} to {}", at(call.started), at(ended)),
        None => format!("{} to the end", at(call.started)),
    }
}

/// Whether calls `a` and `b` (of one orderingId, or of one limit key) may overlap: the earlier
/// one's process was paused while it ran, and the later one started once that call's lease (or
/// its node's permits' heartbeat) may have expired (it was renewed every third of the TTL before
/// the pause, so not before two thirds of the TTL).
pub(super) fn lease_lost(nodes: &[Node], a: &Call, b: &Call) -> bool {
    let (earlier, later) = if a.started <= b.started {
        (a, b)
    } else {
        (b, a)
    };
    let expiry = settings().lease_ttl * 2 / 3;
    nodes[earlier.node].pauses.iter().any(|from| {
        earlier.started <= *from
            && earlier.ended.is_none_or(|end| end > *from)
            && later.started >= *from + expiry
    })
}

impl World {
    /// Whether every identity's chain or burst came to its end: the current task of a chain
    /// finished (or was cancelled), the first task of a burst finished.
    pub(super) fn identities_done(&self, statuses: &BTreeSet<TaskKey>) -> bool {
        let current = self.current_tasks();
        self.produced
            .chains
            .keys()
            .all(|identity| current.get(identity).is_some_and(|k| statuses.contains(k)))
            && self
                .produced
                .singletons
                .values()
                .all(|k| statuses.contains(k))
    }

    /// Each identity's current task, as its record in the store says.
    fn current_tasks(&self) -> BTreeMap<scheduler_client::TaskIdentity, TaskKey> {
        self.store
            .identity_records()
            .into_iter()
            .map(|(_, record)| (record.task.identity(), record.task.key()))
            .collect()
    }

    /// Every failed or dropped task is a dead letter (for the reason its status says) whose
    /// handler heard of it; no other task is one.
    fn check_dead_letters(&mut self, statuses: &BTreeMap<TaskKey, TaskStatus>) {
        use crate::store::DeadReason;
        let letters = self.all_dead_letters();
        let heard = self
            .shared
            .dead_lettered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (key, status) in statuses {
            let reason = match status {
                TaskStatus::Failed => DeadReason::RetriesExhausted,
                TaskStatus::Dropped => DeadReason::Invalid,
                _ => continue,
            };
            match letters.get(key) {
                Some(letter) if letter.reason == reason => {}
                other => self.violations.push(format!(
                    "dead letter: {key} is {status:?} but its dead letter is {:?}",
                    other.map(|l| l.reason)
                )),
            }
            if !heard.contains_key(key) {
                self.violations
                    .push(format!("dead letter: the handler never heard of {key}"));
            }
        }
        for key in letters.keys() {
            if !matches!(
                statuses.get(key),
                Some(TaskStatus::Failed | TaskStatus::Dropped)
            ) {
                let status = statuses.get(key);
                self.violations
                    .push(format!("dead letter: {key} is one, with status {status:?}"));
            }
        }
    }

    /// A chain's current task runs the last scheduled data (or was cancelled); of a burst of
    /// IfAbsent records, only the first one's task ever runs.
    fn check_identities(&mut self, statuses: &BTreeMap<TaskKey, TaskStatus>, calls: &[Call]) {
        let current = self.current_tasks();
        for (identity, (version, cancelled)) in &self.produced.chains {
            let Some(key) = current.get(identity) else {
                self.violations
                    .push(format!("identity: {identity} has no record"));
                continue;
            };
            let status = statuses.get(key).copied();
            let ran_last = calls
                .iter()
                .any(|c| c.key == *key && c.succeeded && c.version == Some(*version));
            let fine = match status {
                Some(TaskStatus::Completed) => ran_last,
                Some(TaskStatus::Cancelled) => *cancelled,
                _ => false,
            };
            if !fine {
                self.violations.push(format!(
                    "identity: {identity}'s current task {key} is {status:?} (ran version {version}: {ran_last}, cancelled: {cancelled})"
                ));
            }
        }
        // A task superseded by a newer one of its identity never starts once the newer one's
        // record is written, whatever the store or the nodes did: a record an earlier tree's
        // call could defeat waits for that call (`identity_deferral`).
        let mut current: BTreeMap<scheduler_client::TaskIdentity, TaskKey> = BTreeMap::new();
        let mut superseded_at: BTreeMap<TaskKey, Instant> = BTreeMap::new();
        for (record, at) in self.store.identity_writes() {
            let key = record.task.key();
            if let Some(previous) = current.insert(record.task.identity(), key.clone()) {
                if previous != key {
                    superseded_at.entry(previous).or_insert(at);
                }
            }
            // A key current again is no longer superseded.
            superseded_at.remove(&key);
        }
        for call in calls {
            let Some(at) = superseded_at.get(&call.key) else {
                continue;
            };
            if call.started > *at {
                self.violations.push(format!(
                    "superseded: {} started on node {} ({}) after a newer task of its identity was recorded",
                    call.key,
                    call.node,
                    span(self.origin, call)
                ));
            }
        }
        for (identity, first) in &self.produced.singletons {
            let of_identity = |k: &TaskKey| {
                k.ordering_id == identity.ordering_id && k.uniqueness_key == identity.uniqueness_key
            };
            let others_ran = calls.iter().any(|c| of_identity(&c.key) && c.key != *first);
            let others_recorded = statuses.keys().any(|k| of_identity(k) && k != first);
            if others_ran || others_recorded || statuses.get(first) != Some(&TaskStatus::Completed)
            {
                self.violations.push(format!(
                    "ifAbsent: of {identity}, only {first} should run (others ran: {others_ran}, recorded: {others_recorded}, its status {:?})",
                    statuses.get(first)
                ));
            }
        }
    }
}
