//! The simulated workload: tasks produced in schedule order per orderingId with drawn plans,
//! duplicates, replacements, cancels and floods, and the calm end's stuck-orderingId probe.

use super::*;

/// The task with `key` whose data carries `version`, and its limit key.
pub(super) fn versioned(key: &TaskKey, version: i64) -> Task {
    let data = serde_json::json!({ "v": version });
    let mut task = Task::new(
        key.ordering_id.clone(),
        key.scheduled_time,
        key.uniqueness_key.clone(),
        data.as_object().cloned().unwrap_or_default(),
    );
    task.limit_key = limit_key_of(key);
    task
}

/// A third of the tasks carry one of two limit keys (`lk0`, `lk1`), drawn from their key, so
/// every record of a key carries the same: with `key_concurrency` 1, a node calls one task of
/// each at a time, whatever their orderingIds. A fifth of the others carry one of two keys
/// limited by their rate alone (`lr0`, `lr1`: [`RATE_ONLY`]), whose tasks every node may start
/// at once. The calm end's probe (orderingIds `probe…`) carries none: it checks that a stuck
/// orderingId holds up no other, which a shared limit key would (rightly) do.
pub(super) fn limit_key_of(key: &TaskKey) -> Option<String> {
    if key.ordering_id.starts_with("probe") {
        return None;
    }
    let sum: u32 = key.uniqueness_key.bytes().map(u32::from).sum();
    if sum.is_multiple_of(3) {
        Some(format!("lk{}", sum % 2))
    } else {
        (sum % 5 == 1).then(|| format!("{RATE_ONLY}{}", sum % 2))
    }
}

/// The start of the limit keys whose concurrency an override lifts (`rate_only_overrides`).
pub(super) const RATE_ONLY: &str = "lr";

/// The overrides every node runs under: the rate-only keys may run 1,000 calls at once.
pub(super) fn rate_only_overrides() -> Arc<crate::limits::KeyOverrides> {
    let lifted = |n: u32| crate::store::KeyLimit {
        task_type: None,
        limit_key: format!("{RATE_ONLY}{n}"),
        values: crate::store::LimitValues {
            concurrency: Some(1_000),
            ..Default::default()
        },
        updated_at: DateTime::<Utc>::UNIX_EPOCH,
    };
    Arc::new(crate::limits::KeyOverrides::new(vec![lifted(0), lifted(1)]))
}

impl World {
    pub(super) fn new_key(&mut self, ordering_id: &str, at: DateTime<Utc>) -> TaskKey {
        // Per orderingId, enqueue order is schedule order: never earlier than the last, often
        // the same time (a tie, run in enqueue order), with uniqueness keys in random order.
        let last = self.last_time.get(ordering_id).copied();
        let at = match last {
            Some(last) if at <= last && self.rng.bool() => last,
            Some(last) if at <= last => last + TimeDelta::milliseconds(1),
            _ => at,
        };
        self.last_time.insert(ordering_id.to_string(), at);
        self.next_unique += 1;
        TaskKey {
            scheduled_time: at,
            ordering_id: ordering_id.to_string(),
            uniqueness_key: format!("u{:03}-{:06}", self.rng.u32(0..1000), self.next_unique),
        }
    }

    pub(super) fn draw_plan(&mut self) -> Plan {
        match self.rng.u32(0..100) {
            0..=56 => Plan::Succeed(Duration::from_millis(self.rng.u64(5..300))),
            // Long enough to be running when its tree is revoked or rebuilt, short enough to
            // finish within the drain.
            57..=64 => Plan::Succeed(Duration::from_millis(self.rng.u64(300..1_800))),
            65..=74 => Plan::FailTimes(self.rng.usize(1..3)),
            75..=77 => Plan::FailAlways,
            78..=80 => Plan::GiveUp,
            81..=82 => Plan::PanicOnce,
            83..=84 => Plan::HangOnce,
            // Longer than the drain and several lease renewals.
            _ => Plan::Succeed(Duration::from_millis(self.rng.u64(2_500..8_000))),
        }
    }

    /// Sets what the calls of `key` do.
    pub(super) fn plan(&self, key: &TaskKey, plan: Plan) {
        self.shared
            .plans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), plan);
    }

    pub(super) fn append(&mut self, record: Record) {
        let ordering_id = match &record {
            Record::Task(t) => t.ordering_id.clone(),
            Record::Cancel(k) => k.ordering_id.clone(),
            Record::ByIdentity(op) => op.identity().ordering_id,
        };
        let partition = partition_for(&ordering_id, PARTITIONS);
        self.logs[queues::slot(queues::queue_of(&ordering_id), partition)].push(record);
    }

    pub(super) fn produce_task(&mut self, ordering_id: &str, at: DateTime<Utc>, versions: i64) {
        self.produce_planned(ordering_id, at, versions, None);
    }

    /// Produces a task with `plan`, or one drawn at random.
    pub(super) fn produce_planned(
        &mut self,
        ordering_id: &str,
        at: DateTime<Utc>,
        versions: i64,
        plan: Option<Plan>,
    ) -> TaskKey {
        let plan = plan.unwrap_or_else(|| self.draw_plan());
        let key = self.new_key(ordering_id, at);
        self.produced.sequence.insert(key.clone(), self.next_unique);
        self.plan(&key, plan);
        // Some tasks are of a type the odd nodes learn only with the heal's deploy, some of
        // the type remote workers run (plain tasks of the default queue's orderingIds).
        let late = self.rng.u32(0..10) == 0;
        let remote = !late
            && ordering_id.starts_with('o')
            && queues::queue_of(ordering_id) == 0
            && self.rng.u32(0..4) == 0;
        if remote {
            self.produced.remote.insert(key.clone());
        }
        for version in 1..=versions {
            let task = versioned(&key, version);
            let task = match (late, remote) {
                (true, _) => task.of_type(LATE_TYPE),
                (_, true) => task.of_type(remote::REMOTE_TYPE),
                _ => task,
            };
            self.append(Record::Task(task));
        }
        if versions > 1 {
            self.produced.double_versions.insert(key.clone());
        }
        self.produced.tasks.insert(key.clone(), (plan, versions));
        key
    }

    pub(super) fn produce(&mut self) {
        let now = self.now();
        let ordering = |rng: &mut fastrand::Rng| format!("o{}", rng.usize(0..ORDERING_IDS));
        let roll = self.rng.u32(0..1000);
        match roll {
            // A flood: many due tasks at once.
            0..=9 => {
                for _ in 0..30 {
                    let o = ordering(&mut self.rng);
                    self.produce_task(&o, now, 1);
                }
            }
            // Two records of one new key in one batch: the last must win.
            10..=29 => {
                let o = ordering(&mut self.rng);
                let at = now + TimeDelta::milliseconds(self.rng.i64(1_000..5_000));
                self.produce_task(&o, at, 2);
            }
            // A duplicate delivery of an earlier record (not of a redriven dead letter's: its
            // record is the dead task's, a join's or an identity's, which this would not be).
            30..=59 => {
                let keys: Vec<TaskKey> = (self.produced.tasks.keys())
                    .filter(|k| !self.produced.redriven.contains_key(*k))
                    .cloned()
                    .collect();
                if !keys.is_empty() {
                    let key = keys[self.rng.usize(0..keys.len())].clone();
                    let version = self.produced.tasks.get(&key).map_or(1, |(_, v)| *v);
                    self.produced.redelivered.insert(key.clone());
                    let mut task = versioned(&key, version);
                    if self.produced.remote.contains(&key) {
                        task = task.of_type(remote::REMOTE_TYPE);
                    }
                    task.group = self.produced.members.get(&key).cloned();
                    if let Some(count) = self.produced.spawns.get(&key) {
                        task.task_data.insert("spawn".into(), (*count).into());
                    }
                    self.append(Record::Task(task));
                }
            }
            // A cancellation.
            60..=79 => {
                let keys: Vec<TaskKey> = self.produced.tasks.keys().cloned().collect();
                if !keys.is_empty() {
                    let key = keys[self.rng.usize(0..keys.len())].clone();
                    self.produced.cancelled.insert(key.clone());
                    self.append(Record::Cancel(key));
                }
            }
            // A chain of records on one identity, or a burst of IfAbsent ones.
            400..=429 => self.produce_chain(),
            430..=444 => self.produce_singleton(),
            445..=454 => self.produce_group(),
            455..=459 => self.produce_parent(),
            460..=469 => self.produce_update_while_running(),
            470..=471 => self.produce_large_group(),
            // A task of the second queue ([`super::queues`]).
            472..=551 => self.produce_queued(),
            80..=399 => {
                let o = ordering(&mut self.rng);
                let at = now + TimeDelta::milliseconds(self.rng.i64(-500..8_000));
                self.produce_task(&o, at, 1);
            }
            _ => {}
        }
    }

    /// The next time of identity orderingId `ordering_id`: after every earlier one, so that its
    /// records are enqueued in schedule order (a chain's records move its task later only).
    fn identity_time(&mut self, ordering_id: &str, at: DateTime<Utc>) -> DateTime<Utc> {
        let after = self
            .last_time
            .get(ordering_id)
            .map(|last| *last + TimeDelta::milliseconds(1));
        let at = after.map_or(at, |after| after.max(at));
        self.last_time.insert(ordering_id.to_string(), at);
        at
    }

    fn new_identity(&mut self) -> scheduler_client::TaskIdentity {
        self.next_unique += 1;
        let ordering_id = format!("id{}", self.rng.usize(0..4));
        scheduler_client::TaskIdentity::new(ordering_id, format!("c{:06}", self.next_unique))
    }

    /// One to four records scheduling a task of one identity (Replace, KeepTime or Debounce,
    /// later times each), maybe a reschedule later still, maybe a cancel.
    fn produce_chain(&mut self) {
        use scheduler_client::OnConflict;
        let identity = self.new_identity();
        let now = self.now();
        let mut version = 0;
        for _ in 0..self.rng.usize(1..5) {
            let asked = now + TimeDelta::milliseconds(self.rng.i64(300..6_000));
            let at = self.identity_time(&identity.ordering_id, asked);
            let mode = match self.rng.u32(0..3) {
                0 => OnConflict::Replace,
                1 => OnConflict::KeepTime,
                _ => OnConflict::Debounce {
                    max_wait: Duration::from_millis(self.rng.u64(500..3_000)),
                },
            };
            version += 1;
            let key = TaskKey {
                scheduled_time: at,
                ordering_id: identity.ordering_id.clone(),
                uniqueness_key: identity.uniqueness_key.clone(),
            };
            // Calls long enough, at times, to be running as their node drops out of the group
            // ([`Self::aim_identity_records_at`]).
            let lasting = Duration::from_millis(self.rng.u64(5..2_500));
            self.plan(&key, Plan::Succeed(lasting));
            let task = versioned(&key, version).on_conflict(mode);
            self.append(Record::ByIdentity(crate::actors::IdentityOp::Schedule(
                task,
            )));
        }
        if self.rng.u32(0..4) == 0 {
            let asked = now + TimeDelta::milliseconds(self.rng.i64(1_000..7_000));
            let to = self.identity_time(&identity.ordering_id, asked);
            let op = crate::actors::IdentityOp::Reschedule {
                identity: identity.clone(),
                to,
                offset: -1,
            };
            self.append(Record::ByIdentity(op));
        }
        let cancelled = self.rng.u32(0..5) == 0;
        if cancelled {
            let op = crate::actors::IdentityOp::Cancel {
                identity: identity.clone(),
                offset: -1,
            };
            self.append(Record::ByIdentity(op));
        }
        self.produced.chains.insert(identity, (version, cancelled));
    }

    /// An identity's task whose call lasts 3 s, and a keepTime or debounce record giving it new
    /// data at its own time, produced a second into the call: the new data runs (issue 30,
    /// defect 8: it was counted as applied to the running call and lost).
    fn produce_update_while_running(&mut self) {
        use scheduler_client::OnConflict;
        self.next_unique += 1;
        let identity = scheduler_client::TaskIdentity::new(
            format!("upd{}", self.next_unique),
            format!("c{:06}", self.next_unique),
        );
        let at = self.now() + TimeDelta::seconds(1);
        let key = TaskKey {
            scheduled_time: at,
            ordering_id: identity.ordering_id.clone(),
            uniqueness_key: identity.uniqueness_key.clone(),
        };
        self.plan(&key, Plan::Succeed(Duration::from_secs(3)));
        let first = versioned(&key, 1).on_conflict(OnConflict::Replace);
        self.append(Record::ByIdentity(crate::actors::IdentityOp::Schedule(
            first,
        )));
        let mode = match self.rng.bool() {
            true => OnConflict::KeepTime,
            false => OnConflict::Debounce {
                max_wait: Duration::from_secs(5),
            },
        };
        let update = versioned(&key, 2).on_conflict(mode);
        let record = Record::ByIdentity(crate::actors::IdentityOp::Schedule(update));
        self.later.push((at + TimeDelta::seconds(1), record));
        self.produced.chains.insert(identity, (2, false));
    }

    /// Identity records aimed at a rebalance (issue 30, defect 3): as `node` drops out of the
    /// group, for up to two identities whose calls it is making, a record superseding the task
    /// (a replace at a later time) or giving it new data (a keepTime or a debounce at its own
    /// time). The partition's next tree polls it while the earlier tree's call may go on: it
    /// must wait for that call, and the newest data must run once, after it.
    pub(super) fn aim_identity_records_at(&mut self, node: usize) {
        use scheduler_client::OnConflict;
        let running: Vec<TaskKey> = (self.shared.calls.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|c| c.node == node && c.ended.is_none())
            .map(|c| c.key.clone())
            .collect();
        let mut aimed = 0;
        for key in running {
            let identity = scheduler_client::TaskIdentity::new(
                key.ordering_id.clone(),
                key.uniqueness_key.clone(),
            );
            let Some((version, cancelled)) = self.produced.chains.get(&identity).copied() else {
                continue;
            };
            // A record of the identity still to be produced would come after this one.
            let pending_later = self.later.iter().any(
                |(_, record)| matches!(record, Record::ByIdentity(op) if op.identity() == identity),
            );
            if pending_later {
                continue;
            }
            if aimed == 2 {
                break;
            }
            aimed += 1;
            // On an orderingId other identities share, only a replace at a later time keeps
            // its tasks enqueued in schedule order (a keepTime or a debounce capped by its max
            // wait would put new data at a time before tasks enqueued since).
            let shared = !identity.ordering_id.starts_with("upd");
            let (mode, asked) = match if shared { 0 } else { self.rng.u32(0..3) } {
                0 => (
                    OnConflict::Replace,
                    key.scheduled_time + TimeDelta::milliseconds(self.rng.i64(1..3_000)),
                ),
                1 => (OnConflict::KeepTime, key.scheduled_time),
                _ => (
                    OnConflict::Debounce {
                        max_wait: Duration::from_secs(5),
                    },
                    key.scheduled_time,
                ),
            };
            let at = self.identity_time(&identity.ordering_id, asked);
            let next = TaskKey {
                scheduled_time: at,
                ..key.clone()
            };
            let task = versioned(&next, version + 1).on_conflict(mode);
            tracing::info!(node, %identity, version = version + 1, ?mode, cancelled,
                "sim: an identity record aimed at the rebalance");
            self.append(Record::ByIdentity(crate::actors::IdentityOp::Schedule(
                task,
            )));
            self.produced.chains.insert(identity, (version + 1, false));
        }
    }

    /// Appends the records produced for later whose time came.
    pub(super) fn release_later(&mut self) {
        let now = self.now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.later)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.later = later;
        for (_, record) in due {
            self.append(record);
        }
    }

    /// Two to five IfAbsent records of one identity, later times each: only the first runs.
    fn produce_singleton(&mut self) {
        let identity = self.new_identity();
        let now = self.now();
        let mut first = None;
        for version in 1..=self.rng.i64(2..6) {
            let asked = now + TimeDelta::milliseconds(self.rng.i64(300..4_000));
            let key = TaskKey {
                scheduled_time: self.identity_time(&identity.ordering_id, asked),
                ordering_id: identity.ordering_id.clone(),
                uniqueness_key: identity.uniqueness_key.clone(),
            };
            first.get_or_insert_with(|| key.clone());
            let task = versioned(&key, version).on_conflict(scheduler_client::OnConflict::IfAbsent);
            self.append(Record::ByIdentity(crate::actors::IdentityOp::Schedule(
                task,
            )));
        }
        // Half the time one more, produced once the first has run (its time is at most 4 s
        // away): its identity's record still stands, whatever the status retention (issue 30,
        // defect 4: with `status_ttl = "0s"` the record lived until the task's time).
        if self.rng.bool() {
            let asked = now + TimeDelta::milliseconds(self.rng.i64(7_000..9_000));
            let key = TaskKey {
                scheduled_time: self.identity_time(&identity.ordering_id, asked),
                ordering_id: identity.ordering_id.clone(),
                uniqueness_key: identity.uniqueness_key.clone(),
            };
            let task = versioned(&key, 9).on_conflict(scheduler_client::OnConflict::IfAbsent);
            let record = Record::ByIdentity(crate::actors::IdentityOp::Schedule(task));
            self.later.push((now + TimeDelta::seconds(6), record));
        }
        if let Some(first) = first {
            self.produced.singletons.insert(identity, first);
        }
    }

    /// A calm end: one orderingId stuck on tasks that keep failing, more of them than a tree
    /// may hold, beside another orderingId of its partition whose tasks must start on time.
    /// While the stuck one still has tasks deferred, the partition's low-water mark must have
    /// passed the other's tasks ([`PROBE_MARK_AFTER`]): a stuck orderingId holds up neither
    /// the others' tasks nor the mark.
    pub(super) async fn probe_a_stuck_ordering_id(&mut self) {
        let partition = self.rng.i32(0..PARTITIONS as i32);
        let mut names = (0..)
            .map(|i| format!("probe{i}"))
            .filter(|o| partition_for(o, PARTITIONS) == partition);
        let (Some(stuck), Some(free)) = (names.next(), names.next()) else {
            return;
        };
        let now = self.now();
        for _ in 0..settings().max_in_flight_tasks + 4 {
            self.produce_planned(&stuck, now, 1, Some(Plan::FailAlways));
        }
        for second in 1..=3 {
            let at = now + TimeDelta::seconds(second);
            let plan = Some(Plan::Succeed(Duration::from_millis(10)));
            let key = self.produce_planned(&free, at, 1, plan);
            self.probes.push(key);
        }
        let start = Instant::now();
        let mut mark_checked = false;
        while Instant::now() < start + PROBE_PHASE {
            self.poll().await;
            self.sample_memory();
            tokio::time::sleep(STEP).await;
            if !mark_checked && Instant::now() >= start + PROBE_MARK_AFTER {
                mark_checked = true;
                self.check_low_water(partition, now + TimeDelta::seconds(3));
            }
        }
    }
}
